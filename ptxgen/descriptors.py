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
