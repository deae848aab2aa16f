"""The contiguous grouped walk in windows of expert runs (``schedule.expert_window``, docs/grouped.md "The G = 32 bf16
gap").

On the CPU: the scheduler's lets, evaluated for every tile of random tables (sorted groups, groups of one m-block,
runs longer than the cut, padding-only m-blocks, and tables breaking every rule), give each (m-block, n-block) of D
exactly once, and the order the model of ``bench/grouped_gap.py`` assumes; the simulator runs a kernel with a small
window and cut to the right numbers with the padding rows untouched; the verifier and the PTX-vs-IR differential
accept the shipped config; the rule refusing the window outside the contiguous layout. Planted bugs: a chunk not cut
at ``group`` m-blocks (two tiles on one m-block and n-block, one never computed: the walk check and the simulator),
the run start taken past the tile's m-block (the walk check).
"""

from __future__ import annotations

import numpy as np
import pytest

from ptxgen.build import build, load_config
from ptxgen.builders import grouped as grouped_builder
from ptxgen.builders.common import Cluster
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.numerics import POISON
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.sim.run import simulate_grouped
from ptxgen.check.verify import verify
from ptxgen.errors import ConfigError, SimError
from ptxgen.ir import Const, Param, Var, evaluate
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

SHIPPED = "grouped_contiguous_h100_128x256_runs"
NO_GROUP = 0xFFFFFFFF


def small(window: int = 4, group: int = 2):
    """The shipped runs config with a window and cut small enough for the simulator's few m-blocks."""
    return load_config(SHIPPED).replace(**{"schedule.expert_window": window, "schedule.group": group})


def walk(plan, words: list[int], n: int) -> list[tuple[int, int]]:
    """(m-block, n-block) of each tile index: the scheduler's head lets and table reads, evaluated per tile with
    ``words[i]`` the table word of row i x block_m (every other row's word is never read by the walk)."""
    bm, bn = plan.mma.block_m, plan.mma.block_n
    sched = grouped_builder.GroupedTileScheduler(plan, Cluster(plan))
    loop = sched.loop([])
    head = []
    for op in loop.body:  # the lets and table reads before the tile's body (If has_work)
        if isinstance(op, O.If):
            break
        head.append(op)
    num_m, num_n = len(words), -(-n // bn)
    out = []
    for t in range(num_m * num_n):
        env = {"num_m": num_m, "num_n": num_n, "t": t}

        def leaf(e):
            if isinstance(e, Var):
                return env[e.name]
            assert isinstance(e, Param), e
            return {"m": num_m * bm, "n": n}[e.name]
        for op in head:
            if isinstance(op, O.LdGlobalNcU32):
                row = evaluate(op.index, leaf)
                assert 0 <= row < num_m * bm and row % bm == 0, (op.var, row)  # never past the table
                env[op.var] = words[row // bm]
            else:
                env[op.var] = evaluate(op.expr, leaf) & 0xFFFFFFFF
        out.append((env["m_row"] // bm, env["n_col"] // bn))
    return out


def model_order(words: list[int], num_n: int, window: int, cap: int) -> list[tuple[int, int]]:
    """The order ``bench/grouped_gap.py``'s model assumes (runs of equal words cut every ``cap`` m-blocks)."""
    out = []
    for base in range(0, len(words), window):
        win, s = words[base:base + window], 0
        for j in range(1, len(win) + 1):
            if j == len(win) or win[j] != win[s] or j - s == cap:
                out += [(base + s + i % (j - s), i // (j - s)) for i in range((j - s) * num_n)]
                s = j
    return out


def tables(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    sorted_runs = [int(g) for g in np.repeat(np.arange(9), rng.integers(0, 7, 9))]
    return [sorted_runs or [0],
            [0] * 11 + [1] + [2] * 3,  # a run longer than two cuts, a run of one m-block
            [0, 0, NO_GROUP, 1, 1, 1, NO_GROUP, NO_GROUP, 2],  # padding-only m-blocks between groups
            [int(x) for x in rng.integers(0, 4, 13)],  # words in any order (an unchecked bad table)
            [int(x) for x in rng.choice([0, 5, 7, NO_GROUP, 2**31], 10)],
            [3]]


@pytest.mark.parametrize("window,group", [(4, 2), (32, 16), (5, 3), (3, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_walk_computes_every_tile_once_for_any_table(window, group, seed):
    plan = make_plan(small(window, group))
    for words in tables(seed):
        for n in (200, 600):
            order = walk(plan, words, n)
            num_n = -(-n // plan.mma.block_n)
            assert sorted(order) == [(m, j) for m in range(len(words)) for j in range(num_n)], (words, n)
            assert order == model_order(words, num_n, window, group), (words, n)


def test_the_shipped_config_walks_runs():
    plan = make_plan(load_config(SHIPPED))
    assert plan.schedule.grouped == "contiguous" and plan.schedule.expert_window == 32
    assert plan.schedule.group_clusters == 16


def test_simulator_runs_the_walk_with_untouched_rows():
    # 9 m-blocks: group 0's 3 (cut 2 + 1), groups 2 and 3 sharing a window with group 4's first two, an empty group
    res = simulate_grouped(build_kernel(make_plan(small())), n=200, k=136, group_rows=[300, 0, 129, 1, 260],
                           seed=3, num_sms=3)
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2
    untouched = np.isnan(res.ref).all(axis=1)
    assert untouched.any() and (res.d_bits[untouched] == POISON).all()


def test_verifier_and_ptx_differential_accept_the_shipped_config():
    res = build(load_config(SHIPPED))
    verify(res.kernel)
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None
    assert res.ptx.count("// LdGlobalNcU32 win_word") == 2 * 32  # the producer's walk and the consumers'


def test_a_window_outside_the_contiguous_layout_is_refused():
    masked = load_config("grouped_masked_h100_128x128")
    with pytest.raises(ConfigError) as exc:
        make_plan(masked.replace(**{"schedule.expert_window": 8}))
    msg = str(exc.value)
    assert msg.startswith("schedule.expert_window=8: ") and "grouped=contiguous" in msg and "\n" not in msg


# ------------------------------------------------------------------ planted bugs


def _rewrite_let(monkeypatch, var: str, make):
    """Replace the expression of the walk's ``Let(var, ...)`` by ``make(expr)``."""
    original = grouped_builder.GroupedTileScheduler.expert_runs

    def planted(self, tile):
        return [O.Let(op.var, make(op.expr)) if isinstance(op, O.Let) and op.var == var else op
                for op in original(self, tile)]
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "expert_runs", planted)


def test_planted_chunk_not_cut_at_group(monkeypatch):
    """Chunks start at run starts only, but their length is still cut: the tail of a long run is never computed."""
    _rewrite_let(monkeypatch, "chunk_start", lambda e: Var("run_start"))
    plan = make_plan(small())
    words = [0] * 5
    order = walk(plan, words, 200)
    assert sorted(order) != [(m, j) for m in range(5) for j in range(2)]
    with pytest.raises(SimError, match="group 0"):
        simulate_grouped(build_kernel(plan), n=200, k=136, group_rows=[600], seed=3, num_sms=2)


def test_planted_run_start_past_the_tiles_m_block(monkeypatch):
    """The run start taken from a boundary after the tile's m-block (``le`` dropped)."""
    _rewrite_let(monkeypatch, "run_start", lambda e: Const(0) * e + Var("win_m") - 1)
    order = walk(make_plan(small()), [0, 0, 1, 1], 200)
    assert sorted(order) != [(m, j) for m in range(4) for j in range(2)]
