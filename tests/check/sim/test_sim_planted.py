"""Planted protocol bugs: each a distinct mutation of a correct kernel, each caught with its specific message.

A mutation rewrites the builder's IR (or its plan).  For each, the static
verifier and the simulator are run; where a tool can see the bug, the test
asserts its error type and message.  A data race surfaces as whichever fault
the interleaving hits first, so race cases accept the race family on every
faulting schedule and require the exact fault on at least one; a race that
needs a slow async op (``always=False``) may pass under an eager schedule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import pytest

from ptxgen.config import load_config
from ptxgen.errors import SimError, VerifyError
from ptxgen.ir import Kernel
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Const, Sreg, Var, eq
from ptxgen.plan import make_plan
from ptxgen.check.sim import default_shapes, simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import verify
from tests.helpers.sim_support import drop, in_role, is_wait, kernel_for, where

pytestmark = pytest.mark.sim

SCHEDULES = (0, 1, 2)
RACE = r"^(read before write|write after read|wrong result)"


def _kernel(config: str, fn=None, plan_change=None) -> Kernel:
    plan = make_plan(load_config(config))
    if plan_change is not None:
        plan = plan_change(plan)
    k = kernel_for(config, plan)
    return rewrite(k, fn) if fn is not None else k


def _sim_messages(kernel, always: bool) -> list[str]:
    """SimError messages of the planted kernel under SCHEDULES (each schedule must fault when ``always``)."""
    shape = default_shapes(kernel)[1]
    out = []
    for s in SCHEDULES:
        try:
            simulate(kernel, *shape, seed=s, schedule_seed=s)
        except SimError as exc:
            out.append(str(exc))
            continue
        assert not always, f"schedule {s} ran the planted kernel without a fault"
    assert out, "no schedule caught the planted bug"
    return out


@dataclass(frozen=True)
class Plant:
    name: str
    kernel: object  # () -> Kernel
    verify: str | None  # regex the VerifyError message matches; None: invisible to the verifier
    sim: str | None  # regex every schedule's SimError matches; None: not simulated
    sim_exact: str | None = None  # regex at least one schedule's SimError matches
    always: bool = True  # every schedule faults (False: a race only a slow async op exposes)


def _stage_plus_one(plan):
    def change(op):
        stage = (Var("stage") + 1) % plan.stages
        return replace(op, dst=plan.loads.a.offset + stage * plan.loads.a.stride)
    return change


def _drop_first(body: tuple, kind: type) -> tuple:
    i = next(i for i, op in enumerate(body) if isinstance(op, kind))
    return body[:i] + body[i + 1:]


def _gdc_wait(body: tuple) -> int:
    """Index of ``body``'s top-level ``griddepcontrol.wait`` (the setup's)."""
    return next(i for i, op in enumerate(body) if isinstance(op, O.GridDepControl) and op.action == "wait")


def _drop_gdc_wait(body: tuple) -> tuple:
    """``body`` without its top-level ``griddepcontrol.wait``."""
    i = _gdc_wait(body)
    return body[:i] + body[i + 1:]


def _elect_gdc_wait(body: tuple) -> tuple:
    """``body`` with its top-level ``griddepcontrol.wait`` run by one elected lane per warp."""
    i = _gdc_wait(body)
    return body[:i] + (O.Elect((body[i],)),) + body[i + 1:]


def _drop_nth(body: tuple, kind: type, n: int) -> tuple:
    i = [i for i, op in enumerate(body) if isinstance(op, kind)][n]
    return body[:i] + body[i + 1:]


def _release_before_last_load(op):
    """In the loop body holding the tmem_empty arrive: move the arrive before the last TmemLoad."""
    if not isinstance(op, O.For):
        return op
    body = list(op.body)
    arr = [i for i, o in enumerate(body) if isinstance(o, O.MbarrierArrive) and o.bar.name == "tmem_empty"]
    loads = [i for i, o in enumerate(body) if isinstance(o, O.TmemLoad)]
    if not arr or not loads:
        return op
    moved = body.pop(arr[0])
    body.insert(loads[-1], moved)
    return replace(op, body=tuple(body))


def _wrap_peer_arrive(op):
    return O.If(eq(Sreg("rank"), 0), (op,))


def _cd_row_per_store_block(plan):
    """The level8/9 builder bug the simulator found: CD staging of store block c used the tile row's 16-byte
    chunk index (8c + q) instead of q; through the swizzle XOR that is c staging rows (128c bytes) further on."""
    per_block = plan.epilogue.store_block_n // 8
    chunks = plan.mma.block_n // plan.epilogue.store_block_n
    seen = [0]

    def change(op):
        c = (seen[0] // per_block) % chunks
        seen[0] += 1
        return replace(op, addr=op.addr + c * plan.epilogue.row_bytes)
    return change


PLANTS = [
    Plant("wrong init count",
          lambda: _kernel("level9", plan_change=lambda p: replace(p, ab=replace(p.ab, full=replace(p.full, init=(3, 3))))),
          verify=r"^arrival count mismatch: full\[0\] of CTA 0 \(rank 0\), phase 0: 2 arrival\(s\) \(producer@r0 "
                 r"arrive\.expect_tx x1, producer@r1 remote arrive\.expect_tx x1\) but its init count is 3",
          sim=r"^deadlock: .*MbarrierWait \(consumer_wait\) for the phase of parity 0 of full\[0\] of CTA 0 \(rank 0\): "
              r"phase 0 \(parity 0\) in progress, 1 of 3 arrivals pending"),
    Plant("missing wait",
          lambda: _kernel("level3", in_role("mma", where(is_wait("full", "consumer_wait"), drop))),
          verify=r"^missing wait: Umma reads A stage 0 by mma \(CTA 0, rank 0, warp 1\) at t=0 kb=0 without a wait "
                 r"on full\[0\]",
          sim=RACE, sim_exact=r"^read before write: Umma by mma .* reads smem"),
    Plant("wrong phase parity",
          lambda: _kernel("level3", in_role("mma", where(is_wait("full", "consumer_wait"),
                                                           lambda op: replace(op, phase=op.phase ^ 1)))),
          verify=r"^wrong phase parity: consumer_wait by mma \(CTA 0, rank 0, warp 1\) at t=0 kb=0 waits parity 1 on "
                 r"a fresh full\[0\] of CTA 0 \(rank 0\), which passes at once",
          sim=RACE, sim_exact=r"^read before write: Umma by mma .* reads smem"),
    Plant("phase parity that never flips",
          lambda: _kernel("level3", in_role("mma", where(is_wait("full", "consumer_wait"),
                                                           lambda op: replace(op, phase=Const(0))))),
          verify=r"^wrong phase parity: consumer_wait by mma \(CTA 0, rank 0, warp 1\) at t=0 kb=8 waits parity 0 on "
                 r"full\[0\] of CTA 0 \(rank 0\), the same parity as its previous wait \(at t=0 kb=0\): it skips a phase",
          sim=r"^(deadlock|read before write|write after read|wrong result)"),
    Plant("2-SM TMA barrier without the peer-bit mask",
          lambda: _kernel("level9", where(lambda op: isinstance(op, O.TmaLoad), lambda op: replace(op, two_sm=False))),
          verify=r"^transaction-byte mismatch: full\[0\] of CTA 0 \(rank 0\), phase 0: expect_tx 98304 B .* but the "
                 r"TMA loads aimed at it deliver 49152 B",
          sim=r"^deadlock: .*full\[0\] of CTA 0 \(rank 0\): phase 0 .*expect_tx 98304 B, TMA delivered 49152 B"
              r".*transaction-byte mismatch: TMA bytes landed on barriers whose expect_tx did not announce them:\n"
              r"  full\[0\] of CTA 1 \(rank 1\): .*expect_tx 0 B, TMA delivered 49152 B \(tx-count -49152 B\)"),
    Plant("expect_tx announces half the bytes",
          lambda: _kernel("level3", where(lambda op: isinstance(op, O.MbarrierArriveExpectTx),
                                          lambda op: replace(op, tx_bytes=op.tx_bytes // 2))),
          verify=r"^transaction-byte mismatch: full\[0\] of CTA 0 \(rank 0\), phase 0: expect_tx 24576 B .* deliver "
                 r"49152 B",
          sim=r"^(transaction-byte mismatch: TmaLoad . .* delivers \d+ B to full\[\d\] of CTA \d+ \(rank 0\) for phase \d+, "
              r"which already completed|read before write)",
          sim_exact=None),  # schedules 0-2 hit the read-before-write form (the tx form: schedule 3)
    Plant("TMA into the wrong stage",
          lambda: _kernel("level3", where(lambda op: isinstance(op, O.TmaLoad) and op.tensor == "a",
                                          _stage_plus_one(make_plan(load_config("level3"))))),
          verify=r"^TMA into the wrong stage: TmaLoad a by producer \(CTA 0, rank 0, warp 0\) at t=0 kb=0 writes A "
                 r"stage 1 but completes on full\[0\] of rank 0",
          sim=RACE, sim_exact=r"^read before write: Umma by mma .* reads smem"),
    Plant("commit without multicast",
          lambda: _kernel("level9", where(lambda op: isinstance(op, O.UmmaCommit) and op.bar.name == "empty",
                                          lambda op: replace(op, multicast=0))),
          verify=r"^wait can never complete: producer_acquire by producer \(CTA 1, rank 1, warp 0\) at t=0 kb=4 on "
                 r"empty\[0\] of CTA 1 \(rank 1\) needs 1 completed phase\(s\); the arrivals complete 0",
          sim=r"^deadlock: .*producer \(CTA 1, rank 1, warp 0\) at t=0 kb=4: MbarrierWait \(producer_acquire\) "
              r"for the phase of parity 0 of empty\[0\] of CTA 1 \(rank 1\): phase 0 \(parity 0\) in progress, "
              r"1 of 1 arrivals pending"),
    Plant("missing peer tmem_empty arrive",
          lambda: _kernel("level9", in_role("epilogue", where(lambda op: isinstance(op, O.MbarrierArrive),
                                                              _wrap_peer_arrive))),
          verify=r"^arrival count mismatch: tmem_empty\[0\] of CTA 0 \(rank 0\), phase 0: 128 arrival\(s\) "
                 r"\(epilogue@r0 arrive x128\) but its init count is 256",
          sim=r"^deadlock: .*MbarrierWait \(producer_acquire \(accumulator\)\) for the phase of parity 0 of "
              r"tmem_empty\[0\] of CTA 0 \(rank 0\): phase 0 \(parity 0\) in progress, 128 of 256 arrivals pending"),
    Plant("epilogue reads TMEM before tmem_full",
          lambda: _kernel("level9", in_role("epilogue", where(is_wait("tmem_full", "consumer_wait (accumulator)"),
                                                              drop))),
          verify=r"^missing wait: TmemLoad of accumulator stage 0 by epilogue \(CTA 0, rank 0, warp 4\) at t=0 "
                 r"without a wait on tmem_full\[0\]",
          sim=r"^TMEM read before write: TmemLoad 32x32b\.x32 by epilogue .* reads TMEM of CTA \d+ \(rank \d\)"),
    Plant("arrive without elect (over-arrival)",
          lambda: _kernel("h100_128x256", in_role("consumer", where(
              lambda op: isinstance(op, O.Elect) and isinstance(op.body[0], O.MbarrierArrive), lambda op: op.body))),
          verify=r"^arrival count mismatch: empty\[0\] of CTA 0 \(rank 0\), phase 0: 128 arrival\(s\) .* but its "
                 r"init count is 4",
          sim=r"^over-arrival: 32 arrival\(s\) \(consumer \(CTA \d, rank \d, warp \d+\) arrive\) on empty\[\d\] of CTA "
              r"\d \(rank 0\), but phase 0 has only [1-4] of 4 arrivals pending"),
    Plant("st.shared without fence.proxy.async",
          lambda: _kernel("level4", where(lambda op: isinstance(op, O.FenceProxyAsync), drop)),
          verify=None,
          sim=r"^read before write: TmaStore d .* but written by st\.shared without fence\.proxy\.async"),
    # the staging ring's producer_acquire (wait_group.read 1) dropped; the exit drain (wait_group.read 0) stays
    Plant("CD buffer reused before wait_group.read",
          lambda: _kernel("level9", in_role("epilogue", where(lambda op: isinstance(op, O.BulkWaitGroup) and op.read
                                                              and op.n > 0, drop))),
          verify=r"^consumer release before the last read: StShared16 .* by epilogue \(CTA 0, rank 0, warp 4\) at t=0 "
                 r"writes CD stage 0 while TmaStore d .* may still read it: the cp\.async\.bulk\.wait_group that "
                 r"retires its bulk group \(BulkWaitGroupRead 0 at outside loops\) is not ordered before the write",
          sim=r"^(write after read: StShared16 by epilogue .* while TmaStore d|wrong result)",
          sim_exact=r"^write after read: StShared16 by epilogue .* while TmaStore d .* still reads", always=False),
    Plant("bulk wait_group under a second elect.sync (only the committing thread waits for its bulk groups)",
          lambda: _kernel("level9", in_role("epilogue", where(lambda op: isinstance(op, O.BulkWaitGroup),
                                                              lambda op: O.Elect((op,))))),
          verify=r"^bulk async-group ownership: BulkWaitGroupRead 1 by one elect\.sync lane of epilogue \(CTA 0, "
                 r"rank 0, warp 4\) at t=0 waits for groups that another elect\.sync committed",
          sim=r"^(write after read: StShared16 by epilogue .* while TmaStore d|exit with async work: CTA \d+ "
              r"\(rank \d\) exited while TmaStore d .* still reads its shared memory|wrong result)", always=False),
    Plant("relay arrive at CTA scope (a cross-CTA hand-off needs cluster scope)",
          lambda: _kernel("level1", where(lambda op: isinstance(op, O.MbarrierArrive) and op.scope == "cluster",
                                          lambda op: replace(op, scope="cta"))),
          verify=r"^cross-CTA hand-off at CTA scope: MbarrierArrive full\[stage\] on cta 0 by mainloop \(CTA 1, rank 1, "
                 r"warp 0\) at t=0 kb=0 hands full\[0\] of CTA 0 to mainloop \(CTA 0, rank 0, warp 0\)'s "
                 r"consumer_wait with the default \.release\.cta", sim=None),
    Plant("relay consumer_wait at CTA scope (a cross-CTA hand-off needs cluster scope)",
          lambda: _kernel("level1", where(lambda op: isinstance(op, O.MbarrierWait) and op.scope == "cluster",
                                          lambda op: replace(op, scope="cta"))),
          verify=r"^cross-CTA hand-off at CTA scope: MbarrierWait full\[stage\] phase=phase \(consumer_wait\) by "
                 r"mainloop \(CTA 0, rank 0, warp 0\) at t=0 kb=0 completes on .* with the default \.acquire\.cta",
          sim=None),
    Plant("no producer tail (the CTA exits with a tcgen05.commit arrive pending)",
          lambda: _kernel("level9", where(is_wait("empty", "producer_tail"), drop)),
          verify=r"^unwaited asynchronous arrive: empty\[\d\] of CTA \d \(rank \d\), phase \d+: tcgen05\.commit arrivals "
                 r"\(mma@r0 commit multicast x1\) that no warp of CTA \d waits for",
          sim=None),  # the simulator's exit check exists, but random schedules rarely open the window
    Plant("tmem_empty release moved before the last TmemLoad",
          lambda: _kernel("level9", in_role("epilogue", _release_before_last_load)),
          verify=r"^consumer release before the last read: MbarrierArrive tmem_empty\[acc\] on cta 0 release.cluster by epilogue "
                 r"\(CTA 0, rank 0, warp 4\) at t=0 releases accumulator stage 0, then TmemLoad", sim=None),
    Plant("accumulate flag on a tile's first k-block",
          lambda: _kernel("level7", where(lambda op: isinstance(op, O.Umma), lambda op: replace(op, accumulate=Const(1)))),
          verify=None,
          sim=r"^TMEM read before write: Umma by mma .* accumulates into TMEM of CTA \d+ \(rank 0\) .* that no MMA "
              r"wrote"),
    Plant("CD staging row offset by the store block",
          lambda: _kernel("level9", in_role("epilogue", where(lambda op: isinstance(op, O.StShared16),
                                                              _cd_row_per_store_block(make_plan(load_config("level9")))))),
          verify=r"^smem access outside its region: StShared16 by epilogue \(CTA 0, rank 0, warp 7\) at t=0 touches "
                 r"\[0x8070, 0x8080\), which lies in A stage 0; it must stay inside one CD slot",
          sim=r"^(read before write: TmaStore d \(col 64, row \d+\) by epilogue .* reads smem 0x4000 .* never written|"
              r"write after (write|read): StShared16 by epilogue .* writes smem \[0x70[0-9a-f]0, 0x80[0-9a-f]0\) .* while TmaLoad a)"),
    Plant("both CTAs load the same half of B",
          lambda: _kernel("level2", where(lambda op: isinstance(op, O.TmaLoad) and op.tensor == "b",
                                          lambda op: replace(op, row=Var("n_col")))),
          verify=None,
          sim=r"^wrong result: ptxgen_gemm_level2 m=\d+ n=\d+ k=\d+ schedule \d: relative Frobenius error \d\.\d+e[+-]\d+, "
              r"max-abs relative error .*; first wrong D\[0, 64\] = "),
    Plant("paired TMEM alloc before the cluster barrier (the peer CTA may not be running yet)",
          lambda: replace(kernel_for("level9"), body=_drop_first(kernel_for("level9").body, O.ClusterSync)),
          verify=r"^paired TMEM allocation before the cluster is known running: tmem_alloc \(CTA 0, rank 0, warp 2\) "
                 r"at outside loops issues tcgen05\.alloc\.cta_group::2 before any cluster barrier",
          sim=r"^paired TMEM allocation before the cluster is known running: tmem_alloc \(CTA \d, rank \d, warp 2\)"),
    Plant("no cluster barrier after the TMEM alloc",
          lambda: replace(kernel_for("level9"), body=_drop_nth(kernel_for("level9").body, O.ClusterSync, 1)),
          verify=r"^TMEM lifetime: .* is not separated by a cluster barrier from the alloc and the dealloc",
          sim=r"^(read before write: TmemBase|TMEM not allocated|TMEM dealloc before peer alloc)"),
    Plant("global access before griddepcontrol.wait (programmatic dependent launch)",
          lambda: replace(kernel_for("h100_128x128"), body=_drop_gdc_wait(kernel_for("h100_128x128").body)),
          verify=r"^global access before griddepcontrol\.wait: TmaLoad a .* at producer \(CTA 0, rank 0, warp 0\).* in a "
                 r"kernel launched with programmatic dependent launch", sim=None),
    Plant("griddepcontrol.wait in one lane per warp (the wait is per thread)",
          lambda: replace(kernel_for("h100_128x128"), body=_elect_gdc_wait(kernel_for("h100_128x128").body)),
          verify=r"^global access before griddepcontrol\.wait: TmaLoad a .* at producer \(CTA 0, rank 0, warp 0\) at t=0 "
                 r"kb=0", sim=None),
    Plant("griddepcontrol in a kernel launched without programmatic dependent launch",
          lambda: replace(kernel_for("h100_64x64"), launch=kernel_for("h100_64x64").launch._replace(pdl=False)),
          verify=r"^GridDepControl wait at all warps \(CTA 0, rank 0, warp 0\) at outside loops in a kernel whose "
                 r"launch spec has pdl=false", sim=None),
    Plant("no cluster barrier at exit",
          lambda: replace(kernel_for("level9"), body=kernel_for("level9").body[:-1]),
          verify=r"^no cluster barrier at exit: warp 2 of CTA 0 ends with TmemDealloc; a multi-CTA kernel must end "
                 r"with a cluster barrier", sim=None),
]


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
def test_planted_bug_verifier(plant: Plant) -> None:
    kernel = plant.kernel()
    if plant.verify is None:
        verify(kernel)  # documents the verifier's blind spot: the simulator is the tool for it
        return
    with pytest.raises(VerifyError) as exc:
        verify(kernel)
    assert re.search(plant.verify, str(exc.value), re.S), str(exc.value)


@pytest.mark.parametrize("plant", [p for p in PLANTS if p.sim], ids=[p.name for p in PLANTS if p.sim])
def test_planted_bug_simulator(plant: Plant) -> None:
    messages = _sim_messages(plant.kernel(), plant.always)
    for msg in messages:
        assert re.search(plant.sim, msg, re.S), msg
    if plant.sim_exact:
        assert any(re.search(plant.sim_exact, m, re.S) for m in messages), messages


def test_missing_peer_arrive_with_one_tile_per_cluster() -> None:
    """With one tile per cluster nobody waits for the short tmem_empty phase: the exit check reports it."""
    plant = next(p for p in PLANTS if p.name == "missing peer tmem_empty arrive")
    kernel = plant.kernel()
    with pytest.raises(SimError, match=r"^arrival count mismatch at exit: tmem_empty\[0\] of CTA 0 \(rank 0\): phase 0 "
                                       r"\(parity 0\) in progress, 128 of 256 arrivals pending"):
        simulate(kernel, *default_shapes(kernel)[0])
