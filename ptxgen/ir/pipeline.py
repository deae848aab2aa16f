"""CuTe's pipeline vocabulary as IR objects: rings of ``full``/``empty`` mbarriers and their four verbs.

A :class:`Pipeline` is ``stages`` slots guarded by two mbarrier arrays: the
producer fills slot ``i`` and arrives on ``full[i]``; the consumer waits on
``full[i]``, reads the slot and arrives on ``empty[i]``; the producer waits on
``empty[i]`` before refilling it.  A :class:`PipelineState` is the (index,
phase) pair of one iteration: ``index = it % stages``, ``phase = (it / stages)
& 1``.  The producer waits on ``phase ^ 1`` because a fresh barrier counts as
having completed the phase before phase 0 (PTX ISA "mbarrier.try_wait":
``.parity`` waits for the phase *of that parity* to complete).

The verbs return IR ops (lists, since a remote release can be two arrives):

=====================  ===========================================================
``producer_acquire``   wait ``empty[index]`` with parity ``phase ^ 1``
``producer_commit``    arrive on ``full[index]``: ``arrive.expect_tx`` (TMA producer),
                       ``tcgen05.commit`` (MMA producer of an accumulator)
``consumer_wait``      wait ``full[index]`` with parity ``phase`` (``scope="cluster"``:
                       ``.acquire.cluster``, the phase completes on another CTA's arrive)
``consumer_release``   arrive on ``empty[index]``: ``mbarrier.arrive`` (threads) or
                       ``tcgen05.commit`` (the MMA issuer releasing an operand stage)
``relay``              forward a landed ``full`` phase to another CTA's ``full``
                       (``mbarrier.arrive.release.cluster``; level 1's peer -> leader)
=====================  ===========================================================

:class:`BulkStoreRing` is the epilogue's staging ring: its consumer is the TMA
store unit, so its barrier is the issuing thread's bulk async-group count
(``cp.async.bulk.wait_group.read``) rather than an mbarrier.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import Expr, Var, eq, fold, lift, select
from .kernel import BarrierArray
from .ops import Bar, BulkCommitGroup, BulkWaitGroup, Let, MbarrierArrive, MbarrierArriveExpectTx, MbarrierWait, UmmaCommit

#: how an arrival on a pipeline barrier is performed
ARRIVE, EXPECT_TX, UMMA_COMMIT = "arrive", "expect_tx", "umma_commit"


@dataclass(frozen=True)
class PipelineState:
    """(index, phase) of one pipeline iteration, as IR expressions."""

    index: Expr
    phase: Expr

    @staticmethod
    def at(iteration, stages: int) -> "PipelineState":
        """The state of iteration ``iteration`` (counted from 0) of a ``stages``-slot ring."""
        it = lift(iteration)
        return PipelineState(it % stages, (it // stages) & 1)

    def advance(self, stages: int) -> "PipelineState":
        """The next iteration's state: ``index + 1``, wrapping to 0 with the phase flipped."""
        nxt = fold(self.index + 1)
        wrap = eq(nxt, stages)
        return PipelineState(fold(select(wrap, 0, nxt)), fold(self.phase ^ wrap))


