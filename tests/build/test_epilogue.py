"""The fused-epilogue language (ptxgen.epi), its config field, the plan's decisions and the emitted PTX."""

from __future__ import annotations

import re

import pytest

import ptxgen.epi as epi
from ptxgen.build import build
from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.errors import ConfigError
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan

TEXTS = [
    "acc",
    "gelu(acc + bias[col])",
    "gelu_erf(acc) * scale",
    "silu(acc1) * acc2",
    "acc * scale[row] + residual",
    "clamp(acc, -1, 2.5)",
    "relu(acc - bias(\"b2\")[row])",
    "sigmoid(acc) * scale(\"alpha\")[col]",
    "fp16(acc + residual(\"skip\"))",
    "acc - (acc - 1)",
    "-acc * 2",
    "acc * (-0.5)",
    "add(acc, mul(acc, 3))",
]


@pytest.mark.parametrize("text", TEXTS)
def test_parse_print_round_trip(text):
    node = epi.parse(text)
    assert epi.parse(str(node)) == node
    assert str(epi.parse(str(node))) == str(node)


def test_builder_api_equals_text():
    assert epi.gelu(epi.acc + epi.bias("bias")) == epi.parse("gelu(acc + bias[col])")
    assert epi.silu(epi.acc1) * epi.acc2 == epi.parse("silu(acc1) * acc2")
    assert epi.acc * epi.scale("s", "row") + epi.residual() == epi.parse('acc * scale("s")[row] + residual')
    assert epi.gelu(epi.acc, approximate="none") == epi.parse("gelu_erf(acc)")
    assert epi.clamp(epi.acc, -1, 1) == epi.parse("clamp(acc, -1, 1)")
    assert epi.cast(epi.relu(epi.acc), "fp16") == epi.parse("fp16(relu(acc))")
    assert 2 * epi.acc == epi.parse("2 * acc")


