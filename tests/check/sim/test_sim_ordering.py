"""Planted ordering bugs the simulator catches: fences, register reallocation, adversarial schedules.

* ``tcgen05.fence::after_thread_sync`` / ``before_thread_sync`` (PTX ISA "tcgen05 memory consistency model"):
  the simulator keeps happens-before clocks; a tcgen05 op sees what its warp's thread synchronisations
  acquired only after an after_thread_sync fence, and a release publishes the warp's tcgen05 ops only up to
  its last before_thread_sync fence.  Dropping either fence is reported as the missing fence.
* ``wgmma.fence`` (PTX ISA wgmma.fence) and ``setmaxnreg`` (PTX ISA setmaxnreg: per-CTA pool, whole warpgroup).
* The ``latest`` and ``pct`` schedule policies open windows the random one rarely does.

Every shipped kernel passes all three policies (tests/check/sim/test_sim.py sweeps the random one; here the
adversarial ones: the representative configs of tests/helpers/representative.py in the main tier, the others in the
slow tier).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen import cli
from ptxgen.errors import SimError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Sreg, ne
from ptxgen.check.sim import Fault, Sweep, default_shapes, schedule_plan, simulate, sweep
from tests.cli.test_cli import fast_assemble  # noqa: F401 - the fixture
from tests.check.sim.test_sim_planted import _kernel, _release_before_last_load
from tests.helpers.representative import shipped_params
from tests.helpers.sim_support import drop, in_role, is_wait, where

pytestmark = pytest.mark.sim

SEEDS = (0, 1)
FENCE = r"\(PTX ISA \"tcgen05 memory consistency model\"\)"


def _faults(kernel, policy: str = "random", shape: int = 1, seeds=SEEDS) -> list[str | None]:
    """The SimError message of each seed (None: the run passed)."""
    out = []
    for s in seeds:
        try:
            simulate(kernel, *default_shapes(kernel)[shape], seed=s, schedule_seed=s, policy=policy)
            out.append(None)
        except SimError as exc:
            out.append(str(exc))
    return out


def _all_match(pattern: str, messages: list) -> bool:
    return all(m is not None and re.search(pattern, m, re.S) for m in messages)


def _drop_fence_after(bar: str):
    """Delete the ``tcgen05.fence::after_thread_sync`` right after the wait on barrier array ``bar``."""
    def fn(op):
        if isinstance(op, O.For):
            body = list(op.body)
            for i, x in enumerate(body[:-1]):
                if isinstance(x, O.MbarrierWait) and x.bar.name == bar and isinstance(body[i + 1], O.TcgenFence):
                    del body[i + 1]
                    return replace(op, body=tuple(body))
    return fn


def _drop_fence_before(bar: str):
    """Delete the ``tcgen05.fence::before_thread_sync`` of the release of barrier array ``bar`` (the epilogue's)."""
    def fn(op):
        if isinstance(op, O.For):
            body = list(op.body)
            at = [i for i, x in enumerate(body) if isinstance(x, O.TcgenFence) and x.kind == "before"]
            rel = [i for i, x in enumerate(body) if _releases(x, bar)]
            if at and rel:
                del body[max(i for i in at if i < rel[0])]
                return replace(op, body=tuple(body))
    return fn


def _releases(op, bar: str) -> bool:
    if isinstance(op, O.MbarrierArrive):
        return op.bar.name == bar
    return any(_releases(x, bar) for x in getattr(op, "body", getattr(op, "then", ())))


# ------------------------------------------------------------------ tcgen05 fences

@pytest.mark.parametrize("config", ["level9", "dual_sm100_256x128"])
def test_mma_without_after_thread_sync_after_full(config) -> None:
    kernel = _kernel(config, in_role("mma", _drop_fence_after("full")))
    assert _all_match(r"^missing tcgen05\.fence::after_thread_sync: Umma by mma \(CTA \d+, rank 0, warp 1\) at t=\d+ "
                      r"kb=\d+ reads smem 0x[0-9a-f]+ of CTA \d+ \(rank \d\), which a TMA load landed after the warp's "
                      r"last tcgen05\.fence::after_thread_sync; since then it passed the MbarrierWait \(consumer_wait\) "
                      r"on full\[\d\] of CTA \d+ \(rank 0\) but no fence, .*" + FENCE, _faults(kernel))


@pytest.mark.parametrize("config", ["level9", "dual_sm100_256x128"])
def test_tmem_load_without_after_thread_sync_after_tmem_full(config) -> None:
    kernel = _kernel(config, in_role("epilogue", _drop_fence_after("tmem_full")))
    assert _all_match(r"^missing tcgen05\.fence::after_thread_sync: TmemLoad 32x32b\.x32 by epilogue \(CTA \d+, rank \d, "
                      r"warp [4-7]\) at t=\d+ follows the MbarrierWait \(consumer_wait \(accumulator\)\) on tmem_full\[0\] "
                      r"of CTA \d+ \(rank \d\) with no tcgen05\.fence::after_thread_sync between them, .*" + FENCE +
                      r" and may read TMEM of CTA \d+ \(rank \d\) columns \[0, 32\) before Umma by mma .* writing them "
                      r"completes", _faults(kernel))


@pytest.mark.parametrize("config", ["level9", "dual_sm100_256x128"])
def test_tmem_empty_arrive_without_before_thread_sync(config) -> None:
    kernel = _kernel(config, in_role("epilogue", _drop_fence_before("tmem_empty")))
    assert _all_match(r"^missing tcgen05\.fence::before_thread_sync: TmemLoad 32x32b\.x32 by epilogue \(CTA \d+, rank \d, "
                      r"warp [4-7]\) at t=\d+ is followed by a thread synchronisation .* and Umma by mma .* may overwrite "
                      r"TMEM of CTA \d+ \(rank \d\) columns \[0, \d+\) while TmemLoad .* still reads them",
                      _faults(kernel, shape=2))


def _wait_ld_after_tmem_empty_arrive(op):
    """The epilogue's last ``tcgen05.wait::ld`` moved after its fenced tmem_empty release (before any register use)."""
    if isinstance(op, O.For) and any(_releases(x, "tmem_empty") for x in op.body):
        body = list(op.body)
        release = next(i for i, x in enumerate(body) if _releases(x, "tmem_empty"))
        body.insert(release, body.pop(max(i for i, x in enumerate(body[:release]) if isinstance(x, O.TmemWaitLd))))
        return replace(op, body=tuple(body))


def test_tmem_empty_arrive_before_wait_ld() -> None:
    """A tcgen05.ld still in flight at the before_thread_sync fence is not ordered before the release: the next
    MMA into the stage may overwrite the columns it reads (PTX ISA tcgen05.wait::ld)."""
    kernel = _kernel("level9", in_role("epilogue", _wait_ld_after_tmem_empty_arrive))
    assert _all_match(r"^missing tcgen05\.wait::ld: TmemLoad 32x32b\.x32 by epilogue \(CTA \d+, rank \d, warp [4-7]\) at "
                      r"t=\d+ had not completed \(no tcgen05\.wait::ld\) at its warp's tcgen05\.fence::before_thread_sync, "
                      r".* and Umma by mma .* may overwrite TMEM of CTA \d+ \(rank \d\) columns \[\d+, \d+\) while TmemLoad",
                      _faults(kernel, shape=2))


def test_tmem_address_read_without_before_thread_sync_after_alloc() -> None:
    """Setup: alloc -> before_thread_sync -> cluster barrier -> after_thread_sync -> read the address slot."""
    kernel = _kernel("level9")
    body = list(kernel.body)
    del body[next(i for i, x in enumerate(body) if isinstance(x, O.TcgenFence) and x.kind == "before")]
    kernel = kernel.with_body(body)
    assert _all_match(r"^missing tcgen05\.fence::before_thread_sync: TmemAlloc by tmem_alloc \(CTA \d+, rank \d, warp 2\) "
                      r"at outside loops is followed by a thread synchronisation .* and TmemBase by .* may read the TMEM "
                      r"address slot before TmemAlloc", _faults(kernel, shape=0, seeds=(0,)))


def _fence_before_tmem_empty_arrive(op):
    """Keep the release fenced: move the epilogue's before_thread_sync fence to just before its tmem_empty arrive."""
    if isinstance(op, O.For) and any(_releases(x, "tmem_empty") for x in op.body):
        body = list(op.body)
        fence = body.pop(next(i for i, x in enumerate(body) if isinstance(x, O.TcgenFence) and x.kind == "before"))
        body.insert(next(i for i, x in enumerate(body) if _releases(x, "tmem_empty")), fence)
        return replace(op, body=tuple(body))


def test_tmem_stage_released_before_its_last_read_is_caught_on_every_schedule() -> None:
    """The TMEM form of "consumer release before its last read" (tests/check/sim/test_sim_planted.py's plant, with
    the fence kept before the arrive): happens-before, not timing, so every policy and seed reports it: the MMA of
    the next tile overwrites columns the late tcgen05.ld read, with nothing ordering that read before it."""
    kernel = _kernel("level9", in_role("epilogue", lambda op: _fence_before_tmem_empty_arrive(
        _release_before_last_load(op))))
    for policy in ("random", "latest", "pct"):
        assert _all_match(r"^unordered tcgen05 access: (Umma by mma .* may overwrite TMEM .* while TmemLoad .* still "
                          r"reads them|TmemLoad .* may read TMEM .* before Umma .* writing them completes)",
                          _faults(kernel, policy, shape=2)), policy


# ------------------------------------------------------------------ wgmma.fence, setmaxnreg

def test_wgmma_without_fence() -> None:
    kernel = _kernel("h100_256x128", in_role("consumer", where(lambda op: isinstance(op, O.WgmmaFence), drop)))
    assert _all_match(r"^missing wgmma\.fence: Wgmma m64n128k16 acc0 by consumer \(CTA \d+, rank 0, warp \d+\) at t=\d+ "
                      r"kb=0 is the warp's first wgmma and no wgmma\.fence precedes it", _faults(kernel, seeds=(0,)))


def test_wgmma_fence_before_the_epilogue_read_not_after() -> None:
    """One fence before the tile loop covers tile 0 only: the next tile's first wgmma follows the epilogue's
    register reads of tile 0 with no fence between."""
    def fence_first(op):
        if isinstance(op, O.For) and any(isinstance(x, O.WgmmaFence) for x in op.body):
            return replace(op, body=tuple(x for x in op.body if not isinstance(x, O.WgmmaFence)))
        if isinstance(op, O.For) and any(isinstance(x, O.For) for x in op.body):  # one fence before the tile loop
            return (O.WgmmaFence(), op)
    kernel = _kernel("h100_256x128", in_role("consumer", fence_first))
    assert _all_match(r"^missing wgmma\.fence: Wgmma m64n128k16 acc0 by consumer .* at t=\d+ kb=0 accesses accumulator "
                      r"acc0, which StMatrix accessed since the warp's last wgmma\.fence", _faults(kernel, shape=2,
                                                                                                     seeds=(0,)))


def test_setmaxnreg_skipped_by_one_warp_of_the_warpgroup() -> None:
    kernel = _kernel("h100_256x128", in_role("producer", where(
        lambda op: isinstance(op, O.SetMaxNReg), lambda op: O.If(ne(Sreg("warp"), 1), (op,)))))
    assert _all_match(r"^unbalanced setmaxnreg: (warp 1 of CTA \d+ \(rank 0\) exits without the setmaxnreg\.dec 40 that "
                      r"warp\(s\) [023, ]+ of its warpgroup wait in|setmaxnreg\.dec 40 by producer .*, but warp\(s\) 1 of "
                      r"warpgroup 0 exited without it)", _faults(kernel, shape=0))


def test_setmaxnreg_inc_beyond_the_pool_deadlocks() -> None:
    kernel = _kernel("h100_256x128", in_role("consumer", where(lambda op: isinstance(op, O.SetMaxNReg),
                                                               lambda op: replace(op, regs=240))))
    assert _all_match(r"^deadlock: .*setmaxnreg\.inc 240: warpgroup [12] needs 9216 registers, the pool of CTA \d+ "
                      r"\(rank 0\) has 7168 free", _faults(kernel, shape=0))


def test_setmaxnreg_differing_within_the_warpgroup() -> None:
    kernel = _kernel("h100_256x128", in_role("producer", where(
        lambda op: isinstance(op, O.SetMaxNReg),
        lambda op: O.If(ne(Sreg("warp"), 1), (op,), (replace(op, regs=48),)))))
    assert _all_match(r"^unbalanced setmaxnreg: setmaxnreg\.dec (40|48) by producer \(CTA \d+, rank 0, warp \d\) at outside "
                      r"loops, while warp\(s\) [0-3, ]+ of warpgroup 0 execute setmaxnreg\.dec (40|48) \(PTX ISA setmaxnreg: "
                      r"\.sync\.aligned", _faults(kernel, shape=0, seeds=(0,)))


@pytest.mark.parametrize("config, regs, error", [
    ("h100_256x128", 100, (r"^bad setmaxnreg: setmaxnreg\.dec 100 by producer .*: the count must be a multiple of 8 "
                           r"in \[24, 256\]")),
    ("level9", 40, (r"^setmaxnreg without \.maxnreg: setmaxnreg\.dec 40 by producer .*; the per-CTA register pool "
                    r"needs the kernel's register count fixed by \.maxnreg"))])
def test_setmaxnreg_refused(config, regs, error) -> None:
    """A count outside the ISA's range; a setmaxnreg in a kernel without .maxnreg (the simulator reads the IR as
    given: the legalizer would refuse setmaxnreg on sm_100a before any PTX)."""
    if config == "level9":
        kernel = _kernel(config, in_role("producer", lambda op: (O.SetMaxNReg("dec", regs), op)
                                         if isinstance(op, O.Elect) else op))
    else:
        kernel = _kernel(config, in_role("producer", where(lambda op: isinstance(op, O.SetMaxNReg),
                                                           lambda op: replace(op, regs=regs))))
    assert _all_match(error, _faults(kernel, shape=0, seeds=(0,)))


def test_tmem_dealloc_without_after_thread_sync() -> None:
    """Teardown: before_thread_sync -> barrier -> after_thread_sync -> dealloc; without the last fence the dealloc
    is not ordered after the epilogue's final tcgen05.ld."""
    kernel = _kernel("level9")
    body = list(kernel.body)
    del body[max(i for i, x in enumerate(body) if isinstance(x, O.TcgenFence) and x.kind == "after")]
    assert _all_match(r"^missing tcgen05\.fence::after_thread_sync: TmemDealloc by tmem_dealloc \(CTA \d+, rank \d, warp "
                      r"2\) at outside loops follows the cluster barrier of cluster \d+ .* and may free TMEM before "
                      r"(Umma|TmemLoad) .* completes", _faults(kernel.with_body(body), shape=0, seeds=(0,)))


def test_accumulators_beyond_the_register_limit() -> None:
    kernel = _kernel("h100_256x128", in_role("consumer", where(lambda op: isinstance(op, O.SetMaxNReg),
                                                               lambda op: replace(op, action="dec", regs=120))))
    assert _all_match(r"^register budget: Wgmma m64n128k16 acc1 by consumer .*: the warp's live accumulator fragments "
                      r"need 128 registers per thread \(acc0: 64, acc1: 64\) but its limit is 120", _faults(kernel, shape=0))


# ------------------------------------------------------------------ adversarial schedules

def _smem_release_before_wgmma_wait(op):
    """h100: the consumer releases stage kb-1 (arrive on empty) before ``wgmma.wait_group 1`` covers its reads."""
    if isinstance(op, O.For) and any(isinstance(x, O.WgmmaWait) for x in op.body):
        body = list(op.body)
        wait = next(i for i, x in enumerate(body) if isinstance(x, O.WgmmaWait))
        release = next(i for i, x in enumerate(body) if isinstance(x, O.If) and i > wait)
        body.insert(wait, body.pop(release))
        return replace(op, body=tuple(body))


def test_smem_release_before_last_read_random_misses_latest_and_pct_catch() -> None:
    """Random schedules catch it by chance: on half of seeds 1-8 the wgmma completes before the refill (it was
    issued a k-step earlier); ``latest`` keeps it in flight while any warp can run, so the producer's refill always
    lands on it, and so does PCT's priority order."""
    kernel = _kernel("h100_256x128", in_role("consumer", _smem_release_before_wgmma_wait))
    assert _faults(kernel, "random", seeds=range(1, 9)).count(None) >= 2
    war = r"^write after read: TmaLoad [ab] .* by producer .* writes smem .* while Wgmma .* still reads"
    assert _all_match(war, _faults(kernel, "latest", seeds=range(1, 3)))
    assert _all_match(war, _faults(kernel, "pct", seeds=(0, 1)))


def test_missing_producer_tail_latest_catches_random_and_pct_miss() -> None:
    """No producer tail: the last tcgen05.commit's arrive on ``empty`` is still pending when the CTA exits.
    Nobody waits for it, so ``latest`` delays it past the exit on every seed; random latencies almost never do."""
    kernel = _kernel("level9", where(is_wait("empty", "producer_tail"), drop))
    assert _faults(kernel, "random") == _faults(kernel, "pct") == [None, None]
    assert _all_match(r"^exit with an outstanding arrive: CTA \d+ \(rank \d\) exited while the arrive of UmmaCommit by "
                      r"mma \(CTA \d+, rank 0, warp 1\) .* on empty\[\d\] of CTA \d+ \(rank 0\).* is still pending",
                      _faults(kernel, "latest"))


def test_sweep_reports_the_policy_that_exposed_a_fault() -> None:
    kernel = _kernel("h100_256x128", in_role("consumer", _smem_release_before_wgmma_wait))
    s = sweep(kernel, shapes=default_shapes(kernel)[1:2], interleavings=1, policies="all")
    assert s.plan == {"random": 1, "latest": 2, "pct": 3} and s.runs == 6
    assert [f.seed for f in s.faults if f.policy == "latest"] == [0, 1]
    assert all(f.shape == default_shapes(kernel)[1] and f.message.startswith("write after read: TmaLoad")
               for f in s.faults)
    assert s.summary().startswith(f"simulated 1 shapes x 6 schedules (1 random, 2 latest, 3 pct): {len(s.faults)} faults")


@pytest.mark.parametrize("config", shipped_params())
def test_shipped_kernels_pass_the_adversarial_policies(config) -> None:
    """The shape with several tiles per persistent CTA (every smem ring and TMEM stage wraps); the representative
    configs in the main tier, the others in the slow tier."""
    kernel = _kernel(config)
    for policy in ("latest", "pct"):
        assert _faults(kernel, policy, shape=2, seeds=(0,)) == [None], policy


def test_schedule_is_reproducible() -> None:
    kernel = _kernel("level9")
    prints = {}
    for policy in ("random", "latest", "pct"):
        runs = 1 if policy == "random" else 2  # the adversarial policies run twice; all three once for the distinct set
        a, *again = (simulate(kernel, *default_shapes(kernel)[1], seed=3, schedule_seed=3, policy=policy)
                     for _ in range(runs))
        assert all(b.fingerprint == a.fingerprint for b in again) and a.policy == policy
        prints[policy] = a.fingerprint
    assert len(set(prints.values())) == 3


def test_unknown_policy_is_refused() -> None:
    kernel = _kernel("level1")
    with pytest.raises(ValueError, match=r"^schedule policy 'eager': one of random, latest, pct$"):
        simulate(kernel, *default_shapes(kernel)[0], policy="eager")
    with pytest.raises(ValueError, match=r"^schedule policy 'eager': one of random, latest, pct or all$"):
        schedule_plan("eager", 3)


# ------------------------------------------------------------------ ptxgen check --schedule

@pytest.mark.usefixtures("fast_assemble")
def test_check_runs_one_policy(capsys) -> None:
    rc = cli.main(["check", "--config", "level1", "--shape", "72x40x64", "--interleavings", "1", "--schedule", "latest"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert "level1: simulated 1 shapes x 1 schedules (1 latest): 0 faults, max rel error " in out


@pytest.mark.usefixtures("fast_assemble")
def test_check_names_the_schedule_that_exposed_a_fault(capsys, monkeypatch) -> None:
    import ptxgen.check.sim

    seen = {}

    def planted_sweep(kernel, shapes, interleavings, policies):
        seen["policies"] = policies
        out = Sweep(shapes, interleavings, schedule_plan(policies, interleavings))
        out.faults.append(Fault(shapes[0], "latest", 1, "write after read: planted"))
        return out

    monkeypatch.setattr(ptxgen.check.sim, "sweep", planted_sweep)
    rc = cli.main(["check", "--config", "level1", "--shape", "72x40x64", "--interleavings", "1"])
    out, err = capsys.readouterr()
    assert rc == 1 and seen["policies"] == "all"
    assert err == "level1: fault at shape (72, 40, 64), schedule latest seed 1: write after read: planted\n"
    assert "level1: simulated 1 shapes x 6 schedules (1 random, 2 latest, 3 pct): 1 faults" in out
