"""NVFP4 semantics the checks read: ue4m3 scales as the MMA reads them, random inputs, the dual-GEMM
reference, and the block-scaled MMA (``tcgen05.mma ... .kind::mxf4nvf4.block_scale``) the simulator calls.

The host-side formats (e2m1, e4m3, the 128x4 scale-factor atom layout) are :mod:`ptxgen.formats`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..descriptors import MXF4_MMA_K, SCALE_VEC, UMMA_IDESC_MXF4, UMMA_SMEM_DESC
from ..errors import SimError
from ..formats import UE4M3_NAN, SF_VEC, dequantize, e2m1_decode, sf_from_blocked, unpack_e2m1
from ..formats import ue4m3_decode as formats_ue4m3
from .swizzle import swizzle128


MASKED_BYTE = 0xBB
"""Byte mask keeping sign and the two low bits of each nibble: e2m1 magnitudes {0, 0.5, 1, 1.5}."""


def ue4m3_decode(bits, who: object = "scale") -> np.ndarray:
    """float32 values of ``ue4m3`` scale bytes as the block-scaled MMA reads them (:func:`ptxgen.formats.ue4m3_decode`).

    The format (PTX ISA 5.2.3 "Alternate Floating-Point Data Formats") is 7 bits, unsigned, with bit 7 of the
    byte padded with zero.  The ISA does not say what ``tcgen05.mma ... .block_scale`` does with a set bit 7;
    the model reads bits 6-0 and ignores bit 7, as CUTLASS's ``cutlass::float_ue4m3_t`` does, so a byte torch
    reads as ``-s`` scales by ``+s`` here (the host folds such signs into the e2m1 values, or refuses them:
    :func:`ptxgen.formats.fold_scale_signs`, ``dual_gemm_nvfp4(sf_sign=...)``).

    Raises:
        SimError: a NaN byte (``0x7F``, or ``0xFF`` read without bit 7): the simulator does not guess NaN scales.
    """
    b = np.asarray(bits, dtype=np.uint8)
    nan = (b & 0x7F) == UE4M3_NAN
    if nan.any():
        raise SimError(f"bad scale factor: {who}: byte {int(b[nan].flat[0]):#04x} is the ue4m3 NaN "
                       f"({UE4M3_NAN:#04x} with bit 7 ignored, PTX ISA 5.2.3); NVFP4 scales must be finite")
    return formats_ue4m3(b)


# --------------------------------------------------------------------------- inputs and reference


def random_nvfp4(rows: int, k: int, rng: np.random.Generator, *, masked: bool = True,
                 scale_exp: tuple[int, int] = (-5, -2)) -> tuple[np.ndarray, np.ndarray]:
    """Random NVFP4 operand: packed e2m1 ``[rows, k/2]`` (uint8) and row-major e4m3 scales ``[rows, k/16]``.

    Args:
        masked: each byte ``& 0xBB`` (:data:`MASKED_BYTE`): magnitudes in {0, 0.5, 1, 1.5}, as the
            problem generates them; False: any of the 16 codes (magnitudes up to 6).
        scale_exp: scales are positive normal e4m3 values ``(1 + m/8) * 2^e`` with e in this
            inclusive range.  The default, scales in [1/32, 0.47], keeps ``silu(x1) * x2`` inside fp16
            for K up to 7168 even with unrestricted values; wider ranges overflow fp16 to inf (as
            the GPU would) and are the caller's choice.
    """
    packed = rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8)
    if masked:
        packed &= MASKED_BYTE
    e = rng.integers(scale_exp[0], scale_exp[1] + 1, size=(rows, k // SF_VEC))
    m = rng.integers(0, 8, size=(rows, k // SF_VEC))
    sf = (((e + 7) << 3) | m).astype(np.uint8)
    return packed, sf


def _np_bytes(x: Any) -> np.ndarray:
    """uint8 numpy bytes of a numpy array or a (CPU or CUDA) torch tensor of 1-byte elements."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if x.element_size() != 1:
            raise ValueError(f"expected a 1-byte dtype, got {x.dtype}")
        import torch

        return x.contiguous().view(torch.uint8).numpy()
    return np.asarray(x).view(np.uint8)


def silu(x: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(-x))`` in the dtype of ``x`` (the problem's definition; overflow of exp gives -0/0)."""
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-x))


