"""Epilogue operand loads stay inside their operands: every ``ld.global`` of a bias / scale / residual element that a
:class:`~ptxgen.ir.ops.LdEpilogue` issues reads a row < M and a column < N of the traced launch.  Every output
parameter is written: each ``.u64`` epilogue parameter that no load reads (an output beside D) has a
:class:`~ptxgen.ir.ops.StEpilogue`, and a D no ``StGlobal16`` / ``TmaStore`` writes (an e4m3 D) has one to ``d_ptr``.

A guarded load (the fragment's row/column guard the direct store keeps) issues only the elements inside D; an
unguarded one issues every element, so at an M or N tail it reads past the operand (a vector ``[N]``, ``[M]`` or
an ``[M, N]`` tensor): a VerifyError naming the load, the element and the launch.
"""

from __future__ import annotations

import numpy as np

from ...errors import VerifyError
from ...ir import ops as O
from .trace import _Trace


def _check_operand_loads(trace: _Trace) -> int:
    """Raise VerifyError for an issued operand element outside ``[0, M) x [0, N)``; returns the loads checked."""
    m, n, checked = trace.m, trace.n, 0
    for recs in trace.warps.values():
        for rec in recs:
            op = rec.ev.op
            if not isinstance(op, O.LdEpilogue):
                continue
            checked += 1
            if op.guard:
                continue  # predicated: elements outside D are not loaded
            rows = np.asarray(rec.ev.row)[:, None]
            cols = np.asarray(rec.ev.col)[:, None] + np.arange(len(op.idx))
            bad = {"row": rows >= m, "col": cols >= n, "tile": (rows >= m) | (cols >= n)}[op.layout]
            bad = np.broadcast_to(bad, cols.shape)
            if bad.any():
                lane, j = (int(x) for x in np.argwhere(bad)[0])
                raise VerifyError(
                    f"epilogue operand load out of bounds: {op.describe()} by {rec.where} reads {op.param} at row "
                    f"{int(np.broadcast_to(rows, cols.shape)[lane, j])}, col {int(cols[lane, j])} (lane {lane}) of a "
                    f"{m} x {n} launch; the load needs the fragment's row < M and column < N guard of the direct store")
    return checked


def _check_outputs_written(kernel) -> int:
    """Raise VerifyError for an output parameter no :class:`~ptxgen.ir.ops.StEpilogue` writes; returns the outputs."""
    body = list(O.walk(kernel.body))
    read = {op.param for op in body if isinstance(op, O.LdEpilogue)}
    written = {op.param for op in body if isinstance(op, O.StEpilogue)}
    if not any(isinstance(op, (O.StGlobal16, O.TmaStore)) for op in body) and "d_ptr" not in written:
        raise VerifyError(f"{kernel.name}: D is never written: no StGlobal16, TmaStore or StEpilogue to d_ptr")
    outputs = [name for name, kind in kernel.params if kind == "u64" and name.startswith("epi_") and name not in read]
    for name in outputs:
        if name not in written:
            raise VerifyError(f"{kernel.name}: epilogue output {name} is never written (no StEpilogue stores it); "
                              "its tensor would keep what it held before the launch")
    return len(outputs)
