"""The numerics of the fused epilogue, once: each :mod:`ptxgen.epi` op in numpy float32, as the emitted PTX computes it.

The simulator evaluates :class:`~ptxgen.ir.ops.EpilogueExpr` with :func:`evaluate`, and the tests' and the
simulator's references evaluate the unbound expression with :func:`reference` on the fp32 accumulators and the
operands; both follow the instruction sequences of ``emitters.common`` (``epilogue_expr``) step by step in
float32.  ``ex2.approx.ftz`` and ``rcp.approx.ftz`` are :mod:`ptxgen.check.numerics`' models (the correctly
rounded result, subnormals flushed: the one model the PTX differential uses on both sides); for
``tanh.approx.f32`` numpy computes the exact function.  The difference from the hardware is the instruction's
error bound (:data:`ptxgen.epi.OPS`), far below bf16's 2^-8 rounding of the stored result.
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
        elif op == "gelu_erf":
            q = _erfc_abs((np.abs(x) * INV_SQRT2).astype(F32))
            s = np.where(x < 0, q, (F32(2) - q).astype(F32))
            out = (x * s).astype(F32) * F32(0.5)
        else:
            raise ValueError(f"no numerics for epilogue op {op!r}")
    return np.asarray(out, dtype=F32)


def evaluate(node, leaf) -> np.ndarray:
    """The value of ``node`` with ``leaf(x)`` giving each leaf's float32 array (numbers are constants)."""
    if isinstance(node, epi.Call):
        return apply(node.op, node.params, [evaluate(a, leaf) for a in node.args])
    if isinstance(node, epi.Cast):
        return evaluate(node.arg, leaf)
    if isinstance(node, epi.Num):
        return np.asarray(F32(node.value))
    return np.asarray(leaf(node), dtype=F32)


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
