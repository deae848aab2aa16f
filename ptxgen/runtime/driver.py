"""Thin, checked wrapper over ``cuda.bindings.driver``.

Every driver call in ``ptxgen.runtime`` goes through :func:`check`, which
turns a non-success ``CUresult`` into :class:`~ptxgen.errors.CudaError`
carrying the driver's error name (``cuGetErrorName``) and the call's name.

Context policy: the runtime shares torch's CUDA context.  torch uses the
*primary* context of each device, so :func:`ensure_context` initialises
torch's CUDA state, retains the primary context of the requested device
(``cuDevicePrimaryCtxRetain``, the same context torch uses) and makes it
current on the calling thread when it is not already.  The retain is held
for the life of the process (never released), so modules loaded into the
context stay valid.

``cuda.bindings`` is imported lazily (:func:`cu`) so that ``ptxgen.runtime``
imports on machines without the ``cuda`` extra or without a driver.
"""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import Any, NamedTuple

from ptxgen.errors import CudaError

_lock = threading.Lock()
_initialized = False
_primary_contexts: dict[int, Any] = {}


@functools.cache
def cu() -> ModuleType:
    """The ``cuda.bindings.driver`` module (imported on first use).

    Raises:
        CudaError: ``cuda-bindings`` is not installed (code ``IMPORT_ERROR``).
    """
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise CudaError(
            f"cuda.bindings is not installed ({exc}); install ptxgen[cuda]", call="import", code="IMPORT_ERROR"
        ) from exc
    return driver


def error_name(result: Any) -> str:
    """The driver's name for a ``CUresult`` (``CUDA_ERROR_INVALID_VALUE``); the enum name if the driver has none."""
    drv = cu()
    err, name = drv.cuGetErrorName(result)
    if err == drv.CUresult.CUDA_SUCCESS and name:
        return name.decode() if isinstance(name, bytes) else str(name)
    return getattr(result, "name", str(result))


def error_string(result: Any) -> str:
    """The driver's one-line description of a ``CUresult``, or ``""``."""
    drv = cu()
    err, text = drv.cuGetErrorString(result)
    if err == drv.CUresult.CUDA_SUCCESS and text:
        return text.decode() if isinstance(text, bytes) else str(text)
    return ""


def check(result: Any, call: str, detail: str = "") -> Any:
    """Unwrap a ``cuda.bindings`` return value, raising on failure.

    Args:
        result: what a ``cuda.bindings.driver`` function returned: ``(CUresult, *outputs)``
            (or a bare ``CUresult``).
        call: the driver function's name, e.g. ``"cuLaunchKernelEx"``.
        detail: extra context appended to the message (arguments, a JIT log).

    Returns:
        ``None`` without outputs, the single output, or a tuple of outputs.

    Raises:
        CudaError: the result is not ``CUDA_SUCCESS``; ``.call`` is ``call`` and
            ``.code`` the driver's error name.
    """
    if isinstance(result, tuple):
        status, outputs = result[0], result[1:]
    else:
        status, outputs = result, ()
    if status != cu().CUresult.CUDA_SUCCESS:
        name = error_name(status)
        text = error_string(status)
        message = f"{call} failed: {name}" + (f" ({text})" if text else "") + (f"\n{detail}" if detail else "")
        raise CudaError(message, call=call, code=name)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs


def _driver_not_found_errors() -> tuple[type[BaseException], ...]:
    """Exception types cuda.bindings raises when libcuda cannot be loaded (none if pathfinder lacks them)."""
    try:
        from cuda.pathfinder import DynamicLibNotFoundError
    except ImportError:
        return ()
    return (DynamicLibNotFoundError,)


def init() -> None:
    """``cuInit(0)`` once per process.

    Raises:
        CudaError: no driver library (code ``CUDA_DRIVER_NOT_FOUND``) or ``cuInit`` failed.
    """
    global _initialized
    if _initialized:
        return
    drv = cu()
    with _lock:
        if _initialized:
            return
        try:
            result = drv.cuInit(0)
        except _driver_not_found_errors() as exc:
            raise CudaError(f"cuInit failed: no NVIDIA driver library ({exc})", call="cuInit",
                            code="CUDA_DRIVER_NOT_FOUND") from exc
        check(result, "cuInit")
        _initialized = True


