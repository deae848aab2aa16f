"""The simulated machine: a grid of CTAs whose warps run as coroutines under a seeded scheduler.

Every warp of every CTA is a :class:`~ptxgen.sim.walker.WarpWalker`
generator.  Time counts warp steps: each step resumes one runnable warp up
to its next event.  Asynchronous work completes *later* than its issue.
All draws come from one seeded ``random.Random``, so a (policy, seed) pair
is an interleaving.  Three scheduling policies:

* ``random``: the warp is drawn at random; each async unit gets a random
  latency (exponential, with a mean drawn per run from 1 to 128 steps, and
  one unit in ten a 20x straggler) and fires once due, before the next warp
  step; with no runnable warp, time jumps to the next due unit.
* ``latest``: the warp is drawn at random; an async unit fires only when no
  warp can run (the latest legal moment), the newest first, so the oldest
  pending unit waits longest (until the run cannot go on without it).  A
  window that needs a slow async op (a release before the reads it guards
  completed, an arrive nobody waits for still pending at exit) opens on
  every seed.
* ``pct``: PCT (Burckhardt, Kothari, Musuvathi, Nagarakatte, "A randomized
  scheduler with probabilistic guarantees of finding bugs", ASPLOS 2010):
  warps get distinct random priorities and the highest runnable one runs;
  at ``PCT_DEPTH - 1`` random steps (in ``[1, PCT_HORIZON)``) the running
  warp drops below all others; each async unit draws a priority in the
  warps' range and fires once it outranks every runnable warp.

The units:

* TMA loads (one unit per destination CTA): write the box into shared memory
  (128B swizzle, out-of-bounds zero fill), then ``complete_tx`` on the
  barrier (peer-bit-masked to the even rank for ``.cta_group::2``; each
  destination's own barrier for ``.multicast::cluster``);
* the tcgen05 queue of an issuing warp: MMAs complete in issue order and a
  ``tcgen05.commit`` arrives only when every MMA issued before it completed
  (PTX ISA "tcgen05.commit");
* the wgmma queue of a warpgroup, in issue order: its j-th wgmma is one
  tensor-core op that starts once all four warps issued it and completes for
  all four; ``wgmma.wait_group N`` returns when at most N of the warp's
  committed groups are pending (PTX ISA "wgmma.mma_async", "wgmma.wait_group");
* TMA stores: first their shared-memory read completes
  (``cp.async.bulk.wait_group.read``), then their global write (clipped at M, N).

A warp blocked on an mbarrier, a thread barrier or its own async groups is
parked and woken when the condition may hold; on resume it re-polls (like
``try_wait`` in a loop).  No runnable warp and no in-flight unit while some
warp has not exited is a deadlock.

Ordering instructions (issue 9) have meaning, and a missing one is a fault
even when the schedule happened to order the accesses:

* tcgen05 fences (PTX ISA "tcgen05 memory consistency model", "tcgen05.fence"):
  the machine keeps vector (happens-before) clocks.  Each warp has three
  components: its program order (bumped at each release), its tcgen05 ops,
  and its MMAs' completion.  mbarrier arrives and thread barriers release
  the warp's clock; passing a wait or a barrier acquires it.  A warp's
  tcgen05 ops see what it acquired only from its last
  ``tcgen05.fence::after_thread_sync`` on; a release publishes its tcgen05
  ops only up to its last ``tcgen05.fence::before_thread_sync`` (a
  ``tcgen05.ld`` only if ``tcgen05.wait::ld`` completed it before); a
  ``tcgen05.commit``'s arrive publishes the completion of the MMAs issued
  before it.  Checked: a ``tcgen05.ld`` must be ordered after the MMAs that
  write its TMEM cells (through a commit issued after them), an MMA after
  the last ``tcgen05.ld`` of the cells it writes, the TMEM address read
  after ``tcgen05.alloc``, ``tcgen05.dealloc`` after every TMEM access; and
  an MMA must not read operand bytes that a TMA load landed after its warp's
  last after_thread_sync fence.  A violation names the missing fence when
  the ordering exists but the fence is missing, else the unordered pair.
* ``wgmma.fence`` (PTX ISA "wgmma.fence"): a warp's first wgmma needs one
  before it, and a wgmma whose accumulator a non-wgmma op (a store, the
  epilogue's math) accessed since the warp's last fence is a fault.
* ``setmaxnreg`` (PTX ISA "setmaxnreg"): each warp starts at ``.maxnreg``;
  the four warps of a warpgroup meet at the same ``setmaxnreg`` (a
  different one, or a warp exiting without it, is a fault); ``.dec``
  returns registers to the CTA's pool, ``.inc`` blocks until the pool has
  them (never: a deadlock).  A wgmma whose live accumulator fragments (the
  ``n/2`` f32 per thread of each accumulator the Wgmma ops name) exceed the
  warp's current limit is a fault.
"""

from __future__ import annotations

import heapq
import random
from collections import deque

import numpy as np

from ..errors import SimError
from . import blockscaled
from . import walker as W
from .memory import GlobalTensors, SharedMemory, Tmem, box_index, kmajor_sw128_index
from .mma import umma_operand, umma_shape, wgmma_fragment, wgmma_operand
from .sync import Mbarrier, Rendezvous
from .workspace import Workspace

TMEM_LANE_QUARTER = 32  # tcgen05.ld: warp w of a warpgroup accesses TMEM lanes 32*(w%4) .. +31
WARPGROUP = 4  # warps per warpgroup (PTX ISA "Warpgroup")
POLICIES = ("random", "latest", "pct")
PCT_DEPTH = 3  # PCT bug depth d: d - 1 priority-change points per run
PCT_HORIZON = 4_000  # scheduler steps over which the change points are drawn
# happens-before clock components of a warp with id g: 3g its program order (release epochs), 3g+1 its tcgen05 ops
# published by tcgen05.fence::before_thread_sync + a release, 3g+2 its MMAs completed (published by tcgen05.commit)
GEN, TC, DONE = 0, 1, 2
_FENCE_DOC = 'PTX ISA "tcgen05 memory consistency model"'


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
        self.blocked_on: _Blocked | None = None  # what it is parked on, for re-polls and deadlock reports
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


# ------------------------------------------------------------------ asynchronous units


