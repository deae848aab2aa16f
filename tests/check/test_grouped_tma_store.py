"""Grouped kernels with ``epilogue.store=tma`` (shipped and bench/configs ``grouped_*_tma``): an m-block wholly inside its
group's valid rows is staged and TMA-stored, any other m-block stored directly, guarded per row.

On the CPU: the simulator runs problems where whole and partial m-blocks mix (an empty group, a group of one row, a
group of block_m - 1 rows, a group of block_m + 1 rows) to the right numbers with every row outside the groups
still poisoned, and counts the TMA stores (both paths run); N without 16-byte rows stores everything directly; the
verifier's trace (its tables hold whole and partial m-blocks) and the PTX-vs-IR differential accept the kernels.
Planted bugs, each failing a check: a partial m-block taking the TMA path, the whole-block test one row short, a
staging slot rewritten before the store reading it retired its bulk group, the whole-block table word read at
the wrong address by the emitter, a ring whose turns do not fit a tile."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ptxgen.build import build, load_config
from ptxgen.builders import grouped as grouped_builder
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.numerics import POISON
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.sim import machine as sim_machine
from ptxgen.check.sim.run import simulate, simulate_grouped
from ptxgen.check.verify import verify
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import Const, LdGlobalNcU32, Param, Var, emin, eq, land, lt
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
#: the TMA-store configs: shipped (ptxgen/configs) and bench variants (bench/configs), by name -> YAML path
TMA_PATHS = {p.stem: p for d in (ROOT / "ptxgen" / "configs", ROOT / "bench" / "configs") for p in d.glob("grouped_*_tma.yaml")}
TMA = sorted(TMA_PATHS)
#: group 0: block_m - 1 rows (a partial m-block: the off-by-one test writes its row 127); group 1 empty; group 2:
#: a whole m-block and one row; group 3: one row
MASKED = dict(masked_m=[127, 0, 130, 1], m_max=130)
CONTIGUOUS = dict(group_rows=[127, 0, 129, 1])


def config(name: str):
    return load_config(str(TMA_PATHS[name]))


def kernel_of(name: str, **changes):
    cfg = config(name)
    return build_kernel(make_plan(cfg.replace(**changes) if changes else cfg))


def problem(name: str, n: int = 200) -> dict:
    return dict(n=n, k=272 if "fp8" in name else 136, **(MASKED if "masked" in name else CONTIGUOUS))


def counting_tma_stores(monkeypatch) -> list:
    """Count the simulator's TMA stores (each box's issue) in the returned list's length."""
    seen = []
    original = sim_machine.Machine._tma_store

    def count(self, *args, **kw):
        seen.append(1)
        return original(self, *args, **kw)
    monkeypatch.setattr(sim_machine.Machine, "_tma_store", count)
    return seen


def test_the_bench_variants_exist_and_stage_d():
    assert {"grouped_contiguous_h100_128x256_tma", "grouped_contiguous_fp8_h100_128x256_tma",
            "grouped_masked_h100_128x256_tma"} <= set(TMA)
    for name in TMA:
        plan = make_plan(config(name))
        assert plan.epilogue.tma_store and plan.cd_ring is not None
        assert plan.launch_spec().extra == {"grouped": plan.schedule.grouped, "store": "tma"}
        assert plan.epilogue.stores_per_tile % plan.epilogue.stages == 0


