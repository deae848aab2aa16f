"""Hardware descriptors of the tensor-core MMAs, as declarative bitfield specs.

Three descriptors reach the MMA instructions as plain integers:

* :data:`UMMA_IDESC_F16` -- the 32-bit *instruction descriptor* of
  ``tcgen05.mma ... .kind::f16`` (PTX ISA, "Tensor Core 5th Generation Family
  Instructions" > "Instruction descriptor", table for ``.kind::f16``).
* :data:`UMMA_SMEM_DESC` -- the 64-bit sm_100 *shared memory descriptor* of
  ``tcgen05.mma`` operands A and B (PTX ISA, "Tensor Core 5th Generation
  Family Instructions" > "Matrix Descriptors" > "Shared memory descriptor").
* :data:`WGMMA_SMEM_DESC` -- the 64-bit sm_90 *matrix descriptor* of
  ``wgmma.mma_async`` (PTX ISA, "Asynchronous Warpgroup Level Matrix
  Multiply-Accumulate Instructions" > "Matrix Descriptor Format").

Each is a :class:`BitfieldSpec`: :meth:`~BitfieldSpec.encode` refuses a value
that does not fit its field and :meth:`~BitfieldSpec.decode` inverts it (the
CPU simulator decodes the descriptors the emitted kernel builds at runtime).
The convenience functions below fill the specs for ptxgen's one data layout:
bf16 operands, K-major (K contiguous), 128-byte swizzle, ``BLOCK_K = 64``
elements (one 128-byte swizzle atom row).

Address-like fields hold byte quantities shifted right by 4 ("matrix
descriptor encode", ``(x & 0x3FFFF) >> 4``), so addresses and offsets must be
multiples of 16 bytes and below 256 KiB.

Kernels build the shared-memory descriptors at runtime: the high 32-bit word
is a constant (:func:`umma_smem_desc_hi`, :func:`wgmma_smem_desc_hi`) and the
low word is ``(start >> 4) | ((LBO >> 4) << 16)`` computed from the shared
address.  Moving the start address by ``b`` bytes adds ``b >> 4`` to the low
word (:func:`desc_advance`, :func:`k_step_advance`, :func:`m_wave_advance`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .hw import SF_VEC


@dataclass(frozen=True)
class Field:
    """One bitfield: ``width`` bits starting at bit ``lo`` (bit 0 = least significant)."""

    name: str
    lo: int
    width: int

    @property
    def mask(self) -> int:
        """The field's bits in place within the word."""
        return ((1 << self.width) - 1) << self.lo


@dataclass(frozen=True)
class BitfieldSpec:
    """A ``total_bits``-wide word made of named, non-overlapping :class:`Field` s.

    Bits that belong to no field are reserved: :meth:`encode` leaves them 0 and
    :meth:`decode` rejects a word that sets them.

    Raises:
        ValueError: at construction, when a field is empty, sticks out of the
            word, overlaps another field, or repeats a name.
    """

    name: str
    total_bits: int
    fields: tuple[Field, ...]

    def __post_init__(self) -> None:
        taken = 0
        names: set[str] = set()
        for f in self.fields:
            if f.width < 1 or f.lo < 0 or f.lo + f.width > self.total_bits:
                raise ValueError(f"{self.name}.{f.name}: bits {f.lo}..{f.lo + f.width - 1} "
                                 f"are not inside a {self.total_bits}-bit word")
            if taken & f.mask:
                raise ValueError(f"{self.name}.{f.name}: overlaps another field")
            if f.name in names:
                raise ValueError(f"{self.name}.{f.name}: field name used twice")
            taken |= f.mask
            names.add(f.name)

    @property
    def reserved_mask(self) -> int:
        """Bits of the word that belong to no field."""
        used = 0
        for f in self.fields:
            used |= f.mask
        return ((1 << self.total_bits) - 1) & ~used

    def encode(self, **values: int) -> int:
        """Pack field values into one word; fields not named are 0.

        Raises:
            ValueError: naming the field, when a name is not a field of this
                spec or a value is negative or does not fit the field's width.
        """
        by_name = {f.name: f for f in self.fields}
        word = 0
        for name, value in values.items():
            f = by_name.get(name)
            if f is None:
                raise ValueError(f"{self.name}: no field named {name!r}; fields are {sorted(by_name)}")
            if not 0 <= value < (1 << f.width):
                raise ValueError(f"{self.name}.{name}={value}: does not fit in {f.width} bits "
                                 f"(bits {f.lo}..{f.lo + f.width - 1})")
            word |= value << f.lo
        return word

    def decode(self, value: int) -> dict[str, int]:
        """Unpack a word into ``{field name: value}`` for every field.

        Raises:
            ValueError: when ``value`` is negative or wider than ``total_bits``,
                or sets a reserved bit (a descriptor built wrong).
        """
        if not 0 <= value < (1 << self.total_bits):
            raise ValueError(f"{self.name}: {value:#x} is not a {self.total_bits}-bit word")
        if value & self.reserved_mask:
            raise ValueError(f"{self.name}: {value:#x} sets reserved bits {value & self.reserved_mask:#x}")
        return {f.name: (value >> f.lo) & ((1 << f.width) - 1) for f in self.fields}


