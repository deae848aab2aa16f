"""Sweeps for ``ptxgen check``: a few shapes x many interleavings of one kernel, faults collected, one summary.

The interleavings come from the scheduling policies of :mod:`.machine`: ``random`` (random latencies),
``latest`` (every async unit completes as late as legal) and ``pct`` (PCT priorities).  A fault records the
policy and seed that exposed it; ``simulate(kernel, *shape, seed=.., schedule_seed=seed, policy=policy)``
replays it (the input seed is ``seed`` of the sweep plus the run's index, as below).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import SimError
from .machine import POLICIES
from .run import simulate

ADVERSARIAL_RUNS = {"latest": 2, "pct": 3}  # runs per shape that ``policies="all"`` adds to the random ones


def default_shapes(kernel) -> list[tuple[int, int, int]]:
    """Three (m, n, k) in units of the kernel's cluster tile, none a multiple of the tile (NVFP4: multiples).

    One partial tile; 2 x 1 tiles (+ a partial column) with ``stages + 1``
    k-blocks, the last one partial (every smem ring wraps); 3 x 2 tiles with
    3 k-blocks (persistent CTAs loop over several tiles, TMEM stages wrap).
    """
    tr, tc, s = kernel.launch.grid.tile_rows, kernel.launch.grid.tile_cols, kernel.stages
    if "sfa" in kernel.launch.tensor_maps:  # NVFP4: whole 128-row scale atoms, K a multiple of the stage's 256
        bk = kernel.launch.k_multiple
        return [(tr, tc, bk), (2 * tr, tc, bk * (s + 1)), (2 * tr, 3 * tc, 3 * bk)]
    return [(tr // 2 + 8, tc // 2 + 8, 64),
            (2 * tr - 24, tc + 40, kernel.block_k * s + 3 * kernel.launch.k_multiple),  # bf16 +24, FP8 +48
            (2 * tr + 8, 2 * tc - 8, 144)]


@dataclass(frozen=True)
class Fault:
    """A faulting run of a sweep: its shape, the schedule (policy and seed) that exposed the fault, the message."""

    shape: tuple[int, int, int]
    policy: str
    seed: int
    message: str


@dataclass
class Sweep:
    """Outcome of :func:`sweep`: runs per policy, faults and the worst relative error."""

    shapes: list[tuple[int, int, int]]
    interleavings: int
    plan: dict[str, int] = field(default_factory=dict)  # policy -> runs per shape
    runs: int = 0
    faults: list[Fault] = field(default_factory=list)
    max_rel_err: float = 0.0
    distinct: int = 0  # distinct interleavings (scheduler fingerprints) among the runs

    def summary(self) -> str:
        if list(self.plan) == ["random"]:
            what = f"{self.interleavings} interleavings"
        else:
            what = f"{sum(self.plan.values())} schedules ({', '.join(f'{n} {p}' for p, n in self.plan.items())})"
        return (f"simulated {len(self.shapes)} shapes x {what}: {len(self.faults)} faults, "
                f"max rel error {self.max_rel_err:.1e}")


def schedule_plan(policies: str, interleavings: int) -> dict[str, int]:
    """Runs per shape of each policy: ``interleavings`` of one policy, or for ``all`` that many random runs plus
    :data:`ADVERSARIAL_RUNS`.  Raises ValueError on an unknown policy."""
    if policies == "all":
        return {"random": interleavings, **ADVERSARIAL_RUNS}
    if policies not in POLICIES:
        raise ValueError(f"schedule policy {policies!r}: one of {', '.join(POLICIES)} or all")
    return {policies: interleavings}


def sweep(kernel, shapes: list[tuple[int, int, int]] | None = None, interleavings: int = 20, *, num_sms: int = 4,
          seed: int = 0, policies: str = "random") -> Sweep:
    """Simulate ``kernel`` on each shape under the schedules of :func:`schedule_plan`; collect faults instead of
    raising.  Run i of a policy uses schedule seed ``seed * 1_000_003 + i`` and input seed ``seed + i``.

    max_rel_err is the max-abs relative error (max|D - ref| / max|ref|) over the runs without a fault.
    Raises ValueError on an unknown policy.
    """
    shapes = shapes or default_shapes(kernel)
    out = Sweep(shapes, interleavings, schedule_plan(policies, interleavings))
    prints = set()
    for shape in shapes:
        for policy, runs in out.plan.items():
            for i in range(runs):
                sched = seed * 1_000_003 + i
                out.runs += 1
                try:
                    r = simulate(kernel, *shape, seed=seed + i, num_sms=num_sms, schedule_seed=sched, policy=policy)
                except SimError as exc:
                    out.faults.append(Fault(shape, policy, sched, str(exc)))
                    continue
                prints.add((shape, policy, r.fingerprint))
                out.max_rel_err = max(out.max_rel_err, r.max_rel_err)
    out.distinct = len(prints)
    return out
