"""dual_gemm_nvfp4's ``sf_sign``: scale bytes with bit 7 set passed as they are, refused, or folded into the e2m1
values (on CPU; the launch itself needs an sm_100 GPU)."""

from __future__ import annotations

import numpy as np
import pytest
torch = pytest.importorskip("torch")

from ptxgen.check.nvfp4 import nvfp4_dual_gemm_reference, random_nvfp4
from ptxgen.errors import ShapeError
from ptxgen.formats import fold_scale_signs, sf_to_blocked
from ptxgen.runtime.nvfp4 import (
    apply_sf_sign,
    blocked_scales,
    check_nvfp4_inputs,
    check_scale_signs,
    fold_scale_signs_torch,
)

FP4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)


def _operands(m=256, n=128, k=512, seed=0, negative=True):
    """Packed operands (torch, FP4 dtype) and row-major float8_e4m3fn scales, about a third of them negative."""
    rng = np.random.default_rng(seed)
    out = []
    for rows in (m, n, n):
        packed, sf = random_nvfp4(rows, k, rng, masked=False)
        if negative:
            sf = sf | (rng.integers(0, 3, sf.shape) == 0).astype(np.uint8) * 0x80
        out.append((torch.from_numpy(packed).view(FP4), torch.from_numpy(sf).view(torch.float8_e4m3fn)))
    (a, sfa), (b1, sfb1), (b2, sfb2) = out
    return a, b1, b2, sfa, sfb1, sfb2


def _u8(t):
    return t.view(torch.uint8).numpy()


def test_torch_fold_is_the_host_fold():
    a, _, _, sfa, _, _ = _operands()
    x2, s2 = fold_scale_signs_torch(a, sfa)
    assert x2.dtype == a.dtype and s2.dtype == sfa.dtype
    p_np, s_np = fold_scale_signs(_u8(a), _u8(sfa))
    np.testing.assert_array_equal(_u8(x2), p_np)
    np.testing.assert_array_equal(_u8(s2), s_np)
    assert (_u8(sfa) & 0x80).any()  # the input is not written


@pytest.mark.parametrize("form", ["rowmajor", "blocked", "view"])
def test_fold_gives_the_signed_reference_under_the_mma_reading(form):
    a, b1, b2, sfa, sfb1, sfb2 = _operands()
    want = nvfp4_dual_gemm_reference(a, b1, b2, *(sf_to_blocked(_u8(s)) for s in (sfa, sfb1, sfb2)))
    if form == "rowmajor":
        scales, layout = (sfa, sfb1, sfb2), "rowmajor"
    elif form == "blocked":
        scales = tuple(torch.from_numpy(sf_to_blocked(_u8(s)).reshape(s.shape)).view(torch.float8_e4m3fn)
                       for s in (sfa, sfb1, sfb2))
        layout = "blocked"
    else:
        scales, layout = tuple(blocked_scales(s) for s in (sfa, sfb1, sfb2)), None
    check_nvfp4_inputs(a, b1, b2, *scales, sf_layout=layout, sf_sign="fold")
    got = apply_sf_sign(a, b1, b2, *scales, sf_layout=layout, sf_sign="fold")
    assert got[3].dim() == 6 and not any((_u8(s.contiguous()) & 0x80).any() for s in got[3:])
    blocked = [_u8(torch.as_strided(s, (s.numel(),), (1,)).contiguous()) for s in got[3:]]
    folded = nvfp4_dual_gemm_reference(got[0], got[1], got[2], *blocked, scale_format="ue4m3")
    np.testing.assert_array_equal(folded, want)
    # unfolded, the MMA's reading differs from the problem's
    raw = nvfp4_dual_gemm_reference(a, b1, b2, *(sf_to_blocked(_u8(s)) for s in (sfa, sfb1, sfb2)), "ue4m3")
    assert not np.array_equal(raw, want)


def test_refuse_names_the_first_bad_byte():
    a, b1, b2, sfa, sfb1, sfb2 = _operands(negative=False)
    check_scale_signs(sfa, sfb1, sfb2)
    assert apply_sf_sign(a, b1, b2, sfa, sfb1, sfb2, sf_layout="rowmajor", sf_sign="refuse")[3] is sfa
    bad = sfb1.view(torch.uint8).clone()
    bad[3, 5] |= 0x80
    with pytest.raises(ShapeError, match=r"^sfb1\[3, 5\]: scale byte 0x[0-9a-f]{2} has bit 7 set: .* sf_sign='fold'"):
        apply_sf_sign(a, b1, b2, sfa, bad.view(torch.float8_e4m3fn), sfb2, sf_layout="rowmajor", sf_sign="refuse")


def test_default_passes_the_bytes_unchanged_and_a_bad_name_is_refused():
    ops = _operands()
    assert all(x is y for x, y in zip(apply_sf_sign(*ops, sf_layout="rowmajor", sf_sign=None), ops))
    with pytest.raises(ShapeError, match=r"^sf_sign='flip': must be one of refuse, fold"):
        check_nvfp4_inputs(*ops, sf_layout="rowmajor", sf_sign="flip")


def test_public_entry_point_checks_sf_sign_before_any_driver_call():
    import ptxgen

    ops = _operands()
    with pytest.raises(ShapeError, match=r"^sf_sign='negate': must be one of refuse, fold"):
        ptxgen.dual_gemm_nvfp4(*ops, sf_layout="rowmajor", sf_sign="negate")
