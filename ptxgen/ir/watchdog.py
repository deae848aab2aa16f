"""Opt-in hang watchdog: bound every mbarrier wait loop by a ``%globaltimer`` budget.

:func:`instrument` rewrites a built :class:`~ptxgen.ir.Kernel` (a legalize-like
pass; the plan, the simulator and the verifier see the same ops): every
``MbarrierWait`` gets a :class:`~ptxgen.ir.ops.WaitSite` (its id in the
kernel's wait table, and the tile/k-block variables bound there), the kernel
gets one more parameter ``watchdog_ptr`` (``.u64``: a :data:`RECORD_BYTES`
device buffer, zeroed by the runtime) and the budget.  Without it the kernel,
and so its PTX, is unchanged.

The emitter (``emitters.common.mbarrier_wait``) lowers a watched wait as::

    t0 = %globaltimer                        // once, before the loop
    loop: try_wait.parity -> done
          abort flag set (another thread expired) -> done      (falls through)
          %globaltimer - t0 < budget -> loop
          atom.cas claim 0 -> 1; the winner writes the record
          abort flag = 1; -> done

So after the first expiry every wait of every CTA falls through: the k-loops
and tile loops are counted, ``bar.sync``/``barrier.cluster`` are reached by
every thread, and the launch completes with garbage in D but the CUDA context
usable (no ``trap``).  Hardware facts: ``%globaltimer`` is a 64-bit nanosecond
timer (PTX ISA "Special registers: %globaltimer"); ``atom.global.cas.b32``
(PTX ISA "atom").

Record layout (u32 words, :data:`FIELDS`): abort flag, claim, wait site, CTA
(``%ctaid.x``), cluster rank, warp, lane, barrier index, expected parity,
``t`` and ``kb`` (:data:`UNBOUND` when not bound at that wait), elapsed ns
(low, high).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .expr import Var
from .kernel import Kernel
from .ops import MbarrierWait, WaitSite
from .rewrite import rewrite_body

PARAM: tuple[str, str] = ("watchdog_ptr", "u64")
#: u32 words of the record, in order
FIELDS: tuple[str, ...] = ("abort", "claim", "site", "cta", "rank", "warp", "lane", "index", "parity",
                           "tile", "kblock", "elapsed_lo", "elapsed_hi")
WORD = {name: i for i, name in enumerate(FIELDS)}
RECORD_WORDS = 16
RECORD_BYTES = 4 * RECORD_WORDS
UNBOUND = 0xFFFFFFFF
DEFAULT_BUDGET_NS = 1_000_000_000  # PTXGEN_WATCHDOG=on: 1 s per wait


def instrument(kernel: Kernel, budget_ns: int) -> Kernel:
    """``kernel`` with every mbarrier wait bounded by ``budget_ns`` nanoseconds (see module docstring).

    The launch spec gets the extra parameter and ``extra["watchdog"]`` = ``{"budget_ns", "sites",
    "record_words", "fields"}`` so a runtime can allocate the buffer and decode a record.

    Raises:
        ValueError: ``budget_ns`` is not a positive integer below 2^63, or the kernel is already instrumented.
    """
    if not isinstance(budget_ns, int) or not 0 < budget_ns < 2 ** 63:
        raise ValueError(f"watchdog budget {budget_ns!r}: must be a positive integer number of ns below 2^63")
    if kernel.watchdog_ns:
        raise ValueError(f"kernel {kernel.name} is already instrumented")
    sites: list[tuple[str, str]] = []

    def watch(op, bound: frozenset):
        if not isinstance(op, MbarrierWait):
            return None
        op = dataclasses.replace(op, watch=WaitSite(len(sites), Var("t") if "t" in bound else None,
                                                    Var("kb") if "kb" in bound else None))
        sites.append((op.bar.name, op.role))
        return op

    body = rewrite_body(kernel.body, watch, scoped=True)
    launch = kernel.launch
    table = {"budget_ns": budget_ns, "sites": [list(s) for s in sites], "record_words": RECORD_WORDS,
             "fields": list(FIELDS)}
    if dataclasses.is_dataclass(launch):
        launch = dataclasses.replace(launch, params=tuple(launch.params) + (PARAM,),
                                     extra={**launch.extra, "watchdog": table})
    return dataclasses.replace(kernel, body=body, params=kernel.params + (PARAM,), launch=launch,
                               watchdog_ns=budget_ns, wait_sites=tuple(sites))


@dataclass(frozen=True)
class WatchdogRecord:
    """A decoded watchdog record: which wait expired first.

    Attributes:
        barrier: barrier array name (``full``); index: its index; role: the wait's pipeline word.
        cta: ``%ctaid.x``; rank: cluster rank; warp, lane: of the waiting thread.
        parity: the phase parity it waited for.
        tile, kblock: ``t`` and ``kb`` at the wait, None when not bound there.
        elapsed_ns: how long it had waited.
    """

    site: int
    barrier: str
    role: str
    index: int
    parity: int
    cta: int
    rank: int
    warp: int
    lane: int
    tile: int | None
    kblock: int | None
    elapsed_ns: int

    def describe(self) -> str:
        where = f"CTA {self.cta} (cluster rank {self.rank}), warp {self.warp} lane {self.lane}"
        tk = ", ".join(f"{n} {v}" for n, v in (("tile", self.tile), ("k-block", self.kblock)) if v is not None)
        return (f"{self.role} on {self.barrier}[{self.index}] waiting for parity {self.parity}: {where}"
                f"{', ' + tk if tk else ''}; no progress for {self.elapsed_ns / 1e6:.1f} ms")


def decode(words, table: dict) -> WatchdogRecord | None:
    """Decode a record (``RECORD_WORDS`` u32 values) with the launch spec's ``extra["watchdog"]`` table.

    Returns None when no wait expired (claim word 0).  Raises ValueError on a site id outside the table.
    """
    w = [int(x) & 0xFFFFFFFF for x in words]
    if len(w) < len(FIELDS):
        raise ValueError(f"watchdog record has {len(w)} words, expected {RECORD_WORDS}")
    if not w[WORD["claim"]]:
        return None
    site = w[WORD["site"]]
    sites = table["sites"]
    if site >= len(sites):
        raise ValueError(f"watchdog record names wait site {site}; the kernel has {len(sites)}")
    bar, role = sites[site]

    def opt(name: str) -> int | None:
        return None if w[WORD[name]] == UNBOUND else w[WORD[name]]

    return WatchdogRecord(site=site, barrier=bar, role=role, index=w[WORD["index"]], parity=w[WORD["parity"]],
                          cta=w[WORD["cta"]], rank=w[WORD["rank"]], warp=w[WORD["warp"]], lane=w[WORD["lane"]],
                          tile=opt("tile"), kblock=opt("kblock"),
                          elapsed_ns=w[WORD["elapsed_lo"]] | (w[WORD["elapsed_hi"]] << 32))


__all__ = ["PARAM", "FIELDS", "RECORD_WORDS", "RECORD_BYTES", "UNBOUND", "DEFAULT_BUDGET_NS", "instrument",
           "WatchdogRecord", "decode"]
