"""The NVFP4 block-scaled dual GEMM: config rules, plan numbers, IR shape of the composed kernel.

The kernel is the BF16 dual GEMM's composition with a plan change (packed e2m1 operands, three scale-factor
operands, block-scaled MMAs, fp16 C): these tests pin the numbers the plan computes once and the IR the
roles build from them.  Simulation: tests/check/sim/test_nvfp4_sim.py; planted bugs: tests/check/test_nvfp4_planted.py.
"""

from __future__ import annotations

import pytest

from ptxgen import descriptors
from ptxgen.builders.kernel import build_kernel
from ptxgen.build import from_dict  # with the plan's budgets
from ptxgen.config import load_config, to_dict
from ptxgen.errors import ConfigError
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan

NVFP4 = ("nvfp4_dual_128x128", "nvfp4_dual_256x128")


def _with(name: str, **changes) -> dict:
    raw = to_dict(load_config(name))
    for key, value in changes.items():
        node = raw
        *head, last = key.split(".")
        for part in head:
            node = node[part]
        node[last] = value
    return raw


@pytest.mark.parametrize("changes, message", [
    ({"arch": "sm_90a"}, "operands='nvfp4': block-scaled tcgen05.mma .kind::mxf4nvf4 needs arch=sm_100a"),
    ({"kernel": "gemm"}, "operands='nvfp4': the NVFP4 kernel is the SwiGLU dual GEMM"),
    ({"tile.block_k": 64}, "tile.block_k=64: operands=nvfp4: must be 256"),
    ({"tile.block_m": 256}, "tile.block_m=256: operands=nvfp4: must be 128 per CTA"),
    ({"tile.block_n": 64}, "tile.block_n=64: operands=nvfp4: must be 128"),
    ({"mma.tc_util_percent": 50}, "mma.tc_util_percent=50: operands=nvfp4: the throttle models bf16 MMAs"),
    ({"accumulator.stages": 2}, "TMEM columns 256 x 2 accumulator stage(s) + 3 scale tiles x 16 = 560 > 512"),
    ({"operands": "fp8"}, "operands='fp8': wgmma .e4m3 with per-block promotion is the sm_90a kernel; needs arch=sm_90a"),
])
def test_config_rules_name_the_field(changes, message):
    with pytest.raises(ConfigError) as exc:
        from_dict(_with("nvfp4_dual_128x128", **changes))
    assert message in str(exc.value)


