"""The machine's mbarrier and thread-barrier instructions: ``mbarrier.init``/``arrive``/``try_wait``,
``fence.mbarrier_init``, ``bar.sync``/``barrier.sync`` and ``barrier.cluster`` (PTX ISA "mbarrier", "bar, barrier",
"barrier.cluster").
"""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ....ir import ops as O
from ... import walker as W
from ..state import Blocked, Cta, Warp
from ..sync import Mbarrier, Rendezvous
from ..units import join_clocks


class Barriers:
    """Handlers of the barrier events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _cta(self, w: Warp, rank: int) -> Cta:
        return self.ctas[w.cta.cluster * self.kernel.cluster_size + rank]

    def _bar(self, w: Warp, ref: W.BarRef, what: object) -> Mbarrier:
        """The barrier ``ref`` names, checked initialized and visible to ``w``.  Raises SimError."""
        cta = self._cta(w, ref.rank)
        bar = cta.bars.get((ref.name, ref.index))
        if bar is None:
            raise SimError(f"no such barrier: {what} by {w.walker.where()} names {ref.name}[{ref.index}]; the kernel "
                           f"has {', '.join(f'{s.name}[{s.num}]' for s in self.kernel.barriers)}")
        if cta.exited:
            raise SimError(f"use after exit: {what} by {w.walker.where()} touches {bar.name}, whose CTA has exited "
                           "(a multi-CTA kernel must end with a cluster barrier)")
        if not bar.initialized:
            raise SimError(f"uninitialized barrier: {what} by {w.walker.where()} uses {bar.name} before mbarrier.init")
        if cta is not w.cta and not bar.cluster_visible:
            raise SimError(f"init not visible: {what} by {w.walker.where()} uses remote {bar.name} before its init was "
                           "made visible to the cluster (fence.mbarrier_init.release.cluster, then a cluster barrier)")
        if cta is w.cta and w is not bar.init_warp and not bar.cta_visible:
            raise SimError(f"init not visible: {what} by {w.walker.where()} uses {bar.name} before a thread barrier "
                           "ordered it after the mbarrier.init")
        return bar

    def _init(self, w: Warp, ev: W.Event) -> None:
        bar = w.cta.bars.get((ev.bar.name, ev.bar.index))
        if bar is None:
            raise SimError(f"no such barrier: MbarrierInit by {w.walker.where()} names {ev.bar.name}[{ev.bar.index}]")
        if bar.initialized:
            raise SimError(f"double init: MbarrierInit by {w.walker.where()} re-initializes {bar.name}")
        bar.init(ev.count, w)

    def _fence_init(self, w: Warp, ev) -> None:
        for bar in w.cta.bars.values():
            if bar.init_warp is w:
                bar.fenced = True

    def _arrive(self, w: Warp, ev: W.Event) -> None:
        kind = "arrive.expect_tx" if ev.tx else "arrive"
        bar = self._bar(w, ev.bar, f"mbarrier.{kind}")
        join_clocks(bar.clock, self._release(w))
        if bar.arrive(ev.lanes, ev.tx, f"{w.walker.where().who} {kind}"):
            self.wake(bar)

    def _wait(self, w: Warp, ev: W.Event) -> None:
        bar = self._bar(w, ev.bar, f"MbarrierWait ({ev.op.role})")
        what = f"the MbarrierWait ({ev.op.role}) on {bar.name}"
        if bar.passed(ev.phase):
            self._acquire(w, bar.done_clock, what)
            return
        where = w.walker.where()
        self.park(w, Blocked(bar, lambda: f"MbarrierWait ({ev.op.role}) for the phase of parity {ev.phase} of "
                                           f"{bar.describe()}", where),
                  lambda: bar.passed(ev.phase))
        w.after_wait = lambda: self._acquire(w, bar.done_clock, what)

    def _sync(self, w: Warp, ev: W.Event) -> None:
        cta = w.cta
        if ev.kind == "cluster":
            key, name = ("cluster", cta.cluster), f"the cluster barrier of cluster {cta.cluster}"
        else:
            key, name = (ev.kind, cta.ctaid, ev.id), f"bar.sync {ev.id} of {cta.name}"
        rv = self.rendezvous.get(key)
        if rv is None:
            rv = self.rendezvous[key] = Rendezvous(name, ev.threads)
        join_clocks(rv.clock, self._release(w))
        if isinstance(ev.op, O.NamedBarrierPopc):  # bar.red.popc: every thread gets the count of the round
            rv.popc += int(np.count_nonzero(ev.pred))
        released = rv.arrive(w, ev.threads, str(w.walker.where()))
        if released is None:
            self.park(w, Blocked(rv, lambda: f"{rv.name}: {len(rv.arrived)} of {rv.warps} warps arrived",
                                  w.walker.where()), lambda: w not in rv.arrived)
            return
        clock, rv.clock = rv.clock, {}
        count, rv.popc = rv.popc, 0
        for x in released:
            self._acquire(x, clock, rv.name)
            x.reply = count if isinstance(ev.op, O.NamedBarrierPopc) else None
        self._publish_inits(ev.kind, cta)
        if self.ws is not None:
            self.ws.barrier(released)
        if ev.kind == "cluster":
            self.cluster_syncs[cta.cluster] = self.cluster_syncs.get(cta.cluster, 0) + 1
        self.wake(rv)

    def _publish_inits(self, kind: str, cta: Cta) -> None:
        """A completed thread barrier orders earlier mbarrier.inits before later uses (cluster: fenced inits)."""
        ctas = [c for c in self.ctas if c.cluster == cta.cluster] if kind == "cluster" else [cta]
        for c in ctas:
            for bar in c.bars.values():
                if bar.initialized:
                    bar.cta_visible = True
                    bar.cluster_visible |= kind == "cluster" and bar.fenced
