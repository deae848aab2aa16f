"""Planted bugs in the NVFP4 dual GEMM's new parts, each caught by the verifier or the simulator.

Each plant is a plan change or an IR rewrite (:func:`ptxgen.ir.rewrite.rewrite`) of a shipped ``nvfp4_dual_*``
kernel; the unplanted kernels verify (tests/build/test_compile.py builds them) and simulate
(tests/check/sim/test_nvfp4_sim.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ptxgen.errors import VerifyError
from ptxgen.ir import ops as O
from ptxgen.check.verify import verify

from tests.check.test_dual_planted import _kernel, _sim_faults, body_holding

pytestmark = pytest.mark.sim

ONE, PAIR = "nvfp4_dual_128x128", "nvfp4_dual_256x128"
BOTH = pytest.mark.parametrize("config", [ONE, PAIR])


def _k_loop(fn):
    """Apply ``fn(list of ops)`` to the MMA issuer's k-block loop body (the one holding the tcgen05.cp ops)."""
    return body_holding(O.For, O.TmemCopy, fn)


def _mmas(change):
    """Rewrite every block-scaled MMA with ``change(op)``."""
    return lambda op: change(op) if isinstance(op, O.UmmaBlockScaled) else None


def _copies_after_the_mmas(body):
    """The scale atoms are copied after the MMAs that read them (the MMA runs on the previous k-block's scales)."""
    copies = [x for x in body if isinstance(x, O.TmemCopy)]
    rest = [x for x in body if not isinstance(x, O.TmemCopy)]
    last = max(i for i, x in enumerate(rest) if isinstance(x, O.UmmaBlockScaled))
    return rest[:last + 1] + copies + rest[last + 1:]


def _copies_before_the_wait(body):
    """The scale atoms are copied before the consumer_wait on ``full``: the TMA may not have landed them."""
    copies = [x for x in body if isinstance(x, O.TmemCopy)]
    rest = [x for x in body if not isinstance(x, O.TmemCopy)]
    wait = next(i for i, x in enumerate(rest) if isinstance(x, O.MbarrierWait) and x.bar.name == "full")
    return rest[:wait] + copies + rest[wait:]


def _tx_without_scales(plan):
    """expect_tx announces A + B1 + B2 only: the three scale tiles' bytes are missing."""
    sf = sum(s.region.slot_bytes for s in plan.loads.scale_operands)  # what lands in each CTA
    full = replace(plan.full, tx_bytes=plan.full.tx_bytes - sf * plan.roles.cta_group)
    return replace(plan, loads=replace(plan.loads, expect_tx_bytes=plan.loads.expect_tx_bytes - sf),
                   ab=replace(plan.ab, full=full))


def _tx_of_own_loads_only(plan):
    """The pair's expect_tx counts the bytes each CTA's own loads move, not the peer's multicast SFB halves."""
    full = replace(plan.full, tx_bytes=plan.loads.load_bytes * plan.roles.cta_group)
    return replace(plan, loads=replace(plan.loads, expect_tx_bytes=plan.loads.load_bytes), ab=replace(plan.ab, full=full))


def _sfb_halves_not_multicast(plan):
    """Each CTA of the pair loads its half of SFB1/SFB2 into its own stage only (no multicast mask): the other
    half of every B scale tile never lands, while expect_tx still counts it."""
    ops = tuple(replace(o, multicast=0) if o.scales in ("b", "b2") else o for o in plan.loads.operands)
    return replace(plan, loads=replace(plan.loads, operands=ops))


def _b2_reads_b1_scales(plan):
    """The B2 MMAs read SFB1's TMEM columns (a wrong scale-factor column)."""
    return replace(plan, mma=replace(plan.mma, streams=tuple(replace(m, sfb="sfb") for m in plan.mma.streams)))


@BOTH
def test_wrong_scale_factor_id_in_the_idesc(config):
    kernel = _kernel(config, fn=_mmas(lambda op: replace(op, idesc=op.idesc | 2 << 29)))  # a_sf_id = 2
    with pytest.raises(VerifyError, match=r"^block-scale mismatch: UmmaBlockScaled .* scale-factor ids A=2 B=0"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("bad instruction descriptor: tcgen05.mma.block_scale")
                                    and "scale-factor ids A=2 B=0" in f for f in faults)


@BOTH
def test_scale_copies_after_the_mmas(config):
    kernel = _kernel(config, fn=_k_loop(_copies_after_the_mmas))
    with pytest.raises(VerifyError, match=r"^scale factors not copied before the MMA: UmmaBlockScaled .* reads "
                                          r"scale_A at TMEM column 256"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("TMEM read before write: tcgen05.mma.block_scale") and
                                    "reads scale_A at TMEM columns [256, 260)" in f for f in faults)


