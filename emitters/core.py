"""Lowering core: registers, labels, expressions and control flow.

:class:`Lowering` walks a Kernel IR tree and asks an op table (a dict from op
type to a small pure function ``fn(lw, op)``) for each leaf op's PTX.  It
owns what every family needs: expression lowering to ``u32`` arithmetic,
fresh temporaries and predicates, named registers for IR variables
(``%stage``, ``%phase``, ``%m_row``), register arrays for per-thread values
(``%v<32>``, ``%acc0_<64>``), shared-memory addresses and the ``//`` comment
every op leaves.

Loop-invariant values are computed once, in a block right after the template's
prologue (:meth:`Lowering.hoist`), and read by name everywhere else: constant
operand registers (``%idesc``, ``%desc_hi``), the base address of each
mbarrier array (``%bar_full = %smem_base + offset``) and of each shared-memory
region (``%smem_a``; bases only where :func:`emitters.hoist_bases` says so), and
constant predicates (``%true``).  Inside K loops a straight-line stretch reuses
the temporary of an expression computed earlier in it (the memo is dropped at
every label and every IR-variable write).  A K-loop body then holds only the
work that changes per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ptxgen.ir import expr as ex
from ptxgen.ir import ops

# IR special registers -> the named register the prologue fills (PTX's own %tid etc. are reserved names)
SREG_REGS = {"tid": "%thread", "warp": "%warp", "lane": "%lane", "ctaid": "%cta", "nctaid": "%ncta",
             "rank": "%rank", "smem": "%smem_base"}

_ARITH = {"add": "add.u32", "sub": "sub.u32", "mul": "mul.lo.u32", "div": "div.u32", "mod": "rem.u32",
          "and": "and.b32", "or": "or.b32", "xor": "xor.b32", "shl": "shl.b32", "shr": "shr.u32",
          "min": "min.u32", "max": "max.u32"}
_CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le"}
_POW2 = {"div": "shr", "mod": "and", "mul": "shl"}
_COMMUTATIVE = {"add", "mul", "and", "or", "xor", "min", "max"}


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def udiv_magic(d: int) -> tuple[int, int] | None:
    """``(m, s)`` with ``n // d == (n * m) >> (32 + s)`` for every u32 ``n``, ``m < 2**32``; None when ``d`` needs a
    33-bit multiplier (7, 14, ...) or is below 2.

    Granlund and Montgomery, "Division by invariant integers using multiplication" (PLDI 1994); Hacker's Delight
    §10-9: with ``m = ceil(2**(32+s) / d)`` and ``e = m*d - 2**(32+s) <= 2**s``, the product overshoots ``n / d``
    by less than ``1/d`` for ``n < 2**32``, so the floor is exact.
    """
    if d < 2:
        return None
    for s in range(33):
        m = -(-(1 << (32 + s)) // d)
        if m >= 1 << 32:
            return None
        if m * d - (1 << (32 + s)) <= 1 << s:
            return m, s
    return None


@dataclass
class Lowering:
    """State of one kernel's lowering.  ``lines`` is the body text; ``decls`` is filled at the end."""

    kernel: object  # ptxgen.ir.Kernel: resources (barrier offsets, TMEM slot, cta_group) and params
    table: dict
    lines: list[str] = field(default_factory=list)
    vars: set[str] = field(default_factory=set)
    arrays: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (ptx type, length)
    n_tmp: int = 0
    n_tmp64: int = 0
    n_tmp16: int = 0
    n_pred: int = 0
    n_label: int = 0
    depth: int = 1
    hoisted: dict[str, str] = field(default_factory=dict)  # register name -> the PTX line that fills it (kernel top)
    cse: dict = field(default_factory=dict)  # expression -> the temporary holding it, in this straight-line stretch
    cse_on: bool = False  # reuse temporaries (only inside K loops: elsewhere longer live ranges cost registers)
    hoist_bases: bool = True  # barrier-array and smem-region bases in hoisted registers (see emitters.hoist_bases)
    hoisted_pred: set[str] = field(default_factory=set)  # the hoisted registers that are predicates
    _hoist_key: dict[tuple, str] = field(default_factory=dict)  # (stem, what) -> register name

    # -------------------------------------------------------------- text

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def comment(self, text: str) -> None:
        self.emit(f"// {text}")

    def label(self, stem: str) -> str:
        self.n_label += 1
        return f"${stem.upper()}_{self.n_label}"

    def place(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.cse.clear()  # a join point: temporaries computed before it need not hold on every path

    def assigned(self) -> None:
        """An IR variable was (re)written: no remembered expression may be reused past this point."""
        self.cse.clear()

    # -------------------------------------------------------------- registers

    def tmp(self) -> str:
        self.n_tmp += 1
        return f"%x{self.n_tmp}"

    def tmp64(self) -> str:
        self.n_tmp64 += 1
        return f"%xd{self.n_tmp64}"

    def tmp16(self) -> str:
        self.n_tmp16 += 1
        return f"%xh{self.n_tmp16}"

    def pred(self) -> str:
        self.n_pred += 1
        return f"%p{self.n_pred}"

    def var(self, name: str) -> str:
        """Named u32 register of IR variable ``name`` (declared once)."""
        self.vars.add(name)
        return f"%{name}"

    def array(self, name: str, length: int, ptype: str = ".b32") -> list[str]:
        """Registers ``%name_0 .. %name_{length-1}`` of a per-thread array (declared at the largest length used)."""
        old = self.arrays.get(name, (ptype, 0))[1]
        self.arrays[name] = (ptype, max(old, length))
        return [f"%{name}_{i}" for i in range(length)]

    # -------------------------------------------------------------- expressions

    def value(self, e: ex.Expr) -> str:
        """An operand for ``e``: an immediate, a named register, or a fresh temporary holding it."""
        e = ex.fold(ex.lift(e))
        if isinstance(e, ex.Const):
            return str(e.value)
        if isinstance(e, ex.Var):
            return self.var(e.name)
        if isinstance(e, ex.Sreg):
            return SREG_REGS[e.name]
        if isinstance(e, ex.Param):
            return f"%{e.name}"
        if not self.cse_on:
            return self._compute(e)
        hit = self.cse.get(e)
        if hit is not None:  # computed earlier in this stretch (no label, no variable write since)
            return hit
        d = self._compute(e)
        self.cse[e] = d
        return d

    def _compute(self, e: ex.Expr) -> str:
        if isinstance(e, ex.Select):
            p = self.predicate(e.cond)
            d = self.tmp()
            self.emit(f"selp.b32 {d}, {self.value(e.a)}, {self.value(e.b)}, {p};")
            return d
        if e.op in _CMP:
            p = self.predicate(e)
            d = self.tmp()
            self.emit(f"selp.u32 {d}, 1, 0, {p};")
            return d
        op, b_expr = e.op, e.b
        if isinstance(b_expr, ex.Const) and op in ("div", "mod") and not _is_pow2(b_expr.value):
            magic = udiv_magic(b_expr.value)
            if magic is not None:
                return self._div_by_constant(op, self.value(e.a), b_expr.value, *magic)
        if isinstance(b_expr, ex.Const) and op in _POW2 and _is_pow2(b_expr.value):
            # unsigned x / 2^s, x % 2^s, x * 2^s: ptxas does not always strength-reduce these
            op, shift = _POW2[op], b_expr.value.bit_length() - 1
            b_expr = ex.Const(b_expr.value - 1 if op == "and" else shift)
        a, b = self.value(e.a), self.value(b_expr)
        if a.isdigit() and not b.isdigit() and op in _COMMUTATIVE:
            a, b = b, a  # the immediate goes last without a mov
        if a.isdigit():  # PTX takes an immediate only as the last source operand
            a = self.into_reg(a)
        d = self.tmp()
        self.emit(f"{_ARITH[op]} {d}, {a}, {b};")
        return d

    def _div_by_constant(self, op: str, a: str, d: int, m: int, s: int) -> str:
        """``a / d`` or ``a % d`` (u32) by a multiply-high and a shift (:func:`udiv_magic`): ``div.u32``/``rem.u32``
        by a constant made ptxas 13 compute a reciprocal at run time and correct the quotient twice, a chain of
        about 12 dependent instructions in the k-loop's stage and phase (docs/performance.md, "Constant division")."""
        if a.isdigit():
            a = self.into_reg(a)
        q = self.tmp()
        self.emit(f"mul.hi.u32 {q}, {a}, {m};")
        if s:
            self.emit(f"shr.u32 {q}, {q}, {s};")
        if op == "div":
            return q
        r = self.tmp()
        self.emit(f"mul.lo.u32 {r}, {q}, {d};")
        self.emit(f"sub.u32 {r}, {a}, {r};")
        return r

    def into_reg(self, operand: str) -> str:
        if operand.startswith("%"):
            return operand
        d = self.tmp()
        self.emit(f"mov.u32 {d}, {operand};")
        return d

    def hoist(self, stem: str, key, make: str, pred: bool = False) -> str:
        """Register ``%stem`` (``%stem_1``, ... when the stem is taken by another value), filled once before the body.

        ``key`` identifies the value (equal keys share the register); ``make`` is the PTX line that fills
        it, with ``{d}`` for the register.  Only for loop-invariant values: ``make`` may read only the
        template prologue's registers (``%smem_base``, parameters) and other hoisted registers.
        """
        name = self._hoist_key.get((stem, key))
        if name is None:
            n = sum(1 for k in self._hoist_key if k[0] == stem)
            name = f"%{stem}" if n == 0 else f"%{stem}_{n}"
            self._hoist_key[(stem, key)] = name
            if pred:
                self.hoisted_pred.add(name[1:])
        self.hoisted.setdefault(name, make.format(d=name))
        return name

    @property
    def hoisted_names(self) -> set[str]:
        """Names (without ``%``) of every hoisted register."""
        return {name[1:] for name in self._hoist_key.values()}

    def reg_const(self, value: int, stem: str = "const") -> str:
        """A register holding the constant ``value`` (``%idesc``, ``%desc_hi``), filled once, before the body."""
        return self.hoist(stem, value, f"mov.u32 {{d}}, {value:#x};")

    def hoisted_lines(self) -> list[str]:
        """The loop-invariant block: one line per hoisted register, in first-use order."""
        if not self.hoisted:
            return []
        out = ["", "    // ==== loop invariants (computed once, read by name)"]
        return out + [f"    {line}" for line in self.hoisted.values()]

    def reg(self, e: ex.Expr) -> str:
        """``e`` in a register (some instructions take no immediates)."""
        return self.into_reg(self.value(e))

    def predicate(self, cond: ex.Expr) -> str:
        """A predicate register true where ``cond`` is nonzero (comparisons lower to one setp)."""
        cond = ex.fold(ex.lift(cond))
        if isinstance(cond, ex.Const):  # e.g. the accumulate flag of every MMA but a k-block's first
            if cond.value:
                return self.hoist("true", True, "setp.eq.u32 {d}, %smem_base, %smem_base;  // always true", pred=True)
            return self.hoist("false", False, "setp.ne.u32 {d}, %smem_base, %smem_base;  // always false", pred=True)
        p = self.pred()
        if isinstance(cond, ex.Bin) and cond.op in _CMP:
            a, b = self.reg(cond.a), self.value(cond.b)
            self.emit(f"setp.{_CMP[cond.op]}.u32 {p}, {a}, {b};")
        else:
            self.emit(f"setp.ne.u32 {p}, {self.reg(cond)}, 0;")
        return p

    def _based(self, base: str, rest: ex.Expr | None) -> str:
        """``base + rest`` (``base`` a register): no instruction when ``rest`` is absent or 0."""
        if rest is None:
            return base
        r = self.value(rest)
        if r == "0":
            return base
        hit = self.cse.get((base, r)) if self.cse_on else None
        if hit is None:
            hit = self.cse[(base, r)] = self.tmp()
            self.emit(f"add.u32 {hit}, {base}, {r};")
        return hit

    def smem_start(self, offset: int) -> tuple[str, int]:
        """``(register, rest)`` with register + rest = the shared-window address of dynamic smem + ``offset``.

        The register is ``%smem_base`` or a base hoisted before the body, named after where it points: the
        start of the region holding ``offset`` (``%smem_a``, with ``rest`` the offset into it) or the TMEM
        slot (``%smem_tmem_slot``).
        """
        if not self.hoist_bases:
            return SREG_REGS["smem"], offset
        if offset == self.kernel.tmem_slot:
            return self.hoist("smem_tmem_slot", offset, f"add.u32 {{d}}, %smem_base, {offset};"), 0
        inside = [r for r in self.kernel.regions if r.count and r.offset <= offset < r.end and r.offset]
        if not inside:
            return SREG_REGS["smem"], offset
        r = max(inside, key=lambda r: r.offset)  # the nearest start (stage-interleaved regions overlap)
        return self.hoist(f"smem_{r.name}", r.offset, f"add.u32 {{d}}, %smem_base, {r.offset};"), offset - r.offset

    def smem(self, offset: ex.Expr) -> str:
        """Shared-window address (u32) of dynamic smem + ``offset`` bytes (from a hoisted base where there is one)."""
        const, rest = _split_const(ex.fold(ex.lift(offset)))
        base, rel = self.smem_start(const)
        if rel:
            rest = ex.Const(rel) if rest is None else ex.fold(rest + rel)
        return self._based(base, rest)

    def bar(self, b: ops.Bar) -> str:
        """Shared-window address of barrier ``b``: ``%bar_<name>`` (its array's base, hoisted) + 8 * index."""
        spec = self.kernel.barrier(b.name)
        if not self.hoist_bases:
            return self.value(ex.Sreg("smem") + spec.offset + b.index * 8)
        base = self.hoist(f"bar_{b.name}", spec.offset, f"add.u32 {{d}}, %smem_base, {spec.offset};")
        idx = ex.fold(ex.lift(b.index) * 8)
        return self._based(base, None if isinstance(idx, ex.Const) and idx.value == 0 else idx)

    # -------------------------------------------------------------- control flow

    def body(self, body) -> None:
        for op in body:
            self.op(op)

    def op(self, op) -> None:
        handler = _CONTROL.get(type(op))
        if handler is not None:
            handler(self, op)
            return
        fn = self.table.get(type(op))
        if fn is None:
            raise NotImplementedError(f"no {self.kernel.arch} lowering for IR op {type(op).__name__}")
        self.comment(op.describe())
        fn(self, op)
        if hasattr(op, "var"):  # Shfl, TmemBase, ...: wrote an IR variable
            self.assigned()


def _split_const(e: ex.Expr) -> tuple[int, ex.Expr | None]:
    """``e`` as ``const + rest`` (rest None when ``e`` is a constant), looking through nested ``add``s."""
    if isinstance(e, ex.Const):
        return e.value, None
    if isinstance(e, ex.Bin) and e.op == "add":
        ca, ra = _split_const(e.a)
        cb, rb = _split_const(e.b)
        rest = ra if rb is None else rb if ra is None else ex.Bin("add", ra, rb)
        return (ca + cb) & 0xFFFFFFFF, rest
    return 0, e


def _warp_switch(lw: Lowering, op: ops.WarpSwitch) -> None:
    lw.comment(op.describe())
    end = lw.label("roles_end")
    for role in op.roles:
        nxt = lw.label(f"not_{role.name}")
        lw.comment(f"role {role.name}: warps {role.warp_lo}..{role.warp_hi - 1}")
        p = lw.pred()
        if role.warp_hi - role.warp_lo == 1:
            lw.emit(f"setp.ne.u32 {p}, %warp, {role.warp_lo};")
        else:
            t = lw.tmp()
            lw.emit(f"sub.u32 {t}, %warp, {role.warp_lo};")
            lw.emit(f"setp.ge.u32 {p}, {t}, {role.warp_hi - role.warp_lo};")
        lw.emit(f"@{p} bra {nxt};")
        lw.depth += 1
        lw.body(role.body)
        lw.depth -= 1
        lw.emit(f"bra {end};")
        lw.place(nxt)
    lw.place(end)


_K_LOOP_OPS = (ops.Umma, ops.UmmaBlockScaled, ops.Wgmma, ops.TmaLoad)


def _is_k_loop(op: ops.For) -> bool:
    """A loop that issues MMAs or TMA loads itself (not only through a nested loop): a K loop."""
    def issues(body):
        return any(isinstance(o, _K_LOOP_OPS) for o in ops.walk(body))
    return issues(op.body) and not any(isinstance(o, ops.For) and issues(o.body) for o in ops.walk(op.body))


def _for(lw: Lowering, op: ops.For) -> None:
    outer = lw.cse_on
    lw.cse_on = outer or _is_k_loop(op)
    _lower_for(lw, op)
    lw.cse_on = outer


def _lower_for(lw: Lowering, op: ops.For) -> None:
    lw.comment(op.describe())
    top, done = lw.label(f"{op.var}_loop"), lw.label(f"{op.var}_done")
    v = lw.var(op.var)
    lw.emit(f"mov.u32 {v}, {lw.value(op.start)};")
    lw.place(top)
    if not op.unroll:
        lw.emit('.pragma "nounroll";')
    p = lw.pred()
    lw.emit(f"setp.ge.u32 {p}, {v}, {lw.value(op.stop)};")
    lw.emit(f"@{p} bra {done};")
    lw.depth += 1
    lw.body(op.body)
    lw.depth -= 1
    lw.emit(f"add.u32 {v}, {v}, {lw.value(op.step)};")
    lw.assigned()
    lw.emit(f"bra {top};")
    lw.place(done)


def _if(lw: Lowering, op: ops.If) -> None:
    cond = ex.fold(op.cond)  # never a constant: legalize folded those away
    lw.comment(op.describe())
    other, end = lw.label("else"), lw.label("endif")
    p = lw.predicate(cond)
    lw.emit(f"@!{p} bra {other};")
    lw.depth += 1
    lw.body(op.then)
    lw.depth -= 1
    if op.orelse:
        lw.emit(f"bra {end};")
        lw.place(other)
        lw.comment("else")
        lw.depth += 1
        lw.body(op.orelse)
        lw.depth -= 1
        lw.place(end)
    else:
        lw.place(other)


def _elect(lw: Lowering, op: ops.Elect) -> None:
    lw.comment(op.describe())
    skip = lw.label("not_elected")
    p = lw.pred()
    lw.emit(f"setp.eq.u32 {p}, %lane, 0;" if op.fixed else f"elect.sync _|{p}, 0xffffffff;")
    lw.emit(f"@!{p} bra {skip};")
    lw.depth += 1
    lw.body(op.body)
    lw.depth -= 1
    lw.place(skip)


def _let(lw: Lowering, op: ops.Let) -> None:
    lw.comment(op.describe())
    v = lw.value(op.expr)
    lw.emit(f"mov.u32 {lw.var(op.var)}, {v};")
    lw.assigned()


def _comment(lw: Lowering, op: ops.Comment) -> None:
    lw.lines.append("")
    lw.comment(f"==== {op.text}")


_CONTROL = {ops.WarpSwitch: _warp_switch, ops.For: _for, ops.If: _if, ops.Elect: _elect, ops.Let: _let,
            ops.Comment: _comment}
