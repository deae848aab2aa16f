"""Split-K on CPU: config rules, plan numbers, the simulator's answer and the planted protocol bugs it catches,
the verifier's counter replay, the runtime workspace (one per stream) and the chooser's split-K term and picks.

A planted bug rewrites the builder's IR (:func:`ptxgen.ir.rewrite.rewrite`); each must fail with its message:
the counter is not reset, the last arriver skips a partial, a fixed split reduces without the count, the
count's threshold is off by one, the arrival loses its release or its acquire, a partial is stored after the
arrival, a split's k-block range is off by one, an arrival adds 2, the verdict's vote is on the arriving thread's
flag, the vote runs inside ``Elect``.
"""

from __future__ import annotations

import dataclasses

import pytest

from ptxgen.config import load_config
from ptxgen.errors import ConfigError, ShapeError, SimError, VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Const, Var, eq, lt, ne, select
from ptxgen.launch import LaunchSpec
from ptxgen.plan import make_plan
from ptxgen.check.sim import simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import verify

#: a few shapes per kernel: off-tile M and N, several tiles per CTA (num_sms=4), K with 7, 3 and 1 k-blocks
#: (one k-block leaves every split but the last empty), N not a multiple of 8 (direct stores)
SHAPES = [(150, 200, 7 * 64 - 40), (300, 390, 136), (70, 40, 8), (130, 70, 200)]


def split(name: str, splits: int):
    return load_config(name).replace(**{"schedule.split_k": splits})


def kernel(name: str, splits: int):
    from ptxgen.builders.kernel import build_kernel

    return build_kernel(make_plan(split(name, splits)))


# --------------------------------------------------------------------------- config and plan


def test_split_k_is_sm90_only():
    with pytest.raises(ConfigError, match=r"^schedule\.split_k=2: split-K is sm_90a only for now"):
        load_config("level9").replace(**{"schedule.split_k": 2})


def test_split_k_needs_a_persistent_grid():
    with pytest.raises(ConfigError, match=r"^schedule\.split_k=2: needs schedule\.persistent=true: the persistent tile loop walks"):
        load_config("h100_128x128").replace(**{"schedule.split_k": 2})


def test_split_k_refuses_pingpong_consumers():
    with pytest.raises(ConfigError, match=r"^schedule\.split_k=2: split-K's fixup counts partials per \(tile, consumer "
                                          r"warpgroup\); with mma\.consumers=pingpong .*must be 1"):
        load_config("h100_128x128_pp").replace(**{"schedule.split_k": 2})


def test_split_k_range():
    with pytest.raises(ConfigError, match=r"schedule\.split_k"):
        load_config("h100_128x192").replace(**{"schedule.split_k": 17})


def test_plan_numbers_and_launch_spec():
    plan = make_plan(split("h100_128x192", 3))
    sp, ws = plan.split, plan.split.workspace
    assert (sp.splits, sp.group_bytes, sp.group_threads, sp.chunks) == (3, 64 * 192 * 4, 128, 24)
    assert (ws.partial_bytes, ws.counters_per_tile, ws.ctas_per_tile) == (128 * 192 * 4, 2, 1)
    assert plan.params[-1] == ("workspace", "u64")
    spec = plan.launch_spec()
    assert spec.grid.split_k == 3 and LaunchSpec.from_json(spec.to_json()) == spec
    # 4096x576: 32 x 3 tiles of 128x192, 3 splits: 288 units, persistent grid capped at the SM count
    assert spec.grid.grid_x(4096, 576, 132) == 132 and spec.grid.grid_x(256, 192, 132) == 6
    assert ws.bytes_for(spec.grid, 4096, 576, 132) == 96 * 3 * 128 * 192 * 4 + 96 * 2 * 4  # a partial per split
    assert ws.counter_offset(96, 5, 1) == ws.counters_offset(96) + (5 * 2 + 1) * 4
    pair = make_plan(split("h100_128x256", 2)).split.workspace
    assert pair.ctas_per_tile == 2  # a multicast CTA pair computes two m-blocks: two CTA tiles per cluster tile
    assert make_plan(load_config("h100_128x192")).split is None


