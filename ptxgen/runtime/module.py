"""Load generated kernels through the CUDA driver and launch them.

Compilation path (decided here, knob ``PTXGEN_JIT``): by default (``auto``)
the NVIDIA wheel's ``ptxas`` compiles the PTX as a whole program, the same
compile whose register and spill report the build checks; where
cuda.pathfinder finds no ptxas, the *driver's* JIT (``cuLinkCreate`` /
``cuLinkAddData`` / ``cuLinkComplete``) does.  The driver's linker JIT
compiles relocatable code, which keeps every warp within the kernel's
``.maxnreg`` however far ``setmaxnreg`` raises it (PTX ISA "setmaxnreg"), so
consumer warpgroups that need more registers spill there (the FP8 128x256
tiles: 436 bytes per thread).  A cubin of a 13.x ptxas loads on any 13.x
driver (CUDA minor-version compatibility covers machine code, not PTX); the
``cuda`` extra pins both to 13.x.  The cubin is stored in the on-disk cache
(:mod:`ptxgen.runtime.cache`) keyed by PTX text + ``.target`` + driver version
+ device capability + the compiler knob (a named toolchain with its version),
so later processes skip the compile; ``auto`` is resolved only on a miss.  The
cubin is then loaded with ``cuModuleLoadData`` into torch's context.  On a
compile failure the compiler's error log is in the raised error's message.
:meth:`Kernel.from_cubin` loads an offline-assembled cubin instead.

Kernel parameters (fixed signature, :data:`ptxgen.launch.PARAMS`): three
128-byte ``CUtensorMap`` by value, ``d_ptr`` u64, ``m``, ``n``, ``k`` u32.
:class:`KernelParams` lays them out in ctypes storage it owns and builds the
``void*[7]`` array the driver reads; ``cuLaunchKernelEx`` receives that
array's address as a plain ``int`` (cuda-bindings takes an ``int``
``kernelParams`` as a ready ``void**``).  The driver copies the values during
the launch call, so the storage only has to outlive the call.  (cuda-bindings'
``(values, types)`` tuple form, with ``None`` as the type of a ``CUtensorMap``
and ctypes types for the scalars, was also checked on an H100 and works; the
explicit array is used because it is version-independent and testable on a CPU.)
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import re
import threading
from typing import Any

from ptxgen import knobs
from ptxgen.launch import PARAMS, LaunchSpec
from ptxgen.runtime import cache, driver
from ptxgen.runtime.driver import DeviceInfo, check

log = logging.getLogger(__name__)

TENSOR_MAP_BYTES = 128
JIT_LOG_BYTES = 1 << 16
#: bump when the cached payload's meaning changes (it is part of every key)
CACHE_FORMAT = "ptxgen-driver-jit-cubin-v1"
_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_TARGET_RE = re.compile(r"^\s*\.target\s+([\w,\s]+?)\s*$", re.MULTILINE)


def ptx_target(ptx: str) -> str:
    """The ``.target`` directive's operand (``"sm_90a"``), or ``""`` when absent."""
    match = _TARGET_RE.search(ptx)
    return match.group(1) if match else ""


def _log_text(buf: bytearray) -> str:
    """A JIT log buffer up to its first NUL, decoded."""
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def jit_ptx(ptx: str) -> bytes:
    """Compile PTX to a cubin with the driver's JIT for the current context's device.

    Args:
        ptx: complete PTX module text.

    Returns:
        The cubin bytes.

    Raises:
        CudaError: the JIT rejected the PTX; the message holds the JIT error log.
    """
    drv = driver.cu()
    opt = drv.CUjit_option
    err_log = bytearray(JIT_LOG_BYTES)
    info_log = bytearray(JIT_LOG_BYTES)
    options = [
        opt.CU_JIT_ERROR_LOG_BUFFER,
        opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        opt.CU_JIT_INFO_LOG_BUFFER,
        opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ]
    values = [err_log, JIT_LOG_BYTES, info_log, JIT_LOG_BYTES]
    state = check(drv.cuLinkCreate(len(options), options, values), "cuLinkCreate")
    try:
        cubin = _link(drv, state, ptx, err_log)
    finally:
        destroyed = drv.cuLinkDestroy(state)
    check(destroyed, "cuLinkDestroy")
    info = _log_text(info_log)
    if info:
        log.debug("driver JIT info log:\n%s", info)
    return cubin


