"""The machine's epilogue operand loads: ``ld.global`` of a bias / scale / residual element per fragment value,
0.0 where the load's guard keeps it off (outside D), a fault where an unguarded load leaves the operand."""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ..state import Warp


class EpilogueLoads:
    """Handler of :class:`~ptxgen.ir.ops.LdEpilogue` (a mixin of :class:`~ptxgen.check.sim.machine.Machine`).

    The operands live in ``glob.extra`` by parameter name as float32 arrays (bf16/f16 values converted exactly).
    """

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
