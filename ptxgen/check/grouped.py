"""Grouped GEMM on the CPU: the u32 tables the grouped scheduler reads, the verifier's traced tables, the layouts
(masked, contiguous with DeepGEMM's padded ``m_indices``) and the inputs of the simulator's grouped run
(:func:`ptxgen.check.sim.run.simulate_grouped`).

A grouped kernel (``schedule.grouped``, :mod:`ptxgen.builders.grouped`) reads ``masked_m[g]`` or
``m_indices[row]`` with :class:`~ptxgen.ir.ops.LdGlobalNcU32`; the verifier's trace and the simulator reply
those words from a :class:`Tables`, so both walk the skip decisions a real launch takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import VerifyError

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


def block_rows(kernel) -> int:
    """Rows of one CTA's m-block: the launch's cluster tile rows over the CTAs that split them (a grouped CTA pair
    takes two m-blocks of one n-block)."""
    return kernel.launch.grid.tile_rows // kernel.cluster_size


def trace_tables(kernel, m: int) -> Tables:
    """The tables the verifier traces a grouped kernel with: 3 groups, the middle one empty, the last one's last
    m-block holding one valid row (``m``: the traced launch's rows, a multiple of block_m of at least 3 m-blocks,
    or one row less)."""
    kind = mode(kernel)
    if kind == "none":
        return Tables()
    bm = block_rows(kernel)
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


def grouped_inputs(rows: int, groups: int, n: int, k: int, fp8: bool, seed: int) -> dict:
    """Random inputs of a grouped problem: A ``[rows, k]``, B ``[G x n, k]`` (bf16 bits; or e4m3 bytes with the
    recipe's scales ``scale_a`` ``[rows, ceil(k/128)]`` and ``scale_b`` ``[G, ceil(n/128), ceil(k/128)]``)."""
    return (_fp8_inputs if fp8 else _bf16_inputs)(rows, groups, n, k, seed)


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


def problem_of(kernel, m: int) -> dict:
    """The grouped problem :func:`ptxgen.check.sim.run.simulate` runs for a shape's ``m``: 3 groups, the middle one
    empty, the last one partial (masked: ``M_max = m``, ``masked_m = [m, 0, ceil(m/2)]``; contiguous: group rows
    ``[m, 0, ceil(m/3)]``)."""
    if mode(kernel) == "masked":
        return {"masked_m": [m, 0, (m + 1) // 2], "m_max": m}
    return {"group_rows": [m, 0, (m + 2) // 3]}


__all__ = ["Tables", "block_rows", "trace_tables", "contiguous_indices", "grouped_scale_a_map", "grouped_scale_b_map",
           "problem_of", "mode", "grouped_inputs", "NO_GROUP"]
