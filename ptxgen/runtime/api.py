"""The torch-facing API: ``gemm(a, b, out=None, config=None)`` computes ``D = A @ B.T``.

Shapes and types: A ``[M, K]``, B ``[N, K]`` (both K-major, i.e. row-major),
D ``[M, N]``; all bf16, on one CUDA device, accumulation in fp32.

Every input rule is checked by :func:`check_gemm_inputs` and raised as
:class:`~ptxgen.errors.ShapeError` before any driver call: a bad input never
reaches the GPU and ``out`` is never written.  Kernels are built and loaded
once per process per (device, config name, PTX hash).
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from typing import Any

from ptxgen.errors import ConfigError, ShapeError

#: shipped config used on compute capability 9.0 (Hopper) when ``config`` is None
DEFAULT_SM90 = "h100_256x128"
#: shipped config used on compute capability 10.x (Blackwell) when ``config`` is None
DEFAULT_SM100 = "level9"
#: the compute capability each target runs on (``a`` targets are not forward compatible)
ARCH_CAPABILITY: dict[str, tuple[int, int]] = {"sm_90a": (9, 0), "sm_100a": (10, 0)}
#: bf16 elements per 16 bytes: TMA row strides must be 16-byte multiples
ELEMS_PER_16B = 8
_ALIGN = 16

_lock = threading.Lock()
_builds: dict[tuple[str, str], Any] = {}
_kernels: dict[tuple[int, str, str], Any] = {}


# --------------------------------------------------------------------------- input checks


def _check_tensor(name: str, t: Any, dims: str, require_cuda: bool) -> None:
    """Type, rank, dtype, device kind, layout and alignment of one operand."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{name}: got {type(t).__name__}: must be a torch.Tensor")
    if t.dim() != 2:
        raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be 2-D {dims}")
    if t.dtype != torch.bfloat16:
        raise ShapeError(f"{name}: dtype={t.dtype}: must be torch.bfloat16")
    if require_cuda and t.device.type != "cuda":
        raise ShapeError(f"{name}: device={t.device}: must be a CUDA tensor")
    if t.numel() == 0:
        return  # layout is meaningless; the M, N, K >= 1 rule reports it
    rows, cols = t.shape
    inner_ok = t.stride(1) == 1 or cols == 1
    outer_ok = t.stride(0) == cols or rows == 1
    if not (inner_ok and outer_ok):
        raise ShapeError(
            f"{name}: shape={tuple(t.shape)} stride={t.stride()}: must be row-major contiguous "
            f"(stride(1) == 1 and stride(0) == {cols}); call .contiguous()"
        )
    if t.data_ptr() % _ALIGN:
        raise ShapeError(f"{name}: data_ptr={t.data_ptr():#x}: must be {_ALIGN}-byte aligned (TMA); "
                         "a sliced view may not be; call .clone()")


def _overlaps(x: Any, y: Any) -> bool:
    """Whether two tensors' byte ranges intersect."""
    x0, y0 = x.data_ptr(), y.data_ptr()
    x1 = x0 + x.numel() * x.element_size()
    y1 = y0 + y.numel() * y.element_size()
    return x0 < y1 and y0 < x1


def check_gemm_inputs(
    a: Any,
    b: Any,
    out: Any = None,
    k_multiple: int = ELEMS_PER_16B,
    *,
    n_multiple: int = 1,
    require_cuda: bool = True,
) -> tuple[int, int, int]:
    """Validate ``gemm`` operands; pure (no GPU, no driver call).

    Args:
        a: A ``[M, K]`` bf16, row-major contiguous, 16-byte aligned.
        b: B ``[N, K]`` bf16, same rules, same device as ``a``.
        out: D ``[M, N]`` bf16 on ``a``'s device, row-major contiguous, not overlapping A or B; or None.
        k_multiple: K must be a multiple of this (elements); the kernel's ``LaunchSpec.k_multiple``.
        n_multiple: N must be a multiple of this (8 when the kernel stores D through a tensor map).
        require_cuda: check that the tensors are CUDA tensors (False lets CPU tests reach the later rules).

    Returns:
        ``(M, N, K)``.

    Raises:
        ShapeError: the first rule broken, naming the argument, its value and the rule.
    """
    _check_tensor("a", a, "[M, K]", require_cuda)
    _check_tensor("b", b, "[N, K]", require_cuda)
    if b.device != a.device:
        raise ShapeError(f"b: device={b.device}: must be on a's device {a.device}")
    (m, k), (n, kb) = a.shape, b.shape
    if kb != k:
        raise ShapeError(f"b: shape={tuple(b.shape)}: K={kb} must equal a's K={k} (b is [N, K]; pass B, not B.T)")
    for label, value in (("M", m), ("N", n), ("K", k)):
        if value < 1:
            raise ShapeError(f"{label}={value}: must be >= 1 (a: {tuple(a.shape)}, b: {tuple(b.shape)})")
    if k % k_multiple:
        raise ShapeError(
            f"K={k}: must be a multiple of {k_multiple} (K*2={2 * k} bytes; TMA needs 16-byte row strides)"
        )
    if n % n_multiple:
        raise ShapeError(f"N={n}: must be a multiple of {n_multiple} for this config (D is stored through TMA)")
    if out is not None:
        _check_tensor("out", out, "[M, N]", require_cuda)
        if tuple(out.shape) != (m, n):
            raise ShapeError(f"out: shape={tuple(out.shape)}: must be [M, N] = ({m}, {n})")
        if out.device != a.device:
            raise ShapeError(f"out: device={out.device}: must be on a's device {a.device}")
        for name, operand in (("a", a), ("b", b)):
            if _overlaps(out, operand):
                raise ShapeError(f"out: memory overlaps {name}: D must not alias an input")
    return m, n, k


