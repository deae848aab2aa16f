"""The machine's epilogue operand loads: ``ld.global`` of a bias / scale / residual element per fragment value,
0.0 where the load's guard keeps it off (outside D), a fault where an unguarded load leaves the operand; and the
output stores (:class:`~ptxgen.ir.ops.StEpilogue`: a second tile, e4m3 D, block scales, amax reductions)."""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ..state import Warp


class EpilogueLoads:
    """Handlers of :class:`~ptxgen.ir.ops.LdEpilogue` and :class:`~ptxgen.ir.ops.StEpilogue` (a mixin of
    :class:`~ptxgen.check.sim.machine.Machine`).

    The operands live in ``glob.extra`` by parameter name as float32 arrays (bf16/f16 values converted exactly); so
    do the outputs (NaN-poisoned; an amax output starts at 0.0), holding the stored values as float32.
    """

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
        inside = rows < m if op.layout == "row" else (cols < n if op.layout == "col" else (rows < m) & (cols < n))
        if not op.guard and not inside.all():
            r, c = (int(x) for x in np.argwhere(~inside)[0])
            raise SimError(f"out of bounds: {w.who(op.describe())} reads {op.param} at row {int(rows[r, c])}, "
                           f"col {int(cols[r, c])} outside D's {m} x {n} (an unguarded operand load at a tail)")
        flat = src.reshape(-1)
        index = {"row": rows, "col": cols, "tile": rows * n + cols}[op.layout]
        w.reply = np.where(inside, flat[np.where(inside, index, 0)], np.float32(0)).astype(np.float32)
