"""Barrier phases, the barrier table and the causal replay (no circular wait).

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
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field


from ...errors import VerifyError
from ...ir import ops as O
from .. import walker as W
from .trace import _Rec, _Trace, _trace


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
                if isinstance(rec.ev.op, O.MbarrierInit):
                    self._init(self._get(self._key(ctaid, rec.ev.bar)), rec)
                    continue
                if isinstance(rec.ev.op, O.MbarrierWait):
                    key = self._key(ctaid, rec.ev.bar)
                    slot = slots[(ctaid, warp, key, "wait")][rec.key]
                    self._get(key).waits[(ctaid, warp)].append(_Wait(rec.ev.phase, rec.ev.op.role, rec.where, slot))
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
                if isinstance(rec.ev.op, O.MbarrierInit):
                    continue
                if isinstance(rec.ev.op, O.MbarrierWait):
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
        if isinstance(ev.op, W.ARRIVES):
            remote = "remote " if ev.bar.rank != where.rank else ""
            kind = f"{remote}arrive" + (".expect_tx" if ev.tx else "")

            def arrive(b, j):
                ph = b.phases[j]
                ph.arrivals[_source(where, kind)] += ev.lanes
                if ev.tx:
                    ph.expected[_source(where, kind)] += ev.tx
            return [(self._key(ctaid, ev.bar), arrive)]
        if isinstance(ev.op, O.TmaLoad):
            nbytes = self.box_bytes[ev.op.tensor] * ev.lanes
            src = _source(where, f"TMA {ev.op.tensor}")

            def deliver(b, j):
                b.phases[j].delivered[src] += nbytes
            return [(self._key(ctaid, ref), deliver) for ref in ev.bars]
        if isinstance(ev.op, O.UmmaCommit):
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
                "stage's final phase before exit (CUTLASS producer_tail; PTX ISA \"tcgen05.commit\": the arrive is asynchronous)")
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

    def _counter(self, rec: _Rec) -> bool:
        ev = rec.ev
        value = self.counters.get(ev.offset, 0)
        if isinstance(ev.op, O.AtomGlobalAdd) and value != rec.value:
            return False  # the trace's arrival order: this arrival read rec.value (a later arrival waits its turn)
        self.counters[ev.offset] = value + ev.op.value if isinstance(ev.op, O.AtomGlobalAdd) else ev.op.value
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
        if isinstance(ev.op, O.MbarrierInit):
            self.state[self._key(w, ev.bar)] = [ev.count, ev.count, 0, 0]
        elif isinstance(ev.op, W.ARRIVES):
            self._arrive(self._key(w, ev.bar), ev.lanes, ev.tx)
        elif isinstance(ev.op, O.TmaLoad):
            for ref in ev.bars:
                self._arrive(self._key(w, ref), 0, -self.bs.box_bytes[ev.op.tensor] * ev.lanes)
        elif isinstance(ev.op, O.UmmaCommit):
            for ref in ev.bars:
                self._arrive(self._key(w, ref), ev.lanes, 0)
        elif isinstance(ev.op, O.MbarrierWait):
            st = self.state.get(self._key(w, ev.bar))
            return st is not None and (st[3] & 1) != ev.phase
        elif isinstance(ev.op, W.THREAD_SYNCS):
            return self._sync(w, ev)
        elif isinstance(ev.op, W.COUNTER_OPS):
            return self._counter(rec)
        return True

    def _sync(self, w, ev: W.Event) -> bool:
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
        if isinstance(ev.op, W.THREAD_SYNCS):
            return f"{ev.op.describe()} (other warps never arrive)"
        if isinstance(ev.op, W.COUNTER_OPS):
            return f"{ev.op.describe()}: the counter holds {self.counters.get(ev.offset, 0)}"
        st = self.state.get(self._key(w, ev.bar))
        b = self.bs.bars[self._key(w, ev.bar)]
        if st is None:
            return f"{ev.op.role} on {b.label} before its init"
        return (f"{ev.op.role} on {b.label} for parity {ev.phase}: {st[3]} phase(s) completed, phase {st[3]} has "
                f"{st[1]} of {st[0]} arrivals pending")


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
