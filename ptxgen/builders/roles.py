"""Warp roles over the plan: TMA producer, UMMA issuer, TMEM epilogue (sm_100a), wgmma consumer (sm_90a).

Each role reads its numbers from the plan and speaks to the others only
through the plan's pipelines (``plan.ab``: operand stages, ``plan.acc``: TMEM
accumulator stages, ``plan.cd_ring``: epilogue staging buffers).  An extra
operand is one more entry in ``plan.loads.operands`` (one more TMA load per stage),
an extra accumulator one more entry in ``plan.mma.streams`` (one more MMA stream), an
epilogue op one more step in :class:`Epilogue` — no role is copied.  NVFP4
(seed 003) is such a plan: its scale-factor tiles are operands too (loaded into
the same stage behind the same ``full`` barrier), the MMA issuer copies them
to TMEM (``tcgen05.cp``) before the block-scaled MMAs that read them, and the
epilogue stores fp16.  FP8 (``plan.promotion``) is another: its per-block scale
vectors are operands of the same stage, and the sm_90a consumer runs each
k-block's e4m3 wgmmas into a block partial that it promotes into the main
accumulator with the scales (:meth:`WgmmaConsumer.promoted_kblock`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import epi
from ..config import FP8_SCALE_BLOCK, MN_MAJOR_CHUNK
from ..ir import (AmaxLocal, AmaxReduce, Bar, Const, Elect, EpilogueExpr, LdEpilogue, StEpilogue, Expr, FenceProxyAsync, For, If, AtomGlobalAdd, LdGlobalF32, Let,
                  MbarrierArrive, MbarrierWait, NamedBarrier, NamedBarrierPopc, Nanosleep, Pack16, Param, PromoteScaled, ScaleLoad, SetMaxNReg,
                  Shfl, VoteAny,
                  StGlobal16, StGlobalF32, StGlobalU32, StMatrix, StShared16, TcgenFence, TmaLoad, TmaStore,
                  TmemCopy, TmemLoad, TmemWaitLd, Umma, UmmaBlockScaled, Var, Wgmma, WgmmaCommit, WgmmaFence,
                  WaitRole, WgmmaWait, eq, fold, land, lift, lt, ne, select)
from ..ir.pipeline import PipelineState
from ..plan import Plan
from . import grouped
from .staged import staged_box, staged_prefetch, staged_refill
from .common import (KB, LANE, TMEM, WARP, Cluster, TileScheduler, acc_state, desc_lo, k_bounds, k_loop, ring_iteration,
                     ring_state, stage_offset)

EPI_BAR_ID = 1  # named barrier of the epilogue threads (sm_90a: 1 + consumer warpgroup)
SCALES = "sc"  # FP8: the register arrays of a promotion's two scale products (a ScaleLoad)
PARTIAL = "part"  # FP8: the register array of a k-block's wgmma partial (one m64 x chunk_n fragment)
CHUNK_VALUES = 8  # bf16 / f16 values of one 16-byte store


@dataclass(frozen=True)
class StoredTile:
    """What an sm_90a fragment store reads: register arrays ``{array}{wave}`` (f32, or bf16 words when
    ``packed``), the tile's origin in D (``m_row``, ``n_col``) and its CTA tile count (the CD ring position)."""

    array: str
    packed: bool
    m_row: Expr
    n_col: Expr
    count: Expr


#: the current tile's f32 accumulators
CURRENT_TILE = StoredTile("acc", False, Var("m_row"), Var("n_col"), Var("tc"))
#: the overlapped epilogue's previous tile: packed words, its origin kept in ``m_prev``/``n_prev``
PREVIOUS_TILE = StoredTile("pk", True, Var("m_prev"), Var("n_prev"), Var("tc") - 1)


def relay(plan: Plan, cluster: Cluster) -> bool:
    """Level 1's ``full`` relay: a CTA pair without 2-SM TMA; the peer forwards its landed stage to the leader."""
    return plan.is_sm100 and cluster.size == 2 and not plan.loads.two_sm