# --------------------------------------------------------------------------- simulator and verifier


@pytest.mark.parametrize("name,splits", [("h100_128x192", 3), pytest.param("h100_128x192", 4, marks=pytest.mark.slow),
                                         ("h100_256x128", 2), pytest.param("h100_128x256", 3, marks=pytest.mark.slow),
                                         pytest.param("dual_h100_128x128", 2, marks=pytest.mark.slow),
                                         ("dual_h100_128x128_c2", 3)])  # slow: a second split of a tile the tier has
def test_split_k_kernels_verify_and_simulate(name, splits):
    k = kernel(name, splits)
    verify(k)
    for i, shape in enumerate(SHAPES):
        r = simulate(k, *shape, seed=i, num_sms=4)
        assert r.rel_fro < 1e-2


def test_split_k_emits_the_protocol():
    from emitters import emit

    ptx = emit(kernel("h100_128x192", 3))
    for line in ("atom.acq_rel.gpu.global.add.u32", "bar.red.popc.u32", "st.relaxed.gpu.global.u32",
                 "st.global.v4.f32", "ld.global.v4.f32", '.pragma "nounroll";', ".param .u64 workspace"):
        assert line in ptx, line
    for spin in ("ld.acquire.gpu.global.u32", "red.release.gpu"):  # no CTA waits on another
        assert spin not in ptx, spin


def _planted(fn, name="h100_128x192", splits=3):
    return rewrite(kernel(name, splits), fn)


def _sim_error(k, shape=(300, 390, 136), seeds=(0, 1)) -> list[str]:
    out = []
    for s in seeds:
        with pytest.raises(SimError) as exc:
            simulate(k, *shape, seed=s, num_sms=4)
        out.append(str(exc.value))
    return out


def test_planted_counter_not_reset():
    k = _planted(lambda op: () if isinstance(op, O.StGlobalU32) else None)
    with pytest.raises(VerifyError, match=r"^split-K counter not reset: \d+ workspace counter"):
        verify(k)
    for msg in _sim_error(k, seeds=(0,)):
        assert msg.startswith("split-K counter not reset")


def test_planted_last_arriver_skips_a_partial():
    """The reduction's loop stops one partial short: the sim's result is wrong."""
    k = _planted(lambda op: dataclasses.replace(op, stop=op.stop - 1) if isinstance(op, O.For) and op.var == "ps"
                 else None)
    for msg in _sim_error(k, shape=(150, 200, 7 * 64 - 40)):
        assert msg.startswith("wrong result:")


def test_planted_fixed_owner_reduces_without_the_count():
    """The highest split reduces whatever the counter says: it reads partials before the counter says they landed."""
    def fixed_owner(op):
        if isinstance(op, O.NamedBarrierPopc):
            return (O.NamedBarrier(op.id, op.threads), O.Let("sk_reduce", eq(Var("split"), 2)))
        return None
    msgs = _sim_error(_planted(fixed_owner))
    assert all(m.startswith(("read of a partial that no completed store produced", "wrong result")) for m in msgs), msgs
    assert any(m.startswith("read of a partial") for m in msgs), msgs


def test_planted_count_off_by_one():
    """The split that sees ``arrivals - 2`` reduces: it reads a partial that has not landed yet."""
    def early(op):
        if isinstance(op, O.Let) and op.var == "sk_last" and op.expr != Const(0):
            return dataclasses.replace(op, expr=eq(Var("sk_seen"), select(lt(Var("num_k"), 3), Var("num_k"), 3) - 2))
        return None
    for msg in _sim_error(_planted(early)):
        assert msg.startswith("read of a partial that no completed store produced")


@pytest.mark.parametrize("sem,why", [("relaxed", "stored but no release"), ("release", "not acquired"),
                                     ("acquire", "stored but no release")])
