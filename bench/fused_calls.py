"""Where a fused call's time goes at small M: host time per call, GPU time per call and one synchronized call, for
the plain GEMM, three fused expressions and torch (matmul; matmul + residual), on a few shapes.

    PYTHONPATH=$PWD python3 bench/fused_calls.py [--shape 64x2112x7168 ...] [--calls 200]

Per side: 20 warm-up calls; then ``--calls`` back-to-back calls queued behind a ``torch.cuda._sleep`` kernel long
enough to hold them all (host: ``perf_counter`` over the loop / calls; GPU: CUDA events around the loop / calls, the
queue never empty); then 50 calls each between two events and a synchronize (median: host path plus kernel, the
GPU idle before each).  The count of full fused-call checks (``api.check_epilogue_operands``) during the timing shows
whether the calls took the per-signature fast path (0).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import ptxgen
from ptxgen.runtime import api

SHAPES = ["64x2112x7168", "128x6144x4096", "16x5120x2880", "4096x4096x4096"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", help="MxNxK (repeatable); default: four shapes")
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    checks = {"full": 0}
    full_check = api.check_epilogue_operands

    def counting(*a, **k):
        checks["full"] += 1
        return full_check(*a, **k)

    api.check_epilogue_operands = counting
    print(f"device: {torch.cuda.get_device_name(0)}; us per call")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shape or SHAPES:
        m, n, k = (int(x) for x in shape.split("x"))
        a = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        b = torch.randn(n, k, device="cuda", generator=gen).bfloat16()
        out = torch.empty(m, n, device="cuda").bfloat16()
        r = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
        bias = torch.randn(n, device="cuda", generator=gen).bfloat16()
        sides = {"ptxgen plain": lambda: ptxgen.gemm(a, b, out=out),
                 "ptxgen acc + residual": lambda: ptxgen.gemm(a, b, out=out, epilogue="acc + residual", residual=r),
                 "ptxgen gelu(acc + bias[col])": lambda: ptxgen.gemm(a, b, out=out, epilogue="gelu(acc + bias[col])",
                                                                     bias=bias),
                 "ptxgen acc * 1.0": lambda: ptxgen.gemm(a, b, out=out, epilogue="acc * 1.0"),
                 "torch.matmul(out=)": lambda: torch.matmul(a, b.T, out=out),
                 "torch matmul + residual": lambda: torch.matmul(a, b.T) + r}
        for fn in sides.values():
            for _ in range(20):
                fn()
        torch.cuda.synchronize()
        before = checks["full"]
        print(f"{m}x{n}x{k}")
        for name, fn in sides.items():
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(250_000 * args.calls)  # ~125 us per call at ~2 GHz: more than any side's host path
            t0 = time.perf_counter()
            e0.record()
            for _ in range(args.calls):
                fn()
            e1.record()
            host = (time.perf_counter() - t0) / args.calls * 1e6
            torch.cuda.synchronize()
            gpu = e0.elapsed_time(e1) / args.calls * 1e3
            one = []
            for _ in range(50):
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                one.append(e0.elapsed_time(e1) * 1e3)
            print(f"  {name:<30} host {host:6.1f}  GPU {gpu:7.1f}  one synchronized call {statistics.median(one):7.1f}")
        print(f"  full fused-call checks while timing: {checks['full'] - before}")


if __name__ == "__main__":
    main()
