"""Which config runs a shape when the caller passes ``config=None``.

Order of consultation (:func:`choose`, memoized per (M, N, K, device)):

1. the user's tuned table, written by ``ptxgen tune`` on this machine:
   ``<cache dir>/tuned/<arch>.json`` (see :func:`user_table_path`);
2. the table shipped in the package, ``ptxgen/configs/tuned_<sm90|sm100>.json``;
3. the cost model (:func:`predict`) over every shipped config whose ``arch`` is
   the device's (data-driven: a new ``ptxgen/configs/*.yaml`` is a candidate
   without code changes).

A table maps exact ``(M, N, K)`` to a config name; an entry whose config is not
shipped is ignored (tables are per arch, by file name).  Devices with no candidate fall
back to :func:`default_config_name`.

The shipped sm_90a table holds the tune half of the ``gemm`` suite (``ptxgen/suites``): the fastest shipped config
of each of its shapes, measured by ``bench/survey.py``; no report-half shape is in it (tests/runtime/test_choose.py
checks), so the report half measures the cost model.

Cost model (:func:`predict`; used to rank, not to promise times).  One CTA per
SM (the configs use ~200-225 KB of shared memory), clusters of ``c`` CTAs occupy
``floor(SMs / c) * c`` SMs.  For a ``bm x bn`` tile:

* ``tiles = ceil(M / bm) * ceil(N / bn)`` (an sm_90a CTA pair takes two m-blocks of one n-block, so the m-blocks
  are rounded up to a pair; a pair along N, ``cluster.along: n``, takes two n-blocks of one m-block, so the n-blocks
  are); ``waves = ceil(tiles / slots)``; ``tail`` efficiency = ``tiles / (waves * slots)``;
* per tile, math time ``2 * bm * bn * K / (peak / SMs)`` (times ``one_wg_efficiency`` for one consumer
  warpgroup) and operand time ``(a + pad_row_cost * (bm - a) + bn') * K * 2 B / (L2 bandwidth / SMs)`` where
  ``a = M / m-blocks`` is the tile's average count of rows inside M (the rest, ``bm - a``, are rows past M, which TMA
  zero-fills in shared memory without reading memory; fitted on kernels whose last tile ran past M: since the sm_90a
  tiles are shifted to end at M, ``ptxgen.plan.SchedulePlan.shift_last_m_block``, only M < bm pads, and the padding
  terms are not refit) and ``bn'`` is ``bn / 2`` for a pair multicasting B (a pair
  along N multicasts A: the A term is halved instead, ``(a + pad_row_cost * (bm - a)) / 2 + bn``; bytes per
  FLOP fall as the tile grows: ``(bm + bn) / (bm * bn)``), times ``ragged_load_factor`` when the K row pitch is not a
  multiple of 128 bytes; a tile costs the larger of the two plus a fixed prologue/epilogue cost (pipeline fill of
  ``stages`` k-blocks and the ``bm * bn * 2 B`` store), all times the config's fitted ``tile_factors`` entry;
* the DRAM time is ``2 B * (M*K + acc*N*K + M*N)`` over the HBM bandwidth, or over what the busy SMs stream if
  less (each at most its ``stages`` of loaded rows, ``(a + bn') * bk * 2 B`` a stage, per memory latency: few tiles,
  few stages or stages of rows past M cannot fill HBM);
* the kernel takes the ``overlap``-norm of ``waves * tile_time`` (plus the split-K partial time) and the DRAM time
  (their max when 0);
* two main-loop bounds, off in both shipped models (``DeviceModel.smem_bytes_per_clk``, ``stage_latency_us``): the
  shared-memory bytes the wgmmas read and the stages receive over the SM's shared-memory bandwidth, and ``k-blocks /
  stages`` stage latencies; refit on the tune half, neither ranked it better (docs/performance.md, "Main-loop terms:
  shared-memory bandwidth and stage latency"); the stage latency isolated by a 6-stage variant of ``h100_128x128``
  ranks that tile right at small M but moved a report decision the wrong way (docs/performance.md, "The stage ring at
  small M");
* a config's main-loop factor (``DeviceModel.main_loop_factors``): its units' main-loop time (the larger of the math
  and operand times above) times the factor, its fixed cost, fixup, partial traffic and stage-latency bound not;
  shipped for the last-wave configs, fitted on the tune half and a K-sweep (docs/performance.md, "The pair's
  last-wave k-loop").

The GEMM chooser ranks with :data:`SM90_GEMM_MODEL`, fitted on the tune half of the suite (``bench/fit_choose.py``:
constants within physical bounds and one tile factor per config, chosen for the regret of the pick; report half:
docs/performance.md, "Chooser fit"; on an H200 too: two refits on the H200's tune half did not rank its report half
better, docs/performance.md, "The chooser on an H200"); an H200 with its own constants, :data:`SM90_H200_GEMM_MODEL`, fitted
by the same method on the H200's tune half and fresh shapes (:func:`gemm_model`; docs/performance.md, "The H200's own
cost model"); the dual GEMM with :data:`SM90_MODEL`.

Split-K candidates (``schedule.split_k = S > 1``, shipped: ``h100_64x128_sk2``, ``h100_128x64_sk2``,
``h100_128x192_sk3``): ``tiles x S`` work units in waves, K / S per unit, and per unit the fp32 partial traffic
``accumulators * bm * bn * 4 B * (2S - 1) / S`` (every split stores its partial, rows past M included, the last
arriver reads the other S - 1); the units of a wave store at once, so the kernel pays every unit's bytes over the
shared ``partial_tbps`` (docs/performance.md, "Split-K", "Chooser padding terms").  Their protocol
("last arriver reduces") needs no resident grid and the runtime gives each stream its own workspace, so a call that
names no config may run one.  A split-K-of-the-last-wave candidate (``schedule.split_k_tiles: last_wave``) runs
``dp_tiles / slots`` whole waves of data-parallel tiles (full K), then ``ceil(tail x S / slots)`` waves of units
with K / S, and pays the partial traffic of the ``tail`` tiles only (``dp_tiles = tiles - tiles % slots``; fewer
tiles than slots: every tile split, as the kernel does: :meth:`ptxgen.launch.GridPolicy.split_units`); each of its
whole tiles costs ``S x whole_tile_fixup_us`` more than the base config's (the fixup it passes predicated off);
shipped: ``h100_128x128_c2_lw2``, ``h100_128x256_lw2``, ``h100_128x256_lw4``, ranked with their base config's tile
factor, their own main-loop factor and their own partial bandwidth (``DeviceModel.lastwave_partial_tbps``).

Swap-AB candidates (``schedule.swap_ab``: the kernel runs ``D^T = B @ A^T``, so its ``m`` is N and its ``n`` is M)
rank when M fits their ``block_n`` (:func:`swap_ab_fits`) with the same model on the problem they run, ``(N, M, K)``;
their tile factors are not fitted (1).

A CTA pair multicasting B on fewer n-blocks than it needs gives way to its single-CTA twin (:func:`pair_twin_rule`,
measured: the model cannot tell a narrow B that every CTA reads from a wide one).

Not chosen automatically, though they run when passed as ``config=``: ping-pong consumer configs
(``mma.consumers: pingpong``): 0.45-0.83x torch on an H100 where the cooperative configs reach 0.95-1.05x
(docs/performance.md, "Ping-pong consumers").

Device constants are for an H100 SXM and only their ratios matter for the ranking.  Ties go to the arch's
default config.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from ptxgen.errors import ConfigError

ARCH_OF_CAPABILITY = {(9, 0): "sm_90a", (10, 0): "sm_100a"}
#: shipped config used on compute capability 9.0 (Hopper) when ``config`` is None
DEFAULT_SM90 = "h100_256x128"
#: shipped config used on compute capability 10.x (Blackwell) when ``config`` is None
DEFAULT_SM100 = "level9"
#: the FP8 block-scaled GEMM's default (sm_90a only)
DEFAULT_FP8_SM90 = "fp8_h100_128x128"
#: the dual-GEMM (SwiGLU) defaults per capability
DEFAULT_DUAL_SM90 = "dual_h100_128x128_c2"
DEFAULT_DUAL_SM100 = "dual_sm100_256x128"
#: shipped tuned table per arch (inside ptxgen/configs)
SHIPPED_TABLES = {"sm_90a": "tuned_sm90.json", "sm_100a": "tuned_sm100.json"}
#: devices with a tuned table of their own (:func:`device_key`): a table per (arch, device key), measured on it
DEVICE_TABLES = {("sm_90a", "H200"): "tuned_sm90_h200.json"}
TABLE_VERSION = 1


class DeviceModel(NamedTuple):
    """Throughputs and fitted constants of the cost model (:func:`predict`).

    Attributes:
        peak_tflops: dense bf16 tensor-core peak, TFLOP/s (H100 SXM: 989, Hopper whitepaper).
        l2_tbps: effective operand bandwidth into the SMs (L2 hits and multicast included), TB/s.
        hbm_tbps: DRAM bandwidth, TB/s (H100 SXM HBM3: 3.35).
        store_tbps: bandwidth of the epilogue store, TB/s.
        one_wg_efficiency: tensor-core efficiency of a tile with one consumer warpgroup (its wgmma waves are not
            overlapped with another warpgroup's), relative to two or three; 1 = no difference.
        multicast: whether a CTA pair multicasting B loads ``block_n / 2`` rows of B per CTA (True) or ``block_n``.
        ragged_load_factor: operand time multiplier when a K row pitch (``K * 2`` bytes) is not a multiple of 128
            bytes: each 128-byte box row then straddles two L2 lines (docs/performance.md, "Ragged K"); 1 = none.
        dram_latency_us: memory latency, microseconds: one SM streams at most the bytes its ``stages`` hold in flight
            per latency (Little's law), so a grid that keeps few SMs busy, or keeps few bytes in flight on each,
            cannot reach ``hbm_tbps``; 0 = no such cap.
        launch_us: fixed microseconds per launch (launch, prologue, last store drain).
        partial_tbps: split-K: bandwidth of the fp32 partial traffic (each split's store, the last arriver's reads of
            the others; L2-resident for the few-tile shapes split-K is for), TB/s, shared by every unit of a wave:
            the kernel pays ``units x`` one unit's partial bytes over it.
        pad_row_cost: the operand (L2 -> shared) time of a tile row past M, in loaded rows.  TMA zero-fills such a
            row without reading memory (PTX ISA "Tensors: out of bounds access"), so it holds no bytes in flight
            (``dram_latency_us``) but fills its share of the stage; 1 = as a loaded row, 0 = free.  Fitted: above 1
            (docs/performance.md, "Chooser padding terms": what the tune half shows of 128-row tiles at M <= 64).
        tile_factors: ``((config name, factor), ...)``: a config's tile time (math or operand time, plus its fixed
            cost) multiplied by its factor, what the throughputs above do not see of it (its epilogue, its number
            of consumer warpgroups, its stage count); a config not listed: 1.
        overlap: how the tile time and the DRAM time combine: their ``overlap``-norm, ``(t^p + d^p)^(1/p)``; the
            larger, the closer to ``max(t, d)`` (perfect overlap); 0 = ``max``.
        whole_tile_fixup_us: split-K of the last wave (``schedule.split_k_tiles: last_wave``): microseconds that one
            whole (data-parallel) tile of a config split ``S`` ways spends per split in the fixup it passes
            predicated off (the publish barrier, ``bar.red.popc`` and ``S`` iterations of predicated partial loads
            and adds): each whole wave costs ``S x`` it more; 0 = whole tiles cost what the base config's tiles cost.
            Fitted on the last-wave tune survey (docs/performance.md, "Split-K of the last wave").
        smem_bytes_per_clk: shared-memory bandwidth of one SM, bytes per tensor-core clock (the clock at which an SM
            retires ``peak_tflops / SMs / 4096`` dense bf16 FLOP: 4096 FLOP per clock and SM); 0 = no cap.  Each
            ``m64nNk16`` wgmma reads its A (64 x 16) and B (N x 16) bf16 operands from shared memory (PTX ISA
            "Asynchronous Warpgroup Level Matrix Multiply-Accumulate", matrix descriptors) and TMA writes each stage's
            A and B rows into it, so a unit's math time is at least those bytes over this bandwidth (H100: 128 B/clk).
        stage_latency_us: the time from a stage's TMA issue to its data in shared memory, microseconds: a tile keeps
            at most ``stages`` k-blocks in flight, so its operand stream takes at least ``k-blocks / stages`` such
            latencies whatever the bandwidth (not scaled by ``main_loop_factors``: a stage's latency is the
            producer's wait, not the consumer's issue cost); 0 = no cap.
        main_loop_factors: ``((config name, factor), ...)``: a config's main-loop time (each unit's k-blocks: the
            time that grows with K) multiplied by its factor on top of its tile factor, its fixed cost, whole-tile
            fixup and partial traffic not; a config not listed: 1.  For a last-wave config, what its k-loop costs
            beyond its base config's, whose tile factor it takes (docs/performance.md, "The pair's last-wave k-loop":
            ``h100_128x128_c2_lw2`` ran its k-blocks 1.2x slower than ``h100_128x128_c2``, beyond the model, in a
            K-sweep at 1024x5120).
        lastwave_partial_tbps: the partial bandwidth (TB/s, as ``partial_tbps``) of the split-K-of-the-last-wave
            configs (``schedule.split_k_tiles: last_wave``) alone: their tail tiles' partials, a few split tiles after
            whole waves, against the plain split-K configs' every tile split at M <= 128; None = ``partial_tbps``
            (docs/performance.md, "A partial bandwidth of the last-wave configs' own").
    """

    peak_tflops: float = 989.0
    l2_tbps: float = 12.0
    hbm_tbps: float = 3.35
    store_tbps: float = 3.0
    one_wg_efficiency: float = 1.0
    multicast: bool = False
    ragged_load_factor: float = 1.0
    dram_latency_us: float = 0.0
    launch_us: float = 0.0
    overlap: float = 0.0
    partial_tbps: float = 3.0
    pad_row_cost: float = 1.0
    whole_tile_fixup_us: float = 0.0
    tile_factors: tuple[tuple[str, float], ...] = ()
    smem_bytes_per_clk: float = 0.0
    stage_latency_us: float = 0.0
    main_loop_factors: tuple[tuple[str, float], ...] = ()
    lastwave_partial_tbps: float | None = None


#: the constants the dual-GEMM chooser ranks with (l2_tbps calibrated so that a 256x128 tile at 8192^3 is
#: math-bound, as measured on an H200; docs/performance.md, "Remote arrives under multicast")
SM90_MODEL = DeviceModel()
#: the GEMM chooser's constants, fitted on the tune half of the ``gemm`` suite on an H100 (bench/fit_choose.py;
#: docs/performance.md, "Chooser fit"; ``pad_row_cost`` by ``--fit-pad``, "Chooser padding
#: terms"; ``partial_tbps`` and ``whole_tile_fixup_us`` jointly by ``--fit-partial``, "Joint refit of the split-K
#: terms", then jointly with the last-wave configs' ``main_loop_factors`` by ``--fit-main-loop`` on the tune half and
#: two off-suite probes, "The pair's last-wave k-loop"; those factors, ``whole_tile_fixup_us`` and the last-wave configs'
#: own ``lastwave_partial_tbps`` by ``--fit-main-loop --lastwave-partial`` on the tune half and the off-suite surveys,
#: ``partial_tbps`` held, "A partial bandwidth of the last-wave configs' own"); the report half never entered the fit
SM90_GEMM_MODEL = DeviceModel(
    l2_tbps=9.475, hbm_tbps=3.998, store_tbps=0.5018, one_wg_efficiency=0.7887, multicast=True, ragged_load_factor=3.596,
    dram_latency_us=2.433, overlap=4.757, partial_tbps=1.315, pad_row_cost=1.434, whole_tile_fixup_us=0.6011,
    tile_factors=(("h100_128x128", 1.2466), ("h100_128x128_c2", 0.9856), ("h100_128x144", 1.248),
                  ("h100_128x192", 1.159), ("h100_128x256", 1.0437), ("h100_128x64", 0.9078), ("h100_192x176", 1.1948),
                  ("h100_256x128", 0.999), ("h100_64x128", 1.0199), ("h100_64x256", 1.0438), ("h100_64x64", 1.0886),
                  ("h100_128x144_c2", 1.15),  # fitted alone on the tune half, the rest held ("A CTA pair of 128x144 tiles")
                  # fitted alone on the tune half, the rest held ("CTA pairs along N")
                  ("h100_128x80_c2n", 1.42), ("h100_128x192_c2n", 1.42),
                  ("h100_192x128_c2n", 1.33), ("h100_192x192_c2n", 1.12),  # the same, three consumer warpgroups
                  ("h100_128x160_c2", 1.21),  # fitted alone on the tune half, the rest held ("A CTA pair of 128x160 tiles")
                  # fitted alone on the H200's tune half, the rest held ("A 256x160 tile")
                  ("h100_256x160", 1.20), ("h100_256x160_c2", 1.10),
                  ("h100_128x192_sk3", 1.001), ("h100_128x64_sk2", 1.0005), ("h100_64x128_sk2", 1.0016),
                  # split-K of the last wave: the base config's factor (whole tiles are the same kernel), not fitted
                  ("h100_128x128_c2_lw2", 0.9856), ("h100_128x256_lw2", 1.0437), ("h100_128x256_lw4", 1.0437),
                  ("h100_128x256_lw8", 1.0437)),
    main_loop_factors=(("h100_128x128_c2_lw2", 1.1803), ("h100_128x256_lw2", 1.0001), ("h100_128x256_lw4", 1.0),
                       # the 8-way split: lw4's, not fitted (docs/performance.md, "Split-K of the last wave 8 ways")
                       ("h100_128x256_lw8", 1.0)),
    lastwave_partial_tbps=4.2307)


#: the GEMM chooser's constants on an H200 (:func:`gemm_model`), from the same method on the H200's own surveys:
#: ``bench/fit_choose.py``'s ``fit`` (the :data:`SM90_GEMM_MODEL` constants' Nelder-Mead, the HBM bound widened to
#: 5.5 TB/s) from the H100 model, on the H200's tune half (docs/results/survey_h200_tune.json, the 256x160 tiles
#: joined) and twelve fresh M = 192-512 shapes off both halves (survey_h200_fresh_m256.json); the split-K, padding and
#: last-wave constants held (docs/performance.md, "The H200's own cost model"); the report half never entered the fit
SM90_H200_GEMM_MODEL = DeviceModel(
    l2_tbps=8.702, hbm_tbps=3.744, store_tbps=0.5558, one_wg_efficiency=0.943, multicast=True, ragged_load_factor=3.092,
    dram_latency_us=1.428, overlap=18.42, partial_tbps=1.315, pad_row_cost=1.434, whole_tile_fixup_us=0.6011,
    tile_factors=(("h100_128x128", 1.1896), ("h100_128x128_c2", 1.0277), ("h100_128x144", 1.1601),
                  ("h100_128x144_c2", 1.0971), ("h100_128x160_c2", 1.2093), ("h100_128x192", 1.0767),
                  ("h100_128x192_c2n", 1.2413), ("h100_128x256", 1.2263), ("h100_128x64", 0.9007),
                  ("h100_128x80_c2n", 1.2459), ("h100_192x128_c2n", 1.2456), ("h100_192x176", 1.2409),
                  ("h100_192x192_c2n", 1.218), ("h100_256x128", 1.0028), ("h100_256x160", 1.2392),
                  ("h100_256x160_c2", 1.2437), ("h100_64x128", 0.9139), ("h100_64x16_swap", 0.9864),
                  ("h100_64x256", 0.9688), ("h100_64x32_swap", 1.0524), ("h100_64x64", 0.9408),
                  ("h100_128x192_sk3", 1.0), ("h100_128x64_sk2", 1.0), ("h100_64x128_sk2", 1.0),
                  ("h100_64x64_sk2", 1.0), ("h100_64x64_sk4", 1.0),
                  # split-K of the last wave: the base config's factor
                  ("h100_128x128_c2_lw2", 1.0277), ("h100_128x256_lw2", 1.2263), ("h100_128x256_lw4", 1.2263),
                  ("h100_128x256_lw8", 1.2263)),
    main_loop_factors=SM90_GEMM_MODEL.main_loop_factors, lastwave_partial_tbps=SM90_GEMM_MODEL.lastwave_partial_tbps)


def gemm_model(device: str = "") -> DeviceModel:
    """The GEMM chooser's cost model on a device of :func:`device_key` ``device``: the H200's own
    (:data:`SM90_H200_GEMM_MODEL`), else the H100's (:data:`SM90_GEMM_MODEL`)."""
    return SM90_H200_GEMM_MODEL if device == "H200" else SM90_GEMM_MODEL


