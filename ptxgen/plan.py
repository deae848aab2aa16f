"""The plan: every number derived from a config, computed once.

The builders read these numbers (and, through the kernel IR, the emitters, the
verifier, the simulator and the runtime); none of them recomputes an offset, a
byte count, a barrier count or a shape.  A :class:`Plan` is nested by concern,
each part a frozen dataclass built by its own function and composed by
:func:`make_plan`: ``roles`` (threads and warps), ``loads`` (TMA operands per
stage), ``mma`` (tile shape, waves, k-steps, descriptors), ``tmem``,
``scales`` (NVFP4), ``smem`` (layout, residency), ``epilogue`` (stores and the
CD staging), ``schedule``, ``registers`` and ``split`` (split-K), beside the
pipelines the roles hand work through (``ab``, ``acc``, ``cd_ring``,
``math_order``).  Each part's docstring states its units.

The plan imports the config, never the reverse: :func:`make_plan` is where the
budgets (shared memory, TMEM columns, registers) are checked, raising
:class:`ConfigError` with the plan's real numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import descriptors, epi
from .config import FP8_SCALE_BLOCK, Config
from .hw import (MN_MAJOR_CHUNK, SF_ATOM_BYTES, SF_ATOM_K, SF_ATOM_ROWS, SF_LINE_BYTES, SF_TMEM_COLS_PER_ATOM, SM_SMEM_BYTES,
                 SMEM_LIMIT_BYTES, TMEM_COLUMNS, resident_ctas)
from .errors import ConfigError
from .ir.kernel import BarrierArray, Kernel, SmemRegion
from .ir.pipeline import BulkStoreRing, Pipeline, PipelineTmaAsync, PipelineTmaUmma, PipelineUmmaAsync
from .launch import PARAMS, GridPolicy, LaunchSpec, TensorMapSpec, WorkspaceSpec
from .version import __version__

BF16_BYTES = 2
SWIZZLE_ATOM_BYTES = 1024  # 8 rows x 128 B: a 128B-swizzle atom (PTX ISA "Tensor copy: swizzle modes")
SWIZZLE_ATOM_ROW_BYTES = 128  # one row of a 128B-swizzle atom
MBARRIER_BYTES = 8
WARPS_PER_WARPGROUP = 4
TMA_PLAIN_ALIGN = 128  # shared destination of a non-swizzled cp.async.bulk.tensor (PTX ISA "cp.async.bulk.tensor")
TMEM_LANES = 128
UMMA_K = 16  # bf16 tcgen05.mma / wgmma K per instruction
FP8_BYTES = 1
E4M3_BYTES = 1  # an e4m3 D element (float8_e4m3fn)
WGMMA_K_FP8 = 32  # wgmma K per instruction for 8-bit inputs (PTX ISA "wgmma.mma_async": .e4m3/.e5m2, k32)
F32_SCALE_BYTES = 4
SB_BOX_COLS = 16 // F32_SCALE_BYTES  # a scale_b box: 4 fp32 (a TMA box's inner extent is a multiple of 16 B)
K_MULTIPLE_FP8 = 16 // FP8_BYTES  # the A/B maps need 16-byte row strides: K % 16 == 0
SM100_FLOPS_PER_CYCLE = 8192  # dense bf16 per SM per cycle, B200 (for the level-8 throttle only)
SM100_CLOCK_GHZ = 1.9


Region = SmemRegion  # a shared-memory region of the plan (the IR's type: the kernel carries it)
BarrierSpec = BarrierArray  # an mbarrier array of the plan (the IR's type)
#: registers an sm_90a consumer thread needs beside its accumulator and packed arrays under epilogue.overlap
#: (descriptors, stage/phase, tile origin, staging addresses): ptxas 13 fit 88 + 44 in 152, spilled 96 + 48
OVERLAP_SPARE_REGS = 16
STORE_N_MULTIPLE = 16 // BF16_BYTES  # a D tensor map needs 16-byte row strides: N % 8 == 0 (PTX ISA "Tensor maps")
K_MULTIPLE_BF16 = 16 // BF16_BYTES  # the A/B maps need 16-byte row strides: K % 8 == 0


@dataclass(frozen=True)
class OperandPlan:
    """One TMA-loaded mainloop operand (A, B): where its stages live and how one CTA loads them.

    name: tensor-map and operand name (``a``, ``b``).
    region: its shared-memory stages.
    rows_along: ``m`` or ``n``: which output dimension the box rows follow.
    box_rows: rows one CTA's TMA load moves (a cta_group::2 or multicast half of B is half the tile; a
        multicast half of a scale tile is half its lines).
    load_bytes: bytes one CTA's load moves per stage (a multicast half: half of what lands in each CTA).
    desc_hi: the constant high word of its MMA smem descriptor (a scale tile: of its ``tcgen05.cp`` source).
    scales: for a scale-factor tile (NVFP4), the name of the operand it scales (``a``, ``b``, ``b2``); "" for a
        matrix operand.  Its box rows are then 128-byte lines of the blocked scale layout (4 per 512-B atom).
    tmem_col: a scale tile's first TMEM column (relative to the allocation); its atoms follow, ``sf_cols_per_atom`` apart.
    block_scale: for an FP8 scale vector (fp32, one per 128-K block), the name of the operand it scales (``a``:
        one per row of A, ``b``: one per 128 rows of B); "" otherwise.  Its map is the transposed scales
        ``[ceil(K / 128), rows]`` (one k-block's scales contiguous); one box is ``box_cols`` scales of one k-block
        (``box_rows`` = 1), read from shared memory by the consumers' promotion after the ``full`` wait.
    box_cols: an FP8 scale vector's box width in fp32 elements (0: the matrix operands' ``k_coord_step``).
    cache_hint: L2 eviction priority of its loads (``tma.cache_hint_a`` / ``cache_hint_b``): ``none``,
        ``evict_first`` or ``evict_last``.
    multicast: the CTA mask of a ``split == "multicast"`` load (``.multicast::cluster``), 0 otherwise; in a 2x2
        square the mask of the CTAs at position 0 of the dimension the operand is not shared along (A: m position
        0, ``0b0101``; B: n position 0, ``0b0011``), shifted by the loading CTA's position there (A: by its m
        position, B: by 2 x its n position; :meth:`ptxgen.builders.common.Cluster.multicast_masks`).
    major: ``k`` (rows of K contiguous: one box of ``box_rows`` rows x ``block_k``) or ``mn`` (the operand's M or N
        contiguous, ``tma.major_a`` / ``major_b``): ``box_rows / MN_MAJOR_CHUNK`` boxes of ``MN_MAJOR_CHUNK`` M or N
        elements x ``block_k`` K rows, each a column of 128B-swizzle atoms ``mn_chunk_bytes`` long in the slot.
    """

    name: str
    region: SmemRegion
    rows_along: str
    box_rows: int
    load_bytes: int
    desc_hi: int
    split: str = "none"
    scales: str = ""
    tmem_col: int = 0
    cache_hint: str = "none"
    multicast: int = 0
    block_scale: str = ""
    box_cols: int = 0
    major: str = "k"

    # split: how a CTA pair shares the operand: ``none`` (each CTA loads its own tile),
    # ``cta_group`` (sm_100a cta_group::2: each CTA loads its half of the rows into its own stage),
    # ``multicast`` (each CTA loads one half of the rows and multicasts it to both CTAs' stage, at
    # ``rank x load_bytes`` into the slot: sm_90a halves of the pair's shared operand, B along M or A along N; sm_100a
    # NVFP4 pairs: SFB1/SFB2 halves, which every CTA needs whole since its MMA rows span all of N).


@dataclass(frozen=True)
class MmaPlan:
    """One MMA stream of the mainloop: accumulator ``acc`` += ``a`` x ``b``^T.

    acc: accumulator index: TMEM column block (sm_100a) or register fragment array ``acc{acc}_{wave}`` (sm_90a).
    a, b: operand names (``a``, ``b``).
    """

    acc: int
    a: str
    b: str
    sfa: str = ""
    sfb: str = ""
    collector: str = ""

    # sfa, sfb: the scale-factor operands of a block-scaled MMA (NVFP4), "" for a plain one.
    # collector: the stream's ``.collector::a::*`` usage (PTX ISA "tcgen05.mma"), "" for none: in an NVFP4 dual GEMM
    # the B1 MMA fills the collector buffer with the A slice and the B2 MMA on the same A slice, issued right after
    # it, reads A from there (``lastuse``); the ISA allows the qualifier on the block-scaled kinds with A in smem.


WORKSPACE_PARAM = ("workspace", "u64")  # the split-K kernels' extra parameter (after ``k``)
#: the grouped kernels' extra parameters (after ``k``): the u32 table (masked_m or m_indices) and G
GROUP_PARAMS = (("group_ptr", "u64"), ("num_groups", "u32"))
F32_BYTES = 4
PARTIAL_CHUNK_VALUES = 4  # fp32 values per thread per partial access: one st/ld.global.v4.f32 (16 B)


@dataclass(frozen=True)
class SplitKPlan:
    """Split-K into a global workspace, the last arriver reduces (sm_90a, ``schedule.split_k = splits > 1``).

    Work units.  The persistent scheduler walks ``tiles x splits`` units in the usual swizzled tile
    order; unit ``u`` is split ``u % splits`` of tile ``u // splits`` (a tile's splits are consecutive
    units, so they run at once on neighbouring CTAs and the tile's last arriver comes soon after the
    first) and covers k-blocks ``[s * num_k // splits, (s + 1) * num_k // splits)`` (``num_k`` is a
    runtime value: the builder emits the expression, the IR carries it; a split is empty when
    ``num_k < splits`` and then neither publishes nor arrives: ``min(num_k, splits)`` splits arrive).
    The operand ring counts k-blocks across units (``kdone``: k-blocks this CTA walked before the unit).

    Last wave only (``last_wave``, ``schedule.split_k_tiles = last_wave``).  With ``G`` the launched grid in
    clusters, the first ``dp_tiles = tiles - tiles % G`` tiles (whole waves) are data-parallel units: unit
    ``t < dp_tiles`` is tile ``t`` with k-blocks ``[0, num_k)``, no partial, no arrival, the normal epilogue.  The
    ``tiles % G`` tail tiles are split: unit ``t >= dp_tiles`` is split ``(t - dp_tiles) % splits`` of tile
    ``dp_tiles + (t - dp_tiles) / splits``, and its workspace slot and counters are those of tail tile
    ``tile - dp_tiles`` (the workspace has a slot per cluster of the grid: the tail is fewer).  Units are dealt round-robin, so every cluster runs ``dp_tiles / G`` whole tiles, then
    its tail units, which run at once across the machine.  The host computes the same numbers from the grid it
    launches (:meth:`ptxgen.launch.GridPolicy.split_units`).

    Fixup, per consumer warpgroup ``g`` of CTA tile ``t`` (see :class:`~ptxgen.launch.WorkspaceSpec` for
    the layout).  Every non-empty split ``s`` stores its fp32 fragments to partial ``s`` (``st.global.v4.f32``),
    syncs the warpgroup (``bar.sync``), and one thread arrives on counter ``(t, g)`` with
    ``atom.acq_rel.gpu.global.add.u32``, reading the count before its arrival (PTX ISA "atom", "Memory
    Consistency Model": the release orders the warpgroup's stores, which the bar.sync ordered before it, before
    the arrival; the acquire orders every earlier arriver's stores before this thread's later loads).  The
    thread that reads ``arrivals - 1`` is the tile's last arriver: it resets the counter to 0 (the workspace
    cleans itself: the next launch, or a CUDA-graph replay, starts from 0; nothing else touches the counter in
    this launch), and the warpgroup learns the verdict at a ``bar.red.popc`` that also carries the acquire to
    its other threads; they add the other non-empty partials into their registers (``ld.global.v4.f32``) and
    run the normal epilogue.  The other splits go on to their next unit.

    No wait.  No CTA ever waits on another: an arrival is one atomic, and the last arriver reads partials
    that are complete by the time it arrives.  So any grid (not all resident, a CTA pair, another kernel
    sharing the SMs) finishes.  Two launches sharing one workspace at once would mix their counts: the
    runtime gives each (device, stream) its own workspace (``ptxgen.runtime.api.split_k_workspace``).

    Attributes:
        splits: ``split_k``.
        last_wave: only the last, partial wave's tiles are split (the others run whole).
        workspace: the layout (also in the launch spec, for the runtime and the simulator).
        group_bytes: bytes of one consumer warpgroup's share of a partial (consumer_rows x block_n x 4 B x accumulators).
        group_threads: threads of a consumer warpgroup (128).
        chunk_values: fp32 values per thread per access (4: 16 B).
        chunks: accesses per thread per fragment array (block_n / 2 / chunk_values).
        vote: the consumer passes the verdict of ``bar.red.popc`` through ``vote.sync.any`` (the same value, which
            ptxas then treats as warp-uniform, so the persistent loop after it keeps the uniform datapath): where the
            accumulator holds at most :data:`VOTE_MAX_ACC_REGS` registers per thread.
    """

    splits: int
    workspace: WorkspaceSpec
    group_bytes: int
    group_threads: int
    chunk_values: int
    chunks: int
    last_wave: bool = False
    vote: bool = False

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_values * F32_BYTES

    def chunk_offset(self, group, array: int, chunk: int, thread):
        """Byte offset, inside a partial, of chunk ``chunk`` of fragment array ``array`` of ``thread`` of ``group``.

        Fragment order: consecutive threads hold consecutive 16 B (coalesced), arrays and chunks follow.
        """
        return group * self.group_bytes + ((array * self.chunks + chunk) * self.group_threads + thread) * self.chunk_bytes


@dataclass(frozen=True)
class RolesPlan:
    """Who runs what: the CTA's threads, the warp of each role and the knobs the roles branch on.

    Units: threads, warp indices inside the CTA, CTAs (cluster), warpgroups (128 threads).

    threads: threads per CTA.
    cluster_size: CTAs per cluster (1 or 2).
    cta_group: sm_100a ``tcgen05`` cta_group (1 or 2); 1 on sm_90a.
    producer_warp, mma_warp, alloc_warp: the TMA producer's, the MMA issuer's (sm_100a; sm_90a: the first consumer
        warp) and the TMEM allocator's warp.
    epilogue_warp0, epilogue_warps: the first epilogue (sm_90a: consumer) warp and how many there are.
    consumer_warpgroups: sm_90a consumer warpgroups (1 on sm_100a).
    pingpong: sm_90a ``mma.consumers=pingpong``: each consumer warpgroup computes whole tiles, taking turns.
    tile_owners: warpgroups the CTA's tiles are dealt among (CTA-local tile ``tc`` belongs to ``tc % tile_owners``).
    lockstep: one warp issues a k-block's loads and MMAs in program order (levels 1-2).
    mma_all_lanes: the whole MMA warp waits; descriptors shared by ``shfl.sync`` (level 9).
    dedicated_epilogue: a separate epilogue warpgroup with its own tile loop.
    """

    threads: int
    cluster_size: int
    cta_group: int
    producer_warp: int
    mma_warp: int
    alloc_warp: int
    epilogue_warp0: int
    epilogue_warps: int
    consumer_warpgroups: int
    pingpong: bool
    tile_owners: int
    lockstep: bool
    mma_all_lanes: bool
    dedicated_epilogue: bool

    @property
    def epilogue_warp_end(self) -> int:
        """One past the last epilogue (sm_90a: consumer) warp."""
        return self.epilogue_warp0 + self.epilogue_warps


@dataclass(frozen=True)
class LoadsPlan:
    """The operands the TMA producer loads into each stage of the operand ring, and what one stage weighs.

    Units: rows, bytes per stage per CTA, elements of the operand map (``k_coord_step``, ``k_multiple``).

    operands: every TMA-loaded operand (A, B, B2, then NVFP4 scale tiles), in parameter order.
    a_box_rows, b_box_rows: rows of A / of each B one CTA's load moves (the shared operand's: half its tile);
        b_smem_rows: rows of B in a CTA's stage.
    a_stage_bytes, b_stage_bytes: bytes of one stage of A / of each B in one CTA's shared memory.
    b_load_bytes: bytes of each B one CTA's load moves (a multicast half: half the stage); A's: ``operand("a")``.
    load_bytes: bytes one CTA's loads move per stage (every operand; the L2 -> SM traffic of one CTA).
    expect_tx_bytes: bytes landing in one CTA's stage per phase (its own loads plus the peer's multicast
        halves): its ``arrive.expect_tx`` (sm_100a).
    full_tx_bytes: bytes the waited-on ``full`` barrier receives per phase.
    k_coord_step: TMA inner coordinate advance per k-block (bf16 elements, or bytes of packed e2m1).
    k_multiple: K must be a multiple of this (elements).
    two_sm: sm_100a ``cta_group::2`` loads completing on the leader's barrier.
    multicast: sm_90a: the shared operand's halves multicast across the CTA pair (every consumer release then
        arrives on both CTAs' ``empty``: the peer's next multicast writes this CTA's stage).
    shared: sm_90a: the operand the pair multicasts: ``b`` (a pair along M), ``a`` (along N), "" (none).
    """

    operands: tuple[OperandPlan, ...]
    a_box_rows: int
    b_box_rows: int
    b_smem_rows: int
    a_stage_bytes: int
    b_stage_bytes: int
    b_load_bytes: int
    load_bytes: int
    expect_tx_bytes: int
    full_tx_bytes: int
    k_coord_step: int
    k_multiple: int
    two_sm: bool
    multicast: bool
    shared: str = ""

    def operand(self, name: str) -> OperandPlan:
        return next(o for o in self.operands if o.name == name)

    @property
    def matrix_operands(self) -> tuple[OperandPlan, ...]:
        """The operands an MMA reads through smem descriptors (A, B, B2)."""
        return tuple(o for o in self.operands if not o.scales and not o.block_scale)

    @property
    def scale_operands(self) -> tuple[OperandPlan, ...]:
        """NVFP4 scale-factor tiles (SFA, SFB, SFB2): copied to TMEM with ``tcgen05.cp`` before the MMAs."""
        return tuple(o for o in self.operands if o.scales)

    @property
    def block_scale_operands(self) -> tuple[OperandPlan, ...]:
        """FP8 scale vectors (scale_a, scale_b): read from the landed stage by the consumers' promotion."""
        return tuple(o for o in self.operands if o.block_scale)

    @property
    def a(self) -> SmemRegion:
        """A's shared-memory stages."""
        return self.operand("a").region

    @property
    def b(self) -> SmemRegion:
        """B's shared-memory stages."""
        return self.operand("b").region