@pytest.mark.parametrize("name", NVFP4)
def test_plan_numbers(name):
    p = make_plan(load_config(name))
    cg = p.roles.cta_group
    assert p.mma.operand_format == "nvfp4" and p.epilogue.out_dtype == "f16" and p.loads.k_multiple == 256
    assert [o.name for o in p.loads.operands] == ["a", "b", "b2", "sfa", "sfb", "sfb2"]
    assert p.mma.k_steps == 4 and p.mma.k_step_desc == 2 and p.loads.k_coord_step == 128  # 4 MMAs of K=64, +32 B each
    assert p.mma.idesc == descriptors.umma_idesc_mxf4nvf4(128 * cg, 128) == (0x08200480 if cg == 1 else 0x10200480)
    # operand stages: 128 B rows of packed e2m1; B halves with cta_group::2; each scale tile 4 atoms of 512 B
    assert p.loads.operand("a").load_bytes == 128 * 128 and p.loads.operand("b").load_bytes == 128 * 128 // cg
    # SFA: the CTA's own 2048 B; SFB1/SFB2: 2048 B land in every CTA, a pair's CTA loads half and multicasts it
    sfa, sfb, sfb2 = p.loads.scale_operands
    assert (sfa.load_bytes, sfa.box_rows, sfa.multicast) == (2048, 16, 0)
    assert all((s.load_bytes, s.box_rows, s.multicast) == (2048 // cg, 16 // cg, 0b11 if cg == 2 else 0)
               for s in (sfb, sfb2))
    assert all(s.region.slot_bytes == 2048 for s in p.loads.scale_operands) and p.scales.stage_lines == 16
    # tx bytes count the scale tiles: both CTAs' loads land on the leader's full barrier with 2-SM TMA
    assert p.loads.load_bytes == 128 * 128 + 2 * 128 * 128 // cg + 2048 + 2 * 2048 // cg
    assert p.loads.expect_tx_bytes == 128 * 128 + 2 * 128 * 128 // cg + 3 * 2048
    assert p.loads.full_tx_bytes == p.full.tx_bytes == p.loads.expect_tx_bytes * cg
    # TMEM: two 128-column accumulators, then 3 x 16 scale columns; 512 allocated (a power of two)
    assert [s.tmem_col for s in p.loads.scale_operands] == [256, 272, 288] and p.tmem.cols == 512
    assert [(m.acc, m.b, m.sfa, m.sfb) for m in p.mma.streams] == [(0, "b", "sfa", "sfb"), (1, "b2", "sfa", "sfb2")]
    maps = p.launch_spec().tensor_maps
    assert maps["sfa"].box_bytes == 2048 and maps["a"].box_bytes == 128 * 128 and maps["d"].dtype == "f16"


@pytest.mark.parametrize("name", NVFP4)
def test_issuer_copies_scales_before_the_block_scaled_mmas(name):
    """Per k-block: consumer_wait on full, fence, 12 tcgen05.cp (one per scale atom), then 8 block-scaled MMAs
    (B1 then B2 per k-step, on the same A slice), then the commit releasing the stage."""
    kernel = build_kernel(make_plan(load_config(name)))
    mma_role = next(r for op in O.walk(kernel.body) if isinstance(op, O.WarpSwitch) for r in op.roles if r.name == "mma")
    seq = [op for op in O.walk(mma_role.body)
           if isinstance(op, (O.MbarrierWait, O.TmemCopy, O.UmmaBlockScaled, O.Umma, O.UmmaCommit))]
    kinds = [type(op).__name__ for op in seq]
    first_copy = kinds.index("TmemCopy")
    assert kinds[first_copy - 1] == "MbarrierWait" and seq[first_copy - 1].role == "consumer_wait"
    assert kinds[first_copy:first_copy + 12] == ["TmemCopy"] * 12
    assert kinds[first_copy + 12:first_copy + 20] == ["UmmaBlockScaled"] * 8 and "Umma" not in kinds
    assert kinds[first_copy + 20] == "UmmaCommit"
    mmas = seq[first_copy + 12:first_copy + 20]
    assert {m.scale_vec for m in mmas} == {"block16"} and {m.cta_group for m in mmas} == {kernel.cta_group}
    assert {c.desc_hi for c in seq[first_copy:first_copy + 12]} == {descriptors.sf_copy_desc_hi()}


def test_pair_loads_half_of_each_sfb_and_multicasts_it():
    """nvfp4_dual_256x128: each CTA moves half the B scale bytes of the 1-CTA kernel (1024 of 2048 B per tile and
    stage), to the same slot offset in both CTAs (rank x 1024), from its half of the lines (rank x 8); what lands
    in each CTA, and so its expect_tx, is unchanged."""
    from ptxgen.build import build

    one, pair = (make_plan(load_config(n)) for n in NVFP4)
    for nm in ("sfb", "sfb2"):
        assert 2 * pair.loads.operand(nm).load_bytes == one.loads.operand(nm).load_bytes == 2048
    assert one.loads.load_bytes - pair.loads.load_bytes == 2 * 128 * 128 // 2 + 2 * 1024  # B halves + SFB halves
    assert pair.loads.expect_tx_bytes - pair.loads.load_bytes == 2 * 1024  # the peer's multicast halves
    loads = {op.tensor: op for op in O.walk(build(NVFP4[1]).kernel.body) if isinstance(op, O.TmaLoad)}
    for nm in ("sfb", "sfb2"):
        op = loads[nm]
        assert op.multicast == 0b11 and op.two_sm
        assert "%rank * 1024" in op.describe() and "%rank * 8" in op.describe()
    assert loads["sfa"].multicast == 0 and "%rank" not in loads["sfa"].describe()
    maps = build(NVFP4[1]).launch.tensor_maps
    assert maps["sfb"].box_bytes == maps["sfb2"].box_bytes == 1024 and maps["sfa"].box_bytes == 2048


@pytest.mark.compile
def test_pair_sfb_multicast_reaches_the_sass():
    """ptxas keeps the multicast: one ``UTMALDG.2D.MULTICAST.2CTA`` per B scale tile in the pair, none in 1-CTA."""
    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    from ptxgen.assemble import assemble
    from ptxgen.build import build

    one, pair = (assemble(build(n).ptx, "sm_100a", sass=True) for n in NVFP4)
    assert pair.count("UTMALDG.2D.MULTICAST.2CTA") == 2 and pair.count("UTMALDG") == 6
    assert one.count("MULTICAST") == 0 and one.count("UTMALDG") == 6


@pytest.mark.parametrize("name", NVFP4)
def test_b2_mma_reads_a_from_the_collector_the_b1_mma_filled(name):
    """Per M-wave and k-step the B1 MMA carries ``.collector::a::fill`` and the B2 MMA right after it, on the same A
    slice, ``.collector::a::lastuse`` (PTX ISA "tcgen05.mma"); the emitted PTX spells them in that order."""
    import re

    from ptxgen.build import build

    p = make_plan(load_config(name))
    assert [(m.b, m.collector) for m in p.mma.streams] == [("b", "fill"), ("b2", "lastuse")]
    res = build(name)
    mmas = [op for op in O.walk(res.kernel.body) if isinstance(op, O.UmmaBlockScaled)]
    assert [op.collector for op in mmas] == ["fill", "lastuse"] * p.mma.k_steps * p.mma.m_waves
    for fill, last in zip(mmas[::2], mmas[1::2]):
        assert fill.a_lo == last.a_lo and fill.b_lo != last.b_lo and fill.sfa == last.sfa
    emitted = re.findall(r"^\s*tcgen05\.mma\S*", res.ptx, re.M)
    assert [e.strip().rsplit(".", 1)[-1] for e in emitted] == ["collector::a::fill", "collector::a::lastuse"] * 4


def test_no_collector_outside_the_nvfp4_dual_gemm():
    from ptxgen.config import shipped_configs

    for name in shipped_configs():
        if not name.startswith("nvfp4_"):
            assert all(not m.collector for m in make_plan(load_config(name)).mma.streams), name


@pytest.mark.compile
@pytest.mark.parametrize("name", NVFP4)
def test_collector_reaches_the_sass(name):
    """ptxas encodes fill / lastuse as ``.A_KEEP`` / ``.A_REUSE`` on the A descriptor operand, the same register."""
    import re

    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    from ptxgen.assemble import assemble
    from ptxgen.build import build

    sass = assemble(build(name).ptx, "sm_100a", sass=True).sass
    a_ops = re.findall(r"UTCOMMA\S* gdesc\[(UR\d+)\]\.?(A_KEEP|A_REUSE)?", sass)
    assert [k for _, k in a_ops] == ["A_KEEP", "A_REUSE"] * 4
    assert all(a_ops[i][0] == a_ops[i + 1][0] for i in range(0, 8, 2))
