"""Pipeline configs: YAML -> frozen dataclasses, validated.

A config holds only what a user tunes.  Every derived number (offsets, bytes,
counts) lives in :mod:`ptxgen.plan`.  Validation raises :class:`ConfigError`
naming the field path, the value and the rule, e.g.
``tile.block_n=200: UMMA N must be a multiple of 16 in [16, 256]``.

Budget rules that need the real shared-memory layout (stages x bytes + CD +
barriers <= 232448 B) are checked by building the plan, so the number the
error quotes is the number the kernel would use.

Sources of the hardware rules: PTX ISA "tcgen05 Matrix shapes" (UMMA M/N per
cta_group), "Tensor Memory" (512 columns, power-of-two allocation >= 32),
"wgmma shapes" (m64nNk16, N % 8 == 0, N <= 256), "Tensor copy: swizzle"
(128B swizzle inner box <= 128 bytes).  See ../shared/PTX_FACTS.md.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

import yaml

from .errors import ConfigError

ARCHS = ("sm_100a", "sm_90a")
SMEM_LIMIT_BYTES = 232448  # max dynamic shared memory per block, sm_90 and sm_100 (227 KB)


@dataclass(frozen=True)
class Tile:
    """Output tile of one CTA, in elements.

    block_m: rows of D per CTA (sm_100a: a multiple of 128, one M-wave per 128 rows;
        sm_90a: a multiple of 64 per consumer warpgroup).
    block_n: columns of D per CTA.
    block_k: K elements per pipeline stage; 64 (= 128 B of bf16, one 128B-swizzle atom).
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64


@dataclass(frozen=True)
class Pipeline:
    """Shared-memory operand ring.

    stages: number of A/B stages, each with a ``full`` and an ``empty`` mbarrier.
    roles: ``lockstep`` — one warp issues both the TMA loads and the MMAs of a
        k-block in program order (the async MMA still overlaps the next load);
        ``specialized`` — a producer warp and an MMA warp loop independently.
    """

    stages: int = 1
    roles: str = "specialized"


@dataclass(frozen=True)
class Cluster:
    """CTA cluster.

    size: CTAs per cluster (1 or 2).  sm_100a: 2 means ``cta_group::2`` (one UMMA
        spans both CTAs, UMMA_M = 256).  sm_90a: 2 pairs CTAs on one n-block.
    dual_tile: sm_100a: each CTA of the pair computes its own m-block (level 7);
        without it both CTAs compute the same tile.  sm_90a: must equal size == 2.
    """

    size: int = 1
    dual_tile: bool = False


@dataclass(frozen=True)
class Accumulator:
    """Accumulator buffering. stages: TMEM accumulator stages (sm_100a); 1 on sm_90a."""

    stages: int = 1


@dataclass(frozen=True)
class Mma:
    """MMA issue.

    lanes: ``one`` — one elected lane of the MMA warp waits and issues;
        ``all`` — all 32 lanes wait, per-stage descriptors are shared with
        ``shfl.sync`` (lane i holds stage i's), one elected lane issues (level 9).
    tc_util_percent: 100 = no throttle; below, idle cycles after each commit (level 8).
    warpgroups: sm_90a consumer warpgroups (1 or 2); sm_100a ignores it (must be 1).
    """

    lanes: str = "one"
    tc_util_percent: int = 100
    warpgroups: int = 1


@dataclass(frozen=True)
class Smem:
    """Shared-memory layout: ``interleaved`` (A,B per stage) or ``separated`` (all A stages, then all B)."""

    layout: str = "interleaved"


@dataclass(frozen=True)
class Epilogue:
    """Accumulator -> D.

    warps: 0 — the mainloop warps run the epilogue after the k-loop; 4 — a
        dedicated epilogue warpgroup (warps 4-7).  sm_90a: 0 (consumers store).
    store: ``direct`` (st.global from registers) or ``tma`` (smem staging + TMA store).
    swizzle: CD staging swizzle, ``none`` or ``128`` (chunk i of row r stored at i ^ (r % 8)).
    store_block_n: D columns per TMA store (0 = block_n).
    stages: CD staging buffers (TMA store pipelining).
    early_release: arrive on ``tmem_empty`` right after the TMEM reads, before the stores.
    release: ``elected`` — one thread per CTA arrives on ``tmem_empty``;
        ``per_thread`` — every epilogue thread arrives after its own fence (level 9).
    """

    warps: int = 0
    store: str = "direct"
    swizzle: str = "none"
    store_block_n: int = 0
    stages: int = 1
    early_release: bool = False
    release: str = "elected"


