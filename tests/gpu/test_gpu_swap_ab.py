"""GPU tests of swap-AB (``schedule.swap_ab``, sm_90a) through the public API (marked ``gpu``).

Every shipped swap-AB config on M in {1, 7, 16, 64, 200} (M past the tile's 16 or 32 columns runs several n-blocks
of the swapped problem), N ragged (not a multiple of the 64-row tile) and K ragged (a multiple of 8, not of 64):
fresh random inputs, ``out`` poisoned with NaN, fp32 reference, relative Frobenius error < 1e-2; the prepared
launch (:func:`ptxgen.runtime.prepare`), a strided ``out`` (staged D) and a transposed A (staged input); a fused
expression refused with the row-bias reason; and the chooser's pick for a small-M shape run with ``config=None``.
"""

from __future__ import annotations

import pytest

from ptxgen.config import load_config, shipped_configs
from ptxgen.errors import ConfigError
from tests.gpu.test_gpu_gemm import random_operands

pytestmark = pytest.mark.gpu

SWAP = [c for c in shipped_configs() if load_config(c).schedule.swap_ab]
M_VALUES = (1, 7, 16, 64, 200)
#: (N, K): N off the 64-row tile, K a multiple of 8 but not of the 64-wide k-block; and a whole-tile shape
NK = ((1000, 328), (4100, 1032), (512, 4096))
TOLERANCE = 1e-2


def _error(torch, out, a, b) -> float:
    ref = a.float() @ b.float().T
    assert not torch.isnan(out).any(), "NaN left in out: an element of D was never stored"
    return ((out.float() - ref).norm() / ref.norm()).item()


def test_shipped_swap_configs_exist():
    assert len(SWAP) >= 2


@pytest.mark.parametrize("name", SWAP)
@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("nk", NK, ids=lambda nk: f"{nk[0]}x{nk[1]}")
def test_swap_config_matches_fp32_reference(name, m, nk):
    import torch

    import ptxgen

    n, k = nk
    a, b = random_operands(torch, m, n, k, seed=m * 7919 + n + k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.gemm(a, b, out=out, config=name)
    torch.cuda.synchronize()
    assert _error(torch, out, a, b) < TOLERANCE


@pytest.mark.parametrize("name", SWAP)
def test_swap_prepared_launch_and_staged_operands(name):
    import torch

    import ptxgen
    from ptxgen.runtime import prepare

    m, n, k = 7, 1000, 328
    a, b = random_operands(torch, m, n, k, seed=11)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    prepare(a, b, out, name).launch()
    torch.cuda.synchronize()
    assert _error(torch, out, a, b) < TOLERANCE
    wide = torch.full((m, n + 8), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.gemm(a, b, out=wide[:, :n], config=name)  # a strided out: the kernel writes a staging D
    at = a.T.contiguous().T  # a column-major A: staged into a row-major copy
    d2 = ptxgen.gemm(at, b, config=name)
    torch.cuda.synchronize()
    assert torch.isnan(wide[:, n:]).all(), "columns past N of the strided out were written"
    assert _error(torch, wide[:, :n], a, b) < TOLERANCE
    assert _error(torch, d2, a, b) < TOLERANCE


def test_swap_config_takes_an_elementwise_expression_and_refuses_an_e4m3_d():
    """An elementwise expression runs on the swap-AB tile (its column bias read per accumulator row); an e4m3 D
    is refused before any launch, ``out`` untouched."""
    import torch

    import ptxgen

    a, b = random_operands(torch, 8, 256, 64, seed=3)
    bias = torch.randn(256, device="cuda").bfloat16()
    d = ptxgen.gemm(a, b, config=SWAP[0], epilogue="acc + bias[col]", bias=bias)
    torch.cuda.synchronize()
    want = a.float() @ b.float().T + bias.float()
    assert float((d.float() - want).norm() / want.norm()) < TOLERANCE
    out = torch.full((8, 256), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(ConfigError, match="16-bit D"):
        ptxgen.gemm(a, b, out=out, config=SWAP[0], epilogue="e4m3(acc)")
    assert torch.isnan(out.float()).all()


@pytest.mark.parametrize("mnk", [(1, 6144, 4096), (16, 4096, 4096), (7, 3000, 1032)], ids=str)
def test_chooser_picks_swap_for_small_m_and_runs_it(mnk):
    import torch

    import ptxgen
    from ptxgen.runtime import driver
    from ptxgen.runtime.choose import choose

    m, n, k = mnk
    name = choose(m, n, k, driver.device_info(torch.cuda.current_device()))
    assert load_config(name).schedule.swap_ab, f"{mnk}: the chooser picked {name}"
    a, b = random_operands(torch, m, n, k, seed=5)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert _error(torch, out, a, b) < TOLERANCE
