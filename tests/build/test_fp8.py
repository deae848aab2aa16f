"""FP8 block-scaled GEMM (``operands: fp8``): the config rules, the plan's numbers, the IR and the emitted PTX."""

from __future__ import annotations

import pytest
import yaml

from ptxgen.config import from_dict
from ptxgen.errors import ConfigError
from ptxgen.plan import make_plan

FP8_128x128 = """
name: t_fp8_128x128
arch: sm_90a
operands: fp8
tile: {block_m: 128, block_n: 128, block_k: 128}
pipeline: {stages: 5}
mma: {warpgroups: 2}
epilogue: {store: tma, swizzle: "128", store_block_n: 64, stages: 2, stmatrix: true}
schedule: {persistent: true, group: 8}
"""


def _cfg(**changes) -> dict:
    raw = yaml.safe_load(FP8_128x128)
    for key, value in changes.items():
        node = raw
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return raw


@pytest.mark.parametrize("changes, message", [
    ({"arch": "sm_100a", "mma.warpgroups": 1}, "operands='fp8': wgmma .e4m3 with per-block promotion is the sm_90a kernel"),
    ({"kernel": "dual_gemm"}, "operands='fp8': the FP8 kernel is a plain GEMM"),
    ({"tile.block_k": 64}, "tile.block_k=64: operands=fp8: must be 128"),
    ({"tile.block_n": 192}, "tile.block_n=192: operands=fp8: a multiple of 128 or a divisor of 128"),
    ({"tile.block_m": 256, "tile.block_n": 256}, "tile.block_n=256: operands=fp8: main accumulator 256"),
    ({"cluster.size": 2, "cluster.dual_tile": True}, "cluster.size=2: operands=fp8: a CTA pair must multicast B"),
    ({"tile.block_m": 256, "mma.promotion_unroll": 2}, "tile.block_n=128: operands=fp8: main accumulator 128 + 2 block "
                                                        "partial(s) of 64 fp32 registers per thread = 256 > 192"),
    ({"mma.warpgroups": 1, "tile.block_n": 64, "mma.promotion_unroll": 2},  # two waves: 64 + 2 x 32 registers
     "mma.promotion_unroll=2: operands=fp8: > 1 needs one 64-row wave and one column chunk"),
    ({"operands": "bf16", "tile.block_k": 64, "mma.promotion_unroll": 2},
     "mma.promotion_unroll=2: only operands=fp8 promotes block partials; must be 1"),
])
def test_fp8_config_rules_are_one_line_errors(changes, message):
    with pytest.raises(ConfigError) as exc:
        from_dict(_cfg(**changes))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_fp8_plan_loads_scales_and_promotion():
    p = make_plan(from_dict(_cfg()))
    lo = p.loads
    assert [o.name for o in lo.operands] == ["a", "b", "scale_a", "scale_b"]
    assert [o.name for o in lo.matrix_operands] == ["a", "b"] and lo.scale_operands == ()
    # one k-block: 128 rows x 128 bytes of e4m3 per matrix operand, 128 fp32 scale_a, one 16-byte box of scale_b
    assert (lo.a_stage_bytes, lo.b_stage_bytes) == (128 * 128, 128 * 128)
    assert lo.operand("scale_a").load_bytes == 128 * 4 and lo.operand("scale_b").load_bytes == 16
    assert lo.load_bytes == lo.full_tx_bytes == 2 * 128 * 128 + 128 * 4 + 16 == p.full.tx_bytes
    assert lo.k_coord_step == 128 and lo.k_multiple == 16
    # the stage stays whole 1024-byte swizzle atoms: the next stage's A is aligned
    assert lo.operand("a").region.stride % 1024 == 0 and lo.operand("scale_a").region.offset % 128 == 0
    assert p.mma.k_steps == 4 and p.mma.operand_format == "fp8" and p.mma.k_step_desc == 2  # 32 bytes per k32 step
    pr = p.promotion
    assert (pr.atype, pr.mma_k, pr.chunk_n, pr.chunks, pr.partial_regs) == ("e4m3", 32, 128, 1, 64)
    # every consumer warp releases the stage after reading its own scale rows
    assert p.empty.init == (2 * 4,)
    maps = p.launch_spec().tensor_maps
    assert maps["a"].dtype == "u8" and maps["a"].box == (128, 128) and maps["a"].swizzle == "128B"
    assert (maps["scale_a"].box, maps["scale_a"].dtype) == ((128, 1), "f32")
    assert (maps["scale_b"].box, maps["scale_b"].box_bytes) == ((4, 1), 16)
    assert [n for n, _ in p.params][:5] == ["tmap_a", "tmap_b", "tmap_scale_a", "tmap_scale_b", "tmap_d"]


def test_fp8_128x256_promotes_two_chunks():
    p = make_plan(from_dict(_cfg(**{"tile.block_n": 256, "pipeline.stages": 4, "epilogue.stages": 1})))
    assert (p.promotion.chunks, p.promotion.chunk_n, p.promotion.b_chunk_bytes) == (2, 128, 128 * 128)
    assert p.mma.fragment_regs + p.promotion.partial_regs == 192


def test_bf16_plans_have_no_promotion():
    p = make_plan(from_dict(_cfg(operands="bf16", **{"tile.block_k": 64})))
    assert p.promotion is None and [o.name for o in p.loads.operands] == ["a", "b"]


