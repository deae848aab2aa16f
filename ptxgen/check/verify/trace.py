"""The trace: every warp of every CTA of one small launch, walked by the IR's reference interpreter.

The verifier *traces* the kernel: it walks every warp of every CTA of one
small launch with :class:`ptxgen.check.walker.WarpWalker` (the simulator's
interpreter, without timing or data; in these kernels control flow never
depends on barrier state, so each warp's event sequence is fixed), and then
checks the traces.  The launch has ``accumulator.stages + 2`` tiles per
cluster (persistent kernels: one cluster, split-K of the last wave two; otherwise one tile per cluster) and
``2 * stages + 1`` k-blocks, so every ring wraps and every parity is used.
A second, ragged launch (one column less, so ``n % 8 != 0``) takes the
branches that depend on the shape (sm_90a: the st.global epilogue) and is
checked for data flow and hand-overs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import VerifyError
from ...hw import DYNAMIC_SMEM_BASE, cta_smem_base
from ...ir import Kernel
from ...ir import ops as O
from .. import grouped
from .. import walker as W




# ------------------------------------------------------------------ the trace


@dataclass
class _Rec:
    ev: W.Event
    where: W.Where
    key: tuple  # loop-variable values
    syncs: int  # all-CTA / cluster barriers the warp passed before this event
    thread: object = None  # issuing thread (:meth:`ptxgen.check.walker.WarpWalker.thread`)
    ld_pending: bool = False  # a tcgen05.ld issued before this event is not yet waited (tcgen05.wait::ld)
    uses: list = field(default_factory=list)  # (waited barrier, stage) of each stage access (_check_dataflow)
    retires: list = field(default_factory=list)  # wgmma.wait_group: the wgmma events (_Rec) it retires
    value: object = None  # the reply the trace gave (AtomGlobalAdd: the count before the arrival; NamedBarrierPopc)


@dataclass
class _Trace:
    kernel: Kernel
    m: int
    n: int
    k: int
    grid: int
    warps: dict[tuple[int, int], list[_Rec]]  # (ctaid, warp) -> events in program order

    @property
    def events(self) -> int:
        return sum(len(r) for r in self.warps.values())


def _launch(kernel: Kernel, ragged: bool = False, ragged_rows: bool = False) -> tuple[int, int, int, int]:
    """(m, n, k, num_sms) of the traced launch (see module docstring); ``ragged``: one column less;
    ``ragged_rows``: one row (the epilogue operand loads' M tail: below one m-block, where no shifted last tile,
    ``SchedulePlan.shift_last_m_block``, keeps the tile inside M)."""
    tiles = kernel.acc_stages + 2 if kernel.is_sm100 else 3
    m = 1 if ragged_rows else kernel.launch.grid.tile_rows * tiles
    n = kernel.launch.grid.tile_cols - ragged
    k = kernel.block_k * (2 * kernel.stages + 1)
    if kernel.launch.grid.split_tiles == "last_wave":  # 3 tiles on 2 clusters: a whole wave, then a split tail tile
        return m, n, k, 2 * kernel.cluster_size
    return m, n, k, kernel.cluster_size


#: why a wgmma accumulator may not be read (the simulator's wording, :mod:`ptxgen.check.sim.machine`)
_WGMMA_BUSY = "a wgmma writing it is not covered by a wgmma.wait_group"


class _WgmmaGroups:
    """One warp's wgmma-groups during the trace: a ``wgmma.mma_async`` reads its smem operands and writes its
    register accumulator asynchronously until a ``wgmma.wait_group N`` retires its wgmma-group (PTX ISA
    wgmma.wait_group; uncommitted wgmmas are in no group).  Each wait's ``retires`` lists the wgmma events it
    retires (for :func:`_check_handovers`).  Accumulators are the register arrays' producer_commit: a busy
    array is marked in the walker (which faults on a read: EpilogueExpr), and a st.shared / st.global of one is a
    fault here (a dry run stores no values, so the walker does not read them)."""

    def __init__(self, wk: W.WarpWalker):
        self.wk, self.pending, self.committed = wk, [], 0  # pending: (wgmma-group index, wgmma _Rec)

    def see(self, rec: _Rec) -> None:
        ev, busy = rec.ev, self.wk.busy
        if isinstance(ev.op, O.Wgmma):
            busy[ev.op.acc] = _WGMMA_BUSY
            self.pending.append((self.committed, rec))
        elif isinstance(ev.op, O.WgmmaCommit):
            self.committed += 1
        elif isinstance(ev.op, O.WgmmaWait):
            oldest_kept = self.committed - ev.op.n
            rec.retires = [r for g, r in self.pending if g < oldest_kept]
            self.pending = [(g, r) for g, r in self.pending if g >= oldest_kept]
            still = {r.ev.op.acc for _, r in self.pending}
            for acc in [a for a, why in busy.items() if why is _WGMMA_BUSY and a not in still]:
                del busy[acc]
        elif isinstance(ev.op, (*W.SHARED_STORES, O.StGlobal16)) and busy.get(ev.op.src) is _WGMMA_BUSY:
            raise W.IRFault(f"register array {ev.op.src!r} read while {_WGMMA_BUSY}")


def _trace(kernel, ragged: bool = False, ragged_rows: bool = False) -> _Trace:
    m, n, k, num_sms = _launch(kernel, ragged, ragged_rows)
    grid = kernel.launch.grid.grid_x(m, n, num_sms)
    program = W.Program(kernel)
    counted = ("cluster",) if kernel.cta_group == 2 else ("cta", "cluster")  # barriers that order TMEM use
    warps: dict[tuple[int, int], list[_Rec]] = {}
    tables = grouped.trace_tables(kernel, m)  # a grouped kernel's u32 table and G (empty groups, partial m-blocks)
    params = {"m": m, "n": n, "k": k, **tables.params}
    counters = _Arrivals()
    for ctaid in range(grid):
        for warp in range(kernel.threads // W.LANES):
            wk = W.WarpWalker(program, ctaid=ctaid, nctaid=grid, cluster_size=kernel.cluster_size, warp=warp,
                              smem_base=cta_smem_base(DYNAMIC_SMEM_BASE, ctaid % kernel.cluster_size), params=params,
                              values=False)
            recs, syncs, gen, reply = [], 0, wk.run(), None
            wgmma = _WgmmaGroups(wk)
            try:
                while True:
                    ev = gen.send(reply)
                    reply = None
                    recs.append(_Rec(ev, wk.where(), wk.loop_key(), syncs, wk.thread(), wk.loads_pending()))
                    wgmma.see(recs[-1])
                    if isinstance(ev.op, O.TmemBase):
                        reply = 0
                    elif isinstance(ev.op, O.TmemLoad):
                        reply = np.zeros((W.LANES, ev.op.ncols), dtype=np.float32)
                    elif isinstance(ev.op, O.LdGlobalNcU32):
                        reply = tables.read(ev.op.param, ev.index, ev.op.describe())
                    elif isinstance(ev.op, (O.AtomGlobalAdd, O.NamedBarrierPopc)):
                        reply = recs[-1].value = counters.reply(ctaid, warp, ev)
                    elif isinstance(ev.op, W.THREAD_SYNCS) and ev.kind in counted:
                        syncs += 1
                    if isinstance(ev.op, W.THREAD_SYNCS):
                        counters.passed(ctaid, warp, ev)
            except StopIteration:
                pass
            except W.IRFault as exc:
                raise VerifyError(f"{exc} ({wk.where()})") from None
            warps[(ctaid, warp)] = recs
    counters.check(warps)
    return _Trace(kernel, m, n, k, grid, warps)


class _Arrivals:
    """The trace's replies to split-K arrivals and to counting barriers, consistent across the traced warps.

    Warps are traced one after another (CTA by CTA, warp by warp), so the trace fixes one arrival order: an
    ``AtomGlobalAdd`` reads the counter as the arrivals traced before it left it (the replay then holds each
    arrival to that order).  A ``bar.red.popc`` replies the count of the warps traced so far at the same visit
    of the same named barrier (the visit: how many named-barrier syncs on that id the warp passed before);
    :meth:`check` then requires every reply to equal the visit's final count, so a trace whose later warps
    would have changed an earlier warp's verdict is refused instead of checked on a wrong path.
    """

    def __init__(self):
        self.counters: dict[int, int] = {}  # workspace byte offset -> value
        self.visits: dict[tuple, int] = {}  # (ctaid, warp, barrier id) -> named syncs passed
        self.popc: dict[tuple, int] = {}  # (ctaid, barrier id, visit) -> count so far

    def reply(self, ctaid: int, warp: int, ev: W.Event) -> int:
        if isinstance(ev.op, O.AtomGlobalAdd):
            old = self.counters.get(ev.offset, 0)
            self.counters[ev.offset] = old + ev.op.value
            return old
        key = (ctaid, ev.id, self.visits.get((ctaid, warp, ev.id), 0))
        self.popc[key] = self.popc.get(key, 0) + int(np.count_nonzero(ev.pred))
        return self.popc[key]

    def passed(self, ctaid: int, warp: int, ev: W.Event) -> None:
        if ev.kind == "named":
            k = (ctaid, warp, ev.id)
            self.visits[k] = self.visits.get(k, 0) + 1

    def check(self, warps: dict) -> None:
        visits: dict[tuple, int] = {}
        for (ctaid, warp), recs in warps.items():
            for rec in recs:
                ev = rec.ev
                if not isinstance(ev.op, W.THREAD_SYNCS) or ev.kind != "named":
                    continue
                k = (ctaid, warp, ev.id)
                visit = visits.get(k, 0)
                visits[k] = visit + 1
                if isinstance(ev.op, O.NamedBarrierPopc) and rec.value != self.popc[(ctaid, ev.id, visit)]:
                    raise VerifyError(f"{ev.op.describe()} at {rec.where}: the trace replied {rec.value}, but the "
                                      f"barrier's threads count {self.popc[(ctaid, ev.id, visit)]} (a warp traced "
                                      "later changed the verdict)")
