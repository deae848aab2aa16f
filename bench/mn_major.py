"""Transposed operands through the public call (device only): MN-major reads against the staging copy and torch.

A user with a row-major ``[K, N]`` weight ``w`` computes ``x @ w``: ``ptxgen.gemm(x, w.T)``, whose B is the
transposed view (rows contiguous).  For each shape and layout (``b``: B = ``w.T``; ``a``: A = ``x_t.T`` of a
row-major ``[K, M]``; ``ab``: both) this times, alternating call by call (``ptxgen.bench.time_interleaved``),
inputs rotated past L2:

  torch    ``torch.matmul`` on the same views (cuBLAS takes the transpose as an operation flag)
  mn       ``ptxgen.gemm`` on the views: the config's MN-major variant reads them in place
  copy     the views copied to row-major ``[rows, K]`` tensors, then ``ptxgen.gemm``: what the staging path did
  kmajor   ``ptxgen.gemm`` on row-major operands holding the same values (the kernel without the layout change)

``--kernel dual``: the SwiGLU ``silu(x @ w1) * (x @ w2)`` with ``w1``, ``w2`` row-major ``[K, N]``:
``ptxgen.dual_gemm(x, w1.T, w2.T)`` (``b``: both B transposed views) against torch unfused on the same views, the
copies and the row-major kernel, the SwiGLU shapes by default.

``--repeat`` runs of ``--iters`` calls each; per side the median of the run medians and their spread.  Every side
is checked once against an fp32 reference (NaN-poisoned ``out``, relative Frobenius error < 1e-2).

Usage: PYTHONPATH=$PWD python3 bench/mn_major.py [--kernel gemm|dual] [--shape MxNxK ...] [--layout b|a|ab ...]
       [--repeat 5] [--iters 20] [--json F]
"""
import argparse
import json
import math
import statistics

import torch

import ptxgen
from ptxgen.bench import _random_bf16, geomean, input_sets_needed, relative_error, time_interleaved, warm_gpu
from ptxgen.runtime import api, driver

#: LLM projections at decode, prefill-chunk and prefill M (the GEMM suite's model shapes, N and K multiples of 8)
DEFAULT_SHAPES = ("64x8192x8192", "128x14336x4096", "256x4096x14336", "1024x28672x8192", "4096x4096x4096",
                  "4096x14336x4096", "8192x8192x8192", "2048x6144x4096")
#: SwiGLU gate/up projections (Llama-3 8B and 70B, Qwen2.5-7B) at decode, prefill-chunk and prefill M
DUAL_SHAPES = ("64x14336x4096", "256x14336x4096", "1024x14336x4096", "4096x14336x4096", "128x28672x8192",
               "4096x18944x3584")


