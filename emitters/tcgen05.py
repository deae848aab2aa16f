"""Lowering of the tcgen05 family (sm_100a): TMEM allocation, UMMA issue and commit, TMEM loads, fences.

Sources: PTX ISA 8.8 "Tensor Memory", "tcgen05.alloc", "tcgen05.mma", "tcgen05.commit", "tcgen05.ld",
"tcgen05.fence".  One kernel uses one cta_group for all of these (ptxas
refuses a mix), taken from the kernel.
"""

from __future__ import annotations

from ptxgen.ir import ops

from .core import Lowering


def _group(lw: Lowering) -> str:
    return f".cta_group::{lw.kernel.cta_group}"


def tmem_alloc(lw: Lowering, op: ops.TmemAlloc) -> None:
    slot = lw.smem(lw.kernel.tmem_slot)
    lw.emit(f"tcgen05.alloc{_group(lw)}.sync.aligned.shared::cta.b32 [{slot}], {op.cols};")


def tmem_relinquish(lw: Lowering, op: ops.TmemRelinquish) -> None:
    lw.emit(f"tcgen05.relinquish_alloc_permit{_group(lw)}.sync.aligned;")


def tmem_base(lw: Lowering, op: ops.TmemBase) -> None:
    lw.emit(f"ld.shared.b32 {lw.var(op.var)}, [{lw.smem(lw.kernel.tmem_slot)}];")


def tmem_dealloc(lw: Lowering, op: ops.TmemDealloc) -> None:
    lw.emit(f"tcgen05.dealloc{_group(lw)}.sync.aligned.b32 {lw.reg(op.taddr)}, {op.cols};")


def tcgen_fence(lw: Lowering, op: ops.TcgenFence) -> None:
    lw.emit(f"tcgen05.fence::{op.kind}_thread_sync;")


def _desc(lw: Lowering, lo, hi: int) -> str:
    d = lw.tmp64()
    lw.emit(f"mov.b64 {d}, {{{lw.reg(lo)}, {lw.reg_const(hi, 'desc_hi')}}};")
    return d


def umma(lw: Lowering, op: ops.Umma) -> None:
    p = lw.predicate(op.accumulate)
    adesc, bdesc = _desc(lw, op.a_lo, op.a_hi), _desc(lw, op.b_lo, op.b_hi)
    idesc = lw.reg_const(op.idesc, "idesc")
    lw.emit(f"tcgen05.mma{_group(lw)}.kind::f16 [{lw.reg(op.d)}], {adesc}, {bdesc}, {idesc}, {p};")


def umma_commit(lw: Lowering, op: ops.UmmaCommit) -> None:
    bar = lw.bar(op.bar)
    head = f"tcgen05.commit{_group(lw)}.mbarrier::arrive::one.shared::cluster"
    if op.multicast:
        mask = lw.tmp16()
        lw.emit(f"mov.b16 {mask}, {op.multicast:#x};")
        lw.emit(f"{head}.multicast::cluster.b64 [{bar}], {mask};")
    else:
        lw.emit(f"{head}.b64 [{bar}];")


def tmem_load(lw: Lowering, op: ops.TmemLoad) -> None:
    regs = lw.array(op.dst, op.ncols)
    lw.emit(f"tcgen05.ld.sync.aligned.32x32b.x{op.ncols}.b32 {{{', '.join(regs)}}}, [{lw.reg(op.taddr)}];")


def tmem_wait_ld(lw: Lowering, op: ops.TmemWaitLd) -> None:
    lw.emit("tcgen05.wait::ld.sync.aligned;")


def tmem_copy(lw: Lowering, op: ops.TmemCopy) -> None:
    """``tcgen05.cp``: all constants from the op (PTX ISA "tcgen05.cp")."""
    desc = _desc(lw, op.src_lo, op.desc_hi)
    lw.emit(f"tcgen05.cp.cta_group::{op.cta_group}.{op.shape} [{lw.reg(op.taddr)}], {desc};")


def umma_block_scaled(lw: Lowering, op: ops.UmmaBlockScaled) -> None:
    """Block-scaled ``tcgen05.mma``; idesc and descriptor high words come from the op, not the plan."""
    p = lw.predicate(op.accumulate)
    adesc, bdesc = _desc(lw, op.a_lo, op.a_desc_hi), _desc(lw, op.b_lo, op.b_desc_hi)
    idesc = lw.reg_const(op.idesc, "idesc")
    sfa, sfb = lw.reg(op.sfa), lw.reg(op.sfb)
    collector = f".collector::a::{op.collector}" if op.collector else ""  # PTX ISA "tcgen05.mma": .collector_usage
    lw.emit(f"tcgen05.mma.cta_group::{op.cta_group}.kind::{op.kind}.block_scale.{op.scale_vec}{collector} "
            f"[{lw.reg(op.d)}], {adesc}, {bdesc}, {idesc}, [{sfa}], [{sfb}], {p};")


TCGEN05 = {
    ops.TmemAlloc: tmem_alloc,
    ops.TmemRelinquish: tmem_relinquish,
    ops.TmemBase: tmem_base,
    ops.TmemDealloc: tmem_dealloc,
    ops.TcgenFence: tcgen_fence,
    ops.Umma: umma,
    ops.UmmaCommit: umma_commit,
    ops.TmemLoad: tmem_load,
    ops.TmemWaitLd: tmem_wait_ld,
    ops.TmemCopy: tmem_copy,
    ops.UmmaBlockScaled: umma_block_scaled,
}
