"""Emitted PTX against the Kernel IR, one thread at a time, on the CPU.

:func:`ir_effects` walks the IR for one thread with the simulator's
:class:`~ptxgen.check.walker.WarpWalker` and writes what it does in the
normal form of :mod:`ptxgen.check.ptx.interp` (``(kind, operands...)`` tuples);
:func:`ptx_effects` runs the emitted PTX for the same thread with the PTX
interpreter; :func:`diff_thread` compares the two and names the first
difference; :func:`default_launches` picks the threads ``ptxgen check --ptx`` and the tests compare (every
warp role of the first and the last cluster) and :func:`sweep_threads` compares them.

The address model is the interpreter's: CTA rank ``r`` of a cluster sees its
dynamic shared memory at ``SMEM_BASE | r << 24`` (ptxgen.check.ptx.interp module
docstring); the IR side places barrier ``name[i]`` of rank ``r`` at
``SMEM_BASE | r << 24`` + the barrier array's offset + 8 i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import interp as P
from ...ir import ops as O
from .. import walker as W

SMEM_BASE = 0x400  # shared-window address of the dynamic base of rank 0 (1024-aligned, as in the verifier)
TMEM_BASE = 0x20  # what the TMEM slot holds after tcgen05.alloc (nonzero, so a dropped base shows)
D_PTR = 0x7F00_0000_0000  # global address of D
WATCHDOG_PTR = 0x7E00_0000_0000  # global address of the hang watchdog's record (watched kernels only)
WORKSPACE_PTR = 0x7D00_0000_0000  # global address of the split-K workspace (split-K kernels only)


@dataclass(frozen=True)
class Launch:
    """One thread of one launch: problem shape, grid, and the thread's CTA and index."""

    m: int
    n: int
    k: int
    grid: int  # gridDim.x
    ctaid: int
    tid: int

    @property
    def params(self) -> dict[str, int]:
        return {"m": self.m, "n": self.n, "k": self.k, "d_ptr": D_PTR, "watchdog_ptr": WATCHDOG_PTR,
                "workspace": WORKSPACE_PTR}


def smem_base(rank: int) -> int:
    """Shared-window address of the dynamic shared memory of cluster rank ``rank`` (interpreter model)."""
    return SMEM_BASE | rank << P.RANK_SHIFT


def kernel_facts(kernel) -> dict:
    """The kernel-level numbers the IR side needs besides the op tree (the Kernel's own resources).

    Keys: arch, threads, cluster_size, cta_group, tmem_slot (byte offset of the TMEM-address slot),
    barriers (name -> byte offset of the array).
    """
    k = kernel
    return {"arch": k.arch, "threads": k.threads, "cluster_size": k.cluster_size, "cta_group": k.cta_group,
            "tmem_slot": k.tmem_slot, "barriers": {b.name: b.offset for b in k.barriers}}


