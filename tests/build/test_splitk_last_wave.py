"""Split-K of the last wave (``schedule.split_k_tiles: last_wave``) on CPU: the config rule, the host's grid and
workspace (:meth:`ptxgen.launch.GridPolicy.split_units`), the simulator on shapes with whole waves plus a tail
under small grids, the verifier, the PTX-vs-IR comparison of a launch with whole and split units, the chooser's
cost model, and the planted bugs each CPU check must catch: ``dp_tiles`` off by a wave, the workspace indexed
by the tile instead of the tail tile, a data-parallel tile that still arrives on a counter, the wrong count of
tail splits.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from ptxgen.check.sim import simulate
from ptxgen.check.verify import verify
from ptxgen.config import load_config
from ptxgen.errors import ConfigError, SimError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Var
from ptxgen.ir.rewrite import rewrite
from ptxgen.launch import GridPolicy, LaunchSpec, SplitUnits
from ptxgen.plan import make_plan


def last_wave(name: str, splits: int):
    return load_config(name).replace(**{"schedule.split_k": splits, "schedule.split_k_tiles": "last_wave"},
                                     name=f"{name}_lw{splits}")


@functools.cache
def kernel(name: str, splits: int):
    from ptxgen.builders.kernel import build_kernel

    return build_kernel(make_plan(last_wave(name, splits)))


# --------------------------------------------------------------------------- config and host numbers


def test_last_wave_needs_split_k():
    with pytest.raises(ConfigError, match=r"^schedule\.split_k_tiles='last_wave': needs schedule\.split_k >= 2"):
        load_config("h100_128x192").replace(**{"schedule.split_k_tiles": "last_wave"})


def test_split_k_tiles_choices():
    with pytest.raises(ConfigError, match=r"schedule\.split_k_tiles"):
        load_config("h100_128x192").replace(**{"schedule.split_k": 2, "schedule.split_k_tiles": "tail"})


def test_default_is_every_tile_and_the_spec_reads_back():
    plain = make_plan(load_config("h100_128x192").replace(**{"schedule.split_k": 3})).launch_spec()
    assert plain.grid.split_tiles == "all" and "split_tiles" not in plain.to_json()  # specs as before
    spec = make_plan(last_wave("h100_128x192", 3)).launch_spec()
    assert spec.grid.split_tiles == "last_wave" and LaunchSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("rows,cols,cs,s,m,n,sms,want", [
    # 2048x1152 of 128x128: 144 tiles on 132 SMs: one whole wave, 12 tail tiles in 24 units
    (128, 128, 1, 2, 2048, 1152, 132, SplitUnits(132, 132, 12, 156)),
    # 256x18432 of CTA-pair 256x128 cluster tiles: 144 tiles on 66 clusters: two whole waves, 12 tail tiles x 4
    (256, 128, 2, 4, 256, 18432, 132, SplitUnits(66, 132, 12, 180)),
    # 1024x1024 of 128x128: 64 tiles < 132: every tile split, the grid the units
    (128, 128, 1, 2, 1024, 1024, 132, SplitUnits(128, 0, 64, 128)),
    (128, 128, 1, 4, 1024, 1024, 132, SplitUnits(132, 0, 64, 256)),
    # whole waves only: nothing split
    (128, 128, 1, 2, 128 * 12, 128 * 11, 132, SplitUnits(132, 132, 0, 132)),
    (128, 192, 1, 3, 300, 390, 4, SplitUnits(4, 8, 1, 11)),
])
def test_split_units(rows, cols, cs, s, m, n, sms, want):
    g = GridPolicy(True, rows, cols, cs, s, "last_wave")
    assert g.split_units(m, n, sms) == want
    assert g.grid_x(m, n, sms) == want.clusters * cs


@pytest.mark.parametrize("cs", [1, 2])
@pytest.mark.parametrize("s", [2, 3, 4])
def test_host_and_kernel_agree_on_every_shape(cs, s):
    """The kernel computes ``dp_tiles = tiles - tiles % G`` from the grid it runs with; the host's numbers are
    those for every tile count: every cluster has a unit, the whole tiles are whole waves, the tail fits the
    workspace's G slots, and ``all`` keeps its grid."""
    for sms in (4, 10, 132):
        g = GridPolicy(True, 128, 128, cs, s, "last_wave")
        clusters0 = sms // cs
        for tiles in range(1, 3 * clusters0 + 2):
            u = g.split_units(128 * tiles, 128, sms)
            assert u.dp_tiles == tiles - tiles % u.clusters and u.split_tiles == tiles % u.clusters
            assert u.units == u.dp_tiles + u.split_tiles * s and u.clusters <= min(clusters0, u.units)
            assert u.dp_tiles % u.clusters == 0 and u.split_tiles < u.clusters
            old = min(tiles * s, max(1, clusters0))
            assert GridPolicy(True, 128, 128, cs, s).grid_x(128 * tiles, 128, sms) == old * cs


