"""Fused epilogues in the check wing: the simulator runs each op against the fp32 reference, the numerics against
float64 math within their stated bounds, and planted bugs (an unguarded operand load at a tail, a wrong constant,
a wrong approximation constant) are caught."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from ptxgen.builders.kernel import build_kernel
from ptxgen.check import epilogue as N
from ptxgen.check.sim import simulate
from ptxgen.check.verify import verify
from ptxgen.config import load_config
from ptxgen.errors import SimError, VerifyError
from ptxgen.ir import epilogue as E
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

SMALL = {"tile.block_m": 64, "tile.block_n": 32}  # one m64n32 wave: 16 fragment values per thread


def _plan(expr: str, config: str = "h100_128x128", **changes):
    cfg = load_config(config).replace(**{**SMALL, **changes, "epilogue.expr": expr})
    return make_plan(cfg)


def _run(plan, m=70, n=42, k=64, **kw):
    return simulate(build_kernel(plan), m, n, k, expr=plan.epilogue.expr, num_sms=2, **kw)


OPS = ["relu(acc)", "gelu(acc)", "gelu_erf(acc)", "silu(acc)", "sigmoid(acc)", "clamp(acc, -2, 3)", "-acc",
       "acc * bias[col]", "acc - bias[row]", "acc * scale", "acc * scale[row]", "acc + scale[col]", "acc + residual",
       "fp16(acc * 0.25 + residual)"]


@pytest.mark.parametrize("expr", OPS)
def test_each_op_matches_the_fp32_reference(expr):
    """M and N tails (70 x 42 over 64 x 32 tiles); direct stores."""
    r = _run(_plan(expr))
    assert r.rel_fro < 1e-2 and np.isfinite(r.d).all()


@pytest.mark.parametrize("store", [{"epilogue.store": "tma"}, {"epilogue.store": "tma", "epilogue.stmatrix": True}])
def test_tma_store_paths(store):
    _run(_plan("gelu(acc + bias[col]) * scale[row] + residual", **store), n=48)  # n % 8 == 0: the TMA branch


def test_dual_expression_and_verify():
    plan = _plan("sigmoid(acc1) * acc2 + bias[col]", "dual_h100_128x128", **{"mma.warpgroups": 1, "tile.block_n": 64})
    verify(build_kernel(plan))
    _run(plan)


def test_operands_given_explicitly():
    plan = _plan("acc * scale + bias[row]")
    m, n = 70, 42
    ops = {"scale": np.float32(0.0), "bias": np.arange(m, dtype=np.float32)}
    r = _run(plan, m, n, operands=ops)
    assert np.allclose(r.d, np.arange(m)[:, None] * np.ones((1, n)), rtol=1e-2)


def test_verifier_passes_guarded_loads():
    verify(build_kernel(_plan("acc * bias[row] + bias(\"c\")[col] + residual")))


# ------------------------------------------------------------------ planted bugs


def _unguard(kernel):
    return rewrite(kernel, lambda op: replace(op, guard=False) if isinstance(op, O.LdEpilogue) else None)


@pytest.mark.parametrize("expr, axis", [("acc + residual", "row"), ("acc * bias[row]", "row"), ("acc + bias[col]", "col")])
def test_planted_unguarded_operand_load(expr, axis):
    """The loads unguarded: at an M or N tail they read past the operand.  Rows: M below one m-block (above it the
    last tile is shifted to end at M, ``SchedulePlan.shift_last_m_block``); columns: N - block_n = 10 rounds up to
    a 16-column shift, so the last tile ends 6 columns past N."""
    plan = _plan(expr)
    bad = _unguard(build_kernel(plan))
    with pytest.raises(VerifyError, match=r"^epilogue operand load out of bounds: LdEpilogue .* \(unguarded\)"):
        verify(bad)
    m = 40 if axis == "row" else 70
    with pytest.raises(SimError, match=rf"^out of bounds: .*LdEpilogue .* outside D's {m} x 42"):
        simulate(bad, m, 42, 64, expr=plan.epilogue.expr, num_sms=2)


def test_planted_wrong_constant_in_the_ir():
    plan = _plan("acc * 2 + bias[col]")

    def wrong(op):
        if isinstance(op, O.EpilogueExpr):
            return replace(op, expr=E.bind(op.expr, lambda x: E.Num(2.5) if x == E.Num(2.0) else x))
    bad = rewrite(build_kernel(plan), wrong)
    assert bad != build_kernel(plan)
    with pytest.raises(SimError, match=r"^wrong result"):
        simulate(bad, 70, 42, 64, expr=plan.epilogue.expr, num_sms=2)


def test_planted_operand_swap():
    """The bias loaded along rows where the expression says columns."""
    plan = _plan("acc + bias[col]")

    def swap(op):
        if isinstance(op, O.LdEpilogue):
            return replace(op, layout="row", idx=(0,))
    with pytest.raises(SimError):
        simulate(rewrite(build_kernel(plan), swap), 40, 40, 64, expr=plan.epilogue.expr, num_sms=2)


# ------------------------------------------------------------------ the numerics against float64 math

X = np.linspace(-9, 9, 20001).astype(np.float32)
EXACT = {
    "relu": lambda x: max(x, 0.0),
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
    "silu": lambda x: x / (1 + math.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
}
#: max |error| / (|x| + 1) over X: the f32 evaluation (and for gelu_erf the A&S 7.1.26 erf, 1.5e-7)
BOUND = {"relu": 0.0, "sigmoid": 1e-6, "silu": 1e-6, "gelu": 1e-6, "gelu_erf": 3e-7}


def _max_err(op: str) -> float:
    got = N.apply(op, (), [X]).astype(np.float64)
    want = np.array([EXACT[op](float(x)) for x in X])
    return float(np.max(np.abs(got - want) / (np.abs(X) + 1)))


@pytest.mark.parametrize("op", sorted(EXACT))
def test_numerics_within_the_stated_bounds(op):
    assert _max_err(op) <= BOUND[op]


def test_planted_wrong_gelu_constant(monkeypatch):
    monkeypatch.setattr(N, "GELU_K3", np.float32(0.7978845608028654 * 0.047))
    assert _max_err("gelu") > 100 * BOUND["gelu"]


def test_planted_wrong_erf_coefficient(monkeypatch):
    monkeypatch.setattr(N, "ERF_A", (*N.ERF_A[:2], np.float32(1.43), *N.ERF_A[3:]))
    assert _max_err("gelu_erf") > 100 * BOUND["gelu_erf"]


def test_ir_effects_name_the_operand_loads():
    """The PTX differential's IR side: one ``ld.global.nc`` effect per operand element a thread loads inside D."""
    from ptxgen.check.ptx import diff as D
    from ptxgen.check.ptx.effects import LdGlobalNc

    plan = _plan("acc + bias[col]")
    kernel = build_kernel(plan)
    m, n = 70, 42
    grid = kernel.launch.grid.grid_x(m, n, 1)
    effects = D.ir_effects(kernel, D.Launch(m, n, 64, grid, grid - 1, 128 + 3))  # last tile, lane 3: cols 38.. off D
    loads = [e for e in effects if isinstance(e, LdGlobalNc)]
    assert loads and {e.param for e in loads} == {"epi_bias"}
    assert all(e.offset < 2 * n for e in loads)


