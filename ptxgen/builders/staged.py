"""The staged epilogue operand (sm_90a): an ``[M, N]`` operand (a residual) read through the CD staging ring.

As CUTLASS's epilogue loads its source C: ahead of the fragments of a store box, one thread of the storing warp
TMA-loads the operand's box (the D store box, same swizzle) into the staging slot the box will be stored from,
completing on ``epi_full[box]`` (the first ``stages`` boxes before the tile's mainloop, box ``b + stages`` right after
box ``b``'s store is committed, once that store has read the slot); the warpgroup waits, each warp reads its fragment values with ``ldmatrix.x4``
(the exact inverse of the ``stmatrix.x4`` that stages D), computes the expression per fragment pair and writes D
over the operand with ``stmatrix.x4``; then the usual ``fence.proxy.async`` and TMA store
(:meth:`~ptxgen.builders.roles.Epilogue.cd_commit`).  The slot is free for the load once
``cp.async.bulk.wait_group.read 0`` saw every earlier store of the group read out (its slot's previous one among
them).

``epi_full`` has one barrier per store box of a tile and staging group (``group * stores_per_tile + box``), each
completing once per tile the group stores: phase ``tiles & 1``, ``tiles`` the group's stored tiles
(:meth:`~ptxgen.builders.roles.Epilogue.stored_tiles`, as the CD ring counts them).  Under split-K only a tile's
last arriver stores it: its first boxes load after the verdict, under the collection of the other splits' partials
(:meth:`~ptxgen.builders.roles.SplitKFixup.step`), not under the mainloop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import epi
from ..ir import (Bar, Elect, EpilogueExpr, Expr, If, LdMatrix, MbarrierArriveExpectTx, MbarrierWait, Param, StMatrix, TmaLoad,
                  WaitRole, eq, fold)
from .common import LANE, WARP

if TYPE_CHECKING:
    from .roles import Epilogue, StoredTile

MATRIX_VALUES = 8  # fragment values of one ldmatrix.x4 / stmatrix.x4 per lane


def staged_load(ep: "Epilogue", wg: Expr, seq: int, t: "StoredTile") -> list:
    """Store box ``seq`` of tile ``t`` (wave ``seq / stores_per_wave``, box ``seq % stores_per_wave``): once every
    earlier store of the staging group has read its slot (``cp.async.bulk.wait_group.read 0`` in every lane of the
    storing warp: the bulk groups are lane 0's), lane 0 TMA-loads the staged operand's box into the box's slot,
    completing on ``epi_full[box]``.

    Issued ahead of the box (:func:`staged_prefetch`, :func:`staged_refill`), so the load's global-memory latency
    runs under the mainloop or under the previous box's fragments, not between the slot's acquire and its
    ``ldmatrix``."""
    p, e = ep.p, ep.p.epilogue
    v, c = divmod(seq, e.stores_per_wave)
    slot = fold(p.smem.cd.offset + ep.cd_buffer(seq, wg, t.count) * p.smem.cd.stride)
    col = fold(t.n_col + c * e.store_block_n)
    row = fold(t.m_row + wg * p.mma.wg_row_stride + v * p.mma.wave_rows)
    bar = Bar("epi_full", fold(wg * e.stores_per_tile + seq))
    load = (MbarrierArriveExpectTx(bar, e.stage_bytes), TmaLoad(e.staged_map, slot, col, row, bar))
    return [If(ep.epi_leader(wg), (*p.cd_ring.drain(), Elect(load, fixed=True)))]


def staged_prefetch(ep: "Epilogue", wg: Expr, t: "StoredTile") -> list:
    """Before the tile's mainloop: the loads of its first ``stages`` boxes (one per staging slot), when N allows
    the maps (the direct branch reads the operand per pair)."""
    p, e = ep.p, ep.p.epilogue
    n_ok = eq(Param("n") % e.store_n_multiple, 0)
    loads = [x for seq in range(min(e.stages, e.stores_per_tile)) for x in staged_load(ep, wg, seq, t)]
    return [If(n_ok, tuple(loads))]


def staged_refill(ep: "Epilogue", wg: Expr, seq: int, t: "StoredTile") -> list:
    """After box ``seq``'s store is committed: the load of box ``seq + stages`` into the same slot (none past the
    tile's last box)."""
    e = ep.p.epilogue
    return staged_load(ep, wg, seq + e.stages, t) if seq + e.stages < e.stores_per_tile else []


def staged_box(ep: "Epilogue", wg: Expr, v: int, c: int, seq: int, t: "StoredTile", buf: Expr) -> list:
    """Box ``c`` of wave ``v``: wait for the staged operand's box in slot ``buf`` (loaded ahead by
    :func:`staged_prefetch` / :func:`staged_refill`), then per 8 fragment values ``ldmatrix.x4`` -> the expression
    per pair (other operands loaded per pair as the fragment epilogue does) -> ``stmatrix.x4`` of D into the same
    slot.  The caller acquired the slot before and commits the store after."""
    p, e = ep.p, ep.p.epilogue
    o = e.staged
    bar = Bar("epi_full", fold(wg * e.stores_per_tile + seq))
    out = [MbarrierWait(bar, fold(ep.stored_tiles(t.count) % 2), WaitRole.CONSUMER_WAIT)]
    acc = f"{t.array}{v}"
    arrays = {"acc": acc, "acc1": acc, "acc2": f"acc1_{v}"}
    # lane l addresses row l % 8 of matrix l // 8 (as the stmatrix staging of fragment_store)
    lrow = fold((WARP % 4) * 16 + 8 * ((LANE // 8) % 2) + LANE % 8)
    reg = f"ep_{o.name}"
    for i in range(c * e.box_values, (c + 1) * e.box_values, MATRIX_VALUES):
        addr = ep.cd_addr(buf, lrow, fold(LANE // 16 + (i // 4 - c * e.row_chunks)))
        out.append(LdMatrix(reg, addr, tuple(range(MATRIX_VALUES)), o.dtype))
        for j in range(i, i + MATRIX_VALUES, 2):
            pair_row, pair_col = ep.fragment_coords(t, wg, v, j)
            half = (j // 2) & 1
            out += ep.operand_loads(pair_row, pair_col, j, half, True, skip=o.name)
            idx = (j, j + 1)

            def leaf(x, idx=idx, half=half, j=j, i=i):
                if x == epi.operand(o.kind, o.name, o.along):
                    return epi.Reg(reg, (j - i, j - i + 1))
                return ep.leaf(x, arrays, idx, (half, half))

            out.append(EpilogueExpr(acc, idx, epi.bind(e.expr, leaf)))
        out.append(StMatrix(addr, acc, tuple(range(i, i + MATRIX_VALUES)), e.out_dtype))
    return out
