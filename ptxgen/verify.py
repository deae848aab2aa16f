"""Static verifier: the barrier protocol, shared-memory layout, TMEM bounds and teardown of a Kernel IR.

The verifier *traces* the kernel: it walks every warp of every CTA of one
small launch with :class:`ptxgen.sim.walker.WarpWalker` (the simulator's
interpreter, without timing or data; in these kernels control flow never
depends on barrier state, so each warp's event sequence is fixed), and then
checks the traces.  The launch has ``accumulator.stages + 2`` tiles per
cluster (persistent kernels: one cluster; otherwise one tile per cluster) and
``2 * stages + 1`` k-blocks, so every ring wraps and every parity is used.
A second, ragged launch (one column less, so ``n % 8 != 0``) takes the
branches that depend on the shape (sm_90a: the st.global epilogue) and is
checked for data flow and hand-overs.

Phases.  A warp *visits* a barrier once per iteration of its innermost
enclosing loop in which it arrives on it or aims TMA bytes at it; the j-th
visit of its role's walk belongs to phase j of that barrier (each role walks
the same ring of iterations; the visits of a role's warps merge into one walk,
so pingpong consumer warpgroups, which take turns on tiles, count the other's
tiles too).  For each phase:

* arrivals from all roles and CTAs (lanes counted: a whole-warp arrive is 32)
  equal the barrier's init count;
* the expect_tx bytes equal the bytes the TMA loads aimed at it deliver
  (2-SM loads land on the even CTA's barrier, multicast loads on each
  destination's: both CTAs' bytes count on one barrier);
* each wait (``try_wait.parity``) needs a number of completed phases that the
  arrivals provide; a consumer's first wait must not pass on a fresh barrier
  (parity 1 passes at once: only a producer_acquire may rely on it), and
  consecutive waits of one warp move one phase at a time;
* an eager replay of all warps (every async op completing at once) finishes:
  no circular wait.

Data flow.  An MMA reads an A/B stage only after a consumer wait on that
stage's ``full`` barrier in the same iteration; a TMA load fills a stage only
after a producer_acquire on its ``empty`` barrier and signals that stage's
``full``; MMAs write an accumulator stage after waiting ``tmem_empty``, the
epilogue reads it after waiting ``tmem_full``.  NVFP4: a ``tcgen05.cp`` reads a scale stage only after
the consumer wait on its ``full``, outside the accumulator columns; a block-scaled MMA reads scale columns
that a ``tcgen05.cp`` of the same thread wrote earlier in the same k-block, with the idesc's scale format
and scale-factor ids matching ``.block16``.

Hand-over (consumer_release after the last read, producer_commit after the last write).  On every
traced path of every warp (the trace follows each warp's own branches of ``If``, ``For``, ``Elect`` and
role switches, for every CTA), a role hands a pipeline stage over only after its last access of it, by
an op that orders that access:

* stages: smem operand stages (A/B/B2 slots of stage ``i``: waited on ``full[i]``, released on
  ``empty[i]``), TMEM accumulator stages (``tmem_full[c]`` / ``tmem_empty[c]`` for the epilogue, and
  the reverse pair for the MMA that writes them) and epilogue staging buffers (CD slots: written with
  st.shared, read by TMA stores);
* an access of a stage after the warp's own hand-over of it, before its next wait on the stage's
  barrier, is a finding (``consumer release before the last read`` / ``producer commit before the last
  write``); so is a hand-over while the warp's asynchronous access may still run (``... completes``):
  a tcgen05.mma reading or writing the stage is ordered only by a ``tcgen05.commit`` issued after it by
  the same thread (PTX ISA tcgen05.commit: the mbarrier tracks the completion of all prior async
  tcgen05 operations initiated by the executing thread; a plain ``mbarrier.arrive`` orders nothing),
  a ``wgmma.mma_async`` by a ``wgmma.wait_group N`` that retires its wgmma-group (PTX ISA
  wgmma.wait_group), a ``tcgen05.ld`` by ``tcgen05.wait::ld`` (PTX ISA tcgen05.wait);
* an access the warp does not hand over itself must be ordered before another warp's hand-over of the
  same stage and phase: completed, then a thread barrier generation (``bar.sync``/named barrier) that
  both warps pass (level 1's and levels 2-7's epilogue: one warp releases after a named barrier); a
  wgmma is warpgroup-collective (PTX ISA wgmma.mma_async, ``.sync.aligned``), so a warp of its
  warpgroup may release it;
* a CD slot that a TMA store reads is written again only after a ``cp.async.bulk.wait_group[.read]`` of
  the storing thread retired the store's bulk group (PTX ISA cp.async.bulk.wait_group), ordered before
  the write by program order or a thread barrier.  A wait in every lane counts the groups of all the
  warp's ``elect.sync`` blocks as one thread's: elect.sync elects the same leader for the same
  membermask every time (PTX ISA elect.sync).
The TMA producer's side (``empty`` -> ``arrive.expect_tx`` on ``full``) is exempt: its loads complete
``full`` themselves (``mbarrier::complete_tx``).  sm_90a register accumulators: their producer_commit
is the ``wgmma.wait_group`` that retires the wgmmas writing them; the epilogue (SiluMul, st.shared,
st.global) reads them only after it (checked while tracing).  Like every check here, the rule sees the
paths the traced launch takes.

Layout and teardown.  Shared-memory regions lie inside the allocation,
aligned (1024 B for 128B-swizzled operands), without overlap, and every
access stays inside one region slot; TMEM accesses stay inside the
allocation (and a warp's own 32-lane quarter); TMEM is allocated and freed
by the same warp with a thread barrier between the alloc, every use and the
dealloc (cluster-wide for ``cta_group::2``); a multi-CTA kernel ends with a
cluster barrier.

Violations raise :class:`ptxgen.errors.VerifyError` naming the barrier, the
roles and the numbers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from .hw import SMEM_LIMIT_BYTES
from .errors import VerifyError
from .hw import resident_ctas
from .ir import Kernel
from .sim import walker as W
from .descriptors import SF_ATOM_BYTES, SF_TMEM_COLS_PER_ATOM, UMMA_IDESC_MXF4, UMMA_SMEM_DESC
from .sim.mma import umma_operand, umma_shape, wgmma_operand

SMEM_BASE = 0x400  # shared-window address used for the trace (descriptor start fields are absolute)
TMEM_COLS = 512


# ------------------------------------------------------------------ the trace


@dataclass
class _Rec:
    ev: W.Ev
    where: W.Where
    key: tuple  # loop-variable values
    syncs: int  # all-CTA / cluster barriers the warp passed before this event
    thread: object = None  # issuing thread (:meth:`ptxgen.sim.walker.WarpWalker.thread`)
    ld_pending: bool = False  # a tcgen05.ld issued before this event is not yet waited (tcgen05.wait::ld)
    uses: list = field(default_factory=list)  # (waited barrier, stage) of each stage access (_check_dataflow)
    retires: list = field(default_factory=list)  # wgmma.wait_group: the wgmma events (_Rec) it retires


@dataclass
class _Trace:
    kernel: Kernel
    m: int
    n: int
    k: int
    grid: int
    warps: dict[tuple[int, int], list[_Rec]]  # (ctaid, warp) -> events in program order

    @property
    def events(self) -> int:
        return sum(len(r) for r in self.warps.values())


def _launch(kernel: Kernel, ragged: bool = False) -> tuple[int, int, int, int]:
    """(m, n, k, num_sms) of the traced launch (see module docstring); ``ragged``: one column less."""
    tiles = kernel.acc_stages + 2 if kernel.is_sm100 else 3
    m, n = kernel.launch.grid.tile_rows * tiles, kernel.launch.grid.tile_cols - ragged
    k = kernel.block_k * (2 * kernel.stages + 1)
    return m, n, k, kernel.cluster_size


#: why a wgmma accumulator may not be read (the simulator's wording, :mod:`ptxgen.sim.machine`)
_WGMMA_BUSY = "a wgmma writing it is not covered by a wgmma.wait_group"


class _WgmmaGroups:
    """One warp's wgmma-groups during the trace: a ``wgmma.mma_async`` reads its smem operands and writes its
    register accumulator asynchronously until a ``wgmma.wait_group N`` retires its wgmma-group (PTX ISA
    wgmma.wait_group; uncommitted wgmmas are in no group).  Each wait's ``retires`` lists the wgmma events it
    retires (for :func:`_check_handovers`).  Accumulators are the register arrays' producer_commit: a busy
    array is marked in the walker (which faults on a read: SiluMul), and a st.shared / st.global of one is a
    fault here (a dry run stores no values, so the walker does not read them)."""

    def __init__(self, wk: W.WarpWalker):
        self.wk, self.pending, self.committed = wk, [], 0  # pending: (wgmma-group index, wgmma _Rec)

    def see(self, rec: _Rec) -> None:
        ev, busy = rec.ev, self.wk.busy
        if isinstance(ev, W.WgmmaEv):
            busy[ev.acc] = _WGMMA_BUSY
            self.pending.append((self.committed, rec))
        elif isinstance(ev, W.WgmmaCommitEv):
            self.committed += 1
        elif isinstance(ev, W.WgmmaWaitEv):
            oldest_kept = self.committed - ev.n
            rec.retires = [r for g, r in self.pending if g < oldest_kept]
            self.pending = [(g, r) for g, r in self.pending if g >= oldest_kept]
            still = {r.ev.acc for _, r in self.pending}
            for acc in [a for a, why in busy.items() if why is _WGMMA_BUSY and a not in still]:
                del busy[acc]
        elif isinstance(ev, (W.StSharedEv, W.StGlobalEv)) and busy.get(ev.op.src) is _WGMMA_BUSY:
            raise W.IRFault(f"register array {ev.op.src!r} read while {_WGMMA_BUSY}")


def _trace(kernel, ragged: bool = False) -> _Trace:
    m, n, k, num_sms = _launch(kernel, ragged)
    grid = kernel.launch.grid.grid_x(m, n, num_sms)
    program = W.Program(kernel)
    counted = ("cluster",) if kernel.cta_group == 2 else ("cta", "cluster")  # barriers that order TMEM use
    warps: dict[tuple[int, int], list[_Rec]] = {}
    for ctaid in range(grid):
        for warp in range(kernel.threads // W.LANES):
            wk = W.WarpWalker(program, ctaid=ctaid, nctaid=grid, cluster_size=kernel.cluster_size, warp=warp,
                              smem_base=SMEM_BASE, params={"m": m, "n": n, "k": k}, values=False)
            recs, syncs, gen, reply = [], 0, wk.run(), None
            wgmma = _WgmmaGroups(wk)
            try:
                while True:
                    ev = gen.send(reply)
                    reply = None
                    recs.append(_Rec(ev, wk.where(), wk.loop_key(), syncs, wk.thread(), wk.loads_pending()))
                    wgmma.see(recs[-1])
                    if isinstance(ev, W.TmemBaseEv):
                        reply = 0
                    elif isinstance(ev, W.TmemLoadEv):
                        reply = np.zeros((W.LANES, ev.ncols), dtype=np.float32)
                    elif isinstance(ev, W.SyncEv) and ev.kind in counted:
                        syncs += 1
            except StopIteration:
                pass
            except W.IRFault as exc:
                raise VerifyError(f"{exc} ({wk.where()})") from None
            warps[(ctaid, warp)] = recs
    return _Trace(kernel, m, n, k, grid, warps)


# ------------------------------------------------------------------ barrier phases


@dataclass
class _Phase:
    arrivals: Counter = field(default_factory=Counter)  # source -> arrivals
    expected: Counter = field(default_factory=Counter)  # source -> expect_tx bytes
    delivered: Counter = field(default_factory=Counter)  # source -> TMA bytes
    commits: int = 0  # asynchronous (tcgen05.commit) arrivals

    @staticmethod
    def sources(c: Counter, unit: str = "") -> str:
        """``source xN`` (arrivals) or ``source N B`` (bytes) for each source of ``c``."""
        return ", ".join(f"{s} {v} {unit}" if unit else f"{s} x{v}" for s, v in c.items()) or "none"


@dataclass
class _Wait:
    parity: int
    role: str
    where: W.Where
    slot: int = 0  # the wait's place in its role's walk of the barrier (see _walk_order)


@dataclass
class _Barrier:
    """Everything the trace did to one barrier instance."""

    ctaid: int
    rank: int
    name: str
    index: int
    count: int | None = None
    phases: dict[int, _Phase] = field(default_factory=lambda: defaultdict(_Phase))
    waits: dict[tuple[int, int], list[_Wait]] = field(default_factory=lambda: defaultdict(list))  # by waiting warp

    @property
    def label(self) -> str:
        return f"{self.name}[{self.index}] of CTA {self.ctaid} (rank {self.rank})"


def _source(where: W.Where, kind: str) -> str:
    return f"{where.role}@r{where.rank} {kind}"


class _Barriers:
    """Barrier instances of a trace, with arrivals, tx bytes and waits assigned to phases by visit."""

    def __init__(self, trace: _Trace):
        self.kernel = trace.kernel
        self.cs = trace.kernel.cluster_size
        self.bars: dict[tuple[int, str, int], _Barrier] = {}
        self.box_bytes = {name: t.box_bytes for name, t in trace.kernel.launch.tensor_maps.items()}
        slots = self._walks(trace)
        for (ctaid, warp), recs in trace.warps.items():
            for rec in recs:
                if isinstance(rec.ev, W.InitEv):
                    self._init(self._get(self._key(ctaid, rec.ev.bar)), rec)
                    continue
                if isinstance(rec.ev, W.WaitEv):
                    key = self._key(ctaid, rec.ev.bar)
                    slot = slots[(ctaid, warp, key, "wait")][rec.key]
                    self._get(key).waits[(ctaid, warp)].append(_Wait(rec.ev.parity, rec.ev.role, rec.where, slot))
                    continue
                for bar_key, fn in self._touches(ctaid, rec):
                    fn(self._get(bar_key), slots[(ctaid, warp, bar_key, "visit")][rec.key])

    def _walks(self, trace: _Trace) -> dict[tuple, dict[tuple, int]]:
        """(CTA, warp, barrier instance, ``visit``|``wait``) -> loop key -> its place in the role's walk of the ring.

        A warp visits a barrier once per loop iteration in which it arrives on it or aims bytes at it; the
        visits of the warps of one role (the role of a warp's first visit) merge into one walk
        (:func:`_walk_order`), so pingpong consumer warpgroups, which take turns on tiles, number their visits
        by the tiles of both.
        """
        chains: dict[tuple, dict[int, list]] = defaultdict(dict)  # (CTA, instance, kind, role) -> warp -> keys
        first_role: dict[tuple, str] = {}
        for (ctaid, warp), recs in trace.warps.items():
            for rec in recs:
                if isinstance(rec.ev, W.InitEv):
                    continue
                if isinstance(rec.ev, W.WaitEv):
                    visited = [(self._key(ctaid, rec.ev.bar), "wait")]
                else:
                    visited = [(bar_key, "visit") for bar_key, _ in self._touches(ctaid, rec)]
                for bar_key, kind in visited:
                    role = first_role.setdefault((ctaid, warp, bar_key, kind), rec.where.role)
                    keys = chains[(ctaid, bar_key, kind, role)].setdefault(warp, [])
                    if not keys or keys[-1] != rec.key:
                        keys.append(rec.key)
        walks = {group: _walk_order(list(c.values())) for group, c in chains.items()}
        return {(ctaid, warp, bar_key, kind): walks[(ctaid, bar_key, kind, role)]
                for (ctaid, warp, bar_key, kind), role in first_role.items()}

    def _get(self, key: tuple[int, str, int]) -> _Barrier:
        b = self.bars.get(key)
        if b is None:
            ctaid, name, index = key
            b = self.bars[key] = _Barrier(ctaid, ctaid % self.cs, name, index)
        return b

    def _key(self, ctaid: int, ref: W.BarRef) -> tuple[int, str, int]:
        return (ctaid - ctaid % self.cs + ref.rank, ref.name, ref.index)

    @staticmethod
    def _init(b: _Barrier, rec: _Rec) -> None:
        if b.count is not None:
            raise VerifyError(f"double init: {b.label} initialized with {b.count}, then {rec.ev.count} by {rec.where}")
        b.count = rec.ev.count

    def _touches(self, ctaid: int, rec: _Rec):
        """(instance, recorder(barrier, phase)) for each barrier the event arrives on or delivers bytes to."""
        ev, where = rec.ev, rec.where
        if isinstance(ev, W.ArriveEv):
            remote = "remote " if ev.bar.rank != where.rank else ""
            kind = f"{remote}arrive" + (".expect_tx" if ev.tx else "")

            def arrive(b, j):
                ph = b.phases[j]
                ph.arrivals[_source(where, kind)] += ev.lanes
                if ev.tx:
                    ph.expected[_source(where, kind)] += ev.tx
            return [(self._key(ctaid, ev.bar), arrive)]
        if isinstance(ev, W.TmaLoadEv):
            nbytes = self.box_bytes[ev.tensor] * ev.lanes
            src = _source(where, f"TMA {ev.tensor}")

            def deliver(b, j):
                b.phases[j].delivered[src] += nbytes
            return [(self._key(ctaid, ref), deliver) for ref in ev.bars]
        if isinstance(ev, W.CommitEv):
            src = _source(where, "commit" + (" multicast" if len(ev.bars) > 1 else ""))

            def commit(b, j):
                b.phases[j].arrivals[src] += ev.lanes
                b.phases[j].commits += ev.lanes
            return [(self._key(ctaid, ref), commit) for ref in ev.bars]
        return []


def _walk_order(chains: list[list[tuple]]) -> dict[tuple, int]:
    """Merge the loop-key chains of one role's warps into one walk: loop key -> its index in the walk.

    Each chain lists the loop keys (values of the enclosing loop variables) of one warp's visits, in program
    order.  Warps that visit the same iterations (cooperative consumer warpgroups, an epilogue's four warps)
    share the keys and number them as one warp would; warps that take turns on tiles (pingpong consumers:
    warpgroup w takes tiles ``tc % 2 == w``) interleave, the head with the smallest values of the loop
    variables both keys have going first.
    """
    pos, order = [0] * len(chains), {}
    while True:
        heads = [c[p] for c, p in zip(chains, pos) if p < len(c)]
        if not heads:
            return order
        common = min(map(len, heads))
        head = min(heads, key=lambda k: k[:common])
        order.setdefault(head, len(order))
        pos = [p + 1 if p < len(c) and c[p] == head else p for c, p in zip(chains, pos)]


def _need(waits: list[_Wait], bar: _Barrier) -> list[int]:
    """Completed phases each wait of one warp needs.

    A wait with parity P needs the smallest completed-phase count c with
    parity(c) != P, at least its slot in the role's walk for the first wait and
    one more than the previous wait's need per slot the role walked since when
    it is in a later loop iteration (a warp waits once per phase it consumes;
    a pingpong warpgroup skips the other's); waits within one iteration wait for
    the same phase.
    """
    needs: list[int] = []
    for i, w in enumerate(waits):
        if i and w.where.loops == waits[i - 1].where.loops:
            if w.parity != waits[i - 1].parity:
                raise VerifyError(f"wrong phase parity: {w.role} by {w.where} waits parity {w.parity} on {bar.label} "
                                  f"right after waiting parity {waits[i - 1].parity} in the same iteration")
            needs.append(needs[-1])
            continue
        floor = needs[-1] + w.slot - waits[i - 1].slot if i else w.slot
        c = floor if (floor & 1) != w.parity else floor + 1
        if i == 0 and c == 0 and not w.role.is_producer:
            raise VerifyError(f"wrong phase parity: {w.role} by {w.where} waits parity {w.parity} on a fresh "
                              f"{bar.label}, which passes at once; only a producer_acquire may start on parity 1 "
                              "(a consumer waits (iteration / stages) & 1)")
        if i and c > floor:
            raise VerifyError(f"wrong phase parity: {w.role} by {w.where} waits parity {w.parity} on {bar.label}, the "
                              f"same parity as its previous wait (at {waits[i - 1].where.at}): it skips a phase")
        needs.append(c)
    return needs


def _check_barriers(bs: _Barriers) -> int:
    """Counts, tx bytes and waits of every barrier instance; returns the number of phases checked."""
    kernel = bs.kernel
    specs = {s.name: s for s in kernel.barriers}
    checked = 0
    for b in bs.bars.values():
        spec = specs.get(b.name)
        if spec is None or not 0 <= b.index < spec.num:
            raise VerifyError(f"no such barrier: {b.label}; the kernel has "
                              f"{', '.join(f'{s.name}[{s.num}]' for s in kernel.barriers)}")
        if b.count is None:
            raise VerifyError(f"uninitialized barrier: {b.label} is used but no MbarrierInit initializes it")
        for j in sorted(b.phases):
            ph = b.phases[j]
            got = sum(ph.arrivals.values())
            if got != b.count:
                raise VerifyError(
                    f"arrival count mismatch: {b.label}, phase {j}: {got} arrival(s) ({ph.sources(ph.arrivals)}) but "
                    f"its init count is {b.count} (kernel {b.name}.init = {spec.init})")
            exp, dlv = sum(ph.expected.values()), sum(ph.delivered.values())
            if exp != dlv:
                raise VerifyError(
                    f"transaction-byte mismatch: {b.label}, phase {j}: expect_tx {exp} B "
                    f"({ph.sources(ph.expected, 'B')}) but the TMA loads aimed at it deliver {dlv} B "
                    f"({ph.sources(ph.delivered, 'B')})")
            checked += 1
        complete = len(b.phases)  # visits number phases 0, 1, ...: all of them passed the checks above
        waited = 0
        for waits in b.waits.values():
            for w, need in zip(waits, _need(waits, b)):
                waited = max(waited, need)
                if need > complete:
                    raise VerifyError(
                        f"wait can never complete: {w.role} by {w.where} on {b.label} needs {need} completed "
                        f"phase(s); the arrivals complete {complete} (nobody "
                        f"{'arrives on it' if not b.phases else 'arrives for phase ' + str(complete)})")
        late = [j for j, ph in b.phases.items() if ph.commits and j >= waited]
        if late:
            ph = b.phases[late[0]]
            raise VerifyError(
                f"unwaited asynchronous arrive: {b.label}, phase {late[0]}: tcgen05.commit arrivals "
                f"({ph.sources(ph.arrivals)}) that no warp of CTA {b.ctaid} waits for; the CTA may exit (and the "
                "pair pass its last cluster barrier) with the arrive pending: the producer waits each empty "
                "stage's final phase before exit (CUTLASS producer_tail; issue 9 finding 5)")
    return checked


# ------------------------------------------------------------------ causal replay


class _Replay:
    """Eager replay of the traced barrier protocol: finds circular waits the per-phase counts cannot see.

    Every warp advances through its trace; async work completes at once (TMA
    bytes land, a commit arrives, as soon as issued); a wait blocks until its
    phase completed, a thread barrier until all its warps reached it.  If warps
    remain and none can move, their waits form a cycle (e.g. a consumer that
    releases a stage only after waiting for the stage's next fill).
    """

    def __init__(self, trace: _Trace, bs: _Barriers):
        self.trace, self.bs = trace, bs
        self.state: dict[tuple, list[int]] = {}  # instance -> [count, pending, tx, completed phases]
        self.meet: dict[tuple, list] = {}  # rendezvous key -> warps arrived
        self.pos = {w: 0 for w in trace.warps}
        self.counters: dict[int, int] = {}  # split-K workspace counters (byte offset -> value), all 0 at launch

    def run(self) -> None:
        moved = True
        while moved:
            moved = False
            for w, recs in self.trace.warps.items():
                while self.pos[w] < len(recs) and self._step(w, recs[self.pos[w]]):
                    self.pos[w] += 1
                    moved = True
        stuck = [(w, self.trace.warps[w][i]) for w, i in self.pos.items() if i < len(self.trace.warps[w])]
        if stuck:
            lines = [f"  {rec.where}: {self._blocked_on(w, rec)}" for w, rec in stuck[:12]]
            more = f"\n  ... and {len(stuck) - 12} more" if len(stuck) > 12 else ""
            raise VerifyError("circular wait: even with every async op completing at once, these warps block each "
                              "other forever:\n" + "\n".join(lines) + more)
        self._check_counters_reset()

    def _check_counters_reset(self) -> None:
        """Split-K: every workspace counter is back to 0 at exit (the next launch starts from 0)."""
        left = {off: v for off, v in self.counters.items() if v}
        if left:
            off, v = next(iter(left.items()))
            raise VerifyError(f"split-K counter not reset: {len(left)} workspace counter(s) nonzero at exit (byte "
                              f"{off:#x} holds {v}); the next launch's last split would see a stale count")

    def _counter(self, ev: W.WsAtomicEv) -> bool:
        value = self.counters.get(ev.offset, 0)
        if ev.kind == "wait":
            return value == ev.value
        self.counters[ev.offset] = value + ev.value if ev.kind == "red" else ev.value
        return True

    def _key(self, w, ref: W.BarRef) -> tuple:
        return self.bs._key(w[0], ref)

    def _arrive(self, key: tuple, n: int, tx: int) -> None:
        st = self.state[key]
        st[1] -= n
        st[2] += tx
        if st[1] <= 0 and st[2] == 0:
            st[1], st[3] = st[0] + st[1], st[3] + 1

    def _step(self, w, rec: _Rec) -> bool:
        ev = rec.ev
        if isinstance(ev, W.InitEv):
            self.state[self._key(w, ev.bar)] = [ev.count, ev.count, 0, 0]
        elif isinstance(ev, W.ArriveEv):
            self._arrive(self._key(w, ev.bar), ev.lanes, ev.tx)
        elif isinstance(ev, W.TmaLoadEv):
            for ref in ev.bars:
                self._arrive(self._key(w, ref), 0, -self.bs.box_bytes[ev.tensor] * ev.lanes)
        elif isinstance(ev, W.CommitEv):
            for ref in ev.bars:
                self._arrive(self._key(w, ref), ev.lanes, 0)
        elif isinstance(ev, W.WaitEv):
            st = self.state.get(self._key(w, ev.bar))
            return st is not None and (st[3] & 1) != ev.parity
        elif isinstance(ev, W.SyncEv):
            return self._sync(w, ev)
        elif isinstance(ev, W.WsAtomicEv):
            return self._counter(ev)
        return True

    def _sync(self, w, ev: W.SyncEv) -> bool:
        key = (ev.kind, w[0] // self.trace.kernel.cluster_size if ev.kind == "cluster" else w[0], ev.id)
        here = self.meet.setdefault(key, [])
        if w in here:
            return False
        here.append(w)
        if len(here) < ev.threads // W.LANES:
            return False
        for other in here:  # release: the others pass their sync on their next visit
            if other != w:
                self.pos[other] += 1
        self.meet[key] = []
        return True

    def _blocked_on(self, w, rec: _Rec) -> str:
        ev = rec.ev
        if isinstance(ev, W.SyncEv):
            return f"{ev.op.describe()} (other warps never arrive)"
        if isinstance(ev, W.WsAtomicEv):
            return f"{ev.op.describe()}: the counter holds {self.counters.get(ev.offset, 0)}"
        st = self.state.get(self._key(w, ev.bar))
        b = self.bs.bars[self._key(w, ev.bar)]
        if st is None:
            return f"{ev.role} on {b.label} before its init"
        return (f"{ev.role} on {b.label} for parity {ev.parity}: {st[3]} phase(s) completed, phase {st[3]} has "
                f"{st[1]} of {st[0]} arrivals pending")


# ------------------------------------------------------------------ data flow: wait before use


class _Slots:
    """Which region slot (A/B/CD stage) a shared-memory byte range lies in."""

    def __init__(self, kernel: Kernel):
        self.regions = [(r.name.upper(), r.offset, r.stride, r.count, r.slot_bytes) for r in kernel.regions]
        self.operands = tuple(name for name, *_ in self.regions if name != "CD")
        self._kernel = kernel

    def align(self, off: int) -> int:
        """Required alignment of the slot at ``off`` (1 outside every region)."""
        return next((r.align for r in self._kernel.regions if r.offset <= off < r.end), 1)

    def find(self, lo: int, hi: int) -> tuple[str, int] | None:
        for name, off, stride, count, size in self.regions:
            if stride and off <= lo:
                i = (lo - off) // stride
                if i < count and hi <= off + i * stride + size:
                    return name, i
        return None

    def slot(self, lo: int, hi: int, what: str, where: W.Where, kinds: tuple[str, ...]) -> tuple[str, int]:
        """The (region, slot) holding [lo, hi); VerifyError unless it is one slot of a region in ``kinds``."""
        hit = self.find(lo, hi)
        if hit is None or hit[0] not in kinds:
            inside = f"{hit[0]} stage {hit[1]}" if hit else "no single A, B or CD slot"
            raise VerifyError(f"smem access outside its region: {what} by {where} touches [{lo:#x}, {hi:#x}), which "
                              f"lies in {inside}; it must stay inside one {' or '.join(kinds)} slot")
        return hit


@dataclass(frozen=True)
class _Handover:
    """One side of a pipeline ring: a role waits ``waited[i]``, accesses stage ``i``, then arrives on ``signal[i]``.

    rule: the finding's name; gives: what the arrive does to the stage; stage: what the stage holds;
    use: what an access does to it; then: who may touch the stage once the arrive completes its phase.
    """

    waited: str
    signal: str
    rule: str
    gives: str
    stage: str
    use: str
    then: str


#: the hand-overs the rule checks, by the barrier the accessing role waits on.  The TMA producer's side
#: (wait ``empty``, arrive.expect_tx on ``full``) is not here: its writes complete ``full`` themselves
#: (``mbarrier::complete_tx``), so they may and do follow its arrive.
_HANDOVERS = {h.waited: h for h in (
    _Handover("full", "empty", "consumer release before the last read", "releases", "operand stage", "reads",
              "the producer may refill it while it is still read"),
    _Handover("tmem_full", "tmem_empty", "consumer release before the last read", "releases", "accumulator stage",
              "reads", "the MMA may overwrite it while it is still read"),
    _Handover("tmem_empty", "tmem_full", "producer commit before the last write", "commits", "accumulator stage",
              "writes", "the epilogue may read it before this write lands"),
)}
_BY_SIGNAL = {h.signal: h for h in _HANDOVERS.values()}


@dataclass(frozen=True)
class _Point:
    """A position in one warp's trace, with the thread-barrier generations the warp had completed there."""

    rec: _Rec
    warp: tuple[int, int]  # (ctaid, warp)
    index: int  # position in the warp's trace
    passes: dict  # thread barrier (kind, id) -> generations completed


def _ordered(p: _Point, q: _Point, totals: dict) -> bool:
    """Whether ``p`` happens before ``q``: program order in one warp; across warps, a thread barrier
    (``bar.sync``, ``barrier.cluster``) generation that ``p``'s warp reaches after ``p`` and ``q``'s warp
    completed before ``q``.  totals: warp -> its thread-barrier generations over the whole trace."""
    if p.warp == q.warp:
        return p.index < q.index
    return any(m > p.passes.get(k, 0) and totals[p.warp][k] > p.passes.get(k, 0) for k, m in q.passes.items())


@dataclass
class _Access:
    """One access of a pipeline stage by one warp: ``waited[index]`` in its ``epoch``-th wait on that barrier."""

    at: _Point
    waited: str
    index: int
    epoch: int
    done: _Point | None = None  # where the warp waited for the asynchronous access (wait::ld, wgmma.wait_group)


@dataclass
class _Store:
    """A TMA store reading an epilogue staging (CD) slot, and where its bulk group was retired (wait_group.read)."""

    at: _Point
    slot: int
    retired: _Point | None = None


class _WarpHandovers:
    """One warp's stage accesses checked against its own hand-overs (module docstring, "Hand-over").

    Feed the warp's events in program order to :meth:`step`, then call :meth:`finish`.  Accesses the warp does
    not hand over itself go to ``orphans``; its hand-overs to ``given[(ctaid, waited, index, epoch)]``; its TMA
    stores and st.shared into CD slots to ``stores`` and ``writes``.  The epoch of an access or a hand-over is
    the number of iterations in which the warp waited on the stage's barrier before it (a warp that releases
    for others, like level 1's warp 0, waits on the stage too).
    """

    def __init__(self, warp: tuple[int, int], given: dict, orphans: list, stores: list, writes: list):
        self.warp, self.given, self.orphans, self.stores, self.writes = warp, given, orphans, stores, writes
        self.open: dict[tuple[str, int], list[_Access]] = defaultdict(list)  # (waited, stage) -> since the wait
        self.handed: dict[tuple[str, int], _Rec] = {}  # (waited, stage) -> the hand-over since the wait
        self.epochs: dict[tuple[str, int], list] = {}  # (barrier, index) -> [waits (one per iteration), last key]
        self.passes: Counter = Counter()  # thread barrier (kind, id) -> generations completed
        self.lds: list[_Access] = []  # tcgen05.ld not yet covered by a tcgen05.wait::ld
        self.wgmma: dict[int, list[_Access]] = defaultdict(list)  # id(wgmma _Rec) -> its accesses, not retired
        self.unbulked: dict[object, list[_Store]] = defaultdict(list)  # thread -> TMA stores not yet committed
        self.bulk: list[tuple[object, list[_Store]]] = []  # committed bulk groups (thread, stores), not yet retired

    def point(self, rec: _Rec, i: int) -> _Point:
        return _Point(rec, self.warp, i, dict(self.passes))

    def step(self, rec: _Rec, i: int) -> None:
        ev = rec.ev
        if not rec.ld_pending and self.lds:
            done = self.point(rec, i)
            for a in self.lds:
                a.done = done
            self.lds = []
        if isinstance(ev, W.WaitEv):
            key = (ev.bar.name, ev.bar.index)
            e = self.epochs.setdefault(key, [0, None])
            if e[1] is not None and e[1] != rec.key:
                e[0] += 1
            e[1] = rec.key
            self.handed.pop(key, None)
            self.orphans += self.open.pop(key, [])
        elif isinstance(ev, W.SyncEv):
            self.passes[(ev.kind, ev.id)] += 1
        elif isinstance(ev, W.WgmmaWaitEv):
            done = self.point(rec, i)
            for wgmma in rec.retires:
                for a in self.wgmma.pop(id(wgmma), []):
                    a.done = done
        elif isinstance(ev, (W.ArriveEv, W.CommitEv)):
            bars = ev.bars if isinstance(ev, W.CommitEv) else (ev.bar,)
            for name, index in sorted({(b.name, b.index) for b in bars}):
                if name in _BY_SIGNAL:
                    self._hand_over(_BY_SIGNAL[name], index, rec, i)
        elif isinstance(ev, W.TmaStoreEv):
            store = _Store(self.point(rec, i), rec.uses[0][1])
            self.stores.append(store)
            self.unbulked[ev.thread].append(store)
        elif isinstance(ev, W.StSharedEv):
            at = self.point(rec, i)
            self.writes += [(at, slot) for _, slot in rec.uses]
        elif isinstance(ev, W.BulkCommitEv):
            self.bulk.append((ev.thread, self.unbulked.pop(ev.thread, [])))
        elif isinstance(ev, W.BulkWaitEv):
            self._retire_bulk(ev, self.point(rec, i))
        for waited, index in rec.uses:
            self._access(waited, index, rec, i)

    def _retire_bulk(self, ev: W.BulkWaitEv, done: _Point) -> None:
        """``cp.async.bulk.wait_group[.read] N``: all but the N most recent bulk groups of the waiting thread.

        Waited in every lane (``thread`` None), the groups of every ``elect.sync`` of the warp count as one
        thread's: elect.sync elects the same leader for the same membermask every time (PTX ISA elect.sync), and
        the commits are all from full-warp elects.  Waited by one elected lane: that Elect's own groups (the
        ownership rule in :func:`_check_dataflow` rejects waiting for another elect's groups).
        """
        mine = [g for g in self.bulk if ev.thread is None or g[0] == ev.thread]
        retired = {id(g) for g in mine[: max(len(mine) - ev.n, 0)]}
        for _, stores in (g for g in mine if id(g) in retired):
            for store in stores:
                store.retired = done
        self.bulk = [g for g in self.bulk if id(g) not in retired]

    def finish(self) -> None:
        for accesses in self.open.values():
            self.orphans += accesses
        self.open.clear()

    def _access(self, waited: str, index: int, rec: _Rec, i: int) -> None:
        h = _HANDOVERS.get(waited)
        if h is None:
            return
        gave = self.handed.get((waited, index))
        if gave is not None:
            raise VerifyError(f"{h.rule}: {gave.ev.op.describe()} by {gave.where} {h.gives} {h.stage} {index}, then "
                              f"{rec.ev.op.describe()} by {rec.where} {h.use} it before the next wait on "
                              f"{waited}[{index}]; {h.then}: hand a stage over after the role's last access of it")
        a = _Access(self.point(rec, i), waited, index, self.epochs[(waited, index)][0])
        self.open[(waited, index)].append(a)
        if isinstance(rec.ev, W.TmemLoadEv):
            self.lds.append(a)
        elif isinstance(rec.ev, W.WgmmaEv):
            self.wgmma[id(rec)].append(a)

    def _hand_over(self, h: _Handover, index: int, rec: _Rec, i: int) -> None:
        for a in self.open.pop((h.waited, index), []):
            why = _unfinished(a, rec)
            if why:
                raise VerifyError(f"{h.rule} completes: {rec.ev.op.describe()} by {rec.where} {h.gives} {h.stage} "
                                  f"{index} while {a.at.rec.ev.op.describe()} (at {a.at.rec.where.at}) may still be "
                                  f"in flight: {why}; {h.then}")
        self.handed[(h.waited, index)] = rec
        epoch = self.epochs.get((h.waited, index), [0])[0]
        self.given[(self.warp[0], h.waited, index, epoch)].append(self.point(rec, i))


def _unfinished(a: _Access, gave: _Rec) -> str:
    """Why the hand-over ``gave`` by the accessing warp does not order its asynchronous access ``a`` ("" if it does)."""
    ev = a.at.rec.ev
    if isinstance(ev, W.TmemLoadEv) and a.done is None:
        return "no tcgen05.wait::ld between them (tcgen05.ld is asynchronous; PTX ISA tcgen05.wait)"
    if isinstance(ev, W.WgmmaEv) and a.done is None:
        return ("no wgmma.wait_group retires its wgmma group before the arrive (wgmma.mma_async reads shared "
                "memory asynchronously; PTX ISA wgmma.wait_group)")
    if isinstance(ev, W.UmmaEv) and not isinstance(gave.ev, W.CommitEv):
        return ("a plain mbarrier.arrive does not wait for the asynchronous tcgen05.mma: hand over with a "
                "tcgen05.commit issued after it (PTX ISA tcgen05.commit)")
    if isinstance(ev, W.UmmaEv) and gave.thread != a.at.rec.thread:
        return ("tcgen05.commit tracks only the prior tcgen05.mma of its own thread, and another elect.sync issues "
                "it (PTX ISA tcgen05.commit)")
    return ""


def _covers(a: _Access, g: _Point, totals: dict) -> bool:
    """Whether hand-over ``g`` by another warp of the CTA orders access ``a``: ``a`` completed, then a thread barrier
    (:func:`_ordered`); a wgmma (warpgroup-collective, PTX ISA wgmma.mma_async ``.sync.aligned``) is handed over by
    any warp of its warpgroup, whose own check retired it; a tcgen05.mma only by its own thread's commit."""
    if isinstance(a.at.rec.ev, W.WgmmaEv):
        return g.warp[1] // 4 == a.at.warp[1] // 4
    return a.done is not None and _ordered(a.done, g, totals)


def _check_handovers(trace: _Trace) -> None:
    """Each role hands a pipeline stage over after its last access (module docstring, "Hand-over")."""
    given: dict[tuple, list[_Point]] = defaultdict(list)
    orphans: list[_Access] = []
    stores: dict[int, list[_Store]] = defaultdict(list)  # by ctaid
    writes: dict[int, list[tuple[_Point, int]]] = defaultdict(list)  # st.shared into CD slots, by ctaid
    totals: dict[tuple[int, int], Counter] = {}
    for w, recs in trace.warps.items():
        warp = _WarpHandovers(w, given, orphans, stores[w[0]], writes[w[0]])
        for i, rec in enumerate(recs):
            warp.step(rec, i)
        warp.finish()
        totals[w] = warp.passes
    for a in orphans:
        gs = [g for g in given.get((a.at.warp[0], a.waited, a.index, a.epoch), []) if g.warp != a.at.warp]
        if any(_covers(a, g, totals) for g in gs):
            continue
        h = _HANDOVERS[a.waited]
        if gs:
            how = f"{gs[0].rec.ev.op.describe()} by {gs[0].rec.where} {h.gives} it with no thread barrier between them"
            if a.done is None:
                how += " and nothing waits for the asynchronous access"
        else:
            how = "no other warp of the CTA hands it over in that phase, nor the warp itself before its next wait"
        raise VerifyError(f"{h.rule}: {a.at.rec.ev.op.describe()} by {a.at.rec.where} {h.use} {h.stage} {a.index}, "
                          f"but no hand-over is ordered after it: {how}; {h.then}")
    for ctaid, cta_stores in stores.items():
        for store in cta_stores:
            _check_staging_reuse(store, writes[ctaid], totals)


def _check_staging_reuse(store: _Store, writes: list[tuple[_Point, int]], totals: dict) -> None:
    """An epilogue staging (CD) slot that a TMA store reads is written again only after the storing thread's
    ``cp.async.bulk.wait_group.read`` retired the store's bulk group (PTX ISA cp.async.bulk.wait_group), ordered
    before the write (program order, or a thread barrier).  Writes ordered before the store filled it."""
    for at, slot in writes:
        if slot != store.slot or _ordered(at, store.at, totals):
            continue
        if store.retired is not None and _ordered(store.retired, at, totals):
            continue
        why = ("no cp.async.bulk.wait_group of the storing thread retires its bulk group" if store.retired is None
               else f"the cp.async.bulk.wait_group that retires its bulk group ({store.retired.rec.ev.op.describe()} "
                    f"at {store.retired.rec.where.at}) is not ordered before the write (program order, or a thread "
                    "barrier after it)")
        raise VerifyError(f"consumer release before the last read: {at.rec.ev.op.describe()} by {at.rec.where} "
                          f"writes CD stage {slot} while {store.at.rec.ev.op.describe()} by {store.at.rec.where} "
                          f"may still read it: {why}; the TMA store would copy the new data")


def _operand_extent(start: int, rows: int, sbo: int) -> tuple[int, int]:
    """Byte range [lo, hi) (from the smem base) of a k16 slice of a K-major SW128 operand of ``rows`` rows."""
    lo = start - SMEM_BASE
    return lo, lo + (rows // 8 - 1) * sbo + 7 * 128 + 32


def _check_dataflow(trace: _Trace) -> None:
    """Wait-before-use, TMA stage/barrier pairing, smem slots and TMEM bounds, warp by warp.

    Records each stage access in its event's ``uses`` for :func:`_check_handovers`."""
    kernel = trace.kernel
    slots = _Slots(kernel)
    acc_cols = kernel.tmem_acc_stage_cols or 1
    for (ctaid, warp), recs in trace.warps.items():
        last_wait: dict[tuple[str, int], tuple] = {}
        committed: dict[object, _Rec] = {}  # bulk async groups: issuing thread -> its last commit
        copied: dict[int, _Rec] = {}  # TMEM column -> the tcgen05.cp that last wrote it (NVFP4 scales)

        def require(name: str, index: int, rec: _Rec, what: str) -> None:
            got = last_wait.get((name, index))
            if got is None or rec.key[: len(got)] != got:
                raise VerifyError(f"missing wait: {what} by {rec.where} without a wait on {name}[{index}] in this "
                                  f"iteration (last wait on it: {'never' if got is None else got})")
            rec.uses.append((name, index))

        for rec in recs:
            ev = rec.ev
            if isinstance(ev, W.WaitEv):
                last_wait[(ev.bar.name, ev.bar.index)] = rec.key
            elif isinstance(ev, W.TmaLoadEv):
                size = kernel.launch.tensor_maps[ev.tensor]
                region, s = slots.slot(ev.dst, ev.dst + size.box_bytes, f"TmaLoad {ev.tensor}", rec.where,
                                       slots.operands)
                _aligned(ev.dst, slots.align(ev.dst), f"TmaLoad {ev.tensor}", rec.where)
                if any(ref.index != s or ref.name != "full" for ref in ev.bars):
                    raise VerifyError(f"TMA into the wrong stage: TmaLoad {ev.tensor} by {rec.where} writes {region} "
                                      f"stage {s} but completes on {', '.join(map(str, ev.bars))}")
                require("empty", s, rec, f"TmaLoad {ev.tensor} into {region} stage {s}")
            elif isinstance(ev, W.UmmaEv):
                _check_umma(kernel, slots, ev, rec, require, acc_cols)
            elif isinstance(ev, W.TmemCopyEv):
                _check_tmem_copy(kernel, slots, ev, rec, require, copied)
            elif isinstance(ev, W.UmmaBlockScaledEv):
                _check_umma_block_scaled(kernel, slots, ev, rec, require, acc_cols, copied)
            elif isinstance(ev, W.WgmmaEv):
                for operand, desc, rows in (("A", ev.a_desc, 64), ("B", ev.b_desc, ev.n)):
                    op = wgmma_operand(desc, rec.where, operand)
                    region, s = slots.slot(*_operand_extent(op.start, rows, op.sbo), f"Wgmma operand {operand}", rec.where,
                                           slots.operands)
                    require("full", s, rec, f"Wgmma reads {region} stage {s}")
            elif isinstance(ev, W.TmemLoadEv):
                lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
                if lane != 32 * (warp % 4) or col + ev.ncols > kernel.tmem_cols:
                    raise VerifyError(f"TMEM access out of bounds: TmemLoad by {rec.where} reads lanes [{lane}, "
                                      f"{lane + 32}) columns [{col}, {col + ev.ncols}); warp {warp} owns lanes "
                                      f"[{32 * (warp % 4)}, {32 * (warp % 4) + 32}), {kernel.tmem_cols} columns allocated")
                require("tmem_full", col // acc_cols, rec, f"TmemLoad of accumulator stage {col // acc_cols}")
            elif isinstance(ev, W.StSharedEv):
                rec.uses += sorted({slots.slot(addr, addr + ev.nbytes, "StSharedBf16", rec.where, ("CD",))
                                    for addr in set(ev.addrs.tolist())})
            elif isinstance(ev, W.TmaStoreEv):
                rec.uses.append(slots.slot(ev.src, ev.src + kernel.launch.tensor_maps[ev.tensor].box_bytes,
                                           f"TmaStore {ev.tensor}", rec.where, ("CD",)))
            elif isinstance(ev, W.BulkCommitEv):
                committed[ev.thread] = rec
            elif isinstance(ev, W.BulkWaitEv) and ev.thread is not None:
                other = next((r for t, r in committed.items() if t != ev.thread), None)
                if other is not None:
                    raise VerifyError(
                        f"bulk async-group ownership: {ev.op.describe()} by one elect.sync lane of {rec.where} waits "
                        f"for groups that another elect.sync committed (at {other.where.at}); bulk async-groups "
                        "belong to the committing thread and elect.sync does not promise the same lane twice: "
                        "commit and wait from one fixed thread, or wait in every lane (issue 9 finding 2)")
            _check_issuers(ev, rec)


def _check_umma(kernel: Kernel, slots: _Slots, ev: W.UmmaEv, rec: _Rec, require, acc_cols: int) -> None:
    m_total, n_total = umma_shape(ev.idesc, rec.where)
    for operand, desc, rows in (("A", ev.a_desc, 128), ("B", ev.b_desc, n_total // kernel.cta_group)):
        op = umma_operand(desc, rec.where, operand)
        region, s = slots.slot(*_operand_extent(op.start, rows, op.sbo), f"Umma operand {operand}", rec.where,
                               slots.operands)
        require("full", s, rec, f"Umma reads {region} stage {s}")
    lane, col = ev.d >> 16, ev.d & 0xFFFF
    if lane or col + n_total > kernel.tmem_cols:
        raise VerifyError(f"TMEM access out of bounds: Umma by {rec.where} writes lanes [{lane}, {lane + 128}) columns "
                          f"[{col}, {col + n_total}); {kernel.tmem_cols} columns are allocated")
    require("tmem_empty", col // acc_cols, rec, f"Umma into accumulator stage {col // acc_cols}")
    if kernel.cta_group == 2 and rec.where.rank % 2:
        raise VerifyError(f"tcgen05.mma.cta_group::2 issued by the odd CTA of the pair: {rec.where}")


def _check_tmem_copy(kernel: Kernel, slots: _Slots, ev: W.TmemCopyEv, rec: _Rec, require, copied: dict) -> None:
    """A ``tcgen05.cp`` of one 512-B scale atom: source inside one landed scale stage, target inside the allocation."""
    f = UMMA_SMEM_DESC.decode(ev.desc)
    lo = (f["start"] << 4) - SMEM_BASE
    region, s = slots.slot(lo, lo + SF_ATOM_BYTES, "TmemCopy source", rec.where, slots.operands)
    require("full", s, rec, f"TmemCopy reads {region} stage {s}")
    lane, col = ev.taddr >> 16, ev.taddr & 0xFFFF
    if lane or col + SF_TMEM_COLS_PER_ATOM > kernel.tmem_cols:
        raise VerifyError(f"TMEM access out of bounds: TmemCopy by {rec.where} writes lanes [{lane}, 128) columns "
                          f"[{col}, {col + SF_TMEM_COLS_PER_ATOM}); {kernel.tmem_cols} columns are allocated")
    if col < kernel.tmem_acc_stage_cols * kernel.acc_stages:
        raise VerifyError(f"scale factors over an accumulator: TmemCopy by {rec.where} writes TMEM columns "
                          f"[{col}, {col + SF_TMEM_COLS_PER_ATOM}), inside the accumulator stages "
                          f"[0, {kernel.tmem_acc_stage_cols * kernel.acc_stages})")
    for c in range(col, col + SF_TMEM_COLS_PER_ATOM):
        copied[c] = rec


def _check_umma_block_scaled(kernel: Kernel, slots: _Slots, ev: W.UmmaBlockScaledEv, rec: _Rec, require,
                             acc_cols: int, copied: dict) -> None:
    """As :func:`_check_umma`, plus: the scale vector matches the idesc's scale format, and both scale-factor
    column groups were written by this thread's ``tcgen05.cp`` in the same k-block iteration, before the MMA
    (PTX ISA "tcgen05.mma" block scaling: the scales are read from TMEM when the MMA executes)."""
    f = UMMA_IDESC_MXF4.decode(ev.idesc)
    m_total, n_total = f["m_dim"] << 7, f["n_dim"] << 3
    fmt = {"block16": 0, "block32": 1}.get(ev.scale_vec)
    if fmt != f["scale_format"] or f["a_sf_id"] or f["b_sf_id"]:
        raise VerifyError(f"block-scale mismatch: {ev.op.describe()} by {rec.where}: .{ev.scale_vec} with idesc "
                          f"scale format {f['scale_format']} and scale-factor ids A={f['a_sf_id']} B={f['b_sf_id']}; "
                          "NVFP4 is .block16 with ue4m3 scales (format 0) and ids 0 (PTX ISA 'Instruction descriptor')")
    for operand, desc, rows in (("A", ev.a_desc, 128), ("B", ev.b_desc, n_total // kernel.cta_group)):
        op = umma_operand(desc, rec.where, operand)
        region, s = slots.slot(*_operand_extent(op.start, rows, op.sbo), f"UmmaBlockScaled operand {operand}",
                               rec.where, slots.operands)
        require("full", s, rec, f"UmmaBlockScaled reads {region} stage {s}")
    lane, col = ev.d >> 16, ev.d & 0xFFFF
    if lane or col + n_total > kernel.tmem_acc_stage_cols * kernel.acc_stages:
        raise VerifyError(f"TMEM access out of bounds: UmmaBlockScaled by {rec.where} writes lanes [{lane}, 128) "
                          f"columns [{col}, {col + n_total}), outside the accumulator stages")
    require("tmem_empty", col // acc_cols, rec, f"UmmaBlockScaled into accumulator stage {col // acc_cols}")
    for what, taddr, rows in (("scale_A", ev.sfa, m_total // kernel.cta_group), ("scale_B", ev.sfb, n_total)):
        c0 = taddr & 0xFFFF
        for c in range(c0, c0 + rows // 32):  # row x of the scales at lane x % 32, column c0 + x // 32
            got = copied.get(c)
            if got is None or got.key != rec.key:
                raise VerifyError(f"scale factors not copied before the MMA: {ev.op.describe()} by {rec.where} reads "
                                  f"{what} at TMEM column {c}, which no tcgen05.cp of this thread wrote in this k-block "
                                  f"(last copy: {'never' if got is None else got.where.at}); copy the scale atoms "
                                  "after the consumer_wait and before the MMAs that read them")
    if kernel.cta_group == 2 and rec.where.rank % 2:
        raise VerifyError(f"tcgen05.mma.cta_group::2 issued by the odd CTA of the pair: {rec.where}")


def _check_issuers(ev: W.Ev, rec: _Rec) -> None:
    if isinstance(ev, (W.UmmaEv, W.UmmaBlockScaledEv, W.TmemCopyEv, W.CommitEv, W.TmaLoadEv, W.TmaStoreEv)) \
            and ev.lanes != 1:
        raise VerifyError(f"issued by {ev.lanes} threads: {ev.op.describe()} by {rec.where}; one elected thread "
                          "issues it (each thread would issue its own copy)")


def _aligned(off: int, align: int, what: str, where: W.Where) -> None:
    if off % align:
        raise VerifyError(f"misaligned: {what} by {where} at smem+{off:#x}; needs {align}-byte alignment")


# ------------------------------------------------------------------ layout, TMEM lifetime, teardown


def _check_layout(kernel: Kernel) -> None:
    """Regions inside the allocation, aligned and disjoint (slot by slot)."""
    pieces = [(f"{r.name.upper()}[{i}]", r.at(i), r.slot_bytes, r.align) for r in kernel.regions for i in range(r.count)]
    pieces += [(s.name, s.offset, 8 * s.num, 8) for s in kernel.barriers]
    pieces += [("tmem slot", kernel.tmem_slot, 4, 4)]
    if kernel.smem_bytes > SMEM_LIMIT_BYTES:
        raise VerifyError(f"shared memory budget: {kernel.smem_bytes} B > {SMEM_LIMIT_BYTES} B")
    _check_residency(kernel)
    for name, off, size, align in pieces:
        if off % align:
            raise VerifyError(f"misaligned region: {name} at {off:#x} needs {align}-byte alignment")
        if off < 0 or off + size > kernel.smem_bytes:
            raise VerifyError(f"region out of bounds: {name} [{off:#x}, {off + size:#x}) outside {kernel.smem_bytes} B")
    spans = sorted((off, off + size, name) for name, off, size, _ in pieces if size)
    for (lo1, hi1, n1), (lo2, hi2, n2) in zip(spans, spans[1:]):
        if lo2 < hi1:
            raise VerifyError(f"overlapping regions: {n1} [{lo1:#x}, {hi1:#x}) and {n2} [{lo2:#x}, {hi2:#x})")


def _check_residency(kernel: Kernel) -> None:
    """sm_100a: the CTAs an SM can hold (:func:`ptxgen.hw.resident_ctas` of the kernel's shared memory and
    threads) fit their TMEM in 512 columns (issue 9 finding 4), and the kernel bounds CTAs per SM for ptxas
    (``.minnctapersm``; issue 9 finding 6: without it ptxas 13.0 budgets 64 registers and level 9 spills)."""
    if not kernel.is_sm100:
        return
    ctas = resident_ctas(kernel.smem_bytes, kernel.threads)
    if ctas * kernel.tmem_cols > TMEM_COLS:
        raise VerifyError(f"TMEM oversubscription: {kernel.smem_bytes} B of shared memory lets {ctas} CTAs share an SM, "
                          f"each allocating {kernel.tmem_cols} TMEM columns ({ctas * kernel.tmem_cols} > {TMEM_COLS}); "
                          "tcgen05.alloc blocks and CTA pairs can wait on each other: size shared memory so at most "
                          f"{TMEM_COLS // kernel.tmem_cols} fit")
    if not 1 <= kernel.minnctapersm <= ctas:
        raise VerifyError(f"register budget: .minnctapersm {kernel.minnctapersm or 'missing'}; an sm_100a kernel "
                          f"declares the CTAs per SM it runs with (1..{ctas}) so ptxas budgets registers for them "
                          "(the seed's __launch_bounds__(256, 1))")


def _check_tmem_lifetime(trace: _Trace) -> None:
    """Alloc and dealloc by one warp, a thread barrier between the alloc, every TMEM use and the dealloc."""
    kernel = trace.kernel
    if not kernel.is_sm100:
        return
    cs = kernel.cluster_size
    life: dict[int, tuple[int, int]] = {}
    for (ctaid, _), recs in trace.warps.items():
        allocs = [r for r in recs if isinstance(r.ev, W.AllocEv)]
        deallocs = [r for r in recs if isinstance(r.ev, W.DeallocEv)]
        if not allocs and not deallocs:
            continue
        if len(allocs) != 1 or len(deallocs) != 1:
            raise VerifyError(f"TMEM lifetime: {(allocs or deallocs)[0].where} allocates {len(allocs)}x and frees "
                              f"{len(deallocs)}x; one warp allocates once and frees once")
        a, d = allocs[0], deallocs[0]
        if kernel.cta_group == 2 and a.syncs == 0:
            raise VerifyError(f"paired TMEM allocation before the cluster is known running: {a.where} issues "
                              "tcgen05.alloc.cta_group::2 before any cluster barrier; the peer CTA must be running "
                              "(PTX ISA tcgen05.alloc): init barriers, fence.mbarrier_init, cluster arrive/wait, then "
                              "alloc (issue 9 finding 1)")
        cols = a.ev.cols
        if cols < 32 or cols > TMEM_COLS or cols & (cols - 1) or cols != kernel.tmem_cols or d.ev.cols != cols:
            raise VerifyError(f"TMEM allocation: {a.where} allocates {cols} and frees {d.ev.cols} columns; needs the "
                              f"kernel's {kernel.tmem_cols}, a power of two in [32, {TMEM_COLS}]")
        if d.syncs <= a.syncs:
            raise VerifyError(f"TMEM lifetime: {d.where} frees TMEM with no "
                              f"{'cluster' if kernel.cta_group == 2 else 'thread'} barrier after the alloc")
        life[ctaid] = (a.syncs, d.syncs)
    for (ctaid, _), recs in trace.warps.items():
        for r in recs:
            if isinstance(r.ev, (W.UmmaEv, W.UmmaBlockScaledEv, W.TmemCopyEv)):
                owners = [ctaid, ctaid ^ 1] if kernel.cta_group == 2 else [ctaid]
            elif isinstance(r.ev, W.TmemLoadEv):
                owners = [ctaid]
            else:
                continue
            for owner in owners:
                if owner not in life:
                    raise VerifyError(f"TMEM not allocated: {r.ev.op.describe()} by {r.where} uses TMEM of CTA "
                                      f"{owner}, which never allocates")
                lo, hi = life[owner]
                if not lo < r.syncs < hi:
                    raise VerifyError(f"TMEM lifetime: {r.ev.op.describe()} by {r.where} is not separated by a "
                                      f"{'cluster' if cs == 2 else 'thread'} barrier from the alloc and the dealloc "
                                      f"of CTA {owner}'s TMEM")


def _check_scopes(trace: _Trace) -> None:
    """A cross-CTA data hand-off synchronizes at cluster scope (issue 9 finding 3).

    A plain remote arrive (no tx bytes) on a barrier that a ``consumer_wait`` waits on hands that
    consumer the arriving CTA's data (level 1's relay: the leader's MMA then reads the peer's shared
    memory): the arrive needs ``.release.cluster`` and the consumer's wait ``.acquire.cluster``; the
    default ``.cta`` forms order nothing across CTAs (PTX ISA "Memory Consistency Model: scope").
    Remote arrives that only release a resource (``empty``, ``tmem_empty``: waited by producers) keep
    the default form (bench/NOTES.md: a cluster-scope release there serializes the pair).
    """
    cs = trace.kernel.cluster_size
    remote: dict[tuple, _Rec] = {}
    waits: dict[tuple, list[_Rec]] = defaultdict(list)
    for (ctaid, _), recs in trace.warps.items():
        base = ctaid - ctaid % cs
        for rec in recs:
            ev = rec.ev
            if isinstance(ev, W.ArriveEv) and not ev.tx and ev.bar.rank != rec.where.rank:
                remote.setdefault((base + ev.bar.rank, ev.bar.name, ev.bar.index), rec)
            elif isinstance(ev, W.WaitEv) and ev.role.startswith("consumer_wait"):
                waits[(base + ev.bar.rank, ev.bar.name, ev.bar.index)].append(rec)
    for key, arrive in remote.items():
        consumers = waits.get(key, [])
        if not consumers:
            continue
        bar = f"{key[1]}[{key[2]}] of CTA {key[0]}"
        if arrive.ev.op.scope != "cluster":
            raise VerifyError(f"cross-CTA hand-off at CTA scope: {arrive.ev.op.describe()} by {arrive.where} hands "
                              f"{bar} to {consumers[0].where.who}'s consumer_wait with the default .release.cta; a "
                              "cross-CTA data hand-off needs mbarrier.arrive.release.cluster (issue 9 finding 3)")
        narrow = next((w for w in consumers if w.ev.op.scope != "cluster"), None)
        if narrow is not None:
            raise VerifyError(f"cross-CTA hand-off at CTA scope: {narrow.ev.op.describe()} by {narrow.where} "
                              f"completes on {arrive.where.who}'s remote arrive on {bar} with the default "
                              ".acquire.cta; a cross-CTA data hand-off needs try_wait .acquire.cluster "
                              "(issue 9 finding 3)")


def _check_teardown(trace: _Trace) -> None:
    if trace.kernel.cluster_size < 2:
        return
    for (ctaid, warp), recs in trace.warps.items():
        last = recs[-1] if recs else None
        if last is None or not (isinstance(last.ev, W.SyncEv) and last.ev.kind == "cluster"):
            raise VerifyError(f"no cluster barrier at exit: warp {warp} of CTA {ctaid} ends with "
                              f"{last.ev.op.describe() if last else 'nothing'}; a multi-CTA kernel must end with a "
                              "cluster barrier (a peer may still arrive on its barriers or use its TMEM)")


# ------------------------------------------------------------------ API


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
    trace = _trace(kernel)
    _check_dataflow(trace)
    bars = _Barriers(trace)
    phases = _check_barriers(bars)
    _Replay(trace, bars).run()
    _check_handovers(trace)
    _check_tmem_lifetime(trace)
    _check_scopes(trace)
    _check_teardown(trace)
    ragged = _trace(kernel, ragged=True)
    _check_dataflow(ragged)
    _check_handovers(ragged)
    return VerifyReport(kernel.name, (trace.m, trace.n, trace.k), trace.grid, trace.events, phases, _table(bars))


def barrier_table(kernel) -> list[dict]:
    """One row per barrier array: name, count (array size), init per rank, arrivers, waiters, tx bytes per phase.

    Arrivers and tx bytes are phase 0 of each rank's first barrier of the array,
    as ``role@rank kind xN`` / bytes by source.  Does not check anything.
    """
    return _table(_Barriers(_trace(kernel)))


def _table(bs: _Barriers) -> list[dict]:
    rows = []
    for spec in bs.kernel.barriers:
        arrivers, waiters, tx = [], set(), []
        for rank in range(bs.kernel.cluster_size):
            b = bs.bars.get((rank, spec.name, 0))
            if b is None:
                continue
            ph = b.phases.get(0, _Phase())
            arrivers.append(f"r{rank}: {ph.sources(ph.arrivals)}")
            if ph.delivered:
                tx.append(f"r{rank}: {sum(ph.delivered.values())} B ({ph.sources(ph.delivered, 'B')})")
            waiters |= {f"{w[0].where.role}@r{rank} {w[0].role}" for w in b.waits.values()}
        rows.append({"name": spec.name, "count": spec.num, "init": spec.init, "arrivers": "; ".join(arrivers),
                     "waiters": ", ".join(sorted(waiters)) or "none", "tx_per_phase": "; ".join(tx) or "-"})
    return rows


def format_barrier_table(rows: list[dict]) -> str:
    """Aligned text of :func:`barrier_table` rows."""
    cols = [("name", "barrier"), ("count", "n"), ("init", "init/rank"), ("arrivers", "arrivals per phase"),
            ("waiters", "waiters"), ("tx_per_phase", "tx bytes per phase")]
    cells = [[head for _, head in cols]] + [[_cell(r[key]) for key, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(v) -> str:
    return "/".join(map(str, v)) if isinstance(v, tuple) else str(v)
