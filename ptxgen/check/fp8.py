"""FP8 block scaling on the CPU: e4m3 encoding, DeepSeek-V3's quantization rules and the recipe's fp32 reference.

The recipe (DeepSeek-V3 technical report, "FP8 training"; docs/fp8.md): A ``[M, K]`` is quantized per 1 x 128
block (one fp32 scale per row and 128-K block: ``amax / 448``), B ``[N, K]`` per 128 x 128 block; the product
is ``D[m, n] = sum_kb scale_a[m, kb] * scale_b[n // 128, kb] * sum_{k in kb} A[m, k] * B[n, k]`` with A and B the
e4m3 values.  448 is e4m3fn's largest finite value.

sm_100a runs the recipe as MXFP8 (``.kind::mxf8f6f4`` block-scaled MMAs, ue8m0 scales per 1 x 32): the host
conversion :func:`mx_from_recipe`, the MXFP8 reference :func:`mx_gemm_reference` and the MMA semantics the
simulator calls (:func:`mxf8_mma_shape`, :func:`mxf8_product`) are below.
"""

from __future__ import annotations

import numpy as np

from ..descriptors import MXF8_E4M3, MXF8_SCALE_VEC, UMMA_IDESC_MXF8F6F4
from ..errors import SimError
from ..formats import E4M3_MAX, E4M3_VALUES, e4m3_decode
from .nvfp4 import block_scaled_mn
from ..hw import FP8_SCALE_BLOCK as SCALE_BLOCK  # K elements per scale block; rows of B per scale_b block
_POS = np.asarray(E4M3_VALUES[:0x7F], dtype=np.float64)  # codes 0x00-0x7E: the finite non-negative values, ascending


