"""The machine's epilogue operand loads: ``ld.global`` of a bias / scale / residual element per fragment value,
0.0 where the load's guard keeps it off (outside D), a fault where an unguarded load leaves the operand; and the
output stores (:class:`~ptxgen.ir.ops.StEpilogue`: a second tile, e4m3 D, block scales, amax reductions)."""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ..memory import INFLIGHT, UNDEF
from ..state import Warp


class EpilogueLoads:
    """Handlers of :class:`~ptxgen.ir.ops.LdEpilogue` and :class:`~ptxgen.ir.ops.StEpilogue` (a mixin of
    :class:`~ptxgen.check.sim.machine.Machine`).

    The operands live in ``glob.extra`` by parameter name as float32 arrays (bf16/f16 values converted exactly); so
    do the outputs (NaN-poisoned; an amax output starts at 0.0), holding the stored values as float32.
    """

    def _ld_matrix(self, w: Warp, ev: W.Event) -> None:
        """``ldmatrix.x4`` (PTX ISA "ldmatrix"): lane ``L`` receives in word ``j`` the 4 bytes at ``4 (L % 4)`` of the
        row lane ``8 j + L // 4`` addressed; every byte must hold landed or written data (a byte a TMA load still
        writes: read before the load's barrier wait)."""
        op = ev.op
        addr = np.asarray(ev.addr, dtype=np.int64)
        smem = w.cta.smem
        who = w.who(op.describe())
        if (addr % 16).any():
            raise SimError(f"misaligned: {who}: ldmatrix rows are 16-byte aligned, got smem offsets "
                           f"{sorted(set(addr[addr % 16 != 0].tolist()))[:4]}")
        lanes = np.arange(32)
        # element (L, 2j + h): 2 bytes at addr[8j + L // 4] + 4 (L % 4) + 2h
        at = addr[8 * np.arange(4)[None, :] + (lanes // 4)[:, None]] + 4 * (lanes % 4)[:, None]
        at = (at[:, :, None] + 2 * np.arange(2)).reshape(32, 8)
        for lo in np.unique(addr):
            smem.check_range(int(lo), int(lo) + 16, who, write=False)
        state = smem.state[np.stack([at, at + 1])]
        bad = np.flatnonzero((state == UNDEF) | (state == INFLIGHT))
        if len(bad):
            off = int(np.stack([at, at + 1]).flat[bad[0]])
            raise SimError(f"read before write: {who} reads smem {off:#x} of {smem.cta}, which "
                           + ("a TMA load still writes (no wait on its barrier?)" if state.flat[bad[0]] == INFLIGHT
                              else "no write produced"))
        bits = smem.data[at].astype(np.uint16) | (smem.data[at + 1].astype(np.uint16) << 8)
        if op.fmt == "bf16":
            vals = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            vals = bits.view(np.float16).astype(np.float32)
        w.reply = vals  # column 2j + h -> dst[idx[2j + h]]

    def _st_epilogue(self, w: Warp, ev: W.Event) -> None:
        from ...epilogue import store_rounding

        op = ev.op
        dst = self.glob.extra.get(op.param)
        if dst is None:
            raise SimError(f"{w.who(op.describe())}: no output {op.param!r} in this launch")
        m, n = self.params["m"], self.params["n"]
        data = np.asarray(ev.data, dtype=np.float32)
        lanes = np.arange(len(ev.row)) if len(ev.row) == 32 else np.zeros(len(ev.row), dtype=np.int64)
        if op.layout == "tile":
            cols = ev.col[:, None] + np.arange(len(op.idx))
            rows = np.broadcast_to(ev.row[:, None], cols.shape)
            ok = (rows < m) & (cols < n)
            dst[rows[ok], cols[ok]] = store_rounding(data[ok], op.fmt)
            return
        lead = lanes % (32 if op.layout == "tensor_max" else 4) == 0
        rows, cols, v = ev.row[lead], ev.col[lead], data[lead, 0]
        if op.layout == "block":
            ok = (rows < m) & (cols < n)
            dst[rows[ok], cols[ok] // 128] = v[ok]
        elif op.layout == "row_max":
            ok = rows < m
            np.maximum.at(dst, rows[ok], v[ok])
        else:
            dst[0] = max(dst[0], v.max(initial=0.0))

    def _ld_epilogue(self, w: Warp, ev: W.Event) -> None:
        op = ev.op
        src = self.glob.extra.get(op.param)
        if src is None:
            raise SimError(f"{w.who(op.describe())}: no operand {op.param!r} in this launch")
        m, n = self.params["m"], self.params["n"]
        j = np.arange(len(op.idx))
        rows = np.broadcast_to(ev.row[:, None], (len(ev.row), len(j)))
        cols = ev.col[:, None] + j if op.layout != "row" else np.zeros_like(rows)
        index, inside = (np.broadcast_to(x, rows.shape) for x in op.element(rows, cols, m, n))
        if not op.guard and not inside.all():
            r, c = (int(x) for x in np.argwhere(~inside)[0])
            raise SimError(f"out of bounds: {w.who(op.describe())} reads {op.param} at row {int(rows[r, c])}, "
                           f"col {int(cols[r, c])} outside D's {m} x {n} (an unguarded operand load at a tail)")
        flat = src.reshape(-1)
        past = inside & (index >= flat.size)
        if past.any():  # an address outside the operand's buffer (a layout that does not fit the operand)
            r, c = (int(x) for x in np.argwhere(past)[0])
            raise SimError(f"out of bounds: {w.who(op.describe())} reads {op.param} element {int(index[r, c])} of "
                           f"{flat.size} (row {int(rows[r, c])}, col {int(cols[r, c])} of a {m} x {n} launch)")
        w.reply = np.where(inside, flat[np.where(inside, index, 0)], np.float32(0)).astype(np.float32)