def device_key(name: str) -> str:
    """The key of a device's own tuned table: a device key of :data:`DEVICE_TABLES` that is a word of its name
    (``DeviceInfo.name``: ``"NVIDIA H200"``, ``"NVIDIA H200 NVL"`` -> ``"H200"``), else ``""`` (the arch's table:
    ``"NVIDIA H100 80GB HBM3"``, and any device measured by neither, ``"NVIDIA GH200 480GB"`` among them)."""
    words = name.split()
    return next((key for _, key in DEVICE_TABLES if key in words), "")


class Candidate(NamedTuple):
    """What the cost model needs of a config (read from its YAML, no build)."""

    name: str
    arch: str
    block_m: int
    block_n: int
    block_k: int
    stages: int
    cluster: int
    kernel: str = "gemm"
    operands: str = "bf16"
    consumers: str = "cooperative"  # sm_90a mma.consumers (pingpong: never a candidate, see candidates)
    split_k: int = 1  # schedule.split_k as shipped (> 1: tiles x split_k work units, see predict)
    warpgroups: int = 1  # sm_90a consumer warpgroups (mma.warpgroups)
    multicast: bool = False  # sm_90a CTA pair multicasting B (tma.multicast)
    grouped: str = "none"  # schedule.grouped (masked / contiguous: ptxgen.grouped_gemm's, never a candidate)
    swap_ab: bool = False  # schedule.swap_ab: runs D^T = B @ A^T, predicted as the swapped problem (N, M, K)
    split_tiles: str = "all"  # schedule.split_k_tiles: every tile split, or the last wave's only (see predict)
    along: str = "m"  # sm_90a cluster.along: m (two m-blocks, B multicast), n (two n-blocks, A multicast), mn (2x2)

    @property
    def accumulators(self) -> int:
        """Products per tile: 2 for a dual GEMM (two B operands), else 1."""
        return 2 if self.kernel == "dual_gemm" else 1


