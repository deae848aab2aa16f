"""The FP8 block-scaled GEMM in the check wing: the recipe's numbers from the simulator, and planted bugs.

The simulator decodes e4m3 exactly and runs the promotion as the PTX does; its D is compared with an independent
float64 reference of the recipe formula (``D[m, n] = sum_kb scale_a[m, kb] * scale_b[n // 128, kb] * A_kb @ B_kb^T``).
Each planted bug is an IR rewrite of a shipped ``fp8_h100_*`` kernel, caught by the simulator (numbers) or the
verifier (the scale loads are operands of the pipeline, read after the stage's ``full`` wait).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ptxgen.check.fp8 import e4m3_encode, fp8_gemm_reference, quantize_blocks, random_fp8
from ptxgen.check.sim.run import simulate_fp8
from ptxgen.check.verify import verify
from ptxgen.errors import SimError, VerifyError
from ptxgen.formats import e4m3_decode
from ptxgen.config import load_config
from ptxgen.ir import Var, fold
from ptxgen.plan import make_plan
from ptxgen.ir import ops as O
from tests.check.test_dual_planted import _kernel

pytestmark = pytest.mark.sim

SQUARE, WIDE, TALL = "fp8_h100_128x128", "fp8_h100_128x256", "fp8_h100_256x128"
OVERLAP, PAIR = "fp8_h100_64x128", "fp8_h100_128x128_c2"  # promotion_unroll 4; B multicast over a CTA pair
WIDE_PAIR, PAIR3 = "fp8_h100_128x256_c2", "fp8_h100_192x128_c2"  # pairs: two chunks; three consumer warpgroups


# ------------------------------------------------------------------ host numerics


def test_e4m3_encode_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.random.default_rng(0).standard_normal(4096) * 64, [0.0, -0.0, 448.0, -448.0, 1e-9, 0.0009765625,
                                                                            0.00146484375, 17.0, 240.0]])
    ours = e4m3_encode(x)
    theirs = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(ours, theirs)


def test_quantize_blocks_follows_the_recipe():
    x = np.random.default_rng(1).standard_normal((130, 300))
    q, s = quantize_blocks(x, 128)
    assert s.shape == (2, 3) and q.shape == x.shape
    assert np.isclose(s[0, 1], np.abs(x[:128, 128:256]).max() / 448)
    back = e4m3_decode(q) * np.repeat(np.repeat(s, 128, 0), 128, 1)[:130, :300]
    assert np.abs(back - x).max() <= np.abs(x).max() * 2.0**-3  # e4m3: 3 mantissa bits


def test_reference_is_the_recipe_formula():
    x = random_fp8(5, 200, 300, seed=3)
    a, b = e4m3_decode(x["a"]).astype(np.float64), e4m3_decode(x["b"]).astype(np.float64)
    d = np.zeros((5, 200))
    for m in range(5):
        for n in range(200):
            for kb in range(3):
                ks = slice(128 * kb, min(300, 128 * kb + 128))
                d[m, n] += x["scale_a"][m, kb] * x["scale_b"][n // 128, kb] * (a[m, ks] @ b[n, ks])
    assert np.allclose(fp8_gemm_reference(x["a"], x["b"], x["scale_a"], x["scale_b"]), d, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ the simulator gives the recipe's numbers


@pytest.mark.parametrize("config, shape", [(SQUARE, (64, 256, 384)), (WIDE, (130, 300, 272)), (TALL, (300, 136, 400)),
                                           # K = 272 and 1040: 3 and 9 k-blocks, walked as 4 and 12 (zero fill)
                                           (OVERLAP, (130, 300, 272)), (OVERLAP, (65, 129, 1040)),
                                           (PAIR, (300, 136, 400)), (PAIR, (520, 260, 272)),
                                           (WIDE_PAIR, (300, 520, 272)), (PAIR3, (520, 300, 1040))])
def test_simulated_fp8_gemm_equals_the_recipe(config, shape):
    kernel = _kernel(config)
    r = simulate_fp8(kernel, *shape, seed=5, num_sms=2)
    assert r.rel_fro < 5e-3 and r.max_rel_err < 1e-2  # bf16 output rounding (~2e-3)


def test_simulated_fp8_gemm_is_exact_on_exact_inputs():
    """Scales that are powers of two and e4m3 values in {-1, 0, 1}: every product and sum is exact in fp32, so D is
    the reference rounded to bf16, bit for bit."""
    m, n, k = 64, 256, 256
    rng = np.random.default_rng(9)
    x = {"a": e4m3_encode(rng.integers(-1, 2, (m, k))), "b": e4m3_encode(rng.integers(-1, 2, (n, k))),
         "scale_a": 2.0 ** rng.integers(-3, 4, (m, 2)).astype(np.float32),
         "scale_b": 2.0 ** rng.integers(-3, 4, (2, 2)).astype(np.float32)}
    r = simulate_fp8(_kernel(SQUARE), m, n, k, inputs=x)
    from ptxgen.check.numerics import round_bf16
    assert np.array_equal(r.d, round_bf16(r.ref))


# ------------------------------------------------------------------ planted numerics bugs: the simulator


def _sim_fault(kernel, shape=(64, 256, 384)) -> str:
    with pytest.raises(SimError) as exc:
        simulate_fp8(kernel, *shape, seed=2, num_sms=2)
    return str(exc.value)


def _scale_b_block_zero(op):
    """Every promotion reads the first scale of the stage's scale_b box (its tiles all lie in the first box of 4
    blocks at N = 256): scale_b[n // 128] replaced by scale_b[0]."""
    if isinstance(op, O.ScaleLoad):
        region = make_plan(load_config(SQUARE)).loads.operand("scale_b").region
        return replace(op, sb_addr=fold(region.offset + Var("stage") * region.stride))


def _promotion(change):
    return lambda op: change(op) if isinstance(op, O.PromoteScaled) and op.accumulate else None


@pytest.mark.parametrize("name, fn", [
    ("wrong scale block", _scale_b_block_zero),
    ("promotion skipped", _promotion(lambda op: ())),
    ("promotion doubled", _promotion(lambda op: (op, op))),
])
def test_planted_numerics_bug_is_a_wrong_result(name, fn):
    assert "wrong result" in _sim_fault(_kernel(SQUARE, fn=fn)), name


def test_planted_bugs_start_from_a_correct_kernel():
    simulate_fp8(_kernel(SQUARE), 64, 256, 384, seed=2, num_sms=2)  # the same launch, unplanted: no fault


# ------------------------------------------------------------------ planted protocol bugs: the verifier


def _scale_load_before_the_wait(body):
    """The loop's first scale load moved before the consumer_wait on ``full``: it reads the scale slots of a stage
    whose TMA may still be in flight (or hold the previous fill)."""
    promote = next(x for x in body if isinstance(x, O.ScaleLoad))
    body.remove(promote)
    wait = next(i for i, x in enumerate(body) if isinstance(x, O.MbarrierWait) and x.bar.name == "full")
    body.insert(wait, promote)
    return body


def _release_before_the_scale_loads(body):
    """The stage released (empty arrive) before its scale loads: the producer may refill them."""
    release = next(x for x in body if isinstance(x, O.Elect) and any(isinstance(y, O.MbarrierArrive) for y in x.body))
    body.remove(release)
    body.insert(next(i for i, x in enumerate(body) if isinstance(x, O.ScaleLoad)), release)
    return body


def _k_loop(fn):
    """Apply ``fn(list of ops)`` to the consumer's k-block loop body (the loop after the peeled first k-block)."""
    def rw(op):
        if isinstance(op, O.For) and op.var == "kb" and any(isinstance(x, O.PromoteScaled) for x in op.body):
            return replace(op, body=tuple(fn(list(op.body))))
    return rw


def test_scale_read_before_its_full_wait_fails_the_verifier():
    kernel = _kernel(SQUARE, fn=_k_loop(_scale_load_before_the_wait))
    with pytest.raises(VerifyError, match=r"missing wait: ScaleLoad reads SCALE_(A|B) stage \d+ by consumer .* "
                                          r"without a wait on full\[\d+\] in this iteration"):
        verify(kernel)


def test_scale_read_after_the_release_fails_the_verifier():
    kernel = _kernel(SQUARE, fn=_k_loop(_release_before_the_scale_loads))
    with pytest.raises(VerifyError, match="consumer release before the last read"):
        verify(kernel)


@pytest.mark.parametrize("config", [SQUARE, WIDE, TALL, OVERLAP, PAIR, WIDE_PAIR, PAIR3])
def test_shipped_fp8_kernels_verify(config):
    verify(_kernel(config))


def test_scale_map_rows_of_whole_16_byte_groups():
    """A scale box reaching past a row that is not whole 16-byte groups faulted on the H100 ("illegal instruction");
    the simulator reports it, and the padded map the runtime declares runs clean."""
    from ptxgen.check.sim.machine import Machine
    from ptxgen.check.sim.run import fp8_scale_map
    from ptxgen.check.numerics import POISON
    from ptxgen.hw import DYNAMIC_SMEM_BASE

    kernel = _kernel(SQUARE)
    m, n, k = 64, 520, 256  # ceil(520 / 128) = 5 blocks of scale_b: 20-byte rows unpadded
    x = random_fp8(m, n, k, seed=4)
    assert fp8_scale_map(x["scale_b"]).shape == (2, 8)
    raw = {name: np.ascontiguousarray(x[name].T) for name in ("scale_a", "scale_b")}
    machine = Machine(kernel, m, n, k, x["a"], x["b"], num_sms=4, schedule_seed=0, smem_base=DYNAMIC_SMEM_BASE,
                      poison=POISON, extra=raw)
    with pytest.raises(SimError, match=r"unsupported TMA box: .* scale_b, past the end of its rows of 5 elements "
                                       r"\(20 B, not a multiple of 16\)"):
        machine.run(10_000_000)
    simulate_fp8(kernel, m, n, k, inputs=x)


# ------------------------------------------------------------------ the overlapped promotion (promotion_unroll > 1)


def _kp_loop(fn):
    """Apply ``fn(list of ops)`` to the overlapped consumer's loop body (the iterations after the peeled first)."""
    def rw(op):
        if isinstance(op, O.For) and op.var == "kp":
            return replace(op, body=tuple(fn(list(op.body))))
    return rw


def _promote_the_running_partial(body):
    """The first promotion after ``wgmma.wait_group 1`` reads the partial whose wgmmas are still running."""
    i = next(i for i, x in enumerate(body) if isinstance(x, O.PromoteScaled))
    body[i] = replace(body[i], part="part1" if body[i].part == "part" else "part")
    return body


def _wait_group(n):
    """The first ``wgmma.wait_group 1`` dropped (n = None) or loosened to ``n``: the previous block may be running."""
    def change(body):
        i = next(i for i, x in enumerate(body) if isinstance(x, O.WgmmaWait) and x.n == 1)
        body[i:i + 1] = [] if n is None else [O.WgmmaWait(n)]
        return body
    return change


@pytest.mark.parametrize("name, fn", [("running partial promoted", _promote_the_running_partial),
                                      ("wait_group 1 dropped", _wait_group(None)), ("wait_group 2", _wait_group(2))])
def test_planted_overlap_bug_reads_a_running_wgmma(name, fn):
    kernel = _kernel(OVERLAP, fn=_kp_loop(fn))
    with pytest.raises(VerifyError, match=r"register array 'part1?' read while a wgmma writing it is not covered by a "
                                          r"wgmma.wait_group"):
        verify(kernel)
    with pytest.raises(SimError, match="not covered by a wgmma.wait_group"):
        simulate_fp8(kernel, 64, 256, 1024, seed=2, num_sms=2)


def test_overlapped_scale_read_before_its_full_wait_fails_the_verifier():
    kernel = _kernel(OVERLAP, fn=_kp_loop(_scale_load_before_the_wait))
    with pytest.raises(VerifyError, match=r"missing wait: ScaleLoad reads SCALE_(A|B) stage \d+ by consumer"):
        verify(kernel)


def _promote_with_the_next_blocks_scales(body):
    """The first promotion of the iteration multiplies block j - 1's partial by block j's scale products (the
    scale array the running block loaded)."""
    i = next(i for i, x in enumerate(body) if isinstance(x, O.PromoteScaled))
    other = "sc0_0_1" if body[i].scales == "sc0_0" else "sc0_0"
    body[i] = replace(body[i], scales=other)
    return body


def test_planted_overlap_scale_swap_is_a_wrong_result():
    """Each block of the overlapped loop keeps its own scale products: promoting with the other array is wrong."""
    kernel = _kernel(OVERLAP, fn=_kp_loop(_promote_with_the_next_blocks_scales))
    verify(kernel)  # registers written and read in order: only the numbers tell
    with pytest.raises(SimError, match="wrong result"):
        simulate_fp8(kernel, 64, 256, 1024, seed=2, num_sms=2)
