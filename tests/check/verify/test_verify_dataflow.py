"""Planted bugs for the verifier's hand-over rule.

A role hands a pipeline stage over (consumer_release on ``empty``/``tmem_empty``, producer_commit on
``tmem_full``, the TMA store's ``cp.async.bulk.wait_group.read`` for a staging buffer, the
``wgmma.wait_group`` for sm_90a register accumulators) only after its last access of the stage, by an op
that orders the asynchronous access (``tcgen05.commit`` of the issuing thread, ``wgmma.wait_group``,
``tcgen05.wait::ld``; another warp's access through a thread barrier).  Each plant moves
or drops one op of a shipped kernel's IR and checks the exact finding.  The unplanted kernels verify clean in
tests/check/verify/test_verify.py (test_shipped_config_verifies).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen.errors import VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Const, Var
from ptxgen.check.verify import verify
from tests.check.test_dual_planted import (_issuer, _kernel, _release_after_first_mma, _silu_before_wgmma_wait,
                               _tmem_full_before_last_b2_mma)
from tests.check.sim.test_sim_planted import _release_before_last_load
from tests.helpers.sim_support import drop, in_role, where

pytestmark = pytest.mark.sim

SM100, DUAL_SM100, DUAL_H100 = "level9", "dual_sm100_256x128", "dual_h100_128x128"


def _by(role: str, warp: int, at: str) -> str:
    """Regex of `` by ROLE (CTA 0, rank 0, warp WARP) at AT`` in a finding."""
    return rf" by {role} \(CTA 0, rank 0, warp {warp}\) at {at}"


def _holds(op, pred) -> bool:
    """Whether ``op`` or an op nested in it (If, For, Elect bodies) matches ``pred``."""
    return pred(op) or any(_holds(x, pred) for attr in ("body", "then", "orelse") for x in getattr(op, attr, ()))


def _arrives_on(name: str):
    return lambda op: isinstance(op, O.MbarrierArrive) and op.bar.name == name


def _in_loop_with(pred, change):
    """A rewrite applying ``change(list of ops)`` to each For body that holds an op matching ``pred``."""
    def rw(op):
        if isinstance(op, O.For) and any(pred(x) for x in op.body):
            return replace(op, body=tuple(change(list(op.body))))
    return rw


def _is_wgmma_wait(n: int):
    return lambda op: isinstance(op, O.WgmmaWait) and op.n == n


def _arrive_before_wgmma_wait(body: list) -> list:
    """sm_90a k-loop: the consumer_release of stage it-1 (``If kb != 0 ... MbarrierArrive empty[...]``) moved
    before the loop's ``wgmma.wait_group 1``."""
    release = next(x for x in body if isinstance(x, O.If) and _holds(x, _arrives_on("empty")))
    body.remove(release)
    body.insert(next(i for i, x in enumerate(body) if isinstance(x, O.WgmmaWait)), release)
    return body


def _wgmma_wait_on_tma_path_only(body: list) -> list:
    """sm_90a tile loop: ``wgmma.wait_group 0`` moved into the TMA-store branch of ``If (n % 8) == 0`` (and the
    last stage's release after that If): the st.global branch, taken only when n % 8 != 0, reads the
    accumulators while the wgmmas may still write them."""
    wait = next(x for x in body if isinstance(x, O.WgmmaWait) and x.n == 0)
    release = next(x for x in body if isinstance(x, O.If) and _holds(x, _arrives_on("empty")))
    body = [x for x in body if x is not wait and x is not release]
    at = next(i for i, x in enumerate(body) if isinstance(x, O.If) and x.orelse)
    body[at:at + 1] = [replace(body[at], then=(wait, *body[at].then)), release]
    return body


def _wait_ld_after_release(body: list) -> list:
    """sm_100a epilogue: the ``tcgen05.wait::ld`` of the last TMEM load moved after the tmem_empty arrive."""
    arrive = next(i for i, x in enumerate(body) if _arrives_on("tmem_empty")(x))
    wait = max(i for i in range(arrive) if isinstance(body[i], O.TmemWaitLd))
    body.insert(arrive, body.pop(wait))
    return body


def _no_wait_ld_before_release(body: list) -> list:
    """sm_100a epilogue: the ``tcgen05.wait::ld`` before the tmem_empty arrive dropped."""
    arrive = next(i for i, x in enumerate(body) if _arrives_on("tmem_empty")(x))
    del body[max(i for i in range(arrive) if isinstance(body[i], O.TmemWaitLd))]
    return body


