"""The numerics of the fused epilogue, once: each :mod:`ptxgen.epi` op in numpy float32, as the emitted PTX computes it.

The simulator evaluates :class:`~ptxgen.ir.ops.EpilogueExpr` with :func:`evaluate`, and the tests' and the
simulator's references evaluate the unbound expression with :func:`reference` on the fp32 accumulators and the
operands; both follow the instruction sequences of ``emitters.common`` (``epilogue_expr``) step by step in
float32.  ``ex2.approx.ftz`` and ``rcp.approx.ftz`` are :mod:`ptxgen.check.numerics`' models (the correctly
rounded result, subnormals flushed: the one model the PTX differential uses on both sides); for
``tanh.approx.f32`` numpy computes the exact function.  The difference from the hardware is the instruction's
error bound (:data:`ptxgen.epi.OPS`), far below bf16's 2^-8 rounding of the stored result.

Outputs beside D (:func:`ptxgen.ir.epilogue.outputs`): :func:`reference_outputs` gives D and each output as the
kernel writes them (an e4m3 D by :func:`round_e4m3`, ``cvt.rn.satfinite``; the 1 x 128 block scale
``block_scale(amax)`` and its ``rcp.rn``; an amax of |tap| per row or over D; a stored tile rounded to its type),
:func:`check_outputs` compares the simulator's buffers (:func:`output_buffers`) with them.
"""

from __future__ import annotations

import numpy as np

from ..ir import epilogue as epi
from .numerics import ex2_approx_f32, rcp_approx_f32

