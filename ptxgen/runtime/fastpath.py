"""The per-call launch path, generic over kernels: kernel handle + tensor-map slots + scalar slots.

A :class:`Launcher` owns, for one loaded kernel, everything a launch needs
that does not change from call to call:

* one ctypes parameter buffer (tensor maps first, 128 bytes each at 64-byte
  aligned offsets, then the scalars at their natural alignment) and the
  ``void*[n]`` array pointing into it (addresses never change);
* a ``struct.Struct`` that writes all scalar parameters with one ``pack_into``;
* the ``CUlaunchConfig`` (block, shared memory, cluster attribute) from
  :class:`~ptxgen.runtime.module.Kernel`;
* a :class:`TensorMapCache`: encoded tensor maps by (slot, address, rows,
  cols, row stride), least recently used evicted first.  A tensor map depends
  on exactly these and the slot's :class:`~ptxgen.launch.TensorMapSpec`, so a
  hit is always a valid map even when the memory was freed and reused.

Per call (:meth:`Launcher.launch`): for each tensor-map slot whose key
changed since the last call, copy the 128 cached bytes into the buffer (a
driver ``cuTensorMapEncodeTiled`` only on a cache miss); pack the scalars;
set grid and stream on the launch config; one ``cuLaunchKernelEx``.  The
driver copies the parameter values during that call, so the shared buffer is
safe to rewrite on the next call; a lock serialises threads.  Launching on the
caller's stream (torch's current stream) keeps CUDA-graph capture working:
the captured node holds its own copy of the parameters.

Nothing here knows about GEMM: ``ptxgen.runtime.api`` maps (A, B, D, M, N, K)
onto the slots; a dual GEMM maps its operands onto its own.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ptxgen.launch import TensorMapSpec

TENSOR_MAP = "tensor_map"
TENSOR_MAP_BYTES = 128
_TMAP_ALIGN = 64
#: scalar parameter kind -> struct format character (little-endian, as the driver reads it)
SCALAR_FORMATS: dict[str, str] = {"u64": "Q", "b64": "Q", "s64": "q", "u32": "I", "b32": "I", "s32": "i",
                                  "f32": "f", "f64": "d"}
_ZERO_MAP = bytes(TENSOR_MAP_BYTES)
#: (address, rows, cols, row_stride_elems) of a 2-D row-major operand, or None for an unused map
MapArgs = tuple[int, int, int, int] | None


def encode_map_bytes(address: int, rows: int, cols: int, row_stride: int, spec: TensorMapSpec) -> bytes:
    """``cuTensorMapEncodeTiled`` of a row-major ``[rows, cols]`` operand, as 128 bytes.

    Raises:
        ShapeError: the operand breaks a TMA rule (see :func:`ptxgen.runtime.tensormap.tiled_args`).
        CudaError: the driver rejected the descriptor.
    """
    from ptxgen.runtime.module import tensor_map_bytes
    from ptxgen.runtime.tensormap import encode, tiled_args

    return tensor_map_bytes(encode(tiled_args(address, rows, cols, row_stride, spec)))


class TensorMapCache:
    """Encoded tensor maps by ``(slot, address, rows, cols, row_stride)``; LRU, ``capacity`` entries.

    Args:
        specs: the tensor-map spec of each slot index.
        capacity: entries kept (each 128 bytes + key); the least recently used is evicted.
        encoder: ``(address, rows, cols, row_stride, spec) -> 128 bytes`` (default: the driver).
    """

    def __init__(self, specs: Sequence[TensorMapSpec | None], capacity: int = 1024,
                 encoder: Callable[..., bytes] = encode_map_bytes):
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: must be >= 1")
        self.specs = tuple(specs)
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._encoder = encoder
        self._maps: OrderedDict[tuple, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._maps)

    def get(self, slot: int, args: tuple[int, int, int, int]) -> bytes:
        """The 128 bytes of slot ``slot``'s map for ``args = (address, rows, cols, row_stride)``."""
        key = (slot, args)
        maps = self._maps
        raw = maps.get(key)
        if raw is not None:
            maps.move_to_end(key)
            self.hits += 1
            return raw
        raw = bytes(self._encoder(*args, self.specs[slot]))
        if len(raw) != TENSOR_MAP_BYTES:
            raise ValueError(f"tensor map encoder returned {len(raw)} bytes, expected {TENSOR_MAP_BYTES}")
        self.misses += 1
        maps[key] = raw
        if len(maps) > self.capacity:
            maps.popitem(last=False)
        return raw

    def clear(self) -> None:
        self._maps.clear()