@functools.cache
def candidates(arch: str, kernel: str = "gemm") -> tuple[Candidate, ...]:
    """Every shipped bf16 config for ``arch`` of kernel kind ``kernel`` (``gemm``, ``dual_gemm``), as :class:`Candidate`.

    NVFP4 configs (``operands: nvfp4``) are ``dual_gemm_nvfp4``'s, never a bf16 call's; FP8 configs (``operands:
    fp8``, kernel ``gemm``) are the candidates of ``kernel="gemm_fp8"`` (``ptxgen.gemm_fp8``) only.  Ping-pong consumer configs
    (``mma.consumers: pingpong``) are not candidates: on an H100 they measured 0.45-0.83x torch where the
    cooperative configs reach 0.95-1.05x (docs/performance.md, "Ping-pong consumers"); nor are grouped configs
    (``schedule.grouped``: ``ptxgen.grouped_gemm`` picks its own).  Split-K configs are (no residency or stream
    condition: docs/performance.md, "Split-K").
    """
    out = _shipped_candidates()
    kind, operands = ("gemm", "fp8") if kernel == "gemm_fp8" else (kernel, "bf16")
    return tuple(c for c in out if c.arch == arch and c.kernel == kind and c.operands == operands
                 and c.consumers == "cooperative" and c.grouped == "none")


