"""GPU tests of fused epilogues (marked ``gpu``): ``ptxgen.gemm(a, b, epilogue=..., **operands)`` and ``dual_gemm``.

Hypothesis draws an expression of the :mod:`ptxgen.epi` language (every op, every operand kind, sometimes an
``fp16(...)`` output) and, per expression, shapes with M and N tails (tiny, within 3 of a tile multiple, or
anywhere in [1, 4096]) and K a multiple of 8; fresh random inputs and operands per shape, ``out`` poisoned with
NaN, compared with an fp32 torch evaluation of the same expression (torch's own gelu / silu / sigmoid) by relative
Frobenius error (< 1e-2; against gelu's ``tanh.approx.f32`` bound where D lies in its negative tail:
``expression_error``); a NaN left in ``out`` fails.  ``PTXGEN_GPU_EXAMPLES`` scales the expressions per config
(default 100 -> 12; each expression is one kernel build).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxgen.epi as epi
from ptxgen.errors import ConfigError, ShapeError
from tests.gpu.test_gpu_gemm import dim, k_dim, launch_spec

pytestmark = pytest.mark.gpu

GEMM_CONFIGS = ["h100_128x128", "h100_256x128", "h100_128x256", "h100_128x128_pp"]
DUAL_CONFIGS = ["dual_h100_128x128"]
EXPRESSIONS = max(2, int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100")) // 8)
SHAPES = 3
TOLERANCE = 1e-2

LEAVES = [epi.bias("bias", "col"), epi.bias("rb", "row"), epi.scale("s"), epi.scale("sr", "row"),
          epi.scale("sc", "col"), epi.residual()]
UNARY = ["relu", "gelu", "gelu_erf", "silu", "sigmoid", "neg"]


def expressions(accs: tuple[str, ...]) -> st.SearchStrategy:
    """Expressions over ``accs``: unary ops and clamps of sub-expressions, + - * with operands and constants."""
    leaf = st.one_of(st.sampled_from([epi.Acc(a) for a in accs]), st.sampled_from(LEAVES),
                     st.floats(-2, 2, allow_nan=False, width=32).map(lambda v: epi.Num(round(v, 3))))

    def grow(sub):
        return st.one_of(
            st.builds(lambda op, x: epi.Call(op, (x,)), st.sampled_from(UNARY), sub),
            st.builds(lambda x, lo, w: epi.clamp(x, lo, lo + w), sub, st.integers(-3, 0), st.integers(1, 4)),
            st.builds(lambda op, x, y: epi.Call(op, (x, y)), st.sampled_from(["add", "sub", "mul"]), sub, leaf))

    body = st.recursive(leaf, grow, max_leaves=5).filter(lambda e: bool(epi.accumulators(e)))
    return st.one_of(body, body.map(lambda e: epi.cast(e, "fp16")))


#: ``tanh.approx.f32``'s maximum relative error (PTX ISA "tanh": 2^-11 over the whole range), which the kernel's gelu
#: (tanh form) carries: ``x/2 (1 + tanh(u))`` is off by up to ``2^-12 |x|``, far more than 1e-2 of gelu(x) where
#: 1 + tanh(u) cancels (x below about -2)
TANH_APPROX_REL = 2.0 ** -11


def torch_eval(torch, node, env: dict, tanh_scale: float = 1.0):
    """``node`` in fp32 torch ops (independent of ptxgen.check.epilogue); ``tanh_scale``: gelu's tanh multiplied by it
    (1: torch's own gelu; ``1 +- TANH_APPROX_REL``: tanh at the edges of ``tanh.approx.f32``'s bound)."""
    F = torch.nn.functional
    if isinstance(node, epi.Cast):
        return torch_eval(torch, node.arg, env, tanh_scale)
    if isinstance(node, epi.Num):
        return torch.tensor(node.value, dtype=torch.float32, device="cuda")
    if isinstance(node, (epi.Acc, epi.Operand)):
        return env[node.name if isinstance(node, epi.Operand) else node.name]
    x = [torch_eval(torch, a, env, tanh_scale) for a in node.args]

    def gelu_tanh():
        if tanh_scale == 1.0:
            return F.gelu(x[0], approximate="tanh")
        u = 0.7978845608028654 * (x[0] + 0.044715 * x[0] ** 3)
        return 0.5 * x[0] * (1 + torch.tanh(u) * tanh_scale)
    return {"add": lambda: x[0] + x[1], "sub": lambda: x[0] - x[1], "mul": lambda: x[0] * x[1], "neg": lambda: -x[0],
            "relu": lambda: torch.relu(x[0]), "gelu": gelu_tanh,
            "gelu_erf": lambda: F.gelu(x[0]), "silu": lambda: F.silu(x[0]), "sigmoid": lambda: torch.sigmoid(x[0]),
            "clamp": lambda: torch.clamp(x[0], node.params[0], node.params[1])}[node.op]()


def tanh_budget(torch, node, env: dict, want):
    """Per element, how far the expression moves when every gelu's tanh sits at an edge of ``tanh.approx.f32``'s bound
    (the larger of the two edges): the error the kernel may carry by the PTX ISA, whatever else is right."""
    return torch.maximum(*((torch_eval(torch, node, env, 1 + e * TANH_APPROX_REL) - want).abs() for e in (1, -1)))


def expression_error(torch, got, want, budget) -> float:
    """Relative Frobenius error of an epilogue's D against the fp32 expression ``want``, over the larger of ``||want||``
    and ``||budget|| / TOLERANCE`` (:func:`tanh_budget`): a D of a few elements in gelu's negative tail is judged by
    the bound of the instruction that computes it, any other by its own norm."""
    scale = max(float(want.norm()), float(budget.norm()) / TOLERANCE, 1e-30)
    return float((got.float() - want).norm()) / scale


def make_operands(torch, expr, m: int, n: int, d_dtype, gen):
    """Fresh operands of ``expr`` (by name), and their fp32 broadcastable forms for the reference."""
    ops, env = {}, {}
    for o in epi.operands(expr):
        if o.along == "scalar":
            v = float(torch.randn(1, generator=gen, device="cuda").item()) * 0.5
            ops[o.name], env[o.name] = v, torch.tensor(v, device="cuda")
            continue
        shape = {"row": (m,), "col": (n,), "tile": (m, n)}[o.along]
        t = torch.randn(*shape, generator=gen, device="cuda")
        t = (t * 0.5).float() if o.kind == "scale" else t.to(d_dtype)
        ops[o.name] = t
        env[o.name] = t.float().reshape(-1, 1) if o.along == "row" else t.float()
    return ops, env


def run_checked(torch, config, expr, m: int, n: int, k: int, seed: int, dual: bool = False) -> float:
    import ptxgen

    gen = torch.Generator(device="cuda").manual_seed(seed)
    scale = k ** -0.25
    a = (torch.randn(m, k, device="cuda", generator=gen) * scale).to(torch.bfloat16)
    bs = [(torch.randn(n, k, device="cuda", generator=gen) * scale).to(torch.bfloat16) for _ in range(2 if dual else 1)]
    d_dtype = torch.float16 if epi.out_dtype(expr) == "f16" else torch.bfloat16
    ops, env = make_operands(torch, expr, m, n, d_dtype, gen)
    af = a.float()
    if dual:
        env.update(acc1=af @ bs[0].float().T, acc2=af @ bs[1].float().T)
    else:
        env["acc"] = af @ bs[0].float().T
    out = torch.full((m, n), float("nan"), device="cuda", dtype=d_dtype)
    fn = ptxgen.dual_gemm if dual else ptxgen.gemm
    result = fn(a, *bs, out=out, config=config, epilogue=expr, **ops)
    assert result.data_ptr() == out.data_ptr()
    torch.cuda.synchronize()
    nan = int(torch.isnan(out).sum().item())
    assert nan == 0, f"{config} {expr} {m}x{n}x{k}: {nan} of {m * n} outputs never written (NaN)"
    ref = torch.broadcast_to(torch_eval(torch, expr, env), (m, n))
    return expression_error(torch, out, ref, tanh_budget(torch, expr, env, ref))


def _check_shapes(torch, config, expr, data, dual=False):
    spec = launch_spec(config)
    for i in range(SHAPES):
        m = data.draw(dim(spec.grid.tile_rows), label=f"m{i}")
        n = data.draw(dim(spec.grid.tile_cols, spec.n_multiple), label=f"n{i}")
        k = data.draw(k_dim(spec.k_multiple), label=f"k{i}")
        seed = data.draw(st.integers(0, 2**32 - 1), label=f"seed{i}")
        err = run_checked(torch, config, expr, m, n, k, seed, dual)
        assert err < TOLERANCE, f"{config} {expr} {m}x{n}x{k} seed {seed}: relative Frobenius error {err:.3e}"


@pytest.mark.parametrize("config", GEMM_CONFIGS)
@settings(max_examples=EXPRESSIONS, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_gemm_epilogue_matches_torch(torch, config, data):
    expr = data.draw(expressions(("acc",)), label="expr")
    _check_shapes(torch, config, expr, data)


@pytest.mark.parametrize("config", DUAL_CONFIGS)
@settings(max_examples=max(2, EXPRESSIONS // 2), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_dual_gemm_epilogue_matches_torch(torch, config, data):
    expr = data.draw(expressions(("acc1", "acc2")), label="expr")
    _check_shapes(torch, config, expr, data, dual=True)


@pytest.mark.parametrize("text", ["gelu(acc + bias[col])", "acc + residual", "gelu_erf(acc * scale[row]) + bias(\"rb\")[row]"])
def test_named_expressions_large(torch, text):
    expr = epi.parse(text)
    assert run_checked(torch, None, expr, 2048 + 5, 2048 + 6, 1024, seed=3) < TOLERANCE


def test_default_dual_expression_explicit(torch):
    assert run_checked(torch, "dual_h100_128x128", epi.parse("silu(acc1) * acc2"), 300, 200, 128, 5, dual=True) < TOLERANCE


def test_non_contiguous_operands_and_cache(torch):
    import ptxgen
    from ptxgen.runtime import api

    m, n, k = 260, 136, 64
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    residual = torch.randn(n, m, device="cuda").to(torch.bfloat16).T  # a transposed view: copied per call
    bias = torch.randn(2 * n, device="cuda").to(torch.bfloat16)[::2]
    ref = (a.float() @ b.float().T) + residual.float() + bias.float()
    out = ptxgen.gemm(a, b, epilogue="acc + residual + bias[col]", residual=residual, bias=bias)
    builds = len(api._expr_configs)
    out2 = ptxgen.gemm(a, b, epilogue="acc + residual + bias[col]", residual=residual, bias=bias)
    assert len(api._expr_configs) == builds
    from ptxgen.bench import relative_error

    assert relative_error(out, ref) < TOLERANCE and relative_error(out2, ref) < TOLERANCE


def test_errors_leave_out_untouched(torch):
    import ptxgen

    a = torch.randn(64, 32, device="cuda").to(torch.bfloat16)
    b = torch.randn(48, 32, device="cuda").to(torch.bfloat16)
    out = torch.full((64, 48), float("nan"), device="cuda", dtype=torch.bfloat16)
    bad = [("acc + bias[col]", {"bias": torch.zeros(64, device="cuda", dtype=torch.bfloat16)}, ShapeError),
           ("acc + bias[col]", {}, ShapeError),
           ("acc * scale[row]", {"scale": torch.zeros(64, device="cuda", dtype=torch.bfloat16)}, ShapeError),
           ("acc + residual", {"residual": torch.zeros(64, 48, device="cuda")}, ShapeError),
           ("tanh(acc)", {}, ConfigError)]
    for text, ops, err in bad:
        with pytest.raises(err):
            ptxgen.gemm(a, b, out, epilogue=text, **ops)
    with pytest.raises(ConfigError, match="sm_100a|sm_90a"):
        ptxgen.gemm(a, b, out, config="level9", epilogue="acc + bias[col]", bias=torch.zeros(48, device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    assert bool(torch.isnan(out).all())


# ------------------------------------------------------------------ outputs beside D: e4m3 D, block scales, amax, store

OUTPUT_FORMS = ["block", "row_amax", "tensor_amax", "store"]


def wrap_outputs(body, form: str):
    """``body`` in an expression with outputs: an e4m3 D with a block scale, a row-scaled e4m3 D with an amax of
    ``body`` (row or tensor), or a bf16 D with ``body`` also stored."""
    if form == "block":
        return epi.e4m3(body, "ds")
    if form in ("row_amax", "tensor_amax"):
        return epi.e4m3(epi.amax("am", body, "row" if form == "row_amax" else "tensor") * epi.scale("qs", "row"))
    return epi.relu(epi.store("pre", body))


def run_outputs(torch, config, expr, m: int, n: int, k: int, seed: int) -> dict:
    """One call with NaN-poisoned D and outputs passed by name; the relative errors per output against fp32 torch."""
    import ptxgen
    from ptxgen.bench import relative_error

    gen = torch.Generator(device="cuda").manual_seed(seed)
    scale = k ** -0.25
    a = (torch.randn(m, k, device="cuda", generator=gen) * scale).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", generator=gen) * scale).to(torch.bfloat16)
    ops, env = make_operands(torch, expr, m, n, torch.bfloat16, gen)
    env["acc"] = a.float() @ b.float().T
    e4m3 = epi.out_dtype(expr) == "e4m3"
    out = torch.full((m, n), float("nan"), device="cuda").to(torch.float8_e4m3fn if e4m3 else torch.bfloat16)
    given = {}
    for name, kind, along in epi.outputs(expr):
        shape = epi.output_shape(along, m, n)
        given[name] = (torch.zeros(shape, device="cuda") if kind == "amax" else
                       torch.full(shape, float("nan"), device="cuda",
                                  dtype=torch.bfloat16 if kind == "store" else torch.float32))
    res = ptxgen.gemm(a, b, out=out, config=config, epilogue=expr, **ops, **given)
    torch.cuda.synchronize()
    assert res[0].data_ptr() == out.data_ptr() and all(r is given[nm] for r, nm in zip(res[1:], given))
    body = expr.arg if isinstance(expr, epi.Cast) else expr
    errs = {}
    for name, kind, along in epi.outputs(expr):
        t = given[name]
        assert not torch.isnan(t.float()).any(), f"{config} {expr} {m}x{n}x{k}: output {name} not all written"
        inner = next(x for x in epi.walk(expr) if isinstance(x, epi.Tap) and x.name == name).arg if kind != "block_scale" else body
        y = torch.broadcast_to(torch_eval(torch, epi.untap(inner), env), (m, n))
        if kind == "block_scale":
            amax = torch.nn.functional.pad(y.abs(), (0, -n % 128)).reshape(m, -1, 128).amax(dim=2)
            want = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
        elif kind == "amax":
            want = y.abs().amax(dim=1) if along == "row" else y.abs().amax().reshape(1)
        else:
            want = y
        errs[name] = relative_error(t.float(), want)
    assert not torch.isnan(out.float()).any(), f"{config} {expr} {m}x{n}x{k}: D not all written"
    want_d = torch.broadcast_to(torch_eval(torch, epi.untap(expr), env), (m, n))
    got_d = out.float()
    if isinstance(expr, epi.Cast) and expr.scale:
        got_d = got_d * given[expr.scale].repeat_interleave(128, 1)[:, :n]
    errs["D"] = relative_error(got_d, want_d)
    return errs


#: e4m3 keeps 3 mantissa bits: a value's rounding error is at most 2^-4 relative (Frobenius: about 2^-5)
E4M3_TOLERANCE = 0.05


@pytest.mark.parametrize("config", ["h100_128x128", "h100_128x256"])
@settings(max_examples=EXPRESSIONS, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_outputs_beside_d_match_torch(torch, config, data):
    form = data.draw(st.sampled_from(OUTPUT_FORMS), label="form")
    expr = wrap_outputs(data.draw(expressions(("acc",)).map(epi.body), label="body"), form)
    spec = launch_spec(config)
    for i in range(2):
        m = data.draw(dim(spec.grid.tile_rows), label=f"m{i}")
        n = data.draw(dim(spec.grid.tile_cols), label=f"n{i}")
        k = data.draw(k_dim(spec.k_multiple), label=f"k{i}")
        seed = data.draw(st.integers(0, 2**32 - 1), label=f"seed{i}")
        errs = run_outputs(torch, config, expr, m, n, k, seed)
        for name, err in errs.items():
            tol = E4M3_TOLERANCE if name == "D" and epi.out_dtype(expr) == "e4m3" else TOLERANCE
            assert err < tol, f"{config} {expr} {m}x{n}x{k} seed {seed}: {name} relative error {err:.3e}"


def test_block_scaled_output_feeds_gemm_fp8(torch):
    """``e4m3(acc, "s")`` of one GEMM is the A operand and scale_a of the next FP8 GEMM, unchanged."""
    import ptxgen
    from ptxgen.bench import relative_error
    from ptxgen.runtime.fp8 import quantize

    gen = torch.Generator(device="cuda").manual_seed(11)
    m, k, k2, n = 512, 256, 1024, 384
    a = (torch.randn(m, k, device="cuda", generator=gen) * 0.3).bfloat16()
    b = (torch.randn(k2, k, device="cuda", generator=gen) * 0.3).bfloat16()
    w = torch.randn(n, k2, device="cuda", generator=gen) * 0.1
    q, s = ptxgen.gemm(a, b, epilogue='e4m3(acc, "s")')
    assert q.dtype == torch.float8_e4m3fn and s.shape == (m, k2 // 128)
    w8, sw = quantize(w, 128)
    d = ptxgen.gemm_fp8(q, w8, s, sw)
    want = (a.float() @ b.float().T) @ w.T
    assert relative_error(d.float(), want) < E4M3_TOLERANCE


def test_residual_wide_loads_odd_n_and_misaligned(torch):
    """The residual's pair loads: an odd N (per element) and a residual view at a 2-byte offset (copied)."""
    import ptxgen
    from ptxgen.bench import relative_error

    for m, n in ((300, 261), (257, 384)):
        a = torch.randn(m, 128, device="cuda").bfloat16()
        b = torch.randn(n, 128, device="cuda").bfloat16()
        base = torch.randn(m * n + 1, device="cuda").bfloat16()
        r = base[1:].view(m, n)
        d = ptxgen.gemm(a, b, epilogue="acc + residual", residual=r)
        assert relative_error(d.float(), a.float() @ b.float().T + r.float()) < TOLERANCE