@functools.cache
def resolve_jit(name: str) -> str:
    """The compiler ``PTXGEN_JIT=name`` means: ``auto`` is ``ptxas`` when cuda.pathfinder finds the NVIDIA wheel's
    ptxas, else ``driver``; other names are themselves."""
    if name != "auto":
        return name
    from ptxgen.assemble import _tool
    from ptxgen.errors import AssembleError

    try:
        _tool("ptxas")
    except AssembleError:
        return "driver"
    return "ptxas"


def compiler(name: str):
    """``ptx -> cubin`` of ``PTXGEN_JIT=name``: :func:`jit_ptx` or :func:`toolchain_jit`.  ``auto`` is resolved
    (:func:`resolve_jit`) when the first PTX is compiled, not before: a cache hit never looks for ptxas."""
    if name != "auto":
        return jit_ptx if name == "driver" else toolchain_jit(name)

    def jit(ptx: str) -> bytes:
        return compiler(resolve_jit(name))(ptx)

    return jit


def toolchain_jit(backend: str):
    """``ptx -> cubin`` with :func:`ptxgen.assemble.assemble`'s ``backend`` (``"nvjitlink"`` or ``"ptxas"``) for the
    PTX's own ``.target``, instead of the driver's JIT (knob ``PTXGEN_JIT``).

    ``"ptxas"`` compiles the whole program; the driver's JIT (``cuLinkAddData``) and nvJitLink compile relocatable
    code, where ptxas (13.0 and 13.5) allocates every warp within the kernel's ``.maxnreg`` however far
    ``setmaxnreg`` raises it (PTX ISA "setmaxnreg"): ``fp8_h100_128x256`` spills 436 bytes per thread there and
    none as a whole program (docs/fp8.md, "Speed").

    Raises:
        AssembleError: the assembler rejected the PTX or is not installed.
    """
    from ptxgen.assemble import compile_ptx

    def jit(ptx: str) -> bytes:
        return compile_ptx(ptx, ptx_target(ptx), backend)

    return jit


def _link(drv: Any, state: Any, ptx: str, err_log: bytearray) -> bytes:
    """Add the PTX to a link state and complete it; copy the cubin out before the state dies."""
    data = ptx.encode() + b"\0"
    added = drv.cuLinkAddData(state, drv.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), b"ptxgen.ptx", 0, None, None)
    check(added, "cuLinkAddData", detail=f"JIT log:\n{_log_text(err_log)}")
    completed = drv.cuLinkComplete(state)
    cubin_ptr, size = check(completed, "cuLinkComplete", detail=f"JIT log:\n{_log_text(err_log)}")
    return ctypes.string_at(int(cubin_ptr), int(size))


def cached_jit(ptx: str, info: DeviceInfo) -> bytes:
    """:func:`jit_ptx` through the on-disk cache (key: PTX, target, driver version, capability)."""
    key = (
        CACHE_FORMAT,
        ptx,
        ptx_target(ptx),
        f"driver={driver.driver_version()}",
        f"sm={info.capability[0]}{info.capability[1]}",
    )
    return cache.get_or_build(key, lambda: jit_ptx(ptx))


def tensor_map_bytes(tmap: Any) -> bytes:
    """The 128 bytes of a tensor map: a ``CUtensorMap`` (via ``getPtr()``) or a bytes-like of length 128.

    Raises:
        ValueError: a bytes-like of the wrong length.
    """
    get_ptr = getattr(tmap, "getPtr", None)
    if callable(get_ptr):
        return ctypes.string_at(int(get_ptr()), TENSOR_MAP_BYTES)
    raw = bytes(tmap)
    if len(raw) != TENSOR_MAP_BYTES:
        raise ValueError(f"tensor map must be {TENSOR_MAP_BYTES} bytes, got {len(raw)}")
    return raw