def _release_before_thread_barrier(body: list) -> list:
    """level 7: warp 4 releases the accumulator right after its own last ``tcgen05.wait::ld``, before the
    thread barriers that order the other epilogue warps' TMEM loads."""
    release = next(x for x in body if isinstance(x, O.If) and _holds(x, _arrives_on("tmem_empty")))
    body.remove(release)
    body.insert(max(i for i, x in enumerate(body) if isinstance(x, O.TmemWaitLd)) + 1, release)
    return body


def _commit_as_plain_arrives(op):
    """sm_100a: a multicast tcgen05.commit replaced by one plain mbarrier.arrive per CTA of the pair."""
    if isinstance(op, O.UmmaCommit):
        return tuple(O.MbarrierArrive(op.bar, Const(rank)) for rank in (0, 1))


def _commits_in_second_elect(op):
    """The MMA issuer's commits moved to a second ``elect.sync``: possibly another thread than the MMAs'."""
    if isinstance(op, O.Elect) and any(isinstance(x, O.Umma) for x in op.body):
        return (O.Elect(tuple(x for x in op.body if isinstance(x, O.Umma))),
                O.Elect(tuple(x for x in op.body if not isinstance(x, O.Umma))))


def _waits_bulk(op) -> bool:
    return isinstance(op, O.If) and any(isinstance(x, O.BulkWaitGroup) and x.read for x in op.then)


def _no_barrier_after_store_wait(op):
    """Epilogue: the thread barrier after the storing warp's ``cp.async.bulk.wait_group.read`` dropped, so the
    other warps may write a staging buffer that a TMA store still reads."""
    def strip(body: tuple) -> tuple:
        return tuple(x for i, x in enumerate(body)
                     if not (i and isinstance(x, O.NamedBarrier) and _waits_bulk(body[i - 1])))
    if isinstance(op, O.For):
        return replace(op, body=strip(op.body))
    if isinstance(op, O.If):
        return replace(op, then=strip(op.then))


def _tmem_load(op) -> bool:
    return isinstance(op, O.TmemLoad)


def _commits_to(name: str):
    return lambda op: isinstance(op, O.UmmaCommit) and op.bar.name == name


def _other_acc_stage(op):
    return replace(op, bar=replace(op.bar, index=(Var("acc") + 1) % 2))


_ACC0_READ_EARLY = (r"^register array 'acc0' read while a wgmma writing it is not covered by a wgmma\.wait_group "
                    r"\(consumer \(CTA 0, rank 0, warp 4\) at t=0\)")

