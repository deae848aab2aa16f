"""sm_90a ping-pong consumers (``mma.consumers: pingpong``): config rules, plan numbers, the verifier and
simulator on the shipped configs, and planted protocol bugs of the new parts, each caught with its message.

In pingpong each consumer warpgroup computes whole tiles and the CTA's tiles alternate between the two
(warpgroup w takes CTA-local tile ``tc % 2 == w``); one ``empty`` arrival per stage (the owner's); the
``math_order`` barriers order tile tc's mainloop after tile tc-1's (CUTLASS ``math_wg_order_barrier``).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen.config import from_dict, load_config
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Var, eq
from ptxgen.plan import make_plan
from ptxgen.check.sim import simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import verify
from ptxgen.check.verify.barriers import _walk_order
from tests.helpers.sim_support import drop, in_role, is_wait, kernel_for, where

PP = "h100_128x128_pp"
BASE = {"name": "pp", "arch": "sm_90a", "tile": {"block_m": 128, "block_n": 128}, "pipeline": {"stages": 4},
        "mma": {"warpgroups": 2, "consumers": "pingpong"}, "schedule": {"persistent": True}}


# ------------------------------------------------------------------ config


@pytest.mark.parametrize("patch, message", [
    ({"mma": {"warpgroups": 1, "consumers": "pingpong"}},
     "mma.consumers='pingpong': needs mma.warpgroups=2 (got 1): two warpgroups take turns on tiles"),
    ({"schedule": {"persistent": False}},
     "mma.consumers='pingpong': needs schedule.persistent=true: a CTA must own several tiles"),
    ({"tile": {"block_m": 96, "block_n": 128}},
     "tile.block_m=96: sm_90a pingpong: a multiple of 64 in [64, 256]"),
    ({"arch": "sm_100a", "mma": {"warpgroups": 1, "consumers": "pingpong"}, "tile": {"block_m": 128, "block_n": 128}},
     "mma.consumers='pingpong': sm_100a has no consumer warpgroups (one MMA-issuing thread); pingpong is an sm_90a "
     "schedule"),
    ({"mma": {"warpgroups": 2, "consumers": "pinpong"}}, "mma.consumers='pinpong': must be one of ['cooperative', 'pingpong']"),
])
def test_pingpong_refusals_name_the_field(patch, message):
    raw = {**BASE, **patch}
    with pytest.raises(ConfigError) as err:
        from_dict(raw)
    assert message in str(err.value)


def test_pingpong_accumulator_budget_is_per_warpgroup_tile():
    """A 128x128 tile is 2 m64 waves of one warpgroup in pingpong (128 registers), 1 wave each cooperatively; the
    plan refuses accumulators that leave fewer than 40 of a consumer's 232 registers (two consumer warpgroups)."""
    make_plan(from_dict(BASE))
    make_plan(from_dict({**BASE, "tile": {"block_m": 64, "block_n": 256}}))
    make_plan(from_dict({**BASE, "tile": {"block_m": 128, "block_n": 192}}))  # 192 + 40 = 232
    with pytest.raises(ConfigError, match=r"tile.block_m=256: sm_90a: 256 fp32 accumulator registers per thread \(tile "
                       r"256x128, 2 consumer warpgroups pingpong, 1 accumulator\(s\)\) \+ 40 spare > the 232 each"):
        make_plan(from_dict({**BASE, "tile": {"block_m": 256, "block_n": 128}}))
    with pytest.raises(ConfigError, match=r"tile.block_m=128: sm_90a: 208 fp32 accumulator registers"):
        make_plan(from_dict({**BASE, "tile": {"block_m": 128, "block_n": 208}}))


# ------------------------------------------------------------------ plan


