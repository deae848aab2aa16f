"""``ptxgen`` command line: build, check, run, bench, inspect.

User errors (bad config, assembler rejection, bad shapes, driver failures)
print one paragraph ``ErrorType: message`` on stderr and exit with status 2;
no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import PtxgenError

DEFAULT_CONFIG = "level9"
SASS_KEYS = {"sm_100a": ("UTCHMMA", "UTCBAR", "UTMALDG", "UTMASTG", "LDTM"),
             "sm_90a": ("HGMMA", "UTMALDG", "UTMASTG", "WARPGROUP")}


def _shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected MxNxK, e.g. 4096x4096x4096") from None
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r}: M, N and K must be >= 1")
    return m, n, k


def _configs(args) -> list[str]:
    from .config import shipped_configs

    if getattr(args, "all", False):
        return shipped_configs()
    return args.config or [DEFAULT_CONFIG]


def cmd_build(args) -> int:
    from .assemble import assemble
    from .build import build, write

    out_dir = Path(args.output)
    rows = []
    for name in _configs(args):
        res = build(name)
        ptx_path, json_path = write(res, out_dir)
        asm = assemble(res.ptx, res.plan.arch, sass=True)
        counts = {k: asm.count(k) for k in SASS_KEYS[res.plan.arch]}
        rows.append((res, asm, counts))
        print(f"{res.config.name} ({res.plan.arch}): wrote {ptx_path} and {json_path.name}")
        print(f"  registers {asm.registers}/thread, dynamic smem {res.plan.smem_bytes} B, "
              f"TMEM {res.plan.tmem_cols} columns, spills {asm.spill_store_bytes}+{asm.spill_load_bytes} B, "
              f"emit {res.emit_seconds * 1000:.0f} ms, assemble {asm.assemble_seconds * 1000:.0f} ms")
        print("  SASS: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        for w in asm.warnings:
            print(f"  warning: {w}")
    spilled = [r[0].config.name for r in rows if r[1].spill_store_bytes or r[1].spill_load_bytes]
    if spilled:
        print(f"spills in: {', '.join(spilled)}", file=sys.stderr)
        return 1
    return 0


def cmd_check(args) -> int:
    from .build import build
    from .sim import default_shapes, sweep
    from .verify import barrier_table, format_barrier_table, verify

    for name in _configs(args):
        res = build(name)
        verify(res.kernel)
        print(f"{res.config.name}: verifier passed")
        print(format_barrier_table(barrier_table(res.kernel)))
        shapes = args.shape or default_shapes(res.plan)
        result = sweep(res.kernel, shapes=shapes, interleavings=args.interleavings)
        for shape, seed, message in result.faults:
            print(f"{res.config.name}: fault at shape {shape}, schedule seed {seed}: {message}", file=sys.stderr)
        print(f"{res.config.name}: {result.summary()}")
        if result.faults:
            return 1
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


def cmd_bench(args) -> int:
    from .bench import DEFAULT_SHAPES, bench, format_host_overhead, host_overhead

    configs = args.config or [None]  # None: chosen per shape for the device
    if args.host_overhead:
        doc = host_overhead(n_calls=args.calls, config=configs[0])
        print(format_host_overhead(doc))
        if args.json:
            Path(args.json).write_text(json.dumps({"host_overhead": doc}, indent=2) + "\n")
        return 0
    bench(configs, args.shape or DEFAULT_SHAPES, warmup=args.warmup, iters=args.iters, json_path=args.json,
          plot_path=args.plot, host=not args.no_host_overhead)
    return 0


def cmd_tune(args) -> int:
    from .bench import DEFAULT_SHAPES, tune

    tune(args.shape or DEFAULT_SHAPES, configs=args.config, warmup=args.warmup, iters=args.iters, output=args.output)
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
          f"dynamic smem {res.plan.smem_bytes} B")
    for op, count in sorted(asm.opcodes.items(), key=lambda kv: -kv[1]):
        print(f"// SASS {op:<40} {count}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ptxgen", description="Tensor-core GEMM pipelines from YAML to PTX.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def with_config(p, many=True):
        p.add_argument("--config", "-c", action="append",
                       help="shipped config name (level9, level9.yaml) or a YAML path; repeatable" if many else
                       "shipped config name or YAML path")
        return p

    b = with_config(sub.add_parser("build", help="config -> generated/<name>.ptx + .json, assembled, with a resource report"))
    b.add_argument("--all", action="store_true", help="every shipped config")
    b.add_argument("-o", "--output", default="generated", help="output folder (default: generated)")
    b.set_defaults(fn=cmd_build)

    c = with_config(sub.add_parser("check", help="static verifier + CPU simulation"))
    c.add_argument("--all", action="store_true")
    c.add_argument("--shape", type=_shape, action="append", help="MxNxK to simulate (repeatable)")
    c.add_argument("--interleavings", type=int, default=20, help="scheduler seeds per shape")
    c.set_defaults(fn=cmd_check)

    r = with_config(sub.add_parser("run", help="one shape on the GPU, checked against torch "
                                               "(no --config: the config chosen for the shape)"))
    r.add_argument("--shape", type=_shape, required=True)
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=cmd_run)

    be = with_config(sub.add_parser("bench", help="public API and prepared launch vs torch.matmul, same process "
                                                  "(no --config: chosen per shape; no --shape: the 11 issue-12 shapes)"))
    be.add_argument("--shape", type=_shape, action="append")
    be.add_argument("--warmup", type=int, default=10)
    be.add_argument("--iters", type=int, default=50)
    be.add_argument("--json", help="write the results as JSON here")
    be.add_argument("--plot", help="write a PNG of the ratio per shape here (needs matplotlib: ptxgen[plot])")
    be.add_argument("--host-overhead", action="store_true",
                    help="only the host-overhead benchmark (back-to-back 256x256x256 calls, us per call)")
    be.add_argument("--no-host-overhead", action="store_true", help="skip the host-overhead benchmark")
    be.add_argument("--calls", type=int, default=2000, help="calls of the host-overhead benchmark")
    be.set_defaults(fn=cmd_bench)

    t = with_config(sub.add_parser("tune", help="time the device's configs per shape and write the tuned table "
                                                "into the user cache (the runtime's choice prefers it)"))
    t.add_argument("--shape", type=_shape, action="append", help="MxNxK (repeatable; default: the bench shapes)")
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--iters", type=int, default=20)
    t.add_argument("-o", "--output", help="table path (default: <cache dir>/tuned/<arch>.json)")
    t.set_defaults(fn=cmd_tune)

    i = with_config(sub.add_parser("inspect", help="PTX (or IR with --ir), resources, SASS opcode counts"), many=False)
    i.add_argument("--ir", action="store_true")
    i.set_defaults(fn=cmd_inspect)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except PtxgenError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
