"""The plan: every number derived from a config, computed once.

Builders, emitters, the verifier, the simulator and the runtime read these
fields; none of them recomputes an offset, a byte count, a barrier count or a
shape.  :func:`make_plan` raises :class:`ConfigError` when a budget (shared
memory, TMEM, registers) is exceeded, quoting the plan's real numbers.

Units: bytes for shared memory, columns (32-bit) for TMEM, elements for tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import descriptors
from .hw import SM_SMEM_BYTES, SMEM_LIMIT_BYTES, SMEM_RESERVED_PER_CTA, TMEM_COLUMNS, resident_ctas
from .errors import ConfigError
from .ir.kernel import BarrierArray, Kernel, SmemRegion
from .ir.pipeline import ARRIVE, EXPECT_TX, UMMA_COMMIT, BulkStoreRing, Pipeline
from .launch import PARAMS, GridPolicy, LaunchSpec, TensorMapSpec, WorkspaceSpec
from .version import __version__

if TYPE_CHECKING:  # the plan reads a validated Config; config.validate() calls make_plan (one-way import)
    from .config import Config

BF16_BYTES = 2
SWIZZLE_ATOM_BYTES = 1024  # 8 rows x 128 B: a 128B-swizzle atom (PTX ISA "Tensor copy: swizzle modes")
MBARRIER_BYTES = 8
TMEM_LANES = 128
UMMA_K = 16  # bf16 tcgen05.mma / wgmma K per instruction
SM100_FLOPS_PER_CYCLE = 8192  # dense bf16 per SM per cycle, B200 (for the level-8 throttle only)
SM100_CLOCK_GHZ = 1.9


SF_LINE_BYTES = 128  # a scale map's inner box: one 128-byte line (a quarter of a 512-B atom)
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
    box_rows: rows one CTA's TMA load moves (a cta_group::2 or multicast half of B is half the tile).
    load_bytes: bytes one CTA's load moves per stage.
    desc_hi: the constant high word of its MMA smem descriptor (a scale tile: of its ``tcgen05.cp`` source).
    scales: for a scale-factor tile (NVFP4), the name of the operand it scales (``a``, ``b``, ``b2``); "" for a
        matrix operand.  Its box rows are then 128-byte lines of the blocked scale layout (4 per 512-B atom).
    tmem_col: a scale tile's first TMEM column (relative to the allocation); its atoms follow, ``sf_cols_per_atom`` apart.
    cache_hint: L2 eviction priority of its loads (``tma.cache_hint_a`` / ``cache_hint_b``): ``none``,
        ``evict_first`` or ``evict_last``.
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

    # split: how a CTA pair shares the operand: ``none`` (each CTA loads its own tile),
    # ``cta_group`` (sm_100a cta_group::2: each CTA loads its half of the rows into its own stage),
    # ``multicast`` (sm_90a: each CTA loads one half of the rows and multicasts it to both CTAs'
    # stage, at ``rank x load_bytes`` into the slot).


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

    # sfa, sfb: the scale-factor operands of a block-scaled MMA (NVFP4), "" for a plain one.


WORKSPACE_PARAM = ("workspace", "u64")  # the split-K kernels' extra parameter (after ``k``)
F32_BYTES = 4
PARTIAL_CHUNK_VALUES = 4  # fp32 values per thread per partial access: one st/ld.global.v4.f32 (16 B)


@dataclass(frozen=True)
class SplitKPlan:
    """Serial split-K into a global workspace (sm_90a, ``schedule.split_k = splits > 1``).

    Work units.  The persistent scheduler walks ``tiles x splits`` units in the usual swizzled tile
    order; unit ``u`` is split ``u % splits`` of tile ``u // splits`` (a tile's splits are consecutive
    units) and covers k-blocks ``[s * num_k // splits, (s + 1) * num_k // splits)`` (``num_k`` is a
    runtime value: the builder emits the expression, the IR carries it; a split may be empty when
    ``num_k < splits`` and then contributes nothing).  The operand ring counts k-blocks across units
    (``kdone``: k-blocks this CTA walked before the unit).

    Fixup, per consumer warpgroup ``g`` of CTA tile ``t`` (see :class:`~ptxgen.launch.WorkspaceSpec` for
    the layout).  A split ``s < splits - 1`` stores its fp32 fragments to partial ``s`` (``st.global.v4.f32``),
    syncs the warpgroup (``bar.sync``), and one thread increments counter ``(t, g)`` with
    ``red.release.gpu.global.add.u32`` (the release orders the warpgroup's stores before the increment:
    CUTLASS's ``arrive_inc``).  The last split runs its own mainloop, then one thread spins with
    ``ld.acquire.gpu.global.u32`` until the counter is ``splits - 1``, resets it to 0 (the workspace cleans
    itself: the next launch, or a CUDA-graph replay, starts from 0), the warpgroup syncs, every thread adds
    the ``splits - 1`` partials into its registers (``ld.global.v4.f32``) and the normal epilogue runs.

    Deadlock freedom.  The grid is persistent with at most one CTA per SM (``GridPolicy.grid_x`` caps it at
    the SM count), so every CTA is resident; each CTA takes its units in increasing order, and only a
    tile's last split waits, on units with smaller numbers.  Suppose every unfinished CTA were blocked and
    let ``u`` be the smallest unit a CTA is blocked at: it waits on a unit ``v < u`` of some CTA ``c``;
    ``c`` is blocked at a unit ``>= u > v`` or finished, so it has already passed ``v``, and a non-last
    split never blocks after its mainloop (store, sync, increment): ``v`` completed.  Contradiction.
    Residency is the assumption: one CTA per SM always fits an idle GPU; a CTA pair (cluster of 2) needs the
    GPCs to hold ``SMs / 2`` pairs at once (true of the H100's 2-SM TPCs; the chooser never picks split-K,
    see ptxgen/runtime/choose.py); two split-K launches running concurrently on different streams share the SMs and
    can leave both grids partly resident (run them on one stream).

    Attributes:
        splits: ``split_k``.
        workspace: the layout (also in the launch spec, for the runtime and the simulator).
        group_bytes: bytes of one consumer warpgroup's share of a partial (consumer_rows x block_n x 4 B x accumulators).
        group_threads: threads of a consumer warpgroup (128).
        chunk_values: fp32 values per thread per access (4: 16 B).
        chunks: accesses per thread per fragment array (block_n / 2 / chunk_values).
    """

    splits: int
    workspace: WorkspaceSpec
    group_bytes: int
    group_threads: int
    chunk_values: int
    chunks: int

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_values * F32_BYTES

    def chunk_offset(self, group, array: int, chunk: int, thread):
        """Byte offset, inside a partial, of chunk ``chunk`` of fragment array ``array`` of ``thread`` of ``group``.

        Fragment order: consecutive threads hold consecutive 16 B (coalesced), arrays and chunks follow.
        """
        return group * self.group_bytes + ((array * self.chunks + chunk) * self.group_threads + thread) * self.chunk_bytes


@dataclass(frozen=True)
class Plan:
    """All derived numbers of one config (see module docstring).  Build with :func:`make_plan`.

    Builders read only the plan (never ``cfg``); the kernel's resources come from :meth:`kernel`.
    """

    cfg: Config
    kernel_name: str
    arch: str
    cluster_size: int
    cta_group: int  # sm_100a tcgen05 cta_group (1|2); 1 on sm_90a
    threads: int
    # warp roles (warp indices)
    producer_warp: int
    mma_warp: int
    alloc_warp: int
    epilogue_warp0: int
    epilogue_warps: int
    consumer_warpgroups: int  # sm_90a
    pingpong: bool  # sm_90a mma.consumers=pingpong: each consumer warpgroup computes whole tiles, taking turns
    tile_owners: int  # warpgroups the CTA's tiles are dealt among: CTA-local tile tc belongs to warpgroup tc % tile_owners
    # knobs the roles branch on (decided here, from the config)
    lockstep: bool  # one warp issues a k-block's loads and MMAs in program order (levels 1-2)
    mma_all_lanes: bool  # the whole MMA warp waits; descriptors shared by shfl (level 9)
    dedicated_epilogue: bool  # a separate epilogue warpgroup with its own tile loop
    two_sm: bool  # sm_100a cta_group::2 TMA loads, completing on the leader's barrier
    multicast: bool  # sm_90a: B halves multicast across the CTA pair
    tma_store: bool  # D through smem staging + TMA stores (else st.global)
    early_release: bool  # release tmem_empty right after the last TMEM read
    epi_overlap: bool  # sm_90a: tile t's packed accumulator is stored while tile t+1's first k-block runs
    epi_stmatrix: bool  # sm_90a: CD staging through stmatrix.x4 (four 8x8 matrices) instead of st.shared.b32
    cd_swizzle128: bool  # CD staging rows 128B-swizzled
    # shapes
    block_m: int
    block_n: int
    block_k: int
    m_waves: int  # sm_100a: 128-row UMMA waves per CTA; sm_90a: 64-row wgmma waves per consumer warpgroup
    wave_rows: int
    consumer_rows: int  # sm_90a: rows of the tile each consumer warpgroup computes (m_waves x wave_rows)
    wg_row_stride: int  # sm_90a: tile rows between consecutive consumer warpgroups' slices (pingpong: 0, whole tiles)
    wg_a_stride: int  # sm_90a: bytes of an A stage between consecutive consumer warpgroups' slices (pingpong: 0)
    umma_m: int
    k_steps: int
    a_box_rows: int
    b_box_rows: int  # rows of B each CTA loads per stage
    b_smem_rows: int  # rows of B in each CTA's stage
    a_stage_bytes: int
    b_stage_bytes: int
    b_load_bytes: int  # bytes of B one CTA's TMA load moves
    load_bytes: int  # bytes one CTA's TMA loads move per stage (all operands)
    full_tx_bytes: int  # bytes the waited-on full barrier receives per phase
    operands: tuple[OperandPlan, ...]
    mmas: tuple[MmaPlan, ...]
    mma_order: str  # "interleaved": per k-step, one MMA of every stream (B1 then B2) reading the same A slice
    epilogue_op: str  # "none" or "silu_mul" (D = silu(acc0) * acc1)
    operand_format: str  # "bf16" or "nvfp4" (packed e2m1, block-scaled MMA)
    out_dtype: str  # D's element type: "bf16" or "f16" (NVFP4)
    k_coord_step: int  # TMA inner coordinate advance per k-block (elements of the operand map: bf16 or bytes)
    k_multiple: int  # K must be a multiple of this (elements)
    # shared memory (operand regions live in ``operands``: see the ``a`` and ``b`` properties)
    cd: SmemRegion
    barriers: SmemRegion
    tmem_slot: int
    smem_bytes: int
    # pipelines and their barriers
    ab: Pipeline  # the smem operand ring
    math_order: BarrierArray | None  # pingpong: warpgroup w waits math_order[w] before its mainloop (CUTLASS math_wg_order_barrier)
    acc: Pipeline | None  # the TMEM accumulator ring (sm_100a)
    cd_ring: BulkStoreRing | None  # the epilogue staging ring (TMA stores)
    # TMEM
    tmem_cols: int
    acc_stage_cols: int
    acc_cols: int  # TMEM columns of one accumulator (block_n x m_waves)
    # descriptors (constant parts)
    idesc: int
    a_desc_hi: int
    b_desc_hi: int
    desc_lbo_field: int  # bits 16-29 of the low word (LBO >> 4)
    k_step_desc: int  # low-word increment per UMMA_K step (32 B >> 4)
    # block-scaled MMA (NVFP4; see ptxgen.descriptors): scale tiles are OperandPlans with ``scales`` set
    scale_vec: str  # "" (plain MMA) or "block16" (one ue4m3 scale per 16 K)
    sf_lbo_field: int  # its LBO field (bits 16-29 of the low word)
    sf_atom_bytes: int  # bytes of one 128-row x 4-scale atom (one tcgen05.cp.32x128b.warpx4)
    sf_cols_per_atom: int  # TMEM columns one atom fills
    sf_rows_per_atom: int  # rows of A or B one atom row covers (128)
    sf_k_per_line: int  # K elements per 128-byte line of a row block (the scale map's row pitch is K / this)
    a_wave_bytes: int  # bytes of one M-wave of A rows in a stage (wave_rows x block_k x 2)
    wave_desc: int  # low-word increment per M-wave of A rows (a_wave_bytes >> 4)
    # epilogue
    epi_threads: int
    epi_groups: int  # sm_90a: one per consumer warpgroup; 1 on sm_100a
    epi_writers: int  # CTAs of a cluster whose epilogue writes D
    store_block_n: int
    store_n_multiple: int  # N must be a multiple of this for the D tensor map (16-byte rows)
    cd_box_rows: int
    cd_row_bytes: int
    cd_stage_bytes: int
    cd_stages: int
    tmem_ld_cols: int
    release_per_thread: bool
    tmem_empty_arrivals_per_cta: int
    # schedule
    cluster_tile_rows: int
    m_ctas: int  # CTAs of a cluster along M that compute different m-blocks
    group_clusters: int  # swizzle group, in cluster m-blocks
    throttle_ns: int
    # residency
    ctas_per_sm: int  # CTAs one SM can hold (shared memory, threads); sm_100a: TMEM-bounded, see make_plan
    # registers (sm_90a setmaxnreg)
    maxnreg: int
    min_ctas_per_sm: int  # sm_100a: ``.minnctapersm`` (0: none); see make_plan
    producer_regs: int
    consumer_regs: int
    split: SplitKPlan | None = None  # serial split-K (schedule.split_k > 1)

    @property
    def kernel(self) -> str:
        """The ``.entry`` name."""
        return self.kernel_name

    @property
    def is_sm100(self) -> bool:
        return self.arch == "sm_100a"

    @property
    def stages(self) -> int:
        return self.ab.stages

    @property
    def acc_stages(self) -> int:
        return self.acc.stages if self.acc is not None else 1

    def operand(self, name: str) -> OperandPlan:
        return next(o for o in self.operands if o.name == name)

    @property
    def matrix_operands(self) -> tuple[OperandPlan, ...]:
        """The operands an MMA reads through smem descriptors (A, B, B2)."""
        return tuple(o for o in self.operands if not o.scales)

    @property
    def scale_operands(self) -> tuple[OperandPlan, ...]:
        """NVFP4 scale-factor tiles (SFA, SFB, SFB2): copied to TMEM with ``tcgen05.cp`` before the MMAs."""
        return tuple(o for o in self.operands if o.scales)

    @property
    def a(self) -> SmemRegion:
        return self.operand("a").region

    @property
    def b(self) -> SmemRegion:
        return self.operand("b").region

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
        return [b for b in (self.full, self.empty, self.tmem_full, self.tmem_empty, self.math_order) if b is not None]

    @property
    def params(self) -> tuple[tuple[str, str], ...]:
        """Kernel parameters in order: one tensor map per operand, D's, then ``d_ptr``, ``m``, ``n``, ``k``."""
        maps = tuple((f"tmap_{o.name}", "tensor_map") for o in self.operands) + (("tmap_d", "tensor_map"),)
        return maps + tuple(p for p in PARAMS if p[1] != "tensor_map") + ((WORKSPACE_PARAM,) if self.split else ())

    def launch_spec(self) -> LaunchSpec:
        """Launch metadata for the runtime (``generated/<name>.json``)."""
        cfg = self.cfg
        swz = "128B" if self.cd_swizzle128 else "none"
        l2 = "none" if cfg.tma.l2_promotion == "none" else f"{cfg.tma.l2_promotion}B"
        in_dtype = "u8" if self.operand_format == "nvfp4" else "bf16"
        maps = {o.name: (TensorMapSpec(o.name, (SF_LINE_BYTES, o.box_rows), "none", l2, "u8") if o.scales else
                         TensorMapSpec(o.name, (self.k_coord_step, o.box_rows), "128B", l2, in_dtype))
                for o in self.operands}
        maps["d"] = TensorMapSpec("d", (self.store_block_n, self.cd_box_rows), swz, "none", self.out_dtype)
        return LaunchSpec(
            name=cfg.name,
            arch=self.arch,
            kernel=self.kernel_name,
            block=(self.threads, 1, 1),
            cluster=(self.cluster_size, 1, 1),
            dynamic_smem_bytes=self.smem_bytes,
            grid=GridPolicy(
                persistent=cfg.schedule.persistent,
                tile_rows=self.cluster_tile_rows,
                tile_cols=self.block_n,
                cluster_size=self.cluster_size,
                split_k=self.split.splits if self.split else 1,
            ),
            tensor_maps=maps,
            params=self.params,
            k_multiple=self.k_multiple,
            n_multiple=self.store_n_multiple if self.is_sm100 and self.tma_store else 1,
            workspace=self.split.workspace if self.split else None,
        )

    def kernel_resources(self, body) -> Kernel:
        """The self-contained :class:`Kernel` with ``body``: every resource number the emitters and simulator read."""
        cd_align = SWIZZLE_ATOM_BYTES if self.cd_swizzle128 else 128
        regions = tuple(SmemRegion(o.region.name, o.region.offset, o.region.stride, o.region.count,
                                   o.region.slot_bytes, SWIZZLE_ATOM_BYTES) for o in self.operands)
        if self.cd.count:
            regions += (SmemRegion("cd", self.cd.offset, self.cd.stride, self.cd.count, self.cd_stage_bytes, cd_align),)
        io = ("NVFP4 in (packed e2m1, one ue4m3 scale per 16 K, scales copied to TMEM by tcgen05.cp, block-scaled "
              "MMAs), fp16 out" if self.operand_format == "nvfp4" else "bf16 in and out")
        what = (f"D[M,N] = A[M,K] @ B[N,K]^T, {io}, fp32 accumulate." if self.epilogue_op == "none" else
                f"D[M,N] = silu(A @ B1^T) * (A @ B2^T), A[M,K], B1/B2[N,K], {io}, fp32 accumulate; "
                f"{len(self.mmas)} accumulators, MMAs {self.mma_order} per k-step (one A slice feeds B1 then B2).")
        title = (what,
                 f"tile {self.block_m}x{self.block_n}x{self.block_k}, {self.stages} stages, cluster {self.cluster_size}, "
                 f"{self.threads} threads, {self.smem_bytes} B dynamic shared memory")
        return Kernel(
            name=self.kernel_name, config_name=self.cfg.name, arch=self.arch, title=title,
            threads=self.threads, cluster_size=self.cluster_size, cta_group=self.cta_group,
            smem_bytes=self.smem_bytes, regions=regions, barriers=tuple(self.barrier_specs()),
            tmem_slot=self.tmem_slot, tmem_cols=self.tmem_cols, tmem_acc_stage_cols=self.acc_stage_cols,
            maxnreg=self.maxnreg if not self.is_sm100 else 0, minnctapersm=self.min_ctas_per_sm,
            params=self.params, launch=self.launch_spec(), block_k=self.block_k, generator=f"ptxgen {__version__}",
            body=tuple(body),
        )


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def make_plan(cfg: Config) -> Plan:
    """Derive the plan of a validated config.  Raises ConfigError when a budget is exceeded."""
    sm100 = cfg.arch == "sm_100a"
    t, e = cfg.tile, cfg.epilogue
    cs = cfg.cluster.size
    cta_group = cs if sm100 else 1
    wgs = 1 if sm100 else cfg.mma.warpgroups
    pingpong = cfg.mma.consumers == "pingpong"
    tile_owners = wgs if pingpong else 1  # pingpong: tiles dealt round-robin to the consumer warpgroups
    row_split = 1 if pingpong else wgs  # warpgroups sharing one tile's rows (cooperative: all of them)
    S = cfg.pipeline.stages
    tma_store = e.store == "tma"
    b_names = ("b", "b2") if cfg.kernel == "dual_gemm" else ("b",)  # the B operands (one per accumulator)
    nb = len(b_names)
    nvfp4 = cfg.operands == "nvfp4"
    # NVFP4: packed e2m1 (two per byte), mapped as bytes; K = 64 per block-scaled MMA (PTX ISA tcgen05.mma)
    elem_bits = 4 if nvfp4 else 8 * BF16_BYTES
    row_bytes = t.block_k * elem_bits // 8  # one operand row of a stage: 128 B (one swizzle-atom row)
    mma_k = descriptors.MXF4_MMA_K if nvfp4 else UMMA_K

    # ---- roles and threads
    if sm100:
        epi_warps = 4
        epi_warp0 = 4 if e.warps == 4 else 0
        threads = 256 if e.warps == 4 else 128
        producer_warp, mma_warp, alloc_warp = 0, (0 if cfg.pipeline.roles == "lockstep" else 1), 2
    else:
        epi_warps, epi_warp0 = 4 * wgs, 4
        threads = 128 * (1 + wgs)
        producer_warp, mma_warp, alloc_warp = 0, 4, 0

    # ---- operand shapes
    wave_rows = 128 if sm100 else 64
    m_waves = t.block_m // wave_rows if sm100 else t.block_m // row_split // 64
    a_stage = t.block_m * row_bytes
    if sm100:
        b_smem_rows = t.block_n // cta_group
        b_box_rows = b_smem_rows
    else:
        b_smem_rows = t.block_n
        b_box_rows = t.block_n // 2 if cfg.tma.multicast else t.block_n
    b_stage = b_smem_rows * row_bytes
    b_load = b_box_rows * row_bytes
    # NVFP4 scale tiles: per operand, the atoms of its 128-row block for this stage's K (block_k / 64 atoms of
    # 512 B = 128 rows x 4 scales); each CTA loads whole atom rows (a cta_group::2 CTA: all of B's scales)
    sf_atoms = t.block_k // descriptors.MXF4_MMA_K if nvfp4 else 0
    sf_stage = sf_atoms * descriptors.SF_ATOM_BYTES
    sf_names = (("sfa", "a"), *((f"sf{nm}", nm) for nm in b_names)) if nvfp4 else ()
    load_bytes = a_stage + nb * b_load + len(sf_names) * sf_stage
    if sm100:
        full_tx = load_bytes * (2 if cfg.tma.two_sm else 1)
    else:
        full_tx = a_stage + nb * b_stage  # own A + both halves of each B (multicast) or own Bs
    stage_sizes = [("a", a_stage), *((nm, b_stage) for nm in b_names), *((nm, sf_stage) for nm, _ in sf_names)]
    if a_stage % SWIZZLE_ATOM_BYTES or b_stage % SWIZZLE_ATOM_BYTES:
        raise ConfigError(f"tile: A stage {a_stage} B / B stage {b_stage} B must be multiples of 1024 B (128B swizzle atoms)")

    # ---- epilogue shapes
    sbn = e.store_block_n or t.block_n
    cd_box_rows = wave_rows
    cd_row_bytes = sbn * BF16_BYTES
    epi_groups = wgs
    cd_stage = cd_box_rows * cd_row_bytes if tma_store else 0
    cd_count = e.stages * epi_groups if tma_store else 0
    tmem_ld_cols = 32 if sbn % 32 == 0 else (16 if sbn % 16 == 0 else 8)

    # ---- shared memory layout: [CD][A/B stages][barriers][tmem slot]
    cd = SmemRegion("cd", 0, cd_stage, cd_count, cd_stage)
    base = _align(cd.end, SWIZZLE_ATOM_BYTES)
    stage_bytes = sum(size for _, size in stage_sizes)
    regions, off = {}, base
    for nm, size in stage_sizes:
        if cfg.smem.layout == "separated":  # [A0..A(S-1)][B0..][B2_0..]([SFA0..][SFB0..][SFB2_0..])
            regions[nm] = SmemRegion(nm, off, size, S, size)
            off += S * size
        else:  # [A0 B0 (B2_0 SFA0 ...)][A1 B1 ...]...
            regions[nm] = SmemRegion(nm, off, stage_bytes, S, size)
            off += size
    a, bs = regions["a"], [regions[nm] for nm in b_names]
    ab_end = base + S * stage_bytes

    # ---- barriers
    writers = (2 if cfg.cluster.dual_tile else 1) if sm100 else 1
    per_thread = e.release == "per_thread"
    epi_threads = 32 * epi_warps
    if sm100:
        if cs == 2 and cfg.tma.two_sm:
            full_init, full_doc = (2, 2), "leader: own arrive.expect_tx + peer's remote arrive.expect_tx; 2-SM TMA of both CTAs completes here; MMA waits (leader)"
        elif cs == 2:
            full_init, full_doc = (2, 1), "leader: own arrive.expect_tx + peer relay arrive; peer: own arrive.expect_tx; each CTA's TMA completes locally"
        else:
            full_init, full_doc = (1,), "producer arrive.expect_tx; TMA completes here; MMA waits"
        empty_init, empty_doc = (1,) * cs, "tcgen05.commit" + (" multicast to both CTAs" if cs == 2 else "") + "; producer waits"
    else:
        full_init, full_doc = (1,) * cs, "producer arrive.expect_tx; TMA" + (" (own A, multicast B halves)" if cfg.tma.multicast else "") + " completes here; consumers wait"
        n_empty = row_split * (cs if cfg.tma.multicast else 1)  # pingpong: only the stage's tile owner releases it
        empty_init, empty_doc = (n_empty,) * cs, ("one elected thread of the tile's owner warpgroup" if pingpong else "one elected thread per consumer warpgroup") + (" of both CTAs (remote arrive)" if cfg.tma.multicast else "") + "; producer waits"
    bar_off = _align(ab_end, 8)
    full = BarrierArray("full", S, bar_off, full_init, full_tx, full_doc)
    empty = BarrierArray("empty", S, full.offset + 8 * S, empty_init, 0, empty_doc)
    tmem_full = tmem_empty = None
    nxt = empty.offset + 8 * S
    A = cfg.accumulator.stages
    arrivals_per_cta = epi_threads if per_thread else 1
    mc = 0b11 if cs == 2 else 0
    if sm100:
        tmem_full = BarrierArray("tmem_full", A, nxt, (1,) * cs, 0,
                                 "tcgen05.commit after a tile's last k-block" + (" (multicast)" if cs == 2 else "") + "; epilogue waits")
        te_init = writers * arrivals_per_cta
        tmem_empty = BarrierArray("tmem_empty", A, nxt + 8 * A, (te_init,) * cs, 0,
                                  f"{'every epilogue thread' if per_thread else 'one epilogue thread'} of "
                                  f"{'both CTAs (peer via mapa)' if writers == 2 else 'the writing CTA'}; MMA waits (leader)")
        nxt = tmem_empty.offset + 8 * A
    math_order = None
    if pingpong:  # one per warpgroup: the previous tile's owner arrives once its mainloop passed every full wait
        math_order = BarrierArray("math_order", wgs, nxt, (1,) * cs, 0,
                                  "one elected thread of the warpgroup whose mainloop ran the CTA's previous tile; "
                                  "the next tile's owner waits before its mainloop")
        nxt = math_order.offset + 8 * wgs
    tmem_slot = nxt
    bar_region = SmemRegion("barriers", bar_off, 8, (tmem_slot - bar_off) // 8, 8)
    smem_bytes = _align(tmem_slot + 4, 16)
    if smem_bytes > SMEM_LIMIT_BYTES:
        raise ConfigError(
            f"pipeline.stages={S}: operand stages need {S * stage_bytes} B + CD {cd.bytes} B + barriers "
            f"{smem_bytes - ab_end} B = {smem_bytes} B > {SMEM_LIMIT_BYTES} B of shared memory"
        )

    # ---- pipelines: the operand ring (TMA producer -> MMA), the accumulator ring (MMA -> epilogue), CD staging
    ab = Pipeline("ab", S, full, empty, EXPECT_TX, UMMA_COMMIT if sm100 else ARRIVE, multicast=mc if sm100 else 0)
    # issue 9 finding 5: tmem_full commits go only to CTAs whose epilogue waits (an arrive nobody waits for may
    # still be pending when its CTA exits); with one writing CTA that is the leader alone
    acc = Pipeline("acc", A, tmem_full, tmem_empty, UMMA_COMMIT, ARRIVE, multicast=mc if writers == 2 else 0,
                   label="accumulator") if sm100 else None
    cd_ring = BulkStoreRing(e.stages) if tma_store else None

    # ---- TMEM
    acc_cols = t.block_n * m_waves if sm100 else 0
    acc_stage_cols = acc_cols * nb  # one accumulator per B operand, side by side in TMEM
    # NVFP4: after the accumulator stages, each scale tile's atoms (tcgen05.cp targets; one buffer, rewritten
    # every k-block: the copies and MMAs of one issuing thread execute in order on the tensor pipe)
    sf_cols = sf_atoms * descriptors.SF_TMEM_COLS_PER_ATOM
    sf_col0 = acc_stage_cols * A
    tmem_need = sf_col0 + len(sf_names) * sf_cols
    if sm100 and tmem_need > TMEM_COLUMNS:
        raise ConfigError(f"accumulator.stages={A}: TMEM columns {acc_stage_cols} x {A} accumulator stage(s) + "
                          f"{len(sf_names)} scale tiles x {sf_cols} = {tmem_need} > {TMEM_COLUMNS} "
                          "(PTX ISA 'Tensor Memory': 512 columns)")
    tmem_cols = (1 << (tmem_need - 1).bit_length()) if sm100 else 0  # tcgen05.alloc: a power of two >= 32

    # ---- residency.  Issue 9 finding 4: CTAs sharing an SM must fit their TMEM columns in 512, or a
    # tcgen05.alloc blocks (two CTA pairs can then wait on each other).  Shared memory is the bound we
    # control: pad the dynamic allocation so that at most 512 // tmem_cols CTAs are resident.
    ctas_per_sm = resident_ctas(smem_bytes, threads)
    if sm100 and ctas_per_sm * tmem_cols > TMEM_COLUMNS:
        fit = TMEM_COLUMNS // tmem_cols
        smem_bytes = _align(SM_SMEM_BYTES // (fit + 1) - SMEM_RESERVED_PER_CTA + 1, 16)
        ctas_per_sm = resident_ctas(smem_bytes, threads)
        assert ctas_per_sm * tmem_cols <= TMEM_COLUMNS and smem_bytes <= SMEM_LIMIT_BYTES

    # ---- descriptors
    if sm100:
        umma_m = 128 * cta_group
        idesc = (descriptors.umma_idesc_mxf4nvf4(umma_m, t.block_n) if nvfp4 else
                 descriptors.umma_idesc_f16(umma_m, t.block_n))
        desc_hi = descriptors.umma_smem_desc_hi(sbo_bytes=SWIZZLE_ATOM_BYTES)
        lbo_field = 0
    else:
        umma_m = 64
        idesc = 0
        desc_hi = descriptors.wgmma_smem_desc_hi(sbo_bytes=SWIZZLE_ATOM_BYTES)
        lbo_field = 1
    k_step_desc = descriptors.desc_advance(mma_k * elem_bits // 8)
    a_wave_bytes = wave_rows * row_bytes
    wave_desc = a_wave_bytes >> 4
    b_split = "cta_group" if sm100 and cs == 2 else ("multicast" if cfg.tma.multicast else "none")
    sf_lines = sf_stage // SF_LINE_BYTES
    sf_hi = descriptors.sf_copy_desc_hi() if nvfp4 else 0
    operands = (OperandPlan("a", a, "m", t.block_m, a_stage, desc_hi, cache_hint=cfg.tma.cache_hint_a),
                *(OperandPlan(r.name, r, "n", b_box_rows, b_load, desc_hi, b_split, cache_hint=cfg.tma.cache_hint_b)
                  for r in bs),
                *(OperandPlan(nm, regions[nm], "m" if of == "a" else "n", sf_lines, sf_stage, sf_hi, scales=of,
                              tmem_col=sf_col0 + i * sf_cols) for i, (nm, of) in enumerate(sf_names)))
    sf_of = {of: nm for nm, of in sf_names}
    mmas = tuple(MmaPlan(i, "a", nm, sf_of.get("a", ""), sf_of.get(nm, "")) for i, nm in enumerate(b_names))

    # ---- schedule
    m_ctas = 2 if cfg.cluster.dual_tile else 1
    group_clusters = max(1, cfg.schedule.group // m_ctas)

    # ---- throttle (level 8): idle after each commit so MMA busy time is tc_util_percent of the k-block
    pct = cfg.mma.tc_util_percent
    mma_cycles = 2 * TMEM_LANES * t.block_n * t.block_k * m_waves / SM100_FLOPS_PER_CYCLE
    throttle_ns = 0 if pct >= 100 else int(-(-mma_cycles * (100 - pct) // pct) / SM100_CLOCK_GHZ + 0.999)

    # ---- registers (sm_90a setmaxnreg; PTX ISA "setmaxnreg": multiple of 8 in [24, 256])
    maxnreg = min(255, (65536 // threads) // 8 * 8)
    producer_regs = 40 if not sm100 else 0
    consumer_regs = 0
    if not sm100:
        consumer_regs = min(240, ((65536 - 128 * producer_regs) // (128 * wgs)) // 8 * 8)
    if e.overlap:  # the accumulators and the previous tile's packed output live together
        acc_regs = m_waves * t.block_n // 2 * nb
        words = m_waves * t.block_n // 4
        if acc_regs + words + OVERLAP_SPARE_REGS > consumer_regs:
            raise ConfigError(
                f"epilogue.overlap=True: {acc_regs} accumulator + {words} packed registers + {OVERLAP_SPARE_REGS} for "
                f"addresses and loop state per thread > the {consumer_regs} each of {wgs} consumer warpgroups gets "
                f"(setmaxnreg); ptxas would spill (a 192x192 tile on 3 warpgroups spilled 56 B)")

    # sm_100a: ``.minnctapersm 1`` is the seed's ``__launch_bounds__(256, 1)``; without it ptxas
    # (CUDA 13.0) picks 64 registers for an occupancy it never gets (TMEM and shared memory allow 1-4
    # CTAs) and level 9 spills 16 B (issue 9, finding 6).  PTX ISA "Performance-tuning directives".
    min_ctas_per_sm = 1 if sm100 else 0

    # ---- split-K (sm_90a; config.validate checks arch and persistence)
    split = None
    sk = cfg.schedule.split_k
    if sk > 1:
        group_bytes = m_waves * wave_rows * t.block_n * F32_BYTES * nb
        ws = WorkspaceSpec(sk, group_bytes * wgs, wgs, 2 if cfg.cluster.dual_tile else 1)
        split = SplitKPlan(sk, ws, group_bytes, 128, PARTIAL_CHUNK_VALUES, t.block_n // 2 // PARTIAL_CHUNK_VALUES)

    return Plan(
        cfg=cfg, kernel_name=f"ptxgen_{cfg.kernel}_{cfg.name.replace('-', '_')}", arch=cfg.arch,
        cluster_size=cs, cta_group=cta_group, threads=threads,
        producer_warp=producer_warp, mma_warp=mma_warp, alloc_warp=alloc_warp,
        epilogue_warp0=epi_warp0, epilogue_warps=epi_warps, consumer_warpgroups=wgs,
        lockstep=cfg.pipeline.roles == "lockstep", mma_all_lanes=cfg.mma.lanes == "all",
        dedicated_epilogue=e.warps == 4, two_sm=cfg.tma.two_sm, multicast=cfg.tma.multicast,
        tma_store=tma_store, early_release=e.early_release, epi_overlap=e.overlap, epi_stmatrix=e.stmatrix,
        cd_swizzle128=e.swizzle == "128",
        block_m=t.block_m, block_n=t.block_n, block_k=t.block_k,
        m_waves=m_waves, wave_rows=wave_rows, consumer_rows=m_waves * wave_rows, umma_m=umma_m, k_steps=t.block_k // mma_k,
        a_box_rows=t.block_m, b_box_rows=b_box_rows, b_smem_rows=b_smem_rows,
        a_stage_bytes=a_stage, b_stage_bytes=b_stage, b_load_bytes=b_load, load_bytes=load_bytes,
        full_tx_bytes=full_tx, operands=operands, mmas=mmas, mma_order="interleaved", epilogue_op=e.op,
        operand_format=cfg.operands, out_dtype="f16" if nvfp4 else "bf16",
        k_coord_step=row_bytes if nvfp4 else t.block_k, k_multiple=t.block_k if nvfp4 else K_MULTIPLE_BF16,
        cd=cd, barriers=bar_region, tmem_slot=tmem_slot, smem_bytes=smem_bytes,
        ab=ab, acc=acc, cd_ring=cd_ring,
        tmem_cols=tmem_cols, acc_stage_cols=acc_stage_cols, acc_cols=acc_cols,
        idesc=idesc, a_desc_hi=desc_hi, b_desc_hi=desc_hi, desc_lbo_field=lbo_field,
        k_step_desc=k_step_desc, a_wave_bytes=a_wave_bytes, wave_desc=wave_desc,
        scale_vec="block16" if nvfp4 else "",
        sf_lbo_field=descriptors.SF_COPY_LBO >> 4, sf_atom_bytes=descriptors.SF_ATOM_BYTES,
        sf_cols_per_atom=descriptors.SF_TMEM_COLS_PER_ATOM, sf_rows_per_atom=descriptors.SF_ATOM_ROWS,
        sf_k_per_line=descriptors.SF_ATOM_K * descriptors.SCALE_VEC["block16"] // (descriptors.SF_ATOM_BYTES // SF_LINE_BYTES),
        wg_row_stride=0 if pingpong else m_waves * wave_rows, wg_a_stride=0 if pingpong else m_waves * a_wave_bytes,
        pingpong=pingpong, tile_owners=tile_owners, math_order=math_order,
        epi_threads=epi_threads, epi_groups=epi_groups, epi_writers=writers,
        store_block_n=sbn, store_n_multiple=STORE_N_MULTIPLE,
        cd_box_rows=cd_box_rows, cd_row_bytes=cd_row_bytes, cd_stage_bytes=cd_stage, cd_stages=e.stages,
        tmem_ld_cols=tmem_ld_cols, release_per_thread=per_thread, tmem_empty_arrivals_per_cta=arrivals_per_cta,
        cluster_tile_rows=t.block_m * m_ctas, m_ctas=m_ctas, group_clusters=group_clusters,
        throttle_ns=throttle_ns, ctas_per_sm=ctas_per_sm,
        maxnreg=maxnreg, min_ctas_per_sm=min_ctas_per_sm, producer_regs=producer_regs, consumer_regs=consumer_regs,
        split=split,
    )
