"""Warp-level interpreter of the Kernel IR: control flow, expressions, registers; effects as events.

One :class:`WarpWalker` runs the op tree for one warp of one CTA, following
the execution model of :mod:`ptxgen.ir.ops`:

* expressions are evaluated per lane with numpy (a ``(32,)`` array where a
  value differs across lanes, a Python int where it cannot);
* ``If`` conditions and ``For`` bounds must be uniform over the executing
  lanes, or :class:`IRFault` is raised;
* ``Elect`` runs its body on one lane (lane 0 of the active lanes:
  ``elect.sync`` picks the lowest active lane, PTX ISA "elect.sync");
  variables first bound inside it exist on that lane only;
* ``WarpSwitch`` runs the role whose warp range holds the warp.

Every op with an effect outside the warp (barriers, TMA, MMA, TMEM, shared
and global stores, thread syncs) is *yielded* as an event object carrying
its evaluated operands; the consumer (the simulator, or the static verifier
that only records) performs the effect and sends back a reply where the op
produces a value (``TmemLoad``: the loaded ``(32, ncols)`` f32 values;
``TmemBase``: the TMEM address).  Every event is a preemption point.

``TcgenFence``, ``TmemWaitLd`` and ``WgmmaFence`` are warp-local: the walker
records the tcgen05 fences and waits it passed in :attr:`WarpWalker.marks`
(the simulator applies them before the warp's next event) and, for
``wgmma.fence``, which register arrays a non-wgmma op accessed since
(:attr:`WarpWalker.touched`).

Register arrays (``TmemLoad`` destinations, wgmma accumulators) live in
:attr:`WarpWalker.regs` as ``(32, ncols)`` float32 arrays.  A read of an
array listed in :attr:`WarpWalker.busy` (a ``tcgen05.ld`` before
``tcgen05.wait::ld``, a wgmma accumulator before ``wgmma.wait_group``) is an
:class:`IRFault`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import ops as O
from ..ir.expr import Bin, Const, Param, Select, Sreg, Var, apply_binop, lift
from ..ir.printer import expr_str
from .numerics import bf16_bits_to_f32, f32_to_bf16_bits

LANES = 32
_STORE_BITS = {"bf16": f32_to_bf16_bits,
               "f16": lambda v: np.ascontiguousarray(np.asarray(v, dtype=np.float32).astype(np.float16)).view(np.uint16)}
"""16-bit store conversions by ``StSharedBf16.fmt``: round to nearest even (numpy's float16 cast is RNE)."""
LANE_IDS = np.arange(LANES, dtype=np.int64)


class IRFault(Exception):
    """The kernel breaks the IR's execution model (non-uniform control, undefined variable, register race)."""


@dataclass(frozen=True)
class BarRef:
    """One mbarrier instance: ``name[index]`` in the shared memory of cluster rank ``rank``."""

    rank: int
    name: str
    index: int

    def __str__(self) -> str:
        return f"{self.name}[{self.index}] of rank {self.rank}"


@dataclass(frozen=True)
class Where:
    """Where a warp is: its CTA, warp index, role and loop variables (for messages)."""

    ctaid: int
    rank: int
    warp: int
    role: str
    loops: tuple[tuple[str, int], ...]

    @property
    def who(self) -> str:
        return f"{self.role} (CTA {self.ctaid}, rank {self.rank}, warp {self.warp})"

    @property
    def at(self) -> str:
        return " ".join(f"{n}={v}" for n, v in self.loops) or "outside loops"

    def __str__(self) -> str:
        return f"{self.who} at {self.at}"


# ------------------------------------------------------------------ events (one class per effect)


@dataclass(slots=True)
class Ev:
    """Base of events; ``op`` is the IR op, ``lanes`` how many lanes execute it."""

    op: object
    lanes: int


@dataclass(slots=True)
class InitEv(Ev):
    bar: BarRef
    count: int


@dataclass(slots=True)
class ArriveEv(Ev):
    """``lanes`` arrivals on ``bar``; ``tx`` expect_tx bytes in total (0 for a plain arrive)."""

    bar: BarRef
    tx: int


@dataclass(slots=True)
class WaitEv(Ev):
    bar: BarRef
    parity: int
    role: str


@dataclass(slots=True)
class FenceInitEv(Ev):
    pass


@dataclass(slots=True)
class TmaLoadEv(Ev):
    """Box of ``tensor`` at (col, row) to ``dst`` in each rank of ``dst_ranks``; ``bars[i]`` gets its complete_tx."""

    tensor: str
    dst: int
    col: int
    row: int
    dst_ranks: tuple[int, ...]
    bars: tuple[BarRef, ...]


@dataclass(slots=True)
class TmaStoreEv(Ev):
    """``thread``: the issuing thread (see :meth:`WarpWalker.thread`); bulk async groups belong to it."""

    tensor: str
    src: int
    col: int
    row: int
    thread: object = None


@dataclass(slots=True)
class BulkCommitEv(Ev):
    thread: object = None


@dataclass(slots=True)
class BulkWaitEv(Ev):
    n: int
    read: bool
    thread: object = None


@dataclass(slots=True)
class FenceProxyEv(Ev):
    pass


@dataclass(slots=True)
class AllocEv(Ev):
    cols: int


@dataclass(slots=True)
class DeallocEv(Ev):
    taddr: int
    cols: int


@dataclass(slots=True)
class TmemBaseEv(Ev):
    pass


@dataclass(slots=True)
class SetMaxNRegEv(Ev):
    """``setmaxnreg.{inc|dec}.sync.aligned.u32 regs`` by the whole warp (its warpgroup's other warps must match)."""

    action: str
    regs: int


@dataclass(slots=True)
class UmmaEv(Ev):
    d: int
    a_desc: int
    b_desc: int
    idesc: int
    accumulate: bool


@dataclass(slots=True)
class TmemCopyEv(Ev):
    """``tcgen05.cp``: the 64-bit smem descriptor ``desc`` -> TMEM address ``taddr`` (NVFP4 scale atoms)."""

    taddr: int
    desc: int


@dataclass(slots=True)
class UmmaBlockScaledEv(Ev):
    """Block-scaled ``tcgen05.mma``: UmmaEv's operands plus the TMEM addresses of the scale factors."""

    d: int
    a_desc: int
    b_desc: int
    idesc: int
    sfa: int
    sfb: int
    accumulate: bool
    scale_vec: str


@dataclass(slots=True)
class CommitEv(Ev):
    """``tcgen05.commit``: one arrival on each of ``bars`` once the thread's prior MMAs completed."""

    bars: tuple[BarRef, ...]


@dataclass(slots=True)
class TmemLoadEv(Ev):
    taddr: int
    ncols: int


@dataclass(slots=True)
class WgmmaEv(Ev):
    acc: str
    n: int
    a_desc: int
    b_desc: int
    accumulate: bool


@dataclass(slots=True)
class WgmmaCommitEv(Ev):
    pass


@dataclass(slots=True)
class WgmmaWaitEv(Ev):
    n: int


@dataclass(slots=True)
class StSharedEv(Ev):
    """Each active lane stores ``data[i]`` (bytes) at smem+``addrs[i]``; ``data`` is None in a dry run."""

    addrs: np.ndarray
    nbytes: int
    data: np.ndarray | None


@dataclass(slots=True)
class StGlobalEv(Ev):
    """``D[rows[i], cols[i] + j] = values[i, j]`` (bf16 bits) where in bounds; ``values`` None in a dry run."""

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray | None


@dataclass(slots=True)
class WsStoreEv(Ev):
    """``st.global.v4.f32``: each active lane stores ``values[i]`` (4 f32) at workspace byte ``offsets[i]``."""

    offsets: np.ndarray
    values: np.ndarray | None


@dataclass(slots=True)
class WsLoadEv(Ev):
    """``ld.global.v4.f32`` of 4 f32 at workspace byte ``offsets[i]`` per active lane; reply ``(lanes, 4)`` f32."""

    offsets: np.ndarray


@dataclass(slots=True)
class WsAtomicEv(Ev):
    """A u32 counter op at workspace byte ``offset``: ``kind`` ``red`` (add ``value``), ``wait`` (spin until it
    equals ``value``) or ``store`` (set it to ``value``); ``sem``: ``release``/``acquire``/``relaxed``."""

    kind: str
    offset: int
    value: int
    sem: str
    scope: str


@dataclass(slots=True)
class SyncEv(Ev):
    """``bar.sync`` (kind ``cta`` id 0, or ``named``) or the cluster barrier (kind ``cluster``)."""

    kind: str
    id: int
    threads: int


# ------------------------------------------------------------------ the interpreter


class Program:
    """Per-kernel cache of compiled expressions, shared by every warp that runs the kernel.

    An expression tree compiles once into nested closures ``f(walker) -> value``
    with :func:`ptxgen.ir.expr.apply_binop` at each node (the same u32
    semantics as :func:`ptxgen.ir.expr.evaluate`, without re-dispatching on
    node types at every evaluation).
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self._fns: dict[int, tuple[object, object]] = {}  # id(expr) -> (expr, fn); keeps expr alive

    def fn(self, e):
        hit = self._fns.get(id(e))
        if hit is None:
            hit = self._fns[id(e)] = (e, _compile(e))
        return hit[1]


def _compile(e):
    if isinstance(e, Const):
        v = e.value
        return lambda wk: v
    if isinstance(e, Var):
        name = e.name
        return lambda wk: wk.read_var(name)
    if isinstance(e, Sreg):
        name = e.name
        if name == "lane":
            return lambda wk: LANE_IDS if wk.lane is None else wk.lane
        if name == "tid":
            return lambda wk: wk.warp * LANES + (LANE_IDS if wk.lane is None else wk.lane)
        return lambda wk: wk.sregs[name]
    if isinstance(e, Param):
        name = e.name
        return lambda wk: wk.params[name]
    if isinstance(e, Bin):
        op, fa, fb = e.op, _compile(e.a), _compile(e.b)
        return lambda wk: apply_binop(op, fa(wk), fb(wk))
    if isinstance(e, Select):
        fc, fa, fb = _compile(e.cond), _compile(e.a), _compile(e.b)

        def select(wk):
            c, a, b = fc(wk), fa(wk), fb(wk)
            return (a if c else b) if isinstance(c, int) else np.where(c != 0, a, b)
        return select
    raise IRFault(f"not an expression: {e!r}")


class _OneLane:
    """A variable bound inside ``Elect``: defined on lane ``lane`` only."""

    __slots__ = ("lane", "value")

    def __init__(self, lane: int, value: int):
        self.lane, self.value = lane, value


_SILENT = (O.Comment, O.Nanosleep, O.TmemRelinquish)
_LD_BUSY = "its tcgen05.ld has not been waited for (tcgen05.wait::ld)"


class WarpWalker:
    """Runs the kernel body for one warp; :meth:`run` is the event generator (see module docstring).

    Args:
        program: the kernel's :class:`Program`.
        ctaid, nctaid, cluster_size: the CTA's ``blockIdx.x``, ``gridDim.x`` and cluster size
            (rank = ctaid % cluster_size: clusters are consecutive CTAs along x).
        warp: warp index in the CTA.
        smem_base: shared-window address of the dynamic shared-memory base (``Sreg("smem")``).
        params: ``{"m": .., "n": .., "k": ..}``.
        values: False for a dry run (stores carry no data; the verifier).
    """

    def __init__(self, program: Program, *, ctaid: int, nctaid: int, cluster_size: int, warp: int, smem_base: int,
                 params: dict[str, int], values: bool = True):
        self.program = program
        self.kernel = program.kernel
        self.body = program.kernel.body
        self.cs = cluster_size
        self.rank = ctaid % cluster_size
        self.ctaid = ctaid
        self.warp = warp
        self.values = values
        self.sregs = {"warp": warp, "ctaid": ctaid, "nctaid": nctaid, "rank": self.rank, "smem": smem_base}
        self.params = params
        self.vars: dict[str, object] = {}
        self.regs: dict[str, np.ndarray] = {}
        # PackBf16 provenance: packed array -> the f32 array its elements were converted from (same indices);
        # a packed array holds the rounded values as f32, so a store's conversion of them is exact
        self.packed_from: dict[str, str] = {}
        self.busy: dict[str, str] = {}
        # wgmma.fence bookkeeping (PTX ISA "wgmma.fence"): register arrays a non-wgmma op accessed since the
        # warp's last wgmma.fence (name -> that op), and whether the warp executed any wgmma.fence yet
        self.touched: dict[str, str] = {}
        self.wgmma_fenced = False
        # tcgen05 ordering marks executed since the consumer last drained the list, in order: "before" / "after"
        # (tcgen05.fence::before/after_thread_sync) and "wait_ld" (tcgen05.wait::ld); they order the warp's
        # tcgen05 ops against its thread synchronisations, so the machine applies them before the warp's next event
        self.marks: list[str] = []
        self.lane: int | None = None  # None: all 32 lanes; else the one elected lane
        self.elects: list = []  # enclosing Elect ops, innermost last
        self.roles: list[str] = []
        self.loops: list[list] = []
        self._handlers = {
            O.WarpSwitch: self._warp_switch, O.For: self._for, O.If: self._if, O.Elect: self._elect,
            O.TmemLoad: self._tmem_load, O.TmemBase: self._tmem_base, O.LdGlobalF32: self._ws_load,
        }
        self._local = {O.Let: self._let, O.Shfl: self._shfl, O.TmemWaitLd: self._wait_ld, O.SiluMul: self._silu_mul,
                       O.PackBf16: self._pack,
                       O.WgmmaFence: self._wgmma_fence, O.TcgenFence: self._tcgen_fence}
        self._events = {
            O.MbarrierInit: self._init, O.MbarrierArrive: self._arrive, O.MbarrierArriveExpectTx: self._arrive,
            O.MbarrierWait: self._wait, O.FenceMbarrierInit: lambda op: FenceInitEv(op, self._n()),
            O.TmaLoad: self._tma_load, O.TmaStore: self._tma_store,
            O.BulkCommitGroup: lambda op: BulkCommitEv(op, self._n(), self.thread()),
            O.BulkWaitGroup: lambda op: BulkWaitEv(op, self._n(), op.n, op.read, self.thread()),
            O.FenceProxyAsync: lambda op: FenceProxyEv(op, self._n()),
            O.SetMaxNReg: lambda op: SetMaxNRegEv(op, self._whole_warp(op), op.action, op.regs),
            O.TmemAlloc: self._alloc, O.TmemDealloc: self._dealloc, O.Umma: self._umma, O.UmmaCommit: self._commit,
            O.TmemCopy: self._tmem_copy, O.UmmaBlockScaled: self._umma_block_scaled,
            O.Wgmma: self._wgmma, O.WgmmaCommit: lambda op: WgmmaCommitEv(op, self._whole_warp(op)),
            O.WgmmaWait: lambda op: WgmmaWaitEv(op, self._whole_warp(op), op.n),
            O.StSharedBf16: self._st_shared, O.StMatrix: self._st_matrix, O.StGlobalBf16: self._st_global,
            O.CtaSync: lambda op: SyncEv(op, self._whole_warp(op), "cta", 0, self.kernel.threads),
            O.NamedBarrier: self._named_barrier,
            O.ClusterSync: lambda op: SyncEv(op, self._whole_warp(op), "cluster", 0, self.kernel.threads * self.cs),
            O.StGlobalF32: self._ws_store,
            O.RedGlobal: lambda op: self._ws_atomic(op, "red", op.sem),
            O.LdGlobalAcquireWait: lambda op: self._ws_atomic(op, "wait", op.sem),
            O.StGlobalU32: lambda op: self._ws_atomic(op, "store", "relaxed"),
        }

    # ---------------------------------------------------------------- position

    def where(self) -> Where:
        """The warp's current position (role and loop variables)."""
        role = self.roles[-1] if self.roles else "all warps"
        return Where(self.ctaid, self.rank, self.warp, role, tuple((n, v) for n, v in self.loops))

    def loop_key(self) -> tuple:
        """Values of the enclosing loop variables, outermost first (identifies a loop iteration)."""
        return tuple(v for _, v in self.loops)

    # ---------------------------------------------------------------- expressions and variables

    def read_var(self, name: str):
        try:
            v = self.vars[name]
        except KeyError:
            raise IRFault(f"variable {name!r} read before any Let binds it") from None
        if isinstance(v, _OneLane):
            if self.lane != v.lane:
                raise IRFault(f"variable {name!r} was bound inside Elect (lane {v.lane} only) and is read "
                              f"by {'the whole warp' if self.lane is None else f'lane {self.lane}'}")
            return v.value
        if isinstance(v, np.ndarray) and self.lane is not None:
            return int(v[self.lane])
        return v

    def _write_var(self, name: str, value) -> None:
        if self.lane is None:
            self.vars[name] = value
            return
        old = self.vars.get(name)
        if old is None or isinstance(old, _OneLane):
            self.vars[name] = _OneLane(self.lane, int(value))
        elif isinstance(old, int) and old == value:
            return
        else:
            arr = np.array(np.broadcast_to(old, (LANES,)), dtype=np.int64)
            arr[self.lane] = int(value)
            self.vars[name] = arr

    def eval(self, e):
        """Value of expression ``e``: an int, or a (32,) array where it differs across lanes."""
        return self.program.fn(e)(self)

    def uniform(self, e, what: str) -> int:
        """``e`` as one int; IRFault when its value differs across the executing lanes."""
        v = self.eval(e)
        if isinstance(v, np.ndarray):
            if (v != v[0]).any():
                values = sorted(set(v.tolist()))
                raise IRFault(f"{what} {expr_str(e)} is not uniform across the warp's lanes (values {values})")
            return int(v[0])
        return int(v)

    def _n(self) -> int:
        return LANES if self.lane is None else 1

    def _whole_warp(self, op) -> int:
        if self.lane is not None:
            raise IRFault(f"{op.describe()} is a .sync.aligned warp-collective op but runs inside Elect (one lane)")
        return LANES

    def _lane_ids(self) -> np.ndarray:
        return LANE_IDS if self.lane is None else np.array([self.lane])

    def _per_lane(self, e) -> np.ndarray:
        """Value of ``e`` on each active lane (32 values, or 1 inside Elect) as int64."""
        v = self.eval(e)
        if self.lane is None:
            return np.broadcast_to(np.asarray(v, dtype=np.int64), (LANES,))
        return np.array([int(v)], dtype=np.int64)

    def _reg(self, name: str, idx: tuple[int, ...], by: str) -> np.ndarray:
        self.touched.setdefault(name, by)
        if name in self.busy:
            raise IRFault(f"register array {name!r} read while {self.busy[name]}")
        try:
            arr = self.regs[name]
        except KeyError:
            raise IRFault(f"register array {name!r} read before anything wrote it") from None
        if max(idx) >= arr.shape[1]:
            raise IRFault(f"register {name}[{max(idx)}] beyond the {arr.shape[1]} values written")
        return arr[self._lane_ids()][:, list(idx)]

    # ---------------------------------------------------------------- walking

    def run(self):
        """Generator of events for the whole kernel body (send replies for TmemLoad/TmemBase)."""
        yield from self._body(self.body)

    def _body(self, body):
        handlers, events, local = self._handlers, self._events, self._local
        for op in body:
            t = type(op)
            mk = events.get(t)
            if mk is not None:
                yield mk(op)
            elif t in local:
                local[t](op)
            elif t in handlers:
                yield from handlers[t](op)
            elif not isinstance(op, _SILENT):
                raise IRFault(f"the simulator has no model of {op.describe()}")

    def _warp_switch(self, op):
        for role in op.roles:
            if role.warp_lo <= self.warp < role.warp_hi:
                self.roles.append(role.name)
                yield from self._body(role.body)
                self.roles.pop()
                return

    def _for(self, op):
        start = self.uniform(op.start, f"For {op.var} start")
        stop = self.uniform(op.stop, f"For {op.var} stop")
        step = self.uniform(op.step, f"For {op.var} step")
        if step == 0:
            raise IRFault(f"For {op.var}: step 0 never terminates")
        slot = [op.var, start]
        self.loops.append(slot)
        v = start
        while v < stop:
            slot[1] = v
            self._write_var(op.var, v)
            yield from self._body(op.body)
            v += step
        self.loops.pop()

    def _if(self, op):
        if self.uniform(op.cond, "If condition"):
            yield from self._body(op.then)
        else:
            yield from self._body(op.orelse)

    def _elect(self, op):
        prev = self.lane
        self.lane = 0 if prev is None else prev
        self.elects.append(op)
        yield from self._body(op.body)
        self.elects.pop()
        self.lane = prev

    def thread(self):
        """Which thread of the warp runs the current op, for per-thread state (bulk async groups).

        None: every lane.  Inside ``Elect``: the Elect op, not a lane number: ``elect.sync`` may pick a
        different lane each time it runs (PTX ISA "elect.sync" promises one active lane, not which), so
        two different Elect blocks are two different, unknown threads; a ``fixed`` Elect
        is lane 0, the same thread every time.
        """
        if self.lane is not None and self.elects and not self.elects[-1].fixed:
            return ("elect", id(self.elects[-1]))
        return self.lane

    def loads_pending(self) -> bool:
        """Whether a ``tcgen05.ld`` of this warp has not been waited for (``tcgen05.wait::ld``) yet."""
        return any(why is _LD_BUSY for why in self.busy.values())

    def _let(self, op):
        self._write_var(op.var, self.eval(op.expr))

    def _shfl(self, op):
        self._whole_warp(op)
        src = np.broadcast_to(np.asarray(self.read_var(op.src), dtype=np.int64), (LANES,))
        lane = np.broadcast_to(np.asarray(self.eval(op.lane), dtype=np.int64), (LANES,))
        self._write_var(op.var, src[lane & (LANES - 1)])

    def _tmem_base(self, op):
        value = yield TmemBaseEv(op, self._n())
        self._write_var(op.var, int(value))

    def _tmem_load(self, op):
        lanes = self._whole_warp(op)
        values = yield TmemLoadEv(op, lanes, self.uniform(op.taddr, "TmemLoad address"), op.ncols)
        old = self.regs.get(op.dst)
        if old is None or old.shape[1] < op.ncols:
            old = np.full((LANES, op.ncols), np.nan, dtype=np.float32)
            self.regs[op.dst] = old
        old[:, : op.ncols] = values
        self.busy[op.dst] = _LD_BUSY
        self.touched.setdefault(op.dst, type(op).__name__)

    def _silu_mul(self, op):
        """silu(gate) * up in f32, as the emitted PTX computes it (ex2 of -x log2 e, reciprocal, two products)."""
        self._whole_warp(op)
        idx = tuple(range(op.n))
        x, u = self._reg(op.gate, idx, "SiluMul"), self._reg(op.up, idx, "SiluMul")
        with np.errstate(over="ignore", invalid="ignore"):
            t = np.exp2(x * np.float32(-1.4426950408889634)).astype(np.float32)
            s = (x * (np.float32(1) / (np.float32(1) + t))).astype(np.float32)
            out = (s * u).astype(np.float32)
        self._write_array(op.dst, out, type(op).__name__)

    def _write_array(self, name: str, values: np.ndarray, by: str) -> None:
        """``name[:, 0:n] = values`` (``n`` = values' columns; a shorter or missing array grows, NaN-filled)."""
        n = values.shape[1]
        arr = self.regs.get(name)
        if arr is None or arr.shape[1] < n:
            arr = np.full((LANES, n), np.nan, dtype=np.float32)
            self.regs[name] = arr
        arr[:, :n] = values
        self.touched.setdefault(name, by)

    def _pack(self, op):
        """``fmt`` rounding of ``src[0:n]`` into ``dst`` (kept as f32 values; see ``packed_from``)."""
        self._whole_warp(op)
        vals = self._reg(op.src, tuple(range(op.n)), "PackBf16")
        if op.fmt == "bf16":
            out = bf16_bits_to_f32(f32_to_bf16_bits(vals))
        else:
            out = _STORE_BITS[op.fmt](vals).view(np.float16).astype(np.float32)
        self._write_array(op.dst, out, type(op).__name__)
        self.packed_from[op.dst] = op.src

    def _tcgen_fence(self, op):
        self.marks.append(op.kind)

    def _wgmma_fence(self, op):
        self._whole_warp(op)
        self.touched.clear()
        self.wgmma_fenced = True

    def _wait_ld(self, op):
        self.marks.append("wait_ld")
        for name in [n for n, why in self.busy.items() if why is _LD_BUSY]:
            del self.busy[name]

    # ---------------------------------------------------------------- event makers

    def _bar(self, bar: O.Bar, cta) -> BarRef:
        rank = self.rank if cta is None else self.uniform(cta, f"{bar} target rank")
        if rank >= self.cs:
            raise IRFault(f"barrier {bar} on cluster rank {rank}, but the cluster has {self.cs} CTA(s)")
        return BarRef(rank, bar.name, self.uniform(bar.index, f"barrier {bar.name} index"))

    def _init(self, op):
        return InitEv(op, self._n(), self._bar(op.bar, None), self.uniform(op.count, "MbarrierInit count"))

    def _arrive(self, op):
        n = self._n()
        tx = getattr(op, "tx_bytes", 0) * n
        return ArriveEv(op, n, self._bar(op.bar, op.cta), tx)

    def _wait(self, op):
        parity = self.uniform(op.phase, "MbarrierWait phase")
        if parity not in (0, 1):
            raise IRFault(f"MbarrierWait {op.bar}: phase parity {parity} is not 0 or 1")
        return WaitEv(op, self._n(), self._bar(op.bar, None), parity, op.role)

    def _ranks(self, mask: int, what: str) -> tuple[int, ...]:
        ranks = tuple(r for r in range(16) if mask >> r & 1)
        if not ranks or ranks[-1] >= self.cs:
            raise IRFault(f"{what} multicast mask {mask:#x} names CTAs outside the {self.cs}-CTA cluster")
        return ranks

    def _tma_load(self, op):
        dst_ranks = self._ranks(op.multicast, "TmaLoad") if op.multicast else (self.rank,)
        index = self.uniform(op.bar.index, f"barrier {op.bar.name} index")
        # .cta_group::2: the barrier address is ANDed with the peer-bit mask 0xFEFFFFFF -> the even rank of the pair.
        bars = tuple(BarRef(r & ~1 if op.two_sm else r, op.bar.name, index) for r in dst_ranks)
        return TmaLoadEv(op, self._n(), op.tensor, self.uniform(op.dst, "TmaLoad dst"),
                         self.uniform(op.col, "TmaLoad col"), self.uniform(op.row, "TmaLoad row"), dst_ranks, bars)

    def _tma_store(self, op):
        return TmaStoreEv(op, self._n(), op.tensor, self.uniform(op.src, "TmaStore src"),
                          self.uniform(op.col, "TmaStore col"), self.uniform(op.row, "TmaStore row"), self.thread())

    def _alloc(self, op):
        return AllocEv(op, self._whole_warp(op), op.cols)

    def _dealloc(self, op):
        return DeallocEv(op, self._whole_warp(op), self.uniform(op.taddr, "TmemDealloc address"), op.cols)

    def _umma(self, op):
        a = op.a_hi << 32 | self.uniform(op.a_lo, "Umma a_lo")
        b = op.b_hi << 32 | self.uniform(op.b_lo, "Umma b_lo")
        return UmmaEv(op, self._n(), self.uniform(op.d, "Umma d"), a, b, op.idesc,
                      bool(self.uniform(op.accumulate, "Umma accumulate")))

    def _tmem_copy(self, op):
        desc = op.desc_hi << 32 | self.uniform(op.src_lo, "TmemCopy src_lo")
        return TmemCopyEv(op, self._n(), self.uniform(op.taddr, "TmemCopy taddr"), desc)

    def _umma_block_scaled(self, op):
        a = op.a_desc_hi << 32 | self.uniform(op.a_lo, "UmmaBlockScaled a_lo")
        b = op.b_desc_hi << 32 | self.uniform(op.b_lo, "UmmaBlockScaled b_lo")
        return UmmaBlockScaledEv(op, self._n(), self.uniform(op.d, "UmmaBlockScaled d"), a, b, op.idesc,
                                 self.uniform(op.sfa, "UmmaBlockScaled sfa"), self.uniform(op.sfb, "UmmaBlockScaled sfb"),
                                 bool(self.uniform(op.accumulate, "UmmaBlockScaled accumulate")), op.scale_vec)

    def _commit(self, op):
        ranks = self._ranks(op.multicast, "UmmaCommit") if op.multicast else (self.rank,)
        index = self.uniform(op.bar.index, f"barrier {op.bar.name} index")
        return CommitEv(op, self._n(), tuple(BarRef(r, op.bar.name, index) for r in ranks))

    def _wgmma(self, op):
        a = op.a_hi << 32 | self.uniform(op.a_lo, "Wgmma a_lo")
        b = op.b_hi << 32 | self.uniform(op.b_lo, "Wgmma b_lo")
        acc = bool(self.uniform(op.accumulate, "Wgmma accumulate"))
        if op.acc not in self.regs:
            self.regs[op.acc] = np.full((LANES, op.n // 2), np.nan, dtype=np.float32)
        return WgmmaEv(op, self._whole_warp(op), op.acc, op.n, a, b, acc)

    def _st_shared(self, op):
        addrs = self._per_lane(op.addr)
        data = None
        if self.values:
            vals = self._reg(op.src, op.idx, type(op).__name__)
            data = _STORE_BITS[op.fmt](vals).view(np.uint8).reshape(len(addrs), -1)
        return StSharedEv(op, self._n(), addrs, 2 * len(op.idx), data)

    def _st_matrix(self, op):
        """As one 16-byte store per lane: lane ``L`` supplied the address of row ``L % 8`` of matrix ``L // 8``, whose
        16 bytes are word ``L // 8`` of lanes ``4 (L % 8)`` .. ``4 (L % 8) + 3`` (see :class:`~ptxgen.ir.ops.StMatrix`)."""
        lanes = self._whole_warp(op)
        addrs = self._per_lane(op.addr)
        data = None
        if self.values:
            bits = _STORE_BITS[op.fmt](self._reg(op.src, op.idx, type(op).__name__)).reshape(LANES, 4, 2)
            rows = LANE_IDS % 8
            data = bits[4 * rows[:, None] + np.arange(4), (LANE_IDS // 8)[:, None]]  # [L, t, 2]: lane 4r+t, word j
            data = np.ascontiguousarray(data).view(np.uint8).reshape(LANES, 16)
        return StSharedEv(op, lanes, addrs, 16, data)

    def _st_global(self, op):
        rows, cols = self._per_lane(op.row), self._per_lane(op.col)
        values = _STORE_BITS[op.fmt](self._reg(op.src, op.idx, type(op).__name__)) if self.values else None
        return StGlobalEv(op, self._n(), rows, cols, values)

    def _ws_store(self, op):
        values = self._reg(op.src, op.idx, type(op).__name__) if self.values else None
        return WsStoreEv(op, self._n(), self._per_lane(op.offset), values)

    def _ws_load(self, op):
        if op.pred is not None and not self.uniform(op.pred, "LdGlobalF32 predicate"):
            return  # a skipped load adds 0.0
        old = self._reg(op.dst, op.idx, type(op).__name__)  # the registers the loads add into: written, not in flight
        values = yield WsLoadEv(op, self._n(), self._per_lane(op.offset))
        if values is not None:
            self.regs[op.dst][self._lane_ids()[:, None], list(op.idx)] = old + values

    def _ws_atomic(self, op, kind: str, sem: str):
        return WsAtomicEv(op, self._n(), kind, self.uniform(op.offset, f"{type(op).__name__} offset"), op.value, sem,
                          op.scope)

    def _named_barrier(self, op):
        lanes = self._whole_warp(op)
        bid = self.uniform(lift(op.id), "NamedBarrier id")  # the builder may pass a plain int
        if not 1 <= bid <= 15 or op.threads % LANES:
            raise IRFault(f"NamedBarrier id={bid} threads={op.threads}: id must be in [1, 15] and threads a "
                          "multiple of 32 (PTX ISA bar.sync)")
        return SyncEv(op, lanes, "named", bid, op.threads)
