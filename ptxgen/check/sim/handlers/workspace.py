"""The machine's split-K workspace instructions: stores, loads and the tile counter's atomics in global memory
(:mod:`ptxgen.check.sim.workspace` keeps the state).
"""

from __future__ import annotations

from ....errors import SimError
from ... import walker as W
from ..state import Warp


class WorkspaceOps:
    """Handlers of the workspace events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _ws_store(self, w: Warp, ev: W.Event) -> None:
        self.ws.store(w, ev.offset, ev.data, w.who("StGlobalF32"))

    def _ws_load(self, w: Warp, ev: W.Event) -> None:
        w.reply = self.ws.load(w, ev.offset, w.who("LdGlobalF32"))

    def _ws_counter(self, w: Warp, ev: W.Event) -> str:
        """``who`` of a split-K counter op (``AtomGlobalAdd``, ``StGlobalU32``), which one
        thread runs.  Raises SimError."""
        who = w.who(ev.op.describe())
        if ev.lanes != 1:
            raise SimError(f"{who}: {ev.lanes} threads run a split-K counter op; one thread does (Elect)")
        return who

    def _ws_atom(self, w: Warp, ev: W.Event) -> None:
        w.reply = self.ws.atom(w, ev.offset, ev.op.value, ev.op.sem, self._ws_counter(w, ev))

    def _ws_set(self, w: Warp, ev: W.Event) -> None:
        self.ws.set(ev.offset, ev.op.value, self._ws_counter(w, ev))
