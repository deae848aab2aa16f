"""Legalize: the one IR -> IR step between the builders and the emitters (``emitters.emit`` runs it).

What it does, so that the emitters stay tables of op -> PTX lines:

* **Target legality.** Every op must belong to an instruction family the kernel's target has: the
  ``tcgen05`` family (TMEM alloc/load/copy, UMMA, commits, tcgen05 fences) exists only on sm_100a; ``wgmma``
  and ``setmaxnreg`` are lowered here only for sm_90a (PTX ISA "Target ISA notes" of each instruction).
  A kernel that mixes them is a generator bug and raises :class:`~ptxgen.errors.LegalizeError` naming the op.
* **Control flow decided at build time.** An ``If`` whose condition folds to a constant (``rank == 0`` in a
  kernel without a cluster, ``n % 8 == 0`` never: that is a runtime value) is replaced by the branch it takes,
  so no emitter ever sees a constant branch.

The simulator runs the builders' IR unlegalized: the rewrites here do not change what a kernel does.
"""

from __future__ import annotations

from ..errors import LegalizeError
from . import expr as ex
from . import ops as O
from .rewrite import rewrite_body

TCGEN05_OPS = (O.TmemAlloc, O.TmemRelinquish, O.TmemBase, O.TmemDealloc, O.TcgenFence, O.Umma, O.UmmaCommit,
               O.TmemLoad, O.TmemWaitLd, O.TmemCopy, O.UmmaBlockScaled)
WGMMA_OPS = (O.SetMaxNReg, O.WgmmaFence, O.Wgmma, O.WgmmaCommit, O.WgmmaWait)
ILLEGAL = {"sm_100a": WGMMA_OPS, "sm_90a": TCGEN05_OPS}


def legalize(kernel):
    """``kernel`` with constant ``If`` s folded away, after checking every op is legal on its target.

    Raises:
        LegalizeError: an op of another target's family (names the op and the target).
    """
    illegal = ILLEGAL.get(kernel.arch, ())
    for op in O.walk(kernel.body):
        if isinstance(op, illegal):
            raise LegalizeError(f"{kernel.name}: {op.describe()} is not an {kernel.arch} instruction "
                                f"({type(op).__name__} belongs to the {'wgmma' if kernel.arch == 'sm_100a' else 'tcgen05'} family)")
    return kernel.with_body(rewrite_body(kernel.body, _fold))


def _fold(op):
    """An ``If`` whose condition folds to a constant: the branch it takes (spliced in its place)."""
    if isinstance(op, O.If):
        cond = ex.fold(op.cond)
        if isinstance(cond, ex.Const):
            return op.then if cond.value else op.orelse
    return None