@dataclass(frozen=True)
class MmaIssuePlan:
    """The mainloop's MMAs: tile shape, M-waves, k-steps, the MMA streams and the descriptors' constant parts.

    Units: elements (tile and MMA shapes), rows, bytes (strides), descriptor fields (16-byte units), ns.

    block_m, block_n, block_k: the CTA's output tile and its K per stage.
    umma_m: M of one MMA instruction (sm_100a ``128 x cta_group``; sm_90a wgmma 64).
    m_waves: sm_100a 128-row UMMA waves per CTA; sm_90a 64-row wgmma waves per consumer warpgroup.
    wave_rows: rows of one wave; consumer_rows: sm_90a rows one consumer warpgroup computes (m_waves x wave_rows).
    k_steps: MMAs along K per k-block (block_k / MMA K).
    wg_row_stride: sm_90a tile rows between consecutive consumer warpgroups' slices (pingpong: 0, whole tiles).
    wg_a_stride: sm_90a bytes of an A stage between consecutive consumer warpgroups' slices (pingpong: 0).
    a_wave_bytes: bytes of one M-wave of A rows in a stage; wave_desc: its descriptor increment (a_wave_bytes >> 4).
    fragment_regs: sm_90a fp32 registers per thread of one wave's wgmma m64nN fragment (block_n / 2).
    streams: the MMA streams (one per accumulator).
    order: ``interleaved``: per k-step one MMA of every stream (B1 then B2) reading the same A slice.
    operand_format: ``bf16``, ``nvfp4`` (packed e2m1, block-scaled MMA), ``fp8`` (sm_90a promotion) or ``mxfp8``
        (e4m3 with ue8m0 scales, block-scaled MMA).
    idesc: sm_100a instruction descriptor (0 on sm_90a); step_idesc: a block-scaled MMA's descriptor per k-step (the
        scale-factor data IDs of :attr:`ScalesPlan.steps` filled in), () when every k-step uses ``idesc``.
    a_desc_hi, b_desc_hi: constant high words of the smem descriptors.
    desc_lbo_field: bits 16-29 of a descriptor's low word (LBO >> 4).
    k_step_desc: low-word increment per MMA k-step (bytes >> 4).
    throttle_ns: level 8's idle time after each commit (0: none).
    trans_a, trans_b: sm_90a wgmma's transpose immediates: A / B is MN-major (``tma.major_a`` / ``major_b``).
    mn_lbo_field: an MN-major operand's LBO field: the bytes between its 64-element M or N chunks (one chunk is
        ``block_k`` K rows of 128 B), >> 4 (PTX ISA "Matrix Descriptor Format": for MN-major swizzled layouts the
        leading byte offset steps along M or N and the stride byte offset, 1024 B, along K by 8 rows).
    mn_k_step_desc: an MN-major operand's low-word increment per k16 step: 16 K rows of 128 B, >> 4.
    """

    block_m: int
    block_n: int
    block_k: int
    umma_m: int
    m_waves: int
    wave_rows: int
    consumer_rows: int
    k_steps: int
    wg_row_stride: int
    wg_a_stride: int
    a_wave_bytes: int
    wave_desc: int
    fragment_regs: int
    streams: tuple[MmaPlan, ...]
    order: str
    operand_format: str
    idesc: int
    a_desc_hi: int
    b_desc_hi: int
    desc_lbo_field: int
    k_step_desc: int
    throttle_ns: int
    step_idesc: tuple[int, ...] = ()
    trans_a: bool = False
    trans_b: bool = False
    mn_lbo_field: int = 0
    mn_k_step_desc: int = 0

    @property
    def mn_chunk_bytes(self) -> int:
        """Bytes between an MN-major operand's 64-element M or N chunks in a stage (its LBO)."""
        return self.mn_lbo_field << 4

    def desc_steps(self, mn_major: bool) -> tuple[int, int]:
        """(LBO field, low-word increment per k-step) of an operand's descriptor: MN-major, the LBO between its M or N
        chunks and 16 K rows per k-step; K-major, the LBO its layout ignores and the k-step's bytes of K."""
        return (self.mn_lbo_field, self.mn_k_step_desc) if mn_major else (self.desc_lbo_field, self.k_step_desc)

    @property
    def accumulator_regs(self) -> int:
        """sm_90a: fp32 accumulator registers per consumer thread (every wave's fragment of every stream)."""
        return self.m_waves * self.fragment_regs * len(self.streams)


@dataclass(frozen=True)
class TmemPlan:
    """sm_100a Tensor Memory (PTX ISA "Tensor Memory"); zeros on sm_90a.  Units: 32-bit columns.

    cols: columns ``tcgen05.alloc`` takes (a power of two >= 32).
    wave_cols: columns of one M-wave of an accumulator (block_n: one fp32 column per output column).
    acc_cols: columns of one accumulator (wave_cols x m_waves).
    acc_stage_cols: columns of one accumulator stage (every accumulator of a tile, side by side).
    """

    cols: int
    wave_cols: int
    acc_cols: int
    acc_stage_cols: int

    def acc_col(self, acc: int, wave: int) -> int:
        """First column, inside a stage, of accumulator ``acc``'s M-wave ``wave``."""
        return acc * self.acc_cols + wave * self.wave_cols