class ParamLayout:
    """Where each parameter lives in one packed host buffer.

    Args:
        kinds: parameter kinds in signature order: ``"tensor_map"`` or a key of :data:`SCALAR_FORMATS`.

    Attributes:
        map_offsets: byte offset of each tensor-map parameter, in signature order of the maps.
        scalar_offset: byte offset where the scalar block starts.
        scalar_struct: packs every scalar (in signature order of the scalars) at ``scalar_offset``.
        offsets: byte offset of every parameter, in signature order.
        size: buffer bytes.

    Raises:
        ValueError: an unknown kind.
    """

    def __init__(self, kinds: Sequence[str]):
        offsets: list[int] = []
        map_offsets: list[int] = []
        pos = 0
        for kind in kinds:
            if kind == TENSOR_MAP:
                pos = -(-pos // _TMAP_ALIGN) * _TMAP_ALIGN
                offsets.append(pos)
                map_offsets.append(pos)
                pos += TENSOR_MAP_BYTES
            elif kind not in SCALAR_FORMATS:
                raise ValueError(f"parameter kind {kind!r}: runtime packs {TENSOR_MAP!r} and {sorted(SCALAR_FORMATS)}")
            else:
                offsets.append(-1)
        self.scalar_offset = pos
        fmt = "<"
        for i, kind in enumerate(kinds):
            if kind == TENSOR_MAP:
                continue
            size = struct.calcsize(SCALAR_FORMATS[kind])
            aligned = -(-pos // size) * size
            fmt += "x" * (aligned - pos) + SCALAR_FORMATS[kind]
            offsets[i] = aligned
            pos = aligned + size
        self.kinds = tuple(kinds)
        self.offsets = tuple(offsets)
        self.map_offsets = tuple(map_offsets)
        self.scalar_struct = struct.Struct(fmt)
        self.size = max(pos, 8)


class Launcher:
    """Launch one loaded kernel again and again with minimal host work (see module docstring).

    Args:
        function: the ``CUfunction``.
        launch_config: the kernel's ``CUlaunchConfig`` (owned by this launcher from now on).
        kinds: parameter kinds in signature order.
        map_specs: the :class:`TensorMapSpec` of each tensor-map parameter, in order.
        launch_fn: ``cuLaunchKernelEx`` (injectable for tests).
        encoder: tensor-map encoder (injectable for tests).
        check: ``(result, call, detail) -> None``, raising on failure (default: ``driver.check``).
        capacity: tensor-map cache entries.
    """

    def __init__(self, function: Any, launch_config: Any, kinds: Sequence[str],
                 map_specs: Sequence[TensorMapSpec | None],
                 *, launch_fn: Callable[..., Any] | None = None, encoder: Callable[..., bytes] = encode_map_bytes,
                 check: Callable[..., Any] | None = None, capacity: int = 1024, name: str = "kernel"):
        self.layout = layout = ParamLayout(kinds)
        if len(layout.map_offsets) != len(map_specs):
            raise ValueError(f"{name}: {len(layout.map_offsets)} tensor-map parameters but {len(map_specs)} specs")
        self.name = name
        self.function = function
        self.maps = TensorMapCache(map_specs, capacity, encoder)
        self._buffer = (ctypes.c_uint8 * layout.size)()
        self._view = memoryview(self._buffer).cast("B")
        base = ctypes.addressof(self._buffer)
        self._ptrs = (ctypes.c_void_p * max(1, len(kinds)))(*(base + off for off in layout.offsets))
        self.params_address = ctypes.addressof(self._ptrs)
        self._config = launch_config
        self._last: list[Any] = [object()] * len(map_specs)
        self._lock = threading.Lock()
        if launch_fn is None or check is None:
            from ptxgen.runtime import driver

            launch_fn = launch_fn or driver.cu().cuLaunchKernelEx
            check = check or driver.check
        self._launch_fn = launch_fn
        self._check = check

    @classmethod
    def for_kernel(cls, kernel: Any, **kw: Any) -> "Launcher":
        """A launcher for a :class:`~ptxgen.runtime.module.Kernel`: tensor-map param ``tmap_x`` uses
        ``spec.tensor_maps["x"]`` (a map the spec lacks has no spec: pass None for it, 128 zero bytes)."""
        from ptxgen.runtime.module import _launch_config

        spec = kernel.spec
        kinds = [kind for _, kind in spec.params]
        map_specs = [spec.tensor_maps.get(name.removeprefix("tmap_")) for name, kind in spec.params
                     if kind == TENSOR_MAP]
        return cls(kernel.function, _launch_config(spec, kernel.pdl), kinds, map_specs, name=spec.name, **kw)

    def pack(self, maps: Sequence[MapArgs], scalars: Sequence[int | float]) -> None:
        """Write the parameters into the buffer (callers hold the lock, or are single-threaded tests).

        Args:
            maps: per tensor-map slot ``(address, rows, cols, row_stride_elems)``, or None (128 zero bytes).
            scalars: the scalar parameters in signature order.

        Raises:
            ShapeError / CudaError: encoding a new tensor map failed.
            struct.error: a scalar does not fit its type.
        """
        last = self._last
        view = self._view
        offsets = self.layout.map_offsets
        for slot, args in enumerate(maps):
            if args != last[slot]:
                off = offsets[slot]
                view[off:off + TENSOR_MAP_BYTES] = _ZERO_MAP if args is None else self.maps.get(slot, args)
                last[slot] = args
        self.layout.scalar_struct.pack_into(self._buffer, self.layout.scalar_offset, *scalars)

    def launch(self, grid_x: int, maps: Sequence[MapArgs], scalars: Sequence[int | float], stream: int) -> None:
        """Pack and enqueue one launch of ``grid_x`` CTAs on ``stream`` (a ``CUstream`` as int).

        Raises:
            ShapeError: a new tensor map breaks a TMA rule (nothing launched).
            CudaError: encoding or ``cuLaunchKernelEx`` failed.
        """
        with self._lock:
            try:
                self.pack(maps, scalars)
            except BaseException:
                self._last = [object()] * len(self._last)  # a half-written buffer is rewritten next time
                raise
            config = self._config
            config.gridDimX = grid_x
            config.hStream = stream
            result = self._launch_fn(config, self.function, self.params_address, 0)
        if (result[0] if result.__class__ is tuple else result):  # CUresult is an int enum; CUDA_SUCCESS is 0
            self._check(result, "cuLaunchKernelEx", f"{self.name}: grid {grid_x}")

    def param_bytes(self, index: int) -> bytes:
        """The bytes parameter ``index`` points at (tests and debugging)."""
        kind = self.layout.kinds[index]
        size = TENSOR_MAP_BYTES if kind == TENSOR_MAP else struct.calcsize(SCALAR_FORMATS[kind])
        return ctypes.string_at(self._ptrs[index], size)
