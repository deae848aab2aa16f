"""The simulator runs the MXFP8 GEMM's IR (tcgen05.cp of the ue8m0 scale atoms, four K=32 ``.kind::mxf8f6f4``
MMAs per k-block with scale-factor IDs 0-3, fp32 TMEM accumulation, bf16 D) to the references' numbers, and planted
bugs in its new parts fail the verifier or the simulator.

References: :func:`ptxgen.check.fp8.mx_gemm_reference` of the converted operands, and with power-of-two recipe scales
(the conversion is exact) the recipe's own :func:`ptxgen.check.fp8.fp8_gemm_reference`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxgen.build import build
from ptxgen.check.fp8 import fp8_gemm_reference
from ptxgen.check.numerics import compare
from ptxgen.check.sim import simulate, sweep
from ptxgen.check.sim.run import simulate_mxfp8
from ptxgen.check.verify import verify
from ptxgen.descriptors import UMMA_IDESC_MXF8F6F4
from ptxgen.errors import ShapeError, VerifyError
from ptxgen.ir import ops as O

from tests.check.test_dual_planted import _kernel, _sim_faults, body_holding
from tests.check.test_nvfp4_planted import _copies_after_the_mmas

pytestmark = pytest.mark.sim

ONE, PAIR = "fp8_sm100_128x128", "fp8_sm100_256x128"
MX = (ONE, PAIR)
BOTH = pytest.mark.parametrize("config", MX)


def _rows(name: str) -> int:
    return 256 if name == PAIR else 128  # the cluster tile's rows


@pytest.mark.parametrize("name", MX)
@settings(max_examples=5, deadline=None)
@given(mt=st.integers(1, 3), nt=st.integers(1, 3), kb=st.integers(1, 9), pow2=st.booleans(), seed=st.integers(0, 99))
def test_random_shapes_match_the_reference(name, mt, nt, kb, pow2, seed):
    """Several tiles (persistent CTAs loop), several k-blocks (more than the stages: the ring wraps)."""
    r = simulate_mxfp8(build(name).kernel, _rows(name) * mt, 128 * nt, 128 * kb, seed=seed, pow2_scales=pow2,
                       num_sms=2)
    assert r.rel_fro < 1e-2 and np.isfinite(r.d).all()


@pytest.mark.parametrize("name", MX)
def test_power_of_two_recipe_scales_give_the_recipes_numbers(name):
    """With ue8m0-representable recipe scales the host conversion is exact: D is the recipe's D (bf16-rounded)."""
    from ptxgen.check.fp8 import random_mxfp8

    m, n, k = 2 * _rows(name), 384, 1280  # 10 k-blocks
    x = random_mxfp8(m, n, k, seed=11, pow2_scales=True)
    r = simulate_mxfp8(build(name).kernel, m, n, k, inputs=x, num_sms=2)
    recipe = fp8_gemm_reference(x["a"], x["b"], x["scale_a"], x["scale_b"])
    assert (r.ref == recipe).all()
    cmp = compare(r.d, recipe)
    assert cmp.ok and cmp.rel_fro < 4e-3, cmp  # bf16 output rounding only


@pytest.mark.parametrize("name", MX)
def test_check_sweep_has_no_faults(name):
    """What ``ptxgen check --config <name>`` runs, with fewer interleavings."""
    out = sweep(build(name).kernel, interleavings=2)
    assert not out.faults, out.faults[0]
    assert out.max_rel_err < 1e-2


def test_simulate_dispatches_and_checks_shapes():
    kernel = build(ONE).kernel
    assert simulate(kernel, 128, 128, 256, seed=3).rel_fro < 1e-2
    with pytest.raises(ShapeError, match="m=200, n=128, k=256: MXFP8 needs m and n multiples of 128"):
        simulate(kernel, 200, 128, 256)
    with pytest.raises(ShapeError, match="k a multiple of 128"):
        simulate(kernel, 128, 128, 320)


# ------------------------------------------------------------------ planted bugs


def _issue(fn):
    """Apply ``fn(list of ops)`` to the body holding the scale copies (the k-block loop, or the Elect of lanes=all)."""
    rules = (body_holding(O.For, O.TmemCopy, fn), body_holding(O.Elect, O.TmemCopy, fn))
    return lambda op: next((r for r in (rule(op) for rule in rules) if r is not None), None)