def transposed(t: torch.Tensor) -> torch.Tensor:
    """The same ``[rows, K]`` values as the transposed view of a row-major ``[K, rows]`` tensor."""
    return t.T.contiguous().T


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kernel", choices=("gemm", "dual"), default="gemm")
    p.add_argument("--shape", action="append")
    p.add_argument("--layout", action="append", choices=("a", "b", "ab"))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json")
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    dual = args.kernel == "dual"
    doc = {"device": torch.cuda.get_device_name(dev), "kernel": args.kernel, "repeat": args.repeat,
           "iters": args.iters, "rows": []}
    for layout in args.layout or ("b",):
        for shape in args.shape or (DUAL_SHAPES if dual else DEFAULT_SHAPES):
            m, n, k = map(int, shape.split("x"))
            free, _ = torch.cuda.mem_get_info(dev)
            nb = 2 if dual else 1
            n_sets = input_sets_needed(4 * (m * k + nb * n * k + m * n), info.l2_bytes, free)
            a = [_random_bf16(m, k, dev) for _ in range(n_sets)]
            b = [[_random_bf16(n, k, dev) for _ in range(nb)] for _ in range(n_sets)]
            av = [transposed(t) if "a" in layout else t for t in a]
            bv = [[transposed(t) if "b" in layout else t for t in bs] for bs in b]
            d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
            if dual:
                def swiglu(i):
                    gate = torch.matmul(av[i], bv[i][0].T)
                    return torch.mul(torch.nn.functional.silu(gate), torch.matmul(av[i], bv[i][1].T), out=d[i])
                fns = {"torch": swiglu,
                       "mn": lambda i: ptxgen.dual_gemm(av[i], *bv[i], out=d[i]),
                       "copy": lambda i: ptxgen.dual_gemm(av[i].contiguous(), *(t.contiguous() for t in bv[i]), out=d[i]),
                       "kmajor": lambda i: ptxgen.dual_gemm(a[i], *b[i], out=d[i])}
                ref = (torch.nn.functional.silu(a[0].float() @ b[0][0].float().T)
                       * (a[0].float() @ b[0][1].float().T))
            else:
                fns = {"torch": lambda i: torch.matmul(av[i], bv[i][0].T, out=d[i]),
                       "mn": lambda i: ptxgen.gemm(av[i], bv[i][0], out=d[i]),
                       "copy": lambda i: ptxgen.gemm(av[i].contiguous(), bv[i][0].contiguous(), out=d[i]),
                       "kmajor": lambda i: ptxgen.gemm(a[i], b[i][0], out=d[i])}
                ref = a[0].float() @ b[0][0].float().T
            for side, fn in fns.items():
                d[0].fill_(math.nan)
                fn(0)
                torch.cuda.synchronize()
                err = relative_error(d[0], ref)
                assert err < 1e-2, f"{side} {layout} {shape}: rel err {err}"
            del ref
            key = api._signature(av[0], bv[0][0], d[0], None)
            if dual:
                b2 = bv[0][1]
                key += (b2.dtype, b2.shape, b2.stride(), b2.device)
            call = api._calls.get(key)
            config = call.loaded.spec.name if call is not None and hasattr(call, "loaded") else "?"
            runs: dict[str, list[float]] = {s: [] for s in fns}
            for _ in range(args.repeat):
                for side, ms in time_interleaved(fns, n_sets, warmup=3, iters=args.iters).items():
                    runs[side].append(ms)
            med = {s: statistics.median(v) for s, v in runs.items()}
            row = {"m": m, "n": n, "k": k, "layout": layout, "config": config,
                   "sides": {s: {"ms": med[s], "min": min(v), "max": max(v), "runs": v} for s, v in runs.items()},
                   "torch_over_mn": med["torch"] / med["mn"], "copy_over_mn": med["copy"] / med["mn"],
                   "kmajor_over_mn": med["kmajor"] / med["mn"],
                   "torch_over_mn_runs": [t / o for t, o in zip(runs["torch"], runs["mn"])]}
            doc["rows"].append(row)
            print(f"{layout} {shape} [{config}]: torch {med['torch']:.4f} mn {med['mn']:.4f} "
                  f"[{min(runs['mn']):.4f}-{max(runs['mn']):.4f}] copy {med['copy']:.4f} kmajor {med['kmajor']:.4f} | "
                  f"torch/mn {row['torch_over_mn']:.3f} copy/mn {row['copy_over_mn']:.3f} "
                  f"kmajor/mn {row['kmajor_over_mn']:.3f}", flush=True)
            del a, b, av, bv, d, fns
            torch.cuda.empty_cache()
    for layout in args.layout or ("b",):
        rows = [r for r in doc["rows"] if r["layout"] == layout]
        doc[f"geomean_{layout}"] = {key: geomean(r[key] for r in rows)
                                    for key in ("torch_over_mn", "copy_over_mn", "kmajor_over_mn")}
        print(f"{layout}: geomean " + ", ".join(f"{key} {v:.3f}" for key, v in doc[f"geomean_{layout}"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
