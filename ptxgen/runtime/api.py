"""The torch-facing API: ``gemm(a, b, out=None, config=None)`` computes ``D = A @ B.T``.

Shapes and types: A ``[M, K]``, B ``[N, K]``, D ``[M, N]``; all bf16, on one
CUDA device, accumulation in fp32; any strides, as ``torch.matmul(a, b.T)``.

Every input rule :func:`gemm` keeps is checked by :func:`check_gemm_operands`
(dtype, device, K equal, ``out`` shaped ``[M, N]``, overlapping no input and,
when row-major, 16-byte aligned) and raised as :class:`~ptxgen.errors.ShapeError`
before any allocation or launch: a bad input never reaches the GPU and ``out``
is never written.  :func:`check_gemm_inputs` states what the kernel itself takes
(row-major, 16-byte aligned, K a multiple of 8); :func:`prepare` requires it.

Staging (:func:`staging_plan`, decided once per signature from shapes and
strides; :class:`_StagedCall` per call).  TMA reads an operand in place when it
is row-major with a row pitch that is a multiple of 16 bytes and starts 16-byte
aligned.  An input that is not (K not a multiple of 8, a transposed or
column-strided view, a misaligned address) is copied once per call into a new
``[rows, round_up(K, 8)]`` tensor; its tensor map keeps the real K as width, so
TMA fills the columns up to the kernel's K (K rounded up to the config's
``k_multiple``) with zeros, which add nothing to the dot products.  D is staged
(a new ``[M, round_up(N, n_multiple)]`` tensor, then ``out.copy_``) when ``out``
is not row-major contiguous, or when N is not a multiple of a TMA-store config's
``n_multiple`` (sm_100a: the chooser's only direct-store configs there are the
slow early levels and the dual GEMM has none, so a copy of ``[M, N]`` costs less
than another kernel).  Cost: one read and one write of each staged operand (and
of D), plus a few microseconds of host time; a legal signature keeps the
unstaged :class:`_Call` and does no extra work.  Staging tensors come from
torch's caching allocator on torch's current stream and are released when the
call returns: the allocator reuses a block only after the work queued on that
stream, so calls on concurrent streams never share a staging tensor (and CUDA
graph capture takes them from the graph's pool).  M, N or K = 0 launch nothing:
D is empty, or zeros for K = 0, as torch gives.

MN-major operands (:func:`gemm`, :func:`dual_gemm`, sm_90a).  An input that is
not row-major but is the transposed view of one (``w.T`` of a row-major ``[K,
N]`` weight: rows contiguous, a multiple of 8 of them, the K stride a multiple
of 8 elements) is read in place by a variant of the config with ``tma.major_a``
/ ``major_b`` = ``mn`` (:func:`majors_config`: the same tile, schedule and
epilogue; its tensor map is the ``[K, rows]`` view and wgmma reads the operand
with its transpose immediate), not copied.  With ``config=None`` the variant is
that of the chooser's config, or of the cost model's best-ranked config that
can take it (an MN-major operand moves in boxes of 64 rows: ``h100_128x144``
cannot).  The dual GEMM reads B1 and B2 MN-major only when both are such views
(one map layout for both), in its chosen config.  A fused epilogue's call takes
the variant of its derived config (``epilogue.expr`` kept).

Per-call path (:func:`gemm`): the first call with a given (config, dtypes,
shapes, strides, devices) signature runs every check, resolves the config
(``config=None``: :func:`ptxgen.runtime.choose.choose` for the shape and
device), loads the kernel (:func:`loaded_kernel`: from the disk cache by
config content, see :mod:`ptxgen.runtime.loader`) and stores a
:class:`_Call`.  Later calls with the same signature whose inputs are read
where they lie (row-major at a 16-byte-multiple pitch, or an MN-major view)
do only the per-pointer checks (16-byte alignment, ``out`` not overlapping an
input's span; a misaligned input is staged, see below) and
one :meth:`ptxgen.runtime.fastpath.Launcher.launch`: tensor maps come from
an LRU keyed by (address, shape, stride), parameters go into a reused buffer,
one ``cuLaunchKernelEx`` on torch's current stream.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ptxgen.errors import ConfigError, ShapeError
from ptxgen.hw import FP8_SCALE_BLOCK
from ptxgen.runtime.driver import current_stream  # noqa: F401 - part of this module's API
# the defaults live with the chooser, which falls back to them (no api <-> choose circle); re-exported here
from ptxgen.runtime.choose import (DEFAULT_DUAL_SM90, DEFAULT_DUAL_SM100, DEFAULT_SM90, DEFAULT_SM100,  # noqa: F401
                                   default_config_name, ranked_configs)

#: the compute capability each target runs on (``a`` targets are not forward compatible)
ARCH_CAPABILITY: dict[str, tuple[int, int]] = {"sm_90a": (9, 0), "sm_100a": (10, 0)}
#: bf16 elements per 16 bytes: TMA row strides must be 16-byte multiples
ELEMS_PER_16B = 8
_ALIGN = 16

log = logging.getLogger(__name__)
_lock = threading.Lock()
_builds: dict[tuple[str, str], Any] = {}
#: (ordinal, config identity) -> LoadedKernel
_loaded: dict[tuple[int, Any], "LoadedKernel"] = {}
#: call signature -> _Call, for every kernel family (cleared when it grows past _MAX_CALLS)
_calls: dict[tuple, "_Call"] = {}
_MAX_CALLS = 4096
_tls = threading.local()
#: (ordinal, stream, capture id or None, config name, kernel, WorkspaceSpec, bytes) -> the split-K workspace
#: (torch uint8, counters zero-filled)
_workspaces: dict[tuple, Any] = {}
#: split-K workspaces of prepared launches without an owner to keep them (kept for the process)
_owned: list = []
_U32_LIMIT = 1 << 32


# --------------------------------------------------------------------------- input checks


def _check_tensor(name: str, t: Any, dims: str, require_cuda: bool, layout: bool = True, dtype: Any = None) -> None:
    """Type, rank, dtype (default bf16), device kind and (``layout``) row-major layout and alignment of one operand."""
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{name}: got {type(t).__name__}: must be a torch.Tensor")
    if t.dim() != 2:
        raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be 2-D {dims}")
    if t.dtype != dtype:
        raise ShapeError(f"{name}: dtype={t.dtype}: must be {dtype}")
    if require_cuda and t.device.type != "cuda":
        raise ShapeError(f"{name}: device={t.device}: must be a CUDA tensor")
    if not layout or t.numel() == 0:
        return  # layout is meaningless for an empty tensor; the M, N, K >= 1 rule reports it
    if not _row_major(t):
        rows, cols = t.shape
        raise ShapeError(
            f"{name}: shape={tuple(t.shape)} stride={t.stride()}: must be row-major contiguous "
            f"(stride(1) == 1 and stride(0) == {cols}); call .contiguous()"
        )
    if t.data_ptr() % _ALIGN:
        raise ShapeError(f"{name}: data_ptr={t.data_ptr():#x}: must be {_ALIGN}-byte aligned (TMA); "
                         "a sliced view may not be; call .clone()")


def _row_major(t: Any) -> bool:
    """Whether a 2-D tensor is row-major contiguous (the layout the kernel reads and writes without a pitch)."""
    rows, cols = t.shape
    return (t.stride(1) == 1 or cols == 1) and (t.stride(0) == cols or rows == 1)


def _extent(t: Any) -> tuple[int, int]:
    """The byte range ``[first, last + 1)`` a 2-D tensor's elements span (empty for an empty tensor)."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    (rows, cols), (s0, s1) = t.shape, t.stride()
    return start, start + ((rows - 1) * s0 + (cols - 1) * s1 + 1) * t.element_size()


def _overlaps(x: Any, y: Any) -> bool:
    """Whether two tensors' byte ranges intersect."""
    (x0, x1), (y0, y1) = _extent(x), _extent(y)
    return x0 < x1 and y0 < y1 and x0 < y1 and y0 < x1


def _self_overlapping(t: Any) -> bool:
    """Whether two elements of a 2-D tensor share memory (a stride 0 or rows interleaving)."""
    (rows, cols), (s0, s1) = t.shape, t.stride()
    if rows <= 1 or cols <= 1:
        return (rows > 1 and s0 == 0) or (cols > 1 and s1 == 0)
    return not ((s1 >= 1 and s0 >= cols * s1) or (s0 >= 1 and s1 >= rows * s0))


def _check_out(out: Any, m: int, n: int, a: Any, inputs: tuple, require_cuda: bool, layout: bool,
               dtype: Any = None) -> None:
    """The rules of ``out``: a D ``[M, N]`` tensor of ``dtype`` (default bf16) on ``a``'s device overlapping no input
    (``(name, t)``)."""
    _check_tensor("out", out, "[M, N]", require_cuda, layout, dtype)
    if tuple(out.shape) != (m, n):
        raise ShapeError(f"out: shape={tuple(out.shape)}: must be [M, N] = ({m}, {n})")
    if out.device != a.device:
        raise ShapeError(f"out: device={out.device}: must be on a's device {a.device}")
    if not layout and out.numel():
        if _self_overlapping(out):
            raise ShapeError(f"out: shape={tuple(out.shape)} stride={out.stride()}: elements share memory; "
                             "D needs one location per element")
        if _row_major(out) and out.data_ptr() % _ALIGN:
            raise ShapeError(f"out: data_ptr={out.data_ptr():#x}: must be {_ALIGN}-byte aligned (a row-major out "
                             "is the kernel's D, written in place by TMA); call .clone()")
    for name, operand in inputs:
        if _overlaps(out, operand):
            raise ShapeError(f"out: memory overlaps {name}: D must not alias an input")


def _check_k(a: Any, b: Any, require_cuda: bool, b_name: str, layout: bool) -> tuple[int, int, int]:
    """A and B each valid, on one device, with one K: ``(M, N, K)``."""
    _check_tensor("a", a, "[M, K]", require_cuda, layout)
    _check_tensor(b_name, b, "[N, K]", require_cuda, layout)
    if b.device != a.device:
        raise ShapeError(f"{b_name}: device={b.device}: must be on a's device {a.device}")
    (m, k), (n, kb) = a.shape, b.shape
    if kb != k:
        raise ShapeError(f"{b_name}: shape={tuple(b.shape)}: K={kb} must equal a's K={k} ({b_name} is [N, K]; "
                         f"pass B, not B.T)")
    return m, n, k


def _check_b2(b2: Any, b1: Any, a: Any, out: Any, require_cuda: bool, layout: bool) -> None:
    """B2 of a dual GEMM: valid, on ``a``'s device, shaped like B1, not overlapping ``out``."""
    _check_tensor("b2", b2, "[N, K]", require_cuda, layout)
    if b2.device != a.device:
        raise ShapeError(f"b2: device={b2.device}: must be on a's device {a.device}")
    if tuple(b2.shape) != tuple(b1.shape):
        raise ShapeError(f"b2: shape={tuple(b2.shape)}: must equal b1's shape {tuple(b1.shape)} ([N, K])")
    if out is not None and _overlaps(out, b2):
        raise ShapeError("out: memory overlaps b2: D must not alias an input")


def check_gemm_operands(a: Any, b: Any, out: Any = None, *, require_cuda: bool = True,
                        b_name: str = "b") -> tuple[int, int, int]:
    """The rules :func:`gemm` keeps for every call (any layout is staged); pure (no GPU, no driver call).

    Args:
        a: A ``[M, K]`` bf16, any strides and alignment.
        b: B ``[N, K]`` bf16 on ``a``'s device, any strides and alignment.
        out: D ``[M, N]`` bf16 on ``a``'s device, or None: no two elements sharing memory, not overlapping A or B
            (byte ranges), and 16-byte aligned when row-major contiguous (then it is the kernel's D itself).
        require_cuda: check that the tensors are CUDA tensors (False lets CPU tests reach the later rules).
        b_name: the name B has in messages (``b1`` for a dual GEMM).

    Returns:
        ``(M, N, K)``; any of them may be 0 (as for ``torch.matmul``).

    Raises:
        ShapeError: the first rule broken, naming the argument, its value and the rule.
    """
    m, n, k = _check_k(a, b, require_cuda, b_name, layout=False)
    if out is not None:
        _check_out(out, m, n, a, (("a", a), (b_name, b)), require_cuda, layout=False)
    return m, n, k


