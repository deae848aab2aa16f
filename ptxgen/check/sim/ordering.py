"""Happens-before clocks of the machine and the tcgen05 fences that order thread synchronisation against
tcgen05 ops (PTX ISA "tcgen05 memory consistency model", "tcgen05.fence", "tcgen05.wait").
"""

from __future__ import annotations

from ...errors import SimError
from .state import FENCE_DOC, GEN, TC, Warp, Who
from .units import join_clocks


class Ordering:
    """Vector-clock release/acquire and the tcgen05 ordering faults (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _release(self, w: Warp) -> dict[int, int]:
        """The clock a release by ``w`` publishes (its knowledge, its epoch, its fenced tcgen05 ops); next epoch."""
        clock = dict(w.vc)
        clock[3 * w.gid + GEN] = w.epoch
        clock[3 * w.gid + TC] = w.tc_fenced
        w.epoch += 1
        return clock

    def _acquire(self, w: Warp, clock: dict[int, int], what: str) -> None:
        """``w`` passed a thread synchronisation (``what``) that publishes ``clock``; its tcgen05 ops see it only
        after a ``tcgen05.fence::after_thread_sync``."""
        join_clocks(w.vc, clock)
        if w.unfenced_sync is None:
            w.unfenced_sync = what

    def _tcgen_mark(self, w: Warp, kind: str) -> None:
        """``before`` (``tcgen05.fence::before_thread_sync``): the next release publishes the warp's tcgen05 ops so
        far, up to its first ``tcgen05.ld`` not yet waited for; ``wait_ld`` (``tcgen05.wait::ld``): its loads are
        complete; ``after`` (``::after_thread_sync``): its tcgen05 ops from now on see what its thread
        synchronisations acquired."""
        if kind == "wait_ld":
            w.ld_pending = None
        elif kind == "before":
            w.tc_fenced = w.tc_ops if w.ld_pending is None else w.ld_pending - 1
            if w.ld_pending is not None:
                w.unwaited_at_fence.update(range(w.ld_pending, w.tc_ops + 1))
        else:
            w.tvc = dict(w.vc)
            w.fence_step = self.steps
            w.unfenced_sync = None

    def _tc_op(self, w: Warp, who: Who) -> int:
        """Number the warp's next tcgen05 op (``who``) and return it."""
        w.tc_ops += 1
        self.tc_who[(w.gid, w.tc_ops)] = who
        return w.tc_ops

    def _unordered(self, w: Warp, gid: int, comp: int, seq: int, epoch: int) -> str | None:
        """Whether the tcgen05 view of ``w`` orders op ``seq`` of warp ``gid`` (component ``comp``) before it:
        None if so, else the missing link: ``after`` (w knows it but passed no after_thread_sync fence since),
        ``before`` (the other warp released after the op, but without before_thread_sync), or ``order``; the caller
        refines ``before`` to ``wait_ld`` for a load that was still pending at the fence."""
        if gid == w.gid or w.tvc.get(3 * gid + comp, -1) >= seq:
            return None
        if w.vc.get(3 * gid + comp, -1) >= seq:
            return "after"
        if epoch >= 0 and w.vc.get(3 * gid + GEN, -1) >= epoch:
            return "before"
        return "order"

    def _order_fault(self, link: str, w: Warp, who: Who, other: Who, what: str) -> SimError:
        """The fault of ``who`` (by ``w``) not being ordered against ``other``; ``what`` (with ``{other}``) is what
        ``who`` may then do."""
        may = what.format(other=other)
        if link == "after":
            return SimError(f"missing tcgen05.fence::after_thread_sync: {who} follows {w.unfenced_sync} with no "
                            f"tcgen05.fence::after_thread_sync between them, so it is not ordered after that "
                            f"synchronisation ({FENCE_DOC}) and may {may}")
        if link == "wait_ld":
            return SimError(f"missing tcgen05.wait::ld: {other} had not completed (no tcgen05.wait::ld) at its warp's "
                            "tcgen05.fence::before_thread_sync, so the release after that fence does not order the "
                            f"read ({FENCE_DOC}; PTX ISA tcgen05.wait) and {who} may {may}")
        if link == "before":
            return SimError(f"missing tcgen05.fence::before_thread_sync: {other} is followed by a thread "
                            f"synchronisation (arrive or barrier) with no tcgen05.fence::before_thread_sync between "
                            f"them, so it is not ordered before that synchronisation ({FENCE_DOC}) and {who} may "
                            f"{may}")
        return SimError(f"unordered tcgen05 access: {who} may {may}: nothing orders the two (an MMA is ordered "
                        "before a reader by a tcgen05.commit issued after it whose arrive the reader waits for; a read "
                        "before an MMA by tcgen05.fence::before_thread_sync and a release the MMA's warp acquires; "
                        f"each followed by tcgen05.fence::after_thread_sync; {FENCE_DOC})")
