"""Kernel IR: what runs, op by op.

A :class:`Kernel` is a tree of ops.  Control ops (``WarpSwitch``, ``For``,
``If``, ``Elect``) nest bodies; every other op is named after the PTX
instruction family it lowers to, or a CuTe pipeline step.  Index arithmetic is
:mod:`ptxgen.ir.expr` trees, never PTX text, so the emitters and the
simulator read the same program.

Execution model (what the simulator implements and the emitters lower):

* Each warp walks the tree.  Expressions are evaluated per lane; control
  conditions must be uniform across the lanes that execute them.
* ``WarpSwitch`` sends each warp to the one role whose warp range holds it.
* ``Elect`` runs its body on one lane of the warp (``elect.sync``).
* Shared-memory addresses in ops are byte offsets from the dynamic
  shared-memory base; descriptor low words are built explicitly from
  ``Sreg("smem")`` (the shared-window address of that base).
* A barrier reference :class:`Bar` names a plan barrier array and an index.
  ``cta`` on an arrive names the cluster rank whose barrier at the same
  offset receives it (``mapa`` + ``.shared::cluster``); ``None`` is local.
* Per-thread register arrays (accumulator fragments, TMEM loads) are named
  by strings: ``TmemLoad(dst="acc", ...)`` fills ``acc[0:ncols]`` (f32).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from .epilogue import span as _span
from .epilogue import to_text as _epi_text
from .expr import Expr, expr_str, lift


@dataclass(frozen=True)
class Bar:
    """mbarrier ``name[index]`` of one of the kernel's barrier arrays (``full``, ``empty``, ``tmem_full``, ``tmem_empty``)."""

    name: str
    index: Expr

    def __str__(self) -> str:
        return f"{self.name}[{_s(self.index)}]"


def _s(e) -> str:
    return expr_str(e)


class Op:
    """Base class of IR ops.  ``describe()`` is the one-line ``//`` comment the emitters print.

    Two class-level declarations (not fields) say how the check wing's walker evaluates an op's operands:

    * ``collective``: a ``.sync.aligned`` warp-collective instruction; every lane of the warp executes it,
      never one lane inside ``Elect`` (the ``.sync.aligned`` qualifier; PTX ISA "bar, barrier",
      "wgmma", "tcgen05").
    * ``per_lane``: the expression fields whose value may differ across the lanes (addresses, coordinates);
      every other expression field must be uniform over the lanes that run the op.
    """

    collective: ClassVar[bool] = False
    per_lane: ClassVar[tuple[str, ...]] = ()

    def describe(self) -> str:
        return type(self).__name__


# ------------------------------------------------------------------ control


@dataclass(frozen=True)
class Role:
    """Warps ``[warp_lo, warp_hi)`` run ``body`` (producer, mma, epilogue, consumer...)."""

    name: str
    warp_lo: int
    warp_hi: int
    body: tuple


@dataclass(frozen=True)
class WarpSwitch(Op):
    """Each warp runs the body of the role that holds its warp index; others skip."""

    roles: tuple[Role, ...]

    def describe(self) -> str:
        return "WarpSwitch " + ", ".join(f"{r.name}: warps {r.warp_lo}-{r.warp_hi - 1}" for r in self.roles)


@dataclass(frozen=True)
class For(Op):
    """``for var = start; var < stop; var += step`` (u32, uniform).

    unroll: False asks ptxas not to unroll it (``.pragma "nounroll"``, PTX ISA "Performance-tuning directives").
    """

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple
    unroll: bool = True

    def describe(self) -> str:
        return f"For {self.var} in [{_s(self.start)}, {_s(self.stop)}) step {_s(self.step)}" + ("" if self.unroll else " (not unrolled)")


@dataclass(frozen=True)
class If(Op):
    """``if cond`` (nonzero) run ``then`` else ``orelse``; cond uniform over the executing lanes."""

    cond: Expr
    then: tuple
    orelse: tuple = ()

    def describe(self) -> str:
        return f"If {_s(self.cond)}"


@dataclass(frozen=True)
class Let(Op):
    """``var = expr`` (u32, per lane; rebinding allowed)."""

    var: str
    expr: Expr

    def describe(self) -> str:
        return f"Let {self.var} = {_s(self.expr)}"


@dataclass(frozen=True)
class Elect(Op):
    """One lane of the warp runs ``body``: the lane ``elect.sync`` picks, or with ``fixed`` always lane 0.

    fixed: ``%lane == 0`` instead of ``elect.sync``: the same thread every time, so the bulk async-groups it
        commits have one known owner; and ptxas keeps the code after it warp-uniform (docs/performance.md,
        "TMA-store epilogue and elect").
    """

    body: tuple
    fixed: bool = False

    def describe(self) -> str:
        return "Elect lane 0" if self.fixed else "Elect one lane"


@dataclass(frozen=True)
class Comment(Op):
    """A section header in the emitted PTX; no effect."""

    text: str

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class Shfl(Op):
    """``var = shfl.sync.idx.b32(src, lane)``: every lane reads ``src`` of lane ``lane`` (whole warp)."""

    collective: ClassVar[bool] = True

    var: str
    src: str
    lane: Expr

    def describe(self) -> str:
        return f"Shfl {self.var} = {self.src} of lane {_s(self.lane)}"


@dataclass(frozen=True)
class VoteAny(Op):
    """``var = vote.sync.any.pred(pred)`` over the whole warp (membermask 0xffffffff): 1 on every lane when ``pred``
    is nonzero on any lane of the warp, else 0 (PTX ISA "vote.sync"; lowered as ``setp``, ``vote.sync.any.pred``,
    ``selp``).

    Why it exists: a value every lane of the warp already holds the same (the split-K verdict a
    :class:`NamedBarrierPopc` returns) is not warp-uniform to ptxas, so a branch on it is divergent and ptxas
    compiles the code after it per thread (``WARPSYNC``, no uniform datapath).  The same value passed through the
    vote is the result of a warp-wide reduction, which ptxas does treat as warp-uniform (docs/performance.md,
    "The pair's last-wave k-loop").
    """

    collective: ClassVar[bool] = True
    per_lane: ClassVar[tuple[str, ...]] = ("pred",)

    var: str
    pred: Expr

    def describe(self) -> str:
        return f"VoteAny {self.var} = any over the warp of ({_s(self.pred)})"


