"""gemm input checks on CPU tensors (shapes, dtypes, devices, strides, aliasing), the default config per
compute capability and the arch check."""

from __future__ import annotations

import pytest

from ptxgen.errors import ConfigError, PtxgenError, ShapeError
from tests.helpers.runtime import bf16, torch_needed


def check(a, b, out=None, k_multiple=8, **kw):
    from ptxgen.runtime import check_gemm_inputs

    kw.setdefault("require_cuda", False)
    return check_gemm_inputs(a, b, out, k_multiple, **kw)


def expect_shape_error(match, *args, **kw):
    with pytest.raises(ShapeError, match=match) as info:
        check(*args, **kw)
    assert isinstance(info.value, PtxgenError)
    return str(info.value)


@torch_needed
def test_valid_inputs_return_mnk():
    assert check(bf16(5, 16), bf16(7, 16), bf16(5, 7)) == (5, 7, 16)


@torch_needed
def test_size_one_dims_are_accepted():
    assert check(bf16(1, 8), bf16(1, 8), bf16(1, 1)) == (1, 1, 8)


@torch_needed
def test_a_not_a_tensor():
    expect_shape_error(r"^a: got list: must be a torch.Tensor", [[1.0]], bf16(4, 8))


@torch_needed
def test_b_not_a_tensor():
    expect_shape_error(r"^b: got NoneType: must be a torch.Tensor", bf16(4, 8), None)


@torch_needed
def test_a_not_2d():
    expect_shape_error(r"^a: shape=\(2, 4, 8\): must be 2-D \[M, K\]", bf16(2, 4, 8), bf16(4, 8))


@torch_needed
def test_b_not_2d():
    expect_shape_error(r"^b: shape=\(8,\): must be 2-D \[N, K\]", bf16(4, 8), bf16(8))


@torch_needed
def test_a_wrong_dtype(torch_mod):
    a = torch_mod.zeros(4, 8, dtype=torch_mod.float16)
    expect_shape_error(r"^a: dtype=torch.float16: must be torch.bfloat16", a, bf16(4, 8))


@torch_needed
def test_b_wrong_dtype(torch_mod):
    b = torch_mod.zeros(4, 8, dtype=torch_mod.float32)
    expect_shape_error(r"^b: dtype=torch.float32: must be torch.bfloat16", bf16(4, 8), b)


@torch_needed
def test_cpu_tensor_rejected_when_cuda_required():
    expect_shape_error(r"^a: device=cpu: must be a CUDA tensor", bf16(4, 8), bf16(4, 8), require_cuda=True)


@torch_needed
def test_b_on_another_device():
    expect_shape_error(r"^b: device=meta: must be on a's device cpu", bf16(4, 8), bf16(4, 8, device="meta"))


@torch_needed
def test_a_not_row_major():
    a = bf16(16, 8).T  # [8, 16] with strides (1, 8)
    msg = expect_shape_error(r"^a: shape=\(8, 16\) stride=\(1, 8\): must be row-major contiguous", a, bf16(4, 16))
    assert ".contiguous()" in msg


@torch_needed
def test_b_padded_rows_rejected():
    b = bf16(4, 24)[:, :16]  # stride(0) = 24 != 16
    expect_shape_error(r"^b: shape=\(4, 16\) stride=\(24, 1\): .*stride\(0\) == 16", bf16(4, 16), b)


@torch_needed
def test_a_misaligned_data_ptr():
    base = bf16(4 * 8 + 8)
    a = base[1:33].view(4, 8)  # 2-byte offset from an aligned allocation
    assert a.data_ptr() % 16
    expect_shape_error(r"^a: data_ptr=0x[0-9a-f]+: must be 16-byte aligned", a, bf16(4, 8))


@torch_needed
def test_k_mismatch():
    expect_shape_error(r"^b: shape=\(4, 16\): K=16 must equal a's K=8 .*pass B, not B.T", bf16(4, 8), bf16(4, 16))