def test_planted_arrival_loses_an_ordering(sem, why):
    k = _planted(lambda op: dataclasses.replace(op, sem=sem) if isinstance(op, O.AtomGlobalAdd) else None)
    for msg in _sim_error(k):
        assert msg.startswith("read of a partial that no completed store produced")
        assert why in msg, msg


def test_planted_partial_stored_after_arrival():
    """Each split's stores moved after its arrival: the release does not cover them."""
    def late(op):
        if isinstance(op, O.If) and any(isinstance(o, O.StGlobalF32) for o in op.then):
            return ()
        if isinstance(op, O.NamedBarrierPopc):
            stores = [o for o in O.walk(kernel("h100_128x192", 3).body)
                      if isinstance(o, O.If) and any(isinstance(x, O.StGlobalF32) for x in o.then)]
            return (*stores, op)
        return None
    k = _planted(late)
    for msg in _sim_error(k):
        assert msg.startswith("read of a partial that no completed store produced")


@pytest.mark.parametrize("delta", [1, -1], ids=["doubled", "skipped"])
def test_planted_wrong_split_range(delta):
    def shift(op):  # every split but the last ends one k-block late (k-block doubled) or early (skipped)
        if isinstance(op, O.Let) and op.var == "kb1":
            return dataclasses.replace(op, expr=op.expr + delta if delta > 0 else op.expr - 1)
        return None

    k = _planted(shift)
    for msg in _sim_error(k, shape=(150, 200, 7 * 64 - 40)):
        assert msg.startswith("wrong result:")


def test_vote_makes_the_verdict_warp_uniform():
    """Where the accumulator leaves room (``SplitKPlan.vote``), the verdict of ``bar.red.popc`` goes through
    ``vote.sync.any``; at 128 accumulator registers it does not (the uniform loop spills there)."""
    from emitters import emit
    from ptxgen.plan import VOTE_MAX_ACC_REGS

    ptx = emit(kernel("h100_128x192", 3))
    popc = ptx.index("bar.red.popc.u32 %sk_reduce")
    vote = ptx.index("vote.sync.any.pred", popc)
    assert "selp.u32 %sk_reduce, 1, 0" in ptx[vote:vote + 200] and ptx.count("vote.sync") == 1
    assert VOTE_MAX_ACC_REGS == 96 and make_plan(split("h100_128x192", 3)).split.vote
    assert not make_plan(split("h100_128x256", 3)).split.vote
    assert "vote.sync" not in emit(kernel("h100_128x256", 3))


def test_planted_vote_on_the_arriving_thread_only():
    """The warp votes on ``sk_last`` (1 on the arriving thread only) instead of the barrier's count: the other warps
    of the warpgroup skip the reduction and the epilogue (the simulator's result is wrong, the verifier finds their
    warpgroup's epilogue barrier never met)."""
    k = _planted(lambda op: dataclasses.replace(op, pred=ne(Var("sk_last"), 0)) if isinstance(op, O.VoteAny) else None)
    with pytest.raises(VerifyError, match=r"^circular wait"):
        verify(k)
    for msg in _sim_error(k, seeds=(0,)):
        assert msg.startswith("wrong result:")


def test_planted_vote_inside_elect():
    """``vote.sync`` is a warp collective: under ``Elect`` (one lane) the verifier refuses it."""
    k = _planted(lambda op: O.Elect((op,)) if isinstance(op, O.VoteAny) else None)
    with pytest.raises(VerifyError, match=r"^VoteAny sk_reduce .* warp-collective op but runs inside Elect"):
        verify(k)


def test_verifier_holds_the_traced_arrival_order():
    """An arrival that adds 2 leaves the counters off the traced order: the replay reports the arrival that waits
    for a count nobody leaves (or the counter is left nonzero)."""
    k = _planted(lambda op: dataclasses.replace(op, value=2) if isinstance(op, O.AtomGlobalAdd) else None)
    with pytest.raises(VerifyError, match=r"(?s)^(circular wait: .*AtomGlobalAdd .*the counter holds|split-K counter not reset)"):
        verify(k)


