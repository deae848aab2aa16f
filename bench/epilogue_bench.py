"""Fused epilogues vs torch: ``ptxgen.gemm(..., epilogue=...)`` / ``ptxgen.dual_gemm`` against torch eager (the
matmul, then the epilogue's ops as separate kernels) and ``torch.compile`` of the same function.

    PYTHONPATH=$PWD python3 bench/epilogue_bench.py [--json out.json] [--runs 5] [--iters 20]
                                                    [--suite gemm --half report] [--pairs] [--cases 0,1]

Cases: ``gelu(acc + bias[col])`` (tanh GELU), ``acc + residual`` (the chooser's config: on H100 one whose TMA-store
epilogue stages through ``stmatrix``, so the residual is read through the CD staging ring) and the same with the
residual's per-thread pair loads (``h100_128x256`` without ``stmatrix``), the dual GEMM's ``silu(acc1) * acc2`` (D
bf16), and FP8 output: ``e4m3(acc, "d_scale")`` (1 x 128 block scale; torch: matmul, amax per block, divide,
cast) and ``e4m3(amax("amax", acc) * scale[row])`` (torch: matmul, row amax, scale, cast), and the plain GEMM
(``acc``: every case's baseline, ptxgen's chooser config against cuBLAS), on LLM projection shapes.  ``torch.compile`` runs ``--compile-mode`` (default ``max-autotune-no-cudagraphs``), falling back to the
default mode where that fails; the JSON records the mode and each side's spread (max - min over the runs).  Each time is the median over ``--runs`` runs of the median of
``--iters`` CUDA-event intervals around one call (``ptxgen.bench.time_interleaved``: the three sides in
alternating order), after warm-up calls; input sets are rotated so that the bytes touched between two uses of a
set exceed 2x the L2 size (at least two sets).  ``torch.compile`` is compiled once per case (``dynamic=True``)
and warmed per shape before timing; ptxgen's config is the chooser's for the shape.  ``--suite gemm`` times the LLM
projection shapes (``kind: llm``) of a half of the shipped suite (default: the report half) instead of the four
shapes below.  ``--pairs`` times ptxgen against eager and against ``torch.compile`` in two separate interleaves, each
ratio the median of the per-run ratios: ``torch.compile``'s host path (100-270 us per call at small M) outruns the
pre-sleep that keeps the queue ahead of the GPU, so in one three-sided interleave the other sides' intervals take in
host time there.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F

import ptxgen
from ptxgen.bench import time_interleaved, warm_gpu
from ptxgen.config import load_config

SHAPES = [(4096, 4096, 4096), (8192, 14336, 4096), (4096, 28672, 4096), (2048, 8192, 8192)]


#: the residual's pair-load path (see CASES)
PAIR_LOADS = load_config("h100_128x256").replace(**{"epilogue.stmatrix": False})


def plain(a, b):
    return a @ b.T


def gelu_bias(a, b, bias):
    return F.gelu(a @ b.T + bias, approximate="tanh")


def add_residual(a, b, residual):
    return a @ b.T + residual


def swiglu(a, b1, b2):
    return F.silu(a @ b1.T) * (a @ b2.T)


def _e4m3_block(y):
    m, n = y.shape
    amax = y.float().abs().reshape(m, n // 128, 128).amax(dim=2)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return (y.float() / scale.repeat_interleave(128, 1)).to(torch.float8_e4m3fn), scale


def e4m3_block(a, b):
    return _e4m3_block(a @ b.T)


def e4m3_row_amax(a, b, scale):
    y = a @ b.T
    return (y.float() * scale[:, None]).to(torch.float8_e4m3fn), y.float().abs().amax(dim=1)


CASES = {
    "gelu(acc + bias[col])": (gelu_bias, lambda a, b, x: ptxgen.gemm(a, b, out=x["out"], epilogue="gelu(acc + bias[col])",
                                                                     bias=x["bias"])),
    "acc + residual": (add_residual, lambda a, b, x: ptxgen.gemm(a, b, out=x["out"], epilogue="acc + residual",
                                                                 residual=x["residual"])),
    # the residual's per-thread pair loads from global memory: the same tile with st.shared staging (no stmatrix:
    # not staged), the path before the residual went through the CD staging ring
    "acc + residual, pair loads": (add_residual, lambda a, b, x: ptxgen.gemm(
        a, b, out=x["out"], config=PAIR_LOADS, epilogue="acc + residual", residual=x["residual"])),
    "silu(acc1) * acc2": (swiglu, lambda a, b, x: ptxgen.dual_gemm(a, b, x["b2"], out=x["out"])),
    "e4m3 with 1x128 block scale": (e4m3_block, lambda a, b, x: ptxgen.gemm(a, b, out=x["out8"],
                                                                             epilogue='e4m3(acc, "d_scale")')),
    "e4m3(acc*scale[row]) + amax": (e4m3_row_amax, lambda a, b, x: ptxgen.gemm(
        a, b, out=x["out8"], epilogue='e4m3(amax("amax", acc) * scale[row])', scale=x["scale"])),
    # the baseline of every case: the same GEMM with D = acc (bf16), ptxgen's chooser config against cuBLAS
    "acc (plain GEMM)": (plain, lambda a, b, x: ptxgen.gemm(a, b, out=x["out"])),
}


#: each case's expression for ptxgen.gemm (None: the dual GEMM's own silu * mul; "": the plain GEMM)
EXPRS = {"gelu(acc + bias[col])": "gelu(acc + bias[col])", "acc + residual": "acc + residual",
         "acc + residual, pair loads": "acc + residual", "silu(acc1) * acc2": None,
         "e4m3 with 1x128 block scale": 'e4m3(acc, "d_scale")',
         "e4m3(acc*scale[row]) + amax": 'e4m3(amax("amax", acc) * scale[row])', "acc (plain GEMM)": ""}


def config_name(case: str, m: int, n: int, k: int) -> str:
    """The config ptxgen's side of ``case`` runs at ``(m, n, k)`` on device 0, by the fused call's own rule
    (``api.fused_config``)."""
    from ptxgen.runtime import driver
    from ptxgen.runtime.api import _GEMM, epilogue_expr, fused_config
    from ptxgen.runtime.choose import choose

    if case == "acc + residual, pair loads":
        return "h100_128x256 (no stmatrix)"
    info = driver.device_info(0)
    text = EXPRS[case]
    if not text:
        return choose(m, n, k, info, "dual_gemm" if text is None else "gemm")
    return fused_config(_GEMM, None, epilogue_expr(text, "gemm")[0], m, n, k, info).name


def make_set(case: str, m: int, n: int, k: int, gen) -> dict:
    s = k ** -0.25
    x = {"a": (torch.randn(m, k, device="cuda", generator=gen) * s).bfloat16(),
         "b": (torch.randn(n, k, device="cuda", generator=gen) * s).bfloat16(),
         "out": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}
    if case.startswith("e4m3"):
        x["out8"] = torch.empty(m, n, device="cuda", dtype=torch.float8_e4m3fn)
        del x["out"]
        if "scale[row]" in case:
            x["scale"] = torch.rand(m, device="cuda", generator=gen) + 0.5
        return x
    if case.startswith("acc ("):
        return x
    if case.startswith("gelu"):
        x["bias"] = torch.randn(n, device="cuda", generator=gen).bfloat16()
    elif case.startswith("acc +"):
        x["residual"] = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
    else:
        x["b2"] = (torch.randn(n, k, device="cuda", generator=gen) * s).bfloat16()
    return x


def torch_args(case: str, x: dict) -> tuple:
    if case.startswith("acc ("):
        return x["a"], x["b"]
    if case.startswith("e4m3"):
        return (x["a"], x["b"], x["scale"]) if "scale" in x else (x["a"], x["b"])
    return (x["a"], x["b"], x["bias"] if case.startswith("gelu") else x["residual"] if case.startswith("acc +")
            else x["b2"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cases", default="all", help="indices into the case list, e.g. 0,2")
    ap.add_argument("--shapes", default="all", help="indices into the shape list, e.g. 0,1")
    ap.add_argument("--suite", help="time the LLM projection shapes of a half of a shipped suite (gemm)")
    ap.add_argument("--half", default="report", choices=("tune", "report", "all"))
    ap.add_argument("--pairs", action="store_true",
                    help="time ptxgen against eager and against torch.compile in separate interleaves (ratios paired by "
                         "run), so that one torch side's host path does not drain the queue of the other's calls")
    ap.add_argument("--compile-mode", default="max-autotune-no-cudagraphs",
                    help="torch.compile mode tried first (the default mode if it fails)")
    args = ap.parse_args()
    name = torch.cuda.get_device_name(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"device: {name}, L2 {l2 >> 20} MiB; median of {args.runs} runs x median of {args.iters} calls")
    print(f"{'case':>22} {'M':>6} {'N':>6} {'K':>6} {'eager ms':>9} {'compile ms':>10} {'ptxgen ms':>9} "
          f"{'vs eager':>8} {'vs compile':>10} {'rel err':>8}")
    cases = list(CASES) if args.cases == "all" else [list(CASES)[int(i)] for i in args.cases.split(",")]
    listed = SHAPES
    if args.suite:
        from ptxgen.suites import load

        listed = [s.mnk for s in load(args.suite).half(args.half) if s.kind == "llm"]
    warm_gpu()
    rows = []
    for case in cases:
        fn, ours = CASES[case]
        compiled = torch.compile(fn, dynamic=True, mode=args.compile_mode)
        mode = args.compile_mode
        shapes = listed if args.shapes == "all" else [listed[int(i)] for i in args.shapes.split(",")]
        for m, n, k in shapes:
            gen = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
            probe = make_set(case, m, n, k, gen)
            set_bytes = sum(t.numel() * t.element_size() for t in probe.values())
            sets = [probe] + [make_set(case, m, n, k, gen) for _ in range(max(2, min(8, math.ceil(2 * l2 / set_bytes))) - 1)]
            fns = {"eager": lambda i: fn(*torch_args(case, sets[i])),
                   "compile": lambda i: compiled(*torch_args(case, sets[i])),
                   "ptxgen": lambda i: ours(sets[i]["a"], sets[i]["b"], sets[i])}
            try:
                fns["compile"](0)
            except Exception as exc:  # the mode does not run here: the default mode, else time the other two
                print(f"torch.compile mode={mode} failed: {str(exc).splitlines()[0][:120]}")
                compiled, mode = torch.compile(fn, dynamic=True), "default"
                try:
                    fns["compile"](0)
                except Exception as exc2:
                    print(f"torch.compile unavailable: {str(exc2).splitlines()[0][:120]}")
                    del fns["compile"]
            if args.pairs:  # each torch side against ptxgen alone: no side's host path drains the other's queue
                runs, paired = [], {}
                for side in [s for s in fns if s != "ptxgen"]:
                    pair = {side: fns[side], "ptxgen": fns["ptxgen"]}
                    got = [time_interleaved(pair, len(sets), warmup=args.warmup, iters=args.iters, rounds=args.iters)
                           for _ in range(args.runs)]
                    runs += [{side: r[side], f"ptxgen_vs_{side}": r["ptxgen"]} for r in got]
                    paired[side] = statistics.median(r[side] / r["ptxgen"] for r in got)
                keys = {key for r in runs for key in r}
                t = {key: statistics.median(r[key] for r in runs if key in r) for key in keys}
                t["ptxgen"] = t["ptxgen_vs_eager"]
                spread = {f"{key}_spread_ms": max(r[key] for r in runs if key in r)
                          - min(r[key] for r in runs if key in r) for key in keys}
            else:
                runs = [time_interleaved(fns, len(sets), warmup=args.warmup, iters=args.iters, rounds=args.iters)
                        for _ in range(args.runs)]
                t = {side: statistics.median(r[side] for r in runs) for side in fns}
                spread = {f"{side}_spread_ms": max(r[side] for r in runs) - min(r[side] for r in runs) for side in fns}
                paired = {side: t[side] / t["ptxgen"] for side in fns if side != "ptxgen"}
            t.setdefault("compile", float("nan"))
            paired.setdefault("compile", float("nan"))
            x = sets[0]
            ref = fn(*(v.float() for v in torch_args(case, x)))
            got = ours(x["a"], x["b"], x)
            if case.startswith("e4m3"):  # D dequantized (block scale) / as is, against the fp32 recipe
                ref, got = ref[0].float(), got[0].float()
                if "block" in case:
                    ref = ref * fn(*(v.float() for v in torch_args(case, x)))[1].repeat_interleave(128, 1)
                    got = got * ours(x["a"], x["b"], x)[1].repeat_interleave(128, 1)
            err = ((got.float() - ref).norm() / ref.norm()).item()
            row = dict(case=case, m=m, n=n, k=k, config=config_name(case, m, n, k), eager_ms=t["eager"],
                       compile_ms=t["compile"], ptxgen_ms=t["ptxgen"], vs_eager=paired["eager"],
                       vs_compile=paired["compile"], rel_err=err, compile_mode=mode, pairs=args.pairs, **spread,
                       **{key: v for key, v in t.items() if key.startswith("ptxgen_vs_")})
            rows.append(row)
            if args.json:  # after every row: a run cut short keeps what it measured
                with open(args.json, "w") as f:
                    json.dump({"device": name, "suite": args.suite, "half": args.half if args.suite else None,
                               "runs": args.runs, "iters": args.iters, "rows": rows}, f, indent=2)
            print(f"{case:>22} {m:>6} {n:>6} {k:>6} {t['eager']:>9.3f} {t['compile']:>10.3f} {t['ptxgen']:>9.3f} "
                  f"{row['vs_eager']:>8.3f} {row['vs_compile']:>10.3f} {err:>8.1e}  {row['config']}", flush=True)
            del sets, probe
            torch.cuda.empty_cache()
    for case in cases:
        mine = [r for r in rows if r["case"] == case]
        for side in ("vs_eager", "vs_compile"):
            geo = math.exp(sum(math.log(r[side]) for r in mine) / len(mine))
            print(f"{case}: geomean ptxgen speedup {side.replace('_', ' ')}: {geo:.3f}x, min {min(r[side] for r in mine):.3f}x")


if __name__ == "__main__":
    main()