@dataclass(frozen=True)
class ScalesPlan:
    """NVFP4 block scaling (see :mod:`ptxgen.descriptors`); scale tiles are :class:`OperandPlan` s with ``scales`` set.

    Units: bytes, 32-bit TMEM columns, rows, K elements.

    vec: ``""`` (plain MMA), ``block16`` (NVFP4: one ue4m3 scale per 16 K) or ``block32`` (MXFP8: one ue8m0 scale
        per 32 K, ``.scale_vec::1X``).
    kind: the block-scaled MMA kind, ``mxf4nvf4`` (NVFP4) or ``mxf8f6f4`` (MXFP8); "" for a plain MMA.
    atoms: scale atoms of one scale tile per stage (one ``tcgen05.cp`` each): NVFP4 4 (one per K=64 MMA), MXFP8 1.
    steps: per MMA k-step of a stage, (TMEM column offset of its scales from a scale tile's first column, scale-factor
        data ID): NVFP4 reads one whole atom (4 columns) per K=64 MMA, ID 0; MXFP8 reads one byte (ID = k-step) of
        the one atom covering the stage's 128 K (PTX ISA "tcgen05.mma" block scaling, "Instruction descriptor").
    lbo_field: the ``tcgen05.cp`` source descriptor's LBO field (bits 16-29 of the low word).
    atom_bytes: bytes of one 128-row x 4-scale atom (one ``tcgen05.cp.32x128b.warpx4``).
    cols_per_atom: TMEM columns one atom fills.
    rows_per_atom: rows of A or B one atom row covers (128).
    k_per_line: K elements per 128-byte line of a row block (the scale map's row pitch is K / this).
    stage_lines: 128-byte lines of one scale tile per stage (its atoms x 4): a k-block's advance along the map.
    """

    vec: str
    lbo_field: int
    atom_bytes: int
    cols_per_atom: int
    rows_per_atom: int
    k_per_line: int
    stage_lines: int
    kind: str = ""
    steps: tuple[tuple[int, int], ...] = ()
    atoms: int = 0


@dataclass(frozen=True)
class PromotionPlan:
    """FP8 two-level accumulation (``operands: fp8``; docs/fp8.md).  Units: elements, registers, bytes.

    Per k-block (one 128-K scale block) each consumer warpgroup first loads the scales of every M-wave and chunk
    (``ScaleLoad``: scale_a[row] x scale_b[column block] into two registers), then runs, for every M-wave and every
    chunk of ``chunk_n`` columns: ``k_steps`` wgmma ``m64n{chunk_n}k32 .f32.e4m3.e4m3`` into the block partial (the
    first one overwrites it), ``wgmma.wait_group 0``, then the promotion: main accumulator += partial x the row's
    scale product.  A chunk never spans two 128-row blocks of B, so it has one scale_b.

    atype: the wgmma input type (``e4m3``); mma_k: K per wgmma (32).
    chunk_n: columns of one promoted chunk (min(block_n, 128)); chunks: chunks per M-wave (block_n / chunk_n).
    partial_regs: fp32 registers of the partial (chunk_n / 2); chunk_values: main-accumulator values per chunk.
    b_chunk_bytes: bytes of B rows of one chunk in a stage (its descriptor offset).
    scale_block: K elements per scale block (128); b_block_rows: rows of B per scale_b (128).
    scale_bytes: bytes of one fp32 scale; row_half: bytes between the scales of a thread's two fragment rows
        (rows l/4 and l/4 + 8 of its warp's 16: 8 x 4).
    sb_box: scale_b blocks one box loads (4 fp32: 16 bytes), from the multiple of 4 at or below the tile's first
        block, so the box starts 16-byte aligned and, with the runtime's map width padded to 4 blocks, never
        reaches past a row (on the H100 such scale boxes raised "illegal instruction"); the tile's blocks
        (at most 2, at an even block for block_n = 256) lie inside it.
    unroll: k-blocks per main-loop iteration (config ``mma.promotion_unroll``).  1: per k-block the wgmmas,
        ``wgmma.wait_group 0``, the promotion.  >= 2 (one wave, one chunk): two partials, ``part`` and ``part1``
        (even and odd blocks of an iteration); block j + 1's wgmmas are committed before ``wgmma.wait_group 1``
        and block j's promotion, which so overlaps them; the iteration's last block is promoted after
        ``wgmma.wait_group 0``.  ``num_k`` is rounded up to a multiple of ``unroll``: the k-blocks past K are
        TMA zero fill (A, B and both scales), whose promotion adds 0 x 0.
    """

    atype: str
    mma_k: int
    chunk_n: int
    chunks: int
    partial_regs: int
    chunk_values: int
    b_chunk_bytes: int
    scale_block: int
    b_block_rows: int
    scale_bytes: int
    row_half: int
    sb_box: int
    unroll: int = 1


@dataclass(frozen=True)
class SmemPlan:
    """Dynamic shared memory: ``[CD staging][operand stages][barriers][TMEM address slot]``, and residency.

    Units: bytes (offsets from the dynamic ``smem`` base), CTAs.

    cd: the epilogue's staging region (empty without TMA stores).
    barriers: the mbarrier region (8 bytes each).
    tmem_slot: where ``tcgen05.alloc`` writes the TMEM address.
    bytes: the dynamic allocation (sm_100a: padded so that resident CTAs fit their TMEM columns in 512).
    ctas_per_sm: CTAs one SM holds at once (shared memory, threads).
    """

    cd: SmemRegion
    barriers: SmemRegion
    tmem_slot: int
    bytes: int
    ctas_per_sm: int


#: an operand's axis in a swap-AB kernel's frame (it computes ``D^T``: the caller's columns are its rows)
TRANSPOSED_AXES = {"col": "row", "row": "col", "tile": "tile_t", "scalar": "scalar"}


@dataclass(frozen=True)
class EpilogueOperand:
    """One extra operand of the fused epilogue.

    name: the runtime keyword (``bias``); kind: ``bias``, ``scale`` or ``residual``; along: the axis the kernel
    reads it by, in the kernel's ``m x n`` frame: ``col`` ([n]), ``row`` ([m]), ``tile`` ([m, n] row-major, ld = n),
    ``tile_t`` (a swap-AB kernel's ``[M, N]`` operand, its ``[n, m]`` transpose, ld = m) or ``scalar``; the
    expression's own axis (the caller's frame) unless the kernel is swap-AB (:data:`TRANSPOSED_AXES`); dtype: its
    elements (``f32``, or D's type); param: the kernel parameter: a ``.u64`` global address, or for a scalar a
    ``.u32`` holding the f32's bits.
    """

    name: str
    kind: str
    along: str
    dtype: str
    param: str

    @property
    def param_kind(self) -> str:
        return "u32" if self.along == "scalar" else "u64"


@dataclass(frozen=True)
class EpilogueOutput:
    """One output of the fused epilogue beside D (:func:`ptxgen.epi.outputs`).

    name: the runtime keyword; kind: ``block_scale`` (fp32 ``[M, ceil(N/128)]``), ``amax`` (fp32 ``[M]`` along
    ``row``, ``[1]`` along ``tensor``, max-reduced) or ``store`` (``[M, N]`` in ``fmt``); fmt: the stored element
    type (``f32``, ``bf16``, ``f16``); param: the kernel parameter (a ``.u64`` global address).
    """

    name: str
    kind: str
    along: str
    fmt: str
    param: str


@dataclass(frozen=True)
class EpiloguePlan:
    """Accumulator -> D: the epilogue op, the store path and the CD staging ring.

    Units: threads, CTAs, elements (columns of D), rows, bytes, 32-bit TMEM columns, 16-byte chunks.

    expr: the fused epilogue (a :mod:`ptxgen.epi` expression over ``acc`` / ``acc1``, ``acc2`` and the operands), or
        None when D is the accumulator itself; ``epilogue.expr``, else the kernel's default (``dual_gemm``:
        ``silu(acc1) * acc2``).
    operands: the extra operands the expression loads, in first-appearance order (:class:`EpilogueOperand`).
    outputs: the outputs beside D (:class:`EpilogueOutput`), their parameters after the operands'.
    block_scale: an e4m3 D's 1 x 128 block-scale output (its :class:`EpilogueOutput`), or None; scale_blocks: the
        128-column blocks of a tile's block_n.
    second_acc: the expression reads the dual GEMM's second accumulator (``acc2``).
    pairwise: sm_90a: the expression runs per fragment pair, after that pair's operand loads (it has operands);
        else once over each whole fragment array.
    out_dtype: D's element type, ``bf16``, ``f16`` (NVFP4, or an ``fp16(...)`` expression) or ``e4m3``.
    tma_store: D through shared-memory staging and TMA stores (else ``st.global``).  An e4m3 D (sm_90a) is staged
        as bytes when the config stages D and ``block_n`` is a multiple of twice its ``store_block_n``: a box of
        ``2 * store_block_n`` columns of one byte, so the staging rows keep their bytes (128 B under the 128B
        swizzle) and the D map is a UINT8 map; else it is stored per fragment pair (``st.global.b16``), as is a
        bf16 D beside outputs.
    early_release: release ``tmem_empty`` right after the last TMEM read.
    overlap: sm_90a: tile t's packed accumulator is stored while tile t+1's first k-block runs.
    stmatrix: sm_90a: CD staging through ``stmatrix.x4`` (four 8x8 matrices) instead of ``st.shared.b32``.
    swizzle128: CD staging rows 128B-swizzled (chunk i of row r at i ^ (r % 8)).
    threads: epilogue threads (the named barrier's count); groups: staging groups (sm_90a: one per consumer
        warpgroup; 1 on sm_100a); writers: CTAs of a cluster whose epilogue writes D.
    store_block_n: D columns per store box; store_n_multiple: N must be a multiple of this for the D tensor map
        (16-byte rows: 8 for a 16-bit D, 16 for an e4m3 D).
    box_rows, row_bytes, stage_bytes, stages: one staging box's rows, row bytes, bytes, and the ring's stages.
    stores_per_wave: store boxes per M-wave (block_n / store_block_n); stores_per_tile: per tile (x m_waves).
    box_values: fragment values per thread per store box (store_block_n / 2, sm_90a).
    row_chunks: 16-byte chunks of one staging row (store_block_n / 8; an e4m3 D: store_block_n / 16).
    tmem_ld_cols: columns of one ``tcgen05.ld`` (32x32b.xN); loads_per_box: per store box (store_block_n / tmem_ld_cols);
        chunks_per_load: 16-byte chunks of 8 bf16 values per load (tmem_ld_cols / 8).
    release_per_thread: every epilogue thread arrives on ``tmem_empty`` (else one elected thread).
    tmem_empty_arrivals_per_cta: arrivals one writing CTA makes on ``tmem_empty`` per phase.
    staged: sm_90a: the ``[M, N]`` operand (a residual) read through the CD staging ring, or None: before the
        epilogue stages a box, one thread TMA-loads the operand's box (:meth:`staged_map`, D's box and swizzle)
        into the staging slot (completing on ``epi_full[box]``), the warpgroup reads it with ``ldmatrix.x4`` (the inverse of
        the staging's ``stmatrix.x4``), computes the expression and stages D over it (CUTLASS's epilogue source
        load).  Configs with TMA stores through ``stmatrix``, one ``[M, N]`` operand, no overlap; under split-K
        only the tile's last arriver loads it, after the verdict (:class:`ptxgen.builders.roles.SplitKFixup`).
    transposed: swap-AB (``schedule.swap_ab``): the kernel's D is stored transposed, accumulator element (i, j) of
        the kernel's ``m x n`` problem at ``D[j, i]`` of the caller's row-major ``[n, m]`` D (row pitch ``m``), by
        :class:`~ptxgen.ir.ops.StGlobal16` with ``transposed``; the launch spec has no D tensor map.  ``expr``
        stays the caller's; its operands are read by the kernel's axes (``operands[i].along``: a ``bias[col]`` is
        a row vector of the accumulator, a residual ``tile_t``).
    """

    expr: object
    operands: tuple
    outputs: tuple
    block_scale: EpilogueOutput | None
    scale_blocks: int
    second_acc: bool
    pairwise: bool
    out_dtype: str
    tma_store: bool
    early_release: bool
    overlap: bool
    stmatrix: bool
    swizzle128: bool
    threads: int
    groups: int
    writers: int
    store_block_n: int
    store_n_multiple: int
    box_rows: int
    row_bytes: int
    stage_bytes: int
    stages: int
    stores_per_wave: int
    stores_per_tile: int
    box_values: int
    row_chunks: int
    tmem_ld_cols: int
    loads_per_box: int
    chunks_per_load: int
    release_per_thread: bool
    tmem_empty_arrivals_per_cta: int
    staged: EpilogueOperand | None = None
    transposed: bool = False

    @property
    def staged_map(self) -> str:
        """The tensor-map name of the staged operand (kernel parameter ``tmap_`` + it)."""
        return f"tile_{self.staged.name}"


