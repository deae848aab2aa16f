"""GPU tests of the FP8 block-scaled GEMM ``ptxgen.gemm_fp8`` (marked ``gpu``; sm_90a).

For every shipped ``operands: fp8`` config, Hypothesis draws M and N (any size in [1, 1200], biased to small and
off-tile: tails in M and N) and K (a multiple of 16 in [16, 2048], whole and partial 128-K scale blocks); fresh
random inputs are quantized with the recipe's own rules (per 1 x 128 block of A and per 128 x 128 block of B:
scale = amax / 448, values cast to e4m3), ``out`` is poisoned with NaN, and D is compared with the fp32 product of
the dequantized operands (the recipe formula) by relative Frobenius error (< 1e-2; :func:`recipe_error`: against the
product's own scale where D cancels far below it); NaN never passes.
``PTXGEN_GPU_EXAMPLES`` sets the examples per config (default 100).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxgen.config as config_mod
from ptxgen.errors import ShapeError
from ptxgen.runtime import fp8

pytestmark = pytest.mark.gpu

FP8_CONFIGS = [c for c in config_mod.shipped_configs() if config_mod.load_config(c).operands == "fp8"
               and config_mod.load_config(c).schedule.grouped == "none"]  # grouped: tests/gpu/test_gpu_grouped.py
EXAMPLES = int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100"))
TOLERANCE = 1e-2
BLOCK = 128


def quantize(torch, x, block_rows: int):
    """The recipe's quantization (:func:`ptxgen.runtime.fp8.quantize`)."""
    return fp8.quantize(x, block_rows)


def dequantize(torch, q, scale, block_rows: int):
    return fp8.dequantize(q, scale, block_rows)


