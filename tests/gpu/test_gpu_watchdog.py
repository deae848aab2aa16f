"""GPU: the hang watchdog turns every planted hang class into DeadlockError, fast, and the context stays usable.

Planted on sm_90a (Hopper, compute capability 9.0), one per hang class (:data:`CASES`):

* ``tx_high`` -- one ``mbarrier.arrive.expect_tx`` 16 bytes too large, edited into the watched PTX and loaded
  through ``PTXGEN_OVERRIDE_PTX`` with ``PTXGEN_WATCHDOG=200ms`` (what a user hand-editing the PTX does);
* ``tx_low`` -- ``expect_tx`` 16 bytes too small (the bytes of a stage then run past zero without reaching it);
* ``arrival_high`` -- the ``full`` barrier's init count one too high;
* ``no_commit`` -- the producer never commits (its ``arrive.expect_tx`` dropped);
* ``no_release`` -- the consumers never release (their ``empty`` arrives dropped);
* ``peer_early`` -- a cluster-of-2 kernel (h100_128x256, B multicast) whose rank-1 CTA leaves its tile loops at
  once, so its half of B and its releases never come.

Each must raise DeadlockError within 2 s naming the wait site stuck longest (the consumers' ``full`` wait for the
first five: the producer's knock-on wait on ``empty`` starts later; the producer's ``empty`` wait for
``no_release``), and a correct ``ptxgen.gemm`` (torch fp32
reference, relative Frobenius error < 1e-2) must follow in the same process.  Run:
``python -m pytest -q -s -m gpu tests/gpu/test_gpu_watchdog.py``.  As a script (``python
tests/gpu/test_gpu_watchdog.py [CASE ...]``) it runs each case in a fresh process and prints one line each:
the error, the seconds to raise and the follow-up gemm's error (a sticky CUDA error stays in its process).
The plants are rewrites of the built IR (``ptxgen.ir.rewrite``); tests/build/test_watchdog.py checks that
each one hangs in the simulator too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
CONFIG = "h100_128x128"
CLUSTER_CONFIG = "h100_128x256"  # cluster of 2 multicasting B halves
BUDGET_NS = 200_000_000  # 200 ms per wait
OVERRIDE_BUDGET = "190ms"  # PTXGEN_WATCHDOG of the PTX-edit case
LIMIT_S = 2.0
SHAPE = (512, 512, 1024)


# --------------------------------------------------------------------------- plants (IR rewrites of a built kernel)


def _kernel(config: str):
    from ptxgen.build import build

    return build(config).kernel


def _rewrite(config: str, fn):
    from ptxgen.ir.rewrite import rewrite

    return rewrite(_kernel(config), fn)


def plant_tx(config: str = CONFIG, delta: int = 16):
    """``expect_tx`` on ``full`` off by ``delta`` bytes."""
    from ptxgen.ir import ops as O

    return _rewrite(config, lambda op: replace(op, tx_bytes=op.tx_bytes + delta)
                    if isinstance(op, O.MbarrierArriveExpectTx) and op.bar.name == "full" else None)


def plant_arrival_high(config: str = CONFIG):
    """The ``full`` barrier's init count one too high (it never completes)."""
    from ptxgen.builders.kernel import build_kernel
    from ptxgen.config import load_config
    from ptxgen.plan import make_plan

    p = make_plan(load_config(config))
    p = replace(p, ab=replace(p.ab, full=replace(p.ab.full, init=tuple(i + 1 for i in p.ab.full.init))))
    return build_kernel(p)


def plant_no_commit(config: str = CONFIG):
    """The producer's commit (``arrive.expect_tx`` on ``full``) dropped: its loads land, the phase never completes."""
    from ptxgen.ir import ops as O

    return _rewrite(config, lambda op: () if isinstance(op, O.MbarrierArriveExpectTx) else None)


def plant_no_release(config: str = CONFIG):
    """The consumers' releases (arrives on ``empty``) dropped: the producer never gets a stage back."""
    from ptxgen.ir import ops as O

    return _rewrite(config, lambda op: () if isinstance(op, O.MbarrierArrive) and op.bar.name == "empty" else None)


def plant_peer_early(config: str = CLUSTER_CONFIG):
    """Cluster rank 1 leaves its tile loops at once (every role); rank 0 waits for its B half and its releases."""
    from ptxgen.ir import expr as ex
    from ptxgen.ir import ops as O

    return _rewrite(config, lambda op: replace(op, stop=ex.select(ex.eq(ex.Sreg("rank"), 1), op.start, op.stop))
                    if isinstance(op, O.For) and op.var == "t" else None)


def _edit_tx_high(ptx: str) -> str:
    """The user's edit: the first ``arrive.expect_tx`` of the PTX 16 bytes too large."""
    import re

    m = re.search(r"(mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[[^\]]+\], )(\d+);", ptx)
    assert m, "no arrive.expect_tx in the PTX"
    return ptx[:m.start(2)] + str(int(m.group(2)) + 16) + ptx[m.end(2):]


#: case -> (config, the planted kernel (None: the PTX-edit case), the (barrier, role) pairs the record may name)
CASES = {
    "tx_high": (CONFIG, None, {("full", "consumer_wait")}),
    "tx_low": (CONFIG, lambda: plant_tx(CONFIG, -16), {("full", "consumer_wait")}),
    "arrival_high": (CONFIG, plant_arrival_high, {("full", "consumer_wait")}),
    "no_commit": (CONFIG, plant_no_commit, {("full", "consumer_wait")}),
    "no_release": (CONFIG, plant_no_release, {("empty", "producer_acquire")}),
    "peer_early": (CLUSTER_CONFIG, plant_peer_early, {("full", "consumer_wait")}),
}


# --------------------------------------------------------------------------- running one case


