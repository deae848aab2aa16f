"""Fused SwiGLU dual GEMM vs torch, through the public API, in one process on the same inputs.

    PYTHONPATH=$PWD python3 bench/dual_bench.py [--json out.json] [--iters 30] [--runs 5]
                                                [--suite swiglu --half report] [--shapes 0,2] [--config NAME]

Per shape (M x N x K): torch unfused ``F.silu(a @ b1.T) * (a @ b2.T)``, torch with one concatenated weight
(``a @ w.T`` with ``w = [b1; b2]`` of ``[2N, K]`` prepared once, then silu * mul on the halves), and
``ptxgen.dual_gemm(a, b1, b2, out=out)`` (config chosen by shape, host overhead included).  Each time is the
median over ``--runs`` separate runs of each run's median of ``--iters`` CUDA-event intervals around one call
(after ``--warmup`` calls), the three sides timed in alternating rounds (``ptxgen.bench.time_interleaved``); the
spread (lowest-highest ratio over the runs) is printed and stored.  Input sets are rotated so that the bytes
touched between two uses of a set exceed 2x the L2 size.  ``--suite swiglu`` times a half of the shipped SwiGLU
suite (default: the report half) instead of the eight shapes below.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F

import ptxgen
from ptxgen.bench import time_interleaved, warm_gpu
from ptxgen.runtime import driver
from ptxgen.runtime.choose import choose

SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096), (16384, 14336, 4096), (8192, 28672, 8192),
          (256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    # a single run of 30 calls moved the geomean of the 70-100 us shapes from 1.20x to 1.06x (docs/performance.md,
    # "SwiGLU dual GEMM"): five runs of 30, each alternating call by call, report their median and spread
    ap.add_argument("--iters", type=int, default=30, help="timed calls per side and run")
    ap.add_argument("--runs", type=int, default=5, help="separate runs per shape (median and spread reported)")
    ap.add_argument("--suite", help="time a half of a shipped suite (swiglu) instead of the eight shapes")
    ap.add_argument("--half", choices=("report", "tune", "all"), default="report")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--shapes", default="all", help="indices into the shape list, e.g. 0,2,3 (default all)")
    ap.add_argument("--config", action="append", help="time these configs instead of the chosen one (repeatable)")
    args = ap.parse_args()
    if args.iters < 1 or args.runs < 1:
        ap.error("--iters and --runs must be >= 1")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    info = driver.device_info(0)
    name = torch.cuda.get_device_name(0)
    rows = []
    print(f"device: {name}, {info.sm_count} SMs, L2 {l2 >> 20} MiB")
    print(f"{'M':>6} {'N':>6} {'K':>6} {'config':>22} {'unfused ms':>10} {'concat ms':>10} {'ptxgen ms':>10} "
          f"{'vs unfused':>10} {'vs concat':>10} {'rel err':>8} {'TFLOP/s':>8}")
    listed = SHAPES
    if args.suite:
        from ptxgen.suites import load

        listed = [s.mnk for s in load(args.suite).half(args.half)]
    shapes = listed if args.shapes == "all" else [listed[int(i)] for i in args.shapes.split(",")]
    warm_gpu()
    for m, n, k in shapes:
        set_bytes = 2 * (m * k + 2 * n * k + m * n)
        nsets = max(1, min(8, math.ceil(2 * l2 / set_bytes)))
        gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
        sets = []
        for _ in range(nsets):
            a = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).bfloat16()
            b1 = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25).bfloat16()
            b2 = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25).bfloat16()
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            sets.append((a, b1, b2, out))
        cat = [torch.cat([b1, b2]) for _, b1, b2, _ in sets]
        weights = {id(s[1]): w for s, w in zip(sets, cat)}

        def unfused_call(i):
            a, b1, b2, _ = sets[i]
            return F.silu(a @ b1.T) * (a @ b2.T)

        def concat_call(i):
            a, b1, _, _ = sets[i]
            h = a @ weights[id(b1)].T
            return F.silu(h[:, :n]) * h[:, n:]

        a, b1, b2, out = sets[0]
        ref = F.silu(a.float() @ b1.float().T) * (a.float() @ b2.float().T)
        for cfg in args.config or [choose(m, n, k, info, "dual_gemm")]:
            runs = [time_interleaved({"unfused": unfused_call, "concat": concat_call,
                                      "ours": lambda i: ptxgen.dual_gemm(*sets[i], config=cfg)},
                                     len(sets), warmup=args.warmup, iters=args.iters, queue_ahead=False)
                    for _ in range(args.runs)]
            unfused, concat_ms, ours = (statistics.median(r[side] for r in runs) for side in ("unfused", "concat", "ours"))
            spread = [r["unfused"] / r["ours"] for r in runs]
            ptxgen.dual_gemm(a, b1, b2, out=out, config=cfg)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            tflops = 4 * m * n * k / (ours * 1e-3) / 1e12
            label = cfg if isinstance(cfg, str) else cfg.name  # the chooser may return a split-K variant (Config)
            rows.append(dict(m=m, n=n, k=k, config=label, unfused_ms=unfused, concat_ms=concat_ms, ptxgen_ms=ours,
                             speedup_vs_unfused=statistics.median(spread), speedup_vs_concat=concat_ms / ours,
                             speedup_vs_unfused_min=min(spread), speedup_vs_unfused_max=max(spread), rel_err=err,
                             tflops=tflops, runs=runs))
            print(f"{m:>6} {n:>6} {k:>6} {label[-22:]:>22} {unfused:>10.3f} {concat_ms:>10.3f} {ours:>10.3f} "
                  f"{rows[-1]['speedup_vs_unfused']:>10.3f} {concat_ms / ours:>10.3f} {err:>8.1e} {tflops:>8.0f}"
                  f"   runs {min(spread):.3f}-{max(spread):.3f}")
        del sets, cat
        torch.cuda.empty_cache()
    # the summary is of one config per shape (the first --config, or the chosen one); the JSON keeps every row
    first = [r for r in rows if r["config"] == args.config[0]] if args.config else rows
    geo = math.exp(sum(math.log(r["speedup_vs_unfused"]) for r in first) / len(first))
    geo_c = math.exp(sum(math.log(r["speedup_vs_concat"]) for r in first) / len(first))
    print(f"geomean speedup vs unfused {geo:.3f}x, vs concat {geo_c:.3f}x, "
          f"min vs unfused {min(r['speedup_vs_unfused'] for r in first):.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "suite": args.suite, "half": args.half if args.suite else None, "runs": args.runs,
                       "iters": args.iters, "rows": rows, "geomean_vs_unfused": geo, "geomean_vs_concat": geo_c},
                      f, indent=2)


if __name__ == "__main__":
    main()