def check_dual_gemm_operands(a: Any, b1: Any, b2: Any, out: Any = None, *,
                             require_cuda: bool = True) -> tuple[int, int, int]:
    """The rules :func:`dual_gemm` keeps for every call (those of :func:`check_gemm_operands`, B2 like B1); pure.

    Raises:
        ShapeError: the first rule broken, naming the argument (``a``, ``b1``, ``b2``, ``out``).
    """
    m, n, k = check_gemm_operands(a, b1, out, require_cuda=require_cuda, b_name="b1")
    _check_b2(b2, b1, a, out, require_cuda, layout=False)
    return m, n, k


def check_gemm_inputs(
    a: Any,
    b: Any,
    out: Any = None,
    k_multiple: int = ELEMS_PER_16B,
    *,
    n_multiple: int = 1,
    require_cuda: bool = True,
    b_name: str = "b",
) -> tuple[int, int, int]:
    """Validate operands the kernel takes as they are (:func:`prepare`, planted kernels); pure (no GPU, no driver
    call).  :func:`gemm` keeps only :func:`check_gemm_operands` and stages the rest (module docstring).

    Args:
        a: A ``[M, K]`` bf16, row-major contiguous, 16-byte aligned.
        b: B ``[N, K]`` bf16, same rules, same device as ``a``.
        out: D ``[M, N]`` bf16 on ``a``'s device, row-major contiguous, not overlapping A or B; or None.
        k_multiple: K must be a multiple of this (elements); the kernel's ``LaunchSpec.k_multiple``.
        n_multiple: N must be a multiple of this (8 when the kernel stores D through a tensor map).
        require_cuda: check that the tensors are CUDA tensors (False lets CPU tests reach the later rules).
        b_name: the name B has in messages (``b1`` for a dual GEMM).

    Returns:
        ``(M, N, K)``.

    Raises:
        ShapeError: the first rule broken, naming the argument, its value and the rule.
    """
    m, n, k = _check_k(a, b, require_cuda, b_name, layout=True)
    for label, value in (("M", m), ("N", n), ("K", k)):
        if value < 1:
            raise ShapeError(f"{label}={value}: must be >= 1 (a: {tuple(a.shape)}, {b_name}: {tuple(b.shape)})")
    if k % k_multiple:
        raise ShapeError(
            f"K={k}: must be a multiple of {k_multiple} (K*2={2 * k} bytes; TMA needs 16-byte row strides)"
        )
    if n % n_multiple:
        raise ShapeError(f"N={n}: must be a multiple of {n_multiple} for this config (D is stored through TMA)")
    if out is not None:
        _check_out(out, m, n, a, (("a", a), (b_name, b)), require_cuda, layout=True)
    return m, n, k


def check_dual_gemm_inputs(a: Any, b1: Any, b2: Any, out: Any = None, k_multiple: int = ELEMS_PER_16B, *,
                           n_multiple: int = 1, require_cuda: bool = True) -> tuple[int, int, int]:
    """Validate ``dual_gemm`` operands (the rules of :func:`check_gemm_inputs`, B2 like B1); pure.

    Raises:
        ShapeError: the first rule broken, naming the argument (``a``, ``b1``, ``b2``, ``out``).
    """
    m, n, k = check_gemm_inputs(a, b1, out, k_multiple, n_multiple=n_multiple, require_cuda=require_cuda,
                                b_name="b1")
    _check_b2(b2, b1, a, out, require_cuda, layout=True)
    return m, n, k


# --------------------------------------------------------------------------- configs and kernels


def check_arch(name: str, arch: str, capability: tuple[int, int]) -> None:
    """Raise :class:`ConfigError` unless a kernel built for ``arch`` runs on ``capability``."""
    needed = ARCH_CAPABILITY.get(arch)
    if needed is None:
        raise ConfigError(f"config {name}: arch={arch!r}: runtime knows only {sorted(ARCH_CAPABILITY)}")
    if tuple(capability) != needed:
        raise ConfigError(f"config {name}: arch={arch} needs compute capability {needed[0]}.{needed[1]}, "
                          f"the device has {capability[0]}.{capability[1]}")


def _config_identity(config: Any) -> tuple[str, str]:
    return ("path", os.fspath(config)) if isinstance(config, (str, os.PathLike)) else ("config", repr(config))


def built_config(config: Any) -> Any:
    """``ptxgen.build.build`` of a config name, path or ``Config`` object, once per process.

    Raises:
        ConfigError: unknown name, bad YAML or illegal config (from ``ptxgen.config``).

    Returns:
        The ``BuildResult`` (``.ptx``, ``.launch``).
    """
    key = _config_identity(config)
    with _lock:
        result = _builds.get(key)
    if result is None:
        from ptxgen.build import build
        from ptxgen.config import load_config

        result = build(load_config(config))
        with _lock:
            result = _builds.setdefault(key, result)
    return result


def resolve_config(config: Any, m: int, n: int, k: int, ordinal: int, kernel: str = "gemm") -> Any:
    """``config`` itself, or for None the choice for this shape on this device.

    Raises:
        ConfigError: no shipped config for the device's compute capability.
    """
    if config is not None:
        return config
    from ptxgen.runtime import driver
    from ptxgen.runtime.choose import choose

    return choose(m, n, k, driver.device_info(ordinal), kernel)


class LoadedKernel(NamedTuple):
    """A kernel loaded on one device plus its fast-path launcher.

    Attributes:
        kernel: the :class:`~ptxgen.runtime.module.Kernel`.
        launcher: its :class:`~ptxgen.runtime.fastpath.Launcher`.
        spec: the launch spec.
    """

    kernel: Any
    launcher: Any
    spec: Any


def loaded_kernel(config: Any, ordinal: int) -> LoadedKernel:
    """The kernel of ``config`` on device ``ordinal``, loaded once per process.

    On the first request: :func:`ptxgen.runtime.loader.load_image` (a cache hit loads the stored cubin without
    building, and for a name or path without importing the config schema; a miss takes the image shipped in the
    package when it is fresh (:mod:`ptxgen.runtime.prebuilt`), else validates, builds and JITs), then
    ``cuModuleLoadData``.  A shipped cubin the driver refuses is replaced by a built one, in the cache too.  The
    arch check runs before any JIT.  Knobs are read here.

    Raises:
        ConfigError: bad config or override; the config's arch does not run on the device.
        CudaError: JIT, load or attribute call failed.
    """
    from ptxgen import knobs

    settings = knobs.read()
    ident = (_config_identity(config), settings.watchdog_ns, settings.jit)
    with _lock:
        found = _loaded.get((ordinal, ident))
    if found is not None:
        return found
    from ptxgen.errors import CudaError
    from ptxgen.runtime import driver, loader
    from ptxgen.runtime.fastpath import Launcher
    from ptxgen.runtime.module import Kernel, compiler

    driver.ensure_context(ordinal)
    info = driver.device_info(ordinal)
    load = functools.partial(loader.load_image, config, driver.driver_version(), info.capability,
                             compiler(settings.jit), settings,
                             accept=lambda spec: check_arch(spec.name, spec.arch, info.capability))
    image = load(prebuilt=_shipped_image)
    try:
        kernel = Kernel.from_cubin(image.cubin, image.spec, ordinal)
    except CudaError as exc:
        if image.origin != "prebuilt":
            raise
        log.warning("ptxgen: the driver refused the shipped image of %s (%s); building it", image.spec.name, exc)
        image = load(rebuild=True)
        kernel = Kernel.from_cubin(image.cubin, image.spec, ordinal)
    launcher = Launcher.for_kernel(kernel)
    if "watchdog" in image.spec.extra:  # PTXGEN_WATCHDOG: every launch synchronizes and checks the record
        from ptxgen.runtime.watchdog import WatchedLauncher

        launcher = WatchedLauncher(launcher, image.spec, ordinal)
    found = LoadedKernel(kernel=kernel, launcher=launcher, spec=image.spec)
    with _lock:
        return _loaded.setdefault((ordinal, ident), found)


def _shipped_image(content: str, capability: tuple[int, int], driver_version: int, compiler: str) -> Any:
    """:func:`ptxgen.runtime.prebuilt.find`, imported when called: on a cache miss only (a warm hit reads no
    manifest)."""
    from ptxgen.runtime import prebuilt

    return prebuilt.find(content, capability, driver_version, compiler)


def split_k_workspace(spec: Any, m: int, n: int, device: Any, ordinal: int, stream: int | None = None,
                      num_sms: int | None = None, keep: list | None = None) -> tuple[int, ...]:
    """The extra kernel arguments of ``spec`` for an ``m`` x ``n`` output launched on ``stream`` (a ``cudaStream_t``
    as an int; None: a workspace of its own, for a prepared launch): ``(workspace address,)`` for a split-K kernel,
    ``()`` otherwise.  ``num_sms``: the SM count the launch's grid was computed for (None: device ``ordinal``'s);
    a split-K-of-the-last-wave kernel's workspace holds the tail tiles of that grid only
    (:meth:`ptxgen.launch.WorkspaceSpec.bytes_for`).

    The workspace (:class:`~ptxgen.launch.WorkspaceSpec`: fp32 partials and u32 counters) is allocated once per
    (device, stream, capture, config, size) with its counters zero-filled: each launch's last arriver resets the
    counters it used, so they are 0 again after every launch and under CUDA-graph replays (no CTA waits on another,
    so every launch finishes its tiles).  The partials need no fill: every split writes its own before it counts.
    Launches on one stream are ordered and share it; launches on different streams have different workspaces and
    may overlap.  The launches one CUDA-graph capture records on one stream are ordered in the graph the same way,
    so they share one workspace of that capture (its counters' fill is the graph's only extra node); another capture
    gets another, since two graphs may be replayed on two streams at once.  ``stream=None`` gets a workspace of its
    own (a prepared launch may be enqueued on any stream), appended to ``keep``, which holds it as long as its owner
    lives (a prepared launch's: freed with it); ``keep=None`` keeps it for the process (:data:`_owned`).  A capture's
    workspace is kept for the process: nothing here knows when a graph is dropped.

    Raises:
        ShapeError: the workspace would exceed 4 GiB (the kernel addresses it with u32 byte offsets).
    """
    ws = spec.workspace
    if ws is None:
        return ()
    if num_sms is None:
        from ptxgen.runtime import driver

        num_sms = driver.device_info(ordinal).sm_count if spec.grid.split_tiles != "all" else 1  # "all": unused
    cta_tiles = ws.cta_tiles_for(spec.grid, m, n, num_sms)
    nbytes = ws.bytes(cta_tiles)
    if nbytes >= _U32_LIMIT:
        raise ShapeError(f"M={m}, N={n}: config {spec.name} (schedule.split_k={ws.split_k}) needs a {nbytes} B split-K "
                         f"workspace; must be < 4 GiB (u32 offsets): use a config with a smaller split_k")
    counters = ws.counters_offset(cta_tiles)
    if stream is None:
        buf = _new_workspace(nbytes, counters, device)
        if keep is not None:
            keep.append(buf)
        else:
            with _lock:
                _owned.append(buf)
        return (buf.data_ptr(),)
    key = (ordinal, stream, capture_of(device, stream), spec.name, spec.kernel, ws, nbytes)
    buf = _workspaces.get(key)
    if buf is None:
        with _lock:
            buf = _workspaces.get(key)
            if buf is None:
                buf = _workspaces[key] = _new_workspace(nbytes, counters, device)
    return (buf.data_ptr(),)


def _new_workspace(nbytes: int, counters: int, device: Any) -> Any:
    """A split-K workspace of ``nbytes`` bytes (torch uint8 on ``device``) whose counters, from byte ``counters``
    on, are 0; under CUDA-graph capture the allocation comes from the graph's pool and the fill is a graph node."""
    import torch

    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    buf[counters:].zero_()
    return buf


def capture_of(device: Any, stream: int) -> int | None:
    """The id of the CUDA-graph capture that ``stream`` is recording (unique in the process), or None when it is not
    capturing (always None on the CPU)."""
    if str(device) == "cpu":
        return None
    import torch

    if not torch.cuda.is_current_stream_capturing():
        return None
    from ptxgen.runtime import driver

    return driver.capture_id(stream)


def _ordinal(a: Any) -> int:
    import torch

    return a.device.index if a.device.index is not None else torch.cuda.current_device()


# --------------------------------------------------------------------------- launch