# --- tcgen05 instruction descriptor, .kind::f16 --------------------------------

UMMA_IDESC_F16 = BitfieldSpec("UMMA_IDESC_F16", 32, (
    Field("sparse_id2", 0, 2),   # sparsity selector (sparse MMA only)
    Field("sparse", 2, 1),       # 0 dense, 1 sparse
    Field("saturate", 3, 1),     # integer kinds only
    Field("d_format", 4, 2),     # 0 f16, 1 f32
    Field("a_format", 7, 3),     # 0 f16, 1 bf16
    Field("b_format", 10, 3),    # 0 f16, 1 bf16
    Field("negate_a", 13, 1),
    Field("negate_b", 14, 1),
    Field("a_major", 15, 1),     # 0 K-major, 1 MN-major
    Field("b_major", 16, 1),     # 0 K-major, 1 MN-major
    Field("n_dim", 17, 6),       # N >> 3
    Field("m_dim", 24, 5),       # M >> 4
    Field("max_shift", 30, 2),   # .ws variants only
))
"""tcgen05.mma ``.kind::f16`` instruction descriptor (32 bit); bits 6, 23 and 29 are reserved."""

_IDESC_F32 = 1
_IDESC_BF16 = 1
_IDESC_K_MAJOR = 0


def umma_idesc_f16(m: int, n: int) -> int:
    """Instruction descriptor of ``tcgen05.mma .kind::f16``: bf16 x bf16 -> f32, A and B K-major.

    Args:
        m: UMMA_M in rows: 64 or 128 (``cta_group::1``) or 256 (``cta_group::2``,
            128 rows in each CTA of the pair).
        n: UMMA_N in columns: a multiple of 16 in [16, 256], or of 8 in [8, 256]
            when ``m == 64``.

    Returns:
        The 32-bit operand ``idesc`` of ``tcgen05.mma``, e.g. M=128, N=256 ->
        ``0x08400490``.

    Raises:
        ValueError: when the (M, N) pair is not a legal kind::f16 shape.
    """
    if m not in (64, 128, 256):
        raise ValueError(f"UMMA M={m}: must be 64, 128 or 256")
    step = 8 if m == 64 else 16
    if not (step <= n <= 256 and n % step == 0):
        raise ValueError(f"UMMA N={n} with M={m}: must be a multiple of {step} in [{step}, 256]")
    return UMMA_IDESC_F16.encode(
        d_format=_IDESC_F32, a_format=_IDESC_BF16, b_format=_IDESC_BF16,
        a_major=_IDESC_K_MAJOR, b_major=_IDESC_K_MAJOR,
        n_dim=n >> 3, m_dim=m >> 4,
    )


