"""Grouped GEMM on the CPU: the u32 tables the grouped scheduler reads, the verifier's traced tables, the layouts
(masked, contiguous with DeepGEMM's padded ``m_indices``) and the simulator's run of a small grouped problem.

A grouped kernel (``schedule.grouped``, :mod:`ptxgen.builders.grouped`) reads ``masked_m[g]`` or
``m_indices[row]`` with :class:`~ptxgen.ir.ops.LdGlobalNcU32`; the verifier's trace and the simulator reply
those words from a :class:`Tables`, so both walk the skip decisions a real launch takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ShapeError, SimError, VerifyError

NO_GROUP = -1  # m_indices of a padding row
#: the scale_b blocks of one group are padded to a multiple of this (one 16-byte TMA box of fp32)
SB_BOX = 4


@dataclass(frozen=True)
class Tables:
    """The u32 tables of one launch by kernel parameter (``group_ptr``) and the scalars they come with
    (``num_groups``); empty for a kernel that is not grouped."""

    params: dict = field(default_factory=dict)
    words: dict = field(default_factory=dict)

    def read(self, param: str, index, who: str, error=VerifyError):
        """The words at ``index`` (an int or per-lane indices) of table ``param``, as u32.

        Raises ``error``: no such table, or an index outside it (the kernel read past ``masked_m[G]`` or
        ``m_indices[M_total]``)."""
        table = self.words.get(param)
        if table is None:
            raise error(f"{who}: no u32 table {param!r} in this launch")
        idx = np.asarray(index, dtype=np.int64)
        if (idx < 0).any() or (idx >= len(table)).any():
            bad = int(idx.flat[np.flatnonzero((idx < 0) | (idx >= len(table)))[0]])
            raise error(f"out of bounds: {who} reads {param}[{bad}] of a {len(table)}-word table")
        return (table[idx] & 0xFFFFFFFF).astype(np.int64)


def mode(kernel) -> str:
    """``none``, ``masked`` or ``contiguous``: the kernel's grouped layout (its launch spec's ``extra``)."""
    return kernel.launch.extra.get("grouped", "none")


def trace_tables(kernel, m: int) -> Tables:
    """The tables the verifier traces a grouped kernel with: 3 groups, the middle one empty, the last one's last
    m-block holding one valid row (``m``: the traced launch's rows, a multiple of block_m of at least 3 m-blocks,
    or one row less)."""
    kind = mode(kernel)
    if kind == "none":
        return Tables()
    bm = kernel.launch.grid.tile_rows
    if kind == "masked":
        return Tables({"num_groups": 3}, {"group_ptr": np.array([m, 0, bm + 1], dtype=np.int64)})
    blocks = -(-m // bm)
    table = np.full(blocks * bm, NO_GROUP, dtype=np.int64)
    table[:bm] = 0  # group 0: one full m-block; group 1: none; m-block 1: padding only; group 2: one row
    table[2 * bm] = 2
    return Tables({"num_groups": 3}, {"group_ptr": table})


# ------------------------------------------------------------------ layouts


def contiguous_indices(group_rows, block_m: int) -> np.ndarray:
    """DeepGEMM's ``m_indices`` for groups of ``group_rows[g]`` rows: group g's rows, then -1 padding up to a
    multiple of ``block_m``, the segments in group order (an empty group has no segment)."""
    out = []
    for g, rows in enumerate(group_rows):
        pad = -(-rows // block_m) * block_m
        out += [g] * rows + [NO_GROUP] * (pad - rows)
    return np.array(out, dtype=np.int64)


# ------------------------------------------------------------------ the simulator's grouped run


def _bf16_inputs(rows: int, groups: int, n: int, k: int, seed: int) -> dict:
    from .numerics import random_operands

    a, b = random_operands(rows, groups * n, k, seed)
    return {"a": a, "b": b}


def _fp8_inputs(rows: int, groups: int, n: int, k: int, seed: int) -> dict:
    from .fp8 import random_fp8

    per = [random_fp8(rows if g == 0 else 1, n, k, seed + g) for g in range(groups)]
    a = per[0]
    return {"a": a["a"], "scale_a": a["scale_a"], "b": np.concatenate([p["b"] for p in per]),
            "scale_b": np.stack([p["scale_b"] for p in per])}


def grouped_scale_b_map(scale_b: np.ndarray) -> np.ndarray:
    """The global tensor a grouped FP8 kernel's scale_b map reads: ``[ceil(K/128), G x nbp]`` with each group's
    ``ceil(N/128)`` blocks padded with zeros to ``nbp``, a multiple of 4 (one 16-byte box), transposed."""
    groups, nb, kb = scale_b.shape
    nbp = -(-nb // SB_BOX) * SB_BOX
    out = np.zeros((kb, groups * nbp), dtype=np.float32)
    for g in range(groups):
        out[:, g * nbp:g * nbp + nb] = scale_b[g].T
    return out


def grouped_scale_a_map(scale_a: np.ndarray, groups: int) -> np.ndarray:
    """The global tensor a masked FP8 kernel's scale_a map reads: ``[ceil(K/128), G x M_pad]``, each group's M_max
    rows padded with zeros to ``M_pad``, a multiple of 4 (a box starts 16-byte aligned), transposed."""
    rows, kb = scale_a.shape
    m_max = rows // groups
    m_pad = -(-m_max // SB_BOX) * SB_BOX
    out = np.zeros((kb, groups, m_pad), dtype=np.float32)
    out[:, :, :m_max] = scale_a.reshape(groups, m_max, kb).transpose(2, 0, 1)
    return out.reshape(kb, groups * m_pad)


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
    from ..hw import DYNAMIC_SMEM_BASE
    from .fp8 import fp8_gemm_reference
    from .numerics import POISON, bf16_bits_to_f32, compare, reference
    from .sim.machine import Machine
    from .sim.run import MAX_STEPS, SimResult, fp8_scale_map

    kind = mode(kernel)
    bm = kernel.launch.grid.tile_rows
    if kind == "masked":
        groups = len(masked_m)
        rows, m_param = groups * m_max, m_max
        table = np.asarray(masked_m, dtype=np.int64)
        spans = [(g * m_max, g * m_max + int(masked_m[g])) for g in range(groups)]
    elif kind == "contiguous":
        groups = len(group_rows)
        table = contiguous_indices(group_rows, bm)
        rows = m_param = len(table)
        starts = np.cumsum([0] + [-(-r // bm) * bm for r in group_rows])
        spans = [(int(starts[g]), int(starts[g]) + int(group_rows[g])) for g in range(groups)]
    else:
        raise ShapeError(f"{kernel.name}: not a grouped kernel (schedule.grouped)")
    if rows == 0:
        raise ShapeError("grouped simulation: no rows")
    fp8 = "scale_a" in kernel.launch.tensor_maps
    x = (_fp8_inputs if fp8 else _bf16_inputs)(rows, groups, n, k, seed)
    extra = {}
    if fp8:
        sa = grouped_scale_a_map(x["scale_a"], groups) if kind == "masked" else fp8_scale_map(x["scale_a"])
        extra = {"scale_a": sa, "scale_b": grouped_scale_b_map(x["scale_b"])}
    sched = seed if schedule_seed is None else schedule_seed
    machine = Machine(kernel, m_param, n, k, x["a"], x["b"], num_sms=num_sms, schedule_seed=sched,
                      smem_base=DYNAMIC_SMEM_BASE, poison=POISON, extra=extra, policy=policy,
                      scalars={"num_groups": groups})
    machine.glob.d = np.full((rows, n), POISON, dtype=np.uint16)  # D [rows, N], not [rows, G x N]
    machine.tables = Tables({"num_groups": groups}, {"group_ptr": table})
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
                     fingerprint=machine.fingerprint)


def problem_of(kernel, m: int) -> dict:
    """The grouped problem :func:`ptxgen.check.sim.run.simulate` runs for a shape's ``m``: 3 groups, the middle one
    empty, the last one partial (masked: ``M_max = m``, ``masked_m = [m, 0, ceil(m/2)]``; contiguous: group rows
    ``[m, 0, ceil(m/3)]``)."""
    if mode(kernel) == "masked":
        return {"masked_m": [m, 0, (m + 1) // 2], "m_max": m}
    return {"group_rows": [m, 0, (m + 2) // 3]}


__all__ = ["Tables", "trace_tables", "contiguous_indices", "grouped_scale_a_map", "grouped_scale_b_map",
           "simulate_grouped", "problem_of", "NO_GROUP"]
