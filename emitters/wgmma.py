"""Lowering of the wgmma family (sm_90a): register-split, fences, async MMA into register fragments.

Sources: PTX ISA 8.8 "wgmma.mma_async" (m64nNk16, scale-d predicate, descriptor operands),
"wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "setmaxnreg".
"""

from __future__ import annotations

from ptxgen.ir import ops

from .core import Lowering


def set_max_nreg(lw: Lowering, op: ops.SetMaxNReg) -> None:
    lw.emit(f"setmaxnreg.{op.action}.sync.aligned.u32 {op.regs};")


def wgmma_fence(lw: Lowering, op: ops.WgmmaFence) -> None:
    lw.emit("wgmma.fence.sync.aligned;")


def wgmma(lw: Lowering, op: ops.Wgmma) -> None:
    acc = lw.array(op.acc, op.n // 2, ".f32")
    p = lw.predicate(op.accumulate)
    adesc, bdesc = lw.tmp64(), lw.tmp64()
    lw.emit(f"mov.b64 {adesc}, {{{lw.reg(op.a_lo)}, {lw.reg_const(op.a_hi, 'desc_hi')}}};")
    lw.emit(f"mov.b64 {bdesc}, {{{lw.reg(op.b_lo)}, {lw.reg_const(op.b_hi, 'desc_hi')}}};")
    lw.emit(f"wgmma.mma_async.sync.aligned.m64n{op.n}k16.f32.bf16.bf16 {{{', '.join(acc)}}}, "
            f"{adesc}, {bdesc}, {p}, 1, 1, 0, 0;")


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
}
