"""Swap-AB (``schedule.swap_ab``) on the CPU: the config rules, the plan's launch spec, the transposed store in the
IR, the simulator on odd shapes (M = 1, 5, 17; N off the tile) with and without a fused expression (its operands
read by the kernel's axes), and planted bugs (a store left untransposed, a transposed store in a kernel without
swap-AB, an operand read by the caller's axis) failing the simulator and the verifier.  The PTX-vs-IR differential
of the shipped swap-AB configs runs with every shipped config (tests/check/ptx/test_planted_emitter.py's unpatched
sweep, tests/check/ptx/test_ptx_vs_ir.py's drawn cases); the emitter's
planted bugs (untransposed, bound on the wrong dimension) are in tests/check/ptx/test_planted_emitter.py."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from ptxgen.builders.kernel import build_kernel
from ptxgen.check.numerics import POISON
from ptxgen.check.sim.run import simulate
from ptxgen.check.verify import verify
from ptxgen.config import load_config, shipped_configs
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import epilogue as epi
from ptxgen.ir import ops
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

SWAP = [c for c in shipped_configs() if load_config(c).schedule.swap_ab]
#: (M, N, K): M = 1, 5 and 17 (past a 16-column tile), N not a multiple of the 64-row tile, K not of the k-block
ODD = ((1, 200, 136), (5, 77, 64), (17, 130, 200))


@functools.cache
def kernel_of(name: str):
    return build_kernel(make_plan(load_config(name)))


def untransposed(kernel):
    """The planted bug: every D store of ``kernel`` written untransposed."""
    return rewrite(kernel, lambda op: dataclasses.replace(op, transposed=False) if isinstance(op, ops.StGlobal16) else None)


def test_shipped_swap_configs():
    assert len(SWAP) >= 2


@pytest.mark.parametrize("change, rule", [
    ({"arch": "sm_100a", "tile.block_m": 128, "tile.block_n": 32}, "sm_90a only"),
    ({"epilogue.expr": "e4m3(acc * scale[row])"}, "16-bit D"),
    ({"epilogue.expr": 'amax("am", acc) + residual'}, "outputs beside"),
    ({"epilogue.store": "tma", "epilogue.swizzle": "128", "epilogue.store_block_n": 64, "tile.block_n": 64}, "direct"),
    ({"kernel": "dual_gemm"}, "kernel=gemm"),
])
def test_config_rules_refuse_what_swap_ab_cannot_store(change, rule):
    with pytest.raises(ConfigError, match=rule) as err:
        load_config("h100_64x16_swap").replace(**change)
    assert "schedule.swap_ab" in str(err.value)


#: elementwise expressions over every operand axis (the caller's frame): each reads its operands transposed
EXPRS = ("gelu(acc + bias[col]) * scale", "acc + residual", "acc * scale[row] - bias[row]",
         "fp16(silu(acc + residual) * scale[col])")


@functools.cache
def fused_kernel(name: str, expr: str):
    return build_kernel(make_plan(load_config(name).replace(**{"epilogue.expr": expr})))


@pytest.mark.parametrize("name", SWAP)
@pytest.mark.parametrize("expr", EXPRS)
def test_fused_expression_reads_its_operands_transposed(name, expr):
    """The expression in the caller's frame on the kernel's transposed fragments: the simulator's D equals the
    reference of ``expr`` on the caller's operands at M = 1, 5 and 17 (past a 16-column tile: skipped there), N off
    the 64-row tile; the verifier passes; the plan's operand axes are the kernel's."""
    kernel = fused_kernel(name, expr)
    verify(kernel)
    plan = make_plan(load_config(name).replace(**{"epilogue.expr": expr}))
    axes = {o.name: o.along for o in plan.epilogue.operands}
    assert {"col": "row", "row": "col", "tile": "tile_t", "scalar": "scalar"}[epi.operands(epi.parse(expr))[0].along] \
        == axes[epi.operands(epi.parse(expr))[0].name]
    for m, n, k in ODD:
        if m > load_config(name).tile.block_n:
            continue
        res = simulate(kernel, m, n, k, seed=m + n, num_sms=3, expr=epi.parse(expr))
        assert res.rel_fro < 1e-2 and not (res.d_bits == POISON).any()


@pytest.mark.parametrize("layout, expr", [("tile", "acc + residual"), ("col", "acc + bias[col]"),
                                          ("row", "acc * scale[row]")])
def test_planted_untransposed_operand_fails_simulator(layout, expr):
    """The planted bug: the operand read by the caller's axis (a residual row-major, a column bias per accumulator
    column, a row scale per accumulator row), as if the swap did not trade them."""
    kernel = fused_kernel("h100_64x32_swap", expr)
    simulate(kernel, 17, 130, 200, num_sms=2, expr=epi.parse(expr))
    bad = rewrite(kernel, lambda op: dataclasses.replace(op, layout=layout, idx=(0, 1) if layout != "row" else (0,))
                  if isinstance(op, ops.LdEpilogue) else None)
    with pytest.raises(SimError, match="wrong result|out of bounds"):
        simulate(bad, 17, 130, 200, num_sms=2, expr=epi.parse(expr))


@pytest.mark.parametrize("name", SWAP)
def test_launch_spec_and_ir(name):
    plan = make_plan(load_config(name))
    spec = plan.launch_spec()
    assert spec.extra == {"swap_ab": True} and "d" not in spec.tensor_maps
    assert [p for p, _ in spec.params[:3]] == ["tmap_a", "tmap_b", "tmap_d"]  # tmap_d stays (passed as zeros)
    stores = [op for op in ops.walk(kernel_of(name).body) if isinstance(op, ops.StGlobal16)]
    assert stores and all(op.transposed for op in stores)
    assert "D^T[" in stores[0].describe()
    plain = make_plan(load_config("h100_64x64")).launch_spec()
    assert "d" in plain.tensor_maps and "swap_ab" not in plain.extra


@pytest.mark.parametrize("name", SWAP)
@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
def test_simulator_computes_d_on_odd_shapes(name, shape):
    res = simulate(kernel_of(name), *shape, seed=sum(shape), num_sms=3)
    assert res.d.shape == shape[:2] and res.rel_fro < 1e-2
    assert not (res.d_bits == POISON).any()  # every element of D stored


@pytest.mark.parametrize("policy", ["latest", "pct"])
def test_simulator_other_interleavings(policy):
    simulate(kernel_of(SWAP[0]), 17, 130, 200, seed=2, num_sms=2, policy=policy)


def test_planted_untransposed_store_fails_simulator_and_verifier():
    bad = untransposed(kernel_of("h100_64x16_swap"))
    with pytest.raises(SimError, match="wrong result"):
        simulate(bad, 5, 77, 64, num_sms=2)
    with pytest.raises(VerifyError, match="wrong layout"):
        verify(bad)
    verify(kernel_of("h100_64x16_swap"))


def test_planted_transposed_store_without_swap_ab_fails_verifier():
    kernel = build_kernel(make_plan(load_config("h100_64x64").replace(**{"epilogue.store": "direct",
                                                                          "epilogue.swizzle": "none",
                                                                          "epilogue.store_block_n": 0,
                                                                          "epilogue.stages": 1,
                                                                          "epilogue.stmatrix": False})))
    verify(kernel)
    bad = rewrite(kernel, lambda op: dataclasses.replace(op, transposed=True) if isinstance(op, ops.StGlobal16) else None)
    with pytest.raises(VerifyError, match="wrong layout"):
        verify(bad)


def test_simulated_d_is_the_transpose_of_the_kernels_result():
    """With A = I (M = K = 64), D = A @ B^T = B^T exactly (small integers): the kernel's own result B @ A^T = B lands
    transposed; an untransposed store would leave D = B."""
    m = n = k = 64
    b = np.arange(n * k, dtype=np.float32).reshape(n, k) % 7 - 3
    res = simulate(kernel_of("h100_64x16_swap"), m, n, k, a=np.eye(m, k, dtype=np.float32), b=b, num_sms=2)
    assert np.array_equal(res.d, b.T)
