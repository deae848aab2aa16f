"""ue4m3 scale bytes with bit 7 set: the host format's reading (``ptxgen.formats``), the sign fold, and the simulator's
block-scaled MMA, which reads bit 7 as padding (PTX ISA 5.2.3; CUTLASS ``float_ue4m3_t``), not as a sign."""

from __future__ import annotations

import numpy as np
import pytest

from ptxgen.build import build
from ptxgen.check.nvfp4 import block_scaled_product, nvfp4_dual_gemm_reference, random_nvfp4, ue4m3_decode
from ptxgen.check.sim.run import nvfp4_inputs, simulate_nvfp4
from ptxgen.errors import SimError
from ptxgen.formats import (
    E4M3_VALUES,
    UE4M3_PAD_BIT,
    dequantize,
    fold_scale_signs,
    sf_from_blocked,
    sf_to_blocked,
    ue4m3_decode as host_ue4m3,
)


def test_ue4m3_ignores_bit_7_and_has_one_nan():
    """Every byte: bits 6-0 as the unsigned e4m3 of the same bits; 0x7F and 0xFF NaN, nothing else."""
    codes = np.arange(256)
    v = host_ue4m3(codes)
    assert np.isnan(v).nonzero()[0].tolist() == [0x7F, 0xFF]
    ok = ~np.isnan(v)
    # independent formula: exponent bits 6-3 (bias 7), mantissa 2-0, exponent 0 subnormal, no sign
    e, m = (codes >> 3) & 0xF, codes & 7
    want = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7.0))
    assert (v[ok] == want[ok]).all() and (v[ok] >= 0).all() and not np.signbit(v[ok]).any()
    assert (v[0x80:][ok[0x80:]] == v[:0x80][ok[:0x80]]).all()
    assert host_ue4m3(0xB8) == 1.0 and E4M3_VALUES[0xB8] == -1.0  # torch's e4m3 reads the same byte as -1


def test_sim_decode_agrees_with_the_host_format_and_refuses_nan():
    finite = np.array([b for b in range(256) if b & 0x7F != 0x7F], dtype=np.uint8)
    assert (ue4m3_decode(finite) == host_ue4m3(finite)).all()
    for nan in (0x7F, 0xFF):
        with pytest.raises(SimError, match=rf"bad scale factor: sf: byte {nan:#04x} is the ue4m3 NaN"):
            ue4m3_decode(np.array([0x38, nan], dtype=np.uint8), "sf")


@pytest.mark.parametrize("seed", range(4))
def test_fold_keeps_the_signed_reading_exactly(seed):
    rng = np.random.default_rng(seed)
    packed, sf = random_nvfp4(128, 256, rng, masked=False)
    sf = sf | (rng.integers(0, 2, sf.shape, dtype=np.uint8) * UE4M3_PAD_BIT)  # about half the scales negative
    sf[0, 0] = 0x80  # -0
    p2, s2 = fold_scale_signs(packed, sf)
    assert not (s2 & UE4M3_PAD_BIT).any() and (s2 == sf & 0x7F).all()
    assert (p2 != packed).any() and ((p2 ^ packed) & 0x77 == 0).all()  # only sign bits change
    signed = dequantize(packed, sf, "e4m3")
    assert (dequantize(p2, s2, "ue4m3") == signed).all()
    # without the fold the MMA's reading differs exactly where a scale is negative
    unsigned = dequantize(packed, sf, "ue4m3")
    neg = np.repeat(sf & 0x80 != 0, 16, axis=1) & (signed != 0)
    assert (unsigned[neg] == -signed[neg]).all() and (unsigned[~neg] == signed[~neg]).all()


def test_fold_rejects_mismatched_scales():
    with pytest.raises(ValueError, match=r"fold_scale_signs: scales shape \(128, 8\) must be \(128, 16\)"):
        fold_scale_signs(np.zeros((128, 128), np.uint8), np.zeros((128, 8), np.uint8))


def test_block_scaled_product_reads_bit_7_as_padding():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 16, (128, 64), dtype=np.uint8), rng.integers(0, 16, (64, 64), dtype=np.uint8)
    sa = rng.integers(0x28, 0x40, (128, 4), dtype=np.uint8)
    sb = rng.integers(0x28, 0x40, (64, 4), dtype=np.uint8)
    ref = block_scaled_product(a, b, sa, sb)
    assert (block_scaled_product(a, b, sa | 0x80, sb) == ref).all()
    assert (block_scaled_product(a, b, sa, sb ^ 0x80) == ref).all()


def _with_negative_scales(x, seed):
    """Set bit 7 of about a third of every scale tensor's bytes (the blocked bytes, any position)."""
    rng = np.random.default_rng(seed)
    out = dict(x)
    for nm in ("sfa", "sfb1", "sfb2"):
        out[nm] = x[nm] | (rng.integers(0, 3, x[nm].shape) == 0).astype(np.uint8) * UE4M3_PAD_BIT
    return out


def _folded(x, m, n, k):
    out = dict(x)
    for v, s, rows in (("a", "sfa", m), ("b1", "sfb1", n), ("b2", "sfb2", n)):
        p2, s2 = fold_scale_signs(x[v], sf_from_blocked(x[s], rows, k // 16))
        out[v], out[s] = p2, sf_to_blocked(s2)
    return out


@pytest.mark.parametrize("name", ["nvfp4_dual_128x128", "nvfp4_dual_256x128"])
def test_simulated_kernel_reads_negative_scales_as_magnitudes_and_the_fold_restores_the_reference(name):
    m, n, k = 256, 128, 512
    kernel = build(name).kernel
    x = _with_negative_scales(nvfp4_inputs(m, n, k, seed=7), seed=7)
    signed = nvfp4_dual_gemm_reference(x["a"], x["b1"], x["b2"], x["sfa"], x["sfb1"], x["sfb2"]).astype(np.float32)
    unsigned = nvfp4_dual_gemm_reference(x["a"], x["b1"], x["b2"], x["sfa"], x["sfb1"], x["sfb2"],
                                         "ue4m3").astype(np.float32)
    assert not np.allclose(signed, unsigned)
    raw = simulate_nvfp4(kernel, m, n, k, inputs=x, check=False)
    np.testing.assert_allclose(raw.d, unsigned, rtol=2e-3, atol=1e-3)  # the MMA's reading
    assert raw.rel_fro > 1e-2  # ... which is not the problem's
    folded = simulate_nvfp4(kernel, m, n, k, inputs=_folded(x, m, n, k))  # checks against the signed reference
    np.testing.assert_allclose(folded.ref, signed)
    assert folded.rel_fro < 1e-3


def test_simulated_kernel_reports_a_nan_scale():
    x = nvfp4_inputs(128, 128, 256, seed=1)
    x["sfb2"] = x["sfb2"].copy()
    x["sfb2"][5] = 0xFF
    with pytest.raises(SimError, match=r"bad scale factor: .* scale_B: byte 0xff is the ue4m3 NaN"):
        simulate_nvfp4(build("nvfp4_dual_128x128").kernel, 128, 128, 256, inputs=x)
