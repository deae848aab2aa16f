"""mbarrier objects and thread-barrier rendezvous of the simulator.

mbarrier (PTX ISA "Parallel Synchronization and Communication Instructions:
mbarrier"): an ``init`` sets the expected arrival count; each phase completes
when its pending arrival count reaches 0 *and* its tx-count is 0, then the
next phase starts with the pending count reset and tx-count 0.
``arrive.expect_tx`` raises the tx-count before it arrives; TMA completion
(``complete_tx``) lowers it; the tx-count may go negative within a phase
(bytes landing before their expect_tx).  ``try_wait.parity P`` succeeds once
the phase of parity P has completed, i.e. while the current phase's parity
differs from P: a fresh barrier waited with parity 1 passes at once (the
CUTLASS producer-start convention).

Faults raised here (SimError): an arrival beyond the pending count of the
current phase (*over-arrival*: with 32 lanes arriving on a count-1 barrier,
or arrivals while the phase only waits for bytes), and a complete_tx that
lands after the phase it was issued in has already completed (the phase
completed without those bytes: expect_tx announced fewer bytes than the TMA
loads deliver).

Both kinds of barrier also carry a happens-before clock for the simulator's
ordering checks (:mod:`.machine`): arrivals join their clock into the
current phase's ``clock``; a completed phase's clock becomes ``done_clock``,
which a waiter that passes acquires (``mbarrier.arrive`` has release and
``try_wait`` acquire semantics, PTX ISA "mbarrier.arrive", "mbarrier.try_wait").
"""

from __future__ import annotations

from collections import Counter

from ...errors import SimError


class Mbarrier:
    """One mbarrier instance (see module docstring).  ``phase`` counts completed phases; ``owner``: its CTA."""

    __slots__ = ("name", "owner", "count", "pending", "tx", "phase", "initialized", "init_warp", "fenced",
                 "cta_visible", "cluster_visible", "waiters", "arrivals", "bytes_in", "bytes_expected", "clock",
                 "done_clock")

    def __init__(self, name: str, owner=None):
        self.name, self.owner = name, owner
        self.count = self.pending = self.tx = self.phase = 0
        self.initialized = self.fenced = self.cta_visible = self.cluster_visible = False
        self.init_warp = None
        self.waiters: list = []
        self.arrivals: Counter = Counter()  # this phase: who -> arrivals
        self.bytes_in = self.bytes_expected = 0  # this phase
        self.clock: dict[int, int] = {}  # joined clocks of this phase's arrivals
        self.done_clock: dict[int, int] = {}  # clock of the last completed phase

    def init(self, count: int, warp) -> None:
        if count < 1:
            raise SimError(f"mbarrier.init {self.name} with count {count}: the count must be at least 1")
        self.count = self.pending = count
        self.initialized, self.init_warp = True, warp

    def passed(self, parity: int) -> bool:
        """``try_wait.parity``: has the phase of parity ``parity`` completed?"""
        return (self.phase & 1) != parity

    def arrive(self, n: int, tx: int, who: str) -> bool:
        """``n`` arrivals after an expect-tx of ``tx`` bytes; True when the phase completed."""
        if n > self.pending:
            raise SimError(f"over-arrival: {n} arrival(s) ({who}) on {self.name}, but phase {self.phase} has only "
                           f"{self.pending} of {self.count} arrivals pending{self._tx_note()}; "
                           f"arrived so far: {self._arrivals_text()}")
        self.tx += tx
        self.bytes_expected += tx
        self.pending -= n
        self.arrivals[who] += n
        return self._maybe_complete()

    def complete_tx(self, nbytes: int, issue_phase: int, who: object) -> bool:
        """A TMA issued while the barrier was in phase ``issue_phase`` delivered ``nbytes``; True on completion."""
        if self.phase != issue_phase:
            raise SimError(f"transaction-byte mismatch: {who} delivers {nbytes} B to {self.name} for phase "
                           f"{issue_phase}, which already completed (now phase {self.phase}): expect_tx announced "
                           "fewer bytes than the TMA loads aimed at this barrier deliver")
        self.tx -= nbytes
        self.bytes_in += nbytes
        return self._maybe_complete()

    def _maybe_complete(self) -> bool:
        if self.pending or self.tx:
            return False
        self.phase += 1
        self.done_clock, self.clock = self.clock, {}
        self.pending = self.count
        self.arrivals.clear()
        self.bytes_in = self.bytes_expected = 0
        return True

    def _tx_note(self) -> str:
        return f", tx-count {self.tx} B" if self.tx else ""

    def _arrivals_text(self) -> str:
        return ", ".join(f"{who} x{n}" for who, n in self.arrivals.items()) or "none"

    def describe(self) -> str:
        """State for a deadlock report."""
        tx = ""
        if self.bytes_expected or self.bytes_in:
            tx = f"; expect_tx {self.bytes_expected} B, TMA delivered {self.bytes_in} B (tx-count {self.tx} B)"
        return (f"{self.name}: phase {self.phase} (parity {self.phase & 1}) in progress, {self.pending} of "
                f"{self.count} arrivals pending (arrived: {self._arrivals_text()}){tx}")

    def at_boundary(self) -> bool:
        """No arrival and no byte of the current phase yet."""
        return self.pending == self.count and self.tx == 0


class Rendezvous:
    """A thread barrier (``bar.sync``, ``barrier.cluster``): ``warps`` whole warps meet, then all go on."""

    __slots__ = ("name", "warps", "threads", "arrived", "waiters", "clock", "popc")

    def __init__(self, name: str, threads: int):
        self.name, self.threads = name, threads
        self.popc = 0  # bar.red.popc: threads of this round's arrivals whose predicate was true
        self.warps = threads // 32
        self.arrived: list = []
        self.waiters: list = []
        self.clock: dict[int, int] = {}  # joined clocks of this round's arrivals (the machine resets it)

    def arrive(self, warp, threads: int, who: str) -> list | None:
        """Add ``warp``; the released warps when it was the last one, else None (the caller joins clocks)."""
        if threads != self.threads:
            raise SimError(f"{who} reaches {self.name} expecting {threads} threads, but other warps there expect "
                           f"{self.threads}")
        self.arrived.append(warp)
        if len(self.arrived) < self.warps:
            return None
        released, self.arrived = self.arrived, []
        return released