# --- shared-memory descriptors ----------------------------------------------------

UMMA_SMEM_DESC = BitfieldSpec("UMMA_SMEM_DESC", 64, (
    Field("start", 0, 14),        # start address >> 4
    Field("lbo", 16, 14),         # leading-dimension byte offset >> 4
    Field("sbo", 32, 14),         # stride-dimension byte offset >> 4
    Field("version", 46, 2),      # fixed 1 on sm_100
    Field("base_offset", 49, 3),  # 0 when swizzle atoms are 1024-B aligned (pattern repeat)
    Field("lbo_mode", 52, 1),     # 0 relative LBO
    Field("layout", 61, 3),       # 0 none, 2 128B, 4 64B, 6 32B swizzle
))
"""sm_100 (tcgen05) shared memory descriptor (64 bit); bits 14-15, 30-31, 48, 53-60 are reserved."""

WGMMA_SMEM_DESC = BitfieldSpec("WGMMA_SMEM_DESC", 64, (
    Field("start", 0, 14),        # start address >> 4
    Field("lbo", 16, 14),         # leading-dimension byte offset >> 4
    Field("sbo", 32, 14),         # stride-dimension byte offset >> 4
    Field("base_offset", 49, 3),  # 0 when swizzle atoms are 1024-B aligned
    Field("swizzle", 62, 2),      # 0 none, 1 128B, 2 64B, 3 32B
))
"""sm_90 wgmma matrix descriptor (64 bit); bits 14-15, 30-31, 46-48, 52-61 are reserved."""

_UMMA_LAYOUT = {"none": 0, "128B": 2, "64B": 4, "32B": 6}
_WGMMA_SWIZZLE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
_UMMA_VERSION = 1


def _encoded(what: str, byte_value: int) -> int:
    """The descriptor encoding ``byte_value >> 4`` of an address or offset in bytes.

    Raises:
        ValueError: when ``byte_value`` is negative or not a multiple of 16
            (the encoding would drop bits).  Range is checked by the field width.
    """
    if byte_value < 0 or byte_value % 16:
        raise ValueError(f"{what}={byte_value}: must be a non-negative multiple of 16 bytes")
    return byte_value >> 4


def _code(table: dict[str, int], swizzle: str) -> int:
    """The layout code of ``swizzle`` in ``table``; raises ValueError naming the legal choices."""
    if swizzle not in table:
        raise ValueError(f"swizzle={swizzle!r}: must be one of {list(table)}")
    return table[swizzle]


def umma_smem_desc(start_addr: int, lbo_bytes: int, sbo_bytes: int, swizzle: str = "128B") -> int:
    """sm_100 shared memory descriptor of a tcgen05.mma operand.

    Args:
        start_addr: shared-memory byte address of the operand tile (CTA window),
            a multiple of 16 below 256 KiB.
        lbo_bytes: leading-dimension byte offset; unused (0) for K-major swizzled
            layouts whose K extent is one swizzle atom.
        sbo_bytes: stride-dimension byte offset: the distance between 8-row core
            matrix groups, 1024 for K-major bf16 rows of 128 B.
        swizzle: ``"128B"``, ``"64B"``, ``"32B"`` or ``"none"``.

    Returns:
        The 64-bit ``adesc``/``bdesc`` operand.  K-major bf16, 128B swizzle,
        BLOCK_K 64: ``umma_smem_desc(a, 0, 1024) >> 32 == 0x40004040``.

    Raises:
        ValueError: naming the argument or field that is misaligned, too large,
            or an unknown swizzle.
    """
    return UMMA_SMEM_DESC.encode(
        start=_encoded("start_addr", start_addr),
        lbo=_encoded("lbo_bytes", lbo_bytes),
        sbo=_encoded("sbo_bytes", sbo_bytes),
        version=_UMMA_VERSION,
        layout=_code(_UMMA_LAYOUT, swizzle),
    )


