"""Row pitch of the operands against kernel speed (device only).

For each shape and ``--config``, times the public call ``ptxgen.gemm(a, b, out=d, config=...)`` on the same values
held at different row pitches (elements between rows):

  contig   A and B contiguous (pitch K)
  padAB    A and B views of buffers whose pitch is K rounded up to 64 (128 bytes)
  padA     only A at the 128-byte pitch;  padB: only B
  stageAB  per call, A and B copied into 128-byte-pitch buffers, then the call on them (what a staging copy costs)
  stageA   per call, only A copied (B read in place);  stageB: only B copied

and ``torch.matmul(a, b.T, out=d)`` on the contiguous operands, all alternating call by call
(``ptxgen.bench.time_interleaved``), ``--repeat`` times.  Every side is checked once against an fp32 reference.

Usage: PYTHONPATH=$PWD python3 bench/pitch.py --shape MxNxK ... --config C ... [--repeat 3] [--iters 20] [--json F]
"""
import argparse
import json
import math
import statistics

import torch

import ptxgen
from ptxgen.bench import _random_bf16, input_sets_needed, relative_error, time_interleaved, warm_gpu
from ptxgen.runtime import driver


def padded(t: torch.Tensor, multiple: int = 64) -> torch.Tensor:
    """``t`` ``[rows, K]`` copied into a buffer of pitch ``K`` rounded up to ``multiple``; the ``[rows, K]`` view."""
    rows, k = t.shape
    buf = torch.zeros(rows, -(-k // multiple) * multiple, dtype=t.dtype, device=t.device)
    buf[:, :k].copy_(t)
    return buf[:, :k]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--variant", action="append", help="only these variants (default: all)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json")
    args = p.parse_args()
    warm_gpu()
    dev = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(dev.index)
    doc = {"device": torch.cuda.get_device_name(dev), "rows": []}
    for shape in args.shape:
        m, n, k = map(int, shape.split("x"))
        free, _ = torch.cuda.mem_get_info(dev)
        n_sets = input_sets_needed(4 * (m * k + n * k + m * n), info.l2_bytes, free)
        a = [_random_bf16(m, k, dev) for _ in range(n_sets)]
        b = [_random_bf16(n, k, dev) for _ in range(n_sets)]
        ap = [padded(t) for t in a]
        bp = [padded(t) for t in b]
        sa = [torch.empty(m, -(-k // 64) * 64, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        sb = [torch.empty(n, -(-k // 64) * 64, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        ref = a[0].float() @ b[0].float().T
        fns = {"torch": lambda i: torch.matmul(a[i], b[i].T, out=d[i])}

        def stage(i, c, which="AB"):
            x, y = a[i], b[i]
            if "A" in which:
                sa[i][:, :k].copy_(a[i])
                x = sa[i][:, :k]
            if "B" in which:
                sb[i][:, :k].copy_(b[i])
                y = sb[i][:, :k]
            return ptxgen.gemm(x, y, out=d[i], config=c)

        for c in args.config:
            label = c.split("/")[-1].removesuffix(".yaml")
            variants = {"contig": lambda i, c=c: ptxgen.gemm(a[i], b[i], out=d[i], config=c),
                        "padAB": lambda i, c=c: ptxgen.gemm(ap[i], bp[i], out=d[i], config=c),
                        "padA": lambda i, c=c: ptxgen.gemm(ap[i], b[i], out=d[i], config=c),
                        "padB": lambda i, c=c: ptxgen.gemm(a[i], bp[i], out=d[i], config=c),
                        "stageAB": lambda i, c=c: stage(i, c),
                        "stageA": lambda i, c=c: stage(i, c, "A"), "stageB": lambda i, c=c: stage(i, c, "B")}
            if k % 64 == 0:
                variants = {"contig": variants["contig"]}
            elif args.variant:
                variants = {v: fn for v, fn in variants.items() if v in args.variant}
            for v, fn in variants.items():
                d[0].fill_(math.nan)
                fn(0)
                torch.cuda.synchronize()
                err = relative_error(d[0], ref)
                assert err < 1e-2, f"{label} {v} {shape}: rel err {err}"
                fns[f"{label}:{v}"] = fn
        del ref
        runs = {label: [] for label in fns}
        for _ in range(args.repeat):
            for label, ms in time_interleaved(fns, n_sets, warmup=3, iters=args.iters).items():
                runs[label].append(ms)
        t_torch = statistics.median(runs["torch"])
        row = {"m": m, "n": n, "k": k, "sides": {label: {"ms": statistics.median(v), "runs": v,
                                                         "ratio": t_torch / statistics.median(v)}
                                                 for label, v in runs.items()}}
        doc["rows"].append(row)
        print(f"{shape}: torch {t_torch:.4f} ms; " + ", ".join(
            f"{s} {v['ms']:.4f} [{min(v['runs']):.4f}-{max(v['runs']):.4f}] ({v['ratio']:.2f}x)"
            for s, v in row["sides"].items() if s != "torch"), flush=True)
        del a, b, ap, bp, sa, sb, d, fns
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
