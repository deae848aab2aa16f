"""bf16 with numpy bit tricks, the simulator's inputs, the fp32 reference and the result check.

bf16 is the top half of an IEEE f32.  Rounding f32 -> bf16 is round to
nearest, ties to even (what ``cvt.rn.bf16.f32`` and the hardware epilogue
do, PTX ISA "cvt"): add ``0x7FFF`` plus the lowest kept bit, then drop the
low 16 bits; NaN stays a quiet NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BF16_QNAN = 0x7FC0
POISON = 0x7FA5  # a NaN payload the output starts filled with: never written -> visible in the check

REL_FRO_TOL = 1e-2  # relative Frobenius error that fails a result (bf16 output rounding alone is ~2e-3)
ELEM_RTOL = 2e-2  # per element: |d - ref| <= ELEM_RTOL * (|ref| + rms(ref))


def f32_to_bf16_bits(x) -> np.ndarray:
    """bf16 bit patterns (uint16) of ``x``, rounded to nearest even."""
    f = np.asarray(x, dtype=np.float32)
    f = np.ascontiguousarray(f) if f.ndim else f  # C order, so callers can view the bits as bytes
    u = f.view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(BF16_QNAN), out)


def bf16_bits_to_f32(bits) -> np.ndarray:
    """float32 values of bf16 bit patterns."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x) -> np.ndarray:
    """``x`` rounded to the nearest bf16-representable float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def random_operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``[m, k]`` and B ``[n, k]`` as bf16 bit patterns of standard-normal values."""
    rng = np.random.default_rng(seed)
    return (f32_to_bf16_bits(rng.standard_normal((m, k), dtype=np.float32)),
            f32_to_bf16_bits(rng.standard_normal((n, k), dtype=np.float32)))


def silu_mul_reference(a_bits: np.ndarray, b1_bits: np.ndarray, b2_bits: np.ndarray) -> np.ndarray:
    """``silu(A @ B1.T) * (A @ B2.T)`` in float64 from the bf16 inputs (silu(x) = x / (1 + exp(-x)))."""
    a = bf16_bits_to_f32(a_bits).astype(np.float64)
    g = a @ bf16_bits_to_f32(b1_bits).astype(np.float64).T
    u = a @ bf16_bits_to_f32(b2_bits).astype(np.float64).T
    return (g / (1.0 + np.exp(-g)) * u).astype(np.float32)


def reference(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """``A @ B.T`` in float32 from the bf16 inputs."""
    return bf16_bits_to_f32(a_bits) @ np.ascontiguousarray(bf16_bits_to_f32(b_bits).T)


@dataclass(frozen=True)
class Comparison:
    """How far D is from the reference.

    rel_fro: ||D - ref||_F / ||ref||_F (NaN where D has non-finite values).
    max_rel_err: max |D - ref| / max |ref| (max-abs relative).
    wrong: number of elements outside ``ELEM_RTOL * (|ref| + rms(ref))`` (non-finite ones included).
    first_wrong: (row, col) of the first wrong element in row-major order, or None.
    """

    rel_fro: float
    max_rel_err: float
    wrong: int
    first_wrong: tuple[int, int] | None

    @property
    def ok(self) -> bool:
        return self.wrong == 0 and self.rel_fro < REL_FRO_TOL


def compare(d: np.ndarray, ref: np.ndarray) -> Comparison:
    """Compare the float32 output ``d`` with ``ref`` (see :class:`Comparison`)."""
    err = np.abs(d.astype(np.float64) - ref)
    ref_norm = float(np.linalg.norm(ref)) or 1.0
    rms = ref_norm / np.sqrt(max(ref.size, 1))
    bad = ~(err <= ELEM_RTOL * (np.abs(ref) + rms))
    first = np.argwhere(bad)
    finite = np.isfinite(err).all()
    return Comparison(
        rel_fro=float(np.linalg.norm(err) / ref_norm) if finite else float("nan"),
        max_rel_err=float(err.max() / (np.abs(ref).max() or 1.0)) if finite else float("nan"),
        wrong=int(bad.sum()),
        first_wrong=tuple(int(i) for i in first[0]) if len(first) else None,
    )
