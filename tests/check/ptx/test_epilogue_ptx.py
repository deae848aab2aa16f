"""The PTX-vs-IR differential on fused-epilogue kernels: what the emitted epilogue computes, stores and reduces.

For a representative set of epilogue expressions (the table :data:`CASES`: gelu in its tanh and erf forms, SwiGLU
on the dual GEMM, the residual staged through the CD ring, an e4m3 D with 1 x 128 block scales and an amax, bias
along rows and columns, clamp and relu, an fp16 D with a stored tap, an epilogue on the FP8 GEMM's promoted
accumulator, an sm_100a epilogue) the freshly emitted PTX, run by the PTX interpreter, must give every sampled
thread the effects the IR gives it: the operand loads (``ld.global.nc``: parameter and byte offset), every stored
element with its bits (the f32 arithmetic and each cast's rounding: ``cvt.rn`` to bf16/f16, ``cvt.rn.satfinite`` to
e4m3), the block scales (``div.rn``, ``rcp.rn``), the amax reductions (``shfl.sync.bfly`` across the quad or warp,
``red.relaxed.gpu.global.max.u32``: semantics, scope, operation, address, value).  The approximate instructions
(``tanh.approx``, ``ex2.approx``, ``rcp.approx``) run by the model both sides share, and again at both edges of
their PTX ISA error bounds, where stored values must stay within the stated tolerance of the IR's
(:func:`ptxgen.check.ptx.diff.diff_thread`).

Planted bugs change one instruction of the emitted PTX (a text edit that still assembles, or one ptxas would refuse
which the interpreter refuses too) and the differential must fail naming what differs.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from ptxgen.build import kernel_ptx
from ptxgen.builders.kernel import build_kernel
from ptxgen.check import numerics as nm
from ptxgen.check.ptx import diff as D
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.config import load_config
from ptxgen.plan import make_plan

SMALL = {"tile.block_m": 64, "tile.block_n": 32}  # one m64n32 wave per warpgroup: a short trace
WIDE = {"tile.block_m": 64, "tile.block_n": 128}  # one 1 x 128 scale block per tile row
#: name -> (config, expression, config changes, PTX the case must contain: the instructions it covers)
CASES = {
    "gelu_tanh": ("h100_128x128", "gelu(acc + bias[col]) * scale", SMALL,
                  ("tanh.approx.f32", "ld.global.nc.b32", "ld.param.u32 %epi_scale")),
    "gelu_erf": ("h100_128x128", "gelu_erf(acc) - bias[row]", SMALL,
                 ("setp.lt.f32", "selp.f32", "ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "ld.global.nc.b16")),
    "silu_mul_dual": ("dual_h100_128x128", "silu(acc1) * acc2 + bias[col]", {"mma.warpgroups": 1, "tile.block_n": 64},
                      ("ex2.approx.ftz.f32", "rcp.approx.ftz.f32")),
    "residual_staged": ("h100_128x256", "acc * scale[row] + residual", {},
                        ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ld.global.nc.f32", "stmatrix")),
    "e4m3_block_amax": ("h100_128x128", 'e4m3(amax("am", acc) * scale[col], "ds")', WIDE,
                        ("cvt.rn.satfinite.e4m3x2.f32", "shfl.sync.bfly.b32", "red.relaxed.gpu.global.max.u32",
                         "div.rn.f32", "rcp.rn.f32", "st.global.f32", "st.global.b8")),
    "e4m3_tensor_amax": ("h100_128x128", 'e4m3(amax("am", acc - bias[row], "tensor") * scale)', WIDE,
                         ("cvt.rn.satfinite.e4m3x2.f32", "shfl.sync.bfly.b32", "red.relaxed.gpu.global.max.u32")),
    "clamp_relu": ("h100_128x128", "clamp(acc, -2, 3) + relu(acc)", SMALL, ("min.f32", "max.f32")),
    "fp16_out": ("h100_128x128", 'fp16(store("pre", sigmoid(acc)) + residual)', SMALL,
                 ("cvt.rn.f16x2.f32", "cvt.f32.f16", "st.global.b32")),
    "fp8_gemm_gelu": ("fp8_h100_128x128", "gelu(acc) + bias[col]", {}, ("wgmma.mma_async", "e4m3", "tanh.approx.f32")),
    "sm100_relu": ("level9", "relu(acc) * 2", {}, ("tcgen05.ld", "max.f32")),
    "swap_ab": ("h100_64x32_swap", "gelu(acc + bias[col]) + residual * scale[row]", {},
                ("tanh.approx.f32", "ld.global.nc.b16", "ld.global.nc.f32", "mad.lo.u32")),
}
#: the cases whose approximate instructions run at both edges of their PTX ISA bounds (an e4m3 D scaled by
#: 448 / amax magnifies gelu's absolute error past the tolerance, so the e4m3 case with an approximation is silu)
APPROX_CASES = ("gelu_tanh", "gelu_erf", "silu_mul_dual", "fp16_out")


@functools.cache
def built(name: str):
    """(kernel, PTX text, parsed PTX) of a case, emitted now."""
    config, expr, changes, _ = CASES[name]
    kernel = build_kernel(make_plan(load_config(config).replace(**{**changes, "epilogue.expr": expr})))
    text = kernel_ptx(kernel)
    return kernel, text, ptxinterp.parse(text)


def odd_n(kernel) -> tuple[int, int, int]:
    """The sweep's shape with N odd: the per-element store and load paths (a pair never whole at the row end)."""
    m, n, k = D.default_shape(kernel)
    return m, n - 1, k


