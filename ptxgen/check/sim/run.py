"""``simulate``: run a Kernel IR on the CPU for one problem shape and one interleaving, and check D."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import ShapeError, SimError
from ...hw import DYNAMIC_SMEM_BASE, SF_LINE_BYTES
from ...ir import epilogue as epi
from .. import epilogue, grouped
from .machine import Machine
from ..numerics import (POISON, bf16_bits_to_f32, compare, f32_to_bf16_bits, random_operands, reference,
                       silu_mul_reference)
from ...formats import SF_VEC, sf_to_blocked
from ..nvfp4 import nvfp4_dual_gemm_reference, random_nvfp4
from ..fp8 import fp8_gemm_reference, mx_gemm_reference, random_fp8, random_mxfp8
from ...ir import ops as O

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
    filled_rows: per tensor map, the rows of TMA load boxes past the tensor's last row (zero-filled in shared memory).
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
    filled_rows: dict = field(default_factory=dict)


def simulate(kernel, m: int, n: int, k: int, *, seed: int = 0, num_sms: int = 4, schedule_seed: int | None = None,
             a: np.ndarray | None = None, b: np.ndarray | None = None, check: bool = True,
             policy: str = "random", expr=None, operands: dict[str, np.ndarray] | None = None) -> SimResult:
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
        expr: the kernel's fused epilogue (:mod:`ptxgen.epi`; the plan's ``epilogue.expr``): the reference applies
            it (:func:`ptxgen.check.epilogue.reference`).  None: D = A @ B^T, or a dual GEMM's SwiGLU.
        operands: the expression's operands by name as float32 (vectors, ``[M, N]`` tensors, scalars); default
            random (:func:`ptxgen.check.epilogue.random_operands`, seeded by ``seed``).

    Raises:
        SimError: deadlock, read before write (shared memory or TMEM), over-arrival,
            transaction-byte mismatch, other protocol faults, or a wrong result
            (relative Frobenius error >= 1e-2 or any element off by more than
            2e-2 * (|ref| + rms(ref))), with the first wrong element.
        ShapeError: a shape the kernel's tensor maps cannot describe.
        ValueError: an unknown policy.
    """
    spec = kernel.launch
    if block_scaled_kind(kernel) == "mxf8f6f4":  # the MXFP8 block-scaled GEMM (the FP8 recipe on sm_100a)
        return simulate_mxfp8(kernel, m, n, k, seed=seed, num_sms=num_sms, schedule_seed=schedule_seed, check=check,
                              policy=policy)
    if spec.extra.get("grouped"):  # a grouped GEMM: 3 groups of this m (ptxgen.check.grouped.problem_of)
        if min(m, n, k) < 1 or k % spec.k_multiple:
            raise ShapeError(f"m={m}, n={n}, k={k}: all must be >= 1 and k a multiple of {spec.k_multiple}")
        return simulate_grouped(kernel, n=n, k=k, **grouped.problem_of(kernel, m), seed=seed, num_sms=num_sms,
                                schedule_seed=schedule_seed, policy=policy, check=check)
    if "sfa" in spec.tensor_maps:  # the NVFP4 block-scaled dual GEMM: its own operands and reference
        return simulate_nvfp4(kernel, m, n, k, seed=seed, num_sms=num_sms, schedule_seed=schedule_seed, check=check,
                              policy=policy)
    if "scale_a" in spec.tensor_maps:  # the FP8 block-scaled GEMM: e4m3 operands, fp32 block scales
        return simulate_fp8(kernel, m, n, k, seed=seed, num_sms=num_sms, schedule_seed=schedule_seed, check=check,
                            policy=policy, expr=expr, operands=operands)
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
    out_dtype = spec.tensor_maps["d"].dtype if "d" in spec.tensor_maps else epi.out_dtype(expr)
    operands, extra, scalars = _epilogue_buffers(expr, operands, m, n, seed, out_dtype, spec)
    swap = bool(spec.extra.get("swap_ab"))  # the kernel computes D^T = B @ A^T: its A is B, its m is n
    machine = Machine(kernel, *((n, m, k, b_bits, a_bits) if swap else (m, n, k, a_bits, b_bits)), num_sms=num_sms,
                      schedule_seed=sched, smem_base=DYNAMIC_SMEM_BASE, poison=POISON, b2=b2_bits, policy=policy,
                      extra=extra, scalars=scalars)
    machine.run(MAX_STEPS)
    if swap:  # the n x m elements at d_ptr, read as the caller's row-major [m, n] D
        machine.glob.d = machine.glob.d.reshape(m, n)
    d = bf16_bits_to_f32(machine.glob.d) if out_dtype == "bf16" else machine.glob.d.view(np.float16).astype(np.float32)
    if expr is not None:
        accs = ({"acc1": reference(a_bits, b_bits), "acc2": reference(a_bits, b2_bits)} if dual else
                {"acc": reference(a_bits, b_bits)})
        return _epilogue_result(kernel, machine, expr, accs, operands, extra, d, (m, n, k), sched, check)
    ref = silu_mul_reference(a_bits, b_bits, b2_bits) if dual else reference(a_bits, b_bits)
    return _result(kernel, machine, d, ref, (m, n, k), sched, check)


