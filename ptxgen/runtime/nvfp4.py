"""``dual_gemm_nvfp4``: the torch-facing shell of the NVFP4 block-scaled dual GEMM (issue 11), and its TMA maps.

``C = silu(A @ B1.T) * (A @ B2.T)`` with the operands of the public ``nvfp4_dual_gemm`` problem:

* A ``[M, K/2]``, B1 and B2 ``[N, K/2]``: packed e2m1 pairs (low nibble = even K element), dtype
  ``torch.float4_e2m1fn_x2`` (where torch has it) or ``torch.uint8`` as a byte container;
  row-major contiguous (K-major).
* SFA ``[M, K/16]``, SFB1 and SFB2 ``[N, K/16]``: ``torch.float8_e4m3fn`` scales, one per 16 K
  elements, whose bytes are in the 128x4 block-scaling atom layout (cuBLAS "1D Block Scaling
  Factors Layout", ``ptxgen.sim.nvfp4.sf_to_blocked``).  Accepted as a contiguous 2-D
  ``[rows, K/16]`` tensor holding the blocked bytes, or as the problem's permuted 6-D view
  ``(32, 4, rows/128, 4, K/64, 1)`` of a blocked buffer.
* C ``[M, N]`` float16.

Rules (raised as :class:`~ptxgen.errors.ShapeError` before any driver call; ``out`` untouched):
K a multiple of 256 (one 128-byte swizzle row of packed e2m1 per stage), M a multiple of the
tile's ``block_m`` (128, or 256 for the 2-CTA schedule), N a multiple of ``block_n`` (128); the
scale atoms need M, N multiples of 128 anyway.

This module validates and encodes; the kernel itself (IR, plan, emitters) is composed on the BF16
dual GEMM by the lead.  Launching raises :class:`~ptxgen.errors.ConfigError` off compute
capability 10.x, and ``NotImplementedError`` on 10.x until the kernel is wired in
(:func:`_launch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptxgen.errors import ConfigError, ShapeError

K_MULTIPLE = 256
"""K elements of one NVFP4 stage (``ptxgen.descriptors.NVFP4_BLOCK_K``)."""
SF_VEC = 16
SF_ATOM_ROWS = 128
SF_ATOM_BYTES = 512
SF_ATOM_K = 64
"""K elements covered by one scale atom column block (4 scales x 16)."""
CAPABILITY_MAJOR = 10


@dataclass(frozen=True)
class Nvfp4Tile:
    """Tile of a ``nvfp4_dual_*`` schedule: output tile per CTA pair and cluster shape.

    block_m: rows of C per MMA (128 with cta_group::1; 256 with cta_group::2, 128 per CTA).
    block_n: columns of C per tile (the UMMA N of each of the two GEMMs).
    block_k: K elements per pipeline stage (256 = one 128-B packed-e2m1 swizzle row).
    cta_group: 1 or 2.
    """

    name: str
    block_m: int
    block_n: int
    block_k: int = K_MULTIPLE
    cta_group: int = 1

    @property
    def rows_per_cta(self) -> int:
        return self.block_m // self.cta_group


TILES: dict[str, Nvfp4Tile] = {
    "nvfp4_dual_128x128": Nvfp4Tile("nvfp4_dual_128x128", 128, 128),
    "nvfp4_dual_256x128_c2": Nvfp4Tile("nvfp4_dual_256x128_c2", 256, 128, cta_group=2),
}
"""Candidate schedules (issue 11 item 3); the shipped YAML configs will replace this table."""
DEFAULT_TILE = "nvfp4_dual_128x128"


def tile_for(config: Any) -> Nvfp4Tile:
    """The tile of ``config`` (None -> :data:`DEFAULT_TILE`, a name in :data:`TILES`, or a :class:`Nvfp4Tile`).

    Raises:
        ConfigError: unknown name or type.
    """
    if config is None:
        return TILES[DEFAULT_TILE]
    if isinstance(config, Nvfp4Tile):
        return config
    if isinstance(config, str) and config in TILES:
        return TILES[config]
    raise ConfigError(f"config={config!r}: NVFP4 dual GEMM configs are {sorted(TILES)}")


# --------------------------------------------------------------------------- input checks


def _fp4_dtypes() -> tuple:
    import torch

    return tuple(d for d in (getattr(torch, "float4_e2m1fn_x2", None), torch.uint8) if d is not None)


def _sf_view_ok(t: Any, rows: int, kq: int) -> bool:
    """Whether ``t`` is ``[rows, K/16]`` contiguous or the problem's 6-D permuted view of a blocked buffer."""
    if t.dim() == 2:
        return tuple(t.shape) == (rows, kq) and t.is_contiguous()
    rest_mn, rest_k = rows // SF_ATOM_ROWS, kq // 4
    if t.dim() == 6 and tuple(t.shape) == (32, 4, rest_mn, 4, rest_k, 1):
        want = (16, 4, rest_k * SF_ATOM_BYTES, 1, SF_ATOM_BYTES, rest_mn * rest_k * SF_ATOM_BYTES)
        # size-1 dims may carry any stride
        return all(s == w or n == 1 for s, w, n in zip(t.stride(), want, t.shape))
    return False


