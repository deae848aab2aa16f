"""GPU tests of the fused SwiGLU dual GEMM, ``D = silu(A @ B1.T) * (A @ B2.T)`` (marked ``gpu``).

For every shipped sm_90a ``dual_*`` config, Hypothesis draws M, N (any size in [1, 4096], biased to tiny and
off-tile) and K (a multiple of 8 in [8, 4096]); fresh random inputs per example, ``out`` poisoned with NaN,
the result compared with an fp32 reference by relative Frobenius error (< 1e-2); NaN never passes.
``PTXGEN_GPU_EXAMPLES`` sets the examples per config (default 100).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxgen.config as config_mod
from ptxgen.errors import ConfigError, ShapeError
from tests.gpu.test_gpu_gemm import dim, k_dim, launch_spec

pytestmark = pytest.mark.gpu

DUAL_SM90 = [c for c in config_mod.shipped_configs()
             if config_mod.load_config(c).arch == "sm_90a" and config_mod.load_config(c).kernel == "dual_gemm"]
#: knobs no shipped config sets on the SwiGLU pair: the overlapped epilogue, stmatrix staging
#: (docs/performance.md, "Overlapped epilogue", "stmatrix staging")
OVERLAP_DUAL = [config_mod.load_config("dual_h100_128x128_c2").replace(**changes, name=f"dual_h100_128x128_c2_{suffix}")
                for suffix, changes in (("ov", {"epilogue.overlap": True}), ("sm", {"epilogue.stmatrix": True}))]
#: the small-M tiles timed against the shipped ones and not shipped (bench/configs; docs/performance.md, "The M = 256
#: SwiGLU: tiles, not rows"): the 128x64 CTA pair multicasting B, both m-blocks of M = 256 in one CTA, a 6-stage ring
BENCH_CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "configs")
SMALL_M_DUAL = [config_mod.load_config(os.path.join(BENCH_CONFIGS, f"{n}.yaml"))
                for n in ("dual_h100_128x64_c2", "dual_h100_256x64", "dual_h100_128x64_s6")]
#: the 2x2-cluster probe (bench/configs; docs/performance.md, "A 2x2 cluster multicasting A and B")
SQUARE_DUAL = [config_mod.load_config(os.path.join(BENCH_CONFIGS, "dual_h100_128x128_c4.yaml"))]
EXAMPLES = int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100"))
TOLERANCE = 1e-2


def operands(torch, m: int, n: int, k: int, seed: int):
    """Fresh A [m, k], B1, B2 [n, k] bf16 (never zeros), scaled so the products are O(1)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    scale = k ** -0.25
    return tuple((torch.randn(r, k, device="cuda", generator=gen) * scale).to(torch.bfloat16) for r in (m, n, n))


def reference(torch, a, b1, b2):
    """silu(A @ B1^T) * (A @ B2^T) in fp32."""
    af = a.float()
    return torch.nn.functional.silu(af @ b1.float().T) * (af @ b2.float().T)


def run_checked(torch, config, a, b1, b2) -> float:
    from ptxgen import dual_gemm
    from ptxgen.bench import relative_error

    m, n = a.shape[0], b1.shape[0]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    result = dual_gemm(a, b1, b2, out=out, config=config)
    assert result.data_ptr() == out.data_ptr()
    torch.cuda.synchronize()
    nan = int(torch.isnan(out).sum().item())
    assert nan == 0, f"{config} {m}x{n}x{a.shape[1]}: {nan} of {m * n} outputs never written (NaN)"
    return relative_error(out, reference(torch, a, b1, b2))


@pytest.mark.parametrize("config", DUAL_SM90 + OVERLAP_DUAL + SMALL_M_DUAL + SQUARE_DUAL,
                         ids=lambda c: getattr(c, "name", c))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_dual_gemm_matches_reference(torch, config, data):
    spec = launch_spec(config)
    m = data.draw(dim(spec.grid.tile_rows), label="m")
    n = data.draw(dim(spec.grid.tile_cols, spec.n_multiple), label="n")
    k = data.draw(k_dim(spec.k_multiple), label="k")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    err = run_checked(torch, config, *operands(torch, m, n, k, seed))
    assert err < TOLERANCE, f"{config} {m}x{n}x{k} seed {seed}: relative Frobenius error {err:.3e}"


@pytest.mark.parametrize("config", DUAL_SM90 + SMALL_M_DUAL + SQUARE_DUAL, ids=lambda c: getattr(c, "name", c))
def test_dual_gemm_large(torch, config):
    err = run_checked(torch, config, *operands(torch, 4096, 4096, 4096, seed=1))
    assert err < TOLERANCE


def test_dual_default_config_by_shape(torch):
    from ptxgen import dual_gemm
    from ptxgen.bench import relative_error

    a, b1, b2 = operands(torch, 300, 520, 264, seed=2)
    out = dual_gemm(a, b1, b2)
    assert out.shape == (300, 520) and relative_error(out, reference(torch, a, b1, b2)) < TOLERANCE


def test_dual_bad_inputs_leave_out_untouched(torch):
    from ptxgen import dual_gemm

    a, b1, b2 = operands(torch, 128, 256, 128, seed=4)
    out = torch.full((128, 256), 7.0, device="cuda", dtype=torch.bfloat16)
    before = out.clone()
    for bad in ((a, b1, b2[:, :-8].contiguous()), (a, b1, b2.float()), (a, b1.T.contiguous(), b2),
                (a, b1, b2[:128].contiguous())):
        with pytest.raises(ShapeError):
            dual_gemm(*bad, out=out, config=DUAL_SM90[0])
    with pytest.raises(ConfigError, match="GEMM config"):
        dual_gemm(a, b1, b2, out=out, config="h100_128x128")
    torch.cuda.synchronize()
    assert torch.equal(out, before)
