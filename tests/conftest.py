"""Suite-wide pytest setup: the Hypothesis profile, the ``gpu`` auto-skip and ``--runslow``.

- One Hypothesis profile, ``ptxgen``: no deadline (GPU and simulator examples vary in time),
  derandomized when ``CI=true``, ``too_slow`` health check suppressed.
- Tests marked ``gpu`` are skipped, with the reason, when torch is missing or sees no CUDA GPU.
- Tests marked ``slow`` run only with ``--runslow``.
- The suite's disk cache is a fresh folder (``PTXGEN_CACHE_DIR``) unless the caller set one: a test that patches
  the compile path must not leave entries in the user's cache, and the user's entries must not answer tests.
  Under pytest-xdist (``-n auto``) the controller sets it before it starts the workers, which share the folder.
- OpenBLAS runs one thread (``OPENBLAS_NUM_THREADS=1``) unless the caller set a count: the simulator's MMAs are
  small products (128 x 16 x N for a tcgen05.mma k-step), which a second BLAS thread makes 100x slower on a
  busy two-core machine (waking and joining it costs more than the product).  Set here, before numpy loads.
"""

from __future__ import annotations

import functools
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before any import of numpy (see the module docstring)

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ptxgen",
    deadline=None,
    derandomize=os.environ.get("CI", "").lower() == "true",
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ptxgen")


_OWN_CACHE_DIR: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if "PTXGEN_CACHE_DIR" not in os.environ:
        import tempfile

        os.environ["PTXGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix="ptxgen-test-cache-")
        _OWN_CACHE_DIR.append(os.environ["PTXGEN_CACHE_DIR"])


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for folder in _OWN_CACHE_DIR:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """Why GPU tests cannot run here, or None when torch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return "gpu test: torch is not installed"
    if not torch.cuda.is_available():
        return "gpu test: torch.cuda.is_available() is False (no CUDA GPU or driver here; run on a GPU machine)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = config.getoption("--runslow")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow test: pass --runslow to run it"))
        if "gpu" in item.keywords:
            reason = gpu_unavailable_reason()
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def torch():
    """torch on a compute-capability 9.0 GPU (the sm_90a kernels' tests); skips elsewhere."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.driver")
    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        pytest.skip("sm_90a configs need a compute capability 9.0 GPU")
    return torch