#: name -> (planted kernel, regex of the finding)
PLANTS = {
    # producer_commit after the producer's last write (level 9 and the sm_100a dual GEMM)
    "level9: tmem_full commit before the last UMMA": (
        lambda: _kernel(SM100, fn=_issuer(_tmem_full_before_last_b2_mma)),
        (r"^producer commit before the last write: UmmaCommit -> tmem_full\[acc\] multicast=0x3"
         + _by("mma", 1, "t=0 kb=8") + r" commits accumulator stage 0, then Umma d=\(tmem \+ \(acc \* 512\)\) \+ 256 "
         r"a_lo=a_lo \+ 1030 b_lo=b_lo \+ 6 acc=1" + _by("mma", 1, "t=0 kb=8")
         + r" writes it before the next wait on tmem_empty\[0\]; the epilogue may read it before this write lands")),
    "dual_sm100: tmem_full commit before the last B2 UMMA": (
        lambda: _kernel(DUAL_SM100, fn=_issuer(_tmem_full_before_last_b2_mma)),
        (r"^producer commit before the last write: UmmaCommit -> tmem_full\[acc\] multicast=0x3"
         + _by("mma", 1, "t=0 kb=12") + r" commits accumulator stage 0, then Umma d=\(tmem \+ \(acc \* 256\)\) \+ 128 "
         r"a_lo=a_lo \+ 6 b_lo=b2_lo \+ 6 acc=1" + _by("mma", 1, "t=0 kb=12")
         + r" writes it before the next wait on tmem_empty\[0\]")),
    "level9: tmem_full signalled by plain arrives": (
        lambda: _kernel(SM100, fn=where(_commits_to("tmem_full"), _commit_as_plain_arrives)),
        (r"^producer commit before the last write completes: MbarrierArrive tmem_full\[acc\] on cta 0"
         + _by("mma", 1, "t=0 kb=8") + r" commits accumulator stage 0 while Umma d=tmem \+ \(acc \* 512\) a_lo=a_lo "
         r"b_lo=b_lo acc=kb != 0 \(at t=0 kb=0\) may still be in flight: a plain mbarrier\.arrive does not wait for "
         r"the asynchronous tcgen05\.mma")),
    # consumer_release after the consumer's last read: smem operand stages, sm_100a
    "dual_sm100: stage released after the first of two UMMAs": (
        lambda: _kernel(DUAL_SM100, fn=_issuer(_release_after_first_mma)),
        (r"^consumer release before the last read: UmmaCommit -> empty\[stage\] multicast=0x3"
         + _by("mma", 1, "t=0 kb=0")
         + r" releases operand stage 0, then Umma d=\(tmem \+ \(acc \* 256\)\) \+ 128 a_lo=a_lo b_lo=b2_lo acc=kb != 0"
         + _by("mma", 1, "t=0 kb=0") + r" reads it before the next wait on full\[0\]; the producer may refill it while "
         r"it is still read")),
    "level9: operand stage released by plain arrives": (
        lambda: _kernel(SM100, fn=where(_commits_to("empty"), _commit_as_plain_arrives)),
        (r"^consumer release before the last read completes: MbarrierArrive empty\[stage\] on cta 0"
         + _by("mma", 1, "t=0 kb=0") + r" releases operand stage 0 while Umma .* \(at t=0 kb=0\) may still be in "
         r"flight: a plain mbarrier\.arrive does not wait for the asynchronous tcgen05\.mma")),
    "level9: commits under a second elect.sync": (
        lambda: _kernel(SM100, fn=_commits_in_second_elect),
        (r"^consumer release before the last read completes: UmmaCommit -> empty\[stage\] multicast=0x3"
         + _by("mma", 1, "t=0 kb=0") + r" releases operand stage 0 while Umma .* may still be in flight: "
         r"tcgen05\.commit tracks only the prior tcgen05\.mma of its own thread")),
    # smem operand stages, sm_90a
    "h100_256x128: empty arrive before wgmma.wait_group": (
        lambda: _kernel("h100_256x128", fn=_in_loop_with(_is_wgmma_wait(1), _arrive_before_wgmma_wait)),
        (r"^consumer release before the last read completes: MbarrierArrive empty\[\(it - 1\) % 4\]"
         + _by("consumer", 4, "t=0 kb=1") + r" releases operand stage 0 while Wgmma m64n128k16 acc0 .* \(at t=0 kb=0\) "
         r"may still be in flight: no wgmma\.wait_group retires its wgmma group before the arrive")),
    "dual_h100: empty arrive before wgmma.wait_group": (
        lambda: _kernel(DUAL_H100, fn=_in_loop_with(_is_wgmma_wait(1), _arrive_before_wgmma_wait)),
        (r"^consumer release before the last read completes: MbarrierArrive empty\[\(it - 1\) % 4\]"
         + _by("consumer", 4, "t=0 kb=1") + r" releases operand stage 0 while Wgmma .* \(at t=0 kb=0\) may still be "
         r"in flight: no wgmma\.wait_group retires")),
    "h100_128x256: wgmma.wait_group 1 dropped": (
        lambda: _kernel("h100_128x256", fn=where(_is_wgmma_wait(1), drop)),
        (r"^consumer release before the last read completes: MbarrierArrive empty\[\(it - 1\) % 4\] on cta 0"
         + _by("consumer", 4, "t=0 kb=1") + r" releases operand stage 0 while Wgmma .* \(at t=0 kb=0\) may still be "
         r"in flight: no wgmma\.wait_group retires")),
    # sm_90a register accumulators: the producer_commit is the wgmma.wait_group before the epilogue reads them
    "dual_h100: silu * mul before wgmma.wait_group 0": (
        lambda: _kernel(DUAL_H100, fn=_silu_before_wgmma_wait),
        _ACC0_READ_EARLY),
    "h100_256x128: wgmma.wait_group 0 before the epilogue dropped": (
        lambda: _kernel("h100_256x128", fn=where(_is_wgmma_wait(0), drop)),
        _ACC0_READ_EARLY),
    "h100_256x128: wgmma.wait_group 0 only on the TMA-store path (ragged n)": (
        lambda: _kernel("h100_256x128", fn=_in_loop_with(_is_wgmma_wait(0), _wgmma_wait_on_tma_path_only)),
        _ACC0_READ_EARLY),
    # TMEM accumulator stages
    "dual_sm100: tmem_empty release before the last TMEM load": (
        lambda: _kernel(DUAL_SM100, fn=in_role("epilogue", _release_before_last_load)),
        (r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0 release\.cluster"
         + _by("epilogue", 4, "t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 96 \(at t=0\) "
         r"may still be in flight: no tcgen05\.wait::ld between them .*; the MMA may overwrite it")),
    "level9: tcgen05.wait::ld after the tmem_empty arrive": (
        lambda: _kernel(SM100, fn=in_role("epilogue", _in_loop_with(_tmem_load, _wait_ld_after_release))),
        (r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0 release\.cluster"
         + _by("epilogue", 4, "t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 480 \(at t=0\) "
         r"may still be in flight: no tcgen05\.wait::ld between them")),
    "level9: tcgen05.wait::ld before the tmem_empty arrive dropped": (
        lambda: _kernel(SM100, fn=in_role("epilogue", _in_loop_with(_tmem_load, _no_wait_ld_before_release))),
        (r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0 release\.cluster"
         + _by("epilogue", 4, "t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 480 \(at t=0\) "
         r"may still be in flight: no tcgen05\.wait::ld between them")),
    "dual_sm100: tcgen05.wait::ld after the tmem_empty arrive": (
        lambda: _kernel(DUAL_SM100, fn=in_role("epilogue", _in_loop_with(_tmem_load, _wait_ld_after_release))),
        (r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0 release\.cluster"
         + _by("epilogue", 4, "t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 96 \(at t=0\) "
         r"may still be in flight: no tcgen05\.wait::ld")),
    "level7: tmem_empty arrive before the epilogue's thread barrier": (
        lambda: _kernel("level7", fn=in_role("epilogue", _in_loop_with(_tmem_load, _release_before_thread_barrier))),
        (r"^consumer release before the last read: TmemLoad v\[0:32\] .* \+ 128" + _by("epilogue", 5, "t=0")
         + r" reads accumulator stage 0, but no hand-over is ordered after it: MbarrierArrive tmem_empty\[acc\] on "
         r"cta 0 release\.cluster" + _by("epilogue", 4, "t=0") + r" releases it with no thread barrier between them")),
    "level7: the epilogue releases the other accumulator stage": (
        lambda: _kernel("level7", fn=in_role("epilogue", where(_arrives_on("tmem_empty"), _other_acc_stage))),
        (r"^consumer release before the last read: TmemLoad v\[0:32\] .*" + _by("epilogue", 4, "t=3")
         + r" reads accumulator stage 1, but no hand-over is ordered after it: no other warp of the CTA hands it "
         r"over in that phase, nor the warp itself before its next wait; the MMA may overwrite it")),
    # epilogue staging buffers (CD): the TMA store reads them until the storing thread's wait_group.read
    "level9: no thread barrier after the TMA-store wait_group.read": (
        lambda: _kernel(SM100, fn=in_role("epilogue", _no_barrier_after_store_wait)),
        (r"^consumer release before the last read: StShared16 .*" + _by("epilogue", 5, "t=0")
         + r" writes CD stage 0 while TmaStore d box at \(col=n_col \+ 0, row=m_row \+ 0\) .*"
         + _by("epilogue", 4, "t=0")
         + r" may still read it: the cp\.async\.bulk\.wait_group that retires its bulk group \(BulkWaitGroupRead 1 "
         r"at t=0\) is not ordered before the write \(program order, or a thread barrier after it\); the TMA store "
         r"would copy the new data")),
    "level9: every TMA-store wait_group dropped": (
        lambda: _kernel(SM100, fn=in_role("epilogue", where(lambda op: isinstance(op, O.BulkWaitGroup), drop))),
        (r"^consumer release before the last read: StShared16 .*" + _by("epilogue", 4, "t=0")
         + r" writes CD stage 0 while TmaStore d box at \(col=n_col \+ 0, row=m_row \+ 0\) .*"
         + _by("epilogue", 4, "t=0") + r" may still read it: no cp\.async\.bulk\.wait_group of the storing thread "
         r"retires its bulk group")),
    "h100_256x128: no thread barrier after the TMA-store wait_group.read": (
        lambda: _kernel("h100_256x128", fn=in_role("consumer", _no_barrier_after_store_wait)),
        (r"^consumer release before the last read: StMatrix x4 .*" + _by("consumer", 5, "t=0")
         + r" writes CD stage 0 while TmaStore d .*" + _by("consumer", 4, "t=0") + r" may still read it: the "
         r"cp\.async\.bulk\.wait_group that retires its bulk group \(BulkWaitGroupRead 1 at t=0\) is not ordered "
         r"before the write")),
}


@pytest.mark.parametrize("name", PLANTS)
def test_planted_handover_bug(name: str) -> None:
    build, message = PLANTS[name]
    with pytest.raises(VerifyError) as exc:
        verify(build())
    assert re.search(message, str(exc.value), re.DOTALL), str(exc.value)

