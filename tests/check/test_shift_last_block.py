"""sm_90a tiles shifted to end at M and N (``SchedulePlan.shift_last_m_block``, ``shift_last_n_block``).

Where M is not a multiple of block_m, the last m-block's tile starts at ``M - block_m`` (overlapping the tile before
it) instead of running past M, so its A box holds no row past A, which TMA would zero-fill in shared memory; the same
along N for B.  On the CPU: the plan sets the shifts where nothing is blocked by absolute row or column; the
simulator fills no operand row at ragged shapes with M >= block_m and N >= block_n and gets the right D (the
overlapping rows and columns stored twice, with the same values); the PTX-vs-IR differential agrees on the shifted
tile's threads.  Planted: the shift one row too far (a filled row: its A box crosses M) and one row short (row M - 1
never stored: wrong result), and every tile at the last row (wrong result).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ptxgen.build import build, load_config
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import default_launches, sweep_threads
from ptxgen.check.sim.run import simulate
from ptxgen.errors import SimError
from ptxgen.ir import Const, Param, Var, emin, le, select
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

#: one of each tile walk: a single CTA, a pair along M, a pair along N, split-K, split-K of the last wave, swap-AB,
#: the dual GEMM
WALKS = ("h100_128x128", "h100_128x160_c2", "h100_128x80_c2n", "h100_64x128_sk2", "h100_128x256_lw2",
         "h100_64x16_swap", "dual_h100_128x128")
#: the walks the main tier simulates (the others in the slow tier)
MAIN_TIER_WALKS = ("h100_128x128", "h100_128x160_c2", "h100_64x16_swap")
#: (m, n, k): M and N off every block size (M - 16 and N - block_n multiples of 16 columns, for the swap-AB walk
#: too, whose n is M)

RAGGED = ((304, 528, 264), (400, 1008, 128))


def _shifts(name: str, **change) -> tuple[bool, bool]:
    s = make_plan(load_config(name).replace(**change) if change else load_config(name)).schedule
    return s.shift_last_m_block, s.shift_last_n_block


def test_the_plan_shifts_where_nothing_is_blocked_by_absolute_rows_or_columns():
    assert all(_shifts(name) == (True, True) for name in WALKS)
    assert _shifts("h100_128x128", **{"epilogue.expr": "relu(acc + bias[col]) * scale[row]"}) == (True, True)
    assert _shifts("fp8_h100_128x128") == (False, False)  # A's scales by 16-byte columns, B's per 128 rows of B
    assert _shifts("h100_128x128", **{"epilogue.expr": 'e4m3(acc, "sd")'}) == (True, False)  # 1 x 128 blocks of D
    assert _shifts("grouped_contiguous_h100_128x256") == (False, False)
    assert _shifts("level9") == (False, False)  # sm_100a


def test_the_config_turns_the_shifts_off():
    """``schedule.shift_last_block: false`` (the A/B probes in bench/configs): the last tiles run past M and N again,
    their rows zero-filled, the result the same."""
    cfg = load_config("h100_128x128").replace(**{"schedule.shift_last_block": False})
    assert _shifts("h100_128x128", **{"schedule.shift_last_block": False}) == (False, False)
    res = simulate(build_kernel(make_plan(cfg)), *RAGGED[1], num_sms=4)
    assert res.filled_rows["a"] > 0 and res.filled_rows["b"] > 0


@pytest.mark.parametrize("name", [pytest.param(w, marks=() if w in MAIN_TIER_WALKS else pytest.mark.slow) for w in WALKS])
def test_no_operand_row_is_filled_at_ragged_shapes(name):
    kernel = build(load_config(name)).kernel
    for m, n, k in RAGGED:
        res = simulate(kernel, m, n, k, num_sms=4)
        assert not any(res.filled_rows.values()), (m, n, k, res.filled_rows)
    # below one block the box still reaches past the tensor (swap-AB: the kernel's n is M)
    assert sum(simulate(kernel, 1, 400, 72, num_sms=4).filled_rows.values()) > 0


def test_an_expression_reads_its_operands_at_the_shifted_rows_and_columns():
    cfg = load_config("h100_128x128").replace(**{"epilogue.expr": "relu(acc + bias[col]) * scale[row] + residual"})
    plan = make_plan(cfg)
    res = simulate(build_kernel(plan), 385, 1000, 128, num_sms=4, expr=plan.epilogue.expr)
    assert res.filled_rows["a"] == 0 and 0 < res.filled_rows["b"]  # N - block_n rounded up to 16 columns: 8 rows past N


def test_ptx_matches_the_ir_on_the_shifted_tiles():
    res = build(load_config("h100_128x160_c2"))
    launches = default_launches(res.kernel, (385, 1000, 128))  # the last cluster holds the shifted tiles
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx), launches) is None


# ------------------------------------------------------------------ planted bugs

def _with_last_m_row(expr):
    k = build_kernel(make_plan(load_config("h100_128x128")))
    bad = rewrite(k, lambda op: replace(op, expr=expr) if isinstance(op, O.Let) and op.var == "last_m_row" else None)
    assert bad != k
    return bad


def test_planted_shift_one_row_too_far():
    """``last_m_row = M - block_m + 1``: the last tile's A box crosses M again (one filled row per k-block)."""
    bad = _with_last_m_row(select(le(128, Param("m")), Param("m") - 127, 0))
    assert simulate(bad, 385, 1000, 128, num_sms=4).filled_rows["a"] > 0


def test_planted_shift_one_row_short():
    """``last_m_row = M - block_m - 1``: the last tile ends at row M - 1, and row M - 1 is never stored."""
    bad = _with_last_m_row(select(le(129, Param("m")), Param("m") - 129, 0))
    with pytest.raises(SimError, match=r"^wrong result"):
        simulate(bad, 385, 1000, 128, num_sms=4)


def test_planted_every_tile_at_the_last_row():
    """``m_row = last_m_row`` for every m-block: the rows before the last tile are never stored."""
    k = build_kernel(make_plan(load_config("h100_128x128")))
    bad = rewrite(k, lambda op: replace(op, expr=emin(Var("last_m_row"), Const(1 << 30)))
                  if isinstance(op, O.Let) and op.var == "m_row" else None)
    assert bad != k
    with pytest.raises(SimError, match=r"^wrong result"):
        simulate(bad, 385, 1000, 128, num_sms=4)