def umma_smem_desc_hi(sbo_bytes: int, swizzle: str = "128B") -> int:
    """The constant high 32-bit word of :func:`umma_smem_desc` (SBO, version, layout).

    The kernel pairs it with a low word ``(start >> 4) | ((LBO >> 4) << 16)``
    built from the shared address (``mov.b64 %d, {lo, hi};``).

    Raises:
        ValueError: as :func:`umma_smem_desc`.
    """
    return umma_smem_desc(0, 0, sbo_bytes, swizzle) >> 32


def wgmma_smem_desc(start_addr: int, lbo_bytes: int, sbo_bytes: int, swizzle: str = "128B") -> int:
    """sm_90 wgmma matrix descriptor of an operand in shared memory.

    Args:
        start_addr: shared-memory byte address of the operand tile, a multiple
            of 16 below 256 KiB.
        lbo_bytes: leading-dimension byte offset.  Unused by K-major swizzled
            layouts; ptxgen passes 16 (field value 1), as CUTLASS does.
        sbo_bytes: stride-dimension byte offset, 1024 for K-major bf16 with
            128B swizzle (8 rows x 128 B).
        swizzle: ``"128B"``, ``"64B"``, ``"32B"`` or ``"none"``.

    Returns:
        The 64-bit descriptor operand of ``wgmma.mma_async``.  K-major bf16,
        128B swizzle: ``wgmma_smem_desc(a, 16, 1024) >> 32 == 0x40000040``.

    Raises:
        ValueError: naming the argument or field that is misaligned, too large,
            or an unknown swizzle.
    """
    return WGMMA_SMEM_DESC.encode(
        start=_encoded("start_addr", start_addr),
        lbo=_encoded("lbo_bytes", lbo_bytes),
        sbo=_encoded("sbo_bytes", sbo_bytes),
        swizzle=_code(_WGMMA_SWIZZLE, swizzle),
    )


def wgmma_smem_desc_hi(sbo_bytes: int, swizzle: str = "128B") -> int:
    """The constant high 32-bit word of :func:`wgmma_smem_desc` (SBO, swizzle).

    Raises:
        ValueError: as :func:`wgmma_smem_desc`.
    """
    return wgmma_smem_desc(0, 0, sbo_bytes, swizzle) >> 32


def smem_desc_lo(start_addr: int, lbo_bytes: int) -> int:
    """Low 32-bit word of either shared-memory descriptor: ``(start >> 4) | ((LBO >> 4) << 16)``.

    The same layout on sm_90 and sm_100; the kernel computes it from the
    shared address at runtime, this is the reference the simulator and tests use.

    Raises:
        ValueError: when an argument is misaligned or does not fit 14 bits after encoding.
    """
    return UMMA_SMEM_DESC.encode(start=_encoded("start_addr", start_addr),
                                 lbo=_encoded("lbo_bytes", lbo_bytes))


def desc_advance(byte_offset: int) -> int:
    """What to add to a descriptor's low word to move its start address by ``byte_offset`` bytes.

    Valid while the start field does not overflow 14 bits (shared addresses
    below 256 KiB), so the addition never carries into the LBO field.

    Raises:
        ValueError: when ``byte_offset`` is negative or not a multiple of 16.
    """
    return _encoded("byte_offset", byte_offset)


def k_step_advance(k_elems: int = 16, elem_bytes: int = 2) -> int:
    """Low-word increment of one MMA K step inside a K-major swizzle atom.

    The default, one k16 step of bf16, is 32 B -> +2.  Inside a 128B-swizzled
    atom the hardware applies the XOR swizzle to the absolute address, so the
    plain offset is right as long as the atom is 1024-B aligned (base offset 0).

    Raises:
        ValueError: when ``k_elems * elem_bytes`` is not a multiple of 16.
    """
    return desc_advance(k_elems * elem_bytes)