def test_workspace_holds_the_tail_only():
    spec = make_plan(last_wave("h100_128x256", 2)).launch_spec()
    ws = spec.workspace
    assert ws.ctas_per_tile == 2
    # 256x18432: 72 cluster tiles (n-blocks of 256) on 66 clusters: 6 tail tiles; slots for the 66 clusters
    assert spec.grid.split_units(256, 18432, 132) == SplitUnits(66, 66, 6, 78)
    assert ws.bytes_for(spec.grid, 256, 18432, 132) == ws.bytes(66 * 2)
    # bounded by G x ctas x S partials whatever the shape; the plain split-K workspace grows with the tiles
    assert ws.bytes_for(spec.grid, 8192, 65536, 132) == ws.bytes(66 * 2)
    every = make_plan(load_config("h100_128x256").replace(**{"schedule.split_k": 2})).launch_spec()
    assert every.workspace.bytes_for(every.grid, 8192, 65536, 132) == ws.bytes(32 * 256 * 2)


def test_runtime_workspace_follows_the_sm_count(monkeypatch):
    pytest.importorskip("torch")
    from ptxgen.runtime import api

    spec = make_plan(last_wave("h100_128x192", 3)).launch_spec()
    monkeypatch.setattr(api, "_workspaces", {})
    monkeypatch.setattr(api, "_owned", [])
    api.split_k_workspace(spec, 4096, 4096, "cpu", 0, 7, num_sms=132)
    api.split_k_workspace(spec, 4096, 4096, "cpu", 0, 7, num_sms=4)
    sizes = sorted(b.numel() for b in api._workspaces.values())
    assert sizes == [spec.workspace.bytes(4), spec.workspace.bytes(132)]


# --------------------------------------------------------------------------- simulator, verifier, PTX vs IR

#: (config, splits, shape, num_sms): whole waves plus a tail under 3-5 clusters, K with several k-blocks or one
#: (every split but the last empty), fewer tiles than clusters, ragged M/N
SIM_CASES = [
    ("h100_128x192", 3, (300, 390, 136), 4),  # 9 tiles on 4 clusters: 2 whole waves, 1 tail tile in 3 units
    ("h100_128x192", 3, (512, 400, 200), 5),  # 12 tiles on 5: 2 waves, 2 tail tiles
    ("h100_128x192", 2, (150, 200, 7 * 64 - 40), 3),  # 4 tiles on 3: 1 wave, 1 tail tile, 7 k-blocks
    ("h100_128x192", 3, (70, 40, 8), 4),  # 1 tile: split on 3 clusters, one k-block (2 empty splits)
    ("h100_256x128", 4, (600, 300, 200), 4),  # 9 tiles on 4: 2 waves, 1 tail tile in 4 units
    ("h100_256x128", 2, (520, 250, 136), 5),  # 6 tiles on 5: 1 wave, 1 tail tile
    ("h100_128x256", 2, (520, 700, 136), 6),  # CTA pairs: 9 cluster tiles on 3 clusters: whole waves only
    ("h100_128x256", 2, (520, 250, 136), 4),  # 3 cluster tiles on 2 clusters: 1 wave, 1 tail tile
    ("h100_128x256", 4, (700, 700, 200), 4),  # 9 cluster tiles on 2 clusters: 4 waves, 1 tail tile in 4 units
    ("h100_128x256", 8, (700, 700, 600), 4),  # the same grid, the tail tile in 8 units of 1-2 k-blocks
    ("h100_128x128_c2", 2, (700, 300, 136), 8),  # 9 cluster tiles on 4 clusters: 2 waves, 1 tail tile
    ("h100_128x128_c2", 3, (700, 390, 200), 10),  # 12 cluster tiles on 5 clusters: 2 waves, 2 tail tiles
    ("dual_h100_128x64", 2, (300, 330, 200), 4),  # dual GEMM: 18 tiles on 4 clusters: 4 waves, 2 tail tiles
    ("dual_h100_128x128_c2", 2, (700, 390, 200), 10),  # dual GEMM, CTA pairs: 12 cluster tiles on 5: 2 waves, 2 tail tiles
]


#: (config, splits) of SIM_CASES run in the slow tier: a second split of a tile the main tier already splits
SLOW_SPLITS = {("h100_128x256", 8), ("h100_128x128_c2", 3)}


@pytest.mark.parametrize("name,splits,shape,sms", [pytest.param(*c, marks=pytest.mark.slow) if c[:2] in SLOW_SPLITS else c
                                                   for c in SIM_CASES])
