"""Pieces every kernel shares: the cluster view, the tile scheduler, setup and teardown.

Roles (:mod:`.roles`) are built over these.  Everything reads the plan, never
the config; pipeline indices come from the plan's :class:`~ptxgen.ir.Pipeline`
objects: ``it = tc * num_k + kb`` is the k-block's iteration of the operand
ring, ``tc`` the CTA's tile count (its iteration of the accumulator ring).
"""

from __future__ import annotations

from ..ir import (Bar, ClusterSync, Const, CtaSync, Elect, Expr, FenceMbarrierInit, For, GridDepControl, Let, MbarrierInit, Param,
                  Role, Sreg, TcgenFence, TmemAlloc, TmemBase, TmemDealloc, TmemRelinquish, Var, WarpSwitch, ceil_div,
                  emin, eq, fold, le, lift, select)
from ..ir.pipeline import PipelineState
from ..plan import SHIFT_COL_ALIGN, Plan

WARP, LANE, RANK = Sreg("warp"), Sreg("lane"), Sreg("rank")
T, KB, TMEM = Var("t"), Var("kb"), Var("tmem")


class Cluster:
    """This CTA's place in its cluster: ``rank`` (0 without a cluster), ``is_leader``, and its position among the
    cluster's tiles: ``m_rank`` along M, ``n_rank`` along N (a pair along M: ``rank``, 0; along N: 0, ``rank``; a 2x2
    square: ``rank % 2``, ``rank / 2``; an sm_100a pair: ``rank``, 0)."""

    def __init__(self, plan: Plan):
        self.size = plan.roles.cluster_size
        self.rank = RANK if self.size >= 2 else Const(0)
        self.is_leader = eq(self.rank, 0)
        sp = plan.schedule
        square = sp.m_ctas == 2 and sp.n_ctas == 2
        self.m_rank = self.rank % 2 if square else (Const(0) if sp.n_ctas == 2 else self.rank)
        self.n_rank = self.rank // 2 if square else (self.rank if sp.n_ctas == 2 else Const(0))
        self.square = square

    def half(self, rows_along: str) -> Expr:
        """Which half of a shared operand's rows this CTA loads: its position along the dimension the operand is
        shared across (A, rows along M, is shared by the CTAs of one m position: its n position; B by its m position;
        an sm_100a ``cta_group::2`` half of B: its rank, the m position)."""
        return self.n_rank if rows_along == "m" else self.m_rank

    def multicast_masks(self, rows_along: str, base: int) -> tuple[tuple[Expr, int], ...]:
        """The multicast masks of a shared operand's half load, each with the condition on this CTA's place that
        selects it: ``((None, base),)`` for a pair (both CTAs read every half); in a 2x2 square the two CTAs of this
        CTA's m position (A, ``base`` = 0b0101 shifted by ``m_rank``) or n position (B, ``base`` = 0b0011 shifted by
        ``2 x n_rank``), one load per place since the mask is an immediate (PTX ISA "cp.async.bulk.tensor":
        ``ctaMask``, a 16-bit operand)."""
        if not self.square:
            return ((None, base),)
        pos, step = (self.m_rank, 1) if rows_along == "m" else (self.n_rank, 2)
        return ((eq(pos, 0), base), (None, base << step))

    def release_ctas(self) -> tuple[Expr | None, ...]:
        """The CTAs whose ``empty`` a consumer arrives on (None: its own) after reading a stage: every CTA whose
        producer multicasts into that stage.  A pair: both ranks; a 2x2 square: itself, the CTA beside it along M
        (``rank ^ 1``) and along N (``rank ^ 2``), not the diagonal one, which shares neither operand."""
        if self.square:
            return (None, self.rank + 1 - 2 * self.m_rank, (self.rank + 2) % 4)
        return (Const(0), Const(1))