def m_wave_advance(rows: int = 128, block_k: int = 64, elem_bytes: int = 2) -> int:
    """Low-word increment from one ``rows``-row slab of a K-major tile to the next.

    The default, 128 rows x 64 bf16 = 16384 B, is +1024.

    Raises:
        ValueError: when the slab size is not a multiple of 16 bytes.
    """
    return desc_advance(rows * block_k * elem_bytes)


# --- block-scaled MMA (.kind::mxf4nvf4, NVFP4) ---------------------------------------
#
# PTX ISA 8.8/9.x, "Tensor Core 5th Generation Family Instructions" > "Instruction
# descriptor", table "Instruction descriptor format for .kind::mxf4 and .kind::mxf4nvf4";
# "tcgen05.mma" > "Block Scaling" (scale_A is M x SFA_N, scale_B is SFB_M x N, both in TMEM).
# ptxas 13.5 needs ``.version 8.7`` for ``.kind::mxf4nvf4`` / ``.scale_vec::4X`` and
# ``.version 8.8`` for the ``.block16`` / ``.block32`` spellings (measured).

UMMA_IDESC_MXF4 = BitfieldSpec("UMMA_IDESC_MXF4", 32, (
    Field("sparse", 2, 1),        # 0 dense, 1 sparse
    Field("b_sf_id", 4, 2),       # Matrix B scale factor data ID: byte of the TMEM column (0 or 2)
    Field("a_format", 7, 3),      # E2M1 = 1
    Field("b_format", 10, 2),     # E2M1 = 1 (2 bits here, unlike kind::f16)
    Field("negate_a", 13, 1),
    Field("negate_b", 14, 1),
    Field("a_major", 15, 1),      # "Transpose A": 0 only (K-major)
    Field("b_major", 16, 1),      # "Transpose B": 0 only (K-major)
    Field("n_dim", 17, 6),        # N >> 3
    Field("scale_format", 23, 1),  # UE4M3 = 0 (mxf4nvf4 only), UE8M0 = 1
    Field("m_dim", 27, 2),        # M >> 7 (bits 24-26 reserved)
    Field("a_sf_id", 29, 2),      # Matrix A scale factor data ID (0 or 2)
    Field("k_dim", 31, 1),        # 0: dense K=64 (sparse K=128); 1: dense K=96
))
"""tcgen05.mma ``.kind::mxf4`` / ``.kind::mxf4nvf4`` instruction descriptor (32 bit).

Bits 0-1, 3, 6, 12 and 24-26 are reserved.  Same numbers as the PTX ISA table
named in the section comment; M is encoded ``M >> 7`` at bits 27-28, which for
M in {128, 256} sets the same bits as the kind::f16 ``M >> 4`` at bits 24-28.
"""

_E2M1 = 1
_SCALE_UE4M3 = 0
_SCALE_UE8M0 = 1
MXF4_MMA_K = 64
"""K elements of one dense ``.kind::mxf4nvf4`` MMA (idesc ``k_dim`` 0): 32 bytes of packed e2m1 per row."""

SCALE_VEC = {"block16": SF_VEC, "block32": 2 * SF_VEC}
"""K elements sharing one scale factor, by the ``tcgen05.mma`` qualifier (``.block16`` = ``.scale_vec::4X``:
4 scale factors per K=64 MMA, one whole 32-bit TMEM column; ``.block32`` = ``.scale_vec::2X``: 2 per MMA)."""


