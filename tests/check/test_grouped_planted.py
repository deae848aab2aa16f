"""The grouped scheduler on the CPU: the simulator runs small grouped problems of every shipped grouped config to
the right numbers with the rows outside the groups untouched, the verifier traces empty groups and partial
m-blocks, the PTX differential reads the table loads; and planted bugs (a tile's B from the wrong group, rows
outside a group written, a producer and consumers that skip different tiles, a misaligned FP8 scale box, a table
read past its end, a wrong table-load address in the emitter) fail those checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import emitters
from ptxgen.build import build, load_config
from ptxgen.builders import grouped as grouped_builder
from ptxgen.builders import kernel as kernel_builder
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.grouped import Tables, problem_of, trace_tables
from ptxgen.check.numerics import POISON
from ptxgen.check.sim.run import simulate, simulate_grouped
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.verify import verify
from ptxgen.config import shipped_configs
from ptxgen.errors import SimError, VerifyError
from ptxgen.ir import Const, For, If, Let, LdGlobalNcU32, Param, Var, ops
from ptxgen.plan import make_plan

GROUPED = [c for c in shipped_configs() if load_config(c).schedule.grouped != "none"]
MASKED = dict(masked_m=[70, 0, 130, 1], m_max=130)
CONTIGUOUS = dict(group_rows=[70, 0, 129, 1])


def kernel_of(name: str):
    return build_kernel(make_plan(load_config(name)))


def problem(name: str) -> dict:
    k = 272 if "fp8" in name else 136
    return dict(n=200, k=k, **(MASKED if "masked" in name else CONTIGUOUS))


@pytest.mark.parametrize("name", GROUPED)
def test_simulator_runs_grouped_problems_with_untouched_rows(name):
    res = simulate_grouped(kernel_of(name), **problem(name), seed=3, num_sms=3)
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2
    untouched = np.isnan(res.ref).all(axis=1)  # rows outside every group (group 1 is empty)
    assert untouched.any() and (res.d_bits[untouched] == POISON).all()


@pytest.mark.parametrize("name", GROUPED)
def test_simulate_runs_a_grouped_kernel_on_three_groups(name):
    kernel = kernel_of(name)
    res = simulate(kernel, 200, 136, 272, seed=1)
    assert res.rel_fro < 5e-3 and res.d.shape[1] == 136
    assert problem_of(kernel, 200) in ({"masked_m": [200, 0, 100], "m_max": 200}, {"group_rows": [200, 0, 67]})


@pytest.mark.parametrize("name", GROUPED)
@pytest.mark.parametrize("policy", ["latest", "pct"])
def test_simulator_other_interleavings(name, policy):
    simulate_grouped(kernel_of(name), **problem(name), seed=5, num_sms=2, policy=policy)


def test_verifier_traces_an_empty_group_and_a_partial_m_block():
    for name in ("grouped_masked_h100_128x128", "grouped_contiguous_h100_128x128"):
        kernel = kernel_of(name)
        report = verify(kernel)
        tables = trace_tables(kernel, report.shape[0])
        assert tables.params == {"num_groups": 3}
        words = tables.words["group_ptr"]
        assert (words == 0).any() if "masked" in name else (words == -1).any()


def test_tables_refuse_an_index_past_the_end():
    t = Tables({"num_groups": 2}, {"group_ptr": __import__("numpy").array([1, 2])})
    assert list(t.read("group_ptr", [0, 1], "x")) == [1, 2]
    with pytest.raises(VerifyError, match=r"reads group_ptr\[2\] of a 2-word table"):
        t.read("group_ptr", 2, "x")


# ------------------------------------------------------------------ planted bugs


def _patched_loop(mp, edit, which=None):
    """Patch the grouped scheduler so that its loop body goes through ``edit(ops) -> ops``; ``which``: only the
    n-th loop built (1: the producer's, 2: the consumers'), else every loop."""
    built = []

    class Planted(grouped_builder.GroupedTileScheduler):
        def loop(self, body):
            f = super().loop(body)
            built.append(f)
            if which is not None and (len(built) - 1) % 2 + 1 != which:  # each kernel builds two loops
                return f
            return dataclasses.replace(f, body=tuple(edit(list(f.body))))

    mp.setattr(kernel_builder, "GroupedTileScheduler", Planted)


def _rebind(var: str, expr):
    def edit(body):
        return [Let(var, expr) if isinstance(op, Let) and op.var == var else op for op in body]
    return edit


def test_planted_wrong_group_for_a_tile(monkeypatch):
    """B rows of the next group: the group's result is wrong."""
    _patched_loop(monkeypatch, _rebind("b_row", (Var("group_id") + 1) * Param("n") + Var("n_col")))
    with pytest.raises(SimError, match="wrong result: .* group 0"):
        simulate_grouped(kernel_of("grouped_masked_h100_128x128"), **problem("masked"), seed=3, num_sms=3)