def _mmas(change):
    return lambda op: change(op) if isinstance(op, O.UmmaBlockScaled) else None


def _field(op, **fields):
    """``op`` with idesc fields replaced."""
    f = UMMA_IDESC_MXF8F6F4.decode(op.idesc)
    f.update(fields)
    return replace(op, idesc=UMMA_IDESC_MXF8F6F4.encode(**f))


@BOTH
def test_every_k_step_reads_scale_factor_id_0(config):
    """The four MMAs all read byte 0 of the scale columns: K blocks 1-3 get block 0's scales."""
    kernel = _kernel(config, fn=_mmas(lambda op: _field(op, a_sf_id=0, b_sf_id=0)))
    verify(kernel)  # legal IDs of copied columns: only the values are wrong
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("wrong result: ") for f in faults), faults


@BOTH
def test_b_scales_read_from_the_sfa_column(config):
    """A wrong scale-factor TMEM column: the MMAs read scale_B from SFA's columns."""
    kernel = _kernel(config, fn=_mmas(lambda op: replace(op, sfb=op.sfa)))
    verify(kernel)  # the column was copied in this k-block
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("wrong result: ") for f in faults), faults


@BOTH
def test_scale_columns_never_copied(config):
    kernel = _kernel(config, fn=_mmas(lambda op: replace(op, sfb=op.sfb + 8)))  # past SFB's 4 columns
    with pytest.raises(VerifyError, match=r"^scale factors not copied before the MMA: .* reads scale_B at TMEM column 268"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("TMEM read before write: tcgen05.mma.block_scale") for f in faults)


@BOTH
def test_scale_read_before_its_copy(config):
    """The scale atoms are copied after the MMAs that read them."""
    kernel = _kernel(config, fn=_issue(_copies_after_the_mmas))
    with pytest.raises(VerifyError, match=r"^scale factors not copied before the MMA: UmmaBlockScaled mxf8f6f4.block32 "
                                          r".* reads scale_A at TMEM column 256"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("TMEM read before write: tcgen05.mma.block_scale") for f in faults)


@BOTH
@pytest.mark.parametrize("plant, vec, fmt", [
    (lambda op: _field(op, scale_format=0), "block32", 0),  # the idesc's scale type says ue4m3 (NVFP4's)
    (lambda op: replace(op, scale_vec="block16"), "block16", 1),  # 16 K per scale: not a .kind::mxf8f6f4 form
], ids=["ue4m3-scale-type", "block16-scale-vector"])
def test_wrong_scale_vector_or_type(config, plant, vec, fmt):
    kernel = _kernel(config, fn=_mmas(plant))
    with pytest.raises(VerifyError, match=rf"^block-scale mismatch: UmmaBlockScaled mxf8f6f4.{vec} .* \.{vec} with "
                                          rf"idesc scale format {fmt}; \.kind::mxf8f6f4 is \.block32"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f".{vec} with scale format {fmt}; .kind::mxf8f6f4 takes .block32" in f
                                    for f in faults)


@BOTH
@pytest.mark.parametrize("operand", ["a_format", "b_format"])
def test_e5m2_format_field(config, operand):
    """The idesc names e5m2 (format 1) for an e4m3 operand: the tensor core would read other values."""
    kernel = _kernel(config, fn=_mmas(lambda op: _field(op, **{operand: 1})))
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("bad instruction descriptor: tcgen05.mma.block_scale")
                                    and "dense e4m3 x e4m3 (format 0)" in f for f in faults), faults


def test_sfb_halves_not_multicast_on_the_pair():
    """Each CTA of the pair loads its half of the SFB atom into its own stage only: the other half never lands."""
    def plan_change(plan):
        ops = tuple(replace(o, multicast=0) if o.scales == "b" else o for o in plan.loads.operands)
        return replace(plan, loads=replace(plan.loads, operands=ops))

    kernel = _kernel(PAIR, plan_change=plan_change)
    with pytest.raises(VerifyError, match=r"^transaction-byte mismatch: full\[0\]"):
        verify(kernel)