def test_simulate_whole_waves_and_a_tail(name, splits, shape, sms):
    k = kernel(name, splits)
    r = simulate(k, *shape, seed=sum(shape), num_sms=sms)
    assert r.rel_fro < 1e-2


def test_sim_cases_have_tails():
    units = [kernel(n, s).launch.grid.split_units(m, nn, sms) for n, s, (m, nn, _), sms in SIM_CASES]
    assert sum(u.dp_tiles > 0 and u.split_tiles > 0 for u in units) >= 6
    assert any(u.dp_tiles == 0 for u in units) and any(u.split_tiles == 0 for u in units)


@pytest.mark.parametrize("name,splits", [("h100_128x192", 3), ("h100_256x128", 2), ("h100_128x256", 4),
                                         pytest.param("h100_128x256", 8, marks=pytest.mark.slow),
                                         ("h100_128x128_c2", 2), ("dual_h100_128x64", 2)])
def test_last_wave_kernels_verify(name, splits):
    verify(kernel(name, splits))


@pytest.mark.parametrize("name,splits", [("h100_128x192", 3), ("h100_128x256", 2)])
def test_ptx_effects_equal_ir_effects_whole_and_split_units(name, splits):
    """4 x 2 cluster tiles on 3 clusters: each cluster runs 2 whole tiles then 2 split units of the 2 tail tiles;
    every CTA's consumer and producer threads compared, and the effects show both kinds of unit."""
    from emitters import emit
    from ptxgen.check.ptx import interp
    from ptxgen.check.ptx.diff import Launch, diff_thread, ptx_effects, role_ranges

    k = kernel(name, splits)
    prog = interp.parse(emit(k))
    g = k.launch.grid
    m, n, kk = 4 * g.tile_rows - 5, 2 * g.tile_cols - 8, k.block_k * (k.stages + 1) + 24
    sms = 3 * k.cluster_size
    assert g.split_units(m, n, sms) == SplitUnits(3, 6, 2, 6 + 2 * splits)
    grid = g.grid_x(m, n, sms)
    kinds = set()
    for ctaid in range(grid):
        for _, lo, hi in role_ranges(k):
            for tid in (lo * 32, (hi - 1) * 32 + 5):
                launch = Launch(m, n, kk, grid, ctaid, tid)
                msg = diff_thread(k, prog, launch)
                assert msg is None, msg
                kinds |= {e[0] for e in ptx_effects(prog, k, launch)}
    assert {"st.global.f32", "ld.global.f32", "atom.add", "bar.red.popc", "tma.store"} <= kinds


# --------------------------------------------------------------------------- planted bugs


def _planted(fn, name="h100_128x192", splits=3):
    return rewrite(kernel(name, splits), fn)


def _sim_errors(k, cases=((300, 390, 136, 4), (512, 400, 200, 5))) -> list[str]:
    out = []
    for m, n, kk, sms in cases:
        with pytest.raises(SimError) as exc:
            simulate(k, m, n, kk, seed=m, num_sms=sms)
        out.append(str(exc.value))
    return out


def _let(var, make):
    """Rewrite ``Let(var, e)`` to ``Let(var, make(e))``."""
    return lambda op: dataclasses.replace(op, expr=make(op.expr)) if isinstance(op, O.Let) and op.var == var else None


@pytest.mark.parametrize("delta", [1, -1], ids=["wave_more", "wave_fewer"])
def test_planted_dp_tiles_off_by_a_wave(delta):
    """One wave more: the tail tiles are computed whole and the unit count leaves tiles out; one wave fewer: a
    whole wave's tiles are split into workspace slots the grid does not have."""
    k = _planted(_let("dp_tiles", lambda e: e + Var("num_clusters") if delta > 0 else e - Var("num_clusters")))
    for msg in _sim_errors(k):
        assert msg.startswith("wrong result: " if delta > 0 else "out of bounds: StGlobalF32"), msg


def test_planted_workspace_indexed_by_tile():
    """The slot of tail tile ``dp_tiles + tail_tile`` instead of ``tail_tile``: past the grid's slots."""
    k = _planted(_let("tail_tile", lambda e: Var("dp_tiles") + e))
    for msg in _sim_errors(k):
        assert msg.startswith("out of bounds: StGlobalF32"), msg


def test_planted_whole_tile_arrives():
    """The arrival's predicate loses ``sk_tail``: whole tiles publish and count on the tail's counters."""
    def arrive_always(op):
        if isinstance(op, O.If) and any(isinstance(o, O.AtomGlobalAdd) for o in op.then):
            return dataclasses.replace(op, cond=op.cond.b)  # land(sk_tail, kb0 < kb1) -> kb0 < kb1
        return None
    k = _planted(arrive_always)
    for msg in _sim_errors(k):
        assert msg.startswith("read of a partial that no completed store produced"), msg


