"""Host side of the FP8 block-scaled recipe (DeepSeek-V3): quantize to e4m3 with fp32 block scales, and back.

:func:`quantize` produces what :func:`ptxgen.gemm_fp8` takes: A per 1 x 128 block (``block_rows=1``: scale_a
``[M, ceil(K/128)]``), B per 128 x 128 block (``block_rows=128``: scale_b ``[ceil(N/128), ceil(K/128)]``), each
scale the block's absolute maximum over 448 (the largest finite ``float8_e4m3fn``), 1 for an all-zero block, and
the values divided by their block's scale and rounded to e4m3 by torch (round to nearest even, PTX ISA
"cvt": ``.e4m3x2`` conversions saturate to 448 only with ``.satfinite``; a value at most the block's amax never
needs it).  :func:`dequantize` is the recipe's reading: ``q * scale`` per block, in fp32.

sm_100a (``operands: mxfp8``, docs/fp8.md "sm_100a"): :func:`to_mx` turns the recipe's operand into the MXFP8
kernel's (e4m3 values with one ue8m0 scale byte per row per 32 K), :func:`mx_quantize` quantizes a real tensor
to MXFP8 directly, and ``ptxgen.formats.sf_to_blocked_torch`` lays the scale bytes out in the kernel's 128x4 atoms.
Their numpy definitions, which the simulator and the tests read, are ``ptxgen.check.fp8.mx_from_recipe`` and
``mx_quantize``; these agree with them byte for byte.
"""

from __future__ import annotations

from typing import Any

from ptxgen.formats import E4M3_MAX  # the largest finite float8_e4m3fn
from ptxgen.hw import FP8_SCALE_BLOCK as BLOCK  # K elements (and rows of B) per scale block


def quantize(x: Any, block_rows: int) -> tuple[Any, Any]:
    """``x`` ``[R, K]`` (any float dtype, any device) -> (``float8_e4m3fn`` ``[R, K]``, fp32 scales
    ``[ceil(R / block_rows), ceil(K / 128)]``).

    Raises:
        ValueError: ``x`` is not 2-D, or ``block_rows`` is not 1 or 128.
    """
    import torch

    if x.dim() != 2:
        raise ValueError(f"x: shape {tuple(x.shape)}: the recipe quantizes a 2-D [rows, K] tensor")
    if block_rows not in (1, BLOCK):
        raise ValueError(f"block_rows={block_rows}: the recipe's blocks are 1 x 128 (activations) or 128 x 128 (weights)")
    r, k = x.shape
    rb, kb = -(-r // block_rows), -(-k // BLOCK)
    pad = torch.zeros((rb * block_rows, kb * BLOCK), device=x.device, dtype=torch.float32)
    pad[:r, :k] = x
    amax = pad.abs().reshape(rb, block_rows, kb, BLOCK).amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return (x.float() / _expand(scale, block_rows, r, k)).to(torch.float8_e4m3fn), scale


def dequantize(q: Any, scale: Any, block_rows: int) -> Any:
    """The recipe's value of ``q`` ``[R, K]`` e4m3 with its block ``scale``: ``q * scale`` per block, fp32."""
    r, k = q.shape
    return q.float() * _expand(scale, block_rows, r, k)


def _expand(scale: Any, block_rows: int, r: int, k: int) -> Any:
    return scale.repeat_interleave(block_rows, 0).repeat_interleave(BLOCK, 1)[:r, :k]


MX_BLOCK = 32  # K elements per ue8m0 scale of the MXFP8 kernel (tcgen05.mma .kind::mxf8f6f4 .scale_vec::1X)
UE8M0_BIAS = 127


def mx_quantize(x: Any) -> tuple[Any, Any]:
    """``x`` ``[R, K]`` (any float dtype, any device; K a multiple of 32) -> (``float8_e4m3fn`` ``[R, K]``, ue8m0 scale
    bytes ``uint8`` ``[R, K/32]``, row-major).

    Each 1 x 32 block: ``2^e`` the smallest power of two at or above its amax / 448 (``e = 0`` for an all-zero
    block; e clamped to [-127, 127]), values ``x / 2^e`` rounded to e4m3 (nearest even; ``|x / 2^e| <= 448``), scale
    byte ``e + 127``.  Computed in float64, so the bytes equal ``ptxgen.check.fp8.mx_quantize``'s.

    Raises:
        ValueError: ``x`` is not 2-D or K is not a multiple of 32.
    """
    import torch

    if x.dim() != 2 or x.shape[1] % MX_BLOCK:
        raise ValueError(f"x: shape {tuple(x.shape)}: MXFP8 quantizes a 2-D [rows, K] tensor with K a multiple of {MX_BLOCK}")
    r, k = x.shape
    v = x.to(torch.float64)
    amax = v.abs().reshape(r, k // MX_BLOCK, MX_BLOCK).amax(dim=2)
    mant, e = torch.frexp(torch.where(amax > 0, amax, torch.ones_like(amax)) / E4M3_MAX)
    e = torch.where(mant == 0.5, e - 1, e)  # ceil(log2(amax / 448)), exactly
    e = torch.where(amax > 0, e, torch.zeros_like(e)).clamp(-UE8M0_BIAS, UE8M0_BIAS).to(torch.int64)
    q = (v / torch.ldexp(torch.ones_like(v), e.repeat_interleave(MX_BLOCK, 1))).to(torch.float8_e4m3fn)
    return q, (e + UE8M0_BIAS).to(torch.uint8)


def to_mx(q: Any, scale: Any, block_rows: int) -> tuple[Any, Any]:
    """The recipe's operand (:func:`quantize`: ``float8_e4m3fn`` ``q`` ``[R, K]`` with fp32 ``scale`` per ``block_rows``
    x 128 block) as the MXFP8 kernel takes it: :func:`mx_quantize` of the recipe's values ``q * scale``.

    Exact when the recipe's scales are powers of two (the ue8m0-scaled recipe): every value keeps its e4m3
    significand; otherwise each moves by at most half an e4m3 ulp (docs/fp8.md, "sm_100a").

    Raises:
        ValueError: ``block_rows`` not 1 or 128, K not a multiple of 128, or a scale shape that does not match.
    """
    import torch

    r, k = q.shape
    if block_rows not in (1, BLOCK):
        raise ValueError(f"block_rows={block_rows}: the recipe's blocks are 1 x 128 (activations) or 128 x 128 (weights)")
    if k % BLOCK:
        raise ValueError(f"q: K={k}: the MXFP8 kernel takes whole 128-K blocks; K must be a multiple of {BLOCK}")
    want = (-(-r // block_rows), k // BLOCK)
    if tuple(scale.shape) != want:
        raise ValueError(f"scale: shape {tuple(scale.shape)} must be {want} for q {tuple(q.shape)} and {block_rows}-row blocks")
    return mx_quantize(q.to(torch.float64) * _expand(scale.to(torch.float64), block_rows, r, k))
