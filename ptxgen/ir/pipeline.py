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

The rings, by producer and consumer (CuTe's names), differ in how they commit and release:

* :class:`PipelineTmaUmma` (sm_100a operands): TMA fills (``arrive.expect_tx``), ``tcgen05.commit`` releases;
* :class:`PipelineTmaAsync` (sm_90a operands): TMA fills, the wgmma threads release (``mbarrier.arrive``);
* :class:`PipelineUmmaAsync` (sm_100a accumulators): ``tcgen05.commit`` fills, epilogue threads release.

Waits carry a :class:`~ptxgen.ir.ops.WaitRole`.  :class:`BulkStoreRing` is the
epilogue's staging ring: its consumer is the TMA store unit, so its barrier is
the issuing thread's bulk async-group count (``cp.async.bulk.wait_group.read``)
rather than an mbarrier.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import Expr, Var, eq, fold, lift, select
from .kernel import BarrierArray
from .ops import (Bar, BulkCommitGroup, BulkWaitGroup, Let, MbarrierArrive, MbarrierArriveExpectTx, MbarrierWait,
                  UmmaCommit, WaitRole)


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


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """A ``stages``-slot ring guarded by mbarrier arrays ``full`` and ``empty`` (the verbs both sides share).

    The subclasses are the rings by who produces and who consumes (CuTe's names): :class:`PipelineTmaUmma`,
    :class:`PipelineTmaAsync`, :class:`PipelineUmmaAsync`; each decides how ``producer_commit`` and
    ``consumer_release`` arrive.

    multicast: CTA mask of the ``tcgen05.commit`` arrivals (0: local barrier only).
    release_scope: memory-ordering scope of the consumers' ``mbarrier.arrive`` on ``empty`` and of the producer's
        wait on it: ``"cta"``, or ``"cluster"`` when a CTA pair's consumers hand the stage back across the pair
        (a cross-CTA hand-off; PTX ISA "Memory Consistency Model: scope").
    """

    name: str
    stages: int
    full: BarrierArray
    empty: BarrierArray
    multicast: int = 0
    release_scope: str = "cta"

    #: the ring's wait roles (the accumulator ring names its own)
    ACQUIRE = WaitRole.PRODUCER_ACQUIRE
    WAIT = WaitRole.CONSUMER_WAIT

    @property
    def tx_bytes(self) -> int:
        """Transaction bytes per phase on the waited ``full`` barrier."""
        return self.full.tx_bytes

    def state(self, iteration, names: tuple[str, str] = ("stage", "phase")) -> tuple[list, PipelineState]:
        """``Let`` ops binding the state of ``iteration`` to named variables, and that state."""
        st = PipelineState.at(iteration, self.stages)
        return [Let(names[0], st.index), Let(names[1], st.phase)], PipelineState(Var(names[0]), Var(names[1]))

    def producer_acquire(self, st: PipelineState, role: WaitRole | None = None) -> list:
        """Wait until the consumers released slot ``st.index`` (parity ``phase ^ 1``).

        role: the wait's role (default the ring's ``producer_acquire``; ``PRODUCER_TAIL``: the same wait after the
        producer's last iteration).
        """
        return [MbarrierWait(Bar(self.empty.name, st.index), st.phase ^ 1, role or self.ACQUIRE,
                             scope=self.release_scope)]

    def producer_commit(self, st: PipelineState, **kw) -> list:
        """Arrive on ``full[st.index]`` (how: the ring's type)."""
        raise NotImplementedError

    def consumer_wait(self, st: PipelineState, role: WaitRole | None = None, scope: str = "cta") -> list:
        """Wait until slot ``st.index`` is full (parity ``phase``).

        role: the wait's role (default the ring's ``consumer_wait``).
        scope: acquire scope of the wait, ``"cta"`` (default ``.acquire.cta``) or ``"cluster"``
        (``.acquire.cluster``: the phase completes on another CTA's release.cluster arrive).
        """
        return [MbarrierWait(Bar(self.full.name, st.index), st.phase, role or self.WAIT, scope)]

    def consumer_release(self, st: PipelineState, *, ctas: tuple[Expr | None, ...] = (None,)) -> list:
        """Arrive on ``empty[st.index]``: one ``mbarrier.arrive`` per rank in ``ctas`` (None: this CTA's)."""
        bar = Bar(self.empty.name, st.index)
        return [MbarrierArrive(bar, cta, scope=self.release_scope) for cta in ctas]


@dataclass(frozen=True, kw_only=True)
class _TmaProducer(Pipeline):
    """A ring filled by TMA loads: the producer announces the bytes (``mbarrier.arrive.expect_tx``)."""

    def producer_commit(self, st: PipelineState, *, tx_bytes: int | None = None, cta: Expr | None = None) -> list:
        """``arrive.expect_tx`` on ``full[st.index]`` of ``tx_bytes`` (default: the ring's).

        cta: cluster rank whose barrier receives the arrival (None: this CTA's).
        """
        bar = Bar(self.full.name, st.index)
        return [MbarrierArriveExpectTx(bar, self.tx_bytes if tx_bytes is None else tx_bytes, cta=cta)]

    def relay(self, st: PipelineState, cta: Expr, scope: str = "cluster") -> list:
        """Forward a completed ``full[st.index]`` phase to cluster rank ``cta``'s barrier: one plain arrive.

        Level 1 (two CTAs, no 2-SM TMA): the peer waits its own ``full`` (``RELAY_WAIT``), then arrives on the
        leader's, whose MMA then reads the peer's shared memory: a cross-CTA data hand-off, hence
        ``.release.cluster`` by default (PTX ISA "Memory Consistency Model": scope).
        """
        return [MbarrierArrive(Bar(self.full.name, st.index), cta, scope=scope)]


@dataclass(frozen=True, kw_only=True)
class PipelineTmaUmma(_TmaProducer):
    """sm_100a operand ring: TMA loads fill a stage, ``tcgen05.mma`` reads it and ``tcgen05.commit`` releases it
    (arrives on ``empty`` once the issuing thread's MMAs completed; multicast to the pair's CTAs per ``multicast``)."""

    def consumer_release(self, st: PipelineState, *, ctas: tuple[Expr | None, ...] = (None,)) -> list:
        """``tcgen05.commit`` to ``empty[st.index]`` (``ctas`` unused: the ring's multicast mask decides)."""
        return [UmmaCommit(Bar(self.empty.name, st.index), self.multicast)]


@dataclass(frozen=True, kw_only=True)
class PipelineTmaAsync(_TmaProducer):
    """sm_90a operand ring: TMA loads fill a stage, consumer threads (wgmma) release it with ``mbarrier.arrive``."""


@dataclass(frozen=True, kw_only=True)
class PipelineUmmaAsync(Pipeline):
    """sm_100a accumulator ring: ``tcgen05.commit`` after a tile's last MMA fills a TMEM stage, epilogue threads
    release it with ``mbarrier.arrive``.  Its waits carry the ``(accumulator)`` roles."""

    ACQUIRE = WaitRole.ACC_PRODUCER_ACQUIRE
    WAIT = WaitRole.ACC_CONSUMER_WAIT

    # release_scope "cluster" (set by the plan) when a CTA pair's epilogues release the leader's stage
    # (cta_group::2): the peer's tcgen05.ld reads of its TMEM half must be ordered before the leader's next MMA
    # writes it; the tcgen05.fence pair orders the TMEM accesses around the arrive and the wait.

    def producer_commit(self, st: PipelineState) -> list:
        """``tcgen05.commit`` to ``full[st.index]`` (multicast per the ring)."""
        return [UmmaCommit(Bar(self.full.name, st.index), self.multicast)]


@dataclass(frozen=True)
class BulkStoreRing:
    """The epilogue's staging ring: ``stages`` buffers drained by TMA stores (bulk async groups).

    producer_acquire: the storing warp waits until at most ``stages - 1`` of its bulk
    groups still read shared memory (``cp.async.bulk.wait_group.read``); producer_commit:
    ``cp.async.bulk.commit_group`` after the store.  Bulk groups belong to the issuing
    thread (PTX ISA "cp.async.bulk.commit_group") and the store + commit run under
    ``elect.sync``, which need not pick the same lane twice, so the builders issue the
    waits (``producer_acquire``, ``drain``) in every lane of the storing warp.
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
        CTA's last tile on the critical path for a full global-write round trip.
        """
        return [BulkWaitGroup(0, read=True)]

    def buffer(self, sequence) -> Expr:
        """Staging buffer of store number ``sequence`` (counted over the kernel)."""
        return fold(lift(sequence) % self.stages)


__all__ = ["PipelineState", "Pipeline", "PipelineTmaUmma", "PipelineTmaAsync", "PipelineUmmaAsync", "BulkStoreRing", "WaitRole"]
