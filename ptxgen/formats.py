"""Host-side NVFP4 formats: e2m1 values, e4m3 scales and the 128x4 scale-factor atom layout.

Both the runtime (which hands blocked scale buffers to the kernel) and the checks (which decode them)
read these; nothing here depends on the compile path or on the checks.

Formats (PTX ISA "Alternate Floating Point Data Formats"; OCP MX spec; cuBLAS "1D Block Scaling"):

* **e2m1** (``.e2m1``, torch ``float4_e2m1fn_x2`` packs two): sign bit 3, exponent bits 2-1 (bias 1),
  mantissa bit 0; codes 0-7 are ``0, 0.5, 1, 1.5, 2, 3, 4, 6`` (0.5 is the subnormal), 8-15 their
  negatives (8 is -0).  No inf or NaN.  Packing: element ``2j`` in the **low** nibble of byte ``j``,
  element ``2j+1`` in the high nibble (torch ``pack_uint4``: ``data[1::2] << 4 | data[::2]``; the same
  little-endian order the tensor cores read).
* **e4m3** (torch ``float8_e4m3fn``): sign bit 7, exponent bits 6-3 (bias 7), mantissa bits 2-0;
  exponent 0 is subnormal (``m/8 * 2^-6``); ``0x7F``/``0xFF`` are NaN; no inf; max 448.
* **ue4m3** (the block-scaled MMA's NVFP4 scale, PTX ISA 5.2.3 "Alternate Floating-Point Data Formats"): a
  7-bit *unsigned* format, exponent bits 6-3 (bias 7), mantissa bits 2-0, no inf, NaN ``0x7F``; a ``.b8``
  holding one must have its MSB (bit 7) padded with zero.  The ISA says nothing of what ``tcgen05.mma
  ... .block_scale`` does with a scale byte whose bit 7 is set ("Block Scaling" only names the type
  UE4M3).  This package reads such a byte as CUTLASS's host type ``cutlass::float_ue4m3_t`` does
  (``FpBitRepresentation<uint8_t, 8, 4, 3, CANONICAL_ONLY, /*IsSigned=*/false>``: exponent and
  mantissa from bits 6-0, bit 7 never read, exponent and mantissa all ones NaN): ``ue4m3(b) =
  e4m3(b & 0x7F)``, so ``0xFF`` is NaN too (:func:`ue4m3_decode`).  A scale that torch's
  ``float8_e4m3fn`` reads as negative therefore acts as its magnitude in the MMA; :func:`fold_scale_signs`
  moves such signs into the e2m1 values (exact), which keeps the signed reading's products.
* **NVFP4 block scaling**: one scale per 16 consecutive K elements of a row of A (or of B):
  ``A[m, k] = e2m1(a[m, k]) * e4m3(sfa[m, k // 16])``.
* **scale-factor atom** (cuBLAS "1D Block Scaling Factors Layout", torch ``to_blocked``): the
  scale matrix ``[R, K/16]`` is cut into atoms of 128 rows x 4 scale columns (512 bytes); atoms are
  stored row-block-major (``rb * (K/64) + kb``); inside an atom, scale ``(r, c)`` is at byte
  ``(r % 32) * 16 + (r // 32) * 4 + c``, i.e. 32 lines of 16 B: the ``32 x 4 x rest_mn x 4 x rest_k``
  view of the problem statement.  A line is exactly what ``tcgen05.cp ... 32x128b.warpx4`` moves to
  one TMEM lane (4 columns): column ``j`` of lane ``l`` holds the 4 scales of row ``l + 32 j``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .hw import SF_ATOM_K, SF_ATOM_ROWS, SF_VEC

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
"""float32 value of each e2m1 code 0-15."""

def _e4m3_table() -> np.ndarray:
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp, man = (codes >> 3) & 0xF, codes & 0x7
    mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    out = (sign * mag).astype(np.float32)
    out[[0x7F, 0xFF]] = np.nan
    out.setflags(write=False)
    return out


E4M3_VALUES = _e4m3_table()
"""float32 value of each e4m3fn byte 0-255 (``0x7F``, ``0xFF`` NaN)."""
E4M3_MAX = 448.0
"""The largest finite e4m3fn value (``0x7E``)."""


# --------------------------------------------------------------------------- decode / pack


def e2m1_decode(codes) -> np.ndarray:
    """float32 values of e2m1 codes (any integer array with values 0-15)."""
    return E2M1_VALUES[np.asarray(codes, dtype=np.uint8)]


def unpack_e2m1(packed) -> np.ndarray:
    """Codes ``[..., 2C]`` (uint8, 0-15) of packed bytes ``[..., C]``: low nibble = even element."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out