@dataclass(frozen=True)
class Pipeline:
    """A ``stages``-slot ring guarded by mbarrier arrays ``full`` and ``empty``.

    producer_commit_kind: ``expect_tx`` (a TMA producer announces ``tx_bytes``) or
        ``umma_commit`` (``tcgen05.commit`` once the issuing thread's MMAs complete).
    consumer_release_kind: ``arrive`` (``mbarrier.arrive``) or ``umma_commit``.
    multicast: CTA mask of the ``tcgen05.commit`` arrivals (0: local barrier only).
    label: the ring's name in wait comments (``producer_acquire (accumulator)``); "" for the operand ring.
    """

    name: str
    stages: int
    full: BarrierArray
    empty: BarrierArray
    producer_commit_kind: str
    consumer_release_kind: str
    multicast: int = 0
    label: str = ""

    @property
    def tx_bytes(self) -> int:
        """Transaction bytes per phase on the waited ``full`` barrier."""
        return self.full.tx_bytes

    def state(self, iteration, names: tuple[str, str] = ("stage", "phase")) -> tuple[list, PipelineState]:
        """``Let`` ops binding the state of ``iteration`` to named variables, and that state."""
        st = PipelineState.at(iteration, self.stages)
        return [Let(names[0], st.index), Let(names[1], st.phase)], PipelineState(Var(names[0]), Var(names[1]))

    def _role(self, verb: str) -> str:
        return f"{verb} ({self.label})" if self.label else verb

    def producer_acquire(self, st: PipelineState, role: str = "producer_acquire") -> list:
        """Wait until the consumers released slot ``st.index`` (parity ``phase ^ 1``).

        role: the wait's name (``producer_tail``: the same wait after the producer's last iteration).
        """
        return [MbarrierWait(Bar(self.empty.name, st.index), st.phase ^ 1, self._role(role))]

    def producer_commit(self, st: PipelineState, *, tx_bytes: int | None = None, cta: Expr | None = None) -> list:
        """Arrive on ``full[st.index]``: ``arrive.expect_tx`` of ``tx_bytes`` (default: the ring's), or a commit.

        cta: cluster rank whose barrier receives the arrival (None: this CTA's).
        """
        bar = Bar(self.full.name, st.index)
        if self.producer_commit_kind == UMMA_COMMIT:
            return [UmmaCommit(bar, self.multicast)]
        if self.producer_commit_kind == EXPECT_TX:
            return [MbarrierArriveExpectTx(bar, self.tx_bytes if tx_bytes is None else tx_bytes, cta=cta)]
        return [MbarrierArrive(bar, cta)]

    def relay(self, st: PipelineState, cta: Expr, scope: str = "cluster") -> list:
        """Forward a completed ``full[st.index]`` phase to cluster rank ``cta``'s barrier: one plain arrive.

        Level 1 (two CTAs, no 2-SM TMA): the peer waits its own ``full`` (``relay_wait``), then arrives on the
        leader's, whose MMA then reads the peer's shared memory: a cross-CTA data hand-off, hence
        ``.release.cluster`` by default (issue 9 finding 3; PTX ISA "Memory Consistency Model: scope").
        """
        return [MbarrierArrive(Bar(self.full.name, st.index), cta, scope=scope)]

    def consumer_wait(self, st: PipelineState, role: str = "consumer_wait", scope: str = "cta") -> list:
        """Wait until slot ``st.index`` is full (parity ``phase``).

        scope: acquire scope of the wait, ``"cta"`` (default ``.acquire.cta``) or ``"cluster"``
        (``.acquire.cluster``: the phase completes on another CTA's release.cluster arrive).
        """
        return [MbarrierWait(Bar(self.full.name, st.index), st.phase, self._role(role), scope)]

    def consumer_release(self, st: PipelineState, *, ctas: tuple[Expr | None, ...] = (None,)) -> list:
        """Arrive on ``empty[st.index]``: a ``tcgen05.commit`` (multicast per the ring), or one arrive per rank in ``ctas``."""
        bar = Bar(self.empty.name, st.index)
        if self.consumer_release_kind == UMMA_COMMIT:
            return [UmmaCommit(bar, self.multicast)]
        return [MbarrierArrive(bar, cta) for cta in ctas]


@dataclass(frozen=True)
class BulkStoreRing:
    """The epilogue's staging ring: ``stages`` buffers drained by TMA stores (bulk async groups).

    producer_acquire: the storing warp waits until at most ``stages - 1`` of its bulk
    groups still read shared memory (``cp.async.bulk.wait_group.read``); producer_commit:
    ``cp.async.bulk.commit_group`` after the store.  Bulk groups belong to the issuing
    thread (PTX ISA "cp.async.bulk.commit_group") and the store + commit run under
    ``elect.sync``, which need not pick the same lane twice, so the builders issue the
    waits (``producer_acquire``, ``drain``) in every lane of the storing warp (issue 9 finding 2).
    """

    stages: int

    def producer_acquire(self) -> list:
        return [BulkWaitGroup(self.stages - 1, read=True)]

    def producer_commit(self) -> list:
        return [BulkCommitGroup()]

    def drain(self) -> list:
        """Before the CTA exits: every store has read its staging buffer (``cp.async.bulk.wait_group.read 0``).

        Shared memory is released at exit, so the reads must be done; the global writes need not be: they
        are visible to the host and to later kernels once the grid completes (CUTLASS's epilogue
        ``store_tail`` waits the same way, ``tma_store_wait<0>``).  Waiting for the writes as well kept every
        CTA's last tile on the critical path for a full global-write round trip (bench/NOTES.md §10).
        """
        return [BulkWaitGroup(0, read=True)]

    def buffer(self, sequence) -> Expr:
        """Staging buffer of store number ``sequence`` (counted over the kernel)."""
        return fold(lift(sequence) % self.stages)


__all__ = ["ARRIVE", "EXPECT_TX", "UMMA_COMMIT", "PipelineState", "Pipeline", "BulkStoreRing"]