class PreparedGemm(NamedTuple):
    """A checked, encoded GEMM launch: call :meth:`launch` to enqueue it (again and again).

    Holds references to A, B and D so the tensor maps stay valid.

    Attributes:
        a, b, out: the operands (``out`` allocated by :func:`prepare` if not given).
        kernel: the loaded kernel.
        params: packed kernel parameters.
        grid_x: CTAs in the grid.
        ordinal: CUDA device index.
    """

    a: Any
    b: Any
    out: Any
    kernel: Any
    params: Any
    grid_x: int
    ordinal: int

    def launch(self, stream: int | None = None) -> Any:
        """Enqueue the kernel on ``stream`` (default: torch's current stream); returns ``out``."""
        if stream is None:
            stream = current_stream(self.ordinal)
        self.kernel.launch(self.grid_x, self.params, stream)
        return self.out


class _Family(NamedTuple):
    """What a kernel family's call adds to the common path: its input check and the configs it runs.

    Attributes:
        kernel: the family's name for the chooser (``"gemm"``, ``"dual_gemm"``).
        check: ``check(a, *bs, out)`` -> ``(M, N, K)``, raising ShapeError: the rules every call keeps (layouts the
            kernel cannot take are staged); ``bs`` are the family's B operands (``b``; ``b1, b2``), each ``[N, K]``
            with one tensor map.
        refuse: ``refuse(spec)`` -> the ConfigError message for a launch spec of another family, or None.
        names: the names of the operands after A in messages (``b``; ``b1, b2``; ``b, scale_a, scale_b``).
        out_in_place: the kernel writes D as it is (no staging D): ``out`` must be row-major, 16-byte aligned.
        fallback: the config a fused call without ``config`` takes when the shape's choice cannot take its
            expression (None: :data:`EPILOGUE_FALLBACK_CONFIG`).
    """

    kernel: str
    check: Callable[..., tuple[int, int, int]]
    refuse: Callable[[Any], str | None]
    names: tuple[str, ...] = ("b",)
    out_in_place: bool = False
    fallback: str | None = None


def _grouped_refuses(spec: Any) -> str | None:
    if spec.extra.get("grouped"):
        return (f"config {spec.name}: a grouped config (schedule.grouped={spec.extra['grouped']}); use "
                "ptxgen.grouped_gemm")
    return None


def _gemm_refuses(spec: Any) -> str | None:
    if why := _grouped_refuses(spec):
        return why
    if "b2" in spec.tensor_maps:
        return f"config {spec.name}: a dual GEMM config; use ptxgen.dual_gemm(a, b1, b2)"
    if "scale_a" in spec.tensor_maps:
        return f"config {spec.name}: an FP8 config (operands: fp8); use ptxgen.gemm_fp8(a, b, scale_a, scale_b)"
    if "sfa" in spec.tensor_maps:
        return _mxfp8_refusal(spec)
    return None


def _mxfp8_refusal(spec: Any) -> str:
    return (f"config {spec.name}: an MXFP8 config (operands: mxfp8, sm_100a) has no launch path yet; "
            "ptxgen.runtime.fp8.to_mx converts the recipe's operands to its form (docs/fp8.md)")


def _dual_refuses(spec: Any) -> str | None:
    if "b2" not in spec.tensor_maps:
        return f"config {spec.name}: a GEMM config; dual_gemm needs a dual_* config (kernel: dual_gemm)"
    if "sfa" in spec.tensor_maps:
        return f"config {spec.name}: an NVFP4 config (operands: nvfp4); use ptxgen.dual_gemm_nvfp4"
    return None


_GEMM = _Family("gemm", check_gemm_operands, _gemm_refuses)
_DUAL = _Family("dual_gemm", check_dual_gemm_operands, _dual_refuses, names=("b1", "b2"))


def _checked_setup(family: _Family, a: Any, bs: tuple, out: Any,
                   config: Any) -> tuple[LoadedKernel | None, int, int, int, int, int]:
    """Every input check, the config resolved, the kernel loaded: ``(loaded, ordinal, m, n, k, grid_x)``;
    ``loaded`` is None (nothing resolved or loaded) when M, N or K is 0."""
    from ptxgen.runtime import driver

    m, n, k = family.check(a, *bs, out)
    if not (m and n and k):
        return None, -1, m, n, k, 0
    ordinal = _ordinal(a)
    driver.ensure_context(ordinal)
    info = driver.device_info(ordinal)
    loaded = loaded_kernel(resolve_config(config, m, n, k, ordinal, family.kernel), ordinal)
    spec = loaded.spec
    refused = family.refuse(spec)
    if refused:
        raise ConfigError(refused)
    check_arch(spec.name, spec.arch, info.capability)
    return loaded, ordinal, m, n, k, _grid_x(spec, m, n, _sm_slots(loaded, info.sm_count))


def _sm_slots(loaded: LoadedKernel, sm_count: int) -> int:
    """SMs a persistent grid of ``loaded`` fills at once: the device's ``sm_count``, or for a cluster of more than 2
    CTAs the co-resident clusters' (:attr:`ptxgen.runtime.module.Kernel.sm_slots`, one occupancy query per kernel;
    every GPC of an H100 holds whole pairs)."""
    return sm_count if loaded.spec.cluster[0] <= 2 else loaded.kernel.sm_slots


def _grid_x(spec: Any, m: int, n: int, sm_count: int) -> int:
    """The launch's grid for the caller's ``M x N`` D (the kernel's ``(m, n)`` and N rounded up as it runs) on
    ``sm_count`` SMs (:attr:`ptxgen.runtime.module.Kernel.sm_slots`)."""
    return spec.grid.grid_x(*kernel_mn(spec, m, _round_up(n, spec.n_multiple)), sm_count)


def swap_ab(spec: Any) -> bool:
    """Whether the kernel of ``spec`` is swap-AB (``schedule.swap_ab``): it computes ``D^T = B @ A^T`` and stores
    it transposed, so it takes B as its A operand, A as its B operand and the shape ``(N, M, K)``."""
    return bool(spec.extra.get("swap_ab"))


def kernel_mn(spec: Any, m: int, n: int) -> tuple[int, int]:
    """The kernel's ``(m, n)`` for a caller's ``M x N`` D: ``(N, M)`` for a swap-AB kernel, else ``(M, N)``."""
    return (n, m) if swap_ab(spec) else (m, n)


def kernel_args(spec: Any, a_map: Any, b_map: Any, m: int, n: int) -> tuple[Any, Any, int, int]:
    """The kernel's A and B tensor-map arguments and its ``m``, ``n`` for the caller's A and B maps and ``M x N``
    D: traded for a swap-AB kernel (:func:`swap_ab`), as they are otherwise."""
    return (b_map, a_map, n, m) if swap_ab(spec) else (a_map, b_map, m, n)


def prepare(a: Any, b: Any, out: Any = None, config: Any = None) -> PreparedGemm:
    """Check inputs, load the kernel, encode tensor maps and pack parameters; no launch.

    Args: see :func:`gemm`; but the operands must be what the kernel takes as they are (no staging: row-major
    contiguous, 16-byte aligned, K a multiple of the config's ``k_multiple``, N of its ``n_multiple``;
    :func:`check_gemm_inputs`).

    Raises:
        ShapeError: a bad input (before any driver call; ``out`` untouched).
        ConfigError: no default config for the device, or the config's arch does not match it.
        CudaError: a driver call failed.
    """
    import torch

    from ptxgen.runtime.module import KernelParams
    from ptxgen.runtime.tensormap import encode_tiled

    check_gemm_inputs(a, b, out)  # prepare() takes no staging: the kernel's own layout, before any driver call
    loaded, ordinal, m, n, k, grid_x = _checked_setup(_GEMM, a, (b,), out, config)
    check_gemm_inputs(a, b, out, loaded.spec.k_multiple, n_multiple=loaded.spec.n_multiple)
    if "watchdog" in loaded.spec.extra:
        from ptxgen import knobs

        raise ConfigError(f"{knobs.WATCHDOG} is set: prepare() launches without the watchdog's record buffer; "
                          f"use gemm() (which checks the record after each launch) or unset {knobs.WATCHDOG}")
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    maps = loaded.spec.tensor_maps
    # D's tensor map needs 16-byte rows; for other N the sm_90a kernels store D directly (tmap_d unused)
    d_map = d_map_ok(loaded.spec, n)
    spec = loaded.spec
    if spec.workspace is not None or swap_ab(spec):  # split-K, swap-AB: packed by the fast-path launcher
        pd = out.data_ptr()
        ka, kb, km, kn = kernel_args(spec, (a.data_ptr(), m, k, k), (b.data_ptr(), n, k, k), m, n)
        held: list = []  # the launch's own split-K workspace: alive as long as the prepared launch
        launch = _Packed(loaded.launcher, spec, (ka, kb, (pd, m, n, n) if d_map else None),
                         (pd, km, kn, k, *split_k_workspace(spec, km, kn, a.device, ordinal, None, keep=held)), held)
        return PreparedGemm(a=a, b=b, out=out, kernel=launch, params=None, grid_x=grid_x, ordinal=ordinal)
    tmaps = (encode_tiled(a, maps["a"]), encode_tiled(b, maps["b"]), encode_tiled(out, maps["d"]) if d_map else None)
    params = KernelParams(tmaps, out.data_ptr(), m, n, k)
    return PreparedGemm(a=a, b=b, out=out, kernel=loaded.kernel, params=params, grid_x=grid_x,
                        ordinal=ordinal)


class _Packed:
    """A prepared launch through the fast-path launcher (kernels whose signature KernelParams does not pack).

    Stands where :class:`~ptxgen.runtime.module.Kernel` does in a :class:`PreparedGemm`: ``spec`` and ``launch``;
    ``held``: the tensors its parameters point at that nothing else keeps alive (a split-K workspace).
    """

    def __init__(self, launcher: Any, spec: Any, maps: tuple, scalars: tuple, held: Sequence[Any] = ()):
        self.launcher, self.spec, self.maps, self.scalars, self.held = launcher, spec, maps, scalars, held

    def launch(self, grid_x: int, params: Any, stream: int) -> None:
        self.launcher.launch(grid_x, self.maps, self.scalars, stream)


