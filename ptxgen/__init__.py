"""ptxgen: tensor-core GEMM pipelines from YAML to hand-controlled PTX (sm_100a tcgen05, sm_90a wgmma).

``ptxgen.gemm(a, b)`` runs a generated kernel on torch tensors (see :mod:`ptxgen.runtime`);
``ptxgen.build.build(config)`` gives the PTX and its launch metadata without a GPU.
"""

from .version import __version__  # noqa: F401


def gemm(a, b, out=None, config=None):
    """D = A @ B.T on the GPU; see :func:`ptxgen.runtime.api.gemm`."""
    from .runtime.api import gemm as _gemm

    return _gemm(a, b, out=out, config=config)
