"""Layout, residency, TMEM lifetime, scopes and teardown.

Layout and teardown.  Shared-memory regions lie inside the allocation,
aligned (1024 B for 128B-swizzled operands), without overlap, and every
access stays inside one region slot; TMEM accesses stay inside the
allocation (and a warp's own 32-lane quarter); TMEM is allocated and freed
by the same warp with a thread barrier between the alloc, every use and the
dealloc (cluster-wide for ``cta_group::2``); a multi-CTA kernel ends with a
cluster barrier.
"""

from __future__ import annotations

from collections import defaultdict


from ...errors import VerifyError
from ...hw import SMEM_LIMIT_BYTES, TMEM_COLUMNS, resident_ctas
from ...ir import Kernel
from ...ir import ops as O
from .. import walker as W
from .trace import _Rec, _Trace


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
    threads) fit their TMEM in 512 columns (PTX ISA tcgen05.alloc: an allocation beyond the free columns blocks
    until another CTA frees them), and the kernel bounds CTAs per SM for ptxas (``.minnctapersm``, PTX ISA
    "Performance-tuning directives": without it ptxas 13.0 budgets 64 registers and the largest kernels spill)."""
    if not kernel.is_sm100:
        return
    ctas = resident_ctas(kernel.smem_bytes, kernel.threads)
    if ctas * kernel.tmem_cols > TMEM_COLUMNS:
        raise VerifyError(f"TMEM oversubscription: {kernel.smem_bytes} B of shared memory lets {ctas} CTAs share an SM, "
                          f"each allocating {kernel.tmem_cols} TMEM columns ({ctas * kernel.tmem_cols} > {TMEM_COLUMNS}); "
                          "tcgen05.alloc blocks and CTA pairs can wait on each other: size shared memory so at most "
                          f"{TMEM_COLUMNS // kernel.tmem_cols} fit")
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
        allocs = [r for r in recs if isinstance(r.ev.op, O.TmemAlloc)]
        deallocs = [r for r in recs if isinstance(r.ev.op, O.TmemDealloc)]
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
                              "alloc")
        cols = a.ev.op.cols
        if cols < 32 or cols > TMEM_COLUMNS or cols & (cols - 1) or cols != kernel.tmem_cols or d.ev.op.cols != cols:
            raise VerifyError(f"TMEM allocation: {a.where} allocates {cols} and frees {d.ev.op.cols} columns; needs the "
                              f"kernel's {kernel.tmem_cols}, a power of two in [32, {TMEM_COLUMNS}]")
        if d.syncs <= a.syncs:
            raise VerifyError(f"TMEM lifetime: {d.where} frees TMEM with no "
                              f"{'cluster' if kernel.cta_group == 2 else 'thread'} barrier after the alloc")
        life[ctaid] = (a.syncs, d.syncs)
    for (ctaid, _), recs in trace.warps.items():
        for r in recs:
            if isinstance(r.ev.op, (O.Umma, O.UmmaBlockScaled, O.TmemCopy)):
                owners = [ctaid, ctaid ^ 1] if kernel.cta_group == 2 else [ctaid]
            elif isinstance(r.ev.op, O.TmemLoad):
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
    """A cross-CTA data hand-off synchronizes at cluster scope (PTX ISA "Memory Consistency Model: scope").

    A plain remote arrive (no tx bytes) on a barrier that a ``consumer_wait`` waits on hands that
    consumer the arriving CTA's data (level 1's relay: the leader's MMA then reads the peer's shared
    memory): the arrive needs ``.release.cluster`` and the consumer's wait ``.acquire.cluster``; the
    default ``.cta`` forms order nothing across CTAs (PTX ISA "Memory Consistency Model: scope").
    Remote arrives that only release a resource (``empty``, ``tmem_empty``: waited by producers) keep
    the default form (a cluster-scope release there measurably serializes the pair).
    """
    cs = trace.kernel.cluster_size
    remote: dict[tuple, _Rec] = {}
    waits: dict[tuple, list[_Rec]] = defaultdict(list)
    for (ctaid, _), recs in trace.warps.items():
        base = ctaid - ctaid % cs
        for rec in recs:
            ev = rec.ev
            if isinstance(ev.op, W.ARRIVES) and not ev.tx and ev.bar.rank != rec.where.rank:
                remote.setdefault((base + ev.bar.rank, ev.bar.name, ev.bar.index), rec)
            elif isinstance(ev.op, O.MbarrierWait) and ev.op.role.is_consumer:
                waits[(base + ev.bar.rank, ev.bar.name, ev.bar.index)].append(rec)
    for key, arrive in remote.items():
        consumers = waits.get(key, [])
        if not consumers:
            continue
        bar = f"{key[1]}[{key[2]}] of CTA {key[0]}"
        if arrive.ev.op.scope != "cluster":
            raise VerifyError(f"cross-CTA hand-off at CTA scope: {arrive.ev.op.describe()} by {arrive.where} hands "
                              f"{bar} to {consumers[0].where.who}'s consumer_wait with the default .release.cta; a "
                              "cross-CTA data hand-off needs mbarrier.arrive.release.cluster (PTX ISA \"Memory Consistency Model: scope\")")
        narrow = next((w for w in consumers if w.ev.op.scope != "cluster"), None)
        if narrow is not None:
            raise VerifyError(f"cross-CTA hand-off at CTA scope: {narrow.ev.op.describe()} by {narrow.where} "
                              f"completes on {arrive.where.who}'s remote arrive on {bar} with the default "
                              ".acquire.cta; a cross-CTA data hand-off needs try_wait .acquire.cluster "
                              "(PTX ISA \"Memory Consistency Model: scope\")")


def _check_teardown(trace: _Trace) -> None:
    if trace.kernel.cluster_size < 2:
        return
    for (ctaid, warp), recs in trace.warps.items():
        last = recs[-1] if recs else None
        if last is None or not isinstance(last.ev.op, O.ClusterSync):
            raise VerifyError(f"no cluster barrier at exit: warp {warp} of CTA {ctaid} ends with "
                              f"{last.ev.op.describe() if last else 'nothing'}; a multi-CTA kernel must end with a "
                              "cluster barrier (a peer may still arrive on its barriers or use its TMEM)")


#: ops that read or write global memory: the tensors (TMA), D and the epilogue's operands and outputs, the
#: split-K workspace and counters, the grouped tables
GLOBAL_ACCESSES = (O.TmaLoad, O.TmaStore, O.StGlobal16, O.StGlobalF32, O.LdGlobalF32, O.LdGlobalNcU32,
                   O.AtomGlobalAdd, O.StGlobalU32, O.LdEpilogue, O.StEpilogue)


def _check_grid_dependency(trace: _Trace) -> None:
    """Programmatic dependent launch (PTX ISA "griddepcontrol").

    A kernel launched with the programmatic stream serialization attribute (``launch.pdl``) may start while the
    previous grid on the stream still runs: a thread's global access before its ``griddepcontrol.wait`` may read
    what that grid has not written yet, or overwrite what it still reads.  So every thread that touches global
    memory has waited first (``wait`` is per thread: an elected lane's wait covers that lane only).  Where the
    next grid may launch (``launch_dependents``, or each CTA's exit) is speed, not correctness: the next grid's
    own wait orders its accesses after this grid's.  A kernel whose spec says no PDL holds no ``griddepcontrol``:
    the runtime would launch it without the attribute, and the ops would be dead text.
    """
    pdl = trace.kernel.launch.pdl
    for recs in trace.warps.values():
        waited: set = set()  # threads that executed the wait; "warp": all 32 lanes
        for rec in recs:
            op = rec.ev.op
            if isinstance(op, O.GridDepControl):
                if not pdl:
                    raise VerifyError(f"{op.describe()} at {rec.where} in a kernel whose launch spec has pdl=false: "
                                      "the runtime launches it without the programmatic stream serialization "
                                      "attribute (schedule.pdl)")
                if op.action == "wait":
                    waited.add("warp" if rec.ev.lanes == W.LANES else rec.thread)
            elif pdl and isinstance(op, GLOBAL_ACCESSES) and "warp" not in waited and (
                    rec.ev.lanes == W.LANES or rec.thread not in waited):
                raise VerifyError(f"global access before griddepcontrol.wait: {op.describe()} at {rec.where} in a "
                                  "kernel launched with programmatic dependent launch; the previous grid may still be "
                                  "writing or reading that memory (PTX ISA \"griddepcontrol\")")
