"""Fused epilogues: a small expression language over the accumulator tile(s) and extra operands.

An epilogue expression says what D is, element by element, from the fp32 accumulator(s) of the tile and
operands the kernel loads itself; it is computed in fp32 and rounded to D's type once, at the store::

    import ptxgen.epi as epi
    e = epi.gelu(epi.acc + epi.bias("bias"))           # builder form
    e = epi.parse("gelu(acc + bias[col])")              # text form (YAML: epilogue: {expr: "..."})
    str(e) == "gelu(acc + bias[col])"                   # printing gives the canonical text back

Leaves (per output element ``D[row, col]``):

* ``acc``: the GEMM's accumulator ``(A @ B^T)[row, col]``; a dual GEMM has ``acc1`` (A @ B1^T) and ``acc2``
  (A @ B2^T) instead.
* ``bias[col]`` / ``bias[row]``: a vector ``[N]`` / ``[M]`` in D's type (bf16, or fp16 under ``fp16(...)``).
* ``scale`` (a scalar fp32 kernel argument), ``scale[row]`` / ``scale[col]``: fp32 vectors ``[M]`` / ``[N]``.
* ``residual``: an ``[M, N]`` tensor in D's type (on sm_90a configs whose TMA-store epilogue stages through
  ``stmatrix``, one such operand is read through the CD staging ring: :mod:`ptxgen.builders.staged`).
* numbers (``0.5``, ``-3``): fp32 constants.

Another operand of the same kind takes a name: ``bias("b2")[row]``, ``scale("alpha")``, ``residual("skip")``;
the runtime passes each operand by its name (``ptxgen.gemm(a, b, epilogue=..., bias=t)``).  One name is one
operand: the same name with two kinds or two axes is an error.

Operations: ``x + y``, ``x - y``, ``x * y``, ``-x``; ``relu(x)``, ``gelu(x)`` (tanh form), ``gelu_erf(x)``
(erf form), ``silu(x)``, ``sigmoid(x)``, ``clamp(x, lo, hi)`` (lo, hi numbers), ``add(x, y)``, ``mul(x, y)``;
the whole expression may be wrapped in ``bf16(...)`` or ``fp16(...)``: D's type (default bf16), or in
``e4m3(...)``: D is ``float8_e4m3fn`` (sm_90a).  The numerics of each op (the PTX instructions, their approximation and error bound) are stated in
:data:`OPS` and implemented once for the check wing in :mod:`ptxgen.check.epilogue`.

Outputs beside D (sm_90a; the runtime returns ``(d, *outputs)`` in :func:`outputs` order, each allocated unless
passed by its name as a keyword tensor):

* ``e4m3(x, "d_scale")``: FP8 D with dynamic 1 x 128 block scaling, DeepSeek's activation quantization: per row and
  per 128 columns of D, ``amax`` = max |x| over the block, ``scale = amax / 448`` (1 where amax is 0) written to the
  fp32 output ``d_scale`` ``[M, ceil(N/128)]`` (the layout :func:`ptxgen.gemm_fp8` reads ``scale_a``: an FP8 GEMM's
  output feeds the next FP8 GEMM), D = e4m3(x * (1 / scale)).  Needs ``tile.block_n`` a multiple of 128.
* ``amax("name", x)``: the value of ``x``; its per-row max |x| over the row's elements inside D is max-reduced into
  the fp32 output ``name`` ``[M]`` (``red.global.max`` on the bits of |x|: nonnegative floats order as u32);
  ``amax("name", x, "tensor")``: the same over the whole D into ``name`` ``[1]``.  The delayed-scaling form is
  ``e4m3(amax("amax", acc) * scale[row])``.  The runtime's fresh output starts at 0; a passed one keeps
  ``max(old, amax)`` (an amax history).
* ``store("name", x)``: the value of ``x``, also stored as the ``[M, N]`` output ``name`` (bf16; fp16 under
  ``fp16(...)``), e.g. the pre-activation for the backward: ``gelu(store("pre", acc + bias[col]))``.

Output names share the operands' namespace (one name, one tensor).

The text form is parsed with Python's :mod:`ast` and only this subset is accepted (names, calls of the ops
above, ``+ - *``, numeric constants, subscripts ``[row]``/``[col]``); anything else is a one-line
:class:`~ptxgen.errors.ConfigError` naming what was refused.  This module imports nothing from the build or
run wings: the plan, the builders, the emitters and the check wing all read these nodes.  The public module is
:mod:`ptxgen.epi` (the same names).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from ..errors import ConfigError

#: op name -> what it computes and how the emitted PTX computes it (f32 throughout; PTX ISA "ex2", "rcp", "tanh":
#: ``ex2.approx.ftz.f32`` max relative error 2^-22, ``rcp.approx.ftz.f32`` 1 ulp, ``tanh.approx.f32`` about 2^-11)
OPS: dict[str, str] = {
    "add": "x + y: add.f32",
    "sub": "x - y: sub.f32",
    "mul": "x * y: mul.f32",
    "neg": "-x: neg.f32",
    "relu": "max(x, 0): max.f32 (a NaN x gives 0)",
    "clamp": "min(max(x, lo), hi): max.f32 then min.f32 (a NaN x gives lo)",
    "sigmoid": "1 / (1 + exp(-x)): rcp.approx.ftz(1 + ex2.approx.ftz(-x log2 e)); relative error below 2^-21",
    "silu": "x * sigmoid(x): as sigmoid, then mul.f32 (the dual GEMM's SwiGLU since its first version)",
    "gelu": ("x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): tanh.approx.f32 of an fma/mul.f32 argument; tanh's "
             "error of about 2^-11 gives |error| <= 2^-12 |x| (torch's gelu(approximate='tanh') is the same formula)"),
    "gelu_erf": ("x/2 (1 + erf(x / sqrt 2)): erfc(|x| / sqrt 2) by Abramowitz & Stegun 7.1.26 (|erf error| <= "
                 "1.5e-7) with ex2.approx.ftz and rcp.approx.ftz, 1 + erf = erfc for x < 0 and 2 - erfc otherwise; "
                 "|error| <= 1e-7 |x| + f32 rounding (max 3e-7 (|x| + 1) measured over [-9, 9])"),
    # internal ops (the builders' lowering of e4m3(x, "scale"); not callable from the language)
    "block_scale": ("amax / 448 (div.rn.f32: correctly rounded, torch's amax / 448.0), 1 where amax is 0 (as "
                    "ptxgen.runtime.fp8.quantize)"),
    "rcp": "1 / x: rcp.rn.f32 (correctly rounded)",
}
#: D as float8_e4m3fn: each value's rounding (PTX ISA "cvt": ``cvt.rn.satfinite.e4m3x2.f32``): round to nearest even,
#: finite values beyond 448 (and +-inf) saturate to +-448, NaN stays NaN; with a block scale the value rounded is
#: ``x * rcp.rn(scale)``, which differs from ``x / scale`` by at most 1 f32 ulp before the e4m3 rounding
E4M3_ROUNDING = "cvt.rn.satfinite.e4m3x2.f32: nearest even, saturating to +-448, NaN -> NaN"
INTERNAL = ("block_scale", "rcp")
#: scratch f32 registers each op's lowering takes beside its result (the emitter allocates them; the plan's
#: register budget counts them)
SCRATCH = {"sigmoid": 1, "silu": 1, "gelu": 1, "gelu_erf": 4}
UNARY = ("relu", "gelu", "gelu_erf", "silu", "sigmoid", "neg")
BINARY = ("add", "sub", "mul")
CASTS = {"bf16": "bf16", "fp16": "f16", "e4m3": "e4m3"}
TAPS = {"amax": ("row", "tensor"), "store": ("tile",)}
ACCUMULATORS = ("acc", "acc1", "acc2")
OPERAND_KINDS = ("bias", "scale", "residual")
AXES = {"bias": ("col", "row"), "scale": ("scalar", "row", "col"), "residual": ("tile",)}
MAX_NODES = 64  # an expression larger than this is refused (and the plan's register budget counts its nodes)
_NAME_OK = str.isidentifier


class Node:
    """An expression node; ``+``, ``-``, ``*`` and unary ``-`` build :class:`Call` nodes (numbers become :class:`Num`)."""

    def __add__(self, other):
        return Call("add", (self, _node(other)))

    def __radd__(self, other):
        return Call("add", (_node(other), self))

    def __sub__(self, other):
        return Call("sub", (self, _node(other)))

    def __rsub__(self, other):
        return Call("sub", (_node(other), self))

    def __mul__(self, other):
        return Call("mul", (self, _node(other)))

    def __rmul__(self, other):
        return Call("mul", (_node(other), self))

    def __neg__(self):
        return Call("neg", (self,))

    def __str__(self) -> str:
        return to_text(self)


@dataclass(frozen=True, eq=True)
class Acc(Node):
    """An accumulator: ``acc`` (GEMM), ``acc1`` / ``acc2`` (dual GEMM: A @ B1^T, A @ B2^T)."""

    name: str



@dataclass(frozen=True, eq=True)
class Operand(Node):
    """An extra operand the kernel loads: ``kind`` bias / scale / residual, its ``name`` (the runtime keyword),
    ``along``: ``col`` ([N]), ``row`` ([M]), ``scalar`` (a kernel argument) or ``tile`` ([M, N])."""

    kind: str
    name: str
    along: str


    def __getitem__(self, axis):
        """``bias("b")[row]``-style axis selection from Python: ``epi.bias("b")["row"]``."""
        return operand(self.kind, self.name, axis)

    @property
    def dtype(self) -> str:
        """``f32`` (scale), or ``out`` (bias, residual: D's type)."""
        return "f32" if self.kind == "scale" else "out"


@dataclass(frozen=True, eq=True)
class Num(Node):
    """An fp32 constant."""

    value: float


@dataclass(frozen=True, eq=True)
class Call(Node):
    """An operation of :data:`OPS` on ``args``; ``clamp`` keeps its bounds in ``params`` (lo, hi)."""

    op: str
    args: tuple
    params: tuple = ()



@dataclass(frozen=True, eq=True)
class Cast(Node):
    """D's element type for the whole expression: ``bf16``, ``f16`` (text ``fp16(...)``) or ``e4m3``; only at the
    root.  ``scale``: an ``e4m3`` cast's 1 x 128 block-scale output name, or None (no scaling)."""

    dtype: str
    arg: Node
    scale: str | None = None


@dataclass(frozen=True, eq=True)
class Tap(Node):
    """The value of ``arg``, also written to the output ``name``: ``kind`` ``amax`` (``along`` ``row``: [M],
    ``tensor``: [1], fp32 max |arg|) or ``store`` (``along`` ``tile``: [M, N] in D's 16-bit type)."""

    kind: str
    name: str
    along: str
    arg: Node



@dataclass(frozen=True, eq=True)
class Reg(Node):
    """A bound leaf (the builder's, not the language's): value ``j`` of an op reads register ``array[idx[j]]``."""

    array: str
    idx: tuple


@dataclass(frozen=True, eq=True)
class ParamLeaf(Node):
    """A bound scalar leaf: the kernel parameter ``param`` holding an f32's bits."""

    param: str


# ------------------------------------------------------------------ builders (the Python form)

acc = Acc("acc")
acc1 = Acc("acc1")
acc2 = Acc("acc2")


def _node(x) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if not math.isfinite(x):
            raise ConfigError(f"epilogue.expr: constant {x!r}: must be a finite number")
        return Num(float(x))
    raise ConfigError(f"epilogue.expr: {type(x).__name__} {x!r}: not an expression (a node of ptxgen.epi or a number)")


def operand(kind: str, name: str, along: str) -> Operand:
    """The operand ``name`` of ``kind`` along ``along`` (see the module docstring).  Raises ConfigError."""
    if kind not in AXES:
        raise ConfigError(f"epilogue.expr: operand kind {kind!r}: one of {list(AXES)}")
    if not isinstance(name, str) or not _NAME_OK(name) or name in ACCUMULATORS or name in ("row", "col"):
        raise ConfigError(f"epilogue.expr: operand name {name!r}: must be an identifier other than "
                          f"{', '.join(ACCUMULATORS)}, row, col")
    if along not in AXES[kind]:
        raise ConfigError(f"epilogue.expr: {kind} {name!r} along {along!r}: a {kind} is along one of {list(AXES[kind])}")
    return Operand(kind, name, along)


def bias(name: str = "bias", along: str = "col") -> Operand:
    """A bias vector in D's type: ``along="col"`` ``[N]`` (added per column) or ``"row"`` ``[M]``."""
    return operand("bias", name, along)


def scale(name: str = "scale", along: str = "scalar") -> Operand:
    """An fp32 scale: a scalar kernel argument (``"scalar"``), or a vector ``[M]`` (``"row"``) / ``[N]`` (``"col"``)."""
    return operand("scale", name, along)


def residual(name: str = "residual") -> Operand:
    """An ``[M, N]`` tensor in D's type (row-major; 16-byte aligned when read through the staging ring)."""
    return operand("residual", name, "tile")


def relu(x) -> Call:
    return Call("relu", (_node(x),))


def gelu(x, approximate: str = "tanh") -> Call:
    """GELU, ``approximate="tanh"`` (torch's ``gelu(x, approximate="tanh")``) or ``"none"`` (the erf form)."""
    if approximate not in ("tanh", "none"):
        raise ConfigError(f"epilogue.expr: gelu approximate={approximate!r}: 'tanh' or 'none'")
    return Call("gelu" if approximate == "tanh" else "gelu_erf", (_node(x),))


def gelu_erf(x) -> Call:
    return Call("gelu_erf", (_node(x),))


def silu(x) -> Call:
    return Call("silu", (_node(x),))


def sigmoid(x) -> Call:
    return Call("sigmoid", (_node(x),))


def add(x, y) -> Call:
    return Call("add", (_node(x), _node(y)))


def mul(x, y) -> Call:
    return Call("mul", (_node(x), _node(y)))


def clamp(x, lo: float, hi: float) -> Call:
    """``min(max(x, lo), hi)``; lo <= hi, finite numbers."""
    lo_, hi_ = _node(lo), _node(hi)
    if not isinstance(lo_, Num) or not isinstance(hi_, Num) or lo_.value > hi_.value:
        raise ConfigError(f"epilogue.expr: clamp bounds ({lo!r}, {hi!r}): numbers with lo <= hi")
    return Call("clamp", (_node(x),), (lo_.value, hi_.value))


def cast(x, dtype: str, scale: str | None = None) -> Cast:
    """D's type for the expression: ``"bf16"``, ``"fp16"`` or ``"e4m3"``; ``scale``: an e4m3 cast's block-scale output
    name (1 x 128 dynamic scaling, see the module docstring)."""
    if dtype not in CASTS:
        raise ConfigError(f"epilogue.expr: output type {dtype!r}: one of {list(CASTS)}")
    if scale is not None and (dtype != "e4m3" or not _name_ok(scale)):
        raise ConfigError(f"epilogue.expr: {dtype}(x, {scale!r}): only e4m3 takes a block-scale output, named by an "
                          "identifier")
    return Cast(CASTS[dtype], _node(x), scale)


def e4m3(x, scale: str | None = None) -> Cast:
    """D as float8_e4m3fn (``cvt.rn.satfinite``); ``scale``: the name of the 1 x 128 block-scale output."""
    return cast(x, "e4m3", scale)


def _name_ok(name) -> bool:
    return isinstance(name, str) and _NAME_OK(name) and name not in ACCUMULATORS and name not in ("row", "col")


def amax(name: str, x, along: str = "row") -> Tap:
    """``x``, with max |x| per row (``along="row"``: output ``[M]``) or over D (``"tensor"``: ``[1]``) into ``name``."""
    return _tap("amax", name, along, x)


def store(name: str, x) -> Tap:
    """``x``, also stored as the ``[M, N]`` output ``name`` (D's 16-bit type; bf16 when D is e4m3)."""
    return _tap("store", name, "tile", x)


def _tap(kind: str, name: str, along: str, x) -> Tap:
    if not _name_ok(name):
        raise ConfigError(f"epilogue.expr: {kind} output name {name!r}: must be an identifier other than "
                          f"{', '.join(ACCUMULATORS)}, row, col")
    if along not in TAPS[kind]:
        raise ConfigError(f"epilogue.expr: {kind}({name!r}, ..., {along!r}): along one of {list(TAPS[kind])}")
    return Tap(kind, name, along, _node(x))


# ------------------------------------------------------------------ the text form

_CALLS = {"relu": relu, "gelu": gelu, "gelu_erf": gelu_erf, "silu": silu, "sigmoid": sigmoid, "add": add, "mul": mul,
          "clamp": clamp}
_MAKE = {"bias": bias, "scale": scale, "residual": residual}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}
MAX_TEXT = 2000


