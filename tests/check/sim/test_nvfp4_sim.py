"""The simulator runs the NVFP4 dual GEMM's IR (tcgen05.cp of the scale atoms, block-scaled
MMAs with exact e2m1 x ue4m3 numerics, fp32 TMEM accumulators, silu*mul, fp16 C) and matches the problem's
reference (:func:`ptxgen.check.nvfp4.nvfp4_dual_gemm_reference`), masked (|values| <= 1.5) and unrestricted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxgen.build import build
from ptxgen.errors import ShapeError
from ptxgen.check.sim import simulate, sweep
from ptxgen.check.sim.run import nvfp4_inputs, simulate_nvfp4

NVFP4 = ("nvfp4_dual_128x128", "nvfp4_dual_256x128")
# the benchmark shapes (M, N, K) of the public nvfp4_dual_gemm problem
BENCH = ((256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168))


def _kernel(name):
    return build(name).kernel


def _scaled(shape, div):
    """M kept (already small), N / div, K / div rounded down to a multiple of 256 (one stage), at least 256."""
    m, n, k = shape
    return m, n // div, max(256, k // div // 256 * 256)


@pytest.mark.parametrize("name", NVFP4)
@settings(max_examples=6, deadline=None)
@given(mt=st.integers(1, 3), nt=st.integers(1, 3), kb=st.integers(1, 4), masked=st.booleans(), seed=st.integers(0, 99))
def test_random_small_shapes_match_the_reference(name, mt, nt, kb, masked, seed):
    r = simulate_nvfp4(_kernel(name), 128 * mt * (2 if "256x" in name else 1), 128 * nt, 256 * kb, seed=seed,
                       masked=masked, num_sms=4)
    assert r.rel_fro < 1e-3 and np.isfinite(r.d).all()


@pytest.mark.parametrize("name", NVFP4)
@pytest.mark.parametrize("shape", BENCH)
@pytest.mark.parametrize("masked", [True, False])
def test_benchmark_shapes_scaled_down_by_8(name, shape, masked):
    m, n, k = _scaled(shape, 8)
    r = simulate_nvfp4(_kernel(name), m, n, k, seed=m + n + k, masked=masked, num_sms=8)
    assert r.rel_fro < 1e-3 and r.d.shape == (m, n)


@pytest.mark.slow
@pytest.mark.parametrize("name", NVFP4)
@pytest.mark.parametrize("shape", BENCH)
@pytest.mark.parametrize("masked", [True, False])
def test_benchmark_shapes_scaled_down_by_4(name, shape, masked):
    m, n, k = _scaled(shape, 4)  # K 1792 / 1024: exact quarters
    r = simulate_nvfp4(_kernel(name), m, n, k, seed=k, masked=masked, num_sms=16)
    assert r.rel_fro < 1e-3


@pytest.mark.parametrize("name", NVFP4)
def test_check_sweep_has_no_faults(name):
    """What ``ptxgen check --config <name>`` runs, with fewer interleavings."""
    out = sweep(_kernel(name), interleavings=4)
    assert not out.faults, out.faults[0]
    assert out.max_rel_err < 1e-3


def test_pair_with_a_half_cluster_tile_of_m():
    """M = 384 on the 256-row CTA pair: the second cluster's odd CTA reads A rows and scale atoms past M (zero fill)
    and its C stores are clipped: the runtime's rule is M a multiple of 128, not of the cluster tile."""
    assert simulate_nvfp4(_kernel("nvfp4_dual_256x128"), 384, 256, 512, seed=4).rel_fro < 1e-3


def test_simulate_dispatches_and_checks_shapes():
    kernel = _kernel("nvfp4_dual_128x128")
    assert simulate(kernel, 128, 128, 256, seed=3).rel_fro < 1e-3
    with pytest.raises(ShapeError, match="m=200, n=128, k=256: NVFP4 needs m and n multiples of 128"):
        simulate(kernel, 200, 128, 256)
    with pytest.raises(ShapeError, match="k a multiple of 256"):
        simulate(kernel, 128, 128, 320)


def test_unrestricted_inputs_use_every_e2m1_magnitude():
    x = nvfp4_inputs(128, 128, 256, seed=0, masked=False)
    nibbles = np.concatenate([x["a"] & 0xF, x["a"] >> 4]).ravel()
    assert set(np.unique(nibbles & 7).tolist()) == set(range(8))  # magnitudes up to 6
    masked = nvfp4_inputs(128, 128, 256, seed=0, masked=True)["a"]
    assert not ((masked & 0x44) != 0).any()  # the problem's & 0xBB mask: magnitudes {0, 0.5, 1, 1.5}
