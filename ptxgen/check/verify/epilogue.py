"""Epilogue operand loads stay inside their operands: every ``ld.global`` of a bias / scale / residual element that a
:class:`~ptxgen.ir.ops.LdEpilogue` issues reads a row < M and a column < N of the traced launch.  Every output
parameter is written: each ``.u64`` epilogue parameter that no load reads (an output beside D) has a
:class:`~ptxgen.ir.ops.StEpilogue`, and a D no ``StGlobal16`` / ``TmaStore`` writes (an e4m3 D) has one to ``d_ptr``.
A swap-AB kernel stores D only transposed, any other kernel never (:func:`_check_d_layout`).

A staged operand (read through the CD staging ring, :mod:`ptxgen.builders.staged`): its TMA load lands in one CD
slot, completes on an ``epi_full`` barrier and loads the box the slot's next TMA store writes (D's box); every
``ldmatrix`` of the slot comes after a wait, in the same iteration, on the barrier its last load completes on.  The load writes
the slot, so the staging-reuse rule (:mod:`.handover`) holds it to the previous store's ``wait_group.read``.

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
            bad = np.broadcast_to(~op.element(rows, cols, m, n)[1], cols.shape)
            if bad.any():
                lane, j = (int(x) for x in np.argwhere(bad)[0])
                raise VerifyError(
                    f"epilogue operand load out of bounds: {op.describe()} by {rec.where} reads {op.param} at row "
                    f"{int(np.broadcast_to(rows, cols.shape)[lane, j])}, col {int(cols[lane, j])} (lane {lane}) of a "
                    f"{m} x {n} launch; the load needs the fragment's row < M and column < N guard of the direct store")
    return checked


def staged_fills(trace: _Trace, slots) -> dict:
    """``(ctaid, epi_full index, loop key) -> CD slot`` of every staged operand load of the trace."""
    fills = {}
    for (ctaid, _), recs in trace.warps.items():
        for rec in recs:
            op = rec.ev.op
            if isinstance(op, O.TmaLoad) and op.tensor.startswith("tile_"):
                box = trace.kernel.launch.tensor_maps[op.tensor].box_bytes
                hit = slots.find(rec.ev.dst, rec.ev.dst + box)
                for ref in rec.ev.bars:
                    fills[(ctaid, ref.index, rec.key)] = hit[1] if hit else None
    return fills


def check_staged(kernel, slots, ev, rec, require, state: dict, fills: dict) -> bool:
    """The staged-operand rules (module docstring) for one event of a warp.  ``state``: the warp's ``boxes`` (CD
    slot -> the (op, col, row) of the staged load into it, not yet matched by a store) and ``wait`` (its last wait on
    an ``epi_full`` barrier: (index, loop key)); ``fills``: :func:`staged_fills`.  Returns True when ``ev`` was a
    staged access (a TmaLoad into a CD slot, an LdMatrix).  Raises VerifyError."""
    op = ev.op
    boxes = state.setdefault("boxes", {})
    if isinstance(op, O.MbarrierWait) and ev.bar.name == "epi_full":
        state["wait"] = (ev.bar.index, rec.key)
        return False
    if isinstance(op, O.TmaLoad) and op.tensor.startswith("tile_"):
        box = kernel.launch.tensor_maps[op.tensor].box_bytes
        _, s = slots.slot(ev.dst, ev.dst + box, f"TmaLoad {op.tensor}", rec.where, ("CD",))
        if any(ref.name != "epi_full" for ref in ev.bars):
            raise VerifyError(f"staged operand load on the wrong barrier: {op.describe()} by {rec.where} writes CD "
                              f"stage {s} but completes on {', '.join(map(str, ev.bars))}, not an epi_full barrier")
        rec.uses.append(("CD", s))  # a write of the slot: the staging-reuse rule applies
        boxes[s] = (op, ev.col, ev.row)
        return True
    if isinstance(op, O.LdMatrix):
        wait = state.get("wait")
        if wait is None or rec.key[: len(wait[1])] != wait[1]:
            raise VerifyError(f"missing wait: {op.describe()} by {rec.where} reads the staged operand without a wait "
                              f"on its epi_full barrier in this iteration (last wait on one: "
                              f"{'never' if wait is None else wait[1]})")
        require("epi_full", wait[0], rec, op.describe())
        filled = fills.get((rec.where.ctaid, wait[0], wait[1]))
        for s in sorted({slots.slot(a, a + 16, "LdMatrix", rec.where, ("CD",))[1] for a in set(ev.addr.tolist())}):
            if filled != s:
                raise VerifyError(f"ldmatrix of the wrong slot: {op.describe()} by {rec.where} reads CD stage {s}, but "
                                  f"the load epi_full[{wait[0]}] waited for filled "
                                  f"{'no CD stage' if filled is None else f'CD stage {filled}'}")
        return True
    if isinstance(op, O.TmaStore) and boxes:
        s = slots.slot(ev.src, ev.src + kernel.launch.tensor_maps[op.tensor].box_bytes, "TmaStore", rec.where,
                       ("CD",))[1]
        load = boxes.pop(s, None)
        if load is not None and (load[1], load[2]) != (ev.col, ev.row):
            raise VerifyError(f"staged operand from the wrong box: {load[0].describe()} loaded (col {load[1]}, row "
                              f"{load[2]}) into CD stage {s}, but {op.describe()} by {rec.where} stores D's box at "
                              f"(col {ev.col}, row {ev.row}) from it; the operand's box is D's box")
    return False


def _check_d_layout(kernel, body: list) -> None:
    """D's store layout is the launch's: a swap-AB kernel (launch ``extra["swap_ab"]``: the runtime passes B as the
    kernel's A and A as its B) writes D only through transposed :class:`~ptxgen.ir.ops.StGlobal16` (its ``[m, n]``
    result is the caller's ``[n, m]`` D); any other kernel stores none transposed.  Raises VerifyError."""
    swap = bool(kernel.launch.extra.get("swap_ab"))
    for op in body:
        wrong = (isinstance(op, O.StGlobal16) and op.transposed != swap
                 or swap and (isinstance(op, O.TmaStore) or isinstance(op, O.StEpilogue) and op.param == "d_ptr"))
        if wrong:
            raise VerifyError(f"{kernel.name}: D stored in the wrong layout: {op.describe()} in a "
                              + ("swap-AB kernel, whose D is the transpose of its accumulator (transposed StGlobal16 "
                                 "only)" if swap else "kernel without swap-AB (D is its accumulator as it is)"))


def _check_outputs_written(kernel) -> int:
    """Raise VerifyError for an output parameter no :class:`~ptxgen.ir.ops.StEpilogue` writes, or a D stored in
    another layout than the launch's (:func:`_check_d_layout`); returns the outputs."""
    body = list(O.walk(kernel.body))
    _check_d_layout(kernel, body)
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
