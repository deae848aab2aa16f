"""sm_90a 2x2 clusters (``cluster: {size: 4, dual_tile: true, along: mn}``, ``tma.multicast``): two m-blocks x two
n-blocks; each CTA loads half of its A k-block for itself and the CTA beside it along N, half of its B k-block for
itself and the CTA beside it along M, and releases each stage to those two and itself.

On the CPU: the plan splits both operands with the masks of the CTAs sharing them; the verifier, the simulator (an
odd m- and n-block count, M = 1, N and K not multiples of the tile) and (slow tier) the PTX-vs-IR differential accept
the bench probes (the GEMM's and the SwiGLU dual GEMM's, whose B1 and B2 halves go as B's).  Planted bugs: the release to the CTA beside it along N dropped (its producer refills a stage a
consumer still reads: the verifier's arrival count), A multicast with the m position's shift dropped (the CTAs of m
position 1 never receive A: the verifier's transaction bytes, the simulator's deadlock), A's half picked by the m
position instead of the n position (the simulator's write-after-write race).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ptxgen.build import build, load_config
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.sim.run import simulate
from ptxgen.check.verify import verify
from ptxgen.errors import SimError, VerifyError
from ptxgen.ir import Sreg
from ptxgen.ir.expr import Bin
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

PROBES = Path(__file__).resolve().parents[2] / "bench" / "configs"
SMALL = PROBES / "h100_128x128_c4.yaml"
#: (m, n, k): 3 m-blocks and 5 n-blocks of 128 (the last square's second m- and n-block past M and N), M = 1, K not a
#: multiple of block_k
SHAPES = ((300, 520, 264), (1, 200, 72), (129, 257, 64))


def _kernel():
    return build_kernel(make_plan(load_config(SMALL)))


def test_the_plan_splits_a_and_b_with_the_masks_of_the_ctas_sharing_them():
    p = make_plan(load_config(SMALL))
    a, b = p.loads.operand("a"), p.loads.operand("b")
    assert (a.split, a.box_rows, a.load_bytes, a.multicast) == ("multicast", 64, 64 * 128, 0b0101)
    assert (b.split, b.box_rows, b.load_bytes, b.multicast) == ("multicast", 64, 64 * 128, 0b0011)
    assert p.loads.shared == "ab" and p.loads.expect_tx_bytes == (128 + 128) * 128
    assert p.loads.load_bytes == (64 + 64) * 128  # half the L2 -> SM bytes of a single 128x128 tile
    s = p.schedule
    assert (s.m_ctas, s.n_ctas, s.cluster_tile_rows, s.cluster_tile_cols) == (2, 2, 256, 256)
    # each stage is released by the two consumer warpgroups of this CTA and of the two sharing an operand with it
    assert p.ab.empty.init == (6, 6, 6, 6)
    assert p.launch_spec().cluster == (4, 1, 1)


@pytest.mark.parametrize("probe", ["h100_128x128_c4", "h100_128x256_c4", "dual_h100_128x128_c4"])
def test_verifier_and_simulator_accept_the_square(probe):
    k = build_kernel(make_plan(load_config(PROBES / f"{probe}.yaml")))
    verify(k)
    for m, n, kk in SHAPES:
        simulate(k, m, n, kk, seed=0, num_sms=8)


def test_the_dual_square_splits_b1_and_b2_like_b():
    p = make_plan(load_config(PROBES / "dual_h100_128x128_c4.yaml"))
    for name in ("b", "b2"):
        o = p.loads.operand(name)
        assert (o.split, o.box_rows, o.multicast) == ("multicast", 64, 0b0011)
    assert p.loads.load_bytes == (64 + 2 * 64) * 128 and p.ab.empty.init == (6, 6, 6, 6)


@pytest.mark.slow
def test_ptx_differential_accepts_the_square():
    res = build(load_config(SMALL))
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None
    # two multicast loads per operand: the mask is an immediate, one load per place of the CTA
    assert res.ptx.count(".multicast::cluster") == 4 and res.launch.cluster == (4, 1, 1)


# ------------------------------------------------------------------ planted bugs

def _planted(fn):
    bad = rewrite(_kernel(), fn)
    assert bad != _kernel()
    return bad


def test_planted_release_without_the_n_peer():
    """Consumers arrive on their own and the m-peer's ``empty`` only: the n-peer's producer, whose A halves land in
    this CTA's stage, counts 4 of its 6 arrivals."""
    n_peer = (Sreg("rank") + 2) % 4
    bad = _planted(lambda op: () if isinstance(op, O.MbarrierArrive) and op.cta == n_peer else None)
    with pytest.raises(VerifyError):
        verify(bad)


def test_planted_a_mask_without_the_m_shift():
    """Both m positions multicast A to m position 0's CTAs: those of m position 1 never receive A."""
    bad = _planted(lambda op: replace(op, multicast=0b0101)
                   if isinstance(op, O.TmaLoad) and op.tensor == "a" and op.multicast else None)
    with pytest.raises(VerifyError):
        verify(bad)
    with pytest.raises(SimError):
        simulate(bad, 300, 520, 264, num_sms=8)


def test_planted_a_half_by_the_m_position():
    """A's half chosen by the CTA's m position (``rank % 2``) instead of its n position: the two CTAs sharing A load
    the same half into the same bytes of each other's stage (the other half never lands)."""
    def wrong_half(op):
        if isinstance(op, O.TmaLoad) and op.tensor == "a":
            return replace(op, row=_swap(op.row), dst=_swap(op.dst))
    bad = _planted(wrong_half)
    with pytest.raises(SimError, match=r"^write after write: TmaLoad a"):
        simulate(bad, 300, 520, 264, num_sms=8)


def _swap(expr):
    """``expr`` with the n position ``rank / 2`` replaced by the m position ``rank % 2``."""
    if expr == Sreg("rank") // 2:
        return Sreg("rank") % 2
    if isinstance(expr, Bin):
        return replace(expr, a=_swap(expr.a), b=_swap(expr.b))
    return expr