@pytest.mark.parametrize("config", ["h100_128x256", "h100_256x128"])
@pytest.mark.parametrize("text", ["acc + residual", "gelu(acc + bias[col]) * scale[row] + residual",
                                  "fp16(acc * 0.5 - residual)"])
def test_residual_through_the_staging_ring(torch, config, text):
    """The residual's TMA box load into the CD staging ring, read back with ldmatrix (N a multiple of 8; several
    tiles per CTA, so every slot is refilled), and the direct branch's pair loads (N odd)."""
    from ptxgen.config import load_config
    from ptxgen.plan import make_plan

    expr = epi.parse(text)
    assert make_plan(load_config(config).replace(**{"epilogue.expr": text})).epilogue.staged is not None
    for seed, (m, n, k) in enumerate(((1000, 2056, 256), (4093, 4096, 512), (130, 261, 64), (64, 8, 64))):
        err = run_checked(torch, config, expr, m, n, k, seed)
        assert err < TOLERANCE, f"{config} {text} {m}x{n}x{k}: relative Frobenius error {err:.3e}"


def test_bad_outputs_before_launch(torch):
    import ptxgen

    a, b = torch.randn(64, 64, device="cuda").bfloat16(), torch.randn(256, 64, device="cuda").bfloat16()
    out = torch.full((64, 256), 7.0, device="cuda").to(torch.float8_e4m3fn)
    for bad, msg in ((torch.zeros(64, 3, device="cuda"), r"^s: shape=\(64, 3\)"),
                     (torch.zeros(64, 2, device="cuda", dtype=torch.float16), r"^s: dtype=torch.float16"),
                     (torch.zeros(64, 2), r"^s: device=cpu"),
                     (torch.zeros(2, 64, device="cuda").T, r"^s: strides=")):
        with pytest.raises(ShapeError, match=msg):
            ptxgen.gemm(a, b, out=out, epilogue='e4m3(acc, "s")', s=bad)
    with pytest.raises(ShapeError, match=r"^out: dtype"):
        ptxgen.gemm(a, b, out=torch.empty(64, 256, device="cuda").bfloat16(), epilogue='e4m3(acc, "s")')
    assert (out.float() == 7.0).all()