class _Call:
    """Everything about a call signature that does not depend on the pointers (see module docstring), for any
    kernel family: A, the family's B operands and D, one tensor map each, one launch.

    ``call(a, b, out)`` (GEMM) or ``call(a, b1, out, b2)`` (dual GEMM; the second B last, so a GEMM call needs
    no tuple of operands): the per-pointer checks (16-byte alignment,
    ``out`` not overlapping an input; a failure goes to :meth:`misfit`: the family's check raises its ShapeError,
    or an input whose pointer is misaligned is staged), ``out`` allocated when None, then one :meth:`ptxgen.runtime.fastpath.Launcher.launch` on torch's current stream.
    """

    __slots__ = ("config", "by_id", "launcher", "spec", "ordinal", "m", "n", "k", "grid_x", "d_map",
                 "a_bytes", "b_bytes", "d_bytes", "new_out", "check", "split_k", "family", "loaded", "device", "staged",
                 "epi_maps", "swap", "capturing", "ws_memo", "layouts", "spans", "in_place", "k_caller")

    def __init__(self, family: _Family, config: Any, by_id: bool, loaded: LoadedKernel, ordinal: int, device: Any,
                 m: int, n: int, k: int, grid_x: int, in_place: Staging | None = None):
        """``k``: the caller's K.  ``in_place``: the signature's staging plan, every input read where it lies
        (:meth:`Staging.in_place`: at a pitch, or MN-major; the kernel runs ``in_place.k_run``); None: every input
        row-major at pitch K."""
        import torch

        self.config, self.by_id = config, by_id
        self.launcher, self.spec = loaded.launcher, loaded.spec
        self.ordinal = ordinal
        self.in_place = plan = in_place or Staging(k, n, (k, k, k), False)
        self.m, self.n, self.k, self.grid_x = m, n, plan.k_run, grid_x
        self.k_caller = k
        self.d_map = d_map_ok(loaded.spec, n)
        self.epi_maps = epilogue_maps(loaded.spec)
        # per input (A, B, B2): its tensor map's (rows, cols, pitch) in elements and the bytes it spans
        inputs = [_map_layout(rows, k, p, t_mn)
                  for rows, p, t_mn in zip((m, n, n), plan.pitches, plan.mn or (False,) * len(plan.pitches))]
        self.layouts, self.spans = tuple(lay for lay, _ in inputs), tuple(span for _, span in inputs)
        self.a_bytes, self.b_bytes, self.d_bytes = self.spans[0], self.spans[1], 2 * m * n
        self.new_out = functools.partial(torch.empty, (m, n), dtype=torch.bfloat16, device=device)
        self.check = family.check
        self.split_k = loaded.spec.workspace is not None  # split-K: the workspace of the launch's stream, per call
        on_gpu = getattr(device, "type", device) == "cuda"
        self.capturing = torch.cuda.is_current_stream_capturing if self.split_k and on_gpu else None
        self.ws_memo: tuple = (None, ())  # (stream, workspace arguments) of the last launch outside capture
        self.swap = swap_ab(loaded.spec)  # swap-AB: B is the kernel's A, A its B, (N, M) its (m, n)
        self.family, self.loaded, self.device = family, loaded, device
        self.staged: _StagedCall | None = None

    def __call__(self, a: Any, b: Any, out: Any, b2: Any = None, epi: tuple = ()) -> Any:
        m, n, k = self.m, self.n, self.k
        pa, pb = a.data_ptr(), b.data_ptr()
        if out is None:
            out = self.new_out()
            pd, d_end = out.data_ptr(), -1  # a fresh D overlaps nothing
        else:
            pd = out.data_ptr()
            d_end = pd + self.d_bytes
        b_bytes = self.b_bytes
        bad = ((pa | pb | pd) & (_ALIGN - 1) or (pa < d_end and pd < pa + self.a_bytes)
               or (pb < d_end and pd < pb + b_bytes))
        d_map = (pd, m, n, n) if self.d_map else None
        layouts = self.layouts  # their columns: the caller's K (TMA fills the kernel's K past it with zeros)
        if b2 is None:
            maps = ((pa, *layouts[0]), (pb, *layouts[1]), d_map)
        else:
            p2 = b2.data_ptr()
            bad = bad or p2 & (_ALIGN - 1) or (p2 < d_end and pd < p2 + self.spans[2])
            maps = ((pa, *layouts[0]), (pb, *layouts[1]), (p2, *layouts[2]), d_map)
        if bad:  # an overlap or a misaligned pointer: the staged call checks (raising) or copies the operand
            return self.misfit(a, b, out, b2, epi)
        if self.epi_maps:  # an [M, N] epilogue operand read through the staging ring: its map after D's
            maps += tuple((epi[i], m, n, n) if d_map else None for i in self.epi_maps)
        if self.swap:  # a GEMM only (no B2; no staged operand: swap-AB stores directly, ptxgen.config)
            m, n, maps = n, m, (maps[1], maps[0], d_map)
        stream = launch_stream(self.ordinal)
        ws = self.workspace(stream, m, n) if self.split_k else ()
        self.launcher.launch(self.grid_x, maps, (pd, m, n, k, *ws, *epi), stream)
        return out

    def workspace(self, stream: int, m: int, n: int) -> tuple[int, ...]:
        """The split-K workspace arguments for a launch of this signature (kernel ``m`` x ``n``) on ``stream``:
        :func:`split_k_workspace`'s, remembered for the last stream outside graph capture.  The buffer they point
        at is never freed (:data:`_workspaces` keeps it for the process); a captured launch gets its capture's, as
        :func:`split_k_workspace` says: a capture is never answered from the memo."""
        capturing = self.capturing is not None and self.capturing()
        last_stream, last_ws = self.ws_memo  # one read: another thread may replace the pair, never half of it
        if stream == last_stream and not capturing:
            return last_ws
        ws = split_k_workspace(self.spec, m, n, self.device, self.ordinal, stream)
        if not capturing:
            self.ws_memo = (stream, ws)
        return ws

    def fused(self, a: Any, bs: tuple, out: Any, epi: tuple) -> Any:
        """A fused call (:func:`fused`): ``bs`` the family's B operands, ``epi`` the epilogue's parameters."""
        return self(a, bs[0], out, bs[1] if len(bs) > 1 else None, epi)

    def misfit(self, a: Any, b: Any, out: Any, b2: Any = None, epi: tuple = ()) -> Any:
        """A call whose pointers break a rule the signature cannot show: the staged call of this signature checks
        (an overlap or a misaligned row-major ``out`` raises ShapeError) and copies each misaligned input."""
        staged = self.staged
        if staged is None:
            staged = self.staged = _StagedCall(self.family, self.config, self.by_id, self.loaded, self.ordinal,
                                               self.device, self.m, self.n, self.k_caller, self.grid_x, self.in_place)
            staged.new_out = self.new_out  # a fused call's D type (an e4m3 D is float8_e4m3fn, not bf16)
        return staged(a, b, out, b2, epi)


def _map_layout(rows: int, k: int, pitch: int, mn: bool) -> tuple[tuple[int, int, int], int]:
    """An input's tensor map as ``(rows, cols, pitch)`` in elements, and the bytes from its first element to the end
    of its last: ``[rows, K]`` row-major at ``pitch``, or MN-major (the ``[K, rows]`` view at ``pitch``)."""
    r, c = (k, rows) if mn else (rows, k)
    return (r, c, pitch), 2 * ((r - 1) * pitch + c)


def d_map_ok(spec: Any, n: int) -> bool:
    """The kernel stores D through its tensor map at this N: it has one and D's rows are whole 16-byte groups (N % 8
    == 0 for a 16-bit D, N % 16 for an e4m3 D's UINT8 map; PTX ISA "Tensor maps": 16-byte global strides).  The
    sm_90a kernels test the same in-kernel (``plan.epilogue.store_n_multiple``) and store directly otherwise."""
    d = spec.tensor_maps.get("d")
    return d is not None and n * d.elem_bytes % 16 == 0


def epilogue_maps(spec: Any) -> tuple[int, ...]:
    """Per tensor-map parameter after D's (``tmap_tile_<name>``: an ``[M, N]`` epilogue operand read through the
    staging ring), the index of its operand's address among the epilogue arguments (``epi_<name>`` in the
    signature's order of ``epi_`` parameters)."""
    epi_params = [name for name, kind in spec.params if name.startswith("epi_")]
    return tuple(epi_params.index("epi_" + name.removeprefix("tmap_tile_")) for name, kind in spec.params
                 if kind == "tensor_map" and name.startswith("tmap_tile_"))


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


class Staging(NamedTuple):
    """How a call signature's operands reach the kernel (:func:`staging_plan`); pure data.

    Attributes:
        k_run: the K the kernel runs: K rounded up to the config's ``k_multiple`` (elements).  Each input's
            tensor map keeps the real K as its width, so TMA fills the columns from K to ``k_run`` with zeros.
        n_run: the N the kernel runs: N rounded up to the config's ``n_multiple`` (B's map keeps N rows; TMA
            fills the rest with zeros, so D's extra columns are never copied out).
        pitches: per input (A, then each B), the row pitch in elements at which the kernel reads it in place
            (a 16-byte multiple, >= K), or None: copied into a staging tensor of pitch K rounded up to 8.  For an
            MN-major input (``mn``), the pitch of its K rows (>= its rows), or None: copied into a ``[K,
            round_up(rows, 8)]`` staging tensor, MN-major as the kernel reads it.
        stage_d: the kernel writes a staging D ``[M, n_run]`` that is then copied into ``out``.
        mn: per input, whether the kernel reads it MN-major (its tensor map's ``major``, :func:`majors_config`);
            () when none is.
    """

    k_run: int
    n_run: int
    pitches: tuple[int | None, ...]
    stage_d: bool
    mn: tuple[bool, ...] = ()

    def legal(self, n: int, k: int) -> bool:
        """Whether the call needs nothing of this: every input row-major at pitch K, read where it lies."""
        return self.k_run == k and self.n_run == n and not self.stage_d and all(p == k for p in self.pitches) and not self.mn

    def in_place(self, n: int) -> bool:
        """Whether the kernel reads every input where it lies (row-major at a pitch, or MN-major; K may be short of
        ``k_run``: TMA fills the rest with zeros) and writes ``out`` itself: the fast :class:`_Call` with these
        layouts; a misaligned pointer is still staged, per call."""
        return self.n_run == n and not self.stage_d and None not in self.pitches


def _pitch(t: Any) -> int | None:
    """The row pitch at which TMA reads ``t`` ``[rows, K]`` in place (alignment aside: checked per call), or None."""
    (rows, cols), (s0, s1) = t.shape, t.stride()
    if cols > 1 and s1 != 1:
        return None
    if rows == 1:
        return _round_up(cols, ELEMS_PER_16B)
    return s0 if s0 % ELEMS_PER_16B == 0 and s0 >= cols else None


def mn_pitch(t: Any) -> int | None:
    """The K-row pitch at which TMA reads ``t`` ``[rows, K]`` in place as an MN-major operand, or None.

    ``t`` must be the transposed view of a row-major ``[K, rows]`` tensor (``w.T``): rows contiguous and a multiple
    of 8 (the map's width in whole 16-byte groups), its K stride a multiple of 8 elements (16 bytes) and >= rows.
    """
    (rows, cols), (s0, s1) = t.shape, t.stride()
    if rows % ELEMS_PER_16B or (rows > 1 and s0 != 1):
        return None
    return s1 if s1 % ELEMS_PER_16B == 0 and s1 >= rows else None


def _mn_inputs(spec: Any, n_inputs: int) -> tuple[bool, ...]:
    """Per caller input (A, then each B), whether the kernel of ``spec`` reads it MN-major (swap-AB: the caller's
    A is the kernel's B)."""
    maps = spec.tensor_maps
    mn = tuple(maps[name].major == "mn" if name in maps else False for name in ("a", "b", "b2")[:n_inputs])
    return (mn[1], mn[0], *mn[2:]) if swap_ab(spec) else mn


def staging_plan(spec: Any, a: Any, bs: tuple, out: Any) -> Staging:
    """Which operands of a checked call (:func:`check_gemm_operands`) go through staging tensors, from shapes and
    strides alone (an input's alignment is checked per call, and a misaligned one copied).

    Args:
        spec: the kernel's launch spec (``k_multiple``, ``n_multiple``, each operand map's ``major``).
        a, bs: A ``[M, K]`` and the B operands ``[N, K]``.
        out: D ``[M, N]`` or None.
    """
    n, k_run = bs[0].shape[0], _round_up(a.shape[1], spec.k_multiple)
    n_run = _round_up(n, spec.n_multiple)
    mn = _mn_inputs(spec, 1 + len(bs))
    return Staging(k_run, n_run, tuple(mn_pitch(t) if t_mn else _pitch(t) for t, t_mn in zip((a, *bs), mn)),
                   n_run != n or (out is not None and not _row_major(out)), mn if any(mn) else ())


class _StagedCall(_Call):
    """A call signature some of whose operands the kernel cannot take as they are (module docstring, "Staging").

    Per call: the family's check (before anything is allocated or launched), then each input that has no in-place
    pitch or whose pointer is misaligned copied into a new ``[rows, round_up(K, 8)]`` tensor, D a new
    ``[M, n_run]`` tensor when staged, one launch, and D's ``[M, N]`` copied into ``out``.  Every staging tensor
    comes from torch's caching allocator on the current stream and is released when the call returns.
    """

    __slots__ = ("plan", "k_true", "n_true", "k_pitch")

    def __init__(self, family: _Family, config: Any, by_id: bool, loaded: LoadedKernel, ordinal: int, device: Any,
                 m: int, n: int, k: int, grid_x: int, plan: Staging):
        super().__init__(family, config, by_id, loaded, ordinal, device, m, plan.n_run, plan.k_run, grid_x)
        self.plan, self.k_true, self.n_true = plan, k, n
        self.k_pitch = _round_up(k, ELEMS_PER_16B)

    def __call__(self, a: Any, b: Any, out: Any, b2: Any = None, epi: tuple = ()) -> Any:
        import torch

        inputs = (a, b) if b2 is None else (a, b, b2)
        self.check(a, b, out) if b2 is None else self.check(a, b, b2, out)
        m, k, k_pitch = self.m, self.k_true, self.k_pitch
        maps, held = [], []
        for t, pitch, mn in zip(inputs, self.plan.pitches, self.plan.mn or (False,) * len(inputs)):
            p = t.data_ptr()
            if mn:  # read MN-major: the map is the [K, rows] view (module docstring, "MN-major operands")
                rows = t.shape[0]
                if pitch is None or p & (_ALIGN - 1):
                    pitch = _round_up(rows, ELEMS_PER_16B)
                    staged = torch.empty((k, pitch), dtype=t.dtype, device=self.device)
                    staged[:, :rows].copy_(t.T)
                    held.append(staged)
                    p = staged.data_ptr()
                maps.append((p, k, rows, pitch))
                continue
            if pitch is None or p & (_ALIGN - 1):
                staged = torch.empty((t.shape[0], k_pitch), dtype=t.dtype, device=self.device)
                staged[:, :k].copy_(t)
                held.append(staged)
                p, pitch = staged.data_ptr(), k_pitch
            maps.append((p, t.shape[0], k, pitch))
        d = self.new_out() if self.plan.stage_d or out is None else out
        pd = d.data_ptr()
        maps.append((pd, m, self.n, self.n) if self.d_map else None)
        maps += [(epi[i], m, self.n_true, self.n_true) if self.d_map else None for i in self.epi_maps]
        maps[0], maps[1], km, kn = kernel_args(self.spec, maps[0], maps[1], m, self.n)  # traded for swap-AB
        stream = launch_stream(self.ordinal)
        ws = self.workspace(stream, km, kn) if self.split_k else ()
        self.launcher.launch(self.grid_x, tuple(maps), (pd, km, kn, self.k, *ws, *epi), stream)
        if not self.plan.stage_d:
            return d
        d = d[:, :self.n_true]
        if out is None:
            return d.contiguous()
        return out.copy_(d)


