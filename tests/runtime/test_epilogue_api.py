"""The fused-epilogue call's rules, checked on the CPU: every bad operand raises one line before any launch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import ptxgen  # noqa: E402
from ptxgen.errors import ConfigError, ShapeError  # noqa: E402
from ptxgen.runtime.api import check_epilogue_operands, epilogue_expr  # noqa: E402

M, N, K = 64, 48, 32


def _check(expr, operands, kernel="gemm", out=None):
    e, _ = epilogue_expr(expr, kernel)
    a = torch.zeros(M, K, dtype=torch.bfloat16)
    check_epilogue_operands(e, operands, M, N, a, out, require_cuda=False)


def bf(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("expr, operands, message", [
    ("gelu(acc + bias[col])", {}, r"^bias: missing: epilogue 'gelu\(acc \+ bias\[col\]\)' reads bias\[col\]; pass bias=\.\.\.$"),
    ("acc + bias[col]", {"bias": bf(N), "extra": 1.0}, r"^extra: not an operand of epilogue 'acc \+ bias\[col\]' \(its operands: bias\)$"),
    ("acc + bias[col]", {"bias": bf(M)}, r"^bias: shape=\(64,\): bias\[col\] must be \[N\] = \(48,\)$"),
    ("acc + bias[row]", {"bias": bf(N)}, r"^bias: shape=\(48,\): bias\[row\] must be \[M\] = \(64,\)$"),
    ("acc + residual", {"residual": bf(M, N - 1)}, r"^residual: shape=\(64, 47\)"),
    ("acc + residual", {"residual": torch.zeros(M, N)}, r"^residual: dtype=torch.float32: residual must be torch.bfloat16$"),
    ("fp16(acc + residual)", {"residual": bf(M, N)}, r"^residual: dtype=torch.bfloat16: residual must be torch.float16$"),
    ("acc * scale[row]", {"scale": bf(M)}, r"^scale: dtype=torch.bfloat16: scale\[row\] must be torch.float32$"),
    ("acc * scale", {"scale": torch.zeros(1)}, r"^scale: got Tensor: a scalar scale is a Python float$"),
    ("acc * scale", {"scale": True}, r"^scale: got bool"),
    ("acc + bias[col]", {"bias": [0.0] * N}, r"^bias: got list: must be a torch.Tensor \[N\]$"),
])
def test_operand_errors(expr, operands, message):
    with pytest.raises(ShapeError, match=message):
        _check(expr, operands)


def test_out_overlapping_an_operand():
    residual = bf(M, N)
    with pytest.raises(ShapeError, match=r"^out: memory overlaps residual"):
        _check("acc + residual", {"residual": residual}, out=residual)


def test_good_operands_pass():
    _check('acc * scale("s")[row] + bias[col] + residual * scale', {
        "s": torch.zeros(M), "bias": bf(N), "residual": bf(M, N).t().contiguous().t(), "scale": 0.5})


def test_unknown_op_and_missing_expression_before_anything():
    a, b, out = bf(M, K), bf(N, K), torch.full((M, N), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ConfigError, match=r"^epilogue.expr='erf\(acc\)': unknown op 'erf'"):
        ptxgen.gemm(a, b, out, epilogue="erf(acc)")
    with pytest.raises(ConfigError, match=r"acc1 does not exist for kernel=gemm"):
        ptxgen.gemm(a, b, out, epilogue="silu(acc1) * acc2")
    with pytest.raises(ShapeError, match=r"^bias: operands given without an epilogue expression"):
        ptxgen.gemm(a, b, out, bias=bf(N))
    with pytest.raises(ShapeError, match=r"^a: device=cpu: must be a CUDA tensor$"):
        ptxgen.gemm(a, b, out, epilogue="acc + bias[col]", bias=bf(N))
    with pytest.raises(ConfigError, match=r"acc does not exist for kernel=dual_gemm"):
        ptxgen.dual_gemm(a, b, b, out, epilogue="relu(acc)")
    assert bool((out == 7).all())


# ------------------------------------------------------------------ outputs beside D

def _outputs(expr, given, out=None, inputs=()):
    from ptxgen.runtime.api import check_epilogue_outputs

    e, _ = epilogue_expr(expr, "gemm")
    a = torch.zeros(M, K, dtype=torch.bfloat16)
    return check_epilogue_outputs(e, given, M, N, a, out, inputs, require_cuda=False)


@pytest.mark.parametrize("expr, given, message", [
    ('e4m3(acc, "s")', {"s": torch.zeros(M, 2)}, r"^s: shape=\(64, 2\): the block_scale output must be \(64, 1\)$"),
    ('e4m3(acc, "s")', {"s": torch.zeros(M, 1, dtype=torch.float16)}, r"^s: dtype=torch.float16: the block_scale output must be torch.float32$"),
    ('e4m3(acc, "s")', {"s": [0.0]}, r"^s: got list"),
    ('e4m3(amax("am", acc) * 2)', {"am": torch.zeros(N)}, r"^am: shape=\(48,\): the amax output along row must be \(64,\)$"),
    ('e4m3(amax("am", acc, "tensor"))', {"am": torch.zeros(2)}, r"^am: shape=\(2,\): the amax output along tensor must be \(1,\)$"),
    ('relu(store("pre", acc))', {"pre": torch.zeros(M, N)}, r"^pre: dtype=torch.float32: the store output must be torch.bfloat16$"),
    ('fp16(relu(store("pre", acc)))', {"pre": bf(M, N)}, r"^pre: dtype=torch.bfloat16: the store output must be torch.float16$"),
    ('relu(store("pre", acc))', {"pre": bf(N, M).t()}, r"^pre: strides=\(1, 64\): an output is written in place"),
    ('relu(store("pre", acc))', {"pre": bf(M * N + 1)[1:].view(M, N)}, r"^pre: strides=.*4-byte aligned$"),
])
def test_output_errors(expr, given, message):
    with pytest.raises(ShapeError, match=message):
        _outputs(expr, given)


def test_output_overlaps():
    pre = bf(M, N)
    with pytest.raises(ShapeError, match=r"^pre: memory overlaps out"):
        _outputs('relu(store("pre", acc))', {"pre": pre}, out=pre)
    r = bf(M, N)
    with pytest.raises(ShapeError, match=r"^pre: memory overlaps residual"):
        _outputs('relu(store("pre", acc)) + residual', {"pre": r}, inputs=(("residual", r),))


def test_outputs_are_operands_by_name():
    _check('e4m3(amax("am", acc) * scale[row], "s")', {"scale": torch.zeros(M), "am": torch.zeros(M)})
    assert _outputs('e4m3(acc, "s")', {}) == {"s": None}
    with pytest.raises(ShapeError, match=r"^scale: dtype=torch.bfloat16"):  # an e4m3 D's 16-bit operands: bf16
        _check('e4m3(acc * scale[row])', {"scale": bf(M)})
    _check('e4m3(acc + residual)', {"residual": bf(M, N)})


def test_language_of_outputs():
    import ptxgen.epi as epi

    e = epi.parse('e4m3(store("pre", amax("am", acc, "tensor") + bias[col]), "s")')
    assert epi.outputs(e) == (("s", "block_scale", "block"), ("pre", "store", "tile"), ("am", "amax", "tensor"))
    assert epi.parse(str(e)) == e and epi.e4m3(epi.store("pre", epi.amax("am", epi.acc, "tensor") + epi.bias()), "s") == e
    assert str(epi.untap(e)) == 'e4m3(acc + bias[col], "s")'
    for text, msg in [('e4m3(acc, s)', r"the name is a string in quotes"), ('bf16(acc, "s")', r"takes one expression"),
                      ('store(acc)', r'store takes store\("name", x\)'), ('amax("a", acc, "col")', r"along one of"),
                      ('store("bias", acc) + bias[col]', r"name 'bias' is used twice"),
                      ('relu(e4m3(acc))', r"may only wrap the whole expression")]:
        with pytest.raises(ConfigError, match=msg):
            epi.parse(text)


def test_epilogue_configs_bench_candidates():
    """bench/epilogue_configs.py: on a 132-SM H100 the chooser runs every case of its shapes on h100_128x256 (no
    epilogue fallback), each candidate takes each expression, and the residual is staged through the CD ring on
    every candidate but the overlapped epilogue's (docs/performance.md, "Which config each case runs")."""
    from ptxgen.plan import make_plan
    from ptxgen.runtime.api import _expr_config, epilogue_config, _GEMM
    from ptxgen.runtime.choose import choose_cached
    from tests.helpers.runtime import bench_module

    mod = bench_module("epilogue_configs")
    for m, n, k in mod.SHAPES:
        name, _ = choose_cached(m, n, k, (9, 0), 132)
        assert name == "h100_128x256"
        for expr, _ in mod.EXPRS.values():
            if expr is not None:
                assert epilogue_config(_GEMM, name, epilogue_expr(expr, "gemm")[0], chosen=True).name == name
    staged = {}
    for label, cfg in mod.CANDIDATES.items():
        for expr, _ in mod.EXPRS.values():
            if expr is not None:
                plan = make_plan(_expr_config(cfg or "h100_128x256", epilogue_expr(expr, "gemm")[0]))
                if "residual" in expr:
                    staged[label] = plan.epilogue.staged is not None
    assert staged == {label: label != "128x256_ov" for label in mod.CANDIDATES}