@pytest.mark.parametrize("name", list(CASES))
def test_epilogue_ptx_computes_what_the_ir_says(name):
    """Every role's first and last warp of the first and last cluster at a ragged 2 x 2-tile shape."""
    kernel, text, prog = built(name)
    assert all(s in text for s in CASES[name][3]), [s for s in CASES[name][3] if s not in text]
    assert D.sweep_threads(kernel, prog) is None


@pytest.mark.parametrize("name", ["e4m3_block_amax", "fp16_out", "gelu_tanh"])
def test_per_element_paths_at_odd_n(name):
    """N odd: D and the outputs stored element by element (``st.global.b8`` e4m3 bytes, ``cvt.rn.{bf16,f16}.f32``
    and ``st.global.b16``), the operand pairs loaded per element."""
    kernel, _, prog = built(name)
    launches = D.default_launches(kernel, odd_n(kernel))
    assert D.sweep_threads(kernel, prog, launches) is None


def _consumer_effects(name: str, tid: int = 128, shape=None):
    kernel, _, prog = built(name)
    launch = D.default_launches(kernel, shape)[0]
    launch = D.Launch(launch.m, launch.n, launch.k, launch.grid, 0, tid)
    effects = D.ptx_effects(prog, kernel, launch)
    assert effects == D.ir_effects(kernel, launch)
    return effects


def test_e4m3_trace_holds_the_scales_the_amax_and_the_bytes():
    """The quad leader's trace: column-scale loads, the block scales' f32 stores, the row amax's red.max (relaxed,
    gpu), and e4m3 bytes at consecutive byte addresses of D."""
    effects = _consumer_effects("e4m3_block_amax")
    kinds = {e[0] for e in effects}
    assert {"ld.global.nc", "st.global.f32", "red.global", "st.global"} <= kinds
    reds = [e for e in effects if e[0] == "red.global"]
    assert {e[1:4] for e in reds} == {("relaxed", "gpu", "max")}
    assert all(np.uint32(e.value).view(np.float32) > 0 for e in reds)  # the max of |x| over the quad's row
    d = [e for e in effects if e[0] == "st.global"]
    assert {e.element[0] for e in d} == {"e4m3"} and d[1].addr == d[0].addr + 1
    tensor = [e for e in _consumer_effects("e4m3_tensor_amax") if e[0] == "red.global"]
    am = D.epilogue_params(built("e4m3_tensor_amax")[0])["epi_am"]
    assert tensor and all(e.addr == am for e in tensor)  # the warp's one reduction into am[0]


