"""Pipeline configs: YAML or Python -> frozen, validated dataclasses.

A config holds only what a user tunes.  Every derived number (offsets, bytes,
counts) lives in :mod:`ptxgen.plan`.

Validation has two layers, and every way of making a :class:`Config` runs both
(YAML through :func:`load_config` / :func:`from_dict`, the constructor,
``dataclasses.replace`` and :meth:`Config.replace`):

1. the schema: the sections are pydantic v2 dataclasses (``extra='forbid'``,
   strict types, ``Literal`` choices, ``Range`` bounds).  Types, ranges and
   unknown keys are pydantic's job; its first error is rendered as one
   :class:`ConfigError` naming the field path and the value, e.g.
   ``tile.block_n='x': expected int, got str`` or
   ``tile.blockn: unknown key (did you mean 'block_n'?)``.
2. the hardware rules (:func:`validate`, hand-written below), run from
   ``Config.__post_init__``: divisibility, per-arch limits, cross-field rules.

The budgets (stages x bytes + CD + barriers <= 232448 B of shared memory, TMEM
columns, registers) need the plan's numbers, so :func:`ptxgen.plan.make_plan`
raises them (the number an error quotes is the number the kernel would use):
when building, or at load time through :func:`ptxgen.build.load_config` /
:func:`ptxgen.build.from_dict`.  This module never imports the plan.

Adding a field is one line in its section (``stmatrix: Bool = False``);
adding a section is its class plus one line in :class:`Config`.

Sources of the hardware rules: PTX ISA "tcgen05 Matrix shapes" (UMMA M/N per
cta_group), "Tensor Memory" (512 columns, power-of-two allocation >= 32),
"wgmma shapes" (m64nNk16, N % 8 == 0, N <= 256), "Tensor copy: swizzle"
(128B swizzle inner box <= 128 bytes).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from dataclasses import field
from typing import Annotated, Literal

import annotated_types
import yaml
from pydantic import AfterValidator, ConfigDict, Strict, StringConstraints, ValidationError
from pydantic_core import PydanticCustomError
from pydantic.dataclasses import dataclass as _pydantic_dataclass

from .errors import ConfigError
from .hw import BF16_BLOCK_K  # K elements per bf16 k-block (the runtime reads it too)
from .hw import FP8_SCALE_BLOCK  # K elements per FP8 scale block (plan and runtime read it too)
from .hw import GROUPED_SEGMENT_ROWS  # the contiguous layout's segment padding (the runtime reads it too)
from .hw import MN_MAJOR_CHUNK  # M or N elements per MN-major box (plan and runtime read it too)
from .shipped import configs_dir, resolve_config_path, shipped_configs  # noqa: F401 - re-exported

ARCHS = ("sm_100a", "sm_90a")
from .hw import SMEM_LIMIT_BYTES  # noqa: E402,F401 - re-exported (older imports)
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$"  # a safe file stem: generated/<name>.ptx

# --------------------------------------------------------------------------- schema vocabulary

Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]


def Range(lo: int, hi: int):  # noqa: N802 (a type alias factory)
    """A strict int in ``[lo, hi]`` (bools rejected)."""
    return Annotated[int, Strict(), annotated_types.Ge(lo), annotated_types.Le(hi)]


def OneOf(*values):  # noqa: N802
    """A choice among ``values``: strings as a ``Literal``; ints strict (``OneOf(0, 4)`` rejects ``4.0`` and ``True``)."""
    if all(isinstance(v, str) for v in values):
        return Literal[values]

    def check(v: int) -> int:
        if v not in values:
            raise PydanticCustomError("one_of", "must be one of {values}", {"values": list(values)})
        return v

    return Annotated[int, Strict(), AfterValidator(check)]


Name = Annotated[str, Strict(), StringConstraints(pattern=NAME_PATTERN)]
NAME_RULE = "must be a file stem of 1-64 ASCII letters, digits, '_' and '-', not starting with '-' (generated/<name>.ptx)"

_SCHEMA = ConfigDict(extra="forbid")


def section(cls):
    """Decorator of a config section: a frozen pydantic dataclass whose constructor raises ConfigError."""
    cls = _pydantic_dataclass(frozen=True, config=_SCHEMA)(cls)
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):  # noqa: N807
        try:
            init(self, *args, **kwargs)
        except ValidationError as exc:
            raise _config_error(exc, type(self)) from None

    cls.__init__ = __init__
    return cls


# --------------------------------------------------------------------------- sections


@section
class Tile:
    """Output tile of one CTA, in elements.

    block_m: rows of D per CTA (sm_100a: 128 or 256, one M-wave per 128 rows;
        sm_90a: a multiple of 64 per consumer warpgroup).
    block_n: columns of D per CTA.
    block_k: K elements per pipeline stage; 64 (= 128 B of bf16, one 128B-swizzle atom); ``operands: fp8``: 128
        (128 B of e4m3, and one 128-K scale block).
    """

    block_m: Range(1, 256) = 128
    block_n: Range(1, 256) = 128
    block_k: Range(1, 256) = 64


@section
class Pipeline:
    """Shared-memory operand ring.

    stages: number of A/B stages, each with a ``full`` and an ``empty`` mbarrier.
    roles: ``lockstep`` — one warp issues both the TMA loads and the MMAs of a
        k-block in program order (the async MMA still overlaps the next load);
        ``specialized`` — a producer warp and an MMA warp loop independently.
    """

    stages: Range(1, 32) = 1
    roles: OneOf("lockstep", "specialized") = "specialized"


@section
class Cluster:
    """CTA cluster.

    size: CTAs per cluster (1, 2 or 4).  sm_100a: 2 means ``cta_group::2`` (one UMMA
        spans both CTAs, UMMA_M = 256).  sm_90a: 2 pairs CTAs on one n-block (``along: m``) or on one m-block
        (``along: n``); 4 is a 2x2 square of tiles (``along: mn``).
    dual_tile: sm_100a: each CTA of the pair computes its own m-block (level 7);
        without it both CTAs compute the same tile.  sm_90a: must equal size >= 2.
    along: sm_90a clusters: the output dimensions along which the cluster's tiles lie.  ``m``: two m-blocks of one
        n-block, the pair shares B (``tma.multicast``: each CTA loads half of B's rows and multicasts them);
        ``n``: two adjacent n-blocks of one m-block, the pair shares A (each CTA loads half of A's rows);
        ``mn`` (size 4): two m-blocks x two n-blocks, each CTA shares A with the CTA beside it along N and B with
        the one beside it along M, loading half of each and multicasting it to the two CTAs that read it.
    """

    size: OneOf(1, 2, 4) = 1
    dual_tile: Bool = False
    along: OneOf("m", "n", "mn") = "m"


@section
class Accumulator:
    """Accumulator buffering. stages: TMEM accumulator stages (sm_100a); 1 on sm_90a."""

    stages: Range(1, 16) = 1


@section
class Mma:
    """MMA issue.

    lanes: ``one`` — one elected lane of the MMA warp waits and issues;
        ``all`` — all 32 lanes wait, per-stage descriptors are shared with
        ``shfl.sync`` (lane i holds stage i's), one elected lane issues (level 9).
    tc_util_percent: 100 = no throttle; below, idle cycles after each commit (level 8).
    warpgroups: sm_90a consumer warpgroups, 1 to 3 (with the producer warpgroup, 3 make 512 threads: 128
        registers each at launch, 152 per consumer thread after ``setmaxnreg``); sm_100a ignores it (must be 1).
    consumers: sm_90a schedule of the consumer warpgroups (CUTLASS's kernel schedules):
        ``cooperative`` — all warpgroups compute one tile, each ``block_m / warpgroups`` of its rows
        (KernelTmaWarpSpecializedCooperative); ``pingpong`` — each warpgroup computes whole
        ``block_m x block_n`` tiles, alternating (warpgroup ``w`` takes the CTA's tiles ``tc % 2 == w``), so one
        warpgroup's epilogue overlaps the other's mainloop (KernelTmaWarpSpecializedPingpong); needs 2
        warpgroups and a persistent schedule.
    promotion_unroll: ``operands: fp8`` only, k-blocks per main-loop iteration.  1: each k-block's wgmmas,
        ``wgmma.wait_group 0``, then its promotion (the tensor pipe of this warpgroup idles during it).  2 or 4:
        two block partials; block kb + 1's wgmmas are issued before block kb is promoted (``wgmma.wait_group 1``),
        so the promotion overlaps them; K is walked in whole iterations (the k-blocks past K are the TMA's zero
        fill, promoted as zeros).  Measured on the H100 (docs/fp8.md, "Speed"): even with one consumer
        warpgroup; with two, 0.93-1.06x compiled as a whole program (2.2-3.4x slower where the driver's
        relocatable JIT spilled the third partial).
    """

    lanes: OneOf("one", "all") = "one"
    tc_util_percent: Range(1, 100) = 100
    warpgroups: OneOf(1, 2, 3) = 1
    consumers: OneOf("cooperative", "pingpong") = "cooperative"
    promotion_unroll: OneOf(1, 2, 4) = 1


@section
class Smem:
    """Shared-memory layout: ``interleaved`` (A,B per stage) or ``separated`` (all A stages, then all B)."""

    layout: OneOf("interleaved", "separated") = "interleaved"


@section
class Epilogue:
    """Accumulator -> D.

    warps: 0 — the mainloop warps run the epilogue after the k-loop; 4 — a
        dedicated epilogue warpgroup (warps 4-7).  sm_90a: 0 (consumers store).
    store: ``direct`` (st.global from registers) or ``tma`` (smem staging + TMA store).
    swizzle: CD staging swizzle, ``none`` or ``128`` (chunk i of row r stored at i ^ (r % 8)).  ``128``
        needs ``store_block_n`` = 64 (one 128-byte swizzle row); ``none`` takes any store_block_n, and on
        sm_90a its fragment stores (8 rows x 4 lanes x 4 B per warp) are bank-conflict free when a staging
        row is an odd number of 16-byte chunks (store_block_n / 8 odd: 72, 88, ...), 2- to 8-way otherwise.
    store_block_n: D columns per TMA store (0 = block_n).
    stages: CD staging buffers (TMA store pipelining).
    early_release: arrive on ``tmem_empty`` right after the TMEM reads, before the stores.
    release: ``elected`` — one thread per CTA arrives on ``tmem_empty``;
        ``per_thread`` — every epilogue thread arrives after its own fence (level 9).
    overlap: sm_90a cooperative consumers: pack a finished tile's accumulator to bf16 words (half the registers),
        issue the next tile's first k-block of wgmma, and store the packed tile while it runs; the last tile is
        stored after the tile loop.  Meant to idle the tensor cores only for the pack, not for the whole store
        (sm_100a gets that from its TMEM accumulator stages); measured 1-40 % slower on the H100,
        so no shipped config sets it.
    stmatrix: sm_90a TMA-store staging through ``stmatrix.sync.aligned.m8n8.x4`` (four 8x8 bf16 matrices, 16 bytes
        per lane per instruction) instead of ``st.shared.b32`` (4 bytes): a quarter of the staging instructions.
    expr: the fused epilogue, an expression of :mod:`ptxgen.epi` in its text form (``"gelu(acc + bias[col])"``);
        empty: the kernel's default (``acc`` for ``gemm``, ``silu(acc1) * acc2`` for ``dual_gemm``).  Operands
        (bias, scale, residual) and ``fp16(...)`` are sm_90a only.
    """

    warps: OneOf(0, 4) = 0
    store: OneOf("direct", "tma") = "direct"
    swizzle: OneOf("none", "128") = "none"
    store_block_n: Range(0, 256) = 0
    stages: Range(1, 4) = 1
    early_release: Bool = False
    release: OneOf("elected", "per_thread") = "elected"
    overlap: Bool = False
    stmatrix: Bool = False
    expr: Str = ""


@section
class Schedule:
    """Tile order. persistent: grid = SM count, CTAs loop over tiles. group: swizzle group (m-blocks).

    split_k: split each tile's K range over this many work units (serial split-K: the first ``split_k - 1``
    splits leave fp32 partials in a global workspace, the last adds them and stores D; sm_90a, persistent).
    split_k_tiles: which tiles split-K splits: ``all`` (every tile), or ``last_wave`` (whole waves of the launched
        grid run as ordinary data-parallel tiles, only the tiles of the last, partial wave are split ``split_k``
        ways, so their units fill the machine; see :class:`ptxgen.plan.SplitKPlan`); needs split_k >= 2.
    grouped: ``none``, or a grouped GEMM for mixture-of-experts (:func:`ptxgen.grouped_gemm`, docs/grouped.md):
        ``masked`` (A ``[G, M_max, K]``, rows ``>= masked_m[g]`` of group g neither computed past their m-block nor
        stored) or ``contiguous`` (A ``[M_total, K]`` with rows grouped by expert, ``m_indices[row]`` each row's
        group, -1 for padding); B ``[G, N, K]``.  The persistent scheduler walks (group, m-block, n-block) and
        skips empty work (:class:`ptxgen.builders.grouped.GroupedTileScheduler`); sm_90a; direct stores, or with
        ``epilogue.store=tma`` TMA stores of the m-blocks wholly inside a group's valid rows.
    expert_window: ``grouped=contiguous`` only; 0: the swizzled walk of the dense GEMM (groups of ``group``
        m-blocks walk their n-blocks together, wherever the experts change).  W > 0: the tiles are walked in windows
        of W m-blocks; a window's m-blocks are cut into runs of one expert (the ``m_indices`` word of each
        m-block's first row; a run ends where the word changes or after ``group`` m-blocks), and each run walks
        its n-blocks with its m-blocks together, one run after the other, so the CTAs running at one time share
        fewer experts' B tiles (:meth:`ptxgen.builders.grouped.GroupedTileScheduler.expert_runs`).
    table_lookahead: ``grouped=contiguous`` with ``expert_window=0`` only: each unit issues the ``m_indices`` reads of
        the CTA's next unit, so they are in flight under the unit's k-loop instead of on the path from one tile's
        epilogue to the next tile's first wgmma (:meth:`ptxgen.builders.grouped.GroupedTileScheduler.lookahead`).
    swap_ab: swap-AB for small M: the kernel computes ``D^T = B @ A^T``.  The runtime passes B ``[N, K]`` as the
        kernel's A operand and A ``[M, K]`` as its B operand, so the kernel's ``m`` is the caller's N (``block_m``
        rows of B per tile, many CTAs) and its ``n`` the caller's M (``block_n`` >= M: the small dimension is the
        wgmma N, PTX ISA "wgmma.mma_async" shapes m64nNk16); both operands stay K-major, the mainloop is
        unchanged, and the epilogue stores accumulator element (i, j) at ``D[j, i]`` (row pitch = the kernel's
        ``m``) with guarded ``st.global.b16``.  sm_90a bf16 GEMM, direct stores; a fused expression reads its operands
        transposed and must be elementwise on a 16-bit D.
    shift_last_block: sm_90a: the last m-block's and n-block's tiles end at M and N (overlapping the tiles before
        them) where the walk allows it, so their operand boxes hold no row past A or B (see
        :class:`ptxgen.plan.SchedulePlan`); false: they run past M and N and TMA zero-fills those rows.
    pdl: programmatic dependent launch (PTX ISA "griddepcontrol", sm_90+).  Every thread runs the kernel's setup
        (barrier init, TMEM allocation, the cluster sync: no global memory), then ``griddepcontrol.wait`` before any
        global access; unless ``PTXGEN_PDL=0`` the runtime launches it with the programmatic stream serialization
        attribute, so it launches as the previous kernel's CTAs exit and its setup overlaps that kernel's
        completion.  A result never changes: the wait returns only when the previous grid has completed and its
        memory is visible (at once in plain stream order).
    """

    persistent: Bool = False
    group: Range(1, 1024) = 1
    split_k: Range(1, 16) = 1
    split_k_tiles: OneOf("all", "last_wave") = "all"
    grouped: OneOf("none", "masked", "contiguous") = "none"
    expert_window: Range(0, 64) = 0
    table_lookahead: Bool = False
    swap_ab: Bool = False
    shift_last_block: Bool = True
    pdl: Bool = True


@section
class Tma:
    """TMA loads.

    two_sm: sm_100a 2-SM loads (``.cta_group::2``, barrier address masked with 0xFEFFFFFF).
    multicast: sm_90a: the CTA pair multicasts halves of the tile it shares (B, or A with ``cluster.along: n``).
    l2_promotion: ``none``, ``64``, ``128`` or ``256`` (bytes).
    cache_hint_a, cache_hint_b: L2 eviction priority of the A and of the B (and B2) loads: ``none`` (the
        default policy), ``evict_first`` or ``evict_last``; a ``createpolicy.fractional.L2::<hint>`` policy
        (fraction 1.0) passed with ``.L2::cache_hint`` (PTX ISA "createpolicy", "cp.async.bulk.tensor").
        A hint changes which lines L2 keeps, never a result.
    major_a, major_b: how the kernel's A ``[M, K]`` and B ``[N, K]`` lie in global memory, and so in shared memory:
        ``k`` (K-major: K contiguous, each row at a pitch >= K) or ``mn`` (MN-major: M or N contiguous, each K
        row at a pitch >= M or N: the transposed view ``w.T`` of a row-major ``[K, N]`` weight).  An ``mn``
        operand is loaded as boxes of 64 M or N elements (128 B, one 128B-swizzle row) x ``block_k`` K rows, and
        wgmma reads it with its transpose immediate (PTX ISA "wgmma.mma_async": imm-trans-a / imm-trans-b, 16-bit
        inputs only; "Matrix Descriptor Format": MN-major, 128B swizzle).
    """

    two_sm: Bool = False
    multicast: Bool = False
    l2_promotion: OneOf("none", "64", "128", "256") = "none"
    cache_hint_a: OneOf("none", "evict_first", "evict_last") = "none"
    cache_hint_b: OneOf("none", "evict_first", "evict_last") = "none"
    major_a: OneOf("k", "mn") = "k"
    major_b: OneOf("k", "mn") = "k"


@section
class Config:
    """One GEMM pipeline: D[M,N] = A[M,K] @ B[N,K]^T, fp32 accumulate.

    kernel: ``gemm``, or ``dual_gemm``: D = silu(A @ B1^T) * (A @ B2^T) (the SwiGLU of two accumulators, fused in
    the epilogue).

    operands: ``bf16`` (bf16 A/B, bf16 D) or ``nvfp4`` (packed e2m1 A/B with one e4m3 scale per 16 K
    elements in the 128x4 atom layout, block-scaled ``tcgen05.mma .kind::mxf4nvf4``, fp16 D; sm_100a
    ``dual_gemm`` only: the seed-003 kernel) or ``fp8`` (e4m3 A/B with fp32 scales per 1x128 block of A and
    per 128x128 block of B, ``wgmma ... .f32.e4m3.e4m3`` per 128-K block promoted into an fp32 accumulator with
    the scales, bf16 D; sm_90a ``gemm`` only: DeepSeek-V3's recipe, docs/fp8.md) or ``mxfp8`` (e4m3 A/B with one
    ue8m0 scale per row per 32 K elements in the 128x4 atom layout, block-scaled ``tcgen05.mma .kind::mxf8f6f4``,
    fp32 accumulate in TMEM, bf16 D; sm_100a ``gemm`` only: the recipe's Blackwell form, docs/fp8.md).

    Every construction is validated (schema, then :func:`validate`); raises ConfigError.
    ``name`` is a file stem (``generated/<name>.ptx``): ASCII letters, digits, ``_`` and ``-``,
    not starting with ``-``, at most 64 characters.
    """

    name: Name
    arch: OneOf(*ARCHS) = "sm_100a"
    kernel: OneOf("gemm", "dual_gemm") = "gemm"
    operands: OneOf("bf16", "nvfp4", "fp8", "mxfp8") = "bf16"
    tile: Tile = field(default_factory=Tile)
    pipeline: Pipeline = field(default_factory=Pipeline)
    cluster: Cluster = field(default_factory=Cluster)
    accumulator: Accumulator = field(default_factory=Accumulator)
    mma: Mma = field(default_factory=Mma)
    smem: Smem = field(default_factory=Smem)
    epilogue: Epilogue = field(default_factory=Epilogue)
    schedule: Schedule = field(default_factory=Schedule)
    tma: Tma = field(default_factory=Tma)

    def __post_init__(self) -> None:
        validate(self)

    def replace(self, **sections) -> "Config":
        """A copy with whole sections or dotted fields replaced, validated: ``cfg.replace(**{"tile.block_n": 256})``."""
        raw = to_dict(self)
        for key, value in sections.items():
            node = raw
            *head, last = key.split(".")
            for part in head:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"{key}: unknown key (sections: {sorted(k for k, v in raw.items() if isinstance(v, dict))})")
                node = node[part]
            node[last] = to_dict(value) if dataclasses.is_dataclass(value) else value
        return from_dict(raw)


def unchecked(cfg: Config, **changes) -> Config:
    """A copy of ``cfg`` with dotted fields changed and NO validation, for planted-bug tests only.

    The builder, verifier and simulator must still catch what such a config breaks; never use it on user input.
    """
    raw = to_dict(cfg)
    for key, value in changes.items():
        node = raw
        *head, last = key.split(".")
        for part in head:
            node = node[part]
        node[last] = value

    def make(cls, values):
        obj = object.__new__(cls)
        for f in dataclasses.fields(cls):
            v = values[f.name]
            sub = _section_types().get(f.name) if cls is Config else None
            object.__setattr__(obj, f.name, make(sub, v) if sub else v)
        return obj

    return make(Config, raw)


# --------------------------------------------------------------------------- error rendering


@functools.cache
def _section_types() -> dict[str, type]:
    """Config field name -> section class (``tile`` -> Tile)."""
    hints = typing.get_type_hints(Config, include_extras=True)
    return {k: v for k, v in hints.items() if dataclasses.is_dataclass(v)}


def _prefix_of(cls: type) -> tuple[str, ...]:
    return next(((k,) for k, v in _section_types().items() if v is cls), ())


def _owner(loc: tuple) -> type | None:
    """The section class holding the last key of ``loc`` (Config for top-level keys)."""
    cls = Config
    for part in loc[:-1]:
        cls = _section_types().get(part) if cls is Config else None
        if cls is None:
            return None
    return cls


def _annotation(loc: tuple):
    cls = _owner(loc)
    if cls is None or not loc:
        return None
    return typing.get_type_hints(cls, include_extras=True).get(loc[-1])


def _safe_repr(value, limit: int = 60) -> str:
    """``repr`` that survives 5000-digit ints and huge nested inputs, cut to ``limit`` characters."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<{'-' if value < 0 else ''}{int(value.bit_length() * 0.30103) + 1}-digit int>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rule_text(err: dict, loc: tuple) -> str:
    """The rule a pydantic error at field path ``loc`` stands for, in ptxgen's words."""
    kind = err["type"]
    ann = _annotation(loc)
    meta = typing.get_args(ann)[1:] if typing.get_origin(ann) is Annotated else ()
    base = typing.get_args(ann)[0] if meta else ann
    got = type(err["input"]).__name__
    if kind in ("int_type", "bool_type", "string_type"):
        return f"expected {kind.split('_')[0].replace('string', 'str')}, got {got}"
    if kind == "literal_error" and typing.get_origin(base) is Literal:
        return f"must be one of {list(typing.get_args(base))}"
    if kind in ("greater_than_equal", "less_than_equal"):
        lo = next((m.ge for m in meta if isinstance(m, annotated_types.Ge)), None)
        hi = next((m.le for m in meta if isinstance(m, annotated_types.Le)), None)
        return f"must be in [{lo}, {hi}]" if lo is not None and hi is not None else err["msg"]
    if kind == "string_pattern_mismatch" and loc == ("name",):
        return NAME_RULE
    if kind in ("dataclass_type", "dataclass_exact_type"):
        cls = _section_types().get(loc[-1]) if loc else Config
        keys = [f.name for f in dataclasses.fields(cls)] if cls else []
        return f"expected a mapping of {keys}"
    return err["msg"]


def _close(a: str, b: str) -> bool:
    """True when ``a`` is one edit (or a swap) away from ``b``: catches misspelt keys."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def _config_error(exc: ValidationError, cls: type | None = None) -> ConfigError:
    """Render pydantic's first error as ``ConfigError: <field path>=<value>: <rule>``."""
    err = exc.errors(include_url=False)[0]
    loc = (_prefix_of(cls) if cls not in (None, Config) else ()) + tuple(err["loc"])
    path = ".".join(str(p) for p in loc) or "config"
    kind = err["type"]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        owner = _owner(loc)
        known = [f.name for f in dataclasses.fields(owner)] if owner else []
        near = [k for k in known if _close(str(loc[-1]), k)]
        hint = f" (did you mean {near[0]!r}?)" if near else f"; known keys: {sorted(known)}"
        return ConfigError(f"{path}: unknown key{hint}")
    if kind == "invalid_key":
        parent = ".".join(str(p) for p in loc[:-1]) or "config"
        return ConfigError(f"{parent}: key {_safe_repr(loc[-1])} is not a string")
    if kind == "missing":
        return ConfigError(f"{path}: required key is missing")
    return ConfigError(f"{path}={_safe_repr(err['input'])}: {_rule_text(err, loc)}")


# --------------------------------------------------------------------------- loading


def from_dict(raw: dict) -> Config:
    """Build and validate a :class:`Config` from a parsed YAML mapping.  Raises ConfigError."""
    if not isinstance(raw, dict) or "name" not in raw:
        raise ConfigError("config: expected a mapping with at least a 'name' key")
    try:
        return Config.__pydantic_validator__.validate_python(raw)
    except ValidationError as exc:
        raise _config_error(exc) from None
    except RecursionError:
        raise ConfigError("config: nested too deeply") from None


def to_dict(cfg: Config) -> dict:
    """Plain nested dict of a config (inverse of :func:`from_dict`)."""
    return dataclasses.asdict(cfg)


def load_config(name_or_path: str | os.PathLike | Config) -> Config:
    """Load, parse and validate a config; a :class:`Config` passes through.  Raises ConfigError.

    Errors name the file: unreadable, not UTF-8, malformed or too deeply nested YAML, ints
    beyond Python's digit limit, then any schema or hardware rule.
    """
    if isinstance(name_or_path, Config):
        return name_or_path
    path = resolve_config_path(name_or_path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); a config is a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed YAML: nested too deeply") from None
    except ValueError as exc:  # e.g. an int literal over sys.get_int_max_str_digits() digits
        raise ConfigError(f"{path}: unreadable YAML value: {str(exc).splitlines()[0]}") from None
    if isinstance(raw, dict) and "name" not in raw:
        raw = {"name": path.stem, **raw}
    try:
        return from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path.name}: {exc}") from None


# --------------------------------------------------------------------------- hardware rules


def _rule(ok: bool, path: str, value, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{path}={value!r}: {rule}")


def accumulators(cfg: Config) -> int:
    """Accumulators per tile: 1 for a GEMM, 2 for a dual GEMM (A @ B1^T and A @ B2^T)."""
    return 2 if cfg.kernel == "dual_gemm" else 1


def validate(cfg: Config) -> None:
    """Check the hardware and cross-field rules.  Raises ConfigError.

    Types, ranges and choices are already checked by the schema (every Config construction).  The budgets
    (shared memory, TMEM columns, registers) are the plan's: :func:`ptxgen.plan.make_plan` raises them.
    """
    t, p, e = cfg.tile, cfg.pipeline, cfg.epilogue
    if cfg.operands == "nvfp4":
        _validate_nvfp4(cfg)
    elif cfg.operands == "fp8":
        _validate_fp8(cfg)
    elif cfg.operands == "mxfp8":
        _validate_mxfp8(cfg)
    else:
        _rule(t.block_k == BF16_BLOCK_K, "tile.block_k", t.block_k,
              f"must be {BF16_BLOCK_K} (128 B of bf16: one 128B-swizzle atom)")
    if cfg.operands != "fp8":
        _rule(cfg.mma.promotion_unroll == 1, "mma.promotion_unroll", cfg.mma.promotion_unroll,
              "only operands=fp8 promotes block partials; must be 1")
    if cfg.mma.lanes == "all":
        _rule(p.roles == "specialized", "mma.lanes", "all", "needs pipeline.roles=specialized (a whole MMA warp)")
        _rule(cfg.smem.layout == "separated", "mma.lanes", "all",
              "shfl-shared descriptors need smem.layout=separated (constant stride between stages)")

    sbn = e.store_block_n or t.block_n
    _rule(sbn % 8 == 0 and t.block_n % sbn == 0 and sbn <= 256, "epilogue.store_block_n", e.store_block_n,
          f"must divide tile.block_n={t.block_n}, be a multiple of 8 and <= 256 (TMA box)")
    if e.swizzle == "128":
        _rule(e.store == "tma", "epilogue.swizzle", e.swizzle, "128B CD staging needs epilogue.store=tma")
        _rule(sbn * 2 == 128, "epilogue.store_block_n", sbn,
              "128B-swizzled CD staging rows are one swizzle atom row, 128 B = 64 bf16 (chunk i of row r at "
              "i ^ (r % 8) needs 8 16-byte chunks; PTX ISA 'Tensor copy: swizzle modes'); must be 64")
    if e.store == "direct":
        _rule(e.stages == 1 and e.store_block_n in (0, t.block_n), "epilogue.store", "direct",
              "epilogue.stages and epilogue.store_block_n apply to TMA stores only")

    if e.expr:
        _validate_expr(cfg)
    if cfg.schedule.grouped != "none":
        _validate_grouped(cfg)
    _rule(cfg.schedule.expert_window == 0 or cfg.schedule.grouped == "contiguous", "schedule.expert_window",
          cfg.schedule.expert_window, "needs schedule.grouped=contiguous (runs of one expert come from m_indices)")
    lookahead_ok = cfg.schedule.grouped == "contiguous" and cfg.schedule.expert_window == 0
    _rule(not cfg.schedule.table_lookahead or lookahead_ok,
          "schedule.table_lookahead", True, "needs schedule.grouped=contiguous and expert_window=0 (the next unit's "
          "m_indices words are those of its first m-block or pair)")
    if cfg.arch == "sm_100a":
        _validate_sm100(cfg)
    else:
        _validate_sm90(cfg)
    if cfg.schedule.split_k > 1:
        _validate_split_k(cfg)
    _rule(cfg.schedule.split_k_tiles == "all" or cfg.schedule.split_k > 1, "schedule.split_k_tiles",
          cfg.schedule.split_k_tiles, "needs schedule.split_k >= 2 (the last wave's tiles are split split_k ways)")
    if cfg.schedule.swap_ab:
        _validate_swap_ab(cfg)
    if "mn" in (cfg.tma.major_a, cfg.tma.major_b):
        _validate_mn_major(cfg)


def _validate_mn_major(cfg: Config) -> None:
    """MN-major operands (``tma.major_a`` / ``tma.major_b``): the sm_90a bf16 GEMM and dual GEMM (``major_b`` is
    both B1 and B2) and the grouped GEMM's B (the ``[G, K, N]`` weights of ``torch._grouped_mm``), whose wgmma
    takes a transpose immediate for 16-bit inputs (PTX ISA "wgmma.mma_async"; 8-bit inputs are K-major only, and
    tcgen05's descriptors are not built here).  Each CTA's share of an ``mn`` operand is whole boxes of 64 M or N
    elements."""
    for name, major in (("tma.major_a", cfg.tma.major_a), ("tma.major_b", cfg.tma.major_b)):
        if major != "mn":
            continue
        _rule(cfg.arch == "sm_90a", name, major, "MN-major operands are sm_90a only (wgmma's transpose immediate)")
        _rule(cfg.operands == "bf16" and cfg.kernel in ("gemm", "dual_gemm"), name, major,
              "needs operands=bf16 and kernel=gemm or dual_gemm (wgmma transposes 16-bit inputs only)")
        if name == "tma.major_a":  # a grouped kernel's A is the stacked activations [rows, K]: K-major
            _rule(cfg.schedule.grouped == "none", name, major, "needs schedule.grouped=none (a grouped B may be mn)")
    t, c = cfg.tile, cfg.cluster
    pair = cfg.tma.multicast and c.size == 2
    if cfg.tma.major_b == "mn":
        share = t.block_n // 2 if pair and c.along == "m" else t.block_n
        _rule(share % MN_MAJOR_CHUNK == 0, "tma.major_b", "mn",
              f"each CTA loads B as boxes of {MN_MAJOR_CHUNK} N elements: its {share} rows of the tile "
              f"(tile.block_n={t.block_n}{', a multicast half' if share != t.block_n else ''}) must be a multiple of {MN_MAJOR_CHUNK}")
    if cfg.tma.major_a == "mn":
        share = t.block_m // 2 if pair and c.along == "n" else t.block_m
        _rule(share % MN_MAJOR_CHUNK == 0, "tma.major_a", "mn",
              f"each CTA loads A as boxes of {MN_MAJOR_CHUNK} M elements: its {share} rows of the tile "
              f"(tile.block_m={t.block_m}{', a multicast half' if share != t.block_m else ''}) must be a multiple of {MN_MAJOR_CHUNK}")


def _validate_swap_ab(cfg: Config) -> None:
    """Swap-AB (``schedule.swap_ab``): the sm_90a bf16 GEMM whose epilogue stores the accumulator transposed.

    Direct stores only: a TMA store writes a box of the kernel's D rows, which are D's columns after the swap
    (a transposed box would need its own staging).  A fused expression is elementwise on a 16-bit D: its
    operands trade axes (``bias[col]`` of the caller's D is a row vector of the kernel's accumulator, a residual
    is read transposed: :data:`ptxgen.plan.TRANSPOSED_AXES`); an e4m3 D and outputs beside D (amax, block scale,
    store) are reduced and stored by the caller's rows, which the transposed fragments do not hold.
    """
    s = "schedule.swap_ab"
    _rule(cfg.arch == "sm_90a", s, True, "swap-AB is sm_90a only (the wgmma fragment epilogue stores it); needs arch=sm_90a")
    _rule(cfg.kernel == "gemm" and cfg.operands == "bf16", s, True, "needs kernel=gemm and operands=bf16")
    _rule(cfg.schedule.grouped == "none", s, True, "needs schedule.grouped=none")
    _rule(cfg.cluster.size == 1, s, True, "needs cluster.size=1")
    _rule(cfg.epilogue.store == "direct", s, True,
          "needs epilogue.store=direct (the transposed store writes D[j, i] per element; a TMA box is untransposed)")
    _rule(not cfg.epilogue.overlap, s, True, "needs epilogue.overlap=false")
    if cfg.epilogue.expr:
        from . import epi

        node = epi.for_kernel(cfg.epilogue.expr, cfg.kernel)
        _rule(not epi.outputs(node) and epi.out_dtype(node) != "e4m3", "epilogue.expr", cfg.epilogue.expr,
              "schedule.swap_ab stores D transposed per element: the expression must be elementwise on a 16-bit D "
              "(no e4m3 D, no amax/store outputs beside it)")


def _validate_grouped(cfg: Config) -> None:
    """Grouped GEMM (``schedule.grouped``): the sm_90a persistent cooperative kernel.

    ``epilogue.store``: ``direct`` (every row's ``st.global`` guarded) or ``tma``: an m-block wholly inside its
    group's valid rows is staged and TMA-stored, any other m-block (a group's last, holding rows that must stay
    untouched: rows past ``masked_m[g]``, padding rows of ``m_indices``) stored directly, guarded per row
    (:func:`ptxgen.builders.grouped.whole_block`).

    ``cluster.size=2`` (bf16 or FP8, ``tma.multicast``): the pair takes two m-blocks of one n-block; contiguous, it
    multicasts B when both are of one expert; masked, both are m-blocks of one group and B is always multicast
    (:class:`ptxgen.builders.grouped.GroupedTileScheduler`); FP8 scales are each CTA's own (scale_a of its
    m-block, scale_b of its m-block's group), never multicast.
    """
    g = cfg.schedule.grouped
    _rule(cfg.arch == "sm_90a", "schedule.grouped", g, "the grouped scheduler is sm_90a only; needs arch=sm_90a")
    _rule(cfg.kernel == "gemm", "schedule.grouped", g, "needs kernel=gemm")
    _rule(cfg.schedule.persistent, "schedule.grouped", g, "needs schedule.persistent=true (CTAs walk the groups' tiles)")
    _rule(cfg.mma.consumers == "cooperative", "schedule.grouped", g, "needs mma.consumers=cooperative")
    if cfg.cluster.size == 2:  # CTA pairs multicasting B (ptxgen.builders.grouped: pair units)
        _rule(cfg.operands in ("bf16", "fp8") and cfg.tma.multicast, "cluster.size", 2,
              "schedule.grouped: a CTA pair needs operands=bf16 or fp8 and tma.multicast=true "
              "(the pair's two m-blocks share B when they are of one group)")
    _rule(cfg.schedule.split_k == 1, "schedule.grouped", g, "needs schedule.split_k=1")
    _rule(not cfg.epilogue.overlap, "schedule.grouped", g, "needs epilogue.overlap=false")
    _rule(not cfg.epilogue.expr, "schedule.grouped", g, "needs an empty epilogue.expr (D = the accumulator)")
    if g == "contiguous":
        _rule(GROUPED_SEGMENT_ROWS % cfg.tile.block_m == 0, "tile.block_m", cfg.tile.block_m,
              f"schedule.grouped=contiguous needs block_m dividing {GROUPED_SEGMENT_ROWS} (each group's segment is "
              f"padded to {GROUPED_SEGMENT_ROWS} rows; an m-block must not span two groups)")


def _validate_expr(cfg: Config) -> None:
    """``epilogue.expr``: it parses (:func:`ptxgen.epi.parse`), reads the kernel's accumulators, and on sm_100a
    reads no operand and keeps D's type (the TMEM epilogue loads no operand yet)."""
    from . import epi

    node = epi.for_kernel(cfg.epilogue.expr, cfg.kernel)
    if cfg.arch == "sm_100a":
        ops = epi.operands(node)
        _rule(not ops and not isinstance(node, epi.Cast), "epilogue.expr", cfg.epilogue.expr,
              "sm_100a: the TMEM epilogue takes accumulator-only expressions (no bias/scale/residual, no cast); "
              "operands are sm_90a only")


def _validate_nvfp4(cfg: Config) -> None:
    """NVFP4 block-scaled dual GEMM (seed 003): the rules of the scale-factor atoms and the block-scaled MMA.

    PTX ISA "tcgen05.mma" (``.kind::mxf4nvf4`` is sm_100a; K = 64 per MMA), "tcgen05.cp" (one
    32x128b.warpx4 copy moves one 128-row x 4-scale atom); cuBLAS "1D Block Scaling Factors Layout".
    """
    t = cfg.tile
    _rule(cfg.arch == "sm_100a", "operands", "nvfp4", "block-scaled tcgen05.mma .kind::mxf4nvf4 needs arch=sm_100a")
    _rule(cfg.kernel == "dual_gemm", "operands", "nvfp4", "the NVFP4 kernel is the SwiGLU dual GEMM; needs kernel=dual_gemm")
    _rule(t.block_k == 256, "tile.block_k", t.block_k,
          "operands=nvfp4: must be 256 (one 128-byte swizzle row of packed e2m1 = four K=64 block-scaled MMAs)")
    _scale_atom_rules(cfg, "the B scales of a tile are one 128-row atom row; two N=256 accumulators would leave no "
                           "TMEM columns for the scale factors")


def _scale_atom_rules(cfg: Config, n_reason: str) -> None:
    """The tile and throttle rules every block-scaled operand shares (one 128-row scale atom row per operand)."""
    t, what = cfg.tile, cfg.operands
    _rule(t.block_m == 128, "tile.block_m", t.block_m,
          f"operands={what}: must be 128 per CTA (one M-wave; its scales are one 128-row scale-factor atom row)")
    _rule(t.block_n == 128, "tile.block_n", t.block_n, f"operands={what}: must be 128 ({n_reason})")
    _rule(cfg.mma.tc_util_percent == 100, "mma.tc_util_percent", cfg.mma.tc_util_percent,
          f"operands={what}: the throttle models bf16 MMAs; must be 100")


def _validate_mxfp8(cfg: Config) -> None:
    """MXFP8 block-scaled GEMM (sm_100a): the rules of the ue8m0 scale atoms and ``.kind::mxf8f6f4``.

    PTX ISA "tcgen05.mma" (``.kind::mxf8f6f4.block_scale.scale_vec::1X``: e4m3 A/B, K = 32 per MMA, one ue8m0
    scale per row per 32 K), "tcgen05.cp" (one 32x128b.warpx4 copy moves one 128-row x 4-scale atom = 128 K);
    cuBLAS "1D Block Scaling Factors Layout".
    """
    t = cfg.tile
    _rule(cfg.arch == "sm_100a", "operands", "mxfp8", "block-scaled tcgen05.mma .kind::mxf8f6f4 needs arch=sm_100a")
    _rule(cfg.kernel == "gemm", "operands", "mxfp8", "the MXFP8 kernel is a plain GEMM; needs kernel=gemm")
    _rule(t.block_k == 128, "tile.block_k", t.block_k,
          "operands=mxfp8: must be 128 (one 128-byte swizzle row of e4m3 = four K=32 MMAs = one 128x4 scale atom)")
    _scale_atom_rules(cfg, "the B scales of a tile are one 128-row atom row, one TMA box of lines")


#: fp32 registers per consumer thread an FP8 config may spend on its main accumulator plus the block partial
#: (the rest of setmaxnreg's 240 holds descriptors, scales, stage/phase and tile state)
FP8_FRAGMENT_REGS = 192


def _validate_fp8(cfg: Config) -> None:
    """FP8 block-scaled GEMM (DeepSeek-V3's recipe, docs/fp8.md): e4m3 A/B, fp32 scales per 128-K block.

    PTX ISA "wgmma.mma_async": ``.e4m3`` inputs are sm_90a, K = 32 per instruction, A and B from shared-memory
    descriptors, K-major only for 8-bit types.  One k-block is one scale block (block_k = 128 = one 128-byte
    swizzle row of e4m3), whose partial the consumer promotes into the main accumulator.
    """
    t = cfg.tile
    _rule(cfg.arch == "sm_90a", "operands", "fp8", "wgmma .e4m3 with per-block promotion is the sm_90a kernel; needs arch=sm_90a")
    _rule(cfg.kernel == "gemm", "operands", "fp8", "the FP8 kernel is a plain GEMM; needs kernel=gemm")
    _rule(t.block_k == FP8_SCALE_BLOCK, "tile.block_k", t.block_k,
          "operands=fp8: must be 128 (one 128-byte swizzle row of e4m3 = one 128-K scale block)")
    _rule(t.block_n % 128 == 0 or 128 % t.block_n == 0, "tile.block_n", t.block_n,
          "operands=fp8: a multiple of 128 or a divisor of 128 (each promoted chunk of columns has one scale_b block)")
    _rule(cfg.cluster.size == 1 or cfg.tma.multicast, "cluster.size", cfg.cluster.size,
          "operands=fp8: a CTA pair must multicast B (tma.multicast=true); the scales are each CTA's own loads")
    _rule(cfg.mma.consumers == "cooperative", "mma.consumers", cfg.mma.consumers, "operands=fp8: must be cooperative")
    _rule(cfg.schedule.split_k == 1, "schedule.split_k", cfg.schedule.split_k, "operands=fp8: must be 1")
    _rule(not cfg.epilogue.overlap, "epilogue.overlap", True, "operands=fp8: must be false")
    waves = t.block_m // cfg.mma.warpgroups // 64
    partials = 1 if cfg.mma.promotion_unroll == 1 else 2
    regs = waves * t.block_n // 2 + partials * min(t.block_n, 128) // 2
    _rule(regs <= FP8_FRAGMENT_REGS, "tile.block_n", t.block_n,
          f"operands=fp8: main accumulator {waves * t.block_n // 2} + {partials} block partial(s) of "
          f"{min(t.block_n, 128) // 2} fp32 registers per thread = {regs} > {FP8_FRAGMENT_REGS} (tile "
          f"{t.block_m}x{t.block_n}, {cfg.mma.warpgroups} consumer warpgroups) would spill")
    _rule(cfg.mma.promotion_unroll == 1 or (waves == 1 and t.block_n <= 128), "mma.promotion_unroll",
          cfg.mma.promotion_unroll, "operands=fp8: > 1 needs one 64-row wave and one column chunk per warpgroup "
          "(block_m = 64 x warpgroups, block_n <= 128): each k-block is one wgmma group into one partial")


def _validate_split_k(cfg: Config) -> None:
    """Split-K (``schedule.split_k > 1``): the fixup exists for the sm_90a register accumulators only, and the
    work units (tiles x split_k) are walked by the persistent tile loop (see :class:`ptxgen.plan.SplitKPlan`; the
    protocol itself waits on nothing, so any grid finishes).  K itself is a runtime value: a split left without
    k-blocks (``ceil(K / block_k) < split_k``) is handled in the kernel (it neither publishes nor arrives)."""
    s = cfg.schedule.split_k
    _rule(cfg.arch == "sm_90a", "schedule.split_k", s,
          "split-K is sm_90a only for now (the sm_100a TMEM epilogue has no partial-tile fixup); must be 1")
    _rule(cfg.mma.consumers == "cooperative", "schedule.split_k", s,
          "split-K's fixup counts partials per (tile, consumer warpgroup); with mma.consumers=pingpong a tile's splits "
          "run in different warpgroups: must be 1")
    _rule(cfg.schedule.persistent, "schedule.split_k", s,
          "needs schedule.persistent=true: the persistent tile loop walks the work units (tiles x split_k)")


def _validate_sm100(cfg: Config) -> None:
    t, c = cfg.tile, cfg.cluster
    _rule(t.block_m in (128, 256), "tile.block_m", t.block_m,
          "sm_100a: must be 128 or 256 (one M-wave of 128 TMEM lanes per 128 rows)")
    lo = 16 if c.size == 1 else 32
    _rule(t.block_n % lo == 0 and lo <= t.block_n <= 256, "tile.block_n", t.block_n,
          f"UMMA N must be a multiple of {lo} in [{lo}, 256]"
          + (" (cta_group::2: each CTA loads block_n/2 rows of B, a multiple of 16)" if c.size == 2 else ""))
    _rule(cfg.mma.warpgroups == 1, "mma.warpgroups", cfg.mma.warpgroups, "sm_100a: one MMA-issuing thread; must be 1")
    _rule(cfg.mma.consumers == "cooperative", "mma.consumers", cfg.mma.consumers,
          "sm_100a has no consumer warpgroups (one MMA-issuing thread); pingpong is an sm_90a schedule")
    _rule(not cfg.tma.multicast, "tma.multicast", True, "sm_100a kernels here use 2-SM loads (tma.two_sm), not multicast")
    _rule(c.along == "m", "cluster.along", c.along, "sm_100a: a cta_group::2 pair splits M; must be m")
    _rule(c.size <= 2, "cluster.size", c.size, "sm_100a: 1 or 2 (a cta_group::2 pair)")
    if c.size == 1:
        _rule(not c.dual_tile, "cluster.dual_tile", True, "needs cluster.size=2 (a CTA pair)")
        _rule(not cfg.tma.two_sm, "tma.two_sm", True, "2-SM TMA loads need cluster.size=2")
    accs = accumulators(cfg)
    cols = t.block_n * (t.block_m // 128) * cfg.accumulator.stages * accs
    _rule(cols <= 512 and cols >= 32 and cols & (cols - 1) == 0, "accumulator.stages", cfg.accumulator.stages,
          f"TMEM columns block_n x m-waves x stages x accumulators = {t.block_n} x {t.block_m // 128} x "
          f"{cfg.accumulator.stages} x {accs} = {cols} must be a power of two in [32, 512]")
    if cfg.epilogue.warps == 0:
        _rule(cfg.pipeline.roles == "lockstep" or cfg.accumulator.stages == 1, "accumulator.stages",
              cfg.accumulator.stages, "more than one accumulator stage needs a dedicated epilogue (epilogue.warps=4)")
    if cfg.epilogue.early_release:
        _rule(cfg.epilogue.store == "tma", "epilogue.early_release", True, "applies to TMA-store epilogues")
    _rule(not cfg.epilogue.overlap, "epilogue.overlap", True,
          "sm_90a register accumulators only: sm_100a overlaps through accumulator.stages and a dedicated epilogue")
    _rule(not cfg.epilogue.stmatrix, "epilogue.stmatrix", True,
          "sm_90a register fragments only: the sm_100a epilogue reads TMEM (tcgen05.ld) per thread row")


def _validate_pair_along_n(cfg: Config) -> None:
    """An sm_90a CTA pair along N (``cluster.along: n``): two adjacent n-blocks of one m-block, A multicast (each CTA
    loads ``block_m / 2`` rows of A's k-block to both CTAs' stage, PTX ISA "cp.async.bulk.tensor",
    ``.multicast::cluster``).  The plain bf16 GEMM only (with ``epilogue.expr``): split-K, the grouped walk, the dual
    GEMM, FP8 and swap-AB keep their pairs along M."""
    s = "cluster.along"
    _rule(cfg.cluster.size == 2, s, "n", "needs cluster.size=2 (a CTA pair)")
    _rule(cfg.tma.multicast, s, "n", "needs tma.multicast=true (the pair shares A through multicast halves)")
    _rule(cfg.kernel == "gemm" and cfg.operands == "bf16", s, "n", "needs kernel=gemm and operands=bf16")
    _rule(cfg.schedule.split_k == 1, s, "n", "needs schedule.split_k=1")
    _rule(cfg.schedule.grouped == "none", s, "n", "needs schedule.grouped=none")
    _rule(cfg.mma.consumers == "cooperative", s, "n", "needs mma.consumers=cooperative")


def _validate_square(cfg: Config) -> None:
    """An sm_90a 2x2 cluster (``cluster: {size: 4, along: mn}``): two m-blocks x two n-blocks; each CTA loads half of
    its A k-block and multicasts it to itself and the CTA of the other n-block, and half of its B k-block to itself
    and the CTA of the other m-block (PTX ISA "cp.async.bulk.tensor", ``.multicast::cluster``), so a CTA requests half
    the L2 bytes of a single tile (the dual GEMM: half of B1 and half of B2 alike).  The bf16 GEMM and dual GEMM with
    K-major operands only: split-K, the grouped walk, FP8, swap-AB and MN-major loads keep their pairs."""
    s = "cluster.along"
    _rule(cfg.tma.multicast, s, "mn", "needs tma.multicast=true (the square shares A and B through multicast halves)")
    _rule(cfg.kernel in ("gemm", "dual_gemm") and cfg.operands == "bf16", s, "mn",
          "needs kernel=gemm or dual_gemm and operands=bf16")
    _rule(cfg.schedule.split_k == 1, s, "mn", "needs schedule.split_k=1")
    _rule(cfg.schedule.grouped == "none", s, "mn", "needs schedule.grouped=none")
    _rule(not cfg.schedule.swap_ab, s, "mn", "needs schedule.swap_ab=false")
    _rule(cfg.mma.consumers == "cooperative", s, "mn", "needs mma.consumers=cooperative")
    _rule(cfg.tma.major_a == "k" and cfg.tma.major_b == "k", s, "mn", "needs K-major operands (tma.major_a/b=k)")


def _validate_sm90(cfg: Config) -> None:
    t, c = cfg.tile, cfg.cluster
    wg = cfg.mma.warpgroups
    pingpong = cfg.mma.consumers == "pingpong"
    if pingpong:
        _rule(wg == 2, "mma.consumers", "pingpong", f"needs mma.warpgroups=2 (got {wg}): two warpgroups take turns on tiles")
        _rule(cfg.schedule.persistent, "mma.consumers", "pingpong",
              "needs schedule.persistent=true: a CTA must own several tiles for its two warpgroups to alternate")
    row_split = 1 if pingpong else wg  # pingpong: every warpgroup computes the whole tile
    _rule(t.block_m % (64 * row_split) == 0 and 64 <= t.block_m <= 256, "tile.block_m", t.block_m,
          f"sm_90a: a multiple of 64 x mma.warpgroups={wg} in [64, 256] (wgmma m64 per wave)" if not pingpong else
          "sm_90a pingpong: a multiple of 64 in [64, 256] (wgmma m64 waves of one warpgroup)")
    _rule(t.block_n % 16 == 0 and 16 <= t.block_n <= 256, "tile.block_n", t.block_n,
          "wgmma N: a multiple of 16 in [16, 256] here")
    _rule(cfg.accumulator.stages == 1, "accumulator.stages", cfg.accumulator.stages, "sm_90a: accumulators live in registers; must be 1")
    _rule(cfg.epilogue.warps == 0, "epilogue.warps", cfg.epilogue.warps, "sm_90a: the consumer warpgroups store D; must be 0")
    _rule(cfg.pipeline.roles == "specialized", "pipeline.roles", cfg.pipeline.roles, "sm_90a: must be specialized")
    _rule(cfg.pipeline.stages >= 2, "pipeline.stages", cfg.pipeline.stages,
          "sm_90a: must be >= 2 (consumers release a stage one k-block late, after wgmma.wait_group 1; "
          "with one stage that release waits on its own refill: a deadlock the simulator reports)")
    _rule(not cfg.tma.two_sm, "tma.two_sm", True, "2-SM TMA loads are sm_100a only")
    _rule(cfg.mma.lanes == "one" and cfg.mma.tc_util_percent == 100,
          "mma", dataclasses.asdict(cfg.mma), "sm_90a: lanes=one and tc_util_percent=100")
    _rule(c.dual_tile == (c.size >= 2), "cluster.dual_tile", c.dual_tile,
          "sm_90a: each CTA of a cluster computes its own tile (dual_tile must equal size >= 2)")
    _rule(not cfg.tma.multicast or c.size >= 2, "tma.multicast", True, "needs cluster.size=2 or 4")
    _rule((c.size == 4) == (c.along == "mn"), "cluster.along", c.along,
          "sm_90a: a cluster of 4 is a 2x2 square of tiles (along: mn); a pair lies along m or n")
    if c.along == "n":
        _validate_pair_along_n(cfg)
    if c.along == "mn":
        _validate_square(cfg)
    _rule(cfg.epilogue.release == "elected" and not cfg.epilogue.early_release, "epilogue", "release/early_release",
          "sm_90a: accumulators are registers; no tmem_empty to release")
    if cfg.epilogue.stmatrix:
        sbn = cfg.epilogue.store_block_n or t.block_n
        _rule(cfg.epilogue.store == "tma", "epilogue.stmatrix", True, "stages D in shared memory: needs epilogue.store=tma")
        _rule(sbn % 16 == 0, "epilogue.stmatrix", True,
              f"one stmatrix.x4 covers 16 columns of a warp's 16 rows; epilogue.store_block_n={sbn} must be a multiple of 16")
    if cfg.epilogue.overlap:
        _rule(not pingpong, "epilogue.overlap", True,
              "pingpong already overlaps one warpgroup's epilogue with the other's mainloop; needs mma.consumers=cooperative")
        _rule(cfg.schedule.split_k == 1, "epilogue.overlap", True,
              "split-K's fixup reads the accumulator after the mainloop; needs schedule.split_k=1")
        _rule(cfg.schedule.persistent, "epilogue.overlap", True,
              "the stores overlap the CTA's next tile; needs schedule.persistent=true")

