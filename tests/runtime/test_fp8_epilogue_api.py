"""``ptxgen.gemm_fp8(..., epilogue=...)`` without a GPU: the expression and every operand rule raise one line before
any driver call (``out`` untouched), D's rules follow the expression's type, and an expression the chooser's FP8
config cannot hold (the register budget) takes the FP8 fallback config, or is refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import ptxgen  # noqa: E402
from ptxgen.config import load_config  # noqa: E402
from ptxgen.errors import ConfigError, ShapeError  # noqa: E402
from ptxgen.plan import make_plan  # noqa: E402
from ptxgen.runtime.api import (_FP8, FP8_EPILOGUE_FALLBACK_CONFIG, _fused_family, epilogue_config,  # noqa: E402
                                epilogue_expr)

E4M3 = torch.float8_e4m3fn
M, N, K = 64, 200, 256


def _ops(**over):
    x = {"a": torch.zeros((M, K), dtype=E4M3), "b": torch.zeros((N, K), dtype=E4M3),
         "scale_a": torch.ones((M, 2)), "scale_b": torch.ones((2, 2))}
    x.update(over)
    return x


def _nested(depth: int) -> str:
    """gelu_erf applied ``depth`` times to ``acc + bias[col]``: 5 registers per level (result + 4 scratch)."""
    text = "acc + bias[col]"
    for _ in range(depth):
        text = f"gelu_erf({text})"
    return text


def test_expression_errors_before_any_check_out_untouched():
    out = torch.full((M, N), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ConfigError, match=r"^epilogue.expr='erf\(acc\)': unknown op 'erf'"):
        ptxgen.gemm_fp8(**_ops(), out=out, epilogue="erf(acc)")
    with pytest.raises(ConfigError, match=r"acc1 does not exist for kernel=gemm_fp8"):
        ptxgen.gemm_fp8(**_ops(), out=out, epilogue="silu(acc1) * acc2")
    with pytest.raises(ShapeError, match=r"^bias: operands given without an epilogue expression"):
        ptxgen.gemm_fp8(**_ops(), out=out, bias=torch.zeros(N, dtype=torch.bfloat16))
    with pytest.raises(ShapeError, match=r"^a: device=cpu: must be a CUDA tensor$"):
        ptxgen.gemm_fp8(**_ops(), out=out, epilogue="gelu(acc + bias[col])", bias=torch.zeros(N, dtype=torch.bfloat16))
    assert bool((out == 7.0).all())


def _fused_check(text: str, out):
    expr, _ = epilogue_expr(text, "gemm_fp8")
    d_dtype = {"e4m3": E4M3, "f16": torch.float16}.get(ptxgen.epi.out_dtype(expr), torch.bfloat16)
    x = _ops()
    return _fused_family(_FP8, d_dtype).check(x["a"], x["b"], x["scale_a"], x["scale_b"], out, require_cuda=False)


@pytest.mark.parametrize("text, out, message", [
    ("acc + bias[col]", torch.zeros((N, M), dtype=torch.bfloat16).T,
     r"^out: shape=\(64, 200\) stride=\(1, 64\): must be row-major contiguous"),
    ('e4m3(acc, "d_scale")', torch.zeros((M, N), dtype=torch.bfloat16), r"^out: dtype=torch.bfloat16: must be torch.float8_e4m3fn$"),
    ("fp16(acc)", torch.zeros((M, N), dtype=torch.bfloat16), r"^out: dtype=torch.bfloat16: must be torch.float16$"),
    ("acc + bias[col]", torch.zeros((M, N + 1), dtype=torch.bfloat16), r"^out: shape=\(64, 201\): must be \[M, N\]"),
])
def test_d_follows_the_expression_and_is_written_in_place(text, out, message):
    with pytest.raises(ShapeError, match=message):
        _fused_check(text, out)


def test_good_fused_operands_give_the_shape():
    assert _fused_check('e4m3(acc, "d_scale")', torch.zeros((M, N), dtype=E4M3)) == (M, N, K)
    assert _fused_check("fp16(acc)", None) == (M, N, K)


def test_register_budget_refused_in_one_line():
    """An expression past the FP8 config's registers (accumulator + expression + spare > setmaxnreg's share) is a
    one-line ConfigError naming the expression and the numbers; the block partials are dead by then and do not
    count."""
    with pytest.raises(ConfigError) as exc:
        make_plan(load_config("fp8_h100_128x128").replace(**{"epilogue.expr": _nested(29)}))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("epilogue.expr=") and "148 registers" in msg and "64 accumulator" in msg
    assert "232 each of 2 consumer warpgroups" in msg
    make_plan(load_config("fp8_h100_128x128").replace(**{"epilogue.expr": _nested(28)}))  # 143: fits
    make_plan(load_config(FP8_EPILOGUE_FALLBACK_CONFIG).replace(**{"epilogue.expr": _nested(29)}))  # 148: fits


def test_chosen_fp8_config_falls_back_when_it_cannot_take_the_expression():
    expr, _ = epilogue_expr(_nested(29), "gemm_fp8")
    assert epilogue_config(_FP8, "fp8_h100_128x128", expr, chosen=True).name == FP8_EPILOGUE_FALLBACK_CONFIG
    with pytest.raises(ConfigError, match=r"^epilogue.expr="):
        epilogue_config(_FP8, "fp8_h100_128x128", expr, chosen=False)  # the caller's config: no fallback
    small, _ = epilogue_expr("gelu(acc + bias[col])", "gemm_fp8")
    assert epilogue_config(_FP8, "fp8_h100_128x128_c2", small, chosen=True).name == "fp8_h100_128x128_c2"
    too_big, _ = epilogue_expr(_nested(30), "gemm_fp8")  # 153 > 240 - 64 - 24: no FP8 config takes it
    with pytest.raises(ConfigError, match=r"needs 153 registers per thread beside 64 accumulator"):
        epilogue_config(_FP8, "fp8_h100_128x128", too_big, chosen=True)