def _epilogue_buffers(expr, operands: dict | None, m: int, n: int, seed: int,
                      out_dtype: str, spec=None) -> tuple[dict | None, dict, dict]:
    """The fused epilogue's kernel arguments: (its operands by name, default random (seeded by ``seed``), the
    global buffers by parameter (operands, NaN-poisoned outputs; an operand the launch ``spec`` reads through the
    staging ring also as the bits of its ``tile_<name>`` map), the scalar parameters' bits); all empty for
    ``expr`` None."""
    extra, scalars = {}, {}
    if expr is None:
        return operands, extra, scalars
    if operands is None:
        operands = epilogue.random_operands(expr, m, n, seed + 104729, "bf16" if out_dtype == "e4m3" else out_dtype)
    for o in epi.operands(expr):
        value = np.asarray(operands[o.name], dtype=np.float32)
        if o.along == "scalar":
            scalars[f"epi_{o.name}"] = epilogue.bits_of_f32(float(value))
        else:
            extra[f"epi_{o.name}"] = value
            if spec is not None and f"tile_{o.name}" in spec.tensor_maps:  # read through the staging ring
                fmt = spec.tensor_maps[f"tile_{o.name}"].dtype
                extra[f"tile_{o.name}"] = (f32_to_bf16_bits(value) if fmt == "bf16" else
                                           value.astype(np.float16).view(np.uint16))
    extra.update(epilogue.output_buffers(expr, m, n))
    return operands, extra, scalars


def _epilogue_result(kernel, machine: Machine, expr, accs: dict, operands: dict, extra: dict, d: np.ndarray,
                     shape: tuple[int, int, int], sched: int, check: bool) -> SimResult:
    """Compare a fused epilogue's D (``d``, or an e4m3 D's buffer) and outputs with :mod:`ptxgen.check.epilogue`'s
    reference of ``expr`` on the fp32 accumulators ``accs``."""
    m, n, k = shape
    e4m3 = epi.out_dtype(expr) == "e4m3"
    if not (epi.outputs(expr) or e4m3):
        return _result(kernel, machine, d, epilogue.reference(expr, accs, operands), shape, sched, check)
    want = epilogue.reference_outputs(expr, accs, operands)  # D and the outputs beside it
    got = {name: extra[name if name == "d_ptr" else f"epi_{name}"] for name in want if name != "D"}
    got["D"] = extra["d_ptr"] if e4m3 else d
    if check:
        epilogue.check_outputs(f"{kernel.name} m={m} n={n} k={k} schedule {sched}", expr, got, want)
    return _result(kernel, machine, got["D"], want["D"], shape, sched, False)