# ------------------------------------------------------------------ thread / cluster sync


@dataclass(frozen=True)
class CtaSync(Op):
    """``bar.sync 0``: every thread of the CTA."""

    collective: ClassVar[bool] = True


@dataclass(frozen=True)
class NamedBarrier(Op):
    """``bar.sync id, threads``: ``threads`` threads (whole warps) of the CTA; id in [1, 15]."""

    collective: ClassVar[bool] = True

    id: Expr
    threads: int

    def describe(self) -> str:
        return f"NamedBarrier id={_s(self.id)} threads={self.threads}"


@dataclass(frozen=True)
class NamedBarrierPopc(Op):
    """``bar.red.popc.u32 var, id, threads, pred``: a :class:`NamedBarrier` that also counts its threads whose
    ``pred`` is nonzero; every participating thread gets the count in ``var`` (uniform).

    The barrier orders memory like ``bar.sync`` (PTX ISA "bar, barrier": ``bar.red`` has the barrier semantics of
    ``bar.sync``), so one thread's acquire before it orders the other threads' loads after it.
    """

    collective: ClassVar[bool] = True
    per_lane: ClassVar[tuple[str, ...]] = ("pred",)

    var: str
    id: Expr
    threads: int
    pred: Expr

    def describe(self) -> str:
        return f"NamedBarrierPopc {self.var} = count({_s(self.pred)}) id={_s(self.id)} threads={self.threads}"


@dataclass(frozen=True)
class ClusterSync(Op):
    """``barrier.cluster.arrive.release`` + ``wait.acquire``: every thread of the cluster."""

    collective: ClassVar[bool] = True


#: :class:`GridDepControl` actions (PTX ISA "griddepcontrol")
GRID_DEP_ACTIONS = ("wait", "launch_dependents")


@dataclass(frozen=True)
class GridDepControl(Op):
    """``griddepcontrol.{action}`` (PTX ISA "griddepcontrol", sm_90+): programmatic dependent launch.

    ``wait``: the executing thread waits until every prerequisite grid in flight has completed and its memory
    operations are performed and visible to this grid; with no prerequisite grid (a launch without the programmatic
    stream serialization attribute) it returns at once.  ``launch_dependents``: the dependents may be scheduled once
    every CTA of this grid has issued it or exited (repeats in a CTA have no further effect); it orders no memory.
    A kernel launched with the attribute must not touch global memory before its ``wait`` (the verifier's rule).
    """

    action: str

    def __post_init__(self):
        if self.action not in GRID_DEP_ACTIONS:
            raise ValueError(f"GridDepControl action={self.action!r}: must be one of {', '.join(GRID_DEP_ACTIONS)}")

    def describe(self) -> str:
        return f"GridDepControl {self.action}"


# ------------------------------------------------------------------ mbarrier


@dataclass(frozen=True)
class MbarrierInit(Op):
    """``mbarrier.init.shared::cta.b64 [bar], count``."""

    bar: Bar
    count: Expr

    def describe(self) -> str:
        return f"MbarrierInit {self.bar} count={_s(self.count)}"


@dataclass(frozen=True)
class FenceMbarrierInit(Op):
    """``fence.mbarrier_init.release.cluster``: inits visible to the cluster (before the cluster sync)."""


@dataclass(frozen=True)
class MbarrierArrive(Op):
    """Arrive once on ``bar`` (local, or on cluster rank ``cta``'s barrier at the same offset).

    scope: memory-ordering scope of the arrive's release, ``"cta"`` (the default ``.release.cta``; the
    seeds' form, also for remote arrives that only release a resource) or ``"cluster"``
    (``.release.cluster``: a cross-CTA data hand-off; PTX ISA "Memory Consistency Model: scope").
    """

    bar: Bar
    cta: Expr | None = None
    scope: str = "cta"

    def describe(self) -> str:
        return (f"MbarrierArrive {self.bar}" + (f" on cta {_s(self.cta)}" if self.cta is not None else "")
                + (f" release.{self.scope}" if self.scope != "cta" else ""))


@dataclass(frozen=True)
class MbarrierArriveExpectTx(Op):
    """Arrive once and expect ``tx_bytes`` more transaction bytes this phase (local or rank ``cta``)."""

    bar: Bar
    tx_bytes: int
    cta: Expr | None = None

    def describe(self) -> str:
        where = f" on cta {_s(self.cta)}" if self.cta is not None else ""
        return f"MbarrierArriveExpectTx {self.bar} tx={self.tx_bytes} B{where}"


class WaitRole(StrEnum):
    """What an ``MbarrierWait`` waits for, in CuTe's pipeline words; the value is its printed form (IR, PTX comments,
    watchdog records).  The accumulator ring's waits carry the ring's name."""

    PRODUCER_ACQUIRE = "producer_acquire"  # a producer waits for a free slot (``empty``)
    PRODUCER_TAIL = "producer_tail"  # the producer's waits for the final releases before it exits
    CONSUMER_WAIT = "consumer_wait"  # a consumer waits for a filled slot (``full``)
    RELAY_WAIT = "relay_wait"  # level 1's peer waits its own ``full`` before relaying it to the leader
    MATH_ORDER_WAIT = "math_order_wait"  # pingpong: a warpgroup waits its turn for the mainloop
    ACC_PRODUCER_ACQUIRE = "producer_acquire (accumulator)"  # the MMA issuer waits for a free TMEM stage
    ACC_CONSUMER_WAIT = "consumer_wait (accumulator)"  # the epilogue waits for a finished TMEM stage
    WAIT = "wait"  # none of the above

    @property
    def is_producer(self) -> bool:
        """A producer's wait: on ``empty``, parity ``phase ^ 1`` (passes at once on a fresh barrier)."""
        return self in (WaitRole.PRODUCER_ACQUIRE, WaitRole.PRODUCER_TAIL, WaitRole.ACC_PRODUCER_ACQUIRE)

    @property
    def is_consumer(self) -> bool:
        """A consumer's wait for a filled slot: ``full`` of the operand ring or of the accumulator ring."""
        return self in (WaitRole.CONSUMER_WAIT, WaitRole.ACC_CONSUMER_WAIT)