def check_nvfp4_inputs(a: Any, b1: Any, b2: Any, sfa: Any, sfb1: Any, sfb2: Any, out: Any = None,
                       tile: Nvfp4Tile | None = None) -> tuple[int, int, int]:
    """Check every operand rule; returns ``(M, N, K)``.  No driver call, CPU tensors allowed.

    Raises:
        ShapeError: naming the operand: not a tensor, wrong dtype, rank or shape, not contiguous,
            misaligned, devices differ, K not a multiple of 256, M/N not multiples of the tile,
            ``out`` wrong or overlapping an input.
    """
    import torch

    tile = tile or TILES[DEFAULT_TILE]
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
    if k < K_MULTIPLE or k % K_MULTIPLE:
        raise ShapeError(f"K={k} (a.shape[1]={kh} bytes): must be a positive multiple of {K_MULTIPLE} "
                         "(one 128-byte row of packed e2m1 per stage)")
    if m < tile.block_m or m % tile.block_m:
        raise ShapeError(f"M={m}: must be a positive multiple of {tile.block_m} (tile {tile.name})")
    if n < tile.block_n or n % tile.block_n:
        raise ShapeError(f"N={n}: must be a positive multiple of {tile.block_n} (tile {tile.name})")
    kq = k // SF_VEC
    for name, t, rows in (("sfa", sfa, m), ("sfb1", sfb1, n), ("sfb2", sfb2, n)):
        if t.dtype != torch.float8_e4m3fn:
            raise ShapeError(f"{name}: dtype={t.dtype}: must be torch.float8_e4m3fn")
        if not _sf_view_ok(t, rows, kq):
            raise ShapeError(
                f"{name}: shape={tuple(t.shape)} stride={t.stride()}: must be a contiguous [{rows}, {kq}] tensor "
                f"holding the 128x4-atom (blocked) bytes, or the (32, 4, {rows // 128}, 4, {kq // 4}, 1) "
                "permuted view of such a buffer")
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


# --------------------------------------------------------------------------- tensor maps


@dataclass(frozen=True)
class MapArgs:
    """Arguments of one ``cuTensorMapEncodeTiled`` call, innermost dimension first.

    dims: global extents in elements; strides: byte strides of dims 1.. (rank - 1 values);
    box: box extents in elements; dtype / swizzle / l2_promotion: driver enum member names.
    """

    tensor: str
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    dtype: str
    swizzle: str
    l2_promotion: str

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def box_bytes(self) -> int:
        """Bytes one load of this map lands in shared memory (the ``expect_tx`` share)."""
        out = 1
        for b in self.box:
            out *= b
        return out  # uint8 elements

    def check(self) -> None:
        """The driver's rules on these arguments (rank 1-5, box 1..256, 16-B alignment of address and strides,
        inner box bytes a multiple of 16 and within the swizzle span).

        Raises:
            ShapeError: naming the tensor and the rule.
        """
        where = f"tensor map {self.tensor!r}"
        if not 1 <= self.rank <= 5 or len(self.box) != self.rank or len(self.strides) != self.rank - 1:
            raise ShapeError(f"{where}: rank {self.rank}, box {self.box}, strides {self.strides} are inconsistent")
        if self.address % 16:
            raise ShapeError(f"{where}: address {self.address:#x}: must be 16-byte aligned")
        for i, s in enumerate(self.strides):
            if s % 16 or not 0 < s < 1 << 40:
                raise ShapeError(f"{where}: stride[{i + 1}]={s} B: must be a positive multiple of 16 below 2**40")
        for i, (b, d) in enumerate(zip(self.box, self.dims)):
            if not 1 <= b <= 256:
                raise ShapeError(f"{where}: box[{i}]={b}: must be in [1, 256]")
            if not 1 <= d <= 1 << 32:
                raise ShapeError(f"{where}: dims[{i}]={d}: must be in [1, 2**32]")
        if self.box[0] % 16:
            raise ShapeError(f"{where}: inner box {self.box[0]} B: must be a multiple of 16 bytes")
        if self.swizzle == "CU_TENSOR_MAP_SWIZZLE_128B" and self.box[0] > 128:
            raise ShapeError(f"{where}: inner box {self.box[0]} B exceeds the 128-B swizzle span")


