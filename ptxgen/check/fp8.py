"""FP8 block scaling on the CPU: e4m3 encoding, DeepSeek-V3's quantization rules and the recipe's fp32 reference.

The recipe (DeepSeek-V3 technical report, "FP8 training"; docs/fp8.md): A ``[M, K]`` is quantized per 1 x 128
block (one fp32 scale per row and 128-K block: ``amax / 448``), B ``[N, K]`` per 128 x 128 block; the product
is ``D[m, n] = sum_kb scale_a[m, kb] * scale_b[n // 128, kb] * sum_{k in kb} A[m, k] * B[n, k]`` with A and B the
e4m3 values.  448 is e4m3fn's largest finite value.
"""

from __future__ import annotations

import numpy as np

from ..formats import E4M3_MAX, E4M3_VALUES, e4m3_decode
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
