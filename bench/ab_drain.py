"""A/B of the epilogue's exit drain on the GPU: ``cp.async.bulk.wait_group.read 0`` (shipped) against
``cp.async.bulk.wait_group 0`` (the drain before session 16), same kernel otherwise, same process, same inputs.

Both kernels are loaded with ``ptxgen.runtime.api.kernel_call`` and timed per call, interleaved, inputs rotated
past L2 (``ptxgen.bench.time_interleaved``).  Usage: PYTHONPATH=$PWD python3 bench/ab_drain.py [--iters N]
"""
import argparse
from dataclasses import replace

import torch

from ptxgen.bench import _random_bf16, input_sets_needed, time_interleaved, warm_gpu
from ptxgen.build import build
from ptxgen.ir import ops as O
from ptxgen.runtime import driver
from ptxgen.runtime.api import kernel_call
from ptxgen.sim.rewrite import rewrite

CASES = [("h100_256x128", 8192, 8192, 8192), ("h100_128x256", 4096, 4096, 4096), ("h100_128x256", 4096, 4096, 7168),
         ("h100_192x176", 4096, 2112, 7168)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=100)
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    for name, m, n, k in CASES:
        shipped = build(name).kernel
        old = rewrite(shipped, lambda op: replace(op, read=False) if isinstance(op, O.BulkWaitGroup) and op.n == 0 else None)
        assert old != shipped, "no drain to rewrite"
        free, _ = torch.cuda.mem_get_info(dev)
        sets = input_sets_needed(2 * (m * k + n * k + 2 * m * n), info.l2_bytes, free)
        a = [_random_bf16(m, k, dev) for _ in range(sets)]
        b = [_random_bf16(n, k, dev) for _ in range(sets)]
        d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
        calls = {"read": kernel_call(shipped, a[0], b[0], d[0]), "full": kernel_call(old, a[0], b[0], d[0])}
        ref = a[0].float() @ b[0].float().T
        for label, call in calls.items():
            call(a[0], b[0], d[0])
            torch.cuda.synchronize()
            err = ((d[0].float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{label}: rel err {err}"
        t = time_interleaved({label: (lambda i, c=call: c(a[i], b[i], d[i])) for label, call in calls.items()}, sets,
                             warmup=10, iters=args.iters)
        print(f"{name} {m}x{n}x{k}: wait_group.read 0 {t['read']:.4f} ms, wait_group 0 {t['full']:.4f} ms, "
              f"full/read {t['full'] / t['read']:.4f}", flush=True)
        del a, b, d
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
