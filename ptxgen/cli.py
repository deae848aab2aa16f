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
DEFAULT_SHAPES = ("4096x4096x4096", "8192x8192x8192")


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
              f"TMEM {res.plan.tmem_cols} columns, {res.plan.ctas_per_sm} CTA(s)/SM"
              + (f" ({res.plan.ctas_per_sm * res.plan.tmem_cols}/512 TMEM columns)" if res.plan.is_sm100 else "")
              + f", spills {asm.spill_store_bytes}+{asm.spill_load_bytes} B, "
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
    for name in _configs(args):
        r = run_one(name, m, n, k)
        print(json.dumps(r) if args.json else
              f"{name} {m}x{n}x{k}: rel error {r['rel_err']:.2e}, {r['ms']:.3f} ms, {r['tflops']:.1f} TFLOP/s")
        if not r["rel_err"] < 1e-2:
            print(f"{name}: relative error {r['rel_err']} >= 1e-2", file=sys.stderr)
            return 1
    return 0


def cmd_bench(args) -> int:
    from .bench import bench

    bench(_configs(args), args.shape or [_shape(s) for s in DEFAULT_SHAPES], warmup=args.warmup, iters=args.iters,
          json_path=args.json)
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

    r = with_config(sub.add_parser("run", help="one shape on the GPU, checked against torch"))
    r.add_argument("--shape", type=_shape, required=True)
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=cmd_run)

    be = with_config(sub.add_parser("bench", help="configs x shapes vs torch.matmul (same process)"))
    be.add_argument("--shape", type=_shape, action="append")
    be.add_argument("--warmup", type=int, default=10)
    be.add_argument("--iters", type=int, default=50)
    be.add_argument("--json", help="write the rows as JSON here")
    be.set_defaults(fn=cmd_bench)

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
