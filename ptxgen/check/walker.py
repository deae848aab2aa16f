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
and global stores, thread syncs; every op that is not control flow, warp-local
or silent) is *yielded* as one :class:`Event`: the op itself and its operands
evaluated by a generic rule (every expression field; ``Op.per_lane`` and
``Op.collective`` say how), so an op type needs no event type of its own and
consumers dispatch on the op's type.  The consumer (the simulator, or the
static verifier that only records) performs the effect and sends back a reply
where the op produces a value (``TmemLoad``: the loaded ``(32, ncols)`` f32
values; ``TmemBase``: the TMEM address).  Every event is a preemption point.

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

from dataclasses import dataclass, fields

import numpy as np

from ..ir import ops as O
from ..ir.expr import Bin, Const, Expr, Param, Select, Sreg, Var, apply_binop
from ..ir.printer import expr_str
from ..ir import epilogue as epi
from .epilogue import evaluate, f32_of_bits
from .numerics import (bf16_bits_to_f32, ex2_approx_f32, f32_to_16_bits, f32_to_bf16_bits, f32_to_e4m3_bits,
                       rcp_approx_f32)

LANES = 32
_STORE_BITS = {"bf16": f32_to_bf16_bits, "f16": lambda v: f32_to_16_bits(v, "f16"), "e4m3": f32_to_e4m3_bits}
"""Store conversions by ``StShared16.fmt``: round to nearest even (:mod:`ptxgen.check.numerics`); ``e4m3``: the
1-byte codes of ``cvt.rn.satfinite.e4m3x2.f32`` (:func:`ptxgen.check.numerics.f32_to_e4m3_bits`)."""
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


# ------------------------------------------------------------------ events: one per executed op


class Event:
    """One op a warp executed, with its operands evaluated for the lanes that run it.

    ``op`` is the IR op: its static fields are read from it (``ev.op.tensor``, ``ev.op.ncols``).  ``lanes``: how
    many lanes run it (32, or 1 inside ``Elect``).  ``thread``: the issuing thread (:meth:`WarpWalker.thread`;
    bulk async groups belong to it).  ``values``: the evaluated operands, read as ``ev.name`` or ``ev["name"]``:

    * every expression field of the op, under its field name: an int, uniform over the lanes, or for a field the
      op lists in ``per_lane`` a ``(lanes,)`` int64 array; None where the field is None;
    * a :class:`~ptxgen.ir.ops.Bar` field as a :class:`BarRef` (on cluster rank ``cta`` where the op has that
      field, else the warp's own rank);
    * what the walker derives for a few op types (:attr:`WarpWalker.DERIVED`): the 64-bit descriptors of the
      MMAs and ``tcgen05.cp`` (``a_desc``, ``b_desc``, ``desc``) and their ``accumulate`` as a bool, the barriers a
      TMA load or a commit completes on (``bars``; a TMA load's ``dst_ranks``), an arrive's expect_tx bytes over
      its lanes (``tx``), a thread barrier's rendezvous (``kind`` ``cta``/``named``/``cluster``, ``id``,
      ``threads``), and a store's register data (``data``, None in a dry run; a shared store's ``nbytes`` per lane).
    """

    __slots__ = ("op", "lanes", "values", "thread")

    def __init__(self, op, lanes: int, values: dict | None = None, thread=None):
        self.op, self.lanes, self.values, self.thread = op, lanes, {} if values is None else values, thread

    def __getattr__(self, name: str):
        if name in Event.__slots__:
            raise AttributeError(name)
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(f"the event of {type(self.op).__name__} has no evaluated operand {name!r} "
                                 "(static fields are read from ev.op)") from None

    def __getitem__(self, name: str):
        return self.values[name]

    def __repr__(self) -> str:
        return f"Event({self.op.describe()}, lanes={self.lanes}, {self.values})"


#: op families the consumers treat alike
ARRIVES = (O.MbarrierArrive, O.MbarrierArriveExpectTx)
THREAD_SYNCS = (O.CtaSync, O.NamedBarrier, O.NamedBarrierPopc, O.ClusterSync)  # events carry the rendezvous: kind, id, threads
SHARED_STORES = (O.StShared16, O.StMatrix)  # events carry addr (per lane), nbytes and data
COUNTER_OPS = (O.AtomGlobalAdd, O.StGlobalU32)  # the split-K counter ops (one thread)

_SPECS: dict[type, tuple[tuple[str, str, str], ...]] = {}