@BOTH
def test_scale_copies_before_the_full_wait(config):
    kernel = _kernel(config, fn=_k_loop(_copies_before_the_wait))
    with pytest.raises(VerifyError, match=r"^missing wait: TmemCopy reads SFA stage 0 by mma .* without a wait on "
                                          r"full\[0\]"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("read before write: tcgen05.cp by mma") for f in faults)


@BOTH
def test_b2_mma_reads_the_wrong_scale_columns(config):
    kernel = _kernel(config, plan_change=_b2_reads_b1_scales)
    verify(kernel)  # the columns it reads were copied in this k-block: only the values are wrong
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("wrong result: ") for f in faults)


@BOTH
def test_scale_columns_never_copied(config):
    kernel = _kernel(config, fn=_mmas(lambda op: replace(op, sfb=op.sfb + 48)))  # past the last scale tile
    with pytest.raises(VerifyError, match=r"^scale factors not copied before the MMA: .* reads scale_B at TMEM column"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("TMEM read before write: tcgen05.mma.block_scale") and
                                    "scale_B" in f for f in faults)


@BOTH
def test_block32_for_block16(config):
    kernel = _kernel(config, fn=_mmas(lambda op: replace(op, scale_vec="block32")))
    with pytest.raises(VerifyError, match=r"^block-scale mismatch: UmmaBlockScaled mxf4nvf4.block32 .* \.block32 with "
                                          r"idesc scale format 0"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all("scale format bit 0 with .block32" in f for f in faults)


def test_pair_tx_bytes_missing_the_peers_sfb_halves():
    kernel = _kernel(PAIR, plan_change=_tx_of_own_loads_only)
    with pytest.raises(VerifyError, match=r"^transaction-byte mismatch: full\[0\] .* expect_tx 73728 B .* 77824 B"):
        verify(kernel)
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith(("read before write: tcgen05.cp", "transaction-byte mismatch",
                                                  "deadlock", "tx count underflow")) for f in faults), faults


def test_pair_sfb_halves_not_multicast():
    kernel = _kernel(PAIR, plan_change=_sfb_halves_not_multicast)
    with pytest.raises(VerifyError, match=r"^transaction-byte mismatch: full\[0\] .* expect_tx 77824 B"):
        verify(kernel)
    faults = _sim_faults(kernel)  # the stage never completes (or the copies read lines no TMA wrote)
    assert len(faults) == 3 and all(f.startswith(("read before write: tcgen05.cp", "transaction-byte mismatch",
                                                  "deadlock")) for f in faults), faults


@BOTH
def test_tx_bytes_missing_the_scale_tiles(config):
    kernel = _kernel(config, plan_change=_tx_without_scales)
    with pytest.raises(VerifyError, match=r"^transaction-byte mismatch: full\[0\] .* expect_tx"):
        verify(kernel)
    faults = _sim_faults(kernel)  # the stage completes before its scales land: read early, or bytes after the phase
    assert len(faults) == 3 and all(f.startswith(("read before write: tcgen05.cp", "transaction-byte mismatch",
                                                  "deadlock")) for f in faults), faults


def _collector_swapped(op):
    """B1's MMA claims ``lastuse`` and B2's ``fill``: the first reads a collector nothing filled."""
    if isinstance(op, O.UmmaBlockScaled) and op.collector:
        return replace(op, collector={"fill": "lastuse", "lastuse": "fill"}[op.collector])
    return None


def _collector_across_k_steps(body):
    """Only the first B1 MMA fills; every later MMA but the last ``use``s the collector, so the next k-step's MMAs
    claim the k-step-0 A slice the collector holds while their descriptors name another A."""
    mmas = [i for i, x in enumerate(body) if isinstance(x, O.UmmaBlockScaled)]
    out = list(body)
    for i in mmas[1:-1]:
        out[i] = replace(out[i], collector="use")
    return out


@BOTH
def test_collector_lastuse_without_a_fill(config):
    kernel = _kernel(config, fn=_collector_swapped)
    verify(kernel)  # the verifier does not model the collector buffer; the simulator does
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("collector misuse: tcgen05.mma.block_scale")
                                    and ".collector::a::lastuse reads A desc" in f and "holds nothing" in f
                                    for f in faults), faults


@BOTH
def test_collector_read_of_another_a_slice(config):
    kernel = _kernel(config, fn=_k_loop(_collector_across_k_steps))
    faults = _sim_faults(kernel)
    assert len(faults) == 3 and all(f.startswith("collector misuse: tcgen05.mma.block_scale")
                                    and ".collector::a::use reads A desc" in f and "which holds A desc" in f
                                    for f in faults), faults
