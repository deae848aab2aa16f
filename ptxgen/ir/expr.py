"""Index arithmetic as small expression trees: one source of truth.

Builders write ``stage = it % S`` and ``phase = (it // S) & 1`` as trees; the
emitters lower them to PTX ``u32`` arithmetic and the simulator evaluates them
(per lane, with numpy).  All values are unsigned 32-bit; ``//`` and ``%`` are
unsigned division; comparisons yield 0 or 1.

Leaves:
    Const(v)        an integer constant
    Var(name)       a variable bound by ``Let`` or a ``For`` loop
    Sreg(name)      a special register: ``tid`` (threadIdx.x), ``warp`` (tid // 32),
                    ``lane`` (tid % 32), ``ctaid`` (blockIdx.x), ``nctaid`` (gridDim.x),
                    ``rank`` (%cluster_ctarank), ``smem`` (shared-window address of the
                    dynamic shared-memory base)
    Param(name)     a kernel parameter: ``m``, ``n``, ``k``
"""

from __future__ import annotations

from dataclasses import dataclass

SREGS = ("tid", "warp", "lane", "ctaid", "nctaid", "rank", "smem")
PARAMS = ("m", "n", "k", "num_groups")  # num_groups: grouped kernels only (schedule.grouped)
BINOPS = ("add", "sub", "mul", "div", "mod", "and", "or", "xor", "shl", "shr", "min", "max", "eq", "ne", "lt", "le")


class Expr:
    """Base of expression nodes; Python operators build trees (``a + 1``, ``a // 4``, ``a & 1``)."""

    def _b(self, op: str, other, swap: bool = False) -> "Bin":
        other = lift(other)
        return Bin(op, other, self) if swap else Bin(op, self, other)

    def __add__(self, o): return self._b("add", o)
    def __radd__(self, o): return self._b("add", o, True)
    def __sub__(self, o): return self._b("sub", o)
    def __rsub__(self, o): return self._b("sub", o, True)
    def __mul__(self, o): return self._b("mul", o)
    def __rmul__(self, o): return self._b("mul", o, True)
    def __floordiv__(self, o): return self._b("div", o)
    def __mod__(self, o): return self._b("mod", o)
    def __and__(self, o): return self._b("and", o)
    def __or__(self, o): return self._b("or", o)
    def __xor__(self, o): return self._b("xor", o)
    def __lshift__(self, o): return self._b("shl", o)
    def __rshift__(self, o): return self._b("shr", o)


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int

    def __post_init__(self):
        if not 0 <= self.value < 2**32:
            raise ValueError(f"Const({self.value}) outside u32")


@dataclass(frozen=True, eq=True)
class Var(Expr):
    name: str


@dataclass(frozen=True, eq=True)
class Sreg(Expr):
    name: str

    def __post_init__(self):
        if self.name not in SREGS:
            raise ValueError(f"unknown special register {self.name!r}; known: {SREGS}")


@dataclass(frozen=True, eq=True)
class Param(Expr):
    name: str

    def __post_init__(self):
        if self.name not in PARAMS:
            raise ValueError(f"unknown kernel parameter {self.name!r}; known: {PARAMS}")


@dataclass(frozen=True, eq=True)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr

    def __post_init__(self):
        if self.op not in BINOPS:
            raise ValueError(f"unknown operator {self.op!r}")


@dataclass(frozen=True, eq=True)
class Select(Expr):
    """``cond ? a : b`` (cond nonzero)."""

    cond: Expr
    a: Expr
    b: Expr


