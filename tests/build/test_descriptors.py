"""Descriptors bit for bit against published values (PTX ISA, CUTLASS, DeepGEMM), and encode/decode laws."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptxgen.descriptors import (
    UMMA_IDESC_F16,
    UMMA_SMEM_DESC,
    WGMMA_SMEM_DESC,
    BitfieldSpec,
    Field,
    desc_advance,
    k_step_advance,
    m_wave_advance,
    smem_desc_lo,
    umma_idesc_f16,
    umma_smem_desc,
    umma_smem_desc_hi,
    wgmma_smem_desc,
    wgmma_smem_desc_hi,
)

SPECS = (UMMA_IDESC_F16, UMMA_SMEM_DESC, WGMMA_SMEM_DESC)

# 16-B aligned shared addresses below 256 KiB (the 14-bit start field).
smem_addr = st.integers(0, (1 << 14) - 1).map(lambda x: x << 4)


def field_values(spec: BitfieldSpec) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries({f.name: st.integers(0, (1 << f.width) - 1) for f in spec.fields})


# --- published values -----------------------------------------------------------

@pytest.mark.parametrize(("m", "n", "expected"), [
    (256, 256, 0x10400490),
    (256, 128, 0x10200490),
    (128, 256, 0x08400490),
    (128, 128, 0x08200490),
])
def test_umma_idesc_published(m: int, n: int, expected: int) -> None:
    assert umma_idesc_f16(m, n) == expected


def test_umma_idesc_fields() -> None:
    assert UMMA_IDESC_F16.decode(umma_idesc_f16(128, 256)) == {
        "sparse_id2": 0, "sparse": 0, "saturate": 0, "d_format": 1, "a_format": 1, "b_format": 1,
        "negate_a": 0, "negate_b": 0, "a_major": 0, "b_major": 0, "n_dim": 256 >> 3, "m_dim": 128 >> 4,
        "max_shift": 0,
    }


def test_umma_smem_desc_published_high_word() -> None:
    # K-major bf16, 128B swizzle, BLOCK_K 64: LBO 0, SBO 1024.
    assert umma_smem_desc_hi(1024) == 0x40004040
    assert umma_smem_desc(0x400, 0, 1024) == (0x40004040 << 32) | (0x400 >> 4)


def test_wgmma_smem_desc_published_high_word() -> None:
    # K-major bf16, 128B swizzle: SBO 1024, LBO field 1 (16 B, unused); swizzle code 1 at bits 62-63.
    assert wgmma_smem_desc_hi(1024) == 0x40000040
    assert wgmma_smem_desc(0x400, 16, 1024) == (0x40000040 << 32) | (1 << 16) | (0x400 >> 4)


@pytest.mark.parametrize(("swizzle", "umma_layout", "wgmma_code"), [
    ("none", 0, 0), ("128B", 2, 1), ("64B", 4, 2), ("32B", 6, 3),
])
def test_swizzle_codes(swizzle: str, umma_layout: int, wgmma_code: int) -> None:
    assert umma_smem_desc_hi(1024, swizzle) >> 29 == umma_layout
    assert wgmma_smem_desc_hi(1024, swizzle) >> 30 == wgmma_code


def test_increments() -> None:
    assert k_step_advance() == 2            # k16 of bf16 = 32 B
    assert m_wave_advance() == 1024         # 128 rows x 64 bf16 = 16 KiB
    assert desc_advance(16384) == 1024


# --- planted bugs: a wrong layout must change a published value -------------------

def test_m_and_n_are_distinguished() -> None:
    assert umma_idesc_f16(128, 256) != umma_idesc_f16(256, 128)


def test_swapped_m_n_positions_would_be_caught() -> None:
    # A spec with the N and M fields at each other's bit positions.  M256xN128 has
    # M >> 4 == N >> 3 == 16, so that value alone cannot see the swap; the others do.
    mutant = BitfieldSpec("mutant", 32, tuple(
        Field(f.name, {"n_dim": 24, "m_dim": 17}.get(f.name, f.lo), f.width) for f in UMMA_IDESC_F16.fields))
    published = {(256, 256): 0x10400490, (256, 128): 0x10200490, (128, 256): 0x08400490, (128, 128): 0x08200490}
    reproduced = {shape for shape, value in published.items()
                  if mutant.encode(**UMMA_IDESC_F16.decode(value)) == value}
    assert reproduced == {(256, 128)}


def test_umma_and_wgmma_high_words_differ() -> None:
    # version bit 46 and the layout/swizzle code positions differ between the two descriptors.
    assert umma_smem_desc_hi(1024) != wgmma_smem_desc_hi(1024)


# --- laws -------------------------------------------------------------------------

@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@given(data=st.data())
def test_encode_decode_round_trip(spec: BitfieldSpec, data: st.DataObject) -> None:
    values = data.draw(field_values(spec))
    word = spec.encode(**values)
    assert 0 <= word < (1 << spec.total_bits)
    assert word & spec.reserved_mask == 0
    assert spec.decode(word) == values
    assert spec.encode(**spec.decode(word)) == word


@given(start=smem_addr, k_steps=st.integers(0, 3))
def test_hi_lo_compose_and_k_step(start: int, k_steps: int) -> None:
    full = umma_smem_desc(start, 0, 1024)
    assert full == (umma_smem_desc_hi(1024) << 32) | smem_desc_lo(start, 0)
    assert wgmma_smem_desc(start, 16, 1024) == (wgmma_smem_desc_hi(1024) << 32) | smem_desc_lo(start, 16)
    stepped = start + 32 * k_steps
    if stepped < (1 << 18):
        assert umma_smem_desc(stepped, 0, 1024) == full + k_steps * k_step_advance()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_width_overflow_names_the_field(spec: BitfieldSpec) -> None:
    for f in spec.fields:
        with pytest.raises(ValueError, match=rf"\.{f.name}=\d+: does not fit in {f.width} bits"):
            spec.encode(**{f.name: 1 << f.width})
        with pytest.raises(ValueError, match=rf"\.{f.name}=-1"):
            spec.encode(**{f.name: -1})


def test_unknown_field_and_reserved_bits_rejected() -> None:
    with pytest.raises(ValueError, match="no field named 'n'"):
        UMMA_IDESC_F16.encode(n=1)
    with pytest.raises(ValueError, match="reserved"):
        UMMA_IDESC_F16.decode(umma_idesc_f16(128, 128) | (1 << 23))
    with pytest.raises(ValueError, match="not a 32-bit word"):
        UMMA_IDESC_F16.decode(1 << 32)


def test_spec_construction_checks() -> None:
    with pytest.raises(ValueError, match="overlaps"):
        BitfieldSpec("bad", 8, (Field("a", 0, 4), Field("b", 3, 2)))
    with pytest.raises(ValueError, match="not inside"):
        BitfieldSpec("bad", 8, (Field("a", 6, 4),))
    with pytest.raises(ValueError, match="used twice"):
        BitfieldSpec("bad", 8, (Field("a", 0, 1), Field("a", 1, 1)))


@pytest.mark.parametrize(("m", "n"), [(32, 128), (192, 128), (128, 8), (128, 24), (256, 272), (64, 4), (128, 0)])
def test_illegal_umma_shapes(m: int, n: int) -> None:
    with pytest.raises(ValueError, match="UMMA"):
        umma_idesc_f16(m, n)


def test_m64_allows_n_multiple_of_8() -> None:
    assert UMMA_IDESC_F16.decode(umma_idesc_f16(64, 8))["n_dim"] == 1


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"start_addr": 8, "lbo_bytes": 0, "sbo_bytes": 1024}, "start_addr=8"),
    ({"start_addr": 1 << 18, "lbo_bytes": 0, "sbo_bytes": 1024}, r"\.start="),
    ({"start_addr": 0, "lbo_bytes": 0, "sbo_bytes": 1000}, "sbo_bytes=1000"),
    ({"start_addr": 0, "lbo_bytes": 0, "sbo_bytes": 1024, "swizzle": "256B"}, "swizzle='256B'"),
])
def test_smem_desc_argument_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        umma_smem_desc(**kwargs)
    with pytest.raises(ValueError, match=match):
        wgmma_smem_desc(**kwargs)


def test_advance_rejects_misaligned() -> None:
    with pytest.raises(ValueError, match="byte_offset=8"):
        desc_advance(8)


# --- NVFP4 (.kind::mxf4nvf4 block-scaled) --------------------------------------------

from ptxgen.hw import SF_ATOM_BYTES  # noqa: E402
from ptxgen.descriptors import (  # noqa: E402
    UMMA_IDESC_MXF4,
    nvfp4_k_step_advance,
    nvfp4_operand_desc_hi,
    sf_copy_desc,
    sf_copy_desc_hi,
    sf_copy_desc_lo,
    umma_idesc_mxf4nvf4,
)


@pytest.mark.parametrize(("m", "n", "expected"), [(128, 128, 0x08200480), (256, 256, 0x10400480)])
def test_mxf4nvf4_idesc_published(m: int, n: int, expected: int) -> None:
    # published values that ptxas accepts (and tests/build/test_nvfp4_ops.py assembles)
    assert umma_idesc_mxf4nvf4(m, n) == expected


def test_mxf4nvf4_idesc_fields() -> None:
    assert UMMA_IDESC_MXF4.decode(umma_idesc_mxf4nvf4(128, 256)) == {
        "sparse": 0, "b_sf_id": 0, "a_format": 1, "b_format": 1, "negate_a": 0, "negate_b": 0,
        "a_major": 0, "b_major": 0, "n_dim": 32, "scale_format": 0, "m_dim": 1, "a_sf_id": 0, "k_dim": 0,
    }
    # block32 (MXFP4 flavour): ue8m0 scale format bit 23, and SF ids 0 or 2 at bits 29-30 / 4-5
    word = umma_idesc_mxf4nvf4(128, 128, sf_id_a=2, sf_id_b=2, scale_vec="block32")
    assert word == 0x08200480 | (1 << 23) | (2 << 29) | (2 << 4)


def test_mxf4nvf4_idesc_planted_bugs() -> None:
    good = umma_idesc_mxf4nvf4(128, 128)
    # the kind::f16 spec with its d_format bit would not give the block-scaled word
    assert umma_idesc_f16(128, 128) != good
    # a wrong SF id or block32 scale format changes the word
    assert umma_idesc_mxf4nvf4(128, 128, scale_vec="block32") != good
    assert umma_idesc_mxf4nvf4(128, 128, sf_id_a=2, scale_vec="block32") != umma_idesc_mxf4nvf4(
        128, 128, scale_vec="block32")
    # M at bits 27-28 as M>>7: M=256 and M=128 differ by exactly bit 27 -> 28
    assert umma_idesc_mxf4nvf4(256, 128) ^ good == (1 << 27) | (1 << 28)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"m": 64, "n": 128}, "M=64"),
    ({"m": 128, "n": 8}, "N=8"),
    ({"m": 128, "n": 264}, "N=264"),
    ({"m": 128, "n": 128, "sf_id_a": 2}, "sf_id_a=2: with block16"),
    ({"m": 128, "n": 128, "sf_id_b": 1, "scale_vec": "block32"}, "sf_id_b=1"),
    ({"m": 128, "n": 128, "scale_vec": "block64"}, "scale_vec='block64'"),
])
def test_mxf4nvf4_idesc_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        umma_idesc_mxf4nvf4(**kwargs)


def test_mxf4_spec_reserved_bits() -> None:
    assert UMMA_IDESC_MXF4.reserved_mask == 0b11 | (1 << 3) | (1 << 6) | (1 << 12) | (0b111 << 24)
    with pytest.raises(ValueError, match="reserved"):
        UMMA_IDESC_MXF4.decode(umma_idesc_mxf4nvf4(128, 128) | (1 << 24))


def test_nvfp4_operand_and_sf_descriptors() -> None:
    # packed e2m1 K-major, 128B swizzle: 128-B rows (256 elements), SBO 1024 -> same hi word as bf16 BLOCK_K 64
    assert nvfp4_operand_desc_hi() == 0x40004040
    assert nvfp4_k_step_advance() == 2  # K=64 e2m1 = 32 B
    # scale-factor atom for tcgen05.cp: no swizzle, LBO 128, SBO 128, version 1
    assert sf_copy_desc_hi() == 0x4008
    assert SF_ATOM_BYTES == 512
    d = sf_copy_desc(0x1200)
    assert d == (0x4008 << 32) | sf_copy_desc_lo(0x1200)
    assert UMMA_SMEM_DESC.decode(d) == {"start": 0x120, "lbo": 8, "sbo": 8, "version": 1, "base_offset": 0,
                                        "lbo_mode": 0, "layout": 0}
    # the next atom of a stage is 512 B further: +32 in the low word
    assert sf_copy_desc(0x1200 + SF_ATOM_BYTES) - d == desc_advance(SF_ATOM_BYTES) == 32


@given(data=st.data())
def test_mxf4_encode_decode_round_trip(data: st.DataObject) -> None:
    values = data.draw(field_values(UMMA_IDESC_MXF4))
    word = UMMA_IDESC_MXF4.encode(**values)
    assert UMMA_IDESC_MXF4.decode(word) == values
