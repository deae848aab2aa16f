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


def test_capture_id_of_a_capturing_stream_or_none(fake_names, monkeypatch):
    """``capture_id``: the driver's capture sequence id while the stream captures, None otherwise; a refused query
    raises CudaError naming cuStreamGetCaptureInfo."""
    driver = fake_names
    drv = driver.cu()
    status = drv.CUstreamCaptureStatus
    answers = {7: (drv.CUresult.CUDA_SUCCESS, status.CU_STREAM_CAPTURE_STATUS_ACTIVE, 41, None, [], [], 0),
               8: (drv.CUresult.CUDA_SUCCESS, status.CU_STREAM_CAPTURE_STATUS_NONE, 0, None, [], [], 0),
               9: (drv.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, status.CU_STREAM_CAPTURE_STATUS_NONE, 0, None, [],
                   [], 0)}

    class FakeDriver:
        def __getattr__(self, name):
            return getattr(drv, name)

        @staticmethod
        def cuStreamGetCaptureInfo(stream):
            return answers[int(stream)]

    monkeypatch.setattr(driver, "cu", lambda: FakeDriver())
    assert driver.capture_id(7) == 41 and driver.capture_id(8) is None
    with pytest.raises(CudaError, match=r"^cuStreamGetCaptureInfo failed: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"):
        driver.capture_id(9)