def lift(x) -> Expr:
    """An Expr from an Expr or a Python int."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"cannot use {x!r} in an index expression")
    return Const(x)


def emin(a, b) -> Expr:
    return Bin("min", lift(a), lift(b))


def emax(a, b) -> Expr:
    return Bin("max", lift(a), lift(b))


def eq(a, b) -> Expr:
    return Bin("eq", lift(a), lift(b))


def ne(a, b) -> Expr:
    return Bin("ne", lift(a), lift(b))


def lt(a, b) -> Expr:
    return Bin("lt", lift(a), lift(b))


def le(a, b) -> Expr:
    return Bin("le", lift(a), lift(b))


def select(c, a, b) -> Expr:
    return Select(lift(c), lift(a), lift(b))


def ceil_div(a, b) -> Expr:
    return (lift(a) + (lift(b) - 1)) // b


def land(a, b) -> Expr:
    """Logical and of two 0/1 values."""
    return lift(a) & lift(b)


def lor(a, b) -> Expr:
    """Logical or of two 0/1 values."""
    return lift(a) | lift(b)


def fold(e: Expr) -> Expr:
    """Constant-fold and simplify trivial identities (x+0, x*1, x*0, x//1, x%1, x<<0)."""
    if isinstance(e, Bin):
        a, b = fold(e.a), fold(e.b)
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(apply_binop(e.op, a.value, b.value))
        if isinstance(b, Const):
            v = b.value
            if (e.op in ("add", "sub", "or", "xor", "shl", "shr") and v == 0) or (e.op in ("mul", "div") and v == 1):
                return a
            if (e.op == "mul" and v == 0) or (e.op == "mod" and v == 1) or (e.op == "and" and v == 0):
                return Const(0)
        if isinstance(a, Const):
            if (e.op in ("add", "or", "xor") and a.value == 0) or (e.op == "mul" and a.value == 1):
                return b
            if e.op in ("mul", "and", "shl", "shr") and a.value == 0:
                return Const(0)
        return Bin(e.op, a, b)
    if isinstance(e, Select):
        c, a, b = fold(e.cond), fold(e.a), fold(e.b)
        if isinstance(c, Const):
            return a if c.value else b
        return Select(c, a, b)
    return e


MASK32 = 0xFFFFFFFF


def apply_binop(op: str, a, b):
    """Apply ``op`` with u32 semantics.  Works on Python ints and numpy uint arrays."""
    if op == "add":
        r = a + b
    elif op == "sub":
        r = a - b
    elif op == "mul":
        r = a * b
    elif op == "div":
        r = a // b
    elif op == "mod":
        r = a % b
    elif op == "and":
        r = a & b
    elif op == "or":
        r = a | b
    elif op == "xor":
        r = a ^ b
    elif op == "shl":
        r = a << b
    elif op == "shr":
        r = a >> b
    elif op == "min":
        r = a if _is_int(a) and _is_int(b) and a <= b else (b if _is_int(a) and _is_int(b) else _np().minimum(a, b))
    elif op == "max":
        r = a if _is_int(a) and _is_int(b) and a >= b else (b if _is_int(a) and _is_int(b) else _np().maximum(a, b))
    elif op in ("eq", "ne", "lt", "le"):
        cmp = {"eq": lambda: a == b, "ne": lambda: a != b, "lt": lambda: a < b, "le": lambda: a <= b}[op]()
        r = int(cmp) if isinstance(cmp, bool) else cmp.astype(_np().int64)
    else:  # pragma: no cover - guarded by Bin.__post_init__
        raise ValueError(op)
    return r & MASK32


def _is_int(x) -> bool:
    return isinstance(x, int)


def _np():
    import numpy

    return numpy


def evaluate(e: Expr, env) -> object:
    """Evaluate ``e``; ``env(leaf)`` returns the value of a Var/Sreg/Param leaf (int or numpy array)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (Var, Sreg, Param)):
        return env(e)
    if isinstance(e, Bin):
        return apply_binop(e.op, evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Select):
        c = evaluate(e.cond, env)
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        if isinstance(c, int):
            return a if c else b
        return _np().where(c != 0, a, b)
    raise TypeError(f"not an expression: {e!r}")


_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&", "or": "|", "xor": "^",
          "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<="}


def expr_str(e: Expr | None) -> str:
    """``(it / 4) & 1``-style text of an expression (fully parenthesised below the top)."""
    if e is None:
        return "-"
    if isinstance(e, Const):
        return str(e.value) if e.value < 4096 else hex(e.value)
    if isinstance(e, (Var, Param)):
        return e.name
    if isinstance(e, Sreg):
        return f"%{e.name}"
    if isinstance(e, Bin):
        if e.op in _INFIX:
            return f"{_wrap(e.a)} {_INFIX[e.op]} {_wrap(e.b)}"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, Select):
        return f"{_wrap(e.cond)} ? {_wrap(e.a)} : {_wrap(e.b)}"
    return repr(e)


def _wrap(e: Expr) -> str:
    s = expr_str(e)
    infix = isinstance(e, Select) or (isinstance(e, Bin) and e.op in _INFIX)
    return f"({s})" if infix else s