# --------------------------------------------------------------------------- runtime and chooser


def test_workspace_is_one_per_stream_and_capture_zeroed_and_bounded(monkeypatch):
    torch = pytest.importorskip("torch")
    from ptxgen.runtime import api

    spec = make_plan(split("h100_128x192", 3)).launch_spec()
    monkeypatch.setattr(api, "_workspaces", {})
    monkeypatch.setattr(api, "_owned", [])
    capture = [None]
    monkeypatch.setattr(api, "capture_of", lambda device, stream: capture[0])
    (ptr,) = api.split_k_workspace(spec, 300, 400, "cpu", 0, 7)
    assert api.split_k_workspace(spec, 300, 400, "cpu", 0, 7) == (ptr,)  # cached per stream: no per-call allocation
    (other,) = api.split_k_workspace(spec, 300, 400, "cpu", 0, 8)
    assert other != ptr  # another stream: its own counters
    capture[0] = 41  # a graph capture on stream 7: one workspace for all its launches, not the stream's
    (captured,) = api.split_k_workspace(spec, 300, 400, "cpu", 0, 7)
    assert captured not in (ptr, other) and api.split_k_workspace(spec, 300, 400, "cpu", 0, 7) == (captured,)
    capture[0] = 42  # another capture (its graph may be replayed beside the first): another workspace
    (captured2,) = api.split_k_workspace(spec, 300, 400, "cpu", 0, 7)
    assert captured2 not in (ptr, other, captured) and len(api._workspaces) == 4 and not api._owned
    capture[0] = None
    (own,) = api.split_k_workspace(spec, 300, 400, "cpu", 0, None)
    assert own not in (ptr, other, captured, captured2) and len(api._owned) == 1  # one of its own, for the process
    held = []
    (mine,) = api.split_k_workspace(spec, 300, 400, "cpu", 0, None, keep=held)  # a prepared launch's: its owner keeps it
    assert mine not in (ptr, other, own) and len(api._owned) == 1 and [b.data_ptr() for b in held] == [mine]
    tiles = spec.workspace.cta_tiles_for(spec.grid, 300, 400, 132)
    for buf in (*api._workspaces.values(), *api._owned, *held):
        assert buf.numel() == spec.workspace.bytes_for(spec.grid, 300, 400, 132) and buf.dtype == torch.uint8
        assert not buf[spec.workspace.counters_offset(tiles):].any()  # counters zero-filled; partials are written first
    assert api.split_k_workspace(make_plan(load_config("h100_128x192")).launch_spec(), 300, 400, "cpu", 0, 7) == ()
    with pytest.raises(ShapeError, match=r"needs a \d+ B split-K workspace; must be < 4 GiB"):
        api.split_k_workspace(spec, 65536, 65536, "cpu", 0, 7)


def test_shipped_split_k_configs_are_candidates():
    """The shipped split-K configs (chosen from the tune-half survey; docs/performance.md, "Split-K") are GEMM
    candidates: the protocol needs neither residency nor a stream of its own."""
    from ptxgen.runtime import choose

    split_names = {c.name for c in choose.candidates("sm_90a") if c.split_k > 1}
    assert split_names == {"h100_64x128_sk2", "h100_128x64_sk2", "h100_128x192_sk3", "h100_64x64_sk2", "h100_64x64_sk4",
                           "h100_128x128_c2_lw2", "h100_128x256_lw2", "h100_128x256_lw4", "h100_128x256_lw8"}
    assert all(load_config(n).schedule.split_k == choose.shipped_candidate(n).split_k for n in split_names)