def pack_e2m1(codes) -> np.ndarray:
    """Packed bytes ``[..., C/2]`` of codes ``[..., C]`` (inverse of :func:`unpack_e2m1`).

    Raises:
        ValueError: odd last dimension or a code above 15.
    """
    c = np.asarray(codes, dtype=np.uint8)
    if c.shape[-1] % 2:
        raise ValueError(f"pack_e2m1: last dimension {c.shape[-1]} must be even")
    if (c > 15).any():
        raise ValueError("pack_e2m1: codes must be 0-15")
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def e4m3_decode(bits) -> np.ndarray:
    """float32 values of e4m3fn bytes (torch ``float8_e4m3fn``)."""
    return E4M3_VALUES[np.asarray(bits, dtype=np.uint8)]


UE4M3_PAD_BIT = 0x80
"""Bit 7 of a ue4m3 scale byte: padding outside the 7-bit format (PTX ISA 5.2.3), never read as a sign."""
UE4M3_NAN = 0x7F
"""The ue4m3 NaN (PTX ISA 5.2.3: "NaN value is limited to 0x7f"); with bit 7 ignored, ``0xFF`` reads as it."""


def ue4m3_decode(bits) -> np.ndarray:
    """float32 values of ue4m3 scale bytes as the block-scaled MMA reads them in this package's model.

    Bits 6-0 are an unsigned e4m3 (exponent 6-3, bias 7, mantissa 2-0; exponent 0 subnormal); bit 7
    (:data:`UE4M3_PAD_BIT`) is not read: ``ue4m3(b) == e4m3(b & 0x7F)``, NaN for ``0x7F`` and ``0xFF``.
    The PTX ISA requires bit 7 to be zero and is silent on a set one; this is the reading of CUTLASS's
    ``cutlass::float_ue4m3_t`` (module docstring).  No error is raised: callers decide about NaN.
    """
    return E4M3_VALUES[np.asarray(bits, dtype=np.uint8) & ~np.uint8(UE4M3_PAD_BIT)]


