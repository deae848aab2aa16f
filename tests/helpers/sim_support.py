"""Shared helpers of the simulator and verifier tests (no tests here): kernels and IR mutations."""

from __future__ import annotations

import functools
from dataclasses import replace

from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.ir import Kernel
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan
from ptxgen.ir.rewrite import rewrite_body


def kernel_for(config: str, plan=None) -> Kernel:
    """The builder's kernel of a shipped config (built once per session: a Kernel is frozen), or of ``plan``."""
    return build_kernel(plan) if plan is not None else _shipped_kernel(config)


@functools.cache
def _shipped_kernel(config: str) -> Kernel:
    return build_kernel(make_plan(load_config(config)))


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


def before_wgmma_wait(op_type):
    """A rewrite function moving the ``op_type`` ops of a loop body (the epilogue op or the pack that reads the
    accumulator) to just before its ``wgmma.wait_group 0``, while the last k-block's wgmma still writes it."""
    def fn(op):
        if isinstance(op, O.For) and any(isinstance(x, op_type) for x in op.body):
            body = [x for x in op.body if not isinstance(x, op_type)]
            at = next(i for i, x in enumerate(body) if isinstance(x, O.WgmmaWait) and x.n == 0)
            body[at:at] = [x for x in op.body if isinstance(x, op_type)]
            return replace(op, body=tuple(body))
    return fn
