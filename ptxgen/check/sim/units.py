"""The machine's asynchronous units: TMA loads and stores, tcgen05 queues and commit arrives, wgmma queues.

Each unit is scheduled (:meth:`~ptxgen.check.sim.machine.Machine.schedule`) and fires later, in an order the
scheduling policy picks.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from ...errors import SimError

if TYPE_CHECKING:
    from .machine import Machine
    from .state import Cta, Warp, Who
    from .sync import Mbarrier


class TmaLoadUnit:
    """One destination CTA's share of a TMA load: lands the box, then complete_tx on its barrier."""

    __slots__ = ("dst", "handle", "idx", "box", "bar", "who", "issue_phase")

    def __init__(self, dst: Cta, handle: int, idx: np.ndarray, box: tuple, bar: Mbarrier, who: Who):
        self.dst, self.handle, self.idx, self.box, self.bar, self.who = dst, handle, idx, box, bar, who
        self.issue_phase = bar.phase

    def fire(self, m: "Machine") -> None:
        tensor, col, row, cols, rows = self.box
        data = m.glob.load_box(tensor, col, row, cols, rows)
        check_alive(self.bar, self.who)
        self.dst.smem.end_async_write(self.handle, self.idx, data.view(np.uint8).ravel(), m.steps)
        if self.bar.complete_tx(data.nbytes, self.issue_phase, self.who):
            m.wake(self.bar)


class StoreUnit:
    """A TMA store: its shared-memory read completes first, then its global write."""

    def __init__(self, warp: Warp, handle: int, box: np.ndarray, col: int, row: int):
        self.warp, self.handle, self.box, self.col, self.row = warp, handle, box, col, row
        self.read_done = self.done = False

    def fire(self, m: "Machine") -> None:
        if not self.read_done:
            self.warp.cta.smem.end_async_read(self.handle)
            self.read_done = True
            m.schedule(self)
        else:
            m.glob.store_box(self.col, self.row, self.box)
            self.done = True
        m.wake(self.warp)


class CommitArriveUnit:
    """The mbarrier arrive-on of a ``tcgen05.commit``, once the MMAs before it completed.

    PTX ISA "tcgen05.commit": the arrive is triggered after those MMAs complete; nothing orders it
    against later commits, so it is its own async unit with its own latency.
    """

    __slots__ = ("bars", "who", "issuer", "clock")

    def __init__(self, bars: list, who: Who, issuer: Cta, clock: dict[int, int]):
        self.bars, self.who, self.issuer, self.clock = bars, who, issuer, clock

    def fire(self, m: "Machine") -> None:
        m.pending_arrives.discard(self)
        for bar in self.bars:
            check_alive(bar, self.who)
            join_clocks(bar.clock, self.clock)
            if bar.arrive(1, 0, f"{self.who.where.who} tcgen05.commit"):
                m.wake(bar)


class AsyncQueue:
    """A warp's in-order tcgen05 ops (MMAs and commits); fires its head."""

    def __init__(self, warp: Warp):
        self.warp = warp
        self.ops: deque = deque()

    def push(self, m: "Machine", op) -> None:
        self.ops.append(op)
        if len(self.ops) == 1:
            m.schedule(self)

    def fire(self, m: "Machine") -> None:
        self.ops.popleft()(m)
        m.wake(self.warp)
        if self.ops:
            m.schedule(self)


class WgmmaOp:
    """The j-th wgmma of a warpgroup: one tensor-core op made of its four warps' parts (``.sync.aligned``)."""

    __slots__ = ("parts", "done")

    def __init__(self):
        self.parts: dict[Warp, object] = {}
        self.done = False


class WarpgroupQueue:
    """A warpgroup's wgmmas in issue order; the head fires once all four warps issued it, completing all parts.

    PTX ISA "wgmma.mma_async": the instruction is executed by all 128 threads of
    the warpgroup; one warp's ``wgmma.wait_group`` thus also covers the
    operand reads of the other three warps' parts (CUTLASS releases a stage
    from one elected thread per warpgroup on this basis).
    """

    def __init__(self):
        self.ops: deque[WgmmaOp] = deque()
        self.base = 0  # sequence number of ops[0]

    def join(self, m: "Machine", seq: int, warp: Warp, part) -> WgmmaOp:
        while self.base + len(self.ops) <= seq:
            self.ops.append(WgmmaOp())
        op = self.ops[seq - self.base]
        op.parts[warp] = part
        if seq == self.base and self._head_ready():
            m.schedule(self)
        return op

    def _head_ready(self) -> bool:
        return bool(self.ops) and len(self.ops[0].parts) == 4

    def fire(self, m: "Machine") -> None:
        op = self.ops.popleft()
        self.base += 1
        for part in op.parts.values():
            part()
        op.done = True
        for warp in op.parts:
            m.wake(warp)
        if self._head_ready():
            m.schedule(self)


def join_clocks(dst: dict[int, int], src: dict[int, int]) -> None:
    """``dst = max(dst, src)`` per component (happens-before clocks)."""
    for k, v in src.items():
        if dst.get(k, -1) < v:
            dst[k] = v


def check_alive(bar: Mbarrier, who) -> None:
    if bar.owner.exited:
        raise SimError(f"use after exit: {who} signals {bar.name}, whose CTA has exited (a multi-CTA kernel must "
                       "end with a cluster barrier)")
