"""The machine's split-K workspace instructions: stores, loads and the tile counter's atomics in global memory
(:mod:`ptxgen.check.sim.workspace` keeps the state).
"""

from __future__ import annotations

from ....errors import SimError
from ... import walker as W
from ..state import Blocked, Warp


class WorkspaceOps:
    """Handlers of the workspace events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _ws_store(self, w: Warp, ev: W.Event) -> None:
        self.ws.store(w, ev.offset, ev.data, w.who("StGlobalF32"))

    def _ws_load(self, w: Warp, ev: W.Event) -> None:
        w.reply = self.ws.load(w, ev.offset, w.who("LdGlobalF32"))

    def _ws_counter(self, w: Warp, ev: W.Event) -> str:
        """``who`` of a split-K counter op (``RedGlobal``, ``AtomGlobalAdd``, ``StGlobalU32``, ``LdGlobalAcquireWait``), which one
        thread runs.  Raises SimError."""
        who = w.who(ev.op.describe())
        if ev.lanes != 1:
            raise SimError(f"{who}: {ev.lanes} threads run a split-K counter op; one thread does (Elect)")
        return who

    def _ws_red(self, w: Warp, ev: W.Event) -> None:
        self.ws.red(w, ev.offset, ev.op.value, ev.op.sem, self._ws_counter(w, ev))
        self.wake(self.ws)

    def _ws_atom(self, w: Warp, ev: W.Event) -> None:
        w.reply = self.ws.atom(w, ev.offset, ev.op.value, ev.op.sem, self._ws_counter(w, ev))
        self.wake(self.ws)

    def _ws_set(self, w: Warp, ev: W.Event) -> None:
        self.ws.set(ev.offset, ev.op.value, self._ws_counter(w, ev))
        self.wake(self.ws)

    def _ws_wait(self, w: Warp, ev: W.Event) -> None:
        ws, who, value = self.ws, self._ws_counter(w, ev), ev.op.value
        if ws.value(ev.offset) == value:
            ws.acquire(w, ev.offset, ev.op.sem)
        else:
            ws._counter(ev.offset, who)
            self.park(w, Blocked(ws, lambda: f"{ev.op.describe()}: the counter holds {ws.value(ev.offset)}",
                                  w.walker.where()), lambda: ws.value(ev.offset) == value)
            w.after_wait = lambda: ws.acquire(w, ev.offset, ev.op.sem)
