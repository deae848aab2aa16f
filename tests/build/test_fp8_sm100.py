"""The FP8 recipe on sm_100a (``operands: mxfp8``): config rules, the ``.kind::mxf8f6f4`` instruction descriptor,
the plan's scale-atom numbers, the IR the MMA issuer builds, and the SASS ptxas makes of it.

The kernel is the NVFP4 path's composition with a plan change (e4m3 operands, one 128x4 ue8m0 scale atom per
operand per 128-K stage, four K=32 block-scaled MMAs that pick the atom column's byte with the scale-factor data
ID, one fp32 TMEM accumulator, bf16 D).  Simulation and planted bugs: tests/check/test_fp8_sm100_*.py.
"""

from __future__ import annotations

import pytest

from ptxgen import descriptors as D
from ptxgen.build import build, from_dict  # with the plan's budgets
from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.errors import ConfigError
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan

from tests.build.test_nvfp4_kernel import _with

MX = ("fp8_sm100_128x128", "fp8_sm100_256x128")


@pytest.mark.parametrize("changes, message", [
    ({"arch": "sm_90a"}, "operands='mxfp8': block-scaled tcgen05.mma .kind::mxf8f6f4 needs arch=sm_100a"),
    ({"kernel": "dual_gemm"}, "operands='mxfp8': the MXFP8 kernel is a plain GEMM; needs kernel=gemm"),
    ({"tile.block_k": 64}, "tile.block_k=64: operands=mxfp8: must be 128"),
    ({"tile.block_m": 256}, "tile.block_m=256: operands=mxfp8: must be 128 per CTA"),
    ({"tile.block_n": 256}, "tile.block_n=256: operands=mxfp8: must be 128"),
    ({"mma.tc_util_percent": 50}, "mma.tc_util_percent=50: operands=mxfp8: the throttle models bf16 MMAs"),
    ({"operands": "fp8"}, "operands='fp8': wgmma .e4m3 with per-block promotion is the sm_90a kernel; needs arch=sm_90a"),
])
def test_config_rules_name_the_field(changes, message):
    with pytest.raises(ConfigError) as exc:
        from_dict(_with("fp8_sm100_128x128", **changes))
    assert message in str(exc.value)


# ------------------------------------------------------------------ the instruction descriptor


def test_idesc_fields_are_the_ptx_isa_table():
    """Each field of ``UMMA_IDESC_MXF8F6F4`` where the PTX ISA's block-scaled table puts it (bit positions)."""
    spec = {f.name: (f.lo, f.width) for f in D.UMMA_IDESC_MXF8F6F4.fields}
    assert spec == {"sparse": (2, 1), "b_sf_id": (4, 2), "a_format": (7, 3), "b_format": (10, 3), "negate_a": (13, 1),
                    "negate_b": (14, 1), "a_major": (15, 1), "b_major": (16, 1), "n_dim": (17, 6),
                    "scale_format": (23, 1), "m_dim": (27, 2), "a_sf_id": (29, 2)}
    assert D.UMMA_IDESC_MXF8F6F4.reserved_mask == 0b11 | 1 << 3 | 1 << 6 | 0b111 << 24 | 1 << 31


@pytest.mark.parametrize("m, n, ids, value", [
    (128, 128, (0, 0), 0x08A00000),   # CuTe DSL's constant for the same MMA (tests/crosscheck)
    (256, 128, (0, 0), 0x10A00000),
    (128, 128, (3, 3), 0x68A00030),   # A id at 29-30, B id at 4-5
    (128, 256, (1, 2), 0x28C00020),
])
def test_idesc_values(m, n, ids, value):
    got = D.umma_idesc_mxf8f6f4(m, n, sf_id_a=ids[0], sf_id_b=ids[1])
    assert got == value
    f = D.UMMA_IDESC_MXF8F6F4.decode(got)
    assert (f["a_format"], f["b_format"], f["scale_format"]) == (D.MXF8_E4M3, D.MXF8_E4M3, 1)  # e4m3, ue8m0
    assert (f["m_dim"] << 7, f["n_dim"] << 3, f["a_sf_id"], f["b_sf_id"]) == (m, n, *ids)