def test_operand_loads_name_parameter_and_offset():
    """A column bias loads at 2 (n_col + 2 (lane % 4)), a row bias at 2 row, a scalar scale is no load."""
    kernel, _, _ = built("gelu_tanh")
    loads = [e for e in _consumer_effects("gelu_tanh", tid=128 + 3) if e[0] == "ld.global.nc"]
    assert {e.param for e in loads} == {"epi_bias"} and loads[0].offset == 2 * 2 * 3
    rows = [e for e in _consumer_effects("gelu_erf", tid=128 + 9) if e[0] == "ld.global.nc"]
    assert rows[0].offset == 2 * (9 // 4) and rows[1].offset == 2 * (9 // 4 + 8)


@pytest.mark.parametrize("edge", [-1, 1], ids=["low", "high"])
@pytest.mark.parametrize("name", APPROX_CASES)
def test_approximate_instructions_within_their_isa_bounds(name, edge):
    """With every tanh/ex2/rcp.approx result at the edge of its PTX ISA bound, the stored values stay within
    APPROX_ABS_TOL plus one ulp of the IR's.  tanh's edge does change stored bf16 bits (the run is not the model's);
    ex2's 2 ulp and rcp's 1 ulp rarely cross a 16-bit rounding boundary."""
    kernel, _, prog = built(name)
    assert D.sweep_threads(kernel, prog, approx=edge) is None
    if name == "gelu_tanh":
        launch = D.default_launches(kernel)[0]
        launch = D.Launch(launch.m, launch.n, launch.k, launch.grid, 0, 128)  # a consumer warp's lane 0
        assert D.ptx_effects(prog, kernel, launch, approx=edge) != D.ptx_effects(prog, kernel, launch)


def test_approximation_models_and_edges_keep_the_isa_bounds():
    """tanh's model and both edges within relative 2^-11 of tanh (f64); ex2's edges 2 ulp and rcp's 1 ulp from the
    correctly rounded result (PTX ISA "tanh", "ex2", "rcp")."""
    x = np.linspace(-9, 9, 4001, dtype=np.float32)
    exact = np.tanh(x.astype(np.float64))
    nz = exact != 0
    for edge in (-1, 0, 1):
        t = nm.approx_edge("tanh", nm.tanh_approx_f32(x), edge).astype(np.float64)
        assert (np.abs(t - exact)[nz] / np.abs(exact[nz]) <= 2.0 ** -11).all()
    for op, model, ulps in (("ex2", nm.ex2_approx_f32, 2), ("rcp", nm.rcp_approx_f32, 1)):
        m = model(x[x != 0])
        for edge in (-1, 1):
            e = nm.approx_edge(op, m, edge)
            steps = np.abs(e.view(np.int32).astype(np.int64) - m.view(np.int32).astype(np.int64))
            assert (steps == ulps).all() and (np.sign(e - m) == edge).all()


def test_e4m3_rounding_is_nearest_even_saturating():
    bits = nm.f32_to_e4m3_bits(np.array([0.0, 1.0, 448.0, 464.0, 1e9, -1e9, np.inf, np.nan, 1.0625, 1.1875, -0.0],
                                        dtype=np.float32))
    # 464 (halfway 448..480) and beyond saturate to 448; 1.0625 ties to 1.0 (even), 1.1875 to 1.25
    assert bits.tolist() == [0x00, 0x38, 0x7E, 0x7E, 0x7E, 0xFE, 0x7E, 0x7F, 0x38, 0x3A, 0x80]


# ------------------------------------------------------------------ planted bugs in the emitted PTX


def _bias_by_row(text: str) -> str:
    """The column bias's element index computed from the tile's first row instead of its first column."""
    return re.sub(r"(// LdEpilogue ep_bias\[0:2\][^\n]*\n(?:[^\n]*\n){2}\s*add\.u32 %x\d+, )%n_col", r"\1%m_row", text,
                  count=1)


def _residual_pitch_n(text: str) -> str:
    """A swap-AB kernel's residual element at ``(col + j) * n + row``: the pitch of the kernel's accumulator, not of
    the caller's D (``m``)."""
    head = text.index("// LdEpilogue ep_residual")
    body = text[head:text.index("// ", head + 3)]
    return text.replace(body, body.replace(", %m, ", ", %n, "), 1)


def _swap_bias_by_col(text: str) -> str:
    """A swap-AB kernel's ``bias[col]`` (the caller's column: the accumulator's row) indexed by the accumulator's
    column (the caller's row)."""
    return re.sub(r"(// LdEpilogue ep_bias\[0\][^\n]*\n(?:\s*[^/\s][^\n]*\n)*?\s*mul\.wide\.u32 %xd\d+, )%x\d+",
                  r"\1%n_col", text, count=1)


#: (case, pattern, replacement (or a function of the text), what the failure message holds[, shape]); every match
#: replaced; the shape "odd" sweeps at an odd N (the per-element paths)
PLANTED = [
    # casts: rounding modifier, satfinite, operand order
    ("fp16_out", r"cvt\.rn\.f16x2\.f32", "cvt.rz.f16x2.f32", "PTX != IR"),
    ("gelu_tanh", r"cvt\.rn\.bf16x2\.f32", "cvt.rm.bf16x2.f32", "PTX != IR"),
    ("e4m3_block_amax", r"cvt\.rn\.satfinite\.e4m3x2", "cvt.rn.e4m3x2", "requires .satfinite"),
    ("e4m3_block_amax", r"cvt\.rn\.satfinite\.e4m3x2\.f32 (%\w+), (%\w+), (%\w+);",
     r"cvt.rn.satfinite.e4m3x2.f32 \1, \3, \2;", "'e4m3', 'acc0', 0, "),
    ("fp16_out", r"cvt\.f32\.f16", "cvt.f32.bf16", "PTX != IR"),  # the residual widened as the wrong type
    # approximate instructions and the arithmetic around them
    ("gelu_tanh", r"tanh\.approx\.f32 (%\w+), (%\w+);", r"mov.b32 \1, \2;", "PTX != IR"),
    ("gelu_erf", r"setp\.lt\.f32", "setp.gt.f32", "PTX != IR"),
    ("gelu_erf", r"ex2\.approx\.ftz\.f32 (%\w+), (%\w+);", r"mov.b32 \1, \2;", "PTX != IR"),
    ("silu_mul_dual", r"rcp\.approx\.ftz\.f32 (%\w+), (%\w+);", r"mov.b32 \1, \2;", "PTX != IR"),
    ("clamp_relu", r"min\.f32", "max.f32", "PTX != IR"),
    ("clamp_relu", r"max\.f32 (%\w+), (%\w+), 0f00000000;", r"min.f32 \1, \2, 0f00000000;", "PTX != IR"),
    ("gelu_tanh", r"mul\.f32 (%acc0_\d+), (%x\d+), %epi_scale;", r"mov.b32 \1, \2;", "PTX != IR"),  # scale dropped
    # block scale and amax
    ("e4m3_block_amax", r"div\.rn\.f32", "div.rz.f32", "'st.global.f32'"),
    ("e4m3_block_amax", r"selp\.f32 (%ep_bsc_\d+), 0f3F800000, (%ep_bsc_\d+), ", r"selp.f32 \1, \2, 0f3F800000, ",
     "'st.global.f32'"),  # the scale 1 where amax is nonzero
    ("e4m3_block_amax", r"red\.relaxed\.gpu\.global\.max", "red.relaxed.gpu.global.add",
     "'red.global', 'relaxed', 'gpu', 'add'"),
    ("e4m3_block_amax", r"red\.relaxed\.gpu\.global\.max", "red.relaxed.cta.global.max",
     "'red.global', 'relaxed', 'cta', 'max'"),
    ("e4m3_block_amax", r"red\.relaxed\.gpu\.global\.max", "red.release.gpu.global.max", "'red.global', 'release'"),
    ("e4m3_block_amax", r"(shfl\.sync\.bfly\.b32 %\w+, %ep_am_am_0, )2,", r"\g<1>4,",
     "'red.global', 'relaxed', 'gpu', 'max'"),  # the quad's butterfly crosses into the next row's quad
    ("e4m3_tensor_amax", r"(shfl\.sync\.bfly\.b32 %\w+, %ep_am_am_0, 1, 31, -1;\s*)max\.f32", r"\1min.f32",
     "'red.global'"),
    # operand loads and stores: addresses
    ("gelu_tanh", _bias_by_row, None, "('ld.global.nc', 'epi_bias', "),
    ("residual_staged", r"ld\.global\.nc\.f32 (%\w+), \[(%\w+)\];", r"ld.global.nc.f32 \1, [\2+4];",
     "('ld.global.nc', 'epi_scale', "),
    ("e4m3_block_amax", r"(@%p\d+ st\.global\.b16 \[%xd\d+)\]", r"\1+2]", "'st.global'"),
    # swap-AB: the residual read transposed (pitch m), the column bias one value per accumulator row
    ("swap_ab", _residual_pitch_n, None, "('ld.global.nc', 'epi_residual', "),
    ("swap_ab", _swap_bias_by_col, None, "('ld.global.nc', 'epi_bias', "),
    # the per-element paths (N odd)
    ("e4m3_block_amax", r"st\.global\.b8 \[(%\w+)\+1\]", r"st.global.b8 [\1]", "'st.global'", "odd"),
    ("gelu_tanh", r"cvt\.rn\.bf16\.f32", "cvt.rz.bf16.f32", "'st.global'", "odd"),
    ("fp16_out", r"cvt\.rn\.f16\.f32", "cvt.rm.f16.f32", "'f16'", "odd"),
]


def _planted_id(bug) -> str:
    name, pattern, repl = bug[:3]
    what = pattern.__name__.strip("_") if callable(pattern) else re.sub(r"[^\w.]+", "_", (repl or "").split(" ")[0])
    return f"{name}-{what}" + ("-odd_n" if bug[4:] else "")


@pytest.mark.parametrize("bug", PLANTED, ids=[_planted_id(b) for b in PLANTED])
def test_planted_epilogue_bug_is_caught(bug):
    name, pattern, repl, expect = bug[:4]
    kernel, text, _ = built(name)
    bad = pattern(text) if callable(pattern) else re.sub(pattern, repl, text)
    assert bad != text, f"{pattern} matches nothing in {name}"
    msg = D.sweep_threads(kernel, bad, D.default_launches(kernel, odd_n(kernel) if bug[4:] else None))
    assert msg is not None, f"{bug} not caught"
    assert expect in msg, msg


def test_red_without_qualifiers_is_the_same_reduction():
    """``red.global.max.u32`` means ``.relaxed.gpu`` (PTX ISA "red": the defaults): the differential compares the
    reduction by meaning and accepts it."""
    kernel, text, _ = built("e4m3_block_amax")
    same = text.replace("red.relaxed.gpu.global.max", "red.global.max")
    assert same != text and D.sweep_threads(kernel, same) is None


@pytest.mark.slow
@pytest.mark.parametrize("edge", [0, -1, 1], ids=["model", "low", "high"])
def test_every_simulated_expression(edge):
    """The simulator's expression tables (each op; each output beside D) through the differential, with the
    approximate instructions by their model and at both edges (e4m3 outputs by the model only: see APPROX_CASES)."""
    from tests.check.test_epilogue_sim import OPS, OUTPUTS

    for expr in OPS + OUTPUTS:
        if edge and "e4m3" in expr:
            continue
        changes = WIDE if expr in OUTPUTS else SMALL
        kernel = build_kernel(make_plan(load_config("h100_128x128").replace(**{**changes, "epilogue.expr": expr})))
        assert D.sweep_threads(kernel, kernel_ptx(kernel), approx=edge) is None, expr
