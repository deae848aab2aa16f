"""The machine's split-K workspace instructions: stores, loads and the tile counter's atomics in global memory
(:mod:`ptxgen.check.sim.workspace` keeps the state).
"""

from __future__ import annotations

from ....errors import SimError
from ... import walker as W
from ..state import Blocked, Warp


class WorkspaceOps:
    """Handlers of the workspace events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _ws_store(self, w: Warp, ev: W.WsStoreEv) -> None:
        self.ws.store(w, ev.offsets, ev.values, w.who("StGlobalF32"))

    def _ws_load(self, w: Warp, ev: W.WsLoadEv) -> None:
        w.reply = self.ws.load(w, ev.offsets, w.who("LdGlobalF32"))

    def _ws_atomic(self, w: Warp, ev: W.WsAtomicEv) -> None:
        ws, who = self.ws, w.who(ev.op.describe())
        if ev.lanes != 1:
            raise SimError(f"{who}: {ev.lanes} threads run a split-K counter op; one thread does (Elect)")
        if ev.kind == "red":
            ws.red(w, ev.offset, ev.value, ev.sem, who)
            self.wake(ws)
        elif ev.kind == "store":
            ws.set(ev.offset, ev.value, who)
            self.wake(ws)
        elif ws.value(ev.offset) == ev.value:
            ws.acquire(w, ev.offset, ev.sem)
        else:
            ws._counter(ev.offset, who)
            self.park(w, Blocked(ws, lambda: f"{ev.op.describe()}: the counter holds {ws.value(ev.offset)}",
                                  w.walker.where()), lambda: ws.value(ev.offset) == ev.value)
            w.after_wait = lambda: ws.acquire(w, ev.offset, ev.sem)
