"""The plan: every number derived from a config, computed once.

Builders, emitters, the verifier, the simulator and the runtime read these
fields; none of them recomputes an offset, a byte count, a barrier count or a
shape.  :func:`make_plan` raises :class:`ConfigError` when a budget (shared
memory, TMEM, registers) is exceeded, quoting the plan's real numbers.

Units: bytes for shared memory, columns (32-bit) for TMEM, elements for tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import descriptors
from .config import SMEM_LIMIT_BYTES, Config
from .errors import ConfigError
from .launch import GridPolicy, LaunchSpec, TensorMapSpec

BF16_BYTES = 2
SWIZZLE_ATOM_BYTES = 1024  # 8 rows x 128 B: a 128B-swizzle atom (PTX ISA "Tensor copy: swizzle modes")
MBARRIER_BYTES = 8
TMEM_LANES = 128
UMMA_K = 16  # bf16 tcgen05.mma / wgmma K per instruction
SM100_FLOPS_PER_CYCLE = 8192  # dense bf16 per SM per cycle, B200 (for the level-8 throttle only)
SM100_CLOCK_GHZ = 1.9
# Residency (CUDA C++ Programming Guide, "Compute Capabilities", cc 9.0 and 10.0): 228 KB of shared memory
# per SM, of which the driver reserves 1 KB per resident CTA; at most 2048 threads and 32 CTAs per SM.
SM_SMEM_BYTES = 233472
SMEM_RESERVED_PER_CTA = 1024
SM_MAX_THREADS = 2048
SM_MAX_CTAS = 32
TMEM_COLS_PER_SM = 512  # PTX ISA "Tensor Memory": 128 lanes x 512 columns per SM


@dataclass(frozen=True)
class Region:
    """A shared-memory region: ``count`` slots of ``stride`` bytes from ``offset`` (bytes from the dynamic base)."""

    name: str
    offset: int
    stride: int
    count: int

    @property
    def bytes(self) -> int:
        return self.stride * self.count

    @property
    def end(self) -> int:
        return self.offset + self.bytes

    def at(self, slot: int) -> int:
        """Byte offset of slot ``slot`` (static slots only; stage-indexed slots are IR expressions)."""
        return self.offset + slot * self.stride


@dataclass(frozen=True)
class BarrierSpec:
    """An array of ``num`` mbarriers, 8 B each, at ``offset``.

    init: arrival count per cluster rank (index = ``%cluster_ctarank``).
    tx_bytes: transaction bytes expected per phase on the barrier that is waited on (0: none).
    doc: who arrives and who waits, for the barrier table.
    """

    name: str
    num: int
    offset: int
    init: tuple[int, ...]
    tx_bytes: int
    doc: str


@dataclass(frozen=True)
class Plan:
    """All derived numbers of one config (see module docstring).  Build with :func:`make_plan`."""

    cfg: Config
    kernel: str
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
    # shapes
    block_m: int
    block_n: int
    block_k: int
    m_waves: int  # sm_100a: 128-row UMMA waves per CTA; sm_90a: 64-row wgmma waves per consumer warpgroup
    wave_rows: int
    consumer_rows: int  # sm_90a: rows of the tile each consumer warpgroup computes (m_waves x wave_rows)
    umma_m: int
    k_steps: int
    a_box_rows: int
    b_box_rows: int  # rows of B each CTA loads per stage
    b_smem_rows: int  # rows of B in each CTA's stage
    a_stage_bytes: int
    b_stage_bytes: int
    b_load_bytes: int  # bytes of B one CTA's TMA load moves
    load_bytes: int  # bytes one CTA's TMA loads move per stage (A + its B load)
    full_tx_bytes: int  # bytes the waited-on full barrier receives per phase
    # shared memory
    cd: Region
    a: Region
    b: Region
    barriers: Region
    tmem_slot: int
    smem_bytes: int
    # barriers
    full: BarrierSpec
    empty: BarrierSpec
    tmem_full: BarrierSpec | None
    tmem_empty: BarrierSpec | None
    # TMEM
    tmem_cols: int
    acc_stage_cols: int
    # descriptors (constant parts)
    idesc: int
    a_desc_hi: int
    b_desc_hi: int
    desc_lbo_field: int  # bits 16-29 of the low word (LBO >> 4)
    k_step_desc: int  # low-word increment per UMMA_K step (32 B >> 4)
    a_wave_bytes: int  # bytes of one M-wave of A rows in a stage (wave_rows x block_k x 2)
    wave_desc: int  # low-word increment per M-wave of A rows (a_wave_bytes >> 4)
    # epilogue
    epi_threads: int
    epi_groups: int  # sm_90a: one per consumer warpgroup; 1 on sm_100a
    epi_writers: int  # CTAs of a cluster whose epilogue writes D
    store_block_n: int
    cd_box_rows: int
    cd_row_bytes: int
    cd_stage_bytes: int
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

    @property
    def is_sm100(self) -> bool:
        return self.arch == "sm_100a"

    @property
    def stages(self) -> int:
        return self.cfg.pipeline.stages

    @property
    def acc_stages(self) -> int:
        return self.cfg.accumulator.stages

    def barrier_specs(self) -> list[BarrierSpec]:
        """Every barrier array, in shared-memory order."""
        return [b for b in (self.full, self.empty, self.tmem_full, self.tmem_empty) if b is not None]

    def launch_spec(self) -> LaunchSpec:
        """Launch metadata for the runtime (``generated/<name>.json``)."""
        cfg = self.cfg
        swz = "128B" if cfg.epilogue.swizzle == "128" else "none"
        l2 = "none" if cfg.tma.l2_promotion == "none" else f"{cfg.tma.l2_promotion}B"
        return LaunchSpec(
            name=cfg.name,
            arch=self.arch,
            kernel=self.kernel,
            block=(self.threads, 1, 1),
            cluster=(self.cluster_size, 1, 1),
            dynamic_smem_bytes=self.smem_bytes,
            grid=GridPolicy(
                persistent=cfg.schedule.persistent,
                tile_rows=self.cluster_tile_rows,
                tile_cols=self.block_n,
                cluster_size=self.cluster_size,
            ),
            tensor_maps={
                "a": TensorMapSpec("a", (self.block_k, self.a_box_rows), "128B", l2),
                "b": TensorMapSpec("b", (self.block_k, self.b_box_rows), "128B", l2),
                "d": TensorMapSpec("d", (self.store_block_n, self.cd_box_rows), swz, "none"),
            },
            n_multiple=8 if self.is_sm100 and cfg.epilogue.store == "tma" else 1,
        )


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def resident_ctas(smem_bytes: int, threads: int) -> int:
    """CTAs of ``threads`` threads and ``smem_bytes`` dynamic shared memory that one SM holds at once
    (shared memory, thread and CTA limits; registers aside).  Source: see SM_SMEM_BYTES."""
    return min(SM_SMEM_BYTES // (smem_bytes + SMEM_RESERVED_PER_CTA), SM_MAX_THREADS // threads, SM_MAX_CTAS)


def make_plan(cfg: Config) -> Plan:
    """Derive the plan of a validated config.  Raises ConfigError when a budget is exceeded."""
    sm100 = cfg.arch == "sm_100a"
    t, e = cfg.tile, cfg.epilogue
    cs = cfg.cluster.size
    cta_group = cs if sm100 else 1
    wgs = 1 if sm100 else cfg.mma.warpgroups
    S = cfg.pipeline.stages

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
    m_waves = t.block_m // wave_rows if sm100 else t.block_m // wgs // 64
    a_stage = t.block_m * t.block_k * BF16_BYTES
    if sm100:
        b_smem_rows = t.block_n // cta_group
        b_box_rows = b_smem_rows
    else:
        b_smem_rows = t.block_n
        b_box_rows = t.block_n // 2 if cfg.tma.multicast else t.block_n
    b_stage = b_smem_rows * t.block_k * BF16_BYTES
    b_load = b_box_rows * t.block_k * BF16_BYTES
    load_bytes = a_stage + b_load
    if sm100:
        full_tx = load_bytes * (2 if cfg.tma.two_sm else 1)
    else:
        full_tx = a_stage + b_stage  # own A + both halves of B (multicast) or own B
    if a_stage % SWIZZLE_ATOM_BYTES or b_stage % SWIZZLE_ATOM_BYTES:
        raise ConfigError(f"tile: A stage {a_stage} B / B stage {b_stage} B must be multiples of 1024 B (128B swizzle atoms)")

    # ---- epilogue shapes
    sbn = e.store_block_n or t.block_n
    cd_box_rows = wave_rows
    cd_row_bytes = sbn * BF16_BYTES
    epi_groups = wgs
    cd_stage = cd_box_rows * cd_row_bytes if e.store == "tma" else 0
    cd_count = e.stages * epi_groups if e.store == "tma" else 0
    tmem_ld_cols = 32 if sbn % 32 == 0 else (16 if sbn % 16 == 0 else 8)

    # ---- shared memory layout: [CD][A/B stages][barriers][tmem slot]
    cd = Region("cd", 0, cd_stage, cd_count)
    base = _align(cd.end, SWIZZLE_ATOM_BYTES)
    if cfg.smem.layout == "separated":
        a = Region("a", base, a_stage, S)
        b = Region("b", a.end, b_stage, S)
        ab_end = b.end
    else:
        a = Region("a", base, a_stage + b_stage, S)
        b = Region("b", base + a_stage, a_stage + b_stage, S)
        ab_end = base + S * (a_stage + b_stage)

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
        n_empty = wgs * (cs if cfg.tma.multicast else 1)
        empty_init, empty_doc = (n_empty,) * cs, "one elected thread per consumer warpgroup" + (" of both CTAs (remote arrive)" if cfg.tma.multicast else "") + "; producer waits"
    bar_off = _align(ab_end, 8)
    full = BarrierSpec("full", S, bar_off, full_init, full_tx, full_doc)
    empty = BarrierSpec("empty", S, full.offset + 8 * S, empty_init, 0, empty_doc)
    tmem_full = tmem_empty = None
    nxt = empty.offset + 8 * S
    A = cfg.accumulator.stages
    arrivals_per_cta = epi_threads if per_thread else 1
    if sm100:
        tmem_full = BarrierSpec("tmem_full", A, nxt, (1,) * cs, 0,
                                "tcgen05.commit after a tile's last k-block" + (" (multicast)" if cs == 2 else "") + "; epilogue waits")
        te_init = writers * arrivals_per_cta
        tmem_empty = BarrierSpec("tmem_empty", A, nxt + 8 * A, (te_init,) * cs, 0,
                                 f"{'every epilogue thread' if per_thread else 'one epilogue thread'} of "
                                 f"{'both CTAs (peer via mapa)' if writers == 2 else 'the writing CTA'}; MMA waits (leader)")
        nxt = tmem_empty.offset + 8 * A
    tmem_slot = nxt
    bar_region = Region("barriers", bar_off, 8, (tmem_slot - bar_off) // 8)
    smem_bytes = _align(tmem_slot + 4, 16)
    if smem_bytes > SMEM_LIMIT_BYTES:
        raise ConfigError(
            f"pipeline.stages={S}: A+B stages need {S * (a_stage + b_stage)} B + CD {cd.bytes} B + barriers "
            f"{smem_bytes - ab_end} B = {smem_bytes} B > {SMEM_LIMIT_BYTES} B of shared memory"
        )

    # ---- TMEM
    acc_stage_cols = t.block_n * m_waves if sm100 else 0
    tmem_cols = acc_stage_cols * A if sm100 else 0

    # ---- residency.  Issue 9 finding 4: CTAs sharing an SM must fit their TMEM columns in 512, or a
    # tcgen05.alloc blocks (two CTA pairs can then wait on each other).  Shared memory is the bound we
    # control: pad the dynamic allocation so that at most 512 // tmem_cols CTAs are resident.
    ctas_per_sm = resident_ctas(smem_bytes, threads)
    if sm100 and ctas_per_sm * tmem_cols > TMEM_COLS_PER_SM:
        fit = TMEM_COLS_PER_SM // tmem_cols
        smem_bytes = _align(SM_SMEM_BYTES // (fit + 1) - SMEM_RESERVED_PER_CTA + 1, 16)
        ctas_per_sm = resident_ctas(smem_bytes, threads)
        assert ctas_per_sm * tmem_cols <= TMEM_COLS_PER_SM and smem_bytes <= SMEM_LIMIT_BYTES

    # ---- descriptors
    if sm100:
        umma_m = 128 * cta_group
        idesc = descriptors.umma_idesc_f16(umma_m, t.block_n)
        desc_hi = descriptors.umma_smem_desc_hi(sbo_bytes=SWIZZLE_ATOM_BYTES)
        lbo_field = 0
    else:
        umma_m = 64
        idesc = 0
        desc_hi = descriptors.wgmma_smem_desc_hi(sbo_bytes=SWIZZLE_ATOM_BYTES)
        lbo_field = 1
    k_step_desc = UMMA_K * BF16_BYTES >> 4
    a_wave_bytes = wave_rows * t.block_k * BF16_BYTES
    wave_desc = a_wave_bytes >> 4

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

    # sm_100a: ``.minnctapersm 1`` is the seed's ``__launch_bounds__(256, 1)``; without it ptxas
    # (CUDA 13.0) picks 64 registers for an occupancy it never gets (TMEM and shared memory allow 1-4
    # CTAs) and level 9 spills 16 B (issue 9, finding 6).  PTX ISA "Performance-tuning directives".
    min_ctas_per_sm = 1 if sm100 else 0

    return Plan(
        cfg=cfg, kernel=f"ptxgen_gemm_{cfg.name.replace('-', '_')}", arch=cfg.arch,
        cluster_size=cs, cta_group=cta_group, threads=threads,
        producer_warp=producer_warp, mma_warp=mma_warp, alloc_warp=alloc_warp,
        epilogue_warp0=epi_warp0, epilogue_warps=epi_warps, consumer_warpgroups=wgs,
        block_m=t.block_m, block_n=t.block_n, block_k=t.block_k,
        m_waves=m_waves, wave_rows=wave_rows, consumer_rows=m_waves * wave_rows, umma_m=umma_m, k_steps=t.block_k // UMMA_K,
        a_box_rows=t.block_m, b_box_rows=b_box_rows, b_smem_rows=b_smem_rows,
        a_stage_bytes=a_stage, b_stage_bytes=b_stage, b_load_bytes=b_load, load_bytes=load_bytes,
        full_tx_bytes=full_tx,
        cd=cd, a=a, b=b, barriers=bar_region, tmem_slot=tmem_slot, smem_bytes=smem_bytes,
        full=full, empty=empty, tmem_full=tmem_full, tmem_empty=tmem_empty,
        tmem_cols=tmem_cols, acc_stage_cols=acc_stage_cols,
        idesc=idesc, a_desc_hi=desc_hi, b_desc_hi=desc_hi, desc_lbo_field=lbo_field,
        k_step_desc=k_step_desc, a_wave_bytes=a_wave_bytes, wave_desc=wave_desc,
        epi_threads=epi_threads, epi_groups=epi_groups, epi_writers=writers,
        store_block_n=sbn, cd_box_rows=cd_box_rows, cd_row_bytes=cd_row_bytes, cd_stage_bytes=cd_stage,
        tmem_ld_cols=tmem_ld_cols, release_per_thread=per_thread, tmem_empty_arrivals_per_cta=arrivals_per_cta,
        cluster_tile_rows=t.block_m * m_ctas, m_ctas=m_ctas, group_clusters=group_clusters,
        throttle_ns=throttle_ns, ctas_per_sm=ctas_per_sm,
        maxnreg=maxnreg, min_ctas_per_sm=min_ctas_per_sm, producer_regs=producer_regs, consumer_regs=consumer_regs,
    )