@functools.cache
def _shipped_candidates() -> tuple[Candidate, ...]:
    """Every shipped config's :class:`Candidate`, once per process, through the disk cache (key: the sources'
    fingerprint, which covers the shipped YAML files): a warm process reads one small JSON entry instead of
    importing PyYAML and parsing every config (about 25 ms of a 30 ms first-call budget on the H100 host).  On a
    miss the rows shipped with the prebuilt images are taken when their manifest is fresh (its source hash covers
    this module and the YAML files: :mod:`ptxgen.runtime.prebuilt`), else every YAML is parsed."""
    from ptxgen.runtime import cache
    from ptxgen.runtime.loader import source_fingerprint

    def build() -> bytes:
        from ptxgen.runtime import prebuilt  # on a miss only: a warm process reads no manifest

        return json.dumps(prebuilt.candidate_rows() or shipped_rows()).encode()

    blob = cache.get_or_build(("ptxgen-candidates-v5", f"src={source_fingerprint()}"), build)
    return tuple(Candidate(*row) for row in json.loads(blob))


def shipped_rows() -> list[list]:
    """Every shipped config's :class:`Candidate` as a JSON-ready row (its fields in order), parsed from the YAML."""
    from ptxgen.shipped import shipped_configs

    return [list(shipped_candidate(name)) for name in shipped_configs()]


