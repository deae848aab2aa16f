"""``schedule.grouped``: the config rules (one line naming field, value and rule), the plan's extra parameters and
launch metadata, and the shipped grouped configs' generated files."""

from __future__ import annotations

import pytest

from ptxgen.build import build, load_config
from ptxgen.config import shipped_configs
from ptxgen.errors import ConfigError
from ptxgen.plan import GROUP_PARAMS, make_plan

BASE = "grouped_masked_h100_128x128"


@pytest.mark.parametrize("changes, message", [
    ({"arch": "sm_100a", "tile.block_m": 128}, "the grouped scheduler is sm_90a only"),
    ({"schedule.persistent": False}, "needs schedule.persistent=true"),
    ({"epilogue.overlap": True, "epilogue.store": "tma"}, "needs epilogue.overlap=false"),
    ({"schedule.split_k": 2}, "needs schedule.split_k=1"),
    ({"epilogue.expr": "relu(acc)"}, "needs an empty epilogue.expr"),
    ({"mma.consumers": "pingpong"}, "needs mma.consumers=cooperative"),
    ({"schedule.grouped": "ragged"}, "schedule.grouped"),
    ({"schedule.grouped": "contiguous", "tile.block_m": 256, "pipeline.stages": 3},
     "schedule.grouped=contiguous needs block_m dividing 128"),
])
def test_grouped_rules_are_one_line_config_errors(changes, message):
    with pytest.raises(ConfigError) as exc:
        load_config(BASE).replace(**changes)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_grouped_kernels_may_stage_d_for_tma_stores():
    """``epilogue.store=tma``: whole m-blocks through the CD ring (tests/check/test_grouped_tma_store.py)."""
    for name in (BASE, "grouped_contiguous_fp8_h100_128x128"):
        plan = make_plan(load_config(name).replace(**{"epilogue.store": "tma", "epilogue.store_block_n": 64,
                                                        "epilogue.swizzle": "128", "epilogue.stmatrix": True,
                                                        "epilogue.stages": 2}))
        assert plan.epilogue.tma_store and plan.launch_spec().extra["store"] == "tma"


def test_grouped_kernels_take_the_table_and_g_after_k():
    for name in (BASE, "grouped_contiguous_fp8_h100_128x128"):
        plan = make_plan(load_config(name))
        assert plan.params[-2:] == GROUP_PARAMS
        spec = plan.launch_spec()
        assert spec.extra == {"grouped": plan.schedule.grouped} and spec.params == plan.params
    assert make_plan(load_config("h100_128x128")).launch_spec().extra == {}


def test_every_layout_ships_bf16_and_fp8():
    grouped = {(c.schedule.grouped, c.operands) for c in map(load_config, shipped_configs())
               if c.schedule.grouped != "none"}
    assert grouped == {(g, o) for g in ("masked", "contiguous") for o in ("bf16", "fp8")}


def test_grouped_ptx_names_the_table_loads():
    ptx = build(BASE).ptx
    assert "ld.global.nc.u32" in ptx and "// LdGlobalNcU32 group_rows_raw = group_ptr[group_id]" in ptx
    assert ".param .u64 group_ptr" in ptx and ".param .u32 num_groups" in ptx
