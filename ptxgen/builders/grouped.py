"""The grouped GEMM's tile scheduler (``schedule.grouped``): mixture-of-experts, one B per group.

Both modes read a u32 table in global memory (kernel parameter ``group_ptr``) with
:class:`~ptxgen.ir.ops.LdGlobalNcU32`; the producer and the consumers walk the same tiles and take the same
skip decision from the same table word, so their operand-ring iterations (``tc x num_k + kb``, ``tc`` counting
the tiles this CTA computed, not the ones it skipped) stay in step.

* ``masked``: A ``[G, M_max, K]`` and D ``[G, M_max, N]`` flattened to ``[G x M_max, ...]`` (kernel ``m`` =
  M_max), B ``[G, N, K]`` flattened to ``[G x N, K]``, table ``masked_m[G]``.  Work unit ``t`` of
  ``G x num_m x num_n`` is group ``t / (num_m x num_n)``, then the usual swizzled tile; it is skipped when its
  m-block starts at or past ``masked_m[g]``.  Stores are guarded by ``row_end = g x M_max + masked_m[g]``.
* ``contiguous``: A ``[M_total, K]``, D ``[M_total, N]`` (kernel ``m`` = M_total), B as above, table
  ``m_indices[M_total]``: each group's rows form one segment padded with -1 rows to a multiple of block_m (the
  runtime refuses other tables).  An m-block lies in one segment: its group is ``m_indices[m_row]`` and it is
  skipped when that is -1.  Each consumer thread reads the table entry of each row it stores and stores only
  rows of the tile's group (padding rows stay untouched).

B rows of the last n-block of a group whose N is not a multiple of block_n come from the next group (or TMA's
zero fill past ``G x N``); they only feed columns ``>= N``, which no store writes.

A contiguous CTA pair (``cluster.size=2``, :meth:`GroupedTileScheduler.pair_unit`) takes two m-blocks of one n-block
and multicasts B when both are of one group, else each CTA loads its own group's B.  A masked pair
(:meth:`GroupedTileScheduler.masked_pair_unit`) takes two m-blocks of one group and always multicasts B.

With ``epilogue.store=tma`` a tile whose m-block lies wholly inside its group's valid rows (:func:`whole_block`) is
staged and TMA-stored as in the dense GEMM; every other tile keeps the guarded direct stores.
"""

from __future__ import annotations

from ..ir import (Const, Expr, For, If, Let, LdGlobalNcU32, Param, Sreg, Var, ceil_div, emax, emin, eq, land, le, lt, ne,
                  select)
from ..plan import Plan
from .common import LANE, T, WARP, Cluster, TileScheduler

#: ``m_indices`` of a padding row (-1 as u32)
NO_GROUP = 0xFFFFFFFF
GROUP, ROWS = Var("group_id"), Var("group_rows")