@pytest.mark.parametrize("config", ["h100_128x256", "h100_256x128", "h100_128x144"])
def test_e4m3_d_staged_and_direct(torch, config):
    """An e4m3 D through the staging ring and a UINT8 TMA store (N % 16 == 0) and per pair (N % 16 == 8, N odd), at
    M and N tails, for each e4m3 output form (a block scale on the tiles of whole 128-column blocks)."""
    forms = ["row_amax", "tensor_amax"] + (["block"] if launch_spec(config).grid.tile_cols % 128 == 0 else [])
    for form in forms:
        expr = wrap_outputs(epi.gelu(epi.acc + epi.bias("bias", "col")), form)
        for i, (m, n, k) in enumerate(((300, 528, 128), (257, 520, 64), (129, 4112, 72), (1024, 1024, 256),
                                       (70, 261, 64))):
            errs = run_outputs(torch, config, expr, m, n, k, 100 + i)
            for name, err in errs.items():
                tol = E4M3_TOLERANCE if name == "D" else TOLERANCE
                assert err < tol, f"{config} {expr} {m}x{n}x{k}: {name} relative error {err:.3e}"


@pytest.mark.parametrize("config", ["h100_128x256", "h100_256x128"])
def test_staged_residual_over_many_tiles(torch, config):
    """The residual boxes loaded ahead (before the mainloop, after the previous box's store) across many tiles per
    CTA and at M and N tails, N a multiple of 8 (staged) or not (pair loads)."""
    import ptxgen
    from ptxgen.bench import relative_error

    gen = torch.Generator(device="cuda").manual_seed(5)
    for m, n, k in ((4096, 4096, 64), (1000, 2056, 136), (300, 520, 64), (257, 261, 64)):
        a = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        b = torch.randn(n, k, device="cuda", generator=gen).bfloat16()
        r = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ptxgen.gemm(a, b, out=out, config=config, epilogue="acc * 0.5 + residual", residual=r)
        assert not torch.isnan(out.float()).any(), f"{config} {m}x{n}x{k}: D not all written"
        err = relative_error(out.float(), (a.float() @ b.float().T) * 0.5 + r.float())
        assert err < TOLERANCE, f"{config} {m}x{n}x{k}: relative error {err:.3e}"