@dataclass(frozen=True)
class Schedule:
    """Tile order. persistent: grid = SM count, CTAs loop over tiles. group: swizzle group (m-blocks)."""

    persistent: bool = False
    group: int = 1


@dataclass(frozen=True)
class Tma:
    """TMA loads.

    two_sm: sm_100a 2-SM loads (``.cta_group::2``, barrier address masked with 0xFEFFFFFF).
    multicast: sm_90a: the CTA pair multicasts halves of the shared B tile.
    l2_promotion: ``none``, ``64``, ``128`` or ``256`` (bytes).
    """

    two_sm: bool = False
    multicast: bool = False
    l2_promotion: str = "none"


@dataclass(frozen=True)
class Config:
    """One GEMM pipeline: D[M,N] = A[M,K] @ B[N,K]^T, bf16 in/out, fp32 accumulate."""

    name: str
    arch: str = "sm_100a"
    tile: Tile = field(default_factory=Tile)
    pipeline: Pipeline = field(default_factory=Pipeline)
    cluster: Cluster = field(default_factory=Cluster)
    accumulator: Accumulator = field(default_factory=Accumulator)
    mma: Mma = field(default_factory=Mma)
    smem: Smem = field(default_factory=Smem)
    epilogue: Epilogue = field(default_factory=Epilogue)
    schedule: Schedule = field(default_factory=Schedule)
    tma: Tma = field(default_factory=Tma)

    def replace(self, **sections) -> "Config":
        """A copy with whole sections or dotted fields replaced, validated: ``cfg.replace(**{"tile.block_n": 256})``."""
        raw = to_dict(self)
        for key, value in sections.items():
            node = raw
            *head, last = key.split(".")
            for part in head:
                node = node[part]
            node[last] = value
        return from_dict(raw)


# --------------------------------------------------------------------------- loading


def _coerce(path: str, tp, value):
    """Check ``value`` against the annotation ``tp``; return it (bools are not ints here)."""
    if dataclasses.is_dataclass(tp):
        return _build(path, tp, value)
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        bool: isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        raise ConfigError(f"{path}={value!r}: expected {tp.__name__}, got {type(value).__name__}")
    return value


def _build(path: str, cls, raw):
    if not isinstance(raw, dict):
        raise ConfigError(f"{path or 'config'}={raw!r}: expected a mapping of {[f.name for f in fields(cls)]}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    for key in raw:
        if key not in known:
            near = [k for k in known if _close(str(key), k)]
            hint = f" (did you mean {near[0]!r}?)" if near else f"; known keys: {sorted(known)}"
            raise ConfigError(f"{path + '.' if path else ''}{key}: unknown key{hint}")
    kwargs = {k: _coerce(f"{path + '.' if path else ''}{k}", hints[k], v) for k, v in raw.items()}
    return cls(**kwargs)


def _close(a: str, b: str) -> bool:
    """True when ``a`` is one edit (or a swap) away from ``b``: catches misspelt keys."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def from_dict(raw: dict) -> Config:
    """Build and validate a :class:`Config` from a parsed YAML mapping.  Raises ConfigError."""
    if not isinstance(raw, dict) or "name" not in raw:
        raise ConfigError("config: expected a mapping with at least a 'name' key")
    cfg = _build("", Config, raw)
    validate(cfg)
    return cfg


def to_dict(cfg: Config) -> dict:
    """Plain nested dict of a config (inverse of :func:`from_dict`)."""
    return dataclasses.asdict(cfg)


def configs_dir() -> Path:
    """Folder of the shipped configs (``ptxgen/configs``)."""
    return Path(str(resources.files("ptxgen") / "configs"))


def shipped_configs() -> list[str]:
    """Names of the shipped configs, sorted (``level1`` ... ``level9``, ``h100_*``)."""
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def resolve_config_path(name_or_path: str | os.PathLike) -> Path:
    """A shipped config by bare name (``level9`` or ``level9.yaml``) or a path.  Raises ConfigError."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    stem = p.name[:-5] if p.name.endswith(".yaml") else p.name
    shipped = configs_dir() / f"{stem}.yaml"
    if p.parent == Path(".") and shipped.is_file():
        return shipped
    raise ConfigError(
        f"config {str(name_or_path)!r}: no such file, and not a shipped config (shipped: {', '.join(shipped_configs())})"
    )


def load_config(name_or_path: str | os.PathLike | Config) -> Config:
    """Load, parse and validate a config; a :class:`Config` passes through.  Raises ConfigError."""
    if isinstance(name_or_path, Config):
        return name_or_path
    path = resolve_config_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if isinstance(raw, dict) and "name" not in raw:
        raw = {"name": path.stem, **raw}
    try:
        return from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path.name}: {exc}") from None


