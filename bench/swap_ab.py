"""Swap-AB on small-M shapes: the shipped swap-AB configs against the chooser's pick without them and torch.

    python3 bench/swap_ab.py --half tune --json docs/results/swap_ab_h100_tune.json [--max-m 64]

For each small-M shape (M <= ``--max-m``) of the ``gemm`` suite's half: ``ptxgen.bench.bench_shape`` times (one
process, CUDA events, warm-up, inputs rotated past L2, the sides alternating call by call, median of ``--runs`` runs
with their spread, CUDA-graph replays) the chooser's pick among the configs that are not swap-AB (what a call took
before swap-AB candidates existed: the shipped table's entry on the tune half, the cost model's on the report half),
every shipped swap-AB config, and, when it differs, the chooser's pick now.  Each row adds the bytes a call must move
(``2 (MK + NK + MN)``) over its time, as a fraction of the device-to-device copy bandwidth measured first (bytes
read + written).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import ptxgen
from ptxgen.bench import bench_shape, warm_gpu
from ptxgen.config import load_config, shipped_configs
from ptxgen.runtime import driver
from ptxgen.runtime.choose import (SM90_GEMM_MODEL, candidates, choose_cached, default_config_name, rank,
                                   read_table, shipped_table_path)
from ptxgen.suites import load


def copy_gbps() -> float:
    """Device-to-device copy of 1 GiB, GB/s of bytes read + written (median of 5 runs of 5 copies)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    runs = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / 5)
    ms = statistics.median(runs[1:])
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / ms / 1e6


def unswapped_choice(m: int, n: int, k: int, sm_count: int) -> str:
    """The config a call took before swap-AB candidates: the shipped table's entry, else the cost model's pick among
    the candidates that are not swap-AB."""
    hit = read_table(shipped_table_path("sm_90a")).get((m, n, k))
    if hit is not None:
        return hit
    cands = tuple(c for c in candidates("sm_90a") if not c.swap_ab)
    return rank(cands, m, n, k, sm_count, default_config_name((9, 0)), SM90_GEMM_MODEL)[0][1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("tune", "report"), required=True)
    ap.add_argument("--max-m", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--extra", action="append", default=[], help="a measured candidate's YAML path (repeatable)")
    args = ap.parse_args()
    info = driver.device_info(torch.cuda.current_device())
    swaps = [c for c in shipped_configs() if load_config(c).schedule.swap_ab]
    shapes = sorted(s.mnk for s in load("gemm").shapes if s.half == args.half and s.m <= args.max_m)
    warm_gpu()
    bw = copy_gbps()
    print(f"device {torch.cuda.get_device_name()}: copy {bw:.0f} GB/s (read + write)", flush=True)
    rows = []
    for m, n, k in shapes:
        before = unswapped_choice(m, n, k, info.sm_count)
        now, why = choose_cached(m, n, k, tuple(info.capability), info.sm_count)
        configs = [before, *swaps] + ([now] if now not in (before, *swaps) else []) + args.extra
        got = bench_shape(configs, m, n, k, warmup=10, iters=30, runs=args.runs)
        nbytes = 2.0 * (m * k + n * k + m * n)
        for r in got:
            r.update(role=("before" if r["config"] == before else "swap" if r["config"] in swaps else
                           "now" if r["config"] == now else "extra"),
                     chosen_now=r["config"] == now, why_now=why, bytes=nbytes,
                     api_gbps=nbytes / r["api_ms"] / 1e6, copy_gbps=bw,
                     api_fraction_of_copy=nbytes / r["api_ms"] / 1e6 / bw,
                     graph_fraction_of_copy=None if not r["graph_ms"] else nbytes / r["graph_ms"] / 1e6 / bw,
                     torch_fraction_of_copy=nbytes / r["torch_ms"] / 1e6 / bw)
            print(f"{m}x{n}x{k} {r['config']:>22} {r['role']:>6}{'*' if r['chosen_now'] else ' '} "
                  f"api {r['api_ms'] * 1e3:8.1f} us ratio {r['ratio']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f}) "
                  f"graph {r['graph_ratio'] or 0:.3f} torch {r['torch_ms'] * 1e3:8.1f} us "
                  f"bw {r['api_fraction_of_copy']:.2f} err {r['rel_err_vs_torch']:.1e}", flush=True)
        rows += got
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "ptxgen": ptxgen.__version__,
           "half": args.half, "copy_gbps": bw, "swap_configs": swaps, "results": rows}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
