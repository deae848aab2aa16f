"""What the emitted PTX computes, checked by the differential: f32 arithmetic and ``cvt`` rounding bit-exactly,
vector-access alignment, memory-order qualifiers, and the instruction forms and kernel directives the IR fixes.

Each class has planted bugs: the freshly emitted PTX of a shipped config (an sm_90a and an sm_100a one where the
instruction exists; split-K and stmatrix variants where only they hold it) with one instruction's text changed,
which still assembles; the differential must fail and name what differs.  The unmodified PTX of every shipped
config passes (test_planted_emitter.test_unpatched_emitter_passes; drawn cases in
test_ptx_vs_ir.test_ptx_effects_equal_ir_effects).
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import emitters.core as core
from ptxgen.build import build
from ptxgen.check import numerics as nm
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import default_launches, sweep_threads
from tests.check.ptx.test_ptx_vs_ir import SPLIT_K, STMATRIX, variant_config


@functools.cache
def emitted(name: str):
    """(kernel, PTX text) of a shipped config or a variant name (``split-K``, ``stmatrix``), emitted now."""
    config = {"split-K": lambda: variant_config(*SPLIT_K[0]), "stmatrix": lambda: variant_config(*STMATRIX[0])}
    res = build(config[name]() if name in config else name)
    return res.kernel, res.ptx


def differential(kernel, text: str, shape: tuple[int, int, int] | None = None) -> str | None:
    """The differential over the default threads of ``text`` (at ``shape``, default the sweep's); an uninterpretable
    form is a failure too."""
    try:
        prog = ptxinterp.parse(text)
    except ptxinterp.PtxInterpError as exc:
        return f"PTX cannot be interpreted: {exc}"
    return sweep_threads(kernel, prog, default_launches(kernel, shape))


@functools.cache
def unmodified_differential(name: str, shape: tuple[int, int, int] | None) -> str | None:
    """:func:`differential` of :func:`emitted` ``name`` as emitted, once per config and shape (the planted bugs of a
    config share it)."""
    kernel, text = emitted(name)
    return differential(kernel, text, shape)


def _plus(k: int):
    return lambda m: f"{m.group(1)}{int(m.group(2)) + k};"


# (class, config, pattern, replacement, what the failure names): the first match replaced; a cvt's every match
PLANTED = [
    # (a) f32 arithmetic of the SwiGLU epilogue and cvt rounding, bit-exact
    ("f32", "dual_sm100_256x128", r"mul\.f32 (%x\d+), (%v_0), (%x\d+);", r"add.f32 \1, \2, \3;", "('v', 0, "),
    ("f32", "dual_h100_128x128", r"add\.f32 (%x\d+), (%x\d+), 0f3F800000;", r"sub.f32 \1, 0f3F800000, \2;",
     "('acc0', 0, "),
    ("f32", "dual_h100_128x128", r"rcp\.approx\.ftz\.f32 (%x\d+), (%x\d+);", r"ex2.approx.ftz.f32 \1, \2;",
     "('acc0', 0, "),
    ("cvt", "level9", r"cvt\.rn\.bf16x2", "cvt.rz.bf16x2", "st.shared"),
    ("cvt", "dual_sm100_256x128", r"cvt\.rn\.bf16x2", "cvt.rp.bf16x2", "st.shared"),
    ("cvt", "nvfp4_dual_128x128", r"cvt\.rn\.f16x2", "cvt.rm.f16x2", "'f16', 'v', "),
    ("cvt", "h100_128x256", r"cvt\.rn\.bf16x2", "cvt.rz.bf16x2", "stmatrix"),
    ("cvt", "h100_128x128", r"cvt\.rn\.bf16x2", "cvt.rm.bf16x2", "st.global"),
    # the per-element path, taken where N is odd (below the launch rule's multiple of 8; the PTX still stores right)
    ("cvt", "h100_128x128", r"cvt\.rn\.bf16\.f32", "cvt.rz.bf16.f32", "'st.global', ", (253, 249, 376)),
    # (b) vector and scalar accesses naturally aligned
    ("align", "level9", r"st\.shared\.v4\.b32 \[(%\w+)\]", r"st.shared.v4.b32 [\1+8]", "st.shared.v4.b32"),
    ("align", "split-K", r"st\.global\.v4\.f32 \[(%\w+)\]", r"st.global.v4.f32 [\1+4]", "st.global.v4.f32"),
    ("align", "stmatrix", r"stmatrix(\S+) \[(%\w+)\]", r"stmatrix\1 [\2+8]", "stmatrix"),
    # (c) memory-order semantics and scopes
    ("order", "level9", r"barrier\.cluster\.arrive\.release", "barrier.cluster.arrive.relaxed", "barrier.cluster.arrive"),
    ("order", "h100_128x256", r"barrier\.cluster\.arrive\.release", "barrier.cluster.arrive.relaxed",
     "barrier.cluster.arrive"),
    ("order", "level9", r"mbarrier\.try_wait\.parity\.shared", "mbarrier.try_wait.parity.relaxed.cta.shared",
     "'mbarrier.try_wait', "),
    ("order", "h100_128x256", r"mbarrier\.try_wait\.parity\.shared", "mbarrier.try_wait.parity.relaxed.cta.shared",
     "'mbarrier.try_wait', "),
    ("order", "level9", r"mbarrier\.arrive\.release\.cluster", "mbarrier.arrive.relaxed.cluster", "'mbarrier.arrive', "),
    ("order", "level9", r"fence\.proxy\.async\.shared::cta", "fence.proxy.async.global", "'fence.proxy.async', 'global'"),
    ("order", "h100_128x256", r"fence\.proxy\.async\.shared::cta", "fence.proxy.async.global",
     "'fence.proxy.async', 'global'"),
    ("order", "split-K", r"atom\.acq_rel\.gpu", "atom.relaxed.gpu", "'atom.add', 'relaxed'"),
    ("order", "split-K", r"atom\.acq_rel\.gpu", "atom.release.gpu", "'atom.add', 'release'"),
    # (d) instruction forms and directives the IR fixes
    ("form", "level9", r"tcgen05\.ld\.sync\.aligned\.32x32b\.x32", "tcgen05.ld.sync.aligned.16x256b.x8", "'16x256b'"),
    ("form", "level9", r"kind::f16", "kind::tf32", "'tcgen05.mma', 2, 'tf32'"),
    ("form", "h100_128x256", r"\.f32\.bf16\.bf16", ".f32.f16.f16", "'f32.f16.f16'"),
    ("form", "level9", r"(elect\.sync _\|%p\d+), 0xffffffff", r"\1, 0x0000ffff", "elect.sync"),
    ("form", "h100_128x256", r"(elect\.sync _\|%p\d+), 0xffffffff", r"\1, 0xfffffffe", "elect.sync"),
    ("form", "h100_128x128_pp", r"\.maxnreg \d+\n", "", ".maxnreg (absent)"),
    ("form", "level9", r"\.reqnctapercluster 2", ".reqnctapercluster 1", ".reqnctapercluster 1 1 1 != IR 2 1 1"),
    ("form", "h100_128x256", r"\.reqnctapercluster 2", ".reqnctapercluster 1", ".reqnctapercluster 1 1 1"),
    ("form", "dual_sm100_256x128", r"\.reqntid (\d+)", ".reqntid 128", ".reqntid 128 1 1"),
    ("form", "h100_128x192", r"(mul\.hi\.u32 %\w+, %\w+, )(\d+);", _plus(1), "no exact u32 division"),
    ("form", "dual_sm100_256x128", r"(mul\.hi\.u32 %\w+, %\w+, )(\d+);", _plus(1), "no exact u32 division"),
    ("form", "dual_sm100_256x128", r"(mul\.hi\.u32 %\w+, %\w+, )(\d+);", _plus(-1), "no exact u32 division"),
]


@pytest.mark.parametrize("cls,config,pattern,replacement,names,shape", [(*p, None)[:6] for p in PLANTED],
                         ids=[f"{p[0]}-{p[1]}-{i}" for i, p in enumerate(PLANTED)])
def test_planted_ptx_change_fails_the_differential(cls, config, pattern, replacement, names, shape):
    kernel, text = emitted(config)
    planted, n = re.subn(pattern, replacement, text, count=0 if cls == "cvt" else 1)
    assert n >= 1, f"{pattern!r} not in {config}'s PTX: the planted bug is not planted"
    assert unmodified_differential(config, shape) is None
    msg = differential(kernel, planted, shape)
    assert msg is not None, f"{config}: {pattern!r} -> {replacement!r} passed the differential"
    assert names in msg, msg


def test_a_dropped_default_qualifier_is_the_same_instruction():
    """``barrier.cluster.arrive`` is ``.release`` and ``wait`` is ``.acquire`` without the qualifier (PTX ISA
    "barrier.cluster"): the same semantics, so the differential passes it (only a golden would see the text)."""
    kernel, text = emitted("level9")
    same = text.replace("barrier.cluster.arrive.release", "barrier.cluster.arrive").replace(
        "barrier.cluster.wait.acquire", "barrier.cluster.wait")
    assert same != text and differential(kernel, same) is None


# ------------------------------------------------------------------ the numerics, one by one


def test_cvt_rounding_modes_bit_exact():
    """f32 -> bf16/f16 under each modifier, against hand-derived bit patterns (PTX ISA "cvt")."""
    x = np.array([1.0048828, -1.0048828, 3.4e38, 1e-45, -1e-45, 1.5], dtype=np.float32)
    want = {"rn": [0x3F81, 0xBF81, 0x7F80, 0x0000, 0x8000, 0x3FC0], "rz": [0x3F80, 0xBF80, 0x7F7F, 0x0000, 0x8000, 0x3FC0],
            "rm": [0x3F80, 0xBF81, 0x7F7F, 0x0000, 0x8001, 0x3FC0], "rp": [0x3F81, 0xBF80, 0x7F80, 0x0001, 0x8000, 0x3FC0]}
    for rounding, bits in want.items():
        assert nm.f32_to_16_bits(x, "bf16", rounding).tolist() == bits, rounding
    assert np.array_equal(nm.f32_to_16_bits(x, "bf16"), nm.f32_to_bf16_bits(x))  # rn is the one bf16 rounding
    assert nm.f32_to_16_bits(np.float32(3.4e38), "f16", "rn", satfinite=True) == 0x7BFF
    assert nm.f32_to_16_bits(np.float32(-3.4e38), "bf16", "rn", satfinite=True) == 0xFF7F
    assert nm.f32_to_16_bits(np.float32(1 + 2 ** -11 + 2 ** -20), "f16", "rz") == 0x3C00


def _run(body: str, regs: str = ".reg .b32 %r<8>; .reg .f32 %f<8>; .reg .pred %p<2>;") -> list:
    text = f"""
    .extern .shared .align 1024 .b8 smem[];
    .visible .entry t() {{
        {regs}
        mov.u32 %r0, smem;
        {body}
        ret;
    }}"""
    return ptxinterp.run_thread(ptxinterp.parse(text), tid=0, ctaid=0, nctaid=1, ntid=32, params={}, smem_base=0x400)


def _f(v: float) -> str:
    return f"0f{int(np.float32(v).view(np.uint32)):08X}"


def test_interpreter_f32_arithmetic_and_cvt_packing():
    """add/sub/mul/fma/neg/min/max/selp and rounding modifiers, exact; ``cvt.rn.bf16x2.f32 d, a, b`` puts ``a`` in
    the upper half (memory order: b's element first)."""
    third = _f(1 / 3)
    eff = _run(f"""
        mul.rn.f32 %f1, {third}, {_f(3.0)};
        mul.rp.f32 %f2, {third}, {_f(3.0)};
        sub.f32 %f3, {_f(1.0)}, %f2;
        fma.rn.f32 %f4, {third}, {_f(3.0)}, {_f(-1.0)};
        neg.f32 %f5, %f4;
        max.f32 %f6, %f5, {_f(-2.0)};
        setp.eq.u32 %p1, %r0, 0x400;
        selp.f32 %f7, %f6, %f1, %p1;
        st.shared.v4.f32 [%r0], {{%f1, %f2, %f3, %f7}};
        cvt.rn.bf16x2.f32 %r1, %f2, %f1;
        st.shared.b32 [%r0+16], %r1;""")
    f1, f2, f3, f7 = (e[-1] for e in eff[0][2])
    # fl(1/3) * 3 = 1 + 2^-25 exactly: to nearest 1.0, toward +inf 1 + 2^-23; 1 - that = -2^-23
    assert f1 == 0x3F800000 and f2 == 0x3F800001 and f3 == 0xB4000000
    assert f7 == 0xB3000000  # fma: the unrounded product, 2^-25; negated; max with -2
    assert eff[1][2] == (("%f1", 0x3F80), ("%f2", 0x3F80))  # the low half is the 2nd source, in memory first
    with pytest.raises(ptxinterp.PtxInterpError, match="not an f32 value"):
        _run("add.f32 %f1, %f2, %f3;")


def test_ex2_rcp_models_shared_with_the_walker():
    """The SiluMul the walker computes is the emitted chain under the numerics models, bit for bit."""
    x = ptxinterp.opaque_f32("reg", "g", np.arange(64), 0)
    t = nm.ex2_approx_f32((x * np.float32(-1.4426950408889634)).astype(np.float32))
    s = (x * nm.rcp_approx_f32((np.float32(1) + t).astype(np.float32))).astype(np.float32)
    assert np.allclose(s, x / (1 + np.exp(-x.astype(np.float64))), rtol=2e-7)
    assert nm.ex2_approx_f32(np.float32(1e-40)) == 1 and nm.rcp_approx_f32(np.float32(1e-40)) == np.inf  # ftz


def test_misaligned_vector_access_is_an_error():
    _run("st.shared.v2.b32 [%r0+8], {%r0, %r0};")
    with pytest.raises(ptxinterp.PtxInterpError, match="not aligned to the 16-byte access"):
        _run("st.shared.v4.b32 [%r0+8], {%r0, %r0, %r0, %r0};")


def test_exact_udiv_matches_the_emitters_magic_numbers():
    """Every multiplier ``udiv_magic`` gives divides exactly; one more or one less does not (for these divisors)."""
    divisors = [d for d in range(3, 400) if core.udiv_magic(d) is not None and d & (d - 1)]
    assert len(divisors) > 200
    for d in divisors:
        m, s = core.udiv_magic(d)
        assert ptxinterp.exact_udiv(m, s) == d
        assert ptxinterp.exact_udiv(m + 1, s) is None and ptxinterp.exact_udiv(m - 1, s) is None
        n = np.arange(0, 1 << 32, 1 << 20 | 1, dtype=np.uint64)
        assert np.array_equal((n * np.uint64(m)) >> np.uint64(32 + s), n // np.uint64(d))


def test_check_ptx_cli_reports_an_inexact_division(capsys, monkeypatch):
    """``ptxgen check --ptx`` with a constant-division multiplier one too large: one line naming the instruction."""
    from ptxgen import cli

    magic = core.udiv_magic
    monkeypatch.setattr(core, "udiv_magic", lambda d: None if magic(d) is None else (magic(d)[0] + 1, magic(d)[1]))
    rc = cli.main(["check", "--ptx", "--config", "h100_128x192"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err.startswith("h100_128x192: PTX cannot be interpreted: line ") and "mul.hi.u32" in err
    assert "no exact u32 division" in err
