"""Rewrite a Kernel IR op by op (IR ops are frozen dataclasses): the one tree recursion of IR -> IR passes.

``rewrite(kernel, fn)`` rebuilds the op tree bottom-up; ``fn(op)`` returns the op unchanged, a
replacement op, a tuple of ops (spliced in; ``()`` deletes the op), or None (unchanged).  Control ops
(``WarpSwitch`` roles, ``For``, ``Elect``, both branches of ``If``) are rebuilt with their rewritten
bodies before ``fn`` sees them, so ``fn`` meets the ops in program order, innermost first.

With ``scoped=True``, ``fn(op, bound)`` also gets the variables bound where ``op`` stands: the loop
variables of its enclosing ``For`` ops and the ``Let`` variables before it on its path (a ``Let`` inside
a control op binds only inside it).

Users: :func:`ptxgen.ir.legalize.legalize` (constant ``If`` folding), :func:`ptxgen.ir.watchdog.instrument`
(wait sites), and the planted-bug and patch rewrites of the tests and benchmarks.
"""

from __future__ import annotations

from dataclasses import replace

from . import ops as O


def rewrite(kernel: O.Kernel, fn, *, scoped: bool = False) -> O.Kernel:
    """A copy of ``kernel`` with ``fn`` applied to every op (see module docstring)."""
    return replace(kernel, body=rewrite_body(kernel.body, fn, scoped=scoped))


def rewrite_body(body: tuple, fn, *, scoped: bool = False, bound: frozenset = frozenset()) -> tuple:
    """``body`` with ``fn`` applied to every op, depth first (``bound``: the variables bound around ``body``)."""
    out: list = []
    for op in body:
        rebuilt = _children(op, fn, scoped, bound | {op.var} if isinstance(op, O.For) else bound)
        new = fn(rebuilt, bound) if scoped else fn(rebuilt)
        if new is None:
            new = rebuilt
        out.extend(new if isinstance(new, tuple) else (new,))
        if isinstance(op, O.Let):
            bound = bound | {op.var}
    return tuple(out)


def _children(op, fn, scoped: bool, bound: frozenset):
    def sub(body: tuple) -> tuple:
        return rewrite_body(body, fn, scoped=scoped, bound=bound)

    if isinstance(op, O.WarpSwitch):
        return replace(op, roles=tuple(replace(r, body=sub(r.body)) for r in op.roles))
    if isinstance(op, (O.For, O.Elect)):
        return replace(op, body=sub(op.body))
    if isinstance(op, O.If):
        return replace(op, then=sub(op.then), orelse=sub(op.orelse))
    return op
