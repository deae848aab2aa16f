"""Kernel time against K at fixed M, N: fixed per-tile cost vs per-k-block cost (device only).

Each side is timed as CUDA-graph replays of ``--reps`` back-to-back calls (no host time in it), so short
kernels are not host-bound.  A least-squares line t = a + b * k_blocks per side splits the time into a
per-launch + per-tile part (a) and the mainloop (b).  Usage:
  PYTHONPATH=$PWD python3 bench/kscan.py --mn 4096x4096 --config h100_128x256 [--json F]
"""
import argparse
import json
import statistics

import torch

import ptxgen


def graph_ms(fn, reps: int, iters: int, sets: int = 1) -> float:
    """Median ms per call of ``fn(i % sets)`` over CUDA-graph replays of ``reps`` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i % sets)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fn(i % sets)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mn", default="4096x4096")
    p.add_argument("--config", action="append")
    p.add_argument("--ks", default="64,128,256,512,1024,2048,4096")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--sets", type=int, default=1, help="input sets rotated through (1: the same inputs every call)")
    p.add_argument("--json")
    args = p.parse_args()
    m, n = map(int, args.mn.split("x"))
    ks = [int(x) for x in args.ks.split(",")]
    rows = []
    sides = {f"ours:{c}": c for c in args.config or ["h100_128x256"]}
    sides["torch"] = None
    for k in ks:
        a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(args.sets)]
        b = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(args.sets)]
        out = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(args.sets)]
        row = {"m": m, "n": n, "k": k}
        for label, cfg in sides.items():
            if cfg is None:
                row[label] = graph_ms(lambda i: torch.matmul(a[i], b[i].T, out=out[i]), args.reps, args.iters, args.sets)
            else:
                row[label] = graph_ms(lambda i, cfg=cfg: ptxgen.gemm(a[i], b[i], out[i], config=cfg), args.reps, args.iters,
                                      args.sets)
        rows.append(row)
        print(" ".join(f"{key}={val:.4f}" if isinstance(val, float) else f"{key}={val}" for key, val in row.items()),
              flush=True)
    for label in sides:
        xs = [r["k"] / 64 for r in rows]
        ys = [r[label] * 1000 for r in rows]  # us
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        print(f"{label}: t = {my - slope * mx:.2f} us + {slope:.3f} us per k-block (of 64)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