def ir_effects(kernel, launch: Launch) -> list[P.Effect]:
    """Effects of thread ``launch.tid`` of CTA ``launch.ctaid`` per the IR, in the interpreter's normal form.

    The one adapter between the simulator's walker events and the PTX side: it runs the thread's warp with
    :class:`WarpWalker` (dry run: no data), keeps the events the thread takes part in (whole-warp events, and
    ``Elect`` bodies when the thread is the elected lane 0), and writes each as a ``(kind, operands...)``
    tuple.  Raises :class:`ptxgen.check.walker.IRFault` where the IR breaks its execution model.
    """
    f = kernel_facts(kernel)
    cs, g = f["cluster_size"], f["cta_group"]
    rank = launch.ctaid % cs
    base = smem_base(rank)
    lane = launch.tid % W.LANES

    def bar_addr(ref: W.BarRef) -> int:
        return smem_base(ref.rank) + f["barriers"][ref.name] + 8 * ref.index

    wk = W.WarpWalker(W.Program(kernel), ctaid=launch.ctaid, nctaid=launch.grid, cluster_size=cs,
                      warp=launch.tid // W.LANES, smem_base=base, params={"m": launch.m, "n": launch.n, "k": launch.k},
                      values=False)
    # ops the walker treats as silent or thread-local have effects in PTX: make them events too
    for t in (O.Nanosleep, O.SetMaxNReg, O.WgmmaFence, O.TcgenFence, O.TmemRelinquish):
        wk._events[t] = lambda op: W.Ev(op, wk._n())

    def wait_ld(op):
        wk._wait_ld(op)
        return W.Ev(op, wk._n())
    wk._events[O.TmemWaitLd] = wait_ld

    def at_lane(values) -> int:
        arr = np.asarray(values)
        return int(arr[lane] if arr.shape[0] == W.LANES else arr[0])

    out: list[P.Effect] = []
    gen, reply = wk.run(), None
    while True:
        try:
            ev = gen.send(reply)
        except StopIteration:
            break
        reply = None
        if isinstance(ev, W.TmemBaseEv):
            reply = TMEM_BASE
        elif isinstance(ev, W.TmemLoadEv):
            reply = np.zeros((W.LANES, ev.ncols), dtype=np.float32)
        if wk.lane is not None and wk.lane != lane:
            continue  # an Elect body: only the elected lane
        op = ev.op
        if isinstance(ev, W.InitEv):
            out.append(("mbarrier.init", bar_addr(ev.bar), ev.count))
        elif isinstance(ev, W.ArriveEv):
            out.append(("mbarrier.arrive", "cta" if op.cta is None else "cluster", bar_addr(ev.bar),
                        ev.tx // ev.lanes, getattr(op, "scope", "cta")))
        elif isinstance(ev, W.WaitEv):
            out.append(("mbarrier.try_wait", bar_addr(ev.bar), ev.parity, op.scope))
        elif isinstance(ev, W.FenceInitEv):
            out.append(("fence.mbarrier_init",))
        elif isinstance(ev, W.TmaLoadEv):
            # the instruction names this CTA's barrier (masked to the even rank for 2-SM) and the CTA mask
            bar = W.BarRef(rank & ~1 if op.two_sm else rank, ev.bars[0].name, ev.bars[0].index)
            mask = sum(1 << r for r in ev.dst_ranks) if op.multicast else 0
            out.append(("tma.load", op.tensor, base + ev.dst, ev.col, ev.row, bar_addr(bar), 2 if op.two_sm else 1,
                        mask, op.cache_hint))
        elif isinstance(ev, W.TmaStoreEv):
            out.append(("tma.store", ev.tensor, base + ev.src, ev.col, ev.row))
        elif isinstance(ev, W.BulkCommitEv):
            out.append(("bulk.commit",))
        elif isinstance(ev, W.BulkWaitEv):
            out.append(("bulk.wait", ev.n, ev.read))
        elif isinstance(ev, W.FenceProxyEv):
            out.append(("fence.proxy.async",))
        elif isinstance(ev, W.SyncEv):
            if ev.kind == "cluster":
                out += [("barrier.cluster.arrive",), ("barrier.cluster.wait",)]
            else:
                out.append(("bar.sync", ev.id, ev.threads if ev.kind == "named" else None))
        elif isinstance(ev, W.AllocEv):
            out.append(("tcgen05.alloc", g, base + f["tmem_slot"], ev.cols))
        elif isinstance(ev, W.DeallocEv):
            out.append(("tcgen05.dealloc", g, ev.taddr, ev.cols))
        elif isinstance(ev, W.TmemBaseEv):
            out.append(("ld.shared", base + f["tmem_slot"]))
        elif isinstance(ev, W.UmmaEv):
            out.append(("tcgen05.mma", g, ev.d, ev.a_desc, ev.b_desc, ev.idesc, ev.accumulate))
        elif isinstance(ev, W.UmmaBlockScaledEv):
            out.append(("tcgen05.mma.block_scale", op.cta_group, op.kind, op.scale_vec, ev.d, ev.a_desc, ev.b_desc,
                        ev.idesc, ev.sfa, ev.sfb, ev.accumulate))
        elif isinstance(ev, W.TmemCopyEv):
            out.append(("tcgen05.cp", op.cta_group, ev.taddr, ev.desc, op.shape))
        elif isinstance(ev, W.CommitEv):
            mask = sum(1 << b.rank for b in ev.bars) if op.multicast else 0
            out.append(("tcgen05.commit", g, bar_addr(W.BarRef(rank, ev.bars[0].name, ev.bars[0].index)), mask))
        elif isinstance(ev, W.TmemLoadEv):
            out.append(("tcgen05.ld", ev.taddr, ev.ncols, op.dst))
        elif isinstance(ev, W.WgmmaEv):
            out.append(("wgmma", ev.acc, ev.n, ev.a_desc, ev.b_desc, ev.accumulate))
        elif isinstance(ev, W.WgmmaCommitEv):
            out.append(("wgmma.commit",))
        elif isinstance(ev, W.WgmmaWaitEv):
            out.append(("wgmma.wait", ev.n))
        elif isinstance(ev, W.StSharedEv) and isinstance(op, O.StMatrix):  # the lane's operands: address, words
            src = stored_array(wk, op)
            out.append(("stmatrix", base + at_lane(ev.addrs), tuple(P.stored((src, i), op.fmt) for i in op.idx)))
        elif isinstance(ev, W.StSharedEv):
            src = stored_array(wk, op)
            out.append(("st.shared", base + at_lane(ev.addrs), tuple(P.stored((src, i), op.fmt) for i in op.idx)))
        elif isinstance(ev, W.StGlobalEv):
            row, col, src = at_lane(ev.rows), at_lane(ev.cols), stored_array(wk, op)
            for j, i in enumerate(op.idx):
                if row < launch.m and col + j < launch.n:
                    out.append(("st.global", D_PTR + 2 * (row * launch.n + col + j), P.stored((src, i), op.fmt)))
        elif isinstance(ev, W.WsStoreEv):
            out.append(("st.global.f32", WORKSPACE_PTR + at_lane(ev.offsets), tuple((op.src, i) for i in op.idx)))
        elif isinstance(ev, W.WsLoadEv):
            out.append(("ld.global.f32", WORKSPACE_PTR + at_lane(ev.offsets), len(op.idx)))
        elif isinstance(ev, W.WsAtomicEv):
            addr = WORKSPACE_PTR + ev.offset
            kind = {"red": "red.global", "wait": "ld.global.u32", "store": "st.global.sem.u32"}[ev.kind]
            out.append((kind, ev.sem, ev.scope, addr) + (() if ev.kind == "wait" else (ev.value,)))
        elif isinstance(op, O.Nanosleep):
            out.append(("nanosleep", op.ns))
        elif isinstance(op, O.SetMaxNReg):
            out.append(("setmaxnreg", op.action, op.regs))
        elif isinstance(op, O.WgmmaFence):
            out.append(("wgmma.fence",))
        elif isinstance(op, O.TcgenFence):
            out.append(("tcgen05.fence", op.kind))
        elif isinstance(op, O.TmemRelinquish):
            out.append(("tcgen05.relinquish", g))
        elif isinstance(op, O.TmemWaitLd):
            out.append(("tcgen05.wait_ld",))
        else:
            raise W.IRFault(f"ir_effects has no normal form for {op.describe()}")
    return out


def stored_array(wk: W.WarpWalker, op) -> str:
    """The f32 array whose elements a store writes: ``op.src``, or for a packed store the array its
    :class:`~ptxgen.ir.ops.PackBf16` converted (the interpreter names a ``cvt``'s f32 sources, not the words).

    Raises IRFault: a packed store of an array no PackBf16 wrote.
    """
    if not op.packed:
        return op.src
    try:
        return wk.packed_from[op.src]
    except KeyError:
        raise W.IRFault(f"{op.describe()}: no PackBf16 wrote {op.src!r}") from None


MAX_STEPS = 200_000  # instructions one thread may run (the test shapes need < 15k; an endless loop stops here)


def ptx_effects(prog: P.Program | str, kernel, launch: Launch) -> list[P.Effect]:
    """Effects of the same thread per the emitted PTX (``prog``: text or :func:`ptxgen.check.ptx.interp.parse` result).

    Raises PtxInterpError (see :func:`ptxgen.check.ptx.interp.run_thread`), also after MAX_STEPS instructions."""
    f = kernel_facts(kernel)
    rank = launch.ctaid % f["cluster_size"]
    return P.run_thread(prog, tid=launch.tid, ctaid=launch.ctaid, nctaid=launch.grid, ntid=f["threads"], rank=rank,
                        cluster_size=f["cluster_size"], params=launch.params, smem_base=smem_base(rank),
                        tmem_base=TMEM_BASE, max_steps=MAX_STEPS)


def _fmt(e) -> str:
    if e is None:
        return "(nothing)"
    return "(" + ", ".join(hex(x) if isinstance(x, int) and not isinstance(x, bool) and x > 4096 else repr(x)
                           for x in e) + ")"


def diff_thread(kernel, prog: P.Program | str, launch: Launch) -> str | None:
    """None when PTX and IR give the same effects for the thread; else a message naming the first difference."""
    try:
        ptx = ptx_effects(prog, kernel, launch)
    except P.PtxInterpError as exc:
        return f"PTX cannot be interpreted for {launch}: {exc}"
    ir = ir_effects(kernel, launch)
    if ptx == ir:
        return None
    i = next((j for j, (a, b) in enumerate(zip(ptx, ir)) if a != b), min(len(ptx), len(ir)))
    return (f"PTX != IR at effect #{i} of {launch} ({len(ptx)} vs {len(ir)} effects): "
            f"PTX {_fmt(ptx[i] if i < len(ptx) else None)} vs IR {_fmt(ir[i] if i < len(ir) else None)}")


def role_ranges(kernel) -> list[tuple[str, int, int]]:
    """(name, warp_lo, warp_hi) of every distinct warp range a WarpSwitch of the kernel names, in program order."""
    seen: dict[tuple[int, int], str] = {}
    for op in O.walk(kernel.body):
        if isinstance(op, O.WarpSwitch):
            for r in op.roles:
                seen.setdefault((r.warp_lo, r.warp_hi), r.name)
    return [(name, lo, hi) for (lo, hi), name in seen.items()]


def default_shape(kernel) -> tuple[int, int, int]:
    """(m, n, k) of the deterministic sweep: 2 x 2 tiles with ragged edges and ``stages + 2`` k-blocks, so the smem
    ring wraps and the edge tiles clip."""
    grid = kernel.launch.grid
    return 2 * grid.tile_rows - 3, 2 * grid.tile_cols - 8, kernel.block_k * (kernel.stages + 2) - 8


def default_launches(kernel, shape: tuple[int, int, int] | None = None) -> list[Launch]:
    """The threads the deterministic sweep compares at ``shape`` (default :func:`default_shape`): every rank of the
    first and the last cluster, lane 0 of the first and lane 5 of the last warp of every role range."""
    m, n, k = shape or default_shape(kernel)
    cs = kernel.cluster_size
    grid = kernel.launch.grid.grid_x(m, n, cs)
    ctaids = sorted({*range(cs), *range(grid - cs, grid)})
    tids = sorted({t for _, lo, hi in role_ranges(kernel) for t in (lo * W.LANES, (hi - 1) * W.LANES + 5)})
    return [Launch(m, n, k, grid, ctaid, tid) for ctaid in ctaids for tid in tids]


def role_of(kernel, tid: int) -> str:
    """The names of the roles whose warp range holds thread ``tid``, in program order (``/``-joined; ``-``: none)."""
    warp = tid // W.LANES
    names = [r.name for op in O.walk(kernel.body) if isinstance(op, O.WarpSwitch) for r in op.roles
             if r.warp_lo <= warp < r.warp_hi]
    return "/".join(dict.fromkeys(names)) or "-"


def sweep_threads(kernel, prog: P.Program | str, launches: list[Launch] | None = None) -> str | None:
    """The first difference over ``launches`` (default :func:`default_launches`), or None when PTX and IR agree."""
    for launch in launches if launches is not None else default_launches(kernel):
        msg = diff_thread(kernel, prog, launch)
        if msg is not None:
            return msg
    return None
