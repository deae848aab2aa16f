"""The static verifier: the barrier protocol, shared-memory layout, TMEM bounds and teardown of a Kernel IR.

It traces the kernel (:mod:`.trace`) and checks the traces, one rule family a module: barrier phases and
the causal replay (:mod:`.barriers`), data flow (:mod:`.dataflow`), hand-overs (:mod:`.handover`), and
layout, residency, TMEM lifetime, scopes, teardown and the grid dependency (:mod:`.layout`).

Violations raise :class:`ptxgen.errors.VerifyError` naming the barrier, the
roles and the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .barriers import _Barriers, _check_barriers, _Replay, _table, barrier_table, format_barrier_table
from .dataflow import _check_dataflow
from .epilogue import _check_operand_loads, _check_outputs_written
from .handover import _check_handovers
from .layout import _check_grid_dependency, _check_layout, _check_scopes, _check_teardown, _check_tmem_lifetime
from .trace import _trace

__all__ = ["VerifyReport", "verify", "barrier_table", "format_barrier_table"]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` checked.

    shape: (m, n, k) of the traced launch; grid: its CTAs; events: IR events traced;
    phases: barrier phases checked; barriers: the barrier table rows.
    """

    kernel: str
    shape: tuple[int, int, int]
    grid: int
    events: int
    phases: int
    barriers: list[dict]


def verify(kernel) -> VerifyReport:
    """Check the protocol of ``kernel`` (see module docstring).  Raises VerifyError on a violation."""
    _check_layout(kernel)
    _check_outputs_written(kernel)
    trace = _trace(kernel)
    _check_dataflow(trace)
    bars = _Barriers(trace)
    phases = _check_barriers(bars)
    _Replay(trace, bars).run()
    _check_handovers(trace)
    _check_tmem_lifetime(trace)
    _check_scopes(trace)
    _check_teardown(trace)
    _check_grid_dependency(trace)
    ragged = _trace(kernel, ragged=True)
    _check_dataflow(ragged)
    _check_handovers(ragged)
    _check_operand_loads(trace)
    if _check_operand_loads(ragged):  # operand loads: their M tail too
        _check_operand_loads(_trace(kernel, ragged=True, ragged_rows=True))
    return VerifyReport(kernel.name, (trace.m, trace.n, trace.k), trace.grid, trace.events, phases, _table(bars))
