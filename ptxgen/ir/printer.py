"""Readable text of expressions and whole kernels (for ``//`` comments, ``ptxgen inspect`` and errors)."""

from __future__ import annotations

from .expr import expr_str  # noqa: F401 - re-exported
from .ops import Elect, For, If, WarpSwitch


def kernel_str(kernel) -> str:
    """Indented listing of a kernel's ops (one per line)."""
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