class GroupedTileScheduler(TileScheduler):
    """Persistent walk over (group, m-block, n-block), skipping empty work (see module docstring).

    ``setup()`` binds ``num_m``, ``num_n``, ``num_tiles`` (work units), ``cluster_id``, ``num_clusters`` and
    ``tc = 0``; ``loop(body)`` binds per unit ``group_id``, ``m_row`` (a row of the flattened A and D), ``n_col``,
    ``b_row`` (the row of the flattened B), for FP8 ``sa_col`` and ``sb_col`` (the tile's scale box columns),
    for masked ``row_end``; it runs ``body`` only for a unit with work and then advances ``tc``.
    """

    def __init__(self, plan: Plan, cluster: Cluster):
        super().__init__(plan, cluster)
        assert plan.split is None
        self.mode = plan.schedule.grouped

    def setup(self) -> list:
        p, cs = self.p, self.c.size
        tiles = Var("num_m") * Var("num_n")
        return [
            Let("num_m", ceil_div(Param("m"), p.schedule.cluster_tile_rows)),  # a pair: pair units of 2 m-blocks
            Let("num_n", ceil_div(Param("n"), p.mma.block_n)),
            Let("num_tiles", Param("num_groups") * tiles if self.mode == "masked" else tiles),
            Let("cluster_id", Sreg("ctaid") // cs if cs == 2 else Sreg("ctaid")),
            Let("num_clusters", Sreg("nctaid") // cs if cs == 2 else Sreg("nctaid")),
            Let("tc", Const(0)),
            *(self.lookahead(Var("cluster_id")) if p.schedule.table_lookahead else []),
        ]

    def tiles_done(self) -> Expr:
        """Tiles this CTA computed (``tc`` after the loop; skipped units do not count)."""
        return Var("tc")

    def loop(self, body: list) -> For:
        p = self.p
        if self.mode == "masked":
            per_group = Var("num_m") * Var("num_n")
            head = [Let("group_id", T // per_group),
                    *self.swizzle(T % per_group, [Let("m_local", self.cta_row())]),
                    LdGlobalNcU32("group_rows_raw", GROUP),  # clamped to M_max: never a row of the next group
                    Let("group_rows", emin(Var("group_rows_raw"), Param("m"))),
                    Let("m_row", GROUP * Param("m") + Var("m_local")),
                    Let("row_end", GROUP * Param("m") + ROWS),
                    *(self.masked_pair_unit() if self.c.size == 2 else [Let("has_work", lt(Var("m_local"), ROWS))])]
        else:
            order = (self.expert_runs(T) if p.schedule.expert_window
                     else self.swizzle(T, [Let("m_row", self.cta_row())]))
            head = [*order, *(self.pair_unit() if self.c.size == 2 else
                              [*self.unit_word("group_id", 0, Var("m_row")), Let("has_work", ne(GROUP, NO_GROUP))])]
            if p.schedule.table_lookahead:  # this unit's words are read: the next unit's reads go out now
                head += self.lookahead(T + Var("num_clusters"))
        head.append(Let("b_row", GROUP * Param("n") + Var("n_col")))
        if p.promotion is not None:
            # scale_b [k-blocks, G x blocks]: each group's blocks padded to whole 16-byte boxes (sb_box fp32); masked
            # scale_a [k-blocks, G x M_pad]: each group's rows padded to a multiple of sb_box, so that a box starts
            # 16-byte aligned (on the H100 a scale box at an unaligned column raised "illegal instruction")
            pr = p.promotion
            box_rows = pr.b_block_rows * pr.sb_box
            head.append(Let("sb_col", GROUP * (ceil_div(Param("n"), box_rows) * pr.sb_box)
                            + Var("n_col") // box_rows * pr.sb_box))
            head.append(Let("sa_col", GROUP * (ceil_div(Param("m"), pr.sb_box) * pr.sb_box) + Var("m_local"))
                        if self.mode == "masked" else Let("sa_col", Var("m_row")))
        step = [If(Var("has_work"), tuple(body)), Let("tc", Var("tc") + Var("has_work"))]
        return For("t", Var("cluster_id"), Var("num_tiles"), Var("num_clusters"), tuple(head + step))

    def pair_unit(self) -> list:
        """A CTA pair's unit (contiguous, ``cluster.size=2``): m-blocks ``2 cm`` (rank 0) and ``2 cm + 1`` (rank 1)
        of n-block ``n_col``.  Both CTAs read both m-blocks' first table words (``pair_word0``, ``pair_word1``; an
        m-block past ``m``, the odd last one, is padding), so every value below is uniform over the pair:

        * ``pair_group{r}``: the group of rank r's m-block, or the partner's when it is padding (its B then comes
          from the partner's group: a padding m-block's wgmmas feed no store).
        * ``has_work``: either m-block has a group.  Both CTAs run the unit's k-loop when one of them has work:
          the operand ring's iterations, the multicast stages and the cluster-wide ``empty`` arrives stay in step.
        * ``b_shared``: both m-blocks read one group's B; each CTA then loads half of each B k-block and
          multicasts it (PTX ISA "cp.async.bulk.tensor", ``.multicast::cluster``;
          :meth:`ptxgen.builders.roles.TmaProducer.load`), else each loads its whole group's
          k-block alone.  Either way a CTA's stage receives one whole B k-block (the same expect-tx bytes).
        * ``group_id``: this CTA's ``pair_group``; ``own_work``: its own m-block has a group (else it stores
          nothing, :func:`store_guard`).
        """
        p, rank = self.p, self.c.rank
        pair_row = Var("cm") * p.schedule.cluster_tile_rows
        row1 = pair_row + p.mma.block_m
        w0, w1 = Var("pair_word0"), Var("pair_word1")
        return [*self.unit_word("pair_word0", 0, pair_row),  # cm < num_m: a row of the table
                *self.unit_word("pair_word1_raw", 1, emin(row1, Param("m") - 1)),  # never past the table
                Let("pair_word1", select(lt(row1, Param("m")), Var("pair_word1_raw"), NO_GROUP)),
                Let("pair_group0", select(ne(w0, NO_GROUP), w0, w1)),
                Let("pair_group1", select(ne(w1, NO_GROUP), w1, w0)),
                Let("has_work", ne(Var("pair_group0"), NO_GROUP)),
                Let("b_shared", eq(Var("pair_group0"), Var("pair_group1"))),
                Let("group_id", select(eq(rank, 0), Var("pair_group0"), Var("pair_group1"))),
                Let("own_work", ne(select(eq(rank, 0), w0, w1), NO_GROUP))]

    def unit_word(self, var: str, j: int, row: Expr) -> list:
        """The unit's table word ``j`` into ``var``: the read of ``m_indices[row]``, or with ``table_lookahead`` the
        word :meth:`lookahead` read one unit earlier (``ahead_word{j}``)."""
        if self.p.schedule.table_lookahead:
            return [Let(var, Var(f"ahead_word{j}"))]
        return [LdGlobalNcU32(var, row)]

    def lookahead(self, tile: Expr) -> list:
        """``table_lookahead``: the table reads of unit ``tile`` (the CTA's next one) into ``ahead_word0`` (and for a
        pair ``ahead_word1``), the rows :meth:`pair_unit` or the single-CTA unit read.  Issued one unit early, the
        loads are in flight under the current unit's k-loop; the head of the next unit only copies them.  A unit
        past the walk (``tile >= num_tiles``: the loop ends before it) reads the last unit's words: every read stays
        inside the table (``m >= 1``).  The table is read-only during the kernel (PTX ISA "ld", ``.nc``), so the
        early read is the same word."""
        p = self.p
        bm, rows = p.mma.block_m, p.schedule.cluster_tile_rows
        last = emax(Var("num_tiles") - 1, 0)  # no unit (m = 0, never launched by the runtime): unit 0's rows
        ahead = self.swizzle(emin(tile, last), [], prefix="ahead_")[:-1]  # its cm; no n_col
        first = Var("ahead_cm") * rows
        out = [*ahead, LdGlobalNcU32("ahead_word0", first)]
        if self.c.size == 2:
            out.append(LdGlobalNcU32("ahead_word1", emin(first + bm, Param("m") - 1)))
        return out

    def masked_pair_unit(self) -> list:
        """A masked CTA pair's unit (``cluster.size=2``): m-blocks ``2 cm`` (rank 0) and ``2 cm + 1`` (rank 1) of one
        group's ``ceil(M_max / block_m)`` and n-block ``n_col``.  Both m-blocks read group ``group_id``'s B, so B is
        always multicast (each CTA loads half of each B k-block, as :meth:`pair_unit` with ``b_shared``).  Both
        CTAs read the one ``masked_m`` word, so ``has_work`` is uniform over the pair:

        * ``has_work``: the pair's first m-block starts before the group's (clamped) rows.  Both CTAs run the
          unit's k-loop then, also the one whose m-block holds no valid row: the operand ring's iterations, the
          multicast stages and the cluster-wide ``empty`` arrives stay in step.
        * ``own_work``: this CTA's m-block starts before them (else it stores nothing, :func:`store_guard`; its
          rows past ``M_max`` are the next group's rows of the flattened A, or TMA's zero fill past ``G x M_max``,
          and feed no store).
        """
        pair_row = Var("cm") * self.p.schedule.cluster_tile_rows
        return [Let("own_work", lt(Var("m_local"), ROWS)), Let("has_work", lt(pair_row, ROWS))]

    def cta_row(self) -> Expr:
        """This CTA's first row of unit ``cm``: ``cm x block_m``, or in a pair ``cm x 2 block_m + rank x block_m``."""
        p = self.p
        if self.c.size == 2:
            return Var("cm") * p.schedule.cluster_tile_rows + self.c.rank * p.mma.block_m
        return Var("cm") * p.mma.block_m

    def expert_runs(self, tile: Expr) -> list:
        """Contiguous walk in windows of expert runs (``schedule.expert_window`` = W > 0): tile ``tile`` -> ``cm``,
        ``m_row`` (:meth:`cta_row`), ``n_col``.  With a CTA pair the units are pair units (``cm`` covers
        ``cluster_tile_rows`` rows) and a unit's word is the one of its first m-block.

        Window ``tile / (num_n x W)`` covers m-blocks ``[win_m0, win_m0 + win_m)`` (``win_m = min(num_m - win_m0,
        W)``).  Its m-blocks are cut into runs: a run starts at the window's first m-block and wherever the
        ``m_indices`` word of an m-block's first row differs from the previous m-block's; a run is cut further into
        chunks of at most ``group_clusters`` m-blocks, counted from its start.  The chunk starting at window
        m-block ``cs`` owns the window's tiles ``[cs x num_n, (cs + len) x num_n)`` (the chunks before it hold
        ``cs`` m-blocks of ``num_n`` tiles each), walked m-block fastest: local tile ``l`` is m-block
        ``cs + l % len``, n-block ``l / len``.  So the chunk of window tile ``r`` is the one holding m-block
        ``q = r / num_n``, and the walk is a permutation of the window's tiles for any table: every tile of a
        window reads the same W words (the table is read-only during the kernel; PTX ISA "ld", ``.nc``), so all
        agree on the chunks.  Words past the table's last m-block read its last word (no run starts there).
        Every value is uniform over the CTA; the W loads are independent (one latency per tile).
        """
        p, w, cap = self.p, self.p.schedule.expert_window, self.p.schedule.group_clusters
        bm, q = p.schedule.cluster_tile_rows, Var("win_q")
        new = [Var(f"win_new{j}") for j in range(w)]  # new[j]: a run starts at window m-block j (j >= 1)
        run_start = Const(0)
        run_end = Var("win_m")
        for j in range(1, w):
            run_start = emax(run_start, select(land(new[j], le(j, q)), j, 0))
            run_end = emin(run_end, select(land(new[j], lt(q, j)), j, w))
        return [Let("win_m0", tile // (Var("num_n") * w) * w),
                Let("win_m", emin(Var("num_m") - Var("win_m0"), w)),
                Let("win_r", tile % (Var("num_n") * w)),
                Let("win_q", Var("win_r") // Var("num_n")),
                *[LdGlobalNcU32(f"win_word{j}", emin(Var("win_m0") + j, Var("num_m") - 1) * bm) for j in range(w)],
                *[Let(f"win_new{j}", ne(Var(f"win_word{j}"), Var(f"win_word{j - 1}"))) for j in range(1, w)],
                Let("run_start", run_start),
                Let("chunk_start", Var("run_start") + (q - Var("run_start")) // cap * cap),
                Let("chunk_len", emin(run_end, Var("chunk_start") + cap) - Var("chunk_start")),
                Let("chunk_tile", Var("win_r") - Var("chunk_start") * Var("num_n")),
                Let("cm", Var("win_m0") + Var("chunk_start") + Var("chunk_tile") % Var("chunk_len")),
                Let("m_row", self.cta_row()),
                Let("n_col", Var("chunk_tile") // Var("chunk_len") * p.mma.block_n)]


def b_row(plan: Plan) -> Expr:
    """The row of B a tile's load starts at: ``n_col``, or in a grouped kernel the flattened ``b_row``."""
    return Var("b_row") if plan.schedule.grouped != "none" else Var("n_col")


def b_k_row(plan: Plan) -> Expr:
    """An MN-major B's first K row in a grouped kernel: ``group_id x K``.  Its map is the ``[G x K, N]`` stack of
    the groups' ``[K, N]`` views (``tma.major_b: mn``), so a k-block past K would read the next group's first
    rows: the runtime takes such a B only when K is a multiple of block_k (``ptxgen.runtime.grouped``)."""
    return GROUP * Param("k")


def store_guard(plan: Plan) -> Expr | None:
    """The condition a tile's stores run under: a grouped CTA pair's ``own_work`` (its own m-block has rows of a
    group; its partner may have the unit's work alone, see :meth:`GroupedTileScheduler.pair_unit` and
    :meth:`GroupedTileScheduler.masked_pair_unit`); None (always) otherwise."""
    if plan.schedule.grouped != "none" and plan.roles.cluster_size == 2:
        return Var("own_work")
    return None


def b_shared(plan: Plan) -> Expr | None:
    """A contiguous CTA pair's choice between multicasting B and each CTA loading its own group's B (``b_shared``,
    :meth:`GroupedTileScheduler.pair_unit`); None where B's multicast is unconditional (a masked pair: both
    m-blocks are of one group) or absent."""
    return Var("b_shared") if plan.schedule.grouped == "contiguous" and plan.roles.cluster_size == 2 else None


def whole_block(plan: Plan) -> tuple[list, Expr | None]:
    """The test that lets a grouped kernel TMA-store a tile (``epilogue.store=tma``): (ops, condition), the ops
    (a contiguous kernel's table read, issued before the k-loop so that it is in flight under the mainloop) and the
    condition, nonzero when the tile's m-block lies wholly inside its group's valid rows; ([], None) for a kernel
    that is not grouped.

    A TMA store writes every in-bounds row of its box (PTX ISA "cp.async.bulk.tensor": the box is clipped at the
    tensor map's bounds only), so the box may hold no row that must stay untouched.  Masked: the m-block ends at or
    before the group's (clamped) ``masked_m[g]``.  Contiguous: the table word of the m-block's last row (read at
    ``min(m_row + block_m - 1, m - 1)``: never past the table) is the tile's group, and that row is inside D.  The
    runtime's table rules (``ptxgen.runtime.grouped.check_indices``: an m-block of 128 rows holds rows of one
    group, then -1 padding only) make an m-block whose first (``group_id``) and last words are the same group a
    block of that group's rows only; a contiguous block_m divides 128, so the rule holds for each m-block.  An
    unchecked table breaking the rules gets wrong rows of D, never a store outside D (the box is inside D's map).
    Every value the test reads is uniform over the CTA.
    """
    mode, bm = plan.schedule.grouped, plan.mma.block_m
    if mode == "masked":
        return [], lt(Var("m_local") + (bm - 1), ROWS)
    if mode == "contiguous":
        last = Var("m_row") + (bm - 1)
        return ([LdGlobalNcU32("last_row_group", emin(last, Param("m") - 1))],
                land(eq(Var("last_row_group"), GROUP), lt(last, Param("m"))))
    return [], None


def row_table_loads(plan: Plan, row0: Expr) -> list:
    """Contiguous grouped kernels: each consumer thread reads ``m_indices`` of the two rows per M-wave it stores
    (fragment rows ``l/4`` and ``l/4 + 8`` of its warp's 16; ``row0``: the warpgroup's first row in D)."""
    if plan.schedule.grouped != "contiguous":
        return []
    frag_row = (WARP % 4) * 16 + LANE // 4
    return [LdGlobalNcU32(f"row_group{v}_{h}", row0 + v * plan.mma.wave_rows + frag_row + 8 * h)
            for v in range(plan.mma.m_waves) for h in (0, 1)]


def store_row_end(plan: Plan, v: int, half: int) -> Expr | None:
    """The row bound of a fragment store of wave ``v``, row ``half`` (:class:`~ptxgen.ir.ops.StGlobal16` ``row_end``):
    masked ``row_end``; contiguous ``m`` for a row of the tile's group, else 0 (no store); None otherwise."""
    mode = plan.schedule.grouped
    if mode == "masked":
        return Var("row_end")
    if mode == "contiguous":
        return select(eq(Var(f"row_group{v}_{half}"), GROUP), Param("m"), 0)
    return None
