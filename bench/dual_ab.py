"""A/B of dual-GEMM (SwiGLU) configs through the public call, alternating call by call (device only).

``PYTHONPATH=$PWD python3 bench/dual_ab.py --config A --config B --shape MxNxK ... [--runs 5] [--iters 30]``: per
shape, each config's ``ptxgen.dual_gemm(a, b1, b2, out=d, config=...)`` timed with CUDA events, the sides alternating
(A B, then B A) on four input sets rotated per call; prints each side's median over runs of the per-run median, its
min-max, and B's time relative to A.  The sides' outputs are first compared (a config change that moves the result
is not an A/B).  bench/ab.py is its GEMM twin (prepared launches, IR rewrites).
"""
import argparse
import statistics as st

import torch

import ptxgen
from ptxgen.cli import _shape as shape  # the CLI's MxNxK parser and its errors


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", action="append", required=True, help="shipped name or YAML path; the first is A")
    p.add_argument("--shape", action="append", type=shape, required=True)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in args.shape:
        sets = [tuple((torch.randn(r, k, device="cuda", generator=g) * k ** -0.25).bfloat16() for r in (m, n, n))
                for _ in range(4)]
        outs = [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in args.config]
        for cfg, out in zip(args.config, outs):
            ptxgen.dual_gemm(*sets[0], out=out, config=cfg)
        torch.cuda.synchronize()
        for cfg, out in zip(args.config[1:], outs[1:]):
            if not torch.equal(out, outs[0]):
                raise SystemExit(f"{m}x{n}x{k}: {cfg} computes a different D than {args.config[0]}")
        runs = {c: [] for c in args.config}
        for _ in range(args.runs):
            times = {c: [] for c in args.config}
            for it in range(args.iters):
                for cfg in args.config if it % 2 == 0 else args.config[::-1]:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    ptxgen.dual_gemm(*sets[it % 4], out=outs[0], config=cfg)
                    end.record()
                    torch.cuda.synchronize()
                    times[cfg].append(start.elapsed_time(end))
            for cfg in args.config:
                runs[cfg].append(st.median(times[cfg]))
        base = st.median(runs[args.config[0]])
        for cfg in args.config:
            med = st.median(runs[cfg])
            print(f"{m}x{n}x{k} {cfg}: {med * 1e3:.1f} us [{min(runs[cfg]) * 1e3:.1f}-{max(runs[cfg]) * 1e3:.1f}] "
                  f"x{med / base:.3f}", flush=True)


if __name__ == "__main__":
    main()