@dataclass(frozen=True)
class MbarrierWait(Op):
    """Spin on ``mbarrier.try_wait.parity`` until the phase of parity ``phase`` of ``bar`` completed.

    ``role``: the :class:`WaitRole` of the wait (a string of its values is taken as that role).
    ``scope``: ``"cta"`` (default ``.acquire.cta``) or ``"cluster"`` (``.acquire.cluster``: the wait
    completes a cross-CTA data hand-off: the arrive it waits for released at cluster scope).
    """

    bar: Bar
    phase: Expr
    role: WaitRole = WaitRole.WAIT
    scope: str = "cta"
    watch: "WaitSite | None" = None  # set only by :func:`ptxgen.ir.watchdog.instrument` (bounded wait)

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", WaitRole(self.role))

    def describe(self) -> str:
        return (f"MbarrierWait {self.bar} phase={_s(self.phase)} ({self.role})"
                + (f" acquire.{self.scope}" if self.scope != "cta" else ""))


@dataclass(frozen=True)
class WaitSite:
    """A watched ``MbarrierWait``: its id in the kernel's wait table and what the record captures.

    site: index into ``Kernel.wait_sites`` (written to the watchdog record).
    tile, kblock: the tile loop variable ``t`` and the k-block ``kb`` when bound at the wait (None: not bound).
    """

    site: int
    tile: Expr | None = None
    kblock: Expr | None = None


# ------------------------------------------------------------------ TMA


@dataclass(frozen=True)
class TmaLoad(Op):
    """``cp.async.bulk.tensor.2d`` global -> shared of the kernel's box of ``tensor`` at (col, row).

    dst: byte offset in shared memory.  bar: barrier receiving complete_tx.
    two_sm: ``.cta_group::2``; the barrier address is masked with the peer bit
        (0xFEFFFFFF) so completion lands on rank 0's barrier; ``dst`` is not masked.
    multicast: CTA mask (0 = none): data lands at ``dst`` in every CTA of the
        mask and completes on each one's ``bar``.
    cache_hint: ``"none"``, ``"evict_first"`` or ``"evict_last"``: the L2 eviction priority of the
        loaded lines (``.L2::cache_hint`` with a ``createpolicy.fractional`` policy; no effect on data).
    """

    tensor: str
    dst: Expr
    col: Expr
    row: Expr
    bar: Bar
    two_sm: bool = False
    multicast: int = 0
    cache_hint: str = "none"

    def describe(self) -> str:
        extra = " 2sm(peer-bit masked barrier)" if self.two_sm else ""
        extra += f" multicast={self.multicast:#x}" if self.multicast else ""
        extra += f" L2::{self.cache_hint}" if self.cache_hint != "none" else ""
        return f"TmaLoad {self.tensor} box at (col={_s(self.col)}, row={_s(self.row)}) -> smem+{_s(self.dst)} bar={self.bar}{extra}"


@dataclass(frozen=True)
class TmaStore(Op):
    """``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group``: the plan's D box at (col, row) from ``src``."""

    tensor: str
    src: Expr
    col: Expr
    row: Expr

    def describe(self) -> str:
        return f"TmaStore {self.tensor} box at (col={_s(self.col)}, row={_s(self.row)}) <- smem+{_s(self.src)}"


@dataclass(frozen=True)
class BulkCommitGroup(Op):
    """``cp.async.bulk.commit_group``."""


@dataclass(frozen=True)
class BulkWaitGroup(Op):
    """``cp.async.bulk.wait_group[.read] n``: at most ``n`` groups pending (read: their smem reads)."""

    n: int
    read: bool = True

    def describe(self) -> str:
        return f"BulkWaitGroup{'Read' if self.read else ''} {self.n}"


@dataclass(frozen=True)
class FenceProxyAsync(Op):
    """``fence.proxy.async.shared::cta``: generic-proxy smem writes visible to the async proxy."""


# ------------------------------------------------------------------ tcgen05 (sm_100a)


@dataclass(frozen=True)
class TmemAlloc(Op):
    """``tcgen05.alloc`` of ``cols`` columns (whole warp); the address lands in the kernel's tmem slot."""

    collective: ClassVar[bool] = True

    cols: int

    def describe(self) -> str:
        return f"TmemAlloc {self.cols} columns"


@dataclass(frozen=True)
class TmemRelinquish(Op):
    """``tcgen05.relinquish_alloc_permit`` (whole warp)."""

    collective: ClassVar[bool] = True


@dataclass(frozen=True)
class TmemBase(Op):
    """``var = ld.shared.u32 [tmem slot]``: the allocated TMEM address."""

    var: str


@dataclass(frozen=True)
class TmemDealloc(Op):
    """``tcgen05.dealloc`` of ``cols`` columns at ``taddr`` (whole warp)."""

    collective: ClassVar[bool] = True

    taddr: Expr
    cols: int


@dataclass(frozen=True)
class TcgenFence(Op):
    """``tcgen05.fence::before_thread_sync`` (kind ``before``) or ``::after_thread_sync`` (``after``)."""

    kind: str

    def describe(self) -> str:
        return f"TcgenFence {self.kind}_thread_sync"


