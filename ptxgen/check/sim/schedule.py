"""The scheduling policies of the machine: ``random``, ``latest`` and ``pct`` (see
:mod:`ptxgen.check.sim.machine`), the run loop, parking and waking of warps.
"""

from __future__ import annotations

import heapq

from ...errors import SimError
from .. import walker as W
from .state import Blocked, Warp


POLICIES = ("random", "latest", "pct")
PCT_DEPTH = 3  # PCT bug depth d: d - 1 priority-change points per run
PCT_HORIZON = 4_000  # scheduler steps over which the change points are drawn


class Scheduler:
    """The run loop and the three policies (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def run(self, max_steps: int) -> None:
        """Run to completion; SimError on any fault, on deadlock, or after ``max_steps`` steps."""
        rng, runnable, due, policy = self.rng, self.runnable, self.due, self.policy
        changes = self.change_points if policy == "pct" else []
        while runnable or due:
            self.steps += 1
            if self.steps > max_steps:
                raise SimError(f"step limit: {max_steps} scheduler steps without finishing (livelock?)")
            if policy == "pct":
                best = max(runnable, key=_prio) if runnable else None
                fire = due and (best is None or -due[0][0] > best.prio)
            else:
                fire = due and (not runnable or (policy == "random" and due[0][0] <= self.now))
            if fire:
                when, tie, unit = heapq.heappop(due)
                if policy == "random":
                    self.now = max(self.now, when)
                self.fingerprint = (self.fingerprint * 1000003 + 2 * int(tie * 65521) + 1) & 0xFFFFFFFFFFFF
                unit.fire(self)
            else:
                i = best.pos if policy == "pct" else rng.randrange(len(runnable))
                self.fingerprint = (self.fingerprint * 1000003 + 2 * i) & 0xFFFFFFFFFFFF
                self.now += 1
                w = runnable[i]
                self._step(w)
                if changes and self.steps >= changes[0]:  # a PCT change point: the running warp drops lowest
                    w.prio = -len(changes)
                    changes.pop(0)
        if any(not w.done for c in self.ctas for w in c.warps):
            raise SimError(self._deadlock_report())
        self._check_final_barriers()
        if self.ws is not None:
            self.ws.check_exit()

    def schedule(self, unit) -> None:
        """Queue async ``unit`` (see the module docstring): ``random`` draws its latency; ``latest`` orders it
        newest first (it fires only when no warp can run); ``pct`` draws a priority among the warps' initial ones."""
        self._seq += 1
        if self.policy == "random":
            delay = self.rng.expovariate(1.0 / self.mean_latency)
            if self.rng.random() < 0.1:
                delay *= 20
            key = self.now + int(delay)
        elif self.policy == "latest":
            key = -self._seq
        else:
            key = -(PCT_DEPTH + self.rng.random() * len(self.warps))
        heapq.heappush(self.due, (key, self.rng.random(), unit))

    def _make_runnable(self, w: Warp) -> None:
        w.pos = len(self.runnable)
        self.runnable.append(w)

    def _unrun(self, w: Warp) -> None:
        last = self.runnable.pop()
        if last is not w:
            self.runnable[w.pos] = last
            last.pos = w.pos
        w.pos = -1

    def park(self, w: Warp, blocked: "Blocked", until) -> None:
        """Block ``w`` on ``blocked.waitable`` until ``until()`` holds."""
        w.until, w.blocked_on = until, blocked
        blocked.waitable.waiters.append(w)
        self._unrun(w)

    def wake(self, waitable) -> None:
        """Re-check the warps parked on ``waitable``."""
        if not waitable.waiters:
            return
        still = []
        for w in waitable.waiters:
            if w.until():
                self._make_runnable(w)
            else:
                still.append(w)
        waitable.waiters = still

    def _step(self, w: Warp) -> None:
        if w.until is not None:
            if not w.until():  # woken, but the condition no longer holds (re-poll, like try_wait)
                self.park(w, w.blocked_on, w.until)
                return
            w.until = w.blocked_on = None
            if w.after_wait is not None:
                w.after_wait()
                w.after_wait = None
        try:
            ev = w.gen.send(w.reply)
        except StopIteration:
            self._exit(w)
            return
        except W.IRFault as exc:
            raise SimError(f"{exc} ({w.walker.where()})") from None
        w.reply = None
        self.ops += 1
        if w.walker.marks:  # fences and waits the walker passed on its way to this event (no event of their own)
            for kind in w.walker.marks:
                self._tcgen_mark(w, kind)
            w.walker.marks.clear()
        handler = self._handlers.get(type(ev.op))
        if handler is None:
            raise SimError(f"the simulator has no model of {ev.op.describe()} ({w.walker.where()})")
        handler(w, ev)


def _prio(w: Warp) -> float:
    return w.prio
