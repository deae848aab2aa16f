"""config -> plan -> IR -> PTX + launch metadata, and the files ``ptxgen build`` writes.

The one door into ``emitters``: every PTX text of the package comes from :func:`kernel_ptx` (a config's kernel
through :func:`build`, a Kernel IR made or changed elsewhere, such as a planted or instrumented kernel, directly).
Also the loaders that check a config against the plan's budgets at load time (:func:`load_config`,
:func:`from_dict`): they live here, above the plan, because :mod:`ptxgen.config` never imports it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import config as _config
from .builders.kernel import build_kernel
from .config import Config
from .errors import ConfigError, OutputError
from .ir import Kernel
from .launch import LaunchSpec
from .plan import Plan, make_plan


def load_config(name_or_path: str | os.PathLike | Config) -> Config:
    """Load a config and check that its plan fits: :func:`ptxgen.config.load_config` (schema, hardware rules),
    then the budgets of :func:`ptxgen.plan.make_plan` (shared memory, TMEM columns, registers).

    Raises ConfigError; a budget error read from a file names the file, as the config rules' errors do.
    """
    cfg = _config.load_config(name_or_path)
    try:
        make_plan(cfg)
    except ConfigError as exc:
        if isinstance(name_or_path, Config):
            raise
        raise ConfigError(f"{_config.resolve_config_path(name_or_path).name}: {exc}") from None
    return cfg


def from_dict(raw: dict) -> Config:
    """:func:`ptxgen.config.from_dict` (schema, hardware rules), then the plan's budgets.  Raises ConfigError."""
    cfg = _config.from_dict(raw)
    make_plan(cfg)
    return cfg


@dataclass(frozen=True)
class BuildResult:
    """One built kernel.  ``emit_seconds`` covers plan + IR + PTX (not assembly)."""

    config: Config
    plan: Plan
    kernel: Kernel
    ptx: str
    launch: LaunchSpec
    emit_seconds: float


def build(config: Config | str, *, watchdog_ns: int = 0) -> BuildResult:
    """Build a config (object, shipped name or path).  Raises ConfigError on bad input.

    watchdog_ns: 0 (default) builds the shipped kernel; a positive budget (ns) builds the hang-watchdog
        variant (:func:`ptxgen.ir.watchdog.instrument`: one more ``.u64`` parameter, bounded waits).
    """
    cfg = _config.load_config(config)
    t0 = time.perf_counter()
    plan = make_plan(cfg)
    kernel = build_kernel(plan)
    launch = plan.launch_spec()
    if watchdog_ns:
        from .ir.watchdog import instrument

        kernel = instrument(kernel, watchdog_ns)
        launch = kernel.launch
    ptx = kernel_ptx(kernel)
    return BuildResult(cfg, plan, kernel, ptx, launch, time.perf_counter() - t0)


def kernel_ptx(kernel: Kernel) -> str:
    """The PTX module text of a Kernel IR (``emitters.emit``: legalized for its target, one ``.entry``).

    Raises:
        NotImplementedError: an op has no lowering on the kernel's target.
    """
    from emitters import emit

    return emit(kernel)


def write(result: BuildResult, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``<name>.ptx`` and ``<name>.json`` into ``out_dir`` (created); returns both paths.

    Raises:
        OutputError: the folder cannot be created or a file cannot be written (one line, the OS reason).
    """
    out = Path(out_dir)
    ptx_path, json_path = out / f"{result.config.name}.ptx", out / f"{result.config.name}.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        ptx_path.write_text(result.ptx)
        json_path.write_text(result.launch.to_json())
    except OSError as exc:
        where = exc.filename or out
        raise OutputError(f"cannot write {where} ({exc.strerror or exc}); pass -o DIR with a writable directory") from None
    return ptx_path, json_path