@pytest.mark.parametrize("text, message", [
    ("foo(acc)", r"unknown op 'foo'"),
    ("acc ** 2", r"BinOp 'acc \*\* 2' is not part"),
    ("acc.real", r"Attribute"),
    ("__import__('os')", r"unknown op '__import__'"),
    ("bias[k]", r"bias\[\.\.\.\] takes row or col"),
    ("residual[row]", r"residual 'residual' along 'row'"),
    ("clamp(acc, 2, 1)", r"clamp bounds"),
    ("clamp(acc, bias[col], 1)", r"lo and hi must be numbers"),
    ("relu(acc, acc)", r"relu takes 1 argument"),
    ("bias[col] + bias[row]", r"operand name 'bias' names both"),
    ("relu(fp16(acc))", r"may only wrap the whole expression"),
    ("acc +", r"syntax error"),
    ("'text'", r"only numbers"),
    ("row", r"row indexes an operand"),
    ("x", r"unknown name 'x'"),
    ("gelu(acc, approximate='tanh')", r"no keyword arguments"),
    ("acc" + " + acc" * 80, r"nodes: at most 64"),
])
def test_parse_errors_are_one_line(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        epi.parse(text)
    assert "\n" not in str(info.value)


def test_accumulators_per_kernel():
    with pytest.raises(ConfigError, match="acc1 does not exist for kernel=gemm"):
        epi.for_kernel("acc1 * 2", "gemm")
    with pytest.raises(ConfigError, match="acc does not exist for kernel=dual_gemm"):
        epi.for_kernel("relu(acc)", "dual_gemm")
    assert epi.for_kernel("acc2", "dual_gemm") == epi.acc2


def _cfg(name, expr):
    return load_config(name).replace(**{"epilogue.expr": expr})


def test_config_field_and_rules():
    assert _cfg("h100_128x128", "gelu(acc + bias[col])").epilogue.expr == "gelu(acc + bias[col])"
    with pytest.raises(ConfigError, match=r"^epilogue.expr='gelu\(acc \+ bias\[col\]\)': sm_100a"):
        _cfg("level9", "gelu(acc + bias[col])")
    with pytest.raises(ConfigError, match="unknown op"):
        _cfg("h100_128x128", "tanh(acc)")
    assert _cfg("level9", "relu(acc)").epilogue.expr == "relu(acc)"  # accumulator-only: both arches


def test_plan_decisions():
    p = make_plan(_cfg("h100_128x128", 'acc * scale("s")[row] + bias[col] + scale("t")'))
    e = p.epilogue
    assert [(o.name, o.along, o.dtype, o.param, o.param_kind) for o in e.operands] == [
        ("s", "row", "f32", "epi_s", "u64"), ("bias", "col", "bf16", "epi_bias", "u64"),
        ("t", "scalar", "f32", "epi_t", "u32")]
    assert p.params[-3:] == (("epi_s", "u64"), ("epi_bias", "u64"), ("epi_t", "u32"))
    assert e.pairwise and not e.second_acc and e.out_dtype == "bf16"
    assert make_plan(load_config("h100_128x128")).epilogue.expr is None
    assert make_plan(_cfg("h100_128x128", "acc")).epilogue.expr is None  # identity: nothing fused
    dual = make_plan(load_config("dual_h100_128x128")).epilogue
    assert str(dual.expr) == "silu(acc1) * acc2" and dual.second_acc and not dual.pairwise and not dual.operands
    f16 = make_plan(_cfg("h100_128x128", "fp16(acc + residual)"))
    assert f16.epilogue.out_dtype == "f16" and f16.launch_spec().tensor_maps["d"].dtype == "f16"
    assert f16.epilogue.operands[0].dtype == "f16"


def test_register_budget_refuses_in_one_line():
    big = " + ".join(f"gelu_erf(acc * {i})" for i in range(1, 9))  # 8 x (gelu_erf + mul) nodes: 55 registers
    with pytest.raises(ConfigError, match=r"^epilogue.expr=.*: needs 55 registers per thread beside 88 accumulator "
                                          r"\+ 24 spare > the 152 each of 3 consumer warpgroups") as info:
        make_plan(_cfg("h100_192x176", big))
    assert "\n" not in str(info.value)
    make_plan(_cfg("h100_128x128", big))  # 64 accumulator registers: fits


def test_ir_ops_per_fragment_pair():
    p = make_plan(_cfg("h100_128x128", "gelu(acc + bias[col]) * scale[row] + residual"))
    body = list(O.walk(build_kernel(p).body))
    exprs = [op for op in body if isinstance(op, O.EpilogueExpr)]
    loads = [op for op in body if isinstance(op, O.LdEpilogue)]
    pairs = p.mma.m_waves * p.mma.fragment_regs // 2
    assert len(exprs) == pairs and all(len(op.idx) == 2 for op in exprs)
    by = {layout: [op for op in loads if op.layout == layout] for layout in ("row", "col", "tile")}
    assert len(by["tile"]) == pairs and len(by["col"]) == pairs // 2 and len(by["row"]) == 2 * p.mma.m_waves
    assert all(op.guard for op in loads)


def test_emitted_ptx_has_the_ops_with_comments():
    ptx = build(_cfg("h100_128x128", "gelu(acc + bias[col]) + gelu_erf(acc) * sigmoid(acc) - clamp(relu(acc), 0, 1) "
                                     "* scale + residual")).ptx
    for needle in ("tanh.approx.f32", "ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "max.f32", "min.f32",
                   "ld.global.nc.b16", "cvt.f32.bf16", "copysign" if False else "abs.f32", ".param .u64 epi_bias",
                   ".param .u32 epi_scale", "ld.param.u32 %epi_scale"):
        assert needle in ptx, needle
    assert re.search(r"// EpilogueExpr acc0\[0:2\] = gelu\(acc0\[0:2\] \+ ep_bias\[0:2\]\)", ptx)
    assert re.search(r"// LdEpilogue ep_residual\[0:2\] <- bf16 epi_residual\[", ptx)


def test_dual_swiglu_is_the_expression_language():
    """The shipped dual configs: the default expression lowers to the same six instructions per value."""
    ptx = build(load_config("dual_h100_128x128")).ptx
    assert "// EpilogueExpr acc0[0:64] = silu(acc0[0:64]) * acc1_0[0:64]" in ptx
    i = ptx.index("// EpilogueExpr acc0[0:64]")
    ops = [line.split()[0] for line in ptx[i:].splitlines()[1:7]]
    assert ops == ["mul.f32", "ex2.approx.ftz.f32", "add.f32", "rcp.approx.ftz.f32", "mul.f32", "mul.f32"]
    explicit = build(_cfg("dual_h100_128x128", "silu(acc1) * acc2")).ptx
    assert explicit == ptx


def test_ptxgen_epi_attribute():
    import importlib

    import ptxgen

    assert ptxgen.epi is importlib.import_module("ptxgen.epi")
    assert str(ptxgen.epi.gelu(ptxgen.epi.acc + ptxgen.epi.bias("bias"))) == "gelu(acc + bias[col])"
    with pytest.raises(AttributeError):
        ptxgen.no_such_name  # noqa: B018
