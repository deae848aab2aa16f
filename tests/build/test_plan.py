"""Plan arithmetic against the seeds' numbers (LEVELS.md, seeds 000-004)."""

from __future__ import annotations

import pytest

from ptxgen.config import load_config, shipped_configs
from ptxgen.plan import make_plan


def plan(name):
    return make_plan(load_config(name))


def test_level8_budget_matches_seed():
    p = plan("level8")  # seed 004: 8 x 24576 + CD 2 x 16384 (+ barriers) <= 232448
    assert (p.loads.a_stage_bytes + p.loads.b_stage_bytes, p.stages) == (24576, 8)
    assert (p.smem.cd.stride, p.smem.cd.count) == (16384, 2)
    assert p.smem.bytes <= 232448 and p.smem.bytes >= 8 * 24576 + 32768
    assert p.tmem.cols == 256


def test_level9_layout_is_separated_and_dense():
    p = plan("level9")  # seed 002: [CD 32K][A0..A3][B0..B3][barriers][tmem slot]
    assert p.smem.cd.bytes == 32768 and p.loads.a.offset == 32768
    assert p.loads.a.stride == 256 * 64 * 2 and p.loads.b.offset == p.loads.a.offset + 4 * p.loads.a.stride
    assert p.loads.b.stride == 128 * 64 * 2  # each CTA holds half of B's 256 rows
    assert p.smem.barriers.offset >= p.loads.b.end and p.smem.tmem_slot > p.smem.barriers.offset
    assert p.tmem.cols == 512 and p.mma.m_waves == 2 and p.mma.umma_m == 256
    assert p.tmem_empty.init == (256, 256) and p.full.init == (2, 2)
    assert p.loads.full_tx_bytes == 2 * (32768 + 16384)
    assert p.schedule.group_clusters == 8  # swizzle group 16 m-blocks = 8 cluster m-blocks
    assert p.launch_spec().tensor_maps["a"].l2_promotion == "256B"


@pytest.mark.parametrize("name, full, tmem_empty", [
    ("level1", (2, 1), (1, 1)),  # peer relays; only the leader writes
    ("level2", (2, 2), (1, 1)),
    ("level7", (2, 2), (2, 2)),  # both CTAs release (seed 000)
    ("level9", (2, 2), (256, 256)),  # every epilogue thread of both CTAs
])
def test_barrier_counts(name, full, tmem_empty):
    p = plan(name)
    assert p.full.init == full and p.tmem_empty.init == tmem_empty


@pytest.mark.parametrize("name, idesc", [("level8", 0x10200490), ("level9", 0x10400490), ("level6", 0x10200490)])
def test_idesc(name, idesc):
    assert plan(name).mma.idesc == idesc


@pytest.mark.parametrize("name", shipped_configs())
def test_regions_disjoint_aligned(name):
    p = plan(name)
    regions = [(p.smem.cd.offset, p.smem.cd.end), (p.smem.barriers.offset, p.smem.tmem_slot + 4)]
    if p.cfg.smem.layout == "separated":
        regions += [(p.loads.a.offset, p.loads.a.end), (p.loads.b.offset, p.loads.b.end)]
    else:
        regions += [(p.loads.a.offset, p.loads.a.offset + p.stages * p.loads.a.stride)]
        assert p.loads.b.offset == p.loads.a.offset + p.loads.a_stage_bytes
    regions = sorted(r for r in regions if r[1] > r[0])
    assert all(a[1] <= b[0] for a, b in zip(regions, regions[1:]))
    for off in (p.loads.a.offset, p.loads.b.offset, p.loads.a.stride, p.loads.b.stride, p.smem.cd.offset, p.smem.cd.stride or 1024):
        assert off % 1024 == 0


def test_grid_policy():
    g = plan("level9").launch_spec().grid
    assert g.cluster_tiles(4096, 4096) == 8 * 16
    assert g.grid_x(4096, 4096, 132) == 132 and g.grid_x(300, 300, 132) == 4
    assert plan("level1").launch_spec().grid.grid_x(4096, 4096, 132) == 32 * 32 * 2
