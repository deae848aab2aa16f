"""The machine's sm_90a warpgroup instructions: ``wgmma.mma_async``, ``wgmma.commit_group``,
``wgmma.wait_group`` and ``setmaxnreg`` (PTX ISA "wgmma.mma_async", "wgmma.wait_group", "setmaxnreg").
"""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ...mma import wgmma_fragment, wgmma_operand
from ...swizzle import kmajor_sw128_bytes, kmajor_sw128_index, mnmajor_sw128_index
from ....formats import e4m3_decode
from ..memory import _STATE_WORDS, VALID
from ..state import WARPGROUP, Blocked, RegGroup, Warp


class Wgmma:
    """Handlers of the wgmma and setmaxnreg events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _wgmma(self, w: Warp, ev: W.Event) -> None:
        who = w.who(f"Wgmma m64n{ev.op.n}k{ev.op.k} {ev.op.acc}")
        a = wgmma_operand(ev.a_desc, who, "A", ev.op.trans_a)
        b = wgmma_operand(ev.b_desc, who, "B", ev.op.trans_b)
        q = w.index % 4  # this warp's 16 rows of the m64 tile
        smem = w.cta.smem
        if ev.op.atype == "e4m3":  # k32 of 8-bit inputs: 32 bytes per row, decoded exactly (PTX ISA "wgmma": e4m3)
            if ev.op.k != 32:
                raise SimError(f"bad wgmma shape: {who}: e4m3 inputs take K = 32 per instruction (PTX ISA wgmma.mma_async)")
            idx_a = kmajor_sw128_bytes(a.start, 64, a.sbo, self.smem_base)[16 * q: 16 * q + 16]
            ha = smem.begin_async_read(idx_a, who)
            a_vals = e4m3_decode(smem.data[idx_a])
            idx_b = kmajor_sw128_bytes(b.start, ev.op.n, b.sbo, self.smem_base)
            hb = smem.begin_async_read(idx_b, who)
            b_vals = e4m3_decode(smem.data[idx_b])
        else:  # bf16: K-major, or MN-major where the transpose immediate says so
            idx_a = (mnmajor_sw128_index(a.start, 64, a.lbo, a.sbo, self.smem_base) if ev.op.trans_a else
                     kmajor_sw128_index(a.start, 64, a.sbo, self.smem_base))[16 * q: 16 * q + 16]
            ha = smem.begin_async_read(idx_a, who)
            a_vals = smem.bf16(idx_a)
            if ev.op.trans_b:
                idx_b = mnmajor_sw128_index(b.start, ev.op.n, b.lbo, b.sbo, self.smem_base)
                hb = smem.begin_async_read(idx_b, who)
                b_vals = smem.bf16(idx_b)
            else:
                b_vals, hb = self._operand_rows(w.cta, b.start, b.sbo, ev.op.n, who)
        b_t = np.ascontiguousarray(b_vals.T)
        if ev.accumulate and ev.op.acc not in w.acc_written:
            raise SimError(f"register read before write: {who} accumulates into {ev.op.acc}, which no wgmma wrote "
                           "(scale-d set on the first k-step?)")
        if not w.walker.wgmma_fenced:
            raise SimError(f"missing wgmma.fence: {who} is the warp's first wgmma and no wgmma.fence precedes it "
                           "(PTX ISA wgmma.fence: required before the first wgmma.mma_async of a warpgroup)")
        if ev.op.acc in w.walker.touched:
            raise SimError(f"missing wgmma.fence: {who} accesses accumulator {ev.op.acc}, which {w.walker.touched[ev.op.acc]} "
                           "accessed since the warp's last wgmma.fence (PTX ISA wgmma.fence: required between a "
                           "register access and a wgmma.mma_async that accesses the same registers)")
        w.acc_written.add(ev.op.acc)
        if w.nreg:
            live = {acc: w.walker.regs[acc].shape[1] for acc in sorted(w.acc_written)}
            if sum(live.values()) > w.nreg:
                frags = ", ".join(f"{a}: {r}" for a, r in live.items())
                raise SimError(f"register budget: {who}: the warp's live accumulator fragments need "
                               f"{sum(live.values())} registers per thread ({frags}) but its limit is {w.nreg} "
                               f"(.maxnreg {self.kernel.maxnreg}, then setmaxnreg)")
        rows, cols = wgmma_fragment(ev.op.n)
        regs = w.walker.regs

        def piece() -> None:
            c = (a_vals @ b_t)[rows, cols]
            regs[ev.op.acc] = regs[ev.op.acc] + c if ev.accumulate else c
            smem.end_async_read(ha)
            smem.end_async_read(hb)

        queue = w.cta.wgmma_queue(w.index // 4)
        op = queue.join(self, w.wg_issued, w, piece)
        w.wg_issued += 1
        w.wg_pending.append((w.wg_committed, op, ev.op.acc))
        w.walker.busy[ev.op.acc] = "a wgmma writing it is not covered by a wgmma.wait_group"

    def _scale_load(self, w: Warp, ev: W.Event) -> None:
        """FP8 scale loads (``ld.shared.f32``): per lane scale_a of its two rows and the chunk's scale_b, as
        ``(32, 3)`` f32 (the walker forms the products).  Every byte must hold landed TMA data: a read before the
        stage's ``full`` wait finds its bytes in flight or never written (``read before write``)."""
        who = w.who(ev.op.describe())
        smem = w.cta.smem
        out = np.empty((W.LANES, 3), dtype=np.float32)
        for col, addrs in enumerate((ev.sa_addr, ev.sa_addr + ev.op.row_half, np.full(W.LANES, ev.sb_addr))):
            for lane, lo in enumerate(addrs.tolist()):
                smem.check_range(lo, lo + 4, who, write=False)
                st = smem.state[lo:lo + 4]
                if (st != VALID).any():
                    raise SimError(f"read before write: {who} loads scale smem {lo:#x} of {smem.cta}, but "
                                   f"{_STATE_WORDS[int(st[st != VALID][0])]} (scale read before the stage's full wait?)")
                out[lane, col] = smem.data[lo:lo + 4].view(np.float32)[0]
        w.reply = out

    def _wgmma_commit(self, w: Warp, ev) -> None:
        w.wg_committed += 1

    def _wgmma_wait(self, w: Warp, ev: W.Event) -> None:
        """``wgmma.wait_group N``: the warp's committed groups but the N most recent are complete."""
        oldest_allowed = w.wg_committed - ev.op.n

        def ready() -> bool:
            return all(op.done for g, op, _ in w.wg_pending if g < oldest_allowed)

        def cover() -> None:
            w.wg_pending = [(g, op, acc) for g, op, acc in w.wg_pending if g >= oldest_allowed]
            still = {acc for _, _, acc in w.wg_pending}
            for acc in [a for a in w.walker.busy if a in w.acc_written and a not in still]:
                del w.walker.busy[acc]

        if ready():
            cover()
            return
        self.park(w, Blocked(w, lambda: f"wgmma.wait_group {ev.op.n}: "
                                         f"{sum(not op.done for _, op, _ in w.wg_pending)} wgmmas in flight",
                              w.walker.where()), ready)
        w.after_wait = cover

    # ---------------------------------------------------------------- setmaxnreg

    def _setmaxnreg(self, w: Warp, ev: W.Event) -> None:
        """``setmaxnreg`` (PTX ISA setmaxnreg): ``.sync.aligned`` over the warpgroup, whose four warps must execute
        the same one; ``.dec`` returns registers to the CTA's pool, ``.inc`` blocks until the pool has them."""
        cta, wg = w.cta, w.index // WARPGROUP
        what = f"setmaxnreg.{ev.op.action} {ev.op.regs}"
        who = w.who(what)
        if not self.kernel.maxnreg:
            raise SimError(f"setmaxnreg without .maxnreg: {who}; the per-CTA register pool needs the kernel's "
                           "register count fixed by .maxnreg (PTX ISA setmaxnreg)")
        if ev.op.regs % 8 or not 24 <= ev.op.regs <= 256:
            raise SimError(f"bad setmaxnreg: {who}: the count must be a multiple of 8 in [24, 256] (PTX ISA setmaxnreg)")
        gone = [x.index for x in cta.warps[WARPGROUP * wg: WARPGROUP * (wg + 1)] if x.done]
        if gone:
            raise SimError(f"unbalanced setmaxnreg: {who}, but warp(s) {', '.join(map(str, gone))} of warpgroup {wg} "
                           "exited without it (PTX ISA setmaxnreg: every warp of the warpgroup executes it)")
        pool = cta.regs
        grp = pool.groups.setdefault(wg, RegGroup(ev.op.action, ev.op.regs))
        if (grp.action, grp.regs) != (ev.op.action, ev.op.regs):
            raise SimError(f"unbalanced setmaxnreg: {who}, while warp(s) {', '.join(str(x.index) for x in grp.warps)} "
                           f"of warpgroup {wg} execute setmaxnreg.{grp.action} {grp.regs} (PTX ISA setmaxnreg: "
                           ".sync.aligned, every warp of the warpgroup executes the same setmaxnreg)")
        grp.warps.append(w)
        if len(grp.warps) < WARPGROUP:
            self.park(w, Blocked(grp, lambda: f"{what}: {len(grp.warps)} of {WARPGROUP} warps of warpgroup {wg} "
                                               "arrived", w.walker.where()), lambda: grp.done)
            return
        del pool.groups[wg]
        cur = w.nreg  # .dec only lowers the limit, .inc only raises it ("from its current value to imm-reg-count")
        new = min(cur, ev.op.regs) if ev.op.action == "dec" else max(cur, ev.op.regs)
        delta = (new - cur) * W.LANES * WARPGROUP  # registers the warpgroup takes from the pool (< 0: returns)

        def take() -> bool:
            if not grp.done:
                if pool.free < delta:
                    return False
                pool.free -= delta
                for x in grp.warps:
                    x.nreg = new
                grp.done = True
                self.wake(grp)
                if delta < 0:  # (an .inc runs inside wake(pool): only a .dec wakes the pool's waiters)
                    self.wake(pool)
            return True

        if not take():
            self.park(w, Blocked(pool, lambda: f"{what}: warpgroup {wg} needs {delta} registers, the pool of "
                                                f"{cta.name} has {pool.free} free", w.walker.where()), take)
