"""The pair's last-wave k-loop, measured: timings and one ncu launch per config (device only).

``time``: CUDA-graph replays (:func:`kscan.graph_ms`, input sets rotated) of each ``--config`` and torch.matmul on
each ``--shape``; one JSON row per shape, ms per call.  ``ncu``: every config warmed up outside the profiler range,
then one launch of each config per shape inside ``cudaProfilerStart/Stop`` (run under
``ncu --profile-from-start off``), in the order shapes x configs.  Usage:
  PYTHONPATH=$PWD python3 bench/lastwave_ncu.py time --shape 1024x5120x16384 --config h100_128x128_c2 ... [--json F]
  ncu --profile-from-start off ... python3 bench/lastwave_ncu.py ncu --shape 1024x5120x16384 --config ...
"""
import argparse
import json

import torch

import ptxgen
from kscan import graph_ms


def operands(shape: str, sets: int) -> tuple[list, list, list]:
    """``sets`` fresh (A, B, out) triples for ``MxNxK``: A M x K, B N x K, bf16 random; out M x N NaN."""
    m, n, k = map(int, shape.split("x"))
    a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    b = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    out = [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    return a, b, out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["time", "ncu"])
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--iters", type=int, default=11)
    p.add_argument("--sets", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    if args.mode == "ncu":
        launches = []
        for shape in args.shape:
            a, b, out = operands(shape, 1)
            for cfg in args.config:
                fn = (lambda a=a[0], b=b[0], out=out[0], cfg=cfg: ptxgen.gemm(a, b, out, config=cfg))
                for _ in range(3):
                    fn()
                launches.append(fn)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for fn in launches:
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return
    rows = []
    for shape in args.shape:
        a, b, out = operands(shape, args.sets)
        row = {"shape": shape}
        for cfg in args.config:
            ref = torch.matmul(a[0].float(), b[0].float().T)
            ptxgen.gemm(a[0], b[0], out[0], config=cfg)
            row[f"relerr:{cfg}"] = float(((out[0].float() - ref).norm() / ref.norm()).item())
            del ref
            row[f"ours:{cfg}"] = graph_ms(lambda i, cfg=cfg: ptxgen.gemm(a[i], b[i], out[i], config=cfg),
                                          args.reps, args.iters, args.sets)
        row["torch"] = graph_ms(lambda i: torch.matmul(a[i], b[i].T, out=out[i]), args.reps, args.iters, args.sets)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
