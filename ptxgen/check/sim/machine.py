"""The simulated machine: a grid of CTAs whose warps run as coroutines under a seeded scheduler.

Every warp of every CTA is a :class:`~ptxgen.check.walker.WarpWalker`
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

Shared memory: each CTA's dynamic shared memory lies in its own window of
the cluster's: rank r's ``Sreg("smem")`` is rank 0's plus r x 16 MiB
(:func:`ptxgen.hw.cta_smem_base`, as the H100 gives the second CTA of a
pair), so a descriptor the IR builds from it carries those bits as the
hardware's does; the handlers decode a descriptor's 18-bit start address in
the window of the CTA that reads it.

A warp blocked on an mbarrier, a thread barrier or its own async groups is
parked and woken when the condition may hold; on resume it re-polls (like
``try_wait`` in a loop).  No runnable warp and no in-flight unit while some
warp has not exited is a deadlock.

Ordering instructions have meaning, and a missing one is a fault
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

import random

import numpy as np

from ...errors import SimError
from ...hw import cta_smem_base
from ...ir import ops as O
from .. import walker as W
from .handlers import blockscaled
from .handlers.barriers import Barriers
from .handlers.epilogue import EpilogueLoads
from .handlers.grouped import table_read
from .handlers.stores import Stores
from .handlers.tma import Tma
from .handlers.tmem import TmemOps
from .handlers.umma import Umma
from .handlers.wgmma import Wgmma
from .handlers.workspace import WorkspaceOps
from .memory import GlobalTensors
from .ordering import Ordering
from .schedule import PCT_DEPTH, PCT_HORIZON, POLICIES, Scheduler
from .state import WARPGROUP, Cta, Warp, Who
from .sync import Rendezvous
from .units import CommitArriveUnit
from .workspace import Workspace

__all__ = ["Machine", "POLICIES"]


# ------------------------------------------------------------------ the machine


def _mn_major(t: np.ndarray, groups: int) -> np.ndarray:
    """``[G x rows, K]`` -> ``[G x K, rows]``: each group's operand as the ``[K, rows]`` tensor an MN-major map reads."""
    rows = t.shape[0] // groups
    return np.ascontiguousarray(t.reshape(groups, rows, -1).transpose(0, 2, 1).reshape(-1, rows))


