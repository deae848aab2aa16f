"""Reference tcgen05 GEMM kernels written with NVIDIA's CuTe DSL public API, compiled for sm_100a without a GPU.

Each reference is the smallest kernel that makes CuTe pick the constants ptxgen hard-codes: one tiled MMA atom
(``cute.nvgpu.tcgen05``), TMA load atoms for the K-major operands with CuTe's own 128B-swizzled shared-memory
layouts, a TMEM allocation sized by CuTe from the accumulator fragment (the block-scaled kernels take all
512 columns, as NVIDIA's block-scaled examples do) and a ``tcgen05.ld 32x32b.x32`` epilogue; the NVFP4 kernels
add the scale-factor atoms (smem -> TMEM by ``tcgen05.cp``) and the block-scaled MMA.  They are compiled,
never launched: ``cute.compile`` with ``--gpu-arch sm_100a --keep-ptx`` lowers to PTX through the wheel's own
NVVM and needs no driver.

Shapes (PTX ISA "tcgen05.mma", "Instruction descriptor"):

* ``bf16``: ``kind::f16`` with bf16 A/B and fp32 accumulate, K = 16 per MMA, a 64-element (128 B) K block;
  cta_group::1 M=128 or cta_group::2 M=256 (128 rows per CTA of the pair), N = 128 or 256.
* ``nvfp4``: ``kind::mxf4nvf4.block_scale.block16`` with packed e2m1 A/B and one ue4m3 scale per 16 K,
  K = 64 per MMA, a 256-element K block; M = 128 (cta_group::1) or 256 (cta_group::2), N = 128.
* ``mxfp8``: ``kind::mxf8f6f4.block_scale`` with e4m3 A/B and one ue8m0 scale per 32 K (``scale_vec::1X``),
  K = 32 per MMA, a 128-element K block; M = 128 or 256, N = 128.

Besides the PTX text, each reference reports what CuTe's layout algebra computed while tracing: TMA bytes per
operand and per CTA for one pipeline stage, the expect_tx byte count it arms, and the TMEM columns of one
accumulator tile.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Union

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.memory as memory
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as blockscaled_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.cute.runtime import make_fake_compact_tensor

THREADS = 128  # one warpgroup: warp 0 issues TMA and MMA, all four warps read TMEM (one 32-lane slice each)
STAGES = 2
SF_VEC = 16  # NVFP4: one ue4m3 scale per 16 K elements
SF_VECS = {"nvfp4": SF_VEC, "mxfp8": 32}  # K elements per scale: NVFP4 ue4m3 per 16, MXFP8 ue8m0 per 32


@dataclass(frozen=True)
class Reference:
    """One compiled reference kernel.

    operands: ``"bf16"``, ``"nvfp4"`` or ``"mxfp8"``; cta_group: 1 or 2; mma_m / mma_n: the MMA instruction shape (M counts
    both CTAs of a pair); ptx: the PTX text CuTe emitted; tx_bytes: TMA bytes per operand (``a``, ``b``,
    ``sfa``, ``sfb``) that ONE CTA receives per pipeline stage; expect_tx: the byte count CuTe's pipeline arms
    (for cta_group::2 the leader CTA arms it once for the pair); acc_tmem_cols: TMEM columns of one accumulator
    tile as CuTe computes them (``get_num_tmem_alloc_cols``).
    """

    operands: str
    cta_group: int
    mma_m: int
    mma_n: int
    ptx: str
    tx_bytes: dict = field(default_factory=dict)
    expect_tx: int = 0
    acc_tmem_cols: int = 0

    @property
    def name(self) -> str:
        return f"cute_{self.operands}_{self.cta_group}cta_{self.mma_m}x{self.mma_n}"


class _Gemm:
    """C[M,N] = A[M,K] @ B[N,K]^T, K-major A/B, one output tile per MMA tile, no persistence."""

    def __init__(self, operands: str, cta_group: int, mma_n: int, facts: dict):
        self.nvfp4 = operands in SF_VECS  # block-scaled (NVFP4 or MXFP8): scale atoms copied to TMEM
        self.sf_vec = SF_VECS.get(operands, SF_VEC)
        self.two_cta = cta_group == 2
        self.cta_group = tcgen05.CtaGroup.TWO if self.two_cta else tcgen05.CtaGroup.ONE
        self.cluster = (2, 1, 1) if self.two_cta else (1, 1, 1)
        self.mma_mn = (256 if self.two_cta else 128, mma_n)
        self.ab_dtype = {"nvfp4": cutlass.Float4E2M1FN, "mxfp8": cutlass.Float8E4M3FN}.get(operands, cutlass.BFloat16)
        self.sf_dtype = cutlass.Float8E8M0FNU if operands == "mxfp8" else cutlass.Float8E4M3FN
        self.facts = facts  # filled while tracing (plain Python ints from CuTe's static layouts)

    # ------------------------------------------------------------------ host side (traced once)

    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, sfa: cute.Tensor, sfb: cute.Tensor, c: cute.Tensor):
        if cutlass.const_expr(self.nvfp4):
            tiled_mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
                self.ab_dtype, self.ab_dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
                self.sf_dtype, self.sf_vec, self.cta_group, self.mma_mn)
            # the scale factors of B are partitioned as one CTA's worth of a 128-row atom (CuTe's SFB view)
            tiled_mma_sfb = sm100_utils.make_blockscaled_trivial_tiled_mma(
                self.ab_dtype, self.ab_dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
                self.sf_dtype, self.sf_vec, tcgen05.CtaGroup.ONE, (self.mma_mn[0] // cute.size(self.cluster), 128))
        else:
            tiled_mma = sm100_utils.make_trivial_tiled_mma(
                self.ab_dtype, self.ab_dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
                cutlass.Float32, self.cta_group, self.mma_mn)
            tiled_mma_sfb = tiled_mma
        k_block = cute.size(tiled_mma.shape_mnk, mode=[2]) * 4  # four MMAs per K block: 64 bf16 / 256 fp4 / 128 fp8
        tiler = (*self.mma_mn, k_block)
        tiler_sfb = (self.mma_mn[0] // cute.size(self.cluster), 128, k_block)
        vmnk = cute.tiled_divide(cute.make_layout(self.cluster), (tiled_mma.thr_id.shape,))
        vmnk_sfb = cute.tiled_divide(cute.make_layout(self.cluster), (tiled_mma_sfb.thr_id.shape,))

        a_layout = sm100_utils.make_smem_layout_a(tiled_mma, tiler, self.ab_dtype, STAGES)
        b_layout = sm100_utils.make_smem_layout_b(tiled_mma, tiler, self.ab_dtype, STAGES)
        a_one = cute.select(a_layout, mode=[0, 1, 2])
        b_one = cute.select(b_layout, mode=[0, 1, 2])
        a_op = sm100_utils.cluster_shape_to_tma_atom_A(self.cluster, tiled_mma.thr_id)
        b_op = sm100_utils.cluster_shape_to_tma_atom_B(self.cluster, tiled_mma.thr_id)
        tma_a, gA = cute.nvgpu.make_tiled_tma_atom_A(a_op, a, a_one, tiler, tiled_mma, vmnk.shape)
        tma_b, gB = cute.nvgpu.make_tiled_tma_atom_B(b_op, b, b_one, tiler, tiled_mma, vmnk.shape)
        self.facts["a"] = cute.size_in_bytes(self.ab_dtype, a_one)
        self.facts["b"] = cute.size_in_bytes(self.ab_dtype, b_one)

        sfa_layout, sfb_layout = a_layout, b_layout  # placeholders for bf16 (no scale factors)
        tma_sfa, gSFA, tma_sfb, gSFB = tma_a, gA, tma_b, gB
        if cutlass.const_expr(self.nvfp4):
            sfa_layout = blockscaled_utils.make_smem_layout_sfa(tiled_mma, tiler, self.sf_vec, STAGES)
            sfb_layout = blockscaled_utils.make_smem_layout_sfb(tiled_mma, tiler, self.sf_vec, STAGES)
            sfa_one = cute.slice_(sfa_layout, (None, None, None, 0))
            sfb_one = cute.slice_(sfb_layout, (None, None, None, 0))
            sfa_t = cute.make_tensor(sfa.iterator, blockscaled_utils.tile_atom_to_shape_SF(a.shape, self.sf_vec))
            sfb_t = cute.make_tensor(sfb.iterator, blockscaled_utils.tile_atom_to_shape_SF(b.shape, self.sf_vec))
            tma_sfa, gSFA = cute.nvgpu.make_tiled_tma_atom_A(
                a_op, sfa_t, sfa_one, tiler, tiled_mma, vmnk.shape, internal_type=cutlass.Int16)
            tma_sfb, gSFB = cute.nvgpu.make_tiled_tma_atom_B(
                sm100_utils.cluster_shape_to_tma_atom_SFB(self.cluster, tiled_mma.thr_id),
                sfb_t, sfb_one, tiler_sfb, tiled_mma_sfb, vmnk_sfb.shape, internal_type=cutlass.Int16)
            self.facts["sfa"] = cute.size_in_bytes(self.sf_dtype, sfa_one)
            self.facts["sfb"] = cute.size_in_bytes(self.sf_dtype, sfb_one)
        # the pipeline arms the bytes of every CTA of the MMA (the leader's barrier sees the pair's loads)
        self.facts["expect_tx"] = sum(self.facts[k] for k in ("a", "b", "sfa", "sfb") if k in self.facts) \
            * cute.size(tiled_mma.thr_id.shape)

        grid = cute.round_up(cute.ceil_div(c.layout.shape, (128, self.mma_mn[1], 1)), self.cluster)
        self.kernel(tiled_mma, tiled_mma_sfb, tma_a, gA, tma_b, gB, tma_sfa, gSFA, tma_sfb, gSFB, c,
                    a_layout, b_layout, sfa_layout, sfb_layout, vmnk, vmnk_sfb, tiler, tiler_sfb).launch(
            grid=grid, block=[THREADS, 1, 1], cluster=self.cluster)

    # ------------------------------------------------------------------ device side

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tiled_mma_sfb: cute.TiledMma,
               tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_sfa: cute.CopyAtom, mSFA: cute.Tensor, tma_sfb: cute.CopyAtom, mSFB: cute.Tensor,
               mC: cute.Tensor, a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
               sfa_layout: Union[cute.Layout, cute.ComposedLayout], sfb_layout: Union[cute.Layout, cute.ComposedLayout],
               vmnk: cute.Layout, vmnk_sfb: cute.Layout, tiler: cutlass.Constexpr, tiler_sfb: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, bidy, _ = cute.arch.block_idx()
        v = bidx % cute.size(tiled_mma.thr_id.shape)
        leader = v == 0
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cta_vmnk = vmnk.get_flat_coord(rank)
        cta_vmnk_sfb = vmnk_sfb.get_flat_coord(rank)
        tile_mnl = (bidx // cute.size(tiled_mma.thr_id.shape), bidy, 0)

        @cute.struct
        class Storage:
            ab_bar: cute.struct.MemRange[cutlass.Int64, STAGES * 2]
            acc_bar: cute.struct.MemRange[cutlass.Int64, 2]
            dealloc_bar: cutlass.Int64
            tmem_slot: cutlass.Int32

        smem = memory.SmemAllocator()
        st = smem.allocate(Storage)
        sA = smem.allocate_tensor(element_type=self.ab_dtype, layout=a_layout.outer, byte_alignment=128,
                                  swizzle=a_layout.inner)
        sB = smem.allocate_tensor(element_type=self.ab_dtype, layout=b_layout.outer, byte_alignment=128,
                                  swizzle=b_layout.inner)

        ab_prod, ab_cons = pipeline.PipelineTmaUmma.create(
            num_stages=STAGES, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            tx_count=self.facts["expect_tx"], barrier_storage=st.ab_bar.data_ptr(),
            cta_layout_vmnk=vmnk).make_participants()
        acc_prod, acc_cons = pipeline.PipelineUmmaAsync.create(
            num_stages=1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     THREADS * cute.size(tiled_mma.thr_id.shape)),
            barrier_storage=st.acc_bar.data_ptr(), cta_layout_vmnk=vmnk).make_participants()
        tmem = memory.TmemAllocator(st.tmem_slot.ptr,
                                   barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS),
                                   is_two_cta=self.two_cta, two_cta_tmem_dealloc_mbar_ptr=st.dealloc_bar.ptr)

        # global tiles -> MMA partitions -> TMA partitions (multicast modes have one CTA here)
        thr_mma = tiled_mma.get_slice(v)
        gA = cute.local_tile(mA, cute.slice_(tiler, (None, 0, None)), (None, None, None))
        gB = cute.local_tile(mB, cute.slice_(tiler, (0, None, None)), (None, None, None))
        gC = cute.local_tile(mC, cute.slice_(tiler, (None, None, 0)), (None, None, None))
        tCgA = thr_mma.partition_A(gA)
        tCgB = thr_mma.partition_B(gB)
        tCgC = thr_mma.partition_C(gC)[None, None, None, tile_mnl[0], tile_mnl[1], 0]
        tAsA, tAgA = cpasync.tma_partition(tma_a, cta_vmnk[2], cute.make_layout(cute.size(vmnk, mode=[2])),
                                           cute.group_modes(sA, 0, 3), cute.group_modes(tCgA, 0, 3))
        tBsB, tBgB = cpasync.tma_partition(tma_b, cta_vmnk[1], cute.make_layout(cute.size(vmnk, mode=[1])),
                                           cute.group_modes(sB, 0, 3), cute.group_modes(tCgB, 0, 3))
        tAgA = tAgA[None, tile_mnl[0], None, 0]
        tBgB = tBgB[None, tile_mnl[1], None, 0]
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        acc_fake = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C(cute.slice_(tiler, (None, None, 0))))
        acc_cols = memory.get_num_tmem_alloc_cols(acc_fake)
        self.facts["acc_tmem_cols"] = acc_cols

        tmem.allocate(512 if cutlass.const_expr(self.nvfp4) else acc_cols)
        tmem.wait_for_alloc()
        acc_ptr = tmem.retrieve_ptr(cutlass.Float32)
        tAcc = cute.make_tensor(acc_ptr, acc_fake.layout)

        if cutlass.const_expr(self.nvfp4):
            sSFA = smem.allocate_tensor(element_type=self.sf_dtype, layout=sfa_layout, byte_alignment=128)
            sSFB = smem.allocate_tensor(element_type=self.sf_dtype, layout=sfb_layout, byte_alignment=128)
            thr_mma_sfb = tiled_mma_sfb.get_slice(v)
            gSFA = cute.local_tile(mSFA, cute.slice_(tiler, (None, 0, None)), (None, None, None))
            gSFB = cute.local_tile(mSFB, cute.slice_(tiler_sfb, (0, None, None)), (None, None, None))
            tAsSFA, tAgSFA = cpasync.tma_partition(
                tma_sfa, cta_vmnk[2], cute.make_layout(cute.size(vmnk, mode=[2])),
                cute.group_modes(sSFA, 0, 3), cute.group_modes(thr_mma.partition_A(gSFA), 0, 3))
            tBsSFB, tBgSFB = cpasync.tma_partition(
                tma_sfb, cta_vmnk_sfb[1], cute.make_layout(cute.size(vmnk_sfb, mode=[1])),
                cute.group_modes(sSFB, 0, 3), cute.group_modes(thr_mma_sfb.partition_B(gSFB), 0, 3))
            tAsSFA = cute.filter_zeros(tAsSFA)
            tAgSFA = cute.filter_zeros(tAgSFA)[None, tile_mnl[0], None, 0]
            tBsSFB = cute.filter_zeros(tBsSFB)
            tBgSFB = cute.filter_zeros(tBgSFB)[None, tile_mnl[1], None, 0]
            sfb_mask = cpasync.create_tma_multicast_mask(vmnk_sfb, cta_vmnk_sfb, mcast_mode=1)
            # scale factors live in TMEM right after the accumulator: SFA, then SFB
            sfa_tmem = cute.make_tensor(
                cute.recast_ptr(acc_ptr + tcgen05.find_tmem_tensor_col_offset(tAcc), dtype=self.sf_dtype),
                blockscaled_utils.make_tmem_layout_sfa(tiled_mma, tiler, self.sf_vec,
                                                       cute.slice_(sfa_layout, (None, None, None, 0))))
            sfb_tmem = cute.make_tensor(
                cute.recast_ptr(acc_ptr + tcgen05.find_tmem_tensor_col_offset(tAcc)
                                + tcgen05.find_tmem_tensor_col_offset(sfa_tmem), dtype=self.sf_dtype),
                blockscaled_utils.make_tmem_layout_sfb(tiled_mma, tiler, self.sf_vec,
                                                       cute.slice_(sfb_layout, (None, None, None, 0))))
            s2t_atom = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(self.cta_group), self.sf_dtype)
            s2t_sfa = tcgen05.make_s2t_copy(s2t_atom, cute.filter_zeros(sfa_tmem))
            s2t_sfb = tcgen05.make_s2t_copy(s2t_atom, cute.filter_zeros(sfb_tmem))
            thr_s2t_sfa = s2t_sfa.get_slice(0)
            thr_s2t_sfb = s2t_sfb.get_slice(0)
            src_sfa = tcgen05.get_s2t_smem_desc_tensor(s2t_sfa, thr_s2t_sfa.partition_S(cute.filter_zeros(sSFA)))
            src_sfb = tcgen05.get_s2t_smem_desc_tensor(s2t_sfb, thr_s2t_sfb.partition_S(cute.filter_zeros(sSFB)))
            dst_sfa = thr_s2t_sfa.partition_D(cute.filter_zeros(sfa_tmem))
            dst_sfb = thr_s2t_sfb.partition_D(cute.filter_zeros(sfb_tmem))

        # epilogue view: one tcgen05.ld 32x32b.x32 per 32 accumulator columns
        epi = ((cute.size(tAcc, mode=[0, 0]), 32),)
        tAcc_epi = cute.zipped_divide(tAcc, epi)
        gC_epi = cute.zipped_divide(tCgC, epi)
        t2r = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32),
                                                         cutlass.Float32), tAcc_epi[None, 0])
        thr_t2r = t2r.get_slice(tidx)
        tDtC = thr_t2r.partition_S(tAcc_epi)
        tDgC = thr_t2r.partition_D(gC_epi)
        rAcc = cute.make_rmem_tensor(tDgC[None, None, 0].shape, cutlass.Float32)
        rC = cute.make_rmem_tensor(tDgC[None, None, 0].shape, mC.element_type)

        k_tiles = cute.size(gA, mode=[3])
        if warp == 0:
            if leader:
                acc_prod.acquire_and_advance()
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            for _ in cutlass.range(k_tiles):
                empty = ab_prod.acquire_and_advance()
                cute.copy(tma_a, tAgA[None, empty.count], tAsA[None, empty.index], tma_bar_ptr=empty.barrier)
                cute.copy(tma_b, tBgB[None, empty.count], tBsB[None, empty.index], tma_bar_ptr=empty.barrier)
                if cutlass.const_expr(self.nvfp4):
                    cute.copy(tma_sfa, tAgSFA[None, empty.count], tAsSFA[None, empty.index],
                              tma_bar_ptr=empty.barrier)
                    cute.copy(tma_sfb, tBgSFB[None, empty.count], tBsSFB[None, empty.index],
                              tma_bar_ptr=empty.barrier, mcast_mask=sfb_mask)
                if leader:
                    full = ab_cons.wait_and_advance()
                    if cutlass.const_expr(self.nvfp4):
                        cute.copy(s2t_sfa, src_sfa[None, None, None, None, full.index], dst_sfa)
                        cute.copy(s2t_sfb, src_sfb[None, None, None, None, full.index], dst_sfb)
                    for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                        if cutlass.const_expr(self.nvfp4):
                            tiled_mma.set(tcgen05.Field.SFA, sfa_tmem[None, None, kb].iterator)
                            tiled_mma.set(tcgen05.Field.SFB, sfb_tmem[None, None, kb].iterator)
                        cute.gemm(tiled_mma, tAcc, tCrA[None, None, kb, full.index],
                                  tCrB[None, None, kb, full.index], tAcc)
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                    full.release()
            if leader:
                acc_prod.commit()
        tmem.relinquish_alloc_permit()

        done = acc_cons.wait_and_advance()
        for i in cutlass.range(cute.size(tDtC, mode=[2])):
            cute.copy(t2r, tDtC[None, None, i], rAcc)
            rC.store(rAcc.load().to(mC.element_type))
            cute.autovec_copy(rC, tDgC[None, None, i])
        done.release()
        pipeline.sync(barrier_id=1)
        tmem.free(acc_ptr)


def compile_reference(operands: str, cta_group: int, mma_n: int) -> Reference:
    """Trace and compile one reference kernel for sm_100a; returns its PTX and the facts CuTe computed.

    operands: ``"bf16"``, ``"nvfp4"`` or ``"mxfp8"``; cta_group: 1 or 2; mma_n: 128 or 256 (block-scaled: 128).  No GPU or driver is
    needed.  Raises whatever the DSL raises on an unsupported shape.
    """
    facts: dict = {}
    gemm = _Gemm(operands, cta_group, mma_n, facts)
    m, n, k = 512, 512, 1024
    ab = gemm.ab_dtype
    a = make_fake_compact_tensor(ab, (m, k, 1), stride_order=(1, 0, 2), assumed_align=32)
    b = make_fake_compact_tensor(ab, (n, k, 1), stride_order=(1, 0, 2), assumed_align=32)
    sf = make_fake_compact_tensor(gemm.sf_dtype, (m * k // gemm.sf_vec,), assumed_align=32)
    c = make_fake_compact_tensor(cutlass.BFloat16, (m, n, 1), stride_order=(1, 0, 2), assumed_align=32)
    with tempfile.TemporaryDirectory(prefix="cute-ref-") as dump:  # --keep-ptx also writes the PTX to a file
        compiled = cute.compile(gemm, a, b, sf, sf, c, options=f"--gpu-arch sm_100a --keep-ptx --dump-dir={dump}")
        ptx = compiled.__ptx__
    tx = {k: facts[k] for k in ("a", "b", "sfa", "sfb") if k in facts}
    return Reference(operands, cta_group, gemm.mma_mn[0], mma_n, ptx, tx, facts["expect_tx"], facts["acc_tmem_cols"])