@pytest.mark.parametrize("config", ["h100_128x128_c2_lw2", "h100_128x256_lw2", "h100_128x256_lw4"])
def test_fused_epilogue_on_last_wave_configs(torch, config):
    """The shipped split-K-of-the-last-wave configs (which the chooser picks for some shapes) with fused epilogues:
    on 132 SMs, 72 cluster tiles (66 whole, 6 split) and 32 (all split), a ragged one; a residual through the CD
    ring and a column bias under GELU."""
    cols = launch_spec(config).grid.tile_cols
    for m, n, k in ((2048, 9 * cols, 512), (1024, 4 * cols, 1024), (2000, 9 * cols - 24, 520)):
        for text in ("acc * 0.5 + residual", "gelu(acc + bias[col])"):
            err = run_checked(torch, config, epi.parse(text), m, n, k, seed=11)
            assert err < TOLERANCE, f"{config} {text} {m}x{n}x{k}: relative error {err:.3e}"


def test_e4m3_d_with_a_misaligned_input(torch):
    """A misaligned A (copied by the staged call) keeps an e4m3 D's type when D is allocated."""
    import ptxgen
    from ptxgen.bench import relative_error

    m, n, k = 300, 528, 64
    a = torch.randn(m * k + 1, device="cuda").bfloat16()[1:].view(m, k)  # 2-byte offset
    b = torch.randn(n, k, device="cuda").bfloat16()
    d = ptxgen.gemm(a, b, config="h100_128x256", epilogue="e4m3(acc * 0.25)")
    assert d.dtype == torch.float8_e4m3fn and d.shape == (m, n)
    assert relative_error(d.float(), (a.float() @ b.float().T) * 0.25) < E4M3_TOLERANCE


