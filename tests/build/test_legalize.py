"""The legalize step (ptxgen.ir.legalize): target legality and build-time control flow, before emission."""

from __future__ import annotations

import pytest

from emitters import emit
from ptxgen.build import build
from ptxgen.errors import LegalizeError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Const, fold
from ptxgen.ir.legalize import legalize
from ptxgen.ir.rewrite import rewrite


def _has_constant_if(body) -> bool:
    return any(isinstance(op, O.If) and isinstance(fold(op.cond), Const) for op in O.walk(body))


@pytest.mark.parametrize("name", ["level3", "h100_128x256", "dual_sm100_256x128"])
def test_shipped_kernels_keep_every_mma_and_no_constant_branch(name):
    kernel = build(name).kernel
    legal = legalize(kernel)
    assert not _has_constant_if(legal.body)
    count = lambda body: sum(isinstance(op, (O.Umma, O.Wgmma)) for op in O.walk(body))  # noqa: E731
    assert count(legal.body) == count(kernel.body) > 0


def test_taken_branch_is_kept_and_dead_one_dropped():
    kernel = build("h100_128x128").kernel
    planted = kernel.with_body((O.If(Const(1), (O.CtaSync(),), (O.ClusterSync(),)), *kernel.body))
    body = legalize(planted).body
    assert isinstance(body[0], O.CtaSync) and not isinstance(body[1], O.ClusterSync)


@pytest.mark.parametrize("name, foreign", [("h100_128x128", O.TcgenFence("after")), ("level9", O.WgmmaFence())])
def test_foreign_family_is_refused_before_emission(name, foreign):
    kernel = build(name).kernel
    planted = rewrite(kernel, lambda op: (op, foreign) if isinstance(op, O.CtaSync | O.ClusterSync) else None)
    with pytest.raises(LegalizeError, match=r"is not an sm_(90|100)a instruction"):
        emit(planted)
