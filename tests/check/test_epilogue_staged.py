"""The staged epilogue operand (an ``[M, N]`` residual read through the CD staging ring on sm_90a): the plan, the
emitted PTX, the simulator against the fp32 reference, the verifier, and planted bugs (the residual read before its
barrier wait, the wrong residual box, the staging slot refilled before the previous store read it out, under split-K
the boxes loaded by every split instead of the tile's last arriver)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ptxgen.build import build
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.sim import simulate
from ptxgen.check.verify import verify
from ptxgen.config import load_config
from ptxgen.errors import SimError, VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

#: a 2-stage ring with 4 store boxes per tile: each slot is refilled within a tile
CONFIG = "h100_128x256"
SHAPE = (300, 520, 64)  # M and N tails, several tiles per CTA on 2 SMs


def _plan(expr: str, config: str = CONFIG, **changes):
    return make_plan(load_config(config).replace(**{**changes, "epilogue.expr": expr}))


def _sim(kernel, plan, shape=SHAPE, **kw):
    return simulate(kernel, *shape, expr=plan.epilogue.expr, num_sms=2, **kw)


def test_plan_stages_one_tile_operand_of_stmatrix_tma_configs():
    p = _plan("gelu(acc + bias[col]) + residual")
    e = p.epilogue
    assert e.staged is not None and e.staged.name == "residual" and e.staged_map == "tile_residual"
    assert p.epi_full.num == e.stores_per_tile * e.groups and p.epi_full.tx_bytes == e.stage_bytes
    names = [n for n, _ in p.params]
    assert names.index("tmap_tile_residual") == names.index("tmap_d") + 1 and "epi_residual" in names
    spec = p.launch_spec().tensor_maps["tile_residual"]
    assert spec.box == p.launch_spec().tensor_maps["d"].box and spec.swizzle == "128B"
    # not staged: direct stores, st.shared staging, two residuals, the overlapped epilogue; staged under split-K
    assert _plan("acc + residual", "h100_128x128").epilogue.staged is None
    assert _plan("acc + residual", **{"epilogue.stmatrix": False}).epilogue.staged is None
    assert _plan('acc + residual + residual("r2")').epilogue.staged is None
    assert _plan("acc + residual", **{"schedule.split_k": 2}).epilogue.staged is not None
    assert _plan("acc + residual").epi_full is not None and _plan("acc * 2").epi_full is None


def test_ptx_loads_the_box_and_reads_it_with_ldmatrix():
    ptx = build(load_config(CONFIG).replace(**{"epilogue.expr": "acc + residual"})).ptx
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16")
    assert "[%tmap_tile_residual, {" in ptx and "// LdMatrix x4 ep_residual[0:8] <- bf16 smem+" in ptx
    # the direct branch (N not a multiple of 8) keeps the per-pair global loads
    assert "// LdEpilogue ep_residual[0:2] <- bf16 epi_residual[" in ptx


@pytest.mark.parametrize("config, expr, changes", [
    (CONFIG, "acc + residual", {}),
    (CONFIG, "gelu(acc + bias[col]) * scale[row] + residual", {}),
    ("h100_256x128", "fp16(acc * 0.25 - residual)", {}),
    ("h100_128x128_pp", "relu(acc) + residual", {"epilogue.store": "tma", "epilogue.stmatrix": True,
                                                 "epilogue.swizzle": "128", "epilogue.store_block_n": 64}),
    # split-K: only the tile's last arriver loads the boxes (after the verdict), counted by the tiles it stored
    ("h100_128x256_lw2", "acc + residual", {}),
    ("h100_64x64_sk2", "gelu(acc + bias[col]) * scale[row] + residual", {}),
    ("h100_64x64_sk4", "acc + residual", {}),
])
@pytest.mark.parametrize("policy", ["random", pytest.param("latest", marks=pytest.mark.slow)])
def test_staged_residual_matches_the_reference(config, expr, changes, policy):
    plan = _plan(expr, config, **changes)
    assert plan.epilogue.staged is not None
    kernel = build_kernel(plan)
    verify(kernel)
    _sim(kernel, plan, policy=policy)
    _sim(kernel, plan, shape=(130, 261, 64), policy=policy)  # N % 8 != 0: the direct branch


# ------------------------------------------------------------------ planted bugs


def _staged():
    plan = _plan("acc * scale[row] + residual")
    return plan, build_kernel(plan)


def test_planted_residual_read_before_its_barrier_wait():
    plan, kernel = _staged()
    bad = rewrite(kernel, lambda op: () if isinstance(op, O.MbarrierWait) and op.bar.name == "epi_full" else None)
    with pytest.raises(VerifyError, match=r"^missing wait: LdMatrix x4 ep_residual.* without a wait on its epi_full"):
        verify(bad)
    # the load not issued yet (no write produced the bytes), or issued and not landed (a TMA load still writes)
    with pytest.raises(SimError, match=r"^read before write: LdMatrix .* (a TMA load still writes|no write produced)"):
        _sim(bad, plan, policy="latest")


def test_planted_wrong_residual_box_coordinate():
    plan, kernel = _staged()
    bad = rewrite(kernel, lambda op: replace(op, col=op.col + 64)
                  if isinstance(op, O.TmaLoad) and op.tensor == "tile_residual" else None)
    with pytest.raises(VerifyError, match=r"^staged operand from the wrong box: TmaLoad tile_residual"):
        verify(bad)
    with pytest.raises(SimError, match=r"^wrong result"):
        _sim(bad, plan)


def _loads_residual(op) -> bool:
    return any(isinstance(x, O.TmaLoad) and x.tensor == "tile_residual" for x in O.walk(op.then))


def test_planted_staging_slot_reused_before_the_store_read_it():
    """The residual box loads (ahead of their boxes) without the wait for the earlier stores' reads of the slot."""
    plan, kernel = _staged()
    bad = rewrite(kernel, lambda op: replace(op, then=tuple(x for x in op.then if not isinstance(x, O.BulkWaitGroup)))
                  if isinstance(op, O.If) and _loads_residual(op) and any(isinstance(x, O.BulkWaitGroup) for x in op.then)
                  else None)
    assert bad != kernel
    with pytest.raises(VerifyError, match=r"^consumer release before the last read: TmaLoad tile_residual .* writes "
                                          r"CD stage \d+ while TmaStore d"):
        verify(bad)
    with pytest.raises(SimError, match=r"^write after read: .*TmaLoad tile_residual"):
        _sim(bad, plan, policy="latest")