def test_plan_numbers_of_pingpong_and_cooperative():
    pp, coop = make_plan(load_config(PP)), make_plan(load_config("h100_256x128"))
    assert (pp.roles.pingpong, pp.roles.tile_owners, pp.mma.m_waves, pp.mma.consumer_rows) == (True, 2, 2, 128)
    assert (pp.mma.wg_row_stride, pp.mma.wg_a_stride) == (0, 0)  # each warpgroup computes the whole tile
    assert pp.empty.init == (1,)  # only the stage's tile owner releases it
    assert pp.math_order is not None and pp.math_order.num == 2 and pp.math_order.init == (1,)
    assert pp.smem.cd.count == 2 * pp.epilogue.stages  # each warpgroup its own staging buffers
    assert pp.smem.bytes <= 232448 and pp.smem.bytes + pp.loads.a_stage_bytes + pp.loads.b_stage_bytes > 232448  # most stages
    assert (coop.roles.pingpong, coop.roles.tile_owners, coop.mma.m_waves, coop.empty.init, coop.math_order) == (False, 1, 2, (2,), None)
    assert (coop.mma.wg_row_stride, coop.mma.wg_a_stride) == (128, 2 * coop.mma.a_wave_bytes)


def test_consumer_tile_loop_is_filtered_by_ownership():
    k = kernel_for(PP)
    owner = [op for op in _walk(k.body) if isinstance(op, O.If) and op.cond == eq(Var("tc") % 2, Var("wg"))]
    assert len(owner) == 1
    inner = list(_walk(owner[0].then))
    assert sum(isinstance(op, O.Wgmma) for op in inner) == 8  # 2 waves x 4 k-steps
    assert [op.bar.name for op in inner if isinstance(op, O.MbarrierWait)] == ["math_order", "full"]


def _walk(body):
    for op in body:
        yield op
        for field in ("body", "then", "orelse"):
            yield from _walk(getattr(op, field, ()))
        for role in getattr(op, "roles", ()):
            yield from _walk(role.body)


def test_walk_order_merges_turn_taking_warps():
    """The verifier's walk of a ring: shared keys once; turn-taking warps interleave by tile; post-loop keys last."""
    assert _walk_order([[(0, 1), (0,), (1, 1)], [(0, 1), (0,), (1, 1)]]) == {(0, 1): 0, (0,): 1, (1, 1): 2}
    assert _walk_order([[(0, 1), (0,), (2, 1), (2,)], [(1, 1), (1,)]]) == {
        (0, 1): 0, (0,): 1, (1, 1): 2, (1,): 3, (2, 1): 4, (2,): 5}


# ------------------------------------------------------------------ verifier and simulator


