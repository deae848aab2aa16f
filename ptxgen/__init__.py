"""ptxgen: tensor-core GEMM pipelines from YAML to hand-controlled PTX (sm_100a tcgen05, sm_90a wgmma).

``ptxgen.gemm(a, b)`` runs a generated kernel on torch tensors (see :mod:`ptxgen.runtime`);
``ptxgen.build.build(config)`` gives the PTX and its launch metadata without a GPU.
"""

from .version import __version__  # noqa: F401


# the runtime's function itself (no wrapper frame on the per-call path); importing it needs neither
# torch nor cuda-bindings
from .runtime.api import gemm  # noqa: E402
