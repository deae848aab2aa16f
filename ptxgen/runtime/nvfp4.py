"""``dual_gemm_nvfp4``: the torch-facing shell of the NVFP4 block-scaled dual GEMM, and its TMA maps.

``C = silu(A @ B1.T) * (A @ B2.T)`` with the operands of the public ``nvfp4_dual_gemm`` problem:

* A ``[M, K/2]``, B1 and B2 ``[N, K/2]``: packed e2m1 pairs (low nibble = even K element), dtype
  ``torch.float4_e2m1fn_x2`` (where torch has it) or ``torch.uint8`` as a byte container;
  row-major contiguous (K-major).
* SFA ``[M, K/16]``, SFB1 and SFB2 ``[N, K/16]``: ``torch.float8_e4m3fn`` scales, one per 16 K
  elements.  The kernel reads them in the 128x4 block-scaling atom layout (cuBLAS "1D Block Scaling
  Factors Layout", ``ptxgen.formats.sf_to_blocked``).  A scale tensor is accepted in a layout the
  function can prove or the caller names: the problem's permuted 6-D view ``(32, 4, rows/128, 4,
  K/64, 1)`` of a blocked buffer (its strides prove the layout; :func:`blocked_scales` makes one from
  plain scales), or a contiguous 2-D ``[rows, K/16]`` tensor with ``sf_layout="rowmajor"`` (plain
  per-row scales, the problem's unblocked form: converted here, one copy per call) or
  ``sf_layout="blocked"`` (a buffer that already holds the blocked bytes).  A 2-D tensor without
  ``sf_layout`` is refused: its bytes read either way, and the wrong reading is silently wrong output.
* C ``[M, N]`` float16.

Scale bytes with bit 7 set: torch's ``float8_e4m3fn`` reads bit 7 as a sign, the block-scaled MMA's ue4m3
does not (a 7-bit unsigned format whose padding bit must be zero, PTX ISA 5.2.3 "Alternate Floating-Point
Data Formats"; modelled as ignored, the reading of CUTLASS's ``float_ue4m3_t``: :mod:`ptxgen.formats`).
``sf_sign`` says what the call does with them: None (default) passes the bytes as they are (a negative
scale then acts as its magnitude); ``"refuse"`` raises ShapeError if any scale byte has bit 7 set (one
reduction over the scales and a device sync per call); ``"fold"`` moves each negative scale's sign into
its 16 e2m1 values (one copy of every operand and scale tensor per call), which reproduces the signed
reading exactly (:func:`fold_scale_signs_torch`).

Rules (raised as :class:`~ptxgen.errors.ShapeError` before any driver call; ``out`` untouched):
K a multiple of the config's ``k_multiple`` (256: one 128-byte swizzle row of packed e2m1 per
stage), M and N multiples of 128 (whole 128-row scale atoms; a tile past M or N reads zeros and
its stores are clipped).

The kernel is a shipped ``operands: nvfp4`` config (``nvfp4_dual_128x128``, the default, or
``nvfp4_dual_256x128``), built like every other (plan -> IR -> PTX) and loaded through the
runtime's cache.  The seven tensor maps (A, B1, B2 as packed bytes; SFA, SFB1, SFB2 as the
blocked buffers viewed as ``[lines, 128]`` bytes; C as fp16) are encoded host-side from the
plan's :class:`~ptxgen.launch.TensorMapSpec` boxes (:func:`map_slots`).  Launching raises
:class:`~ptxgen.errors.ConfigError` off compute capability 10.x, after the input checks.  No
sm_100 GPU was available to this project: the launch path is untested on hardware.
"""

from __future__ import annotations

from typing import Any

from ptxgen.errors import ConfigError, ShapeError
from ptxgen.hw import SF_ATOM_BYTES, SF_ATOM_ROWS, SF_VEC

K_MULTIPLE = 256
"""K elements of one NVFP4 stage (``ptxgen.descriptors.NVFP4_BLOCK_K``; a config's ``k_multiple``)."""
ROW_MULTIPLE = SF_ATOM_ROWS
"""M and N: whole 128-row scale-factor atoms (cuBLAS "1D Block Scaling Factors Layout")."""
CAPABILITY_MAJOR = 10
DEFAULT_CONFIG = "nvfp4_dual_128x128"


