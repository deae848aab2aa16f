"""Contiguous bf16 grouped GEMM against ``torch._grouped_mm``: the tile order's bytes, timings of config variants,
and one launch of each side for ncu (docs/grouped.md, "The G = 32 bf16 gap").

    python3 bench/grouped_gap.py model [--problems P]                 # no GPU: bytes of each wave, per swizzle group
    python3 bench/grouped_gap.py time [--json PATH] [--configs A,B] [--problems P] [--fp8]
    ncu --profile-from-start off --metrics ... python3 bench/grouped_gap.py ncu [--configs A,B] [--problems P]
                                                                      [--fp8 [--dense CFG]]

Problems (``--problems``: ``tune``, ``report``, ``all`` (the default) or a list ``GxMEANxNxK,...``): ``report`` is
``grouped_bench.PREFILL`` (the four contiguous problems of ``grouped_bench.py bench``), ``tune`` five others
(G = 16 and 64 at DeepSeek-V3's 4096 x 7168, Qwen3-235B's expert 3072 x 4096 and 4096 x 1536, Mixtral's
down projection 4096 x 14336). Rows per group as ``grouped_bench.group_rows`` (seed 7).

``model``: each wave of 132 consecutive tiles of the persistent order (``TileScheduler.swizzle``: groups of
``schedule.group`` m-blocks walk their n-blocks together) reads each distinct (expert, n-block) B tile
(256 x K bf16) and each distinct A m-block (128 x K) once from DRAM, nothing across waves; the sum over waves,
against the minimum (every expert's B and all of A read once).

``time``: per problem, ``torch._grouped_mm`` (offs = the segments' padded ends, as ``grouped_bench``), each
config (``default`` = the shipped choice, then ``--configs``) with ``check_tables=False``, then torch again;
CUDA events, median of 5 runs of 10 calls after a warm-up, with the spread; TFLOP/s of the valid rows; each
config's relative error on the first and last group against fp32.  ``--fp8``: e4m3 operands with the recipe's
block scales (``grouped_bench.operands``), the FP8 default and ``--configs`` called with the scales in the kernel's
layout (``tma_scale_layout``, read in place) against a loop of per-group ``torch._scaled_mm``
(``grouped_bench.scaled_mm_loop``), all sides interleaved by round with ratios paired by round, the CUDA-graph GPU
time of each side, the loop's host time and its kernels' CUPTI times (``grouped_bench.fp8_sides``; docs/grouped.md,
"The FP8 baseline and what bounds the FP8 pair").

``ncu``: each problem's operands and each side warmed up, then between ``cudaProfilerStart`` and
``cudaProfilerStop`` one launch of torch and of each config (in that order), nothing else.  ``--fp8``: torch's
launch is the loop's group 0 ``torch._scaled_mm`` alone; ``--dense CFG`` adds ``ptxgen.gemm_fp8`` with CFG on group
0's rows and on all rows of A, each against expert 0 (the loop's per-group shape; the problem's flops as one GEMM).
"""

from __future__ import annotations

import json
import sys

import torch

import ptxgen
from grouped_bench import (BLOCK, LOOP, PREFILL, fp8_sides, group_rows, kernel_us, operands,  # same folder
                           reference_rows, rel, scaled_mm_loop, time_us)
from ptxgen.config import load_config
from ptxgen.runtime.grouped import contiguous_layout, tma_scale_layout

TUNE = [(16, 2048, 4096, 7168), (64, 512, 4096, 7168), (32, 1024, 3072, 4096), (32, 1024, 4096, 1536),
        (8, 4096, 4096, 14336)]
SMS = 132  # H100 SXM: the persistent grid


def _arg(flag: str, default: str | None = None) -> str | None:
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def problems() -> list[tuple[int, int, int, int]]:
    which = _arg("--problems", "all")
    named = {"tune": TUNE, "report": PREFILL, "all": TUNE + PREFILL}
    if which in named:
        return named[which]
    return [tuple(int(x) for x in p.split("x")) for p in which.split(",")]  # GxMEANxNxK,...