class KernelParams:
    """The 7 GEMM kernel parameters in driver layout (``void* kernelParams[7]``).

    Args:
        tmaps: ``(tmap_a, tmap_b, tmap_d)``: ``CUtensorMap`` objects or 128-byte buffers
            (``None`` for an operand the kernel does not use: 128 zero bytes).
        d_ptr: D's device address (u64).
        m, n, k: problem shape in elements (u32).

    Raises:
        ValueError: a value does not fit its parameter type, or a tensor map is not 128 bytes.
    """

    def __init__(self, tmaps: tuple[Any, Any, Any], d_ptr: int, m: int, n: int, k: int):
        if len(tmaps) != 3:
            raise ValueError(f"need 3 tensor maps (a, b, d), got {len(tmaps)}")
        if not 0 <= d_ptr <= _U64_MAX:
            raise ValueError(f"d_ptr={d_ptr:#x}: must fit in u64")
        for name, value in (("m", m), ("n", n), ("k", k)):
            if not 0 <= value <= _U32_MAX:
                raise ValueError(f"{name}={value}: must fit in u32")
        self._tmaps = []
        for tmap in tmaps:
            storage = (ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))()
            if tmap is not None:
                ctypes.memmove(storage, tensor_map_bytes(tmap), TENSOR_MAP_BYTES)
            self._tmaps.append(storage)
        self._scalars = [ctypes.c_uint64(d_ptr), ctypes.c_uint32(m), ctypes.c_uint32(n), ctypes.c_uint32(k)]
        slots = [*self._tmaps, *self._scalars]
        self._ptrs = (ctypes.c_void_p * len(PARAMS))(*(ctypes.addressof(s) for s in slots))

    @property
    def address(self) -> int:
        """Address of the ``void*[7]`` array, as ``cuLaunchKernelEx``'s ``kernelParams`` takes it."""
        return ctypes.addressof(self._ptrs)

    def slot_bytes(self, index: int) -> bytes:
        """The bytes parameter ``index`` points at (for tests and debugging)."""
        size = TENSOR_MAP_BYTES if index < 3 else ctypes.sizeof(self._scalars[index - 3])
        return ctypes.string_at(self._ptrs[index], size)