@dataclass(frozen=True)
class Umma(Op):
    """``tcgen05.mma.cta_group::G.kind::f16 [d], adesc, bdesc, idesc, accumulate`` (one thread).

    d: TMEM address of the accumulator (lane 0, first column).
    a_lo / b_lo: descriptor low words (start >> 4 | LBO field << 16).
    a_hi / b_hi: the descriptors' constant high words (PTX ISA "Shared memory descriptor").
    idesc: the 32-bit instruction descriptor (PTX ISA "Instruction descriptor", ``.kind::f16``).
    accumulate: 0 overwrites.
    """

    d: Expr
    a_lo: Expr
    b_lo: Expr
    accumulate: Expr
    idesc: int = 0
    a_hi: int = 0
    b_hi: int = 0

    def describe(self) -> str:
        return f"Umma d={_s(self.d)} a_lo={_s(self.a_lo)} b_lo={_s(self.b_lo)} acc={_s(self.accumulate)}"


@dataclass(frozen=True)
class UmmaCommit(Op):
    """``tcgen05.commit ... mbarrier::arrive::one``: arrive on ``bar`` once all prior MMAs of the thread completed.

    multicast: CTA mask (0 = local barrier only).
    """

    bar: Bar
    multicast: int = 0

    def describe(self) -> str:
        return f"UmmaCommit -> {self.bar}" + (f" multicast={self.multicast:#x}" if self.multicast else "")


@dataclass(frozen=True)
class TmemLoad(Op):
    """``tcgen05.ld.sync.aligned.32x32b.x{ncols}``: lane l of warp w gets TMEM lane ``lane_of(taddr) + l``.

    taddr: full TMEM address (base + (32*(w%4) << 16) + column); fills ``dst[0:ncols]`` (f32).
    """

    collective: ClassVar[bool] = True

    dst: str
    taddr: Expr
    ncols: int

    def describe(self) -> str:
        return f"TmemLoad {self.dst}[0:{self.ncols}] <- tmem {_s(self.taddr)}"


@dataclass(frozen=True)
class TmemWaitLd(Op):
    """``tcgen05.wait::ld``: prior TMEM loads of the thread are done."""


@dataclass(frozen=True)
class Nanosleep(Op):
    """``nanosleep.u32 ns`` (level 8 tensor-core throttle)."""

    ns: int


# ------------------------------------------------------------------ wgmma (sm_90a)


@dataclass(frozen=True)
class SetMaxNReg(Op):
    """``setmaxnreg.{inc|dec}.sync.aligned.u32 regs`` (whole warpgroup)."""

    collective: ClassVar[bool] = True

    action: str
    regs: int

    def describe(self) -> str:
        return f"SetMaxNReg {self.action} {self.regs}"


@dataclass(frozen=True)
class WgmmaFence(Op):
    """``wgmma.fence.sync.aligned``."""

    collective: ClassVar[bool] = True


@dataclass(frozen=True)
class Wgmma(Op):
    """``wgmma.mma_async.m64n{n}k{k}.f32.{atype}.{atype}`` into the warpgroup's fragment array ``acc`` (n/2 f32 per
    thread).

    a_lo / b_lo: descriptor low words; a_hi / b_hi: their constant high words (PTX ISA
    "Matrix Descriptor Format").  accumulate: 0 overwrites (scale-d false).
    atype: the input type, ``bf16`` (k = 16) or ``e4m3`` (k = 32; 8-bit inputs are K-major only and take no
        transpose immediates, PTX ISA "wgmma.mma_async").
    trans_a, trans_b: the transpose immediates (imm-trans-a, imm-trans-b): A / B is MN-major in shared memory
        (16-bit inputs only).
    """

    collective: ClassVar[bool] = True

    acc: str
    n: int
    a_lo: Expr
    b_lo: Expr
    accumulate: Expr
    a_hi: int = 0
    b_hi: int = 0
    atype: str = "bf16"
    k: int = 16
    trans_a: bool = False
    trans_b: bool = False

    def describe(self) -> str:
        kind = "" if self.atype == "bf16" else f" {self.atype}"
        majors = "".join(f" {x} MN-major" for x, t in (("A", self.trans_a), ("B", self.trans_b)) if t)
        return (f"Wgmma m64n{self.n}k{self.k}{kind} {self.acc} a_lo={_s(self.a_lo)} b_lo={_s(self.b_lo)} "
                f"acc={_s(self.accumulate)}{majors}")


@dataclass(frozen=True)
class ScaleLoad(Op):
    """FP8: the scales of one promotion (whole warp): ``dst[0] = sa[row l/4] * sb``, ``dst[1] = sa[row l/4 + 8] *
    sb`` in fp32 (three ``ld.shared.f32``, two ``mul.f32``).

    A lane's values of a wgmma m64nN fragment lie in rows ``l/4`` and ``l/4 + 8`` of its warp's 16 (PTX ISA "wgmma:
    Matrix fragments for .m64nNk32"), so each lane reads two scale_a values: at ``sa_addr`` (per lane) and
    ``sa_addr + row_half``; ``sb_addr`` (uniform) holds the chunk's scale_b.  Addresses are byte offsets from the
    dynamic shared-memory base, in the landed stage's scale slots: the op reads shared memory, so it sits after
    the stage's ``full`` wait and before its release.  The consumer issues it before the k-block's wgmmas: no
    ``ld.shared`` waits behind their shared-memory operand reads, and the promotion reads registers only.
    """

    collective: ClassVar[bool] = True
    per_lane: ClassVar[tuple[str, ...]] = ("sa_addr",)

    dst: str
    sa_addr: Expr
    sb_addr: Expr
    row_half: int = 32

    def describe(self) -> str:
        return (f"ScaleLoad {self.dst}[0:2] = scale_a(smem+{_s(self.sa_addr)}, +{self.row_half}) x "
                f"scale_b(smem+{_s(self.sb_addr)})")


