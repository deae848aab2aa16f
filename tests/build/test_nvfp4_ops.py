"""NVFP4 leaf IR ops (TmemCopy, UmmaBlockScaled): lowering text, and ptxas + nvdisasm on a tiny sm_100a kernel.

The kernel is hand-built IR lowered by the real tcgen05 op table inside a literal PTX skeleton, so
the test proves the emitted syntax (and the descriptor constants of :mod:`ptxgen.descriptors`)
assemble with the wheel ptxas and become the block-scaled SASS opcodes:

* ``tcgen05.cp.cta_group::1.32x128b.warpx4`` -> ``UTCCP.T.S.4x32dp128bit`` (``UTCCP.T.S.2CTA...`` for cta_group::2)
* ``tcgen05.mma...kind::mxf4nvf4.block_scale.block16`` -> ``UTCOMMA.4X`` (``UTCOMMA.2CTA.4X``);
  ``.block32`` -> plain ``UTCOMMA`` (measured, ptxas 13.5).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from emitters import TABLES
from emitters.core import Lowering
from ptxgen.descriptors import (
    nvfp4_k_step_advance,
    nvfp4_operand_desc_hi,
    sf_copy_desc_hi,
    sf_copy_desc_lo,
    umma_idesc_mxf4nvf4,
)
from ptxgen.ir import expr as ex
from ptxgen.ir import ops

from tests.build.test_assemble import compile_test

TMEM_COLS = 512  # 2 x 128 accumulator columns + 3 x 16 scale-factor columns, rounded to a power of 2
SF_BASE = 256  # first scale-factor column (after two 128-column accumulators)


def _body(cta_group: int, m: int, n: int, scale_vec: str = "block16") -> tuple:
    """Alloc, one scale-factor copy per operand, 4 MMAs of one K=256 stage into two accumulators, commit, dealloc."""
    base = ex.Var("tmem")
    smem = ex.Sreg("smem")
    sfa, sfb1, sfb2 = SF_BASE, SF_BASE + 16, SF_BASE + 32
    idesc = umma_idesc_mxf4nvf4(m, n, scale_vec=scale_vec)
    hi = nvfp4_operand_desc_hi()
    body: list = [ops.TmemAlloc(cols=TMEM_COLS), ops.TmemBase(var="tmem")]
    # scale factors of one stage: SFA, SFB1, SFB2 atoms at smem 0x6000 + 512*i
    for i, col in enumerate((sfa, sfb1, sfb2)):
        for kk in range(4):
            body.append(ops.TmemCopy(taddr=base + col + 4 * kk,
                                     src_lo=(smem + 0x6000 + 512 * (4 * i + kk)) // 16 + sf_copy_desc_lo(0),
                                     desc_hi=sf_copy_desc_hi(), cta_group=cta_group))
    for acc, (b_off, sfb) in enumerate(((0x2000, sfb1), (0x4000, sfb2))):
        for kk in range(4):
            body.append(ops.UmmaBlockScaled(
                d=base + 128 * acc,
                a_lo=(smem + 0x0000) // 16 + nvfp4_k_step_advance() * kk,
                b_lo=(smem + b_off) // 16 + nvfp4_k_step_advance() * kk,
                sfa=base + sfa + 4 * kk, sfb=base + sfb + 4 * kk,
                accumulate=ex.Const(1 if kk else 0) if acc == 0 else ex.Param("k") if kk == 0 else 1,
                idesc=idesc, a_desc_hi=hi, b_desc_hi=hi, cta_group=cta_group, scale_vec=scale_vec))
    body += [ops.UmmaCommit(bar=ops.Bar("full", ex.Const(0))),
             ops.TmemDealloc(taddr=base, cols=TMEM_COLS)]
    return tuple(body)


def _plan(cta_group: int) -> SimpleNamespace:
    """The kernel fields the lowering reads (a stand-in for :class:`ptxgen.ir.Kernel`)."""
    full = SimpleNamespace(name="full", offset=0x7010)
    return SimpleNamespace(arch="sm_100a", cta_group=cta_group, tmem_slot=0x7000,
                           barrier=lambda name: {"full": full}[name])


def lower(cta_group: int = 1, m: int = 128, n: int = 128, scale_vec: str = "block16") -> str:
    """A whole PTX module: the lowered body inside a minimal entry (``k`` is an accumulate flag source)."""
    lw = Lowering(kernel=_plan(cta_group), table=TABLES["sm_100a"])
    lw.body(_body(cta_group, m, n, scale_vec))
    hoisted = sorted(lw.hoisted_names - lw.hoisted_pred)
    decls = [f".reg .b32 %{v};" for v in sorted(lw.vars) + hoisted] + [
        *(f".reg .pred %{v};" for v in sorted(lw.hoisted_pred)),
        ".reg .b32 %smem_base, %k;",
        f".reg .b32 %x<{lw.n_tmp + 1}>;", f".reg .b64 %xd<{lw.n_tmp64 + 1}>;", f".reg .pred %p<{lw.n_pred + 1}>;"]
    cluster = ".explicitcluster\n.reqnctapercluster 2, 1, 1\n" if cta_group == 2 else ""
    return "\n".join([
        ".version 8.8", ".target sm_100a", ".address_size 64",
        ".extern .shared .align 1024 .b8 smem[];",
        ".visible .entry nvfp4_leaf(.param .u32 k)", ".reqntid 128, 1, 1", cluster + "{",
        *("    " + d for d in decls),
        "    mov.u32 %smem_base, smem;", "    ld.param.u32 %k, [k];",
        *lw.hoisted_lines(), *lw.lines, "    ret;", "}", ""])


def test_lowering_text() -> None:
    ptx = lower()
    assert ptx.count("tcgen05.cp.cta_group::1.32x128b.warpx4 [") == 12
    assert ptx.count("tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 [") == 8
    assert "mov.u32 %idesc, 0x8200480;" in ptx  # idesc comes from the op (hoisted once)
    assert "0x4008;" in ptx and "0x40004040;" in ptx  # descriptor high words from the op
    ptx2 = lower(cta_group=2, m=256, n=256)
    assert "tcgen05.cp.cta_group::2.32x128b.warpx4" in ptx2 and "0x10400480;" in ptx2


def test_ops_describe_and_carry_constants() -> None:
    op = ops.UmmaBlockScaled(d=ex.Var("t"), a_lo=1, b_lo=2, sfa=3, sfb=4, accumulate=0, idesc=0x08200480,
                             a_desc_hi=0x40004040, b_desc_hi=0x40004040)
    assert "idesc=0x08200480" in op.describe() and "mxf4nvf4.block16" in op.describe()
    cp = ops.TmemCopy(taddr=ex.Var("t"), src_lo=5, desc_hi=0x4008)
    assert "32x128b.warpx4" in cp.describe() and "hi=0x4008" in cp.describe()
    # self-contained: lowering needs no plan field besides arch (sm_100a table) for these two ops
    lw = Lowering(kernel=SimpleNamespace(arch="sm_100a"), table=TABLES["sm_100a"])
    lw.body((cp, op))
    text = "\n".join(lw.lines)
    assert "tcgen05.cp.cta_group::1" in text and "tcgen05.mma.cta_group::1.kind::mxf4nvf4" in text


@compile_test
@pytest.mark.parametrize(("cta_group", "m", "n", "scale_vec", "mma_op", "cp_op"), [
    (1, 128, 128, "block16", "UTCOMMA.4X", "UTCCP.T.S.4x32dp128bit"),
    (2, 256, 256, "block16", "UTCOMMA.2CTA.4X", "UTCCP.T.S.2CTA.4x32dp128bit"),
    (1, 128, 128, "block32", "UTCOMMA", "UTCCP.T.S.4x32dp128bit"),
])
def test_assembles_to_block_scaled_sass(cta_group: int, m: int, n: int, scale_vec: str, mma_op: str,
                                        cp_op: str) -> None:
    from ptxgen.assemble import assemble

    res = assemble(lower(cta_group, m, n, scale_vec), "sm_100a", sass=True)
    assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0
    assert res.opcodes.get(mma_op) == 8, res.opcodes
    assert res.opcodes.get(cp_op) == 12, res.opcodes
    # planted bug: block32 must not produce the 4X (block16) opcode and vice versa
    assert ("UTCOMMA.4X" in res.opcodes) == (scale_vec == "block16" and cta_group == 1)


@compile_test
def test_ptx_version_requirement() -> None:
    """ptxas refuses .block16 below PTX 8.8: the emitter's header version must stay >= 8.8."""
    from emitters import PTX_ISA_VERSION
    from ptxgen.assemble import assemble
    from ptxgen.errors import AssembleError

    assert tuple(map(int, PTX_ISA_VERSION["sm_100a"].split("."))) >= (8, 8)
    with pytest.raises(AssembleError, match="8.8"):
        assemble(lower().replace(".version 8.8", ".version 8.7"), "sm_100a")
