"""Runtime sizes against their meaning, computed here from the config alone (cluster-of-1, CTA-pair and 2x2-cluster
configs): split-K workspace bytes, grid sizes, TMA boxes."""

import math

import pytest

from ptxgen.build import build
from ptxgen.config import load_config
from ptxgen.shipped import shipped_configs

SK3 = load_config("h100_128x192_sk3")
SPLIT_K = {
    "sk3": SK3,
    "sk3_pair": SK3.replace(**{"cluster.size": 2, "cluster.dual_tile": True, "name": "sk3_pair"}),
    "dual_sk2": load_config("bench/configs/dual_h100_128x128_sk2.yaml"),
}
SHAPES = [(1, 1), (129, 193), (1000, 1000), (4096, 4096), (300, 5000)]
#: the 2x2-cluster bench probes (cluster: {size: 4, along: mn})
SQUARES = {name: load_config(f"bench/configs/{name}.yaml") for name in ("h100_128x128_c4", "h100_128x256_c4")}


def cta_rows(cfg) -> int:
    """Output rows one cluster step covers: a pair computing two m-blocks covers two."""
    return cfg.tile.block_m * (2 if cfg.cluster.dual_tile and cfg.cluster.along in ("m", "mn") else 1)


def cta_cols(cfg) -> int:
    """Output columns one cluster step covers: a pair along N (two n-blocks of one m-block) or a square covers two."""
    return cfg.tile.block_n * (2 if cfg.cluster.dual_tile and cfg.cluster.along in ("n", "mn") else 1)


@pytest.mark.parametrize("name", list(SPLIT_K))
@pytest.mark.parametrize("m, n", SHAPES)
def test_split_k_workspace_holds_every_ctas_partials_and_counters(name, m, n):
    cfg = SPLIT_K[name]
    spec = build(cfg).launch
    pair = cfg.cluster.size if cfg.cluster.dual_tile else 1
    cta_tiles = math.ceil(m / cta_rows(cfg)) * math.ceil(n / cta_cols(cfg)) * pair
    accumulators = 2 if cfg.kernel == "dual_gemm" else 1
    partial = cfg.tile.block_m * cfg.tile.block_n * 4 * accumulators  # fp32 partial tile of one CTA
    counters = cfg.mma.warpgroups  # one per consumer warpgroup
    splits = cfg.schedule.split_k
    assert spec.workspace.bytes_for(spec.grid, m, n, 132) == cta_tiles * (splits * partial + counters * 4)


@pytest.mark.parametrize("name", shipped_configs() + list(SPLIT_K) + list(SQUARES))
@pytest.mark.parametrize("m, n", SHAPES)
def test_grid_is_one_cluster_per_unit_of_work_or_per_cluster_of_sms(name, m, n):
    cfg = SPLIT_K.get(name) or SQUARES.get(name) or load_config(name)
    spec = build(cfg).launch
    cs, sms = cfg.cluster.size, 132
    units = math.ceil(m / cta_rows(cfg)) * math.ceil(n / cta_cols(cfg)) * cfg.schedule.split_k
    clusters = min(units, sms // cs) if cfg.schedule.persistent else units
    grid = spec.grid.grid_x(m, n, sms)
    assert grid == clusters * cs and grid % cs == 0


@pytest.mark.parametrize("name", shipped_configs() + list(SQUARES))
def test_tma_boxes_are_each_ctas_share_of_the_tile(name):
    cfg = SQUARES.get(name) or load_config(name)
    maps = build(cfg).launch.tensor_maps
    k_bytes = cfg.tile.block_k * {"nvfp4": 0.5, "fp8": 1, "mxfp8": 1}.get(cfg.operands, 2)  # one k-block of a row of A or B
    # a pair shares B (along M) or A (along N), a square both: each CTA loads (and multicasts or 2-SM-loads) half of
    # the shared rows
    a_half = cfg.cluster.along in ("n", "mn")
    b_half = cfg.cluster.size > 1 and cfg.cluster.along in ("m", "mn")
    assert maps["a"].box == (k_bytes // maps["a"].elem_bytes, cfg.tile.block_m // (2 if a_half else 1))
    b_rows = cfg.tile.block_n // (2 if b_half else 1)
    for b in ("b", "b2"):
        if b in maps:
            assert maps[b].box[1] == b_rows, (b, maps[b].box)
    for tm in maps.values():
        assert max(tm.box) <= 256  # PTX ISA "Tensor maps": box dimensions <= 256
        if tm.swizzle == "128B":
            assert tm.box[0] * tm.elem_bytes <= 128  # a 128B-swizzled box row is at most one 128-byte line


def test_a_cluster_above_two_ctas_sizes_its_grid_by_the_resident_clusters():
    """The runtime's grid for a cluster of 4 comes from the clusters the device holds at once (the kernel's
    occupancy query, ``Kernel.sm_slots``), not from the SM count over 4; a pair or a single CTA never asks."""
    from types import SimpleNamespace

    from ptxgen.runtime import api

    class Unasked:
        @property
        def sm_slots(self):
            raise AssertionError("a cluster of at most 2 CTAs must not query the occupancy")

    square = api.LoadedKernel(SimpleNamespace(sm_slots=120), None, build(SQUARES["h100_128x128_c4"]).launch)
    pair = api.LoadedKernel(Unasked(), None, build(load_config("h100_128x128_c2")).launch)
    assert api._sm_slots(square, 132) == 120 and api._sm_slots(pair, 132) == 132
    # 30 resident squares: a 4096 x 4096 output's 64 cluster units run on 30 clusters, not on 33
    assert api._grid_x(square.spec, 4096, 4096, api._sm_slots(square, 132)) == 120