@dataclass(frozen=True)
class PromoteScaled(Op):
    """FP8 promotion of a block partial (whole warp): ``acc[offset + j] (+)= part[j] * scales[(j/2) & 1]`` for
    ``j < n``, fp32 (``fma.rn.f32`` per value, or ``mul.rn.f32`` when ``accumulate`` is False: a tile's first
    k-block initialises the accumulator).

    ``part`` is a wgmma m64nN fragment (N = 2n): value j of lane l lies in row ``l/4 + 8 ((j/2) & 1)`` of the
    warp's 16 rows (PTX ISA "wgmma: Matrix fragments for .m64nNk32"); ``scales`` holds the two scale products of
    those rows (a :class:`ScaleLoad`).  The op reads ``part`` only after the ``wgmma.wait_group`` that retires the
    wgmmas writing it; it reads no shared memory.
    """

    collective: ClassVar[bool] = True

    acc: str
    part: str
    n: int
    offset: int
    scales: str
    accumulate: bool = True

    def describe(self) -> str:
        op = "+=" if self.accumulate else "="
        return (f"PromoteScaled {self.acc}[{self.offset}:{self.offset + self.n}] {op} {self.part}[0:{self.n}] x "
                f"{self.scales}[0:2]")


@dataclass(frozen=True)
class WgmmaCommit(Op):
    """``wgmma.commit_group.sync.aligned``."""

    collective: ClassVar[bool] = True


@dataclass(frozen=True)
class WgmmaWait(Op):
    """``wgmma.wait_group.sync.aligned n``: at most ``n`` wgmma groups pending."""

    collective: ClassVar[bool] = True

    n: int

    def describe(self) -> str:
        return f"WgmmaWait {self.n}"


# ------------------------------------------------------------------ epilogue data movement


@dataclass(frozen=True)
class Pack16(Op):
    """``dst[i] = fmt(src[i])`` for ``i < n`` (n even): f32 values rounded to nearest even and packed two per
    32-bit register, element ``2j`` in the low half of word ``j`` (``cvt.rn.{bf16|f16}x2.f32``; whole warp).

    The sm_90a overlapped epilogue (``epilogue.overlap``) packs a finished tile's accumulator here, so the next
    tile's wgmma may overwrite the accumulator while these words are stored.  Stores read ``dst`` with
    ``packed=True``, by element index.
    """

    collective: ClassVar[bool] = True

    dst: str
    src: str
    n: int
    fmt: str = "bf16"

    def describe(self) -> str:
        return f"Pack16 {self.dst}[0:{self.n}] = {self.fmt}({self.src}[0:{self.n}])"


@dataclass(frozen=True)
class _SharedStore16(Op):
    """Fields of the 16-bit stores of register values into shared memory (:class:`StShared16`, :class:`StMatrix`).

    fmt: the 16-bit store type, ``"bf16"`` (default) or ``"f16"`` (``cvt.rn.f16x2.f32``; the NVFP4 kernel's C).
    packed: ``src`` was written by :class:`Pack16` (values already ``fmt``, two per register); ``idx`` are
        element indices in (even, odd) pairs of one word each.
    """

    per_lane: ClassVar[tuple[str, ...]] = ("addr",)

    label: ClassVar[str]
    addr: Expr
    src: str
    idx: tuple[int, ...]
    fmt: str = "bf16"
    packed: bool = False

    def describe(self) -> str:
        what = "packed " if self.packed else ""
        return f"{self.label} smem+{_s(self.addr)} <- {what}{self.fmt}({self.src}[{self.idx[0]}..{self.idx[-1]}])"


@dataclass(frozen=True)
class StShared16(_SharedStore16):
    """Convert ``src[idx]`` (f32) to bf16 (round to nearest even) and store them contiguously at smem+``addr``.

    len(idx) in (2, 4, 8): one ``st.shared`` of 4, 8 or 16 bytes.  fmt, packed: see :class:`_SharedStore16`;
    ``fmt="e4m3"`` (an e4m3 D's staging, not packed): len(idx) == 2, one ``cvt.rn.satfinite.e4m3x2.f32`` and one
    ``st.shared.b16`` of the two bytes, ``src[idx[0]]`` at ``addr`` (PTX ISA "cvt": nearest even, saturating to
    +-448, NaN stays NaN).
    """

    label: ClassVar[str] = "StShared16"


@dataclass(frozen=True)
class StMatrix(_SharedStore16):
    """``stmatrix.sync.aligned.m8n8.x4.shared.b16 [addr], {w0, w1, w2, w3}``: the warp stores four 8x8 bf16 matrices
    (whole warp; PTX ISA "stmatrix").

    Lane ``l`` supplies ``addr``, the smem byte offset of row ``l % 8`` of matrix ``l // 8`` (16 contiguous bytes),
    and its word ``j`` = ``fmt``-pair (``src[idx[2j]]``, ``src[idx[2j+1]]``) holds row ``l // 4``, columns
    ``2 (l % 4)`` and ``2 (l % 4) + 1`` of matrix ``j``: the accumulator fragment layout of ``wgmma`` (and ``mma``),
    so one instruction stores 8 values per lane where ``st.shared.b32`` stores 2.  len(idx) == 8.
    fmt, packed: see :class:`_SharedStore16`.
    """

    collective: ClassVar[bool] = True

    label: ClassVar[str] = "StMatrix x4"


@dataclass(frozen=True)
class LdMatrix(Op):
    """``ldmatrix.sync.aligned.m8n8.x4.shared.b16 {w0, w1, w2, w3}, [addr]``: the warp loads four 8x8 16-bit
    matrices, the exact inverse of :class:`StMatrix` (whole warp; PTX ISA "ldmatrix").

    Lane ``l`` supplies ``addr``, the smem byte offset of row ``l % 8`` of matrix ``l // 8`` (16 contiguous bytes),
    and receives in word ``j`` row ``l // 4``, columns ``2 (l % 4)`` and ``2 (l % 4) + 1`` of matrix ``j``: the
    wgmma accumulator fragment layout.  Word ``j``'s low half goes to ``dst[idx[2j]]``, its high half to
    ``dst[idx[2j + 1]]``, each converted exactly from ``fmt`` (``bf16`` / ``f16``) to f32.  len(idx) == 8.
    """

    collective: ClassVar[bool] = True
    per_lane: ClassVar[tuple[str, ...]] = ("addr",)

    dst: str
    addr: Expr
    idx: tuple[int, ...]
    fmt: str = "bf16"

    def describe(self) -> str:
        return f"LdMatrix x4 {self.dst}[{_span(self.idx)}] <- {self.fmt} smem+{_s(self.addr)}"