def nvfp4_dual_gemm_reference(a, b1, b2, sfa, sfb1, sfb2, scale_format: str = "e4m3") -> np.ndarray:
    """``C = silu(A @ B1.T) * (A @ B2.T)`` as the problem computes it; float16 ``[M, N]``.

    Args:
        a: packed e2m1 ``[M, K/2]``; b1, b2: ``[N, K/2]`` (numpy uint8 or torch uint8 /
            ``float4_e2m1fn_x2``).
        sfa: ``[M, K/16]`` e4m3 scale bytes in the 128x4 atom layout (the bytes of
            :func:`sf_to_blocked`; any shape holding ``M*K/16`` elements in that order);
            sfb1, sfb2: ``[N, K/16]`` likewise (numpy uint8 or torch ``float8_e4m3fn``/uint8).
        scale_format: ``"e4m3"``: scale bytes as torch's ``float8_e4m3fn`` reads them (the problem's reference:
            bit 7 a sign); ``"ue4m3"``: as the block-scaled MMA reads them (bit 7 ignored,
            :func:`ptxgen.formats.ue4m3_decode`).  They differ only on bytes with bit 7 set.

    Returns:
        float16 ``[M, N]``: fp32 dot products of the dequantized operands (``torch._scaled_mm``
        semantics), silu and the product in fp32, one rounding to fp16.

    Raises:
        ValueError: inconsistent shapes, a layout rule of :func:`sf_from_blocked`, or an unknown ``scale_format``.
    """
    a, b1, b2 = _np_bytes(a), _np_bytes(b1), _np_bytes(b2)
    m, kh = a.shape
    n = b1.shape[0]
    if b1.shape != (n, kh) or b2.shape != (n, kh):
        raise ValueError(f"b1 {b1.shape} and b2 {b2.shape} must both be [N, K/2] = [{n}, {kh}]")
    k = 2 * kh
    sa = sf_from_blocked(_np_bytes(sfa), m, k // SF_VEC)
    s1 = sf_from_blocked(_np_bytes(sfb1), n, k // SF_VEC)
    s2 = sf_from_blocked(_np_bytes(sfb2), n, k // SF_VEC)
    ad = dequantize(a, sa, scale_format)
    acc1 = ad @ np.ascontiguousarray(dequantize(b1, s1, scale_format).T)
    acc2 = ad @ np.ascontiguousarray(dequantize(b2, s2, scale_format).T)
    return (silu(acc1) * acc2).astype(np.float16)


# --------------------------------------------------------------------------- simulator semantics


def _smem_desc(desc: int, who: object, what: str, layout: int) -> tuple[int, int]:
    try:
        f = UMMA_SMEM_DESC.decode(desc)
    except ValueError as exc:
        raise SimError(f"bad descriptor: {who}, {what}: {exc}") from None
    if f["layout"] != layout or f["version"] != 1 or f["base_offset"] or f["lbo_mode"]:
        raise SimError(f"bad descriptor: {who}, {what}: {desc:#018x} decodes to {f}; expected layout {layout}, "
                       "version 1, base offset 0, relative LBO")
    return f["start"] << 4, f["sbo"] << 4


def sf_copy_index(desc: int, base: int, who: object = "tcgen05.cp") -> np.ndarray:
    """Byte offsets ``[32, 16]`` (from the smem base at shared-window address ``base``) of the 32 lines a
    ``tcgen05.cp ... 32x128b`` reads: line ``r`` at ``start + (r // 8) * SBO + (r % 8) * 16`` (unswizzled
    8 x 16-B core matrices).

    Raises:
        SimError: a descriptor that is not the unswizzled version-1 layout.
    """
    start, sbo = _smem_desc(desc, who, "source", 0)
    r = np.arange(32)[:, None]
    return start + (r // 8) * sbo + (r % 8) * 16 + np.arange(16)[None, :] - base


def sf_copy_words(lines: np.ndarray) -> np.ndarray:
    """TMEM words ``[128, 4]`` a ``32x128b.warpx4`` copy writes from its 32 lines of 16 bytes: lane ``32 p + r``,
    column ``j`` = little-endian word ``j`` of line ``r``, for each 32-lane partition ``p`` (``warpx4``)."""
    return np.tile(np.ascontiguousarray(lines, dtype=np.uint8).view("<u4").reshape(32, 4), (4, 1))


def tmem_copy_32x128b_warpx4(smem: np.ndarray, base: int, desc: int, tmem_words: np.ndarray, col: int,
                             who: object = "tcgen05.cp") -> None:
    """``tcgen05.cp.32x128b.warpx4``: 32 lines of 16 B from smem into TMEM columns ``col..col+3`` of all 128 lanes.

    Args:
        smem: the CTA's shared memory bytes (uint8), byte 0 at shared-window address ``base``.
        desc: the unswizzled smem descriptor (layout 0), see :func:`sf_copy_index`.
        tmem_words: ``[128, cols]`` uint32 view of TMEM, written in place (:func:`sf_copy_words`).

    Raises:
        SimError: a descriptor that is not the unswizzled version-1 layout, or a read outside smem.
    """
    idx = sf_copy_index(desc, base, who)
    if idx.min() < 0 or idx.max() >= smem.size:
        raise SimError(f"out of bounds: {who} reads smem [{idx.min() + base:#x}, {idx.max() + base + 1:#x}) "
                       "outside the CTA's window")
    tmem_words[:, col:col + 4] = sf_copy_words(smem[idx])


def operand_index(desc: int, rows: int, base: int, who: object, what: str) -> np.ndarray:
    """Byte offsets ``[rows, 32]`` of one K=64 slice of a K-major 128B-swizzled packed-e2m1 operand (row r's
    32 bytes at ``start + (r // 8) * SBO + (r % 8) * 128``, swizzled on the absolute address).

    Raises:
        SimError: a descriptor that is not the 128B-swizzled version-1 layout.
    """
    start, sbo = _smem_desc(desc, who, what, 2)
    r = np.arange(rows)[:, None]
    return swizzle128(start + (r // 8) * sbo + (r % 8) * 128 + np.arange(MXF4_MMA_K // 2)[None, :]) - base


def _operand(smem: np.ndarray, base: int, desc: int, rows: int, who: object, what: str) -> np.ndarray:
    """e2m1 codes ``[rows, 64]`` of one K=64 MMA slice of a K-major 128B-swizzled packed operand."""
    idx = operand_index(desc, rows, base, who, what)
    if idx.min() < 0 or idx.max() >= smem.size:
        raise SimError(f"out of bounds: {who} operand {what} reads outside the CTA's shared memory")
    return unpack_e2m1(smem[idx])


def scale_rows(tmem_words: np.ndarray, col: int, rows: int, scale_vec: str, sf_id: int, who: object,
               what: str, mma_k: int = MXF4_MMA_K) -> np.ndarray:
    """Scale bytes ``[rows, mma_k / vec]`` of one MMA: row ``x`` at lane ``x % 32``, column ``col + x // 32``, bytes
    sf_id.. (``mma_k``: K of one MMA, 64 for ``.kind::mxf4nvf4``, 32 for ``.kind::mxf8f6f4``).

    Raises:
        SimError: columns beyond ``tmem_words``.
    """
    per = mma_k // SCALE_VEC[scale_vec]
    ncols = rows // 32
    if col + ncols > tmem_words.shape[1]:
        raise SimError(f"out of bounds: {who} reads {what} scale columns [{col}, {col + ncols}) of "
                       f"{tmem_words.shape[1]} allocated")
    x = np.arange(rows)
    cell = tmem_words[x % 32, col + x // 32]  # [rows] uint32
    by = np.ascontiguousarray(cell).view(np.uint8).reshape(rows, 4)  # little-endian bytes
    return by[:, sf_id:sf_id + per]


def mma_shape(idesc: int, scale_vec: str, cta_group: int = 1, who: object = "tcgen05.mma") -> dict[str, int]:
    """The decoded ``.kind::mxf4nvf4`` idesc of a modelled MMA (``m``, ``n`` added), checked against ``scale_vec``.

    Raises:
        SimError: an idesc outside the modelled case (dense e2m1 x e2m1, K-major, K=64, M = 128 x cta_group), a
            scale format that disagrees with ``scale_vec``, ``.block32`` (not modelled) or a nonzero SF id.
    """
    try:
        f = UMMA_IDESC_MXF4.decode(idesc)
    except ValueError as exc:
        raise SimError(f"bad instruction descriptor: {who}: {exc}") from None
    if (f["a_format"], f["b_format"], f["sparse"], f["a_major"], f["b_major"], f["k_dim"],
            f["negate_a"], f["negate_b"]) != (1, 1, 0, 0, 0, 0, 0, 0):
        raise SimError(f"bad instruction descriptor: {who}: {idesc:#010x} decodes to {f}; the simulator models "
                       "dense e2m1 x e2m1, K-major, K=64, no negation")
    if scale_vec not in SCALE_VEC:
        raise SimError(f"{who}: scale_vec={scale_vec!r} is not one of {list(SCALE_VEC)}")
    want_format = 0 if scale_vec == "block16" else 1
    if f["scale_format"] != want_format:
        raise SimError(f"bad instruction descriptor: {who}: scale format bit {f['scale_format']} with .{scale_vec} "
                       f"(block16 needs ue4m3 = 0, block32 ue8m0 = 1)")
    if scale_vec == "block32":
        raise SimError(f"{who}: .block32 (ue8m0 scales) is not modelled; NVFP4 uses .block16")
    if f["a_sf_id"] or f["b_sf_id"]:
        raise SimError(f"bad instruction descriptor: {who}: scale-factor ids A={f['a_sf_id']} B={f['b_sf_id']}; "
                       ".block16 reads all 4 bytes of a column, so both must be 0")
    return block_scaled_mn(f, cta_group, who)


def block_scaled_mn(f: dict[str, int], cta_group: int, who: object) -> dict[str, int]:
    """``f`` (a decoded block-scaled idesc) with ``m`` and ``n`` added.

    Raises:
        SimError: M is not 128 x cta_group (the model covers 128 rows per CTA).
    """
    f["m"], f["n"] = f["m_dim"] << 7, f["n_dim"] << 3
    if f["m"] != 128 * cta_group:
        raise SimError(f"unsupported MMA shape: {who}: M={f['m']} with cta_group::{cta_group}; the block-scaled "
                       "model covers 128 rows per CTA")
    return f


def block_scaled_product(a_codes: np.ndarray, b_codes: np.ndarray, sa: np.ndarray, sb: np.ndarray,
                         scale_vec: str = "block16", who: object = "tcgen05.mma") -> np.ndarray:
    """float32 ``[M, N]`` = ``sum_k A[m,k] sa[m,k//v] B[n,k] sb[n,k//v]`` over one K=64 slice (float64 sum, one rounding).

    a_codes ``[M, 64]``, b_codes ``[N, 64]``: e2m1 codes; sa ``[M, 64/v]``, sb ``[N, 64/v]``: ue4m3 scale bytes.

    Raises:
        SimError: a scale byte that is not ue4m3.
    """
    v = SCALE_VEC[scale_vec]
    a = e2m1_decode(a_codes).astype(np.float64) * np.repeat(ue4m3_decode(sa, f"{who} scale_A").astype(np.float64), v, 1)
    b = e2m1_decode(b_codes).astype(np.float64) * np.repeat(ue4m3_decode(sb, f"{who} scale_B").astype(np.float64), v, 1)
    return (a @ b.T).astype(np.float32)


def block_scaled_mma(smem: np.ndarray, base: int, adesc: int, bdesc: int, idesc: int, tmem_words: np.ndarray,
                     sfa_col: int, sfb_col: int, scale_vec: str = "block16",
                     who: object = "tcgen05.mma") -> np.ndarray:
    """One ``tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale`` (K = 64): the fp32 product tile ``[M, N]``.

    The caller adds it to (or stores it as) the accumulator per the enable-input-d predicate.

    Args:
        smem, base: the CTA's shared memory bytes and the shared-window address of byte 0.
        adesc, bdesc: smem descriptors of A (``M`` rows) and B (``N`` rows): K-major, 128B swizzle,
            packed e2m1, the start address at this MMA's 32-byte K slice.
        idesc: ``.kind::mxf4nvf4`` instruction descriptor (:data:`UMMA_IDESC_MXF4`).
        tmem_words: ``[128, cols]`` uint32 view of TMEM holding the scale factors.
        sfa_col, sfb_col: the column fields of the ``[sfa]``/``[sfb]`` TMEM addresses.
        scale_vec: the instruction's ``.block16`` / ``.block32`` qualifier.

    Returns:
        float32 ``[M, N]``: :func:`block_scaled_product`.

    Raises:
        SimError: as :func:`mma_shape`, a scale byte that is not ue4m3, or an out-of-bounds read.
    """
    f = mma_shape(idesc, scale_vec, 1, who)
    a = _operand(smem, base, adesc, f["m"], who, "A")
    b = _operand(smem, base, bdesc, f["n"], who, "B")
    sa = scale_rows(tmem_words, sfa_col, f["m"], scale_vec, f["a_sf_id"], who, "A")
    sb = scale_rows(tmem_words, sfb_col, f["n"], scale_vec, f["b_sf_id"], who, "B")
    return block_scaled_product(a, b, sa, sb, scale_vec, who)
