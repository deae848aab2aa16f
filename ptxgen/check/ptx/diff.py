"""Emitted PTX against the Kernel IR, one thread at a time, on the CPU.

:func:`ir_effects` walks the IR for one thread with the simulator's
:class:`~ptxgen.check.walker.WarpWalker` and writes what it does in the
normal form of :mod:`ptxgen.check.ptx.interp` (``(kind, operands...)`` tuples);
:func:`ptx_effects` runs the emitted PTX for the same thread with the PTX
interpreter; :func:`diff_thread` compares the two and names the first
difference; :func:`default_launches` picks the threads ``ptxgen check --ptx`` and the tests compare (every
warp role of the first and the last cluster) and :func:`sweep_threads` compares them.

The address model is the interpreter's: CTA rank ``r`` of a cluster sees its
dynamic shared memory at ``DYNAMIC_SMEM_BASE | r << 24`` (ptxgen.check.ptx.interp module
docstring); the IR side places barrier ``name[i]`` of rank ``r`` at
``DYNAMIC_SMEM_BASE | r << 24`` + the barrier array's offset + 8 i.

The data model: what neither side computes (TMEM after an MMA, a wgmma accumulator, a loaded split-K partial) is
:func:`ptxgen.check.ptx.interp.opaque_f32` of its address or register on both sides; the IR side computes the
epilogue's f32 ops and conversions with the walker (``SiluMul``, ``Pack16``, the partial sums), the PTX side
executes the emitted f32 instructions and ``cvt``, both through :mod:`ptxgen.check.numerics`, and every stored
element carries its bits, so a changed f32 instruction or rounding modifier changes a stored element.
The instruction forms the IR fixes are compared too: memory-order semantics and scopes, ``tcgen05.ld``
shape and count, the MMA kind and types, a warp vote's mode, the thread's predicate and the warp's result
(``vote.sync.any``: a vote on another predicate, of another mode, or none where the IR votes differs), and
(:func:`diff_directives`) the kernel's directives.

Fused epilogues (:mod:`ptxgen.epi`) are compared by meaning, not text.  The IR side evaluates each
``EpilogueExpr`` with :mod:`ptxgen.check.epilogue` (the emitted instruction sequence step by step in f32), reads
each ``LdEpilogue`` operand from the interpreter's data model at the element's address (:func:`operand_values`;
0.0 where a guarded element lies outside D), gives scalar parameters :data:`EPILOGUE_SCALAR`, and writes each
``StEpilogue`` (:func:`_st_epilogue`) as the PTX must store it.  Compared, per thread:

* operand loads (bias ``[row]``/``[col]``, ``scale[row]``/``[col]``, residual by ``ld.global.nc``): the
  parameter and byte offset of each load (a 4-byte pair load one effect), so an operand indexed along the wrong
  axis, at the wrong offset, or loaded outside D differs; a residual staged through the CD ring: its TMA box
  and the ``ldmatrix`` row addresses, the 16-bit data widened by ``cvt.f32.{bf16,f16}`` (exact);
* arithmetic: every stored element carries its bits, so a changed f32 instruction, constant, operand order,
  ``setp``/``selp`` (gelu's erf form), ``min``/``max`` (clamp, relu) or dropped scale changes a stored element;
* rounding of each cast: ``cvt.{rn,rz,rm,rp}.{bf16,f16}[x2].f32`` bit-exact, ``cvt.rn.satfinite.e4m3x2.f32``
  (nearest even, saturation to +-448, NaN 0x7F; the interpreter refuses the form without ``.satfinite``),
  ``div.rn`` and ``rcp.rn`` of the block scale correctly rounded;
* effects of the outputs: which addresses are stored (D's e4m3 bytes, a stored tap's bf16/f16 elements, the
  1 x 128 block scales' f32), and each amax's ``red.global.max.u32``: semantics and scope (``red.global.max``
  means ``.relaxed.gpu``, so the two spellings are the same effect), operation, address (row or tensor) and
  value, which the ``shfl.sync.bfly`` butterfly (the quad's or the warp's lanes, interpreted) and the
  ``abs``/``max.f32`` chain computed;
* approximate instructions (``tanh.approx.f32``, ``ex2.approx.ftz.f32``, ``rcp.approx.ftz.f32``): by their
  shared model bit for bit (``approx=0``), and (``approx=-1/+1``) with every PTX result at an edge of its PTX ISA
  bound (:data:`ptxgen.check.numerics.APPROX_BOUNDS`), stored values within :data:`APPROX_ABS_TOL` plus one ulp of
  the stored format (:func:`effect_close`).

Kernels and expressions the tests compare (tests/check/ptx/test_epilogue_ptx.py; the shipped configs and their
variants in test_ptx_vs_ir.py): gelu (tanh form) with a column bias and a scalar scale, gelu_erf with a row
bias, silu(acc1) * acc2 on the dual GEMM, a residual staged through the CD ring with a row scale (both its
branches), an e4m3 D with 1 x 128 block scales and a row amax, an e4m3 D with a tensor amax, clamp and relu, an fp16
D with a residual and a stored fp16 tap, gelu with a column bias on the FP8 GEMM (the promoted accumulator), an
sm_100a epilogue from TMEM, at an even N and at an odd N (the per-element stores and loads); every simulator
expression under ``--runslow``.  Not covered: an e4m3 D's values at the approximation edges (its block scale
448 / amax magnifies the absolute error past the tolerance: compared by the model only), a 1-ulp change of the
block scale's reciprocal that no sampled e4m3 byte shows, and the lanes the sweep does not sample (one thread's
effects at a time; which lanes store is the simulator's business).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import effects as E
from . import interp as P
from .effects import Effect
from ...formats import e4m3_decode
from ...hw import DYNAMIC_SMEM_BASE, cta_smem_base
from ...ir import ops as O
from .. import walker as W
from ..numerics import bits16_to_f32, f32_to_16_bits, f32_to_e4m3_bits

TMEM_BASE = 0x20  # what the TMEM slot holds after tcgen05.alloc (nonzero, so a dropped base shows)
D_PTR = 0x7F00_0000_0000  # global address of D
WATCHDOG_PTR = 0x7E00_0000_0000  # global address of the hang watchdog's record (watched kernels only)
WORKSPACE_PTR = 0x7D00_0000_0000  # global address of the split-K workspace (split-K kernels only)
GROUP_PTR = 0x7C00_0000_0000  # global address of a grouped kernel's u32 table (words: interp.table_word)
NUM_GROUPS = 3  # a grouped kernel's num_groups in the differential


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
                "workspace": WORKSPACE_PTR, "group_ptr": GROUP_PTR, "num_groups": NUM_GROUPS}


def smem_base(rank: int) -> int:
    """Shared-window address of the dynamic shared memory of cluster rank ``rank``."""
    return cta_smem_base(DYNAMIC_SMEM_BASE, rank)


def kernel_facts(kernel) -> dict:
    """The kernel-level numbers the IR side needs besides the op tree (the Kernel's own resources).

    Keys: arch, threads, cluster_size, cta_group, tmem_slot (byte offset of the TMEM-address slot),
    barriers (name -> byte offset of the array).
    """
    k = kernel
    return {"arch": k.arch, "threads": k.threads, "cluster_size": k.cluster_size, "cta_group": k.cta_group,
            "tmem_slot": k.tmem_slot, "barriers": {b.name: b.offset for b in k.barriers}}


class _Thread:
    """What the rows of :data:`IR_EFFECTS` read besides the event: the walker, the launch and the address model."""

    def __init__(self, kernel, launch: Launch, wk: W.WarpWalker):
        f = kernel_facts(kernel)
        self.wk, self.launch = wk, launch
        self.rank = launch.ctaid % f["cluster_size"]
        self.base = smem_base(self.rank)
        self.lane = launch.tid % W.LANES
        self.g = f["cta_group"]
        self.slot = self.base + f["tmem_slot"]
        self._bars = f["barriers"]
        self.ptrs = {"d_ptr": D_PTR, **epilogue_params(kernel)}  # global pointer parameters: their values

    def bar_addr(self, ref: W.BarRef) -> int:
        return smem_base(ref.rank) + self._bars[ref.name] + 8 * ref.index

    def at_lane(self, values) -> int:
        arr = np.asarray(values)
        return int(arr[self.lane] if arr.shape[0] == W.LANES else arr[0])

    def elements(self, op) -> tuple:
        """The lane's stored elements of a 16-bit store: (array, index, bits), rounded to nearest even (an e4m3
        staging store: the e4m3 codes, :func:`ptxgen.check.numerics.f32_to_e4m3_bits`)."""
        src = stored_array(self.wk, op)
        vals = self.wk.regs[op.src][self.lane, list(op.idx)]
        bits = f32_to_e4m3_bits(vals) if op.fmt == "e4m3" else f32_to_16_bits(vals, op.fmt)
        return tuple(P.stored((src, i), op.fmt, int(b)) for i, b in zip(op.idx, bits))

    def f32_elements(self, op) -> tuple:
        """The lane's stored f32 elements: (array, index, f32 bits)."""
        return tuple((op.src, i, P.f32_bits(self.wk.regs[op.src][self.lane, i])) for i in op.idx)


