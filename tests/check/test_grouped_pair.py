"""Contiguous grouped GEMM on CTA pairs multicasting B (``cluster: {size: 2, dual_tile: true}``,
``tma.multicast``; docs/grouped.md "CTA pairs multicasting B").

On the CPU: the pair walk evaluated for every pair unit and both ranks gives each (m-block, n-block) once, both
CTAs the same ``has_work`` and ``b_shared``, and ``b_shared`` exactly when the two m-blocks' groups agree (a padding
or past-the-end m-block takes its partner's); the simulator runs same-expert pairs, pairs straddling two experts, a
padding m-block, an odd m-block count and an empty expert to the right numbers with the padding rows untouched; the
verifier and the PTX-vs-IR differential accept the shipped configs; the config rules refuse a pair outside
contiguous layouts with multicast.  FP8 pairs (``grouped_contiguous_fp8_h100_128x256_c2``): each CTA loads its own
scales (scale_a of its m-block, scale_b of its m-block's group), simulated on the same tables to the recipe's
reference.  Planted bugs: multicast on every pair (a straddling pair's CTA computes with the other expert's B half:
wrong result), ``b_shared`` from the CTA's own table word only (the pair's CTAs disagree: the verifier's
transaction-byte check, the simulator's write-after-write of a stage); FP8: scale_b of the partner's group on a
straddling pair, scale_a of the pair's first m-block on rank 1 (wrong results).

Masked pairs (``grouped_masked_h100_128x256_c2``, ``grouped_masked_fp8_h100_128x256_c2``; docs/grouped.md "Masked
decode on CTA pairs"): the walk covers every (group, m-block, n-block) once with ``has_work`` equal on both CTAs; the
simulator runs groups of 0, 1, 127, 128, 129, 256 rows (M_max = 256) and an odd m-block count (M_max = 384) to the
reference with rows past masked_m untouched.  Planted bugs: an empty m-block's CTA skipping the unit (deadlock), rank 1
taking rank 0's m-block (wrong result).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import Param, Sreg, Var, ceil_div, eq, evaluate, select
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

SHIPPED = "grouped_contiguous_h100_128x256_c2"
FP8 = "grouped_contiguous_fp8_h100_128x256_c2"
MASKED = "grouped_masked_h100_128x256_c2"
MASKED_FP8 = "grouped_masked_fp8_h100_128x256_c2"
#: the windowed pair walk (bench variant)
RUNS = Path(__file__).resolve().parents[2] / "bench" / "configs" / "grouped_contiguous_h100_128x256_c2_runs.yaml"
NO_GROUP = 0xFFFFFFFF
#: 9 m-blocks of 128 rows: pairs (0, 1) of group 0, (2, 3) and (4, 5) straddling two groups, (6, 7) of group 4,
#: (8, past the end); group 1 empty; group 2's second m-block holds one valid row
ROWS = [300, 0, 129, 1, 260]


def small(window: int = 0, group: int = 2, name: str = SHIPPED):
    return load_config(name).replace(**{"schedule.expert_window": window, "schedule.group": group})


def run_head(head: list, env: dict, rank: int, params: dict, word) -> dict:
    """The scheduler's head ops evaluated into ``env`` for cluster rank ``rank`` (``Sreg``), kernel parameters
    ``params``; a table read at index i gives ``word(i)``."""
    def leaf(e):
        if isinstance(e, Var):
            return env[e.name]
        if isinstance(e, Sreg):
            return rank
        assert isinstance(e, Param), e
        return params[e.name]
    for op in head:
        if isinstance(op, O.LdGlobalNcU32):
            env[op.var] = word(evaluate(op.index, leaf))
        else:
            env[op.var] = evaluate(op.expr, leaf) & 0xFFFFFFFF
    return env


def pair_walk(plan, words: list[int], n: int) -> list[dict]:
    """Per pair unit and rank: the scheduler's head lets and table reads evaluated with ``words[i]`` the table
    word of m-block i (the table holds ``len(words)`` m-blocks)."""
    bm, bn = plan.mma.block_m, plan.mma.block_n
    loop = grouped_builder.GroupedTileScheduler(plan, Cluster(plan)).loop([])
    head = []
    for op in loop.body:  # the lets and table reads before the unit's body (If has_work)
        if isinstance(op, O.If):
            break
        head.append(op)
    m = len(words) * bm
    num_m, num_n = -(-m // (2 * bm)), -(-n // bn)
    out = []

    def word(row):
        assert 0 <= row < m, row  # never past the table
        return words[row // bm]
    for t in range(num_m * num_n):
        unit = [run_head(head, {"num_m": num_m, "num_n": num_n, "t": t}, rank, {"m": m, "n": n}, word)
                for rank in (0, 1)]
        out.append(unit)
    return out


@pytest.mark.parametrize("window,group", [(0, 2), (0, 16), (4, 2), (16, 16)])
def test_the_pair_walk_covers_every_tile_and_both_ctas_agree(window, group):
    plan = make_plan(small(window, group))
    tables = [[0, 0, 0, 2, 2, 3, 4, 4, 4], [0, 0, 1, 1], [5], [0, NO_GROUP, 2, 2, NO_GROUP],
              [int(x) for x in np.random.default_rng(1).choice([0, 3, 7, NO_GROUP], 11)]]
    for words in tables:
        for n in (200, 600):
            tiles = []
            for r0, r1 in pair_walk(plan, words, n):
                assert r0["has_work"] == r1["has_work"] and r0["b_shared"] == r1["b_shared"], words
                assert r0["m_row"] // 128 % 2 == 0 and r1["m_row"] == r0["m_row"] + 128
                mb = r0["m_row"] // 128
                w0 = words[mb]
                w1 = words[mb + 1] if mb + 1 < len(words) else NO_GROUP
                g0, g1 = (w0 if w0 != NO_GROUP else w1), (w1 if w1 != NO_GROUP else w0)
                assert r0["has_work"] == (g0 != NO_GROUP) and r0["b_shared"] == (g0 == g1)
                assert (r0["group_id"], r1["group_id"]) == (g0, g1)
                assert (r0["own_work"], r1["own_work"]) == (w0 != NO_GROUP, w1 != NO_GROUP)
                tiles += [(mb, r0["n_col"] // 256), (mb + 1, r1["n_col"] // 256)]
            num_n = -(-n // 256)
            num_pairs = -(-len(words) // 2)
            assert sorted(tiles) == [(m, j) for m in range(2 * num_pairs) for j in range(num_n)], words


@pytest.mark.parametrize("window,group", [(0, 2), (4, 2)])
def test_simulator_runs_mixed_pairs_with_untouched_rows(window, group):
    kernel = build_kernel(make_plan(small(window, group)))
    res = simulate_grouped(kernel, n=200, k=136, group_rows=ROWS, seed=3, num_sms=4)
    untouched = np.isnan(res.ref).all(axis=1)  # padding rows: group 0's 84, group 2's 127, group 3's 127, ...
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2 and untouched.sum() == 9 * 128 - sum(ROWS)
    assert (res.d_bits[untouched] == POISON).all()


@pytest.mark.parametrize("window,group", [(0, 2), (4, 2)])
def test_simulator_runs_fp8_pairs_to_the_recipe_reference(window, group):
    """The same tables as bf16 (same-expert and straddling pairs, padding, an odd m-block count, an empty expert);
    K = 272: three 128-K scale blocks, the last partial."""
    kernel = build_kernel(make_plan(small(window, group, FP8)))
    res = simulate_grouped(kernel, n=200, k=272, group_rows=ROWS, seed=3, num_sms=4)
    untouched = np.isnan(res.ref).all(axis=1)
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2 and untouched.sum() == 9 * 128 - sum(ROWS)
    assert (res.d_bits[untouched] == POISON).all()


@pytest.mark.parametrize("config", [SHIPPED, str(RUNS), FP8])
def test_verifier_and_ptx_differential_accept_the_pair_configs(config):
    """The shipped pairs' PTX-vs-IR differential runs with every shipped config
    (tests/check/ptx/test_planted_emitter.py's unpatched sweep, tests/check/ptx/test_ptx_vs_ir.py's drawn cases); here
    the bench variant's (windows of expert runs on a pair) and the pair's structure."""
    res = build(load_config(config))
    verify(res.kernel)
    if config == str(RUNS):
        assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None
    # one multicast load (the shared B half); the unshared branch loads both halves of its own B
    assert res.ptx.count(".multicast::cluster") == 1 and res.launch.cluster == (2, 1, 1)


@pytest.mark.parametrize("name", [SHIPPED, FP8])
def test_a_pair_without_multicast_is_refused(name):
    with pytest.raises(ConfigError) as exc:
        make_plan(load_config(name).replace(**{"tma.multicast": False}))  # replace validates
    msg = str(exc.value)
    assert msg.startswith("cluster.size=") and "\n" not in msg


def test_a_masked_pair_without_multicast_is_refused():
    with pytest.raises(ConfigError, match="tma.multicast=true"):
        make_plan(load_config(MASKED).replace(**{"tma.multicast": False}))


# ------------------------------------------------------------------ masked pairs

#: valid rows per group at M_max = 256 (two m-blocks, one pair unit per n-block): an empty group, one row, a partial
#: first m-block, a full one, a second m-block of one row, both full
MASKED_M = [0, 1, 127, 128, 129, 256]
#: M_max = 384: three m-blocks, the second pair unit's rank 1 past M_max (rows of the next group in flat A)
MASKED_M_ODD = [384, 129, 0, 257, 300]


def masked_small(name: str = MASKED):
    return load_config(name).replace(**{"schedule.group": 2})


def masked_walk(plan, masked_m: list[int], m_max: int, n: int) -> list[tuple[dict, dict]]:
    """Per pair unit: both ranks' head lets of the masked scheduler evaluated with the table ``masked_m``."""
    loop = grouped_builder.GroupedTileScheduler(plan, Cluster(plan)).loop([])
    head = [op for op in loop.body[:next(i for i, op in enumerate(loop.body) if isinstance(op, O.If))]]
    num_m, num_n = -(-m_max // (2 * plan.mma.block_m)), -(-n // plan.mma.block_n)
    out = []
    for t in range(len(masked_m) * num_m * num_n):
        out.append(tuple(run_head(head, {"num_m": num_m, "num_n": num_n, "t": t}, rank, {"m": m_max, "n": n},
                                  masked_m.__getitem__) for rank in (0, 1)))
    return out


@pytest.mark.parametrize("m_max,masked_m", [(256, MASKED_M), (384, MASKED_M_ODD), (130, [130, 2, 0])])
def test_the_masked_pair_walk_covers_every_tile_and_both_ctas_agree(m_max, masked_m):
    plan = make_plan(masked_small())
    bm, bn, n = 128, 256, 600
    tiles = []
    for r0, r1 in masked_walk(plan, masked_m, m_max, n):
        g = r0["group_id"]
        assert r1["group_id"] == g and r0["n_col"] == r1["n_col"] and r0["has_work"] == r1["has_work"]
        rows = min(masked_m[g], m_max)
        assert r0["m_local"] % (2 * bm) == 0 and r1["m_local"] == r0["m_local"] + bm
        assert r0["has_work"] == (r0["m_local"] < rows)
        assert (r0["own_work"], r1["own_work"]) == (r0["m_local"] < rows, r1["m_local"] < rows)
        assert r1["m_row"] == g * m_max + r1["m_local"] and r1["row_end"] == g * m_max + rows
        tiles += [(g, r["m_local"] // bm, r["n_col"] // bn) for r in (r0, r1)]
    num_m2 = 2 * -(-m_max // (2 * bm))
    assert sorted(tiles) == [(g, m, j) for g in range(len(masked_m)) for m in range(num_m2) for j in range(-(-n // bn))]


@pytest.mark.parametrize("name", [MASKED, MASKED_FP8])
@pytest.mark.parametrize("m_max,masked_m", [(256, MASKED_M), (384, MASKED_M_ODD)])
def test_simulator_runs_masked_pairs_with_untouched_rows(name, m_max, masked_m):
    """Groups of 0, 1, 127, 128, 129, 256 rows at M_max = 256 (pairs whose rank 1 has no valid row, or one) and an
    odd m-block count at M_max = 384; rows past masked_m[g] keep the poison."""
    res = simulate_grouped(build_kernel(make_plan(masked_small(name))), n=200, k=272 if name == MASKED_FP8 else 136,
                           masked_m=masked_m, m_max=m_max, seed=3, num_sms=4)
    untouched = np.isnan(res.ref).all(axis=1)
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2
    assert untouched.sum() == len(masked_m) * m_max - sum(min(r, m_max) for r in masked_m)
    assert (res.d_bits[untouched] == POISON).all()


@pytest.mark.parametrize("name", [MASKED, MASKED_FP8])
def test_verifier_accepts_the_masked_pairs(name):
    """The verifier and the pair's structure; the PTX-vs-IR differential of both shipped configs runs with every
    shipped config (tests/check/ptx/test_planted_emitter.py, tests/check/ptx/test_ptx_vs_ir.py)."""
    res = build(load_config(name))
    verify(res.kernel)
    # B always multicast: one multicast load, no unshared branch
    assert res.ptx.count(".multicast::cluster") == 1 and res.launch.cluster == (2, 1, 1)
    assert res.ptx.count("cp.async.bulk.tensor") == (4 if name == MASKED_FP8 else 2)


# ------------------------------------------------------------------ planted bugs


def _plant_b_shared(monkeypatch, make):
    original = grouped_builder.GroupedTileScheduler.pair_unit

    def planted(self):
        return [O.Let("b_shared", make(self)) if isinstance(op, O.Let) and op.var == "b_shared" else op
                for op in original(self)]
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "pair_unit", planted)


def test_planted_multicast_on_a_straddling_pair(monkeypatch):
    """Every pair multicasts: the straddling pairs' CTAs compute with half of the other expert's B."""
    _plant_b_shared(monkeypatch, lambda s: Var("has_work"))
    with pytest.raises(SimError, match="wrong result"):
        simulate_grouped(build_kernel(make_plan(small())), n=200, k=136, group_rows=ROWS, seed=3, num_sms=4)


def test_planted_flag_from_the_ctas_own_word(monkeypatch):
    """``b_shared`` from this CTA's word against rank 0's: rank 0 always multicasts, rank 1 of a straddling pair
    loads alone, so rank 0's stage lacks a half and rank 1's gets one too many."""
    _plant_b_shared(monkeypatch, lambda s: eq(select(eq(s.c.rank, 0), Var("pair_word0"), Var("pair_word1")),
                                              Var("pair_word0")))
    kernel = build_kernel(make_plan(small()))
    with pytest.raises(VerifyError, match="transaction-byte"):
        verify(kernel)
    with pytest.raises(SimError):
        simulate_grouped(kernel, n=200, k=136, group_rows=ROWS, seed=3, num_sms=4)


def _plant_scale_col(monkeypatch, name: str, make):
    """The scheduler's ``name`` (``sa_col`` or ``sb_col``) let replaced by ``make(scheduler)``."""
    original = grouped_builder.GroupedTileScheduler.loop

    def planted(self, body):
        loop = original(self, body)
        return dataclasses.replace(loop, body=tuple(O.Let(name, make(self)) if isinstance(op, O.Let) and op.var == name
                                                    else op for op in loop.body))
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "loop", planted)


def test_planted_fp8_scale_b_of_the_partners_group(monkeypatch):
    """scale_b's column from the partner's group: right on a same-expert pair, wrong on a straddling one."""
    def partner_col(s):
        pr, rank = s.p.promotion, s.c.rank
        box_rows = pr.b_block_rows * pr.sb_box
        partner = select(eq(rank, 0), Var("pair_group1"), Var("pair_group0"))
        return partner * (ceil_div(Param("n"), box_rows) * pr.sb_box) + Var("n_col") // box_rows * pr.sb_box
    _plant_scale_col(monkeypatch, "sb_col", partner_col)
    with pytest.raises(SimError, match="wrong result"):
        simulate_grouped(build_kernel(make_plan(small(name=FP8))), n=200, k=272, group_rows=ROWS, seed=3, num_sms=4)


def test_planted_fp8_scale_a_of_the_pairs_first_m_block(monkeypatch):
    """Rank 1 reads scale_a of m-block ``2 cm`` (rank 0's rows) for its own m-block ``2 cm + 1``."""
    _plant_scale_col(monkeypatch, "sa_col", lambda s: Var("cm") * s.p.schedule.cluster_tile_rows)
    with pytest.raises(SimError, match="wrong result"):
        simulate_grouped(build_kernel(make_plan(small(name=FP8))), n=200, k=272, group_rows=ROWS, seed=3, num_sms=4)


def _plant_masked_unit(monkeypatch, var: str, make):
    """The masked pair unit's ``var`` let (``has_work`` or ``own_work``) replaced by ``make(scheduler)``."""
    original = grouped_builder.GroupedTileScheduler.masked_pair_unit

    def planted(self):
        return [O.Let(var, make(self)) if isinstance(op, O.Let) and op.var == var else op for op in original(self)]
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "masked_pair_unit", planted)


def test_planted_masked_pair_skipping_the_k_loop_of_an_empty_m_block(monkeypatch):
    """A CTA whose m-block has no valid row skips the unit (``has_work`` = its own ``own_work``): its partner's
    multicast lands in a stage it never waits on and never releases: its partner's producer waits forever on the
    cluster-wide ``empty`` arrives."""
    _plant_masked_unit(monkeypatch, "has_work", lambda s: Var("own_work"))
    with pytest.raises(SimError, match="deadlock"):
        simulate_grouped(build_kernel(make_plan(masked_small())), n=200, k=136, masked_m=MASKED_M, m_max=256,
                         seed=3, num_sms=4)


def test_planted_masked_rank_1_storing_rank_0s_rows(monkeypatch):
    """Rank 1 takes rank 0's m-block (``m_local`` without the rank): its rows are computed twice, its own never."""
    original = grouped_builder.GroupedTileScheduler.cta_row
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "cta_row",
                        lambda self: Var("cm") * self.p.schedule.cluster_tile_rows if self.mode == "masked"
                        else original(self))
    with pytest.raises(SimError, match="wrong result"):
        simulate_grouped(build_kernel(make_plan(masked_small())), n=200, k=136, masked_m=MASKED_M, m_max=256,
                         seed=3, num_sms=4)
