"""GPU: the hang watchdog turns a planted deadlock into DeadlockError, fast, and the context stays usable.

Planted: h100_128x128 with the ``full`` barrier's init count one too high (the consumers' consumer_wait never
completes; the simulator reports the same barrier, tests/build/test_watchdog.py).  Needs a compute capability 9.0 GPU.
Run: ``python -m pytest -q -s -m gpu tests/gpu/test_gpu_watchdog.py``.
"""

from __future__ import annotations

import time

import pytest

from ptxgen.errors import DeadlockError
from ptxgen.ir.watchdog import instrument

pytestmark = pytest.mark.gpu
CONFIG = "h100_128x128"
BUDGET_NS = 200_000_000  # 200 ms per wait


def operands(torch, m, n, k):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.25).to(torch.bfloat16)
    return a, b


def check_result(torch, out, a, b):
    ref = a.float() @ b.float().T
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


def test_planted_deadlock_raises_fast_and_context_survives(torch):
    import ptxgen
    from tests.build.test_watchdog import planted_full

    from ptxgen.runtime.api import kernel_call

    m, n, k = 512, 512, 1024
    a, b = operands(torch, m, n, k)
    out = torch.zeros(m, n, dtype=torch.bfloat16, device="cuda")
    call = kernel_call(instrument(planted_full(CONFIG), BUDGET_NS), a, b, out)  # JIT and load: not timed
    t0 = time.perf_counter()
    with pytest.raises(DeadlockError) as info:
        call(a, b, out)
    seconds = time.perf_counter() - t0
    print(f"\n{torch.cuda.get_device_name()}: DeadlockError after {seconds:.3f} s:\n  {info.value}")
    rec = info.value.record
    assert rec.barrier == "full" and rec.role == "consumer_wait", str(info.value)
    assert rec.warp >= 4 and rec.kblock is not None and rec.tile is not None
    assert rec.elapsed_ns >= BUDGET_NS
    assert seconds < 2.0
    torch.cuda.synchronize()  # the context is usable: no sticky error
    # a normal launch afterwards, same process: correct result
    out2 = ptxgen.gemm(a, b, config=CONFIG)
    torch.cuda.synchronize()
    check_result(torch, out2, a, b)


def test_knob_on_correct_kernel_no_false_alarm(torch, monkeypatch):
    """PTXGEN_WATCHDOG through ptxgen.gemm: the watched shipped kernel computes the right result and raises nothing."""
    import ptxgen

    monkeypatch.setenv("PTXGEN_WATCHDOG", "200ms")
    m, n, k = 384, 640, 768  # a shape no other test calls (the per-signature call cache predates the knob)
    a, b = operands(torch, m, n, k)
    out = ptxgen.gemm(a, b, config=CONFIG)
    check_result(torch, out, a, b)
    from ptxgen.errors import ConfigError

    with pytest.raises(ConfigError, match="PTXGEN_WATCHDOG"):
        from ptxgen.runtime.api import prepare

        prepare(a, b, config=CONFIG)