class Kernel:
    """One loaded GEMM kernel on one device, ready to launch.

    Build with :meth:`from_ptx` or :meth:`from_cubin`; launch with :meth:`launch`.
    """

    def __init__(self, module: Any, function: Any, spec: LaunchSpec, info: DeviceInfo):
        self.module = module
        self.function = function
        self.spec = spec
        self.device = info
        #: launched with programmatic dependent launch: built with it (``spec.pdl``) and ``PTXGEN_PDL`` on
        self.pdl = spec.pdl and knobs.read().pdl
        self._config = _launch_config(spec, self.pdl)
        self._config_lock = threading.Lock()

    @classmethod
    def from_ptx(cls, ptx: str, spec: LaunchSpec, ordinal: int | None = None, *, disk_cache: bool = True) -> "Kernel":
        """JIT ``ptx`` with the driver (through the disk cache unless ``disk_cache=False``) and load it.

        Raises:
            ValueError: ``spec.params`` is not the fixed GEMM signature.
            CudaError: JIT (with its log), load, or attribute call failed.
        """
        ordinal = driver.ensure_context(ordinal)
        info = driver.device_info(ordinal)
        cubin = cached_jit(ptx, info) if disk_cache else jit_ptx(ptx)
        return cls.from_cubin(cubin, spec, ordinal)

    @classmethod
    def from_cubin(cls, cubin: bytes, spec: LaunchSpec, ordinal: int | None = None) -> "Kernel":
        """Load a cubin, find ``spec.kernel``, and set its shared-memory and cluster attributes.

        Any parameter list loads (the fast path's :class:`~ptxgen.runtime.fastpath.Launcher` packs it from
        ``spec.params``); :meth:`launch` with :class:`KernelParams` packs only the GEMM signature.

        Raises:
            CudaError: a driver call failed.
        """
        ordinal = driver.ensure_context(ordinal)
        info = driver.device_info(ordinal)
        drv = driver.cu()
        module = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData",
                       detail=f"{spec.name}: {len(cubin)}-byte image, sha256 {hashlib.sha256(cubin).hexdigest()[:16]}")
        function = check(drv.cuModuleGetFunction(module, spec.kernel.encode()), "cuModuleGetFunction",
                         detail=f"entry {spec.kernel!r}")
        _set_attributes(drv, function, spec, info)
        return cls(module, function, spec, info)

    @functools.cached_property
    def sm_slots(self) -> int:
        """SMs a persistent grid of this kernel fills at once: the clusters that can be co-resident
        (``cuOccupancyMaxActiveClusters``: a cluster's CTAs are placed on SMs of one GPC, CUDA programming guide
        "Thread Block Clusters") times the cluster size, so a grid of clusters never waits for a second round.  The
        runtime asks only for clusters above 2 CTAs (:func:`ptxgen.runtime.api._sm_slots`).

        Raises:
            CudaError: the occupancy query failed.
        """
        cluster_x = self.spec.cluster[0]
        drv = driver.cu()
        with self._config_lock:
            self._config.gridDimX = cluster_x * max(1, self.device.sm_count // cluster_x)
            clusters = check(drv.cuOccupancyMaxActiveClusters(self.function, self._config),
                             "cuOccupancyMaxActiveClusters", detail=self.spec.name)
        return max(1, int(clusters)) * cluster_x

    def launch(self, grid_x: int, params: KernelParams, stream: int) -> None:
        """Enqueue one launch.

        Args:
            grid_x: ``gridDim.x`` in CTAs (a positive multiple of the cluster size).
            params: packed kernel parameters (must stay alive for the duration of this call only).
            stream: ``CUstream`` handle as an int (torch: ``torch.cuda.current_stream().cuda_stream``).

        Raises:
            ValueError: ``grid_x`` not a positive multiple of the cluster size, or a kernel whose parameters are
                not the GEMM signature (use the fast path's Launcher).
            CudaError: ``cuLaunchKernelEx`` failed.
        """
        if tuple(tuple(p) for p in self.spec.params) != PARAMS:
            raise ValueError(f"{self.spec.name}: params={self.spec.params}: KernelParams packs only {PARAMS}")
        cluster_x = self.spec.cluster[0]
        if grid_x < 1 or grid_x % cluster_x:
            raise ValueError(f"{self.spec.name}: grid_x={grid_x}: must be a positive multiple of cluster {cluster_x}")
        drv = driver.cu()
        with self._config_lock:
            config = self._config
            config.gridDimX = grid_x
            config.hStream = stream  # cuda-bindings accepts the handle as an int
            result = drv.cuLaunchKernelEx(config, self.function, params.address, 0)
        check(result, "cuLaunchKernelEx",
              detail=f"{self.spec.name}: grid {grid_x}, block {self.spec.block}, cluster {self.spec.cluster}, "
                     f"smem {self.spec.dynamic_smem_bytes} B")


def _set_attributes(drv: Any, function: Any, spec: LaunchSpec, info: DeviceInfo) -> None:
    """Opt into the spec's dynamic shared memory; allow non-portable clusters when > 8 CTAs."""
    attr = drv.CUfunction_attribute
    check(drv.cuFuncSetAttribute(function, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 spec.dynamic_smem_bytes), "cuFuncSetAttribute",
          detail=f"MAX_DYNAMIC_SHARED_SIZE_BYTES={spec.dynamic_smem_bytes} "
                 f"(device opt-in limit {info.max_smem_optin} B)")
    cluster_size = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    if cluster_size > 8:
        check(drv.cuFuncSetAttribute(function, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
              "cuFuncSetAttribute", detail=f"NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cluster {spec.cluster})")


def _launch_config(spec: LaunchSpec, pdl: bool) -> Any:
    """A ``CUlaunchConfig`` with block, shared memory and the cluster-dimension attribute filled in; with ``pdl``
    (a kernel built with ``schedule.pdl``: it waits with ``griddepcontrol.wait`` before any global access) also the
    programmatic stream serialization attribute: the kernel may launch before the previous one on the stream
    completes, once every CTA of that one has issued ``griddepcontrol.launch_dependents`` or exited (CUDA driver
    API ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``; PTX ISA "griddepcontrol")."""
    drv = driver.cu()
    ids = drv.CUlaunchAttributeID
    cluster = drv.CUlaunchAttribute()
    cluster.id = ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = spec.cluster
    attrs = [cluster]
    if pdl:
        serialization = drv.CUlaunchAttribute()
        serialization.id = ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        serialization.value.programmaticStreamSerializationAllowed = 1
        attrs.append(serialization)
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = 1, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = spec.block
    config.sharedMemBytes = spec.dynamic_smem_bytes
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config