class _EmptyCall:
    """A call signature with M, N or K = 0 (as ``torch.matmul``): no kernel; D is empty, or zeros when K = 0."""

    __slots__ = ("config", "by_id", "check", "m", "n", "k", "device")

    def __init__(self, family: _Family, config: Any, by_id: bool, m: int, n: int, k: int, device: Any):
        self.config, self.by_id, self.check = config, by_id, family.check
        self.m, self.n, self.k, self.device = m, n, k, device

    def __call__(self, a: Any, b: Any, out: Any, b2: Any = None, epi: tuple = ()) -> Any:
        import torch

        self.check(a, b, out) if b2 is None else self.check(a, b, b2, out)
        if out is None:
            return torch.zeros((self.m, self.n), dtype=torch.bfloat16, device=self.device)
        return out.zero_() if self.k == 0 else out


def _new_call(family: _Family, key: tuple | None, config: Any, a: Any, bs: tuple, out: Any) -> Any:
    """The full setup of a call signature not seen yet (or a ``Config`` object not the cached one): every check,
    the kernel loaded, the staging planned, the call (:class:`_Call`, :class:`_StagedCall` or :class:`_EmptyCall`)
    stored under ``key`` (None: not cacheable)."""
    loaded, ordinal, m, n, k, grid_x = _checked_setup(family, a, bs, out, config)
    by_id = key is not None and key[0].__class__ is tuple
    if loaded is None:
        call: Any = _EmptyCall(family, config, by_id, m, n, k, a.device)
    else:
        plan = staging_plan(loaded.spec, a, bs, out)
        variant = None if plan.legal(n, k) else _mn_major_variant(family, config, loaded.spec, a, bs, m, n, k, ordinal)
        if variant is not None:  # read the transposed views in place (module docstring, "MN-major operands")
            from ptxgen.runtime import driver

            loaded = loaded_kernel(variant, ordinal)
            grid_x = _grid_x(loaded.spec, m, n, _sm_slots(loaded, driver.device_info(ordinal).sm_count))
            plan = staging_plan(loaded.spec, a, bs, out)
        if plan.in_place(n):
            call = _Call(family, config, by_id, loaded, ordinal, a.device, m, n, k, grid_x, plan)
        else:
            call = _StagedCall(family, config, by_id, loaded, ordinal, a.device, m, n, k, grid_x, plan)
    _remember(key, call)
    return call


_majors_configs: dict[tuple, Any] = {}


def majors_config(config: Any, mn_a: bool, mn_b: bool) -> Any:
    """The config of ``config`` (name, path or ``Config``) reading the caller's A and/or B MN-major (``tma.major_a``
    / ``major_b`` of the kernel's operands: traded for swap-AB), named ``<name>_mn<a|b|ab>``; made once.  None when
    the config cannot read them so (:func:`ptxgen.config.validate`'s one-line reason, or the plan's budgets).
    """
    key = (_config_identity(config), mn_a, mn_b)
    if key in _majors_configs:
        return _majors_configs[key]
    from ptxgen.config import load_config
    from ptxgen.plan import make_plan

    suffix = "_mn" + ("a" if mn_a else "") + ("b" if mn_b else "")
    try:
        cfg = load_config(config)
        ka, kb = (mn_b, mn_a) if cfg.schedule.swap_ab else (mn_a, mn_b)
        hit = cfg.replace(**{"name": cfg.name[:64 - len(suffix)] + suffix, "tma.major_a": "mn" if ka else "k",
                             "tma.major_b": "mn" if kb else "k"})
        make_plan(hit)
    except ConfigError as exc:
        log.debug("ptxgen: config %s cannot read MN-major operands: %s", _config_identity(config)[1], exc)
        hit = None
    _majors_configs[key] = hit
    return hit


def _mn_major_variant(family: _Family, config: Any, spec: Any, a: Any, bs: tuple, m: int, n: int, k: int,
                      ordinal: int) -> Any:
    """The MN-major variant (:func:`majors_config`) a plain GEMM or dual GEMM call with a transposed view takes
    instead of a staging copy, or None: the caller's config, or for ``config=None`` the chooser's pick
    (``spec.name``) and then (GEMM) the cost model's ranking of the device's configs, the first that can read the
    view in place.  The dual GEMM's B1 and B2 share one tensor-map layout (``tma.major_b``): they are read
    MN-major only when both are such views."""
    if family.kernel not in (_GEMM.kernel, _DUAL.kernel) or spec.arch != "sm_90a":  # fused epilogues included
        return None
    mn_a, *mn_bs = (_pitch(t) is None and mn_pitch(t) is not None for t in (a, *bs))
    mn_b = all(mn_bs)
    if not (mn_a or mn_b):
        return None
    if config is not None:
        return majors_config(config, mn_a, mn_b)
    from ptxgen.runtime import driver
    from ptxgen.runtime.choose import ranked_configs

    ranked = ranked_configs(m, n, k, driver.device_info(ordinal)) if family.kernel == _GEMM.kernel else ()
    for name in (spec.name, *ranked):
        hit = majors_config(name, mn_a, mn_b)
        if hit is not None:
            return hit
    return None


def _remember(key: tuple | None, call: Any) -> None:
    """Store ``call`` under ``key`` in the call cache (None: not cacheable), clearing it when it is full."""
    if key is not None:
        with _lock:
            if len(_calls) >= _MAX_CALLS:
                _calls.clear()
            _calls[key] = call


def launch_stream(ordinal: int) -> int:
    """torch's current stream of device ``ordinal`` (a ``CUstream`` as int), with that device's primary context
    made current on this thread first when it may not be (once per thread and device switch)."""
    if getattr(_tls, "ordinal", None) != ordinal or _current_device() != ordinal:
        from ptxgen.runtime import driver

        driver.ensure_context(ordinal)
        _tls.ordinal = ordinal
    return current_stream(ordinal)


def _current_device() -> int:
    import torch

    get = getattr(torch._C, "_cuda_getDevice", None)
    return get() if get is not None else torch.cuda.current_device()


def _signature(a: Any, b: Any, out: Any, config: Any) -> tuple:
    """The cache key of a call: config identity and each operand's dtype, shape, stride and device."""
    ckey = config if config is None or config.__class__ is str else ("id", id(config))
    okey = None if out is None else (out.dtype, out.shape, out.stride(), out.device)
    return (ckey, a.dtype, a.shape, a.stride(), a.device, b.dtype, b.shape, b.stride(), b.device, okey)


def gemm(a: Any, b: Any, out: Any = None, config: Any = None, epilogue: Any = None, **operands: Any) -> Any:
    """``D = A @ B.T`` with a generated tensor-core kernel, on torch's current stream; with ``epilogue``, D is that
    expression of the accumulator, fused into the kernel (see :func:`fused`).

    Args:
        a: A ``[M, K]`` bf16 CUDA tensor, any strides (staged when TMA cannot read it in place: module
            docstring, "Staging").
        b: B ``[N, K]`` bf16 CUDA tensor on the same device, any strides (likewise).
        out: optional D ``[M, N]`` bf16 on the same device, overlapping neither input; written in place (through a
            staging D when it is not row-major contiguous); a row-major ``out`` must be 16-byte aligned.
        config: shipped config name (``"h100_128x256"``), YAML path, ``Config`` object, or None to
            choose per shape for the device (:func:`ptxgen.runtime.choose.choose`).
        epilogue: a :mod:`ptxgen.epi` expression (``"gelu(acc + bias[col])"`` or a node), or None (D = acc).
        operands: the expression's operands by name (``bias=t``), and optionally its outputs beside D by name
            (``d_scale=t``: written in place, :func:`check_epilogue_outputs`); see :func:`fused`.

    Returns:
        D (``out`` if given; a new row-major tensor otherwise); with outputs beside D (``e4m3(x, "d_scale")``,
        ``amax(...)``, ``store(...)``), the tuple ``(D, *outputs)`` in :func:`ptxgen.epi.outputs` order. The launch (and any staging copy) is asynchronous,
        like any torch op, on torch's current stream; it can be captured in a CUDA graph.

    Raises:
        ShapeError: a bad input; raised before any driver call, ``out`` untouched.
        ConfigError: no config fits the device.
        CudaError: a driver call failed (JIT log included for a PTX the driver rejects).
    """
    if epilogue is not None or operands:
        return fused(_GEMM, a, (b,), out, config, epilogue, operands)
    try:
        key = _signature(a, b, out, config)
        call = _calls.get(key)
    except (AttributeError, TypeError):  # not tensors: the full check names the problem
        key, call = None, None
    if call is None or (call.by_id and call.config is not config):
        call = _new_call(_GEMM, key, config, a, (b,), out)
    return call(a, b, out)


def dual_gemm(a: Any, b1: Any, b2: Any, out: Any = None, config: Any = None, epilogue: Any = None,
              **operands: Any) -> Any:
    """``D = silu(A @ B1.T) * (A @ B2.T)`` (the SwiGLU of a gated MLP) in one fused kernel, on torch's current stream.

    Args:
        a: A ``[M, K]`` bf16 CUDA tensor, any strides (staged as for :func:`gemm`).
        b1, b2: B1 (gate) and B2 (up) ``[N, K]`` bf16 on the same device, any strides.
        out: optional D ``[M, N]`` bf16, written in place (the rules of :func:`gemm`).
        config: a ``dual_*`` config (name, path or ``Config``), or None to choose among the shipped ``dual_*``
            configs of the device's arch by shape.
        epilogue: another expression of ``acc1`` (A @ B1.T) and ``acc2`` (A @ B2.T) than the default
            ``silu(acc1) * acc2``, with its ``operands`` by name (see :func:`fused`).

    Returns:
        D (``out`` if given); fp32 accumulation, silu(x) = x / (1 + exp(-x)) in fp32, rounded to bf16 once.

    Raises:
        ShapeError: a bad input, before any driver call (``out`` untouched).
        ConfigError: no dual config for the device, a GEMM config passed, or the arch does not match.
        CudaError: a driver call failed.
    """
    if epilogue is not None or operands:
        return fused(_DUAL, a, (b1, b2), out, config, epilogue, operands)
    try:
        key = _signature(a, b1, out, config) + (b2.dtype, b2.shape, b2.stride(), b2.device)
        call = _calls.get(key)
    except (AttributeError, TypeError):  # not tensors: the full check names the problem
        key, call = None, None
    if call is None or (call.by_id and call.config is not config):
        call = _new_call(_DUAL, key, config, a, (b1, b2), out)
    return call(a, b1, out, b2)


# --------------------------------------------------------------------------- fused epilogues

