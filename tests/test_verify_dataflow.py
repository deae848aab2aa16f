"""Planted bugs for the verifier's hand-over rule (issue 9, "What the checks miss today"; issue 10's sm_100a plant).

A role hands a pipeline stage over (consumer_release on ``empty``/``tmem_empty``, producer_commit on
``tmem_full``) only after its last access of the stage, by an op that orders the asynchronous access
(``tcgen05.commit`` of the issuing thread, ``wgmma.wait_group``, ``tcgen05.wait::ld``; another warp's access
through a thread barrier).  Each plant moves or drops one op of a shipped kernel's IR and checks the exact
finding.  The unplanted kernels verify clean in tests/test_verify.py (test_shipped_config_verifies).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen.errors import VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Const
from ptxgen.verify import verify
from test_dual_planted import _issuer, _kernel, _release_after_first_mma, _tmem_full_before_last_b2_mma
from test_sim_planted import _release_before_last_load
from test_sim_support import drop, in_role, where

pytestmark = pytest.mark.sim

SM100, DUAL_SM100, DUAL_H100 = "level9", "dual_sm100_256x128", "dual_h100_128x128"
WHERE = r" by {role} \(CTA 0, rank 0, warp {warp}\) at {at}"


def _in_loop_with(pred, change):
    """A rewrite applying ``change(list of ops)`` to each For body that holds an op matching ``pred``."""
    def rw(op):
        if isinstance(op, O.For) and any(pred(x) for x in op.body):
            return replace(op, body=tuple(change(list(op.body))))
    return rw


def _is_wgmma_wait_1(op) -> bool:
    return isinstance(op, O.WgmmaWait) and op.n == 1


def _arrive_before_wgmma_wait(body: list) -> list:
    """sm_90a k-loop: the consumer_release of stage it-1 (``If kb != 0 ... MbarrierArrive empty[...]``) moved
    before the loop's ``wgmma.wait_group 1``."""
    release = next(x for x in body if isinstance(x, O.If) and "MbarrierArrive(bar=Bar(name='empty'" in repr(x))
    body.remove(release)
    body.insert(next(i for i, x in enumerate(body) if isinstance(x, O.WgmmaWait)), release)
    return body


def _wait_ld_after_release(body: list) -> list:
    """sm_100a epilogue: the ``tcgen05.wait::ld`` of the last TMEM load moved after the tmem_empty arrive."""
    arrive = next(i for i, x in enumerate(body) if isinstance(x, O.MbarrierArrive) and x.bar.name == "tmem_empty")
    wait = max(i for i in range(arrive) if isinstance(body[i], O.TmemWaitLd))
    body.insert(arrive, body.pop(wait))
    return body


def _no_wait_ld_before_release(body: list) -> list:
    """sm_100a epilogue: the ``tcgen05.wait::ld`` before the tmem_empty arrive dropped."""
    arrive = next(i for i, x in enumerate(body) if isinstance(x, O.MbarrierArrive) and x.bar.name == "tmem_empty")
    del body[max(i for i in range(arrive) if isinstance(body[i], O.TmemWaitLd))]
    return body


def _release_before_thread_barrier(body: list) -> list:
    """level 7: warp 4 releases the accumulator right after its own last ``tcgen05.wait::ld``, before the
    thread barriers that order the other epilogue warps' TMEM loads."""
    release = next(x for x in body if isinstance(x, O.If) and "tmem_empty" in repr(x))
    body.remove(release)
    body.insert(max(i for i, x in enumerate(body) if isinstance(x, O.TmemWaitLd)) + 1, release)
    return body


def _commit_as_plain_arrives(op):
    """sm_100a: a multicast tcgen05.commit replaced by one plain mbarrier.arrive per CTA of the pair."""
    if isinstance(op, O.UmmaCommit):
        return tuple(O.MbarrierArrive(op.bar, Const(rank)) for rank in (0, 1))


def _commits_in_second_elect(body: list) -> list:
    """The MMA issuer's commits moved to a second ``elect.sync``: possibly another thread than the MMAs'."""
    return [O.Elect(tuple(x for x in body if isinstance(x, O.Umma))),
            O.Elect(tuple(x for x in body if not isinstance(x, O.Umma)))]


def _split_issuer(op):
    if isinstance(op, O.Elect) and any(isinstance(x, O.Umma) for x in op.body):
        return tuple(_commits_in_second_elect(list(op.body)))


