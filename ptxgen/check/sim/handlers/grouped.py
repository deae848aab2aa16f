"""The machine's read-only table loads (:class:`~ptxgen.ir.ops.LdGlobalNcU32`): the grouped scheduler's
``masked_m`` / ``m_indices`` words, from the launch's :class:`ptxgen.check.grouped.Tables`."""

from __future__ import annotations

from ....errors import SimError
from ... import walker as W
from ..state import Warp


def table_read(machine, w: Warp, ev: W.Event) -> None:
    """Reply the table words at ``ev.index`` (per lane).  Raises SimError: no table, or an index outside it."""
    if machine.tables is None:
        raise SimError(f"{w.who(ev.op.describe())}: no u32 table {ev.op.param!r} in this launch")
    w.reply = machine.tables.read(ev.op.param, ev.index, w.who(ev.op.describe()), SimError)
