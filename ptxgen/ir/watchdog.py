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
          %globaltimer - t0 >= budget -> expired
          abort flag set (another wait expired) -> abandon
          -> loop
    expired: abort flag = 1
          post t0 to the record's "oldest" word if older (CAS loop); spin SETTLE_NS
          oldest is not mine -> abandon; atom.cas claim 0 -> 1 lost -> abandon
          write the record
    abandon: wd_live = 0                     (falls through)
    done:

The record names the wait stuck longest (the nearest to the cause: with a full barrier that never
completes, the consumers' wait on it started before the producer's knock-on wait on ``empty``), not
whichever expired thread polled first: every waiter whose budget is spent posts its start and waits
SETTLE_NS for the others to post theirs.

After the first expiry every wait of every CTA falls through: the k-loops and tile loops are counted,
``bar.sync``/``barrier.cluster``/named barriers and the ``.aligned`` warp collectives are reached by the
same threads as in a normal run, and the launch completes with garbage in D but the CUDA context usable
(no ``trap``).  Falling through alone is not enough: a thread that went on arriving and copying after
the abort would over-arrive on barriers whose phase never completed (the pending arrival count and the
tx-count leave their defined range: PTX ISA "mbarrier: Contents of the mbarrier object"), and a CTA may
not exit while asynchronous copies still write its shared memory or arrive on its barriers (PTX ISA
"cp.async.bulk.tensor", "Asynchronous operations").  So the abandon path is:

* **stop producing** -- the pass binds ``wd_live = 1`` (:data:`LIVE`) at the top of the body and wraps every
  op that arrives on an mbarrier or starts an asynchronous copy into shared memory (:data:`GUARDED`:
  ``mbarrier.arrive[.expect_tx]``, ``cp.async.bulk.tensor`` loads, ``tcgen05.commit``) in ``If wd_live``;
  a thread that abandons a wait clears it, so from then on it only falls through;
* **drain before exit** -- the emitter ends a watched kernel (after the teardown) with ``if !wd_live: spin
  DRAIN_NS on %globaltimer``.  A CTA exits only when its last thread does; abandoned threads issue no load,
  and a live producer issues one only after a release that a consumer made before that consumer abandoned,
  so every load issued had DRAIN_NS to land before its CTA (and, through the teardown's cluster barrier, a
  multicast peer) exits.  The kernel's own ``wgmma.wait_group 0`` and ``cp.async.bulk.wait_group`` still
  run (fall-through keeps the program's control flow), so no wgmma and no bulk store is outstanding either.
  PTX offers no wait on a TMA load other than its mbarrier, which a broken barrier never completes: hence
  a bounded time.

The mbarrier state is opaque (PTX ISA "mbarrier": ``test_wait``/``try_wait`` only; no instruction reads the
pending arrival count or the tx-count of a live barrier), so the record cannot say expected vs arrived
bytes; the runtime prints the plan's per-phase expectation (init count, tx bytes) instead.  (A plain
``ld.shared.b64`` of the barrier word, tried on an H100, read 0 or leftover operand data for barriers
with a pending arrival: the word in shared memory does not hold the live state.)
Hardware facts: ``%globaltimer`` is a 64-bit nanosecond timer (PTX ISA "Special registers: %globaltimer");
``atom.global.cas.b32`` (PTX ISA "atom").

Record layout (u32 words, :data:`FIELDS`): abort flag, claim, wait site, CTA
(``%ctaid.x``), cluster rank, warp, lane, barrier index, expected parity,
``t`` and ``kb`` (:data:`UNBOUND` when not bound at that wait), elapsed ns
(low, high), and ``oldest``: the start of the oldest expired wait
(``%globaltimer >> 8``, low 32 bits; compared modulo 2^32).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .expr import Const, Var
from .kernel import Kernel
from .ops import If, Let, MbarrierArrive, MbarrierArriveExpectTx, MbarrierWait, TmaLoad, UmmaCommit, WaitSite
from .rewrite import rewrite_body

PARAM: tuple[str, str] = ("watchdog_ptr", "u64")
#: u32 words of the record, in order
FIELDS: tuple[str, ...] = ("abort", "claim", "site", "cta", "rank", "warp", "lane", "index", "parity",
                           "tile", "kblock", "elapsed_lo", "elapsed_hi", "oldest")
WORD = {name: i for i, name in enumerate(FIELDS)}
RECORD_WORDS = 16
RECORD_BYTES = 4 * RECORD_WORDS
UNBOUND = 0xFFFFFFFF
DEFAULT_BUDGET_NS = 1_000_000_000  # PTXGEN_WATCHDOG=on: 1 s per wait
#: the per-thread register that says "this thread has not abandoned a wait" (1), cleared on abandon
LIVE = "wd_live"
#: ops an abandoned thread skips: they arrive on an mbarrier or start an asynchronous copy into shared memory
GUARDED: tuple[type, ...] = (MbarrierArrive, MbarrierArriveExpectTx, TmaLoad, UmmaCommit)
#: after an abort, every thread spins this long (ns of %globaltimer) before it exits, so the TMA loads issued
#: before the abort land while the CTA is alive; a load takes microseconds, this is three orders more
DRAIN_NS = 1_000_000
#: an expired waiter waits this long (ns) for the other expired waiters to post their start times, so the
#: oldest one writes the record (see ``emitters.common``); a waiter notices its expiry within one poll
SETTLE_NS = 1_000_000


