"""Readable text of expressions and whole kernels (for ``//`` comments, ``ptxgen inspect`` and errors)."""

from __future__ import annotations

from .expr import Bin, Const, Expr, Param, Select, Sreg, Var

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


def kernel_str(kernel) -> str:
    """Indented listing of a kernel's ops (one per line)."""
    from .ops import Elect, For, If, WarpSwitch

    lines: list[str] = []

    def rec(body, depth):
        for op in body:
            lines.append("  " * depth + op.describe())
            if isinstance(op, WarpSwitch):
                for r in op.roles:
                    lines.append("  " * (depth + 1) + f"role {r.name} (warps {r.warp_lo}-{r.warp_hi - 1}):")
                    rec(r.body, depth + 2)
            elif isinstance(op, (For, Elect)):
                rec(op.body, depth + 1)
            elif isinstance(op, If):
                rec(op.then, depth + 1)
                if op.orelse:
                    lines.append("  " * depth + "Else")
                    rec(op.orelse, depth + 1)

    rec(kernel.body, 0)
    return "\n".join(lines)