PLANTS = {
    # producer_commit after the producer's last write (issue 10's sm_100a plant, and level 9)
    "level9: tmem_full commit before the last UMMA": (
        lambda: _kernel(SM100, fn=_issuer(_tmem_full_before_last_b2_mma)),
        r"^producer commit before the last write: UmmaCommit -> tmem_full\[acc\] multicast=0x3" + WHERE.format(
            role="mma", warp=1, at="t=0 kb=8") + r" commits accumulator stage 0, then Umma d=\(tmem \+ \(acc \* 512\)\) "
        r"\+ 256 a_lo=a_lo \+ 1030 b_lo=b_lo \+ 6 acc=1" + WHERE.format(role="mma", warp=1, at="t=0 kb=8") +
        r" writes it before the next wait on tmem_empty\[0\]; the epilogue may read it before this write lands"),
    "dual_sm100: tmem_full commit before the last B2 UMMA": (
        lambda: _kernel(DUAL_SM100, fn=_issuer(_tmem_full_before_last_b2_mma)),
        r"^producer commit before the last write: UmmaCommit -> tmem_full\[acc\] multicast=0x3" + WHERE.format(
            role="mma", warp=1, at="t=0 kb=12") + r" commits accumulator stage 0, then Umma d=\(tmem \+ \(acc \* 256\)\) "
        r"\+ 128 a_lo=a_lo \+ 6 b_lo=b2_lo \+ 6 acc=1 by mma .* writes it before the next wait on tmem_empty\[0\]"),
    "level9: tmem_full signalled by plain arrives": (
        lambda: _kernel(SM100, fn=where(lambda op: isinstance(op, O.UmmaCommit) and op.bar.name == "tmem_full",
                                        _commit_as_plain_arrives)),
        r"^producer commit before the last write completes: MbarrierArrive tmem_full\[acc\] on cta 0" + WHERE.format(
            role="mma", warp=1, at="t=0 kb=8") + r" commits accumulator stage 0 while Umma d=tmem \+ \(acc \* 512\) "
        r"a_lo=a_lo b_lo=b_lo acc=kb != 0 \(at t=0 kb=0\) may still be in flight: a plain mbarrier\.arrive does not "
        r"wait for the asynchronous tcgen05\.mma"),
    # consumer_release after the consumer's last read: smem operand stages, sm_100a
    "dual_sm100: stage released after the first of two UMMAs": (
        lambda: _kernel(DUAL_SM100, fn=_issuer(_release_after_first_mma)),
        r"^consumer release before the last read: UmmaCommit -> empty\[stage\] multicast=0x3" + WHERE.format(
            role="mma", warp=1, at="t=0 kb=0") + r" releases operand stage 0, then Umma d=\(tmem \+ \(acc \* 256\)\) "
        r"\+ 128 a_lo=a_lo b_lo=b2_lo acc=kb != 0 by mma .* reads it before the next wait on full\[0\]; the producer "
        r"may refill it while it is still read"),
    "level9: operand stage released by plain arrives": (
        lambda: _kernel(SM100, fn=where(lambda op: isinstance(op, O.UmmaCommit) and op.bar.name == "empty",
                                        _commit_as_plain_arrives)),
        r"^consumer release before the last read completes: MbarrierArrive empty\[stage\] on cta 0" + WHERE.format(
            role="mma", warp=1, at="t=0 kb=0") + r" releases operand stage 0 while Umma .* \(at t=0 kb=0\) may still "
        r"be in flight: a plain mbarrier\.arrive does not wait for the asynchronous tcgen05\.mma"),
    "level9: commits under a second elect.sync": (
        lambda: _kernel(SM100, fn=_split_issuer),
        r"^consumer release before the last read completes: UmmaCommit -> empty\[stage\] multicast=0x3" +
        WHERE.format(role="mma", warp=1, at="t=0 kb=0") + r" releases operand stage 0 while Umma .* may still be in "
        r"flight: tcgen05\.commit tracks only the prior tcgen05\.mma of its own thread"),
    # smem operand stages, sm_90a
    "h100_256x128: empty arrive before wgmma.wait_group": (
        lambda: _kernel("h100_256x128", fn=_in_loop_with(_is_wgmma_wait_1, _arrive_before_wgmma_wait)),
        r"^consumer release before the last read completes: MbarrierArrive empty\[\(it - 1\) % 4\]" + WHERE.format(
            role="consumer", warp=4, at="t=0 kb=1") + r" releases operand stage 0 while Wgmma m64n128k16 acc0 .* "
        r"\(at t=0 kb=0\) may still be in flight: no wgmma\.wait_group retires its wgmma group before the arrive"),
    "dual_h100: empty arrive before wgmma.wait_group": (
        lambda: _kernel(DUAL_H100, fn=_in_loop_with(_is_wgmma_wait_1, _arrive_before_wgmma_wait)),
        r"^consumer release before the last read completes: MbarrierArrive empty\[\(it - 1\) % 4\]" + WHERE.format(
            role="consumer", warp=4, at="t=0 kb=1") + r" releases operand stage 0 while Wgmma .* \(at t=0 kb=0\) may "
        r"still be in flight: no wgmma\.wait_group retires"),
    "h100_128x256: wgmma.wait_group 1 dropped": (
        lambda: _kernel("h100_128x256", fn=where(_is_wgmma_wait_1, drop)),
        r"^consumer release before the last read completes: MbarrierArrive empty\[\(it - 1\) % 4\] on cta 0" + WHERE.format(
            role="consumer", warp=4, at="t=0 kb=1") + r" releases operand stage 0 while Wgmma .* \(at t=0 kb=0\) may "
        r"still be in flight: no wgmma\.wait_group retires"),
    # TMEM accumulator stages
    "dual_sm100: tmem_empty release before the last TMEM load": (
        lambda: _kernel(DUAL_SM100, fn=in_role("epilogue", _release_before_last_load)),
        r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0" + WHERE.format(
            role="epilogue", warp=4, at="t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 96 "
        r"\(at t=0\) may still be in flight: no tcgen05\.wait::ld between them .*; the MMA may overwrite it"),
    "level9: tcgen05.wait::ld after the tmem_empty arrive": (
        lambda: _kernel(SM100, fn=in_role("epilogue", _in_loop_with(lambda x: isinstance(x, O.TmemLoad),
                                                                    _wait_ld_after_release))),
        r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0" + WHERE.format(
            role="epilogue", warp=4, at="t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 480 "
        r"\(at t=0\) may still be in flight: no tcgen05\.wait::ld between them"),
    "level9: tcgen05.wait::ld before the tmem_empty arrive dropped": (
        lambda: _kernel(SM100, fn=in_role("epilogue", _in_loop_with(lambda x: isinstance(x, O.TmemLoad),
                                                                    _no_wait_ld_before_release))),
        r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0" + WHERE.format(
            role="epilogue", warp=4, at="t=0") + r" releases accumulator stage 0 while TmemLoad v\[0:32\] .* \+ 480 "
        r"\(at t=0\) may still be in flight: no tcgen05\.wait::ld between them"),
    "dual_sm100: tcgen05.wait::ld after the tmem_empty arrive": (
        lambda: _kernel(DUAL_SM100, fn=in_role("epilogue", _in_loop_with(lambda x: isinstance(x, O.TmemLoad),
                                                                         _wait_ld_after_release))),
        r"^consumer release before the last read completes: MbarrierArrive tmem_empty\[acc\] on cta 0 by epilogue .* "
        r"releases accumulator stage 0 while TmemLoad (u|v)\[0:32\] .* may still be in flight: no tcgen05\.wait::ld"),
    "level7: tmem_empty arrive before the epilogue's thread barrier": (
        lambda: _kernel("level7", fn=in_role("epilogue", _in_loop_with(lambda x: isinstance(x, O.TmemLoad),
                                                                       _release_before_thread_barrier))),
        r"^consumer release before the last read: TmemLoad v\[0:32\] .* \+ 128" + WHERE.format(
            role="epilogue", warp=5, at="t=0") + r" reads accumulator stage 0, but no hand-over is ordered after it: "
        r"MbarrierArrive tmem_empty\[acc\] on cta 0" + WHERE.format(role="epilogue", warp=4, at="t=0") +
        r" releases it with no thread barrier between them"),
}


@pytest.mark.parametrize("name", PLANTS)
def test_planted_handover_bug(name: str) -> None:
    build, message = PLANTS[name]
    with pytest.raises(VerifyError) as exc:
        verify(build())
    assert re.search(message, str(exc.value), re.S), str(exc.value)

