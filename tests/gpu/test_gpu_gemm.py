"""GPU tests of generated GEMMs against torch (marked ``gpu``; skipped without a CUDA GPU).

For every shipped sm_90a config (and the variants and bench probes listed below), Hypothesis draws shapes:
M, N in [1, 4096] biased towards tiny sizes and sizes just off a multiple of the tile, K a multiple of 8 (and of
the kernel's ``k_multiple``) in [8, 4096].  Each example gets fresh random inputs (seeded by a drawn seed, so a
failure replays), ``out`` is poisoned with NaN before the launch, and the result must have no NaN and a relative
Frobenius error under 1e-2 against ``a.float() @ b.float().T``.
``PTXGEN_GPU_EXAMPLES`` sets the number of examples per config (default 100).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxgen.build  # noqa: F401 - a broken build module fails collection
import ptxgen.config as config_mod
from ptxgen.errors import ShapeError

pytestmark = pytest.mark.gpu

SM90_CONFIGS = [c for c in config_mod.shipped_configs()
                if config_mod.load_config(c).arch == "sm_90a" and config_mod.load_config(c).kernel == "gemm"
                and config_mod.load_config(c).operands == "bf16"  # FP8 configs: tests/gpu/test_gpu_fp8.py
                and config_mod.load_config(c).schedule.grouped == "none"]  # grouped: tests/gpu/test_gpu_grouped.py
#: knobs no shipped config sets (docs/performance.md, "Overlapped epilogue", "stmatrix staging"):
#: the overlapped epilogue on a pair and a 2-wave tile, stmatrix staging on a pair and, with the overlap (packed words), on a 2-wave tile
VARIANT_CONFIGS = [config_mod.load_config(c).replace(**changes, name=f"{c}_{suffix}") for c, suffix, changes in (
    ("h100_128x256", "ov", {"epilogue.overlap": True}), ("h100_256x128", "ov", {"epilogue.overlap": True}),
    ("h100_128x256", "sm", {"epilogue.stmatrix": True}),
    ("h100_256x128", "ovsm", {"epilogue.overlap": True, "epilogue.stmatrix": True}))]
#: bench probes of shipped tiles with another stage count (docs/performance.md, "Six stages for short products")
STAGE_PROBES = [config_mod.load_config(Path(__file__).resolve().parents[2] / "bench" / "configs" / f"{name}.yaml")
                for name in ("h100_128x64_s6", "h100_64x128_s6")]
#: bench probes of 2x2 clusters (docs/performance.md, "A 2x2 cluster multicasting A and B")
SQUARE_PROBES = [config_mod.load_config(Path(__file__).resolve().parents[2] / "bench" / "configs" / f"{name}.yaml")
                 for name in ("h100_128x128_c4", "h100_128x256_c4")]
EXAMPLES = int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100"))
MAX_DIM = 4096
TOLERANCE = 1e-2


def launch_spec(config: str):
    """The config's LaunchSpec (built once per process by the runtime)."""
    from ptxgen.runtime.api import built_config

    return built_config(config).launch


