"""``ptxgen`` command line: build, check, run, bench, inspect (also ``python -m ptxgen``).

Exit status: 0 success; 1 a user or environment error (missing, unreadable or
illegal config, bad YAML, verifier or assembler rejection, output-directory
problem, no torch, no GPU, no driver), printed as ONE line
``ptxgen: error: <ErrorType>: <what, and what to do>`` on stderr without a
traceback (``--debug`` shows the full message and the traceback); 2 a usage
error (argparse).  Output piped into ``head`` ends quietly.  ``build --all``
and ``check --all`` draw a tqdm progress bar on stderr when it is a terminal,
nothing otherwise (CI logs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .errors import ConfigError, OutputError, PtxgenError, SetupError

DEFAULT_CONFIG = "level9"
SASS_KEYS = {"sm_100a": ("UTCHMMA", "UTCOMMA", "UTCQMMA", "UTCCP", "UTCBAR", "UTMALDG", "UTMASTG", "LDTM"),
             "sm_90a": ("HGMMA", "UTMALDG", "UTMASTG", "WARPGROUP")}
DEFAULT_OUTPUT = "generated"


#: largest M*N*K the CPU checks accept (1024^3): the simulator runs every warp of every CTA in Python, and a
#: 4096^3 problem takes many minutes with nothing to show
MAX_CHECK_MNK = 1 << 30


def _count(minimum: int, why: str = ""):
    """An argparse type: an integer >= ``minimum`` (a count of calls, rounds, seeds...); ``why`` ends the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {minimum}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: must be >= {minimum}" + (f" ({why})" if why else ""))
        return value

    return parse


_at_least_one = _count(1)


