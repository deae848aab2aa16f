"""Machine-side state of the simulated launch: CTAs, warps, register pools, and what a parked warp waits for."""

from __future__ import annotations

import numpy as np

from .. import walker as W
from .memory import SharedMemory, Tmem
from .sync import Mbarrier
from .units import AsyncQueue, StoreUnit, WarpgroupQueue, WgmmaOp

TMEM_LANE_QUARTER = 32  # tcgen05.ld: warp w of a warpgroup accesses TMEM lanes 32*(w%4) .. +31
WARPGROUP = 4  # warps per warpgroup (PTX ISA "Warpgroup")
# happens-before clock components of a warp with id g: 3g its program order (release epochs), 3g+1 its tcgen05 ops
# published by tcgen05.fence::before_thread_sync + a release, 3g+2 its MMAs completed (published by tcgen05.commit)
GEN, TC, DONE = 0, 1, 2
FENCE_DOC = 'PTX ISA "tcgen05 memory consistency model"'


class Who:
    """An op and the position of the warp that issued it, formatted only when a message needs it."""

    __slots__ = ("what", "where")

    def __init__(self, what: str, where: W.Where):
        self.what, self.where = what, where

    def __str__(self) -> str:
        return f"{self.what} by {self.where}"


class Cta:
    """One CTA: its shared memory, TMEM, mbarriers and warps."""

    def __init__(self, kernel, ctaid: int, smem_base: int):
        self.ctaid = ctaid
        self.rank = ctaid % kernel.cluster_size
        self.cluster = ctaid // kernel.cluster_size
        self.name = f"CTA {ctaid} (rank {self.rank})"
        reserved = [(*kernel.barrier_span, "mbarriers"),
                    (kernel.tmem_slot, kernel.tmem_slot + 4, "TMEM address slot")]
        self.smem = SharedMemory(kernel.smem_bytes, smem_base, reserved, self.name)
        self.tmem = Tmem(self.name) if kernel.is_sm100 else None
        self.bars = {(s.name, i): Mbarrier(f"{s.name}[{i}] of {self.name}", self)
                     for s in kernel.barriers for i in range(s.num)}
        self.warps: list[Warp] = []
        self.live = 0
        self.exited = False
        self._wgmma_queues: dict[int, WarpgroupQueue] = {}
        self.slot_stamp: tuple[int, int, int] | None = None  # tcgen05.alloc's (warp id, op number, epoch)
        self.regs = RegPool()

    def wgmma_queue(self, warpgroup: int) -> "WarpgroupQueue":
        return self._wgmma_queues.setdefault(warpgroup, WarpgroupQueue())


class RegPool:
    """A CTA's free registers for ``setmaxnreg`` and the warpgroups' pending ``setmaxnreg`` (PTX ISA setmaxnreg)."""

    def __init__(self):
        self.free = 0  # registers released by setmaxnreg.dec and not yet taken by an .inc
        self.groups: dict[int, RegGroup] = {}  # warpgroup -> its setmaxnreg still waiting for all four warps
        self.waiters: list = []


class RegGroup:
    """One warpgroup's ``setmaxnreg.sync.aligned``: its four warps meet, then the limit changes for all four."""

    def __init__(self, action: str, regs: int):
        self.action, self.regs = action, regs
        self.warps: list[Warp] = []
        self.done = False
        self.waiters: list = []


class Warp:
    """Machine-side state of one warp: its walker, scheduling state, async queues and ordering state.

    Ordering state (see the module docstring): ``vc`` the happens-before clock the warp acquired, ``tvc`` the
    part of it its tcgen05 ops see (copied at each ``tcgen05.fence::after_thread_sync``), ``epoch`` its release
    count, ``tc_ops`` its tcgen05 ops so far, ``tc_fenced`` the ops a ``before_thread_sync`` fence covers.
    """

    def __init__(self, cta: Cta, walker: W.WarpWalker, gid: int, nreg: int):
        self.cta, self.walker = cta, walker
        self.gid = gid
        self.nreg = nreg  # current per-thread register limit (setmaxnreg); 0 when the kernel has no .maxnreg
        self.prio = 0.0  # PCT priority
        self.vc: dict[int, int] = {}
        self.tvc: dict[int, int] = {}
        self.epoch = self.tc_ops = self.tc_fenced = 0
        self.ld_pending: int | None = None  # op number of its first tcgen05.ld not waited for (tcgen05.wait::ld)
        self.unwaited_at_fence: set[int] = set()  # op numbers of loads still pending at a before_thread_sync fence
        self.fence_step = -1  # scheduler step of the last tcgen05.fence::after_thread_sync
        self.unfenced_sync: str | None = None  # first thread synchronisation passed since that fence
        self.index = walker.warp
        self.gen = walker.run()
        self.reply = None
        self.pos = -1  # index in Machine.runnable, -1 when not runnable
        self.until = None  # predicate the warp is parked on
        self.blocked_on: Blocked | None = None  # what it is parked on, for re-polls and deadlock reports
        self.after_wait = None  # run once the wait it is parked on passes
        self.waiters: list[Warp] = []  # warps parked on this warp's own async groups (itself)
        self.done = False
        self.tc = AsyncQueue(self)
        self.wg_issued = self.wg_committed = 0
        self.wg_pending: list[tuple[int, WgmmaOp, str]] = []  # (group, op, accumulator) not yet waited for
        self.acc_written: set[str] = set()
        # bulk async groups per issuing thread (walker.thread(): None = every lane, else an Elect block)
        self.bulk_open: dict[object, list[StoreUnit]] = {}
        self.bulk_groups: dict[object, list[list[StoreUnit]]] = {}
        self.unfenced: list[np.ndarray] = []

    def who(self, what: str) -> Who:
        return Who(what, self.walker.where())


class Blocked:
    """What a parked warp waits for: the waitable, a text maker and its position."""

    __slots__ = ("waitable", "text", "where")

    def __init__(self, waitable, text, where: W.Where):
        self.waitable, self.text, self.where = waitable, text, where