def segments(rows: list[int]) -> list[int]:
    """Each m-block's expert (contiguous layout: each group's rows padded to whole 128-row m-blocks)."""
    return [g for g, r in enumerate(rows) for _ in range(-(-r // BLOCK))]


def tile_order(num_m: int, num_n: int, group: int) -> list[tuple[int, int]]:
    """(m-block, n-block) of each tile index (``TileScheduler.swizzle``)."""
    out = []
    for t in range(num_m * num_n):
        grp, r = t // (num_n * group), t % (num_n * group)
        gm = min(num_m - grp * group, group)
        out.append((grp * group + r % gm, r // gm))
    return out


def model() -> None:
    for groups, mean, n, k in problems():
        rows = group_rows(groups, mean, 7)
        experts = segments(rows)
        num_m, num_n = len(experts), -(-n // 256)
        b_tile, a_tile = 256 * k * 2, BLOCK * k * 2
        least = sum(1 for r in rows if r) * n * k * 2 + num_m * a_tile
        row = {"G": groups, "mean rows": mean, "N": n, "K": k, "m-blocks": num_m, "tiles": num_m * num_n,
               "waves": -(-num_m * num_n // SMS), "minimum GB": round(least / 1e9, 2), "flop": 2.0 * sum(rows) * n * k}
        for group in (1, 2, 4, 8, 16, 32):
            order = tile_order(num_m, num_n, group)
            total = 0
            for w in range(0, len(order), SMS):
                wave = order[w:w + SMS]
                total += len({(experts[m], j) for m, j in wave}) * b_tile + len({m for m, _ in wave}) * a_tile
            row[f"group {group} GB"] = round(total / 1e9, 2)
        print(json.dumps(row))


FP8 = "--fp8" in sys.argv
#: the torch side: torch._grouped_mm (bf16) or a loop of per-group torch._scaled_mm (``--fp8``)
TORCH = "torch._scaled_mm loop" if FP8 else "torch._grouped_mm"


def setup(groups: int, mean: int, n: int, k: int):
    rows = group_rows(groups, mean, 7)
    idx = contiguous_layout(rows, device="cuda")
    a, b, sa, sb = operands(idx.numel(), groups, n, k, FP8)
    starts = [0]
    for r in rows:
        starts.append(starts[-1] + -(-r // BLOCK) * BLOCK)
    out = torch.empty((idx.numel(), n), device="cuda", dtype=torch.bfloat16)
    if FP8:
        sa_in, sb_in = tma_scale_layout(sa), tma_scale_layout(sb)  # read in place: no copy per call
        torch_side = scaled_mm_loop(a, b, sa, sb, rows, starts, {})
    else:
        sa_in = sb_in = None
        offs = torch.tensor(starts[1:], dtype=torch.int32, device="cuda")
        bt = b.transpose(-2, -1)

        def torch_side():
            return torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)

    def ours(cfg):
        return lambda: ptxgen.grouped_gemm(a, b, m_indices=idx, scale_a=sa_in, scale_b=sb_in, out=out,
                                           check_tables=False, config=cfg)

    return rows, starts, idx, (a, b, sa, sb), out, ours, torch_side


def configs() -> list[str | None]:
    extra = _arg("--configs")
    return [None] + (extra.split(",") if extra else [])


def label(cfg: str | None) -> str:
    return "default" if cfg is None else load_config(cfg).name


def timed() -> None:
    path = _arg("--json")
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "fp8": FP8}
    print(json.dumps(info))
    out_rows = []
    for groups, mean, n, k in problems():
        rows, starts, idx, (a, b, sa, sb), out, ours, torch_side = setup(groups, mean, n, k)
        flop = 2.0 * sum(rows) * n * k
        row = {"G": groups, "mean rows": mean, "N": n, "K": k, "rows": rows}

        def put(what, fn):
            med, lo, hi = time_us(fn)
            row[what] = {"us": round(med, 1), "us_min": round(lo, 1), "us_max": round(hi, 1),
                         "tflops": round(flop / med / 1e6, 1)}

        if not FP8:
            put(TORCH, torch_side)
        last = max(g for g, r in enumerate(rows) if r)
        for cfg in configs():
            out.fill_(float("nan"))
            ours(cfg)()
            row[f"{label(cfg)} rel err (first, last group)"] = [
                round(rel(out[:rows[0]], reference_rows(a, b, sa, sb, 0, 0, rows[0])), 5),
                round(rel(out[starts[last]:starts[last] + rows[last]],
                          reference_rows(a, b, sa, sb, last, starts[last], starts[last] + rows[last])), 5)]
            if not FP8:
                put(label(cfg), ours(cfg))
        if FP8:  # interleaved with the loop, paired ratios, GPU time of each side (grouped_bench.fp8_sides)
            sides = {LOOP: torch_side, **{f"{label(c)} scales in place": ours(c) for c in configs()}}
            fp8_sides(row, sides, flop)
            try:
                row[f"{LOOP} kernels_us"] = kernel_us(torch_side)
            except Exception as exc:  # noqa: BLE001 - no CUPTI: the graph time stands for it
                row[f"{LOOP} kernels_us"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            row["ratio to torch (paired by round)"] = {label(c): row[f"{label(c)} scales in place"]["ratio to loop"]
                                                       for c in configs()}
            row["ratio to torch (graphs)"] = {label(c): round(row[f"{LOOP} graph"]["us"] / row[
                f"{label(c)} scales in place graph"]["us"], 3) for c in configs()
                if isinstance(row.get(f"{LOOP} graph"), dict)
                and isinstance(row.get(f"{label(c)} scales in place graph"), dict)}
        else:
            put(f"{TORCH} again", torch_side)
            ref = (row[TORCH]["us"] + row[f"{TORCH} again"]["us"]) / 2
            row["ratio to torch (mean of its two timings)"] = {label(c): round(ref / row[label(c)]["us"], 3)
                                                               for c in configs()}
        print(json.dumps({x: y for x, y in row.items() if x != "rows"}))
        out_rows.append(row)
        del a, b, sa, sb, out, idx, ours, torch_side
        torch.cuda.empty_cache()
        if path:
            with open(path, "w") as f:
                json.dump({"info": info, "rows": out_rows}, f, indent=1)


def dense_sides(rows, starts, a, b, sa, sb) -> list:
    """``--fp8 --dense CFG``: one ``ptxgen.gemm_fp8`` with CFG on group 0's rows against expert 0 (the loop's
    per-group shape), then one on all rows of A against expert 0 (the grouped problem's flops as one dense GEMM)."""
    cfg = _arg("--dense")
    if not cfg:
        return []
    m0 = -(-rows[0] // 16) * 16
    col = lambda t: t.T.contiguous().T  # noqa: E731 - scale.T row-major: read in place, no staging copy per call
    g0 = (a[:m0], b[0], col(sa[:m0]), col(sb[0]))
    whole = (a, b[0], col(sa), col(sb[0]))
    return [lambda x=x: ptxgen.gemm_fp8(*x, config=cfg) for x in (g0, whole)]


def profiled() -> None:
    launches = []
    for groups, mean, n, k in problems():
        rows, starts, _, (a, b, sa, sb), _, ours, torch_side = setup(groups, mean, n, k)
        if FP8:  # one of the loop's kernels: group 0's torch._scaled_mm
            whole_loop = torch_side
            torch_side = lambda whole_loop=whole_loop: whole_loop(first_only=True)  # noqa: E731
        fns = [torch_side] + [ours(c) for c in configs()] + (dense_sides(rows, starts, a, b, sa, sb) if FP8 else [])
        for fn in fns:
            fn()
            fn()
        launches.append((f"G={groups} mean={mean} {n}x{k}", fns))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for what, fns in launches:
        for fn in fns:
            fn()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    for what, _ in launches:
        dense = [f"gemm_fp8 {_arg('--dense')} group 0 rows", f"gemm_fp8 {_arg('--dense')} all rows"] if (
            FP8 and _arg("--dense")) else []
        print(what, f"launches: {TORCH}{' (group 0)' if FP8 else ''},", ", ".join([label(c) for c in configs()] + dense))


if __name__ == "__main__":
    {"model": model, "time": timed, "ncu": profiled}[sys.argv[1]]()
