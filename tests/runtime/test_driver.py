"""Driver error mapping (ptxgen.runtime.driver): outputs unwrapped, failures raised as CudaError."""

from __future__ import annotations

import pytest

from ptxgen.errors import CudaError


# --------------------------------------------------------------------------- driver error mapping


@pytest.fixture
def fake_names(monkeypatch):
    pytest.importorskip("cuda.bindings.driver")
    from ptxgen.runtime import driver

    monkeypatch.setattr(driver, "error_name", lambda r: r.name)
    monkeypatch.setattr(driver, "error_string", lambda r: "invalid argument")
    return driver


def test_check_unwraps_outputs(fake_names):
    ok = fake_names.cu().CUresult.CUDA_SUCCESS
    assert fake_names.check((ok,), "cuA") is None
    assert fake_names.check((ok, 5), "cuB") == 5
    assert fake_names.check((ok, 5, 6), "cuC") == (5, 6)
    assert fake_names.check(ok, "cuD") is None


def test_check_raises_cuda_error(fake_names):
    bad = fake_names.cu().CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(CudaError) as info:
        fake_names.check((bad, None), "cuLaunchKernelEx", detail="grid 4")
    err = info.value
    assert err.call == "cuLaunchKernelEx" and err.code == "CUDA_ERROR_INVALID_VALUE"
    assert str(err) == "cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE (invalid argument)\ngrid 4"


def test_driver_init_raises_only_cuda_error():
    """Without a driver (CPU CI), cuInit's library failure surfaces as CudaError, not a raw RuntimeError."""
    pytest.importorskip("cuda.bindings.driver")
    from ptxgen.runtime import driver

    try:
        driver.init()
    except CudaError as err:
        assert err.call == "cuInit" and err.code.startswith("CUDA_")