def driver_version() -> int:
    """The driver's CUDA version as ``1000 * major + 10 * minor`` (``13000`` for CUDA 13.0)."""
    init()
    return int(check(cu().cuDriverGetVersion(), "cuDriverGetVersion"))


def device(ordinal: int) -> Any:
    """The ``CUdevice`` handle of device ``ordinal``."""
    init()
    return check(cu().cuDeviceGet(ordinal), "cuDeviceGet", detail=f"ordinal={ordinal}")


def ensure_context(ordinal: int | None = None) -> int:
    """Make torch's (primary) context of device ``ordinal`` current on this thread.

    Args:
        ordinal: CUDA device index; ``None`` means torch's current device.

    Returns:
        The device ordinal the context belongs to.

    Raises:
        CudaError: a driver call failed.
    """
    import torch

    torch.cuda.init()
    if ordinal is None:
        ordinal = torch.cuda.current_device()
    init()
    drv = cu()
    ctx = _primary_contexts.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _primary_contexts.get(ordinal)
            if ctx is None:
                ctx = check(drv.cuDevicePrimaryCtxRetain(device(ordinal)), "cuDevicePrimaryCtxRetain",
                            detail=f"device {ordinal}")
                _primary_contexts[ordinal] = ctx
    current = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) != int(ctx):
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", detail=f"primary context of device {ordinal}")
    return ordinal


class DeviceInfo(NamedTuple):
    """Attributes of one CUDA device that the runtime uses.

    Attributes:
        ordinal: device index.
        name: marketing name, e.g. ``"NVIDIA H100 80GB HBM3"``.
        sm_count: streaming multiprocessors.
        capability: compute capability ``(major, minor)``, e.g. ``(9, 0)``.
        max_smem_optin: largest dynamic shared memory per block a kernel may opt into, bytes.
        l2_bytes: L2 cache size, bytes.
    """

    ordinal: int
    name: str
    sm_count: int
    capability: tuple[int, int]
    max_smem_optin: int
    l2_bytes: int


def attribute(attr_name: str, ordinal: int) -> int:
    """``cuDeviceGetAttribute`` by enum name, e.g. ``"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"``."""
    drv = cu()
    attr = getattr(drv.CUdevice_attribute, attr_name)
    return int(check(drv.cuDeviceGetAttribute(attr, device(ordinal)), "cuDeviceGetAttribute", detail=attr_name))


@functools.cache
def device_info(ordinal: int) -> DeviceInfo:
    """The :class:`DeviceInfo` of device ``ordinal`` (queried once per process)."""
    drv = cu()
    raw = check(drv.cuDeviceGetName(256, device(ordinal)), "cuDeviceGetName")
    name = raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return DeviceInfo(
        ordinal=ordinal,
        name=name,
        sm_count=attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", ordinal),
        capability=(
            attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", ordinal),
            attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", ordinal),
        ),
        max_smem_optin=attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", ordinal),
        l2_bytes=attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE", ordinal),
    )


def current_stream(ordinal: int) -> int:
    """torch's current ``cudaStream_t`` of device ``ordinal``, as an int (cheap C call when torch has it)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(ordinal)
    return torch.cuda.current_stream(ordinal).cuda_stream


def capture_id(stream: int) -> int | None:
    """The id of the CUDA-graph capture sequence that ``stream`` (a ``cudaStream_t`` as an int) is recording,
    unique over the process (``cuStreamGetCaptureInfo``), or None when the stream is not capturing.

    Raises:
        CudaError: the driver rejected the query (e.g. the legacy stream while another stream captures).
    """
    drv = cu()
    status, ident, *_ = check(drv.cuStreamGetCaptureInfo(drv.CUstream(stream)), "cuStreamGetCaptureInfo")
    if status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        return None
    return int(ident)
