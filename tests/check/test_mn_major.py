"""MN-major operands (``tma.major_a`` / ``major_b`` = ``mn``, sm_90a bf16 GEMM, dual GEMM, grouped GEMM's B):
transposed views read in place.

On the CPU: the config rules; the plan's boxes and descriptors; the verifier, the simulator (a CTA pair multicasting
an MN-major B, a pair along N multicasting an MN-major A, split-K, the last-wave split, ping-pong, swap-AB, the dual
GEMM's B1 and B2, the grouped GEMM's stacked B) and the PTX-vs-IR differential accept the variants; ptxas
assembles them with 0 spills.  Planted bugs: a Wgmma without its transpose immediate, an MN-major descriptor with the K-major k-step, or with the LBO of one
chunk too few (wrong results in the simulator), and the descriptor's start address unmasked under a cluster rank's
high address bits (the LBO the H100 read for the second CTA of a pair, 256 bytes off; the simulator gives rank 1
its own shared window and computes a wrong result), and a grouped B's K rows not offset to the tile's group.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ptxgen.build import build, load_config
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.sim.run import simulate, simulate_grouped
from ptxgen.check.verify import verify
from ptxgen.errors import ConfigError, SimError
from ptxgen.ir import Const, Sreg
from ptxgen.ir import ops as O
from ptxgen.ir.expr import evaluate
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

#: (config, major_a, major_b): a pair multicasting B, a pair along N multicasting A, split-K, last-wave split,
#: ping-pong, swap-AB (the caller's B is the kernel's A); the dual GEMM (B1 and B2 MN-major): a pair, its last-wave
#: split, the 64x64 tile
VARIANTS = (("h100_128x256", "k", "mn"), ("h100_128x256", "mn", "mn"), ("h100_128x80_c2n", "mn", "k"),
            ("h100_64x128_sk2", "k", "mn"), ("h100_128x256_lw2", "mn", "mn"), ("h100_128x128_pp", "mn", "mn"),
            ("h100_64x32_swap", "mn", "k"), ("dual_h100_128x128_c2", "k", "mn"), ("dual_h100_128x128_c2_lw2", "mn", "mn"),
            ("dual_h100_64x64", "mn", "k"))
#: N and M multiples of 8 (an MN-major map's width in whole 16-byte groups), ragged against the tiles; K ragged
SHAPES = ((200, 328, 136), (136, 520, 72))


def variant(name: str, a: str, b: str):
    return load_config(name).replace(**{"name": f"{name}_{a}{b}", "tma.major_a": a, "tma.major_b": b})


def test_rules_refuse_what_cannot_read_mn_major():
    with pytest.raises(ConfigError, match=r"tma.major_b='mn'.*multiple of 64"):
        variant("h100_128x144", "k", "mn")
    with pytest.raises(ConfigError, match=r"tma.major_b='mn'.*multicast half"):
        load_config("h100_128x144_c2").replace(**{"tma.major_b": "mn"})
    with pytest.raises(ConfigError, match=r"tma.major_a='mn'.*operands=bf16"):
        load_config("fp8_h100_128x128").replace(**{"tma.major_a": "mn"})
    with pytest.raises(ConfigError, match=r"sm_90a only"):
        load_config("level9").replace(**{"tma.major_b": "mn"})


def test_plan_loads_64_element_boxes_and_builds_mn_major_descriptors():
    p = make_plan(variant("h100_128x256", "k", "mn"))
    b = p.loads.operand("b")
    assert (b.major, b.split, b.box_rows, b.load_bytes) == ("mn", "multicast", 128, 128 * 128)
    spec = p.launch_spec()
    assert (spec.tensor_maps["b"].box, spec.tensor_maps["b"].major) == ((64, 64), "mn")
    assert spec.tensor_maps["a"].major == "k" and "major" not in spec.to_json().split('"a"')[1].split("}")[0]
    assert (p.mma.trans_a, p.mma.trans_b, p.mma.mn_chunk_bytes, p.mma.mn_k_step_desc) == (False, True, 8192, 128)
    res = build(variant("h100_128x256", "k", "mn"))
    assert res.ptx.count("1, 1, 0, 1;") == p.mma.k_steps * p.mma.m_waves and "1, 1, 0, 0;" not in res.ptx


@pytest.mark.parametrize("name,a,b", VARIANTS)
def test_checks_accept_the_variants(name, a, b):
    res = build(variant(name, a, b))
    verify(res.kernel)
    for m, n, k in SHAPES:
        simulate(res.kernel, m, n, k, seed=1, num_sms=3)
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None


def test_variants_assemble_without_spills():
    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    from ptxgen.assemble import assemble

    # pairs along M and N, the dual GEMM's last-wave pair, the grouped contiguous pair
    for name, a, b in (*VARIANTS[:3], VARIANTS[-2], ("grouped_contiguous_h100_128x256_c2", "k", "mn")):
        res = build(variant(name, a, b))
        asm = assemble(res.ptx, res.plan.arch, sass=True)
        assert (asm.spill_store_bytes, asm.spill_load_bytes, asm.stack_frame_bytes) == (0, 0, 0)


def _planted(kernel, change):
    return rewrite(kernel, lambda op: change(op) if isinstance(op, O.Wgmma) else op)


@pytest.mark.parametrize("bug", ["no_transpose", "kmajor_step", "lbo_short"])
def test_simulator_catches_planted_descriptor_bugs(bug):
    p = make_plan(variant("h100_128x128", "k", "mn"))
    kernel = build_kernel(p)
    if bug == "no_transpose":  # the operand read as K-major
        bad = _planted(kernel, lambda op: replace(op, trans_b=False))
    elif bug == "kmajor_step":  # 32 bytes per k-step (K-major) instead of 16 K rows
        bad = build_kernel(replace(p, mma=replace(p.mma, mn_k_step_desc=p.mma.k_step_desc)))
    else:  # the chunks 16 bytes closer than the boxes land
        bad = build_kernel(replace(p, mma=replace(p.mma, mn_lbo_field=p.mma.mn_lbo_field - 1)))
    with pytest.raises(SimError, match="wrong result|bad descriptor|read before write|misaligned"):
        simulate(bad, 136, 264, 136, seed=2, num_sms=2)


def test_descriptor_start_is_masked_under_a_cluster_rank():
    """The second CTA of a pair has shared addresses 16 MiB up (H100): the MN-major descriptors' LBO must not see
    it.  Every MN-major Wgmma operand of a pair variant decodes to the chunk stride with such a base; unmasked
    (the planted bug, what the H100 first ran) its LBO is 256 bytes long."""
    from ptxgen.builders.common import desc_lo

    p = make_plan(variant("h100_128x256", "mn", "mn"))
    kernel = build_kernel(p)
    high = (1 << 24) + 1024

    def env(leaf):
        return high if leaf == Sreg("smem") else 0

    wgmmas: list = []
    rewrite(kernel, lambda op: wgmmas.append(op) or op if isinstance(op, O.Wgmma) else op)
    los = [evaluate(op.b_lo, env) for op in wgmmas]
    assert los and all(((lo >> 16) & 0x3FFF) << 4 == p.mma.mn_chunk_bytes for lo in los)
    unmasked = evaluate(desc_lo(p, Const(0), p.mma.mn_lbo_field), env)
    assert ((unmasked >> 16) & 0x3FFF) << 4 == p.mma.mn_chunk_bytes + 256



def test_simulator_catches_the_unmasked_start_on_rank_1(monkeypatch):
    """The simulator gives rank 1 of a pair its own shared window (16 MiB up, as the H100): a pair variant whose
    MN-major descriptors take the address unmasked (the planted bug) computes rank 1's tiles from B rows 256 bytes
    off, a wrong result; the shipped builder's masked descriptors pass the same run (test_checks_accept_the_variants)."""
    from ptxgen.builders import roles

    real = roles.desc_lo
    monkeypatch.setattr(roles, "desc_lo", lambda *args, masked=False, **kw: real(*args, **kw))
    bad = build_kernel(make_plan(variant("h100_128x256", "k", "mn")))
    with pytest.raises(SimError, match="wrong result|out of bounds"):
        simulate(bad, 200, 328, 136, seed=1, num_sms=3)


