"""sm_90a CTA pairs along N (``cluster: {size: 2, dual_tile: true, along: n}``, ``tma.multicast``): the pair takes
two adjacent n-blocks of one m-block and multicasts A.

On the CPU: the plan splits A (each CTA loads ``block_m / 2`` rows and multicasts them; B is each CTA's own) and
walks pair units of one m-block x two n-blocks; the verifier, the simulator (tails: an odd n-block count, N not a
multiple of ``2 x block_n``, M = 1, ragged K, a small swizzle group, ``epilogue.expr``) and the PTX-vs-IR differential
accept the shipped configs; the config rules refuse what the pair along N does not run.  Planted bugs: both CTAs
loading the first half of A (wrong result), rank 1 one n-block too far (wrong result), A loaded without multicast
(the peer's half never lands: the verifier's transaction bytes, the simulator's deadlock).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen.build import build, load_config
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.sim.run import simulate
from ptxgen.check.verify import verify
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import Sreg, Var
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan
from tests.helpers.representative import shipped_params

pytestmark = pytest.mark.sim

SHIPPED = ("h100_128x80_c2n", "h100_128x192_c2n", "h100_192x128_c2n", "h100_192x192_c2n")
SMALL = "h100_128x80_c2n"
#: (m, n, k): N = 520 is 7 n-blocks of 80 (the last pair's rank 1 past N), N = 400 5 (odd), 1000 not a multiple of
#: 160, M = 1, K = 264 and 72 not multiples of block_k
SHAPES = ((300, 520, 264), (1, 400, 72), (200, 1000, 128), (129, 160, 64))


def test_the_pairs_along_n_are_the_shipped_ones():
    from ptxgen.config import shipped_configs

    along_n = {c for c in shipped_configs() if load_config(c).cluster.along == "n"}
    assert along_n == set(SHIPPED)


def test_the_plan_splits_a_and_walks_pairs_of_n_blocks():
    p = make_plan(load_config(SMALL))
    a, b = p.loads.operand("a"), p.loads.operand("b")
    assert (a.split, a.box_rows, a.load_bytes, a.multicast) == ("multicast", 64, 64 * 128, 0b11)
    assert (b.split, b.box_rows, b.load_bytes, b.multicast) == ("none", 80, 80 * 128, 0)
    assert p.loads.shared == "a" and p.loads.expect_tx_bytes == (128 + 80) * 128
    assert p.loads.load_bytes == (64 + 80) * 128  # own half of A + own B: the L2 -> SM traffic of one CTA
    s = p.schedule
    assert (s.m_ctas, s.n_ctas, s.cluster_tile_rows, s.cluster_tile_cols) == (1, 2, 128, 160)
    assert p.launch_spec().grid.tile_cols == 160


def test_the_pair_along_m_keeps_its_b_halves():
    p = make_plan(load_config("h100_128x144_c2"))
    assert p.loads.shared == "b" and p.loads.operand("a").split == "none" and p.loads.operand("b").box_rows == 72
    assert (p.schedule.m_ctas, p.schedule.n_ctas, p.schedule.cluster_tile_cols) == (2, 1, 144)


@pytest.mark.parametrize("config", [p for p in shipped_params() if p.values[0] in SHIPPED])  # main tier: the representative
def test_verifier_simulator_and_ptx_differential_accept_the_pair(config):
    res = build(load_config(config))
    verify(res.kernel)
    for m, n, kk in SHAPES:
        for seed in (0, 1):
            simulate(res.kernel, m, n, kk, seed=seed, num_sms=4)
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None
    # one multicast load (the shared A half), B each CTA's own
    assert res.ptx.count(".multicast::cluster") == 1 and res.launch.cluster == (2, 1, 1)


def test_simulator_runs_a_small_swizzle_group_and_an_expression():
    plan = make_plan(load_config(SMALL).replace(**{"schedule.group": 2, "epilogue.expr": "relu(acc + bias[col])"}))
    k = build_kernel(plan)
    verify(k)
    for m, n, kk in ((600, 700, 128), (300, 520, 64)):
        simulate(k, m, n, kk, num_sms=4, expr=plan.epilogue.expr)


@pytest.mark.parametrize("change, rule", [
    ({"cluster.size": 1, "cluster.dual_tile": False, "tma.multicast": False}, "needs cluster.size=2"),
    ({"tma.multicast": False}, "needs tma.multicast=true"),
    ({"schedule.split_k": 2}, "needs schedule.split_k=1"),
    ({"mma.consumers": "pingpong"}, "needs mma.consumers=cooperative"),
    ({"schedule.grouped": "masked"}, "needs schedule.grouped=none"),
    ({"kernel": "dual_gemm"}, "needs kernel=gemm and operands=bf16"),
])
def test_config_rules_refuse_what_the_pair_along_n_does_not_run(change, rule):
    with pytest.raises(ConfigError, match=r"^cluster\.along='?n'?.*" + re.escape(rule)):
        load_config(SMALL).replace(**change)


def test_sm100_refuses_a_pair_along_n():
    with pytest.raises(ConfigError, match=r"^cluster\.along='?n'?.*must be m"):
        load_config("level7").replace(**{"cluster.along": "n"})


# ------------------------------------------------------------------ planted bugs

def _planted(fn):
    k = build_kernel(make_plan(load_config(SMALL)))
    bad = rewrite(k, fn)
    assert bad != k
    return bad


def test_planted_a_half_at_the_wrong_row():
    """Both CTAs load rows ``m_row ..`` (the rank's offset dropped): the second half of A never lands."""
    bad = _planted(lambda op: replace(op, row=Var("m_row")) if isinstance(op, O.TmaLoad) and op.tensor == "a" else None)
    with pytest.raises(SimError, match=r"^wrong result"):
        simulate(bad, 300, 520, 264, num_sms=4)


def test_planted_peer_n_block_off_by_one():
    """Rank 1 takes n-block ``2 cn + 2``: its own n-block is never stored, the next pair's twice."""
    def far(op):
        if isinstance(op, O.Let) and op.var == "n_col":
            return replace(op, expr=op.expr + Sreg("rank") * 80)
    with pytest.raises(SimError, match=r"^wrong result"):
        simulate(_planted(far), 300, 520, 264, num_sms=4)


def test_planted_a_without_multicast():
    """A's half loaded into the own stage only: the peer's ``full`` never receives its bytes."""
    bad = _planted(lambda op: replace(op, multicast=0) if isinstance(op, O.TmaLoad) and op.tensor == "a" else None)
    with pytest.raises(VerifyError):
        verify(bad)
    with pytest.raises(SimError):
        simulate(bad, 300, 520, 264, num_sms=4)