def _operand_spec(t: type) -> tuple[tuple[str, str, str], ...]:
    """(field, how, label for messages) of the evaluated fields of op type ``t``, expressions before barriers (a
    Bar may name the rank in ``cta``): how is ``uniform``, ``lane`` (listed in ``t.per_lane``) or ``bar``."""
    spec = _SPECS.get(t)
    if spec is None:
        fs = fields(t)
        exprs = [(f.name, "lane" if f.name in t.per_lane else "uniform", f"{t.__name__} {f.name}") for f in fs
                 if f.type in ("Expr", "Expr | None") or f.type is Expr]
        bars = [(f.name, "bar", "") for f in fs if f.type == "Bar" or f.type is O.Bar]
        spec = _SPECS[t] = tuple(exprs + bars)
    return spec


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
        also: op types the walker otherwise runs silently or warp-locally (``TcgenFence``, ``Nanosleep``, ...)
            that it yields as events too, after their local effect (the PTX differential compares them).
    """

    def __init__(self, program: Program, *, ctaid: int, nctaid: int, cluster_size: int, warp: int, smem_base: int,
                 params: dict[str, int], values: bool = True, also: tuple[type, ...] = ()):
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
        # Pack16 provenance: packed array -> the f32 array its elements were converted from (same indices);
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
        self.also = frozenset(also)
        self._handlers = {
            O.WarpSwitch: self._warp_switch, O.For: self._for, O.If: self._if, O.Elect: self._elect,
            O.TmemLoad: self._tmem_load, O.TmemBase: self._tmem_base, O.LdGlobalF32: self._ws_load,
            O.LdEpilogue: self._epi_load, O.LdMatrix: self._epi_load,
            O.ScaleLoad: self._scale_load,
            O.LdGlobalNcU32: self._table_load, O.AtomGlobalAdd: self._counter_arrive,
            O.NamedBarrierPopc: self._barrier_popc,
        }
        self._local = {O.Let: self._let, O.Shfl: self._shfl, O.VoteAny: self._vote_any,
                       O.TmemWaitLd: self._wait_ld, O.EpilogueExpr: self._epi_expr,
                       O.Pack16: self._pack, O.AmaxLocal: self._amax_local, O.AmaxReduce: self._amax_reduce,
                       O.WgmmaFence: self._wgmma_fence, O.TcgenFence: self._tcgen_fence, O.PromoteScaled: self._promote}

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
        handlers, local, also = self._handlers, self._local, self.also
        for op in body:
            t = type(op)
            if t in handlers:
                yield from handlers[t](op)
            elif t in local:
                if op.collective:
                    self._whole_warp(op)
                local[t](op)
                if t in also:
                    yield self.event(op)
            elif t not in _SILENT or t in also:
                yield self.event(op)

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
        src = np.broadcast_to(np.asarray(self.read_var(op.src), dtype=np.int64), (LANES,))
        lane = np.broadcast_to(np.asarray(self.eval(op.lane), dtype=np.int64), (LANES,))
        self._write_var(op.var, src[lane & (LANES - 1)])

    def _vote_any(self, op):
        """``vote.sync.any.pred``: 1 on every lane when ``pred`` is nonzero on any lane of the warp (a collective:
        the whole warp runs it, never inside ``Elect``)."""
        self._write_var(op.var, int(bool((self._per_lane(op.pred) != 0).any())))

    def _tmem_base(self, op):
        value = yield self.event(op)
        self._write_var(op.var, int(value))

    def _tmem_load(self, op):
        values = yield self.event(op)
        old = self.regs.get(op.dst)
        if old is None or old.shape[1] < op.ncols:
            old = np.full((LANES, op.ncols), np.nan, dtype=np.float32)
            self.regs[op.dst] = old
        old[:, : op.ncols] = values
        self.busy[op.dst] = _LD_BUSY
        self.touched.setdefault(op.dst, type(op).__name__)

    def _epi_expr(self, op):
        """The epilogue expression in f32, as the emitted PTX computes it (:mod:`ptxgen.check.epilogue`)."""
        by = type(op).__name__

        def leaf(x):
            if isinstance(x, epi.Reg):
                return self._reg(x.array, x.idx, by)
            if isinstance(x, epi.ParamLeaf):
                return f32_of_bits(int(self.params.get(x.param, 0)))
            raise IRFault(f"{op.describe()}: unbound leaf {x!r}")

        out = np.broadcast_to(evaluate(op.expr, leaf), (self._n(), len(op.idx)))
        self._write_at(op.dst, op.idx, out, by)

    def _write_at(self, name: str, idx: tuple[int, ...], values: np.ndarray, by: str) -> None:
        """``name[lanes, idx] = values`` (a shorter or missing array grows, NaN-filled)."""
        n = max(idx) + 1
        arr = self.regs.get(name)
        if arr is None or arr.shape[1] < n:
            grown = np.full((LANES, n), np.nan, dtype=np.float32)
            if arr is not None:
                grown[:, :arr.shape[1]] = arr
            arr = self.regs[name] = grown
        arr[self._lane_ids()[:, None], list(idx)] = values
        self.touched.setdefault(name, by)

    def _amax_local(self, op):
        """``dst[slot] = max(dst[slot], |src[j]|)`` over the values inside D (``max.f32``: NaN skipped)."""
        by = type(op).__name__
        vals = self._reg(op.src, op.idx, by)
        old = self._reg(op.dst, (op.slot,), by)[:, 0]
        rows = self._per_lane(op.row)[:, None]
        cols = self._per_lane(op.col)[:, None] + np.asarray(op.cols)
        inside = (rows < self.params["m"]) & (cols < self.params["n"])
        new = np.fmax(old, np.fmax.reduce(np.where(inside, np.abs(vals), np.float32(0)), axis=1))
        self._write_at(op.dst, (op.slot,), new[:, None].astype(np.float32), by)

    def _amax_reduce(self, op):
        """The max of each group of ``lanes`` consecutive lanes, on every lane of the group (butterfly shuffles)."""
        by = type(op).__name__
        vals = self._reg(op.dst, op.idx, by)
        red = np.fmax.reduce(vals.reshape(LANES // op.lanes, op.lanes, -1), axis=1)
        self._write_at(op.dst, op.idx, np.repeat(red, op.lanes, axis=0), by)

    def _epi_load(self, op):
        """An epilogue operand load: the consumer replies the ``(lanes, len(idx))`` f32 values (None: a dry run, 0)."""
        values = yield self.event(op)
        if values is None:
            values = np.zeros((self._n(), len(op.idx)), dtype=np.float32)
        self._write_at(op.dst, op.idx, values, type(op).__name__)

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
        vals = self._reg(op.src, tuple(range(op.n)), "Pack16")
        if op.fmt == "bf16":
            out = bf16_bits_to_f32(f32_to_bf16_bits(vals))
        else:
            out = _STORE_BITS[op.fmt](vals).view(np.float16).astype(np.float32)
        self._write_array(op.dst, out, type(op).__name__)
        self.packed_from[op.dst] = op.src

    def _tcgen_fence(self, op):
        self.marks.append(op.kind)

    def _wgmma_fence(self, op):
        self.touched.clear()
        self.wgmma_fenced = True

    def _wait_ld(self, op):
        self.marks.append("wait_ld")
        for name in [n for n, why in self.busy.items() if why is _LD_BUSY]:
            del self.busy[name]

    # ---------------------------------------------------------------- events

    def event(self, op) -> Event:
        """The event of ``op`` for the executing lanes: its fields evaluated (see :class:`Event`), then what
        :attr:`DERIVED` adds for its type.  Raises IRFault (a collective op inside ``Elect``, a non-uniform
        operand, a barrier or multicast outside the cluster)."""
        lanes = self._whole_warp(op) if op.collective else self._n()
        values: dict = {}
        for name, how, label in _operand_spec(type(op)):
            v = getattr(op, name)
            if v is None:
                values[name] = None
            elif how == "lane":
                values[name] = self._per_lane(v)
            elif how == "bar":
                values[name] = self._bar(v, values.get("cta"))
            else:
                values[name] = v if isinstance(v, int) else self.uniform(v, label)
        derive = self.DERIVED.get(type(op))
        if derive is not None:
            derive(self, op, values, lanes)
        return Event(op, lanes, values, self.thread())

    def _table_load(self, op):
        """A word of a read-only u32 table (the grouped scheduler's): the consumer replies the value per lane
        (an int, or ``(lanes,)`` values); None (a consumer without tables) reads 0."""
        value = yield self.event(op)
        values = np.broadcast_to(np.asarray(0 if value is None else value, dtype=np.int64), (self._n(),))
        first = int(values[0])
        self._write_var(op.var, first if self.lane is not None or (values == first).all() else values.copy())

    def _counter_arrive(self, op):
        """A split-K counter arrival: the consumer replies the count before it (None, a consumer without
        counters: 0)."""
        value = yield self.event(op)
        self._write_var(op.var, 0 if value is None else int(value))

    def _barrier_popc(self, op):
        """``bar.red.popc``: the consumer replies the count over every participating thread (None, a consumer that
        does not meet warps: this warp's own count)."""
        ev = self.event(op)
        value = yield ev
        self._write_var(op.var, int(np.count_nonzero(ev.pred)) if value is None else int(value))

    def _ws_load(self, op):
        ev = self.event(op)
        if ev.pred is not None and not ev.pred:
            return  # a skipped load adds 0.0
        old = self._reg(op.dst, op.idx, type(op).__name__)  # the registers the loads add into: written, not in flight
        values = yield ev
        if values is not None:
            self.regs[op.dst][self._lane_ids()[:, None], list(op.idx)] = old + values

    def _scale_load(self, op):
        """FP8 scale loads: the consumer replies the scales ``(32, 3)`` f32 (scale_a of rows l/4 and l/4 + 8,
        scale_b; None in a dry run, 0); ``dst`` gets their two products rounded to f32, as ``mul.f32`` does."""
        scales = yield self.event(op)
        if scales is None:
            scales = np.zeros((LANES, 3), dtype=np.float32)
        self._write_array(op.dst, (scales[:, :2] * scales[:, 2:3]).astype(np.float32), type(op).__name__)

    def _promote(self, op):
        """FP8 promotion: ``acc[offset + j] (+)= part[j] * scales[(j/2) & 1]`` as the emitted PTX computes it:
        one fused multiply-add (one rounding) per value."""
        by = type(op).__name__
        part = self._reg(op.part, tuple(range(op.n)), by)  # after the wgmma.wait_group that wrote it
        sel = self._reg(op.scales, (0, 1), by)[:, (np.arange(op.n) // 2) & 1]
        prod = part.astype(np.float64) * sel.astype(np.float64)
        cols = tuple(range(op.offset, op.offset + op.n))
        if op.accumulate:
            prod = prod + self._reg(op.acc, cols, by).astype(np.float64)
        self._write_at(op.acc, cols, prod.astype(np.float32), by)

    def _bar(self, bar: O.Bar, rank: int | None) -> BarRef:
        rank = self.rank if rank is None else rank
        if rank >= self.cs:
            raise IRFault(f"barrier {bar} on cluster rank {rank}, but the cluster has {self.cs} CTA(s)")
        return BarRef(rank, bar.name, self.uniform(bar.index, f"barrier {bar.name} index"))

    def _ranks(self, mask: int, what: str) -> tuple[int, ...]:
        ranks = tuple(r for r in range(16) if mask >> r & 1)
        if not ranks or ranks[-1] >= self.cs:
            raise IRFault(f"{what} multicast mask {mask:#x} names CTAs outside the {self.cs}-CTA cluster")
        return ranks

    # ---------------------------------------------------------------- derived values (DERIVED)

    def _arrive(self, op, v: dict, lanes: int) -> None:
        v["tx"] = getattr(op, "tx_bytes", 0) * lanes

    def _wait(self, op, v: dict, lanes: int) -> None:
        if v["phase"] not in (0, 1):
            raise IRFault(f"MbarrierWait {op.bar}: phase parity {v['phase']} is not 0 or 1")

    def _tma_load(self, op, v: dict, lanes: int) -> None:
        v["dst_ranks"] = self._ranks(op.multicast, "TmaLoad") if op.multicast else (self.rank,)
        # .cta_group::2: the barrier address is ANDed with the peer-bit mask 0xFEFFFFFF -> the even rank of the pair.
        v["bars"] = tuple(BarRef(r & ~1 if op.two_sm else r, op.bar.name, v["bar"].index) for r in v["dst_ranks"])

    def _commit(self, op, v: dict, lanes: int) -> None:
        ranks = self._ranks(op.multicast, "UmmaCommit") if op.multicast else (self.rank,)
        v["bars"] = tuple(BarRef(r, op.bar.name, v["bar"].index) for r in ranks)

    def _mma(self, op, v: dict, lanes: int) -> None:
        """The 64-bit smem descriptors (the op's constant high words over the evaluated low words)."""
        a_hi, b_hi = (op.a_desc_hi, op.b_desc_hi) if isinstance(op, O.UmmaBlockScaled) else (op.a_hi, op.b_hi)
        v["a_desc"], v["b_desc"] = a_hi << 32 | v["a_lo"], b_hi << 32 | v["b_lo"]
        v["accumulate"] = bool(v["accumulate"])

    def _wgmma(self, op, v: dict, lanes: int) -> None:
        self._mma(op, v, lanes)
        if op.acc not in self.regs:
            self.regs[op.acc] = np.full((LANES, op.n // 2), np.nan, dtype=np.float32)

    def _tmem_copy(self, op, v: dict, lanes: int) -> None:
        v["desc"] = op.desc_hi << 32 | v["src_lo"]

    def _st_shared(self, op, v: dict, lanes: int) -> None:
        v["nbytes"], v["data"] = (1 if op.fmt == "e4m3" else 2) * len(op.idx), None
        if self.values:
            vals = self._reg(op.src, op.idx, type(op).__name__)
            v["data"] = _STORE_BITS[op.fmt](vals).view(np.uint8).reshape(len(v["addr"]), -1)

    def _st_matrix(self, op, v: dict, lanes: int) -> None:
        """As one 16-byte store per lane: lane ``L`` supplied the address of row ``L % 8`` of matrix ``L // 8``, whose
        16 bytes are word ``L // 8`` of lanes ``4 (L % 8)`` .. ``4 (L % 8) + 3`` (see :class:`~ptxgen.ir.ops.StMatrix`)."""
        v["nbytes"], v["data"] = 16, None
        if self.values:
            bits = _STORE_BITS[op.fmt](self._reg(op.src, op.idx, type(op).__name__)).reshape(LANES, 4, 2)
            rows = LANE_IDS % 8
            data = bits[4 * rows[:, None] + np.arange(4), (LANE_IDS // 8)[:, None]]  # [L, t, 2]: lane 4r+t, word j
            v["data"] = np.ascontiguousarray(data).view(np.uint8).reshape(LANES, 16)

    def _st_global(self, op, v: dict, lanes: int) -> None:
        """``data``: the stored 16-bit values (bf16/f16 bits), ``(lanes, len(idx))``."""
        v["data"] = _STORE_BITS[op.fmt](self._reg(op.src, op.idx, type(op).__name__)) if self.values else None

    def _st_epilogue(self, op, v: dict, lanes: int) -> None:
        """``data``: the stored f32 values ``(lanes, len(idx))`` (the machine rounds them to ``fmt``)."""
        v["data"] = self._reg(op.src, op.idx, type(op).__name__) if self.values else None

    def _ws_store(self, op, v: dict, lanes: int) -> None:
        """``data``: the stored f32 values, ``(lanes, 4)``."""
        v["data"] = self._reg(op.src, op.idx, type(op).__name__) if self.values else None

    def _cta_sync(self, op, v: dict, lanes: int) -> None:
        v["kind"], v["id"], v["threads"] = "cta", 0, self.kernel.threads

    def _cluster_sync(self, op, v: dict, lanes: int) -> None:
        v["kind"], v["id"], v["threads"] = "cluster", 0, self.kernel.threads * self.cs

    def _named_barrier(self, op, v: dict, lanes: int) -> None:
        if not 1 <= v["id"] <= 15 or op.threads % LANES:
            raise IRFault(f"NamedBarrier id={v['id']} threads={op.threads}: id must be in [1, 15] and threads a "
                          "multiple of 32 (PTX ISA bar.sync)")
        v["kind"], v["threads"] = "named", op.threads

    #: op type -> what the walker adds to its event's evaluated fields (see :class:`Event`); the few op types whose
    #: event carries more than its fields: descriptors, multicast barriers, register data, rendezvous sizes
    DERIVED = {
        O.MbarrierArrive: _arrive, O.MbarrierArriveExpectTx: _arrive, O.MbarrierWait: _wait,
        O.TmaLoad: _tma_load, O.UmmaCommit: _commit,
        O.Umma: _mma, O.UmmaBlockScaled: _mma, O.Wgmma: _wgmma, O.TmemCopy: _tmem_copy,
        O.StShared16: _st_shared, O.StMatrix: _st_matrix, O.StGlobal16: _st_global, O.StGlobalF32: _ws_store,
        O.StEpilogue: _st_epilogue,
        O.CtaSync: _cta_sync, O.ClusterSync: _cluster_sync, O.NamedBarrier: _named_barrier,
        O.NamedBarrierPopc: _named_barrier,
    }
