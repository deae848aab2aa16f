"""GEMM builder: plan -> Kernel IR for D[M,N] = A[M,K] @ B[N,K]^T (bf16 in/out, fp32 accumulate).

One builder, branching on the arch only where the hardware differs:

* sm_100a (seed levels 1-9): TMA producer warp, one MMA-issuing thread
  (``tcgen05.mma``, optionally ``cta_group::2`` across a CTA pair),
  accumulators in TMEM, an epilogue warpgroup reading TMEM with ``tcgen05.ld``.
* sm_90a: TMA producer warp, consumer warpgroups issuing ``wgmma`` into
  register fragments, which they store themselves.

Shared by both: barrier init and teardown, the tile scheduler, the TMA
producer ring (``producer_acquire`` = wait ``empty``, ``producer_commit`` =
arrive.expect_tx on ``full``) and the epilogue's D staging and TMA stores.

Pipeline indices are expressions of the tile iteration ``tc`` and the k-block
``kb``: ``it = tc * num_k + kb``, ``stage = it % stages``,
``phase = (it / stages) & 1``; the producer waits on ``phase ^ 1`` (a fresh
``empty`` barrier passes at once).
"""

from __future__ import annotations

from ..ir import (Bar, BulkCommitGroup, BulkWaitGroup, ClusterSync, Comment, Const, CtaSync, Elect, Expr,
                  FenceMbarrierInit, FenceProxyAsync, For, If, Kernel, Let, MbarrierArrive,
                  MbarrierArriveExpectTx, MbarrierInit, MbarrierWait, NamedBarrier, Nanosleep, Param, Role,
                  SetMaxNReg, Shfl, Sreg, StGlobalBf16, StSharedBf16, TcgenFence, TmaLoad, TmaStore, TmemAlloc,
                  TmemBase, TmemDealloc, TmemLoad, TmemRelinquish, TmemWaitLd, Umma, UmmaCommit, Var, WarpSwitch,
                  Wgmma, WgmmaCommit, WgmmaFence, WgmmaWait, ceil_div, emin, eq, fold, lift, ne, select)
from ..plan import Plan

EPI_BAR_ID = 1  # named barrier of the epilogue threads (sm_90a: 1 + consumer warpgroup)

WARP, LANE, RANK = Sreg("warp"), Sreg("lane"), Sreg("rank")
T, KB, TMEM = Var("t"), Var("kb"), Var("tmem")


def build_gemm(plan: Plan) -> Kernel:
    """The Kernel IR of ``plan``'s config (either arch)."""
    return _GemmBuilder(plan).kernel()