def dim(tile: int, multiple: int = 1) -> st.SearchStrategy[int]:
    """A size in [1, 4096]: tiny, within 3 of a tile multiple, or anywhere; rounded up to ``multiple``."""
    near_tile = st.builds(lambda q, d: q * tile + d, st.integers(0, MAX_DIM // tile), st.integers(-3, 3))
    raw = st.one_of(st.integers(1, 16), near_tile, st.integers(1, MAX_DIM))
    return raw.map(lambda x: min(MAX_DIM // multiple, max(1, -(-x // multiple))) * multiple)


def k_dim(k_multiple: int) -> st.SearchStrategy[int]:
    """K in [8, 4096], a multiple of 8 and of ``k_multiple``, biased towards small values."""
    step = math.lcm(8, k_multiple)
    top = MAX_DIM // step
    return st.one_of(st.integers(1, min(8, top)), st.integers(1, top)).map(lambda q: q * step)


def random_operands(torch, m: int, n: int, k: int, seed: int):
    """Fresh A [m, k], B [n, k] bf16 on the GPU, scaled so that D entries are O(1)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    scale = k ** -0.25
    a = (torch.randn(m, k, device="cuda", generator=gen) * scale).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", generator=gen) * scale).to(torch.bfloat16)
    return a, b


def check_against_reference(torch, config, a, b) -> float:
    """Run ``gemm`` into a NaN-poisoned ``out``; assert no NaN and return the relative error."""
    from ptxgen.bench import relative_error
    from ptxgen.runtime import gemm

    m, n = a.shape[0], b.shape[0]
    out = torch.full((m, n), float("nan"), device=a.device, dtype=torch.bfloat16)
    result = gemm(a, b, out=out, config=config)
    assert result.data_ptr() == out.data_ptr()
    ref = a.float() @ b.float().T
    torch.cuda.synchronize()
    nan_count = int(torch.isnan(out).sum().item())
    assert nan_count == 0, f"{config} {m}x{n}x{a.shape[1]}: {nan_count} of {m * n} outputs never written (NaN)"
    return relative_error(out, ref)


@pytest.mark.parametrize("config", SM90_CONFIGS + VARIANT_CONFIGS + STAGE_PROBES + SQUARE_PROBES,
                         ids=lambda c: getattr(c, "name", c))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_gemm_matches_reference(torch, config, data):
    spec = launch_spec(config)
    n_multiple = spec.n_multiple  # 1 on sm_90a: TMA-store kernels fall back to direct stores in-kernel
    m = data.draw(dim(spec.grid.tile_rows), label="m")
    n = data.draw(dim(spec.grid.tile_cols, n_multiple), label="n")
    k = data.draw(k_dim(spec.k_multiple), label="k")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    a, b = random_operands(torch, m, n, k, seed)
    err = check_against_reference(torch, config, a, b)
    assert err < TOLERANCE, f"{config} {m}x{n}x{k} seed {seed}: relative Frobenius error {err:.3e}"


@pytest.mark.parametrize("config", SQUARE_PROBES, ids=lambda c: c.name)
def test_square_grid_is_its_resident_clusters(torch, config):
    """A 2x2 cluster's persistent grid is the clusters the device holds at once (cuOccupancyMaxActiveClusters),
    never the SM count over 4: a cluster that does not fit would run as a second round."""
    from ptxgen.runtime import driver
    from ptxgen.runtime.api import prepare

    a, b = random_operands(torch, 8192, 8192, 64, seed=3)
    call = prepare(a, b, torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16), config)
    slots, sms = call.kernel.sm_slots, driver.device_info(0).sm_count
    print(f"\n{config.name}: {slots // 4} resident clusters of 4 on {sms} SMs")
    assert 0 < slots <= sms and slots % 4 == 0
    assert call.grid_x == slots


@pytest.mark.parametrize("config", SM90_CONFIGS)
def test_gemm_8192_cube(torch, config):
    from ptxgen.bench import run_one

    result = run_one(config, 8192, 8192, 8192, seed=1)
    print(f"\n{config} 8192^3: rel_err {result['rel_err']:.2e}, {result['ms']:.3f} ms, {result['tflops']:.0f} TFLOP/s")
    assert not result["has_nan"]
    assert result["rel_err"] < TOLERANCE


def test_default_config_is_shipped_and_runs(torch):
    from ptxgen.bench import relative_error
    from ptxgen.runtime import DEFAULT_SM90, gemm

    assert DEFAULT_SM90 in config_mod.shipped_configs()
    a, b = random_operands(torch, 300, 520, 256, seed=2)
    out = gemm(a, b)
    assert out.shape == (300, 520) and out.dtype == torch.bfloat16
    assert relative_error(out, a.float() @ b.float().T) < TOLERANCE


@pytest.mark.parametrize("config", SM90_CONFIGS)
def test_gemm_on_side_stream(torch, config):
    """The launch goes to torch's *current* stream."""
    from ptxgen.bench import relative_error
    from ptxgen.runtime import gemm

    a, b = random_operands(torch, 512, 512, 512, seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = gemm(a, b, config=config)
    side.synchronize()
    assert relative_error(out, a.float() @ b.float().T) < TOLERANCE


BAD_INPUTS = {
    "k_mismatch": lambda t, a, b: (a, b[:, :-8].contiguous()),
    "a_3d": lambda t, a, b: (a.unsqueeze(0), b),
    "a_fp16": lambda t, a, b: (a.to(t.float16), b),
    "b_given_as_b_t": lambda t, a, b: (a, b.T.contiguous()),
    "b_on_cpu": lambda t, a, b: (a, b.cpu()),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_and_leaves_out_untouched(torch, case):
    from ptxgen.runtime import gemm

    config = SM90_CONFIGS[0] if SM90_CONFIGS else None
    a, b = random_operands(torch, 128, 256, 128, seed=4)
    bad_a, bad_b = BAD_INPUTS[case](torch, a, b)
    out = torch.full((128, 256), 7.0, device="cuda", dtype=torch.bfloat16)
    before = out.clone()
    with pytest.raises(ShapeError) as info:
        gemm(bad_a, bad_b, out=out, config=config)
    torch.cuda.synchronize()
    assert str(info.value)
    assert torch.equal(out, before), f"{case}: out was written although the input was rejected"