def shipped_candidate(name: str) -> Candidate:
    """The :class:`Candidate` of a shipped config, read from its YAML without the config schema.

    Shipped configs are validated by the test suite, so the fields the cost model ranks on are read as
    written (an absent ``cluster`` is no cluster, an absent ``kernel`` a GEMM, absent ``operands`` bf16, an absent
    ``schedule.split_k`` 1, absent ``mma.warpgroups`` 1, absent ``tma.multicast`` false, an absent ``cluster.along`` m:
    the schema's defaults); a YAML without ``tile`` or ``pipeline`` is loaded through
    ``load_config`` instead.  tests/runtime/test_choose.py checks that this agrees with ``load_config`` for every
    shipped config, so a changed default cannot drift unseen.
    """
    import yaml

    from ptxgen.shipped import configs_dir

    # libyaml's parser where PyYAML has it: the pure-Python one took ~4 ms a file, ~120 ms for the first
    # cost-model choice of a process over 30 shipped configs (a warm first call's budget is 30 ms)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load((configs_dir() / f"{name}.yaml").read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (safe)
    try:
        tile, pipeline, schedule, mma = raw["tile"], raw["pipeline"], raw.get("schedule", {}), raw.get("mma", {})
        cluster = raw.get("cluster", {}).get("size", 1)
        return Candidate(name, raw["arch"], tile["block_m"], tile["block_n"], tile["block_k"], pipeline["stages"],
                         cluster, raw.get("kernel", "gemm"), raw.get("operands", "bf16"),
                         mma.get("consumers", "cooperative"), schedule.get("split_k", 1), mma.get("warpgroups", 1),
                         raw.get("tma", {}).get("multicast", False), schedule.get("grouped", "none"),
                         schedule.get("swap_ab", False), schedule.get("split_k_tiles", "all"),
                         raw.get("cluster", {}).get("along", "m"))
    except (KeyError, TypeError, AttributeError):
        from ptxgen.config import load_config

        cfg = load_config(name)
        return Candidate(name, cfg.arch, cfg.tile.block_m, cfg.tile.block_n, cfg.tile.block_k,
                         cfg.pipeline.stages, cfg.cluster.size, cfg.kernel, cfg.operands, cfg.mma.consumers,
                         cfg.schedule.split_k, cfg.mma.warpgroups, cfg.tma.multicast, cfg.schedule.grouped,
                         cfg.schedule.swap_ab, cfg.schedule.split_k_tiles, cfg.cluster.along)