#: the shipped tiles the chooser takes at small M (its pick, or the cost model's next config when the pick is a
#: swap-AB tile, which takes no e4m3 D): 64-row tiles, the 128x64 and 128x80 tiles and the split-K configs
SMALL_M_CONFIGS = ["h100_64x64", "h100_64x128", "h100_64x256", "h100_128x64", "h100_128x80_c2n", "h100_64x64_sk2",
                   "h100_64x64_sk4", "h100_64x128_sk2", "h100_128x64_sk2", "h100_128x192_sk3"]


@pytest.mark.parametrize("config", SMALL_M_CONFIGS)
def test_fused_epilogue_on_small_m_configs(torch, config):
    """The four expressions of the fused-epilogue benchmark on each small-M tile, at M = 1, 16, 64 and 200 with N and K
    tails (split-K: the last arriver's epilogue), D NaN-poisoned; a block-scaled e4m3 D where block_n % 128 == 0."""
    spec = launch_spec(config)
    body = epi.gelu(epi.acc + epi.bias("bias", "col"))
    for i, (m, n, k) in enumerate(((1, 520, 1032), (16, 1000, 4096), (64, 2056, 520), (200, 1032, 2000))):
        for text in ("gelu(acc + bias[col])", "acc + residual"):
            err = run_checked(torch, config, epi.parse(text), m, n, k, seed=20 + i)
            assert err < TOLERANCE, f"{config} {text} {m}x{n}x{k}: relative error {err:.3e}"
        for form in ["row_amax"] + (["block"] if spec.grid.tile_cols % 128 == 0 else []):
            errs = run_outputs(torch, config, wrap_outputs(body, form), m, n, k, 40 + i)
            for name, err in errs.items():
                tol = E4M3_TOLERANCE if name == "D" else TOLERANCE
                assert err < tol, f"{config} {form} {m}x{n}x{k}: {name} relative error {err:.3e}"