def _tma_load(c: _Thread, ev, op) -> list[Effect]:
    # the instruction names this CTA's barrier (masked to the even rank for 2-SM) and the CTA mask
    bar = W.BarRef(c.rank & ~1 if op.two_sm else c.rank, ev.bars[0].name, ev.bars[0].index)
    mask = sum(1 << r for r in ev.dst_ranks) if op.multicast else 0
    return [E.TmaLoad(op.tensor, c.base + ev.dst, ev.col, ev.row, c.bar_addr(bar), 2 if op.two_sm else 1, mask,
                      op.cache_hint)]


def _sync(c: _Thread, ev, op) -> list[Effect]:
    if ev.kind == "cluster":  # ClusterSync: arrive.release + wait.acquire (ops.ClusterSync)
        return [E.BarrierClusterArrive("release"), E.BarrierClusterWait("acquire")]
    return [E.BarSync(ev.id, ev.threads if ev.kind == "named" else None)]


def _umma_commit(c: _Thread, ev, op) -> list[Effect]:
    mask = sum(1 << b.rank for b in ev.bars) if op.multicast else 0
    return [E.UmmaCommit(c.g, c.bar_addr(W.BarRef(c.rank, ev.bars[0].name, ev.bars[0].index)), mask)]


def _st_global(c: _Thread, ev, op) -> list[Effect]:
    """Each stored element inside D at its byte address: ``row * n + col + j``, or transposed (swap-AB: the kernel's
    ``[m, n]`` result as a row-major ``[n, m]`` D) ``(col + j) * m + row``."""
    launch, row, col = c.launch, c.at_lane(ev.row), c.at_lane(ev.col)
    row_end = launch.m if ev.row_end is None else c.at_lane(ev.row_end)  # a grouped kernel's per-row bound
    at = (lambda j: (col + j) * launch.m + row) if op.transposed else (lambda j: row * launch.n + col + j)
    return [E.StGlobal(D_PTR + 2 * at(j), e) for j, e in enumerate(c.elements(op))
            if row < row_end and col + j < launch.n]