@dataclass(frozen=True)
class StGlobal16(Op):
    """``D[row, col + j] = bf16(src[idx[j]])`` for each j with row < m and col + j < n (D row-major, ld = n).

    fmt: ``"bf16"`` (default) or ``"f16"``, as :class:`StShared16`.
    packed: ``src`` was written by :class:`Pack16`, as :class:`StShared16`.
    row_end: per lane, the row bound in place of m (``row < row_end``): a grouped GEMM's rows past a group's
        valid rows (``masked_m``, padding rows of ``m_indices``) stay untouched; None: m.
    transposed: swap-AB: the kernel's ``[m, n]`` result is stored as ``D^T``, a row-major ``[n, m]`` D (ld = m):
        ``D^T[col + j, row] = src[idx[j]]`` for each j with row < m and col + j < n, one ``st.global.b16`` per
        element (the run's elements lie ``m`` apart).
    """

    per_lane: ClassVar[tuple[str, ...]] = ("row", "col", "row_end")

    row: Expr
    col: Expr
    src: str
    idx: tuple[int, ...]
    fmt: str = "bf16"
    packed: bool = False
    row_end: Expr | None = None
    transposed: bool = False

    def describe(self) -> str:
        what = "packed " if self.packed else ""
        bound = "" if self.row_end is None else f" if row < {_s(self.row_end)}"
        if self.transposed:
            return (f"StGlobal16 D^T[{_s(self.col)}:+{len(self.idx)}, {_s(self.row)}] <- "
                    f"{what}{self.fmt}({self.src}[{self.idx[0]}..{self.idx[-1]}]){bound}")
        return (f"StGlobal16 D[{_s(self.row)}, {_s(self.col)}:+{len(self.idx)}] <- "
                f"{what}{self.fmt}({self.src}[{self.idx[0]}..{self.idx[-1]}]){bound}")


@dataclass(frozen=True)
class LdGlobalNcU32(Op):
    """``var = ld.global.nc.u32 [param + 4 * index]``: one word of a read-only u32 table in global memory (PTX ISA
    "ld": ``.nc``, the non-coherent read-only path; the table is written before the launch and never during it).

    The grouped scheduler's reads of ``masked_m[g]`` / ``m_indices[row]`` (parameter ``group_ptr``).  ``index``
    may differ across lanes (a consumer reads its own rows' entries); ``var`` is then per lane.
    """

    per_lane: ClassVar[tuple[str, ...]] = ("index",)

    var: str
    index: Expr
    param: str = "group_ptr"

    def describe(self) -> str:
        return f"LdGlobalNcU32 {self.var} = {self.param}[{_s(self.index)}]"


# ------------------------------------------------------------------ global workspace (split-K fixup)
# Offsets are u32 byte offsets from the kernel parameter ``param`` (a u64 global address, the split-K
# ``workspace``); PTX ISA "ld", "st", "atom", "Memory Consistency Model: release and acquire patterns".


@dataclass(frozen=True)
class StGlobalF32(Op):
    """``st.global.v4.f32 [param + offset], {src[idx]}``: four fp32 register values per lane (a partial tile chunk).

    offset: per-lane byte offset (16-byte aligned).  A weak store: a later release (``AtomGlobalAdd``) publishes it.
    """

    per_lane: ClassVar[tuple[str, ...]] = ("offset",)

    offset: Expr
    src: str
    idx: tuple[int, ...]
    param: str = "workspace"

    def describe(self) -> str:
        return f"StGlobalF32 {self.param}+{_s(self.offset)} <- {self.src}[{self.idx[0]}..{self.idx[-1]}]"


@dataclass(frozen=True)
class LdGlobalF32(Op):
    """``ld.global.v4.f32`` of [param + offset] per lane, added into ``dst[idx]`` (``add.f32``): a partial tile chunk.

    Must follow an acquire (``AtomGlobalAdd``) of the counter that published it, by this thread or
    ordered before it by a thread barrier.  pred (uniform): where 0 the load is skipped and 0.0 is added (a
    predicated ``ld``, not a branch: ptxas serializes the wgmma pipeline (C7515) when accumulator registers
    are redefined on only some paths of the tile loop).
    """

    per_lane: ClassVar[tuple[str, ...]] = ("offset",)

    offset: Expr
    dst: str
    idx: tuple[int, ...]
    pred: Expr | None = None
    param: str = "workspace"

    def describe(self) -> str:
        when = f" if {_s(self.pred)}" if self.pred is not None else ""
        return f"LdGlobalF32 {self.dst}[{self.idx[0]}..{self.idx[-1]}] += {self.param}+{_s(self.offset)}{when}"


@dataclass(frozen=True)
class AtomGlobalAdd(Op):
    """``var = atom.{sem}.{scope}.global.add.u32 [param + offset], value`` (one thread): arrive on a split-K counter
    and read the count before this arrival.

    sem ``acq_rel`` (default): a release (the thread's prior memory operations, and those ordered before it by a
    thread barrier, are visible to whoever acquires a later value of the counter) and an acquire (the thread's later
    memory operations, and after a thread barrier those of the threads it syncs with, see what every earlier
    release on the counter published); PTX ISA "atom", "Memory Consistency Model: release and acquire patterns".
    """

    var: str
    offset: Expr
    value: int
    sem: str = "acq_rel"
    scope: str = "gpu"
    param: str = "workspace"

    def describe(self) -> str:
        return f"AtomGlobalAdd {self.var} = {self.param}+{_s(self.offset)} += {self.value} ({self.sem}.{self.scope})"