@pytest.mark.parametrize("config", ["h100_128x256_lw2", "h100_128x256_lw4", "h100_128x128_c2_lw2", "h100_64x64_sk2"])
def test_staged_residual_under_split_k(torch, config):
    """Split-K configs read the residual through the CD staging ring (the tile's last arriver loads its boxes): grids
    of more than one wave (the last wave split), N a multiple of 8 (staged) and odd (the direct branch's pair loads),
    D NaN-poisoned."""
    for i, (m, n, k) in enumerate(((2000, 4000, 512), (1500, 2056, 1000), (1000, 2001, 520), (70, 264, 3000))):
        for text in ("acc + residual", "gelu(acc + bias[col]) * scale[row] + residual"):
            err = run_checked(torch, config, epi.parse(text), m, n, k, seed=80 + i)
            assert err < TOLERANCE, f"{config} {text} {m}x{n}x{k}: relative error {err:.3e}"


@pytest.mark.parametrize("m, n, k", [(1, 6144, 4096), (16, 5120, 2880), (64, 4608, 3584)])
def test_fused_call_without_config_where_the_choice_cannot_take_it(torch, m, n, k):
    """config=None on shapes whose choice is a swap-AB tile (M <= 16) or a tile without whole 128-column blocks (a block
    scale at 64x4608x3584): the call runs the cost model's next config that takes the expression, to the reference."""
    from ptxgen.runtime.api import _fused_calls

    _fused_calls.clear()  # a cache: the calls made below are then the only ones held
    body = epi.gelu(epi.acc + epi.bias("bias", "col"))
    for i, expr in enumerate((epi.parse("acc + residual"), body, wrap_outputs(body, "block"))):
        if epi.outputs(expr):
            errs = run_outputs(torch, None, expr, m, n, k, 60 + i)
            assert max(errs.values()) < E4M3_TOLERANCE, f"{expr} {m}x{n}x{k}: {errs}"
        else:
            err = run_checked(torch, None, expr, m, n, k, seed=60 + i)
            assert err < TOLERANCE, f"{expr} {m}x{n}x{k}: relative error {err:.3e}"
    names = [call.config.name for _, call in _fused_calls.values()]
    # M <= 16: the elementwise expressions on the chosen swap-AB tile, the block-scaled e4m3 D on the next config
    want_swap = [m <= 16, m <= 16, False]
    assert len(names) == 3 and ["swap" in name for name in names] == want_swap, names