def predict(c: Candidate, m: int, n: int, k: int, sm_count: int, model: DeviceModel = SM90_MODEL) -> dict:
    """Predicted time of one candidate on one shape (see module docstring).

    Returns:
        ``{"us", "tiles", "units", "waves", "tail", "bytes_per_flop"}``: microseconds, tile count, work units
        (tiles x split_k; last wave: whole tiles + tail tiles x split_k), waves of units, tail efficiency in
        (0, 1], operand bytes per FLOP of one tile.
    """
    slots = max(c.cluster, sm_count // c.cluster * c.cluster)
    # an sm_90a CTA pair takes two m-blocks of one n-block (along N: two n-blocks of one m-block), so an odd count of
    # m-blocks (n-blocks) leaves one CTA of a pair idle: M <= block_m keeps half the SMs of a pair config idle
    pair = c.cluster if c.arch == "sm_90a" else 1
    m_pair, n_pair = {"n": (1, pair), "mn": (2, 2)}.get(c.along, (pair, 1))  # a 2x2 square: two of each
    m_blocks = math.ceil(math.ceil(m / c.block_m) / m_pair) * m_pair
    tiles = m_blocks * math.ceil(math.ceil(n / c.block_n) / n_pair) * n_pair
    splits = c.split_k
    # split-K of the last wave: whole waves of data-parallel tiles (full K), then the tail tiles split (the kernel's
    # dp_tiles = tiles - tiles % grid; fewer tiles than slots: all of them split, ptxgen.launch.GridPolicy.split_units)
    dp_tiles = tiles - tiles % slots if c.split_tiles == "last_wave" and splits > 1 and tiles >= slots else 0
    split_tiles = tiles - dp_tiles if splits > 1 else 0
    units = dp_tiles + (tiles - dp_tiles) * splits  # split-K: each split tile's K in split_k work units
    dp_waves = dp_tiles // slots
    split_waves = math.ceil((units - dp_tiles) / slots)
    waves = dp_waves + split_waves
    acc = c.accumulators
    per_sm_flops = model.peak_tflops * 1e12 / sm_count * (model.one_wg_efficiency if c.warpgroups == 1 else 1.0)
    per_sm_l2 = model.l2_tbps * 1e12 / sm_count
    per_sm_store = model.store_tbps * 1e12 / sm_count
    # a cluster multicasting a shared operand loads half of its rows per CTA: B along M, A along N, both in a square
    halved = model.multicast and c.multicast
    b_rows = acc * c.block_n / (2 if halved and c.along in ("m", "mn") else 1)
    a_share = 0.5 if halved and c.along in ("n", "mn") else 1.0
    ragged = model.ragged_load_factor if (2 * k) % 128 else 1.0
    # rows of a tile past M: TMA zero-fills them in shared memory without reading memory (PTX ISA "Tensors: out of
    # bounds access"); a tile holds m / m_blocks rows of A inside M on average
    a_rows = m / m_blocks
    pad_rows = c.block_m - a_rows
    a_fill_rows = a_rows + model.pad_row_cost * pad_rows  # A rows' L2 -> shared time, in loaded rows
    a_cost_rows = a_fill_rows * a_share  # this CTA's own share of them

    smem_s_per_k = 0.0
    if model.smem_bytes_per_clk:
        # per k of one unit: each m64 wgmma (block_m / 64 of them per k16, one B per accumulator) reads 64 rows of A
        # and block_n rows of B from shared memory, and TMA writes the stage's block_m + acc x block_n rows (a pair
        # multicasting B writes every row of B into both CTAs' shared memory); bf16: 2 B an element
        smem_bytes_per_k = 2.0 * (acc * c.block_m / 64 * (64 + c.block_n) + c.block_m + acc * c.block_n)
        sm_clock_hz = model.peak_tflops * 1e12 / sm_count / 4096.0
        smem_s_per_k = smem_bytes_per_k / (model.smem_bytes_per_clk * sm_clock_hz)

    main_loop = dict(model.main_loop_factors).get(c.name, 1.0)

    def unit_s(k_unit: float) -> float:
        """A unit's main-loop time: the larger of its math time (tensor cores, or the shared-memory bytes its
        wgmmas read and its stages receive) and its operand time, times the config's main-loop factor, or its stage
        ring's latency bound if that is longer."""
        math_s = max(2.0 * acc * c.block_m * c.block_n * k_unit / per_sm_flops, smem_s_per_k * k_unit)
        ring_s = k_unit / (c.block_k * c.stages) * model.stage_latency_us * 1e-6
        return max(max(math_s, (a_cost_rows + b_rows) * k_unit * 2.0 * ragged / per_sm_l2) * main_loop, ring_s)

    fixed_s = (c.stages * (a_fill_rows + acc * c.block_n) * c.block_k * 2.0) / per_sm_l2 + c.block_m * c.block_n * 2.0 / per_sm_store
    # split-K: every split stores its fp32 partial (block_m rows, those past M too), the last arriver reads the other
    # splits - 1; the units of a wave share the partial bandwidth, so the kernel pays for every split unit's bytes
    partial_s = 0.0
    if splits > 1:
        partial_tbps = model.partial_tbps
        if c.split_tiles == "last_wave" and model.lastwave_partial_tbps is not None:
            partial_tbps = model.lastwave_partial_tbps
        partial_s = (split_tiles * splits * acc * c.block_m * c.block_n * 4.0 * (2 * splits - 1) / splits
                     / (partial_tbps * 1e12))
    dram_bytes = 2.0 * (m * k + acc * n * k + m * n)
    dram_bw = model.hbm_tbps * 1e12
    if model.dram_latency_us:
        in_flight = c.stages * (a_rows * a_share + b_rows) * c.block_k * 2.0  # a zero-filled row holds no memory request
        dram_bw = min(dram_bw, min(units, slots) * in_flight / (model.dram_latency_us * 1e-6))
    # a whole tile of a last-wave config passes the fixup predicated off: whole_tile_fixup_us per split
    whole_s = unit_s(k) + fixed_s + splits * model.whole_tile_fixup_us * 1e-6
    waves_s = dp_waves * whole_s + split_waves * (unit_s(k / splits) + fixed_s)
    tile_s = (waves_s + partial_s) * dict(model.tile_factors).get(c.name, 1.0)
    dram_s = dram_bytes / dram_bw
    p = model.overlap
    both = max(tile_s, dram_s) if not p else max(tile_s, dram_s) * (1 + (min(tile_s, dram_s) / max(tile_s, dram_s)) ** p) ** (1 / p)
    return {
        "us": both * 1e6 + model.launch_us,
        "tiles": tiles,
        "units": units,
        "waves": waves,
        "tail": units / (waves * slots),
        "bytes_per_flop": (c.block_m + acc * c.block_n) * 2.0 / (2.0 * acc * c.block_m * c.block_n),
    }


def rank(cands: tuple[Candidate, ...], m: int, n: int, k: int, sm_count: int, default: str | None = None,
         model: DeviceModel = SM90_MODEL) -> list[tuple[float, str]]:
    """Candidates by predicted time, fastest first: ``[(us, name), ...]`` (the default wins ties).  A swap-AB
    candidate is predicted on the problem it runs, ``(n, m, k)``."""
    scored = [(round(predict(c, *((n, m, k) if c.swap_ab else (m, n, k)), sm_count, model)["us"], 3),
               c.name != default, c.name) for c in cands]
    return [(us, name) for us, _, name in sorted(scored)]


# --------------------------------------------------------------------------- tuned tables


def user_table_path(arch: str) -> Path:
    """Where ``ptxgen tune`` writes the table for ``arch``: ``<cache dir>/tuned/<arch>.json``."""
    from ptxgen.runtime.cache import cache_dir

    return cache_dir() / "tuned" / f"{arch}.json"


def shipped_table_path(arch: str, device: str = "") -> Path | None:
    """The package's tuned table for ``arch`` on a device of :func:`device_key` ``device`` (its own where
    :data:`DEVICE_TABLES` has one, else the arch's; None when the arch has none)."""
    from ptxgen.shipped import configs_dir

    name = DEVICE_TABLES.get((arch, device)) or SHIPPED_TABLES.get(arch)
    return configs_dir() / name if name else None


def read_table(path: Path | None) -> dict[tuple[int, int, int], str]:
    """``{(M, N, K): config}`` from a table file; empty when absent or unreadable (logged, never raised)."""
    if path is None or not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
        return {(int(e["m"]), int(e["n"]), int(e["k"])): str(e["config"]) for e in doc["entries"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        import logging

        logging.getLogger(__name__).warning("ptxgen: ignoring tuned table %s (%s)", path, exc)
        return {}


def table_doc(arch: str, device: str, entries: list[dict], source: str) -> dict:
    """The JSON document of a tuned table (``entries``: ``{"m", "n", "k", "config", ...}``)."""
    return {"version": TABLE_VERSION, "arch": arch, "device": device, "source": source,
            "entries": sorted(entries, key=lambda e: (e["m"], e["n"], e["k"]))}


def write_table(path: Path, doc: dict) -> None:
    """Write a table atomically (temp file + ``os.replace``)."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    choose_cached.cache_clear()


# --------------------------------------------------------------------------- the choice


def default_config_name(capability: tuple[int, int], kernel: str = "gemm") -> str:
    """The shipped config for a compute capability and kernel kind (``gemm``, ``dual_gemm``, ``gemm_fp8``) when no shape is known
    (see :func:`ptxgen.runtime.api.resolve_config`).

    Raises:
        ConfigError: no shipped default for this capability.
    """
    dual = kernel == "dual_gemm"
    if kernel == "gemm_fp8":
        if capability == (9, 0):
            return DEFAULT_FP8_SM90
        raise ConfigError(f"device compute capability {capability[0]}.{capability[1]}: the FP8 GEMM is an sm_90a "
                          "kernel (wgmma .e4m3); no FP8 config for this device")
    if capability == (9, 0):
        return DEFAULT_DUAL_SM90 if dual else DEFAULT_SM90
    if capability[0] == 10:
        return DEFAULT_DUAL_SM100 if dual else DEFAULT_SM100
    raise ConfigError(f"device compute capability {capability[0]}.{capability[1]}: no default config "
                      "(ptxgen targets sm_90a and sm_100a); pass config=")


@functools.lru_cache(maxsize=4096)
def choose_cached(m: int, n: int, k: int, capability: tuple[int, int], sm_count: int,
                  kernel: str = "gemm", device: str = "") -> tuple[str, str]:
    """``(config name, why)`` for a shape on a device of ``capability`` with ``sm_count`` SMs; ``device``: its
    :func:`device_key`, which picks the GEMM's shipped table and cost model (:func:`gemm_model`).

    ``why`` is ``"user table"``, ``"shipped table"``, ``"cost model"``, ``"fp8 rule"`` (``kernel="gemm_fp8"``:
    :func:`fp8_rule`), ``"small-M rule"`` (sm_90a ``kernel="dual_gemm"``: :func:`dual_small_m_rule`) or
    ``"default"``.  The tuned tables hold GEMM configs; a dual GEMM (``kernel="dual_gemm"``) is chosen by the
    small-M rule, else by the cost model among the ``dual_*`` configs without a last-wave split, then
    :func:`dual_last_wave_rule`.

    Raises:
        ConfigError: the capability has no shipped config at all.
    """
    from ptxgen.shipped import is_shipped

    default = default_config_name(capability, kernel)
    arch = ARCH_OF_CAPABILITY.get(tuple(capability))
    if kernel == "gemm_fp8":
        return fp8_rule(m, n, k, sm_count), "fp8 rule"
    if kernel != "gemm":
        cands = candidates(arch, kernel) if arch else ()
        if not cands:
            return default, "default"
        small = dual_small_m_rule(m, n, sm_count) if arch == "sm_90a" and kernel == "dual_gemm" else None
        if small is not None and any(c.name == small for c in cands):
            return dual_last_wave_rule(small, m, n, sm_count, cands), "small-M rule"
        if m <= 256:  # one pair of m-blocks: B multicast has nothing to amortise (H100: 1.13-1.26x vs 1.08-1.24x
            cands = tuple(c for c in cands if c.cluster == 1) or cands  # over torch; docs/performance.md)
        whole = tuple(c for c in cands if c.split_tiles != "last_wave") or cands  # taken by the rule below only
        return dual_last_wave_rule(rank(whole, m, n, k, sm_count, default)[0][1], m, n, sm_count, cands), "cost model"
    for why, path in (("user table", user_table_path(arch) if arch else None),
                      ("shipped table", shipped_table_path(arch, device) if arch else None)):
        hit = read_table(path).get((m, n, k))
        if hit is not None and is_shipped(hit):  # one stat for the hit, not a listing of the folder
            return hit, why
    cands = tuple(c for c in candidates(arch) if swap_ab_fits(c, m)) if arch else ()
    if not cands:
        return default, "default"
    return pair_twin_rule(rank(cands, m, n, k, sm_count, default, gemm_model(device))[0][1], n), "cost model"


#: dual_gemm on sm_90a, (largest M, config) fastest first: at small M the dual GEMM reads B1 and B2 at the copy
#: bandwidth only with more CTAs than a 128x128 grid has, and the cost model (DRAM-bound there) ties every tile.
#: Measured on the tune half of the SwiGLU suite (H100, ``bench/dual_bench.py``, 5 runs; docs/performance.md,
#: "Small tiles for the small-M SwiGLU"): M <= 64 the 64x64 tile (one m-block reads B once; 1.04-1.88x torch unfused
#: against 0.89-1.73x for 128x128), M <= 256 the 128x64 tile (1.13x and 1.68x against 1.04x and 1.46x) while the
#: 128x128 grid is short of :data:`DUAL_128X128_MIN_WAVES` waves; above, the cost model (at M = 512 the 64-row tiles
#: fall to 0.5x).
DUAL_SMALL_M = ((64, "dual_h100_64x64"), (256, "dual_h100_128x64"))
#: At 64 < M <= 256, the 128x128 tile instead of 128x64 once its grid has this many tiles per SM: the 128x64 tile
#: moves 32 KiB into shared memory per k-block for half the MMAs of the 128x128 tile's 48 KiB, which only pays while
#: the 128x128 grid leaves SMs idle.  Read off the tune half (H100, 132 SMs; docs/performance.md, "The M = 256
#: SwiGLU: tiles, not rows"): 128x18944x3584 (148 tiles, 1.12 waves) 0.113 against 0.125 ms for 128x128,
#: 128x29568x8192 (231 tiles, 1.75 waves) 0.347 against 0.334 ms.
DUAL_128X128_MIN_WAVES = 1.5


def dual_small_m_rule(m: int, n: int, sm_count: int) -> str | None:
    """The sm_90a dual-GEMM config for an ``m x n`` output on ``sm_count`` SMs when :data:`DUAL_SMALL_M` has one,
    else None (cost model): ``dual_h100_128x128`` in place of ``dual_h100_128x64`` where the 128x128 grid
    (ceil(m / 128) x ceil(n / 128) tiles) fills :data:`DUAL_128X128_MIN_WAVES` waves of ``sm_count``."""
    name = next((name for rows, name in DUAL_SMALL_M if m <= rows), None)
    if name == "dual_h100_128x64" and _tiles_128x128(m, n) >= DUAL_128X128_MIN_WAVES * sm_count:
        return "dual_h100_128x128"
    return name


def _tiles_128x128(m: int, n: int) -> int:
    """The tiles of a 128x128 grid over an ``m x n`` output (the dual rules' tile count)."""
    return -(-m // 128) * -(-n // 128)


#: dual_gemm on sm_90a: a 128x128 config and its split-K-of-the-last-wave variant (``schedule.split_k_tiles:
#: last_wave``, ``split_k: 2``), which :func:`dual_last_wave_rule` takes in its place.
DUAL_LAST_WAVE = (("dual_h100_128x128", "dual_h100_128x128_lw2"), ("dual_h100_128x128_c2", "dual_h100_128x128_c2_lw2"))
#: The largest M at which :func:`dual_last_wave_rule` splits a last wave whatever the round count: the largest M of the
#: tune shapes the rule was first read off (M = 128-512, 2-7 rounds).
DUAL_LAST_WAVE_MAX_M = 512
#: Above :data:`DUAL_LAST_WAVE_MAX_M`, the most rounds (``ceil(tiles / SMs)``) at which the split still pays: read off
#: twelve M > 512 tune shapes with ``0 < 2 x tail <= SMs`` (H100; docs/performance.md, "The dual GEMM's last-wave split
#: at large M"): at 3-8 rounds the split ran 1.02-1.18x faster on five and tied on one (5000x3000x2000), at 18-32 rounds
#: 0.89-1.01x (three losses, up to 11 % at K = 512, where the whole tiles' fixup weighs most).
DUAL_LAST_WAVE_MAX_ROUNDS = 8


def dual_last_wave_rule(name: str, m: int, n: int, sm_count: int, cands: tuple[Candidate, ...]) -> str:
    """``name``, or its last-wave variant (:data:`DUAL_LAST_WAVE`) when the 128x128 grid's last wave splits into units
    that fit one wave: ``0 < 2 x tail <= sm_count`` with ``tail`` = tiles mod ``sm_count`` (every tile when there are
    fewer tiles than SMs), and either ``m <= DUAL_LAST_WAVE_MAX_M`` or the grid takes at most
    ``DUAL_LAST_WAVE_MAX_ROUNDS`` rounds of ``sm_count`` tiles; a variant that is not among ``cands`` is not taken.

    A short last round of whole tiles leaves most SMs idle; split in two, its tiles finish in about half the time,
    while a tail of more than half the SMs needs a second round of half tiles and loses (the fp32 partials and the
    whole tiles' fixup).  Read off the five M = 128-512 shapes of the SwiGLU suite's tune half (H100, 132 SMs;
    docs/performance.md, "The M = 256 SwiGLU's tail: split-K of the last wave"): split at 512x14336x4096 (tail 52:
    188.7 against 201.6 us), whole at 128x29568x8192 (tail 99: 337.9 against 356.6) and 512x28672x8192 (tail 104:
    733.4 against 759.2).  Above M = 512 the half round saved is 1 / (2 x rounds) of the time, against a fixup paid on
    every tile: it wins up to 8 rounds (1024x5120x25600, 3 rounds: 751 against 885 us) and not beyond (8192x8192x512,
    32 rounds: 265 against 235 us).
    """
    variant = dict(DUAL_LAST_WAVE).get(name)
    if variant is None or not any(c.name == variant for c in cands):
        return name
    tiles = _tiles_128x128(m, n)
    if m > DUAL_LAST_WAVE_MAX_M and math.ceil(tiles / sm_count) > DUAL_LAST_WAVE_MAX_ROUNDS:
        return name
    tail = tiles % sm_count if tiles >= sm_count else tiles
    return variant if 0 < 2 * tail <= sm_count else name


def swap_ab_fits(c: Candidate, m: int) -> bool:
    """Whether ``c`` is a candidate at this M: any config that is not swap-AB; a swap-AB one only when M fits its
    ``block_n`` (one n-block of the swapped problem, so each CTA reads its rows of B once).  On the H100's tune half
    (docs/performance.md, "Swap-AB") the swap-AB tiles ran at 0.57-0.90x the unswapped pick at M = 64 over 16- and
    32-column tiles (B read 4 and 2 times), and at 0.95-1.10x it where M fits."""
    return not c.swap_ab or m <= c.block_n


#: sm_90a CTA pairs multicasting B, each with its single-CTA twin (the same tile, stages aside, without the pair) and the
#: fewest n-blocks at which the chooser keeps the pair: (pair, twin, n-blocks).  The 128x144 pair measured 1.15-1.35x
#: the single tile on grids of 8-11 n-blocks, and 0.85-0.96x it on 4 (N = 576: 4096x576x7168 54.7 against 49.2 us,
#: 8192x576x4096 62.2 against 58.2; H100, docs/performance.md, "A CTA pair of 128x144 tiles"): there B is 576 rows
#: that every CTA reads, the multicast saves nothing measurable and the pair's shared ``empty`` barriers cost; the
#: cost model prices B's rows alike at every N and ranks the two as on the wide grids.
PAIR_SINGLE_TWIN = (("h100_128x144_c2", "h100_128x144", 8),)


def pair_twin_rule(name: str, n: int) -> str:
    """The config to run for the cost model's pick ``name``: the pick, or its single twin
    (:data:`PAIR_SINGLE_TWIN`) where the grid has fewer n-blocks than the pair needs."""
    for pair, twin, min_n_blocks in PAIR_SINGLE_TWIN:
        if name == pair and math.ceil(n / shipped_candidate(pair).block_n) < min_n_blocks:
            return twin
    return name


#: gemm_fp8 on sm_90a: the 64-row tile (one consumer warpgroup) at or below this M, the CTA pairs above
FP8_SMALL_M = 128
#: gemm_fp8 on sm_90a above FP8_SMALL_M: (config, block_m, block_n, TFLOP/s relative to the 128x256 pair where both
#: fill whole waves), both CTA pairs multicasting B; the rate is measured (H100: 192x128 pair 1065 against 1162
#: TFLOP/s at 8192^3, 1063 against 1050-1181 at 4096x24576x1536; docs/fp8.md, "Speed")
FP8_PAIR_TILES = (("fp8_h100_128x256_c2", 128, 256, 1.0), ("fp8_h100_192x128_c2", 192, 128, 0.9))


def fp8_wave_efficiency(m: int, n: int, block_m: int, block_n: int, sm_count: int) -> float:
    """The fraction of the launched tile area that holds D for a persistent CTA-pair grid: ``m x n`` over (waves x
    ``sm_count`` x ``block_m x block_n``), with m-blocks rounded up to whole pairs and waves = ceil(tiles /
    ``sm_count``).  Units: elements; 1.0 when the tiles fill every SM of every wave exactly."""
    tiles = 2 * -(-(-(-m // block_m)) // 2) * -(-n // block_n)
    waves = -(-tiles // sm_count)
    return m * n / (waves * sm_count * block_m * block_n)


def fp8_rule(m: int, n: int, k: int, sm_count: int) -> str:
    """The FP8 config for ``(m, n, k)`` on sm_90a: a rule read off H100 measurements (docs/fp8.md, "Speed").

    * ``m <= FP8_SMALL_M``: ``fp8_h100_64x128`` (one consumer warpgroup per 64-row tile: at M = 128 twice the
      CTAs of a 128-row tile, at M <= 64 no warpgroup multiplies rows past M; measured 1.01-1.25x the 128x128
      tile at M = 128, 0.89-1.48x at M = 64, geomean 1.03x);
    * above: of :data:`FP8_PAIR_TILES` (CTA pairs multicasting B, 32 and 40 KiB of L2 -> shared memory per CTA
      and k-block against 32 KiB for half the work of the 128x128 tile), the one with the largest measured rate x
      :func:`fp8_wave_efficiency`: the 128x256 pair unless its waves leave SMs idle, as at N = 2112 (288 tiles
      = 2.2 waves of 132 SMs: the 192x128 pair's 374 tiles fill 2.8; measured 1144 against 880 TFLOP/s).

    ``k`` does not enter (measured K = 512 to 16384 at M = 4096).
    """
    if m <= FP8_SMALL_M:
        return "fp8_h100_64x128"
    return max(FP8_PAIR_TILES, key=lambda t: t[3] * fp8_wave_efficiency(m, n, t[1], t[2], sm_count))[0]


def ranked_configs(m: int, n: int, k: int, info: Any) -> list[str]:
    """The device's GEMM configs for ``(m, n, k)``, the cost model's fastest first (the ranking
    :func:`choose_cached` picks from when no tuned table holds the shape); [] for a device without configs."""
    arch = ARCH_OF_CAPABILITY.get(tuple(info.capability))
    cands = tuple(c for c in candidates(arch) if swap_ab_fits(c, m)) if arch else ()
    default = default_config_name(tuple(info.capability), "gemm")
    return [name for _, name in rank(cands, m, n, k, info.sm_count, default, gemm_model(device_key(info.name)))]


def choose(m: int, n: int, k: int, info: Any, kernel: str = "gemm") -> str:
    """The config name for ``(m, n, k)`` on a device (:class:`~ptxgen.runtime.driver.DeviceInfo`) and kernel kind."""
    return choose_cached(m, n, k, tuple(info.capability), info.sm_count, kernel, device_key(info.name))[0]
