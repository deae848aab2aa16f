"""config -> plan -> IR -> PTX + launch metadata, and the files ``ptxgen build`` writes.

The one door into ``emitters``: every PTX text of the package comes from :func:`kernel_ptx` (a config's kernel
through :func:`build`, a Kernel IR made or changed elsewhere, such as a planted or instrumented kernel, directly).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .builders.kernel import build_kernel
from .config import Config, load_config
from .errors import OutputError
from .ir import Kernel
from .launch import LaunchSpec
from .plan import Plan, make_plan


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
    cfg = load_config(config)
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