# ------------------------------------------------------------------ outputs beside D: e4m3 D, block scales, amax, store

WIDE = {"tile.block_n": 128}  # one 1 x 128 scale block per tile row
OUTPUTS = ['e4m3(acc, "ds")', 'e4m3(gelu(acc + bias[col]) + residual, "ds")', 'e4m3(acc)',
           'e4m3(amax("am", acc) * scale[row])', 'e4m3(amax("am", acc - bias[row], "tensor") * scale)',
           'gelu(store("pre", acc + bias[col]))', 'fp16(relu(store("pre", acc * 2)) + residual)',
           'e4m3(store("pre", amax("am", acc) + 1) * scale[row], "ds")']


@pytest.mark.parametrize("expr", OUTPUTS)
def test_outputs_match_the_reference(expr):
    """M and N tails (70 x 150: a second, partial scale block; odd N: the per-element store path), and 70 x 42."""
    plan = _plan(expr, **WIDE)
    verify(build_kernel(plan))
    _run(plan, 70, 150)
    _run(plan, 70, 43)


def test_two_scale_blocks_per_tile():
    _run(_plan('e4m3(acc * scale[col], "ds")', **{"tile.block_n": 256}), 70, 300)


def test_output_plan_and_rules():
    p = make_plan(load_config("h100_128x128").replace(**{"epilogue.expr": 'e4m3(store("pre", amax("am", acc)), "ds")'}))
    e = p.epilogue
    assert [(o.name, o.kind, o.along, o.fmt) for o in e.outputs] == [
        ("ds", "block_scale", "block", "f32"), ("pre", "store", "tile", "bf16"), ("am", "amax", "row", "f32")]
    assert e.out_dtype == "e4m3" and not e.tma_store and "d" not in p.launch_spec().tensor_maps
    assert p.params[-3:] == (("epi_ds", "u64"), ("epi_pre", "u64"), ("epi_am", "u64"))
    from ptxgen.errors import ConfigError
    with pytest.raises(ConfigError, match=r"tile.block_n=32: a 1 x 128 block scale needs block_n a multiple of 128"):
        _plan('e4m3(acc, "ds")')
    with pytest.raises(ConfigError, match=r"epilogue.overlap=True"):
        make_plan(load_config("h100_128x256").replace(**{"epilogue.expr": 'e4m3(acc)', "epilogue.overlap": True}))
    with pytest.raises(ConfigError, match=r"sm_90a only"):
        make_plan(load_config("level9").replace(**{"epilogue.expr": 'store("pre", acc) * 2'}))