@dataclass(frozen=True)
class SchedulePlan:
    """The tile walk.  Units: rows, columns, CTAs, cluster m-blocks.

    persistent: grid = SM count, CTAs loop over tiles.
    cluster_tile_rows: rows of D one cluster covers (block_m x m_ctas).
    m_ctas: CTAs of a cluster along M that compute different m-blocks (a pair along M: rank r takes m-block
        ``2 cm + r`` of the cluster's n-block).
    group_clusters: swizzle group, in cluster m-blocks.
    cluster_tile_cols: columns of D one cluster covers (block_n x n_ctas).
    n_ctas: CTAs of a cluster along N that compute different n-blocks (a pair along N, ``cluster.along: n``: the
        cluster unit is one m-block x two adjacent n-blocks, rank r takes n-block ``2 cn + r``; an n-block past N
        is the peer's, whose loads of B zero-fill and whose stores clip, as a pair's m-block past M).
    grouped: ``none``, ``masked`` or ``contiguous``: the grouped GEMM's walk over (group, m-block, n-block)
        (:class:`ptxgen.builders.grouped.GroupedTileScheduler`); the kernel then takes ``group_ptr`` (the u32
        ``masked_m`` or ``m_indices`` table) and ``num_groups`` after ``k``.
    expert_window: contiguous grouped walk: m-blocks per window of expert runs (0: the plain swizzle; see
        :meth:`ptxgen.builders.grouped.GroupedTileScheduler.expert_runs`).
    table_lookahead: contiguous grouped walk: the next unit's table words are read one unit ahead (see
        :meth:`ptxgen.builders.grouped.GroupedTileScheduler.lookahead`).
    shift_last_m_block: a tile starts at row ``min(m-block x block_m, max(M - block_m, 0))``: where M is not a multiple of
        block_m the last m-block's tile ends at row M, overlapping the one before it, so its A box holds no row past
        M (TMA zero-fills such rows in shared memory, measured slower than loading rows: an H100, h100_128x160_c2 at
        Mx5120x8192, the same 4 m-blocks, 60.5 us at M = 512, 67.7 at 448, 80.7 at 385; docs/performance.md,
        "Rows past M").  The overlapping rows are computed twice and stored twice with the same values.  sm_90a
        tile walks (the grouped walks keep their m-blocks inside each group's rows).
    shift_last_n_block: the same along N, ``n_col`` at most ``N - block_n`` rounded up to :data:`SHIFT_COL_ALIGN`
        columns (0 when N < block_n; the last n-block's B box holds fewer than that many rows past N; D's stores and
        the column operands' pair loads stay aligned), where nothing is blocked by absolute column: not with an e4m3
        D's 1 x 128 block scales.  Neither shift with FP8 operands (A's scales are a ``[K / 128, M]`` map whose
        boxes start on 16-byte columns; B's are per 128 rows of B).
    pdl: programmatic dependent launch: ``griddepcontrol.wait`` after the setup, before any global access (PTX ISA
        "griddepcontrol"; no ``launch_dependents``: the next grid launches as the CTAs exit); the launch spec's
        ``pdl``.
    """

    persistent: bool
    cluster_tile_rows: int
    m_ctas: int
    group_clusters: int
    cluster_tile_cols: int
    n_ctas: int = 1
    grouped: str = "none"
    expert_window: int = 0
    table_lookahead: bool = False
    shift_last_m_block: bool = False
    shift_last_n_block: bool = False
    pdl: bool = False


@dataclass(frozen=True)
class RegistersPlan:
    """Register budget (PTX ISA "setmaxnreg", "Performance-tuning directives").  Units: registers per thread, CTAs.

    maxnreg: ``.maxnreg`` of the sm_90a kernel (65536 / threads, a multiple of 8, at most 255).
    min_ctas_per_sm: sm_100a ``.minnctapersm`` (0: none).
    producer_regs, consumer_regs: sm_90a ``setmaxnreg`` of the producer and of each consumer warpgroup.
    """

    maxnreg: int
    min_ctas_per_sm: int
    producer_regs: int
    consumer_regs: int


@dataclass(frozen=True)
class Plan:
    """All derived numbers of one config (see module docstring), nested by concern.  Build with :func:`make_plan`.

    Builders read only the plan (never ``cfg``); the kernel's resources come from :meth:`kernel_resources`.
    The pipelines are the roles' hand-offs: ``ab`` the smem operand ring, ``acc`` the TMEM accumulator ring
    (sm_100a), ``cd_ring`` the epilogue staging ring (TMA stores), ``math_order`` pingpong's mainloop order
    barriers (warpgroup w waits ``math_order[w]`` before its mainloop: CUTLASS's math_wg_order_barrier).
    """

    cfg: Config
    kernel_name: str
    arch: str
    roles: RolesPlan
    loads: LoadsPlan
    mma: MmaIssuePlan
    tmem: TmemPlan
    scales: ScalesPlan
    smem: SmemPlan
    epilogue: EpiloguePlan
    schedule: SchedulePlan
    registers: RegistersPlan
    ab: Pipeline
    acc: Pipeline | None
    cd_ring: BulkStoreRing | None
    math_order: BarrierArray | None
    split: SplitKPlan | None = None  # serial split-K (schedule.split_k > 1)
    promotion: PromotionPlan | None = None  # FP8 per-block promotion (operands: fp8)
    epi_full: BarrierArray | None = None  # per store box of a tile: the staged epilogue operand's TMA load landed

    @property
    def kernel(self) -> str:
        """The ``.entry`` name."""
        return self.kernel_name

    @property
    def is_sm100(self) -> bool:
        return self.arch == "sm_100a"

    @property
    def stages(self) -> int:
        """Stages of the operand ring."""
        return self.ab.stages

    @property
    def acc_stages(self) -> int:
        """Stages of the accumulator ring (1 on sm_90a)."""
        return self.acc.stages if self.acc is not None else 1

    @property
    def full(self) -> BarrierArray:
        return self.ab.full

    @property
    def empty(self) -> BarrierArray:
        return self.ab.empty

    @property
    def tmem_full(self) -> BarrierArray | None:
        return self.acc.full if self.acc is not None else None

    @property
    def tmem_empty(self) -> BarrierArray | None:
        return self.acc.empty if self.acc is not None else None

    def barrier_specs(self) -> list[BarrierArray]:
        """Every barrier array, in shared-memory order."""
        return [b for b in (self.full, self.empty, self.tmem_full, self.tmem_empty, self.math_order, self.epi_full)
                if b is not None]

    @property
    def params(self) -> tuple[tuple[str, str], ...]:
        """Kernel parameters in order: one tensor map per operand, D's, then ``d_ptr``, ``m``, ``n``, ``k``."""
        maps = tuple((f"tmap_{o.name}", "tensor_map") for o in self.loads.operands) + (("tmap_d", "tensor_map"),)
        if self.epilogue.staged is not None:
            maps += ((f"tmap_{self.epilogue.staged_map}", "tensor_map"),)
        return (maps + tuple(p for p in PARAMS if p[1] != "tensor_map") + ((WORKSPACE_PARAM,) if self.split else ())
                + (GROUP_PARAMS if self.schedule.grouped != "none" else ())
                + tuple((o.param, o.param_kind) for o in self.epilogue.operands)
                + tuple((o.param, "u64") for o in self.epilogue.outputs))

    def launch_spec(self) -> LaunchSpec:
        """Launch metadata for the runtime (``generated/<name>.json``)."""
        cfg, e, r = self.cfg, self.epilogue, self.roles
        swz = "128B" if e.swizzle128 else "none"
        l2 = "none" if cfg.tma.l2_promotion == "none" else f"{cfg.tma.l2_promotion}B"
        in_dtype = "u8" if self.mma.operand_format in ("nvfp4", "fp8", "mxfp8") else "bf16"
        maps = {o.name: (TensorMapSpec(o.name, (SF_LINE_BYTES, o.box_rows), "none", l2, "u8") if o.scales else
                         TensorMapSpec(o.name, (o.box_cols, o.box_rows), "none", "none", "f32") if o.block_scale else
                         TensorMapSpec(o.name, (MN_MAJOR_CHUNK, self.mma.block_k), "128B", l2, in_dtype, "mn")
                         if o.major == "mn" else
                         TensorMapSpec(o.name, (self.loads.k_coord_step, o.box_rows), "128B", l2, in_dtype))
                for o in self.loads.operands}
        if e.out_dtype != "e4m3" and not e.transposed:  # swap-AB stores D^T per element: no D map (tmap_d zeros)
            maps["d"] = TensorMapSpec("d", (e.store_block_n, e.box_rows), swz, "none", e.out_dtype)
        elif e.tma_store:  # an e4m3 D staged as bytes (e4m3 codes): a UINT8 map; else stored per pair (st.global)
            maps["d"] = TensorMapSpec("d", (e.store_block_n, e.box_rows), swz, "none", "u8")
        if e.staged is not None:  # the staged operand's box is D's box
            maps[e.staged_map] = TensorMapSpec(e.staged_map, (e.store_block_n, e.box_rows), swz, "none", e.out_dtype)
        return LaunchSpec(
            name=cfg.name,
            arch=self.arch,
            kernel=self.kernel_name,
            block=(r.threads, 1, 1),
            cluster=(r.cluster_size, 1, 1),
            dynamic_smem_bytes=self.smem.bytes,
            grid=GridPolicy(
                persistent=self.schedule.persistent,
                tile_rows=self.schedule.cluster_tile_rows,
                tile_cols=self.schedule.cluster_tile_cols,
                cluster_size=r.cluster_size,
                split_k=self.split.splits if self.split else 1,
                split_tiles="last_wave" if self.split and self.split.last_wave else "all",
            ),
            tensor_maps=maps,
            params=self.params,
            k_multiple=self.loads.k_multiple,
            n_multiple=e.store_n_multiple if self.is_sm100 and e.tma_store else 1,
            workspace=self.split.workspace if self.split else None,
            pdl=self.schedule.pdl,
            extra=(({"grouped": self.schedule.grouped} | ({"store": "tma"} if e.tma_store else {}))
                   if self.schedule.grouped != "none" else {"swap_ab": True} if e.transposed else {}),
        )

    def kernel_resources(self, body) -> Kernel:
        """The self-contained :class:`Kernel` with ``body``: every resource number the emitters and simulator read."""
        e, m, r, cd = self.epilogue, self.mma, self.roles, self.smem.cd
        cd_align = SWIZZLE_ATOM_BYTES if e.swizzle128 else 128
        # a non-swizzled TMA destination (the FP8 scale vectors, the scale atoms) needs 128-byte alignment, a
        # 128B-swizzled one 1024
        regions = tuple(SmemRegion(o.region.name, o.region.offset, o.region.stride, o.region.count, o.region.slot_bytes,
                                   TMA_PLAIN_ALIGN if o.block_scale or o.scales else SWIZZLE_ATOM_BYTES)
                        for o in self.loads.operands)
        if cd.count:
            regions += (SmemRegion("cd", cd.offset, cd.stride, cd.count, e.stage_bytes, cd_align),)
        io = {"nvfp4": "NVFP4 in (packed e2m1, one ue4m3 scale per 16 K, scales copied to TMEM by tcgen05.cp, "
                       "block-scaled MMAs), fp16 out",
              "fp8": "e4m3 in with fp32 scales per 128-K block (A: per row, B: per 128 rows), each block's "
                     "wgmma partial promoted into the fp32 accumulator, bf16 out",
              "mxfp8": "MXFP8 in (e4m3, one ue8m0 scale per row per 32 K, scales copied to TMEM by tcgen05.cp, "
                       "block-scaled MMAs .kind::mxf8f6f4), bf16 out"}.get(m.operand_format, "bf16 in and out")
        if len(m.streams) == 1:
            what = (f"D[M,N] = A[M,K] @ B[N,K]^T, {io}, fp32 accumulate." if e.expr is None and not e.transposed else
                    f"swap-AB: D^T[N,M] = B[N,K] @ A[M,K]^T (tmap_a maps B, tmap_b maps A; the kernel's m is N, its n "
                    f"is M), {io}, fp32 accumulate; accumulator (i, j) stored at D[j, i]"
                    + (f" as D = {e.expr} (its operands read transposed)." if e.expr is not None else ".")
                    if e.transposed else
                    f"D[M,N] = {e.expr} with acc = A[M,K] @ B[N,K]^T, {io}, fp32 accumulate and epilogue.")
        else:
            fused = ("silu(A @ B1^T) * (A @ B2^T)" if str(e.expr) == epi.DEFAULTS["dual_gemm"] else
                     f"{e.expr} with acc1 = A @ B1^T, acc2 = A @ B2^T")
            what = (f"D[M,N] = {fused}, A[M,K], B1/B2[N,K], {io}, fp32 accumulate; "
                    f"{len(m.streams)} accumulators, MMAs {m.order} per k-step (one A slice feeds B1 then B2).")
        title = (what,
                 f"tile {m.block_m}x{m.block_n}x{m.block_k}, {self.stages} stages, cluster {r.cluster_size}, "
                 f"{r.threads} threads, {self.smem.bytes} B dynamic shared memory")
        return Kernel(
            name=self.kernel_name, config_name=self.cfg.name, arch=self.arch, title=title,
            threads=r.threads, cluster_size=r.cluster_size, cta_group=r.cta_group,
            smem_bytes=self.smem.bytes, regions=regions, barriers=tuple(self.barrier_specs()),
            tmem_slot=self.smem.tmem_slot, tmem_cols=self.tmem.cols, tmem_acc_stage_cols=self.tmem.acc_stage_cols,
            maxnreg=self.registers.maxnreg if not self.is_sm100 else 0, minnctapersm=self.registers.min_ctas_per_sm,
            params=self.params, launch=self.launch_spec(), block_k=m.block_k, generator=f"ptxgen {__version__}",
            body=tuple(body),
        )


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True)
class _Basics:
    """The config facts every part of the plan starts from (private to :func:`make_plan`)."""

    sm100: bool
    nvfp4: bool
    fp8: bool
    mxfp8: bool  # e4m3 with ue8m0 scales per 32 K, block-scaled tcgen05.mma .kind::mxf8f6f4 (sm_100a)
    cs: int  # cluster size
    wgs: int  # consumer warpgroups (1 on sm_100a)
    pingpong: bool
    row_split: int  # warpgroups sharing one tile's rows (cooperative: all of them; pingpong: 1)
    b_names: tuple[str, ...]  # the B operands, one per accumulator
    row_bytes: int  # one operand row of a stage: 128 B (one swizzle-atom row)
    elem_bits: int  # operand element bits (bf16 16; NVFP4 packed e2m1, mapped as bytes: 4)
    mma_k: int  # K per MMA instruction (NVFP4: 64 per block-scaled MMA, PTX ISA tcgen05.mma)
    sf_names: tuple[tuple[str, str], ...]  # NVFP4 / MXFP8 scale tiles: (name, operand it scales)
    block_scales: tuple[tuple[str, str], ...]  # FP8 scale vectors: (name, operand it scales)

    @property
    def block_scaled(self) -> bool:
        """Scale tiles copied to TMEM and block-scaled MMAs (NVFP4 or MXFP8)."""
        return self.nvfp4 or self.mxfp8