class TmaLoadUnit:
    """One destination CTA's share of a TMA load: lands the box, then complete_tx on its barrier."""

    __slots__ = ("dst", "handle", "idx", "box", "bar", "who", "issue_phase")

    def __init__(self, dst: Cta, handle: int, idx: np.ndarray, box: tuple, bar: Mbarrier, who: Who):
        self.dst, self.handle, self.idx, self.box, self.bar, self.who = dst, handle, idx, box, bar, who
        self.issue_phase = bar.phase

    def fire(self, m: "Machine") -> None:
        tensor, col, row, cols, rows = self.box
        data = m.glob.load_box(tensor, col, row, cols, rows)
        _check_alive(self.bar, self.who)
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
    against later commits, so it is its own async unit with its own latency (issue 9 finding 5).
    """

    __slots__ = ("bars", "who", "issuer", "clock")

    def __init__(self, bars: list, who: Who, issuer: Cta, clock: dict[int, int]):
        self.bars, self.who, self.issuer, self.clock = bars, who, issuer, clock

    def fire(self, m: "Machine") -> None:
        m.pending_arrives.discard(self)
        for bar in self.bars:
            _check_alive(bar, self.who)
            _join(bar.clock, self.clock)
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


# ------------------------------------------------------------------ the machine


class Machine:
    """All CTAs of one launch, the global tensors and the scheduler (see module docstring).

    Args:
        kernel: the Kernel IR.
        m, n, k: problem shape.
        a, b: bf16 bit patterns ``[m, k]``, ``[n, k]``.
        num_sms: SMs the persistent grid policy sees.
        schedule_seed: seeds the interleaving.
        smem_base: shared-window address of the dynamic shared memory (1024-aligned).
        poison: bf16 bits D starts filled with.
        policy: ``random``, ``latest`` or ``pct`` (see the module docstring).

    Raises:
        ValueError: an unknown policy.
    """

    def __init__(self, kernel, m: int, n: int, k: int, a: np.ndarray, b: np.ndarray, *, num_sms: int,
                 schedule_seed: int, smem_base: int, poison: int, b2: np.ndarray | None = None,
                 extra: dict[str, np.ndarray] | None = None, policy: str = "random"):
        if policy not in POLICIES:
            raise ValueError(f"schedule policy {policy!r}: one of {', '.join(POLICIES)}")
        self.policy = policy
        self.kernel, self.params = kernel, {"m": m, "n": n, "k": k}
        spec = kernel.launch
        self.maps = {name: (t.box[0], t.box[1], t.swizzle == "128B", t.elem_bytes) for name, t in spec.tensor_maps.items()}
        self.grid = spec.grid.grid_x(m, n, num_sms)
        self.glob = GlobalTensors(a, b, poison, b2, extra)
        self.smem_base = smem_base
        self.rng = random.Random(schedule_seed)
        self.mean_latency = self.rng.choice((1.0, 8.0, 32.0, 128.0))
        self.now = 0
        self.runnable: list[Warp] = []
        self.due: list[tuple[int, float, object]] = []  # heap of (due step, tie-break, async unit)
        self.rendezvous: dict[tuple, Rendezvous] = {}
        self.cluster_syncs: dict[int, int] = {}  # cluster -> completed cluster barriers
        self.bulk_seq = 0  # bulk async-group commits so far (orders groups across threads)
        self.pending_arrives: set[CommitArriveUnit] = set()
        self.steps = self.ops = 0
        self.fingerprint = 0  # hash of the scheduler's choices: equal fingerprints, same interleaving
        ws = spec.workspace
        self.ws = Workspace(ws, spec.grid.cluster_tiles(m, n) * ws.ctas_per_tile) if ws is not None else None
        self.ctas = [Cta(kernel, c, smem_base) for c in range(self.grid)]
        self.warps: list[Warp] = []  # by warp id
        self.tc_who: dict[tuple[int, int], Who] = {}  # (warp id, tcgen05 op number) -> the op, for messages
        program = W.Program(kernel)
        for cta in self.ctas:
            for w in range(kernel.threads // W.LANES):
                walker = W.WarpWalker(program, ctaid=cta.ctaid, nctaid=self.grid, cluster_size=kernel.cluster_size,
                                      warp=w, smem_base=smem_base, params=self.params)
                warp = Warp(cta, walker, len(self.warps), kernel.maxnreg)
                self.warps.append(warp)
                cta.warps.append(warp)
                self._make_runnable(warp)
            cta.live = len(cta.warps)
        self._seq = 0  # async units scheduled so far (the latest policy completes the newest first)
        if policy == "pct":  # PCT (Burckhardt et al., ASPLOS 2010): distinct random priorities, d - 1 change points
            prios = list(range(len(self.warps)))
            self.rng.shuffle(prios)
            for warp, p in zip(self.warps, prios):
                warp.prio = PCT_DEPTH + p
            self.change_points = sorted(self.rng.sample(range(1, PCT_HORIZON), PCT_DEPTH - 1))
        self._handlers = {
            W.InitEv: self._init, W.ArriveEv: self._arrive, W.WaitEv: self._wait, W.FenceInitEv: self._fence_init,
            W.TmaLoadEv: self._tma_load, W.TmaStoreEv: self._tma_store, W.BulkCommitEv: self._bulk_commit,
            W.BulkWaitEv: self._bulk_wait, W.FenceProxyEv: self._fence_proxy, W.AllocEv: self._alloc,
            W.DeallocEv: self._dealloc, W.TmemBaseEv: self._tmem_base, W.UmmaEv: self._umma, W.CommitEv: self._commit,
            W.TmemLoadEv: self._tmem_load, W.WgmmaEv: self._wgmma, W.WgmmaCommitEv: self._wgmma_commit,
            W.WgmmaWaitEv: self._wgmma_wait, W.StSharedEv: self._st_shared, W.StGlobalEv: self._st_global,
            W.SyncEv: self._sync, W.SetMaxNRegEv: self._setmaxnreg,
            W.TmemCopyEv: lambda w, ev: blockscaled.tmem_copy(self, w, ev),
            W.UmmaBlockScaledEv: lambda w, ev: blockscaled.umma_block_scaled(self, w, ev),
            W.WsStoreEv: self._ws_store, W.WsLoadEv: self._ws_load, W.WsAtomicEv: self._ws_atomic,
        }

    # ---------------------------------------------------------------- scheduling

    def run(self, max_steps: int) -> None:
        """Run to completion; SimError on any fault, on deadlock, or after ``max_steps`` steps."""
        rng, runnable, due, policy = self.rng, self.runnable, self.due, self.policy
        changes = self.change_points if policy == "pct" else []
        while runnable or due:
            self.steps += 1
            if self.steps > max_steps:
                raise SimError(f"step limit: {max_steps} scheduler steps without finishing (livelock?)")
            if policy == "pct":
                best = max(runnable, key=_prio) if runnable else None
                fire = due and (best is None or -due[0][0] > best.prio)
            else:
                fire = due and (not runnable or (policy == "random" and due[0][0] <= self.now))
            if fire:
                when, tie, unit = heapq.heappop(due)
                if policy == "random":
                    self.now = max(self.now, when)
                self.fingerprint = (self.fingerprint * 1000003 + 2 * int(tie * 65521) + 1) & 0xFFFFFFFFFFFF
                unit.fire(self)
            else:
                i = best.pos if policy == "pct" else rng.randrange(len(runnable))
                self.fingerprint = (self.fingerprint * 1000003 + 2 * i) & 0xFFFFFFFFFFFF
                self.now += 1
                w = runnable[i]
                self._step(w)
                if changes and self.steps >= changes[0]:  # a PCT change point: the running warp drops lowest
                    w.prio = -len(changes)
                    changes.pop(0)
        if any(not w.done for c in self.ctas for w in c.warps):
            raise SimError(self._deadlock_report())
        self._check_final_barriers()
        if self.ws is not None:
            self.ws.check_exit()

    def schedule(self, unit) -> None:
        """Queue async ``unit`` (see the module docstring): ``random`` draws its latency; ``latest`` orders it
        newest first (it fires only when no warp can run); ``pct`` draws a priority among the warps' initial ones."""
        self._seq += 1
        if self.policy == "random":
            delay = self.rng.expovariate(1.0 / self.mean_latency)
            if self.rng.random() < 0.1:
                delay *= 20
            key = self.now + int(delay)
        elif self.policy == "latest":
            key = -self._seq
        else:
            key = -(PCT_DEPTH + self.rng.random() * len(self.warps))
        heapq.heappush(self.due, (key, self.rng.random(), unit))

    def _make_runnable(self, w: Warp) -> None:
        w.pos = len(self.runnable)
        self.runnable.append(w)

    def _unrun(self, w: Warp) -> None:
        last = self.runnable.pop()
        if last is not w:
            self.runnable[w.pos] = last
            last.pos = w.pos
        w.pos = -1

    def park(self, w: Warp, blocked: "_Blocked", until) -> None:
        """Block ``w`` on ``blocked.waitable`` until ``until()`` holds."""
        w.until, w.blocked_on = until, blocked
        blocked.waitable.waiters.append(w)
        self._unrun(w)

    def wake(self, waitable) -> None:
        """Re-check the warps parked on ``waitable``."""
        if not waitable.waiters:
            return
        still = []
        for w in waitable.waiters:
            if w.until():
                self._make_runnable(w)
            else:
                still.append(w)
        waitable.waiters = still

    def _step(self, w: Warp) -> None:
        if w.until is not None:
            if not w.until():  # woken, but the condition no longer holds (re-poll, like try_wait)
                self.park(w, w.blocked_on, w.until)
                return
            w.until = w.blocked_on = None
            if w.after_wait is not None:
                w.after_wait()
                w.after_wait = None
        try:
            ev = w.gen.send(w.reply)
        except StopIteration:
            self._exit(w)
            return
        except W.IRFault as exc:
            raise SimError(f"{exc} ({w.walker.where()})") from None
        w.reply = None
        self.ops += 1
        if w.walker.marks:  # fences and waits the walker passed on its way to this event (no event of their own)
            for kind in w.walker.marks:
                self._tcgen_mark(w, kind)
            w.walker.marks.clear()
        self._handlers[type(ev)](w, ev)

    # ---------------------------------------------------------------- barriers

    def _cta(self, w: Warp, rank: int) -> Cta:
        return self.ctas[w.cta.cluster * self.kernel.cluster_size + rank]

    def _bar(self, w: Warp, ref: W.BarRef, what: object) -> Mbarrier:
        """The barrier ``ref`` names, checked initialized and visible to ``w``.  Raises SimError."""
        cta = self._cta(w, ref.rank)
        bar = cta.bars.get((ref.name, ref.index))
        if bar is None:
            raise SimError(f"no such barrier: {what} by {w.walker.where()} names {ref.name}[{ref.index}]; the kernel "
                           f"has {', '.join(f'{s.name}[{s.num}]' for s in self.kernel.barriers)}")
        if cta.exited:
            raise SimError(f"use after exit: {what} by {w.walker.where()} touches {bar.name}, whose CTA has exited "
                           "(a multi-CTA kernel must end with a cluster barrier)")
        if not bar.initialized:
            raise SimError(f"uninitialized barrier: {what} by {w.walker.where()} uses {bar.name} before mbarrier.init")
        if cta is not w.cta and not bar.cluster_visible:
            raise SimError(f"init not visible: {what} by {w.walker.where()} uses remote {bar.name} before its init was "
                           "made visible to the cluster (fence.mbarrier_init.release.cluster, then a cluster barrier)")
        if cta is w.cta and w is not bar.init_warp and not bar.cta_visible:
            raise SimError(f"init not visible: {what} by {w.walker.where()} uses {bar.name} before a thread barrier "
                           "ordered it after the mbarrier.init")
        return bar

    def _init(self, w: Warp, ev: W.InitEv) -> None:
        bar = w.cta.bars.get((ev.bar.name, ev.bar.index))
        if bar is None:
            raise SimError(f"no such barrier: MbarrierInit by {w.walker.where()} names {ev.bar.name}[{ev.bar.index}]")
        if bar.initialized:
            raise SimError(f"double init: MbarrierInit by {w.walker.where()} re-initializes {bar.name}")
        bar.init(ev.count, w)

    def _fence_init(self, w: Warp, ev) -> None:
        for bar in w.cta.bars.values():
            if bar.init_warp is w:
                bar.fenced = True

    def _arrive(self, w: Warp, ev: W.ArriveEv) -> None:
        kind = "arrive.expect_tx" if ev.tx else "arrive"
        bar = self._bar(w, ev.bar, f"mbarrier.{kind}")
        _join(bar.clock, self._release(w))
        if bar.arrive(ev.lanes, ev.tx, f"{w.walker.where().who} {kind}"):
            self.wake(bar)

    def _wait(self, w: Warp, ev: W.WaitEv) -> None:
        bar = self._bar(w, ev.bar, f"MbarrierWait ({ev.role})")
        what = f"the MbarrierWait ({ev.role}) on {bar.name}"
        if bar.passed(ev.parity):
            self._acquire(w, bar.done_clock, what)
            return
        where = w.walker.where()
        self.park(w, _Blocked(bar, lambda: f"MbarrierWait ({ev.role}) for the phase of parity {ev.parity} of "
                                           f"{bar.describe()}", where),
                  lambda: bar.passed(ev.parity))
        w.after_wait = lambda: self._acquire(w, bar.done_clock, what)

    # ---------------------------------------------------------------- happens-before clocks

    def _release(self, w: Warp) -> dict[int, int]:
        """The clock a release by ``w`` publishes (its knowledge, its epoch, its fenced tcgen05 ops); next epoch."""
        clock = dict(w.vc)
        clock[3 * w.gid + GEN] = w.epoch
        clock[3 * w.gid + TC] = w.tc_fenced
        w.epoch += 1
        return clock

    def _acquire(self, w: Warp, clock: dict[int, int], what: str) -> None:
        """``w`` passed a thread synchronisation (``what``) that publishes ``clock``; its tcgen05 ops see it only
        after a ``tcgen05.fence::after_thread_sync``."""
        _join(w.vc, clock)
        if w.unfenced_sync is None:
            w.unfenced_sync = what

    def _tcgen_mark(self, w: Warp, kind: str) -> None:
        """``before`` (``tcgen05.fence::before_thread_sync``): the next release publishes the warp's tcgen05 ops so
        far, up to its first ``tcgen05.ld`` not yet waited for; ``wait_ld`` (``tcgen05.wait::ld``): its loads are
        complete; ``after`` (``::after_thread_sync``): its tcgen05 ops from now on see what its thread
        synchronisations acquired."""
        if kind == "wait_ld":
            w.ld_pending = None
        elif kind == "before":
            w.tc_fenced = w.tc_ops if w.ld_pending is None else w.ld_pending - 1
            if w.ld_pending is not None:
                w.unwaited_at_fence.update(range(w.ld_pending, w.tc_ops + 1))
        else:
            w.tvc = dict(w.vc)
            w.fence_step = self.steps
            w.unfenced_sync = None

    def _tc_op(self, w: Warp, who: Who) -> int:
        """Number the warp's next tcgen05 op (``who``) and return it."""
        w.tc_ops += 1
        self.tc_who[(w.gid, w.tc_ops)] = who
        return w.tc_ops

    def _unordered(self, w: Warp, gid: int, comp: int, seq: int, epoch: int) -> str | None:
        """Whether the tcgen05 view of ``w`` orders op ``seq`` of warp ``gid`` (component ``comp``) before it:
        None if so, else the missing link: ``after`` (w knows it but passed no after_thread_sync fence since),
        ``before`` (the other warp released after the op, but without before_thread_sync), or ``order``; the caller
        refines ``before`` to ``wait_ld`` for a load that was still pending at the fence."""
        if gid == w.gid or w.tvc.get(3 * gid + comp, -1) >= seq:
            return None
        if w.vc.get(3 * gid + comp, -1) >= seq:
            return "after"
        if epoch >= 0 and w.vc.get(3 * gid + GEN, -1) >= epoch:
            return "before"
        return "order"

    def _order_fault(self, link: str, w: Warp, who: Who, other: Who, what: str) -> SimError:
        """The fault of ``who`` (by ``w``) not being ordered against ``other``; ``what`` (with ``{other}``) is what
        ``who`` may then do."""
        may = what.format(other=other)
        if link == "after":
            return SimError(f"missing tcgen05.fence::after_thread_sync: {who} follows {w.unfenced_sync} with no "
                            f"tcgen05.fence::after_thread_sync between them, so it is not ordered after that "
                            f"synchronisation ({_FENCE_DOC}) and may {may}")
        if link == "wait_ld":
            return SimError(f"missing tcgen05.wait::ld: {other} had not completed (no tcgen05.wait::ld) at its warp's "
                            "tcgen05.fence::before_thread_sync, so the release after that fence does not order the "
                            f"read ({_FENCE_DOC}; PTX ISA tcgen05.wait) and {who} may {may}")
        if link == "before":
            return SimError(f"missing tcgen05.fence::before_thread_sync: {other} is followed by a thread "
                            f"synchronisation (arrive or barrier) with no tcgen05.fence::before_thread_sync between "
                            f"them, so it is not ordered before that synchronisation ({_FENCE_DOC}) and {who} may "
                            f"{may}")
        return SimError(f"unordered tcgen05 access: {who} may {may}: nothing orders the two (an MMA is ordered "
                        "before a reader by a tcgen05.commit issued after it whose arrive the reader waits for; a read "
                        "before an MMA by tcgen05.fence::before_thread_sync and a release the MMA's warp acquires; "
                        f"each followed by tcgen05.fence::after_thread_sync; {_FENCE_DOC})")

    # ---------------------------------------------------------------- thread barriers

    def _sync(self, w: Warp, ev: W.SyncEv) -> None:
        cta = w.cta
        if ev.kind == "cluster":
            key, name = ("cluster", cta.cluster), f"the cluster barrier of cluster {cta.cluster}"
        else:
            key, name = (ev.kind, cta.ctaid, ev.id), f"bar.sync {ev.id} of {cta.name}"
        rv = self.rendezvous.get(key)
        if rv is None:
            rv = self.rendezvous[key] = Rendezvous(name, ev.threads)
        _join(rv.clock, self._release(w))
        released = rv.arrive(w, ev.threads, str(w.walker.where()))
        if released is None:
            self.park(w, _Blocked(rv, lambda: f"{rv.name}: {len(rv.arrived)} of {rv.warps} warps arrived",
                                  w.walker.where()), lambda: w not in rv.arrived)
            return
        clock, rv.clock = rv.clock, {}
        for x in released:
            self._acquire(x, clock, rv.name)
        self._publish_inits(ev.kind, cta)
        if self.ws is not None:
            self.ws.barrier(released)
        if ev.kind == "cluster":
            self.cluster_syncs[cta.cluster] = self.cluster_syncs.get(cta.cluster, 0) + 1
        self.wake(rv)

    def _publish_inits(self, kind: str, cta: Cta) -> None:
        """A completed thread barrier orders earlier mbarrier.inits before later uses (cluster: fenced inits)."""
        ctas = [c for c in self.ctas if c.cluster == cta.cluster] if kind == "cluster" else [cta]
        for c in ctas:
            for bar in c.bars.values():
                if bar.initialized:
                    bar.cta_visible = True
                    bar.cluster_visible |= kind == "cluster" and bar.fenced

    # ---------------------------------------------------------------- TMA

    def _box_index(self, tensor: str, off: int, who: Who) -> tuple[np.ndarray, int, int, int]:
        cols, rows, swizzled, eb = self.maps[tensor]
        align = 1024 if swizzled else 128
        if (self.smem_base + off) % align:
            raise SimError(f"misaligned: {who} uses smem+{off:#x}; a TMA {'128B-swizzled ' if swizzled else ''}box "
                           f"needs a {align}-byte aligned shared address (PTX_FACTS: 128B swizzle destinations "
                           "are 1024-byte aligned)")
        if swizzled and cols * eb != 128:
            raise SimError(f"unsupported box: {who}: a 128B-swizzled box of {cols * eb} B per row; "
                           "the simulator models 128-byte rows")
        return box_index(self.smem_base + off, rows, cols * eb, swizzled, self.smem_base), cols, rows, eb

    def _tma_load(self, w: Warp, ev: W.TmaLoadEv) -> None:
        who = w.who(f"TmaLoad {ev.tensor} (col {ev.col}, row {ev.row})")
        idx, cols, rows, eb = self._box_index(ev.tensor, ev.dst, who)
        for _ in range(ev.lanes):
            for rank, ref in zip(ev.dst_ranks, ev.bars):
                dst = self._cta(w, rank)
                bar = self._bar(w, ref, who)
                handle = dst.smem.begin_async_write(ev.dst, ev.dst + rows * cols * eb, who)
                self.schedule(TmaLoadUnit(dst, handle, idx, (ev.tensor, ev.col, ev.row, cols, rows), bar, who))

    def _tma_store(self, w: Warp, ev: W.TmaStoreEv) -> None:
        who = w.who(f"TmaStore {ev.tensor} (col {ev.col}, row {ev.row})")
        idx, cols, rows, _ = self._box_index(ev.tensor, ev.src, who)
        smem = w.cta.smem
        for _ in range(ev.lanes):
            handle = smem.begin_async_read(idx, who)
            box = smem.data[idx].view(np.uint16).reshape(rows, cols)
            unit = StoreUnit(w, handle, box, ev.col, ev.row)
            w.bulk_open.setdefault(ev.thread, []).append(unit)
            self.schedule(unit)

    def _bulk_commit(self, w: Warp, ev) -> None:
        self.bulk_seq += 1
        w.bulk_groups.setdefault(ev.thread, []).append((self.bulk_seq, w.bulk_open.pop(ev.thread, [])))

    def _bulk_wait(self, w: Warp, ev: W.BulkWaitEv) -> None:
        """Each waiting thread waits for its own groups (PTX ISA "cp.async.bulk.wait_group": the executing
        thread's bulk async-groups).  A whole-warp wait covers every thread's groups, counted as if one lane
        committed them all (elect.sync may have picked the same lane each time); an elected wait covers only
        the groups committed under the same Elect (another Elect may have picked another lane)."""
        # forget completed groups older than every pending one (a newer group completing first must still
        # count towards "at most n pending" until the older ones complete)
        pending = [seq for gs in w.bulk_groups.values() for seq, units in gs if not all(u.done for u in units)]
        oldest = min(pending, default=self.bulk_seq + 1)
        for key, gs in w.bulk_groups.items():
            w.bulk_groups[key] = [g for g in gs if g[0] >= oldest]
        if ev.thread is None:
            groups = sorted(g for gs in w.bulk_groups.values() for g in gs)
        else:
            groups = list(w.bulk_groups.get(ev.thread, []))
        older = [units for _, units in groups[: max(0, len(groups) - ev.n)]]

        def ready() -> bool:
            return all((u.read_done if ev.read else u.done) for g in older for u in g)

        if not ready():
            what = "cp.async.bulk.wait_group" + (".read" if ev.read else "")
            self.park(w, _Blocked(w, lambda: f"{what} {ev.n}: {len(groups)} bulk groups pending",
                                  w.walker.where()), ready)

    # ---------------------------------------------------------------- shared / global stores

    def _st_shared(self, w: Warp, ev: W.StSharedEv) -> None:
        if ev.nbytes not in (4, 8, 16) or (ev.addrs % ev.nbytes).any():
            raise SimError(f"misaligned: StSharedBf16 by {w.walker.where()} stores {ev.nbytes} B at smem offsets "
                           f"{sorted(set((ev.addrs[ev.addrs % ev.nbytes != 0]).tolist()))[:4]}; st.shared.v of "
                           f"{ev.nbytes} B needs {ev.nbytes}-byte alignment")
        idx = (ev.addrs[:, None] + np.arange(ev.nbytes)).ravel()
        w.cta.smem.generic_write(idx, ev.data.ravel(), w.who("StSharedBf16"))
        w.unfenced.append(idx)

    def _fence_proxy(self, w: Warp, ev) -> None:
        if w.unfenced:
            w.cta.smem.fence_proxy_async(np.concatenate(w.unfenced))
            w.unfenced = []

    def _st_global(self, w: Warp, ev: W.StGlobalEv) -> None:
        m, n = self.glob.d.shape
        cols = ev.cols[:, None] + np.arange(ev.values.shape[1])
        rows = np.broadcast_to(ev.rows[:, None], cols.shape)
        ok = (rows < m) & (cols < n)
        self.glob.d[rows[ok], cols[ok]] = ev.values[ok]

    # ---------------------------------------------------------------- split-K workspace (global memory)

    def _ws_store(self, w: Warp, ev: W.WsStoreEv) -> None:
        self.ws.store(w, ev.offsets, ev.values, w.who("StGlobalF32"))

    def _ws_load(self, w: Warp, ev: W.WsLoadEv) -> None:
        w.reply = self.ws.load(w, ev.offsets, w.who("LdGlobalF32"))

    def _ws_atomic(self, w: Warp, ev: W.WsAtomicEv) -> None:
        ws, who = self.ws, w.who(ev.op.describe())
        if ev.lanes != 1:
            raise SimError(f"{who}: {ev.lanes} threads run a split-K counter op; one thread does (Elect)")
        if ev.kind == "red":
            ws.red(w, ev.offset, ev.value, ev.sem, who)
            self.wake(ws)
        elif ev.kind == "store":
            ws.set(ev.offset, ev.value, who)
            self.wake(ws)
        elif ws.value(ev.offset) == ev.value:
            ws.acquire(w, ev.offset, ev.sem)
        else:
            ws._counter(ev.offset, who)
            self.park(w, _Blocked(ws, lambda: f"{ev.op.describe()}: the counter holds {ws.value(ev.offset)}",
                                  w.walker.where()), lambda: ws.value(ev.offset) == ev.value)
            w.after_wait = lambda: ws.acquire(w, ev.offset, ev.sem)

    # ---------------------------------------------------------------- TMEM

    def _alloc(self, w: Warp, ev: W.AllocEv) -> None:
        tmem = w.cta.tmem
        if ev.cols < 32 or ev.cols > Tmem.COLS or ev.cols & (ev.cols - 1):
            raise SimError(f"bad TMEM allocation: {w.walker.where()} allocates {ev.cols} columns; tcgen05.alloc "
                           "takes a power of two in [32, 512]")
        if self.kernel.cta_group == 2 and not self.cluster_syncs.get(w.cta.cluster):
            raise SimError(f"paired TMEM allocation before the cluster is known running: {w.walker.where()} issues "
                           "tcgen05.alloc.cta_group::2 before any cluster barrier completed (PTX ISA tcgen05.alloc: "
                           "the peer CTA must be running)")
        if tmem.cols:
            raise SimError(f"double TMEM allocation: {w.walker.where()} allocates again in {w.cta.name}")
        tmem.cols = ev.cols
        w.cta.smem.internal_write(self.kernel.tmem_slot, np.array([0], dtype=np.uint32).view(np.uint8))
        w.cta.slot_stamp = (w.gid, self._tc_op(w, w.who("TmemAlloc")), w.epoch)

    def _tmem_base(self, w: Warp, ev) -> None:
        who = w.who("TmemBase")
        raw = w.cta.smem.generic_read(self.kernel.tmem_slot, self.kernel.tmem_slot + 4, who)
        if w.cta.slot_stamp is not None:  # the address tcgen05.alloc wrote (PTX ISA tcgen05.alloc: fence pattern)
            gid, seq, epoch = w.cta.slot_stamp
            link = self._unordered(w, gid, TC, seq, epoch)
            if link:
                raise self._order_fault(link, w, who, self.tc_who[(gid, seq)],
                                        "read the TMEM address slot before {other} wrote it")
        w.reply = int(raw.view(np.uint32)[0])

    def _dealloc(self, w: Warp, ev: W.DeallocEv) -> None:
        cta, tmem = w.cta, w.cta.tmem
        where = w.walker.where()
        if ev.taddr != 0 or ev.cols != tmem.cols:
            raise SimError(f"bad TMEM dealloc: {where} frees {ev.cols} columns at {ev.taddr:#x}; the allocation is "
                           f"{tmem.cols} columns at 0x0")
        if tmem.busy():
            raise SimError(f"TMEM dealloc while busy: {where} frees TMEM of {cta.name} while MMAs writing it are in flight")
        who = w.who("TmemDealloc")
        self._check_ordered(w, who, tmem.stamps("wr"), DONE, "free TMEM before {other} completes")
        self._check_ordered(w, who, tmem.stamps("rd"), TC, "free TMEM before {other} completes")
        if self.kernel.cta_group == 2:
            peer = self._cta(w, cta.rank ^ 1)
            if not peer.tmem.cols:
                raise SimError(f"TMEM dealloc before peer alloc: {where} frees TMEM of {cta.name} before {peer.name} "
                               "allocated (cta_group::2 needs a cluster barrier between alloc and dealloc)")
        tmem.freed = True

    def _tmem_load(self, w: Warp, ev: W.TmemLoadEv) -> None:
        lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
        quarter = TMEM_LANE_QUARTER * (w.index % 4)
        who = w.who(f"TmemLoad 32x32b.x{ev.ncols}")
        if lane != quarter:
            raise SimError(f"TMEM lane access: {who} reads TMEM lanes [{lane}, {lane + 32}); warp {w.index} may "
                           f"access lanes [{quarter}, {quarter + 32}) only (PTX ISA tcgen05.ld: warp w%4 of a warpgroup)")
        tmem = w.cta.tmem
        if tmem.cols and not tmem.freed:  # (out-of-range accesses are reported by Tmem.read)
            self._check_ordered(w, who, tmem.stamps("wr", lane, col, 32, ev.ncols), DONE,
                                f"read TMEM of {w.cta.name} columns [{col}, {col + ev.ncols}) before {{other}} writing "
                                "them completes")
        w.reply = tmem.read(lane, col, ev.ncols, who)
        seq = self._tc_op(w, who)
        tmem.stamp_read(lane, col, ev.ncols, w.gid, seq, w.epoch)
        if w.ld_pending is None:
            w.ld_pending = seq

    def _check_ordered(self, w: Warp, who: Who, stamps: list[tuple], comp: int, what: str) -> None:
        """Raise the ordering fault of the first stamp (warp id, op number[, epoch]) the tcgen05 view of ``w``
        does not order before ``who``."""
        for gid, seq, *epoch in stamps:
            link = self._unordered(w, gid, comp, seq, epoch[0] if epoch else -1)
            if link == "before" and seq in self.warps[gid].unwaited_at_fence:
                link = "wait_ld"
            if link:
                raise self._order_fault(link, w, who, self.tc_who[(gid, seq)], what)

    # ---------------------------------------------------------------- tcgen05.mma

    def _operand_rows(self, cta: Cta, start: int, sbo: int, rows: int, who: Who) -> tuple[np.ndarray, int]:
        idx = kmajor_sw128_index(start, rows, sbo, self.smem_base)
        handle = cta.smem.begin_async_read(idx, who)
        return cta.smem.bf16(idx), handle

    def _umma(self, w: Warp, ev: W.UmmaEv) -> None:
        kernel, cta = self.kernel, w.cta
        who = w.who("Umma")
        if ev.lanes != 1:
            raise SimError(f"tcgen05.mma issued by {ev.lanes} threads: {who}; one thread issues it (Elect)")
        group = kernel.cta_group
        if group == 2 and cta.rank % 2:
            raise SimError(f"tcgen05.mma.cta_group::2 issued by the odd CTA of the pair: {who}")
        m_total, n_total = umma_shape(ev.idesc, who)
        if m_total != 128 * group:
            raise SimError(f"unsupported MMA shape: {who}: M={m_total} with cta_group::{group}; the simulator "
                           f"models M = 128 rows per CTA")
        a, b = umma_operand(ev.a_desc, who, "A"), umma_operand(ev.b_desc, who, "B")
        ctas = [cta, self._cta(w, cta.rank ^ 1)] if group == 2 else [cta]
        lane, col = ev.d >> 16, ev.d & 0xFFFF
        a_vals, b_vals, handles = [], [], []
        for c in ctas:  # A: each CTA's own 128 rows; B: N/group rows from each CTA, leader's first
            va, ha = self._operand_rows(c, a.start, a.sbo, 128, who)
            vb, hb = self._operand_rows(c, b.start, b.sbo, n_total // group, who)
            a_vals.append(va)
            b_vals.append(vb)
            handles += [(c, ha), (c, hb)]
            self._check_landed(w, who, c, a.start, a.sbo, 128)
            self._check_landed(w, who, c, b.start, b.sbo, n_total // group)
        seq = self._tc_op(w, who)
        for c in ctas:
            c.tmem.begin_write(lane, col, 128, n_total, who)
            self._check_ordered(w, who, c.tmem.stamps("rd", lane, col, 128, n_total), TC,
                                f"overwrite TMEM of {c.name} columns [{col}, {col + n_total}) while {{other}} still reads "
                                "them")
            c.tmem.stamp_write(lane, col, 128, n_total, w.gid, seq)
        b_t = np.ascontiguousarray(np.concatenate(b_vals).T)  # (a contiguous right operand keeps BLAS fast)

        def complete(m: Machine) -> None:
            for c, av in zip(ctas, a_vals):
                c.tmem.end_write(lane, col, av @ b_t, ev.accumulate, who)
            for c, h in handles:
                c.smem.end_async_read(h)

        w.tc.push(self, complete)

    def _check_landed(self, w: Warp, who: Who, cta: Cta, start: int, sbo: int, rows: int) -> None:
        """An MMA operand's bytes must have landed before the issuing warp's last after_thread_sync fence: bytes
        landed since are ordered before the MMA only through a thread synchronisation the fence did not follow."""
        idx = kmajor_sw128_index(start, rows, sbo, self.smem_base)
        landed = int(cta.smem.landed[idx].max())
        if landed > w.fence_step:
            off = int(idx.flat[int(np.argmax(cta.smem.landed[idx]))])
            if w.unfenced_sync is None:  # no wait since: the stage was refilled under the reader
                raise SimError(f"write after read: {who} reads smem {off:#x} of {cta.name}, which a TMA load refilled "
                               "after the warp's last wait (and tcgen05.fence::after_thread_sync) for it: the refill "
                               "was not held back until this read (consumer release before its last read?)")
            raise SimError(f"missing tcgen05.fence::after_thread_sync: {who} reads smem {off:#x} of {cta.name}, which "
                           f"a TMA load landed after the warp's last tcgen05.fence::after_thread_sync; since then it "
                           f"passed {w.unfenced_sync} but no fence, so the MMA is not ordered after that wait and may "
                           f"read the stage before the data lands ({_FENCE_DOC})")

    def _commit(self, w: Warp, ev: W.CommitEv) -> None:
        who = w.who("UmmaCommit")
        bars = [self._bar(w, ref, who) for ref in ev.bars]
        clock = self._release(w)  # the arrive fires once the warp's earlier tcgen05 ops completed
        clock[3 * w.gid + TC] = clock[3 * w.gid + DONE] = self._tc_op(w, who)

        def complete(m: Machine) -> None:
            unit = CommitArriveUnit(bars, who, w.cta, clock)
            m.pending_arrives.add(unit)
            m.schedule(unit)

        for _ in range(ev.lanes):
            w.tc.push(self, complete)

    # ---------------------------------------------------------------- wgmma

    def _wgmma(self, w: Warp, ev: W.WgmmaEv) -> None:
        who = w.who(f"Wgmma m64n{ev.n}k16 {ev.acc}")
        a, b = wgmma_operand(ev.a_desc, who, "A"), wgmma_operand(ev.b_desc, who, "B")
        q = w.index % 4  # this warp's 16 rows of the m64 tile
        smem = w.cta.smem
        idx_a = kmajor_sw128_index(a.start, 64, a.sbo, self.smem_base)[16 * q: 16 * q + 16]
        ha = smem.begin_async_read(idx_a, who)
        a_vals = smem.bf16(idx_a)
        b_vals, hb = self._operand_rows(w.cta, b.start, b.sbo, ev.n, who)
        b_t = np.ascontiguousarray(b_vals.T)
        if ev.accumulate and ev.acc not in w.acc_written:
            raise SimError(f"register read before write: {who} accumulates into {ev.acc}, which no wgmma wrote "
                           "(scale-d set on the first k-step?)")
        if not w.walker.wgmma_fenced:
            raise SimError(f"missing wgmma.fence: {who} is the warp's first wgmma and no wgmma.fence precedes it "
                           "(PTX ISA wgmma.fence: required before the first wgmma.mma_async of a warpgroup)")
        if ev.acc in w.walker.touched:
            raise SimError(f"missing wgmma.fence: {who} accesses accumulator {ev.acc}, which {w.walker.touched[ev.acc]} "
                           "accessed since the warp's last wgmma.fence (PTX ISA wgmma.fence: required between a "
                           "register access and a wgmma.mma_async that accesses the same registers)")
        w.acc_written.add(ev.acc)
        if w.nreg:
            live = {acc: w.walker.regs[acc].shape[1] for acc in sorted(w.acc_written)}
            if sum(live.values()) > w.nreg:
                frags = ", ".join(f"{a}: {r}" for a, r in live.items())
                raise SimError(f"register budget: {who}: the warp's live accumulator fragments need "
                               f"{sum(live.values())} registers per thread ({frags}) but its limit is {w.nreg} "
                               f"(.maxnreg {self.kernel.maxnreg}, then setmaxnreg)")
        rows, cols = wgmma_fragment(ev.n)
        regs = w.walker.regs

        def piece() -> None:
            c = (a_vals @ b_t)[rows, cols]
            regs[ev.acc] = regs[ev.acc] + c if ev.accumulate else c
            smem.end_async_read(ha)
            smem.end_async_read(hb)

        queue = w.cta.wgmma_queue(w.index // 4)
        op = queue.join(self, w.wg_issued, w, piece)
        w.wg_issued += 1
        w.wg_pending.append((w.wg_committed, op, ev.acc))
        w.walker.busy[ev.acc] = "a wgmma writing it is not covered by a wgmma.wait_group"

    def _wgmma_commit(self, w: Warp, ev) -> None:
        w.wg_committed += 1

    def _wgmma_wait(self, w: Warp, ev: W.WgmmaWaitEv) -> None:
        """``wgmma.wait_group N``: the warp's committed groups but the N most recent are complete."""
        oldest_allowed = w.wg_committed - ev.n

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
        self.park(w, _Blocked(w, lambda: f"wgmma.wait_group {ev.n}: "
                                         f"{sum(not op.done for _, op, _ in w.wg_pending)} wgmmas in flight",
                              w.walker.where()), ready)
        w.after_wait = cover

    # ---------------------------------------------------------------- setmaxnreg

    def _setmaxnreg(self, w: Warp, ev: W.SetMaxNRegEv) -> None:
        """``setmaxnreg`` (PTX ISA setmaxnreg): ``.sync.aligned`` over the warpgroup, whose four warps must execute
        the same one; ``.dec`` returns registers to the CTA's pool, ``.inc`` blocks until the pool has them."""
        cta, wg = w.cta, w.index // WARPGROUP
        what = f"setmaxnreg.{ev.action} {ev.regs}"
        who = w.who(what)
        if not self.kernel.maxnreg:
            raise SimError(f"setmaxnreg without .maxnreg: {who}; the per-CTA register pool needs the kernel's "
                           "register count fixed by .maxnreg (PTX ISA setmaxnreg)")
        if ev.regs % 8 or not 24 <= ev.regs <= 256:
            raise SimError(f"bad setmaxnreg: {who}: the count must be a multiple of 8 in [24, 256] (PTX ISA setmaxnreg)")
        gone = [x.index for x in cta.warps[WARPGROUP * wg: WARPGROUP * (wg + 1)] if x.done]
        if gone:
            raise SimError(f"unbalanced setmaxnreg: {who}, but warp(s) {', '.join(map(str, gone))} of warpgroup {wg} "
                           "exited without it (PTX ISA setmaxnreg: every warp of the warpgroup executes it)")
        pool = cta.regs
        grp = pool.groups.setdefault(wg, RegGroup(ev.action, ev.regs))
        if (grp.action, grp.regs) != (ev.action, ev.regs):
            raise SimError(f"unbalanced setmaxnreg: {who}, while warp(s) {', '.join(str(x.index) for x in grp.warps)} "
                           f"of warpgroup {wg} execute setmaxnreg.{grp.action} {grp.regs} (PTX ISA setmaxnreg: "
                           ".sync.aligned, every warp of the warpgroup executes the same setmaxnreg)")
        grp.warps.append(w)
        if len(grp.warps) < WARPGROUP:
            self.park(w, _Blocked(grp, lambda: f"{what}: {len(grp.warps)} of {WARPGROUP} warps of warpgroup {wg} "
                                               "arrived", w.walker.where()), lambda: grp.done)
            return
        del pool.groups[wg]
        cur = w.nreg  # .dec only lowers the limit, .inc only raises it ("from its current value to imm-reg-count")
        new = min(cur, ev.regs) if ev.action == "dec" else max(cur, ev.regs)
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
            self.park(w, _Blocked(pool, lambda: f"{what}: warpgroup {wg} needs {delta} registers, the pool of "
                                                f"{cta.name} has {pool.free} free", w.walker.where()), take)

    # ---------------------------------------------------------------- exit and final checks

    def _exit(self, w: Warp) -> None:
        w.done = True
        self._unrun(w)
        cta = w.cta
        grp = cta.regs.groups.get(w.index // WARPGROUP)
        if grp is not None:
            raise SimError(f"unbalanced setmaxnreg: warp {w.index} of {cta.name} exits without the setmaxnreg."
                           f"{grp.action} {grp.regs} that warp(s) {', '.join(str(x.index) for x in grp.warps)} of its "
                           "warpgroup wait in (PTX ISA setmaxnreg: every warp of the warpgroup executes it)")
        cta.live -= 1
        if cta.live:
            return
        cta.exited = True
        for op_kind, table in (("reads", cta.smem.readers), ("writes", cta.smem.writers)):
            if table:
                _, _, who = next(iter(table.values()))
                raise SimError(f"exit with async work: {cta.name} exited while {who} still {op_kind} its shared memory")
        for warp in cta.warps:
            if warp.tc.ops:
                raise SimError(f"exit with async work: {cta.name} exited with {len(warp.tc.ops)} tcgen05 ops of warp "
                               f"{warp.index} in flight")
        for unit in self.pending_arrives:
            if unit.issuer is cta or any(bar.owner is cta for bar in unit.bars):
                raise SimError(f"exit with an outstanding arrive: {cta.name} exited while the arrive of {unit.who} on "
                               f"{', '.join(bar.name for bar in unit.bars)} is still pending; a CTA waits for every "
                               "asynchronous arrive aimed at its barriers before exit (the producer waits each empty "
                               "stage's final phase: CUTLASS producer_tail; issue 9 finding 5)")
        if cta.tmem is not None and cta.tmem.cols and not cta.tmem.freed:
            raise SimError(f"TMEM leak: {cta.name} exited without tcgen05.dealloc of its {cta.tmem.cols} columns")

    def _check_final_barriers(self) -> None:
        for cta in self.ctas:
            for bar in cta.bars.values():
                if bar.initialized and not bar.at_boundary():
                    kind = "transaction-byte mismatch" if bar.tx else "arrival count mismatch"
                    raise SimError(f"{kind} at exit: {bar.describe()}")

    def _deadlock_report(self) -> str:
        lines = [f"  {w.blocked_on.where}: {w.blocked_on.text()}" for cta in self.ctas for w in cta.warps if not w.done]
        over = [f"  {bar.describe()}" for cta in self.ctas for bar in cta.bars.values() if bar.initialized and bar.tx < 0]
        text = f"deadlock: {len(lines)} warp(s) blocked, nothing in flight:\n" + "\n".join(lines)
        if over:
            text += ("\ntransaction-byte mismatch: TMA bytes landed on barriers whose expect_tx did not announce them:\n"
                     + "\n".join(over[:8]) + (f"\n  ... and {len(over) - 8} more" if len(over) > 8 else ""))
        return text


def _join(dst: dict[int, int], src: dict[int, int]) -> None:
    """``dst = max(dst, src)`` per component (happens-before clocks)."""
    for k, v in src.items():
        if dst.get(k, -1) < v:
            dst[k] = v


def _prio(w: Warp) -> float:
    return w.prio


def _check_alive(bar: Mbarrier, who) -> None:
    if bar.owner.exited:
        raise SimError(f"use after exit: {who} signals {bar.name}, whose CTA has exited (a multi-CTA kernel must "
                       "end with a cluster barrier)")


class _Blocked:
    """What a parked warp waits for: the waitable, a text maker and its position."""

    __slots__ = ("waitable", "text", "where")

    def __init__(self, waitable, text, where: W.Where):
        self.waitable, self.text, self.where = waitable, text, where
