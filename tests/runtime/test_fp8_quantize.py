"""The FP8 recipe's host quantization (ptxgen.runtime.fp8) on the CPU: scale shapes, amax / 448, the round trip."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxgen.runtime import fp8  # noqa: E402


@pytest.mark.parametrize("block_rows, rows", [(1, 5), (128, 130)])
def test_quantize_scales_and_round_trip(block_rows, rows):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 300, generator=gen)
    x[0, :128] = 0.0  # an all-zero block gets scale 1
    q, scale = fp8.quantize(x, block_rows)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    assert scale.shape == (-(-rows // block_rows), 3) and scale.dtype == torch.float32
    if block_rows == 1:
        assert scale[0, 0] == 1.0 and scale[1, 1] == x[1, 128:256].abs().max() / 448.0
    back = fp8.dequantize(q, scale, block_rows)
    err = ((back - x).norm() / x.norm()).item()
    assert err < 0.04  # e4m3: 3 mantissa bits, relative step 2^-4
    assert back.abs().max() <= x.abs().max() * (1 + 2 ** -4)


def test_quantize_refuses_what_the_recipe_has_no_block_for():
    with pytest.raises(ValueError, match="block_rows=64"):
        fp8.quantize(torch.zeros(4, 4), 64)
    with pytest.raises(ValueError, match="2-D"):
        fp8.quantize(torch.zeros(4), 1)
