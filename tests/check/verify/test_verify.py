"""The static verifier: every shipped config passes; the barrier table; layout, TMEM and teardown rules.

Planted protocol bugs (arrival counts, tx bytes, parities, missing waits...)
are in tests/check/sim/test_sim_planted.py, run against both tools.
"""

from __future__ import annotations

import dataclasses

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ptxgen.config import load_config, unchecked
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir import Kernel
from ptxgen.ir.expr import Const
from ptxgen.plan import make_plan
from ptxgen.check.sim import default_shapes, simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import barrier_table, format_barrier_table, verify
from tests.helpers.representative import shipped_params
from tests.helpers.sim_support import kernel_for

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("config", shipped_params())  # the representative configs in the main tier, the others slow
def test_shipped_config_verifies(config: str) -> None:
    kernel = kernel_for(config)
    report = verify(kernel)
    assert report.kernel == kernel.name and report.phases > 0 and report.events > 0
    assert [r["name"] for r in report.barriers] == [s.name for s in kernel.barriers]


def test_level9_barrier_table() -> None:
    rows = {r["name"]: r for r in barrier_table(kernel_for("level9"))}
    assert rows["full"]["init"] == (2, 2) and rows["full"]["count"] == 4
    assert rows["full"]["arrivers"].startswith("r0: producer@r0 arrive.expect_tx x1, producer@r1 remote arrive.expect_tx x1")
    assert rows["full"]["waiters"] == "mma@r0 consumer_wait"
    assert rows["full"]["tx_per_phase"].startswith("r0: 98304 B (producer@r0 TMA a 32768 B")
    assert rows["empty"]["arrivers"] == "r0: mma@r0 commit multicast x1; r1: mma@r0 commit multicast x1"
    assert rows["tmem_empty"]["arrivers"].startswith("r0: epilogue@r0 arrive x128, epilogue@r1 remote arrive x128")
    assert rows["tmem_empty"]["init"] == (256, 256)


def test_sm90_multicast_barrier_table() -> None:
    rows = {r["name"]: r for r in barrier_table(kernel_for("h100_128x256"))}
    assert rows["full"]["tx_per_phase"] == ("r0: 49152 B (producer@r0 TMA a 16384 B, producer@r0 TMA b 16384 B, "
                                            "producer@r1 TMA b 16384 B); r1: 49152 B (producer@r0 TMA b 16384 B, "
                                            "producer@r1 TMA a 16384 B, producer@r1 TMA b 16384 B)")
    assert rows["empty"]["init"] == (4, 4)


def test_format_barrier_table() -> None:
    text = format_barrier_table(barrier_table(kernel_for("level2")))
    lines = text.splitlines()
    assert lines[0].split() == ["barrier", "n", "init/rank", "arrivals", "per", "phase", "waiters", "tx", "bytes",
                                "per", "phase"]
    assert set(lines[1]) <= {"-", " "}
    assert [ln.split()[0] for ln in lines[2:]] == ["full", "empty", "tmem_full", "tmem_empty"]
    assert "2/2" in lines[2]


# ------------------------------------------------------------------ layout, TMEM, teardown


def _with_plan(config: str, change) -> Kernel:
    return kernel_for(config, change(make_plan(load_config(config))))


def _with_region(kernel: Kernel, name: str, change) -> Kernel:
    """The kernel with shared-memory region ``name`` changed (the verifier reads only the kernel)."""
    return replace(kernel, regions=tuple(change(r) if r.name == name else r for r in kernel.regions))


def test_overlapping_regions() -> None:
    kernel = _with_region(kernel_for("level3"), "b", lambda r: replace(r, offset=kernel_for("level3").region("a").offset + 8192))
    with pytest.raises(VerifyError, match=r"^overlapping regions: A\[0\] \[0x0, 0x4000\) and B\[0\] \[0x2000, 0x4000\)"):
        verify(kernel)


def test_misaligned_region() -> None:
    kernel = _with_region(kernel_for("level9"), "a", lambda r: replace(r, offset=r.offset + 128))
    with pytest.raises(VerifyError, match=r"^misaligned region: A\[0\] at 0x8080 needs 1024-byte alignment"):
        verify(kernel)


def test_tmem_out_of_bounds() -> None:
    kernel = _with_plan("level9", lambda p: replace(p, tmem=replace(p.tmem, cols=256)))
    with pytest.raises(VerifyError, match=r"^TMEM access out of bounds: Umma by mma \(CTA 0, rank 0, warp 1\) at t=0 "
                                          r"kb=0 writes lanes \[0, 128\) columns \[256, 512\); 256 columns"):
        verify(kernel)


def test_tmem_dealloc_without_barrier() -> None:
    """Dealloc hoisted before the teardown cluster barrier: the MMAs of the pair may still write TMEM."""
    base = kernel_for("level7")
    body = list(base.body)
    dealloc = next(i for i, op in enumerate(body) if isinstance(op, O.WarpSwitch) and op.roles[0].name == "tmem_dealloc")
    sync = max(i for i in range(dealloc) if isinstance(body[i], O.ClusterSync))
    body[sync], body[dealloc] = body[dealloc], body[sync]
    with pytest.raises(VerifyError, match=r"^TMEM lifetime: Umma d=.* by mma \(CTA 0, rank 0, warp 1\) at t=0 kb=0 is "
                                          r"not separated by a cluster barrier from the alloc and the dealloc"):
        verify(replace(base, body=tuple(body)))


