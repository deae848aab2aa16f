"""Fused epilogues on the FP8 block-scaled GEMM in the check wing: the simulator's D and outputs equal the recipe's
fp32 accumulator (:func:`ptxgen.check.fp8.fp8_gemm_reference`) followed by the expression's numerics
(:mod:`ptxgen.check.epilogue`), the verifier passes, and a planted bug (the epilogue reading the k-block's partial
instead of the promoted accumulator) is a wrong result."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ptxgen import epi
from ptxgen.builders.roles import PARTIAL
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.sim.run import simulate_fp8
from ptxgen.check.verify import verify
from ptxgen.config import load_config
from ptxgen.errors import SimError
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

SQUARE, OVERLAP, PAIR, WIDE = "fp8_h100_128x128", "fp8_h100_64x128", "fp8_h100_128x128_c2", "fp8_h100_128x256"
EXPRS = ["gelu(acc + bias[col])", "acc * scale[row] + residual", 'e4m3(acc, "d_scale")',
         'gelu_erf(store("pre", acc * scale + bias("rb")[row])) + amax("am", acc)']
SHAPE = (136, 264, 400)  # M and N tails on every config, a partial last 128-K block


def _kernel(config: str, text: str, fn=None):
    kernel = build_kernel(make_plan(load_config(config).replace(**{"epilogue.expr": text})))
    return rewrite(kernel, fn) if fn else kernel


@pytest.mark.parametrize("config", [SQUARE, OVERLAP, PAIR, WIDE])
@pytest.mark.parametrize("text", EXPRS)
def test_simulated_fp8_epilogue_is_the_recipe_then_the_expression(config, text):
    r = simulate_fp8(_kernel(config, text), *SHAPE, seed=3, num_sms=2, expr=epi.parse(text))
    assert r.rel_fro < 1e-2


@pytest.mark.parametrize("config", [SQUARE, OVERLAP])
def test_fp8_epilogue_kernels_verify(config):
    for text in EXPRS:
        verify(_kernel(config, text))


def _read_the_partial(op):
    """Every epilogue expression reading the main accumulator ``acc0`` reads the k-block's partial instead (the
    last block's unscaled sum: right shape, wrong numbers)."""
    if isinstance(op, O.EpilogueExpr) and op.dst == "acc0":
        leaf = lambda x: replace(x, array=PARTIAL) if isinstance(x, epi.Reg) and x.array == "acc0" else x  # noqa: E731
        return replace(op, expr=epi.bind(op.expr, leaf))


@pytest.mark.parametrize("text", EXPRS[:3])
def test_planted_epilogue_reading_the_block_partial_is_a_wrong_result(text):
    kernel = _kernel(SQUARE, text, _read_the_partial)
    assert kernel != _kernel(SQUARE, text)  # the rewrite reached the epilogue
    with pytest.raises(SimError, match="wrong result"):
        simulate_fp8(kernel, *SHAPE, seed=3, num_sms=2, expr=epi.parse(text))

