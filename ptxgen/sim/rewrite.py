"""Rewrite a Kernel IR op by op (IR ops are frozen dataclasses): plant protocol bugs, patch kernels.

``rewrite(kernel, fn)`` rebuilds the op tree bottom-up; ``fn(op)`` returns
the op unchanged, a replacement op, a tuple of ops (spliced in; ``()``
deletes the op), or None (unchanged).  Control ops are rebuilt with their
rewritten bodies before ``fn`` sees them.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import ops as O


def rewrite(kernel: O.Kernel, fn) -> O.Kernel:
    """A copy of ``kernel`` with ``fn`` applied to every op (see module docstring)."""
    return replace(kernel, body=rewrite_body(kernel.body, fn))


def rewrite_body(body: tuple, fn) -> tuple:
    """``body`` with ``fn`` applied to every op, depth first."""
    out: list = []
    for op in body:
        rebuilt = _children(op, fn)
        new = fn(rebuilt)
        if new is None:
            new = rebuilt
        out.extend(new if isinstance(new, tuple) else (new,))
    return tuple(out)


def _children(op, fn):
    if isinstance(op, O.WarpSwitch):
        return replace(op, roles=tuple(replace(r, body=rewrite_body(r.body, fn)) for r in op.roles))
    if isinstance(op, (O.For, O.Elect)):
        return replace(op, body=rewrite_body(op.body, fn))
    if isinstance(op, O.If):
        return replace(op, then=rewrite_body(op.then, fn), orelse=rewrite_body(op.orelse, fn))
    return op