class _GemmBuilder:
    def __init__(self, plan: Plan):
        self.p = plan
        self.cs = plan.cluster_size
        self.rank = RANK if self.cs == 2 else Const(0)
        self.is_leader = eq(self.rank, 0)
        self.relay = plan.is_sm100 and self.cs == 2 and not plan.cfg.tma.two_sm  # level 1's full-barrier relay

    # ------------------------------------------------------------------ shared pieces

    def kernel(self) -> Kernel:
        p = self.p
        body = [Comment("setup: barriers" + (", TMEM" if p.is_sm100 else "")), *self.setup()]
        body += [Comment("pipeline roles"), *(self.sm100_roles() if p.is_sm100 else self.sm90_roles())]
        body += [Comment("teardown"), *self.teardown()]
        return Kernel(plan=p, body=tuple(body))

    def setup(self) -> list:
        p = self.p
        inits = []
        for spec in p.barrier_specs():
            count = lift(spec.init[0]) if len(set(spec.init)) == 1 else select(self.is_leader, spec.init[0], spec.init[1])
            inits.append(For("i", Const(0), Const(spec.num), Const(1), (MbarrierInit(Bar(spec.name, Var("i")), count),)))
        roles = [Role("init", 0, 1, (Elect((*inits, FenceMbarrierInit())),))]
        alloc = Role("tmem_alloc", p.alloc_warp, p.alloc_warp + 1, (TmemAlloc(p.tmem_cols), TmemRelinquish()))
        out = [Let("num_k", ceil_div(Param("k"), p.block_k)), *self.schedule_setup()]
        if p.is_sm100 and p.cta_group == 2:
            # Issue 9 finding 1: tcgen05.alloc.cta_group::2 needs the peer CTA running (PTX ISA tcgen05.alloc;
            # CUTLASS PR #3316, Triton PR #10735).  Order: barrier init + fence.mbarrier_init -> cluster
            # arrive.release/wait.acquire -> alloc + relinquish -> fence::before -> cluster sync (peer's alloc
            # done, address slot written) -> fence::after -> read the address slot.
            out += [WarpSwitch(tuple(roles)), ClusterSync(), WarpSwitch((alloc,))]
        else:
            out.append(WarpSwitch(tuple(roles + ([alloc] if p.is_sm100 else []))))
        if p.is_sm100:
            out.append(TcgenFence("before"))
        out.append(ClusterSync() if self.cs == 2 else CtaSync())
        if p.is_sm100:
            out += [TcgenFence("after"), TmemBase("tmem")]
        return out

    def teardown(self) -> list:
        p = self.p
        if not p.is_sm100:
            return [ClusterSync()] if self.cs == 2 else []
        out = [TcgenFence("before"), ClusterSync() if self.cs == 2 else CtaSync(), TcgenFence("after"),
               WarpSwitch((Role("tmem_dealloc", p.alloc_warp, p.alloc_warp + 1, (TmemDealloc(TMEM, p.tmem_cols),)),))]
        if self.cs == 2:
            out.append(ClusterSync())  # no CTA exits while its peer may still touch its barriers or TMEM
        return out

    def schedule_setup(self) -> list:
        p = self.p
        return [
            Let("num_m", ceil_div(Param("m"), p.cluster_tile_rows)),
            Let("num_n", ceil_div(Param("n"), p.block_n)),
            Let("num_tiles", Var("num_m") * Var("num_n")),
            Let("cluster_id", Sreg("ctaid") // self.cs),
            Let("num_clusters", Sreg("nctaid") // self.cs),
        ]

    def tile_loop(self, body: list) -> For:
        """Persistent loop over cluster tiles with the swizzled order (group of ``group_clusters`` m-blocks)."""
        p = self.p
        g = p.group_clusters
        m_cta = (Var("cm") * p.m_ctas + self.rank) if p.m_ctas == 2 else Var("cm")
        sched = [
            Let("tc", (T - Var("cluster_id")) // Var("num_clusters")),
            Let("grp", T // (Var("num_n") * g)),
            Let("gm", emin(Var("num_m") - Var("grp") * g, g)),
            Let("r", T % (Var("num_n") * g)),
            Let("cm", Var("grp") * g + Var("r") % Var("gm")),
            Let("m_row", m_cta * p.block_m),
            Let("n_col", (Var("r") // Var("gm")) * p.block_n),
        ]
        return For("t", Var("cluster_id"), Var("num_tiles"), Var("num_clusters"), tuple(sched + body))

    def ring(self) -> list:
        """``it``, ``stage`` and ``phase`` of the current k-block."""
        S = self.p.stages
        return [Let("it", Var("tc") * Var("num_k") + KB), Let("stage", Var("it") % S), Let("phase", (Var("it") // S) & 1)]

    def desc_lo(self, offset: Expr) -> Expr:
        """Descriptor low word for smem+offset: start >> 4 | LBO field << 16 (the plan's LBO)."""
        return fold(((Sreg("smem") + offset) >> 4) | (self.p.desc_lbo_field << 16))

    def a_off(self, stage: Expr) -> Expr:
        return fold(self.p.a.offset + stage * self.p.a.stride)

    def b_off(self, stage: Expr) -> Expr:
        return fold(self.p.b.offset + stage * self.p.b.stride)

    def producer_kblock(self) -> list:
        """One k-block of the TMA producer: producer_acquire then the loads and producer_commit."""
        p = self.p
        stage, phase = Var("stage"), Var("phase")
        full = Bar("full", stage)
        col = KB * p.block_k
        out = [*self.ring(), MbarrierWait(Bar("empty", stage), phase ^ 1, "producer_acquire")]
        if p.is_sm100:
            b_row = Var("n_col") + self.rank * p.b_box_rows if self.cs == 2 else Var("n_col")
            two_sm = p.cfg.tma.two_sm
            if two_sm:
                out.append(If(self.is_leader, (MbarrierArriveExpectTx(full, p.load_bytes),),
                              (MbarrierArriveExpectTx(full, p.load_bytes, cta=Const(0)),)))
            else:
                out.append(MbarrierArriveExpectTx(full, p.load_bytes))
            out += [TmaLoad("a", self.a_off(stage), col, Var("m_row"), full, two_sm=two_sm),
                    TmaLoad("b", self.b_off(stage), col, b_row, full, two_sm=two_sm)]
            if self.relay:  # level 1: the peer relays its landed stage to the leader's barrier
                # issue 9 finding 3: the leader's MMA then reads this CTA's shared memory, a cross-CTA data
                # hand-off: the relay arrive releases at cluster scope (the leader acquires at cluster scope)
                out.append(If(ne(self.rank, 0), (MbarrierWait(full, phase, "relay_wait"),
                                                 MbarrierArrive(full, cta=Const(0), scope="cluster"))))
        else:
            out += [MbarrierArriveExpectTx(full, p.full_tx_bytes),
                    TmaLoad("a", self.a_off(stage), col, Var("m_row"), full)]
            if p.cfg.tma.multicast:
                half = self.rank * p.b_box_rows
                out.append(TmaLoad("b", fold(self.b_off(stage) + self.rank * p.b_load_bytes), col, Var("n_col") + half,
                                   full, multicast=0b11))
            else:
                out.append(TmaLoad("b", self.b_off(stage), col, Var("n_col"), full))
        return out

    # ------------------------------------------------------------------ sm_100a

    def sm100_roles(self) -> list:
        """Producer / MMA (or one lockstep mainloop warp) and the epilogue.

        With a dedicated epilogue warpgroup (epilogue.warps=4) every role loops
        over tiles on its own; otherwise one tile loop holds the mainloop roles
        followed by the epilogue on the same four warps.
        """
        p = self.p
        dedicated = p.cfg.epilogue.warps == 4
        loop = (lambda body: [self.tile_loop(body)]) if dedicated else (lambda body: body)  # noqa: E731
        k_loop = lambda body: For("kb", Const(0), Var("num_k"), Const(1), tuple(body))  # noqa: E731
        if p.cfg.pipeline.roles == "lockstep":
            tile = [*self.mma_tile_head(), k_loop(self.producer_kblock() + self.mma_kblock())]
            roles = [Role("mainloop", p.producer_warp, p.producer_warp + 1,
                          (Elect((*loop(tile), *(self.producer_tail() if dedicated else []))),))]
        else:
            mma = loop(self.mma_tile_head() + [k_loop(self.mma_kblock())])
            if p.cfg.mma.lanes == "one":
                mma = [Elect(tuple(mma))]
            else:
                mma = [Let("a_desc_lane", self.desc_lo(self.a_off(LANE % p.stages))),
                       Let("b_desc_lane", self.desc_lo(self.b_off(LANE % p.stages))), *mma]
            if self.cs == 2:
                mma = [If(self.is_leader, tuple(mma))]
            roles = [Role("producer", p.producer_warp, p.producer_warp + 1,
                          (Elect((*loop([k_loop(self.producer_kblock())]), *(self.producer_tail() if dedicated else []))),)),
                     Role("mma", p.mma_warp, p.mma_warp + 1, tuple(mma))]
        epi = self.sm100_epilogue_tile()
        if p.epi_writers == 1 and self.cs == 2:
            epi = [If(self.is_leader, tuple(epi))]
        if dedicated:
            roles.append(Role("epilogue", p.epilogue_warp0, p.epilogue_warp0 + 4, (self.tile_loop(epi), *self.store_drain())))
            return [WarpSwitch(tuple(roles))]
        tail = WarpSwitch((Role("producer", p.producer_warp, p.producer_warp + 1, (Elect(tuple(self.producer_tail())),)),))
        return [self.tile_loop([WarpSwitch(tuple(roles)), *epi]), tail, *self.store_drain()]

    def producer_tail(self) -> list:
        """CUTLASS's producer_tail: after its last tile the producer waits each ``empty`` stage's final phase.

        Issue 9 finding 5: the last ``tcgen05.commit`` of each stage arrives on ``empty`` asynchronously (on
        both CTAs' barriers with cta_group::2); without these waits a CTA may exit, and the pair pass the
        final cluster barrier, with that arrive still pending.  The ring continues for ``stages`` more
        iterations past ``it_end`` (this CTA's tiles x num_k) with producer_acquire waits only: at most
        ``stages`` waits; a stage never filled passes at once (parity 1 on a fresh barrier).
        """
        S = self.p.stages
        it = Var("it_end") + Var("i")
        return [Let("tiles_done", (Var("num_tiles") + Var("num_clusters") - 1 - Var("cluster_id")) // Var("num_clusters")),
                Let("it_end", Var("tiles_done") * Var("num_k")),
                For("i", Const(0), Const(S), Const(1),
                    (Let("it", it), Let("stage", Var("it") % S), Let("phase", (Var("it") // S) & 1),
                     MbarrierWait(Bar("empty", Var("stage")), Var("phase") ^ 1, "producer_tail")))]

    def acc_indices(self) -> list:
        A = self.p.acc_stages
        return [Let("acc", Var("tc") % A), Let("acc_phase", (Var("tc") // A) & 1)]

    def lockstep_guard(self, body: list) -> list:
        """In a lockstep mainloop warp, MMA work runs on the leader CTA only (cta_group::2)."""
        if self.p.cfg.pipeline.roles == "lockstep" and self.cs == 2:
            return [If(self.is_leader, tuple(body))]
        return body

    def mma_tile_head(self) -> list:
        """Before a tile's first k-block: acquire the accumulator stage from the epilogue."""
        return self.lockstep_guard([
            *self.acc_indices(),
            MbarrierWait(Bar("tmem_empty", Var("acc")), Var("acc_phase") ^ 1, "producer_acquire (accumulator)"),
            TcgenFence("after")])

    def mma_kblock(self) -> list:
        """consumer_wait on ``full``, the UMMAs of every M-wave and k-step, consumer_release by commit."""
        p = self.p
        stage = Var("stage")
        mc = 0b11 if self.cs == 2 else 0
        if p.cfg.mma.lanes == "all":
            a_lo, b_lo = Var("a_lo"), Var("b_lo")
            descs = [Shfl("a_lo", "a_desc_lane", stage), Shfl("b_lo", "b_desc_lane", stage)]
        else:
            a_lo, b_lo = self.desc_lo(self.a_off(stage)), self.desc_lo(self.b_off(stage))
            descs = []
        issue = []
        for w in range(p.m_waves):
            d = fold(TMEM + Var("acc") * p.acc_stage_cols + w * p.block_n)
            for ks in range(p.k_steps):
                accumulate = Const(1) if ks else ne(KB, 0)
                issue.append(Umma(d, fold(a_lo + (w * p.wave_desc + ks * p.k_step_desc)),
                                  fold(b_lo + ks * p.k_step_desc), accumulate))
        # issue 9 finding 5: tmem_full goes only to CTAs whose epilogue waits it (an arrive nobody waits for
        # may still be pending when its CTA exits); with one writing CTA that is the leader alone
        full_mc = mc if p.epi_writers == 2 else 0
        issue += [UmmaCommit(Bar("empty", stage), mc),
                  If(eq(KB, Var("num_k") - 1), (UmmaCommit(Bar("tmem_full", Var("acc")), full_mc),))]
        if p.throttle_ns:
            issue.append(Nanosleep(p.throttle_ns))
        # issue 9 finding 3: with the level-1 relay, full[] completes on the peer's release.cluster arrive
        scope = "cluster" if self.relay else "cta"
        body = [MbarrierWait(Bar("full", stage), Var("phase"), "consumer_wait", scope), TcgenFence("after"), *descs]
        body += [Elect(tuple(issue))] if p.cfg.mma.lanes == "all" else issue
        if p.cfg.pipeline.roles == "lockstep":
            return self.lockstep_guard(body)  # the producer half of the k-block already set it/stage/phase
        return self.ring() + body

    def n_aligned(self):
        """1 when D's rows are 16-byte multiples (n % 8 == 0), the condition for a D tensor map."""
        return eq(Param("n") % 8, 0)

    def sm100_epilogue_tile(self) -> list:
        """Wait ``tmem_full``, read TMEM in 32x32b pieces, store D, release ``tmem_empty``.

        TMA-store configs need ``n % 8 == 0`` here (the plan's ``n_multiple``); the sm_90a epilogue
        instead falls back to direct stores in-kernel (duplicating this epilogue made ptxas spill).
        """
        p = self.p
        head = [*self.acc_indices(),
                MbarrierWait(Bar("tmem_full", Var("acc")), Var("acc_phase"), "consumer_wait (accumulator)"),
                TcgenFence("after"),
                Let("erow", (WARP % 4) * 32 + LANE)]
        body = self.sm100_store(tma=p.cfg.epilogue.store == "tma")
        return head + body + ([] if p.cfg.epilogue.early_release else self.release_tmem())

    def sm100_store(self, tma: bool) -> list:
        p = self.p
        erow = Var("erow")
        out = []
        chunks = p.block_n // p.store_block_n
        lane_field = ((WARP % 4) * 32) << 16
        pieces = p.store_block_n // p.tmem_ld_cols
        for w in range(p.m_waves):
            for c in range(chunks):
                last_read = w == p.m_waves - 1 and c == chunks - 1
                seq = w * chunks + c
                if tma:
                    out += self.cd_acquire(group=None)
                for j in range(pieces):
                    col0 = w * p.block_n + c * p.store_block_n + j * p.tmem_ld_cols
                    out += [TmemLoad("v", fold(TMEM + lane_field + Var("acc") * p.acc_stage_cols + col0), p.tmem_ld_cols),
                            TmemWaitLd()]
                    if last_read and j == pieces - 1 and p.cfg.epilogue.early_release:
                        out += self.release_tmem()
                    for q in range(p.tmem_ld_cols // 8):
                        idx = tuple(range(q * 8, q * 8 + 8))
                        col_in_chunk = j * p.tmem_ld_cols + q * 8  # staging rows hold one store chunk
                        if tma:
                            out.append(StSharedBf16(self.cd_addr(self.cd_buffer(seq, None), erow, col_in_chunk // 8), "v", idx))
                        else:
                            col = c * p.store_block_n + col_in_chunk
                            out.append(StGlobalBf16(Var("m_row") + (w * p.wave_rows) + erow, Var("n_col") + col, "v", idx))
                if tma:
                    out += self.cd_commit(Var("n_col") + c * p.store_block_n, Var("m_row") + w * p.wave_rows, seq, group=None)
        return out

    def release_tmem(self) -> list:
        """consumer_release of the accumulator stage: fence, then per-thread or one elected arrive (leader's barrier)."""
        p = self.p
        bar = Bar("tmem_empty", Var("acc"))
        cta = Const(0) if self.cs == 2 else None
        if p.release_per_thread:
            return [TcgenFence("before"), MbarrierArrive(bar, cta)]
        return [TcgenFence("before"), NamedBarrier(Const(EPI_BAR_ID + 1), p.epi_threads),
                If(eq(WARP, p.epilogue_warp0), (Elect((MbarrierArrive(bar, cta),)),))]

    # ------------------------------------------------------------------ epilogue staging (both arches)

    def stores_per_tile(self) -> int:
        p = self.p
        return p.m_waves * (p.block_n // p.store_block_n)

    def cd_buffer(self, seq: int, group: Expr | None) -> Expr:
        """CD staging buffer of store ``seq`` of the tile (rotating through epilogue.stages)."""
        p = self.p
        S = p.cfg.epilogue.stages
        buf = (Var("tc") * self.stores_per_tile() + seq) % S
        return fold(buf if group is None else group * S + buf)

    def cd_addr(self, buf: Expr, row: Expr, chunk16) -> Expr:
        """Byte offset of 16-byte chunk ``chunk16`` of staging row ``row`` (128B swizzle: chunk ^ row % 8)."""
        p = self.p
        base = p.cd.offset + buf * p.cd.stride + row * p.cd_row_bytes
        if p.cfg.epilogue.swizzle == "128":
            return fold(base + ((lift(chunk16) ^ (row % 8)) << 4))
        return fold(base + lift(chunk16) * 16)

    def epi_leader(self, group: Expr | None) -> Expr:
        p = self.p
        return eq(WARP, p.epilogue_warp0) if group is None else eq(WARP, p.epilogue_warp0 + group * 4)

    def cd_acquire(self, group: Expr | None) -> list:
        """Before writing a staging buffer: the storing warp waits until at most stages-1 stores still read smem.

        Issue 9 finding 2: bulk async-groups belong to the thread that committed them, and the store and
        commit are issued under ``elect.sync``, which need not pick the same lane again; so every lane of
        the storing warp waits (a lane without groups passes at once) instead of a second ``Elect``.
        """
        p = self.p
        return [If(self.epi_leader(group), (BulkWaitGroup(p.cfg.epilogue.stages - 1, read=True),)),
                self.named_sync(group)]

    def cd_commit(self, col: Expr, row: Expr, seq: int, group: Expr | None) -> list:
        """Make the staged tile visible to the async proxy, then one thread issues the TMA store."""
        return [FenceProxyAsync(), self.named_sync(group),
                If(self.epi_leader(group), (Elect((TmaStore("d", fold(self.p.cd.offset + self.cd_buffer(seq, group) * self.p.cd.stride), col, row),
                                                   BulkCommitGroup())),))]

    def named_sync(self, group: Expr | None) -> NamedBarrier:
        p = self.p
        if group is None:
            return NamedBarrier(Const(EPI_BAR_ID), p.epi_threads)
        return NamedBarrier(fold(EPI_BAR_ID + group), 128)

    def store_drain(self) -> list:
        """After the last tile: stores complete before the CTA exits."""
        p = self.p
        if p.cfg.epilogue.store != "tma":
            return []
        # every lane of the storing warp waits: see cd_acquire (issue 9 finding 2)
        return [If(self.epi_leader(None) if p.is_sm100 else eq(WARP % 4, 0), (BulkWaitGroup(0, read=False),))]

    # ------------------------------------------------------------------ sm_90a

    def sm90_roles(self) -> list:
        p = self.p
        k_loop = For("kb", Const(0), Var("num_k"), Const(1), tuple(self.producer_kblock()))
        producer = Role("producer", 0, 4, (SetMaxNReg("dec", p.producer_regs),
                                          If(eq(WARP, p.producer_warp), (Elect((self.tile_loop([k_loop]),)),))))
        consumer = Role("consumer", 4, 4 + 4 * p.consumer_warpgroups,
                        (SetMaxNReg("inc", p.consumer_regs), Let("wg", WARP // 4 - 1),
                         self.tile_loop(self.sm90_consumer_tile()), *self.store_drain()))
        return [WarpSwitch((producer, consumer))]

    def sm90_consumer_tile(self) -> list:
        p = self.p
        wg = Var("wg")
        stage = Var("stage")
        k_body = [*self.ring(), MbarrierWait(Bar("full", stage), Var("phase"), "consumer_wait"), WgmmaFence()]
        for v in range(p.m_waves):
            a_base = self.desc_lo(fold(self.a_off(stage) + wg * (p.m_waves * p.a_wave_bytes) + v * p.a_wave_bytes))
            for ks in range(p.k_steps):
                accumulate = Const(1) if ks else ne(KB, 0)
                k_body.append(Wgmma(f"acc{v}", p.block_n, fold(a_base + ks * p.k_step_desc),
                                    fold(self.desc_lo(self.b_off(stage)) + ks * p.k_step_desc), accumulate))
        prev = Var("it") - 1
        k_body += [WgmmaCommit(), WgmmaWait(1),
                   If(ne(KB, 0), tuple(self.consumer_release(prev % p.stages)))]
        last = Var("tc") * Var("num_k") + Var("num_k") - 1
        out = [For("kb", Const(0), Var("num_k"), Const(1), tuple(k_body)), WgmmaWait(0),
               *self.consumer_release(last % p.stages)]
        if p.cfg.epilogue.store == "tma":
            return out + [If(self.n_aligned(), tuple(self.sm90_store(wg, tma=True)), tuple(self.sm90_store(wg, tma=False)))]
        return out + self.sm90_store(wg, tma=False)

    def consumer_release(self, stage: Expr) -> list:
        """One thread per consumer warpgroup arrives on ``empty`` (both CTAs' when B is multicast)."""
        bar = Bar("empty", fold(stage))
        arrives = ((MbarrierArrive(bar, cta=Const(0)), MbarrierArrive(bar, cta=Const(1)))
                   if self.p.cfg.tma.multicast else (MbarrierArrive(bar),))
        return [If(eq(WARP % 4, 0), (Elect(arrives),))]

    def sm90_store(self, wg: Expr, tma: bool) -> list:
        """Fragments -> bf16 -> D: direct st.global, or 128B-swizzled staging + one TMA store per 64x64 box."""
        p = self.p
        out = []
        # wgmma m64nN fragment of lane l, warp w, value i: row 16*(w%4) + l/4 + 8*((i/2)&1), col 8*(i/4) + 2*(l%4) + (i&1)
        frag_row = (WARP % 4) * 16 + LANE // 4
        frag_col = (LANE % 4) * 2
        row0 = Var("m_row") + wg * p.consumer_rows
        sbn = p.store_block_n
        for v in range(p.m_waves):
            if not tma:
                for i in range(0, p.block_n // 2, 2):
                    out.append(StGlobalBf16(fold(row0 + v * p.wave_rows + frag_row + 8 * ((i // 2) & 1)),
                                            fold(Var("n_col") + 8 * (i // 4) + frag_col), f"acc{v}", (i, i + 1)))
                continue
            for c in range(p.block_n // sbn):
                seq = v * (p.block_n // sbn) + c
                out += self.cd_acquire(wg)
                buf = self.cd_buffer(seq, wg)
                for i in range(c * sbn // 2, (c + 1) * sbn // 2, 2):
                    row = fold(frag_row + 8 * ((i // 2) & 1))
                    chunk = i // 4 - c * sbn // 8
                    addr = fold(self.cd_addr(buf, row, chunk) + (LANE % 4) * 4)
                    out.append(StSharedBf16(addr, f"acc{v}", (i, i + 1)))
                out += self.cd_commit(fold(Var("n_col") + c * sbn), fold(row0 + v * p.wave_rows), seq, wg)
        return out
