"""The GEMM kernel family: D[M,N] = A[M,K] @ B[N,K]^T (bf16 in/out, fp32 accumulate).

A family is a plan plus the shared role composition (:mod:`.kernel`); this module
only names it.
"""

from __future__ import annotations

from ..ir import Kernel
from ..plan import Plan
from .kernel import build_kernel


def build_gemm(plan: Plan) -> Kernel:
    """The Kernel IR of a GEMM plan (either arch); see :func:`ptxgen.builders.kernel.build_kernel`."""
    return build_kernel(plan)
