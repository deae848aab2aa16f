"""The staged epilogue operand (sm_90a): an ``[M, N]`` operand (a residual) read through the CD staging ring.

As CUTLASS's epilogue loads its source C: before the fragments of a store box are staged, one thread of the storing
warp TMA-loads the operand's box (the D store box, same swizzle) into the staging slot the box will be stored from,
completing on ``epi_full[box]``; the warpgroup waits, each warp reads its fragment values with ``ldmatrix.x4``
(the exact inverse of the ``stmatrix.x4`` that stages D), computes the expression per fragment pair and writes D
over the operand with ``stmatrix.x4``; then the usual ``fence.proxy.async`` and TMA store
(:meth:`~ptxgen.builders.roles.Epilogue.cd_commit`).  The slot is free for the load once the ring's
``producer_acquire`` (``cp.async.bulk.wait_group.read``) saw the slot's previous store read out.

``epi_full`` has one barrier per store box of a tile and staging group (``group * stores_per_tile + box``), each
completing once per tile the group stores: phase ``tiles & 1``, ``tiles`` the group's tile count (as in
:meth:`~ptxgen.builders.roles.Epilogue.cd_buffer`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import epi
from ..ir import Bar, Elect, EpilogueExpr, Expr, If, LdMatrix, MbarrierArriveExpectTx, MbarrierWait, StMatrix, TmaLoad, WaitRole, fold
from .common import LANE, WARP

if TYPE_CHECKING:
    from .roles import Epilogue, StoredTile

MATRIX_VALUES = 8  # fragment values of one ldmatrix.x4 / stmatrix.x4 per lane


def staged_box(ep: "Epilogue", wg: Expr, v: int, c: int, seq: int, t: "StoredTile", buf: Expr) -> list:
    """Box ``c`` of wave ``v``: load the staged operand's box into slot ``buf``, wait, then per 8 fragment values
    ``ldmatrix.x4`` -> the expression per pair (other operands loaded per pair as the fragment epilogue does) ->
    ``stmatrix.x4`` of D into the same slot.  The caller acquired the slot before and commits the store after."""
    p, e = ep.p, ep.p.epilogue
    o = e.staged
    slot = fold(p.smem.cd.offset + buf * p.smem.cd.stride)
    col = fold(t.n_col + c * e.store_block_n)
    row = fold(t.m_row + wg * p.mma.wg_row_stride + v * p.mma.wave_rows)
    bar = Bar("epi_full", fold(wg * e.stores_per_tile + seq))
    load = (MbarrierArriveExpectTx(bar, e.stage_bytes), TmaLoad(e.staged_map, slot, col, row, bar))
    out = [If(ep.epi_leader(wg), (Elect(load, fixed=True),)),
           MbarrierWait(bar, fold((t.count // p.roles.tile_owners) % 2), WaitRole.CONSUMER_WAIT)]
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
