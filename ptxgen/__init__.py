"""ptxgen: tensor-core GEMM pipelines from YAML to hand-controlled PTX (sm_100a tcgen05, sm_90a wgmma).

``ptxgen.gemm(a, b)`` runs a generated kernel on torch tensors (see :mod:`ptxgen.runtime`);
``ptxgen.build.build(config)`` gives the PTX and its launch metadata without a GPU.
"""

from .version import __version__  # noqa: F401


# the runtime's function itself (no wrapper frame on the per-call path); importing it needs neither
# torch nor cuda-bindings
from .runtime.api import dual_gemm, gemm  # noqa: E402,F401


def dual_gemm_nvfp4(a, b1, b2, sfa, sfb1, sfb2, out=None, config=None, *, sf_layout=None):
    """C = silu(A @ B1.T) * (A @ B2.T), NVFP4 operands; see :func:`ptxgen.runtime.nvfp4.dual_gemm_nvfp4`."""
    from .runtime.nvfp4 import dual_gemm_nvfp4 as _dual_gemm_nvfp4

    return _dual_gemm_nvfp4(a, b1, b2, sfa, sfb1, sfb2, out=out, config=config, sf_layout=sf_layout)