def operands(torch, m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.25).to(torch.bfloat16)
    return a, b


def rel_err(torch, out, a, b) -> float:
    ref = a.float() @ b.float().T
    return ((out.float() - ref).norm() / ref.norm()).item()


def run_case(torch, case: str, tmp: Path) -> dict:
    """Launch ``case``'s planted kernel with the watchdog, then a normal gemm.

    Returns ``{"error": type name or None, "message", "seconds", "record", "followup": rel. error or the
    follow-up's error text}``.  JIT and load are not timed.
    """
    import ptxgen
    from ptxgen import knobs
    from ptxgen.build import build
    from ptxgen.ir.watchdog import instrument
    from ptxgen.runtime import api
    from ptxgen.runtime.api import kernel_call

    config, _, _ = CASES[case]
    m, n, k = SHAPE
    if case == "tx_high":
        m, n = 640, 384  # a shape only this case calls: the per-signature call cache must load the override
    a, b = operands(torch, m, n, k)
    out = torch.zeros(m, n, dtype=torch.bfloat16, device="cuda")
    saved = {v: os.environ.get(v) for v in (knobs.WATCHDOG, knobs.OVERRIDE_PTX)}
    if case == "tx_high":
        path = tmp / "tx_high.ptx"
        path.write_text(_edit_tx_high(build(config, watchdog_ns=BUDGET_NS).ptx))
        # a budget no other test uses: the process-level kernel cache is keyed by config and budget, not by the file
        os.environ[knobs.WATCHDOG], os.environ[knobs.OVERRIDE_PTX] = OVERRIDE_BUDGET, str(path)
        api.loaded_kernel(config, torch.cuda.current_device())  # JIT and load: not timed
        call = lambda: ptxgen.gemm(a, b, out, config=config)  # noqa: E731
    else:
        kcall = kernel_call(instrument(CASES[case][1](), BUDGET_NS), a, b, out)  # JIT and load: not timed
        call = lambda: kcall(a, b, out)  # noqa: E731
    result = {"case": case, "config": config, "error": None, "message": "", "record": None}
    t0 = time.perf_counter()
    try:
        call()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported, the caller asserts
        result["error"], result["message"] = type(exc).__name__, str(exc)
        rec = getattr(exc, "record", None)
        if rec is not None:
            result["record"] = {f: getattr(rec, f, None) for f in ("barrier", "role", "index", "parity", "cta",
                                                                   "rank", "warp", "lane", "tile", "kblock",
                                                                   "elapsed_ns")}
    result["seconds"] = time.perf_counter() - t0
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    try:
        out2 = ptxgen.gemm(a, b, config=config)
        torch.cuda.synchronize()
        result["followup"] = rel_err(torch, out2, a, b)
    except Exception as exc:  # noqa: BLE001
        result["followup"] = f"{type(exc).__name__}: {exc}"
    return result


@pytest.mark.parametrize("case", list(CASES))
def test_planted_hang_raises_fast_and_context_survives(torch, case, tmp_path):
    from ptxgen.errors import DeadlockError

    r = run_case(torch, case, tmp_path)
    print(f"\n{torch.cuda.get_device_name()} {case}: {r['error']} after {r['seconds']:.3f} s: {r['message']}\n"
          f"  follow-up gemm: {r['followup']}")
    assert r["error"] == DeadlockError.__name__, r["message"]
    rec = r["record"]
    assert (rec["barrier"], rec["role"]) in CASES[case][2], r["message"]
    assert f"{rec['role']} on {rec['barrier']}[{rec['index']}]" in r["message"]
    assert rec["elapsed_ns"] >= (190_000_000 if case == "tx_high" else BUDGET_NS)
    if case != "no_release":
        assert rec["kblock"] is not None and rec["tile"] is not None
    if case == "peer_early":
        assert rec["rank"] == 0, r["message"]  # rank 1 never waits
    assert r["seconds"] < LIMIT_S
    assert isinstance(r["followup"], float) and r["followup"] < 1e-2, r["followup"]


def test_knob_on_correct_kernel_no_false_alarm(torch, monkeypatch):
    """PTXGEN_WATCHDOG through ptxgen.gemm: the watched shipped kernel computes the right result and raises nothing."""
    import ptxgen

    monkeypatch.setenv("PTXGEN_WATCHDOG", "200ms")
    for config, (m, n, k) in ((CONFIG, (384, 640, 768)), (CLUSTER_CONFIG, (384, 768, 768))):
        a, b = operands(torch, m, n, k)  # shapes no other test calls (the per-signature call cache predates the knob)
        out = ptxgen.gemm(a, b, config=config)
        assert rel_err(torch, out, a, b) < 1e-2
    from ptxgen.errors import ConfigError

    with pytest.raises(ConfigError, match="PTXGEN_WATCHDOG"):
        from ptxgen.runtime.api import prepare

        prepare(a, b, config=CONFIG)


# --------------------------------------------------------------------------- script: each case in a fresh process


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        import tempfile

        import torch

        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_case(torch, argv[1], Path(tmp))))
        return 0
    bad = 0
    for case in argv or list(CASES):
        proc = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True, timeout=120)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            print(f"{case}: no result (rc {proc.returncode}): {proc.stderr[-2000:]}")
            bad += 1
            continue
        r = json.loads(lines[-1])
        ok = r["error"] == "DeadlockError" and r["seconds"] < LIMIT_S and isinstance(r["followup"], float) \
            and r["followup"] < 1e-2
        bad += not ok
        print(f"{case} [{r['config']}] {'ok' if ok else 'FAIL'}: {r['error']} after {r['seconds']:.3f} s; "
              f"follow-up gemm rel. error {r['followup']}\n  {r['message']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main(sys.argv[1:]))