def _path(text: str) -> str:
    """An argparse type: a non-empty path (``-o ''`` would silently mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: empty; pass a path")
    return text

_seeds = _count(1, "0 interleavings would check nothing")


def _shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected MxNxK, e.g. 4096x4096x4096") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r}: M, N and K must be >= 1")
    return m, n, k


def _thread(text: str) -> tuple[int, int]:
    try:
        cta, tid = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"thread {text!r}: expected CTA:TID, e.g. 0:128") from None
    if min(cta, tid) < 0:
        raise argparse.ArgumentTypeError(f"thread {text!r}: CTA and TID must be >= 0")
    return cta, tid


def _configs(args) -> list[str]:
    from .config import shipped_configs

    if getattr(args, "all", False):
        return shipped_configs()
    return args.config or [DEFAULT_CONFIG]


def _progress(items: list, what: str):
    """``items`` wrapped in a tqdm bar on stderr when it is a terminal and there is more than one item."""
    from tqdm import tqdm

    return tqdm(items, desc=what, unit="config", file=sys.stderr, leave=False,
                disable=len(items) < 2 or not sys.stderr.isatty())


def _say(text: str = "", err: bool = False) -> None:
    """Print a line without breaking a progress bar."""
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr if err else sys.stdout)


def _with_name(name: str, exc: PtxgenError) -> PtxgenError:
    """``exc`` with its message prefixed by the config ``name`` (verifier and assembler errors)."""
    exc.args = (f"{name}: {exc}", *exc.args[1:])
    return exc


def _output_dir(text: str) -> Path:
    """``-o DIR``, checked before any build (created only when writing).  Raises OutputError."""
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output directory {text!r}: exists and is not a directory; pass -o DIR with a directory")
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise OutputError(f"output directory {text!r}: not writable; pass -o DIR with a writable directory")
    return out


def _check_names(results: list, sources: list[str], out_dir: Path) -> None:
    """Refuse two builds with one name, and a user config that would overwrite a shipped kernel's files.

    A config named like a shipped one (``level9``) but differing from it may not write into the default
    output directory (``generated``, where ``ptxgen build --all`` keeps the shipped kernels); with
    ``-o`` pointing at any other directory it may.  Raises ConfigError.
    """
    from .config import load_config, shipped_configs

    seen: dict[str, str] = {}
    for res, src in zip(results, sources):
        name = res.config.name
        if name in seen:
            raise ConfigError(f"two configs named {name!r} in one build ({seen[name]} and {src}) would both write "
                              f"{out_dir / name}.ptx; give them different names")
        seen[name] = src
    default_dir = Path(DEFAULT_OUTPUT).resolve()
    if out_dir.resolve() != default_dir:
        return
    shipped = set(shipped_configs())
    for res, src in zip(results, sources):
        name = res.config.name
        if name in shipped and res.config != load_config(name):
            raise ConfigError(f"{src}: name {name!r} is a shipped config's; building it into {DEFAULT_OUTPUT}/ would "
                              f"overwrite the shipped kernel's files: rename it or pass -o DIR")


def cmd_build(args) -> int:
    if args.prebuilt:
        return _build_prebuilt(args)
    from .assemble import assemble
    from .build import build, write
    from .check.verify import verify

    out_dir = _output_dir(args.output or DEFAULT_OUTPUT)
    names = _configs(args)
    # everything is built, verified and assembled in memory before anything is written
    results = [build(name) for name in names]  # config -> PTX: milliseconds each
    _check_names(results, names, out_dir)
    built = []
    for res in _progress(results, "build"):
        try:
            verify(res.kernel)
            asm = assemble(res.ptx, res.plan.arch, sass=True)
        except PtxgenError as exc:
            raise _with_name(res.config.name, exc) from None
        built.append((res, asm))
    # every file is written before the first line is printed: a reader that goes away (ptxgen build | head -1)
    # stops the report, never the writes
    paths = [write(res, out_dir) for res, _ in built]
    for (res, asm), (ptx_path, json_path) in zip(built, paths):
        counts = {k: asm.count(k) for k in SASS_KEYS[res.plan.arch]}
        print(f"{res.config.name} ({res.plan.arch}): verified; wrote {ptx_path} and {json_path.name}")
        print(f"  registers {asm.registers}/thread, dynamic smem {res.plan.smem.bytes} B, "
              f"TMEM {res.plan.tmem.cols} columns, {res.plan.smem.ctas_per_sm} CTA(s)/SM"
              + (f" ({res.plan.smem.ctas_per_sm * res.plan.tmem.cols}/512 TMEM columns)" if res.plan.is_sm100 else "")
              + f", spills {asm.spill_store_bytes}+{asm.spill_load_bytes} B, "
              f"emit {res.emit_seconds * 1000:.0f} ms, assemble {asm.assemble_seconds * 1000:.0f} ms")
        print("  SASS: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        for w in asm.warnings:
            print(f"  warning: {w}")
    spilled = [r.config.name for r, a in built if a.spill_store_bytes or a.spill_load_bytes]
    if spilled:
        print(f"spills in: {', '.join(spilled)}", file=sys.stderr)
        return 1
    return 0


def _build_prebuilt(args) -> int:
    """``build --prebuilt``: the images compiled ahead of time (:mod:`ptxgen.aot`), into ``ptxgen/prebuilt`` or -o."""
    from .aot import write_prebuilt
    from .runtime.prebuilt import FOLDER

    out_dir = _output_dir(args.output or FOLDER)
    names = args.config if args.config else None  # --all or nothing: every shipped sm_90a config
    manifest = write_prebuilt(out_dir, names)
    for name, entry in manifest["images"].items():
        print(f"{name} ({entry['arch']}): {entry['file']}, {entry['bytes']} B")
    total = sum(e["bytes"] for e in manifest["images"].values())
    print(f"wrote {len(manifest['images'])} images ({total} B) and manifest.json into {out_dir} "
          f"({manifest['compiler']}, sources {manifest['sources'][:16]})")
    return 0


def cmd_check(args) -> int:
    if args.ptx:
        return _check_ptx(args)
    from .build import build
    from .check.sim import default_shapes, sweep
    from .check.verify import barrier_table, format_barrier_table, verify

    for name in _progress(_configs(args), "check"):
        res = build(name)
        try:
            verify(res.kernel)
        except PtxgenError as exc:
            raise _with_name(res.config.name, exc) from None
        _say(f"{res.config.name}: verifier passed")
        _say(format_barrier_table(barrier_table(res.kernel)))
        shapes = args.shape or default_shapes(res.kernel)
        result = sweep(res.kernel, shapes=shapes, interleavings=args.interleavings, policies=args.schedule)
        for f in result.faults:
            _say(f"{res.config.name}: fault at shape {f.shape}, schedule {f.policy} seed {f.seed}: {f.message}",
                 err=True)
        _say(f"{res.config.name}: {result.summary()}")
        if result.faults:
            return 1
    return 0


def _check_ptx(args) -> int:
    """``check --ptx``: the emitted PTX against the IR, thread by thread (:mod:`ptxgen.check.ptx`)."""
    from .build import build
    from .check.ptx import interp
    from .check.ptx.diff import Launch, default_launches, diff_thread, role_of

    for name in _progress(_configs(args), "check"):
        res = build(name)
        try:
            kernel, prog = res.kernel, interp.parse(res.ptx)
        except interp.PtxInterpError as exc:  # a form the IR does not allow (a constant division, elect.sync mask)
            _say(f"{res.config.name}: PTX cannot be interpreted: {exc}", err=True)
            return 1
        for shape in args.shape or [None]:
            launches = default_launches(kernel, shape)
            if args.thread:
                m, n, k, grid = launches[0].m, launches[0].n, launches[0].k, launches[0].grid
                for cta, tid in args.thread:
                    if cta >= grid or tid >= kernel.threads:
                        raise ConfigError(f"--thread {cta}:{tid}: {res.config.name} at {m}x{n}x{k} has CTAs 0-{grid - 1}"
                                          f" and threads 0-{kernel.threads - 1}")
                launches = [Launch(m, n, k, grid, cta, tid) for cta, tid in args.thread]
            for launch in launches:
                where = (f"{res.config.name} {launch.m}x{launch.n}x{launch.k}: CTA {launch.ctaid} thread {launch.tid} "
                         f"({role_of(kernel, launch.tid)})")
                msg = diff_thread(kernel, prog, launch)
                if msg is not None:
                    _say(f"{where}: {msg}", err=True)
                    return 1
                _say(f"{where}: PTX effects equal IR effects")
    return 0


def cmd_run(args) -> int:
    from .bench import run_one

    m, n, k = args.shape
    for name in args.config or [None]:  # None: the config the runtime chooses for this shape and device
        r = run_one(name, m, n, k)
        label = name if name is not None else f"auto:{r['config']}"
        print(json.dumps(r) if args.json else
              f"{label} {m}x{n}x{k}: rel error {r['rel_err']:.2e}, {r['ms']:.3f} ms, {r['tflops']:.1f} TFLOP/s")
        if not r["rel_err"] < 1e-2:
            print(f"{label}: relative error {r['rel_err']} >= 1e-2", file=sys.stderr)
            return 1
    return 0


def chosen_shapes(args, default: tuple[tuple[int, int, int], ...]) -> Sequence[tuple[int, int, int]]:
    """The ``--shape`` triples, then those of ``--suite`` (its ``--half``), in order, without repeats; ``default``
    when neither is given.  Raises ConfigError for an unknown suite or half."""
    shapes = list(args.shape or [])
    if args.suite:
        from .suites import load

        shapes += [s.mnk for s in load(args.suite).half(args.half)]
    return list(dict.fromkeys(shapes)) or default


def cmd_bench(args) -> int:
    from .bench import DEFAULT_SHAPES, bench, format_host_overhead, host_overhead

    configs = args.config or [None]  # None: chosen per shape for the device
    if args.host_overhead:
        doc = host_overhead(n_calls=args.calls, config=configs[0])
        print(format_host_overhead(doc))
        if args.json:
            Path(args.json).write_text(json.dumps({"host_overhead": doc}, indent=2) + "\n")
        return 0
    bench(configs, chosen_shapes(args, DEFAULT_SHAPES), warmup=args.warmup, iters=args.iters, rounds=args.rounds,
          runs=args.runs, graph=not args.no_graph,
          json_path=args.json, plot_path=args.plot, host=not args.no_host_overhead)
    return 0


def cmd_tune(args) -> int:
    from .bench import DEFAULT_SHAPES, tune

    tune(chosen_shapes(args, DEFAULT_SHAPES), configs=args.config, warmup=args.warmup, iters=args.iters, output=args.output)
    return 0


def cmd_inspect(args) -> int:
    from .assemble import assemble
    from .build import build
    from .ir import kernel_str

    res = build((args.config or [DEFAULT_CONFIG])[0])
    if args.ir:
        print(kernel_str(res.kernel))
    else:
        print(res.ptx)
    asm = assemble(res.ptx, res.plan.arch, sass=True)
    print(f"// registers {asm.registers}, spills {asm.spill_store_bytes}+{asm.spill_load_bytes} B, "
          f"dynamic smem {res.plan.smem.bytes} B")
    for op, count in sorted(asm.opcodes.items(), key=lambda kv: -kv[1]):
        print(f"// SASS {op:<40} {count}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ptxgen", description="Tensor-core GEMM pipelines from YAML to PTX.")
    ap.add_argument("--version", action="version", version=f"ptxgen {__version__}")
    ap.add_argument("--debug", action="store_true", help="on error, print the full message and the traceback")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def with_config(p, many=True):
        p.add_argument("--config", "-c", action="append",
                       help="shipped config name (level9, level9.yaml) or a YAML path; repeatable" if many else
                       "shipped config name or YAML path")
        return p

    b = with_config(sub.add_parser("build", help="config -> generated/<name>.ptx + .json, assembled, with a resource report"))
    b.add_argument("--all", action="store_true", help="every shipped config")
    b.add_argument("-o", "--output", type=_path, default=None,
                   help="output folder (default: generated; with --prebuilt, the package's ptxgen/prebuilt); a config "
                        "named like a shipped one (level9) but differing from it is refused in generated, allowed "
                        "with -o elsewhere")
    b.add_argument("--prebuilt", action="store_true",
                   help="compile kernel images ahead of time (ptxas, whole program) for the runtime's first calls: "
                        "every shipped sm_90a config (or --config), with a manifest of what they depend on; rerun "
                        "after changing any ptxgen or emitters source")
    b.set_defaults(fn=cmd_build)

    c = with_config(sub.add_parser("check", help="static verifier + CPU simulation, or (--ptx) emitted PTX vs IR"))
    c.add_argument("--all", action="store_true")
    c.add_argument("--shape", type=_shape, action="append", help="MxNxK to simulate (repeatable)")
    c.add_argument("--interleavings", type=_seeds, default=20, help="scheduler seeds per shape (>= 1)")
    c.add_argument("--schedule", choices=("all", "random", "latest", "pct"), default="all",
                   help="scheduling policy: random latencies, latest (async work completes as late as legal), pct "
                        "(PCT priorities), or all (default: the random seeds plus 2 latest and 3 pct runs per shape)")
    c.add_argument("--ptx", action="store_true",
                   help="instead of the verifier and the simulation, compare the effects of the emitted PTX with the "
                        "IR's, thread by thread (default threads: lane 0 of the first and lane 5 of the last warp of "
                        "every role, in every CTA of the first and the last cluster; default shape: 2x2 ragged tiles)")
    c.add_argument("--thread", type=_thread, action="append", metavar="CTA:TID",
                   help="with --ptx: the thread to compare instead of the default set (repeatable)")
    c.set_defaults(fn=cmd_check)

    r = with_config(sub.add_parser("run", help="one shape on the GPU, checked against torch "
                                               "(no --config: the config chosen for the shape)"))
    r.add_argument("--shape", type=_shape, required=True)
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=cmd_run, needs_gpu=True)

    be = with_config(sub.add_parser("bench", help="public API and prepared launch vs torch.matmul, same process "
                                                  "(no --config: chosen per shape; no --shape: the 11 reference shapes)"))
    be.add_argument("--shape", type=_shape, action="append")
    be.add_argument("--suite", help="add the shapes of a shipped suite (gemm, swiglu) or a suite file")
    be.add_argument("--half", choices=("report", "tune", "all"), default="report",
                    help="which half of --suite (default: report; tables are fitted on the tune half)")
    be.add_argument("--warmup", type=_count(0), default=10)
    be.add_argument("--iters", type=_at_least_one, default=30,
                    help="timed calls per side and run, in alternating rounds")
    be.add_argument("--runs", type=_at_least_one, default=5,
                    help="separate runs per shape (rows: the median over runs, and the lowest-highest ratio)")
    be.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph-replayed timing of both sides")
    be.add_argument("--rounds", type=_at_least_one, default=None,
                    help="alternating rounds per side (default: one per call, A B B A ...; 5 was the method "
                         "of earlier tables: coarser rounds of several calls per side)")
    be.add_argument("--json", help="write the results as JSON here")
    be.add_argument("--plot", help="write a PNG of the ratio per shape here (needs matplotlib: ptxgen[plot])")
    be.add_argument("--host-overhead", action="store_true",
                    help="only the host-overhead benchmark (back-to-back 256x256x256 calls, us per call)")
    be.add_argument("--no-host-overhead", action="store_true", help="skip the host-overhead benchmark")
    be.add_argument("--calls", type=_at_least_one, default=2000, help="calls of the host-overhead benchmark")
    be.set_defaults(fn=cmd_bench, needs_gpu=True)

    t = with_config(sub.add_parser("tune", help="time the device's configs per shape and write the tuned table "
                                                "into the user cache (the runtime's choice prefers it)"))
    t.add_argument("--shape", type=_shape, action="append", help="MxNxK (repeatable; default: the bench shapes)")
    t.add_argument("--suite", help="add the shapes of a shipped suite (gemm, swiglu) or a suite file")
    t.add_argument("--half", choices=("tune", "report", "all"), default="tune",
                   help="which half of --suite (default: tune: never fit a table on the report half)")
    t.add_argument("--warmup", type=_count(0), default=5)
    t.add_argument("--iters", type=_at_least_one, default=60, help="timed launches per candidate (interleaved rounds)")
    t.add_argument("-o", "--output", type=_path, help="table path (default: <cache dir>/tuned/<arch>.json)")
    t.set_defaults(fn=cmd_tune, needs_gpu=True)

    i = with_config(sub.add_parser("inspect", help="PTX (or IR with --ir), resources, SASS opcode counts"), many=False)
    i.add_argument("--ir", action="store_true")
    i.set_defaults(fn=cmd_inspect)
    return ap


def _require_gpu() -> None:
    """Before ``run``/``bench``: torch with CUDA and a visible GPU, or an SetupError saying what to install."""
    try:
        import torch
    except ModuleNotFoundError:
        raise SetupError("torch is not installed; `ptxgen run` and `ptxgen bench` need it: "
                                 "pip install \"ptxgen[torch]\" (a CUDA build of torch on the GPU machine)") from None
    if torch.version.cuda is None:
        raise SetupError(f"torch {torch.__version__} is a CPU-only build; `ptxgen run` and `ptxgen bench` "
                                 "need a CUDA build of torch and an NVIDIA GPU (build and check work without one)")
    if not torch.cuda.is_available():
        raise SetupError("no CUDA GPU visible (torch.cuda.is_available() is False): run on a machine with an "
                                 "sm_90a (Hopper) or sm_100a (Blackwell) GPU and its NVIDIA driver")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = text.splitlines()
    more = f" ({len(lines) - 1} more lines: rerun with --debug)" if len(lines) > 1 else ""
    return lines[0] + more


def _error(exc: BaseException, kind: str, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
        print(f"ptxgen: error: {kind}: {exc}", file=sys.stderr)
    else:
        print(f"ptxgen: error: {kind}: {_one_line(exc)}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    ap = parser()
    args = ap.parse_args(argv)
    if getattr(args, "all", False) and args.config:
        ap.error(f"{args.cmd}: --all and --config {' '.join(args.config)}: pass one of them")
    if args.cmd == "inspect" and len(args.config or []) > 1:
        ap.error(f"inspect: one --config at a time (got {', '.join(args.config)})")
    if args.cmd == "check":
        for m, n, k in args.shape or []:
            if m * n * k > MAX_CHECK_MNK:
                ap.error(f"check: --shape {m}x{n}x{k}: M*N*K = {m * n * k} exceeds {MAX_CHECK_MNK} (1024^3), the "
                         "largest problem the CPU checks run; pick a smaller shape")
    try:
        try:
            if getattr(args, "needs_gpu", False):
                _require_gpu()
            rc = args.fn(args)
            sys.stdout.flush()
            return rc
        except PtxgenError as exc:
            return _error(exc, type(exc).__name__, args.debug)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top == "torch":
                return _error(SetupError(f"torch is not installed: pip install \"ptxgen[torch]\" ({exc})"),
                              "SetupError", args.debug)
            if top in ("cuda", "nvidia"):
                return _error(SetupError(f"the CUDA Python packages are not installed: "
                                                 f"pip install \"ptxgen[cuda]\" ({exc})"), "SetupError", args.debug)
            raise
    except KeyboardInterrupt:
        print("ptxgen: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (head, less) went away: stop quietly; point stdout at devnull so the interpreter's
        # final flush does not raise again (Python docs, "Note on SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