def umma_idesc_mxf4nvf4(m: int, n: int, *, sf_id_a: int = 0, sf_id_b: int = 0,
                        scale_vec: str = "block16") -> int:
    """Instruction descriptor of ``tcgen05.mma .kind::mxf4nvf4.block_scale``: e2m1 x e2m1 -> f32, K-major.

    Args:
        m: UMMA_M: 128 (``cta_group::1``) or 256 (``cta_group::2``, 128 rows per CTA).
        n: UMMA_N: a multiple of 16 in [16, 256] (8-aligned values below 16 are not NVFP4 shapes
            ptxgen uses).
        sf_id_a, sf_id_b: scale-factor data IDs, the byte of each 32-bit TMEM column where the
            scale factors of this MMA start.  With ``block16`` an MMA reads all 4 bytes, so the ID
            must be 0; with ``block32`` (2 per MMA) it is 0 or 2 (PTX ISA table: "0 or 2").
        scale_vec: ``"block16"`` (NVFP4: ue4m3 scales, one per 16 K) or ``"block32"`` (ue8m0 scales,
            one per 32 K, the MXFP4 flavour of the same kind).

    Returns:
        The 32-bit ``idesc`` operand, e.g. 128x128 NVFP4 -> ``0x08200480``, 256x256 -> ``0x10400480``.

    Raises:
        ValueError: naming the argument, for an illegal shape, scale vector or scale-factor ID.
    """
    if m not in (128, 256):
        raise ValueError(f"UMMA M={m}: block-scaled .kind::mxf4nvf4 needs M 128 (cta_group::1) or 256 (cta_group::2)")
    if not (16 <= n <= 256 and n % 16 == 0):
        raise ValueError(f"UMMA N={n} with M={m}: must be a multiple of 16 in [16, 256]")
    if scale_vec not in SCALE_VEC:
        raise ValueError(f"scale_vec={scale_vec!r}: must be one of {list(SCALE_VEC)}")
    legal_ids = (0,) if scale_vec == "block16" else (0, 2)
    for name, v in (("sf_id_a", sf_id_a), ("sf_id_b", sf_id_b)):
        if v not in legal_ids:
            raise ValueError(f"{name}={v}: with {scale_vec} the scale-factor ID must be one of {legal_ids} "
                             "(PTX ISA: Matrix A/B Scale Factor Data ID)")
    return UMMA_IDESC_MXF4.encode(
        b_sf_id=sf_id_b, a_format=_E2M1, b_format=_E2M1, n_dim=n >> 3,
        scale_format=_SCALE_UE4M3 if scale_vec == "block16" else _SCALE_UE8M0,
        m_dim=m >> 7, a_sf_id=sf_id_a,
    )


# --- NVFP4 operand tiles in shared memory ------------------------------------------------
#
# Packed e2m1: 2 values per byte, so one 128-byte swizzle-atom row holds 256 K elements.
# A K-major 128B-swizzled stage of BLOCK_K = 256 elements is laid out exactly like the bf16
# stage of BLOCK_K = 64: rows of 128 B, 8-row groups of 1024 B (SBO), LBO unused.  One MMA
# (K=64) covers 32 B of each row, so the K step inside the atom is +32 B (+2 in the low word),
# four MMAs per stage.

NVFP4_BLOCK_K = 256
"""K elements of one NVFP4 pipeline stage: one 128-byte swizzle row of packed e2m1 (= 4 MMAs of K=64)."""
NVFP4_ROW_BYTES = NVFP4_BLOCK_K // 2
NVFP4_SBO = 8 * NVFP4_ROW_BYTES


def nvfp4_operand_desc_hi() -> int:
    """High word of the smem descriptor of a K-major packed-e2m1 operand, 128B swizzle.

    SBO = 8 rows x 128 B = 1024 B, version 1, layout 2 (128B): ``0x40004040``, the same word as
    bf16 with BLOCK_K 64 (PTX ISA "Matrix Descriptors" > "Shared memory descriptor"; the
    swizzle is defined on bytes, so the element width does not enter).
    """
    return umma_smem_desc_hi(NVFP4_SBO, "128B")