@torch_needed
def test_m_zero():
    expect_shape_error(r"^M=0: must be >= 1", bf16(0, 8), bf16(4, 8))


@torch_needed
def test_n_zero():
    expect_shape_error(r"^N=0: must be >= 1", bf16(4, 8), bf16(0, 8))


@torch_needed
def test_k_zero():
    expect_shape_error(r"^K=0: must be >= 1", bf16(4, 0), bf16(4, 0))


@torch_needed
def test_k_not_16_byte_multiple():
    expect_shape_error(r"^K=12: must be a multiple of 8 \(K\*2=24 bytes; TMA needs 16-byte row strides\)",
                       bf16(4, 12), bf16(4, 12))


@torch_needed
def test_k_not_config_multiple():
    expect_shape_error(r"^K=72: must be a multiple of 64", bf16(4, 72), bf16(4, 72), k_multiple=64)


@torch_needed
def test_n_not_multiple_when_d_stored_by_tma():
    expect_shape_error(r"^N=5: must be a multiple of 8 for this config", bf16(4, 8), bf16(5, 8), n_multiple=8)


@torch_needed
def test_out_not_a_tensor():
    expect_shape_error(r"^out: got int: must be a torch.Tensor", bf16(4, 8), bf16(4, 8), 3)


@torch_needed
def test_out_wrong_shape():
    expect_shape_error(r"^out: shape=\(4, 5\): must be \[M, N\] = \(4, 6\)", bf16(4, 8), bf16(6, 8), bf16(4, 5))


@torch_needed
def test_out_wrong_dtype(torch_mod):
    out = torch_mod.zeros(4, 6, dtype=torch_mod.float32)
    expect_shape_error(r"^out: dtype=torch.float32: must be torch.bfloat16", bf16(4, 8), bf16(6, 8), out)


@torch_needed
def test_out_wrong_device():
    expect_shape_error(r"^out: device=meta: must be on a's device cpu", bf16(4, 8), bf16(6, 8),
                       bf16(4, 6, device="meta"))


@torch_needed
def test_out_not_contiguous():
    out = bf16(6, 4).T
    expect_shape_error(r"^out: shape=\(4, 6\) stride=\(1, 4\): must be row-major contiguous", bf16(4, 8),
                       bf16(6, 8), out)


@torch_needed
@pytest.mark.parametrize("operand", ["a", "b"])
def test_out_aliasing_an_input(operand):
    a, b = bf16(8, 8), bf16(8, 8)
    out = a if operand == "a" else b
    expect_shape_error(rf"^out: memory overlaps {operand}: D must not alias an input", a, b, out)


@torch_needed
def test_gemm_rejects_cpu_inputs_before_any_driver_call(monkeypatch):
    from ptxgen.runtime import api, driver

    def no_driver():
        raise AssertionError("driver touched")

    monkeypatch.setattr(driver, "cu", no_driver)
    monkeypatch.setattr(api, "built_config", no_driver)
    with pytest.raises(ShapeError, match=r"^a: device=cpu: must be a CUDA tensor"):
        api.gemm(bf16(4, 8), bf16(4, 8))


def test_default_config_by_capability():
    from ptxgen.runtime import api

    assert api.default_config_name((9, 0)) == api.DEFAULT_SM90 == "h100_256x128"
    assert api.default_config_name((10, 0)) == api.DEFAULT_SM100 == "level9"
    with pytest.raises(ConfigError, match=r"compute capability 8.0: no default config"):
        api.default_config_name((8, 0))


def test_arch_must_match_device():
    from ptxgen.runtime import api

    api.check_arch("x", "sm_90a", (9, 0))
    with pytest.raises(ConfigError, match=r"config x: arch=sm_100a needs compute capability 10.0, the device has 9.0"):
        api.check_arch("x", "sm_100a", (9, 0))
    with pytest.raises(ConfigError, match=r"arch='sm_80'"):
        api.check_arch("x", "sm_80", (8, 0))
