"""The machine's TMEM instructions: ``tcgen05.alloc``/``relinquish_alloc``/``dealloc`` and ``tcgen05.ld``
(PTX ISA "tcgen05.alloc", "tcgen05.ld"), with the ordering checks of their TMEM cells.
"""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ..memory import Tmem
from ..state import DONE, TC, TMEM_LANE_QUARTER, Warp, Who


class TmemOps:
    """Handlers of the TMEM events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _alloc(self, w: Warp, ev: W.Event) -> None:
        tmem = w.cta.tmem
        if ev.op.cols < 32 or ev.op.cols > Tmem.COLS or ev.op.cols & (ev.op.cols - 1):
            raise SimError(f"bad TMEM allocation: {w.walker.where()} allocates {ev.op.cols} columns; tcgen05.alloc "
                           "takes a power of two in [32, 512]")
        if self.kernel.cta_group == 2 and not self.cluster_syncs.get(w.cta.cluster):
            raise SimError(f"paired TMEM allocation before the cluster is known running: {w.walker.where()} issues "
                           "tcgen05.alloc.cta_group::2 before any cluster barrier completed (PTX ISA tcgen05.alloc: "
                           "the peer CTA must be running)")
        if tmem.cols:
            raise SimError(f"double TMEM allocation: {w.walker.where()} allocates again in {w.cta.name}")
        tmem.cols = ev.op.cols
        w.cta.smem.internal_write(self.kernel.tmem_slot, np.array([0], dtype=np.uint32).view(np.uint8))
        w.cta.slot_stamp = (w.gid, self._tc_op(w, w.who("TmemAlloc")), w.epoch)

    def _tmem_base(self, w: Warp, ev) -> None:
        who = w.who("TmemBase")
        raw = w.cta.smem.generic_read(self.kernel.tmem_slot, self.kernel.tmem_slot + 4, who)
        if w.cta.slot_stamp is not None:  # the address tcgen05.alloc wrote (PTX ISA tcgen05.alloc: fence pattern)
            gid, seq, epoch = w.cta.slot_stamp
            link = self._unordered(w, gid, TC, seq, epoch)
            if link:
                raise self._order_fault(link, w, who, self.tc_who[(gid, seq)],
                                        "read the TMEM address slot before {other} wrote it")
        w.reply = int(raw.view(np.uint32)[0])

    def _dealloc(self, w: Warp, ev: W.Event) -> None:
        cta, tmem = w.cta, w.cta.tmem
        where = w.walker.where()
        if ev.taddr != 0 or ev.op.cols != tmem.cols:
            raise SimError(f"bad TMEM dealloc: {where} frees {ev.op.cols} columns at {ev.taddr:#x}; the allocation is "
                           f"{tmem.cols} columns at 0x0")
        if tmem.busy():
            raise SimError(f"TMEM dealloc while busy: {where} frees TMEM of {cta.name} while MMAs writing it are in flight")
        who = w.who("TmemDealloc")
        self._check_ordered(w, who, tmem.stamps("wr"), DONE, "free TMEM before {other} completes")
        self._check_ordered(w, who, tmem.stamps("rd"), TC, "free TMEM before {other} completes")
        if self.kernel.cta_group == 2:
            peer = self._cta(w, cta.rank ^ 1)
            if not peer.tmem.cols:
                raise SimError(f"TMEM dealloc before peer alloc: {where} frees TMEM of {cta.name} before {peer.name} "
                               "allocated (cta_group::2 needs a cluster barrier between alloc and dealloc)")
        tmem.freed = True

    def _tmem_load(self, w: Warp, ev: W.Event) -> None:
        lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
        quarter = TMEM_LANE_QUARTER * (w.index % 4)
        who = w.who(f"TmemLoad 32x32b.x{ev.op.ncols}")
        if lane != quarter:
            raise SimError(f"TMEM lane access: {who} reads TMEM lanes [{lane}, {lane + 32}); warp {w.index} may "
                           f"access lanes [{quarter}, {quarter + 32}) only (PTX ISA tcgen05.ld: warp w%4 of a warpgroup)")
        tmem = w.cta.tmem
        if tmem.cols and not tmem.freed:  # (out-of-range accesses are reported by Tmem.read)
            self._check_ordered(w, who, tmem.stamps("wr", lane, col, 32, ev.op.ncols), DONE,
                                f"read TMEM of {w.cta.name} columns [{col}, {col + ev.op.ncols}) before {{other}} writing "
                                "them completes")
        w.reply = tmem.read(lane, col, ev.op.ncols, who)
        seq = self._tc_op(w, who)
        tmem.stamp_read(lane, col, ev.op.ncols, w.gid, seq, w.epoch)
        if w.ld_pending is None:
            w.ld_pending = seq

    def _check_ordered(self, w: Warp, who: Who, stamps: list[tuple], comp: int, what: str) -> None:
        """Raise the ordering fault of the first stamp (warp id, op number[, epoch]) the tcgen05 view of ``w``
        does not order before ``who``."""
        for gid, seq, *epoch in stamps:
            link = self._unordered(w, gid, comp, seq, epoch[0] if epoch else -1)
            if link == "before" and seq in self.warps[gid].unwaited_at_fence:
                link = "wait_ld"
            if link:
                raise self._order_fault(link, w, who, self.tc_who[(gid, seq)], what)