def operand_map_args(tensor: str, address: int, rows: int, k: int, box_rows: int) -> MapArgs:
    """TMA map of a packed-e2m1 K-major operand ``[rows, K/2]`` bytes: one 128-B swizzled row per stage.

    ``CU_TENSOR_MAP_DATA_TYPE_UINT8`` on the bytes (dims ``(K/2, rows)``, box ``(128, box_rows)``,
    128B swizzle, L2 promotion 256B): the smem image is the K-major SW128 tile the UMMA descriptor
    (:func:`ptxgen.descriptors.nvfp4_operand_desc_hi`) describes, 128 x box_rows bytes.  The driver's
    packed 4-bit type ``CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B`` would describe the same bytes with
    extents counted in e2m1 elements; UINT8 needs no CUDA 12.8+ enum and moves identical bytes.

    Raises:
        ShapeError: a rule of :meth:`MapArgs.check`.
    """
    args = MapArgs(tensor, address, (k // 2, rows), (k // 2,), (128, box_rows),
                   "CU_TENSOR_MAP_DATA_TYPE_UINT8", "CU_TENSOR_MAP_SWIZZLE_128B",
                   "CU_TENSOR_MAP_L2_PROMOTION_L2_256B")
    args.check()
    return args


def scale_map_args(tensor: str, address: int, rows: int, k: int, box_rows: int, block_k: int = K_MULTIPLE) -> MapArgs:
    """TMA map of a blocked scale-factor tensor: the atoms of one tile row block and one K stage.

    The blocked buffer is viewed as 3-D bytes ``(128, 4 * K/64, rows/128)``: 128-byte lines (a
    quarter atom), lines of the ``K/64`` atoms of a 128-row block, row blocks (stride
    ``K/64 * 512`` B).  Box ``(128, 4 * block_k/64, box_rows/128)`` = ``block_k/64`` atoms per row
    block (2048 B per 128 rows for block_k 256), no swizzle (``tcgen05.cp`` reads it through an
    unswizzled descriptor), UINT8.  In smem atom ``(mn, kb)`` of the box lands at
    ``(mn * block_k/64 + kb) * 512``.

    Raises:
        ShapeError: a rule of :meth:`MapArgs.check`.
    """
    atoms_k = k // SF_ATOM_K
    args = MapArgs(tensor, address, (128, 4 * atoms_k, rows // SF_ATOM_ROWS), (128, atoms_k * SF_ATOM_BYTES),
                   (128, 4 * (block_k // SF_ATOM_K), box_rows // SF_ATOM_ROWS),
                   "CU_TENSOR_MAP_DATA_TYPE_UINT8", "CU_TENSOR_MAP_SWIZZLE_NONE",
                   "CU_TENSOR_MAP_L2_PROMOTION_L2_128B")
    args.check()
    return args


def map_args(m: int, n: int, k: int, tile: Nvfp4Tile, addresses: dict[str, int]) -> dict[str, MapArgs]:
    """The six input maps of a dual-GEMM launch (C is stored by the epilogue, not listed here).

    Box rows: A and SFA ``tile.rows_per_cta`` (each CTA loads its own rows); B1/B2 and their scales
    ``tile.block_n / tile.cta_group`` (each CTA of a pair loads half of B, as in the BF16 kernel's
    2-CTA schedule) -- the scale boxes then hold whole 128-row atoms only when that is a multiple
    of 128, which the caller's plan must check.

    Raises:
        ShapeError: a rule of :meth:`MapArgs.check`.
    """
    b_rows = tile.block_n // tile.cta_group
    sf_b_rows = max(b_rows, SF_ATOM_ROWS)
    return {
        "a": operand_map_args("a", addresses["a"], m, k, tile.rows_per_cta),
        "b1": operand_map_args("b1", addresses["b1"], n, k, b_rows),
        "b2": operand_map_args("b2", addresses["b2"], n, k, b_rows),
        "sfa": scale_map_args("sfa", addresses["sfa"], m, k, tile.rows_per_cta, tile.block_k),
        "sfb1": scale_map_args("sfb1", addresses["sfb1"], n, k, sf_b_rows, tile.block_k),
        "sfb2": scale_map_args("sfb2", addresses["sfb2"], n, k, sf_b_rows, tile.block_k),
    }


def encode_map(args: MapArgs) -> Any:
    """``cuTensorMapEncodeTiled`` of validated :class:`MapArgs`; returns a ``CUtensorMap``.

    Raises:
        CudaError: the driver rejected the descriptor.
    """
    from ptxgen.runtime import driver

    drv = driver.cu()
    result = drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, args.dtype),
        args.rank,
        args.address,
        [drv.cuuint64_t(d) for d in args.dims],
        [drv.cuuint64_t(s) for s in args.strides],
        [drv.cuuint32_t(b) for b in args.box],
        [drv.cuuint32_t(1)] * args.rank,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, args.swizzle),
        getattr(drv.CUtensorMapL2promotion, args.l2_promotion),
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    return driver.check(result, "cuTensorMapEncodeTiled", detail=str(args))


# --------------------------------------------------------------------------- API


def dual_gemm_nvfp4(a: Any, b1: Any, b2: Any, sfa: Any, sfb1: Any, sfb2: Any, out: Any = None,
                    config: Any = None) -> Any:
    """``C = silu(A @ B1.T) * (A @ B2.T)`` for NVFP4 operands on a compute-capability-10.x GPU.

    Args:
        a, b1, b2, sfa, sfb1, sfb2, out: see the module docstring (shapes, dtypes, layouts).
        config: None (:data:`DEFAULT_TILE`), a name in :data:`TILES`, or a :class:`Nvfp4Tile`.

    Returns:
        ``out`` (or a new ``[M, N]`` float16 tensor).

    Raises:
        ConfigError: unknown config; no CUDA device; the device is not compute capability 10.x
            (the message names its capability).  Raised after the input checks.
        ShapeError: any input rule (:func:`check_nvfp4_inputs`), before any driver call.
        NotImplementedError: on 10.x until the kernel is wired in (issue 11).
    """
    import torch

    tile = tile_for(config)
    check_nvfp4_inputs(a, b1, b2, sfa, sfb1, sfb2, out, tile)
    if not torch.cuda.is_available():
        raise ConfigError("dual_gemm_nvfp4 needs a CUDA GPU of compute capability 10.x (sm_100a); "
                          "torch sees no CUDA device here")
    if a.device.type != "cuda":
        raise ShapeError(f"a: device={a.device}: the operands must be CUDA tensors")
    ordinal = a.device.index if a.device.index is not None else torch.cuda.current_device()
    check_capability(tuple(torch.cuda.get_device_capability(ordinal)), torch.cuda.get_device_name(ordinal))
    return _launch(a, b1, b2, sfa, sfb1, sfb2, out, tile)


def _launch(a: Any, b1: Any, b2: Any, sfa: Any, sfb1: Any, sfb2: Any, out: Any, tile: Nvfp4Tile) -> Any:
    """Build, encode (:func:`map_args`, :func:`encode_map`) and launch: the lead wires the kernel here."""
    raise NotImplementedError(f"dual_gemm_nvfp4: the {tile.name} kernel is not built yet (issue 11)")
