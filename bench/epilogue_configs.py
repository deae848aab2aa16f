"""Fused epilogues per config: the plain GEMM, ``gelu(acc + bias[col])`` and ``acc + residual`` on each candidate
config, and torch eager (cuBLAS, then the epilogue's ops), all interleaved in one process (device only).

    PYTHONPATH=$PWD python3 bench/epilogue_configs.py [--json out.json] [--runs 7] [--iters 20] [--smi smi.csv]

``bench/epilogue_bench.py`` times its cases one after another, so two cases of one shape sit in different windows of
the H100's power cap (docs/grouped.md, "The baseline: the power cap") and a comparison across cases carries that
drift.  Here every side of a shape (config x expression, and torch's three) is one entry of the same
``ptxgen.bench.time_interleaved`` run (one call per round, the order reversed every round), on input sets rotated
past 2x L2, ``--runs`` times; each side's time is the median over the runs of the per-run medians, with the spread
(max - min over the runs), and each ratio is the median over the runs of that run's ratio (paired).  Every side is
first checked once against an fp32 reference on a NaN-poisoned D (relative Frobenius error).

Candidates (:data:`CANDIDATES`): the chooser's pick (``config=None``, the public call), the shipped tiles whose
TMA-store epilogue stages through ``stmatrix`` (so the residual is read through the CD staging ring), the
overlapped epilogue (``bench/configs/h100_128x256_ov.yaml``: its residual is read per fragment pair) and
``h100_128x256`` with 3 operand stages and 4 CD staging buffers (a whole warpgroup tile's residual boxes load under
the mainloop).  ``--blocks`` also times the chooser's three expressions against eager in separate blocks, one
case after another as ``bench/epilogue_bench.py`` does, on the first shape.  With ``--smi``, ``nvidia-smi`` samples
the SM clock, power and throttle reasons every 100 ms into that CSV while the timings run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess

import torch
import torch.nn.functional as F

import ptxgen
from ptxgen.bench import time_interleaved, warm_gpu
from ptxgen.config import load_config
from ptxgen.runtime import driver
from ptxgen.runtime.choose import choose

SHAPES = [(8192, 14336, 4096), (4096, 28672, 4096), (4096, 4096, 4096), (2048, 8192, 8192)]

#: side label -> config (None: the chooser's, the public call's default)
CANDIDATES = {
    "chosen": None,
    "256x128": "h100_256x128",
    "128x128_c2": "h100_128x128_c2",
    "128x256_ov": "bench/configs/h100_128x256_ov.yaml",
    "128x256_s3e4": load_config("h100_128x256").replace(**{"pipeline.stages": 3, "epilogue.stages": 4}),
}

#: expression label -> (ptxgen epilogue, torch eager of (a, b, x))
EXPRS = {
    "acc": (None, lambda a, b, x: a @ b.T),
    "gelu": ("gelu(acc + bias[col])", lambda a, b, x: F.gelu(a @ b.T + x["bias"], approximate="tanh")),
    "residual": ("acc + residual", lambda a, b, x: a @ b.T + x["residual"]),
}


def ours(config, expr: str | None):
    def call(a, b, x):
        if expr is None:
            return ptxgen.gemm(a, b, out=x["out"], config=config)
        ops = {"bias": x["bias"]} if "bias" in expr else {"residual": x["residual"]}
        return ptxgen.gemm(a, b, out=x["out"], config=config, epilogue=expr, **ops)
    return call


def make_set(m: int, n: int, k: int, gen) -> dict:
    s = k ** -0.25
    return {"a": (torch.randn(m, k, device="cuda", generator=gen) * s).bfloat16(),
            "b": (torch.randn(n, k, device="cuda", generator=gen) * s).bfloat16(),
            "bias": torch.randn(n, device="cuda", generator=gen).bfloat16(),
            "residual": torch.randn(m, n, device="cuda", generator=gen).bfloat16(),
            "out": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}


def rel_err(fn, eager, x) -> float:
    x["out"].fill_(float("nan"))
    got = fn(x["a"], x["b"], x).float()
    ref = eager(x["a"].float(), x["b"].float(), {k: v.float() for k, v in x.items()})
    return ((got - ref).norm() / ref.norm()).item()


def sides(x_sets: list, labels: list) -> dict:
    fns = {}
    for cand, expr_name in labels:
        expr, eager = EXPRS[expr_name]
        f = eager if cand == "eager" else ours(CANDIDATES[cand], expr)
        fns[f"{cand}/{expr_name}"] = (lambda i, f=f: f(x_sets[i]["a"], x_sets[i]["b"], x_sets[i]))
    return fns


def summarize(runs: list[dict], base: dict[str, str]) -> dict:
    """Per side: median (ms) and spread over the runs, and per side the median of the per-run ratio to the sides
    named in ``base`` (``{"vs_<name>": side}``: that side's time / this side's time, > 1 = this side faster)."""
    out = {}
    for side in runs[0]:
        v = [r[side] for r in runs]
        row = {"ms": statistics.median(v), "spread_ms": max(v) - min(v), "runs_ms": v}
        for key, ref in base.items():
            row[key] = statistics.median(r[ref] / r[side] for r in runs)
        out[side] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--smi", help="CSV of nvidia-smi samples (SM clock, power, throttle reasons) during the timings")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--shapes", default="all", help="indices into SHAPES, e.g. 0,1")
    ap.add_argument("--blocks", action="store_true", help="also the chooser's cases in separate blocks (first shape)")
    args = ap.parse_args()
    name = torch.cuda.get_device_name(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    smi = None
    if args.smi:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,"
                                "clocks_event_reasons.active", "--format=csv", "-lms", "100"],
                               stdout=open(args.smi, "w"), stderr=subprocess.DEVNULL)
    shapes = SHAPES if args.shapes == "all" else [SHAPES[int(i)] for i in args.shapes.split(",")]
    labels = [(c, e) for c in (*CANDIDATES, "eager") for e in EXPRS]
    doc = {"device": name, "runs": args.runs, "iters": args.iters, "shapes": [], "blocks": []}
    print(f"device: {name}; median of {args.runs} runs x median of {args.iters} calls, every side interleaved")
    warm_gpu()
    try:
        for m, n, k in shapes:
            gen = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
            probe = make_set(m, n, k, gen)
            set_bytes = sum(t.numel() * t.element_size() for t in probe.values())
            x_sets = [probe] + [make_set(m, n, k, gen) for _ in range(max(2, math.ceil(2 * l2 / set_bytes)) - 1)]
            fns = sides(x_sets, labels)
            errs = {}
            for cand, expr_name in labels:
                f = EXPRS[expr_name][1] if cand == "eager" else ours(CANDIDATES[cand], EXPRS[expr_name][0])
                errs[f"{cand}/{expr_name}"] = rel_err(f, EXPRS[expr_name][1], x_sets[0])
            chosen = choose(m, n, k, driver.device_info(0))
            runs = [time_interleaved(fns, len(x_sets), warmup=args.warmup, iters=args.iters, rounds=args.iters)
                    for _ in range(args.runs)]
            base = {"vs_chosen_acc": "chosen/acc", "vs_eager_acc": "eager/acc"}
            table = summarize(runs, base)
            for side, row in table.items():  # each expression against torch's same expression and its chosen side
                e = side.split("/")[1]
                row["vs_eager_same"] = statistics.median(r[f"eager/{e}"] / r[side] for r in runs)
                row["vs_chosen_same"] = statistics.median(r[f"chosen/{e}"] / r[side] for r in runs)
                row["rel_err"] = errs[side]
            doc["shapes"].append({"m": m, "n": n, "k": k, "chosen": chosen, "sets": len(x_sets), "sides": table})
            print(f"\n{m}x{n}x{k} (chosen: {chosen}; {len(x_sets)} input sets)")
            print(f"{'side':>24} {'ms':>8} {'spread':>7} {'vs chosen acc':>13} {'vs eager same':>13} "
                  f"{'vs chosen same':>14} {'rel err':>8}")
            for side, row in table.items():
                print(f"{side:>24} {row['ms']:8.4f} {row['spread_ms']:7.4f} {row['vs_chosen_acc']:13.3f} "
                      f"{row['vs_eager_same']:13.3f} {row['vs_chosen_same']:14.3f} {row['rel_err']:8.1e}", flush=True)
            if args.blocks and (m, n, k) == shapes[0]:
                # the epilogue bench's order: each case's (ours, eager) pair timed in its own block, case after case
                for rep in range(2):
                    for e in ("gelu", "residual", "acc"):
                        blk = {s: fns[s] for s in (f"chosen/{e}", f"eager/{e}")}
                        b_runs = [time_interleaved(blk, len(x_sets), warmup=args.warmup, iters=args.iters,
                                                   rounds=args.iters) for _ in range(5)]
                        row = {"m": m, "n": n, "k": k, "rep": rep, "expr": e,
                               **{s: statistics.median(r[s] for r in b_runs) for s in blk},
                               **{f"{s}_spread": max(r[s] for r in b_runs) - min(r[s] for r in b_runs) for s in blk}}
                        doc["blocks"].append(row)
                        print(f"block {rep} {e:>8}: ours {row[f'chosen/{e}']:.4f} ms (spread "
                              f"{row[f'chosen/{e}_spread']:.4f}), eager {row[f'eager/{e}']:.4f} ms", flush=True)
            if args.json:  # after every shape: a run cut short keeps what it measured
                with open(args.json, "w") as f:
                    json.dump(doc, f, indent=1)
            del x_sets, probe, fns
            torch.cuda.empty_cache()
    finally:
        if smi is not None:
            smi.terminate()
    for cand in (*CANDIDATES, "eager"):
        for e in EXPRS:
            side = f"{cand}/{e}"
            rows = [s["sides"][side] for s in doc["shapes"]]
            geo = {key: math.exp(sum(math.log(r[key]) for r in rows) / len(rows))
                   for key in ("vs_chosen_acc", "vs_eager_same", "vs_chosen_same")}
            print(f"geomean {side:>24}: vs chosen acc {geo['vs_chosen_acc']:.3f}, vs eager same "
                  f"{geo['vs_eager_same']:.3f}, vs chosen same {geo['vs_chosen_same']:.3f}")


if __name__ == "__main__":
    main()
