"""The split-K probes of the dual GEMM (``bench/configs/dual_h100_64x64_sk2.yaml``, ``_sk4``,
``dual_h100_128x64_sk2.yaml``, docs/performance.md "Tried and not kept"; ``dual_h100_128x128_sk2.yaml``): each
plans, passes the verifier and simulates to the SwiGLU reference with M, N and K off the tile, the splits' partials
and fixup included, so the timings recorded for them are of kernels that compute the right D."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxgen.builders.kernel import build_kernel
from ptxgen.check.numerics import POISON
from ptxgen.check.sim.run import simulate
from ptxgen.check.verify import verify
from ptxgen.config import load_config
from ptxgen.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
PROBES = sorted(ROOT.glob("bench/configs/dual_h100_*_sk[0-9].yaml"))


def test_probes_present():
    assert len(PROBES) >= 3


@pytest.mark.parametrize("path", PROBES, ids=lambda p: p.stem)
def test_probe_simulates_to_the_reference(path):
    cfg = load_config(str(path))
    assert cfg.kernel == "dual_gemm" and cfg.schedule.split_k > 1
    kernel = build_kernel(make_plan(cfg))
    verify(kernel)
    res = simulate(kernel, 70, 200, 1000, seed=5, num_sms=3)
    assert res.rel_fro < 1e-2 and not (res.d_bits == POISON).any()
