"""The recipe's mapping onto MXFP8 (docs/fp8.md, "sm_100a"): ue8m0 scales per 1 x 32, the host conversion
(:func:`ptxgen.check.fp8.mx_from_recipe` and its torch twin :func:`ptxgen.runtime.fp8.to_mx`) and its precision:
exact for power-of-two recipe scales, within half an e4m3 ulp per element otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxgen.check.fp8 import (MX_BLOCK, E4M3_MAX, e4m3_encode, fp8_gemm_reference, mx_dequantize, mx_from_recipe,
                              mx_gemm_reference, mx_quantize, quantize_blocks, random_mxfp8, ue8m0_decode)
from ptxgen.errors import SimError
from ptxgen.formats import e4m3_decode


def test_ue8m0_is_a_biased_power_of_two():
    assert ue8m0_decode(np.array([0, 126, 127, 128, 254], dtype=np.uint8)).tolist() == \
        [2.0 ** -127, 0.5, 1.0, 2.0, 2.0 ** 127]
    with pytest.raises(SimError, match="0xff is the ue8m0 NaN"):
        ue8m0_decode(np.array([127, 255], dtype=np.uint8))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), spread=st.integers(0, 12))
def test_mx_quantize_fills_the_top_binade_and_never_saturates(seed, spread):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 128)) * np.exp2(rng.integers(-spread, spread + 1, size=(4, 128)))
    q, sf = mx_quantize(x)
    assert q.shape == (4, 128) and sf.shape == (4, 128 // MX_BLOCK)
    vals = e4m3_decode(q).reshape(4, -1, MX_BLOCK)
    amax = np.abs(vals).max(axis=2)
    assert ((amax >= E4M3_MAX / 2) & (amax <= E4M3_MAX)).all()  # the smallest power of two: (224, 448] before rounding
    err = np.abs(mx_dequantize(q, sf) - x)
    scale = np.repeat(ue8m0_decode(sf), MX_BLOCK, axis=1)
    assert (err <= np.maximum(np.abs(x) * 2.0 ** -4, scale * 2.0 ** -10)).all()  # half an ulp, or of a subnormal


def test_mx_quantize_zero_block_and_shape_rule():
    q, sf = mx_quantize(np.zeros((1, 64)))
    assert not q.any() and (sf == 127).all()
    with pytest.raises(ValueError, match="K=48: MXFP8 blocks are 1 x 32"):
        mx_quantize(np.ones((1, 48)))


@pytest.mark.parametrize("block_rows", [1, 128])
def test_recipe_with_power_of_two_scales_converts_exactly(block_rows):
    """DeepSeek's ue8m0-scaled recipe: each value keeps its e4m3 significand, only the exponent moves."""
    rng = np.random.default_rng(block_rows)
    q = e4m3_encode(rng.standard_normal((256, 512)) * 100)
    scale = np.exp2(rng.integers(-20, 4, size=(-(-256 // block_rows), 4))).astype(np.float32)
    mq, sf = mx_from_recipe(q, scale, block_rows)
    full = np.repeat(np.repeat(scale.astype(np.float64), block_rows, 0)[:256], 128, 1)
    assert (mx_dequantize(mq, sf) == e4m3_decode(q).astype(np.float64) * full).all()


def test_recipe_with_arbitrary_scales_moves_each_value_by_at_most_half_an_ulp():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 384))
    q, scale = quantize_blocks(x, 128)
    mq, sf = mx_from_recipe(q, scale, 128)
    recipe = e4m3_decode(q).astype(np.float64) * np.repeat(np.repeat(scale.astype(np.float64), 128, 0), 128, 1)
    err = np.abs(mx_dequantize(mq, sf) - recipe)
    bound = np.maximum(np.abs(recipe) * 2.0 ** -4, np.repeat(ue8m0_decode(sf), MX_BLOCK, 1) * 2.0 ** -10)
    assert (err <= bound).all() and err.max() > 0  # not exact: the scales are not powers of two


@pytest.mark.parametrize("kwargs, message", [
    ({"block_rows": 64}, "block_rows=64"),
    ({"k": 96}, "K=96: the MXFP8 kernel takes whole 128-K blocks"),
    ({"scale_shape": (2, 1)}, r"scale: shape \(2, 1\) must be \(1, 1\)"),
])
def test_mx_from_recipe_refuses(kwargs, message):
    k = kwargs.get("k", 128)
    q = np.zeros((128, k), dtype=np.uint8)
    scale = np.ones(kwargs.get("scale_shape", (1, max(1, k // 128))), dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        mx_from_recipe(q, scale, kwargs.get("block_rows", 128))


def test_mx_reference_equals_the_recipe_reference_for_power_of_two_scales():
    x = random_mxfp8(256, 256, 512, seed=3, pow2_scales=True)
    assert (mx_gemm_reference(x["mx_a"], x["mx_b"], x["sfa"], x["sfb"]) ==
            fp8_gemm_reference(x["a"], x["b"], x["scale_a"], x["scale_b"])).all()


def test_torch_twin_is_byte_equal():
    torch = pytest.importorskip("torch")
    from ptxgen.runtime import fp8 as rt

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 384, generator=gen, dtype=torch.float64) * torch.logspace(-4, 4, 384, dtype=torch.float64)
    for rows in (1, 128):
        q, s = rt.quantize(x, rows)
        tq, tsf = rt.to_mx(q, s, rows)
        nq, nsf = mx_from_recipe(q.view(torch.uint8).numpy(), s.numpy(), rows)
        assert (tq.view(torch.uint8).numpy() == nq).all() and (tsf.numpy() == nsf).all()
    tq, tsf = rt.mx_quantize(x)
    nq, nsf = mx_quantize(x.numpy())
    assert (tq.view(torch.uint8).numpy() == nq).all() and (tsf.numpy() == nsf).all()
    with pytest.raises(ValueError, match="K a multiple of 32"):
        rt.mx_quantize(x[:, :40])