def _planted(expr: str, fn, m=70, n=150, **changes):
    plan = _plan(expr, **{**WIDE, **changes})
    bad = rewrite(build_kernel(plan), fn)
    assert bad != build_kernel(plan)
    return plan, bad


def test_planted_wrong_scale_block_column():
    """The block scale stored one block to the left: the second block's scale lands in the first's column."""
    plan, bad = _planted('e4m3(acc, "ds")', lambda op: replace(op, col=op.col - 128) if isinstance(op, O.StEpilogue)
                         and op.layout == "block" and "128" in str(op.col) else None, **{"tile.block_n": 256})
    with pytest.raises(SimError, match=r"^wrong result: .*output (ds|D)\["):
        simulate(bad, 70, 300, 64, expr=plan.epilogue.expr, num_sms=2)


def test_planted_amax_over_wrong_rows():
    """Each pair's |x| goes to the other row half's running max (rows r and r + 8 swapped)."""
    plan, bad = _planted('e4m3(amax("am", acc) * scale[row])',
                         lambda op: replace(op, slot=1 - op.slot) if isinstance(op, O.AmaxLocal) else None)
    with pytest.raises(SimError, match=r"^wrong result: .*output am\["):
        simulate(bad, 70, 150, 64, expr=plan.epilogue.expr, num_sms=2)


def test_planted_second_output_not_written():
    plan, bad = _planted('gelu(store("pre", acc + bias[col]))',
                         lambda op: () if isinstance(op, O.StEpilogue) else None)
    with pytest.raises(VerifyError, match=r"epilogue output epi_pre is never written"):
        verify(bad)
    with pytest.raises(SimError, match=r"^wrong result: .*output pre\[0, 0\] = nan"):
        simulate(bad, 70, 150, 64, expr=plan.epilogue.expr, num_sms=2)


def test_planted_second_output_post_activation():
    """The stored tile written after the activation (D's value) instead of the pre-activation."""
    plan = _plan('gelu(store("pre", acc + bias[col]))', **WIDE)
    coords, pending = {}, None
    for op in O.walk(build_kernel(plan).body):  # each pair's store coordinates, by the pair's D expression
        if isinstance(op, O.StEpilogue):
            pending = (op.row, op.col)
        elif isinstance(op, O.EpilogueExpr) and op.dst.startswith("acc") and pending:
            coords[(op.dst, op.idx)], pending = pending, None

    def post(op):
        if isinstance(op, O.StEpilogue):
            return ()
        if isinstance(op, O.EpilogueExpr) and (op.dst, op.idx) in coords:
            return (op, O.StEpilogue("epi_pre", "tile", "bf16", *coords[(op.dst, op.idx)], op.dst, op.idx))
    bad = rewrite(build_kernel(plan), post)
    verify(bad)  # well-formed: only the values are wrong
    with pytest.raises(SimError, match=r"^wrong result: .*output pre\["):
        simulate(bad, 70, 150, 64, expr=plan.epilogue.expr, num_sms=2)