class TmaProducer:
    """One k-block of the TMA producer: producer_acquire, producer_commit (expect_tx), one load per operand."""

    def __init__(self, plan: Plan, cluster: Cluster):
        self.p, self.c = plan, cluster

    def kblock(self) -> list:
        p, c = self.p, self.c
        lets, st = ring_state(p)
        out = [*lets, *p.ab.producer_acquire(st)]
        tx = p.loads.expect_tx_bytes  # what lands in this CTA's stage: its loads and the peer's multicast halves
        if p.is_sm100 and p.loads.two_sm:  # both CTAs' loads complete on the leader's barrier
            out.append(If(c.is_leader, tuple(p.ab.producer_commit(st, tx_bytes=tx)),
                          tuple(p.ab.producer_commit(st, tx_bytes=tx, cta=Const(0)))))
        else:
            out += p.ab.producer_commit(st, tx_bytes=tx if p.is_sm100 else None)
        for o in p.loads.operands:
            out += self.mn_major_loads(o, st) if o.major == "mn" else [self.load(o, st)]
        if relay(p, c):  # level 1: the peer relays its landed stage to the leader
            # the leader's MMA then reads this CTA's shared memory, a cross-CTA data hand-off: the relay arrive
            # releases at cluster scope and the leader acquires at cluster scope (PTX ISA "Memory Consistency Model")
            out.append(If(ne(c.rank, 0), (*p.ab.consumer_wait(st, role=WaitRole.RELAY_WAIT),
                                          *p.ab.relay(st, cta=Const(0), scope="cluster"))))
        return out

    def tail(self, sched: TileScheduler) -> list:
        """CUTLASS's producer_tail: after its last tile the producer waits each ``empty`` stage's final phase.

        The last ``tcgen05.commit`` of each stage arrives on ``empty`` asynchronously (on
        both CTAs' barriers with cta_group::2); without these waits a CTA may exit, and the pair pass the
        final cluster barrier, with that arrive still pending.  The ring continues for ``stages`` more
        iterations past ``it_end`` (this CTA's tiles x num_k) with producer_acquire waits only: at most
        ``stages`` waits; a stage never filled passes at once (parity 1 on a fresh barrier).
        """
        p = self.p
        lets, st = p.ab.state(Var("it"))
        return [Let("tiles_done", sched.tiles_done()),
                Let("it_end", Var("tiles_done") * Var("num_k")),
                For("i", Const(0), Const(p.stages), Const(1),
                    (Let("it", Var("it_end") + Var("i")), *lets, *p.ab.producer_acquire(st, role=WaitRole.PRODUCER_TAIL)))]

    def mn_major_loads(self, o, st: PipelineState) -> list:
        """An MN-major operand's k-block: one box per ``MN_MAJOR_CHUNK`` of this CTA's rows (its multicast half in a
        pair), each ``MN_MAJOR_CHUNK`` M or N elements (the map's columns) x block_k K rows (its rows), landing as a
        column of 128B-swizzle atoms ``mn_chunk_bytes`` apart in the slot: the layout the MN-major descriptor's
        LBO steps through (PTX ISA "Matrix Descriptor Format").

        A grouped kernel's B map is the ``[G x K, N]`` stack of the groups' ``[K, N]`` views: the tile's K rows start
        at the group's first (:func:`ptxgen.builders.grouped.b_k_row`); a contiguous pair whose m-blocks are of two
        groups loads its own group's whole tile, unicast, as :meth:`load` does."""
        p, c = self.p, self.c
        first = Var("m_row") if o.rows_along == "m" else Var("n_col")
        k_row = KB * p.mma.block_k
        if o.rows_along == "n" and p.schedule.grouped != "none":
            k_row = grouped.b_k_row(p) + k_row
        dst = stage_offset(p, o.name, st.index)
        chunk, full = p.mma.mn_chunk_bytes, Bar(p.ab.full.name, st.index)

        def boxes(first: Expr, dst: Expr, count: int, multicast: int) -> list:
            return [TmaLoad(o.name, fold(dst + j * chunk), fold(first + j * MN_MAJOR_CHUNK), fold(k_row), full,
                            multicast=multicast, cache_hint=o.cache_hint) for j in range(count)]

        count = o.box_rows // MN_MAJOR_CHUNK
        if o.split != "multicast":
            return boxes(first, dst, count, 0)
        half = c.half(o.rows_along)  # a pair's: a 2x2 square takes K-major operands only (a config rule)
        shared = boxes(first + half * o.box_rows, dst + half * o.load_bytes, count, o.multicast)
        b_shared = grouped.b_shared(p) if o.rows_along == "n" else None
        return shared if b_shared is None else [If(b_shared, tuple(shared), tuple(boxes(first, dst, 2 * count, 0)))]

    def load(self, o, st: PipelineState) -> TmaLoad | If:
        p, c = self.p, self.c
        col = KB * p.loads.k_coord_step
        dst = stage_offset(p, o.name, st.index)
        full = Bar(p.ab.full.name, st.index)
        if o.block_scale:  # FP8 scales, transposed [k-blocks, rows]: this k-block's row, the tile's first scale
            pr = p.promotion  # (scale_b: the 16-byte box holding the tile's blocks, at a 16-byte aligned column)
            if p.schedule.grouped != "none":  # the grouped scheduler's columns (ptxgen.builders.grouped)
                first = Var("sa_col") if o.block_scale == "a" else Var("sb_col")
            else:
                first = Var("m_row") if o.block_scale == "a" else Var("n_col") // (pr.b_block_rows * pr.sb_box) * pr.sb_box
            return TmaLoad(o.name, dst, first, KB, full)
        if o.scales:  # 128-byte lines of the blocked scales: row block (m_row or n_col) / 128, then this k-block's atoms
            block = (Var("m_row") if o.rows_along == "m" else Var("n_col")) // p.scales.rows_per_atom
            row = block * (Param("k") // p.scales.k_per_line) + KB * p.scales.stage_lines
            if o.split == "multicast":  # this CTA's half of the lines, to the same place in both CTAs' stage
                half = c.half(o.rows_along)
                row, dst = row + half * o.box_rows, dst + half * o.load_bytes
            return TmaLoad(o.name, fold(dst), Const(0), fold(row), full, two_sm=p.is_sm100 and p.loads.two_sm,
                           multicast=o.multicast)
        row = Var("m_row") if o.rows_along == "m" else grouped.b_row(p)
        half = c.half(o.rows_along)
        if o.split != "none":  # this CTA's half of the rows (a cta_group::2 half of B, a cluster's multicast half)
            row = row + half * o.box_rows
        if o.split == "multicast":
            loads = [(cond, TmaLoad(o.name, fold(dst + half * o.load_bytes), col, fold(row), full, multicast=mask,
                                    cache_hint=o.cache_hint))
                     for cond, mask in c.multicast_masks(o.rows_along, o.multicast)]
            shared = loads[0][1] if len(loads) == 1 else If(loads[0][0], (loads[0][1],), (loads[1][1],))
            b_shared = grouped.b_shared(p)
            if b_shared is None:
                return shared
            # a grouped pair whose m-blocks are of two groups: each CTA loads both halves of its own group's B
            # k-block, no multicast; its stage receives the same bytes (the expect-tx of producer_commit)
            own = tuple(TmaLoad(o.name, fold(dst + h * o.load_bytes), col, fold(grouped.b_row(p) + h * o.box_rows),
                                full, cache_hint=o.cache_hint) for h in (0, 1))
            return If(b_shared, (shared,), own)
        return TmaLoad(o.name, dst, col, row, full, two_sm=p.is_sm100 and p.loads.two_sm, cache_hint=o.cache_hint)


class UmmaIssuer:
    """sm_100a MMA issuer: per tile acquire an accumulator stage; per k-block wait ``full``, issue, release by commit."""

    def __init__(self, plan: Plan, cluster: Cluster):
        self.p, self.c = plan, cluster

    def lockstep_guard(self, body: list) -> list:
        """In a lockstep mainloop warp, MMA work runs on the leader CTA only (cta_group::2)."""
        if self.p.roles.lockstep and self.c.size == 2:
            return [If(self.c.is_leader, tuple(body))]
        return body

    def tile_head(self) -> list:
        """Before a tile's first k-block: producer_acquire of the accumulator stage (from the epilogue)."""
        lets, st = acc_state(self.p)
        return self.lockstep_guard([*lets, *self.p.acc.producer_acquire(st), TcgenFence("after")])

    def lane_descriptors(self) -> list:
        """mma.lanes=all: lane i holds stage i's descriptor low word of every operand (shared by shfl)."""
        p = self.p
        return [Let(f"{o.name}_desc_lane", desc_lo(p, stage_offset(p, o.name, LANE % p.stages)))
                for o in p.loads.matrix_operands]

    def scale_copies(self, st: PipelineState) -> list:
        """Block-scaled: ``tcgen05.cp`` of each scale tile's atoms (NVFP4: one per K=64 MMA; MXFP8: one per stage) from
        the landed stage into TMEM.

        Issued by the MMA thread after its consumer_wait on ``full`` (+ ``tcgen05.fence::after_thread_sync``) and
        before the MMAs that read them: tcgen05.cp and tcgen05.mma of one thread execute in issue order on the
        tensor pipe (PTX ISA "tcgen05 memory consistency model: pipelined instruction pairs", tcgen05.cp ->
        tcgen05.mma), so no wait sits between them; the k-block's commit to ``empty`` covers both.
        """
        p = self.p
        return [TmemCopy(fold(TMEM + (s.tmem_col + j * p.scales.cols_per_atom)),
                         desc_lo(p, fold(stage_offset(p, s.name, st.index) + j * p.scales.atom_bytes), p.scales.lbo_field),
                         s.desc_hi, p.roles.cta_group)
                for s in p.loads.scale_operands for j in range(p.scales.atoms)]

    def mma(self, mma, d: Expr, a_lo: Expr, b_lo: Expr, ks: int, accumulate: Expr):
        """One MMA of stream ``mma`` at k-step ``ks``: ``tcgen05.mma .kind::f16``, or block-scaled when it has scales."""
        p = self.p
        a, b = p.loads.operand(mma.a), p.loads.operand(mma.b)
        if not mma.sfa:
            return Umma(d, a_lo, b_lo, accumulate, idesc=p.mma.idesc, a_hi=a.desc_hi, b_hi=b.desc_hi)
        col = p.scales.steps[ks][0]  # this k-step's scale columns; its byte (scale-factor ID) is in step_idesc
        sf = {nm: fold(TMEM + (p.loads.operand(nm).tmem_col + col)) for nm in (mma.sfa, mma.sfb)}
        idesc = p.mma.step_idesc[ks] if p.mma.step_idesc else p.mma.idesc
        return UmmaBlockScaled(d, a_lo, b_lo, sf[mma.sfa], sf[mma.sfb], accumulate, idesc, a.desc_hi, b.desc_hi,
                               p.roles.cta_group, kind=p.scales.kind, scale_vec=p.scales.vec, collector=mma.collector)

    def kblock(self) -> list:
        """consumer_wait on ``full``, scale copies (NVFP4), the MMAs of every stream, M-wave and k-step, consumer_release by commit."""
        p = self.p
        lets, st = ring_state(p)
        if p.roles.mma_all_lanes:
            lo = {o.name: Var(f"{o.name}_lo") for o in p.loads.matrix_operands}
            descs = [Shfl(f"{o.name}_lo", f"{o.name}_desc_lane", st.index) for o in p.loads.matrix_operands]
        else:
            lo = {o.name: desc_lo(p, stage_offset(p, o.name, st.index)) for o in p.loads.matrix_operands}
            descs = []
        issue = self.scale_copies(st)
        for w in range(p.mma.m_waves):
            for ks in range(p.mma.k_steps):
                accumulate = Const(1) if ks else ne(KB, 0)
                for mma in p.mma.streams:
                    d = fold(TMEM + Var("acc") * p.tmem.acc_stage_cols + p.tmem.acc_col(mma.acc, w))
                    issue.append(self.mma(mma, d, fold(lo[mma.a] + (w * p.mma.wave_desc + ks * p.mma.k_step_desc)),
                                          fold(lo[mma.b] + ks * p.mma.k_step_desc), ks, accumulate))
        acc = PipelineState(Var("acc"), Var("acc_phase"))
        issue += [*p.ab.consumer_release(st), If(eq(KB, Var("num_k") - 1), tuple(p.acc.producer_commit(acc)))]
        if p.mma.throttle_ns:
            issue.append(Nanosleep(p.mma.throttle_ns))
        # with the level-1 relay, full[] completes on the peer's release.cluster arrive: acquire at cluster scope
        body = [*p.ab.consumer_wait(st, scope="cluster" if relay(p, self.c) else "cta"), TcgenFence("after"), *descs]
        body += [Elect(tuple(issue))] if p.roles.mma_all_lanes else issue
        if p.roles.lockstep:
            return self.lockstep_guard(body)  # the producer half of the k-block already bound it/stage/phase
        return lets + body


class Epilogue:
    """Accumulators -> D: the TMEM epilogue (sm_100a) and the fragment stores (sm_90a), with their staging ring."""

    def __init__(self, plan: Plan, cluster: Cluster):
        self.p, self.c = plan, cluster

    # -------------------------------------------------------------- sm_100a

    def tmem_tile(self) -> list:
        """consumer_wait ``tmem_full``, read TMEM in 32x32b pieces, store D, consumer_release ``tmem_empty``.

        TMA-store configs need ``n % plan.epilogue.store_n_multiple == 0`` here (launch ``n_multiple``); the sm_90a
        epilogue instead falls back to direct stores in-kernel (duplicating this epilogue made ptxas spill).
        """
        p = self.p
        lets, st = acc_state(p)
        head = [*lets, *p.acc.consumer_wait(st), TcgenFence("after"), Let("erow", (WARP % 4) * 32 + LANE)]
        body = self.tmem_store(tma=p.epilogue.tma_store)
        return head + body + ([] if p.epilogue.early_release else self.release_tmem(st))

    def tmem_store(self, tma: bool) -> list:
        p, e = self.p, self.p.epilogue
        erow = Var("erow")
        out = []
        lane_field = ((WARP % 4) * 32) << 16
        ld = e.tmem_ld_cols
        st = PipelineState(Var("acc"), Var("acc_phase"))
        for w in range(p.mma.m_waves):
            for c in range(e.stores_per_wave):
                last_read = w == p.mma.m_waves - 1 and c == e.stores_per_wave - 1
                seq = w * e.stores_per_wave + c
                if tma:
                    out += self.cd_acquire(group=None)
                for j in range(e.loads_per_box):
                    col0 = p.tmem.acc_col(0, w) + c * e.store_block_n + j * ld
                    base = fold(TMEM + lane_field + Var("acc") * p.tmem.acc_stage_cols + col0)
                    out.append(TmemLoad("v", base, ld))
                    if e.second_acc:  # the second accumulator, acc_cols further on
                        out.append(TmemLoad("u", fold(base + p.tmem.acc_cols), ld))
                    out.append(TmemWaitLd())
                    if last_read and j == e.loads_per_box - 1 and e.early_release:
                        out += self.release_tmem(st)
                    out += self.fuse("v", "u", ld)
                    for q in range(e.chunks_per_load):  # one 16-byte store of 8 values each
                        idx = tuple(range(q * CHUNK_VALUES, (q + 1) * CHUNK_VALUES))
                        chunk = j * e.chunks_per_load + q  # 16-byte chunk of the box row (staging rows hold one box)
                        if tma:
                            out.append(StShared16(self.cd_addr(self.cd_buffer(seq, None), erow, chunk), "v",
                                                    idx, e.out_dtype))
                        else:
                            col = c * e.store_block_n + chunk * CHUNK_VALUES
                            out.append(StGlobal16(Var("m_row") + (w * p.mma.wave_rows) + erow, Var("n_col") + col, "v", idx,
                                                    e.out_dtype))
                if tma:
                    out += self.cd_commit(Var("n_col") + c * e.store_block_n, Var("m_row") + w * p.mma.wave_rows, seq, group=None)
        return out

    def fuse(self, acc: str, other: str, n: int) -> list:
        """The epilogue expression on ``n`` values of the per-thread accumulator ``acc`` (``other``: the second one),
        written back into ``acc``: one :class:`~ptxgen.ir.EpilogueExpr` over the arrays (no operands to load)."""
        e = self.p.epilogue
        if e.expr is None:
            return []
        idx = tuple(range(n))
        arrays = {"acc": acc, "acc1": acc, "acc2": other}
        return [EpilogueExpr(acc, idx, epi.bind(e.expr, lambda x: self.leaf(x, arrays, idx, None)))]

    def leaf(self, x, arrays: dict, idx: tuple, row_idx: tuple | None):
        """The bound form of leaf ``x``: an accumulator's values ``idx``, an operand's loaded values (by the axis the
        kernel reads it along, :attr:`ptxgen.plan.EpilogueOperand.along`: a swap-AB kernel's ``bias[col]`` is one
        value per accumulator row), a scalar's parameter, or a number."""
        if isinstance(x, epi.Acc):
            return epi.Reg(arrays[x.name], idx)
        if isinstance(x, epi.Operand):
            if x.along == "scalar":
                return epi.ParamLeaf(f"epi_{x.name}")
            along = next(o.along for o in self.p.epilogue.operands if o.name == x.name)
            return epi.Reg(f"ep_{x.name}", row_idx if along == "row" else tuple(range(len(idx))))
        return x

    def fragment_coords(self, t: StoredTile, wg: Expr, v: int, i: int) -> tuple[Expr, Expr]:
        """(row, col) in D of wgmma fragment value ``i`` (and ``i + 1``, the next column) of wave ``v``: lane l of warp
        w holds row 16*(w%4) + l/4 + 8*((i/2)&1), col 8*(i/4) + 2*(l%4) + (i&1) (PTX ISA "wgmma register fragments")."""
        p = self.p
        row0 = t.m_row + wg * p.mma.wg_row_stride
        frag_row = (WARP % 4) * 16 + LANE // 4
        return (fold(row0 + v * p.mma.wave_rows + frag_row + 8 * ((i // 2) & 1)),
                fold(t.n_col + 8 * (i // 4) + (LANE % 4) * 2))

    def fragment_fuse(self, wg: Expr, v: int, guard: bool = True) -> list:
        """sm_90a: the epilogue expression on wave ``v``'s fragments (``acc{v}``, the second accumulator ``acc1_{v}``).

        Without operands: :meth:`fuse` over the whole arrays.  With operands: per fragment pair (values i, i+1: one
        row, two columns) the pair's operand values are loaded (:class:`~ptxgen.ir.LdEpilogue`, guarded by the
        pair's row and columns against M and N as the direct store is), then the expression runs on the pair.
        """
        p = self.p
        e = p.epilogue
        acc, other = f"acc{v}", f"acc1_{v}"
        if not e.pairwise:
            return self.fuse(acc, other, p.mma.fragment_regs)
        out = []
        arrays = {"acc": acc, "acc1": acc, "acc2": other}
        by_name = {o.name: o for o in e.outputs}
        taps = epi.taps(e.expr)
        e4m3 = e.out_dtype == "e4m3"
        blocks = e.scale_blocks if e.block_scale else 0
        for t in taps:  # running maxima start at 0 (|x| >= 0): slot = the pair's row half (one slot per tensor)
            if t.kind == "amax":
                out.append(EpilogueExpr(f"ep_am_{t.name}", (0, 1), epi.Num(0.0)))
        if blocks:
            out.append(EpilogueExpr("ep_bam", tuple(range(2 * blocks)), epi.Num(0.0)))
        for i in range(0, p.mma.fragment_regs, 2):
            row, col = self.fragment_coords(CURRENT_TILE, wg, v, i)
            half = (i // 2) & 1  # the pair's row: the thread's first (0) or second (1, 8 rows down)
            out += self.operand_loads(row, col, i, half, guard)
            idx = (i, i + 1)

            def leaf(x, idx=idx, half=half):
                if isinstance(x, epi.Tap):  # computed into its pair array before the expressions around it
                    return epi.Reg(f"ep_t_{x.name}", (0, 1))
                return self.leaf(x, arrays, idx, (half, half))

            for t in taps:
                out.append(EpilogueExpr(f"ep_t_{t.name}", (0, 1), epi.bind(t.arg, leaf)))
                if t.kind == "store":
                    out.append(StEpilogue(by_name[t.name].param, "tile", by_name[t.name].fmt, row, col,
                                          f"ep_t_{t.name}", (0, 1)))
                else:
                    out.append(AmaxLocal(f"ep_am_{t.name}", half if t.along == "row" else 0, f"ep_t_{t.name}",
                                         (0, 1), row, col, (0, 1)))
            out.append(EpilogueExpr(acc, idx, epi.bind(e.expr, leaf)))
            if blocks:
                b = 8 * (i // 4) // FP8_SCALE_BLOCK
                out.append(AmaxLocal("ep_bam", half * blocks + b, acc, idx, row, col, (0, 1)))
            elif e4m3 and not e.tma_store:  # else staged by fragment_store
                out.append(StEpilogue("d_ptr", "tile", "e4m3", row, col, acc, idx))
        out += self.output_reductions(wg, v, taps, by_name)
        if blocks:
            out += self.block_scaled_store(wg, v, acc, blocks)
        return out

    def operand_loads(self, row: Expr, col: Expr, i: int, half: int, guard: bool, skip: str | None = None) -> list:
        """The operand loads before fragment pair ``i`` (at ``row``, ``col``; ``half``: its row half), but ``skip``'s:
        a row vector's two values once per wave, a column vector's pair once per 8 columns, a tile's (``tile`` or
        a swap-AB kernel's transposed ``tile_t``) every pair."""
        out = []
        for o in self.p.epilogue.operands:
            if o.name == skip:
                continue
            if o.along == "row" and i < 4:
                out.append(LdEpilogue(f"ep_{o.name}", o.param, "row", o.dtype, row, col, (half,), guard))
            elif o.along in ("tile", "tile_t") or (o.along == "col" and not half):
                out.append(LdEpilogue(f"ep_{o.name}", o.param, o.along, o.dtype, row, col, (0, 1), guard))
        return out

    def output_reductions(self, wg: Expr, v: int, taps: tuple, by_name: dict) -> list:
        """After a wave's pairs: each amax tap's running maxima reduced over the quad (row) or the warp (tensor),
        then one ``red.global.max`` per row (quad leader) or per warp (lane 0)."""
        out = []
        for t in taps:
            if t.kind != "amax":
                continue
            reg, param = f"ep_am_{t.name}", by_name[t.name].param
            if t.along == "row":
                out.append(AmaxReduce(reg, (0, 1), 4))
                for h in (0, 1):
                    row, col = self.fragment_coords(CURRENT_TILE, wg, v, 2 * h)
                    out.append(StEpilogue(param, "row_max", "f32", row, col, reg, (h,)))
            else:
                out.append(AmaxReduce(reg, (0,), 32))
                row, col = self.fragment_coords(CURRENT_TILE, wg, v, 0)
                out.append(StEpilogue(param, "tensor_max", "f32", row, col, reg, (0,)))
        return out

    def block_scaled_store(self, wg: Expr, v: int, acc: str, blocks: int) -> list:
        """The e4m3 D of a wave with 1 x 128 block scales: per row half and block, the quad's amax -> scale =
        ``block_scale(amax)`` (stored by the quad leader) and its reciprocal; each pair times the reciprocal, stored
        as e4m3 (with ``epilogue.tma_store`` staged afterwards by :meth:`fragment_store`)."""
        p, e = self.p, self.p.epilogue
        slots = tuple(range(2 * blocks))
        out = [AmaxReduce("ep_bam", slots, 4),
               EpilogueExpr("ep_bsc", slots, epi.Call("block_scale", (epi.Reg("ep_bam", slots),))),
               EpilogueExpr("ep_binv", slots, epi.Call("rcp", (epi.Reg("ep_bsc", slots),)))]
        for h in (0, 1):
            row, _ = self.fragment_coords(CURRENT_TILE, wg, v, 2 * h)
            for b in range(blocks):
                out.append(StEpilogue(e.block_scale.param, "block", "f32", row,
                                      fold(CURRENT_TILE.n_col + b * FP8_SCALE_BLOCK), "ep_bsc", (h * blocks + b,)))
        for i in range(0, p.mma.fragment_regs, 2):
            row, col = self.fragment_coords(CURRENT_TILE, wg, v, i)
            slot = ((i // 2) & 1) * blocks + 8 * (i // 4) // FP8_SCALE_BLOCK
            idx = (i, i + 1)
            out.append(EpilogueExpr(acc, idx, epi.Reg(acc, idx) * epi.Reg("ep_binv", (slot, slot))))
            if not e.tma_store:
                out.append(StEpilogue("d_ptr", "tile", "e4m3", row, col, acc, idx))
        return out

    def release_tmem(self, st: PipelineState) -> list:
        """consumer_release of the accumulator stage: fence, then per-thread or one elected arrive (leader's barrier)."""
        p = self.p
        ctas = (Const(0),) if self.c.size == 2 else (None,)
        if p.epilogue.release_per_thread:
            return [TcgenFence("before"), *p.acc.consumer_release(st, ctas=ctas)]
        return [TcgenFence("before"), NamedBarrier(Const(EPI_BAR_ID + 1), p.epilogue.threads),
                If(eq(WARP, p.roles.epilogue_warp0), (Elect(tuple(p.acc.consumer_release(st, ctas=ctas))),))]

    # -------------------------------------------------------------- sm_90a

    def fragment_store(self, wg: Expr, tma: bool, tile: StoredTile | None = None) -> list:
        """Fragments -> bf16 -> D: direct st.global, or staging (st.shared, or stmatrix with ``epilogue.stmatrix``)
        + one TMA store per box.  An e4m3 D (the fused epilogue left its f32 values in the fragments) is staged
        by :meth:`e4m3_box` with ``epilogue.tma_store``, stored per pair in the direct branch.

        ``tile``: which registers hold the tile and where it goes (default: the f32 accumulators of the
        current tile, :data:`CURRENT_TILE`).
        """
        p, e = self.p, self.p.epilogue
        if e.out_dtype == "e4m3" and not e.tma_store:
            return []  # stored per pair by the fused epilogue (fragment_fuse)
        t = tile or CURRENT_TILE
        out = []
        # wgmma m64nN fragment of lane l, warp w, value i: row 16*(w%4) + l/4 + 8*((i/2)&1), col 8*(i/4) + 2*(l%4) + (i&1)
        frag_row = (WARP % 4) * 16 + LANE // 4
        row0 = t.m_row + wg * p.mma.wg_row_stride
        fmt = e.out_dtype
        for v in range(p.mma.m_waves):
            src = f"{t.array}{v}"
            if not tma and fmt == "e4m3":  # N not a multiple of 16 (no D map): per pair, as without staging
                for i in range(0, p.mma.fragment_regs, 2):
                    out.append(StEpilogue("d_ptr", "tile", "e4m3", *self.fragment_coords(t, wg, v, i), src, (i, i + 1)))
                continue
            if not tma:
                for i in range(0, p.mma.fragment_regs, 2):
                    out.append(StGlobal16(*self.fragment_coords(t, wg, v, i), src, (i, i + 1), fmt, packed=t.packed,
                                          row_end=grouped.store_row_end(p, v, (i // 2) & 1), transposed=e.transposed))
                continue
            for c in range(e.stores_per_wave):
                seq = v * e.stores_per_wave + c
                out += self.cd_acquire(wg)
                buf = self.cd_buffer(seq, wg, t.count)
                values = range(c * e.box_values, (c + 1) * e.box_values)  # this box's fragment values
                if fmt == "e4m3":
                    out += self.e4m3_box(v, c, src, buf)
                elif e.staged is not None:  # the staged operand's box lands in the slot; D is staged over it
                    out += staged_box(self, wg, v, c, seq, t, buf)
                elif e.stmatrix:  # values 8q..8q+7: 16 rows x 16 columns; lane l addresses row l % 8 of matrix l // 8
                    row = fold((WARP % 4) * 16 + 8 * ((LANE // 8) % 2) + LANE % 8)
                    for i in values[::8]:
                        chunk = fold(LANE // 16 + (i // 4 - c * e.row_chunks))
                        out.append(StMatrix(self.cd_addr(buf, row, chunk), src, tuple(range(i, i + 8)), fmt, packed=t.packed))
                else:
                    for i in values[::2]:
                        row = fold(frag_row + 8 * ((i // 2) & 1))
                        chunk = i // 4 - c * e.row_chunks
                        addr = fold(self.cd_addr(buf, row, chunk) + (LANE % 4) * 4)
                        out.append(StShared16(addr, src, (i, i + 1), fmt, packed=t.packed))
                out += self.cd_commit(fold(t.n_col + c * e.store_block_n), fold(row0 + v * p.mma.wave_rows), seq, wg, t.count)
                if e.staged is not None:
                    out += staged_refill(self, wg, seq, t)
        return out

    def e4m3_box(self, v: int, c: int, src: str, buf: Expr) -> list:
        """Box ``c`` of wave ``v`` of an e4m3 D into staging slot ``buf``: per fragment pair (one row, two adjacent
        columns) one ``cvt.rn.satfinite.e4m3x2.f32`` and one ``st.shared.b16`` of its two bytes.

        ``stmatrix`` moves 16-bit elements only (PTX ISA "stmatrix"), so the pairs are stored as they lie in the
        fragment: pair ``i`` of lane ``l`` is row ``l / 4 + 8 ((i / 2) & 1)``, byte ``8 (i / 4) + 2 (l % 4)`` of
        the box row, i.e. 16-byte chunk ``(8 (i / 4) - c * store_block_n) / 16`` at byte ``8 ((i / 4) & 1) +
        2 (l % 4)``.  A warp's store covers 8 rows x 8 bytes; under the 128B swizzle (chunk ^ row % 8) the 8 rows
        land in 8 different chunks, 2 of the 32 banks each: one wavefront.
        """
        e = self.p.epilogue
        frag_row = (WARP % 4) * 16 + LANE // 4
        out = []
        for i in range(c * e.box_values, (c + 1) * e.box_values, 2):
            row = fold(frag_row + 8 * ((i // 2) & 1))
            chunk = (8 * (i // 4) - c * e.store_block_n) // 16
            addr = fold(self.cd_addr(buf, row, chunk) + 8 * ((i // 4) & 1) + (LANE % 4) * 2)
            out.append(StShared16(addr, src, (i, i + 1), "e4m3"))
        return out

    # -------------------------------------------------------------- the CD staging ring (both arches)

    def cd_buffer(self, seq: int, group: Expr | None, count: Expr | None = None) -> Expr:
        """CD staging buffer of store ``seq`` of the tile (rotating through the ring's stages).

        ``count``: the stored tile's count ``tc`` (default: the current tile's; the overlapped epilogue stores
        tile ``tc - 1``).
        """
        ring = self.p.cd_ring
        buf = ring.buffer(self.stored_tiles(count) * self.p.epilogue.stores_per_tile + seq)
        return fold(buf if group is None else group * ring.stages + buf)

    def stored_tiles(self, count: Expr | None = None) -> Expr:
        """The tiles the storing warpgroup stored before this one (the CD ring's and the staged boxes' tile count):
        split-K: ``tiles_stored`` (only a tile's last split stores); else ``tc`` (``count``: the stored tile's)
        over the warpgroups taking turns (pingpong: the storing warpgroup's own tiles)."""
        if self.p.split is not None:
            return Var("tiles_stored")
        return (Var("tc") if count is None else count) // self.p.roles.tile_owners

    def cd_addr(self, buf: Expr, row: Expr, chunk16) -> Expr:
        """Byte offset of 16-byte chunk ``chunk16`` of staging row ``row`` (128B swizzle: chunk ^ row % 8)."""
        p = self.p
        base = p.smem.cd.offset + buf * p.smem.cd.stride + row * p.epilogue.row_bytes
        if p.epilogue.swizzle128:
            return fold(base + ((lift(chunk16) ^ (row % 8)) << 4))
        return fold(base + lift(chunk16) * 16)

    def epi_leader(self, group: Expr | None) -> Expr:
        p = self.p
        return eq(WARP, p.roles.epilogue_warp0) if group is None else eq(WARP, p.roles.epilogue_warp0 + group * 4)

    def cd_acquire(self, group: Expr | None) -> list:
        """producer_acquire of a staging buffer: at most stages-1 stores of the storing warp still read smem.

        Bulk async-groups belong to the thread that committed them (PTX ISA "cp.async.bulk.commit_group"), and
        the store and commit are issued under ``elect.sync``, which need not pick the same lane again; so every
        lane of the storing warp waits (a lane without groups passes at once) instead of a second ``Elect``.
        """
        return [If(self.epi_leader(group), tuple(self.p.cd_ring.producer_acquire())), self.named_sync(group)]

    def cd_commit(self, col: Expr, row: Expr, seq: int, group: Expr | None, count: Expr | None = None) -> list:
        """Make the staged tile visible to the async proxy, then one thread stores it and commits the bulk group.

        sm_90a: that thread is lane 0 of the storing warp, not an ``elect.sync`` lane.  With ``elect.sync`` in the
        epilogue, ptxas 13 stopped treating the next tile's mainloop as warp-uniform: it put three
        ``WARPSYNC.ALL`` and twice the ``R2UR`` moves into every k-block and did the stage and descriptor
        arithmetic per thread instead of on the uniform datapath.  A fixed lane is also the plainest owner of the
        bulk groups it commits and waits for (PTX ISA "cp.async.bulk.commit_group": groups are per thread).
        """
        p = self.p
        store = TmaStore("d", fold(p.smem.cd.offset + self.cd_buffer(seq, group, count) * p.smem.cd.stride), col, row)
        issue = (store, *p.cd_ring.producer_commit())
        return [FenceProxyAsync(), self.named_sync(group),
                If(self.epi_leader(group), (Elect(issue, fixed=not p.is_sm100),))]

    def named_sync(self, group: Expr | None) -> NamedBarrier:
        p = self.p
        if group is None:
            return NamedBarrier(Const(EPI_BAR_ID), p.epilogue.threads)
        return NamedBarrier(fold(EPI_BAR_ID + group), 128)

    def drain(self) -> list:
        """After the last tile: stores complete before the CTA exits."""
        p = self.p
        if not p.epilogue.tma_store:
            return []
        # every lane of the storing warp waits: see cd_acquire (bulk groups are per thread)
        return [If(self.epi_leader(None) if p.is_sm100 else eq(WARP % 4, 0), tuple(p.cd_ring.drain()))]


class SplitKFixup:
    """The split-K step of the sm_90a consumer: publish a partial tile, and reduce the tile if this split arrived
    last (see :class:`ptxgen.plan.SplitKPlan` for the protocol, the workspace layout and why nothing waits).

    Each consumer warpgroup has its own counter and its own share of each partial, so the warpgroups of a
    CTA never wait for each other.  Register arrays are the consumer's fragments (``acc{v}``, ``acc1_{v}``).
    """

    def __init__(self, plan: Plan, sched: TileScheduler, epilogue: Epilogue):
        self.p, self.sched, self.epi = plan, sched, epilogue
        self.sp = plan.split

    def arrays(self) -> list[str]:
        """The fragment arrays of one thread, in workspace order."""
        p = self.p
        return [WgmmaConsumer.acc_name(mma.acc, v) for v in range(p.mma.m_waves) for mma in p.mma.streams]

    def counter(self, wg: Expr) -> Expr:
        ws = self.sp.workspace
        return fold(ws.counter_offset(self.sched.split_tiles() * ws.ctas_per_tile, self.sched.cta_tile(), wg))

    def chunk_ops(self, make, split: Expr | int, wg: Expr) -> list:
        """``make(offset, array, idx)`` for every 16-byte chunk of this thread's fragments in partial ``split``."""
        sp = self.sp
        thread = (WARP % 4) * 32 + LANE
        base = fold(sp.workspace.partial_offset(self.sched.cta_tile(), split) + sp.chunk_offset(wg, 0, 0, thread))
        out = [Let("ws_chunk", base)]
        for a, name in enumerate(self.arrays()):
            for c in range(sp.chunks):
                idx = tuple(range(c * sp.chunk_values, (c + 1) * sp.chunk_values))
                out.append(make(fold(Var("ws_chunk") + sp.chunk_offset(0, a, c, 0)), name, idx))
        return out

    def nonempty(self, s: Expr) -> Expr:
        """Split ``s`` of the current tile has k-blocks (``num_k < splits`` leaves some empty)."""
        n = self.sp.splits
        return lt(s * Var("num_k") // n, (s + 1) * Var("num_k") // n)

    def arrivals(self) -> Expr:
        """Splits of a tile that arrive on its counters: the non-empty ones, ``min(num_k, splits)``."""
        n = self.sp.splits
        return select(lt(Var("num_k"), n), Var("num_k"), n)

    def publishes(self) -> Expr:
        """The unit publishes a partial and arrives: a split with k-blocks (last wave: of a tail tile)."""
        nonempty = lt(Var("kb0"), Var("kb1"))
        return land(Var("sk_tail"), nonempty) if self.sp.last_wave else nonempty

    def publish(self, wg: Expr) -> list:
        """A split with k-blocks: fragments -> partial ``split``; sync the warpgroup; one thread arrives on the
        counter (``atom.acq_rel``) and, if the count before it was ``arrivals - 1``, this split is the tile's last:
        it resets the counter to 0.  ``sk_last`` (1 on that thread, 0 elsewhere) is what the warpgroup learns next.
        Last wave: a whole tile (``sk_tail`` = 0) stores no partial and arrives nowhere; the thread that would
        arrive sets ``sk_last`` = 1 instead, so the warpgroup runs the epilogue."""
        stores = self.chunk_ops(lambda off, name, idx: StGlobalF32(off, name, idx), Var("split"), wg)
        arrive = [AtomGlobalAdd("sk_seen", self.counter(wg), 1),
                  Let("sk_last", eq(Var("sk_seen"), self.arrivals() - 1)),
                  If(Var("sk_last"), (StGlobalU32(self.counter(wg), 0),))]
        whole = [Let("sk_last", select(Var("sk_tail"), 0, 1))] if self.sp.last_wave else []
        return [Let("sk_last", Const(0)), If(self.publishes(), tuple(stores)), self.epi.named_sync(wg),
                If(eq(WARP % 4, 0), (Elect((*whole, If(self.publishes(), tuple(arrive)))),))]

    def learn(self, wg: Expr) -> list:
        """The warpgroup learns whether its split is the tile's last (``sk_reduce`` = 1 or 0) at a barrier that also
        orders the arriving thread's acquire before every thread's partial loads.

        The count is the same on every thread, but ptxas cannot see that, so a branch on it would be divergent and
        the consumer's whole persistent loop after it compiled per thread (no uniform datapath: docs/performance.md,
        "The pair's last-wave k-loop"); the warp's vote on it (``vote.sync.any``, the same value) is warp-uniform
        to ptxas (where the plan says so: ``SplitKPlan.vote``)."""
        vote = [VoteAny("sk_reduce", ne(Var("sk_reduce"), 0))] if self.sp.vote else []
        return [NamedBarrierPopc("sk_reduce", fold(EPI_BAR_ID + wg), 128, Var("sk_last")), *vote]

    def collect(self, wg: Expr) -> list:
        """Add every other non-empty partial ``ps`` into the fragments: loads predicated on ``sk_reduce``, adds on
        every path."""
        s = Var("ps")
        pred = land(land(ne(Var("sk_reduce"), 0), ne(s, Var("split"))), self.nonempty(s))
        if self.sp.last_wave:  # a whole tile reads no partial
            pred = land(Var("sk_tail"), pred)
        loads = self.chunk_ops(lambda off, name, idx: LdGlobalF32(off, name, idx, pred), s, wg)
        # not unrolled: with the loads of two partials in flight ptxas spills 4 B at 128x192, split_k 3
        return [For("ps", Const(0), Const(self.sp.splits), Const(1), tuple(loads), unroll=False)]

    def step(self, wg: Expr, epilogue: tuple[list, list], prefetch: list = ()) -> list:
        """After the mainloop: publish and arrive, learn, collect, then ``epilogue`` = (fused op, D stores) on the
        tile's last arriver; the other splits go on to their next unit.  ``prefetch``: the staged operand's first
        box loads (:func:`ptxgen.builders.staged.staged_prefetch`), issued by the last arriver between the verdict
        and the collection, so they land while the partials are read.

        The partial adds redefine the accumulator registers on every path (predicated loads, no branch around
        the adds) and the mainloop has no branch around it (an empty split runs zero k-blocks): with either,
        ptxas (CUDA 13) serializes the wgmma pipeline (C7515), measured on h100_256x128 with split_k 3.
        """
        fused, stores = epilogue
        early = [If(ne(Var("sk_reduce"), 0), tuple(prefetch))] if prefetch else []
        return [*self.publish(wg), *self.learn(wg), *early, *self.collect(wg),
                If(ne(Var("sk_reduce"), 0), (*fused, *stores, Let("tiles_stored", Var("tiles_stored") + 1)))]


class WgmmaConsumer:
    """sm_90a consumer warpgroup: per k-block wait ``full``, issue wgmma, release the previous stage late."""

    def __init__(self, plan: Plan, cluster: Cluster, epilogue: Epilogue, sched: TileScheduler | None = None):
        self.p, self.c, self.epi = plan, cluster, epilogue
        self.fixup = SplitKFixup(plan, sched, epilogue) if plan.split is not None else None

    @staticmethod
    def acc_name(acc: int, wave: int) -> str:
        """Register array of accumulator ``acc``, wave ``wave``: ``acc{wave}`` (the first), ``acc{acc}_{wave}``."""
        return f"acc{wave}" if acc == 0 else f"acc{acc}_{wave}"

    def prologue(self) -> list:
        stored = [Let("tiles_stored", Const(0))] if self.fixup is not None else []  # split-K: the CD ring's tile count
        return [SetMaxNReg("inc", self.p.registers.consumer_regs), Let("wg", WARP // 4 - 1), *stored]

    def owned_tile(self) -> list:
        """The tile loop's body: :meth:`store_test` and :meth:`tile`, on pingpong only in the tile's owner warpgroup
        (``tc % tile_owners``)."""
        p = self.p
        body = [*self.store_test(), *self.tile()]
        if not p.roles.pingpong:
            return body
        return [If(eq(Var("tc") % p.roles.tile_owners, Var("wg")), tuple(body))]

    def store_test(self) -> list:
        """A grouped TMA-store kernel's whole-block table read (:func:`ptxgen.builders.grouped.whole_block`), before
        the k-loop: it is then in flight under the mainloop, not on the epilogue's path (the test itself runs in
        :meth:`stores`).  Nothing for other kernels."""
        return grouped.whole_block(self.p)[0] if self.p.epilogue.tma_store else []

    def math_order(self, arrive: bool) -> list:
        """Pingpong's mainloop order (CUTLASS ``math_wg_order_barrier``): tile tc's mainloop after tile tc-1's.

        Before its mainloop the owner of tile ``tc > 0`` waits ``math_order[tc % owners]`` for completion
        ``(tc - 1) // owners`` (the arrive of tile tc-1's owner); after its last k-block's wgmma issue, one elected
        thread arrives on the next owner's barrier.  Besides letting one warpgroup's epilogue overlap the other's
        mainloop, this keeps the operand ring's parity waits unambiguous: a warpgroup skips the other's
        ``num_k`` k-blocks, and without the order it could wait ``full[s]`` two phases behind, where the parity of
        the phase it needs equals that of the phase still pending (PTX ISA "mbarrier.try_wait": ``.parity``).
        Cooperative consumers share every tile: no order, no ops.
        """
        p = self.p
        if not p.roles.pingpong:
            return []
        tc, owners = Var("tc"), p.roles.tile_owners
        if arrive:
            nxt = Bar(p.math_order.name, fold((Var("wg") + 1) % owners))
            return [If(eq(WARP % 4, 0), (Elect((MbarrierArrive(nxt),)),))]
        return [If(ne(tc, 0), (MbarrierWait(Bar(p.math_order.name, Var("wg")), ((tc - 1) // owners) & 1, WaitRole.MATH_ORDER_WAIT),))]

    def issue(self) -> list:
        """The wgmma issue of k-block ``kb``: consumer_wait ``full``, fence, every wave x k-step x MMA, commit."""
        p = self.p
        wg = Var("wg")
        lets, st = ring_state(p)
        k0, _ = k_bounds(p)
        out = [*lets, *p.ab.consumer_wait(st), WgmmaFence()]
        a, m = p.loads.operand("a"), p.mma
        (a_lbo, a_step), (b_lbo, b_step) = m.desc_steps(m.trans_a), m.desc_steps(m.trans_b)  # PTX ISA "Matrix Descriptor Format"
        for v in range(m.m_waves):
            # a wave's 64 rows of A: K-major 64 rows of block_k, MN-major one 64-element chunk (the same bytes)
            a_base = desc_lo(p, fold(stage_offset(p, "a", st.index) + wg * m.wg_a_stride + v * m.a_wave_bytes), a_lbo,
                             masked=m.trans_a)
            for ks in range(m.k_steps):
                accumulate = Const(1) if ks else ne(KB, k0)
                for mma in m.streams:
                    bo = p.loads.operand(mma.b)
                    out.append(Wgmma(self.acc_name(mma.acc, v), m.block_n, fold(a_base + ks * a_step),
                                     fold(desc_lo(p, stage_offset(p, mma.b, st.index), b_lbo, masked=m.trans_b)
                                          + ks * b_step),
                                     accumulate, a_hi=a.desc_hi, b_hi=bo.desc_hi, trans_a=m.trans_a, trans_b=m.trans_b))
        return out + [WgmmaCommit()]

    def promoted_wgmmas(self, st: PipelineState, v: int, c: int, part: str) -> list:
        """FP8: fence, the e4m3 wgmmas of M-wave ``v`` and column chunk ``c`` of k-block ``kb`` (stage ``st``) into
        the block partial ``part`` (the first overwrites it), commit."""
        p, pr = self.p, self.p.promotion
        a, b = p.loads.operand("a"), p.loads.operand("b")
        a_base = desc_lo(p, fold(stage_offset(p, "a", st.index) + Var("wg") * p.mma.wg_a_stride + v * p.mma.a_wave_bytes))
        b_base = desc_lo(p, fold(stage_offset(p, "b", st.index) + c * pr.b_chunk_bytes))
        out = [WgmmaFence()]  # the partial was read by the previous promotion
        for ks in range(p.mma.k_steps):
            out.append(Wgmma(part, pr.chunk_n, fold(a_base + ks * p.mma.k_step_desc), fold(b_base + ks * p.mma.k_step_desc),
                             Const(1 if ks else 0), a_hi=a.desc_hi, b_hi=b.desc_hi, atype=pr.atype, k=pr.mma_k))
        return out + [WgmmaCommit()]

    @staticmethod
    def scales_name(v: int, c: int, j: int = 0) -> str:
        """Register array of the scale products of M-wave ``v``, column chunk ``c`` (overlapped: k-block parity ``j``)."""
        return f"{SCALES}{v}_{c}" + (f"_{j}" if j else "")

    def scale_load(self, stage: Expr, v: int, c: int, dst: str) -> ScaleLoad:
        """FP8: the scales of M-wave ``v``, column chunk ``c`` from stage ``stage`` (this thread's two scale_a rows
        and the chunk's scale_b), their products into ``dst``."""
        p, pr = self.p, self.p.promotion
        sa, sb = stage_offset(p, "scale_a", stage), stage_offset(p, "scale_b", stage)
        sb_first = (Var("n_col") // pr.b_block_rows) % pr.sb_box  # the tile's first block inside the scale_b box
        row = Var("wg") * p.mma.wg_row_stride + v * p.mma.wave_rows + (WARP % 4) * 16 + LANE // 4
        return ScaleLoad(dst, fold(sa + row * pr.scale_bytes),
                         fold(sb + (sb_first + c * pr.chunk_n // pr.b_block_rows) * pr.scale_bytes), pr.row_half)

    def promotion(self, v: int, c: int, part: str, scales: str, first: bool) -> PromoteScaled:
        """FP8: promote ``part`` (M-wave ``v``, column chunk ``c``) into the main accumulator with the scale
        products in ``scales``."""
        pr = self.p.promotion
        return PromoteScaled(self.acc_name(0, v), part, pr.chunk_values, c * pr.chunk_values, scales, accumulate=not first)

    def promoted_kblock(self, first: bool) -> list:
        """FP8 k-block ``kb`` (one 128-K scale block): consumer_wait ``full``; the scale loads of every M-wave and
        column chunk (before any wgmma: no ``ld.shared`` queues behind the wgmmas' shared-memory reads); per
        M-wave and chunk the e4m3 wgmmas into the block partial, ``wgmma.wait_group 0`` and the promotion into the
        main accumulator, the last one after the consumer_release of the stage (its wgmma reads and scale loads
        are complete: the promotion reads registers only).  ``first``: the tile's first k-block initialises the
        main accumulator.  See :class:`ptxgen.plan.PromotionPlan`.
        """
        p, pr = self.p, self.p.promotion
        lets, st = ring_state(p)
        chunks = [(v, c) for v in range(p.mma.m_waves) for c in range(pr.chunks)]
        out = [*lets, *p.ab.consumer_wait(st), *(self.scale_load(st.index, v, c, self.scales_name(v, c)) for v, c in chunks)]
        for i, (v, c) in enumerate(chunks):
            out += [*self.promoted_wgmmas(st, v, c, PARTIAL), WgmmaWait(0)]
            if i == len(chunks) - 1:
                out += self.release(PipelineState(st.index, None))
            out.append(self.promotion(v, c, PARTIAL, self.scales_name(v, c), first))
        return out

    def overlapped_kblocks(self, start: Expr, first: bool) -> list:
        """FP8 with ``promotion.unroll`` = U >= 2 (one wave, one chunk): k-blocks ``start .. start + U - 1``.

        Block j: consumer_wait ``full``, its scale loads into scale array ``j % 2``, its wgmmas into partial
        ``j % 2``, commit; for j >= 1 then ``wgmma.wait_group 1`` (block j - 1's group retired, block j's still
        running), block j - 1's consumer_release and promotion, which so overlaps block j's wgmmas; the last block
        is released and promoted after ``wgmma.wait_group 0``.  Every scale load reads a stage waited in the same
        iteration.  ``first``: the tile's first iteration, whose first promotion initialises the main accumulator.
        """
        p, pr = self.p, self.p.promotion
        parts = (PARTIAL, PARTIAL + "1")
        scales = (self.scales_name(0, 0), self.scales_name(0, 0, 1))
        out = []
        for j in range(pr.unroll):
            lets, st = ring_state(p)
            out += [Let("kb", fold(start + j)), *lets, *p.ab.consumer_wait(st),
                    self.scale_load(st.index, 0, 0, scales[j % 2]), *self.promoted_wgmmas(st, 0, 0, parts[j % 2])]
            if j:
                prev = fold((Var("it") - 1) % p.stages)
                out += [WgmmaWait(1), *self.release(PipelineState(prev, None)),
                        self.promotion(0, 0, parts[(j - 1) % 2], scales[(j - 1) % 2], first and j == 1)]
        last = (pr.unroll - 1) % 2
        return out + [WgmmaWait(0), *self.release(PipelineState(st.index, None)),
                      self.promotion(0, 0, parts[last], scales[last], False)]

    def tile(self) -> list:
        """One tile: the k-loop (each k-block releases the previous one's stage after ``wgmma.wait_group 1``),
        the last release, the epilogue op, then the stores (or, with ``epilogue.overlap``, the pack).

        ``epilogue.overlap``: the first k-block is issued before the previous tile's packed words are stored
        (:data:`PREVIOUS_TILE`), so the tensor cores run it during the stores; the tile ends with the pack of
        its own result and its origin in ``m_prev``/``n_prev``, stored by the next tile or by :meth:`tail`.
        """
        p = self.p
        wg = Var("wg")
        k0, k1 = k_bounds(p)
        fused = []  # the epilogue op on the accumulators (FP8: the promoted main accumulator, after every k-block)
        for v in range(p.mma.m_waves):
            fused += self.epi.fragment_fuse(wg, v)
        if p.promotion is not None:  # FP8: the first k-block (K >= 1, so num_k >= 1) initialises the accumulator
            u = p.promotion.unroll
            if u > 1:  # num_k is a multiple of u (common.setup)
                return [*self.overlapped_kblocks(k0, first=True),
                        For("kp", Const(u), k1, Const(u), tuple(self.overlapped_kblocks(Var("kp"), first=False))),
                        *fused, *self.stores(CURRENT_TILE)]
            return [Let("kb", k0), *self.promoted_kblock(first=True),
                    k_loop(self.promoted_kblock(first=False), (k0 + 1, k1)), *fused, *self.stores(CURRENT_TILE)]
        release_prev = self.release(PipelineState((Var("it") - 1) % p.stages, None))
        release = self.release(PipelineState(ring_iteration(p, k1 - 1) % p.stages, None))
        if self.fixup is not None:  # an empty split (num_k < splits) has no stage to release
            release = [If(lt(k0, k1), tuple(release))]
        if p.epilogue.overlap:  # config: cooperative, unsplit, persistent
            first = [Let("kb", k0), *self.issue(), If(ne(Var("tc"), 0), tuple(self.stores(PREVIOUS_TILE)))]
            k_body = [*self.issue(), WgmmaWait(1), *release_prev]
            pack = [Pack16(f"{PREVIOUS_TILE.array}{v}", f"acc{v}", p.mma.fragment_regs, p.epilogue.out_dtype)
                    for v in range(p.mma.m_waves)]
            return [*first, k_loop(k_body, (k0 + 1, k1)), WgmmaWait(0), *release, *fused, *pack,
                    Let("m_prev", Var("m_row")), Let("n_prev", Var("n_col"))]
        k_body = [*self.issue(), WgmmaWait(1), If(ne(KB, k0), tuple(release_prev))]
        # the staged operand's first boxes load under the mainloop (ptxgen.builders.staged); split-K: under the
        # collection of the partials, by the tile's last arriver only (SplitKFixup.step)
        prefetch = staged_prefetch(self.epi, wg, CURRENT_TILE) if p.epilogue.staged is not None else []
        early = prefetch if self.fixup is None else []
        out = [*early, *self.math_order(arrive=False), k_loop(k_body, (k0, k1)), *self.math_order(arrive=True),
               WgmmaWait(0), *release]
        if p.epilogue.staged is not None:  # the TMA branch computes per staged box; the direct one as before
            fused, stores = [], self.stores(CURRENT_TILE, fused)
        else:
            stores = self.stores(CURRENT_TILE)
        if self.fixup is None:
            return out + fused + stores
        return out + self.fixup.step(wg, (fused, stores), prefetch)

    def row_table_loads(self) -> list:
        """Contiguous grouped kernels: the ``m_indices`` entries of the rows this thread stores
        (:func:`ptxgen.builders.grouped.row_table_loads`); nothing otherwise."""
        return grouped.row_table_loads(self.p, Var("m_row") + Var("wg") * self.p.mma.wg_row_stride)

    def stores(self, tile: StoredTile, fused: list = ()) -> list:
        """The fragment stores of ``tile``: TMA stores when N allows the D tensor map, else direct (after ``fused``:
        the fused epilogue of a staged operand's direct branch; a contiguous grouped kernel's direct branch first
        reads the table words of its rows, :meth:`row_table_loads`).

        A grouped CTA pair's CTA stores only when its own m-block has a group (:func:`ptxgen.builders.grouped.store_guard`).
        A grouped kernel takes the TMA branch only for an m-block wholly inside its group's valid rows
        (:func:`ptxgen.builders.grouped.whole_block`): a store box writes every row of the box.  The test reads
        values uniform over the CTA (the tile's group, m-block and one table word), so both consumer warpgroups,
        every thread of their named barriers and the storing thread take the same branch.
        """
        p, wg = self.p, Var("wg")
        direct = (*fused, *self.row_table_loads(), *self.epi.fragment_store(wg, False, tile))
        out = list(direct)
        if p.epilogue.tma_store:  # the D tensor map needs 16-byte rows; other N store directly
            n_ok = eq(Param("n") % p.epilogue.store_n_multiple, 0)
            take_tma = grouped.whole_block(p)[1]  # its table read issued by store_test before the k-loop
            out = [If(n_ok if take_tma is None else land(n_ok, take_tma),
                      tuple(self.epi.fragment_store(wg, True, tile)), direct)]
        guard = grouped.store_guard(p)  # a grouped pair's CTA whose own m-block is padding stores nothing
        return out if guard is None else [If(guard, tuple(out))]

    def tail(self, sched: TileScheduler) -> list:
        """After the tile loop: with ``epilogue.overlap``, store the CTA's last tile (none when it had no tile)."""
        if not self.p.epilogue.overlap:
            return []
        last = replace(PREVIOUS_TILE, count=Var("tiles_done") - 1)
        return [Let("tiles_done", sched.tiles_done()), If(ne(Var("tiles_done"), 0), tuple(self.stores(last)))]

    def release(self, st: PipelineState) -> list:
        """consumer_release: one thread per consumer warpgroup arrives on ``empty`` (both CTAs' when the pair multicasts
        its shared operand, A or B: the peer's next multicast half lands in this CTA's stage too).

        FP8: one thread per consumer warp (``empty`` counts 4 per warpgroup): each warp reads its own rows' scales
        from the stage with ``ld.shared``, and only its own arrive orders those reads before the refill (the
        wgmma reads are warpgroup-collective and retired by every warp's ``wgmma.wait_group``).
        """
        p = self.p
        st = PipelineState(fold(st.index), st.phase)
        ctas = self.c.release_ctas() if p.loads.multicast else (None,)
        if p.promotion is not None:
            return [Elect(tuple(p.ab.consumer_release(st, ctas=ctas)))]
        return [If(eq(WARP % 4, 0), (Elect(tuple(p.ab.consumer_release(st, ctas=ctas))),))]
