"""GPU tests of fused epilogues on the FP8 block-scaled GEMM (marked ``gpu``; sm_90a):
``ptxgen.gemm_fp8(a, b, scale_a, scale_b, epilogue=..., **operands)``.

Per expression (``gelu(acc + bias[col])``, ``acc * scale[row] + residual``, an e4m3 D with its 1 x 128 block scale),
Hypothesis draws shapes with M and N tails (any size in [1, 1200], biased to small and off-tile) and K a multiple of
16 (whole and partial 128-K scale blocks); ``config=None`` (the FP8 chooser) or an explicit FP8 config; fresh inputs
quantized by the recipe's rules, fresh operands, D and the outputs poisoned with NaN, compared with the recipe in
fp32 (the dequantized operands' product) followed by the expression in fp32 torch ops, by relative Frobenius error
(< 1e-2; an e4m3 D rescaled by its block scale: < 0.05, e4m3 keeps 3 mantissa bits; against the accumulator's own
scale times the expression's derivative where D cancels far below it, and against gelu's ``tanh.approx.f32`` bound
where D lies in its negative tail: ``recipe_error``).  ``PTXGEN_GPU_EXAMPLES`` sets
the shapes per expression (default 100); each (config, expression) is one kernel build.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ptxgen.epi as epi
from ptxgen.errors import ConfigError, ShapeError
from tests.gpu.test_gpu_epilogue import E4M3_TOLERANCE, make_operands, tanh_budget, torch_eval
from tests.gpu.test_gpu_fp8 import (BLOCK, TOLERANCE, accumulator_spread, dequantize, dims, fp8_operands, k_dims,
                                     recipe_error, reference)

pytestmark = pytest.mark.gpu

EXAMPLES = int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100"))
CONFIGS = [None, "fp8_h100_128x128_c2"]  # None: the FP8 chooser (64x128 for M <= 128, else 128x128 or the pair)
EXPRS = ["gelu(acc + bias[col])", "acc * scale[row] + residual"]


def run_fp8_epilogue(torch, config, text: str, m: int, n: int, k: int, seed: int) -> dict:
    """One call with NaN-poisoned D (and outputs passed by name); the relative error of D (and of each output)
    against the recipe then the expression, in fp32."""
    import ptxgen
    from ptxgen.bench import relative_error

    expr = epi.parse(text)
    a, b, sa, sb = fp8_operands(torch, m, n, k, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    ops, env = make_operands(torch, expr, m, n, torch.bfloat16, gen)
    a_deq, b_deq = dequantize(torch, a, sa, 1), dequantize(torch, b, sb, BLOCK)
    acc = (a_deq @ b_deq.T).requires_grad_(True)  # the expression's derivative in acc scales the GEMM's error
    env["acc"] = acc
    e4m3 = epi.out_dtype(expr) == "e4m3"
    out = torch.full((m, n), float("nan"), device="cuda").to(torch.float8_e4m3fn if e4m3 else torch.bfloat16)
    given_outs = {name: torch.full(epi.output_shape(along, m, n), float("nan"), device="cuda")
                  for name, kind, along in epi.outputs(expr)}
    res = ptxgen.gemm_fp8(a, b, sa, sb, out=out, config=config, epilogue=text, **ops, **given_outs)
    torch.cuda.synchronize()
    d = res[0] if given_outs else res
    assert d.data_ptr() == out.data_ptr()
    where = f"{config} {text} {m}x{n}x{k} seed {seed}"
    nan = int(torch.isnan(out.float()).sum().item())
    assert nan == 0, f"{where}: {nan} of {m * n} outputs never written (NaN)"
    want = torch.broadcast_to(torch_eval(torch, epi.body(expr), env), (m, n))
    (gain,) = torch.autograd.grad(want.sum(), acc)
    want = want.detach()
    with torch.no_grad():
        budget = torch.broadcast_to(tanh_budget(torch, epi.body(expr), env, want), (m, n))
    if not e4m3:
        return {"D": recipe_error(torch, out, want, a_deq, b_deq, gain, budget)}
    s = given_outs[expr.scale]
    assert not torch.isnan(s).any(), f"{where}: block scale not all written"

    def block_amax(x):
        return torch.nn.functional.pad(x.abs(), (0, -n % 128)).reshape(m, -1, 128).amax(dim=2)
    amax = block_amax(want)
    # a block whose amax is within 100x the accumulator's own scale (recipe_error) has a scale the kernel's rounding
    # of acc decides (amax 0 -> scale 1 on one side, a tiny amax on the other); D * scale still checks those blocks
    defined = amax > 1e-2 * block_amax(accumulator_spread(a_deq, b_deq, gain))
    ref_s = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
    return {"D": recipe_error(torch, out.float() * s.repeat_interleave(128, 1)[:, :n], want, a_deq, b_deq, gain, budget),
            expr.scale: relative_error(s[defined], ref_s[defined]) if bool(defined.any()) else 0.0}


def _check(torch, config, text, m, n, k, seed):
    for name, err in run_fp8_epilogue(torch, config, text, m, n, k, seed).items():
        tol = E4M3_TOLERANCE if name == "D" and text.startswith("e4m3") else TOLERANCE
        assert err < tol, f"{config} {text} {m}x{n}x{k} seed {seed}: {name} relative error {err:.3e}"


@pytest.mark.parametrize("text", EXPRS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(config=st.sampled_from(CONFIGS), m=dims, n=dims, k=k_dims, seed=st.integers(0, 2**31 - 1))
@example(config=None, m=1, n=1, k=336, seed=3017)  # one D in gelu's negative tail: tanh.approx's bound (tanh_budget)
def test_fp8_epilogue_is_the_recipe_then_the_expression(torch, text, config, m, n, k, seed):
    _check(torch, config, text, m, n, k, seed)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(config=st.sampled_from(CONFIGS), m=dims, n=dims, k=k_dims, seed=st.integers(0, 2**31 - 1))
@example(config=None, m=849, n=1, k=16, seed=52)  # a block amax of ~0: its scale compared only through D * scale
def test_fp8_block_scaled_e4m3_d(torch, config, m, n, k, seed):
    """``e4m3(acc, "s")``: the FP8 configs' block_n (128, 256) are whole 128-column blocks."""
    _check(torch, config, 'e4m3(acc, "s")', m, n, k, seed)


