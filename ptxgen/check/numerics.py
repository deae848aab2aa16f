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


# ------------------------------------------------------------------ PTX f32 arithmetic and conversions, bit-exact
# One definition of each rounding the emitted PTX names (PTX ISA "Floating Point Instructions", "cvt"); the PTX
# interpreter (ptxgen.check.ptx.interp) and the IR walker's f32 epilogue ops both use these.

ROUNDINGS = ("rn", "rz", "rm", "rp")  # nearest even, toward zero, toward -inf, toward +inf
_MAX_FINITE_16 = {"bf16": 0x7F7F, "f16": 0x7BFF}
_INF_16 = {"bf16": 0x7F80, "f16": 0x7C00}


def bits16_to_f32(bits, fmt: str) -> np.ndarray:
    """float32 values of bf16 or f16 (``fmt``) bit patterns (exact)."""
    if fmt == "bf16":
        return bf16_bits_to_f32(bits)
    b = np.asarray(bits, dtype=np.uint16)
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32).reshape(b.shape)


def _step_toward(bits: np.ndarray, exact: np.ndarray, back: np.ndarray, rounding: str) -> np.ndarray:
    """Bit patterns (sign-magnitude, int64) moved one unit where round-to-nearest ``back`` went past the directed
    rounding of ``exact`` (both float64)."""
    neg = np.signbit(exact)
    if rounding == "rz":  # magnitude too large: one unit toward zero
        return np.where(np.abs(back) > np.abs(exact), bits - 1, bits)
    if rounding == "rm":  # above: toward -inf (a smaller magnitude when positive, a larger one when negative)
        return np.where(back > exact, np.where(neg, bits + 1, bits - 1), bits)
    if rounding == "rp":
        return np.where(back < exact, np.where(neg, bits - 1, bits + 1), bits)
    if rounding != "rn":
        raise ValueError(f"rounding {rounding!r}: not one of {ROUNDINGS}")
    return bits


def f32_to_16_bits(x, fmt: str = "bf16", rounding: str = "rn", satfinite: bool = False) -> np.ndarray:
    """bf16/f16 bit patterns (uint16) of f32 ``x`` as ``cvt.<rounding>[.satfinite].<fmt>.f32`` writes them (PTX ISA
    "cvt"): ``rn`` nearest even (:func:`f32_to_bf16_bits` for bf16), ``rz``/``rm``/``rp`` toward zero / -inf / +inf;
    ``satfinite`` clamps an infinite result to the largest finite value of its sign (NaN stays NaN).

    Raises ValueError for another ``fmt`` or ``rounding``.
    """
    f = np.asarray(x, dtype=np.float32)
    if fmt == "bf16":
        rn = f32_to_bf16_bits(f)
    elif fmt == "f16":
        with np.errstate(over="ignore"):
            rn = np.ascontiguousarray(f.astype(np.float16)).view(np.uint16).reshape(f.shape)
    else:
        raise ValueError(f"fmt {fmt!r}: not bf16 or f16")
    bits = rn.astype(np.int64)
    finite = ~np.isnan(f)
    if rounding != "rn":
        exact = f.astype(np.float64)
        back = bits16_to_f32(rn, fmt).astype(np.float64)
        bits = np.where(finite, _step_toward(bits, exact, back, rounding), bits)
    if satfinite:
        mag = bits & 0x7FFF
        bits = np.where(finite & (mag == _INF_16[fmt]), (bits & 0x8000) | _MAX_FINITE_16[fmt], bits)
    return bits.astype(np.uint16)


def _flush(x: np.ndarray) -> np.ndarray:
    """float32 subnormals -> zero of the same sign (``.ftz``)."""
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def f64_to_f32(x, rounding: str = "rn", ftz: bool = False) -> np.ndarray:
    """float32 of the float64 ``x`` (taken as the exact result of an f32 operation) under a PTX rounding modifier;
    ``ftz`` flushes a subnormal result to zero (PTX ISA "add", "mul", "fma": ``.rnd``, ``.ftz``)."""
    exact = np.asarray(x, dtype=np.float64)
    r = exact.astype(np.float32)
    if rounding != "rn":
        back = r.astype(np.float64)
        ok = ~np.isnan(exact)
        down, up = np.nextafter(r, np.float32(-np.inf)), np.nextafter(r, np.float32(np.inf))
        if rounding == "rz":
            r = np.where(ok & (np.abs(back) > np.abs(exact)), np.where(exact > 0, down, up), r)
        elif rounding == "rm":
            r = np.where(ok & (back > exact), down, r)
        elif rounding == "rp":
            r = np.where(ok & (back < exact), up, r)
        else:
            raise ValueError(f"rounding {rounding!r}: not one of {ROUNDINGS}")
    return _flush(r) if ftz else r.astype(np.float32)