#: (kernel family, expression as given) -> (the checked expression, its canonical text)
_exprs: dict[tuple, tuple[Any, str]] = {}
#: (config identity, expression text) -> the Config with ``epilogue.expr`` set
_expr_configs: dict[tuple, Any] = {}
#: call key -> (the caller's Config object or None, the call)
_fused_calls: dict[tuple, tuple[Any, Any]] = {}
#: :func:`_fused_key` -> the signature's :class:`_FusedFast` (a call whose checks ran once for that signature)
_fused_fast: dict[tuple, Any] = {}
_OPERAND_DIMS = {"col": "[N]", "row": "[M]", "tile": "[M, N]"}
#: the config a fused call without ``config`` takes when the shape's choice cannot take its expression
EPILOGUE_FALLBACK_CONFIG = "h100_128x128"


def epilogue_expr(epilogue: Any, kernel: str) -> tuple[Any, str]:
    """(the :mod:`ptxgen.epi` expression of ``epilogue`` (text or node) for a kernel family, its canonical text),
    parsed once.

    Raises:
        ConfigError: not an expression of the language, or an accumulator the family does not have.
    """
    key = (kernel, epilogue)
    try:
        hit = _exprs.get(key)
    except TypeError:  # unhashable: the parser names it
        key, hit = None, None
    if hit is None:
        from ptxgen.ir.epilogue import for_kernel, to_text

        node = for_kernel(epilogue, kernel)
        hit = (node, to_text(node))
        if key is not None:
            _exprs[key] = hit
    return hit


def _torch_dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "e4m3": torch.float8_e4m3fn}[name]


def check_epilogue_operands(expr: Any, operands: dict, m: int, n: int, a: Any, out: Any,
                            require_cuda: bool = True) -> None:
    """The rules of a fused call's operands (pure; before any launch).

    Each operand of ``expr`` (:func:`ptxgen.ir.epilogue.operands`) must be given by its name, and nothing else:
    a bias ``[N]`` (``bias[col]``) or ``[M]`` (``bias[row]``) and a residual ``[M, N]`` in D's dtype (bf16, or fp16
    under ``fp16(...)``), a scale vector ``[M]`` / ``[N]`` in float32, a scalar scale a Python number; tensors on
    ``a``'s device, any strides (a non-contiguous one is copied per call), not overlapping ``out``.

    Raises:
        ShapeError: the first rule broken, naming the operand.
    """
    import torch

    from ptxgen.ir import epilogue as E

    want = {o.name: o for o in E.operands(expr)}
    outs = {name for name, _, _ in E.outputs(expr)}
    for name in operands:
        if name not in want and name not in outs:
            listed = ", ".join(want) or "none"
            raise ShapeError(f"{name}: not an operand of epilogue {E.to_text(expr)!r} (its operands: {listed})")
    d_dtype = _torch_dtype(E.out_dtype(expr))
    if d_dtype == torch.float8_e4m3fn:
        d_dtype = torch.bfloat16  # the 16-bit operands of an e4m3 D
    for name, o in want.items():
        if name not in operands:
            raise ShapeError(f"{name}: missing: epilogue {E.to_text(expr)!r} reads {E.to_text(o)}; pass {name}=...")
        t = operands[name]
        if o.along == "scalar":
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise ShapeError(f"{name}: got {type(t).__name__}: a scalar scale is a Python float")
            continue
        if not isinstance(t, torch.Tensor):
            raise ShapeError(f"{name}: got {type(t).__name__}: must be a torch.Tensor {_OPERAND_DIMS[o.along]}")
        shape = {"col": (n,), "row": (m,), "tile": (m, n)}[o.along]
        if tuple(t.shape) != shape:
            raise ShapeError(f"{name}: shape={tuple(t.shape)}: {E.to_text(o)} must be {_OPERAND_DIMS[o.along]} = {shape}")
        dtype = torch.float32 if o.kind == "scale" else d_dtype
        if t.dtype != dtype:
            raise ShapeError(f"{name}: dtype={t.dtype}: {E.to_text(o)} must be {dtype}")
        if t.device != a.device or (require_cuda and t.device.type != "cuda"):
            raise ShapeError(f"{name}: device={t.device}: must be on a's device {a.device}")
        if out is not None and _overlaps(out, t.reshape(1, -1) if t.dim() == 1 else t):
            raise ShapeError(f"out: memory overlaps {name}: D must not alias an input")


def check_epilogue_outputs(expr: Any, given: dict, m: int, n: int, a: Any, out: Any, inputs: tuple = (),
                           require_cuda: bool = True) -> dict:
    """The outputs beside D of ``expr`` (:func:`ptxgen.ir.epilogue.outputs`), each the tensor passed by its name or
    None (allocated at launch).  A passed output is written in place: contiguous, 4-byte aligned, on ``a``'s device,
    overlapping neither ``out``, another output nor an input; a block scale is float32 ``[M, ceil(N/128)]``, an
    amax float32 ``[M]`` (``"row"``) / ``[1]`` (``"tensor"``; max-reduced into what it holds), a stored tile
    ``[M, N]`` bf16 (fp16 under ``fp16(...)``).  Pure; before any launch.

    Raises:
        ShapeError: the first rule broken, naming the output.
    """
    import torch

    from ptxgen.ir import epilogue as E

    tile = torch.float16 if E.out_dtype(expr) == "f16" else torch.bfloat16
    found, seen = {}, [("out", out)] if out is not None else []
    seen += list(inputs)
    for name, kind, along in E.outputs(expr):
        t = given.get(name)
        found[name] = t
        if t is None:
            continue
        shape = E.output_shape(along, m, n)
        dtype = tile if kind == "store" else torch.float32
        what = f"{kind} output" + (f" along {along}" if kind == "amax" else "")
        if not isinstance(t, torch.Tensor):
            raise ShapeError(f"{name}: got {type(t).__name__}: the {what} is a torch.Tensor {shape} or not given")
        if tuple(t.shape) != shape:
            raise ShapeError(f"{name}: shape={tuple(t.shape)}: the {what} must be {shape}")
        if t.dtype != dtype:
            raise ShapeError(f"{name}: dtype={t.dtype}: the {what} must be {dtype}")
        if t.device != a.device or (require_cuda and t.device.type != "cuda"):
            raise ShapeError(f"{name}: device={t.device}: must be on a's device {a.device}")
        if not t.is_contiguous() or t.data_ptr() % 4:
            raise ShapeError(f"{name}: strides={t.stride()}: an output is written in place: contiguous and 4-byte aligned")
        for other, u in seen:
            if isinstance(u, torch.Tensor) and _overlaps(u.reshape(1, -1) if u.dim() == 1 else u,
                                                         t.reshape(1, -1) if t.dim() == 1 else t):
                raise ShapeError(f"{name}: memory overlaps {other}: an output must not alias another tensor")
        seen.append((name, t))
    return found


def _fused_family(family: _Family, d_dtype: Any) -> _Family:
    """``family`` whose check takes ``out`` of ``d_dtype`` (an fp16 expression writes fp16)."""
    base = family.check

    def check(a: Any, *rest: Any, require_cuda: bool = True) -> tuple[int, int, int]:
        *bs, out = rest
        m, n, k = base(a, *bs, None, require_cuda=require_cuda)
        if out is not None:
            _check_out(out, m, n, a, (("a", a), *zip(family.names, bs)), require_cuda, layout=family.out_in_place,
                       dtype=d_dtype)
        return m, n, k

    return family._replace(check=check)


def _expr_config(config: Any, expr: Any) -> Any:
    """The config of ``config`` (name, path or ``Config``) with ``epilogue.expr`` = ``expr``, made once.

    Raises:
        ConfigError: the config cannot take the expression (arch, register budget: the plan's one-line reason).
    """
    from ptxgen.ir.epilogue import to_text

    text = to_text(expr)
    key = (_config_identity(config), text)
    hit = _expr_configs.get(key)
    if hit is None:
        from ptxgen.config import load_config
        from ptxgen.plan import make_plan

        cfg = load_config(config)
        hit = cfg.replace(**{"epilogue.expr": text})
        make_plan(hit)  # the budgets, before anything is built or launched
        _expr_configs[key] = hit
    return hit


def epilogue_config(family: _Family, config: Any, expr: Any, chosen: bool,
                    ranked: Callable[[], Iterable[str]] | None = None) -> Any:
    """``config`` with ``epilogue.expr`` = ``expr`` (:func:`_expr_config`).  When ``config`` is the chooser's
    (``chosen``) and cannot take the expression (swap-AB takes elementwise expressions on a 16-bit D only; a block
    scale needs block_n % 128 == 0; the register budget): the first config of ``ranked()`` that can (the cost
    model's order for the shape, fastest first: :func:`ptxgen.runtime.choose.ranked_configs`), else the family's
    fallback (:data:`EPILOGUE_FALLBACK_CONFIG`; gemm_fp8: the FP8 one).  At M <= 16, where the chooser takes a
    swap-AB tile, the fixed fallback's 128-row tile runs the report half's five shapes at 0.51-0.67x torch's kernel,
    the ranking's first config that takes an e4m3 D at 0.84-0.99x (H100, plain kernels:
    docs/results/survey_h100_report_shipped.json; docs/performance.md, "Fused epilogues on the suite's
    projections").

    Raises:
        ConfigError: the config (a caller's, or the fallback) cannot take the expression: the plan's one line.
    """
    try:
        return _expr_config(config, expr)
    except ConfigError:
        if not chosen:
            raise
    for name in ranked() if ranked is not None else ():
        if name == config:
            continue
        try:
            return _expr_config(name, expr)
        except ConfigError:
            continue
    return _expr_config(family.fallback or EPILOGUE_FALLBACK_CONFIG, expr)


def fused_config(family: _Family, config: Any, expr: Any, m: int, n: int, k: int, info: Any) -> Any:
    """The config a fused call of ``(m, n, k)`` runs on a device (:class:`~ptxgen.runtime.driver.DeviceInfo` ``info``):
    ``config`` with the expression, or for None the chooser's pick for the shape, else (a GEMM whose pick cannot take
    the expression) the cost model's next config that can (:func:`epilogue_config`).

    Raises:
        ConfigError: as :func:`epilogue_config`.
    """
    if config is not None:
        return epilogue_config(family, config, expr, chosen=False)
    from ptxgen.runtime.choose import choose

    ranked = (lambda: ranked_configs(m, n, k, info)) if family.kernel == _GEMM.kernel else None
    return epilogue_config(family, choose(m, n, k, info, family.kernel), expr, chosen=True, ranked=ranked)


def fused(family: _Family, a: Any, bs: tuple, out: Any, config: Any, epilogue: Any, operands: dict) -> Any:
    """A GEMM (``bs = (b,)``), dual GEMM (``(b1, b2)``) or FP8 GEMM (``(b, scale_a, scale_b)``: ``acc`` the promoted
    accumulator) whose D is ``epilogue`` of the accumulator(s), fused.

    ``epilogue``: a :mod:`ptxgen.epi` expression, text (``"gelu(acc + bias[col])"``) or node; its operands come
    by name in ``operands`` (:func:`check_epilogue_operands`; one not 4-byte aligned, an ``[M, N]`` one not 16-byte
    aligned, is copied per call),
    and so may its outputs beside D (:func:`check_epilogue_outputs`); with outputs the call returns
    ``(D, *outputs)`` (:func:`ptxgen.epi.outputs` order), each output not given allocated (an amax zero-filled).
    An ``e4m3(...)`` D is ``torch.float8_e4m3fn``.  Every check (A, B, out, the expression, each
    operand, the config's plan) runs before any launch; ``out`` is untouched on an error.  The kernel is built
    once per (config, expression) (the config with ``epilogue.expr`` set: its own cache entry on disk), the call
    setup once per signature; then each call passes the operands' addresses (a scalar as its f32 bits) after
    the kernel's other parameters.

    Raises:
        ConfigError: not an expression, an accumulator the family lacks, or a config that cannot take it.
        ShapeError: a bad tensor or operand (one line, naming it); K = 0 with an epilogue.
    """
    fkey = _fused_key(family, a, bs, out, config, epilogue, operands)
    fast = _fused_fast.get(fkey) if fkey is not None else None
    if fast is not None:
        done = fast(a, bs, out, operands)
        if done is not None:
            return done
    import torch

    from ptxgen.ir import epilogue as E

    if epilogue is None:
        raise ShapeError(f"{', '.join(operands)}: operands given without an epilogue expression (epilogue=...)")
    expr, text = epilogue_expr(epilogue, family.kernel)
    d_dtype = _torch_dtype(E.out_dtype(expr))
    fam = _fused_family(family, d_dtype)
    m, n, k = fam.check(a, *bs, out)
    check_epilogue_operands(expr, operands, m, n, a, out)
    order = E.operands(expr)
    named = [(o.name, operands[o.name]) for o in order if o.along != "scalar"]
    outs = check_epilogue_outputs(expr, operands, m, n, a, out, (("a", a), *zip(family.names, bs), *named))
    if not (m and n):
        d = out if out is not None else torch.empty((m, n), dtype=d_dtype, device=a.device)
        return (d, *(_new_output(expr, name, t, m, n, a.device) for name, t in outs.items())) if outs else d
    if not k:
        raise ShapeError(f"K=0: a fused epilogue needs K >= 1 (a: {tuple(a.shape)})")
    sig = _signature(a, bs[0], out, config) + tuple((b.shape, b.stride()) for b in bs[1:])
    key = (sig, text, tuple((o.name, None if o.along == "scalar" else operands[o.name].stride())
                                       for o in order))
    owner, call = _fused_calls.get(key, (None, None))
    if call is None or (config is not None and not isinstance(config, str) and owner is not config):
        from ptxgen.runtime import driver

        ordinal = _ordinal(a)
        driver.ensure_context(ordinal)
        derived = fused_config(family, config, expr, m, n, k, driver.device_info(ordinal))
        call = (_new_fp8_call if family.kernel == _FP8.kernel else _new_call)(fam, None, derived, a, bs, out)
        if isinstance(call, (_Call, _Fp8Call)):
            call.new_out = functools.partial(torch.empty, (call.m, call.n), dtype=d_dtype, device=a.device)
        with _lock:
            if len(_fused_calls) >= _MAX_CALLS:
                _fused_calls.clear()
            _fused_calls[key] = (config, call)
    fast = _FusedFast(family, call, expr, order, operands, out, m, n, a.device)
    if fkey is not None and all(t is None for t in outs.values()):  # a passed output's overlaps are the call's
        with _lock:
            if len(_fused_fast) >= _MAX_CALLS:
                _fused_fast.clear()
            _fused_fast[fkey] = fast
    return fast(a, bs, out, operands)