def test_planted_tail_split_count_wrong():
    """The tail runs split_k - 1 units per tile: its counters never reach the count, nothing stores it."""
    s = 3
    k = _planted(_let("num_units", lambda e: Var("dp_tiles") + (Var("num_tiles") - Var("dp_tiles")) * (s - 1)))
    for msg in _sim_errors(k):
        assert msg.startswith("split-K counter not reset"), msg


# --------------------------------------------------------------------------- cost model


def test_shipped_last_wave_configs():
    """The shipped last-wave configs (tune-half survey, docs/performance.md "Split-K of the last wave") are chooser
    candidates with their base config's tile factor."""
    from ptxgen.runtime import choose

    names = {c.name for c in choose.candidates("sm_90a") if c.split_tiles == "last_wave"}
    assert names == {"h100_128x128_c2_lw2", "h100_128x256_lw2", "h100_128x256_lw4", "h100_128x256_lw8"}
    factors = dict(choose.SM90_GEMM_MODEL.tile_factors)
    assert all(factors[n] == factors[n.rsplit("_lw", 1)[0]] for n in names)
    assert all(load_config(n).schedule.split_k_tiles == "last_wave" for n in names)


def test_cost_model_last_wave():
    """2048x1152x16384 on 132 SMs, 128x128: 144 tiles.  Unsplit: 2 waves of full K; last wave split 2 ways: one whole
    wave, then 24 units of K/2 in one wave, plus the partials of 12 tiles; splitting every tile: 288 units."""
    from ptxgen.runtime.choose import SM90_GEMM_MODEL, Candidate, predict

    one = Candidate("t", "sm_90a", 128, 128, 64, 4, 1, warpgroups=2)
    lw = one._replace(split_k=2, split_tiles="last_wave")
    every = one._replace(split_k=2)
    shape = (2048, 1152, 16384, 132, SM90_GEMM_MODEL)
    p1, plw, pall = predict(one, *shape), predict(lw, *shape), predict(every, *shape)
    assert (p1["waves"], plw["units"], plw["waves"], pall["units"], pall["waves"]) == (2, 156, 2, 288, 3)
    assert plw["us"] < p1["us"] and plw["us"] < pall["us"]
    # whole waves only (132 tiles): nothing split; the same time as the unsplit candidate but for the fixup every
    # whole tile passes predicated off (whole_tile_fixup_us per split)
    whole = (128 * 12, 128 * 11, 16384, 132)
    free = SM90_GEMM_MODEL._replace(whole_tile_fixup_us=0.0)
    assert predict(lw, *whole, free)["us"] == predict(one, *whole, free)["us"] < predict(lw, *whole, SM90_GEMM_MODEL)["us"]
    assert predict(one, *whole, free)["us"] == predict(one, *whole, SM90_GEMM_MODEL)["us"]
    # fewer tiles than SMs: every tile split, as plain split-K, but for the partial bandwidth of the last-wave configs'
    # own (lastwave_partial_tbps; none: partial_tbps)
    shared = SM90_GEMM_MODEL._replace(lastwave_partial_tbps=None)
    few = (1024, 1024, 32768, 132)
    assert predict(lw, *few, shared)["us"] == predict(every, *few, shared)["us"]
    assert SM90_GEMM_MODEL.lastwave_partial_tbps > SM90_GEMM_MODEL.partial_tbps
    assert predict(lw, *few, SM90_GEMM_MODEL)["us"] < predict(every, *few, SM90_GEMM_MODEL)["us"]
    assert predict(every, *few, SM90_GEMM_MODEL)["us"] == predict(every, *few, shared)["us"]


# --------------------------------------------------------------------------- ptxas


ROOT = Path(__file__).parents[2]
#: every last-wave config: the shipped ones and the bench/configs variants (YAML paths)
LAST_WAVE_CONFIGS = sorted((*ROOT.glob("ptxgen/configs/*_lw*.yaml"), *ROOT.glob("bench/configs/*_lw*.yaml")))


@pytest.mark.compile
@pytest.mark.parametrize("path", LAST_WAVE_CONFIGS, ids=lambda p: p.stem)
def test_last_wave_configs_assemble_without_spills(path):
    """ptxas -v of every last-wave config: no spill, no stack frame (a wgmma serialization raises); the fixup of a
    whole tile is predicated, so its accumulator adds do not break the wgmma pipeline (SplitKFixup.step)."""
    pytest.importorskip("cuda.pathfinder")
    from ptxgen.assemble import assemble
    from ptxgen.build import build

    res = assemble(build(load_config(path)).ptx, "sm_90a")
    assert (res.spill_store_bytes, res.spill_load_bytes, res.stack_frame_bytes) == (0, 0, 0), res.warnings