# --------------------------------------------------------------------------- configs and kernels


def default_config_name(capability: tuple[int, int]) -> str:
    """The shipped config for a compute capability.

    Raises:
        ConfigError: no shipped default for this capability.
    """
    if capability == (9, 0):
        return DEFAULT_SM90
    if capability[0] == 10:
        return DEFAULT_SM100
    raise ConfigError(f"device compute capability {capability[0]}.{capability[1]}: no default config "
                      "(ptxgen targets sm_90a and sm_100a); pass config=")


def check_arch(name: str, arch: str, capability: tuple[int, int]) -> None:
    """Raise :class:`ConfigError` unless a kernel built for ``arch`` runs on ``capability``."""
    needed = ARCH_CAPABILITY.get(arch)
    if needed is None:
        raise ConfigError(f"config {name}: arch={arch!r}: runtime knows only {sorted(ARCH_CAPABILITY)}")
    if tuple(capability) != needed:
        raise ConfigError(f"config {name}: arch={arch} needs compute capability {needed[0]}.{needed[1]}, "
                          f"the device has {capability[0]}.{capability[1]}")


def built_config(config: Any) -> Any:
    """``ptxgen.build.build`` of a config name, path or ``Config`` object, once per process.

    Raises:
        ConfigError: unknown name, bad YAML or illegal config (from ``ptxgen.config``).

    Returns:
        The ``BuildResult`` (``.ptx``, ``.launch``).
    """
    key = ("path", os.fspath(config)) if isinstance(config, (str, os.PathLike)) else ("config", repr(config))
    with _lock:
        result = _builds.get(key)
    if result is None:
        from ptxgen.build import build
        from ptxgen.config import load_config

        result = build(load_config(config))
        with _lock:
            result = _builds.setdefault(key, result)
    return result


def kernel_for(built: Any, ordinal: int) -> Any:
    """The loaded :class:`~ptxgen.runtime.module.Kernel` of a build on device ``ordinal`` (JIT + load once)."""
    from ptxgen.runtime.module import Kernel

    key = (ordinal, built.launch.name, hashlib.sha256(built.ptx.encode()).hexdigest())
    with _lock:
        kernel = _kernels.get(key)
    if kernel is None:
        kernel = Kernel.from_ptx(built.ptx, built.launch, ordinal)
        with _lock:
            kernel = _kernels.setdefault(key, kernel)
    return kernel


# --------------------------------------------------------------------------- launch


@dataclass
class PreparedGemm:
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
        import torch

        if stream is None:
            stream = torch.cuda.current_stream(self.ordinal).cuda_stream
        self.kernel.launch(self.grid_x, self.params, stream)
        return self.out


def prepare(a: Any, b: Any, out: Any = None, config: Any = None) -> PreparedGemm:
    """Check inputs, build/load the kernel, encode tensor maps and pack parameters; no launch.

    Args: see :func:`gemm`.

    Raises:
        ShapeError: a bad input (before any driver call; ``out`` untouched).
        ConfigError: no default config for the device, or the config's arch does not match it.
        CudaError: a driver call failed.
    """
    import torch

    from ptxgen.runtime import driver
    from ptxgen.runtime.module import KernelParams
    from ptxgen.runtime.tensormap import encode_tiled

    check_gemm_inputs(a, b, out)
    ordinal = a.device.index if a.device.index is not None else torch.cuda.current_device()
    capability = tuple(torch.cuda.get_device_capability(ordinal))
    built = built_config(default_config_name(capability) if config is None else config)
    spec = built.launch
    check_arch(spec.name, spec.arch, capability)
    m, n, k = check_gemm_inputs(a, b, out, spec.k_multiple, n_multiple=spec.n_multiple)
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    driver.ensure_context(ordinal)
    kernel = kernel_for(built, ordinal)
    maps = spec.tensor_maps
    # D's tensor map needs 16-byte rows; for other N the sm_90a kernels store D directly (tmap_d unused)
    d_map = "d" in maps and n % ELEMS_PER_16B == 0
    tmaps = (encode_tiled(a, maps["a"]), encode_tiled(b, maps["b"]), encode_tiled(out, maps["d"]) if d_map else None)
    params = KernelParams(tmaps, out.data_ptr(), m, n, k)
    grid_x = spec.grid.grid_x(m, n, driver.device_info(ordinal).sm_count)
    return PreparedGemm(a=a, b=b, out=out, kernel=kernel, params=params, grid_x=grid_x, ordinal=ordinal)


def gemm(a: Any, b: Any, out: Any = None, config: Any = None) -> Any:
    """``D = A @ B.T`` with a generated tensor-core kernel, on torch's current stream.

    Args:
        a: A ``[M, K]`` bf16 CUDA tensor, row-major contiguous.
        b: B ``[N, K]`` bf16 CUDA tensor on the same device, row-major contiguous.
        out: optional D ``[M, N]`` bf16 on the same device, row-major contiguous; written in place.
        config: shipped config name (``"h100_128x256"``), YAML path, ``Config`` object, or None for
            the device default (:data:`DEFAULT_SM90` on 9.0, :data:`DEFAULT_SM100` on 10.x).

    Returns:
        D (``out`` if given). The launch is asynchronous, like any torch op.

    Raises:
        ShapeError: a bad input; raised before any driver call, ``out`` untouched.
        ConfigError: no config fits the device.
        CudaError: a driver call failed (JIT log included for a PTX the driver rejects).
    """
    return prepare(a, b, out, config).launch()