F32 = np.float32
NEG_LOG2E = F32(-1.4426950408889634)
GELU_K, GELU_K3 = F32(0.7978845608028654), F32(0.7978845608028654 * 0.044715)
ERF_P = F32(0.3275911)
ERF_A = tuple(F32(a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
INV_SQRT2 = F32(0.7071067811865476)


def _sigmoid_parts(x: np.ndarray) -> np.ndarray:
    """1 + ex2(-x log2 e), as the PTX computes it before the reciprocal."""
    return (ex2_approx_f32((x * NEG_LOG2E).astype(F32)) + F32(1)).astype(F32)


def _erfc_abs(z: np.ndarray) -> np.ndarray:
    """erfc(z) for z >= 0 by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), in the PTX's order of operations."""
    t = (F32(1) / (z * ERF_P + F32(1))).astype(F32)
    q = (t * ERF_A[4] + ERF_A[3]).astype(F32)
    for a in ERF_A[2::-1]:
        q = (q * t + a).astype(F32)
    q = (q * t).astype(F32)
    return (q * ex2_approx_f32(((z * z).astype(F32) * NEG_LOG2E).astype(F32))).astype(F32)


def apply(op: str, params: tuple, args: list[np.ndarray]) -> np.ndarray:
    """One op of :data:`ptxgen.epi.OPS` on float32 arrays (NaN/inf behave as the PTX instructions do)."""
    x = args[0]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if op == "add":
            out = x + args[1]
        elif op == "sub":
            out = x - args[1]
        elif op == "mul":
            out = x * args[1]
        elif op == "neg":
            out = -x
        elif op == "relu":
            out = np.fmax(x, F32(0))  # max.f32: a NaN operand gives the other one
        elif op == "clamp":
            out = np.fmin(np.fmax(x, F32(params[0])), F32(params[1]))
        elif op == "sigmoid":
            out = rcp_approx_f32(_sigmoid_parts(x))
        elif op == "silu":
            out = x * rcp_approx_f32(_sigmoid_parts(x))
        elif op == "gelu":
            t = ((x * x).astype(F32) * GELU_K3 + GELU_K).astype(F32)
            t = np.tanh((t * x).astype(F32)).astype(F32)
            out = x * (t * F32(0.5) + F32(0.5)).astype(F32)
        elif op == "block_scale":
            out = np.where(x == 0, F32(1), (x / F32(448.0)).astype(F32))
        elif op == "rcp":
            out = F32(1) / x
        elif op == "gelu_erf":
            q = _erfc_abs((np.abs(x) * INV_SQRT2).astype(F32))
            s = np.where(x < 0, q, (F32(2) - q).astype(F32))
            out = (x * s).astype(F32) * F32(0.5)
        else:
            raise ValueError(f"no numerics for epilogue op {op!r}")
    return np.asarray(out, dtype=F32)


def evaluate(node, leaf, taps: dict | None = None) -> np.ndarray:
    """The value of ``node`` with ``leaf(x)`` giving each leaf's float32 array (numbers are constants); ``taps``:
    filled with each :class:`~ptxgen.ir.epilogue.Tap`'s value by output name."""
    if isinstance(node, epi.Call):
        return apply(node.op, node.params, [evaluate(a, leaf, taps) for a in node.args])
    if isinstance(node, epi.Cast):
        return evaluate(node.arg, leaf, taps)
    if isinstance(node, epi.Tap):
        v = evaluate(node.arg, leaf, taps)
        if taps is not None:
            taps[node.name] = v
        return v
    if isinstance(node, epi.Num):
        return np.asarray(F32(node.value))
    return np.asarray(leaf(node), dtype=F32)


def e4m3_bits(x: np.ndarray) -> np.ndarray:
    """The e4m3 codes (uint8) ``cvt.rn.satfinite.e4m3x2.f32`` gives each value (:data:`ptxgen.epi.E4M3_ROUNDING`):
    nearest, ties to the even code, beyond +-448 (and +-inf) saturated to +-448 (0x7E / 0xFE), NaN 0x7F, the sign
    in bit 7 (-0.0 is 0x80)."""
    from ..formats import E4M3_MAX, E4M3_VALUES

    table = E4M3_VALUES[:0x7F].astype(np.float64)  # codes 0..0x7E: 0 .. 448 ascending
    x = np.asarray(x, dtype=F32)
    a = np.minimum(np.abs(x.astype(np.float64)), E4M3_MAX)
    hi = np.clip(np.searchsorted(table, a), 0, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - table[lo], table[hi] - a
    pick = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo).astype(np.uint8)
    code = np.where(np.signbit(x), pick | np.uint8(0x80), pick).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def round_e4m3(x: np.ndarray) -> np.ndarray:
    """``cvt.rn.satfinite.e4m3x2.f32`` of each value as float32 (:func:`e4m3_bits` decoded)."""
    from ..formats import E4M3_VALUES

    return E4M3_VALUES[e4m3_bits(x)].astype(F32)


def store_rounding(x: np.ndarray, fmt: str) -> np.ndarray:
    """The value a store of format ``fmt`` (``bf16``, ``f16``, ``e4m3``, ``f32``) keeps, as float32."""
    from .numerics import round_bf16

    x = np.asarray(x, dtype=F32)
    if fmt == "bf16":
        return round_bf16(x)
    if fmt == "f16":
        return x.astype(np.float16).astype(F32)
    return round_e4m3(x) if fmt == "e4m3" else x


def block_amax(y: np.ndarray) -> np.ndarray:
    """``[M, ceil(N/128)]`` max |y| per row and 128-column block (NaN skipped, as ``max.f32``)."""
    m, n = y.shape
    nb = -(-n // 128)
    pad = np.zeros((m, nb * 128), dtype=F32)
    pad[:, :n] = np.abs(y)
    return np.fmax.reduce(pad.reshape(m, nb, 128), axis=2).astype(F32)


def f32_of_bits(bits: int) -> np.float32:
    """The f32 a ``.u32`` kernel parameter's bits hold (a scalar operand)."""
    return np.array([bits & 0xFFFFFFFF], dtype=np.uint32).view(F32)[0]


def bits_of_f32(value: float) -> int:
    """The ``.u32`` bits of an f32 scalar operand."""
    return int(np.array([value], dtype=F32).view(np.uint32)[0])


def reference(expr, accs: dict[str, np.ndarray], operands: dict[str, np.ndarray]) -> np.ndarray:
    """``expr`` (unbound) on ``[M, N]`` float32 accumulators (``acc``, ``acc1``, ``acc2``) and operands by name
    (float32: a vector ``[M]`` / ``[N]``, an ``[M, N]`` tensor, or a scalar), broadcast as the language says."""

    def leaf(x):
        if isinstance(x, epi.Acc):
            return accs["acc1" if x.name == "acc" and "acc" not in accs else x.name]
        v = np.asarray(operands[x.name], dtype=F32)
        if x.along == "row":
            return v.reshape(-1, 1)
        if x.along == "col":
            return v.reshape(1, -1)
        return v

    shape = next(iter(accs.values())).shape
    return np.broadcast_to(evaluate(expr, leaf), shape).astype(F32)


def reference_outputs(expr, accs: dict[str, np.ndarray], operands: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """D and every output of ``expr`` (:func:`ptxgen.ir.epilogue.outputs`) as the kernel writes them, float32:
    ``"D"`` (rounded to an e4m3 D's values; a 16-bit D unrounded, as :func:`reference`), a block scale
    ``[M, ceil(N/128)]``, an amax ``[M]`` / ``[1]``, a stored tile ``[M, N]`` (rounded to its 16-bit type)."""
    taps: dict[str, np.ndarray] = {}
    shape = next(iter(accs.values())).shape

    def leaf(x):
        if isinstance(x, epi.Acc):
            return accs["acc1" if x.name == "acc" and "acc" not in accs else x.name]
        v = np.asarray(operands[x.name], dtype=F32)
        return v.reshape(-1, 1) if x.along == "row" else (v.reshape(1, -1) if x.along == "col" else v)

    y = np.broadcast_to(evaluate(expr, leaf, taps), shape).astype(F32)
    out: dict[str, np.ndarray] = {}
    dtype = epi.out_dtype(expr)
    store_fmt = "bf16" if dtype == "e4m3" else dtype
    for name, kind, along in epi.outputs(expr):
        if kind == "block_scale":
            scale = apply("block_scale", (), [block_amax(y)])
            out[name] = scale
            inv = np.repeat(apply("rcp", (), [scale]), 128, axis=1)[:, :shape[1]]
            y = (y * inv).astype(F32)
        elif kind == "amax":
            t = np.broadcast_to(taps[name], shape)
            a = np.fmax.reduce(np.abs(t), axis=1).astype(F32)
            out[name] = a if along == "row" else np.fmax.reduce(a, keepdims=True).astype(F32)
        else:
            out[name] = store_rounding(np.broadcast_to(taps[name], shape), store_fmt)
    out["D"] = round_e4m3(y) if dtype == "e4m3" else y
    return out


def output_buffers(expr, m: int, n: int) -> dict[str, np.ndarray]:
    """The simulator's global buffers of ``expr``'s outputs by kernel parameter (``epi_<name>``; ``d_ptr`` for an
    e4m3 D) as float32: NaN-poisoned, an amax 0.0 (a fresh output)."""
    out: dict[str, np.ndarray] = {}
    if epi.out_dtype(expr) == "e4m3":
        out["d_ptr"] = np.full((m, n), np.nan, dtype=F32)
    for name, kind, along in epi.outputs(expr):
        shape = epi.output_shape(along, m, n)
        out[f"epi_{name}"] = np.zeros(shape, dtype=F32) if kind == "amax" else np.full(shape, np.nan, dtype=F32)
    return out


def check_outputs(what: str, expr, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Raise SimError (``wrong result``, naming the output and its first wrong element) unless each output of
    :func:`reference_outputs` matches: an e4m3 D within one code (:func:`e4m3_close`), scales and amax within
    f32 summation-order error (relative 1e-3 of the row's scale), 16-bit tiles within 2e-2 (|ref| + rms)."""
    from ..errors import SimError

    kinds = {name: kind for name, kind, _ in epi.outputs(expr)}
    kinds["D"] = "e4m3" if epi.out_dtype(expr) == "e4m3" else "store"
    for name, w in want.items():
        g = np.asarray(got[name], dtype=F32)
        w = np.asarray(w, dtype=F32)
        if kinds[name] == "e4m3":
            ok = e4m3_close(g, w)
        elif kinds[name] == "store":
            rms = float(np.sqrt(np.mean(w.astype(np.float64) ** 2))) if w.size else 0.0
            ok = np.abs(g - w) <= 2e-2 * (np.abs(w) + rms) + 1e-6
        else:
            ok = np.abs(g - w) <= 1e-3 * np.abs(w) + 1e-6
        ok &= ~np.isnan(g) | np.isnan(w)
        if not ok.all():
            at = tuple(int(x) for x in np.argwhere(~ok)[0])
            raise SimError(f"wrong result: {what}: output {name}{list(at)} = {float(g[at]):.6g} (expected "
                           f"{float(w[at]):.6g}); {int((~ok).sum())} of {ok.size} elements wrong")


def e4m3_close(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where two e4m3 values are equal or neighbours (the accumulation order of the fp32 sums moves a value near a
    rounding boundary by one code): ``|got - want| <= 2^-3 max(|got|, |want|)`` or both within a subnormal step."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (np.abs(g - w) <= np.maximum(np.abs(g), np.abs(w)) * 0.125 + 2.0 ** -9) | (np.isnan(g) & np.isnan(w))


def random_operands(expr, m: int, n: int, seed: int, out_dtype: str = "bf16") -> dict[str, np.ndarray]:
    """Random operands of ``expr`` as float32 arrays (bias/residual values already rounded to D's type)."""
    from .numerics import round_bf16

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for o in epi.operands(expr):
        shape = {"row": (m,), "col": (n,), "tile": (m, n), "scalar": ()}[o.along]
        v = rng.standard_normal(shape).astype(F32) * (F32(0.5) if o.kind == "scale" else F32(1))
        if o.kind != "scale":
            v = round_bf16(v) if out_dtype == "bf16" else v.astype(np.float16).astype(F32)
        out[o.name] = np.asarray(v, dtype=F32)
    return out