@pytest.mark.parametrize("name", TMA)
def test_simulator_mixes_tma_and_direct_m_blocks_with_untouched_rows(name, monkeypatch):
    stores = counting_tma_stores(monkeypatch)
    res = simulate_grouped(kernel_of(name), **problem(name), seed=3, num_sms=3)
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2
    untouched = np.isnan(res.ref).all(axis=1)
    assert untouched.any() and (res.d_bits[untouched] == POISON).all()
    plan = make_plan(config(name))
    # one whole m-block (group 2's first) of ceil(200 / block_n) tiles takes the TMA path
    boxes = -(-200 // plan.mma.block_n) * plan.epilogue.stores_per_tile * plan.epilogue.groups
    assert len(stores) == boxes


@pytest.mark.parametrize("name", ["grouped_contiguous_h100_128x256_tma", "grouped_masked_fp8_h100_128x128_tma"])
def test_n_without_16_byte_rows_stores_every_m_block_directly(name, monkeypatch):
    stores = counting_tma_stores(monkeypatch)
    res = simulate_grouped(kernel_of(name), **problem(name, n=196 + 3), seed=4, num_sms=2)
    assert res.rel_fro < 1e-2 and not stores


@pytest.mark.parametrize("name", ["grouped_contiguous_h100_128x128_tma", "grouped_masked_h100_128x256_tma"])
@pytest.mark.parametrize("policy", ["latest", "pct"])
def test_simulator_other_interleavings(name, policy):
    simulate_grouped(kernel_of(name), **problem(name), seed=5, num_sms=2, policy=policy)


def test_simulate_runs_a_tma_grouped_kernel_on_three_groups():
    res = simulate(kernel_of("grouped_contiguous_h100_128x128_tma"), 256, 136, 136, seed=1)
    assert res.rel_fro < 5e-3


@pytest.mark.parametrize("name", TMA)
def test_verifier_and_ptx_differential_accept_the_kernels(name):
    res = build(config(name))
    verify(res.kernel)
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None
    assert res.ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") >= 1
    assert ("// LdGlobalNcU32 last_row_group" in res.ptx) == ("contiguous" in name)


def test_runtime_passes_d_map_only_to_tma_store_configs():
    from ptxgen.runtime.api import d_map_ok

    spec = make_plan(config("grouped_contiguous_h100_128x256_tma")).launch_spec()
    assert spec.extra.get("store") == "tma" and d_map_ok(spec, 200) and not d_map_ok(spec, 199)
    shipped = make_plan(load_config("grouped_contiguous_h100_128x256")).launch_spec()
    assert "store" not in shipped.extra  # GroupedCall passes no D map (tmap_d zeros) to direct-store kernels


def test_a_ring_that_does_not_turn_whole_per_tile_is_refused():
    with pytest.raises(ConfigError) as exc:
        make_plan(config("grouped_contiguous_h100_128x128_tma").replace(**{"epilogue.stages": 3}))
    msg = str(exc.value)
    assert msg.startswith("epilogue.stages=3: ") and "multiple of epilogue.stages" in msg and "\n" not in msg


# ------------------------------------------------------------------ planted bugs


@pytest.mark.parametrize("name", ["grouped_contiguous_h100_128x256_tma", "grouped_masked_fp8_h100_128x128_tma"])
def test_planted_partial_m_block_takes_the_tma_path(monkeypatch, name):
    """Every m-block stored by TMA boxes: a padding row / a row past masked_m is written."""
    monkeypatch.setattr(grouped_builder, "whole_block", lambda plan: ([], Const(1)))
    with pytest.raises(SimError, match="untouched row written"):
        simulate_grouped(kernel_of(name), **problem(name), seed=3, num_sms=3)


def _one_row_short(plan):
    """The whole-block test one row short: the m-block's row block_m - 2 decides."""
    bm = plan.mma.block_m
    if plan.schedule.grouped == "masked":
        return [], lt(Var("m_local") + (bm - 2), grouped_builder.ROWS)
    last = Var("m_row") + (bm - 2)
    return ([LdGlobalNcU32("last_row_group", emin(last, Param("m") - 1))],
            land(eq(Var("last_row_group"), grouped_builder.GROUP), lt(last, Param("m"))))


@pytest.mark.parametrize("name", ["grouped_contiguous_fp8_h100_128x256_tma", "grouped_masked_h100_128x256_tma"])
def test_planted_whole_block_test_off_by_one_row(monkeypatch, name):
    """Group 0's m-block of block_m - 1 rows passes a test one row short: its row block_m - 1 is written."""
    monkeypatch.setattr(grouped_builder, "whole_block", _one_row_short)
    with pytest.raises(SimError, match=r"untouched row written: .*D\[127, "):
        simulate_grouped(kernel_of(name), **problem(name), seed=3, num_sms=3)


def test_planted_staging_slot_rewritten_before_its_store_read_it():
    """The CD ring's producer_acquire (``cp.async.bulk.wait_group.read stages - 1``) dropped: a box is staged into
    a slot whose previous TMA store may still be reading it."""
    name = "grouped_contiguous_h100_128x256_tma"
    kernel = kernel_of(name)
    stages = make_plan(config(name)).epilogue.stages
    bad = rewrite(kernel, lambda op: O.If(op.cond, tuple(x for x in op.then if not (
        isinstance(x, O.BulkWaitGroup) and x.n == stages - 1)), op.orelse)
        if isinstance(op, O.If) and any(isinstance(x, O.BulkWaitGroup) and x.n == stages - 1 for x in op.then)
        else None)
    assert bad != kernel
    with pytest.raises(VerifyError, match=r"TmaStore d"):
        verify(bad)
    with pytest.raises(SimError, match=r"write after read|TmaStore"):
        simulate_grouped(bad, **problem(name, n=520), seed=3, num_sms=1, policy="latest")


def test_ptx_differential_runs_both_store_paths():
    """The differential's table model (``interp.table_word``) gives a whole and a partial m-block, so the compared
    threads stage D (stmatrix, bulk groups) and store directly."""
    from collections import Counter

    from ptxgen.check.ptx.diff import default_launches, ir_effects

    for name in ("grouped_contiguous_h100_128x256_tma", "grouped_masked_fp8_h100_128x128_tma"):
        kernel = build(config(name)).kernel
        seen = Counter(e[0] for launch in default_launches(kernel) for e in ir_effects(kernel, launch))
        assert seen["stmatrix"] and seen["bulk.commit"] and seen["st.global"], (name, seen)


def test_planted_whole_block_table_read_at_the_wrong_word(monkeypatch):
    """The emitter reads the whole-block test's table word one word further: the PTX differential sees the
    address."""
    import dataclasses

    import emitters

    table = emitters.TABLES["sm_90a"]
    original = table[O.LdGlobalNcU32]

    def wrong(lw, op):
        return original(lw, dataclasses.replace(op, index=op.index + 1) if op.var == "last_row_group" else op)
    monkeypatch.setitem(table, O.LdGlobalNcU32, wrong)
    res = build(config("grouped_contiguous_h100_128x128_tma").replace(name="planted_whole_block_word"))
    assert "ld.global.nc.u32" in (sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) or "")