def ex2_approx_f32(x) -> np.ndarray:
    """``ex2.approx.ftz.f32``: 2^x, modelled as the correctly rounded result with subnormal inputs and results
    flushed (PTX ISA "ex2": the hardware is within 2 ulp; the model is the one both sides of the PTX
    differential use)."""
    a = _flush(np.asarray(x, dtype=np.float32)).astype(np.float64)
    with np.errstate(over="ignore"):
        return _flush(np.exp2(a).astype(np.float32))


def rcp_approx_f32(x) -> np.ndarray:
    """``rcp.approx.ftz.f32``: 1/x, modelled as the correctly rounded result (ftz), as :func:`ex2_approx_f32`."""
    a = _flush(np.asarray(x, dtype=np.float32)).astype(np.float64)
    with np.errstate(divide="ignore"):
        return _flush((1.0 / a).astype(np.float32))


def tanh_approx_f32(x) -> np.ndarray:
    """``tanh.approx.f32``: tanh(x), modelled as the correctly rounded result, subnormals passed through (PTX ISA
    "tanh": maximum relative error 2^-11 over the whole range; the model is the one both sides of the PTX
    differential use, :data:`APPROX_BOUNDS` the bound the differential's bound-edge runs move it by)."""
    a = np.asarray(x, dtype=np.float32).astype(np.float64)
    return np.tanh(a).astype(np.float32)


#: the PTX ISA's error bound of each approximate f32 instruction the emitters use, as (unit, amount): ``ulp`` from
#: the correctly rounded result, or ``rel`` maximum relative error (PTX ISA "ex2": 2 ulp over the full range;
#: "rcp": ``rcp.approx.ftz.f32`` 1 ulp; "tanh": relative 2^-11 over the whole range)
APPROX_BOUNDS = {"ex2": ("ulp", 2), "rcp": ("ulp", 1), "tanh": ("rel", 2.0 ** -11)}


def approx_edge(op: str, model, edge: int) -> np.ndarray:
    """``model`` (the correctly rounded result of approximate instruction ``op``) moved to the ``edge`` (-1: down,
    +1: up, 0: kept) of the PTX ISA bound :data:`APPROX_BOUNDS`: the farthest f32 the ISA still allows there (``ulp``
    bounds exactly; a relative bound is applied to the model value less a 2^-23 margin, so the result stays inside
    the bound of the exact function)."""
    r = np.asarray(model, dtype=np.float32)
    if edge == 0:
        return r
    unit, amount = APPROX_BOUNDS[op]
    toward = np.float32(np.inf) if edge > 0 else np.float32(-np.inf)
    finite = np.isfinite(r)
    if unit == "ulp":
        out = r
        for _ in range(amount):
            out = np.where(finite, np.nextafter(out, toward), out)
        return out.astype(np.float32)
    # relative: r moved by (amount - 2^-23) |r| toward the edge (the margin covers the model's own half ulp), the
    # f32 nearest it, stepped back toward r if it went past
    with np.errstate(invalid="ignore"):
        moved = r.astype(np.float64) + edge * (amount - 2.0 ** -23) * np.abs(r.astype(np.float64))
        out = moved.astype(np.float32)
        out = np.where(edge * (out.astype(np.float64) - moved) > 0, np.nextafter(out, r), out)
    return np.where(finite, out, r).astype(np.float32)


def f32_to_e4m3_bits(x) -> np.ndarray:
    """The e4m3 byte of ``cvt.rn.satfinite.e4m3x2.f32`` for each f32 (PTX ISA "cvt": ``.rn`` nearest even, and the
    required ``.satfinite``: finite values beyond +-448 and +-inf saturate to +-448 (0x7E/0xFE), NaN gives the
    canonical NaN 0x7F)."""
    from ..formats import E4M3_MAX, E4M3_VALUES

    table = E4M3_VALUES[:0x7F].astype(np.float64)  # codes 0..0x7E: 0 .. 448 ascending
    x = np.asarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x.astype(np.float64)), E4M3_MAX)
    hi = np.clip(np.searchsorted(table, a), 0, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - table[lo], table[hi] - a
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    code = code | np.where(np.signbit(x), 0x80, 0)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)