#: grouped configs whose B is read MN-major (the [G x K, N] stack of ``torch._grouped_mm``'s [G, K, N] weights): a
#: masked single CTA, a masked pair (B always multicast), a contiguous pair (multicast B, or each CTA its own group's
#: whole B where the pair's m-blocks are of two groups), the contiguous TMA-store tile
GROUPED = ("grouped_masked_h100_128x128", "grouped_masked_h100_128x256_c2", "grouped_contiguous_h100_128x256_c2",
           "grouped_contiguous_h100_128x256_tma")


@pytest.mark.parametrize("name", GROUPED)
def test_grouped_b_read_mn_major(name):
    res = build(variant(name, "k", "mn"))
    verify(res.kernel)
    if "masked" in name:  # an empty group, one row, a group past one m-block
        problems = [dict(n=200, k=128, masked_m=[70, 0, 1, 129], m_max=192)]
    else:  # groups straddling a pair's m-blocks (70 | 1 rows), an empty group, three m-blocks of one
        problems = [dict(n=200, k=128, group_rows=[70, 0, 1, 129, 300]), dict(n=136, k=192, group_rows=[128, 129])]
    for problem in problems:
        simulate_grouped(res.kernel, **problem, seed=1, num_sms=3)
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None
    with pytest.raises(ConfigError, match=r"tma.major_a='mn'.*schedule.grouped=none"):
        variant(name, "mn", "k")


def test_simulator_catches_a_grouped_b_read_from_group_0(monkeypatch):
    """Planted: the MN-major loads of a grouped B without the group's K-row offset (every group reads group 0's
    weights): wrong results in the simulator."""
    from ptxgen.builders import grouped

    monkeypatch.setattr(grouped, "b_k_row", lambda plan: Const(0))
    bad = build_kernel(make_plan(variant("grouped_contiguous_h100_128x256_c2", "k", "mn")))
    with pytest.raises(SimError, match="wrong result"):
        simulate_grouped(bad, n=200, k=128, group_rows=[70, 0, 1, 129, 300], seed=1, num_sms=3)