#: the four expressions of the fused-epilogue targets, in the bench's text (bench/epilogue_bench.py)
TARGET_EXPRS = ("gelu(acc + bias[col])", "acc + residual", 'e4m3(amax("amax", acc) * scale[row])',
                'e4m3(acc, "d_scale")')


def _fused_pick(m, n, k, text):
    """The config a fused GEMM call without ``config`` runs on a 132-SM H100 (the path of ``api.fused``)."""
    from types import SimpleNamespace

    from ptxgen.runtime.api import _GEMM, fused_config
    from ptxgen.runtime.choose import choose_cached

    info = SimpleNamespace(capability=(9, 0), sm_count=132, name="NVIDIA H100 80GB HBM3")
    chosen, _ = choose_cached(m, n, k, (9, 0), 132, "gemm", "")
    return chosen, fused_config(_GEMM, None, epilogue_expr(text, "gemm")[0], m, n, k, info)


def test_fused_call_takes_the_ranking_where_the_choice_cannot_take_the_expression():
    """Where the shape's choice cannot take the expression (a swap-AB tile takes no e4m3 D and no output beside D; a
    1 x 128 block scale needs block_n % 128 == 0), a fused call runs the cost model's first config that can, not the
    fixed 128x128 fallback; where it can, the choice itself (on every shape of the suite's report half), a swap-AB
    choice included for the elementwise expressions."""
    from ptxgen.config import load_config
    from ptxgen.runtime.api import EPILOGUE_FALLBACK_CONFIG
    from ptxgen.suites import load

    moved, swap_kept = [], []
    for s in load("gemm").half("report"):
        for text in TARGET_EXPRS:
            chosen, cfg = _fused_pick(*s.mnk, text)
            c = load_config(chosen)
            e4m3 = text.startswith("e4m3")
            takes = not (c.schedule.swap_ab and e4m3) and ("d_scale" not in text or c.tile.block_n % 128 == 0)
            assert (cfg.name == chosen) == takes, (s.mnk, text, chosen, cfg.name)
            assert cfg.epilogue.expr and not (cfg.schedule.swap_ab and e4m3)
            if not takes:
                moved.append((s.mnk, text, cfg.name))
            elif c.schedule.swap_ab:
                swap_kept.append((s.mnk, text))
    swapped = [(mnk, name) for mnk, text, name in moved if mnk[0] <= 16]
    assert len(swapped) >= 5 * 2  # the five M <= 16 shapes take swap-AB: the two e4m3 expressions move
    assert len(swap_kept) >= 5 * 2  # ... and the two elementwise ones run on it
    assert EPILOGUE_FALLBACK_CONFIG not in {name for _, name in swapped}
    # M = 1: the swap-AB tile's 16 columns; an e4m3 D moves to one 64-row m-block (not the fallback's 128 rows); a
    # block scale on a 64-column tile moves to 128 columns
    assert load_config(_fused_pick(1, 6144, 4096, "acc + residual")[1].name).schedule.swap_ab
    assert load_config(_fused_pick(1, 6144, 4096, TARGET_EXPRS[2])[1].name).tile.block_m == 64
    assert load_config(_fused_pick(64, 4608, 3584, 'e4m3(acc, "d_scale")')[1].name).tile.block_n % 128 == 0