@pytest.mark.sim
@pytest.mark.parametrize("config", [PP, "h100_64x256_pp"])
def test_shipped_pingpong_verifies_and_simulates(config):
    """Tile counts 1 (< CTAs), 3 (odd, one CTA: 2 tiles for warpgroup 0), 4 (even), with num_k > 2 x stages."""
    k = kernel_for(config)
    verify(k)
    p = make_plan(load_config(config))
    tm, tn, kk = p.mma.block_m, p.mma.block_n, p.mma.block_k * (2 * p.stages + 1)
    for (m, n, kdim), sms in (((tm // 2 + 8, tn - 8, 64), 2), ((3 * tm - 8, tn + 0, kk), 1), ((2 * tm, 2 * tn - 24, 136), 1)):
        simulate(k, m, n, kdim, seed=1, num_sms=sms)


@pytest.mark.sim
@pytest.mark.parametrize("patch", [
    {"cluster": {"size": 2, "dual_tile": True}, "tma": {"multicast": True}},  # both CTAs' owners release both
    {"kernel": "dual_gemm", "tile": {"block_m": 64, "block_n": 128}},
], ids=["multicast-pair", "dual-gemm"])
def test_pingpong_composes_with_multicast_and_dual_gemm(patch):
    """Not shipped, but accepted: a CTA pair multicasting B (``empty`` counts the owner of each CTA) and the SwiGLU
    dual GEMM (two accumulators per warpgroup tile) verify and simulate; 3 tiles per cluster, num_k > 2 x stages."""
    from ptxgen.builders.kernel import build_kernel

    raw = {**BASE, "pipeline": {"stages": 3}, "schedule": {"persistent": True},
           "epilogue": {"store": "tma", "swizzle": "128", "store_block_n": 64, "stages": 2}}
    raw.update({k: ({**raw.get(k, {}), **v} if isinstance(v, dict) else v) for k, v in patch.items()})
    plan = make_plan(from_dict(raw))
    k = build_kernel(plan)
    verify(k)
    simulate(k, 3 * plan.schedule.cluster_tile_rows - 8, plan.mma.block_n, 64 * 7, seed=2, num_sms=plan.roles.cluster_size)


# ------------------------------------------------------------------ planted bugs

SHAPE = (384, 128, 832)  # 3 tiles of 128x128 on one CTA, 13 k-blocks (> 2 x 6 stages)


def _owner_filter_dropped():
    """Both warpgroups process every tile (no ``tc % 2 == wg`` filter)."""
    owner = lambda op: isinstance(op, O.If) and op.cond == eq(Var("tc") % 2, Var("wg"))  # noqa: E731
    return rewrite(kernel_for(PP), in_role("consumer", where(owner, lambda op: op.then)))


def _no_math_order():
    """The mainloop order dropped: a warpgroup starts its tile while the other's k-blocks still load."""
    return rewrite(kernel_for(PP), in_role("consumer", where(is_wait("math_order", "math_order_wait"), drop)))


def _cooperative_empty_count():
    """The plan counts one ``empty`` arrival per warpgroup (the cooperative number) on a pingpong kernel."""
    plan = make_plan(load_config(PP))
    return kernel_for(PP, replace(plan, ab=replace(plan.ab, empty=replace(plan.empty, init=(2,)))))


def _order_arrive_on_own_barrier():
    """The owner of tile tc arrives on its own math_order barrier instead of the next owner's."""
    own = lambda op: isinstance(op, O.MbarrierArrive) and op.bar.name == "math_order"  # noqa: E731
    return rewrite(kernel_for(PP), in_role("consumer", where(own, lambda op: replace(op, bar=replace(op.bar, index=Var("wg"))))))


PLANTS = [
    (_owner_filter_dropped,
     r"^arrival count mismatch: empty\[0\] of CTA 0 \(rank 0\), phase 0: 2 arrival\(s\) \(consumer@r0 arrive x2\) but "
     r"its init count is 1",
     r"^(write after read: TmaLoad . .* while Wgmma .* by consumer|over-arrival: .* on empty\[\d\])"),
    (_no_math_order,
     r"^circular wait: .*consumer_wait on full\[\d\] of CTA 0 \(rank 0\) for parity",
     r"^(write after read: TmaLoad . .* while Wgmma .* by consumer .*\(the buffer was refilled before its reader "
     r"released it\)|over-arrival|read before write|wrong result)"),
    (_cooperative_empty_count,
     r"^arrival count mismatch: empty\[0\] of CTA 0 \(rank 0\), phase 0: 1 arrival\(s\) \(consumer@r0 arrive x1\) but "
     r"its init count is 2",
     r"^deadlock: .*MbarrierWait \(producer_acquire\) for the phase of parity 0 of empty\[\d\] of CTA 0 \(rank 0\): "
     r"phase 0 \(parity 0\) in progress, 1 of 2 arrivals pending"),
    (_order_arrive_on_own_barrier,
     r"^circular wait: .*consumer \(CTA 0, rank 0, warp 8\) at t=1: math_order_wait on math_order\[1\] of CTA 0 "
     r"\(rank 0\) for parity 0: 0 phase\(s\) completed",
     r"^deadlock: .*MbarrierWait \(math_order_wait\) for the phase of parity 0 of math_order\[1\]"),
]


@pytest.mark.sim
@pytest.mark.parametrize("make, verify_msg, sim_msg", PLANTS, ids=[p[0].__name__.strip("_") for p in PLANTS])
def test_planted_pingpong_bug_is_caught(make, verify_msg, sim_msg):
    kernel = make()
    with pytest.raises(VerifyError) as exc:
        verify(kernel)
    assert re.search(verify_msg, str(exc.value), re.S), str(exc.value)
    for s in (0, 1):
        with pytest.raises(SimError) as exc:
            simulate(kernel, *SHAPE, seed=s, schedule_seed=s, num_sms=1)
        assert re.search(sim_msg, str(exc.value), re.S), str(exc.value)