class TileScheduler:
    """Persistent, swizzled walk over cluster tiles (group of ``plan.schedule.group_clusters`` m-blocks).

    ``setup()`` binds ``num_m``, ``num_n``, ``num_tiles``, ``cluster_id``, ``num_clusters`` (and, with
    ``plan.schedule.shift_last_m_block``, ``last_m_row``: ``M - block_m``, or 0 when M < block_m; with
    ``shift_last_n_block``, ``last_n_col``: ``N - block_n`` rounded up to ``SHIFT_COL_ALIGN`` columns, or 0);
    ``loop(body)`` binds ``tc`` (the CTA's tile count), ``m_row`` and ``n_col`` for each tile (at most ``last_m_row``
    and ``last_n_col`` with the shifts: the last m-block's tile ends at row M, the last n-block's near column N).

    Split-K (``plan.split``): the loop walks ``num_units = num_tiles x splits`` work units; unit ``t`` is split
    ``split = t % splits`` of tile ``tile = t / splits`` (same swizzle over tiles), covering k-blocks
    ``[kb0, kb1)``; ``tc`` counts units and ``kdone`` (bound to 0 in ``setup()``, advanced after each unit)
    the k-blocks this CTA walked before the unit (see :class:`ptxgen.plan.SplitKPlan`).

    Split-K of the last wave (``plan.split.last_wave``): ``setup()`` also binds ``dp_tiles`` (whole waves of the
    launched grid: ``num_tiles - num_tiles % num_clusters``; the tail is ``num_tiles - dp_tiles``); unit ``t < dp_tiles``
    is tile ``t`` whole (``sk_tail`` = 0, split 0, k-blocks ``[0, num_k)``), unit ``t >= dp_tiles`` is split
    ``tail_u % splits`` of tail tile ``tail_tile = tail_u / splits`` (``tail_u = t - dp_tiles``, ``sk_tail`` = 1),
    tile ``dp_tiles + tail_tile``; the workspace is indexed by ``tail_tile``.
    """

    def __init__(self, plan: Plan, cluster: Cluster):
        self.p, self.c = plan, cluster

    def setup(self) -> list:
        cs = self.c.size
        return [
            Let("num_m", ceil_div(Param("m"), self.p.schedule.cluster_tile_rows)),
            Let("num_n", ceil_div(Param("n"), self.p.schedule.cluster_tile_cols)),  # a pair along N: pair units
            Let("num_tiles", Var("num_m") * Var("num_n")),
            Let("cluster_id", Sreg("ctaid") // cs),
            Let("num_clusters", Sreg("nctaid") // cs),
            *self.last_block_setup(),
        ] + self.split_setup()

    def last_block_setup(self) -> list:
        s, m, n, bm, bn = self.p.schedule, Param("m"), Param("n"), self.p.mma.block_m, self.p.mma.block_n
        return ([Let("last_m_row", select(le(bm, m), m - bm, 0))] if s.shift_last_m_block else []) + (
            [Let("last_n_col", select(le(bn, n), ceil_div(n - bn, SHIFT_COL_ALIGN) * SHIFT_COL_ALIGN, 0))]
            if s.shift_last_n_block else [])

    def m_row(self, m_block: Expr) -> Expr:
        """The first row of m-block ``m_block``'s tile (shifted to end at row M where that is the last m-block's)."""
        row = m_block * self.p.mma.block_m
        return emin(row, Var("last_m_row")) if self.p.schedule.shift_last_m_block else row

    def n_col(self, n_block: Expr) -> Expr:
        """The first column of n-block ``n_block``'s tile (shifted to end within :data:`SHIFT_COL_ALIGN` columns of
        N where that is the last's)."""
        col = n_block * self.p.mma.block_n
        return emin(col, Var("last_n_col")) if self.p.schedule.shift_last_n_block else col

    def split_setup(self) -> list:
        sp = self.p.split
        if sp is None:
            return []
        if not sp.last_wave:
            return [Let("num_units", Var("num_tiles") * sp.splits), Let("kdone", Const(0))]
        return [Let("dp_tiles", Var("num_tiles") - Var("num_tiles") % Var("num_clusters")),
                Let("num_units", Var("dp_tiles") + (Var("num_tiles") - Var("dp_tiles")) * sp.splits), Let("kdone", Const(0))]

    def split_tiles(self) -> Expr:
        """Cluster tiles with a workspace slot: every tile, or (last wave) one per cluster of the grid: the tail,
        ``num_tiles % num_clusters``, is fewer (:meth:`ptxgen.launch.WorkspaceSpec.cta_tiles_for`)."""
        return Var("num_clusters") if self.p.split.last_wave else Var("num_tiles")

    def tiles_done(self) -> Expr:
        """Tiles this CTA's cluster walks: ``ceil((num_tiles - cluster_id) / num_clusters)`` (``tc`` after the loop)."""
        return (Var("num_tiles") + Var("num_clusters") - 1 - Var("cluster_id")) // Var("num_clusters")

    def loop(self, body: list) -> For:
        p, g = self.p, self.p.schedule.group_clusters
        m_cta = (Var("cm") * p.schedule.m_ctas + self.c.m_rank) if p.schedule.m_ctas == 2 else Var("cm")
        tile, units, split_lets, after = T, Var("num_tiles"), [], []
        if p.split is not None:
            s = p.split.splits
            tile, units = Var("tile"), Var("num_units")
            split_lets = [Let("tile", T // s), Let("split", T % s),
                          Let("kb0", Var("split") * Var("num_k") // s),
                          Let("kb1", (Var("split") + 1) * Var("num_k") // s)]
            if p.split.last_wave:  # whole units first, then the tail's split units (the unit's split 0: kb0 = 0)
                tail = Var("sk_tail")
                split_lets = [Let("sk_tail", le(Var("dp_tiles"), T)),
                              Let("tail_u", select(tail, T - Var("dp_tiles"), 0)),
                              Let("tail_tile", Var("tail_u") // s),
                              Let("tile", select(tail, Var("dp_tiles") + Var("tail_u") // s, T)),
                              Let("split", Var("tail_u") % s),
                              Let("kb0", Var("split") * Var("num_k") // s),
                              Let("kb1", select(tail, (Var("split") + 1) * Var("num_k") // s, Var("num_k")))]
            after = [Let("kdone", Var("kdone") + (Var("kb1") - Var("kb0")))]
        sched = [
            Let("tc", (T - Var("cluster_id")) // Var("num_clusters")),
            *split_lets,
            *self.swizzle(tile, [Let("m_row", self.m_row(m_cta))]),
        ]
        return For("t", Var("cluster_id"), units, Var("num_clusters"), tuple(sched + body + after))

    def swizzle(self, tile: Expr, between: list, prefix: str = "") -> list:
        """Tile ``tile`` of the ``num_m x num_n`` grid in swizzled order: its cluster m-block ``cm``, then the lets
        ``between``, then ``n_col`` (groups of ``group_clusters`` m-blocks walk their n-blocks together, so they
        share B in L2).  ``prefix``: bind ``{prefix}cm`` etc. instead (another unit's, beside the current one's).
        A pair along N (``schedule.n_ctas = 2``): the unit's cluster n-block ``cn`` holds n-blocks ``2 cn`` and
        ``2 cn + 1``; this CTA's ``n_col`` is its own, ``(2 cn + rank) x block_n``."""
        g, sp = self.p.schedule.group_clusters, self.p.schedule
        cn = Var(prefix + "r") // Var(prefix + "gm")
        n_block = cn * sp.n_ctas + self.c.n_rank if sp.n_ctas == 2 else cn

        def v(name: str) -> Var:
            return Var(prefix + name)
        return [
            Let(prefix + "grp", tile // (Var("num_n") * g)),
            Let(prefix + "gm", emin(Var("num_m") - v("grp") * g, g)),
            Let(prefix + "r", tile % (Var("num_n") * g)),
            Let(prefix + "cm", v("grp") * g + v("r") % v("gm")),
            *between,
            Let(prefix + "n_col", self.n_col(n_block)),
        ]

    def cta_tile(self) -> Expr:
        """This CTA's split-K workspace slot among the split CTA tiles: ``tile x ctas_per_tile + rank`` (last wave:
        ``tail_tile`` for ``tile``)."""
        ctas = self.p.split.workspace.ctas_per_tile
        tile = Var("tail_tile") if self.p.split.last_wave else Var("tile")
        return fold(tile * ctas + self.c.rank) if ctas == 2 else tile


def k_bounds(plan: Plan) -> tuple[Expr, Expr]:
    """First and end k-block of the current work unit: ``[0, num_k)``, or a split's ``[kb0, kb1)``."""
    return (Var("kb0"), Var("kb1")) if plan.split is not None else (Const(0), Var("num_k"))


def k_loop(body: list, bounds: tuple[Expr, Expr] = (Const(0), Var("num_k"))) -> For:
    """``for kb in [start, end)``: the k-blocks of one tile (:func:`k_bounds` of a split-K unit)."""
    return For("kb", bounds[0], bounds[1], Const(1), tuple(body))


def ring_iteration(plan: Plan, kb: Expr) -> Expr:
    """Operand-ring iteration of k-block ``kb`` of the current unit: ``tc x num_k + kb`` (split-K: ``kdone + kb - kb0``)."""
    if plan.split is not None:
        return Var("kdone") + (kb - Var("kb0"))
    return Var("tc") * Var("num_k") + kb


def ring_state(plan: Plan) -> tuple[list, PipelineState]:
    """``it``, ``stage`` and ``phase`` of the current k-block in the operand ring."""
    lets, st = plan.ab.state(Var("it"))
    return [Let("it", ring_iteration(plan, KB)), *lets], st


def acc_state(plan: Plan) -> tuple[list, PipelineState]:
    """``acc`` and ``acc_phase`` of the current tile in the accumulator ring (sm_100a)."""
    return plan.acc.state(Var("tc"), ("acc", "acc_phase"))


#: the shared-window address bits a matrix descriptor's 14-bit start field holds (bits 4-17: PTX ISA "Matrix
#: Descriptor Format", ``(addr & 0x3FFFF) >> 4``)
DESC_ADDR_MASK = 0x3FFFF


def desc_lo(plan: Plan, offset: Expr, lbo_field: int | None = None, masked: bool = False) -> Expr:
    """Descriptor low word for smem+offset: start >> 4 | LBO field << 16 (the plan's operand LBO unless given).

    ``masked``: the address is cut to the start field's bits first.  In a cluster launch a CTA's shared::cta
    addresses carry its rank above bit 17 (the H100 gives rank 1 addresses 16 MiB up), which, shifted, land in the
    LBO field: harmless where the layout ignores LBO (K-major 128B swizzle), not where it steps along M or N
    (an MN-major operand, whose second CTA otherwise read its B 256 bytes = two K rows off on the H100).
    """
    lbo = plan.mma.desc_lbo_field if lbo_field is None else lbo_field
    addr = Sreg("smem") + offset
    return fold((((addr & DESC_ADDR_MASK) if masked else addr) >> 4) | (lbo << 16))


def stage_offset(plan: Plan, operand: str, stage: Expr) -> Expr:
    """Byte offset of operand ``operand``'s slot ``stage``."""
    region = plan.loads.operand(operand).region
    return fold(region.offset + stage * region.stride)


def setup(plan: Plan, cluster: Cluster, scheduler: TileScheduler) -> list:
    """Barrier init (one elected thread), TMEM allocation (sm_100a), then a CTA/cluster sync; with ``schedule.pdl``
    every thread then waits for the previous grid (``griddepcontrol.wait``); then the tile scheduler's setup (a
    grouped walk reads its table: global memory, after the wait).

    With ``cta_group::2`` the paired allocation waits for a cluster barrier after the inits: the peer CTA must be
    running (PTX ISA "tcgen05.alloc").
    """
    inits = []
    for spec in plan.barrier_specs():
        count = lift(spec.init[0]) if len(set(spec.init)) == 1 else select(cluster.is_leader, spec.init[0], spec.init[1])
        inits.append(For("i", Const(0), Const(spec.num), Const(1), (MbarrierInit(Bar(spec.name, Var("i")), count),)))
    roles = [Role("init", 0, 1, (Elect((*inits, FenceMbarrierInit())),))]
    alloc = Role("tmem_alloc", plan.roles.alloc_warp, plan.roles.alloc_warp + 1, (TmemAlloc(plan.tmem.cols), TmemRelinquish()))
    unroll = plan.promotion.unroll if plan.promotion is not None else 1  # FP8: whole main-loop iterations
    num_k = ceil_div(Param("k"), plan.mma.block_k) if unroll == 1 else ceil_div(Param("k"), plan.mma.block_k * unroll) * unroll
    out = [Let("num_k", num_k)]
    if plan.is_sm100 and plan.roles.cta_group == 2:
        # tcgen05.alloc.cta_group::2 needs the peer CTA running (PTX ISA "tcgen05.alloc").  Order: barrier init + fence.mbarrier_init -> cluster
        # arrive.release/wait.acquire -> alloc + relinquish -> fence::before -> cluster sync (peer's alloc
        # done, address slot written) -> fence::after -> read the address slot.
        out += [WarpSwitch(tuple(roles)), ClusterSync(), WarpSwitch((alloc,))]
    else:
        out.append(WarpSwitch(tuple(roles + ([alloc] if plan.is_sm100 else []))))
    if plan.is_sm100:
        out.append(TcgenFence("before"))
    out.append(ClusterSync() if cluster.size > 1 else CtaSync())
    if plan.is_sm100:
        out += [TcgenFence("after"), TmemBase("tmem")]
    if plan.schedule.pdl:
        # programmatic dependent launch (PTX ISA "griddepcontrol"): the setup above touches shared memory, TMEM and
        # the parameters only, so it overlaps the previous grid's completion; every global access follows the wait
        # (the previous grid complete, its memory visible).  No griddepcontrol.launch_dependents: without it the
        # next grid launches as each CTA here exits, placed as a fresh launch.  An early trigger launches it while
        # this grid runs, its CTAs take the SMs this grid leaves idle or frees first, and an uneven grid (split-K
        # units not a multiple of the CTAs, fewer CTAs than SMs) placed that way ran up to 1.27x slower on the
        # H100 (docs/performance.md, "Programmatic dependent launch").
        out.append(GridDepControl("wait"))
    return out + scheduler.setup()  # after the wait: a grouped walk reads its table here


def teardown(plan: Plan, cluster: Cluster) -> list:
    """Every CTA of the cluster done before TMEM is freed and before any CTA exits."""
    if not plan.is_sm100:
        return [ClusterSync()] if cluster.size > 1 else []
    out = [TcgenFence("before"), ClusterSync() if cluster.size == 2 else CtaSync(), TcgenFence("after"),
           WarpSwitch((Role("tmem_dealloc", plan.roles.alloc_warp, plan.roles.alloc_warp + 1, (TmemDealloc(TMEM, plan.tmem.cols),)),))]
    if cluster.size == 2:
        out.append(ClusterSync())  # no CTA exits while its peer may still touch its barriers or TMEM
    return out
