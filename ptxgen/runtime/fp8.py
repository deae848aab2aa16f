"""Host side of the FP8 block-scaled recipe (DeepSeek-V3): quantize to e4m3 with fp32 block scales, and back.

:func:`quantize` produces what :func:`ptxgen.gemm_fp8` takes: A per 1 x 128 block (``block_rows=1``: scale_a
``[M, ceil(K/128)]``), B per 128 x 128 block (``block_rows=128``: scale_b ``[ceil(N/128), ceil(K/128)]``), each
scale the block's absolute maximum over 448 (the largest finite ``float8_e4m3fn``), 1 for an all-zero block, and
the values divided by their block's scale and rounded to e4m3 by torch (round to nearest even, PTX ISA
"cvt": ``.e4m3x2`` conversions saturate to 448 only with ``.satfinite``; a value at most the block's amax never
needs it).  :func:`dequantize` is the recipe's reading: ``q * scale`` per block, in fp32.
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
