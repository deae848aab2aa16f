"""Sweeps for ``ptxgen check``: a few shapes x many interleavings of one kernel, faults collected, one summary."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SimError
from .run import simulate


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
            (2 * tr - 24, tc + 40, kernel.block_k * s + 24),
            (2 * tr + 8, 2 * tc - 8, 144)]


@dataclass
class Sweep:
    """Outcome of :func:`sweep`: runs, faults (shape, schedule seed, message) and the worst relative error."""

    shapes: list[tuple[int, int, int]]
    interleavings: int
    runs: int = 0
    faults: list[tuple[tuple[int, int, int], int, str]] = field(default_factory=list)
    max_rel_err: float = 0.0
    distinct: int = 0  # distinct interleavings (scheduler fingerprints) among the runs

    def summary(self) -> str:
        return (f"simulated {len(self.shapes)} shapes x {self.interleavings} interleavings: {len(self.faults)} faults, "
                f"max rel error {self.max_rel_err:.1e}")


def sweep(kernel, shapes: list[tuple[int, int, int]] | None = None, interleavings: int = 20, *, num_sms: int = 4,
          seed: int = 0) -> Sweep:
    """Simulate ``kernel`` on each shape under ``interleavings`` schedule seeds; collect faults instead of raising.

    max_rel_err is the max-abs relative error (max|D - ref| / max|ref|) over the runs without a fault.
    """
    shapes = shapes or default_shapes(kernel)
    out = Sweep(shapes, interleavings)
    prints = set()
    for shape in shapes:
        for i in range(interleavings):
            sched = seed * 1_000_003 + i
            out.runs += 1
            try:
                r = simulate(kernel, *shape, seed=seed + i, num_sms=num_sms, schedule_seed=sched)
            except SimError as exc:
                out.faults.append((shape, sched, str(exc)))
                continue
            prints.add((shape, r.fingerprint))
            out.max_rel_err = max(out.max_rel_err, r.max_rel_err)
    out.distinct = len(prints)
    return out