def test_chooser_never_picks_a_split_k_workspace_past_4_gib():
    """A split-K config's workspace holds every tile's fp32 partials, which pass the kernel's 4 GiB of u32 offsets at
    large M x N (h100_64x64_sk4 at 8192x37888: refused with a ShapeError).  The cost model never picks such a config
    there, on either device's model: over M, N in 2^12..2^18 and K 512..32768, every split-K pick's workspace fits."""
    from ptxgen.runtime import api, choose

    specs = {c.name: make_plan(load_config(c.name)).launch_spec() for c in choose.candidates("sm_90a") if c.split_k > 1}
    picked = set()
    for device in ("", "H200"):
        for m in (4096, 8192, 16384, 65536, 262144):
            for n in (4096, 8192, 16384, 37888, 65536, 262144):
                for k in (512, 4096, 32768):
                    name = choose.choose_cached(m, n, k, (9, 0), 132, "gemm", device)[0]
                    if name in specs:
                        picked.add(name)
                        spec = specs[name]
                        tiles = spec.workspace.cta_tiles_for(spec.grid, m, n, 132)
                        assert spec.workspace.bytes(tiles) < api._U32_LIMIT, (device, m, n, k, name)
    # the grid reaches the sizes where an all-tiles split is refused (the limit is not vacuous here)
    sk4 = specs["h100_64x64_sk4"]
    assert sk4.workspace.bytes(sk4.workspace.cta_tiles_for(sk4.grid, 8192, 37888, 132)) >= api._U32_LIMIT
    assert picked  # some split-K configs are picked on the grid (last-wave ones at least)


@pytest.mark.parametrize("shape,split", [
    ((16, 5120, 8192), True),  # 40 n-blocks of 64x128 on 132 SMs: two splits fill them (tuned table, measured)
    ((64, 5120, 25600), True),  # few tiles, long K: the cost model
    ((4096, 4096, 4096), False), ((4096, 2112, 7168), False), ((1000, 1000, 1000), False),  # enough tiles
])
def test_chooser_picks_split_k_for_few_tiles_and_long_k(shape, split):
    from ptxgen.runtime import choose

    choose.choose_cached.cache_clear()
    try:
        picked, _ = choose.choose_cached(*shape, (9, 0), 132)
        assert (load_config(picked).schedule.split_k > 1) == split, picked
    finally:
        choose.choose_cached.cache_clear()


def test_cost_model_split_k_term():
    """Splitting K multiplies the work units and divides each unit's K; the partial traffic costs per unit."""
    from ptxgen.runtime.choose import SM90_GEMM_MODEL, Candidate, predict

    one = Candidate("t", "sm_90a", 64, 128, 64, 8, 1)
    two = one._replace(split_k=2)
    few = predict(two, 16, 5120, 16384, 132, SM90_GEMM_MODEL)
    assert (few["tiles"], few["units"], few["waves"]) == (40, 80, 1)
    assert few["us"] < predict(one, 16, 5120, 16384, 132, SM90_GEMM_MODEL)["us"]  # idle SMs filled
    # many tiles: the split only adds partial traffic and waves
    assert predict(two, 4096, 4096, 4096, 132, SM90_GEMM_MODEL)["us"] > predict(one, 4096, 4096, 4096, 132,
                                                                                  SM90_GEMM_MODEL)["us"]
    slow = SM90_GEMM_MODEL._replace(partial_tbps=SM90_GEMM_MODEL.partial_tbps / 4)
    assert predict(two, 16, 5120, 16384, 132, slow)["us"] > few["us"]
    assert predict(one, 16, 5120, 16384, 132, slow)["us"] == predict(one, 16, 5120, 16384, 132, SM90_GEMM_MODEL)["us"]


def test_kb1_var_is_bound_per_unit():
    """The split range is bound per work unit by the scheduler (the planted range bug rewrites it)."""
    lets = [op for op in O.walk(kernel("h100_128x192", 3).body) if isinstance(op, O.Let) and op.var in ("kb0", "kb1")]
    assert len(lets) == 4 and all(Var("num_k") in _leaves(op.expr) for op in lets)


def _leaves(e):
    if hasattr(e, "a"):
        yield from _leaves(e.a)
        yield from _leaves(e.b)
    else:
        yield e