@pytest.mark.parametrize("name", ["grouped_masked_h100_128x128", "grouped_contiguous_fp8_h100_128x128"])
def test_planted_rows_outside_the_groups_written(monkeypatch, name):
    """Stores bounded by the m-block's end instead of the group's valid rows: a masked / padding row is written."""
    monkeypatch.setattr(grouped_builder, "store_row_end", lambda plan, v, half: Var("m_row") + plan.mma.block_m)
    with pytest.raises(SimError, match="untouched row written"):
        simulate_grouped(kernel_of(name), **problem(name), seed=3, num_sms=3)


def test_planted_consumers_do_not_skip_the_empty_tiles_the_producer_skips(monkeypatch):
    """The consumers' loop takes every tile, the producer's skips empty ones: the consumers wait on stages that
    never fill (the simulator's deadlock) and the verifier's barrier check fails."""
    _patched_loop(monkeypatch, _rebind("has_work", Const(1)), which=2)
    kernel = kernel_of("grouped_masked_h100_128x128")
    with pytest.raises(SimError, match="deadlock"):
        simulate_grouped(kernel, **problem("masked"), seed=3, num_sms=3)
    with pytest.raises(VerifyError, match="wait can never complete: consumer_wait"):
        verify(kernel)


def test_planted_producer_alone_takes_empty_tiles(monkeypatch):
    """The producer fills stages for tiles the consumers skip: it waits on releases that never come."""
    _patched_loop(monkeypatch, _rebind("has_work", Const(1)), which=1)
    with pytest.raises(VerifyError, match="wait can never complete: producer_acquire"):
        verify(kernel_of("grouped_contiguous_h100_128x128"))  # the traced table has an all-padding m-block
    with pytest.raises(SimError, match="deadlock"):
        simulate_grouped(kernel_of("grouped_masked_h100_128x128"), **problem("masked"), seed=3, num_sms=3)


def test_planted_misaligned_fp8_scale_box(monkeypatch):
    """scale_a boxes at the flattened row (M_max = 130: not a multiple of 4 fp32): the simulator refuses the box
    (on the H100 such a box raised "illegal instruction")."""
    _patched_loop(monkeypatch, _rebind("sa_col", Var("m_row")))
    with pytest.raises(SimError, match="misaligned TMA box"):
        simulate_grouped(kernel_of("grouped_masked_fp8_h100_128x128"), **problem("masked_fp8"), seed=3, num_sms=3)


def test_planted_table_read_past_its_end(monkeypatch):
    """masked_m read at group + 3: the verifier's traced table has 3 words."""
    def edit(body):
        return [LdGlobalNcU32(op.var, op.index + 3) if isinstance(op, LdGlobalNcU32) else op for op in body]
    _patched_loop(monkeypatch, edit)
    with pytest.raises(VerifyError, match="out of bounds: .*group_ptr"):
        verify(kernel_of("grouped_masked_h100_128x128"))


def test_ptx_differential_agrees_and_catches_a_wrong_table_address(monkeypatch):
    res = build("grouped_contiguous_h100_128x128")
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None

    def wrong(lw, op):  # the word after the one asked for
        return original(lw, dataclasses.replace(op, index=op.index + 1))
    table = emitters.TABLES["sm_90a"]
    original = table[ops.LdGlobalNcU32]
    monkeypatch.setitem(table, ops.LdGlobalNcU32, wrong)
    res = build(load_config("grouped_contiguous_h100_128x128").replace(name="planted_table_address"))
    assert "('ld.global.nc.u32', 0x7c0000000004) vs IR ('ld.global.nc.u32', 0x7c0000000000)" in (
        sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) or "")


def test_table_loads_only_in_grouped_kernels():
    for name in ("h100_128x128", "fp8_h100_128x128"):
        assert not any(isinstance(op, LdGlobalNcU32) for op in ops.walk(kernel_of(name).body))
    body = kernel_of("grouped_masked_h100_128x128").body
    loads = [op for op in ops.walk(body) if isinstance(op, LdGlobalNcU32)]
    assert len(loads) == 2  # the producer's and the consumers' scheduler, one masked_m read each
    assert any(isinstance(op, For) and any(isinstance(x, If) for x in op.body) for op in ops.walk(body))