def test_remote_arrive_on_missing_rank_is_an_ir_fault() -> None:
    kernel = rewrite(kernel_for("level9"), lambda op: replace(op, cta=Const(2))
                     if isinstance(op, O.MbarrierArrive) and op.cta is not None else op)
    with pytest.raises(VerifyError, match=r"^barrier tmem_empty\[acc\] on cluster rank 2, but the cluster has 2 CTA\(s\) "
                                          r"\(epilogue \(CTA 0, rank 0, warp 4\) at t=0\)"):
        verify(kernel)


def test_umma_from_every_lane() -> None:
    """level9's MMA warp waits with all 32 lanes; without its Elect every lane would issue the MMAs."""
    kernel = rewrite(kernel_for("level9"), lambda op: op.body if isinstance(op, O.Elect) and
                     any(isinstance(o, O.Umma) for o in op.body) else op)
    with pytest.raises(VerifyError, match=r"^issued by 32 threads: Umma .* by mma \(CTA 0, rank 0, warp 1\) at t=0 kb=0"):
        verify(kernel)


# ------------------------------------------------------------------ the config space


_VARIANTS = st.fixed_dictionaries({
    "config": st.sampled_from(["level3", "level6", "level7", "level9", "h100_128x256", "h100_256x128"]),
    "pipeline.stages": st.integers(1, 6),
    "schedule.group": st.integers(1, 4),
    "epilogue.stages": st.integers(1, 2),
})


@settings(max_examples=12)
@given(_VARIANTS)
def test_config_variants_verify_and_simulate(variant: dict) -> None:
    """Configs the validator accepts around the shipped ones pass the verifier and simulate correctly."""
    base = load_config(variant["config"])
    changes = {k: v for k, v in variant.items() if k != "config"}
    if base.epilogue.store != "tma":
        changes.pop("epilogue.stages")
    assume(not (base.arch == "sm_90a" and changes["pipeline.stages"] == 1))  # see test_sm90_single_stage
    try:
        cfg = base.replace(**changes)
        plan = make_plan(cfg)  # the budgets are the plan's
    except ConfigError:
        cfg = plan = None
    assume(plan is not None)  # a rejected variant is discarded and replaced: 12 accepted variants are checked
    kernel = kernel_for(cfg.name, plan)
    verify(kernel)
    simulate(kernel, *default_shapes(kernel)[1], seed=1)


@pytest.mark.parametrize("config", ["h100_128x128", "h100_128x256"])
def test_sm90_single_stage(config: str) -> None:
    """sm_90a with pipeline.stages=1 deadlocks (the consumer releases stage it-1 only after waiting for stage
    it's refill).  Validation rejects it; built anyway (bypassing validation), both tools must report it."""
    base = load_config(config)
    with pytest.raises(ConfigError, match=r"pipeline.stages=1: sm_90a: must be >= 2"):
        base.replace(**{"pipeline.stages": 1})
    with pytest.raises(ConfigError, match=r"pipeline.stages=1: sm_90a: must be >= 2"):
        dataclasses.replace(base, pipeline=dataclasses.replace(base.pipeline, stages=1))
    cfg = unchecked(base, **{"pipeline.stages": 1})
    kernel = kernel_for(cfg.name, make_plan(cfg))
    with pytest.raises(SimError, match=r"^deadlock: "):
        simulate(kernel, *default_shapes(kernel)[1])
    with pytest.raises(VerifyError, match=r"^circular wait: .*\n  producer \(CTA 0, rank 0, warp 0\) at t=0 kb=1: "
                                          r"producer_acquire on empty\[0\] of CTA 0 \(rank 0\) for parity 0"):
        verify(kernel)


# ------------------------------------------------------------------ residency and register budget


def test_tmem_oversubscription() -> None:
    """Level 1's unpadded shared memory (24624 B) lets 9 CTAs share an SM: 9 x 128 TMEM columns > 512."""
    kernel = _with_plan("level1", lambda p: replace(p, smem=replace(p.smem, bytes=24624)))
    with pytest.raises(VerifyError, match=r"^TMEM oversubscription: 24624 B of shared memory lets 9 CTAs share an "
                                          r"SM, each allocating 128 TMEM columns \(1152 > 512\)"):
        verify(kernel)


def test_level1_shared_memory_bounds_ctas_per_sm() -> None:
    plan = make_plan(load_config("level1"))
    assert plan.smem.ctas_per_sm == 4 and plan.smem.ctas_per_sm * plan.tmem.cols == 512
    assert plan.launch_spec().dynamic_smem_bytes == plan.smem.bytes == 46704  # 5 CTAs would need 5 x 46704 > 233472 B even with no driver reserve


def test_sm100_without_minnctapersm() -> None:
    kernel = _with_plan("level9", lambda p: replace(p, registers=replace(p.registers, min_ctas_per_sm=0)))
    with pytest.raises(VerifyError, match=r"^register budget: \.minnctapersm missing; an sm_100a kernel declares"):
        verify(kernel)
