"""Errors a user of ptxgen can meet.

Every error is a :class:`PtxgenError`; the CLI prints its message (one
paragraph, no traceback) and exits non-zero.  Messages name the field path or
the operand, the value, and the rule that was broken, e.g.
``ConfigError: tile.block_n=200: UMMA N must be a multiple of 16 in [16, 256]``.
"""

from __future__ import annotations


class PtxgenError(Exception):
    """Base class of every error ptxgen raises on purpose."""


class ConfigError(PtxgenError):
    """Bad YAML, unknown or misspelt key, wrong type, illegal value, budget exceeded."""


class AssembleError(PtxgenError):
    """ptxas / nvJitLink rejected the PTX; carries the assembler's log and the offending PTX line.

    Attributes:
        log: the assembler's full message text.
        line: 1-based PTX line number the log points at, or None.
        source_line: the text of that PTX line, or None.
    """

    def __init__(self, message: str, log: str = "", line: int | None = None, source_line: str | None = None):
        super().__init__(message)
        self.log = log
        self.line = line
        self.source_line = source_line


class ShapeError(PtxgenError):
    """Runtime inputs rejected before any driver call: dtype, device, contiguity, alignment, shape."""


class CudaError(PtxgenError):
    """A CUDA driver call failed; the message carries the call and the driver's error name.

    Attributes:
        call: the driver function, e.g. ``cuLaunchKernelEx``.
        code: the driver's error name, e.g. ``CUDA_ERROR_INVALID_VALUE``.
    """

    def __init__(self, message: str, call: str = "", code: str = ""):
        super().__init__(message)
        self.call = call
        self.code = code


class VerifyError(PtxgenError):
    """The static verifier found a protocol violation (barrier counts, tx bytes, budgets, teardown)."""


class SimError(PtxgenError):
    """The simulator found a fault: deadlock, read before write, over-arrival, tx mismatch, wrong result."""


class OutputError(PtxgenError):
    """An output directory or file cannot be written (exists as a file, not writable, disk full)."""


class SetupError(PtxgenError):
    """Something to install or a machine to use: no torch, a CPU-only torch, no GPU, no CUDA bindings or driver."""


class DeadlockError(PtxgenError):
    """The hang watchdog (``PTXGEN_WATCHDOG``) saw an mbarrier wait make no progress within its budget.

    The launch was abandoned (every wait fell through, no thread arrived or started a TMA load after it, the
    loads in flight were given time to land before exit; D holds garbage) and the CUDA context stays usable.

    Attributes:
        record: the decoded :class:`ptxgen.ir.watchdog.WatchdogRecord` (barrier, index, role, CTA, rank,
            warp, lane, parity, tile, k-block, elapsed ns, the plan's init count and tx bytes).
    """

    def __init__(self, message: str, record=None):
        super().__init__(message)
        self.record = record


class LegalizeError(PtxgenError):
    """A Kernel IR op the kernel's target does not have (a generator bug, caught before any PTX is written)."""