def fold_scale_signs(packed, sf) -> tuple[np.ndarray, np.ndarray]:
    """``(packed', sf')``: the signs of e4m3 scales moved into their blocks' e2m1 values; ``sf'`` has bit 7 clear.

    Args:
        packed: packed e2m1 ``[R, K/2]`` (uint8); sf: its row-major e4m3 scales ``[R, K/16]`` (uint8 bytes).

    Returns:
        ``packed'``: each byte of a 16-element block whose scale byte has bit 7 set gets both nibbles' sign
        bits flipped (``^ 0x88``; e2m1 negation is exact); ``sf' = sf & 0x7F``.  Then the MMA's reading
        ``dequantize(packed', sf', "ue4m3")`` equals the signed reading ``dequantize(packed, sf)`` element for
        element (NaN scales stay NaN; a ``-0`` scale gives zeros either way, possibly of the other sign).

    Raises:
        ValueError: ``sf`` is not ``[R, K/16]``.
    """
    p, s = np.asarray(packed, dtype=np.uint8), np.asarray(sf, dtype=np.uint8)
    if s.shape != (p.shape[0], 2 * p.shape[1] // SF_VEC):
        raise ValueError(f"fold_scale_signs: scales shape {s.shape} must be {(p.shape[0], 2 * p.shape[1] // SF_VEC)} "
                         f"for packed values {p.shape}")
    neg = np.repeat((s & UE4M3_PAD_BIT) != 0, SF_VEC // 2, axis=1)  # [R, K/2]: one scale covers 8 packed bytes
    return p ^ np.where(neg, np.uint8(0x88), np.uint8(0)), s & np.uint8(~UE4M3_PAD_BIT & 0xFF)



def dequantize(packed, sf, scale_format: str = "e4m3") -> np.ndarray:
    """float32 ``[R, K]`` of packed e2m1 ``[R, K/2]`` times its scales ``sf [R, K/16]`` (row-major, not blocked).

    scale_format: ``"e4m3"`` (torch ``float8_e4m3fn``, the problem's reading: bit 7 a sign) or ``"ue4m3"``
    (the MMA's reading, :func:`ue4m3_decode`: bit 7 ignored).  Every product is exact in float32 (2-bit x 4-bit
    significands).

    Raises:
        ValueError: ``sf`` is not ``[R, K/16]``, or an unknown ``scale_format``.
    """
    decode = {"e4m3": e4m3_decode, "ue4m3": ue4m3_decode}.get(scale_format)
    if decode is None:
        raise ValueError(f"dequantize: scale_format={scale_format!r} must be 'e4m3' or 'ue4m3'")
    vals = e2m1_decode(unpack_e2m1(packed))
    r, k = vals.shape
    sf = np.asarray(sf, dtype=np.uint8)
    if sf.shape != (r, k // SF_VEC):
        raise ValueError(f"dequantize: scales shape {sf.shape} must be {(r, k // SF_VEC)} for values {(r, k)}")
    return vals * np.repeat(decode(sf), SF_VEC, axis=1)


# --------------------------------------------------------------------------- scale-factor atom layout


def _check_sf_shape(rows: int, cols: int) -> None:
    if rows % SF_ATOM_ROWS or cols % SF_ATOM_K:
        raise ValueError(f"scale matrix [{rows}, {cols}]: rows must be a multiple of {SF_ATOM_ROWS} and columns "
                         f"(K/16) of {SF_ATOM_K} (K a multiple of 64) for the 128x4 atom layout")


def sf_to_blocked(sf) -> np.ndarray:
    """Flat blocked bytes (``R * C``) of a row-major scale matrix ``[R, C]`` (numpy; torch ``to_blocked``).

    Raises:
        ValueError: R not a multiple of 128 or C not a multiple of 4.
    """
    s = np.asarray(sf)
    rows, cols = s.shape
    _check_sf_shape(rows, cols)
    # [rb, 4(i), 32(r), cb, 4(c)] -> [rb, cb, r, i, c]; row = 128 rb + 32 i + r
    return np.ascontiguousarray(
        s.reshape(rows // 128, 4, 32, cols // 4, 4).transpose(0, 3, 2, 1, 4)).reshape(-1)


def sf_from_blocked(blocked, rows: int, cols: int) -> np.ndarray:
    """Row-major ``[rows, cols]`` scale matrix of blocked bytes (inverse of :func:`sf_to_blocked`).

    Raises:
        ValueError: bad shape, or ``blocked`` does not hold ``rows * cols`` elements.
    """
    _check_sf_shape(rows, cols)
    b = np.asarray(blocked).reshape(-1)
    if b.size != rows * cols:
        raise ValueError(f"blocked scales hold {b.size} elements; [{rows}, {cols}] needs {rows * cols}")
    return np.ascontiguousarray(
        b.reshape(rows // 128, cols // 4, 32, 4, 4).transpose(0, 3, 2, 1, 4)).reshape(rows, cols)


def sf_to_blocked_torch(sf: Any) -> Any:
    """torch version of :func:`sf_to_blocked` (any dtype/device): flat blocked tensor of ``[R, C]``.

    Raises:
        ValueError: R not a multiple of 128 or C not a multiple of 4.
    """
    rows, cols = sf.shape
    _check_sf_shape(rows, cols)
    return sf.reshape(rows // 128, 4, 32, cols // 4, 4).permute(0, 3, 2, 1, 4).contiguous().reshape(-1)


def sf_from_blocked_torch(blocked: Any, rows: int, cols: int) -> Any:
    """torch version of :func:`sf_from_blocked`.

    Raises:
        ValueError: bad shape or element count.
    """
    _check_sf_shape(rows, cols)
    b = blocked.reshape(-1)
    if b.numel() != rows * cols:
        raise ValueError(f"blocked scales hold {b.numel()} elements; [{rows}, {cols}] needs {rows * cols}")
    return b.reshape(rows // 128, cols // 4, 32, 4, 4).permute(0, 3, 2, 1, 4).contiguous().reshape(rows, cols)
