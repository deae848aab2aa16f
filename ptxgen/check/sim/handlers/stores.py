"""The machine's epilogue stores: ``st.shared`` into the CD staging (generic proxy, visible to the TMA store
only after ``fence.proxy.async``) and ``st.global`` into D, clipped at M and N.
"""

from __future__ import annotations

import numpy as np

from ....errors import SimError
from ... import walker as W
from ..state import Warp


class Stores:
    """Handlers of the epilogue store events (a mixin of :class:`~ptxgen.check.sim.machine.Machine`)."""

    def _st_shared(self, w: Warp, ev: W.Event) -> None:
        if ev.nbytes not in (2, 4, 8, 16) or (ev.addr % ev.nbytes).any():
            raise SimError(f"misaligned: StShared16 by {w.walker.where()} stores {ev.nbytes} B at smem offsets "
                           f"{sorted(set((ev.addr[ev.addr % ev.nbytes != 0]).tolist()))[:4]}; st.shared of "
                           f"{ev.nbytes} B needs {ev.nbytes}-byte alignment")
        idx = (ev.addr[:, None] + np.arange(ev.nbytes)).ravel()
        w.cta.smem.generic_write(idx, ev.data.ravel(), w.who("StShared16"))
        w.unfenced.append(idx)

    def _fence_proxy(self, w: Warp, ev) -> None:
        if w.unfenced:
            w.cta.smem.fence_proxy_async(np.concatenate(w.unfenced))
            w.unfenced = []

    def _st_global(self, w: Warp, ev: W.Event) -> None:
        """D is the ``m x n`` elements at ``d_ptr`` (``glob.d``, the kernel's shape); a transposed store (swap-AB)
        writes element (row, col) at linear index ``col * m + row`` of that memory, an untransposed one at
        ``row * n + col``."""
        m, n = self.glob.d.shape
        cols = ev.col[:, None] + np.arange(ev.data.shape[1])
        rows = np.broadcast_to(ev.row[:, None], cols.shape)
        ok = (rows < m) & (cols < n)
        if ev.row_end is not None:  # a grouped kernel's per-row bound (rows past a group's valid rows)
            ok &= rows < ev.row_end[:, None]
        lin = cols * m + rows if ev.op.transposed else rows * n + cols
        self.glob.d.reshape(-1)[lin[ok]] = ev.data[ok]
