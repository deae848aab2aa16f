"""Lowering of the wgmma family (sm_90a): register-split, fences, async MMA into register fragments.

Sources: PTX ISA 8.8 "wgmma.mma_async" (m64nNk16 bf16, m64nNk32 e4m3, scale-d predicate, descriptor operands),
"wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "setmaxnreg".
"""

from __future__ import annotations

from ptxgen.ir import expr as ex
from ptxgen.ir import ops

from .core import Lowering


def set_max_nreg(lw: Lowering, op: ops.SetMaxNReg) -> None:
    lw.emit(f"setmaxnreg.{op.action}.sync.aligned.u32 {op.regs};")


def wgmma_fence(lw: Lowering, op: ops.WgmmaFence) -> None:
    lw.emit("wgmma.fence.sync.aligned;")


def wgmma(lw: Lowering, op: ops.Wgmma) -> None:
    """bf16: ``..., scale-d, 1, 1, tA, tB`` (scale A/B by +1; transpose immediates 1 for an MN-major operand);
    8-bit inputs take no transpose immediates (K-major only): ``..., scale-d, 1, 1``."""
    acc = lw.array(op.acc, op.n // 2, ".f32")
    p = lw.predicate(op.accumulate)
    adesc, bdesc = lw.tmp64(), lw.tmp64()
    lw.emit(f"mov.b64 {adesc}, {{{lw.reg(op.a_lo)}, {lw.reg_const(op.a_hi, 'desc_hi')}}};")
    lw.emit(f"mov.b64 {bdesc}, {{{lw.reg(op.b_lo)}, {lw.reg_const(op.b_hi, 'desc_hi')}}};")
    imm = f"1, 1, {int(op.trans_a)}, {int(op.trans_b)}" if op.atype in ("bf16", "f16") else "1, 1"
    lw.emit(f"wgmma.mma_async.sync.aligned.m64n{op.n}k{op.k}.f32.{op.atype}.{op.atype} {{{', '.join(acc)}}}, "
            f"{adesc}, {bdesc}, {p}, {imm};")


def scale_load(lw: Lowering, op: ops.ScaleLoad) -> None:
    """Scales from the stage (two scale_a rows, one scale_b), then their two products into ``dst``."""
    dst = lw.array(op.dst, 2, ".f32")
    sb = lw.tmp()
    lw.emit(f"ld.shared.f32 {dst[0]}, [{lw.smem(op.sa_addr)}];")
    lw.emit(f"ld.shared.f32 {dst[1]}, [{lw.smem(ex.fold(ex.lift(op.sa_addr) + op.row_half))}];")
    lw.emit(f"ld.shared.f32 {sb}, [{lw.smem(op.sb_addr)}];")
    lw.emit(f"mul.f32 {dst[0]}, {dst[0]}, {sb};")
    lw.emit(f"mul.f32 {dst[1]}, {dst[1]}, {sb};")


def promote_scaled(lw: Lowering, op: ops.PromoteScaled) -> None:
    """One FMA per partial value with its row's scale product (``mul`` on a tile's first k-block)."""
    acc = lw.array(op.acc, op.offset + op.n, ".f32")
    part = lw.array(op.part, op.n, ".f32")
    scales = lw.array(op.scales, 2, ".f32")
    for j in range(op.n):
        s, d = scales[(j // 2) & 1], acc[op.offset + j]
        if op.accumulate:
            lw.emit(f"fma.rn.f32 {d}, {part[j]}, {s}, {d};")
        else:
            lw.emit(f"mul.rn.f32 {d}, {part[j]}, {s};")


def wgmma_commit(lw: Lowering, op: ops.WgmmaCommit) -> None:
    lw.emit("wgmma.commit_group.sync.aligned;")


def wgmma_wait(lw: Lowering, op: ops.WgmmaWait) -> None:
    lw.emit(f"wgmma.wait_group.sync.aligned {op.n};")


WGMMA = {
    ops.SetMaxNReg: set_max_nreg,
    ops.WgmmaFence: wgmma_fence,
    ops.Wgmma: wgmma,
    ops.WgmmaCommit: wgmma_commit,
    ops.WgmmaWait: wgmma_wait,
    ops.ScaleLoad: scale_load,
    ops.PromoteScaled: promote_scaled,
}
