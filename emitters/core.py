"""Lowering core: registers, labels, expressions and control flow.

:class:`Lowering` walks a Kernel IR tree and asks an op table (a dict from op
type to a small pure function ``fn(lw, op)``) for each leaf op's PTX.  It
owns what every family needs: expression lowering to ``u32`` arithmetic,
fresh temporaries and predicates, named registers for IR variables
(``%stage``, ``%phase``, ``%m_row``), register arrays for per-thread values
(``%v<32>``, ``%acc0_<64>``), shared-memory addresses and the ``//`` comment
every op leaves.
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


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


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
        if isinstance(b_expr, ex.Const) and op in _POW2 and _is_pow2(b_expr.value):
            # unsigned x / 2^s, x % 2^s, x * 2^s: ptxas does not always strength-reduce these
            op, shift = _POW2[op], b_expr.value.bit_length() - 1
            b_expr = ex.Const(b_expr.value - 1 if op == "and" else shift)
        a, b = self.value(e.a), self.value(b_expr)
        if a.isdigit():  # PTX takes an immediate only as the last source operand
            a = self.into_reg(a)
        d = self.tmp()
        self.emit(f"{_ARITH[op]} {d}, {a}, {b};")
        return d

    def into_reg(self, operand: str) -> str:
        if operand.startswith("%"):
            return operand
        d = self.tmp()
        self.emit(f"mov.u32 {d}, {operand};")
        return d

    def reg_const(self, value: int) -> str:
        """A fresh register holding the constant ``value`` (descriptor words, idesc)."""
        d = self.tmp()
        self.emit(f"mov.u32 {d}, {value:#x};")
        return d

    def reg(self, e: ex.Expr) -> str:
        """``e`` in a register (some instructions take no immediates)."""
        return self.into_reg(self.value(e))

    def predicate(self, cond: ex.Expr) -> str:
        """A predicate register true where ``cond`` is nonzero (comparisons lower to one setp)."""
        cond = ex.fold(cond)
        p = self.pred()
        if isinstance(cond, ex.Bin) and cond.op in _CMP:
            a, b = self.reg(cond.a), self.value(cond.b)
            self.emit(f"setp.{_CMP[cond.op]}.u32 {p}, {a}, {b};")
        else:
            self.emit(f"setp.ne.u32 {p}, {self.reg(cond)}, 0;")
        return p

    def smem(self, offset: ex.Expr) -> str:
        """Shared-window address (u32) of dynamic smem + ``offset`` bytes."""
        return self.value(ex.Sreg("smem") + offset)

    def bar(self, b: ops.Bar) -> str:
        """Shared-window address of barrier ``b`` (its array's offset + 8 * index)."""
        spec = self.kernel.barrier(b.name)
        return self.value(ex.Sreg("smem") + spec.offset + b.index * 8)

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


def _for(lw: Lowering, op: ops.For) -> None:
    lw.comment(op.describe())
    top, done = lw.label(f"{op.var}_loop"), lw.label(f"{op.var}_done")
    v = lw.var(op.var)
    lw.emit(f"mov.u32 {v}, {lw.value(op.start)};")
    lw.place(top)
    p = lw.pred()
    lw.emit(f"setp.ge.u32 {p}, {v}, {lw.value(op.stop)};")
    lw.emit(f"@{p} bra {done};")
    lw.depth += 1
    lw.body(op.body)
    lw.depth -= 1
    lw.emit(f"add.u32 {v}, {v}, {lw.value(op.step)};")
    lw.emit(f"bra {top};")
    lw.place(done)


def _if(lw: Lowering, op: ops.If) -> None:
    cond = ex.fold(op.cond)
    if isinstance(cond, ex.Const):  # decided at build time
        lw.body(op.then if cond.value else op.orelse)
        return
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
    lw.emit(f"elect.sync _|{p}, 0xffffffff;")
    lw.emit(f"@!{p} bra {skip};")
    lw.depth += 1
    lw.body(op.body)
    lw.depth -= 1
    lw.place(skip)


def _let(lw: Lowering, op: ops.Let) -> None:
    lw.comment(op.describe())
    v = lw.value(op.expr)
    lw.emit(f"mov.u32 {lw.var(op.var)}, {v};")


def _comment(lw: Lowering, op: ops.Comment) -> None:
    lw.lines.append("")
    lw.comment(f"==== {op.text}")


_CONTROL = {ops.WarpSwitch: _warp_switch, ops.For: _for, ops.If: _if, ops.Elect: _elect, ops.Let: _let,
            ops.Comment: _comment}