@dataclass(frozen=True)
class StGlobalU32(Op):
    """``st.relaxed.{scope}.global.u32 [param + offset], value`` (one thread): reset a split-K counter."""

    offset: Expr
    value: int
    scope: str = "gpu"
    param: str = "workspace"

    def describe(self) -> str:
        return f"StGlobalU32 {self.param}+{_s(self.offset)} = {self.value} (relaxed.{self.scope})"


def walk(body):
    """Yield every op of ``body`` depth-first, descending into control ops."""
    for op in body:
        yield op
        if isinstance(op, WarpSwitch):
            for r in op.roles:
                yield from walk(r.body)
        elif isinstance(op, (For, Elect)):
            yield from walk(op.body)
        elif isinstance(op, If):
            yield from walk(op.then)
            yield from walk(op.orelse)



# ------------------------------------------------------------------ block-scaled tcgen05 (NVFP4, sm_100a)
# Self-contained ops: they carry their descriptor constants and cta_group, so emitters and the
# simulator read them from the op, never from the plan.


@dataclass(frozen=True)
class TmemCopy(Op):
    """``tcgen05.cp.cta_group::G.32x128b.warpx4 [taddr], sdesc`` (one thread): smem -> TMEM, asynchronous.

    Copies 32 rows x 128 bits (one 512-B scale-factor atom) into TMEM lanes 0-31, columns
    ``col(taddr) .. col(taddr) + 3``, and replicates them to the other three 32-lane
    partitions (``warpx4``).  Ordered before a later ``tcgen05.mma`` of the same thread (PTX ISA
    "tcgen05 memory consistency": tcgen05.cp then tcgen05.mma issued by one thread execute in
    order); its completion is tracked by ``tcgen05.commit`` like an MMA's.

    taddr: TMEM address (lane field 0, first column).
    src_lo: low word of the source smem descriptor, ``(start >> 4) | (LBO >> 4) << 16``.
    desc_hi: constant high word (``ptxgen.descriptors.sf_copy_desc_hi()`` = 0x4008).
    cta_group: 1 or 2 (must match every other tcgen05 op of the kernel).
    """

    taddr: Expr
    src_lo: Expr
    desc_hi: int
    cta_group: int = 1
    shape: str = "32x128b.warpx4"

    def describe(self) -> str:
        return f"TmemCopy {self.shape} tmem {_s(self.taddr)} <- smem desc lo={_s(self.src_lo)} hi={self.desc_hi:#x}"


@dataclass(frozen=True)
class UmmaBlockScaled(Op):
    """``tcgen05.mma.cta_group::G.kind::{kind}.block_scale.{scale_vec} [d], adesc, bdesc, idesc, [sfa], [sfb], p``.

    One thread issues it.  D[M, N] (+)= (A * scale_A) @ (B * scale_B)^T over K = 64 (dense
    ``.kind::mxf4nvf4``), A and B packed e2m1 in smem (K-major, 128B swizzle), scale_A / scale_B
    ue4m3 (``block16``) in TMEM at columns ``sfa`` / ``sfb`` (PTX ISA "tcgen05.mma", "Block Scaling");
    ``.kind::mxf8f6f4``: K = 32, e4m3 A and B, one ue8m0 scale per row (``block32``), the byte of the scale
    column named by the idesc's scale-factor data IDs (``umma_idesc_mxf8f6f4``).

    d, sfa, sfb: TMEM addresses.  a_lo / b_lo: smem descriptor low words.
    accumulate: 0 overwrites D.  idesc, a_desc_hi, b_desc_hi: the constants this op needs
    (``ptxgen.descriptors.umma_idesc_mxf4nvf4``, ``nvfp4_operand_desc_hi``), carried here.
    collector: ``.collector::a::{fill,use,lastuse,discard}`` (PTX ISA "tcgen05.mma": the A matrix kept in the
    tensor core's collector buffer for the next MMA on the same A), "" for none (the ISA's default, discard).
    """

    d: Expr
    a_lo: Expr
    b_lo: Expr
    sfa: Expr
    sfb: Expr
    accumulate: Expr
    idesc: int
    a_desc_hi: int
    b_desc_hi: int
    cta_group: int = 1
    kind: str = "mxf4nvf4"
    scale_vec: str = "block16"
    collector: str = ""

    def describe(self) -> str:
        return (f"UmmaBlockScaled {self.kind}.{self.scale_vec} d={_s(self.d)} a_lo={_s(self.a_lo)} "
                f"b_lo={_s(self.b_lo)} sfa={_s(self.sfa)} sfb={_s(self.sfb)} acc={_s(self.accumulate)} "
                f"idesc={self.idesc:#010x}" + (f" collector::a::{self.collector}" if self.collector else ""))


# ------------------------------------------------------------------ fused epilogue (ptxgen.epi expressions)


@dataclass(frozen=True)
class EpilogueExpr(Op):
    """``dst[idx[j]] = expr`` at value ``j``, f32 per thread, for each ``j < len(idx)`` (whole warp).

    ``expr`` is a :mod:`ptxgen.epi` expression whose leaves are bound (:func:`ptxgen.epi.bind`): a
    :class:`ptxgen.epi.Reg` ``(array, idx)`` reads ``array[idx[j]]`` (an accumulator fragment, or the values an
    :class:`LdEpilogue` loaded), a :class:`ptxgen.epi.ParamLeaf` the f32 bits of a ``.u32`` kernel parameter, a
    :class:`ptxgen.epi.Num` a constant.  Each op's f32 instructions and error bound: :data:`ptxgen.epi.OPS`.
    """

    collective: ClassVar[bool] = True

    dst: str
    idx: tuple[int, ...]
    expr: object

    def describe(self) -> str:
        return f"EpilogueExpr {self.dst}[{_span(self.idx)}] = {_epi_text(self.expr)}"