def _f32_bits(value: float) -> int:
    """A scalar operand as the kernel's ``.b32`` parameter: its fp32 bits."""
    import struct

    return struct.unpack("<I", struct.pack("<f", float(value)))[0]


def _operand_align(along: str) -> int:
    """The byte alignment an epilogue operand is read at in place: an ``[M, N]`` tile's tensor map 16 (PTX ISA
    "Tensor maps": the global address a multiple of 16), a vector's per-thread pair loads 4."""
    return 16 if along == "tile" else 4


def _fused_key(family: _Family, a: Any, bs: tuple, out: Any, config: Any, epilogue: Any,
               operands: dict) -> tuple | None:
    """The key of a fused call's signature for :data:`_fused_fast`: the family, the expression as given, the config's
    name (None: chosen), and the dtype, shape, strides and device of every tensor (a scalar operand: its type); None
    when the call has no such key (a ``Config`` object, an unhashable expression, a non-tensor where one belongs:
    the full path names the problem)."""
    if config is not None and config.__class__ is not str:
        return None
    try:
        key = (family.kernel, epilogue, config, *((t.dtype, t.shape, t.stride(), t.device) for t in (a, *bs)),
               None if out is None else (out.dtype, out.shape, out.stride(), out.device),
               *((name, (t.dtype, t.shape, t.stride(), t.device) if hasattr(t, "data_ptr") else t.__class__)
                 for name, t in operands.items()))
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


class _FusedFast:
    """A fused call of one signature (:func:`_fused_key`) whose full checks passed once: per call only what the
    signature cannot show, each operand's address (``out`` overlapping it: None, and the full path raises; a
    misaligned one copied, as :func:`fused` says) and a scalar's type; each output beside D the one passed by its
    name, else allocated (the fast path is kept only for calls that pass none: a passed output's overlaps are the
    call's).  ``call(a, bs, out, operands)`` -> what :func:`fused` returns, or None; :func:`fused` launches through
    it once its full checks passed."""

    __slots__ = ("launch", "specs", "out_span", "outputs")

    def __init__(self, family: _Family, call: Any, expr: Any, order: tuple, operands: dict, out: Any, m: int,
                 n: int, device: Any):
        from ptxgen.ir.epilogue import outputs

        self.launch = ((lambda a, bs, d, epi: call(a, *bs, d, epi)) if family.kernel == _FP8.kernel
                       else call.fused)  # the FP8 call's own pointer checks before its launch
        self.specs = tuple((o.name, None, None, None) if o.along == "scalar" else
                           (o.name, _operand_align(o.along), operands[o.name].is_contiguous(),
                            _span(operands[o.name]))
                           for o in order)
        self.out_span = None if out is None else _span(out)
        self.outputs = tuple((name, functools.partial(_new_output, expr, name, None, m, n, device))
                             for name, _, _ in outputs(expr))

    def __call__(self, a: Any, bs: tuple, out: Any, operands: dict) -> Any:
        import torch

        if out is not None:
            d0 = out.data_ptr()
            d1 = d0 + self.out_span
        held, ptrs = [], []
        for name, align, contiguous, span in self.specs:
            t = operands[name]
            if align is None:
                if t.__class__ is bool or not isinstance(t, (int, float)):
                    return None
                ptrs.append(_f32_bits(t))
                continue
            p = t.data_ptr()
            if out is not None and p < d1 and d0 < p + span:
                return None
            if not contiguous or p % align:
                t = t.clone(memory_format=torch.contiguous_format)
                held.append(t)
                p = t.data_ptr()
            ptrs.append(p)
        if not self.outputs:
            return self.launch(a, bs, out, tuple(ptrs))
        results = [new() if operands.get(name) is None else operands[name] for name, new in self.outputs]
        ptrs += [t.data_ptr() for t in results]
        return (self.launch(a, bs, out, tuple(ptrs)), *results)


def _span(t: Any) -> int:
    """The bytes from a tensor's first element to the end of its last (:func:`_extent`; a vector as one row)."""
    start, end = _extent(t.reshape(1, -1) if t.dim() == 1 else t)
    return end - start


def _new_output(expr: Any, name: str, given: Any, m: int, n: int, device: Any) -> Any:
    """Output ``name`` of ``expr``: ``given``, or a new tensor (an amax zero-filled: it is max-reduced into)."""
    import torch

    from ptxgen.ir import epilogue as E

    if given is not None:
        return given
    kind, along = next((k, a) for nm, k, a in E.outputs(expr) if nm == name)
    shape = E.output_shape(along, m, n)
    dtype = (torch.float16 if E.out_dtype(expr) == "f16" else torch.bfloat16) if kind == "store" else torch.float32
    return (torch.zeros if kind == "amax" else torch.empty)(shape, dtype=dtype, device=device)


# --------------------------------------------------------------------------- planted kernels (watchdog tests)