def _ld_epilogue(c: _Thread, ev, op) -> list[Effect]:
    """The lane's operand elements that are loaded (a guarded load skips those outside D), as byte offsets."""
    launch, row, col = c.launch, c.at_lane(ev.row), c.at_lane(ev.col)
    size = 4 if op.dtype == "f32" else 2
    if size == 2 and len(op.idx) == 2 and op.layout in ("col", "tile"):  # a pair: one 4-byte load when whole
        whole = col + 2 <= launch.n and (op.layout == "col" or (row < launch.m and launch.n % 2 == 0))
        if whole or not op.guard:
            return [E.LdGlobalNc(op.param, size * (col if op.layout == "col" else row * launch.n + col))]
    out = []
    for j in range(len(op.idx)):
        index, inside = op.element(row, col + j, launch.m, launch.n)
        if inside or not op.guard:
            out.append(E.LdGlobalNc(op.param, size * index))
    return out


def operand_values(c: _Thread, ev, op) -> np.ndarray:
    """The ``(lanes, len(idx))`` f32 values an :class:`~ptxgen.ir.ops.LdEpilogue` reads: the interpreter's data
    model (:func:`ptxgen.check.ptx.interp.operand_bits16` widened exactly, or ``operand_f32``) at each element's
    address, 0.0 for a guarded element outside D (a predicated-off load leaves the zeroed register)."""
    lanes = c.wk._n()
    rows = np.broadcast_to(np.asarray(ev.row, dtype=np.int64), (lanes,))[:, None]
    cols = np.broadcast_to(np.asarray(ev.col, dtype=np.int64), (lanes,))[:, None] + np.arange(len(op.idx))
    m, n = c.launch.m, c.launch.n
    index, inside = (np.broadcast_to(x, cols.shape) for x in op.element(rows, cols, m, n))
    inside = inside | (not op.guard)
    addr = c.ptrs[op.param] + (4 if op.dtype == "f32" else 2) * index
    vals = P.operand_f32(addr) if op.dtype == "f32" else bits16_to_f32(P.operand_bits16(addr), op.dtype)
    return np.where(inside, vals, np.float32(0)).astype(np.float32)