class Machine(Scheduler, Ordering, Barriers, Tma, Stores, WorkspaceOps, TmemOps, Umma, Wgmma, EpilogueLoads):
    """All CTAs of one launch, the global tensors and the scheduler (see module docstring).

    Args:
        kernel: the Kernel IR.
        m, n, k: problem shape.
        a, b: bf16 bit patterns ``[m, k]``, ``[n, k]``.
        num_sms: SMs the persistent grid policy sees.
        schedule_seed: seeds the interleaving.
        smem_base: shared-window address of rank 0's dynamic shared memory (1024-aligned, below 2**18); rank r's
            is ``smem_base | r << 24`` (:func:`ptxgen.hw.cta_smem_base`).
        poison: bf16 bits D starts filled with.
        extra: more global tensors by name (NVFP4 scale tiles; epilogue operands by parameter name, float32).
        scalars: more kernel parameters by name (an epilogue scalar's f32 bits).
        policy: ``random``, ``latest`` or ``pct`` (see the module docstring).

    Raises:
        ValueError: an unknown policy.
    """

    def __init__(self, kernel, m: int, n: int, k: int, a: np.ndarray, b: np.ndarray, *, num_sms: int,
                 schedule_seed: int, smem_base: int, poison: int, b2: np.ndarray | None = None,
                 extra: dict[str, np.ndarray] | None = None, policy: str = "random", scalars: dict[str, int] | None = None):
        if policy not in POLICIES:
            raise ValueError(f"schedule policy {policy!r}: one of {', '.join(POLICIES)}")
        self.policy = policy
        self.kernel, self.params = kernel, {"m": m, "n": n, "k": k, **(scalars or {})}
        self.tables = None  # a grouped kernel's u32 tables (ptxgen.check.grouped.Tables), set before run()
        spec = kernel.launch
        self.maps = {name: (t.box[0], t.box[1], t.swizzle == "128B", t.elem_bytes) for name, t in spec.tensor_maps.items()}
        self.grid = spec.grid.grid_x(m, n, num_sms)
        # an MN-major map (tma.major_a / major_b) reads its operand as the transposed [K, rows] tensor (a grouped
        # B: each group's, stacked [G x K, N])
        mn = {name for name, t in spec.tensor_maps.items() if t.major == "mn"}
        groups = int((scalars or {}).get("num_groups", 1))
        self.glob = GlobalTensors(_mn_major(a, 1) if "a" in mn else a, _mn_major(b, groups) if "b" in mn else b, poison,
                                  _mn_major(b2, 1) if b2 is not None and "b2" in mn else b2, extra,
                                  d_shape=(a.shape[0], b.shape[0]))
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
        self.ws = Workspace(ws, ws.cta_tiles_for(spec.grid, m, n, num_sms)) if ws is not None else None
        # each rank's own window (hw.CLUSTER_RANK_SHIFT): what Sreg("smem") reads there, so a descriptor built from
        # it carries the rank bits as on the hardware; decoded descriptor addresses are the window's low 18 bits
        self.ctas = [Cta(kernel, c, cta_smem_base(smem_base, c % kernel.cluster_size)) for c in range(self.grid)]
        self.warps: list[Warp] = []  # by warp id
        self.tc_who: dict[tuple[int, int], Who] = {}  # (warp id, tcgen05 op number) -> the op, for messages
        program = W.Program(kernel)
        for cta in self.ctas:
            for w in range(kernel.threads // W.LANES):
                walker = W.WarpWalker(program, ctaid=cta.ctaid, nctaid=self.grid, cluster_size=kernel.cluster_size,
                                      warp=w, smem_base=cta.smem.base, params=self.params)
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
        #: op type -> the instruction's handler ``(warp, event)`` (one row per op the walker yields as an event)
        self._handlers = {
            O.MbarrierInit: self._init, O.MbarrierArrive: self._arrive, O.MbarrierArriveExpectTx: self._arrive,
            O.MbarrierWait: self._wait, O.FenceMbarrierInit: self._fence_init,
            O.TmaLoad: self._tma_load, O.TmaStore: self._tma_store, O.BulkCommitGroup: self._bulk_commit,
            O.BulkWaitGroup: self._bulk_wait, O.FenceProxyAsync: self._fence_proxy,
            O.TmemAlloc: self._alloc, O.TmemDealloc: self._dealloc, O.TmemBase: self._tmem_base, O.Umma: self._umma,
            O.UmmaCommit: self._commit, O.TmemLoad: self._tmem_load,
            O.Wgmma: self._wgmma, O.WgmmaCommit: self._wgmma_commit, O.WgmmaWait: self._wgmma_wait,
            O.ScaleLoad: self._scale_load,
            O.SetMaxNReg: self._setmaxnreg,
            O.StShared16: self._st_shared, O.StMatrix: self._st_shared, O.StGlobal16: self._st_global,
            O.CtaSync: self._sync, O.NamedBarrier: self._sync, O.NamedBarrierPopc: self._sync, O.ClusterSync: self._sync,
            O.TmemCopy: lambda w, ev: blockscaled.tmem_copy(self, w, ev),
            O.UmmaBlockScaled: lambda w, ev: blockscaled.umma_block_scaled(self, w, ev),
            O.StGlobalF32: self._ws_store, O.LdGlobalF32: self._ws_load,
            O.AtomGlobalAdd: self._ws_atom, O.StGlobalU32: self._ws_set,
            O.LdEpilogue: self._ld_epilogue, O.StEpilogue: self._st_epilogue, O.LdMatrix: self._ld_matrix,
            O.LdGlobalNcU32: lambda w, ev: table_read(self, w, ev),
            # one grid, no prerequisite grid in flight: the wait returns at once, the trigger has no dependent
            O.GridDepControl: lambda w, ev: None,
        }

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
                               "stage's final phase, CUTLASS producer_tail; PTX ISA tcgen05.commit: the arrive is asynchronous)")
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
