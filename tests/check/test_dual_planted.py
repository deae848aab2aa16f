"""Planted bugs in the dual GEMM's new parts, each caught by the verifier or the simulator.

Each plant is a plan change or an IR rewrite of a shipped ``dual_*`` kernel; the unplanted kernels pass both
checks in tests/check/verify/test_verify.py and tests/check/sim/test_sim.py.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.errors import SimError, VerifyError
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan
from ptxgen.check.sim import default_shapes, simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import verify
from tests.helpers.sim_support import before_wgmma_wait

pytestmark = pytest.mark.sim

H100, SM100 = "dual_h100_128x128", "dual_sm100_256x128"


def _kernel(config: str, plan_change=None, fn=None):
    plan = make_plan(load_config(config))
    kernel = build_kernel(plan_change(plan) if plan_change else plan)
    return rewrite(kernel, fn) if fn else kernel


def _sim_faults(kernel) -> list[str]:
    out = []
    for s in (0, 1, 2):
        try:
            simulate(kernel, *default_shapes(kernel)[1], seed=s, schedule_seed=s)
        except SimError as exc:
            out.append(str(exc))
    return out


def _tx_without_b2(plan):
    """The ``full`` barrier announces A + B1 only: B2's bytes are missing from expect_tx."""
    return replace(plan, ab=replace(plan.ab, full=replace(plan.full, tx_bytes=plan.full.tx_bytes - plan.loads.b_stage_bytes)))


def _b2_into_b1_slot():
    """The TMA load of B2 lands in B1's slot of the stage."""
    b1 = {}

    def fn(op):
        if isinstance(op, O.TmaLoad) and op.tensor == "b":
            b1["dst"] = op.dst
        if isinstance(op, O.TmaLoad) and op.tensor == "b2":
            return replace(op, dst=b1["dst"])
    return fn


def body_holding(container, member, fn):
    """A rewrite applying ``fn(list of ops)`` to the body of each ``container`` op that directly holds a ``member``."""
    def rw(op):
        if isinstance(op, container) and any(isinstance(x, member) for x in op.body):
            return replace(op, body=tuple(fn(list(op.body))))
    return rw


def _issuer(fn):
    """Apply ``fn(list of ops)`` to the MMA issuer's Elect body (the one holding the UMMAs)."""
    return body_holding(O.Elect, O.Umma, fn)


def _release_after_first_mma(body):
    """consumer_release of the stage (commit to ``empty``) right after the first (B1) MMA: B2's MMAs still read it."""
    commit = next(x for x in body if isinstance(x, O.UmmaCommit) and x.bar.name == "empty")
    body.remove(commit)
    body.insert(1, commit)
    return body


#: the epilogue computes silu(acc0) * acc1 before wgmma.wait_group 0: the accumulators are still being written
_silu_before_wgmma_wait = before_wgmma_wait(O.EpilogueExpr)


def _tmem_full_before_last_b2_mma(body):
    """sm_100a: the accumulator-ready commit issued before the tile's last B2 MMA (acc2 read before its commit)."""
    ready = next(x for x in body if isinstance(x, O.If)
                 and any(isinstance(y, O.UmmaCommit) and y.bar.name == "tmem_full" for y in x.then))
    body.remove(ready)
    body.insert(max(i for i, x in enumerate(body) if isinstance(x, O.Umma)), ready)
    return body


def test_tx_bytes_missing_b2() -> None:
    kernel = _kernel(H100, plan_change=_tx_without_b2)
    with pytest.raises(VerifyError, match=r"^transaction-byte mismatch: full\[0\] .* expect_tx 32768 B .* deliver 49152"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith(("read before write: Wgmma", "transaction-byte mismatch: TmaLoad"))
                                    for f in faults)


@pytest.mark.parametrize("config", [H100, SM100])
def test_b2_loaded_into_b1_slot(config) -> None:
    faults = _sim_faults(_kernel(config, fn=_b2_into_b1_slot()))
    assert len(faults) == 3 and all(f.startswith(("write after write: TmaLoad b2", "read before write:")) for f in faults)


def test_stage_released_after_first_of_two_mmas() -> None:
    faults = _sim_faults(_kernel(SM100, fn=_issuer(_release_after_first_mma)))
    assert faults and all(f.startswith(("write after read: TmaLoad", "write after read: Umma", "read before write: Umma"))
                          for f in faults)


def test_epilogue_reads_acc2_before_its_wgmma_completes() -> None:
    faults = _sim_faults(_kernel(H100, fn=_silu_before_wgmma_wait))
    assert len(faults) == 3 and all("read while a wgmma writing it is not covered by a wgmma.wait_group" in f
                                    for f in faults)


def test_sm100_epilogue_reads_acc2_before_its_commit() -> None:
    """The simulator orders each UMMA's TMEM write before a tcgen05.ld only through a tcgen05.commit issued after
    it (happens-before, not timing): every schedule reports the read of acc2 columns, whether or not the last B2
    UMMA has completed by then (before this rule the race was caught on a few schedules only)."""
    faults = _sim_faults(_kernel(SM100, fn=_issuer(_tmem_full_before_last_b2_mma)))
    assert len(faults) == 3 and all(re.match(
        r"unordered tcgen05 access: TmemLoad 32x32b\.x32 by epilogue .* may read TMEM of CTA \d+ \(rank \d\) columns "
        r"\[128, 160\) before Umma by mma \(CTA \d+, rank 0, warp 1\) at t=\d+ kb=\d+ writing them completes", f)
        for f in faults), faults