# ------------------------------------------------------------------ NVFP4: the block-scaled dual GEMM
# Inputs are NVFP4 as the public ``nvfp4_dual_gemm`` problem defines them (packed e2m1 ``[rows, K/2]``, e4m3
# scales in the 128x4 atom layout); the global tensors the kernel's TMA maps read are those bytes (the scale
# maps: the blocked buffer as ``[lines, 128]``); C is fp16.

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
                   inputs: dict[str, np.ndarray] | None = None, check: bool = True, policy: str = "random") -> SimResult:
    """Execute the NVFP4 dual GEMM ``kernel`` for C[m, n] and compare C with :func:`nvfp4_dual_gemm_reference`.

    Args:
        kernel: Kernel IR of an ``operands: nvfp4`` config.
        m, n, k: problem shape: m, n multiples of 128, k a multiple of the kernel's ``k_multiple`` (256).
        seed: seeds the random inputs (:func:`nvfp4_inputs`); masked: the problem's value mask (else any e2m1).
        inputs: the operands instead (keys of :func:`nvfp4_inputs`).
        num_sms, schedule_seed, check, policy: as :func:`ptxgen.check.sim.simulate`.

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
    extra = {"sfa": x["sfa"].reshape(-1, SF_LINE_BYTES), "sfb": x["sfb1"].reshape(-1, SF_LINE_BYTES),
             "sfb2": x["sfb2"].reshape(-1, SF_LINE_BYTES)}
    if extra["sfa"].shape[0] != m * k // SF_VEC // SF_LINE_BYTES:
        raise ShapeError(f"sfa holds {x['sfa'].size} bytes; [{m}, {k // SF_VEC}] blocked scales need {m * k // SF_VEC}")
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m, n, k, x["a"], x["b1"], num_sms=num_sms, schedule_seed=sched, smem_base=DYNAMIC_SMEM_BASE,
                      poison=POISON, b2=x["b2"], extra=extra, policy=policy)
    machine.run(MAX_STEPS)
    d = machine.glob.d.view(np.float16).astype(np.float32)
    ref = nvfp4_dual_gemm_reference(x["a"], x["b1"], x["b2"], x["sfa"], x["sfb1"], x["sfb2"]).astype(np.float32)
    return _result(kernel, machine, d, ref, (m, n, k), sched, check, out="C")


# ------------------------------------------------------------------ FP8: the block-scaled GEMM (DeepSeek-V3's recipe)
# The global tensors the kernel's maps read: A, B as e4m3 bytes; the scales transposed, one k-block's scales per
# row (``scale_a.T`` ``[ceil(K/128), M]``, ``scale_b.T`` ``[ceil(K/128), ceil(N/128)]``, rows padded to 4 fp32), as the
# runtime hands them.


def fp8_scale_map(scale: np.ndarray) -> np.ndarray:
    """The global tensor an FP8 scale map reads, as the runtime declares it: ``scale.T`` ``[k-blocks, rows]`` with
    the rows padded with zeros to whole 16-byte groups (4 fp32)."""
    rows, kblocks = scale.shape
    out = np.zeros((kblocks, -(-rows // 4) * 4), dtype=np.float32)
    out[:, :rows] = scale.T
    return out


def simulate_fp8(kernel, m: int, n: int, k: int, *, seed: int = 0, num_sms: int = 4,
                 schedule_seed: int | None = None, inputs: dict[str, np.ndarray] | None = None, check: bool = True,
                 policy: str = "random", expr=None, operands: dict[str, np.ndarray] | None = None) -> SimResult:
    """Execute the FP8 GEMM ``kernel`` for D[m, n] and compare D with :func:`~ptxgen.check.fp8.fp8_gemm_reference`
    (with a fused epilogue ``expr``: that fp32 accumulator, then :mod:`ptxgen.check.epilogue`'s reference of the
    expression).

    Args:
        kernel: Kernel IR of an ``operands: fp8`` config.
        m, n, k: problem shape (k a multiple of the kernel's ``k_multiple``, 16).
        seed: seeds the random inputs (:func:`~ptxgen.check.fp8.random_fp8`: the recipe's quantization).
        inputs: the operands instead (``a``, ``b`` e4m3 bytes, ``scale_a`` ``[m, ceil(k/128)]``, ``scale_b``
            ``[ceil(n/128), ceil(k/128)]`` fp32).
        num_sms, schedule_seed, check, policy: as :func:`simulate`.
        expr, operands: the kernel's fused epilogue and its operands, as for :func:`simulate`.

    Raises:
        ShapeError: a shape outside the rules above.  SimError: any fault, or a wrong result.
    """
    spec = kernel.launch
    if min(m, n, k) < 1 or k % spec.k_multiple:
        raise ShapeError(f"m={m}, n={n}, k={k}: all must be >= 1 and k a multiple of {spec.k_multiple}")
    x = inputs if inputs is not None else random_fp8(m, n, k, seed)
    out_dtype = "bf16" if expr is None else epi.out_dtype(expr)
    operands, extra, scalars = _epilogue_buffers(expr, operands, m, n, seed, out_dtype)
    extra.update({name: fp8_scale_map(x[name]) for name in ("scale_a", "scale_b")})
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m, n, k, x["a"], x["b"], num_sms=num_sms, schedule_seed=sched,
                      smem_base=DYNAMIC_SMEM_BASE, poison=POISON, extra=extra, scalars=scalars, policy=policy)
    machine.run(MAX_STEPS)
    d = bf16_bits_to_f32(machine.glob.d)
    acc = fp8_gemm_reference(x["a"], x["b"], x["scale_a"], x["scale_b"])
    if expr is not None:  # the recipe's accumulator, then the expression
        return _epilogue_result(kernel, machine, expr, {"acc": acc}, operands, extra, d, (m, n, k), sched, check)
    return _result(kernel, machine, d, acc, (m, n, k), sched, check)


def _run_e4m3(kernel, shape: tuple[int, int, int], a: np.ndarray, b: np.ndarray, extra: dict, ref: np.ndarray, *,
              seed: int, schedule_seed: int | None, num_sms: int, policy: str, check: bool) -> SimResult:
    """Run an e4m3-in, bf16-out kernel (FP8, MXFP8) on ``a``, ``b`` and its scale maps ``extra``; compare D with ``ref``."""
    m, n, k = shape
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m, n, k, a, b, num_sms=num_sms, schedule_seed=sched, smem_base=DYNAMIC_SMEM_BASE,
                      poison=POISON, extra=extra, policy=policy)
    machine.run(MAX_STEPS)
    return _result(kernel, machine, bf16_bits_to_f32(machine.glob.d), ref, shape, sched, check)


def block_scaled_kind(kernel) -> str:
    """The ``.kind`` of the kernel's block-scaled MMAs (``mxf4nvf4``, ``mxf8f6f4``), "" when it has none."""
    return next((op.kind for op in O.walk(kernel.body) if isinstance(op, O.UmmaBlockScaled)), "")


# ------------------------------------------------------------------ MXFP8: the FP8 recipe on sm_100a
# The global tensors the kernel's maps read: A, B as e4m3 bytes (the recipe's operands converted by
# :func:`~ptxgen.check.fp8.mx_from_recipe`), the ue8m0 scales in the 128x4 atom layout as ``[lines, 128]`` bytes.


def simulate_mxfp8(kernel, m: int, n: int, k: int, *, seed: int = 0, num_sms: int = 4,
                   schedule_seed: int | None = None, pow2_scales: bool = False,
                   inputs: dict[str, np.ndarray] | None = None, check: bool = True, policy: str = "random") -> SimResult:
    """Execute the MXFP8 GEMM ``kernel`` for D[m, n] and compare D with :func:`~ptxgen.check.fp8.mx_gemm_reference`.

    Args:
        kernel: Kernel IR of an ``operands: mxfp8`` config.
        m, n, k: problem shape: m, n multiples of 128 (whole scale atoms), k a multiple of the kernel's
            ``k_multiple`` (128).
        seed: seeds the recipe's random operands; pow2_scales: with power-of-two recipe scales (the conversion is
            then exact, see :func:`~ptxgen.check.fp8.random_mxfp8`).
        inputs: the operands instead (``mx_a``, ``mx_b`` e4m3 bytes, ``sfa`` ``[m, k/32]``, ``sfb`` ``[n, k/32]``
            row-major ue8m0 bytes).
        num_sms, schedule_seed, check, policy: as :func:`simulate`.

    Returns:
        SimResult with ``ref`` the MXFP8 reference of the converted operands.

    Raises:
        ShapeError: a shape outside the rules above.  SimError: any fault, or a wrong result.
    """
    spec = kernel.launch
    if min(m, n, k) < 1 or m % ROW_MULTIPLE or n % ROW_MULTIPLE or k % spec.k_multiple:
        raise ShapeError(f"m={m}, n={n}, k={k}: MXFP8 needs m and n multiples of {ROW_MULTIPLE} (whole scale atoms) "
                         f"and k a multiple of {spec.k_multiple}")
    x = inputs if inputs is not None else random_mxfp8(m, n, k, seed, pow2_scales)
    extra = {nm: sf_to_blocked(x[nm]).reshape(-1, SF_LINE_BYTES) for nm in ("sfa", "sfb")}
    ref = mx_gemm_reference(x["mx_a"], x["mx_b"], x["sfa"], x["sfb"])
    return _run_e4m3(kernel, (m, n, k), x["mx_a"], x["mx_b"], extra, ref, seed=seed, schedule_seed=schedule_seed,
                     num_sms=num_sms, policy=policy, check=check)


def simulate_grouped(kernel, *, n: int, k: int, masked_m=None, m_max: int = 0, group_rows=None, seed: int = 0,
                     num_sms: int = 4, schedule_seed: int | None = None, policy: str = "random",
                     check: bool = True):
    """Run a grouped kernel on a small problem and check D per group, and that the rows outside every group's
    valid rows kept the poison (were never written).

    Masked: ``masked_m`` (valid rows per group) and ``m_max``; contiguous: ``group_rows`` (rows per group, 0 for an
    empty group; the layout is :func:`contiguous_indices`).  B ``[G, n, k]`` random; bf16, or FP8 with the recipe's
    quantization for an ``operands: fp8`` kernel.

    Returns:
        A :class:`~ptxgen.check.sim.run.SimResult`: ``d`` the whole D ``[rows, n]`` (f32 of the stored bf16), ``ref``
        the per-group references in the groups' rows (NaN in the rows that must stay untouched), ``rel_fro`` and
        ``max_rel_err`` the largest over the groups.

    Raises:
        SimError: any fault of the machine, a wrong group result, or a written row that must stay untouched.
    """
    kind = grouped.mode(kernel)
    bm = grouped.block_rows(kernel)
    if kind == "masked":
        groups = len(masked_m)
        rows, m_param = groups * m_max, m_max
        table = np.asarray(masked_m, dtype=np.int64)
        spans = [(g * m_max, g * m_max + int(masked_m[g])) for g in range(groups)]
    elif kind == "contiguous":
        groups = len(group_rows)
        table = grouped.contiguous_indices(group_rows, bm)
        rows = m_param = len(table)
        starts = np.cumsum([0] + [-(-r // bm) * bm for r in group_rows])
        spans = [(int(starts[g]), int(starts[g]) + int(group_rows[g])) for g in range(groups)]
    else:
        raise ShapeError(f"{kernel.name}: not a grouped kernel (schedule.grouped)")
    if rows == 0:
        raise ShapeError("grouped simulation: no rows")
    fp8 = "scale_a" in kernel.launch.tensor_maps
    x = grouped.grouped_inputs(rows, groups, n, k, fp8, seed)
    extra = {}
    if fp8:
        sa = grouped.grouped_scale_a_map(x["scale_a"], groups) if kind == "masked" else fp8_scale_map(x["scale_a"])
        extra = {"scale_a": sa, "scale_b": grouped.grouped_scale_b_map(x["scale_b"])}
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m_param, n, k, x["a"], x["b"], num_sms=num_sms, schedule_seed=sched,
                      smem_base=DYNAMIC_SMEM_BASE, poison=POISON, extra=extra, policy=policy,
                      scalars={"num_groups": groups})
    machine.glob.d = np.full((rows, n), POISON, dtype=np.uint16)  # D [rows, N], not [rows, G x N]
    machine.tables = grouped.Tables({"num_groups": groups}, {"group_ptr": table})
    machine.run(MAX_STEPS)
    bits = machine.glob.d
    d = bf16_bits_to_f32(bits)
    errs, valid = [(0.0, 0.0)], np.zeros(rows, dtype=bool)
    full_ref = np.full((rows, n), np.nan, dtype=np.float32)
    for g, (r0, r1) in enumerate(spans):
        valid[r0:r1] = True
        if r1 == r0:
            continue
        b_g = x["b"][g * n:(g + 1) * n]
        ref = (fp8_gemm_reference(x["a"][r0:r1], b_g, x["scale_a"][r0:r1], x["scale_b"][g]) if fp8 else
               reference(x["a"][r0:r1], b_g))
        full_ref[r0:r1] = ref
        cmp = compare(d[r0:r1], ref)
        errs.append((cmp.rel_fro, cmp.max_rel_err))
        if check and not cmp.ok:
            i, j = cmp.first_wrong if cmp.first_wrong else (0, 0)
            raise SimError(f"wrong result: {kernel.name} group {g} (rows {r0}..{r1 - 1}) n={n} k={k} schedule "
                           f"{sched}: relative Frobenius error {cmp.rel_fro:.3e}; first wrong D[{r0 + i}, {j}] = "
                           f"{float(d[r0 + i, j]):.6g} (expected {float(ref[i, j]):.6g})")
    written = np.argwhere((bits != POISON) & ~valid[:, None])  # rows outside every group: never stored
    if check and len(written):
        r, c = (int(v) for v in written[0])
        raise SimError(f"untouched row written: {kernel.name} D[{r}, {c}] was stored, but row {r} is outside every "
                       f"group's valid rows ({len(np.unique(written[:, 0]))} such rows written)")
    return SimResult(d=d, d_bits=bits, ref=full_ref, rel_fro=max(e for e, _ in errs),
                     max_rel_err=max(e for _, e in errs), steps=machine.steps, ops_executed=machine.ops,
                     grid=machine.grid, schedule_seed=sched, policy=machine.policy, mean_latency=machine.mean_latency,
                     fingerprint=machine.fingerprint, filled_rows=dict(machine.glob.filled_rows))


def _result(kernel, machine: Machine, d: np.ndarray, ref: np.ndarray, shape: tuple[int, int, int], sched: int,
            check: bool, out: str = "D") -> SimResult:
    """Compare the output ``d`` with ``ref``; SimError (``wrong result``, first wrong element of ``out``) if asked."""
    m, n, k = shape
    policy = machine.policy
    cmp = compare(d, ref)
    if check and not cmp.ok:
        i, j = cmp.first_wrong if cmp.first_wrong else (0, 0)
        schedule = f"schedule {sched}" + ("" if policy == "random" else f" ({policy})")
        raise SimError(f"wrong result: {kernel.name} m={m} n={n} k={k} {schedule}: relative Frobenius error "
                       f"{cmp.rel_fro:.3e}, max-abs relative error {cmp.max_rel_err:.3e}, {cmp.wrong} of {d.size} "
                       f"elements wrong; first wrong {out}[{i}, {j}] = {float(d[i, j]):.6g} "
                       f"(expected {float(ref[i, j]):.6g})")
    return SimResult(d=d, d_bits=machine.glob.d, ref=ref, rel_fro=cmp.rel_fro, max_rel_err=cmp.max_rel_err,
                     steps=machine.steps, ops_executed=machine.ops, grid=machine.grid, schedule_seed=sched,
                     policy=policy, mean_latency=machine.mean_latency, fingerprint=machine.fingerprint,
                     filled_rows=dict(machine.glob.filled_rows))