def test_fused_call_ranking_is_not_asked_when_the_choice_takes_it_nor_for_a_callers_config():
    from ptxgen.runtime.api import _GEMM, epilogue_config

    def never():
        raise AssertionError("ranked() called")

    e = epilogue_expr("acc + residual", "gemm")[0]
    assert epilogue_config(_GEMM, "h100_128x256", e, chosen=True, ranked=never).name == "h100_128x256"
    assert epilogue_config(_GEMM, "h100_64x16_swap", e, chosen=True, ranked=never).name == "h100_64x16_swap"
    e4 = epilogue_expr(TARGET_EXPRS[2], "gemm")[0]
    with pytest.raises(ConfigError, match=r"swap_ab"):
        epilogue_config(_GEMM, "h100_64x16_swap", e4, chosen=False, ranked=never)
    # the ranking's configs that cannot take it are passed over; none that can: the family's fallback
    assert epilogue_config(_GEMM, "h100_64x16_swap", e4, chosen=True,
                           ranked=lambda: ["h100_64x32_swap", "h100_64x64"]).name == "h100_64x64"
    assert epilogue_config(_GEMM, "h100_64x16_swap", e4, chosen=True,
                           ranked=lambda: ["h100_64x32_swap"]).name == "h100_128x128"


def test_fused_fast_path_checks_what_the_signature_cannot_show():
    """A signature's fast path (:class:`_FusedFast`, CPU tensors, a stub call): each call's scalar bits and operand
    addresses are passed; an ``out`` overlapping an operand, or a scalar that is not a number, gives None (the full
    path then raises); a misaligned operand is copied; outputs beside D are allocated per call."""
    import struct

    from ptxgen.ir import epilogue as E
    from ptxgen.runtime.api import _GEMM, _fused_key, _FusedFast

    launched = []

    class Stub:
        def fused(self, a, bs, out, epi):
            launched.append(epi)
            return out

    m, n = 4, 8
    expr = epilogue_expr("acc * scale + residual + bias[col]", "gemm")[0]
    r, bias, out = bf(m, n), bf(n), bf(m, n)
    ops = {"scale": 0.5, "residual": r, "bias": bias}
    fast = _FusedFast(_GEMM, Stub(), expr, E.operands(expr), ops, out, m, n, "cpu")
    a, b = bf(m, 16), bf(n, 16)
    assert fast(a, (b,), out, ops) is out
    bits = dict(zip([o.name for o in E.operands(expr)], launched[-1]))
    assert bits == {"scale": struct.unpack("<I", struct.pack("<f", 0.5))[0], "residual": r.data_ptr(),
                    "bias": bias.data_ptr()}
    assert fast(a, (b,), out, {**ops, "scale": -2}) is out and struct.unpack("<f", struct.pack(
        "<I", dict(zip(bits, launched[-1]))["scale"]))[0] == -2.0
    count = len(launched)
    assert fast(a, (b,), r, ops) is None and fast(a, (b,), out, {**ops, "scale": True}) is None
    assert fast(a, (b,), out, {**ops, "scale": "1"}) is None and len(launched) == count  # nothing launched
    odd = bf(m * n + 1)[1:].view(m, n)  # 2 bytes past an aligned buffer: a tile's map needs 16
    fast(a, (b,), out, {**ops, "residual": odd})
    assert dict(zip(bits, launched[-1]))["residual"] not in (odd.data_ptr(), r.data_ptr())
    # outputs beside D: a new tensor per call
    expr2 = epilogue_expr('e4m3(amax("am", acc) * scale[row])', "gemm")[0]
    ops2 = {"scale": torch.ones(m)}
    fast2 = _FusedFast(_GEMM, Stub(), expr2, E.operands(expr2), ops2, None, m, n, "cpu")
    (_, am1), (_, am2) = fast2(a, (b,), None, ops2), fast2(a, (b,), None, ops2)
    assert am1.shape == (m,) and am1.data_ptr() != am2.data_ptr() and launched[-1][-1] == am2.data_ptr()
    # the key: None for a Config object or an unhashable expression; strides and scalar types tell signatures apart
    from ptxgen.config import load_config

    key = _fused_key(_GEMM, a, (b,), out, None, "acc + residual", {"residual": r})
    assert key == _fused_key(_GEMM, a, (b,), out, None, "acc + residual", {"residual": bf(m, n)})
    assert key != _fused_key(_GEMM, a, (b,), out, None, "acc + residual", {"residual": bf(n, m).T})
    assert _fused_key(_GEMM, a, (b,), out, load_config("h100_128x128"), "acc", {}) is None
    assert _fused_key(_GEMM, a, (b,), out, None, ["acc"], {}) is None
    assert (_fused_key(_GEMM, a, (b,), out, None, "acc * scale", {"scale": 1})
            != _fused_key(_GEMM, a, (b,), out, None, "acc * scale", {"scale": True}))