def instrument(kernel: Kernel, budget_ns: int) -> Kernel:
    """``kernel`` with every mbarrier wait bounded by ``budget_ns`` nanoseconds (see module docstring).

    Every wait gets its :class:`WaitSite`; every :data:`GUARDED` op is wrapped in ``If wd_live`` (the
    abandon path's "stop producing"), bound to 1 by a ``Let`` at the top of the body.  The launch spec gets
    the extra parameter and ``extra["watchdog"]`` = ``{"budget_ns", "drain_ns", "sites", "barriers",
    "record_words", "fields"}`` (``barriers``: name -> [init count per cluster rank, tx bytes per phase],
    the plan's expectation) so a runtime can allocate the buffer and decode a record.

    Raises:
        ValueError: ``budget_ns`` is not a positive integer below 2^63, or the kernel is already instrumented.
    """
    if not isinstance(budget_ns, int) or not 0 < budget_ns < 2 ** 63:
        raise ValueError(f"watchdog budget {budget_ns!r}: must be a positive integer number of ns below 2^63")
    if kernel.watchdog_ns:
        raise ValueError(f"kernel {kernel.name} is already instrumented")
    sites: list[tuple[str, str]] = []

    def watch(op, bound: frozenset):
        if isinstance(op, GUARDED):
            return If(Var(LIVE), (op,))
        if not isinstance(op, MbarrierWait):
            return None
        op = dataclasses.replace(op, watch=WaitSite(len(sites), Var("t") if "t" in bound else None,
                                                    Var("kb") if "kb" in bound else None))
        sites.append((op.bar.name, op.role))
        return op

    body = (Let(LIVE, Const(1)),) + rewrite_body(kernel.body, watch, scoped=True)
    launch = kernel.launch
    table = {"budget_ns": budget_ns, "drain_ns": DRAIN_NS, "sites": [list(s) for s in sites],
             "barriers": {b.name: [list(b.init), b.tx_bytes] for b in kernel.barriers},
             "record_words": RECORD_WORDS, "fields": list(FIELDS)}
    if launch is not None:
        launch = launch._replace(params=tuple(launch.params) + (PARAM,), extra={**launch.extra, "watchdog": table})
    return dataclasses.replace(kernel, body=body, params=kernel.params + (PARAM,), launch=launch,
                               watchdog_ns=budget_ns, wait_sites=tuple(sites))


@dataclass(frozen=True)
class WatchdogRecord:
    """A decoded watchdog record: which wait expired first.

    Attributes:
        barrier: barrier array name (``full``); index: its index (the pipeline stage of a ring); role: the
            wait's pipeline word.
        cta: ``%ctaid.x``; rank: cluster rank; warp, lane: of the waiting thread.
        parity: the phase parity it waited for.
        tile, kblock: ``t`` and ``kb`` at the wait, None when not bound there.
        elapsed_ns: how long it had waited.
        init, tx_bytes: the plan's expectation for one phase of that barrier in that CTA (arrival count,
            transaction bytes); None when the table does not carry it.
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
    init: int | None = None
    tx_bytes: int | None = None

    def describe(self) -> str:
        where = f"CTA {self.cta} (cluster rank {self.rank}), warp {self.warp} lane {self.lane}"
        tk = ", ".join(f"{n} {v}" for n, v in (("tile", self.tile), ("k-block", self.kblock)) if v is not None)
        plan = ""
        if self.init is not None:
            plan = f"; the plan expects {self.init} arrival(s)" + (f" and {self.tx_bytes} tx bytes"
                                                                   if self.tx_bytes else "") + " per phase"
        return (f"{self.role} on {self.barrier}[{self.index}] waiting for parity {self.parity}: {where}"
                f"{', ' + tk if tk else ''}; no progress for {self.elapsed_ns / 1e6:.1f} ms{plan}")


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
    rank = w[WORD["rank"]]
    init = tx = None
    if bar in table.get("barriers", {}):
        counts, tx = table["barriers"][bar]
        init = counts[rank] if rank < len(counts) else None

    def opt(name: str) -> int | None:
        return None if w[WORD[name]] == UNBOUND else w[WORD[name]]

    return WatchdogRecord(site=site, barrier=bar, role=role, index=w[WORD["index"]], parity=w[WORD["parity"]],
                          cta=w[WORD["cta"]], rank=rank, warp=w[WORD["warp"]], lane=w[WORD["lane"]],
                          tile=opt("tile"), kblock=opt("kblock"),
                          elapsed_ns=w[WORD["elapsed_lo"]] | (w[WORD["elapsed_hi"]] << 32), init=init, tx_bytes=tx)


__all__ = ["PARAM", "FIELDS", "RECORD_WORDS", "RECORD_BYTES", "UNBOUND", "DEFAULT_BUDGET_NS", "LIVE", "GUARDED",
           "DRAIN_NS", "SETTLE_NS", "instrument", "WatchdogRecord", "decode"]
