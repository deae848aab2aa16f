"""Shared helpers of the simulator and verifier tests (no tests here).

Builder workaround.  ``ptxgen/builders/gemm.py`` (sm100 epilogue) stages CD
chunk ``c >= 1`` of a tile with the 16-byte chunk index of the whole tile row
(``col // 8`` with ``col = c * store_block_n + ...``) instead of the index
within the store block, so with ``store_block_n < block_n`` (level8, level9)
the swizzled stores land in the next staging row and past the buffer (into
A stage 0).  Both tools catch it (tests/test_sim_planted.py
``test_builder_cd_staging_bug``).  Until the builder is fixed,
:func:`kernel_for` patches the chunk index back into range; once fixed, the
patch finds nothing to change.
"""

from __future__ import annotations

from dataclasses import replace

from ptxgen.builders.gemm import build_gemm
from ptxgen.config import load_config
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Bin, Const
from ptxgen.plan import make_plan
from ptxgen.sim.rewrite import rewrite, rewrite_body


def _fix_chunk(e, chunks: int):
    if isinstance(e, Bin):
        if e.op == "xor" and isinstance(e.a, Const) and e.a.value >= chunks:
            return Bin("xor", Const(e.a.value % chunks), e.b)
        return Bin(e.op, _fix_chunk(e.a, chunks), _fix_chunk(e.b, chunks))
    return e


def fix_cd_chunks(kernel: O.Kernel) -> O.Kernel:
    """The kernel with the sm100 128B-swizzled CD staging chunk index reduced into its 128-byte row."""
    p = kernel.plan
    if not p.is_sm100 or p.cfg.epilogue.swizzle != "128":
        return kernel
    chunks = p.cd_row_bytes // 16
    return rewrite(kernel, lambda op: replace(op, addr=_fix_chunk(op.addr, chunks))
                   if isinstance(op, O.StSharedBf16) else op)


def has_cd_chunk_bug(kernel: O.Kernel) -> bool:
    return fix_cd_chunks(kernel) != kernel


def kernel_for(config: str, plan=None) -> O.Kernel:
    """The builder's kernel of a shipped config (or of ``plan``), with the CD staging workaround."""
    return fix_cd_chunks(build_gemm(plan or make_plan(load_config(config))))


def in_role(role: str, fn):
    """A rewrite function applying ``fn`` only inside the WarpSwitch roles named ``role``."""
    def on_switch(op):
        if isinstance(op, O.WarpSwitch):
            return replace(op, roles=tuple(replace(r, body=rewrite_body(r.body, fn)) if r.name == role else r
                                           for r in op.roles))
        return op
    return on_switch


def where(pred, change):
    """A rewrite function applying ``change(op)`` to the ops where ``pred(op)`` holds."""
    return lambda op: change(op) if pred(op) else op


def is_wait(bar: str, role_word: str):
    return lambda op: isinstance(op, O.MbarrierWait) and op.bar.name == bar and op.role == role_word


def drop(op):
    """As a ``change``: delete the op."""
    return ()