def parse(text: str) -> Node:
    """The expression of ``text`` (see the module docstring).  Raises ConfigError naming what was refused."""
    if isinstance(text, Node):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"epilogue.expr={text!r}: expected a non-empty expression string")
    if len(text) > MAX_TEXT:
        raise ConfigError(f"epilogue.expr: {len(text)} characters: at most {MAX_TEXT}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"epilogue.expr={text!r}: syntax error at column {exc.offset}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ConfigError(f"epilogue.expr={text!r}: nested too deeply") from None
    try:
        node = _root(tree.body, text)
    except RecursionError:
        raise ConfigError(f"epilogue.expr={text!r}: nested too deeply") from None
    check(node)
    return node


def _root(n: ast.AST, text: str) -> Node:
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in CASTS:
        f = n.func.id
        if f == "e4m3" and len(n.args) == 2 and not n.keywords:
            return cast(_conv(n.args[0], text), f, _quoted(n.args[1], text, 'e4m3(x, "scale")'))
        if len(n.args) != 1 or n.keywords:
            raise ConfigError(f"epilogue.expr={text!r}: {f}(...) takes one expression"
                              + (' (and e4m3 a block-scale output name: e4m3(x, "scale"))' if f == "e4m3" else ""))
        return cast(_conv(n.args[0], text), f)
    return _conv(n, text)


def _quoted(n: ast.AST, text: str, form: str) -> str:
    if not isinstance(n, ast.Constant) or not isinstance(n.value, str):
        raise _refuse(text, f"{form}: the name is a string in quotes, not {ast.unparse(n)!r}")
    return n.value


def _refuse(text: str, what: str) -> ConfigError:
    return ConfigError(f"epilogue.expr={text!r}: {what}")


def _operand_name(n: ast.AST, text: str) -> tuple[str, str]:
    """(kind, name) of ``bias`` / ``bias("b2")``."""
    if isinstance(n, ast.Name) and n.id in _MAKE:
        return n.id, n.id
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _MAKE:
        if len(n.args) != 1 or n.keywords or not isinstance(n.args[0], ast.Constant) or not isinstance(n.args[0].value, str):
            raise _refuse(text, f"{n.func.id}(...) takes one operand name in quotes, e.g. {n.func.id}(\"x\")")
        return n.func.id, n.args[0].value
    raise _refuse(text, f"only bias, scale and residual operands take [row] / [col], not {ast.unparse(n)!r}")


def _conv(n: ast.AST, text: str) -> Node:
    if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
        return Call(_BINOPS[type(n.op)], (_conv(n.left, text), _conv(n.right, text)))
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        x = _conv(n.operand, text)
        if isinstance(n.op, ast.UAdd):
            return x
        return Num(-x.value) if isinstance(x, Num) else Call("neg", (x,))
    if isinstance(n, ast.Constant):
        if isinstance(n.value, bool) or not isinstance(n.value, (int, float)):
            raise _refuse(text, f"constant {n.value!r}: only numbers")
        if isinstance(n.value, int) and abs(n.value) > 1 << 64:
            raise _refuse(text, "integer constant too large")
        return _node(n.value)
    if isinstance(n, ast.Name):
        if n.id in ACCUMULATORS:
            return Acc(n.id)
        if n.id in _MAKE:
            return _MAKE[n.id](n.id)
        if n.id in ("row", "col"):
            raise _refuse(text, f"{n.id} indexes an operand (bias[{n.id}]); it is not a value")
        known = [*ACCUMULATORS, *OPERAND_KINDS]
        raise _refuse(text, f"unknown name {n.id!r} (names: {', '.join(known)})")
    if isinstance(n, ast.Subscript):
        kind, name = _operand_name(n.value, text)
        axis = n.slice
        if not isinstance(axis, ast.Name) or axis.id not in ("row", "col"):
            raise _refuse(text, f"{kind}[...] takes row or col, not {ast.unparse(axis)!r}")
        return operand(kind, name, axis.id)
    if isinstance(n, ast.Call):
        if not isinstance(n.func, ast.Name):
            raise _refuse(text, f"call of {ast.unparse(n.func)!r}: only the epilogue ops are callable")
        f = n.func.id
        if f in _MAKE:
            kind, name = _operand_name(n, text)
            return _MAKE[kind](name)
        if f in CASTS:
            raise _refuse(text, f"{f}(...) sets D's type and may only wrap the whole expression")
        if f in TAPS:
            form = f'{f}("name", x' + (', "tensor")' if f == "amax" else ")")
            if n.keywords or not 2 <= len(n.args) <= (3 if f == "amax" else 2):
                raise _refuse(text, f"{f} takes {form}")
            extra = [_quoted(a, text, form) for a in n.args[2:]]
            return _tap(f, _quoted(n.args[0], text, form), *(extra or [TAPS[f][0]]), _conv(n.args[1], text))
        if f not in _CALLS:
            raise _refuse(text, f"unknown op {f!r} (ops: {', '.join(sorted([*_CALLS, *TAPS]))}, bf16, fp16, e4m3)")
        if n.keywords:
            raise _refuse(text, f"{f}(...) takes no keyword arguments")
        want = {"clamp": 3, "add": 2, "mul": 2}.get(f, 1)
        if len(n.args) != want:
            raise _refuse(text, f"{f} takes {want} argument(s), got {len(n.args)}")
        args = [_conv(a, text) for a in n.args]
        if f == "clamp":
            if not all(isinstance(a, Num) for a in args[1:]):
                raise _refuse(text, "clamp(x, lo, hi): lo and hi must be numbers")
            return clamp(args[0], args[1].value, args[2].value)
        return _CALLS[f](*args)
    raise _refuse(text, f"{type(n).__name__} {ast.unparse(n)!r} is not part of the epilogue language")


_PREC = {"add": 1, "sub": 1, "mul": 2, "neg": 3}
_SYM = {"add": "+", "sub": "-", "mul": "*"}


def span(idx: tuple[int, ...]) -> str:
    """``lo:hi`` for consecutive indices, else the indices comma-separated (for ``//`` comments)."""
    if len(idx) > 1 and list(idx) == list(range(idx[0], idx[0] + len(idx))):
        return f"{idx[0]}:{idx[0] + len(idx)}"
    return ",".join(map(str, idx))


def _num_text(v: float) -> str:
    return repr(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def to_text(node: Node, prec: int = 0) -> str:
    """The canonical text of ``node``: :func:`parse` of it gives ``node`` back."""
    if isinstance(node, Acc):
        return node.name
    if isinstance(node, Operand):
        head = node.kind if node.name == node.kind else f'{node.kind}("{node.name}")'
        return head if node.along in ("scalar", "tile") else f"{head}[{node.along}]"
    if isinstance(node, Num):
        s = _num_text(node.value)
        return f"({s})" if node.value < 0 and prec else s
    if isinstance(node, Cast):
        name = {"f16": "fp16", "bf16": "bf16", "e4m3": "e4m3"}[node.dtype]
        return f"{name}({to_text(node.arg)}" + (f', "{node.scale}")' if node.scale else ")")
    if isinstance(node, Tap):
        along = f', "{node.along}"' if node.along != TAPS[node.kind][0] else ""
        return f'{node.kind}("{node.name}", {to_text(node.arg)}{along})'

    if isinstance(node, Reg):
        return f"{node.array}[{span(node.idx)}]"
    if isinstance(node, ParamLeaf):
        return f"%{node.param}"
    if isinstance(node, Call):
        if node.op in _SYM:
            p = _PREC[node.op]
            # left-associative: the right operand of - (and of + / * for exact round trips) needs a tighter binding
            s = f"{to_text(node.args[0], p)} {_SYM[node.op]} {to_text(node.args[1], p + 1)}"
            return f"({s})" if p < prec else s
        if node.op == "neg":
            s = f"-{to_text(node.args[0], 3)}"
            return f"({s})" if prec >= 3 else s
        if node.op == "clamp":
            return f"clamp({to_text(node.args[0])}, {_num_text(node.params[0])}, {_num_text(node.params[1])})"
        return f"{node.op}({', '.join(to_text(a) for a in node.args)})"
    raise TypeError(f"not an epilogue node: {node!r}")


# ------------------------------------------------------------------ analysis


def walk(node: Node):
    """Every node of the expression, parents before children."""
    yield node
    if isinstance(node, Call):
        for a in node.args:
            yield from walk(a)
    elif isinstance(node, (Cast, Tap)):
        yield from walk(node.arg)


def body(node: Node) -> Node:
    """The expression without its root cast."""
    return node.arg if isinstance(node, Cast) else node


def out_dtype(node: Node | None, default: str = "bf16") -> str:
    """D's element type: the root cast's (``bf16``/``f16``) or ``default``."""
    return node.dtype if isinstance(node, Cast) else default


def operands(node: Node) -> tuple[Operand, ...]:
    """The operands in first-appearance order, one per name.  Raises ConfigError: one name used as two operands."""
    seen: dict[str, Operand] = {}
    for n in walk(node):
        if isinstance(n, Operand):
            old = seen.setdefault(n.name, n)
            if old != n:
                raise ConfigError(f"epilogue.expr: operand name {n.name!r} names both {to_text(old)} and {to_text(n)}; "
                                  "give one of them another name")
    return tuple(seen.values())


def outputs(node: Node) -> tuple[tuple[str, str, str], ...]:
    """The outputs beside D, in the order the runtime returns them: ``(name, kind, along)`` with kind
    ``block_scale`` (an e4m3 cast's, first), ``amax`` or ``store`` (first appearance).  Raises ConfigError: a name
    used twice (by two outputs, or by an output and an operand)."""
    out: list[tuple[str, str, str]] = []
    if isinstance(node, Cast) and node.scale:
        out.append((node.scale, "block_scale", "block"))
    out += [(x.name, x.kind, x.along) for x in walk(node) if isinstance(x, Tap)]
    taken = {o.name for o in operands(node)}
    for name, kind, _ in out:
        if name in taken:
            raise ConfigError(f"epilogue.expr={to_text(node)!r}: name {name!r} is used twice (outputs and operands "
                              "each need their own name)")
        taken.add(name)
    return tuple(out)


def output_shape(along: str, m: int, n: int) -> tuple[int, ...]:
    """The shape of an output along ``along`` for an ``[m, n]`` D: ``block`` ``(m, ceil(n / 128))``, ``row`` ``(m,)``,
    ``tensor`` ``(1,)``, ``tile`` ``(m, n)``."""
    return {"block": (m, -(-n // 128)), "row": (m,), "tensor": (1,), "tile": (m, n)}[along]


def taps(node: Node) -> tuple[Tap, ...]:
    """The :class:`Tap` nodes, innermost first (a tap's value is computed before the taps around it)."""
    return tuple(reversed([x for x in walk(node) if isinstance(x, Tap)]))


def accumulators(node: Node) -> tuple[str, ...]:
    """The accumulator names the expression reads, sorted."""
    return tuple(sorted({n.name for n in walk(node) if isinstance(n, Acc)}))


def size(node: Node) -> int:
    """Number of nodes."""
    return sum(1 for _ in walk(node))


def check(node: Node) -> Node:
    """Structural rules of a built expression: size, operand names, a cast only at the root.  Raises ConfigError."""
    n = size(node)
    if n > MAX_NODES:
        raise ConfigError(f"epilogue.expr: {n} nodes: at most {MAX_NODES}")
    for x in walk(body(node)):
        if isinstance(x, Cast):
            raise ConfigError(f"epilogue.expr={to_text(node)!r}: bf16(...) / fp16(...) may only wrap the whole expression")
        if isinstance(x, (Reg, ParamLeaf)):
            raise ConfigError(f"epilogue.expr: {x!r} is a bound leaf, not part of the language")
        if isinstance(x, Call) and x.op in INTERNAL:
            raise ConfigError(f"epilogue.expr: {x.op} is internal to the e4m3 lowering, not part of the language")
    outputs(node)
    return node


def for_kernel(node: Node | str, kernel: str) -> Node:
    """``node`` checked against a kernel family: a GEMM reads ``acc``, a dual GEMM ``acc1`` and/or ``acc2``.

    Raises ConfigError naming the accumulator that does not exist.
    """
    node = check(parse(node))
    allowed = ("acc1", "acc2") if kernel == "dual_gemm" else ("acc",)
    for name in accumulators(node):
        if name not in allowed:
            hint = "a dual GEMM's accumulators are acc1 (A @ B1^T) and acc2 (A @ B2^T)" if kernel == "dual_gemm" else \
                "a GEMM has one accumulator, acc"
            raise ConfigError(f"epilogue.expr={to_text(node)!r}: {name} does not exist for kernel={kernel}: {hint}")
    return node


#: the epilogue of each kernel family when the config names none
DEFAULTS = {"gemm": "acc", "dual_gemm": "silu(acc1) * acc2"}


def default(kernel: str) -> Node:
    return parse(DEFAULTS[kernel])


def bind(node: Node, leaf) -> Node:
    """``node`` with every leaf replaced by ``leaf(x)`` (a :class:`Reg` / :class:`ParamLeaf` / the leaf itself); a
    :class:`Tap` is a leaf too (the builders bind it to the registers its value was computed into)."""
    if isinstance(node, Call):
        return Call(node.op, tuple(bind(a, leaf) for a in node.args), node.params)
    if isinstance(node, Cast):
        return bind(node.arg, leaf)
    return leaf(node)


def untap(node: Node) -> Node:
    """``node`` with every :class:`Tap` replaced by its argument (the value D is computed from)."""
    if isinstance(node, Call):
        return Call(node.op, tuple(untap(a) for a in node.args), node.params)
    if isinstance(node, Cast):
        return Cast(node.dtype, untap(node.arg), node.scale)
    return untap(node.arg) if isinstance(node, Tap) else node


__all__ = ["acc", "acc1", "acc2", "bias", "scale", "residual", "relu", "gelu", "gelu_erf", "silu", "sigmoid", "add",
           "mul", "clamp", "cast", "e4m3", "amax", "store", "parse", "to_text", "operands", "outputs", "accumulators",
           "OPS", "Node", "Acc", "Operand", "Num", "Call", "Cast", "Tap"]
