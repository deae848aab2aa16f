"""ptxgen runtime: load generated kernels through the CUDA driver and run them on torch tensors.

Public API::

    gemm(a, b, out=None, config=None) -> torch.Tensor     # D = A @ B.T, bf16, any strides (staged, see api)
    prepare(a, b, out=None, config=None) -> PreparedGemm  # checked + encoded launch, for benchmarks
    check_gemm_inputs(a, b, out=None, k_multiple=8, *, n_multiple=1, require_cuda=True) -> (M, N, K)

Submodules: ``driver`` (checked cuda.bindings calls, context, device info),
``cache`` (content-addressed, atomic, locked on-disk cache), ``loader``
(config -> cached kernel image; PTXGEN_OVERRIDE_PTX, PTXGEN_DUMP), ``prebuilt``
(images compiled ahead of time, shipped in ``ptxgen/prebuilt``, read on a miss),
``fastpath`` (generic per-call launcher: tensor-map LRU, packed parameter
buffer, one cuLaunchKernelEx), ``choose`` (config per shape for
``config=None``), ``tensormap`` (cuTensorMapEncodeTiled), ``module`` (driver
JIT, load, launch).  Importing
this package needs neither torch nor cuda-bindings; calling into it does.
"""

from ptxgen.runtime.api import (
    DEFAULT_SM90,
    DEFAULT_SM100,
    PreparedGemm,
    check_gemm_inputs,
    gemm,
    prepare,
)

__all__ = ["DEFAULT_SM90", "DEFAULT_SM100", "PreparedGemm", "check_gemm_inputs", "gemm", "prepare"]