# --------------------------------------------------------------------------- validation


def _rule(ok: bool, path: str, value, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{path}={value!r}: {rule}")


def _choice(path: str, value, allowed) -> None:
    _rule(value in allowed, path, value, f"must be one of {list(allowed)}")


def validate(cfg: Config) -> None:
    """Check every per-field and cross-field rule, then the plan's budgets.  Raises ConfigError."""
    t, p, c, e = cfg.tile, cfg.pipeline, cfg.cluster, cfg.epilogue
    _rule(bool(cfg.name) and cfg.name.replace("_", "").replace("-", "").isalnum(), "name", cfg.name,
          "must be a non-empty identifier of letters, digits, '_' and '-'")
    _choice("arch", cfg.arch, ARCHS)
    _rule(t.block_k == 64, "tile.block_k", t.block_k, "must be 64 (128 B of bf16: one 128B-swizzle atom)")
    _rule(1 <= p.stages <= 32, "pipeline.stages", p.stages, "must be in [1, 32]")
    _choice("pipeline.roles", p.roles, ("lockstep", "specialized"))
    _choice("cluster.size", c.size, (1, 2))
    _rule(cfg.accumulator.stages >= 1, "accumulator.stages", cfg.accumulator.stages, "must be >= 1")
    _choice("mma.lanes", cfg.mma.lanes, ("one", "all"))
    _rule(1 <= cfg.mma.tc_util_percent <= 100, "mma.tc_util_percent", cfg.mma.tc_util_percent, "must be in [1, 100]")
    _choice("smem.layout", cfg.smem.layout, ("interleaved", "separated"))
    _choice("epilogue.store", e.store, ("direct", "tma"))
    _choice("epilogue.swizzle", e.swizzle, ("none", "128"))
    _choice("epilogue.release", e.release, ("elected", "per_thread"))
    _rule(e.stages in (1, 2, 3, 4), "epilogue.stages", e.stages, "must be in [1, 4]")
    _rule(cfg.schedule.group >= 1, "schedule.group", cfg.schedule.group, "must be >= 1")
    _choice("tma.l2_promotion", cfg.tma.l2_promotion, ("none", "64", "128", "256"))
    if cfg.mma.lanes == "all":
        _rule(p.roles == "specialized", "mma.lanes", "all", "needs pipeline.roles=specialized (a whole MMA warp)")
        _rule(cfg.smem.layout == "separated", "mma.lanes", "all",
              "shfl-shared descriptors need smem.layout=separated (constant stride between stages)")

    sbn = e.store_block_n or t.block_n
    _rule(sbn % 8 == 0 and t.block_n % sbn == 0 and sbn <= 256, "epilogue.store_block_n", e.store_block_n,
          f"must divide tile.block_n={t.block_n}, be a multiple of 8 and <= 256 (TMA box)")
    if e.swizzle == "128":
        _rule(e.store == "tma", "epilogue.swizzle", e.swizzle, "128B CD staging needs epilogue.store=tma")
        _rule(sbn * 2 <= 128, "epilogue.store_block_n", sbn,
              "128B swizzle limits the TMA box's inner extent to 128 B (64 bf16)")
    if e.store == "direct":
        _rule(e.stages == 1 and e.store_block_n in (0, t.block_n), "epilogue.store", "direct",
              "epilogue.stages and epilogue.store_block_n apply to TMA stores only")

    if cfg.arch == "sm_100a":
        _validate_sm100(cfg)
    else:
        _validate_sm90(cfg)

    from .plan import make_plan  # budgets are the plan's real numbers

    make_plan(cfg)


def _validate_sm100(cfg: Config) -> None:
    t, c = cfg.tile, cfg.cluster
    _rule(t.block_m in (128, 256), "tile.block_m", t.block_m,
          "sm_100a: must be 128 or 256 (one M-wave of 128 TMEM lanes per 128 rows)")
    lo = 16 if c.size == 1 else 32
    _rule(t.block_n % lo == 0 and lo <= t.block_n <= 256, "tile.block_n", t.block_n,
          f"UMMA N must be a multiple of {lo} in [{lo}, 256]"
          + (" (cta_group::2: each CTA loads block_n/2 rows of B, a multiple of 16)" if c.size == 2 else ""))
    _rule(cfg.mma.warpgroups == 1, "mma.warpgroups", cfg.mma.warpgroups, "sm_100a: one MMA-issuing thread; must be 1")
    _rule(not cfg.tma.multicast, "tma.multicast", True, "sm_100a kernels here use 2-SM loads (tma.two_sm), not multicast")
    if c.size == 1:
        _rule(not c.dual_tile, "cluster.dual_tile", True, "needs cluster.size=2 (a CTA pair)")
        _rule(not cfg.tma.two_sm, "tma.two_sm", True, "2-SM TMA loads need cluster.size=2")
    cols = t.block_n * (t.block_m // 128) * cfg.accumulator.stages
    _rule(cols <= 512 and cols >= 32 and cols & (cols - 1) == 0, "accumulator.stages", cfg.accumulator.stages,
          f"TMEM columns block_n x m-waves x stages = {t.block_n} x {t.block_m // 128} x "
          f"{cfg.accumulator.stages} = {cols} must be a power of two in [32, 512]")
    _choice("epilogue.warps", cfg.epilogue.warps, (0, 4))
    if cfg.epilogue.warps == 0:
        _rule(cfg.pipeline.roles == "lockstep" or cfg.accumulator.stages == 1, "accumulator.stages",
              cfg.accumulator.stages, "more than one accumulator stage needs a dedicated epilogue (epilogue.warps=4)")
    if cfg.epilogue.early_release:
        _rule(cfg.epilogue.store == "tma", "epilogue.early_release", True, "applies to TMA-store epilogues")


def _validate_sm90(cfg: Config) -> None:
    t, c = cfg.tile, cfg.cluster
    wg = cfg.mma.warpgroups
    _choice("mma.warpgroups", wg, (1, 2))
    _rule(t.block_m % (64 * wg) == 0 and 64 <= t.block_m <= 256, "tile.block_m", t.block_m,
          f"sm_90a: a multiple of 64 x mma.warpgroups={wg} in [64, 256] (wgmma m64 per wave)")
    _rule(t.block_n % 16 == 0 and 16 <= t.block_n <= 256, "tile.block_n", t.block_n,
          "wgmma N: a multiple of 16 in [16, 256] here")
    acc_regs = (t.block_m // wg // 64) * t.block_n // 2
    _rule(acc_regs <= 128, "tile.block_m", t.block_m,
          f"sm_90a: {acc_regs} fp32 accumulator registers per thread > 128 (tile {t.block_m}x{t.block_n}, "
          f"{wg} consumer warpgroups) would spill")
    _rule(cfg.accumulator.stages == 1, "accumulator.stages", cfg.accumulator.stages, "sm_90a: accumulators live in registers; must be 1")
    _rule(cfg.epilogue.warps == 0, "epilogue.warps", cfg.epilogue.warps, "sm_90a: the consumer warpgroups store D; must be 0")
    _rule(cfg.pipeline.roles == "specialized", "pipeline.roles", cfg.pipeline.roles, "sm_90a: must be specialized")
    _rule(cfg.pipeline.stages >= 2, "pipeline.stages", cfg.pipeline.stages,
          "sm_90a: must be >= 2 (consumers release a stage one k-block late, after wgmma.wait_group 1; "
          "with one stage that release waits on its own refill: a deadlock the simulator reports)")
    _rule(not cfg.tma.two_sm, "tma.two_sm", True, "2-SM TMA loads are sm_100a only")
    _rule(cfg.mma.lanes == "one" and cfg.smem.layout == "interleaved" and cfg.mma.tc_util_percent == 100,
          "mma", dataclasses.asdict(cfg.mma), "sm_90a: lanes=one, tc_util_percent=100 and smem.layout=interleaved")
    _rule(c.dual_tile == (c.size == 2), "cluster.dual_tile", c.dual_tile,
          "sm_90a: a cluster of 2 always pairs CTAs on one n-block (dual_tile must equal size == 2)")
    _rule(not cfg.tma.multicast or c.size == 2, "tma.multicast", True, "needs cluster.size=2")
    _rule(cfg.epilogue.release == "elected" and not cfg.epilogue.early_release, "epilogue", "release/early_release",
          "sm_90a: accumulators are registers; no tmem_empty to release")
    if cfg.epilogue.store == "tma":
        _rule(cfg.epilogue.swizzle == "128", "epilogue.swizzle", cfg.epilogue.swizzle,
              "sm_90a TMA-store epilogue stages fragments through 128B-swizzled smem; set 128")