def gemm_with_kernel(kernel: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``D = A @ B.T`` with a Kernel IR built outside a config (a planted or hand-changed kernel), for debugging.

    The kernel is emitted, JIT-compiled and loaded on every call (slow); its ``launch`` spec
    gives the grid and tensor maps.  A watched kernel (:func:`ptxgen.ir.watchdog.instrument`)
    runs through :class:`WatchedLauncher`.

    Raises:
        ShapeError / CudaError / DeadlockError: as :func:`ptxgen.runtime.api.gemm`.
    """
    return kernel_call(kernel, a, b, out)(a, b, out)


def kernel_call(kernel: Any, a: Any, b: Any, out: Any = None) -> Any:
    """Load ``kernel`` (emit, JIT, load) for operands shaped like ``a``, ``b``, ``out``; returns ``call(a, b, out)``.

    Raises:
        ShapeError / CudaError: as :func:`ptxgen.runtime.api.gemm`.
    """
    from ptxgen.build import kernel_ptx
    from ptxgen.runtime import driver
    from ptxgen.runtime.fastpath import Launcher
    from ptxgen import knobs
    from ptxgen.runtime.module import Kernel, compiler
    from ptxgen.runtime.watchdog import WatchedLauncher

    m, n, k = check_gemm_inputs(a, b, out)
    ordinal = _ordinal(a)
    driver.ensure_context(ordinal)
    spec = kernel.launch
    check_gemm_inputs(a, b, out, spec.k_multiple, n_multiple=spec.n_multiple)
    loaded_k = Kernel.from_cubin(compiler(knobs.read().jit)(kernel_ptx(kernel)), spec, ordinal)
    launcher = Launcher.for_kernel(loaded_k)
    if "watchdog" in spec.extra:
        launcher = WatchedLauncher(launcher, spec, ordinal)
    loaded = LoadedKernel(kernel=loaded_k, launcher=launcher, spec=spec)
    grid_x = spec.grid.grid_x(*kernel_mn(spec, m, n), _sm_slots(loaded, driver.device_info(ordinal).sm_count))
    return _Call(_GEMM, None, False, loaded, ordinal, a.device, m, n, k, grid_x)


# --------------------------------------------------------------------------- FP8 block-scaled GEMM
# DeepSeek-V3's recipe (docs/fp8.md): e4m3 A [M, K] and B [N, K], fp32 scale_a [M, ceil(K/128)] (per row and 128-K
# block) and scale_b [ceil(N/128), ceil(K/128)] (per 128 x 128 block of B), bf16 D.  The kernel's scale maps are the
# transposed scales, one k-block's scales contiguous (``[ceil(K/128), rows]``, a 16-byte row pitch); a scale tensor
# already laid out that way (``scale.T`` row-major, as DeepGEMM asks for) is read in place, any other is copied once
# per call (``rows x ceil(K/128)`` floats: a few microseconds).

FP8_K_MULTIPLE = 16  # e4m3 bytes per 16-byte TMA row stride
_F32_PER_16B = 4


def check_fp8_operands(a: Any, b: Any, scale_a: Any, scale_b: Any, out: Any = None, *,
                       require_cuda: bool = True) -> tuple[int, int, int]:
    """The rules :func:`gemm_fp8` keeps for every call; pure (no GPU, no driver call).

    Args:
        a: A ``[M, K]`` ``torch.float8_e4m3fn``, row-major contiguous, 16-byte aligned.
        b: B ``[N, K]`` ``torch.float8_e4m3fn`` on ``a``'s device, same rules.
        scale_a: ``[M, ceil(K / 128)]`` float32 on ``a``'s device, any strides.
        scale_b: ``[ceil(N / 128), ceil(K / 128)]`` float32 on ``a``'s device, any strides.
        out: D ``[M, N]`` bf16 on ``a``'s device, row-major contiguous, 16-byte aligned, overlapping no input; or None.
        require_cuda: check that the tensors are CUDA tensors (False lets CPU tests reach the later rules).

    Returns:
        ``(M, N, K)``; M, N or K may be 0.

    Raises:
        ShapeError: the first rule broken, naming the argument, its value and the rule.  K must be a multiple
            of 16 (K bytes of e4m3 per row; TMA needs 16-byte row strides).
    """
    import torch

    e4m3 = torch.float8_e4m3fn
    _check_tensor("a", a, "[M, K]", require_cuda, layout=False, dtype=e4m3)
    _check_tensor("b", b, "[N, K]", require_cuda, layout=False, dtype=e4m3)
    if b.device != a.device:
        raise ShapeError(f"b: device={b.device}: must be on a's device {a.device}")
    (m, k), (n, kb) = a.shape, b.shape
    if kb != k:
        raise ShapeError(f"b: shape={tuple(b.shape)}: K={kb} must equal a's K={k} (b is [N, K]; pass B, not B.T)")
    if k % FP8_K_MULTIPLE:
        raise ShapeError(f"K={k}: must be a multiple of {FP8_K_MULTIPLE} (K bytes of e4m3 per row; TMA needs 16-byte "
                         "row strides)")
    for name, t in (("a", a), ("b", b)):
        if t.numel() and not _row_major(t):
            raise ShapeError(f"{name}: shape={tuple(t.shape)} stride={t.stride()}: must be row-major contiguous; "
                             "call .contiguous()")
        if t.numel() and t.data_ptr() % _ALIGN:
            raise ShapeError(f"{name}: data_ptr={t.data_ptr():#x}: must be {_ALIGN}-byte aligned (TMA); call .clone()")
    kblocks, nblocks = -(-k // FP8_SCALE_BLOCK), -(-n // FP8_SCALE_BLOCK)
    for name, t, want, what in (("scale_a", scale_a, (m, kblocks), "[M, ceil(K/128)]"),
                                ("scale_b", scale_b, (nblocks, kblocks), "[ceil(N/128), ceil(K/128)]")):
        _check_tensor(name, t, what, require_cuda, layout=False, dtype=torch.float32)
        if tuple(t.shape) != want:
            raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be {what} = {want} (one fp32 scale per "
                             f"{'row' if name == 'scale_a' else '128 rows'} and 128-K block)")
        if t.device != a.device:
            raise ShapeError(f"{name}: device={t.device}: must be on a's device {a.device}")
    if out is not None:
        _check_out(out, m, n, a, (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)), require_cuda,
                   layout=True)
    return m, n, k


def _fp8_refuses(spec: Any) -> str | None:
    if why := _grouped_refuses(spec):
        return why
    if "sfa" in spec.tensor_maps and "b2" not in spec.tensor_maps:
        return _mxfp8_refusal(spec)
    if "scale_a" not in spec.tensor_maps:
        return f"config {spec.name}: not an FP8 config; gemm_fp8 needs an operands: fp8 config (fp8_*)"
    return None


#: the FP8 config a fused gemm_fp8 without ``config`` takes when the shape's choice cannot take the expression:
#: the most registers beside its accumulator (one consumer warpgroup: 240 per thread, 64 accumulator registers)
FP8_EPILOGUE_FALLBACK_CONFIG = "fp8_h100_64x128"
_FP8 = _Family("gemm_fp8", check_fp8_operands, _fp8_refuses, names=("b", "scale_a", "scale_b"), out_in_place=True,
               fallback=FP8_EPILOGUE_FALLBACK_CONFIG)


def _scale_map(t: Any, device: Any) -> tuple[tuple[int, int, int, int], Any]:
    """The kernel's map of a scale tensor (and the copy it reads, kept alive by the caller, or None).

    ``t`` is ``[rows, kblocks]`` (dense FP8, contiguous grouped scale_a) or ``[G, rows, kblocks]`` (grouped scale_b
    and masked scale_a; a 2-D tensor is the G = 1 case); the kernel reads it as a 2-D
    ``[kblocks, G x round_up(rows, 4)]`` map: one k-block's scales contiguous, each group's rows padded to whole
    16-byte groups so that a scale box starts 16-byte aligned (measured, not a documented rule: on the H100 a scale
    box at an unaligned column, or reaching past a row whose width is not a multiple of 16 bytes, raised "illegal
    instruction"; the row pitch is a 16-byte multiple as cuTensorMapEncodeTiled requires of global strides).  The
    padding scales only ever multiply rows of A past M (or M_max) or blocks of B past N, whose results are never
    stored, so they are not filled.

    Read in place (no copy) when ``t`` already has that layout: rows stride 1, groups ``round_up(rows, 4)`` apart,
    k-blocks a 16-byte multiple ``>= G x round_up(rows, 4)`` apart, 16-byte aligned, its storage holding the padded
    last row (``t.permute(2, 0, 1)`` of a ``[kblocks, G, round_up(rows, 4)]`` tensor, or for 2-D ``t`` DeepGEMM's
    ``get_col_major_tma_aligned_tensor``: ``t.T`` row-major with a 16-byte row pitch).  Otherwise one copy into a
    new ``[kblocks, G, round_up(rows, 4)]`` tensor (one kernel: ``rows x kblocks`` floats per group; a clone of the
    permuted view when ``rows`` is a multiple of 4).
    """
    if t.dim() == 2:
        t = t.unsqueeze(0)
    groups, rows, kblocks = t.shape
    pad = _round_up(rows, _F32_PER_16B)
    width = groups * pad
    s0, s1, s2 = t.stride()
    if (s1 == 1 or rows == 1) and (s0 == pad or groups == 1) and s2 % _F32_PER_16B == 0 and s2 >= width \
            and t.data_ptr() % _ALIGN == 0 \
            and t.untyped_storage().nbytes() // 4 >= t.storage_offset() + (kblocks - 1) * s2 + width:
        return (t.data_ptr(), kblocks, width, s2), None
    import torch

    if pad == rows:  # no padding: one clone (a new dense tensor), fewer host ops than empty + slice + copy_
        staged = t.permute(2, 0, 1).clone(memory_format=torch.contiguous_format)
        return (staged.data_ptr(), kblocks, width, width), staged
    staged = torch.empty((kblocks, groups, pad), dtype=torch.float32, device=device)
    staged[:, :, :rows].copy_(t.permute(2, 0, 1))
    return (staged.data_ptr(), kblocks, width, width), staged


class _Fp8Call:
    """A call signature of :func:`gemm_fp8`: the loaded kernel and grid; per call the pointer rules the signature
    cannot show (16-byte alignment, ``out`` overlapping no input; a break runs the family's full check, which
    raises), the scale maps (in place or a transposed copy) and one launch on torch's current stream (a fused
    epilogue's parameters after ``k``).  Dtypes, shapes, strides and devices are the signature's: a call that
    differs in one of them is another signature, set up with every check."""

    __slots__ = ("config", "by_id", "launcher", "ordinal", "m", "n", "k", "grid_x", "d_map", "device", "check",
                 "new_out", "spans")

    def __init__(self, family: _Family, config: Any, by_id: bool, loaded: LoadedKernel, ordinal: int, device: Any,
                 m: int, n: int, k: int, grid_x: int):
        import torch

        self.config, self.by_id, self.check = config, by_id, family.check
        self.launcher, self.ordinal, self.device = loaded.launcher, ordinal, device
        self.m, self.n, self.k, self.grid_x = m, n, k, grid_x
        self.d_map = d_map_ok(loaded.spec, n)
        self.new_out = functools.partial(torch.empty, (m, n), dtype=torch.bfloat16, device=device)
        self.spans = None  # bytes from data_ptr to the end of A, B, scale_a, scale_b: set by the first call

    def __call__(self, a: Any, b: Any, scale_a: Any, scale_b: Any, out: Any, epi: tuple = ()) -> Any:
        ins = (a, b, scale_a, scale_b)
        if self.spans is None:
            self.spans = tuple(end - start for start, end in map(_extent, ins))
        bad = (a.data_ptr() | b.data_ptr()) & (_ALIGN - 1)  # A and B are read in place by TMA, with or without out
        if out is not None:
            pd = out.data_ptr()
            d_end = pd + 2 * self.m * self.n
            bad = bad or pd & (_ALIGN - 1) or any(
                p < d_end and pd < p + span for p, span in ((t.data_ptr(), s) for t, s in zip(ins, self.spans)))
        if bad:
            self.check(a, b, scale_a, scale_b, out)  # raises the broken rule's ShapeError
        return self.launch(a, b, scale_a, scale_b, out, epi)

    def launch(self, a: Any, b: Any, scale_a: Any, scale_b: Any, out: Any, epi: tuple = ()) -> Any:
        """One launch on checked operands (``out`` None: a new D of the call's type)."""
        if out is None:
            out = self.new_out()
        m, n, k = self.m, self.n, self.k
        sa, held_a = _scale_map(scale_a, self.device)
        sb, held_b = _scale_map(scale_b, self.device)
        pd = out.data_ptr()
        maps = ((a.data_ptr(), m, k, k), (b.data_ptr(), n, k, k), sa, sb, (pd, m, n, n) if self.d_map else None)
        self.launcher.launch(self.grid_x, maps, (pd, m, n, k, *epi), launch_stream(self.ordinal))
        del held_a, held_b  # the caching allocator reuses them only after the launch on this stream
        return out

    def fused(self, a: Any, bs: tuple, out: Any, epi: tuple) -> Any:
        """A fused call (:func:`fused`, which checked every operand): ``bs`` = ``(b, scale_a, scale_b)``, ``epi``
        the epilogue's parameters."""
        return self.launch(a, *bs, out, epi)


def _new_fp8_call(family: _Family, key: tuple | None, config: Any, a: Any, bs: tuple, out: Any) -> _Fp8Call | None:
    """The full setup of a :func:`gemm_fp8` call signature (``bs`` = ``(b, scale_a, scale_b)``): every check, the
    kernel loaded, the call stored under ``key`` (None: not cacheable); None when M, N or K is 0 (no kernel)."""
    loaded, ordinal, m, n, k, grid_x = _checked_setup(family, a, bs, out, config)
    if loaded is None:
        return None
    call = _Fp8Call(family, config, key is not None and key[1].__class__ is tuple, loaded, ordinal, a.device,
                    m, n, k, grid_x)
    _remember(key, call)
    return call


def gemm_fp8(a: Any, b: Any, scale_a: Any, scale_b: Any, out: Any = None, config: Any = None, epilogue: Any = None,
             **operands: Any) -> Any:
    """FP8 block-scaled GEMM (DeepSeek-V3's recipe, docs/fp8.md) on sm_90a, on torch's current stream:
    ``D[m, n] = sum_kb scale_a[m, kb] * scale_b[n // 128, kb] * sum_{k in block kb} A[m, k] * B[n, k]``.

    Each 128-K block's e4m3 products are summed by ``wgmma ... .f32.e4m3.e4m3`` (K = 32 per instruction; PTX ISA
    "wgmma.mma_async") into a block partial, which the kernel promotes into an fp32 accumulator with the block's
    scales (two-level accumulation: the tensor cores' FP8 accumulation keeps fewer bits than fp32).

    Args:
        a: A ``[M, K]`` ``torch.float8_e4m3fn`` CUDA tensor, row-major contiguous, 16-byte aligned.
        b: B ``[N, K]`` ``torch.float8_e4m3fn`` on the same device, same rules (B, not B.T).
        scale_a: ``[M, ceil(K / 128)]`` float32: one scale per row of A and 128-K block (any strides; read in place
            when ``scale_a.T`` is row-major with a 16-byte row pitch, else copied transposed).
        scale_b: ``[ceil(N / 128), ceil(K / 128)]`` float32: one scale per 128 x 128 block of B (likewise).
        out: optional D ``[M, N]`` bf16, row-major contiguous, 16-byte aligned, overlapping no input.
        config: an FP8 config (``fp8_h100_128x128``, name, path or ``Config``), or None to choose among the shipped
            ``operands: fp8`` configs by shape.
        epilogue: a :mod:`ptxgen.epi` expression of ``acc``, the promoted fp32 accumulator after the last k-block
            (``"gelu(acc + bias[col])"``), or None (D = acc); as for :func:`gemm` (:func:`fused`): D's dtype follows
            the expression (``e4m3(...)``: ``torch.float8_e4m3fn``, ``fp16(...)``: fp16); with ``config=None`` an
            expression the chosen config cannot hold (registers) takes :data:`FP8_EPILOGUE_FALLBACK_CONFIG`.
        operands: the expression's operands and outputs beside D by name (``bias=t``; see :func:`fused`).

    Returns:
        D (``out`` if given), bf16 (or the expression's type), rounded once from the fp32 accumulator; with outputs
        beside D, ``(D, *outputs)``.  K must be a multiple of 16.

    Raises:
        ShapeError: a bad input (dtype, device, shapes, scale shapes not matching ceil(K/128) and ceil(N/128),
            K not a multiple of 16, layout; an epilogue operand's shape, dtype or device, a missing or unknown
            one), before any driver call; ``out`` untouched.
        ConfigError: not an FP8 config, no FP8 config for the device (sm_90a only), not an expression of the
            language, or an expression the config cannot hold (one line, before any launch).
        CudaError: a driver call failed.
    """
    if epilogue is not None or operands:
        return fused(_FP8, a, (b, scale_a, scale_b), out, config, epilogue, operands)
    try:
        key = ("gemm_fp8",) + _signature(a, b, out, config) + tuple(
            (t.dtype, t.shape, t.stride(), t.device) for t in (scale_a, scale_b))
        call = _calls.get(key)
    except (AttributeError, TypeError):  # not tensors: the full check names the problem
        key, call = None, None
    if call is None or (call.by_id and call.config is not config):
        call = _new_fp8_call(_FP8, key, config, a, (b, scale_a, scale_b), out)
        if call is None:  # M, N or K = 0: no kernel; D is empty, or zeros when K = 0
            import torch

            if out is None:
                return torch.zeros((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
            return out.zero_()
    return call(a, b, scale_a, scale_b, out)
