"""``simulate_nvfp4``: one simulated launch of the NVFP4 block-scaled dual GEMM, checked against the problem's reference.

:func:`ptxgen.sim.simulate` dispatches here for a kernel whose launch spec maps scale-factor tiles
(``sfa``).  Inputs are NVFP4 as the public ``nvfp4_dual_gemm`` problem defines them (packed e2m1
``[rows, K/2]``, e4m3 scales in the 128x4 atom layout); the global tensors the kernel's TMA maps
read are those bytes (the scale maps: the blocked buffer as ``[lines, 128]``); C is fp16.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError, SimError
from .machine import Machine
from .numerics import POISON, compare
from .nvfp4 import SF_VEC, nvfp4_dual_gemm_reference, random_nvfp4, sf_to_blocked
from .run import MAX_STEPS, SMEM_BASE, SimResult

SF_LINE = 128  # bytes per row of the scale maps' 2-D view (a quarter atom)
ROW_MULTIPLE = 128  # M and N: whole 128-row scale atoms (cuBLAS "1D Block Scaling Factors Layout")


def nvfp4_inputs(m: int, n: int, k: int, seed: int, masked: bool = True) -> dict[str, np.ndarray]:
    """Random NVFP4 operands: ``a`` ``[m, k/2]``, ``b1``/``b2`` ``[n, k/2]`` packed e2m1 (uint8) and their blocked
    e4m3 scales ``sfa``, ``sfb1``, ``sfb2`` (flat bytes); ``masked``: magnitudes <= 1.5 as the problem draws them."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, rows in (("a", m), ("b1", n), ("b2", n)):
        packed, sf = random_nvfp4(rows, k, rng, masked=masked)
        out[name], out["sf" + name] = packed, sf_to_blocked(sf)
    return out


def simulate_nvfp4(kernel, m: int, n: int, k: int, *, seed: int = 0, num_sms: int = 4,
                   schedule_seed: int | None = None, masked: bool = True,
                   inputs: dict[str, np.ndarray] | None = None, check: bool = True) -> SimResult:
    """Execute the NVFP4 dual GEMM ``kernel`` for C[m, n] and compare C with :func:`nvfp4_dual_gemm_reference`.

    Args:
        kernel: Kernel IR of an ``operands: nvfp4`` config.
        m, n, k: problem shape: m, n multiples of 128, k a multiple of the kernel's ``k_multiple`` (256).
        seed: seeds the random inputs (:func:`nvfp4_inputs`); masked: the problem's value mask (else any e2m1).
        inputs: the operands instead (keys of :func:`nvfp4_inputs`).
        num_sms, schedule_seed, check: as :func:`ptxgen.sim.simulate`.

    Returns:
        SimResult with ``d`` the fp16 C as float32, ``ref`` the reference's fp16 C as float32.

    Raises:
        ShapeError: a shape outside the rules above.
        SimError: any fault of the simulator, or a wrong result (first wrong element named).
    """
    spec = kernel.launch
    if min(m, n, k) < 1 or m % ROW_MULTIPLE or n % ROW_MULTIPLE or k % spec.k_multiple:
        raise ShapeError(f"m={m}, n={n}, k={k}: NVFP4 needs m and n multiples of {ROW_MULTIPLE} (whole scale atoms) "
                         f"and k a multiple of {spec.k_multiple}")
    x = inputs if inputs is not None else nvfp4_inputs(m, n, k, seed, masked)
    extra = {"sfa": x["sfa"].reshape(-1, SF_LINE), "sfb": x["sfb1"].reshape(-1, SF_LINE),
             "sfb2": x["sfb2"].reshape(-1, SF_LINE)}
    if extra["sfa"].shape[0] != m * k // SF_VEC // SF_LINE:
        raise ShapeError(f"sfa holds {x['sfa'].size} bytes; [{m}, {k // SF_VEC}] blocked scales need {m * k // SF_VEC}")
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m, n, k, x["a"], x["b1"], num_sms=num_sms, schedule_seed=sched, smem_base=SMEM_BASE,
                      poison=POISON, b2=x["b2"], extra=extra)
    machine.run(MAX_STEPS)
    d = machine.glob.d.view(np.float16).astype(np.float32)
    ref = nvfp4_dual_gemm_reference(x["a"], x["b1"], x["b2"], x["sfa"], x["sfb1"], x["sfb2"]).astype(np.float32)
    cmp = compare(d, ref)
    if check and not cmp.ok:
        i, j = cmp.first_wrong if cmp.first_wrong else (0, 0)
        raise SimError(f"wrong result: {kernel.name} m={m} n={n} k={k} schedule {sched}: relative Frobenius error "
                       f"{cmp.rel_fro:.3e}, max-abs relative error {cmp.max_rel_err:.3e}, {cmp.wrong} of {d.size} "
                       f"elements wrong; first wrong C[{i}, {j}] = {float(d[i, j]):.6g} (expected {float(ref[i, j]):.6g})")
    return SimResult(d=d, d_bits=machine.glob.d, ref=ref, rel_fro=cmp.rel_fro, max_rel_err=cmp.max_rel_err,
                     steps=machine.steps, ops_executed=machine.ops, grid=machine.grid, schedule_seed=sched,
                     mean_latency=machine.mean_latency, fingerprint=machine.fingerprint)