def _basics(cfg: Config) -> _Basics:
    sm100, nvfp4, fp8, mxfp8 = cfg.arch == "sm_100a", cfg.operands == "nvfp4", cfg.operands == "fp8", cfg.operands == "mxfp8"
    wgs = 1 if sm100 else cfg.mma.warpgroups
    pingpong = cfg.mma.consumers == "pingpong"
    b_names = ("b", "b2") if cfg.kernel == "dual_gemm" else ("b",)
    elem_bits = 4 if nvfp4 else (8 * FP8_BYTES if fp8 or mxfp8 else 8 * BF16_BYTES)
    mma_k = (descriptors.MXF4_MMA_K if nvfp4 else WGMMA_K_FP8 if fp8 else descriptors.MXF8_MMA_K if mxfp8 else UMMA_K)
    return _Basics(sm100=sm100, nvfp4=nvfp4, fp8=fp8, mxfp8=mxfp8, cs=cfg.cluster.size, wgs=wgs, pingpong=pingpong,
                   row_split=1 if pingpong else wgs, b_names=b_names, row_bytes=cfg.tile.block_k * elem_bits // 8,
                   elem_bits=elem_bits, mma_k=mma_k,
                   sf_names=(("sfa", "a"), *((f"sf{nm}", nm) for nm in b_names)) if nvfp4 or mxfp8 else (),
                   block_scales=(("scale_a", "a"), ("scale_b", "b")) if fp8 else ())


def _roles_plan(cfg: Config, f: _Basics) -> RolesPlan:
    e = cfg.epilogue
    if f.sm100:
        epi_warps, epi_warp0 = 4, (4 if e.warps == 4 else 0)
        threads = 256 if e.warps == 4 else 128
        producer_warp, mma_warp, alloc_warp = 0, (0 if cfg.pipeline.roles == "lockstep" else 1), 2
    else:
        epi_warps, epi_warp0 = 4 * f.wgs, 4
        threads = 128 * (1 + f.wgs)
        producer_warp, mma_warp, alloc_warp = 0, 4, 0
    return RolesPlan(threads=threads, cluster_size=f.cs, cta_group=f.cs if f.sm100 else 1,
                     producer_warp=producer_warp, mma_warp=mma_warp, alloc_warp=alloc_warp,
                     epilogue_warp0=epi_warp0, epilogue_warps=epi_warps, consumer_warpgroups=f.wgs,
                     pingpong=f.pingpong, tile_owners=f.wgs if f.pingpong else 1,
                     lockstep=cfg.pipeline.roles == "lockstep", mma_all_lanes=cfg.mma.lanes == "all",
                     dedicated_epilogue=e.warps == 4)


