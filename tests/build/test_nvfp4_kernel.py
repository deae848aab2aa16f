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
    assert all(s.load_bytes == 2048 and s.box_rows == 16 for s in p.loads.scale_operands)
    # tx bytes count the scale tiles: both CTAs' loads land on the leader's full barrier with 2-SM TMA
    assert p.loads.load_bytes == 128 * 128 + 2 * 128 * 128 // cg + 3 * 2048
    assert p.loads.full_tx_bytes == p.loads.load_bytes * cg
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