SWAP_CONFIGS = ["h100_64x16_swap", "h100_64x32_swap"]


@pytest.mark.parametrize("config", SWAP_CONFIGS)
@settings(max_examples=EXPRESSIONS, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_swap_ab_epilogue_matches_torch(torch, config, data):
    """Swap-AB tiles (D^T = B @ A^T, stored transposed) with a drawn elementwise expression: its operands read by the
    kernel's axes (a column bias per accumulator row, the residual transposed); M from 1 to the tile's 16 / 32
    columns, N and K with tails, D NaN-poisoned."""
    expr = data.draw(expressions(("acc",)), label="expr")
    cols = launch_spec(config).grid.tile_cols
    for i in range(SHAPES):
        m = data.draw(st.sampled_from([1, 2, cols - 1, cols]) | st.integers(1, cols), label=f"m{i}")
        n = data.draw(dim(64), label=f"n{i}")
        k = data.draw(k_dim(8), label=f"k{i}")
        seed = data.draw(st.integers(0, 2**32 - 1), label=f"seed{i}")
        err = run_checked(torch, config, expr, m, n, k, seed)
        assert err < TOLERANCE, f"{config} {expr} {m}x{n}x{k} seed {seed}: relative Frobenius error {err:.3e}"


def test_repeated_calls_of_one_signature(torch):
    """The second and later calls of a signature take the fused fast path (its checks ran once): each call's scalar,
    operand addresses and allocated outputs are its own; an ``out`` that overlaps an operand still raises before any
    launch (out untouched); a misaligned residual view is copied; a bool scalar is refused."""
    import ptxgen
    from ptxgen.bench import relative_error
    from ptxgen.runtime import api

    m, n, k = 300, 520, 264
    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    b = torch.randn(n, k, device="cuda", generator=gen).bfloat16()
    acc = a.float() @ b.float().T
    text = "acc * scale + residual"
    api._fused_fast.clear()
    for i, s in enumerate((0.5, -2.0, 1.25)):
        r = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
        out = torch.full((m, n), float("nan"), device="cuda").bfloat16()
        assert ptxgen.gemm(a, b, out=out, epilogue=text, residual=r, scale=s) is out
        assert relative_error(out.float(), acc * s + r.float()) < TOLERANCE, (i, s)
        assert len(api._fused_fast) == 1
    shared = torch.randn(m * n + 8, device="cuda", generator=gen).bfloat16()
    r, out = shared[:m * n].view(m, n), torch.full((m, n), float("nan"), device="cuda").bfloat16()
    with pytest.raises(ShapeError, match=r"^out: memory overlaps residual"):
        ptxgen.gemm(a, b, out=shared[8:].view(m, n), epilogue=text, residual=r, scale=0.5)
    with pytest.raises(ShapeError, match=r"^scale: got bool"):
        ptxgen.gemm(a, b, out=out, epilogue=text, residual=r, scale=True)
    torch.cuda.synchronize()
    assert bool(torch.isnan(out.float()).all())
    base = torch.randn(m * n + 1, device="cuda", generator=gen).bfloat16()
    r = base[1:].view(m, n)  # a 2-byte offset: copied, as on the first call
    ptxgen.gemm(a, b, out=out, epilogue=text, residual=r, scale=0.5)
    assert relative_error(out.float(), acc * 0.5 + r.float()) < TOLERANCE
    # an output beside D, allocated per call (never the previous call's tensor)
    q1, am1 = ptxgen.gemm(a, b, epilogue='e4m3(amax("am", acc) * scale[row])', scale=torch.ones(m, device="cuda"))
    q2, am2 = ptxgen.gemm(a, b, epilogue='e4m3(amax("am", acc) * scale[row])', scale=torch.ones(m, device="cuda"))
    assert am1.data_ptr() != am2.data_ptr() and q1.data_ptr() != q2.data_ptr()
    assert relative_error(am2, acc.abs().amax(dim=1)) < TOLERANCE and torch.equal(am1, am2)


@pytest.mark.parametrize("m, k", [(1, 1001), (7, 264), (16, 4095)])
def test_swap_ab_epilogue_on_views(torch, m, k):
    """config=None at M <= 16 (a swap-AB tile) with views: A a strided slice, K not a multiple of 8, the residual the
    transpose of an ``[N, M]`` tensor and the bias a strided slice (both copied per call), D NaN-poisoned."""
    import ptxgen
    from ptxgen.bench import relative_error
    from ptxgen.runtime.api import _fused_calls

    n = 3001  # the chooser's pick on a 132-SM H100: h100_64x16_swap at each (m, k)
    gen = torch.Generator(device="cuda").manual_seed(m + k)
    a = torch.randn(m, 2 * k, device="cuda", generator=gen).bfloat16()[:, ::2]
    b = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.5).bfloat16()
    residual = torch.randn(n, m, device="cuda", generator=gen).bfloat16().T
    bias = torch.randn(2 * n, device="cuda", generator=gen).bfloat16()[::2]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    _fused_calls.clear()
    ptxgen.gemm(a, b, out=out, epilogue="relu(acc + bias[col]) + residual", bias=bias, residual=residual)
    torch.cuda.synchronize()
    assert [call.config.name for _, call in _fused_calls.values()] == ["h100_64x16_swap"]
    assert not torch.isnan(out).any()
    want = torch.relu(a.float() @ b.float().T + bias.float()) + residual.float()
    assert relative_error(out.float(), want) < TOLERANCE