def _st_epilogue(c: _Thread, ev, op) -> list[Effect]:
    """An epilogue output store (ops.StEpilogue): a tile's elements inside D at ``P + size (row n + col + j)``
    (rounded by ``cvt.rn`` to bf16/f16, ``cvt.rn.satfinite`` to e4m3); a block scale's f32 by each quad's first lane
    at ``P + 4 (row ceil(n/128) + col/128)``; an amax's ``red.relaxed.gpu.global.max.u32`` of the f32 bits by each
    quad's first lane at ``P + 4 row`` (``row_max``) or by lane 0 at ``P`` (``tensor_max``)."""
    row, col, lane = c.at_lane(ev.row), c.at_lane(ev.col), c.lane
    m, n, base = c.launch.m, c.launch.n, c.ptrs[op.param]
    vals = c.wk.regs[op.src][lane, list(op.idx)]
    if op.layout == "tile":
        size = 1 if op.fmt == "e4m3" else 2
        bits = f32_to_e4m3_bits(vals) if op.fmt == "e4m3" else f32_to_16_bits(vals, op.fmt)
        return [E.StGlobal(base + size * (row * n + col + j), P.stored((op.src, i), op.fmt, int(b)))
                for j, (i, b) in enumerate(zip(op.idx, bits)) if row < m and col + j < n]
    if op.layout == "block":
        if lane % 4 or row >= m or col >= n:
            return []
        at = base + 4 * (row * -(-n // 128) + col // 128)
        return [E.StGlobalF32(at, ((op.src, op.idx[0], P.f32_bits(vals[0])),))]
    leader, at = (lane % 4 == 0 and row < m, base + 4 * row) if op.layout == "row_max" else (lane == 0, base)
    return [E.RedGlobal("relaxed", "gpu", "max", at, P.f32_bits(vals[0]))] if leader else []


def umma_kind(idesc: int) -> str:
    """The ``.kind::`` an instruction descriptor is written for: A and B formats (bits 7-9 and 10-12) F16 (0) or
    BF16 (1) are ``.kind::f16``, TF32 (2) ``.kind::tf32`` (PTX ISA "Instruction descriptor" of tcgen05.mma).
    Raises IRFault for other formats or A and B of different kinds."""
    a, b = idesc >> 7 & 7, idesc >> 10 & 7
    kinds = {0: "f16", 1: "f16", 2: "tf32"}
    if a not in kinds or kinds[a] != kinds.get(b):
        raise W.IRFault(f"Umma idesc {idesc:#x}: A/B formats {a}/{b} are not those of .kind::f16 or .kind::tf32")
    return kinds[a]


TMEM_LD_SHAPE = "32x32b"  # ops.TmemLoad: thread l reads TMEM lane l of its warp's 32, ncols columns


#: IR op type -> its effects for one thread (``row(thread, event, op)``), in the interpreter's normal form: the IR
#: side of the differential, one row per op that acts outside the thread (like the emitters' op -> PTX tables)
IR_EFFECTS: dict[type, Callable[[_Thread, W.Event, O.Op], list[Effect]]] = {
    O.MbarrierInit: lambda c, ev, op: [E.MbarrierInit(c.bar_addr(ev.bar), ev.count)],
    # an arrive releases, a wait acquires, at the op's scope (ops.MbarrierArrive, ops.MbarrierWait)
    O.MbarrierArrive: lambda c, ev, op: [E.MbarrierArrive("cta" if op.cta is None else "cluster", c.bar_addr(ev.bar),
                                                          ev.tx // ev.lanes, "release", getattr(op, "scope", "cta"))],
    O.MbarrierWait: lambda c, ev, op: [E.MbarrierTryWait(c.bar_addr(ev.bar), ev.phase, "acquire", op.scope)],
    O.FenceMbarrierInit: lambda c, ev, op: [E.FenceMbarrierInit("release", "cluster")],
    O.TmaLoad: _tma_load,
    O.TmaStore: lambda c, ev, op: [E.TmaStore(op.tensor, c.base + ev.src, ev.col, ev.row)],
    O.BulkCommitGroup: lambda c, ev, op: [E.BulkCommit()],
    O.BulkWaitGroup: lambda c, ev, op: [E.BulkWait(op.n, op.read)],
    O.FenceProxyAsync: lambda c, ev, op: [E.FenceProxyAsync("shared::cta")],  # ops.FenceProxyAsync: smem writes
    O.CtaSync: _sync, O.NamedBarrier: _sync, O.ClusterSync: _sync,
    O.GridDepControl: lambda c, ev, op: [E.GridDepControl(op.action)],
    O.TmemAlloc: lambda c, ev, op: [E.TmemAlloc(c.g, c.slot, op.cols)],
    O.TmemDealloc: lambda c, ev, op: [E.TmemDealloc(c.g, ev.taddr, op.cols)],
    O.TmemBase: lambda c, ev, op: [E.LdShared(c.slot)],
    O.Umma: lambda c, ev, op: [E.Umma(c.g, umma_kind(op.idesc), ev.d, ev.a_desc, ev.b_desc, op.idesc, ev.accumulate)],
    O.UmmaBlockScaled: lambda c, ev, op: [E.UmmaBlockScaled(op.cta_group, op.kind, op.scale_vec, ev.d, ev.a_desc,
                                                            ev.b_desc, op.idesc, ev.sfa, ev.sfb, ev.accumulate)],
    O.TmemCopy: lambda c, ev, op: [E.TmemCopy(op.cta_group, ev.taddr, ev.desc, op.shape)],
    O.UmmaCommit: _umma_commit,
    O.TmemLoad: lambda c, ev, op: [E.TmemLoad(ev.taddr, TMEM_LD_SHAPE, op.ncols, op.dst)],
    # ops.Wgmma: f32 accumulator (D), A and B of the op's input type; K per instruction from the type
    O.Wgmma: lambda c, ev, op: [E.Wgmma(op.acc, f"m64n{op.n}k{op.k}", f"f32.{op.atype}.{op.atype}", ev.a_desc, ev.b_desc,
                                        ev.accumulate, ("mn" if op.trans_a else "k") + ("mn" if op.trans_b else "k"))],
    # FP8 scale loads: the lane's scale_a rows l/4 and l/4 + 8, the chunk's scale_b (products and FMAs stay in the thread)
    O.ScaleLoad: lambda c, ev, op: [E.LdShared(c.base + c.at_lane(ev.sa_addr)),
                                        E.LdShared(c.base + c.at_lane(ev.sa_addr) + op.row_half),
                                        E.LdShared(c.base + ev.sb_addr)],
    O.WgmmaCommit: lambda c, ev, op: [E.WgmmaCommit()],
    O.WgmmaWait: lambda c, ev, op: [E.WgmmaWait(op.n)],
    # the lane's operands: address, words
    O.StMatrix: lambda c, ev, op: [E.StMatrix(c.base + c.at_lane(ev.addr), c.elements(op))],
    O.LdMatrix: lambda c, ev, op: [E.LdMatrix(c.base + c.at_lane(ev.addr))],
    O.StShared16: lambda c, ev, op: [E.StShared(c.base + c.at_lane(ev.addr), c.elements(op))],
    O.StGlobal16: _st_global,
    O.StGlobalF32: lambda c, ev, op: [E.StGlobalF32(WORKSPACE_PTR + c.at_lane(ev.offset), c.f32_elements(op))],
    O.LdGlobalF32: lambda c, ev, op: [E.LdGlobalF32(WORKSPACE_PTR + c.at_lane(ev.offset), len(op.idx))],
    O.LdEpilogue: _ld_epilogue,
    O.LdGlobalNcU32: lambda c, ev, op: [E.LdGlobalTable(GROUP_PTR + 4 * c.at_lane(ev.index))],
    O.StEpilogue: _st_epilogue,
    O.AtomGlobalAdd: lambda c, ev, op: [E.AtomAdd(op.sem, op.scope, WORKSPACE_PTR + ev.offset, op.value)],
    O.NamedBarrierPopc: lambda c, ev, op: [E.BarRedPopc(ev.id, ev.threads)],
    # the lane's predicate and the warp's verdict (ops.VoteAny: uniform over the warp)
    O.VoteAny: lambda c, ev, op: [E.VoteSync("any", bool(c.at_lane(ev.pred)), bool(c.wk.read_var(op.var)))],
    O.StGlobalU32: lambda c, ev, op: [E.StGlobalSemU32("relaxed", op.scope, WORKSPACE_PTR + ev.offset, op.value)],
    # ops the walker treats as silent or thread-local (ir_effects makes them events)
    O.Nanosleep: lambda c, ev, op: [E.Nanosleep(op.ns)],
    O.SetMaxNReg: lambda c, ev, op: [E.SetMaxNReg(op.action, op.regs)],
    O.WgmmaFence: lambda c, ev, op: [E.WgmmaFence()],
    O.TcgenFence: lambda c, ev, op: [E.TcgenFence(op.kind)],
    O.TmemRelinquish: lambda c, ev, op: [E.TmemRelinquish(c.g)],
    O.TmemWaitLd: lambda c, ev, op: [E.TmemWaitLd()],
}
IR_EFFECTS[O.MbarrierArriveExpectTx] = IR_EFFECTS[O.MbarrierArrive]


def ir_effects(kernel, launch: Launch) -> list[Effect]:
    """Effects of thread ``launch.tid`` of CTA ``launch.ctaid`` per the IR, in the interpreter's normal form.

    The one adapter between the walker's events and the PTX side: it runs the thread's warp with
    :class:`WarpWalker` (dry run: no data), keeps the events the thread takes part in (whole-warp events, and
    ``Elect`` bodies when the thread is the elected lane 0), and writes each through its op's row of
    :data:`IR_EFFECTS`.  Raises :class:`ptxgen.check.walker.IRFault` where the IR breaks its execution model or
    an op has no row.
    """
    f = kernel_facts(kernel)
    # ops the walker treats as silent or thread-local have effects in PTX: make them events too
    wk = W.WarpWalker(W.Program(kernel), ctaid=launch.ctaid, nctaid=launch.grid, cluster_size=f["cluster_size"],
                      warp=launch.tid // W.LANES, smem_base=smem_base(launch.ctaid % f["cluster_size"]),
                      params={"m": launch.m, "n": launch.n, "k": launch.k, "num_groups": NUM_GROUPS,
                              **epilogue_params(kernel)}, values=False,
                      also=(O.Nanosleep, O.WgmmaFence, O.TcgenFence, O.TmemRelinquish, O.TmemWaitLd, O.VoteAny))

    thread = _Thread(kernel, launch, wk)
    out: list[Effect] = []
    counters: dict[int, int] = {}  # split-K counters (workspace byte offset -> value), as the interpreter models them
    gen, reply = wk.run(), None
    while True:
        try:
            ev = gen.send(reply)
        except StopIteration:
            break
        reply = None
        if isinstance(ev.op, O.TmemBase):
            reply = TMEM_BASE
        elif isinstance(ev.op, O.TmemLoad):  # TMEM lane (taddr's lane field + lane), column: opaque data
            lanes, cols = np.arange(W.LANES)[:, None], np.arange(ev.op.ncols)[None, :]
            reply = P.opaque_f32("tmem", (ev.taddr >> 16) + lanes, (ev.taddr & 0xFFFF) + cols)
        elif isinstance(ev.op, O.Wgmma):  # the accumulator fragment: opaque data by (array, index, lane)
            wk.regs[ev.op.acc][:] = P.opaque_f32("reg", ev.op.acc, np.arange(ev.op.n // 2)[None, :],
                                                 np.arange(W.LANES)[:, None])
        elif isinstance(ev.op, O.ScaleLoad):  # the scales a TMA load wrote: opaque data by shared address
            sa = thread.base + np.broadcast_to(np.asarray(ev.sa_addr, dtype=np.int64), (W.LANES,))
            reply = np.stack([P.opaque_f32("shared", sa), P.opaque_f32("shared", sa + ev.op.row_half),
                              P.opaque_f32("shared", np.full(W.LANES, thread.base + int(ev.sb_addr)))], axis=1)
        elif isinstance(ev.op, O.LdGlobalNcU32):  # a table word: the interpreter's data model, by address
            reply = np.array([P.table_word(GROUP_PTR + 4 * int(i)) for i in np.atleast_1d(ev.index)], dtype=np.int64)
        elif isinstance(ev.op, O.LdMatrix):  # a staged operand's box: opaque 16-bit data by (row address, element)
            bits = P.ldmatrix_bits(thread.base + np.asarray(ev.addr, dtype=np.int64)[:, None], np.arange(8)[None, :])
            reply = bits16_to_f32(bits, ev.op.fmt)
        elif isinstance(ev.op, O.LdEpilogue):  # a bias/scale/residual: the interpreter's operand data by address
            reply = operand_values(thread, ev, ev.op)
        elif isinstance(ev.op, O.AtomGlobalAdd):  # the interpreter's model: this thread's own arrivals and resets
            reply = counters.get(ev.offset, 0)
            counters[ev.offset] = reply + ev.op.value
        elif isinstance(ev.op, O.StGlobalU32):
            counters[ev.offset] = ev.op.value
        elif isinstance(ev.op, O.NamedBarrierPopc):  # the interpreter's model: every warpgroup arrives last
            reply = 1
        elif isinstance(ev.op, O.LdGlobalF32):  # a partial another CTA stored: opaque data by address
            addr = WORKSPACE_PTR + np.asarray(ev.offset, dtype=np.int64)[:, None] + 4 * np.arange(len(ev.op.idx))
            reply = P.opaque_f32("global", addr)
        if wk.lane is not None and wk.lane != thread.lane:
            continue  # an Elect body: only the elected lane
        row = IR_EFFECTS.get(type(ev.op))
        if row is None:
            raise W.IRFault(f"ir_effects has no normal form for {ev.op.describe()}")
        out += row(thread, ev, ev.op)
    return out


def stored_array(wk: W.WarpWalker, op) -> str:
    """The f32 array whose elements a store writes: ``op.src``, or for a packed store the array its
    :class:`~ptxgen.ir.ops.Pack16` converted (the interpreter names a ``cvt``'s f32 sources, not the words).

    Raises IRFault: a packed store of an array no Pack16 wrote.
    """
    if not op.packed:
        return op.src
    try:
        return wk.packed_from[op.src]
    except KeyError:
        raise W.IRFault(f"{op.describe()}: no Pack16 wrote {op.src!r}") from None


MAX_STEPS = 200_000  # instructions one thread may run (the test shapes need < 15k; an endless loop stops here)


EPILOGUE_PTR = 0x7B00_0000_0000  # global address of the first epilogue operand / output (one 4 GiB window each)
EPILOGUE_SCALAR = 0x3FB00000  # an f32 scalar parameter's value (1.375: a dropped or doubled scale shows)


def epilogue_params(kernel) -> dict[str, int]:
    """Values of the kernel's epilogue parameters (``epi_*``): each pointer its own window above
    :data:`EPILOGUE_PTR`, a scalar the f32 bits of :data:`EPILOGUE_SCALAR`."""
    names = [(name, kind) for name, kind in kernel.params if name.startswith("epi_")]
    return {name: EPILOGUE_PTR + (i << 32) if kind == "u64" else EPILOGUE_SCALAR
            for i, (name, kind) in enumerate(names)}


def ptx_effects(prog: P.Program | str, kernel, launch: Launch, approx: int = 0) -> list[Effect]:
    """Effects of the same thread per the emitted PTX (``prog``: text or :func:`ptxgen.check.ptx.interp.parse` result);
    ``approx``: the approximate instructions by their model (0) or at the low (-1) / high (+1) edge of their PTX ISA
    bound (:func:`ptxgen.check.ptx.interp.run_thread`).

    Raises PtxInterpError (see :func:`ptxgen.check.ptx.interp.run_thread`), also after MAX_STEPS instructions."""
    f = kernel_facts(kernel)
    rank = launch.ctaid % f["cluster_size"]
    params = {**launch.params, **epilogue_params(kernel)}
    return P.run_thread(prog, tid=launch.tid, ctaid=launch.ctaid, nctaid=launch.grid, ntid=f["threads"], rank=rank,
                        cluster_size=f["cluster_size"], params=params, smem_base=smem_base(rank),
                        tmem_base=TMEM_BASE, max_steps=MAX_STEPS, approx=approx)


def _fmt(e) -> str:
    if e is None:
        return "(nothing)"
    return "(" + ", ".join(hex(x) if isinstance(x, int) and not isinstance(x, bool) and x > 4096 else repr(x)
                           for x in e) + ")"


def kernel_directives(kernel) -> dict[str, tuple[int, ...]]:
    """The directives the kernel's plan fixes, as :func:`ptxgen.check.ptx.interp.performance_directives` reads them:
    ``.reqntid`` (threads), ``.maxnreg`` and ``.minnctapersm`` where set, ``.explicitcluster`` and
    ``.reqnctapercluster`` for a cluster of more than one CTA."""
    out: dict[str, tuple[int, ...]] = {"reqntid": (kernel.threads, 1, 1)}
    if kernel.maxnreg:
        out["maxnreg"] = (kernel.maxnreg,)
    if kernel.minnctapersm:
        out["minnctapersm"] = (kernel.minnctapersm,)
    if kernel.cluster_size > 1:
        out["explicitcluster"], out["reqnctapercluster"] = (), (kernel.cluster_size, 1, 1)
    return out


def diff_directives(kernel, prog: P.Program) -> str | None:
    """None when the PTX's kernel directives are the plan's (:func:`kernel_directives`); else the first difference."""
    want, got = kernel_directives(kernel), prog.directives
    for name in sorted(want.keys() | got.keys()):
        if want.get(name) != got.get(name):
            show = lambda v: "(absent)" if v is None else " ".join(map(str, v)) or "(present)"  # noqa: E731
            return f"PTX kernel directive .{name} {show(got.get(name))} != IR {show(want.get(name))}"
    return None


#: how far a stored value of the PTX run with approximate instructions at an edge of their PTX ISA bounds may be from
#: the IR's (the model's), beyond one unit in the last place of the stored format (a rounding boundary crossed): the
#: bounds propagated through an epilogue on the data model's operands (|value| < 4): gelu's tanh (relative 2^-11)
#: moves x/2 (1 + tanh) by at most 0.5 * 8 * 2^-11 = 2^-9, times a scale below 2; ex2 (2 ulp) and rcp (1 ulp)
#: move sigmoid, silu and erf by a few f32 ulps
APPROX_ABS_TOL = 2.0 ** -8
_ULP_EXP = {"bf16": (7, -126), "f16": (10, -14), "e4m3": (3, -6), "f32": (23, -126)}  # mantissa bits, min exponent


def _value(e: tuple, f32: bool) -> tuple[tuple, str, float]:
    """(name, format, value) of a stored element ``(..., bits)`` (an f32 store's bits are an f32's)."""
    fmt = "f32" if f32 else (e[0] if len(e) == 4 and e[0] in ("f16", "e4m3") else "bf16")
    bits = e[-1]
    if fmt == "f32":
        v = np.uint32(bits).view(np.float32)
    elif fmt == "e4m3":
        v = e4m3_decode(bits)
    else:
        v = bits16_to_f32(np.uint16(bits), fmt)
    return e[:-1], fmt, float(v)


def _element_close(a: tuple, b: tuple, f32: bool, tol: float) -> bool:
    """Same element name and format, values within ``tol`` plus one ulp of the format at the IR's value ``b``."""
    if a[:1] == ("int",) or b[:1] == ("int",):
        return a == b
    (na, fa, va), (nb, fb, vb) = _value(a, f32), _value(b, f32)
    if na != nb or fa != fb:
        return False
    if np.isnan(va) or np.isnan(vb):
        return np.isnan(va) and np.isnan(vb)
    mant, emin = _ULP_EXP[fa]
    ulp = 2.0 ** (max(math.floor(math.log2(abs(vb))) if vb else emin, emin) - mant)
    return abs(va - vb) <= tol + ulp


def effect_close(ptx: Effect, ir: Effect, tol: float = APPROX_ABS_TOL) -> bool:
    """``ptx == ir``, but stored values (st.global, st.shared, stmatrix, st.global.f32 elements, the value of a
    ``red.global.max``) compared within :func:`_element_close`: how a run at an edge of the approximate
    instructions' bounds is compared."""
    if type(ptx) is not type(ir) or len(ptx) != len(ir):
        return False
    if isinstance(ptx, E.StGlobal):
        return ptx.addr == ir.addr and _element_close(ptx.element, ir.element, False, tol)
    if isinstance(ptx, (E.StShared, E.StMatrix, E.StGlobalF32)):
        f32 = isinstance(ptx, E.StGlobalF32)
        return ptx.addr == ir.addr and len(ptx.elements) == len(ir.elements) and all(
            _element_close(a, b, f32, tol) for a, b in zip(ptx.elements, ir.elements))
    if isinstance(ptx, E.RedGlobal) and ptx.op == "max":
        return ptx[:-1] == ir[:-1] and _element_close(("v", ptx.value), ("v", ir.value), True, tol)
    return ptx == ir


def diff_thread(kernel, prog: P.Program | str, launch: Launch, approx: int = 0) -> str | None:
    """None when PTX and IR give the same effects for the thread (and the kernel directives agree, see
    :func:`diff_directives`); else a message naming the first difference.

    approx 0: the PTX's approximate instructions by the model both sides use (the correctly rounded result, an
    admissible hardware result), every effect equal, stored values bit for bit.  approx -1 / +1: the PTX's
    approximate instructions at that edge of their PTX ISA bounds (``ex2.approx`` 2 ulp, ``rcp.approx`` 1 ulp,
    ``tanh.approx`` relative 2^-11: :data:`ptxgen.check.numerics.APPROX_BOUNDS`), stored values within
    :data:`APPROX_ABS_TOL` plus one ulp of the stored format of the IR's (:func:`effect_close`), all else equal."""
    try:
        prog = P.parse(prog) if isinstance(prog, str) else prog
        msg = diff_directives(kernel, prog)
        if msg is not None:
            return msg
        ptx = ptx_effects(prog, kernel, launch, approx)
    except P.PtxInterpError as exc:
        return f"PTX cannot be interpreted for {launch}: {exc}"
    ir = ir_effects(kernel, launch)
    same = (lambda a, b: a == b) if approx == 0 else effect_close
    if len(ptx) == len(ir) and all(same(a, b) for a, b in zip(ptx, ir)):
        return None
    i = next((j for j, (a, b) in enumerate(zip(ptx, ir)) if not same(a, b)), min(len(ptx), len(ir)))
    side = "low" if approx < 0 else "high"
    edge = "" if approx == 0 else f" beyond the bound (approximate instructions at their {side} edge)"
    return (f"PTX != IR{edge} at effect #{i} of {launch} ({len(ptx)} vs {len(ir)} effects): "
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


def sweep_threads(kernel, prog: P.Program | str, launches: list[Launch] | None = None, approx: int = 0) -> str | None:
    """The first difference over ``launches`` (default :func:`default_launches`), or None when PTX and IR agree
    (``approx``: as :func:`diff_thread`)."""
    try:
        prog = P.parse(prog) if isinstance(prog, str) else prog
    except P.PtxInterpError as exc:
        return f"PTX cannot be interpreted: {exc}"
    for launch in launches if launches is not None else default_launches(kernel):
        msg = diff_thread(kernel, prog, launch, approx)
        if msg is not None:
            return msg
    return None
