"""The effects of one thread: what an instruction does outside the thread, as typed tuples.

Both sides of the PTX differential write them: the PTX interpreter (:mod:`.interp`) for the emitted
instructions and :mod:`.diff` for the IR's events.  Each effect type is a ``NamedTuple`` whose first
field ``kind`` is the PTX instruction family it records (so an effect reads, prints and compares as the
tuple ``(kind, operands...)``); the constructor takes the operands only.  Addresses are ints (shared-window
addresses carry the CTA rank in bits 24..27), ``cta_group`` is 1 or 2, stored elements are
``(array, index, bits)``: the register element and the bit pattern stored (bf16; an f16 store tags them
``("f16", array, index, bits)``, an e4m3 store ``("e4m3", array, index, byte)``; an f32 store's bits are the
f32's).  Memory-order qualifiers are recorded as
``sem`` (``relaxed``/``release``/``acquire``) and ``scope`` (``cta``/``cluster``/``gpu``), the PTX defaults filled in.
"""

from __future__ import annotations

from typing import Any, NamedTuple


def _effect(name: str, kind: str, fields: str, doc: str) -> type:
    """A NamedTuple type ``(kind, *fields)`` whose constructor fixes ``kind``."""
    base = NamedTuple(f"_{name}", [("kind", str)] + [(f, Any) for f in fields.split()])

    def __new__(cls, *operands, **named):
        return base.__new__(cls, kind, *operands, **named)

    return type(name, (base,), {"__slots__": (), "__new__": __new__, "__doc__": doc, "KIND": kind,
                                "__module__": __name__})


# mbarrier (PTX ISA "mbarrier.init", "mbarrier.arrive", "mbarrier.test_wait/try_wait", "membar/fence")
MbarrierInit = _effect("MbarrierInit", "mbarrier.init", "addr count", "``mbarrier.init [addr], count``.")
MbarrierArrive = _effect("MbarrierArrive", "mbarrier.arrive", "space addr tx sem scope",
                         "``mbarrier.arrive[.expect_tx]``: space ``cta``/``cluster``, tx bytes (0: a plain arrive), "
                         "semantics and scope (``release``, ``cta`` by default).")
MbarrierTryWait = _effect("MbarrierTryWait", "mbarrier.try_wait", "addr parity sem scope",
                          "``mbarrier.try_wait.parity``: semantics and scope (``acquire``, ``cta`` by default).")
FenceMbarrierInit = _effect("FenceMbarrierInit", "fence.mbarrier_init", "sem scope",
                            "``fence.mbarrier_init.release.cluster``.")
# TMA (PTX ISA "cp.async.bulk.tensor", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group")
TmaLoad = _effect("TmaLoad", "tma.load", "tensor dst col row bar cta_group mask policy",
                  "A TMA load: mask 0 without multicast; policy the L2 cache hint or ``none``.")
TmaStore = _effect("TmaStore", "tma.store", "tensor src col row", "A TMA store.")
BulkCommit = _effect("BulkCommit", "bulk.commit", "", "``cp.async.bulk.commit_group``.")
BulkWait = _effect("BulkWait", "bulk.wait", "n read", "``cp.async.bulk.wait_group[.read] n``.")
FenceProxyAsync = _effect("FenceProxyAsync", "fence.proxy.async", "space",
                          "``fence.proxy.async.SPACE``: the state space (``all`` without one).")
# thread barriers and warp votes (PTX ISA "bar, barrier", "barrier.cluster", "vote.sync")
BarSync = _effect("BarSync", "bar.sync", "id threads", "``bar.sync id[, threads]`` (threads None: the whole CTA).")
BarrierClusterArrive = _effect("BarrierClusterArrive", "barrier.cluster.arrive", "sem",
                               "``barrier.cluster.arrive``: ``release`` (the default) or ``relaxed``.")
BarrierClusterWait = _effect("BarrierClusterWait", "barrier.cluster.wait", "sem",
                             "``barrier.cluster.wait``: ``acquire`` (the default and only one).")
Nanosleep = _effect("Nanosleep", "nanosleep", "ns", "``nanosleep.u32 ns``.")
GridDepControl = _effect("GridDepControl", "griddepcontrol", "action",
                         "``griddepcontrol.{wait,launch_dependents}`` (PTX ISA \"griddepcontrol\").")
SetMaxNReg = _effect("SetMaxNReg", "setmaxnreg", "action regs", "``setmaxnreg.{inc,dec}.sync.aligned.u32 regs``.")
# stores and loads (PTX ISA "st", "stmatrix", "ld", "red", "atom")
StShared = _effect("StShared", "st.shared", "addr elements", "``st.shared`` of packed bf16 words.")
StMatrix = _effect("StMatrix", "stmatrix", "addr elements", "``stmatrix.sync.aligned.m8n8.x4``: the lane's operands.")
LdMatrix = _effect("LdMatrix", "ldmatrix", "addr", "``ldmatrix.sync.aligned.m8n8.x4``: the lane's row address.")
StGlobal = _effect("StGlobal", "st.global", "addr element",
                   "One element of a bf16/f16/e4m3 ``st.global`` (D, or an epilogue output), at its own address.")
LdShared = _effect("LdShared", "ld.shared", "addr", "``ld.shared`` of the TMEM-address slot.")
LdGlobal = _effect("LdGlobal", "ld.global", "addr", "The hang watchdog's flag load (reads 0).")
AtomCas = _effect("AtomCas", "atom.cas", "sem scope addr cmp new",
                  "The hang watchdog's claim (old value 0; ``relaxed``, ``gpu`` by default).")