def test_fp8_kernel_ir_and_ptx():
    from ptxgen.build import build
    from ptxgen.ir import ops as O

    res = build(from_dict(_cfg()))
    ops = list(O.walk(res.kernel.body))
    wgmmas = [op for op in ops if isinstance(op, O.Wgmma)]
    assert wgmmas and all((op.atype, op.k, op.n, op.acc) == ("e4m3", 32, 128, "part") for op in wgmmas)
    promotes = [op for op in ops if isinstance(op, O.PromoteScaled)]
    assert [op.accumulate for op in promotes] == [False, True]  # the peeled first k-block initialises acc0
    loads = {op.tensor for op in ops if isinstance(op, O.TmaLoad)}
    assert loads == {"a", "b", "scale_a", "scale_b"}
    ptx = res.ptx
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx and ".bf16.bf16" not in ptx
    assert ptx.count("// PromoteScaled") == 2 and ptx.count("ld.shared.f32") == 6 and "fma.rn.f32" in ptx
    wg = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    assert all(line.rstrip().endswith(", 1, 1;") for line in wg)  # 8-bit inputs: no transpose immediates


@pytest.mark.compile
@pytest.mark.parametrize("changes", [{}, {"tile.block_n": 256, "pipeline.stages": 4, "epilogue.stages": 1},
                                     {"tile.block_m": 256, "pipeline.stages": 4, "epilogue.stages": 1},
                                     {"tile.block_m": 64, "mma.warpgroups": 1, "mma.promotion_unroll": 4},
                                     {"cluster.size": 2, "cluster.dual_tile": True, "tma.multicast": True}])
def test_fp8_kernels_assemble_without_spills(changes):
    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    from ptxgen.assemble import assemble
    from ptxgen.build import build

    res = build(from_dict(_cfg(**changes)))
    asm = assemble(res.ptx, "sm_90a", sass=True)
    assert asm.spill_store_bytes == asm.spill_load_bytes == asm.stack_frame_bytes == 0 and not asm.warnings
    p = res.plan
    # every wgmma is an e4m3 QGMMA: the peeled first iteration and the loop body, per block, wave, chunk and k-step
    blocks = 2 * p.promotion.unroll if p.promotion.unroll > 1 else 2
    assert asm.count("QGMMA") == blocks * p.mma.m_waves * p.promotion.chunks * p.mma.k_steps and asm.count("HGMMA") == 0


@pytest.mark.compile
def test_relocatable_compile_caps_setmaxnreg_consumers(tmp_path):
    """Why the runtime compiles whole programs (``PTXGEN_JIT``): the 128x256 consumer (128 accumulator + 64 partial
    registers) fits its ``setmaxnreg`` share as a whole program, but ptxas ``-c`` (relocatable code, what the
    driver's JIT and nvJitLink compile) keeps every warp within ``.maxnreg`` and spills."""
    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    import re
    import subprocess

    from ptxgen.assemble import _tool
    from ptxgen.build import build

    ptx = build(from_dict(_cfg(**{"tile.block_n": 256, "pipeline.stages": 4, "epilogue.stages": 1}))).ptx
    (tmp_path / "k.ptx").write_text(ptx)

    def spill_stores(*flags):
        log = subprocess.run([_tool("ptxas"), "-arch=sm_90a", "-O3", "-v", *flags, "k.ptx", "-o", "k.out"],
                             cwd=tmp_path, capture_output=True, text=True, check=True).stderr
        return int(re.search(r"(\d+) bytes spill stores", log).group(1))

    assert ".maxnreg 168" in ptx and "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
    assert spill_stores() == 0 and spill_stores("-c") > 0


def _overlapped(**changes):
    return from_dict(_cfg(**{"tile.block_m": 64, "mma.warpgroups": 1, "mma.promotion_unroll": 4, **changes}))


def test_overlapped_promotion_plan_and_ir():
    """promotion_unroll 4: two partials, each block's promotion after the next block's commit and wait_group 1, the
    iteration's last after wait_group 0; num_k rounded up to whole iterations."""
    from ptxgen.build import build
    from ptxgen.ir import ops as O

    res = build(_overlapped())
    assert res.plan.promotion.unroll == 4 and "Let num_k = ((k + (512 - 1)) / 512) * 4" in res.ptx
    loop = next(op for op in O.walk(res.kernel.body) if isinstance(op, O.For) and op.var == "kp")
    body = [op for op in O.walk(loop.body) if isinstance(op, (O.Wgmma, O.WgmmaWait, O.PromoteScaled))]
    order = [("W", op.acc) if isinstance(op, O.Wgmma) else ("wait", op.n) if isinstance(op, O.WgmmaWait)
             else ("P", op.part) for op in body]
    compact = [x for i, x in enumerate(order) if i == 0 or x != order[i - 1]]
    assert compact == [("W", "part"), ("W", "part1"), ("wait", 1), ("P", "part"), ("W", "part"), ("wait", 1),
                       ("P", "part1"), ("W", "part1"), ("wait", 1), ("P", "part"), ("wait", 0), ("P", "part1")]
    promotes = [op for op in O.walk(res.kernel.body) if isinstance(op, O.PromoteScaled)]
    assert [op.accumulate for op in promotes] == [False, True, True, True] + [True] * 4  # peeled iteration first
    assert res.ptx.count("wgmma.wait_group.sync.aligned 1;") == 6


def test_multicast_pair_plan():
    """fp8 in a CTA pair: each CTA loads half of B's rows and multicasts it; A and the scales are its own."""
    p = make_plan(from_dict(_cfg(**{"cluster.size": 2, "cluster.dual_tile": True, "tma.multicast": True})))
    lo = p.loads
    assert lo.operand("b").box_rows == 64 and lo.operand("b").multicast == 0b11 and lo.operand("scale_b").multicast == 0
    assert lo.full_tx_bytes == 2 * 128 * 128 + 128 * 4 + 16  # own A, both halves of B, own scales
    assert p.empty.init == (2 * 2 * 4,) * 2  # every consumer warp of both CTAs releases each stage