def fp8_operands(torch, m: int, n: int, k: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, sa = quantize(torch, torch.randn(m, k, device="cuda", generator=gen), 1)
    b, sb = quantize(torch, torch.randn(n, k, device="cuda", generator=gen), BLOCK)
    return a, b, sa, sb


def reference(torch, a, b, sa, sb):
    """The recipe formula in fp32: the dequantized A times the dequantized B, transposed."""
    return dequantize(torch, a, sa, 1) @ dequantize(torch, b, sb, BLOCK).T


def accumulator_spread(a_deq, b_deq, gain=None):
    """The accumulator's own scale per element, ``|gain| * (|A| @ |B|^T) / sqrt(K)`` (A, B dequantized; ``gain``: an
    expression's derivative with respect to the accumulator, elementwise; None for D itself): see :func:`recipe_error`."""
    spread = (a_deq.abs() @ b_deq.abs().T) / a_deq.shape[-1] ** 0.5
    return spread if gain is None else gain.abs() * spread


def recipe_error(torch, got, ref, a_deq, b_deq, gain=None, budget=None) -> float:
    """Relative Frobenius error of an FP8 GEMM's D (or of an elementwise expression of it): ``||got - ref||`` over the
    larger of ``||ref||`` and the accumulator's own scale, ``||gain * (|A| @ |B|^T)|| / sqrt(K)`` (A, B dequantized;
    ``gain``: the expression's derivative with respect to the accumulator, elementwise; 1 for D itself).

    wgmma sums the e4m3 products of a 128-K block with fewer bits than fp32 (DeepSeek-V3 technical report, "Increasing
    Accumulation Precision": about 14 on H800), so its error is relative to the terms' magnitude, not to their sum: a
    row whose sum cancels far below its terms (one row times N = 1, drawn by Hypothesis) has an error no bound on
    ``||ref||`` covers.  For random inputs ``||ref||`` is about that scale; a wrong scale, k-block or row is an O(1)
    error against either.  ``budget``: an epilogue's per-element error bound by its instructions (the epilogue tests'
    ``tanh_budget``), over ``TOLERANCE`` a third candidate for the scale."""
    scale = max(float(ref.norm()), float(accumulator_spread(a_deq, b_deq, gain).norm()), 1e-30,
                float(budget.norm()) / TOLERANCE if budget is not None else 0.0)
    return float((got.float() - ref).norm()) / scale


def run_checked(torch, config, a, b, sa, sb) -> float:
    from ptxgen import gemm_fp8

    m, n = a.shape[0], b.shape[0]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert gemm_fp8(a, b, sa, sb, out=out, config=config).data_ptr() == out.data_ptr()
    torch.cuda.synchronize()
    nan = int(torch.isnan(out).sum().item())
    assert nan == 0, f"{config} {m}x{n}x{a.shape[1]}: {nan} of {m * n} outputs never written (NaN)"
    a_deq, b_deq = dequantize(torch, a, sa, 1), dequantize(torch, b, sb, BLOCK)
    return recipe_error(torch, out, a_deq @ b_deq.T, a_deq, b_deq)


dims = st.one_of(st.integers(1, 300), st.integers(1, 1200))
k_dims = st.integers(1, 128).map(lambda x: 16 * x)


@pytest.mark.parametrize("config", FP8_CONFIGS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(m=dims, n=dims, k=k_dims, seed=st.integers(0, 2**31 - 1))
def test_fp8_gemm_matches_the_recipe(config, m, n, k, seed):
    torch = pytest.importorskip("torch")
    err = run_checked(torch, config, *fp8_operands(torch, m, n, k, seed))
    assert err < TOLERANCE, f"{config} {m}x{n}x{k}: relative Frobenius error {err:.3e}"


def test_default_config_and_mn_major_scales():
    """config=None (the chooser's FP8 pick) on a DeepSeek-V3-like shape, with scales handed MN-major (``scale.T``
    row-major with a 16-byte pitch, read in place) and row-major (copied transposed): the same D."""
    torch = pytest.importorskip("torch")
    from ptxgen import gemm_fp8

    m, n, k = 512, 7168, 2048
    a, b, sa, sb = fp8_operands(torch, m, n, k, 3)
    sa_t = torch.empty((sa.shape[1], m), device="cuda").copy_(sa.T).T  # [M, K/128] with stride (1, M)
    d1 = gemm_fp8(a, b, sa, sb)
    d2 = gemm_fp8(a, b, sa_t, sb)
    torch.cuda.synchronize()
    assert torch.equal(d1, d2)
    ref = reference(torch, a, b, sa, sb)
    assert float((d1.float() - ref).norm() / ref.norm()) < TOLERANCE


def test_bad_inputs_raise_before_launch_out_untouched():
    torch = pytest.importorskip("torch")
    from ptxgen import gemm_fp8

    a, b, sa, sb = fp8_operands(torch, 64, 200, 256, 1)
    out = torch.full((64, 200), 3.0, device="cuda", dtype=torch.bfloat16)
    for args, match in (((a, b, sa[:, :1], sb), "scale_a: shape"), ((a, b, sa, sb[:1]), "scale_b: shape"),
                        ((a[:, :200], b[:, :200], sa, sb), "K=200: must be a multiple of 16"),
                        ((a.float(), b, sa, sb), "a: dtype=torch.float32")):
        with pytest.raises(ShapeError, match=match):
            gemm_fp8(*args, out=out, config="fp8_h100_128x128")
    torch.cuda.synchronize()
    assert bool((out == 3.0).all())


def test_pointer_rules_hold_on_a_cached_signature():
    """After a good call cached the signature, an ``out`` that overlaps a scale tensor or is misaligned (same
    dtype, shape and strides: the signature cannot tell) still raises before any launch, ``out`` untouched; a
    later good call with other tensors of the signature is right."""
    torch = pytest.importorskip("torch")
    from ptxgen import gemm_fp8

    m, n, k = 64, 256, 256
    a, b, sa, sb = fp8_operands(torch, m, n, k, 4)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm_fp8(a, b, sa, sb, out=out, config="fp8_h100_128x128")
    buf = torch.full((m * n + 8,), 3.0, device="cuda", dtype=torch.bfloat16)
    sa_in_out = torch.as_strided(buf.view(torch.float32), sa.shape, sa.stride()).copy_(sa)  # sa's signature
    out_over_sa = buf[:m * n].view(m, n)
    with pytest.raises(ShapeError, match="out: memory overlaps scale_a"):
        gemm_fp8(a, b, sa_in_out, sb, out=out_over_sa, config="fp8_h100_128x128")
    misaligned = buf[1:1 + m * n].view(m, n)
    with pytest.raises(ShapeError, match="out: data_ptr=.*must be 16-byte aligned"):
        gemm_fp8(a, b, sa, sb, out=misaligned, config="fp8_h100_128x128")
    torch.cuda.synchronize()
    assert bool((buf[2 * sa.numel():] == 3.0).all())
    # A at a byte offset, without out (the signature's strides; the pointer alone breaks TMA's 16-byte rule)
    gemm_fp8(a, b, sa, sb, config="fp8_h100_128x128")
    a_buf = torch.empty(m * k + 16, device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)
    a_off = a_buf[1:1 + m * k].view(m, k).copy_(a)
    with pytest.raises(ShapeError, match=r"^a: .*16"):
        gemm_fp8(a_off, b, sa, sb, config="fp8_h100_128x128")
    a2, b2, sa2, sb2 = fp8_operands(torch, m, n, k, 5)
    out2 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm_fp8(a2, b2, sa2, sb2, out=out2, config="fp8_h100_128x128")
    ref = reference(torch, a2, b2, sa2, sb2)
    assert float((out2.float() - ref).norm() / ref.norm()) < TOLERANCE
