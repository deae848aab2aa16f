"""A/B/n of configs on the GPU without torch in the loop: prepared launches of every config timed in
alternating rounds on the same rotated inputs, so clock and thermal drift hit all alike and the ratio between
two kernels is steadier than two separate ratios to torch (device only).

Usage: PYTHONPATH=$PWD python3 bench/ab.py --config BASE --config OTHER ... --shape MxNxK ... [--iters N] [--repeat R]
Prints, per shape, each config's median ms and its time relative to the first config (< 1: faster), R times.
"""
import argparse
import math

import torch

from ptxgen.bench import _random_bf16, input_sets_needed, time_interleaved, warm_gpu
from ptxgen.runtime import driver, prepare


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    for shape in args.shape:
        m, n, k = map(int, shape.split("x"))
        free, _ = torch.cuda.mem_get_info(dev)
        sets = input_sets_needed(2 * (m * k + n * k + 2 * m * n), info.l2_bytes, free)
        a = [_random_bf16(m, k, dev) for _ in range(sets)]
        b = [_random_bf16(n, k, dev) for _ in range(sets)]
        d = [torch.full((m, n), math.nan, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
        launches = {c: [prepare(a[i], b[i], d[i], c) for i in range(sets)] for c in args.config}
        ref = a[0].float() @ b[0].float().T
        for c, ls in launches.items():
            d[0].fill_(math.nan)
            ls[0].launch()
            torch.cuda.synchronize()
            err = ((d[0].float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{c} {shape}: rel err {err}"
        for r in range(args.repeat):
            t = time_interleaved({c: (lambda i, ls=ls: ls[i].launch()) for c, ls in launches.items()}, sets,
                                 warmup=10, iters=args.iters)
            base = t[args.config[0]]
            print(f"{shape} run {r}: " + ", ".join(f"{c.split('/')[-1].removesuffix('.yaml')} {ms:.4f} ms ({ms / base:.3f})"
                                                   for c, ms in t.items()), flush=True)
        del a, b, d, launches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