def test_planted_residual_from_the_wrong_row():
    plan = _plan("acc + residual", **WIDE)
    bad = rewrite(build_kernel(plan), lambda op: replace(op, row=op.row + 1) if isinstance(op, O.LdEpilogue) else None)
    with pytest.raises(SimError, match=r"^wrong result"):
        simulate(bad, 70, 150, 64, expr=plan.epilogue.expr, num_sms=2)


@pytest.mark.parametrize("config, expr, shape, sms", [
    ("h100_128x256_lw2", "acc + residual", (520, 250, 136), 4),  # CTA pairs: 2 whole cluster tiles, 1 split in 2
    ("h100_128x128_c2_lw2", "gelu(acc + bias[col])", (700, 300, 136), 8),  # 8 whole, 1 split
    pytest.param("h100_128x256_lw4", 'e4m3(amax("am", acc) * scale[row], "ds")', (700, 700, 200), 4,
                 marks=pytest.mark.slow),  # 8 whole, 1 in 4 units (7 s; e4m3 after a split-K fixup: test_epilogue_e4m3_staged)
])
def test_fused_epilogue_after_a_last_wave_fixup(config, expr, shape, sms):
    """The shipped last-wave configs the chooser may pick for a fused call: whole tiles run the expression after
    their mainloop, a split tail tile after its fixup, on the tile's last arriver only (a residual staged through
    the CD ring, a bias, an e4m3 D with an amax output)."""
    plan = make_plan(load_config(config).replace(**{"epilogue.expr": expr}))
    units = plan.launch_spec().grid.split_units(shape[0], shape[1], sms)
    assert units.dp_tiles > 0 and units.split_tiles > 0
    kernel = build_kernel(plan)
    verify(kernel)
    simulate(kernel, *shape, expr=plan.epilogue.expr, num_sms=sms)


def test_e4m3_rounding_matches_the_cvt_rule():
    """round_e4m3: nearest, ties to even, saturating, NaN kept (against the e4m3 table)."""
    from ptxgen.formats import E4M3_VALUES

    pos = E4M3_VALUES[:0x7F]
    mids = (pos[:-1] + pos[1:]) / 2  # ties: to the even code
    got = N.round_e4m3(mids)
    assert (got == np.where(np.arange(len(mids)) % 2 == 0, pos[:-1], pos[1:])).all()
    assert list(N.round_e4m3(np.float32([500, -1e30, np.inf, -np.inf]))) == [448, -448, 448, -448]
    assert np.isnan(N.round_e4m3(np.float32([np.nan]))).all()


@pytest.mark.parametrize("config, expr, changes, shape", [
    ("h100_128x128", 'e4m3(amax("am", acc) * scale[row], "ds")', {"schedule.split_k": 2, "schedule.persistent": True},
     (130, 150, 256)),
    ("h100_128x128_pp", 'e4m3(store("pre", acc + residual), "ds")', {}, (200, 270, 64)),
    ("dual_h100_128x128", 'e4m3(amax("am", silu(acc1) * acc2, "tensor"), "ds")', {}, (130, 150, 64)),
])
def test_outputs_on_split_k_pingpong_and_dual(config, expr, changes, shape):
    """The outputs where the fused epilogue runs after a split-K fixup, per ping-pong warpgroup, on a dual GEMM."""
    plan = make_plan(load_config(config).replace(**{**changes, "epilogue.expr": expr}))
    kernel = build_kernel(plan)
    verify(kernel)
    simulate(kernel, *shape, expr=plan.epilogue.expr, num_sms=3)
