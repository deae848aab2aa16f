"""ptxgen: tensor-core GEMM pipelines from YAML to hand-controlled PTX (sm_100a tcgen05, sm_90a wgmma).

``ptxgen.gemm(a, b)`` runs a generated kernel on torch tensors (see :mod:`ptxgen.runtime`);
``ptxgen.build.build(config)`` gives the PTX and its launch metadata without a GPU.
"""

__version__ = "0.1.0"


def gemm(a, b, out=None, config=None):
    """D = A @ B.T on the GPU; see :func:`ptxgen.runtime.api.gemm`."""
    from .runtime.api import gemm as _gemm

    return _gemm(a, b, out=out, config=config)


def dual_gemm_nvfp4(a, b1, b2, sfa, sfb1, sfb2, out=None, config=None):
    """C = silu(A @ B1.T) * (A @ B2.T), NVFP4 operands; see :func:`ptxgen.runtime.nvfp4.dual_gemm_nvfp4`."""
    from .runtime.nvfp4 import dual_gemm_nvfp4 as _dual_gemm_nvfp4

    return _dual_gemm_nvfp4(a, b1, b2, sfa, sfb1, sfb2, out=out, config=config)
