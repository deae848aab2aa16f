"""Fused epilogues: ``ptxgen.epi.gelu(ptxgen.epi.acc + ptxgen.epi.bias("bias"))``, or the text form
``"gelu(acc + bias[col])"`` (config ``epilogue: {expr: ...}``, or ``ptxgen.gemm(..., epilogue=...)``).

The language, its nodes, parser and printer live with the Kernel IR (:mod:`ptxgen.ir.epilogue`, whose docstring is
the reference); this module is their public name.
"""

from .ir.epilogue import *  # noqa: F401,F403
from .ir.epilogue import (ACCUMULATORS, DEFAULTS, E4M3_ROUNDING, OPS, SCRATCH, Acc, Call, Cast, Node, Num, Operand, ParamLeaf,  # noqa: F401
                          Reg, accumulators, bind, body, check, default, for_kernel, operand, operands, out_dtype, size,
                          output_shape, span, taps, untap, walk)