def _mma_plan(cfg: Config, f: _Basics, roles: RolesPlan) -> MmaIssuePlan:
    t = cfg.tile
    wave_rows = 128 if f.sm100 else 64
    m_waves = t.block_m // wave_rows if f.sm100 else t.block_m // f.row_split // 64
    if f.sm100:
        umma_m = 128 * roles.cta_group
        idesc = (descriptors.umma_idesc_mxf4nvf4(umma_m, t.block_n) if f.nvfp4 else
                 descriptors.umma_idesc_mxf8f6f4(umma_m, t.block_n) if f.mxfp8 else
                 descriptors.umma_idesc_f16(umma_m, t.block_n))
        desc_hi = descriptors.umma_smem_desc_hi(sbo_bytes=SWIZZLE_ATOM_BYTES)
        lbo_field = 0
    else:
        umma_m, idesc, lbo_field = 64, 0, 1
        desc_hi = descriptors.wgmma_smem_desc_hi(sbo_bytes=SWIZZLE_ATOM_BYTES)
    a_wave_bytes = wave_rows * f.row_bytes
    sf_of = {of: nm for nm, of in f.sf_names}
    collector = ("fill", "lastuse") if f.nvfp4 and f.sm100 and len(f.b_names) == 2 else ("",) * len(f.b_names)
    streams = tuple(MmaPlan(i, "a", nm, sf_of.get("a", ""), sf_of.get(nm, ""), col)
                    for i, (nm, col) in enumerate(zip(f.b_names, collector)))
    # throttle (level 8): idle after each commit so MMA busy time is tc_util_percent of the k-block
    pct = cfg.mma.tc_util_percent
    mma_cycles = 2 * TMEM_LANES * t.block_n * t.block_k * m_waves / SM100_FLOPS_PER_CYCLE
    throttle_ns = 0 if pct >= 100 else int(-(-mma_cycles * (100 - pct) // pct) / SM100_CLOCK_GHZ + 0.999)
    return MmaIssuePlan(
        block_m=t.block_m, block_n=t.block_n, block_k=t.block_k, umma_m=umma_m, m_waves=m_waves, wave_rows=wave_rows,
        consumer_rows=m_waves * wave_rows, k_steps=t.block_k // f.mma_k,
        wg_row_stride=0 if f.pingpong else m_waves * wave_rows, wg_a_stride=0 if f.pingpong else m_waves * a_wave_bytes,
        a_wave_bytes=a_wave_bytes, wave_desc=a_wave_bytes >> 4, fragment_regs=t.block_n // 2,
        streams=streams, order="interleaved", operand_format=cfg.operands, idesc=idesc, a_desc_hi=desc_hi,
        b_desc_hi=desc_hi, desc_lbo_field=lbo_field, k_step_desc=descriptors.desc_advance(f.mma_k * f.elem_bits // 8),
        throttle_ns=throttle_ns,
        step_idesc=tuple(descriptors.umma_idesc_mxf8f6f4(umma_m, t.block_n, sf_id_a=sf_id, sf_id_b=sf_id)
                         for _, sf_id in _sf_steps(cfg, f)) if f.mxfp8 and f.sm100 else (),
        trans_a=cfg.tma.major_a == "mn", trans_b=cfg.tma.major_b == "mn",
        mn_lbo_field=_mn_chunk_bytes(cfg, f) >> 4,
        mn_k_step_desc=descriptors.desc_advance(f.mma_k * SWIZZLE_ATOM_ROW_BYTES))


def _mn_chunk_bytes(cfg: Config, f: _Basics) -> int:
    """Bytes of one MN-major box in a stage: ``MN_MAJOR_CHUNK`` elements (one 128-byte swizzle row) x block_k K rows."""
    return cfg.tile.block_k * MN_MAJOR_CHUNK * f.elem_bits // 8


@dataclass(frozen=True)
class _Stage:
    """One operand stage's shapes (private to :func:`make_plan`); bytes per CTA."""

    a_bytes: int
    a_load: int  # A's load (a multicast half in a pair along N)
    a_box_rows: int
    b_bytes: int  # each B's slot
    b_load: int  # each B's load
    b_box_rows: int
    b_smem_rows: int
    sf_atoms: int  # NVFP4: scale atoms per operand per stage
    sf_bytes: int  # NVFP4: each scale tile's slot
    sfb_load: int  # NVFP4: each B scale tile's load (a multicast half in a 2-SM pair)
    bs_boxes: tuple[tuple[str, int, int], ...]  # FP8: (scale vector, box fp32 columns, slot bytes)
    load_bytes: int
    expect_tx: int
    full_tx: int
    sizes: tuple[tuple[str, int], ...]  # (operand, slot bytes) in layout order


def _stage(cfg: Config, f: _Basics) -> _Stage:
    t = cfg.tile
    a_bytes = t.block_m * f.row_bytes
    shared = _pair_shared(cfg, f)
    a_box_rows = t.block_m // 2 if "a" in shared else t.block_m
    a_load = a_box_rows * f.row_bytes
    if f.sm100:
        b_smem_rows = b_box_rows = t.block_n // f.cs
    else:
        b_smem_rows = t.block_n
        b_box_rows = t.block_n // 2 if "b" in shared else t.block_n
    b_bytes, b_load = b_smem_rows * f.row_bytes, b_box_rows * f.row_bytes
    # NVFP4 / MXFP8 scale tiles: per operand, the atoms of its 128-row block for this stage's K (block_k / atom K:
    # NVFP4 256 / 64 = 4, MXFP8 128 / 128 = 1 atoms of 512 B = 128 rows x 4 scales); each CTA holds whole atom rows: its SFA, and all of B's scales (its MMA rows
    # span all N).  A 2-SM pair splits each B scale tile: each CTA loads half its lines and multicasts them.
    sf_atoms = t.block_k // _atom_k(f) if f.block_scaled else 0
    sf_bytes = sf_atoms * SF_ATOM_BYTES
    sfb_load = sf_bytes // f.cs if _sfb_multicast(cfg, f) else sf_bytes
    nb = len(f.b_names)
    # FP8 scale vectors: one k-block's scale_a for the tile's rows, and a 16-byte box of scale_b holding the tile's
    # column blocks.  Interleaved, their slots round the stage up to whole 1024-byte swizzle atoms (the next stage's
    # A); separated, each scale vector has its own region after the swizzled operands and a slot needs only the
    # 128-byte alignment of a non-swizzled TMA destination (PTX ISA "cp.async.bulk.tensor"): 384 B less per stage
    bs_boxes = ()
    if f.fp8:
        sa_bytes = t.block_m * F32_SCALE_BYTES
        sb_slot = (TMA_PLAIN_ALIGN if cfg.smem.layout == "separated"
                   else _align(sa_bytes + TMA_PLAIN_ALIGN, SWIZZLE_ATOM_BYTES) - sa_bytes)
        bs_boxes = (("scale_a", t.block_m, sa_bytes), ("scale_b", SB_BOX_COLS, sb_slot))
    bs_load = sum(cols * F32_SCALE_BYTES for _, cols, _ in bs_boxes)
    landed = a_load + nb * b_load + len(f.sf_names) * sf_bytes + bs_load
    load_bytes = landed - nb * (sf_bytes - sfb_load)  # the peer loads the other half of each B scale tile
    if f.sm100:
        expect_tx = landed
        full_tx = landed * (2 if cfg.tma.two_sm else 1)
    else:
        expect_tx = full_tx = a_bytes + nb * b_bytes + bs_load  # the whole stage: own loads + the peer's multicast halves (+ FP8 scales)
    if a_bytes % SWIZZLE_ATOM_BYTES or b_bytes % SWIZZLE_ATOM_BYTES:
        raise ConfigError(f"tile: A stage {a_bytes} B / B stage {b_bytes} B must be multiples of 1024 B (128B swizzle atoms)")
    sizes = (("a", a_bytes), *((nm, b_bytes) for nm in f.b_names), *((nm, sf_bytes) for nm, _ in f.sf_names),
             *((nm, slot) for nm, _, slot in bs_boxes))
    return _Stage(a_bytes, a_load, a_box_rows, b_bytes, b_load, b_box_rows, b_smem_rows, sf_atoms, sf_bytes, sfb_load, bs_boxes, load_bytes,
                  expect_tx, full_tx, sizes)


def _pair_shared(cfg: Config, f: _Basics) -> str:
    """The operands an sm_90a cluster shares through multicast halves (``tma.multicast``): ``b`` for a pair along M
    (two m-blocks of one n-block), ``a`` for a pair along N (two n-blocks of one m-block), ``ab`` for a 2x2 square
    (A with the CTA beside it along N, B with the one beside it along M); "" for none.  Each CTA loads half of a
    shared tile's rows and multicasts them to the same offset of the stage of both CTAs that read it (PTX ISA
    "cp.async.bulk.tensor", ``.multicast::cluster``)."""
    if f.sm100 or not cfg.tma.multicast:
        return ""
    return {"n": "a", "m": "b", "mn": "ab"}[cfg.cluster.along]


def _release_ctas(cfg: Config, f: _Basics) -> int:
    """CTAs whose consumers release each stage of an sm_90a CTA (arrive on its ``empty``): itself and every CTA its
    producer's multicast halves land in: 2 for a pair, 3 for a 2x2 square (the CTAs beside it along M and along N;
    not the diagonal one, which shares neither operand); 1 without multicast."""
    return {"": 1, "a": 2, "b": 2, "ab": 3}[_pair_shared(cfg, f)]


def _sfb_multicast(cfg: Config, f: _Basics) -> bool:
    """NVFP4 or MXFP8 on a 2-SM pair: each CTA loads half of each B scale tile and multicasts it to both CTAs (as CuTe's
    blockscaled 2-SM kernels do); the B operands themselves are already split by cta_group::2."""
    return f.block_scaled and f.sm100 and f.cs == 2 and cfg.tma.two_sm


def _epilogue_plan(cfg: Config, f: _Basics, roles: RolesPlan, mma: MmaIssuePlan) -> EpiloguePlan:
    e = cfg.epilogue
    tma_store = e.store == "tma"
    sbn = e.store_block_n or mma.block_n
    tmem_ld_cols = 32 if sbn % 32 == 0 else (16 if sbn % 16 == 0 else 8)
    per_thread = e.release == "per_thread"
    threads = 32 * roles.epilogue_warps
    stores_per_wave = mma.block_n // sbn
    expr = epi.for_kernel(e.expr, cfg.kernel) if e.expr else (epi.default(cfg.kernel) if cfg.kernel == "dual_gemm" else None)
    if expr == epi.acc:
        expr = None  # D = acc: nothing to fuse
    out_dtype = "f16" if f.nvfp4 else epi.out_dtype(expr)
    tile_dtype = "bf16" if out_dtype == "e4m3" else out_dtype  # a 16-bit operand or stored tile
    axis = TRANSPOSED_AXES.get if cfg.schedule.swap_ab else (lambda along: along)
    operands = tuple(EpilogueOperand(o.name, o.kind, axis(o.along), "f32" if o.dtype == "f32" else tile_dtype,
                                     f"epi_{o.name}")
                     for o in (epi.operands(expr) if expr is not None else ()))
    outputs = tuple(EpilogueOutput(name, kind, along, tile_dtype if kind == "store" else "f32", f"epi_{name}")
                    for name, kind, along in (epi.outputs(expr) if expr is not None else ()))
    block_scale = next((o for o in outputs if o.kind == "block_scale"), None)
    d_bytes = BF16_BYTES
    if outputs or out_dtype == "e4m3":
        _epilogue_output_rules(cfg, f, mma, expr, block_scale)
        # an e4m3 D keeps the config's staging rows (row_bytes): a box of twice the columns, one byte each, when the
        # tile holds whole such boxes; a bf16 D beside outputs, or a tile that does not, stores per fragment pair
        tma_store = tma_store and out_dtype == "e4m3" and mma.block_n % (2 * sbn) == 0
        if out_dtype == "e4m3":
            d_bytes, sbn = E4M3_BYTES, (2 * sbn if tma_store else sbn)
            stores_per_wave = mma.block_n // sbn
    if tma_store and cfg.schedule.grouped != "none" and (mma.m_waves * stores_per_wave) % e.stages:
        # a grouped kernel stores some tiles directly (no bulk group committed) while the CD ring's buffer still
        # counts every tile (tc x stores_per_tile + box): only whole turns of the ring per tile keep the buffer
        # sequence of the committed stores cyclic, which the ring's wait_group.read(stages - 1) relies on
        raise ConfigError(f"epilogue.stages={e.stages}: schedule.grouped={cfg.schedule.grouped} with "
                          f"epilogue.store=tma needs the {mma.m_waves * stores_per_wave} store boxes of a warpgroup's tile to be a "
                          "multiple of epilogue.stages (the ring turns whole per tile; directly stored tiles skip it)")
    tiles = [o for o in operands if o.along == "tile"]
    staged = tiles[0] if (len(tiles) == 1 and tma_store and e.stmatrix and not f.sm100 and not f.fp8 and not e.overlap
                          and d_bytes == BF16_BYTES) else None
    return EpiloguePlan(
        expr=expr, operands=operands, outputs=outputs, block_scale=block_scale,
        scale_blocks=-(-mma.block_n // FP8_SCALE_BLOCK),
        second_acc=expr is not None and "acc2" in epi.accumulators(expr),
        pairwise=bool(operands or outputs or out_dtype == "e4m3"), out_dtype=out_dtype, tma_store=tma_store,
        early_release=e.early_release,
        overlap=e.overlap, stmatrix=e.stmatrix, swizzle128=e.swizzle == "128", threads=threads, groups=f.wgs,
        writers=(2 if cfg.cluster.dual_tile else 1) if f.sm100 else 1, store_block_n=sbn,
        store_n_multiple=16 // d_bytes, box_rows=mma.wave_rows, row_bytes=sbn * d_bytes,
        stage_bytes=mma.wave_rows * sbn * d_bytes if tma_store else 0, stages=e.stages,
        stores_per_wave=stores_per_wave, stores_per_tile=mma.m_waves * stores_per_wave, box_values=sbn // 2,
        row_chunks=sbn * d_bytes // 16, tmem_ld_cols=tmem_ld_cols, loads_per_box=sbn // tmem_ld_cols,
        chunks_per_load=tmem_ld_cols * BF16_BYTES // 16, release_per_thread=per_thread,
        tmem_empty_arrivals_per_cta=threads if per_thread else 1, staged=staged, transposed=cfg.schedule.swap_ab)


def _epilogue_output_rules(cfg: Config, f: _Basics, mma: MmaIssuePlan, expr, block_scale) -> None:
    """An e4m3 D or outputs beside D: the sm_90a fragment epilogue (per pair), not overlapped; a block scale needs
    whole 128-column blocks per tile.  Raises ConfigError."""
    text = str(expr)
    if f.sm100:
        raise ConfigError(f"epilogue.expr={text!r}: e4m3 D and outputs beside D (e4m3(x, \"scale\"), amax, store) are "
                          "sm_90a only (the fragment epilogue)")
    if cfg.epilogue.overlap:
        raise ConfigError(f"epilogue.expr={text!r}: epilogue.overlap=True stores a packed tile later; e4m3 D and "
                          "outputs beside D are stored by the fused epilogue: use epilogue.overlap=False")
    if block_scale is not None and mma.block_n % FP8_SCALE_BLOCK:
        raise ConfigError(f"epilogue.expr={text!r}: tile.block_n={mma.block_n}: a 1 x {FP8_SCALE_BLOCK} block scale "
                          f"needs block_n a multiple of {FP8_SCALE_BLOCK}")


@dataclass(frozen=True)
class _Layout:
    """Shared-memory offsets (private to :func:`make_plan`); bytes."""

    cd: SmemRegion
    regions: dict  # operand name -> its stages
    ab_end: int  # end of the operand stages
    stage_bytes: int  # one stage of every operand


def _layout(cfg: Config, stage: _Stage, epi: EpiloguePlan) -> _Layout:
    """``[CD][A/B stages]``: the CD staging first, then the operand stages, interleaved or separated."""
    S = cfg.pipeline.stages
    cd_count = epi.stages * epi.groups if epi.tma_store else 0
    cd = SmemRegion("cd", 0, epi.stage_bytes, cd_count, epi.stage_bytes)
    base = _align(cd.end, SWIZZLE_ATOM_BYTES)
    stage_bytes = sum(size for _, size in stage.sizes)
    regions, off = {}, base
    for nm, size in stage.sizes:
        if cfg.smem.layout == "separated":  # [A0..A(S-1)][B0..][B2_0..]([SFA0..][SFB0..][SFB2_0..])
            regions[nm] = SmemRegion(nm, off, size, S, size)
            off += S * size
        else:  # [A0 B0 (B2_0 SFA0 ...)][A1 B1 ...]...
            regions[nm] = SmemRegion(nm, off, stage_bytes, S, size)
            off += size
    return _Layout(cd, regions, base + S * stage_bytes, stage_bytes)


@dataclass(frozen=True)
class _Barriers:
    """The mbarrier arrays after the operand stages, and the TMEM address slot after them (private)."""

    full: BarrierArray
    empty: BarrierArray
    tmem_full: BarrierArray | None
    tmem_empty: BarrierArray | None
    math_order: BarrierArray | None
    region: SmemRegion
    tmem_slot: int
    epi_full: BarrierArray | None = None


def _barriers(cfg: Config, f: _Basics, stage: _Stage, epi: EpiloguePlan, ab_end: int) -> _Barriers:
    cs, S = f.cs, cfg.pipeline.stages
    if f.sm100:
        if cs == 2 and cfg.tma.two_sm:
            full_init, full_doc = (2, 2), "leader: own arrive.expect_tx + peer's remote arrive.expect_tx; 2-SM TMA of both CTAs completes here; MMA waits (leader)"
        elif cs == 2:
            full_init, full_doc = (2, 1), "leader: own arrive.expect_tx + peer relay arrive; peer: own arrive.expect_tx; each CTA's TMA completes locally"
        else:
            full_init, full_doc = (1,), "producer arrive.expect_tx; TMA completes here; MMA waits"
        empty_init, empty_doc = (1,) * cs, "tcgen05.commit" + (" multicast to both CTAs" if cs == 2 else "") + "; producer waits"
    else:
        shared = {"a": " (multicast A halves, own B)", "b": " (own A, multicast B halves)",
                  "ab": " (multicast A and B halves)"}.get(_pair_shared(cfg, f), "")
        full_init, full_doc = (1,) * cs, "producer arrive.expect_tx; TMA" + shared + " completes here; consumers wait"
        releasers = _release_ctas(cfg, f)
        n_empty = f.row_split * releasers  # pingpong: only the stage's tile owner releases it
        if f.fp8:  # each consumer warp reads its own rows' scales from the stage: every warp releases after its reads
            n_empty *= WARPS_PER_WARPGROUP
        empty_init, empty_doc = (n_empty,) * cs, ("one elected thread of the tile's owner warpgroup" if f.pingpong else "one elected thread per consumer warp" if f.fp8 else "one elected thread per consumer warpgroup") + ({2: " of both CTAs (remote arrive)", 3: " of this CTA and the two sharing an operand with it (remote arrives)"}.get(releasers, "")) + "; producer waits"
    bar_off = _align(ab_end, 8)
    full = BarrierArray("full", S, bar_off, full_init, stage.full_tx, full_doc)
    empty = BarrierArray("empty", S, full.offset + MBARRIER_BYTES * S, empty_init, 0, empty_doc)
    tmem_full = tmem_empty = math_order = None
    nxt = empty.offset + MBARRIER_BYTES * S
    A = cfg.accumulator.stages
    if f.sm100:
        tmem_full = BarrierArray("tmem_full", A, nxt, (1,) * cs, 0,
                                 "tcgen05.commit after a tile's last k-block" + (" (multicast)" if cs == 2 else "") + "; epilogue waits")
        te_init = epi.writers * epi.tmem_empty_arrivals_per_cta
        tmem_empty = BarrierArray("tmem_empty", A, nxt + MBARRIER_BYTES * A, (te_init,) * cs, 0,
                                  f"{'every epilogue thread' if epi.release_per_thread else 'one epilogue thread'} of "
                                  f"{'both CTAs (peer via mapa)' if epi.writers == 2 else 'the writing CTA'}; MMA waits (leader)")
        nxt = tmem_empty.offset + MBARRIER_BYTES * A
    if f.pingpong:  # one per warpgroup: the previous tile's owner arrives once its mainloop passed every full wait
        math_order = BarrierArray("math_order", f.wgs, nxt, (1,) * cs, 0,
                                  "one elected thread of the warpgroup whose mainloop ran the CTA's previous tile; "
                                  "the next tile's owner waits before its mainloop")
        nxt = math_order.offset + MBARRIER_BYTES * f.wgs
    epi_full = None
    if epi.staged is not None:  # one per store box of a tile and staging group: one phase per tile
        boxes = epi.stores_per_tile * epi.groups
        epi_full = BarrierArray("epi_full", boxes, nxt, (1,) * cs, epi.stage_bytes,
                                f"one thread of the storing warp: arrive.expect_tx; the TMA load of the staged "
                                f"{epi.staged.name} box completes here; the warpgroup waits before ldmatrix")
        nxt = epi_full.offset + MBARRIER_BYTES * boxes
    region = SmemRegion("barriers", bar_off, MBARRIER_BYTES, (nxt - bar_off) // MBARRIER_BYTES, MBARRIER_BYTES)
    return _Barriers(full, empty, tmem_full, tmem_empty, math_order, region, nxt, epi_full)


def _smem_bytes(cfg: Config, layout: _Layout, bars: _Barriers) -> int:
    """The dynamic allocation before residency padding: up to the TMEM slot (4 B), 16-byte aligned.

    Raises ConfigError past ``SMEM_LIMIT_BYTES`` (CUDA C Programming Guide, "Compute capabilities").
    """
    S = cfg.pipeline.stages
    smem_bytes = _align(bars.tmem_slot + 4, 16)
    if smem_bytes > SMEM_LIMIT_BYTES:
        raise ConfigError(
            f"pipeline.stages={S}: operand stages need {S * layout.stage_bytes} B + CD {layout.cd.bytes} B + barriers "
            f"{smem_bytes - layout.ab_end} B = {smem_bytes} B > {SMEM_LIMIT_BYTES} B of shared memory"
        )
    return smem_bytes


def _tmem_plan(cfg: Config, f: _Basics, mma: MmaIssuePlan, stage: _Stage) -> tuple[TmemPlan, int, int]:
    """The TMEM plan, the first scale-tile column and the columns of one scale tile.

    NVFP4: after the accumulator stages, each scale tile's atoms (tcgen05.cp targets; one buffer, rewritten
    every k-block: the copies and MMAs of one issuing thread execute in order on the tensor pipe).
    Raises ConfigError past 512 columns (PTX ISA "Tensor Memory").
    """
    A = cfg.accumulator.stages
    acc_cols = mma.block_n * mma.m_waves if f.sm100 else 0
    acc_stage_cols = acc_cols * len(f.b_names)  # one accumulator per B operand, side by side in TMEM
    sf_cols = stage.sf_atoms * SF_TMEM_COLS_PER_ATOM
    sf_col0 = acc_stage_cols * A
    need = sf_col0 + len(f.sf_names) * sf_cols
    if f.sm100 and need > TMEM_COLUMNS:
        raise ConfigError(f"accumulator.stages={A}: TMEM columns {acc_stage_cols} x {A} accumulator stage(s) + "
                          f"{len(f.sf_names)} scale tiles x {sf_cols} = {need} > {TMEM_COLUMNS} "
                          "(PTX ISA 'Tensor Memory': 512 columns)")
    cols = (1 << (need - 1).bit_length()) if f.sm100 else 0  # tcgen05.alloc: a power of two >= 32
    return TmemPlan(cols=cols, wave_cols=mma.block_n if f.sm100 else 0, acc_cols=acc_cols, acc_stage_cols=acc_stage_cols), sf_col0, sf_cols


def _residency(f: _Basics, smem_bytes: int, threads: int, tmem: TmemPlan) -> tuple[int, int]:
    """(dynamic shared memory bytes, CTAs per SM).

    CTAs sharing an SM must fit their TMEM columns in 512, or a ``tcgen05.alloc`` blocks until another CTA
    deallocates, and two CTA pairs can then wait on each other (PTX ISA "tcgen05.alloc").  Shared memory is
    the bound we control: pad the dynamic allocation so that at most ``512 // tmem.cols`` CTAs are resident.
    The padding does not lean on the driver's per-CTA reserve: ``fit + 1`` CTAs would not fit even without it
    (a smaller reserve on another driver must not let one more CTA in).
    """
    ctas_per_sm = resident_ctas(smem_bytes, threads)
    if f.sm100 and ctas_per_sm * tmem.cols > TMEM_COLUMNS:
        fit = TMEM_COLUMNS // tmem.cols
        smem_bytes = _align(SM_SMEM_BYTES // (fit + 1) + 1, 16)
        ctas_per_sm = resident_ctas(smem_bytes, threads)
        assert ctas_per_sm * tmem.cols <= TMEM_COLUMNS and smem_bytes <= SMEM_LIMIT_BYTES
    return smem_bytes, ctas_per_sm


def _pipelines(cfg: Config, f: _Basics, bars: _Barriers) -> tuple[Pipeline, Pipeline | None, BulkStoreRing | None]:
    """The operand ring (TMA producer -> MMA), the accumulator ring (MMA -> epilogue), the CD staging ring."""
    mc = 0b11 if f.cs == 2 else 0
    writers = 2 if cfg.cluster.dual_tile else 1
    S = cfg.pipeline.stages
    if f.sm100:
        ab = PipelineTmaUmma(name="ab", stages=S, full=bars.full, empty=bars.empty, multicast=mc)
    else:
        ab = PipelineTmaAsync(name="ab", stages=S, full=bars.full, empty=bars.empty)
    # tmem_full commits go only to CTAs whose epilogue waits (an arrive nobody waits for may still be pending
    # when its CTA exits); with one writing CTA that is the leader alone
    # and with two writing CTAs the peer's epilogue hands the leader's MMA its TMEM half back across the pair
    acc = PipelineUmmaAsync(name="acc", stages=cfg.accumulator.stages, full=bars.tmem_full, empty=bars.tmem_empty,
                            multicast=mc if writers == 2 else 0,
                            release_scope="cluster" if writers == 2 else "cta") if f.sm100 else None
    cd_ring = BulkStoreRing(cfg.epilogue.stages) if cfg.epilogue.store == "tma" else None
    return ab, acc, cd_ring


def _loads_plan(cfg: Config, f: _Basics, stage: _Stage, layout: _Layout, mma: MmaIssuePlan,
                sf_col0: int, sf_cols: int) -> LoadsPlan:
    t, regions = cfg.tile, layout.regions
    shared = _pair_shared(cfg, f)
    b_split = "cta_group" if f.sm100 and f.cs == 2 else ("multicast" if "b" in shared else "none")
    a_split = "multicast" if "a" in shared else "none"
    pair_mask = (1 << f.cs) - 1
    # the CTAs reading a multicast half, for the CTA at position 0 of the other dimension (OperandPlan.multicast):
    # a pair, both; a 2x2 square (rank = m position + 2 x n position), A the two of one m position (0b0101), B the
    # two of one n position (0b0011)
    a_mask, b_mask = (0b0101, 0b0011) if shared == "ab" else (pair_mask, pair_mask)
    sf_hi = descriptors.sf_copy_desc_hi() if f.block_scaled else 0

    def scale_tile(i: int, nm: str, of: str) -> OperandPlan:
        load = stage.sf_bytes if of == "a" else stage.sfb_load
        mc = load != stage.sf_bytes  # a multicast half (see _sfb_multicast)
        return OperandPlan(nm, regions[nm], "m" if of == "a" else "n", load // SF_LINE_BYTES, load, sf_hi,
                           "multicast" if mc else "none", scales=of, tmem_col=sf_col0 + i * sf_cols,
                           multicast=pair_mask if mc else 0)

    operands = (OperandPlan("a", regions["a"], "m", stage.a_box_rows, stage.a_load, mma.a_desc_hi, a_split,
                            cache_hint=cfg.tma.cache_hint_a, multicast=a_mask if a_split == "multicast" else 0,
                            major=cfg.tma.major_a),
                *(OperandPlan(nm, regions[nm], "n", stage.b_box_rows, stage.b_load, mma.b_desc_hi, b_split,
                              cache_hint=cfg.tma.cache_hint_b, multicast=b_mask if b_split == "multicast" else 0,
                              major=cfg.tma.major_b)
                  for nm in f.b_names),
                *(scale_tile(i, nm, of) for i, (nm, of) in enumerate(f.sf_names)),
                *(OperandPlan(nm, regions[nm], "m" if of == "a" else "n", 1, cols * F32_SCALE_BYTES, 0, block_scale=of,
                              box_cols=cols) for (nm, of), (_, cols, _) in zip(f.block_scales, stage.bs_boxes)))
    return LoadsPlan(operands=operands, a_box_rows=stage.a_box_rows, b_box_rows=stage.b_box_rows, b_smem_rows=stage.b_smem_rows,
                     a_stage_bytes=stage.a_bytes, b_stage_bytes=stage.b_bytes, b_load_bytes=stage.b_load,
                     load_bytes=stage.load_bytes, expect_tx_bytes=stage.expect_tx, full_tx_bytes=stage.full_tx,
                     k_coord_step=f.row_bytes if f.nvfp4 else t.block_k,
                     k_multiple=t.block_k if f.block_scaled else (K_MULTIPLE_FP8 if f.fp8 else K_MULTIPLE_BF16),
                     two_sm=cfg.tma.two_sm,
                     multicast=cfg.tma.multicast, shared=shared)


def _scale_vec(f: _Basics) -> str:
    """The block-scaled MMA's scale vector: NVFP4 ``block16``, MXFP8 ``block32`` (``.scale_vec::1X``)."""
    return descriptors.MXF8_SCALE_VEC if f.mxfp8 else "block16"


def _atom_k(f: _Basics) -> int:
    """K elements one 128x4 scale atom covers: 4 scales x the scale vector (NVFP4 64 = one MMA, MXFP8 128 = 4 MMAs)."""
    return SF_ATOM_K * descriptors.SCALE_VEC[_scale_vec(f)]


def _sf_steps(cfg: Config, f: _Basics) -> tuple[tuple[int, int], ...]:
    """Per k-step of a stage: (TMEM column offset inside a scale tile, scale-factor data ID), see :class:`ScalesPlan`.

    A k-step's scales start at K ``ks * mma_k``: atom ``ks * mma_k // atom_k`` (4 columns each) and, when one MMA
    reads one scale per row (MXFP8), the byte ``ks * mma_k // vec % 4`` of the atom's columns (NVFP4: all 4, ID 0).
    """
    vec = descriptors.SCALE_VEC[_scale_vec(f)]
    whole = f.mma_k // vec == SF_ATOM_K  # one MMA reads all 4 bytes of each column (NVFP4 block16)
    return tuple((k * f.mma_k // _atom_k(f) * SF_TMEM_COLS_PER_ATOM, 0 if whole else k * f.mma_k // vec % SF_ATOM_K)
                 for k in range(cfg.tile.block_k // f.mma_k))


def _scales_plan(cfg: Config, f: _Basics, stage: _Stage) -> ScalesPlan:
    vec = _scale_vec(f)
    return ScalesPlan(vec=vec if f.block_scaled else "", lbo_field=descriptors.SF_COPY_LBO >> 4, atom_bytes=SF_ATOM_BYTES,
                      cols_per_atom=SF_TMEM_COLS_PER_ATOM, rows_per_atom=SF_ATOM_ROWS,
                      k_per_line=_atom_k(f) // (SF_ATOM_BYTES // SF_LINE_BYTES), stage_lines=stage.sf_bytes // SF_LINE_BYTES,
                      kind=("mxf8f6f4" if f.mxfp8 else "mxf4nvf4") if f.block_scaled else "",
                      steps=_sf_steps(cfg, f) if f.block_scaled else (), atoms=stage.sf_atoms)


#: columns the shifted last n-block's first column is a multiple of (``SchedulePlan.shift_last_n_block``): the
#: epilogue's pair accesses of a D row (``ld.global.nc.b32`` of two 16-bit operand values, ``st.global.b32`` of two
#: results) need an even column (PTX ISA "Data Movement and Conversion Instructions": naturally aligned); 16 keeps
#: every access of up to 16 bytes as aligned as at an unshifted tile (block_n is a multiple of 16)
SHIFT_COL_ALIGN = 16


def _schedule_plan(cfg: Config, epilogue: EpiloguePlan) -> SchedulePlan:
    pair = 2 if cfg.cluster.dual_tile else 1
    shift = (cfg.schedule.shift_last_block and cfg.arch == "sm_90a" and cfg.schedule.grouped == "none"
             and cfg.operands != "fp8")
    m_ctas, n_ctas = {"n": (1, pair), "m": (pair, 1), "mn": (2, 2)}[cfg.cluster.along]
    return SchedulePlan(persistent=cfg.schedule.persistent, cluster_tile_rows=cfg.tile.block_m * m_ctas, m_ctas=m_ctas,
                        group_clusters=max(1, cfg.schedule.group // m_ctas), grouped=cfg.schedule.grouped,
                        cluster_tile_cols=cfg.tile.block_n * n_ctas, n_ctas=n_ctas,
                        expert_window=cfg.schedule.expert_window, table_lookahead=cfg.schedule.table_lookahead,
                        shift_last_m_block=shift,
                        shift_last_n_block=shift and epilogue.block_scale is None, pdl=cfg.schedule.pdl)


#: registers an sm_90a consumer thread needs beside its wgmma accumulators (descriptors, stage/phase, tile state, the
#: epilogue's addresses): ptxas 13.5 spilled nothing at the edge, a 256x192 tile's 192 on two warpgroups of 232
ACCUMULATOR_SPARE_REGS = 40

#: registers an sm_90a consumer thread keeps for the epilogue's addresses, predicates and loop state beside the
#: accumulators and the expression's own registers
EPILOGUE_SPARE_REGS = 24


def epilogue_expr_registers(expr, pairwise: bool) -> int:
    """Registers per thread the fused epilogue needs beside the accumulators: one result per inner node, each
    op's scratch, and (``pairwise``) two loaded values per operand."""
    inner = [n for n in epi.walk(epi.body(expr)) if isinstance(n, epi.Call)]
    regs = len(inner) + sum(epi.SCRATCH.get(n.op, 0) for n in inner)
    # a tap's pair and its running amax (2 row halves); a block scale's amax, scale and reciprocal per row half
    regs += sum(4 for _ in epi.taps(expr)) + (6 * 2 if isinstance(expr, epi.Cast) and expr.scale else 0)
    return regs + (2 * len(epi.operands(expr)) if pairwise else 0)


def _epilogue_registers(cfg: Config, f: _Basics, mma: MmaIssuePlan, e: EpiloguePlan, consumer_regs: int) -> None:
    """Raise ConfigError when the expression's registers, the accumulators and the spare exceed a consumer's.

    FP8 (``promotion``): the expression runs on the promoted main accumulator after the tile's last k-block, when
    the block partial(s) are dead, so they do not count (the mainloop's accumulator + partials are the config rule
    ``FP8_FRAGMENT_REGS``).  ptxas 13 spilled nothing at the budget's edge: fp8_h100_128x128 with a 143-register
    expression, fp8_h100_64x128 with 148, fp8_h100_128x256 with 67.
    """
    acc_regs = mma.accumulator_regs
    need = epilogue_expr_registers(e.expr, e.pairwise)
    if acc_regs + need + EPILOGUE_SPARE_REGS > consumer_regs:
        raise ConfigError(f"epilogue.expr={str(e.expr)!r}: needs {need} registers per thread beside {acc_regs} "
                          f"accumulator + {EPILOGUE_SPARE_REGS} spare > the {consumer_regs} each of {f.wgs} consumer "
                          "warpgroups gets (setmaxnreg); simplify the expression or use a smaller tile")


def _registers_plan(cfg: Config, f: _Basics, roles: RolesPlan, mma: MmaIssuePlan,
                    e_plan: EpiloguePlan | None = None) -> RegistersPlan:
    """Registers: sm_90a ``setmaxnreg`` (PTX ISA "setmaxnreg": a multiple of 8 in [24, 256]).

    Raises ConfigError when ``epilogue.overlap``'s accumulators, packed words and loop state exceed a consumer's.
    """
    maxnreg = min(255, (65536 // roles.threads) // 8 * 8)
    producer_regs = 40 if not f.sm100 else 0
    consumer_regs = 0
    acc_regs = mma.accumulator_regs
    if not f.sm100:
        consumer_regs = min(240, ((65536 - 128 * producer_regs) // (128 * f.wgs)) // 8 * 8)
        if acc_regs + ACCUMULATOR_SPARE_REGS > consumer_regs:
            raise ConfigError(
                f"tile.block_m={cfg.tile.block_m}: sm_90a: {acc_regs} fp32 accumulator registers per thread (tile "
                f"{cfg.tile.block_m}x{cfg.tile.block_n}, {f.wgs} consumer warpgroups {cfg.mma.consumers}, "
                f"{len(mma.streams)} accumulator(s)) + {ACCUMULATOR_SPARE_REGS} spare > the {consumer_regs} each "
                "consumer warpgroup gets (setmaxnreg); ptxas would spill")
    if cfg.epilogue.overlap:  # the accumulators and the previous tile's packed output live together
        words = mma.m_waves * mma.block_n // 4
        if acc_regs + words + OVERLAP_SPARE_REGS > consumer_regs:
            raise ConfigError(
                f"epilogue.overlap=True: {acc_regs} accumulator + {words} packed registers + {OVERLAP_SPARE_REGS} for "
                f"addresses and loop state per thread > the {consumer_regs} each of {f.wgs} consumer warpgroups gets "
                f"(setmaxnreg); ptxas would spill (a 192x192 tile on 3 warpgroups spilled 56 B)")
    if not f.sm100 and e_plan is not None and e_plan.expr is not None:
        _epilogue_registers(cfg, f, mma, e_plan, consumer_regs)
    # sm_100a: ``.minnctapersm 1`` is the seed's ``__launch_bounds__(256, 1)``; without it ptxas (CUDA 13.0)
    # picks 64 registers for an occupancy it never gets (TMEM and shared memory allow 1-4 CTAs) and level 9
    # spills 16 B.  PTX ISA "Performance-tuning directives".
    return RegistersPlan(maxnreg=maxnreg, min_ctas_per_sm=1 if f.sm100 else 0, producer_regs=producer_regs,
                         consumer_regs=consumer_regs)


#: the largest accumulator (f32 registers per consumer thread) with the split-K verdict's ``vote.sync.any``
#: (``SplitKPlan.vote``).  Measured, ptxas 13.5 at 232 consumer registers: 32, 64 and 96 assemble without spills;
#: at 128 (``h100_128x256_lw2``, ``_lw4``, ``dual_h100_128x128_c2_lw2``) the uniform loop spills 4 B (a tile-loop
#: constant reloaded once per tile).  Those configs issue 512 tensor cycles of wgmma per warpgroup and k-block,
#: which cover the per-thread loop's longer issue path (docs/performance.md, "The pair's last-wave k-loop").
VOTE_MAX_ACC_REGS = 96


def _split_plan(cfg: Config, f: _Basics, mma: MmaIssuePlan) -> SplitKPlan | None:
    """Serial split-K (sm_90a; the config rules check arch and persistence)."""
    sk = cfg.schedule.split_k
    if sk <= 1:
        return None
    group_bytes = mma.m_waves * mma.wave_rows * mma.block_n * F32_BYTES * len(f.b_names)
    ws = WorkspaceSpec(sk, group_bytes * f.wgs, f.wgs, 2 if cfg.cluster.dual_tile else 1)
    acc_regs = mma.accumulator_regs
    return SplitKPlan(sk, ws, group_bytes, 128, PARTIAL_CHUNK_VALUES, mma.fragment_regs // PARTIAL_CHUNK_VALUES,
                      last_wave=cfg.schedule.split_k_tiles == "last_wave", vote=acc_regs <= VOTE_MAX_ACC_REGS)


def make_plan(cfg: Config) -> Plan:
    """Derive the plan of a config that passed the config rules (:func:`ptxgen.config.validate`).

    Raises ConfigError when a budget is exceeded, in this order: an operand stage that is not whole 128B-swizzle
    atoms, shared memory (232448 B), TMEM columns (512), registers (``epilogue.overlap``).
    """
    f = _basics(cfg)
    roles = _roles_plan(cfg, f)
    mma = _mma_plan(cfg, f, roles)
    stage = _stage(cfg, f)
    epilogue = _epilogue_plan(cfg, f, roles, mma)
    layout = _layout(cfg, stage, epilogue)
    bars = _barriers(cfg, f, stage, epilogue, layout.ab_end)
    smem_bytes = _smem_bytes(cfg, layout, bars)
    ab, acc, cd_ring = _pipelines(cfg, f, bars)
    tmem, sf_col0, sf_cols = _tmem_plan(cfg, f, mma, stage)
    smem_bytes, ctas_per_sm = _residency(f, smem_bytes, roles.threads, tmem)
    return Plan(
        cfg=cfg, kernel_name=f"ptxgen_{cfg.kernel}_{cfg.name.replace('-', '_')}", arch=cfg.arch,
        roles=roles, loads=_loads_plan(cfg, f, stage, layout, mma, sf_col0, sf_cols), mma=mma, tmem=tmem,
        scales=_scales_plan(cfg, f, stage),
        smem=SmemPlan(cd=layout.cd, barriers=bars.region, tmem_slot=bars.tmem_slot, bytes=smem_bytes,
                      ctas_per_sm=ctas_per_sm),
        epilogue=epilogue, schedule=_schedule_plan(cfg, epilogue), registers=_registers_plan(cfg, f, roles, mma, epilogue),
        ab=ab, acc=acc, cd_ring=cd_ring, math_order=bars.math_order, split=_split_plan(cfg, f, mma),
        promotion=_promotion_plan(cfg, f, mma), epi_full=bars.epi_full,
    )


def _promotion_plan(cfg: Config, f: _Basics, mma: MmaIssuePlan) -> PromotionPlan | None:
    """FP8: the per-block promotion (see :class:`PromotionPlan`); None for other operands."""
    if not f.fp8:
        return None
    chunk_n = min(mma.block_n, FP8_SCALE_BLOCK)
    return PromotionPlan(atype="e4m3", mma_k=f.mma_k, chunk_n=chunk_n, chunks=mma.block_n // chunk_n,
                         partial_regs=chunk_n // 2, chunk_values=chunk_n // 2, b_chunk_bytes=chunk_n * f.row_bytes,
                         scale_block=FP8_SCALE_BLOCK, b_block_rows=FP8_SCALE_BLOCK, scale_bytes=F32_SCALE_BYTES,
                         row_half=8 * F32_SCALE_BYTES, sb_box=SB_BOX_COLS, unroll=cfg.mma.promotion_unroll)
