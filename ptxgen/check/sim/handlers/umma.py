"""The machine's ``tcgen05.mma`` (bf16 x bf16 -> f32 TMEM, ``.cta_group::1``/``::2``) and ``tcgen05.commit``
(PTX ISA "tcgen05.mma", "tcgen05.commit").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ....errors import SimError
from ... import walker as W
from ...mma import umma_operand, umma_shape
from ...swizzle import kmajor_sw128_index
from ..state import DONE, FENCE_DOC, TC, Cta, Warp, Who
from ..units import CommitArriveUnit

if TYPE_CHECKING:
    from ..machine import Machine


class Umma:
    """Handlers of the UMMA events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _operand_rows(self, cta: Cta, start: int, sbo: int, rows: int, who: Who) -> tuple[np.ndarray, int]:
        idx = kmajor_sw128_index(start, rows, sbo, self.smem_base)
        handle = cta.smem.begin_async_read(idx, who)
        return cta.smem.bf16(idx), handle

    def _umma(self, w: Warp, ev: W.Event) -> None:
        kernel, cta = self.kernel, w.cta
        who = w.who("Umma")
        if ev.lanes != 1:
            raise SimError(f"tcgen05.mma issued by {ev.lanes} threads: {who}; one thread issues it (Elect)")
        group = kernel.cta_group
        if group == 2 and cta.rank % 2:
            raise SimError(f"tcgen05.mma.cta_group::2 issued by the odd CTA of the pair: {who}")
        m_total, n_total = umma_shape(ev.op.idesc, who)
        if m_total != 128 * group:
            raise SimError(f"unsupported MMA shape: {who}: M={m_total} with cta_group::{group}; the simulator "
                           f"models M = 128 rows per CTA")
        a, b = umma_operand(ev.a_desc, who, "A"), umma_operand(ev.b_desc, who, "B")
        ctas = [cta, self._cta(w, cta.rank ^ 1)] if group == 2 else [cta]
        lane, col = ev.d >> 16, ev.d & 0xFFFF
        a_vals, b_vals, handles = [], [], []
        for c in ctas:  # A: each CTA's own 128 rows; B: N/group rows from each CTA, leader's first
            va, ha = self._operand_rows(c, a.start, a.sbo, 128, who)
            vb, hb = self._operand_rows(c, b.start, b.sbo, n_total // group, who)
            a_vals.append(va)
            b_vals.append(vb)
            handles += [(c, ha), (c, hb)]
            self._check_landed(w, who, c, a.start, a.sbo, 128)
            self._check_landed(w, who, c, b.start, b.sbo, n_total // group)
        seq = self._tc_op(w, who)
        for c in ctas:
            c.tmem.begin_write(lane, col, 128, n_total, who)
            self._check_ordered(w, who, c.tmem.stamps("rd", lane, col, 128, n_total), TC,
                                f"overwrite TMEM of {c.name} columns [{col}, {col + n_total}) while {{other}} still reads "
                                "them")
            c.tmem.stamp_write(lane, col, 128, n_total, w.gid, seq)
        b_t = np.ascontiguousarray(np.concatenate(b_vals).T)  # (a contiguous right operand keeps BLAS fast)

        def complete(m: Machine) -> None:
            for c, av in zip(ctas, a_vals):
                c.tmem.end_write(lane, col, av @ b_t, ev.accumulate, who)
            for c, h in handles:
                c.smem.end_async_read(h)

        w.tc.push(self, complete)

    def _check_landed(self, w: Warp, who: Who, cta: Cta, start: int, sbo: int, rows: int) -> None:
        """An MMA operand's bytes must have landed before the issuing warp's last after_thread_sync fence: bytes
        landed since are ordered before the MMA only through a thread synchronisation the fence did not follow."""
        idx = kmajor_sw128_index(start, rows, sbo, self.smem_base)
        landed = int(cta.smem.landed[idx].max())
        if landed > w.fence_step:
            off = int(idx.flat[int(np.argmax(cta.smem.landed[idx]))])
            if w.unfenced_sync is None:  # no wait since: the stage was refilled under the reader
                raise SimError(f"write after read: {who} reads smem {off:#x} of {cta.name}, which a TMA load refilled "
                               "after the warp's last wait (and tcgen05.fence::after_thread_sync) for it: the refill "
                               "was not held back until this read (consumer release before its last read?)")
            raise SimError(f"missing tcgen05.fence::after_thread_sync: {who} reads smem {off:#x} of {cta.name}, which "
                           f"a TMA load landed after the warp's last tcgen05.fence::after_thread_sync; since then it "
                           f"passed {w.unfenced_sync} but no fence, so the MMA is not ordered after that wait and may "
                           f"read the stage before the data lands ({FENCE_DOC})")

    def _commit(self, w: Warp, ev: W.Event) -> None:
        who = w.who("UmmaCommit")
        bars = [self._bar(w, ref, who) for ref in ev.bars]
        clock = self._release(w)  # the arrive fires once the warp's earlier tcgen05 ops completed
        clock[3 * w.gid + TC] = clock[3 * w.gid + DONE] = self._tc_op(w, who)

        def complete(m: Machine) -> None:
            unit = CommitArriveUnit(bars, who, w.cta, clock)
            m.pending_arrives.add(unit)
            m.schedule(unit)

        for _ in range(ev.lanes):
            w.tc.push(self, complete)
