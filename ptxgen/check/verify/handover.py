"""Hand-over: a role hands a pipeline stage over only after its last access, by an op that orders it.

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
is the ``wgmma.wait_group`` that retires the wgmmas writing them; the epilogue (EpilogueExpr, st.shared,
st.global) reads them only after it (checked while tracing).  Like every check here, the rule sees the
paths the traced launch takes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass


from ...errors import VerifyError
from ...ir import ops as O
from .. import walker as W
from .trace import _Rec, _Trace


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
        if isinstance(ev.op, O.MbarrierWait):
            key = (ev.bar.name, ev.bar.index)
            e = self.epochs.setdefault(key, [0, None])
            if e[1] is not None and e[1] != rec.key:
                e[0] += 1
            e[1] = rec.key
            self.handed.pop(key, None)
            self.orphans += self.open.pop(key, [])
        elif isinstance(ev.op, W.THREAD_SYNCS):
            self.passes[(ev.kind, ev.id)] += 1
        elif isinstance(ev.op, O.WgmmaWait):
            done = self.point(rec, i)
            for wgmma in rec.retires:
                for a in self.wgmma.pop(id(wgmma), []):
                    a.done = done
        elif isinstance(ev.op, (*W.ARRIVES, O.UmmaCommit)):
            bars = ev.bars if isinstance(ev.op, O.UmmaCommit) else (ev.bar,)
            for name, index in sorted({(b.name, b.index) for b in bars}):
                if name in _BY_SIGNAL:
                    self._hand_over(_BY_SIGNAL[name], index, rec, i)
        elif isinstance(ev.op, O.TmaStore):
            store = _Store(self.point(rec, i), rec.uses[0][1])
            self.stores.append(store)
            self.unbulked[ev.thread].append(store)
        elif isinstance(ev.op, W.SHARED_STORES) or (isinstance(ev.op, O.TmaLoad) and any(u[0] == "CD" for u in rec.uses)):
            at = self.point(rec, i)  # a staged operand's TMA load writes its CD slot too
            self.writes += [(at, slot) for name, slot in rec.uses if name == "CD"]
        elif isinstance(ev.op, O.BulkCommitGroup):
            self.bulk.append((ev.thread, self.unbulked.pop(ev.thread, [])))
        elif isinstance(ev.op, O.BulkWaitGroup):
            self._retire_bulk(ev, self.point(rec, i))
        for waited, index in rec.uses:
            self._access(waited, index, rec, i)

    def _retire_bulk(self, ev: W.Event, done: _Point) -> None:
        """``cp.async.bulk.wait_group[.read] N``: all but the N most recent bulk groups of the waiting thread.

        Waited in every lane (``thread`` None), the groups of every ``elect.sync`` of the warp count as one
        thread's: elect.sync elects the same leader for the same membermask every time (PTX ISA elect.sync), and
        the commits are all from full-warp elects.  Waited by one elected lane: that Elect's own groups (the
        ownership rule in :func:`_check_dataflow` rejects waiting for another elect's groups).
        """
        mine = [g for g in self.bulk if ev.thread is None or g[0] == ev.thread]
        retired = {id(g) for g in mine[: max(len(mine) - ev.op.n, 0)]}
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
        if isinstance(rec.ev.op, O.TmemLoad):
            self.lds.append(a)
        elif isinstance(rec.ev.op, O.Wgmma):
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
    if isinstance(ev.op, O.TmemLoad) and a.done is None:
        return "no tcgen05.wait::ld between them (tcgen05.ld is asynchronous; PTX ISA tcgen05.wait)"
    if isinstance(ev.op, O.Wgmma) and a.done is None:
        return ("no wgmma.wait_group retires its wgmma group before the arrive (wgmma.mma_async reads shared "
                "memory asynchronously; PTX ISA wgmma.wait_group)")
    if isinstance(ev.op, O.Umma) and not isinstance(gave.ev.op, O.UmmaCommit):
        return ("a plain mbarrier.arrive does not wait for the asynchronous tcgen05.mma: hand over with a "
                "tcgen05.commit issued after it (PTX ISA tcgen05.commit)")
    if isinstance(ev.op, O.Umma) and gave.thread != a.at.rec.thread:
        return ("tcgen05.commit tracks only the prior tcgen05.mma of its own thread, and another elect.sync issues "
                "it (PTX ISA tcgen05.commit)")
    return ""


def _covers(a: _Access, g: _Point, totals: dict) -> bool:
    """Whether hand-over ``g`` by another warp of the CTA orders access ``a``: ``a`` completed, then a thread barrier
    (:func:`_ordered`); a wgmma (warpgroup-collective, PTX ISA wgmma.mma_async ``.sync.aligned``) is handed over by
    any warp of its warpgroup, whose own check retired it; a tcgen05.mma only by its own thread's commit."""
    if isinstance(a.at.rec.ev.op, O.Wgmma):
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