StGlobalU32 = _effect("StGlobalU32", "st.global.u32", "addr value", "The hang watchdog's record words.")
StGlobalF32 = _effect("StGlobalF32", "st.global.f32", "addr elements",
                      "A split-K partial (``st.global.v4.f32``) or an epilogue block scale (``st.global.f32``).")
LdGlobalF32 = _effect("LdGlobalF32", "ld.global.f32", "addr count", "A split-K partial read: ``ld.global.v4.f32``.")
LdGlobalNc = _effect("LdGlobalNc", "ld.global.nc", "param offset",
                     "One element of an epilogue operand (``ld.global.nc``): its pointer parameter and byte offset.")
LdGlobalTable = _effect("LdGlobalTable", "ld.global.nc.u32", "addr",
                        "A word of a read-only u32 table (the grouped scheduler's masked_m / m_indices).")
RedGlobal = _effect("RedGlobal", "red.global", "sem scope op addr value",
                    "``red.SEM.SCOPE.global.OP.u32``: op ``add`` (a split-K counter) or ``max`` (an amax output: the "
                    "bits of a nonnegative f32).")
AtomAdd = _effect("AtomAdd", "atom.add", "sem scope addr value", "``atom.SEM.SCOPE.global.add.u32`` (a split-K arrival).")
BarRedPopc = _effect("BarRedPopc", "bar.red.popc", "id threads", "``bar.red.popc.u32 d, id, threads, p`` (reads 1).")
VoteSync = _effect("VoteSync", "vote.sync", "mode pred value",
                   "``vote.sync.MODE.pred d, p, 0xffffffff`` (PTX ISA \"vote.sync\"): the mode (``any``, ``all``), the "
                   "thread's predicate and the warp's result; the IR fixes all three.")
StGlobalSemU32 = _effect("StGlobalSemU32", "st.global.sem.u32", "sem scope addr value",
                         "``st.relaxed.SCOPE.global.u32``.")
# tcgen05 (PTX ISA "tcgen05.alloc", "tcgen05.fence", "tcgen05.mma", "tcgen05.commit", "tcgen05.ld", "tcgen05.cp")
TmemAlloc = _effect("TmemAlloc", "tcgen05.alloc", "cta_group slot cols", "``tcgen05.alloc``.")
TmemRelinquish = _effect("TmemRelinquish", "tcgen05.relinquish", "cta_group", "``tcgen05.relinquish_alloc_permit``.")
TmemDealloc = _effect("TmemDealloc", "tcgen05.dealloc", "cta_group taddr cols", "``tcgen05.dealloc``.")
TcgenFence = _effect("TcgenFence", "tcgen05.fence", "side", "``tcgen05.fence::{before,after}_thread_sync``.")
Umma = _effect("Umma", "tcgen05.mma", "cta_group mma_kind d adesc bdesc idesc accumulate",
               "``tcgen05.mma``: ``mma_kind`` the ``.kind::`` (``f16`` for bf16 and f16 operands).")
UmmaBlockScaled = _effect("UmmaBlockScaled", "tcgen05.mma.block_scale",
                          "cta_group mma_kind scale_vec d adesc bdesc idesc sfa sfb accumulate",
                          "``tcgen05.mma ... .block_scale`` (NVFP4).")
TmemCopy = _effect("TmemCopy", "tcgen05.cp", "cta_group taddr sdesc shape", "``tcgen05.cp``.")
UmmaCommit = _effect("UmmaCommit", "tcgen05.commit", "cta_group bar mask", "``tcgen05.commit`` (mask 0: no multicast).")
TmemLoad = _effect("TmemLoad", "tcgen05.ld", "taddr shape num array", "``tcgen05.ld.SHAPE.xNUM``.")
TmemWaitLd = _effect("TmemWaitLd", "tcgen05.wait_ld", "", "``tcgen05.wait::ld``.")
# wgmma (PTX ISA "wgmma.fence", "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group")
WgmmaFence = _effect("WgmmaFence", "wgmma.fence", "", "``wgmma.fence.sync.aligned``.")
Wgmma = _effect("Wgmma", "wgmma", "array shape types adesc bdesc accumulate majors",
                "``wgmma.mma_async.SHAPE.TYPES`` (``m64n128k16``, ``f32.bf16.bf16``; ``m64n128k32``, ``f32.e4m3.e4m3``: D, "
                "A, B); majors: A's then B's, ``k`` or ``mn`` (the transpose immediates).")
WgmmaCommit = _effect("WgmmaCommit", "wgmma.commit", "", "``wgmma.commit_group.sync.aligned``.")
WgmmaWait = _effect("WgmmaWait", "wgmma.wait", "n", "``wgmma.wait_group.sync.aligned n``.")

#: every effect type by its kind
KINDS: dict[str, type] = {t.KIND: t for t in (
    MbarrierInit, MbarrierArrive, MbarrierTryWait, FenceMbarrierInit, TmaLoad, TmaStore, BulkCommit, BulkWait,
    FenceProxyAsync, BarSync, BarrierClusterArrive, BarrierClusterWait, Nanosleep, GridDepControl, SetMaxNReg, StShared, StMatrix,
    LdMatrix, StGlobal, LdShared, LdGlobal, AtomCas, StGlobalU32, StGlobalF32, LdGlobalF32, LdGlobalNc, LdGlobalTable,
    AtomAdd, BarRedPopc, VoteSync,
    StGlobalSemU32, TmemAlloc, TmemRelinquish, TmemDealloc, TcgenFence, Umma, UmmaBlockScaled, TmemCopy, UmmaCommit,
    TmemLoad, TmemWaitLd, WgmmaFence, Wgmma, WgmmaCommit, WgmmaWait)}

Effect = tuple
"""One effect: an instance of a :data:`KINDS` type (a tuple ``(kind, operands...)``)."""