def nvfp4_k_step_advance() -> int:
    """Low-word increment of one K=64 MMA step of packed e2m1: 32 bytes -> +2."""
    return desc_advance(MXF4_MMA_K // 2)


# --- scale factors: smem tile of tcgen05.cp ------------------------------------------------
#
# The scale-factor atom (cuBLAS "1D Block Scaling Factors Layout"): 128 rows x 4 K-blocks of
# one byte = 512 B, stored as 32 lines of 16 B; line r holds rows r, r+32, r+64, r+96 (4 B each,
# the 4 K-blocks).  ``tcgen05.cp.cta_group::G.32x128b.warpx4`` copies those 32 x 128-bit lines
# into TMEM lanes 0-31 (4 columns) and replicates them to the other three 32-lane partitions
# (PTX ISA "tcgen05.cp"; "Block Scaling": scale factors are duplicated to all 32 lane partitions).
# The source is described by an unswizzled ("interleaved") smem descriptor: 8-row core matrices
# of 8 x 16 B = 128 B, SBO 128 B between 8-row groups; LBO (the K-direction core-matrix stride)
# has no second core matrix to reach in 128 bits and is set to 128 B as public kernels do.

SF_COPY_SBO = 128
SF_COPY_LBO = 128


def sf_copy_desc(start_addr: int) -> int:
    """Shared-memory descriptor of one 512-byte scale-factor atom, the source of ``tcgen05.cp ... 32x128b.warpx4``.

    Args:
        start_addr: shared-window byte address of the atom (16-B aligned; TMA lands atoms 128-B aligned).

    Returns:
        64-bit descriptor: no swizzle, LBO 128, SBO 128, version 1; the high word is ``0x4008``.

    Raises:
        ValueError: as :func:`umma_smem_desc`.
    """
    return umma_smem_desc(start_addr, SF_COPY_LBO, SF_COPY_SBO, "none")


def sf_copy_desc_hi() -> int:
    """Constant high word of :func:`sf_copy_desc` (SBO 128 B, version 1, no swizzle): ``0x4008``."""
    return sf_copy_desc(0) >> 32


def sf_copy_desc_lo(start_addr: int) -> int:
    """Low word of :func:`sf_copy_desc`: ``(start >> 4) | (128 >> 4) << 16``."""
    return smem_desc_lo(start_addr, SF_COPY_LBO)


# --- block-scaled MMA (.kind::mxf8f6f4, MXFP8) ------------------------------------------------
#
# PTX ISA 8.7+/9.x, "Tensor Core 5th Generation Family Instructions" > "Instruction descriptor", the table
# "Instruction descriptor format for .kind::mxf8f6f4, .kind::mxf4 and .kind::mxf4nvf4" (bits named as below);
# "tcgen05.mma" > "Block Scaling": ``.kind::mxf8f6f4`` takes ue8m0 scales only, with ``.scale_vec::1X``
# (spelled ``.block32`` since PTX ISA 8.8): one scale per row per 32 K, i.e. ONE scale per row per MMA (dense
# K = 32 for 8-bit A/B).  A 32-bit TMEM column of a scale atom holds 4 such scales (one byte each, the 4 K
# blocks of the cuBLAS 128x4 atom); the MMA picks its byte with the scale-factor data ID (0-3 for mxf8f6f4).

UMMA_IDESC_MXF8F6F4 = BitfieldSpec("UMMA_IDESC_MXF8F6F4", 32, (
    Field("sparse", 2, 1),         # bit 2: 0 dense, 1 sparse
    Field("b_sf_id", 4, 2),        # bits 4-5: Matrix B scale factor data ID, the byte of the TMEM column (0-3)
    Field("a_format", 7, 3),       # bits 7-9: "atype" for .kind::mxf8f6f4: E4M3 = 0, E5M2 = 1, E2M3 = 3, E3M2 = 4, E2M1 = 5
    Field("b_format", 10, 3),      # bits 10-12: "btype", same codes (3 bits here, 2 for .kind::mxf4)
    Field("negate_a", 13, 1),      # bit 13
    Field("negate_b", 14, 1),      # bit 14
    Field("a_major", 15, 1),       # bit 15: "Transpose A": 0 = K-major
    Field("b_major", 16, 1),       # bit 16: "Transpose B": 0 = K-major
    Field("n_dim", 17, 6),         # bits 17-22: N >> 3
    Field("scale_format", 23, 1),  # bit 23: "Scale Matrix Type": UE4M3 = 0, UE8M0 = 1 (mxf8f6f4: UE8M0 only)
    Field("m_dim", 27, 2),         # bits 27-28: M >> 7 (bits 24-26 reserved)
    Field("a_sf_id", 29, 2),       # bits 29-30: Matrix A scale factor data ID (0-3)
))
"""tcgen05.mma ``.kind::mxf8f6f4`` block-scaled instruction descriptor (32 bit).

Bits 0-1, 3, 6, 24-26 and 31 are reserved (bit 31 is the ``.kind::mxf4nvf4`` K = 96 flag, not a field of this
kind: 8-bit dense MMAs are K = 32).  Same numbers as the PTX ISA table named in the section comment.
"""

MXF8_E4M3 = 0
"""``atype`` / ``btype`` code of e4m3 in the ``.kind::mxf8f6f4`` instruction descriptor (PTX ISA table above)."""
MXF8_MMA_K = 32
"""K elements of one dense ``.kind::mxf8f6f4`` MMA: 32 bytes of e4m3 per row (PTX ISA "tcgen05.mma" shapes)."""
MXF8_SCALE_VEC = "block32"
"""The only scale vector of ``.kind::mxf8f6f4`` (``.scale_vec::1X``): one ue8m0 scale per 32 K, per MMA."""
MXF8_SF_IDS = 4
"""Scale-factor data IDs of ``.kind::mxf8f6f4``: the 4 bytes of a 32-bit TMEM scale column (PTX ISA: "0, 1, 2, 3")."""


def umma_idesc_mxf8f6f4(m: int, n: int, *, sf_id_a: int = 0, sf_id_b: int = 0) -> int:
    """Instruction descriptor of ``tcgen05.mma .kind::mxf8f6f4.block_scale.block32``: e4m3 x e4m3 -> f32, K-major,
    ue8m0 scales.

    Args:
        m: UMMA_M: 128 (``cta_group::1``) or 256 (``cta_group::2``, 128 rows per CTA).
        n: UMMA_N: a multiple of 16 in [16, 256].
        sf_id_a, sf_id_b: scale-factor data IDs, the byte (0-3) of each 32-bit TMEM scale column this MMA reads:
            K step ``s`` of a 128-K scale atom reads byte ``s`` (its 32-K block).

    Returns:
        The 32-bit ``idesc`` operand, e.g. 128x128 with IDs 0 -> ``0x08a00000`` (N=128: 16 << 17, UE8M0: 1 << 23,
        M=128: 1 << 27; e4m3 is format 0; the f32 accumulator is implicit for this kind).

    Raises:
        ValueError: naming the argument, for an illegal shape or scale-factor ID.
    """
    if m not in (128, 256):
        raise ValueError(f"UMMA M={m}: block-scaled .kind::mxf8f6f4 needs M 128 (cta_group::1) or 256 (cta_group::2)")
    if not (16 <= n <= 256 and n % 16 == 0):
        raise ValueError(f"UMMA N={n} with M={m}: must be a multiple of 16 in [16, 256]")
    for name, v in (("sf_id_a", sf_id_a), ("sf_id_b", sf_id_b)):
        if not 0 <= v < MXF8_SF_IDS:
            raise ValueError(f"{name}={v}: .kind::mxf8f6f4 scale-factor IDs are 0-{MXF8_SF_IDS - 1} "
                             "(PTX ISA: Matrix A/B Scale Factor Data ID)")
    return UMMA_IDESC_MXF8F6F4.encode(
        b_sf_id=sf_id_b, a_format=MXF8_E4M3, b_format=MXF8_E4M3, n_dim=n >> 3, scale_format=_SCALE_UE8M0,
        m_dim=m >> 7, a_sf_id=sf_id_a,
    )
