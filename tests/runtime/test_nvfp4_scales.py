"""NVFP4 scale tensors reach the kernel only in a layout the caller names or the strides prove."""

import numpy as np
import pytest

from ptxgen.errors import ShapeError
from ptxgen.formats import sf_to_blocked

torch = pytest.importorskip("torch")
from ptxgen.runtime.nvfp4 import blocked_scales, check_nvfp4_inputs  # noqa: E402

FP4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)


def operands(m=256, n=256, k=512):
    packed = [torch.zeros(r, k // 2, dtype=torch.uint8).view(FP4) for r in (m, n, n)]
    scales = [torch.randint(0, 256, (r, k // 16), dtype=torch.uint8).view(torch.float8_e4m3fn) for r in (m, n, n)]
    return packed + scales


def test_blocked_scales_is_the_problems_view_of_the_blocked_bytes():
    m, kq = 256, 32
    sf = torch.randint(0, 256, (m, kq), dtype=torch.uint8).view(torch.float8_e4m3fn)
    view = blocked_scales(sf)
    assert tuple(view.shape) == (32, 4, m // 128, 4, kq // 4, 1)
    # element (i32, i4, rm, j4, rk) is scale (128 rm + 32 i4 + i32, 4 rk + j4)
    plain = sf.view(torch.uint8)
    for i32, i4, rm, j4, rk in [(0, 0, 0, 0, 0), (5, 2, 1, 3, 6), (31, 3, 1, 0, 7)]:
        assert int(view[i32, i4, rm, j4, rk, 0].view(torch.uint8)) == int(plain[128 * rm + 32 * i4 + i32, 4 * rk + j4])
    # and its buffer holds exactly the blocked bytes the kernel's maps read
    flat = torch.as_strided(view.view(torch.uint8), (m * kq,), (1,))
    assert np.array_equal(flat.numpy(), sf_to_blocked(plain.numpy()))
    args = operands()
    args[3] = view
    assert check_nvfp4_inputs(*args[:3], view, blocked_scales(args[4]), blocked_scales(args[5])) == (256, 256, 512)


def test_a_2d_scale_tensor_needs_its_layout_named():
    args = operands()
    with pytest.raises(ShapeError, match="sfa: a 2-D \\[256, 32\\] scale tensor reads two ways: pass "
                                         "sf_layout='rowmajor'"):
        check_nvfp4_inputs(*args)
    assert check_nvfp4_inputs(*args, sf_layout="rowmajor") == (256, 256, 512)
    assert check_nvfp4_inputs(*args, sf_layout="blocked") == (256, 256, 512)
    with pytest.raises(ShapeError, match="sf_layout='row': must be one of rowmajor, blocked"):
        check_nvfp4_inputs(*args, sf_layout="row")
    views = args[:3] + [blocked_scales(t) for t in args[3:]]
    with pytest.raises(ShapeError, match="sfa: the 6-D permuted view is the blocked layout; sf_layout='rowmajor'"):
        check_nvfp4_inputs(*views, sf_layout="rowmajor")


@pytest.mark.parametrize("bad, match", [
    (lambda: torch.zeros(200, 32, dtype=torch.float8_e4m3fn), r"shape=\(200, 32\): rows must be a multiple of 128"),
    (lambda: torch.zeros(256, 32, dtype=torch.uint8), "needs a 2-D float8_e4m3fn"),
    (lambda: torch.zeros(256, 30, dtype=torch.float8_e4m3fn), "K/16 of 4"),
])
def test_blocked_scales_errors(bad, match):
    with pytest.raises(ShapeError, match=match):
        blocked_scales(bad())