def e4m3_encode(x) -> np.ndarray:
    """e4m3fn bytes (uint8) of ``x``: round to nearest, ties to the even code (torch's ``float8_e4m3fn`` cast),
    saturating at +-448 (the recipe's scales keep |x / scale| <= 448; no NaN input)."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(_POS, mag), 1, len(_POS) - 1)
    lo = hi - 1
    d_lo, d_hi = mag - _POS[lo], _POS[hi] - mag
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo).astype(np.uint8)
    return np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)  # -0.0 is 0x80, as torch's cast


def quantize_blocks(x: np.ndarray, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` ``[R, K]`` per ``block_rows`` x 128 block: (e4m3 bytes ``[R, K]``, fp32 scales
    ``[ceil(R / block_rows), ceil(K / 128)]``) with scale = amax / 448 (1 for an all-zero block)."""
    r, k = x.shape
    rb, kb = -(-r // block_rows), -(-k // SCALE_BLOCK)
    pad = np.zeros((rb * block_rows, kb * SCALE_BLOCK), dtype=np.float64)
    pad[:r, :k] = x
    blocks = np.abs(pad).reshape(rb, block_rows, kb, SCALE_BLOCK)
    amax = blocks.max(axis=(1, 3))
    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    full = np.repeat(np.repeat(scale.astype(np.float64), block_rows, axis=0), SCALE_BLOCK, axis=1)[:r, :k]
    return e4m3_encode(x / full), scale


def random_fp8(m: int, n: int, k: int, seed: int) -> dict[str, np.ndarray]:
    """Standard-normal A ``[m, k]`` and B ``[n, k]`` quantized with the recipe's rules: ``a``, ``b`` (e4m3 bytes),
    ``scale_a`` ``[m, ceil(k/128)]`` and ``scale_b`` ``[ceil(n/128), ceil(k/128)]`` (fp32)."""
    rng = np.random.default_rng(seed)
    a, sa = quantize_blocks(rng.standard_normal((m, k)), 1)
    b, sb = quantize_blocks(rng.standard_normal((n, k)), SCALE_BLOCK)
    return {"a": a, "b": b, "scale_a": sa, "scale_b": sb}


def fp8_gemm_reference(a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray) -> np.ndarray:
    """The recipe's D ``[m, n]`` (float64 sums, returned as float32) from e4m3 bytes and fp32 scales."""
    m, k = a.shape
    n = b.shape[0]
    av, bv = e4m3_decode(a).astype(np.float64), e4m3_decode(b).astype(np.float64)
    d = np.zeros((m, n), dtype=np.float64)
    sb_rows = np.repeat(scale_b.astype(np.float64), SCALE_BLOCK, axis=0)[:n]  # [n, kb]
    for kb in range(-(-k // SCALE_BLOCK)):
        sl = slice(kb * SCALE_BLOCK, min(k, (kb + 1) * SCALE_BLOCK))
        d += (av[:, sl] @ bv[:, sl].T) * scale_a[:, kb:kb + 1].astype(np.float64) * sb_rows[None, :, kb]
    return d.astype(np.float32)


# --------------------------------------------------------------------------- sm_100a: MXFP8 (ue8m0 per 1 x 32)
#
# The Blackwell form of the recipe (docs/fp8.md, "sm_100a"): ``tcgen05.mma .kind::mxf8f6f4.block_scale.block32``
# multiplies e4m3 A and B scaled by one ue8m0 power of two per row per 32 K (PTX ISA "tcgen05.mma" block scaling;
# 5.2.3 "Alternate Floating-Point Data Formats": ue8m0 is an 8-bit unsigned exponent, bias 127, 0xFF NaN) and
# accumulates in fp32 in TMEM.  The recipe's fp32 scales per 1 x 128 (A) and 128 x 128 (B) blocks are turned
# into that form on the host by :func:`mx_from_recipe` (its torch twin: :func:`ptxgen.runtime.fp8.to_mx`).

MX_BLOCK = 32
"""K elements per ue8m0 scale (``.scale_vec::1X`` / ``.block32`` of ``.kind::mxf8f6f4``)."""
UE8M0_BIAS = 127
UE8M0_NAN = 0xFF
UE8M0_MIN_EXP, UE8M0_MAX_EXP = -UE8M0_BIAS, 0xFE - UE8M0_BIAS  # 2^-127 .. 2^127


def ue8m0_decode(bits, who: object = "scale") -> np.ndarray:
    """float64 values ``2^(b - 127)`` of ue8m0 scale bytes.

    Raises:
        SimError: a NaN byte (``0xFF``): the simulator does not guess NaN scales.
    """
    b = np.asarray(bits, dtype=np.uint8)
    if (b == UE8M0_NAN).any():
        raise SimError(f"bad scale factor: {who}: byte 0xff is the ue8m0 NaN (PTX ISA 5.2.3); MXFP8 scales must be finite")
    return np.ldexp(1.0, b.astype(np.int64) - UE8M0_BIAS)


def _ceil_log2(x: np.ndarray) -> np.ndarray:
    """``ceil(log2(x))`` of positive float64 values, exactly (``frexp``: x = m 2^e, m in [0.5, 1))."""
    m, e = np.frexp(x)
    return np.where(m == 0.5, e - 1, e).astype(np.int64)


def mx_quantize(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MXFP8 of real values ``v`` ``[R, K]`` (K a multiple of 32): (e4m3 bytes ``[R, K]``, ue8m0 bytes ``[R, K/32]``).

    Each 1 x 32 block gets the smallest power of two ``2^e >= amax / 448`` (1 for an all-zero block; e clamped to
    the ue8m0 range), and its values ``v / 2^e`` rounded to e4m3 (nearest, ties to even): ``|v / 2^e| <= 448``, so
    nothing saturates, and the block's largest value lands in (224, 448] (before rounding): no range is wasted.

    Raises:
        ValueError: K not a multiple of 32.
    """
    v = np.asarray(v, dtype=np.float64)
    r, k = v.shape
    if k % MX_BLOCK:
        raise ValueError(f"K={k}: MXFP8 blocks are 1 x {MX_BLOCK}; K must be a multiple of {MX_BLOCK}")
    amax = np.abs(v).reshape(r, k // MX_BLOCK, MX_BLOCK).max(axis=2)
    e = np.where(amax > 0, _ceil_log2(np.where(amax > 0, amax, 1.0) / E4M3_MAX), 0)
    e = np.clip(e, UE8M0_MIN_EXP, UE8M0_MAX_EXP)
    q = e4m3_encode(v / np.repeat(np.ldexp(1.0, e), MX_BLOCK, axis=1))
    return q, (e + UE8M0_BIAS).astype(np.uint8)


def mx_from_recipe(q: np.ndarray, scale: np.ndarray, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The recipe's operand in the MXFP8 kernel's form: (e4m3 bytes ``[R, K]``, ue8m0 bytes ``[R, K/32]`` row-major).

    Args:
        q: e4m3 bytes ``[R, K]`` (K a multiple of 128, the kernel's k-block).
        scale: the recipe's fp32 scales ``[ceil(R / block_rows), K/128]``.
        block_rows: 1 (A, 1 x 128 blocks) or 128 (B, 128 x 128 blocks).

    Returns:
        :func:`mx_quantize` of the recipe's values ``q * scale``: each 1 x 32 sub-block re-quantized with the
        power of two at or above its own amax / 448.  When the recipe's scale is a power of two this is exact
        (every value is ``q * 2^j`` with ``j >= 0`` and ``|q| 2^j <= 448``: the same e4m3 significand), so the
        MXFP8 GEMM computes the recipe's D; otherwise each element moves by at most half an e4m3 ulp (relative
        2^-4 for normals, absolute 2^-10 x the block's scale below e4m3's normal range): docs/fp8.md.

    Raises:
        ValueError: ``block_rows`` not 1 or 128, K not a multiple of 128, or a scale shape that does not match.
    """
    q = np.asarray(q, dtype=np.uint8)
    r, k = q.shape
    if block_rows not in (1, SCALE_BLOCK):
        raise ValueError(f"block_rows={block_rows}: the recipe's blocks are 1 x 128 (A) or 128 x 128 (B)")
    if k % SCALE_BLOCK:
        raise ValueError(f"K={k}: the MXFP8 kernel takes whole 128-K blocks; K must be a multiple of {SCALE_BLOCK}")
    want = (-(-r // block_rows), k // SCALE_BLOCK)
    if np.shape(scale) != want:
        raise ValueError(f"scale: shape {np.shape(scale)} must be {want} for q {q.shape} and {block_rows}-row blocks")
    full = np.repeat(np.repeat(np.asarray(scale, dtype=np.float64), block_rows, axis=0)[:r], SCALE_BLOCK, axis=1)
    return mx_quantize(e4m3_decode(q).astype(np.float64) * full)


def mx_dequantize(q: np.ndarray, sf: np.ndarray) -> np.ndarray:
    """float64 ``[R, K]`` values of e4m3 bytes ``q`` with row-major ue8m0 scales ``sf`` ``[R, K/32]`` (exact)."""
    return e4m3_decode(q).astype(np.float64) * np.repeat(ue8m0_decode(sf), MX_BLOCK, axis=1)


def mx_gemm_reference(a: np.ndarray, b: np.ndarray, sfa: np.ndarray, sfb: np.ndarray) -> np.ndarray:
    """The MXFP8 GEMM's D ``[m, n]`` (float64 sums, returned as float32): e4m3 ``a`` ``[m, K]``, ``b`` ``[n, K]``, their
    row-major ue8m0 scales ``sfa`` ``[m, K/32]``, ``sfb`` ``[n, K/32]``."""
    return (mx_dequantize(a, sfa) @ mx_dequantize(b, sfb).T).astype(np.float32)


def random_mxfp8(m: int, n: int, k: int, seed: int, pow2_scales: bool = False) -> dict[str, np.ndarray]:
    """The recipe's random operands (:func:`random_fp8`) and their MXFP8 form: ``a``, ``b``, ``scale_a``, ``scale_b``
    (the recipe) and ``mx_a``, ``mx_b`` (e4m3), ``sfa``, ``sfb`` (row-major ue8m0) from :func:`mx_from_recipe`.

    pow2_scales: round the recipe's scales up to powers of two first (re-quantizing A and B with them: the
    ue8m0-scaled recipe), so the MXFP8 form is exact.
    """
    x = random_fp8(m, n, k, seed)
    if pow2_scales:
        for q, s, rows in (("a", "scale_a", 1), ("b", "scale_b", SCALE_BLOCK)):
            p2 = np.ldexp(1.0, _ceil_log2(x[s].astype(np.float64))).astype(np.float32)
            full = np.repeat(np.repeat(x[s].astype(np.float64) / p2, rows, axis=0)[:x[q].shape[0]], SCALE_BLOCK, axis=1)
            x[q], x[s] = e4m3_encode(e4m3_decode(x[q]).astype(np.float64) * full[:, :k]), p2
    x["mx_a"], x["sfa"] = mx_from_recipe(x["a"], x["scale_a"], 1)
    x["mx_b"], x["sfb"] = mx_from_recipe(x["b"], x["scale_b"], SCALE_BLOCK)
    return x


# --------------------------------------------------------------------------- simulator semantics (.kind::mxf8f6f4)


def mxf8_mma_shape(idesc: int, scale_vec: str, cta_group: int = 1, who: object = "tcgen05.mma") -> dict[str, int]:
    """The decoded ``.kind::mxf8f6f4`` idesc of a modelled MMA (``m``, ``n`` added).

    Raises:
        SimError: an idesc outside the modelled case (dense e4m3 x e4m3, K-major, no negation, ue8m0 scales,
            M = 128 x cta_group) or a scale vector other than ``block32`` (the kind's only one, ``.scale_vec::1X``).
    """
    try:
        f = UMMA_IDESC_MXF8F6F4.decode(idesc)
    except ValueError as exc:
        raise SimError(f"bad instruction descriptor: {who}: {exc}") from None
    if (f["a_format"], f["b_format"], f["sparse"], f["a_major"], f["b_major"], f["negate_a"], f["negate_b"]) != \
            (MXF8_E4M3, MXF8_E4M3, 0, 0, 0, 0, 0):
        raise SimError(f"bad instruction descriptor: {who}: {idesc:#010x} decodes to {f}; the simulator models "
                       "dense e4m3 x e4m3 (format 0), K-major, K=32, no negation")
    if scale_vec != MXF8_SCALE_VEC or f["scale_format"] != 1:
        raise SimError(f"bad instruction descriptor: {who}: .{scale_vec} with scale format {f['scale_format']}; "
                       f".kind::mxf8f6f4 takes .{MXF8_SCALE_VEC} (scale_vec::1X) with ue8m0 scales (format 1)")
    return block_scaled_mn(f, cta_group, who)


def mxf8_product(a_codes: np.ndarray, b_codes: np.ndarray, sa: np.ndarray, sb: np.ndarray,
                 who: object = "tcgen05.mma") -> np.ndarray:
    """float32 ``[M, N]`` = ``sum_k A[m,k] 2^sa[m] B[n,k] 2^sb[n]`` over one K=32 MMA (float64 sum, one rounding).

    a_codes ``[M, 32]``, b_codes ``[N, 32]``: e4m3 bytes; sa ``[M, 1]``, sb ``[N, 1]``: ue8m0 scale bytes.

    Raises:
        SimError: a NaN scale byte.
    """
    return (mx_dequantize(a_codes, np.asarray(sa).reshape(-1, 1)) @
            mx_dequantize(b_codes, np.asarray(sb).reshape(-1, 1)).T).astype(np.float32)
