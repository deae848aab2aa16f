"""ptxgen: tensor-core GEMM pipelines from YAML to hand-controlled PTX (sm_100a tcgen05, sm_90a wgmma).

Three wings, imports flowing one way:

* build: :mod:`ptxgen.config` -> :mod:`ptxgen.plan` -> :mod:`ptxgen.builders` -> the Kernel IR
  (:mod:`ptxgen.ir`) -> ``emitters`` -> :mod:`ptxgen.assemble`; :mod:`ptxgen.build` is the one door;
  ``ptxgen.build.build(config)`` gives the PTX and its launch metadata without a GPU;
* check: :mod:`ptxgen.check` (the IR's reference interpreter; verifier, simulator, PTX differential), which
  reads the IR and the PTX and which nothing in build or run imports;
* run: :mod:`ptxgen.runtime`: ``ptxgen.gemm(a, b)``, ``ptxgen.dual_gemm``, ``ptxgen.gemm_fp8`` and
  ``ptxgen.grouped_gemm`` run generated kernels on torch tensors through the CUDA driver.
"""

from .version import __version__  # noqa: F401


# the runtime's function itself (no wrapper frame on the per-call path); importing it needs neither
# torch nor cuda-bindings.  ``grouped_gemm`` and ``epi`` come on first use (``__getattr__``): a process that
# calls only ``gemm`` never imports them
from .runtime.api import dual_gemm, gemm, gemm_fp8  # noqa: E402,F401


def dual_gemm_nvfp4(a, b1, b2, sfa, sfb1, sfb2, out=None, config=None, *, sf_layout=None, sf_sign=None):
    """C = silu(A @ B1.T) * (A @ B2.T), NVFP4 operands; see :func:`ptxgen.runtime.nvfp4.dual_gemm_nvfp4`."""
    from .runtime.nvfp4 import dual_gemm_nvfp4 as _dual_gemm_nvfp4

    return _dual_gemm_nvfp4(a, b1, b2, sfa, sfb1, sfb2, out=out, config=config, sf_layout=sf_layout, sf_sign=sf_sign)


def __getattr__(name):
    """``ptxgen.grouped_gemm`` (:func:`ptxgen.runtime.grouped.grouped_gemm`, the function itself) and ``ptxgen.epi``
    (the fused-epilogue language) on first use, without importing them with the package."""
    if name == "grouped_gemm":
        from .runtime.grouped import grouped_gemm

        globals()["grouped_gemm"] = grouped_gemm  # later lookups find the attribute, not this hook
        return grouped_gemm
    if name == "epi":
        import importlib

        return importlib.import_module(f"{__name__}.epi")
    raise AttributeError(f"module 'ptxgen' has no attribute {name!r}")
