"""Which cuBLAS kernel torch.matmul(a, b.T) runs for each default bench shape, or each ``--shape`` (device only).

Prints the kernel name (nvjet / sm90_xmma names encode tile, stages, cluster and schedule) and its
CUDA time, from torch.profiler, so our tile choice can be compared with cuBLAS's.
Usage: PYTHONPATH=$PWD python3 bench/cublas_kernels.py [--shape MxNxK ...] [--json F]
"""
import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile

from ptxgen.bench import DEFAULT_SHAPES


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable; default: the bench's shapes)")
    p.add_argument("--json")
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] or DEFAULT_SHAPES
    rows = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(a, b.T)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                torch.matmul(a, b.T)
            torch.cuda.synchronize()
        for ev in prof.key_averages():
            if ev.device_type.name == "CUDA":
                us = ev.device_time_total / max(ev.count, 1)
                rows.append({"shape": [m, n, k], "kernel": ev.key, "us": us, "count": ev.count})
                print(f"{m}x{n}x{k}: {us:9.1f} us x{ev.count}  {ev.key}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
