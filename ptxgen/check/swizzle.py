"""Shared-memory address math of the checks: the 128-byte swizzle, TMA box bytes, K-major operand slices.

The 128-byte swizzle is a function of the *absolute* shared-window address (PTX ISA "Tensor copy:
swizzle modes", "Shared memory descriptor: matrix layouts"): address bits [4:6] are XORed with bits
[7:9].  TMA writes and the MMAs' reads apply it the same way, so a misplaced destination shows up as
wrong data.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..hw import MN_MAJOR_CHUNK


def swizzle128(addr: np.ndarray) -> np.ndarray:
    """128-byte swizzle of absolute shared addresses: bits [4:6] ^= bits [7:9]."""
    return addr ^ (((addr >> 7) & 7) << 4)


@lru_cache(maxsize=4096)
def box_index(dst_abs: int, rows: int, row_bytes: int, swizzled: bool, base: int) -> np.ndarray:
    """Byte offsets (from the smem base) of a TMA box's bytes, row-major: row r, byte j at ``dst + r*row_bytes + j``.

    The box is dense in shared memory (row pitch = inner box bytes); with 128B
    swizzle the inner extent is exactly 128 bytes, so rows are 128-B lines.
    """
    lin = dst_abs + np.arange(rows * row_bytes, dtype=np.int64)
    if swizzled:
        lin = swizzle128(lin)
    lin -= base
    lin.setflags(write=False)
    return lin


@lru_cache(maxsize=4096)
def kmajor_sw128_index(start_abs: int, rows: int, sbo: int, base: int) -> np.ndarray:
    """Byte offsets ``[rows, 16]`` of element (r, k) of a K-major, 128B-swizzled bf16 operand, one k16 slice.

    Element (r, k) lies at ``start + (r // 8) * SBO + (r % 8) * 128 + 2 * k``
    before the swizzle (8-row core-matrix groups of 128-byte rows; PTX ISA
    "tcgen05 Shared memory descriptor", "wgmma Matrix Descriptor": K-major,
    128B swizzle, the leading byte offset unused inside one swizzle atom).
    A k16 step is ``start + 32``.
    """
    r = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(16, dtype=np.int64)[None, :]
    idx = swizzle128(start_abs + (r // 8) * sbo + (r % 8) * 128 + 2 * k) - base
    idx.setflags(write=False)
    return idx


@lru_cache(maxsize=4096)
def mnmajor_sw128_index(start_abs: int, rows: int, lbo: int, sbo: int, base: int) -> np.ndarray:
    """Byte offsets ``[rows, 16]`` of element (r, k) of an MN-major, 128B-swizzled bf16 operand, one k16 slice.

    ``rows`` counts M or N (the operand's contiguous dimension).  Element (r, k) lies at ``start + (r // 64) * LBO +
    (k // 8) * SBO + (k % 8) * 128 + 2 * (r % 64)`` before the swizzle: 64-element chunks (one 128-byte swizzle row
    each) LBO apart along M or N, 8 K rows of 128 bytes per swizzle atom, atoms SBO apart along K (PTX ISA "Matrix
    Descriptor Format", MN-major layouts: the leading byte offset steps along M or N, the stride byte offset along
    K).  A k16 step is ``start + 16 * 128``.
    """
    r = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(16, dtype=np.int64)[None, :]
    idx = swizzle128(start_abs + (r // MN_MAJOR_CHUNK) * lbo + (k // 8) * sbo + (k % 8) * 128 + 2 * (r % MN_MAJOR_CHUNK)) - base
    idx.setflags(write=False)
    return idx


@lru_cache(maxsize=4096)
def kmajor_sw128_bytes(start_abs: int, rows: int, sbo: int, base: int, nbytes: int = 32) -> np.ndarray:
    """Byte offsets ``[rows, nbytes]`` of byte j of row r of a K-major, 128B-swizzled operand slice (8-bit
    elements: one k32 slice of e4m3 is 32 bytes per row), laid out as :func:`kmajor_sw128_index`."""
    r = np.arange(rows, dtype=np.int64)[:, None]
    j = np.arange(nbytes, dtype=np.int64)[None, :]
    idx = swizzle128(start_abs + (r // 8) * sbo + (r % 8) * 128 + j) - base
    idx.setflags(write=False)
    return idx