def nvfp4_configs() -> list[str]:
    """Names of the shipped NVFP4 configs (``nvfp4_dual_*``)."""
    from ptxgen.config import shipped_configs

    return [name for name in shipped_configs() if name.startswith("nvfp4_")]


def resolve_config(config: Any) -> Any:
    """The :class:`~ptxgen.config.Config` of ``config`` (None: :data:`DEFAULT_CONFIG`; a name, path or Config).

    Raises:
        ConfigError: unknown or invalid config, or one whose ``operands`` is not ``nvfp4``.
    """
    from ptxgen.config import load_config

    cfg = load_config(DEFAULT_CONFIG if config is None else config)
    if cfg.operands != "nvfp4":
        raise ConfigError(f"config {cfg.name}: operands={cfg.operands}: dual_gemm_nvfp4 needs an NVFP4 config "
                          f"(operands: nvfp4): {', '.join(nvfp4_configs())}")
    return cfg


# --------------------------------------------------------------------------- input checks


def _fp4_dtypes() -> tuple:
    import torch

    return tuple(d for d in (getattr(torch, "float4_e2m1fn_x2", None), torch.uint8) if d is not None)


SF_LAYOUTS = ("rowmajor", "blocked")
"""The names ``sf_layout`` takes for a 2-D scale tensor (see the module docstring)."""
SF_SIGNS = ("refuse", "fold")
"""The names ``sf_sign`` takes besides None: what a call does with scale bytes whose bit 7 is set (module docstring)."""


