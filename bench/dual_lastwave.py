"""Split-K of the last wave on the 128x128 SwiGLU dual tile: every config and torch unfused in one interleaved timing.

    PYTHONPATH=$PWD python3 bench/dual_lastwave.py [--json out.json] [--iters 20] [--runs 7] [--no-check]
        [--shape MxNxK ... [--half NAME]] [--config NAME ...]

The configs (``CONFIGS``: a shipped name or a ``bench/configs`` YAML) and torch unfused
``F.silu(a @ b1.T) * (a @ b2.T)`` are timed on each shape in the same ``ptxgen.bench.time_interleaved`` call, so
drift between two configs of one shape hits all alike (``bench/dual_bench.py --config`` times each config in its
own interleaving with torch, and torch's time moved between those rows below 100 us).  Per run each side's time is
the median of ``--iters`` CUDA-event intervals around one ``ptxgen.dual_gemm`` call (host overhead included)
after ``--warmup`` calls; the reported time is the median over ``--runs`` runs, with the lowest and highest run.
Input sets rotate so that the bytes touched between two uses of a set exceed 2x the L2 size.

Shapes: the SwiGLU suite's tune half at M in {128, 256, 512} (the chooser rule is read off these) and three report
shapes (256x25600x5120, 256x14336x4096, 512x18432x7168: the check only).  Each row also carries the cost model's
prediction (``ptxgen.runtime.choose.predict``), the tile count and the last-wave split (whole tiles, tail tiles).
``--shape`` (repeatable) times those shapes instead, labelled ``--half``; ``--config`` (repeatable) times those configs
instead of ``CONFIGS``.

Correctness (unless ``--no-check``), per config: ``out`` poisoned with NaN, fresh random bf16 inputs, fp32
reference, relative Frobenius error < 1e-2 and no NaN, on every timed shape and on off-tile shapes that put the
split in every position (all tiles split below one wave, a tail of one tile, K of one k-block so a split is empty),
each called twice in a row (the tail's arrival counters must reset for the next launch).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics

import torch
import torch.nn.functional as F

import ptxgen
from ptxgen.bench import relative_error, time_interleaved, warm_gpu
from ptxgen.config import load_config
from ptxgen.runtime import driver
from ptxgen.runtime.choose import Candidate, predict

BENCH_CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
CONFIGS = ["dual_h100_128x128", "dual_h100_128x128_lw2", "dual_h100_128x128_c2", "dual_h100_128x128_c2_lw2"]
TUNE = [(256, 2880, 2880), (128, 18944, 3584), (128, 29568, 8192), (512, 14336, 4096), (512, 28672, 8192)]
REPORT = [(256, 25600, 5120), (256, 14336, 4096), (512, 18432, 7168)]
#: off-tile shapes for the correctness check: 15 tiles (all split), 1057 = 8 x 132 + 1 tiles of 128x128 (a tail of
#: one tile), K = 64 (one k-block: split 1 is empty), ragged M, N and K
CHECK = [(300, 520, 264), (896, 19300, 512), (4224, 4224, 64), (777, 33000, 136), (2, 8, 8)]
TOLERANCE = 1e-2


def resolve(name: str):
    """A shipped config name, or the Config of ``bench/configs/<name>.yaml``."""
    path = os.path.join(BENCH_CONFIGS, f"{name}.yaml")
    return load_config(path) if os.path.exists(path) else name


def candidate(name: str) -> Candidate:
    cfg = load_config(resolve(name))
    return Candidate(cfg.name, cfg.arch, cfg.tile.block_m, cfg.tile.block_n, cfg.tile.block_k, cfg.pipeline.stages,
                     cfg.cluster.size, cfg.kernel, cfg.operands, cfg.mma.consumers, cfg.schedule.split_k,
                     cfg.mma.warpgroups, cfg.tma.multicast, cfg.schedule.grouped, cfg.schedule.swap_ab,
                     cfg.schedule.split_k_tiles)


def operands(m: int, n: int, k: int, gen):
    scale = k ** -0.25
    return tuple((torch.randn(r, k, device="cuda", generator=gen) * scale).bfloat16() for r in (m, n, n))


def checked(cfg, a, b1, b2) -> float:
    """Relative Frobenius error of one call into a NaN-poisoned ``out`` (inf when any output stays NaN)."""
    out = torch.full((a.shape[0], b1.shape[0]), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.dual_gemm(a, b1, b2, out=out, config=cfg)
    torch.cuda.synchronize()
    if torch.isnan(out).any():
        return math.inf
    ref = F.silu(a.float() @ b1.float().T) * (a.float() @ b2.float().T)
    return relative_error(out, ref)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--shape", action="append", default=[], help="MxNxK, repeatable: these shapes instead of the lists")
    ap.add_argument("--half", default="tune", help="the label of the --shape rows")
    ap.add_argument("--config", action="append", default=[], help="repeatable: these configs instead of CONFIGS")
    args = ap.parse_args()
    if args.iters < 1 or args.runs < 1:
        ap.error("--iters and --runs must be >= 1")
    configs = args.config or CONFIGS
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shape]
    except ValueError:
        ap.error(f"--shape takes MxNxK, got {args.shape}")
    halves = ((args.half, shapes),) if shapes else (("tune", TUNE), ("report", REPORT))
    info = driver.device_info(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    name = torch.cuda.get_device_name(0)
    print(f"device: {name}, {info.sm_count} SMs, L2 {l2 >> 20} MiB")
    cfgs = {c: resolve(c) for c in configs}
    cands = {c: candidate(c) for c in configs}
    checks = []
    if not args.no_check:
        gen = torch.Generator(device="cuda").manual_seed(11)
        for m, n, k in CHECK + [shape for _, group in halves for shape in group]:
            a, b1, b2 = operands(m, n, k, gen)
            for c, cfg in cfgs.items():
                try:
                    errs = [checked(cfg, a, b1, b2) for _ in range(2)]
                except Exception as e:  # noqa: BLE001 (recorded as a failed check; the timing still runs)
                    errs, error = [math.inf, math.inf], f"{type(e).__name__}: {e}"
                else:
                    error = None
                ok = all(e < TOLERANCE for e in errs)
                checks.append(dict(config=c, m=m, n=n, k=k, rel_err=errs, ok=ok, error=error))
                print(f"check {c:>26} {m}x{n}x{k}: rel err {errs[0]:.2e} {errs[1]:.2e} {'ok' if ok else 'FAIL'}"
                      + (f" ({error})" if error else ""), flush=True)
            del a, b1, b2
        torch.cuda.empty_cache()
    warm_gpu()
    rows = []
    for half, group in halves:
        for m, n, k in group:
            set_bytes = 2 * (m * k + 2 * n * k + m * n)
            nsets = max(1, min(8, math.ceil(2 * l2 / set_bytes)))
            gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
            sets = [operands(m, n, k, gen) + (torch.empty(m, n, device="cuda", dtype=torch.bfloat16),)
                    for _ in range(nsets)]
            fns = {"torch": lambda i: F.silu(sets[i][0] @ sets[i][1].T) * (sets[i][0] @ sets[i][2].T)}
            for c, cfg in cfgs.items():
                fns[c] = (lambda cfg: lambda i: ptxgen.dual_gemm(*sets[i], config=cfg))(cfg)
            runs = [time_interleaved(fns, nsets, warmup=args.warmup, iters=args.iters, queue_ahead=False)
                    for _ in range(args.runs)]
            row = dict(half=half, m=m, n=n, k=k, runs=runs, torch_ms=statistics.median(r["torch"] for r in runs),
                       configs={})
            line = f"{half:>6} {m:>4}x{n:>5}x{k:>4} torch {row['torch_ms'] * 1e3:7.1f}"
            for c in configs:
                ms = statistics.median(r[c] for r in runs)
                ratio = [r["torch"] / r[c] for r in runs]
                pred = predict(cands[c], m, n, k, info.sm_count)
                row["configs"][c] = dict(ms=ms, min_ms=min(r[c] for r in runs), max_ms=max(r[c] for r in runs),
                                         speedup_vs_torch=statistics.median(ratio), speedup_min=min(ratio),
                                         speedup_max=max(ratio), predicted_us=pred["us"], tiles=pred["tiles"],
                                         units=pred["units"], waves=pred["waves"])
                line += (f" | {c.removeprefix('dual_h100_')} {ms * 1e3:6.1f} ({statistics.median(ratio):.3f};"
                         f" pred {pred['us']:.0f})")
            print(line, flush=True)
            rows.append(row)
            del sets, fns
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "sm_count": info.sm_count, "runs": args.runs, "iters": args.iters,
                       "warmup": args.warmup, "configs": configs, "rows": rows, "checks": checks}, f, indent=2)
    bad = [c for c in checks if not c["ok"]]
    if bad:
        raise SystemExit(f"{len(bad)} correctness checks failed")


if __name__ == "__main__":
    main()
