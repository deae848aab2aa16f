"""Compose a kernel from roles: plan -> :class:`~ptxgen.ir.Kernel`.

One composition for every kernel family; the plan decides the operands,
MMA streams, accumulators and epilogue, and the arch decides the roles:

* sm_100a (seed levels 1-9): a TMA producer warp, one MMA-issuing thread
  (``tcgen05.mma``, optionally ``cta_group::2`` across a CTA pair) with
  accumulators in TMEM, and an epilogue warpgroup reading TMEM (``tcgen05.ld``);
  levels 1-2 run producer and MMA in one lockstep warp, and without a dedicated
  epilogue the same four warps run the epilogue after the k-loop.
* sm_90a: a TMA producer warp and consumer warpgroups that issue ``wgmma`` into
  register fragments and store them.
"""

from __future__ import annotations

from ..ir import Comment, Elect, If, Kernel, Role, SetMaxNReg, WarpSwitch, eq
from ..plan import Plan
from .grouped import GroupedTileScheduler
from .common import WARP, Cluster, TileScheduler, k_bounds, k_loop, setup, teardown
from .roles import Epilogue, TmaProducer, UmmaIssuer, WgmmaConsumer


def build_kernel(plan: Plan) -> Kernel:
    """The self-contained Kernel IR of ``plan`` (either arch)."""
    cluster = Cluster(plan)
    sched = GroupedTileScheduler(plan, cluster) if plan.schedule.grouped != "none" else TileScheduler(plan, cluster)
    roles = _sm100_roles(plan, cluster, sched) if plan.is_sm100 else _sm90_roles(plan, cluster, sched)
    body = [Comment("setup: barriers" + (", TMEM" if plan.is_sm100 else "")), *setup(plan, cluster, sched),
            Comment("pipeline roles"), *roles,
            Comment("teardown"), *teardown(plan, cluster)]
    return plan.kernel_resources(body)


def _sm100_roles(plan: Plan, cluster: Cluster, sched: TileScheduler) -> list:
    """Producer / MMA (or one lockstep mainloop warp) and the epilogue.

    With a dedicated epilogue warpgroup every role loops over tiles on its own;
    otherwise one tile loop holds the mainloop roles followed by the epilogue on the same four warps.
    """
    producer, mma, epi = TmaProducer(plan, cluster), UmmaIssuer(plan, cluster), Epilogue(plan, cluster)
    loop = (lambda body: [sched.loop(body)]) if plan.roles.dedicated_epilogue else (lambda body: body)  # noqa: E731
    # the producer waits each empty stage's final phase before exit (producer_tail: no arrive may be pending when
    # the CTA exits); with a dedicated epilogue inside its role, otherwise after the shared tile loop
    tail = producer.tail(sched)
    if plan.roles.lockstep:
        tile = [*mma.tile_head(), k_loop(producer.kblock() + mma.kblock())]
        roles = [Role("mainloop", plan.roles.producer_warp, plan.roles.producer_warp + 1,
                      (Elect((*loop(tile), *(tail if plan.roles.dedicated_epilogue else []))),))]
    else:
        issuer = loop(mma.tile_head() + [k_loop(mma.kblock())])
        issuer = [*mma.lane_descriptors(), *issuer] if plan.roles.mma_all_lanes else [Elect(tuple(issuer))]
        if cluster.size == 2:
            issuer = [If(cluster.is_leader, tuple(issuer))]
        roles = [Role("producer", plan.roles.producer_warp, plan.roles.producer_warp + 1,
                      (Elect((*loop([k_loop(producer.kblock())]), *(tail if plan.roles.dedicated_epilogue else []))),)),
                 Role("mma", plan.roles.mma_warp, plan.roles.mma_warp + 1, tuple(issuer))]
    tile = epi.tmem_tile()
    if plan.epilogue.writers == 1 and cluster.size == 2:
        tile = [If(cluster.is_leader, tuple(tile))]
    if plan.roles.dedicated_epilogue:
        roles.append(Role("epilogue", plan.roles.epilogue_warp0, plan.roles.epilogue_warp_end, (sched.loop(tile), *epi.drain())))
        return [WarpSwitch(tuple(roles))]
    tail_role = WarpSwitch((Role("producer", plan.roles.producer_warp, plan.roles.producer_warp + 1, (Elect(tuple(tail)),)),))
    return [sched.loop([WarpSwitch(tuple(roles)), *tile]), tail_role, *epi.drain()]


def _sm90_roles(plan: Plan, cluster: Cluster, sched: TileScheduler) -> list:
    """One producer warp (of a register-shrunk warpgroup) and the consumer warpgroups."""
    producer, epi = TmaProducer(plan, cluster), Epilogue(plan, cluster)
    consumer = WgmmaConsumer(plan, cluster, epi, sched)
    loads = k_loop(producer.kblock(), k_bounds(plan))
    producer_role = Role("producer", 0, 4, (SetMaxNReg("dec", plan.registers.producer_regs),
                                            If(eq(WARP, plan.roles.producer_warp), (Elect((sched.loop([loads]),)),))))
    consumer_role = Role("consumer", plan.roles.epilogue_warp0, plan.roles.epilogue_warp_end,
                         (*consumer.prologue(), sched.loop(consumer.owned_tile()), *consumer.tail(sched), *epi.drain()))
    return [WarpSwitch((producer_role, consumer_role))]
