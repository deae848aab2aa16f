"""``ptxgen.gemm_fp8`` without a GPU: every input rule is a one-line ShapeError before any driver call, ``out``
untouched; the chooser picks among the FP8 configs; FP8 and bf16 configs refuse each other's calls."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import ptxgen  # noqa: E402
from ptxgen.errors import ConfigError, ShapeError  # noqa: E402
from ptxgen.runtime.api import _fp8_refuses, _gemm_refuses, check_fp8_operands  # noqa: E402

E4M3 = torch.float8_e4m3fn


def _ops(m=64, n=200, k=256, **over):
    x = {"a": torch.zeros((m, k), dtype=E4M3), "b": torch.zeros((n, k), dtype=E4M3),
         "scale_a": torch.ones((m, -(-k // 128))), "scale_b": torch.ones((-(-n // 128), -(-k // 128)))}
    x.update(over)
    return x


def test_valid_operands_give_the_shape():
    assert check_fp8_operands(**_ops(), require_cuda=False) == (64, 200, 256)
    assert check_fp8_operands(**_ops(k=272), require_cuda=False) == (64, 200, 272)  # ceil(272 / 128) = 3 blocks


@pytest.mark.parametrize("over, message", [
    ({"a": torch.zeros((64, 256), dtype=torch.bfloat16)}, "a: dtype=torch.bfloat16: must be torch.float8_e4m3fn"),
    ({"b": torch.zeros((200, 256), dtype=torch.float8_e5m2)}, "b: dtype=torch.float8_e5m2: must be torch.float8_e4m3fn"),
    ({"b": torch.zeros((200, 128), dtype=E4M3)}, "b: shape=(200, 128): K=128 must equal a's K=256"),
    ({"scale_a": torch.ones((64, 3))}, "scale_a: shape=(64, 3): must be [M, ceil(K/128)] = (64, 2)"),
    ({"scale_a": torch.ones((64, 2), dtype=torch.bfloat16)}, "scale_a: dtype=torch.bfloat16: must be torch.float32"),
    ({"scale_b": torch.ones((1, 2))}, "scale_b: shape=(1, 2): must be [ceil(N/128), ceil(K/128)] = (2, 2)"),
    ({"scale_b": torch.ones((200, 2))}, "scale_b: shape=(200, 2): must be [ceil(N/128), ceil(K/128)] = (2, 2)"),
    ({"a": torch.zeros((256, 64), dtype=E4M3).T}, "a: shape=(64, 256) stride=(1, 64): must be row-major contiguous"),
    ({"out": torch.zeros((64, 200), dtype=torch.float32)}, "out: dtype=torch.float32: must be torch.bfloat16"),
    ({"out": torch.zeros((64, 100), dtype=torch.bfloat16)}, "out: shape=(64, 100): must be [M, N] = (64, 200)"),
])
def test_input_rules_are_one_line_shape_errors(over, message):
    with pytest.raises(ShapeError) as exc:
        check_fp8_operands(**_ops(**over), require_cuda=False)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_k_must_be_a_multiple_of_16():
    x = _ops(k=200)
    with pytest.raises(ShapeError, match=r"K=200: must be a multiple of 16 \(K bytes of e4m3 per row"):
        check_fp8_operands(**x, require_cuda=False)


def test_cpu_tensors_are_refused_before_any_driver_call_and_out_is_untouched():
    out = torch.full((64, 200), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ShapeError, match="a: device=cpu: must be a CUDA tensor"):
        ptxgen.gemm_fp8(**_ops(), out=out)
    assert bool((out == 7.0).all())
    with pytest.raises(ShapeError, match="a: dtype=torch.bfloat16"):
        ptxgen.gemm_fp8(**_ops(a=torch.zeros((64, 256), dtype=torch.bfloat16)), out=out)
    assert bool((out == 7.0).all())


def test_families_refuse_each_others_configs():
    from ptxgen.build import build

    fp8, bf16 = build("fp8_h100_128x128").launch, build("h100_128x128").launch
    assert _fp8_refuses(fp8) is None and _gemm_refuses(bf16) is None
    assert "use ptxgen.gemm_fp8" in _gemm_refuses(fp8)
    assert "not an FP8 config" in _fp8_refuses(bf16)


def test_fp8_chooser_refuses_other_devices():
    from ptxgen.runtime import choose

    choose.choose_cached.cache_clear()
    with pytest.raises(ConfigError, match="the FP8 GEMM is an sm_90a kernel"):
        choose.choose_cached(4096, 7168, 7168, (10, 0), 148, "gemm_fp8")
    choose.choose_cached.cache_clear()