@dataclass(frozen=True)
class LdEpilogue(Op):
    """``ld.global`` of an epilogue operand into ``dst[idx]`` (as f32): element ``j`` of the run is, by ``layout``,
    ``col``: ``P[col + j]`` (a vector ``[N]``), ``row``: ``P[row]`` (a vector ``[M]``; one element), ``tile``:
    ``P[row * n + col + j]`` (an ``[M, N]`` row-major tensor, ld = n), ``tile_t``: ``P[(col + j) * m + row]`` (a
    swap-AB kernel's ``[M, N]`` operand: the caller's row-major tensor is the transpose of the kernel's ``m x n``
    accumulator, ld = m); ``P`` the global pointer in parameter ``param``, elements of ``dtype`` (``bf16``,
    ``f16`` or ``f32``; 16-bit ones converted exactly to f32).

    guard: an element outside D (``row >= m`` or ``col + j >= n``, the guard :class:`StGlobal16` keeps) is not
    loaded and reads 0.0 (a predicated load); without it every load is issued (the verifier checks its bounds).
    """

    per_lane: ClassVar[tuple[str, ...]] = ("row", "col")

    dst: str
    param: str
    layout: str
    dtype: str
    row: Expr
    col: Expr
    idx: tuple[int, ...]
    guard: bool = True

    def element(self, row, col, m: int, n: int):
        """``(index, inside)`` of the element at the kernel's ``(row, col)`` (``col`` already ``col + j``) of an ``m x n``
        launch: its element index in ``P`` by ``layout``, and whether it lies inside D (the guard's test).  Ints, or
        numpy arrays that broadcast; the one definition the checks read the layouts by."""
        r_ok, c_ok = row < m, col < n
        if self.layout == "row":
            return row, r_ok
        if self.layout == "col":
            return col, c_ok
        return (row * n + col if self.layout == "tile" else col * m + row), r_ok & c_ok

    def describe(self) -> str:
        at = {"col": f"[{_s(self.col)}:+{len(self.idx)}]", "row": f"[{_s(self.row)}]",
              "tile": f"[{_s(self.row)}, {_s(self.col)}:+{len(self.idx)}]",
              "tile_t": f"[{_s(self.col)}:+{len(self.idx)}, {_s(self.row)}] (transposed)"}[self.layout]
        return (f"LdEpilogue {self.dst}[{_span(self.idx)}] <- {self.dtype} {self.param}{at}"
                + ("" if self.guard else " (unguarded)"))


@dataclass(frozen=True)
class AmaxLocal(Op):
    """``dst[slot] = max(dst[slot], |src[idx[j]]|)`` over the values ``j`` inside D: value ``j`` sits at ``(row, col +
    cols[j])``, inside when ``row < m`` and ``col + cols[j] < n`` (``max.f32`` of ``abs.f32``: a NaN is skipped).
    Per thread; ``dst[slot]`` holds a running max (0.0 to start: an :class:`EpilogueExpr` of ``0``)."""

    per_lane: ClassVar[tuple[str, ...]] = ("row", "col")

    dst: str
    slot: int
    src: str
    idx: tuple[int, ...]
    row: Expr
    col: Expr
    cols: tuple[int, ...]

    def describe(self) -> str:
        return (f"AmaxLocal {self.dst}[{self.slot}] max= |{self.src}[{_span(self.idx)}]| at "
                f"[{_s(self.row)}, {_s(self.col)} + ({','.join(map(str, self.cols))})] inside D")


@dataclass(frozen=True)
class AmaxReduce(Op):
    """``dst[i] = max over the group of lanes`` of ``dst[i]`` for each ``i`` of ``idx``: groups of ``lanes``
    consecutive lanes (4: a wgmma fragment row's quad; 32: the warp), ``shfl.sync.bfly.b32`` with xor 1, 2, ..,
    lanes/2 then ``max.f32`` (PTX ISA "shfl.sync"); whole warp."""

    collective: ClassVar[bool] = True

    dst: str
    idx: tuple[int, ...]
    lanes: int

    def describe(self) -> str:
        return f"AmaxReduce {self.dst}[{_span(self.idx)}] max over {self.lanes} lanes"


@dataclass(frozen=True)
class StEpilogue(Op):
    """A store of an epilogue output (the kernel parameter ``param``: a ``.u64`` global address) by ``layout``:

    * ``tile``: ``P[row * n + col + j] = fmt(src[idx[j]])`` for the ``j`` inside D (row < m, col + j < n); ``fmt``
      ``bf16`` / ``f16`` (2 bytes) or ``e4m3`` (1 byte, ``cvt.rn.satfinite.e4m3x2.f32``); a pair inside D with n
      even is one ``st.global.b32`` (16-bit) or ``.b16`` (e4m3).
    * ``block``: ``P[row * ceil(n / 128) + col / 128] = src[idx[0]]`` (f32) by the first lane of each quad, for
      row < m, col < n (a 1 x 128 block scale).
    * ``row_max``: ``red.global.max.u32 [P + 4 row], bits(src[idx[0]])`` by the first lane of each quad, row < m.
    * ``tensor_max``: ``red.global.max.u32 [P], bits(src[idx[0]])`` by lane 0 (nonnegative f32 order as u32).
    """

    per_lane: ClassVar[tuple[str, ...]] = ("row", "col")

    param: str
    layout: str
    fmt: str
    row: Expr
    col: Expr
    src: str
    idx: tuple[int, ...]

    def describe(self) -> str:
        at = {"tile": f"[{_s(self.row)}, {_s(self.col)}:+{len(self.idx)}]",
              "block": f"[{_s(self.row)}, ({_s(self.col)}) / 128]", "row_max": f"[{_s(self.row)}] max=",
              "tensor_max": "[0] max="}[self.layout]
        return f"StEpilogue {self.param}{at} <- {self.fmt}({self.src}[{_span(self.idx)}])"


__all__ = [n for n, v in list(globals().items()) if getattr(v, "__module__", None) == __name__ and not n.startswith("_")]