@pytest.mark.parametrize("kwargs, message", [
    ({"m": 64, "n": 128}, "UMMA M=64"),
    ({"m": 128, "n": 120}, "UMMA N=120"),
    ({"m": 128, "n": 128, "sf_id_a": 4}, "sf_id_a=4: .kind::mxf8f6f4 scale-factor IDs are 0-3"),
    ({"m": 128, "n": 128, "sf_id_b": -1}, "sf_id_b=-1"),
])
def test_idesc_refuses_illegal_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        D.umma_idesc_mxf8f6f4(**kwargs)


# ------------------------------------------------------------------ the plan


@pytest.mark.parametrize("name", MX)
def test_plan_numbers(name):
    p = make_plan(load_config(name))
    cg = p.roles.cta_group
    assert p.mma.operand_format == "mxfp8" and p.epilogue.out_dtype == "bf16" and p.loads.k_multiple == 128
    assert [o.name for o in p.loads.operands] == ["a", "b", "sfa", "sfb"] and p.promotion is None
    assert p.mma.k_steps == 4 and p.mma.k_step_desc == 2 and p.loads.k_coord_step == 128  # 4 MMAs of K=32: +32 B each
    assert p.mma.idesc == D.umma_idesc_mxf8f6f4(128 * cg, 128)
    # the scales: block32 (one ue8m0 per 32 K), one 512-byte atom per operand and stage read by all four MMAs,
    # k-step s at the atom's columns with scale-factor ID s (its 32-K block); the idesc of each k-step carries it
    s = p.scales
    assert (s.kind, s.vec, s.atoms, s.k_per_line, s.stage_lines) == ("mxf8f6f4", "block32", 1, 32, 4)
    assert s.steps == ((0, 0), (0, 1), (0, 2), (0, 3))
    assert p.mma.step_idesc == tuple(D.umma_idesc_mxf8f6f4(128 * cg, 128, sf_id_a=i, sf_id_b=i) for i in range(4))
    sfa, sfb = p.loads.scale_operands
    assert (sfa.load_bytes, sfa.box_rows, sfa.multicast, sfa.region.slot_bytes) == (512, 4, 0, 512)
    assert (sfb.load_bytes, sfb.box_rows, sfb.multicast) == (512 // cg, 4 // cg, 0b11 if cg == 2 else 0)
    assert sfa.desc_hi == sfb.desc_hi == D.sf_copy_desc_hi()
    # TMEM: two 128-column accumulator stages, then SFA and SFB (4 columns each); 512 allocated
    assert (p.tmem.acc_stage_cols, p.acc_stages, sfa.tmem_col, sfb.tmem_col, p.tmem.cols) == (128, 2, 256, 260, 512)
    # what lands in each CTA per stage: A 16 KiB, its B rows, the two atoms (CuTe arms 33792 for the 1-CTA MMA)
    assert p.loads.expect_tx_bytes == 128 * 128 + 128 * 128 // cg + 2 * 512
    assert p.loads.full_tx_bytes == p.full.tx_bytes == p.loads.expect_tx_bytes * cg
    maps = p.launch_spec().tensor_maps
    assert maps["sfa"].box_bytes == 512 and maps["a"].dtype == "u8" and maps["d"].dtype == "bf16"


def _mma_role_ops(name: str) -> list:
    kernel = build_kernel(make_plan(load_config(name)))
    role = next(r for op in O.walk(kernel.body) if isinstance(op, O.WarpSwitch) for r in op.roles if r.name == "mma")
    return [op for op in O.walk(role.body)
            if isinstance(op, (O.MbarrierWait, O.TmemCopy, O.UmmaBlockScaled, O.Umma, O.UmmaCommit))]


@pytest.mark.parametrize("name", MX)
def test_issuer_copies_two_atoms_then_four_mmas_with_ids_0_to_3(name):
    """Per k-block: consumer_wait on full, tcgen05.cp of SFA and SFB, four kind::mxf8f6f4 MMAs on the same scale
    columns with scale-factor IDs 0, 1, 2, 3 (PTX ISA "tcgen05.mma" block scaling), the commit releasing the stage."""
    seq = _mma_role_ops(name)
    kinds = [type(op).__name__ for op in seq]
    first = kinds.index("TmemCopy")
    assert kinds[first - 1] == "MbarrierWait" and seq[first - 1].role == "consumer_wait"
    assert kinds[first:first + 7] == ["TmemCopy"] * 2 + ["UmmaBlockScaled"] * 4 + ["UmmaCommit"] and "Umma" not in kinds
    mmas = seq[first + 2:first + 6]
    assert {(m.kind, m.scale_vec, m.collector) for m in mmas} == {("mxf8f6f4", "block32", "")}
    ids = [(D.UMMA_IDESC_MXF8F6F4.decode(m.idesc)["a_sf_id"], D.UMMA_IDESC_MXF8F6F4.decode(m.idesc)["b_sf_id"])
           for m in mmas]
    assert ids == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert len({m.sfa for m in mmas}) == len({m.sfb for m in mmas}) == 1 and mmas[0].sfa != mmas[0].sfb


@pytest.mark.parametrize("name", MX)
def test_emitted_ptx_spells_the_mxf8f6f4_mma(name):
    import re

    res = build(name)
    cg = res.plan.roles.cta_group
    mmas = re.findall(r"^\s*(tcgen05\.mma\S*) \[[^]]+\], %\w+, %\w+, (%\w+),", res.ptx, re.M)
    assert [m for m, _ in mmas] == [f"tcgen05.mma.cta_group::{cg}.kind::mxf8f6f4.block_scale.block32"] * 4
    for (_, reg), want in zip(mmas, res.plan.mma.step_idesc):  # each k-step's idesc register holds its own constant
        assert re.search(rf"mov\.u32 {reg}, {want:#x};", res.ptx), (reg, hex(want))
    assert len(re.findall(rf"tcgen05\.cp\.cta_group::{cg}\.32x128b\.warpx4", res.ptx)) == 2


@pytest.mark.compile
@pytest.mark.parametrize("name", MX)
def test_sass_holds_four_utcqmma_and_two_scale_copies(name):
    """ptxas lowers kind::mxf8f6f4 to UTCQMMA (``.2CTA`` on the pair): four per k-block, no bf16 UTCHMMA or fp4
    UTCOMMA; the two scale atoms to UTCCP 4x32dp128bit; no spills."""
    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    from ptxgen.assemble import assemble

    res = build(name)
    asm = assemble(res.ptx, "sm_100a", sass=True)
    pair = ".2CTA" if res.plan.roles.cta_group == 2 else ""
    assert asm.count(f"UTCQMMA{pair}") == asm.count("UTCQMMA") == 4
    assert asm.count("UTCHMMA") == asm.count("UTCOMMA") == 0
    assert asm.count(f"UTCCP.T.S{pair}.4x32dp128bit") == 2
    assert asm.spill_store_bytes == asm.spill_load_bytes == 0


@pytest.mark.parametrize("name", MX)
def test_runtime_refuses_mxfp8_configs_in_one_line(name):
    """No launch path takes an MXFP8 config yet: ``gemm`` and ``gemm_fp8`` refuse it before any launch."""
    from ptxgen.runtime.api import _fp8_refuses, _gemm_refuses

    spec = build(name).launch
    for refuse in (_gemm_refuses, _fp8_refuses):
        msg = refuse(spec)
        assert msg and msg.startswith(f"config {name}: an MXFP8 config (operands: mxfp8, sm_100a) has no launch path")
        assert "\n" not in msg
