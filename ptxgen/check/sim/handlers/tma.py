"""The machine's TMA instructions: ``cp.async.bulk.tensor`` loads and stores, their bulk async-groups
(``cp.async.bulk.commit_group``/``wait_group[.read]``) and ``fence.proxy.async`` (PTX ISA "cp.async.bulk.tensor",
"cp.async.bulk.wait_group", "membar/fence").
"""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ...swizzle import box_index
from ..state import Blocked, Warp, Who
from ..units import StoreUnit, TmaLoadUnit


class Tma:
    """Handlers of the TMA events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _box_index(self, tensor: str, off: int, who: Who) -> tuple[np.ndarray, int, int, int]:
        cols, rows, swizzled, eb = self.maps[tensor]
        align = 1024 if swizzled else 128
        if (self.smem_base + off) % align:
            raise SimError(f"misaligned: {who} uses smem+{off:#x}; a TMA {'128B-swizzled ' if swizzled else ''}box "
                           f"needs a {align}-byte aligned shared address (PTX ISA \"Tensor copy: swizzle modes\": "
                           "a 128B-swizzled destination is 1024-byte aligned; cp.async.bulk.tensor: 128-byte "
                           "aligned otherwise)")
        if swizzled and cols * eb != 128:
            raise SimError(f"unsupported box: {who}: a 128B-swizzled box of {cols * eb} B per row; "
                           "the simulator models 128-byte rows")
        return box_index(self.smem_base + off, rows, cols * eb, swizzled, self.smem_base), cols, rows, eb

    def _tma_load(self, w: Warp, ev: W.Event) -> None:
        who = w.who(f"TmaLoad {ev.op.tensor} (col {ev.col}, row {ev.row})")
        idx, cols, rows, eb = self._box_index(ev.op.tensor, ev.dst, who)
        width, width_bytes = self.glob.row_shape(ev.op.tensor)
        if ev.col + cols > width and width_bytes % 16:
            # seen on the H100: "illegal instruction" at such a load (an FP8 scale box past a row of 5 fp32)
            raise SimError(f"unsupported TMA box: {who} reads columns [{ev.col}, {ev.col + cols}) of {ev.op.tensor}, "
                           f"past the end of its rows of {width} elements ({width_bytes} B, not a multiple of 16): "
                           "declare the map's width in whole 16-byte groups")
        if (ev.col * eb) % 16:
            # seen on the H100: "illegal instruction" at a grouped FP8 kernel's scale_a box starting at column 130
            raise SimError(f"misaligned TMA box: {who} starts at column {ev.col} of {ev.op.tensor}, byte {ev.col * eb} "
                           "of its row, not a multiple of 16: start a box on a 16-byte boundary (pad the rows of the "
                           "map to whole 16-byte groups)")
        for _ in range(ev.lanes):
            for rank, ref in zip(ev.dst_ranks, ev.bars):
                dst = self._cta(w, rank)
                bar = self._bar(w, ref, who)
                handle = dst.smem.begin_async_write(ev.dst, ev.dst + rows * cols * eb, who)
                self.schedule(TmaLoadUnit(dst, handle, idx, (ev.op.tensor, ev.col, ev.row, cols, rows), bar, who))

    def _tma_store(self, w: Warp, ev: W.Event) -> None:
        who = w.who(f"TmaStore {ev.op.tensor} (col {ev.col}, row {ev.row})")
        idx, cols, rows, eb = self._box_index(ev.op.tensor, ev.src, who)
        smem = w.cta.smem
        for _ in range(ev.lanes):
            handle = smem.begin_async_read(idx, who)
            box = smem.data[idx].view(np.uint16 if eb == 2 else np.uint8).reshape(rows, cols)  # eb 1: e4m3 codes
            unit = StoreUnit(w, handle, box, ev.col, ev.row)
            w.bulk_open.setdefault(ev.thread, []).append(unit)
            self.schedule(unit)

    def _bulk_commit(self, w: Warp, ev) -> None:
        self.bulk_seq += 1
        w.bulk_groups.setdefault(ev.thread, []).append((self.bulk_seq, w.bulk_open.pop(ev.thread, [])))

    def _bulk_wait(self, w: Warp, ev: W.Event) -> None:
        """Each waiting thread waits for its own groups (PTX ISA "cp.async.bulk.wait_group": the executing
        thread's bulk async-groups).  A whole-warp wait covers every thread's groups, counted as if one lane
        committed them all (elect.sync may have picked the same lane each time); an elected wait covers only
        the groups committed under the same Elect (another Elect may have picked another lane)."""
        # forget completed groups older than every pending one (a newer group completing first must still
        # count towards "at most n pending" until the older ones complete)
        pending = [seq for gs in w.bulk_groups.values() for seq, units in gs if not all(u.done for u in units)]
        oldest = min(pending, default=self.bulk_seq + 1)
        for key, gs in w.bulk_groups.items():
            w.bulk_groups[key] = [g for g in gs if g[0] >= oldest]
        if ev.thread is None:
            groups = sorted(g for gs in w.bulk_groups.values() for g in gs)
        else:
            groups = list(w.bulk_groups.get(ev.thread, []))
        older = [units for _, units in groups[: max(0, len(groups) - ev.op.n)]]

        def ready() -> bool:
            return all((u.read_done if ev.op.read else u.done) for g in older for u in g)

        if not ready():
            what = "cp.async.bulk.wait_group" + (".read" if ev.op.read else "")
            self.park(w, Blocked(w, lambda: f"{what} {ev.op.n}: {len(groups)} bulk groups pending",
                                  w.walker.where()), ready)
