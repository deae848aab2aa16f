"""Runtime side of the hang watchdog (``PTXGEN_WATCHDOG``): record buffer, synchronize, decode, raise.

A kernel built with :func:`ptxgen.ir.watchdog.instrument` takes one more
``.u64`` parameter ``watchdog_ptr``.  :class:`WatchedLauncher` wraps the
kernel's :class:`~ptxgen.runtime.fastpath.Launcher`: for every launch it
allocates a zeroed :data:`~ptxgen.ir.watchdog.RECORD_BYTES` buffer (torch, on
the kernel's device, on the launch's stream order), appends its address to the
scalar parameters, synchronizes the stream and reads the record; a set record
becomes :class:`~ptxgen.errors.DeadlockError`.  Kernels loaded without the
knob never see this module (no per-call cost).
"""

from __future__ import annotations

from typing import Any, Sequence

from ptxgen.errors import DeadlockError
from ptxgen.ir.watchdog import RECORD_WORDS, decode


class WatchedLauncher:
    """A launcher that turns an expired watchdog record into :class:`DeadlockError`.

    Args:
        inner: the kernel's :class:`~ptxgen.runtime.fastpath.Launcher` (its signature ends in ``watchdog_ptr``).
        spec: the launch spec (``spec.extra["watchdog"]``: budget, wait-site table).
        ordinal: CUDA device index.
    """

    def __init__(self, inner: Any, spec: Any, ordinal: int):
        self.inner, self.spec, self.ordinal = inner, spec, ordinal
        self.table = spec.extra["watchdog"]
        self.name = spec.name

    def __getattr__(self, name: str) -> Any:  # layout, maps, ...: the inner launcher's
        return getattr(self.inner, name)

    def launch(self, grid_x: int, maps: Sequence[Any], scalars: Sequence[int | float], stream: int) -> None:
        """Launch, wait for the kernel, and check the record.

        Raises:
            DeadlockError: a wait expired (the launch was abandoned; the context stays usable).
            CudaError: the launch or the synchronization failed.
        """
        import torch

        from ptxgen.runtime import driver

        buf = torch.zeros(RECORD_WORDS, dtype=torch.int32, device=f"cuda:{self.ordinal}")
        # torch.zeros ran on torch's current stream; the launch below is ordered after it when it is the same
        # stream (gemm's default), and after a device-wide sync otherwise
        if stream != _current_stream(self.ordinal):
            torch.cuda.synchronize(self.ordinal)
        self.inner.launch(grid_x, maps, (*scalars, buf.data_ptr()), stream)
        driver.check(driver.cu().cuStreamSynchronize(stream), "cuStreamSynchronize",
                     detail=f"{self.name}: after a watched launch")
        raise_if_expired(buf.cpu().tolist(), self.table, self.name)


def _current_stream(ordinal: int) -> int:
    from ptxgen.runtime.driver import current_stream

    return current_stream(ordinal)


#: what usually stops a phase, by the waiting role (WaitRole.is_consumer / is_producer)
_CAUSES = {
    "consumer": "its producer did not complete the phase: an arrival missing (init count above the arrivals, a "
                "dropped commit), expect_tx bytes unequal to what the TMA loads deliver, a dropped load, or a "
                "cluster peer's multicast half that never came",
    "producer": "the consumers did not release the stage: a dropped or misplaced release arrive, an init count "
                "above the releasers, or a cluster peer that stopped consuming",
    "other": "check that barrier's init count, arrivals and tx bytes",
}


def _cause(role: str) -> str:
    from ptxgen.ir.ops import WaitRole

    try:
        r = WaitRole(role)
    except ValueError:
        return _CAUSES["other"]
    return _CAUSES["consumer" if r.is_consumer else "producer" if r.is_producer else "other"]


def raise_if_expired(words: Sequence[int], table: dict, name: str) -> None:
    """Raise :class:`DeadlockError` when the record ``words`` (u32 values) is set; else return.

    Raises:
        DeadlockError: with the decoded :class:`~ptxgen.ir.watchdog.WatchdogRecord` as ``.record``.
    """
    record = decode(words, table)
    if record is None:
        return
    raise DeadlockError(
        f"{name}: hang watchdog (PTXGEN_WATCHDOG={table['budget_ns']} ns): {record.describe()}. "
        f"Likely cause: {_cause(record.role)}. The launch was abandoned (every mbarrier wait fell through, "
        "arrives and TMA loads stopped, loads in flight drained; the output is garbage); the CUDA context is "
        "still usable. `ptxgen check` runs the simulator on the same IR.", record)
