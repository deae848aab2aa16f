"""MMA operand decoding: shared-memory descriptors, the tcgen05 instruction descriptor, wgmma fragments.

The simulator reads MMA operands the way the tensor cores do: from the
64-bit descriptors the kernel built at runtime (decoded with the bitfield
specs of :mod:`ptxgen.descriptors`), through the K-major 128B-swizzle
layout of :func:`ptxgen.check.swizzle.kmajor_sw128_index` or, for a wgmma
operand with its transpose immediate, the MN-major one of
:func:`ptxgen.check.swizzle.mnmajor_sw128_index`.  Any descriptor outside
those layouts is reported, not guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..descriptors import UMMA_IDESC_F16, UMMA_SMEM_DESC, WGMMA_SMEM_DESC
from ..errors import SimError

_UMMA_SW128 = 2  # UMMA_SMEM_DESC.layout: 128B swizzle
_WGMMA_SW128 = 1  # WGMMA_SMEM_DESC.swizzle: 128B swizzle
_UMMA_VERSION = 1


@dataclass(frozen=True)
class Operand:
    """A decoded shared-memory descriptor: shared-window start address, stride and leading byte offsets (bytes)."""

    start: int
    sbo: int
    lbo: int = 0


def _decode(spec, desc: int, who: object) -> dict[str, int]:
    try:
        return spec.decode(desc)
    except ValueError as exc:
        raise SimError(f"bad descriptor: {who}: {exc}") from None


def umma_operand(desc: int, who: object, operand: str) -> Operand:
    """Decode a tcgen05 shared-memory descriptor (K-major, 128B swizzle, version 1, base offset 0)."""
    f = _decode(UMMA_SMEM_DESC, desc, who)
    if f["layout"] != _UMMA_SW128 or f["version"] != _UMMA_VERSION or f["base_offset"] or f["lbo_mode"]:
        raise SimError(f"bad descriptor: {who}, operand {operand}: {desc:#018x} decodes to {f}; the simulator "
                       "models K-major bf16 with 128B swizzle (layout 2, version 1, base offset 0, relative LBO)")
    return Operand(f["start"] << 4, f["sbo"] << 4)


def wgmma_operand(desc: int, who: object, operand: str, mn_major: bool = False) -> Operand:
    """Decode a wgmma matrix descriptor (128B swizzle, base offset 0).  ``mn_major``: the instruction's transpose
    immediate for this operand; only an MN-major layout reads the leading byte offset (K-major 128B swizzle ignores
    it: ``lbo`` is then 0)."""
    f = _decode(WGMMA_SMEM_DESC, desc, who)
    if f["swizzle"] != _WGMMA_SW128 or f["base_offset"]:
        raise SimError(f"bad descriptor: {who}, operand {operand}: {desc:#018x} decodes to {f}; the simulator "
                       "models bf16 with 128B swizzle (swizzle 1, base offset 0)")
    return Operand(f["start"] << 4, f["sbo"] << 4, f["lbo"] << 4 if mn_major else 0)


def umma_shape(idesc: int, who: object) -> tuple[int, int]:
    """(M, N) of a ``.kind::f16`` instruction descriptor for bf16 x bf16 -> f32, both K-major."""
    f = _decode(UMMA_IDESC_F16, idesc, who)
    if (f["d_format"], f["a_format"], f["b_format"], f["a_major"], f["b_major"]) != (1, 1, 1, 0, 0) \
            or f["negate_a"] or f["negate_b"] or f["sparse"]:
        raise SimError(f"bad instruction descriptor: {who}: {idesc:#010x} decodes to {f}; the simulator models "
                       "dense bf16 x bf16 -> f32 with K-major A and B")
    return f["m_dim"] << 4, f["n_dim"] << 3


@lru_cache(maxsize=None)
def wgmma_fragment(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row (within the warp's 16 rows) and column of value i of lane l of an m64nNk16 f32 accumulator.

    PTX ISA "wgmma: Matrix fragments for .m64nNk16": lane l of
    warp w, value i: row = 16*(w%4) + l/4 + 8*((i/2)&1),
    col = 8*(i/4) + 2*(l%4) + (i&1).  Returns ``[32, n/2]`` arrays.
    """
    lane = np.arange(32)[:, None]
    i = np.arange(n // 2)[None, :]
    return lane // 4 + 8 * ((i // 2) & 1), 8 * (i // 4) + 2 * (lane % 4) + (i & 1)
