"""``simulate``: run a Kernel IR on the CPU for one problem shape and one interleaving, and check D."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError, SimError
from .machine import Machine
from .numerics import (POISON, bf16_bits_to_f32, compare, f32_to_bf16_bits, random_operands, reference,
                       silu_mul_reference)

SMEM_BASE = 0x400  # shared-window address of the dynamic shared memory (1024-aligned; 1 KB reserved below it)
MAX_STEPS = 20_000_000


@dataclass(frozen=True)
class SimResult:
    """One simulated launch.

    d: D as float32 ``[m, n]`` (the bf16 values the kernel stored); d_bits: the bf16 bit patterns.
    ref: the fp32 reference ``A @ B.T`` from the bf16 inputs.
    rel_fro: relative Frobenius error ||D - ref||_F / ||ref||_F.
    max_rel_err: max-abs relative error max|D - ref| / max|ref|.
    steps: scheduler steps; ops_executed: IR events the warps executed.
    grid: CTAs launched; schedule_seed: the interleaving; policy: the scheduling policy (``random``, ``latest``,
    ``pct``); mean_latency: its drawn mean async latency (steps, ``random`` policy);
    fingerprint: hash of the scheduler's choices (two runs with equal fingerprints interleaved identically).
    """

    d: np.ndarray
    d_bits: np.ndarray
    ref: np.ndarray
    rel_fro: float
    max_rel_err: float
    steps: int
    ops_executed: int
    grid: int
    schedule_seed: int
    policy: str
    mean_latency: float
    fingerprint: int


def simulate(kernel, m: int, n: int, k: int, *, seed: int = 0, num_sms: int = 4, schedule_seed: int | None = None,
             a: np.ndarray | None = None, b: np.ndarray | None = None, check: bool = True,
             policy: str = "random") -> SimResult:
    """Execute ``kernel`` for D[m, n] = A[m, k] @ B[n, k]^T and compare D with an fp32 reference.

    Args:
        kernel: Kernel IR (``build_kernel(plan)``).
        m, n, k: problem shape (k a multiple of 8: TMA global strides are 16-byte multiples).
        seed: seeds the random bf16 inputs (ignored for an operand passed explicitly).
        num_sms: SM count the persistent grid policy sees (small: CTAs loop over several tiles).
        schedule_seed: seeds the interleaving (default: ``seed``).
        policy: how the scheduler orders warps and async units: ``random`` (random latencies), ``latest``
            (every async unit completes as late as legal), ``pct`` (PCT priorities); see :mod:`.machine`.
        a, b: float inputs ``[m, k]`` / ``[n, k]`` (rounded to bf16), instead of random ones.
        check: raise SimError on a wrong result (else just report the errors).

    Raises:
        SimError: deadlock, read before write (shared memory or TMEM), over-arrival,
            transaction-byte mismatch, other protocol faults, or a wrong result
            (relative Frobenius error >= 1e-2 or any element off by more than
            2e-2 * (|ref| + rms(ref))), with the first wrong element.
        ShapeError: a shape the kernel's tensor maps cannot describe.
        ValueError: an unknown policy.
    """
    spec = kernel.launch
    if min(m, n, k) < 1 or k % spec.k_multiple:
        raise ShapeError(f"m={m}, n={n}, k={k}: all must be >= 1 and k a multiple of {spec.k_multiple}")
    a_bits, b_bits = random_operands(m, n, k, seed)
    if a is not None:
        a_bits = f32_to_bf16_bits(np.asarray(a, dtype=np.float32).reshape(m, k))
    if b is not None:
        b_bits = f32_to_bf16_bits(np.asarray(b, dtype=np.float32).reshape(n, k))
    dual = "b2" in spec.tensor_maps  # a dual GEMM: D = silu(A @ B^T) * (A @ B2^T)
    b2_bits = random_operands(m, n, k, seed + 7919)[1] if dual else None
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m, n, k, a_bits, b_bits, num_sms=num_sms, schedule_seed=sched,
                      smem_base=SMEM_BASE, poison=POISON, b2=b2_bits, policy=policy)
    machine.run(MAX_STEPS)
    d = bf16_bits_to_f32(machine.glob.d)
    ref = silu_mul_reference(a_bits, b_bits, b2_bits) if dual else reference(a_bits, b_bits)
    cmp = compare(d, ref)
    if check and not cmp.ok:
        i, j = cmp.first_wrong if cmp.first_wrong else (0, 0)
        raise SimError(f"wrong result: {kernel.name} m={m} n={n} k={k} schedule {sched}{'' if policy == 'random' else f' ({policy})'}: relative Frobenius error "
                       f"{cmp.rel_fro:.3e}, max-abs relative error {cmp.max_rel_err:.3e}, {cmp.wrong} of {d.size} "
                       f"elements wrong; first wrong D[{i}, {j}] = {float(d[i, j]):.6g} (expected {float(ref[i, j]):.6g})")
    return SimResult(d=d, d_bits=machine.glob.d, ref=ref, rel_fro=cmp.rel_fro, max_rel_err=cmp.max_rel_err,
                     steps=machine.steps, ops_executed=machine.ops, grid=machine.grid, schedule_seed=sched,
                     policy=policy, mean_latency=machine.mean_latency, fingerprint=machine.fingerprint)