def test_planted_ldmatrix_of_another_slot():
    """The ldmatrix reads the slot the previous box's load filled (the barrier waited is right)."""
    plan, kernel = _staged()
    stride = plan.smem.cd.stride
    bad = rewrite(kernel, lambda op: replace(op, addr=(op.addr + stride) % (2 * stride))
                  if isinstance(op, O.LdMatrix) else None)
    with pytest.raises(VerifyError, match=r"^(ldmatrix of the wrong slot|smem access outside its region)"):
        verify(bad)


def test_runtime_passes_the_staged_operand_map_after_d():
    """The call's tensor-map slot after D's takes the operand's address from the epilogue arguments."""
    from ptxgen.runtime.api import epilogue_maps

    spec = _plan("gelu(acc + bias[col]) * scale + residual").launch_spec()
    epi_params = [name for name, _ in spec.params if name.startswith("epi_")]
    assert epi_params == ["epi_bias", "epi_scale", "epi_residual"]
    assert epilogue_maps(spec) == (2,)
    assert epilogue_maps(_plan("acc + residual", "h100_128x128").launch_spec()) == ()


# ------------------------------------------------------------------ PTX against IR (ldmatrix, the box load)


def _differential(shape=(300, 520, 128)):
    """The staged kernel and its PTX, and the threads to compare at ``shape`` (N % 8 == 0: the TMA branch)."""
    from ptxgen.build import kernel_ptx
    from ptxgen.check.ptx import diff as D

    kernel = build_kernel(_plan("acc * 2 - residual"))
    return kernel, kernel_ptx(kernel), D.default_launches(kernel, shape)


def test_ptx_effects_equal_ir_effects_for_the_staged_residual():
    """Both branches: the box through ldmatrix (N % 8 == 0) and the direct pair loads (``ld.global.nc``)."""
    from ptxgen.check.ptx import diff as D

    kernel, ptx, launches = _differential()
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert D.sweep_threads(kernel, ptx, launches) is None
    direct = D.default_launches(kernel, (300, 517, 128))
    assert D.sweep_threads(kernel, ptx, direct) is None
    assert any(e[0] == "ld.global.nc" for e in D.ir_effects(kernel, direct[-2]))
    effects = D.ir_effects(kernel, launches[-2])
    assert any(e[0] == "ldmatrix" for e in effects) and any(e[0] == "tma.load" and e[1] == "tile_residual" for e in effects)


@pytest.mark.parametrize("old, new, what", [
    ("cvt.f32.bf16", "cvt.f32.f16", "stmatrix"),  # the loaded halves widened as the wrong type
    ("[%tmap_tile_residual, {%n_col,", "[%tmap_tile_residual, {%m_row,", "tma.load"),  # the box at the wrong column
])
def test_planted_ptx_of_the_staged_residual(old, new, what):
    from ptxgen.check.ptx import diff as D

    kernel, ptx, launches = _differential()
    assert old in ptx
    msg = D.sweep_threads(kernel, ptx.replace(old, new), launches)
    assert msg is not None and msg.startswith("PTX != IR") and f"('{what}'" in msg


def test_residual_boxes_load_ahead():
    """The first ``stages`` boxes load before the tile's first wgmma, the others right after a store's commit: no
    box's load sits between its slot's acquire and its wait (ptxgen.builders.staged)."""
    plan, kernel = _staged()
    order = [op for op in O.walk(kernel.body) if isinstance(op, (O.TmaLoad, O.Wgmma, O.TmaStore, O.MbarrierWait))]
    loads = [i for i, op in enumerate(order) if isinstance(op, O.TmaLoad) and op.tensor == "tile_residual"]
    first_wgmma = next(i for i, op in enumerate(order) if isinstance(op, O.Wgmma))
    e = plan.epilogue
    assert len(loads) == e.stores_per_tile and sum(i < first_wgmma for i in loads) == e.stages
    for i in loads[e.stages:]:  # a refill follows a store and precedes the next box's wait
        assert isinstance(order[i - 1], O.TmaStore)


def test_planted_split_k_boxes_loaded_by_every_split():
    """Split-K: the residual's first boxes loaded by every split of a tile, not only by its last arriver (the verdict's
    branch dropped): a split that stores nothing fills the staging slots and completes ``epi_full`` phases the last
    arriver then reads out of turn."""
    plan = _plan("acc + residual", "h100_64x64_sk2")
    kernel = build_kernel(plan)
    bad = rewrite(kernel, lambda op: op.then
                  if isinstance(op, O.If) and _loads_residual(op) and "sk_reduce" in str(op.cond) else None)
    assert bad != kernel
    with pytest.raises(SimError, match=r"^read before write: LdMatrix x4 ep_residual"):
        _sim(bad, plan, shape=(130, 264, 1000))
    with pytest.raises(VerifyError):
        verify(bad)
    _sim(kernel, plan, shape=(130, 264, 1000))
    verify(kernel)