def test_block_scaled_d_feeds_the_next_gemm_fp8_and_the_cache(torch):
    """An FP8 GEMM's ``e4m3(acc, "s")`` is the next FP8 GEMM's A and scale_a; a second call builds nothing."""
    import ptxgen
    from ptxgen.bench import relative_error
    from ptxgen.runtime import api
    from ptxgen.runtime.fp8 import quantize

    m, k, k2, n = 384, 512, 1024, 320
    a, b, sa, sb = fp8_operands(torch, m, k2, k, 7)
    q, s = ptxgen.gemm_fp8(a, b, sa, sb, epilogue='e4m3(acc, "s")')
    builds = len(api._expr_configs)
    q2, s2 = ptxgen.gemm_fp8(a, b, sa, sb, epilogue='e4m3(acc, "s")')
    assert len(api._expr_configs) == builds
    torch.cuda.synchronize()
    assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(s, s2)
    w = torch.randn(n, k2, device="cuda") * 0.1
    w8, sw = quantize(w, 128)
    d = ptxgen.gemm_fp8(q, w8, s, sw)
    assert relative_error(d.float(), reference(torch, a, b, sa, sb) @ w.T) < E4M3_TOLERANCE


def test_bad_operands_raise_before_launch_out_untouched(torch):
    import ptxgen

    m, n, k = 64, 200, 256
    a, b, sa, sb = fp8_operands(torch, m, n, k, 1)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda").bfloat16()
    bad = [("gelu(acc + bias[col])", {}, ShapeError, r"^bias: missing"),
           ("gelu(acc + bias[col])", {"bias": bias[:m]}, ShapeError, r"^bias: shape=\(64,\)"),
           ("gelu(acc + bias[col])", {"bias": bias.float()}, ShapeError, r"^bias: dtype=torch.float32"),
           ("gelu(acc + bias[col])", {"bias": bias.cpu()}, ShapeError, r"^bias: device=cpu"),
           ("gelu(acc + bias[col])", {"bias": bias, "extra": 1.0}, ShapeError, r"^extra: not an operand"),
           ("acc * scale[row]", {"scale": torch.ones(m, device="cuda").bfloat16()}, ShapeError, r"^scale: dtype"),
           ("acc + residual", {"residual": torch.zeros(m, n, device="cuda")}, ShapeError, r"^residual: dtype"),
           ("tanh(acc)", {}, ConfigError, r"unknown op 'tanh'")]
    for text, ops, err, match in bad:
        with pytest.raises(err, match=match):
            ptxgen.gemm_fp8(a, b, sa, sb, out=out, epilogue=text, **ops)
    with pytest.raises(ShapeError, match=r"^scale_a: shape"):
        ptxgen.gemm_fp8(a, b, sa[:, :1], sb, out=out, epilogue="gelu(acc + bias[col])", bias=bias)
    with pytest.raises(ConfigError, match="not an FP8 config"):
        ptxgen.gemm_fp8(a, b, sa, sb, out=out, config="h100_128x128", epilogue="gelu(acc + bias[col])", bias=bias)
    torch.cuda.synchronize()
    assert bool(torch.isnan(out.float()).all())


def test_repeated_fused_fp8_calls_keep_the_pointer_rules(torch):
    """A fused FP8 signature's later calls (the fast path): right with new operands each call; an ``out`` that
    overlaps the bias, or an A at a byte offset without ``out``, still raises before any launch."""
    import ptxgen

    m, n, k = 64, 256, 256
    text = "gelu(acc + bias[col])"
    for seed in (2, 3):
        a, b, sa, sb = fp8_operands(torch, m, n, k, seed)
        bias = torch.randn(n, device="cuda").bfloat16()
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ptxgen.gemm_fp8(a, b, sa, sb, out=out, epilogue=text, bias=bias)
        want = torch.nn.functional.gelu(reference(torch, a, b, sa, sb) + bias.float(), approximate="tanh")
        assert float((out.float() - want).norm() / want.norm()) < TOLERANCE
    buf = torch.full((m * n + 8,), 3.0, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ShapeError, match=r"^out: memory overlaps bias"):
        ptxgen.gemm_fp8(a, b, sa, sb, out=buf[8:].view(m, n), epilogue=text, bias=buf[:n])
    ptxgen.gemm_fp8(a, b, sa, sb, epilogue=text, bias=bias)
    a_buf = torch.empty(m * k + 16, device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)
    with pytest.raises(ShapeError, match=r"^a: .*16"):
        ptxgen.gemm_fp8(a_buf[1:1 + m * k].view(m, k).copy_(a), b, sa, sb, epilogue=text, bias=bias)
    torch.cuda.synchronize()
    assert bool((buf[n:] == 3.0).all())