def _blocked_view_strides(rows: int, kq: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides of the problem's 6-D view ``(32, 4, rows/128, 4, K/64, 1)`` of a blocked buffer."""
    rest_mn, rest_k = rows // SF_ATOM_ROWS, kq // 4
    return ((32, 4, rest_mn, 4, rest_k, 1),
            (16, 4, rest_k * SF_ATOM_BYTES, 1, SF_ATOM_BYTES, rest_mn * rest_k * SF_ATOM_BYTES))


def _sf_kind(t: Any, rows: int, kq: int) -> str | None:
    """``"view"``: the 6-D permuted view of a blocked buffer; ``"2d"``: contiguous ``[rows, K/16]``; else None."""
    if t.dim() == 2:
        return "2d" if tuple(t.shape) == (rows, kq) and t.is_contiguous() else None
    shape, want = _blocked_view_strides(rows, kq)
    # size-1 dims may carry any stride
    if t.dim() == 6 and tuple(t.shape) == shape and all(s == w or n == 1 for s, w, n in zip(t.stride(), want, shape)):
        return "view"
    return None


def blocked_scales(sf: Any) -> Any:
    """The problem's 6-D blocked view of plain row-major scales ``sf`` ``[rows, K/16]`` (one copy, same device).

    Pass the result as ``sfa``/``sfb1``/``sfb2`` (no ``sf_layout`` needed: its strides prove the layout).

    Raises:
        ShapeError: ``sf`` is not a 2-D float8_e4m3fn tensor with rows a multiple of 128 and K/16 of 4.
    """
    import torch

    from ptxgen.formats import sf_to_blocked_torch

    if not isinstance(sf, torch.Tensor) or sf.dim() != 2 or sf.dtype != torch.float8_e4m3fn:
        raise ShapeError(f"blocked_scales: got {getattr(sf, 'dtype', type(sf).__name__)} "
                         f"{tuple(getattr(sf, 'shape', ()))}: needs a 2-D float8_e4m3fn [rows, K/16] tensor")
    rows, kq = sf.shape
    if rows % SF_ATOM_ROWS or kq % 4:
        raise ShapeError(f"blocked_scales: shape=({rows}, {kq}): rows must be a multiple of {SF_ATOM_ROWS} and "
                         "K/16 of 4 (whole 128x4 atoms)")
    flat = sf_to_blocked_torch(sf.view(torch.uint8)).view(torch.float8_e4m3fn)
    shape, strides = _blocked_view_strides(rows, kq)
    return flat.as_strided(shape, strides)


def check_nvfp4_inputs(a: Any, b1: Any, b2: Any, sfa: Any, sfb1: Any, sfb2: Any, out: Any = None,
                       k_multiple: int = K_MULTIPLE, *, sf_layout: str | None = None,
                       sf_sign: str | None = None) -> tuple[int, int, int]:
    """Check every operand rule; returns ``(M, N, K)``.  No driver call, CPU tensors allowed.

    sf_layout: how a 2-D scale tensor's bytes read (``"rowmajor"`` or ``"blocked"``); None accepts only the 6-D
        blocked view (module docstring).
    sf_sign: None, ``"refuse"`` or ``"fold"`` (module docstring); only the name is checked here (the bytes:
        :func:`check_scale_signs`).

    Raises:
        ShapeError: naming the operand: not a tensor, wrong dtype, rank or shape, not contiguous,
            misaligned, devices differ, K not a multiple of ``k_multiple``, M/N not multiples of 128,
            a 2-D scale tensor without ``sf_layout`` (or a 6-D view named ``rowmajor``), ``out`` wrong or
            overlapping an input.
    """
    import torch

    fp4 = _fp4_dtypes()
    names = ("a", "b1", "b2", "sfa", "sfb1", "sfb2")
    for name, t in zip(names, (a, b1, b2, sfa, sfb1, sfb2)):
        if not isinstance(t, torch.Tensor):
            raise ShapeError(f"{name}: got {type(t).__name__}: must be a torch.Tensor")
    for name, t in (("a", a), ("b1", b1), ("b2", b2)):
        if t.dtype not in fp4:
            raise ShapeError(f"{name}: dtype={t.dtype}: must be one of {[str(d) for d in fp4]} (packed e2m1 pairs)")
        if t.dim() != 2:
            raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be 2-D [rows, K/2] of packed e2m1 pairs")
        if not t.is_contiguous():
            raise ShapeError(f"{name}: stride={t.stride()}: must be row-major contiguous (K-major); call .contiguous()")
    m, kh = a.shape
    n = b1.shape[0]
    k = 2 * kh
    for name, t in (("b1", b1), ("b2", b2)):
        if tuple(t.shape) != (n, kh):
            raise ShapeError(f"{name}: shape={tuple(t.shape)}: must be [N, K/2] = [{n}, {kh}] like b1 and A's K")
    if k < k_multiple or k % k_multiple:
        raise ShapeError(f"K={k} (a.shape[1]={kh} bytes): must be a positive multiple of {k_multiple} "
                         "(one 128-byte row of packed e2m1 per stage)")
    for what, v in (("M", m), ("N", n)):
        if v < ROW_MULTIPLE or v % ROW_MULTIPLE:
            raise ShapeError(f"{what}={v}: must be a positive multiple of {ROW_MULTIPLE} (whole 128-row scale atoms)")
    kq = k // SF_VEC
    if sf_layout not in (None, *SF_LAYOUTS):
        raise ShapeError(f"sf_layout={sf_layout!r}: must be one of {', '.join(SF_LAYOUTS)} (or None: 6-D views only)")
    if sf_sign not in (None, *SF_SIGNS):
        raise ShapeError(f"sf_sign={sf_sign!r}: must be one of {', '.join(SF_SIGNS)} (or None: scale bytes as given)")
    for name, t, rows in (("sfa", sfa, m), ("sfb1", sfb1, n), ("sfb2", sfb2, n)):
        if t.dtype != torch.float8_e4m3fn:
            raise ShapeError(f"{name}: dtype={t.dtype}: must be torch.float8_e4m3fn")
        kind = _sf_kind(t, rows, kq)
        if kind is None:
            raise ShapeError(
                f"{name}: shape={tuple(t.shape)} stride={t.stride()}: must be a contiguous [{rows}, {kq}] tensor "
                f"(with sf_layout), or the (32, 4, {rows // 128}, 4, {kq // 4}, 1) permuted view of a blocked "
                "buffer (ptxgen.runtime.nvfp4.blocked_scales makes one)")
        if kind == "2d" and sf_layout is None:
            raise ShapeError(
                f"{name}: a 2-D [{rows}, {kq}] scale tensor reads two ways: pass sf_layout='rowmajor' (plain "
                "per-row scales, converted here) or sf_layout='blocked' (bytes already in the 128x4-atom layout), "
                "or the 6-D view from ptxgen.runtime.nvfp4.blocked_scales")
        if kind == "view" and sf_layout == "rowmajor":
            raise ShapeError(f"{name}: the 6-D permuted view is the blocked layout; sf_layout='rowmajor' "
                             "contradicts it")
    devices = {t.device for t in (a, b1, b2, sfa, sfb1, sfb2)}
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise ShapeError(f"out: got {type(out).__name__}: must be a torch.Tensor")
        if out.dtype != torch.float16:
            raise ShapeError(f"out: dtype={out.dtype}: must be torch.float16")
        if tuple(out.shape) != (m, n):
            raise ShapeError(f"out: shape={tuple(out.shape)}: must be [M, N] = [{m}, {n}]")
        if not out.is_contiguous():
            raise ShapeError(f"out: stride={out.stride()}: must be row-major contiguous")
        devices.add(out.device)
        for name, t in zip(names, (a, b1, b2, sfa, sfb1, sfb2)):
            if _overlaps(out, t):
                raise ShapeError(f"out overlaps {name}: the kernel would read what it writes")
    if len(devices) != 1:
        raise ShapeError(f"tensors are on {sorted(map(str, devices))}: all must be on one device")
    for name, t in zip(names + ("out",), (a, b1, b2, sfa, sfb1, sfb2, out)):
        if t is not None and t.device.type == "cuda" and t.data_ptr() % 16:
            raise ShapeError(f"{name}: data_ptr={t.data_ptr():#x}: must be 16-byte aligned (TMA)")
    return m, n, k


def _rowmajor_scale_bytes(t: Any, rows: int, kq: int, sf_layout: str | None) -> Any:
    """uint8 ``[rows, K/16]`` row-major scale bytes of a scale tensor in any accepted form (a copy unless row-major)."""
    from ptxgen.formats import sf_from_blocked_torch

    u = t.view(_torch().uint8)
    if t.dim() == 2 and sf_layout == "rowmajor":
        return u
    flat = u.reshape(-1) if t.dim() == 2 else u.as_strided((rows * kq,), (1,))  # the blocked buffer behind the view
    return sf_from_blocked_torch(flat, rows, kq)


def _torch() -> Any:
    import torch

    return torch


def check_scale_signs(sfa: Any, sfb1: Any, sfb2: Any) -> None:
    """Refuse scale bytes with bit 7 set (``sf_sign="refuse"``): the MMA's ue4m3 has no sign (module docstring).

    Reads the three scale tensors (any accepted layout; on a GPU: one reduction each and a sync).

    Raises:
        ShapeError: naming the first scale tensor holding such a byte, its index and value.
    """
    from ptxgen.formats import UE4M3_PAD_BIT

    for name, t in (("sfa", sfa), ("sfb1", sfb1), ("sfb2", sfb2)):
        bad = (t.view(_torch().uint8) & UE4M3_PAD_BIT).nonzero()
        if bad.shape[0]:
            at = tuple(int(i) for i in bad[0])
            raise ShapeError(f"{name}[{', '.join(map(str, at))}]: scale byte {int(t.view(_torch().uint8)[at]):#04x} has "
                             "bit 7 set: the MMA's ue4m3 scale is unsigned (PTX ISA 5.2.3); pass sf_sign='fold' to "
                             "move negative scales' signs into the e2m1 values")


def fold_scale_signs_torch(x: Any, sf: Any) -> tuple[Any, Any]:
    """torch version of :func:`ptxgen.formats.fold_scale_signs`: ``(x', sf')`` with the scales' signs in the values.

    Args:
        x: packed e2m1 ``[R, K/2]`` (uint8 or ``float4_e2m1fn_x2``); sf: its row-major scale bytes ``[R, K/16]``
            (uint8 or ``float8_e4m3fn``), same device.

    Returns:
        ``x'`` (dtype of ``x``): both nibbles' sign bits flipped in every byte whose scale has bit 7 set;
        ``sf'`` (dtype of ``sf``): ``sf & 0x7F``.  New tensors; the inputs are not written.
    """
    torch = _torch()
    from ptxgen.formats import UE4M3_PAD_BIT

    s = sf.view(torch.uint8)
    flip = ((s & UE4M3_PAD_BIT) != 0).repeat_interleave(SF_VEC // 2, dim=1).to(torch.uint8) * 0x88
    return (x.view(torch.uint8) ^ flip).view(x.dtype), (s & (0xFF ^ UE4M3_PAD_BIT)).view(sf.dtype)


def apply_sf_sign(a: Any, b1: Any, b2: Any, sfa: Any, sfb1: Any, sfb2: Any, *, sf_layout: str | None,
                  sf_sign: str | None) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The operands the kernel gets under ``sf_sign`` (module docstring), inputs already checked.

    None: as given; ``"refuse"``: as given after :func:`check_scale_signs`; ``"fold"``: :func:`fold_scale_signs_torch`
    of each operand with its scales, the scales returned as 6-D blocked views (:func:`blocked_scales`).

    Raises:
        ShapeError: ``"refuse"`` and a scale byte with bit 7 set.
    """
    if sf_sign == "refuse":
        check_scale_signs(sfa, sfb1, sfb2)
    if sf_sign != "fold":
        return a, b1, b2, sfa, sfb1, sfb2
    torch = _torch()
    kq = 2 * a.shape[1] // SF_VEC
    out = []
    for x, sf in ((a, sfa), (b1, sfb1), (b2, sfb2)):
        x2, s2 = fold_scale_signs_torch(x, _rowmajor_scale_bytes(sf, x.shape[0], kq, sf_layout))
        out.append((x2, blocked_scales(s2.view(torch.float8_e4m3fn))))
    (a, sfa), (b1, sfb1), (b2, sfb2) = out
    return a, b1, b2, sfa, sfb1, sfb2


def _overlaps(x: Any, y: Any) -> bool:
    if x.device != y.device:
        return False
    x0, y0 = x.data_ptr(), y.data_ptr()
    return x0 < y0 + y.untyped_storage().nbytes() and y0 < x0 + x.numel() * x.element_size()


def check_capability(capability: tuple[int, int], device_name: str = "the device") -> None:
    """Raise :class:`ConfigError` unless ``capability`` is 10.x (sm_100a: tcgen05 block-scaled MMA).

    Raises:
        ConfigError: naming the device and its capability.
    """
    if capability[0] != CAPABILITY_MAJOR:
        raise ConfigError(f"dual_gemm_nvfp4 needs compute capability 10.x (sm_100a, tcgen05 .kind::mxf4nvf4); "
                          f"{device_name} has {capability[0]}.{capability[1]}")


# --------------------------------------------------------------------------- tensor maps and launch

MAP_OF = {"a": "a", "b": "b1", "b2": "b2", "sfa": "sfa", "sfb": "sfb1", "sfb2": "sfb2", "d": "out"}
"""The kernel's tensor-map name (plan operand) -> the argument of :func:`dual_gemm_nvfp4` it maps."""


def map_slots(spec: Any, m: int, n: int, k: int, addresses: dict[str, int]) -> dict[str, tuple[int, int, int, int]]:
    """``(address, rows, cols, row_stride)`` of each tensor map of the kernel (elements of the map's dtype).

    A, B1, B2: ``[rows, K/2]`` bytes; SFA, SFB1, SFB2: the blocked scale buffer viewed as ``[rows*K/16 / L, L]``
    bytes with ``L`` the scale map's inner box (128-byte lines; the kernel loads the lines of one row block's
    stage atoms); C: ``[M, N]`` fp16.  ``addresses`` is keyed by argument name (:data:`MAP_OF`).
    """
    out = {}
    for name, t in spec.tensor_maps.items():
        rows = m if name in ("a", "sfa", "d") else n
        if name.startswith("sf"):
            line = t.box[0]
            out[name] = (addresses[MAP_OF[name]], rows * (k // SF_VEC) // line, line, line)
        else:
            cols = n if name == "d" else k // 2
            out[name] = (addresses[MAP_OF[name]], rows, cols, cols)
    return out


def map_args(spec: Any, m: int, n: int, k: int, addresses: dict[str, int]) -> dict[str, Any]:
    """The validated ``cuTensorMapEncodeTiled`` arguments of every map (:func:`ptxgen.runtime.tensormap.tiled_args`);
    no driver call.

    Raises:
        ShapeError: a TMA rule (alignment, stride, extent) broken, naming the map.
    """
    from ptxgen.runtime.tensormap import tiled_args

    return {name: tiled_args(addr, rows, cols, stride, spec.tensor_maps[name])
            for name, (addr, rows, cols, stride) in map_slots(spec, m, n, k, addresses).items()}


def dual_gemm_nvfp4(a: Any, b1: Any, b2: Any, sfa: Any, sfb1: Any, sfb2: Any, out: Any = None,
                    config: Any = None, *, sf_layout: str | None = None, sf_sign: str | None = None) -> Any:
    """``C = silu(A @ B1.T) * (A @ B2.T)`` for NVFP4 operands on a compute-capability-10.x GPU.

    Args:
        a, b1, b2, sfa, sfb1, sfb2, out: see the module docstring (shapes, dtypes, layouts).
        config: None (:data:`DEFAULT_CONFIG`), or an ``operands: nvfp4`` config (name, path or Config).
        sf_layout: ``"rowmajor"`` or ``"blocked"`` for 2-D scale tensors (module docstring); None for 6-D views.
        sf_sign: None, ``"refuse"`` or ``"fold"``: scale bytes with bit 7 set (module docstring).

    Returns:
        ``out`` (or a new ``[M, N]`` float16 tensor), on torch's current stream.

    Raises:
        ConfigError: not an NVFP4 config; no CUDA device; the device is not compute capability 10.x
            (the message names its capability).  Raised after the input checks.
        ShapeError: any input rule (:func:`check_nvfp4_inputs`), before any driver call; with
            ``sf_sign="refuse"`` a scale byte with bit 7 set (:func:`check_scale_signs`), before the launch.
        CudaError: a driver call failed.
    """
    import torch

    cfg = resolve_config(config)
    m, n, k = check_nvfp4_inputs(a, b1, b2, sfa, sfb1, sfb2, out, sf_layout=sf_layout, sf_sign=sf_sign)
    if not torch.cuda.is_available():
        raise ConfigError("dual_gemm_nvfp4 needs a CUDA GPU of compute capability 10.x (sm_100a); "
                          "torch sees no CUDA device here")
    if a.device.type != "cuda":
        raise ShapeError(f"a: device={a.device}: the operands must be CUDA tensors")
    ordinal = a.device.index if a.device.index is not None else torch.cuda.current_device()
    check_capability(tuple(torch.cuda.get_device_capability(ordinal)), torch.cuda.get_device_name(ordinal))
    a, b1, b2, sfa, sfb1, sfb2 = apply_sf_sign(a, b1, b2, sfa, sfb1, sfb2, sf_layout=sf_layout, sf_sign=sf_sign)
    if sf_layout == "rowmajor":
        sfa, sfb1, sfb2 = (blocked_scales(t) if t.dim() == 2 else t for t in (sfa, sfb1, sfb2))
    return _launch(cfg, ordinal, m, n, k, dict(a=a, b1=b1, b2=b2, sfa=sfa, sfb1=sfb1, sfb2=sfb2, out=out))


def _launch(cfg: Any, ordinal: int, m: int, n: int, k: int, args: dict[str, Any]) -> Any:
    """Load the kernel (runtime cache), encode the maps (:func:`map_slots`) and launch on the current stream."""
    import torch

    from ptxgen.runtime import driver
    from ptxgen.runtime.api import loaded_kernel
    from ptxgen.runtime.driver import current_stream
    from ptxgen.runtime.fastpath import TENSOR_MAP

    driver.ensure_context(ordinal)
    loaded = loaded_kernel(cfg, ordinal)
    spec = loaded.spec
    if args["out"] is None:
        args["out"] = torch.empty((m, n), dtype=torch.float16, device=args["a"].device)
    slots = map_slots(spec, m, n, k, {name: t.data_ptr() for name, t in args.items()})
    maps = tuple(slots[name.removeprefix("tmap_")] for name, kind in spec.params if kind == TENSOR_MAP)
    values = {"d_ptr": args["out"].data_ptr(), "m": m, "n": n, "k": k}
    scalars = tuple(values[name] for name, kind in spec.params if kind != TENSOR_MAP)
    grid_x = spec.grid.grid_x(m, n, driver.device_info(ordinal).sm_count)
    loaded.launcher.launch(grid_x, maps, scalars, current_stream(ordinal))
    return args["out"]
