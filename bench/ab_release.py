"""A/B of the sm_90a consumer release on the GPU: one elected thread of warp 0 of each consumer warpgroup
arrives on ``empty`` (shipped; the other three warps skip the branch and reach the next ``wgmma`` first) against
one elected thread of *every* consumer warp arriving (``empty`` count x4, every warp runs the same instructions).

Both kernels come from the same config through an IR rewrite (``ptxgen.sim.rewrite``), are loaded with
``kernel_call`` and timed per call, interleaved, inputs rotated past L2.  One-CTA configs only (a CTA pair's
remote arrivals would need the peer's count changed too).  Usage: PYTHONPATH=$PWD python3 bench/ab_release.py
"""
import argparse
from dataclasses import replace

import torch

from ptxgen.bench import _random_bf16, input_sets_needed, time_interleaved, warm_gpu
from ptxgen.build import build
from ptxgen.ir import expr as ex
from ptxgen.ir import ops as O
from ptxgen.runtime import driver
from ptxgen.runtime.api import kernel_call
from ptxgen.sim.rewrite import rewrite

CASES = [("h100_128x144", 4096, 576, 7168), ("h100_256x128", 4096, 4096, 7168), ("h100_256x128", 8192, 8192, 8192)]
WARP_IN_WG_IS_0 = ex.Bin("eq", ex.Bin("mod", ex.Sreg("warp"), ex.Const(4)), ex.Const(0))


def per_warp_release(kernel):
    def fn(op):
        if isinstance(op, O.MbarrierInit) and op.bar.name == "empty":
            return replace(op, count=ex.Const(op.count.value * 4))
        if (isinstance(op, O.If) and op.cond == WARP_IN_WG_IS_0 and len(op.then) == 1 and isinstance(op.then[0], O.Elect)
                and all(isinstance(x, O.MbarrierArrive) and x.bar.name == "empty" for x in op.then[0].body)):
            return op.then  # every warp's elected lane arrives
        return None
    return rewrite(kernel, fn)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=150)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    for name, m, n, k in CASES:
        shipped = build(name).kernel
        assert shipped.cluster_size == 1
        variant = per_warp_release(shipped)
        assert variant != shipped
        free, _ = torch.cuda.mem_get_info(dev)
        sets = input_sets_needed(2 * (m * k + n * k + 2 * m * n), info.l2_bytes, free)
        a = [_random_bf16(m, k, dev) for _ in range(sets)]
        b = [_random_bf16(n, k, dev) for _ in range(sets)]
        d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
        calls = {"warp0": kernel_call(shipped, a[0], b[0], d[0]), "every_warp": kernel_call(variant, a[0], b[0], d[0])}
        ref = a[0].float() @ b[0].float().T
        for label, call in calls.items():
            d[0].fill_(float("nan"))
            call(a[0], b[0], d[0])
            torch.cuda.synchronize()
            err = ((d[0].float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{label}: rel err {err}"
        for r in range(args.repeat):
            t = time_interleaved({lb: (lambda i, c=c: c(a[i], b[i], d[i])) for lb, c in calls.items()}, sets,
                                 warmup=10, iters=args.iters)
            print(f"{name} {m}x{n}x{k} run {r}: warp0 {t['warp0']:.4f} ms, every_warp {t['every_warp']:.4f} ms, "
                  f"every/warp0 {t['every_warp'] / t['warp0']:.4f}", flush=True)
        del a, b, d
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
