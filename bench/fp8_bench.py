"""FP8 block-scaled GEMM on the GPU: one checked call (for compute-sanitizer) or timings against torch.

    python3 bench/fp8_bench.py one CONFIG M N K        # one ptxgen.gemm_fp8, exit 1 on a wrong result
    python3 bench/fp8_bench.py bench [--json PATH] [--shapes default|deepgemm] [--configs A,B,...]
                                                       # TFLOP/s of ptxgen.gemm_fp8 and torch._scaled_mm

Inputs follow the recipe (docs/fp8.md): A quantized per 1 x 128 block, B per 128 x 128 block (scale = amax / 448).
``bench`` times each shipped FP8 config (or the ``--configs`` given: names or YAML paths) and the chooser's pick (scales handed MN-major: read in place; and
row-major: copied transposed per call), and ``torch._scaled_mm`` with block-wise scales where the installed torch
takes them (each scale layout tried is reported with the error it raised).  CUDA events, median of 5 runs of 20
launches after a warm-up; each timing is reported as its median with the slowest and fastest run (TFLOP/s), and
as a fraction of the H100 SXM's 1979 TFLOP/s dense FP8 peak.  ``--shapes deepgemm``: DeepGEMM's dense shapes
(M in {64, 128, 4096} x the six N x K of DeepSeek-V3) and the squares 4096^3, 8192^3.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

import ptxgen
from ptxgen.config import load_config, shipped_configs
from ptxgen.runtime.choose import choose_cached
from ptxgen.runtime.fp8 import quantize as quantize_recipe  # the recipe's quantization

SHAPES = [(4096, 7168, 7168), (4096, 2112, 7168), (4096, 7168, 2048), (8192, 7168, 7168)]
DEEPGEMM_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DEEPGEMM = [(m, n, k) for m in (64, 128, 4096) for n, k in DEEPGEMM_NK] + [(4096, 4096, 4096), (8192, 8192, 8192)]
BLOCK = 128
PEAK_FP8 = 1979.0  # H100 SXM dense FP8 TFLOP/s


def quantize(x, block_rows):
    return quantize_recipe(x, block_rows)


def operands(m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, sa = quantize(torch.randn(m, k, device="cuda", generator=g), 1)
    b, sb = quantize(torch.randn(n, k, device="cuda", generator=g), BLOCK)
    return a, b, sa, sb


def reference(a, b, sa, sb):
    m, k = a.shape
    n = b.shape[0]
    ad = a.float() * sa.repeat_interleave(BLOCK, 1)[:, :k]
    bd = b.float() * sb.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
    return ad @ bd.T


def rel(x, ref):
    return float((x.float() - ref).norm() / ref.norm())


def time_us(fn, reps=5, inner=20):
    """Median, fastest and slowest of ``reps`` runs of ``inner`` launches, in microseconds per launch."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1000 / inner)
    return statistics.median(runs), min(runs), max(runs)


def record(row, label, flop, times):
    """TFLOP/s of the median run under ``label``, the spread (slowest, fastest run) and the fraction of peak."""
    med, fast, slow = times
    row[label] = round(flop / med / 1e6, 1)
    row[f"{label} spread"] = [round(flop / slow / 1e6, 1), round(flop / fast / 1e6, 1)]
    row[f"{label} of peak"] = round(flop / med / 1e6 / PEAK_FP8, 3)


def scaled_mm_variants(a, b, sa, sb):
    """torch._scaled_mm with block-wise scales: the scale layouts to try (name, scale_a, scale_b)."""
    col = lambda t: t.T.contiguous().T  # noqa: E731 - same shape, outer-dim-major (stride (1, rows))
    return [("sa [M,K/128] col-major, sb [N/128,K/128] row-major", col(sa), sb),
            ("sa [M,K/128] col-major, sb [N/128,K/128] col-major", col(sa), col(sb)),
            ("sa [M,K/128] row-major, sb [N/128,K/128] row-major", sa, sb),
            ("sa col-major, sb.T [K/128,N/128] row-major", col(sa), sb.T.contiguous()),
            ("sa col-major, sb.T [K/128,N/128] col-major", col(sa), sb.T)]


def one(name, m, n, k):
    a, b, sa, sb = operands(m, n, k)
    out = ptxgen.gemm_fp8(a, b, sa, sb, config=name)
    torch.cuda.synchronize()
    err = rel(out, reference(a, b, sa, sb))
    print(f"{name} {m}x{n}x{k}: rel err {err:.2e}")
    return 0 if err < 1e-2 else 1


def bench(json_path=None, shapes=SHAPES, configs=None):
    rows = []
    fp8 = configs or [c for c in shipped_configs()  # the dense FP8 configs (grouped ones are grouped_gemm's)
                      if (cfg := load_config(c)).operands == "fp8" and cfg.schedule.grouped == "none"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for m, n, k in shapes:
        a, b, sa, sb = operands(m, n, k)
        ref = reference(a, b, sa, sb)
        flop = 2.0 * m * n * k
        sa_mn = torch.empty((sa.shape[1], m), device="cuda").copy_(sa.T).T  # MN-major: read in place
        sb_mn = torch.empty((sb.shape[1], -(-sb.shape[0] // 4) * 4), device="cuda")[:, :sb.shape[0]].copy_(sb.T).T
        row = {"shape": f"{m}x{n}x{k}"}
        for cfg in [None] + fp8:
            label = "auto" if cfg is None else load_config(cfg).name
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            row[f"{label} err"] = rel(ptxgen.gemm_fp8(a, b, sa_mn, sb_mn, out=out, config=cfg), ref)
            record(row, label, flop, time_us(lambda: ptxgen.gemm_fp8(a, b, sa_mn, sb_mn, out=out, config=cfg)))
            if cfg is None:
                props = torch.cuda.get_device_properties(0)
                row["auto config"] = choose_cached(m, n, k, (props.major, props.minor), props.multi_processor_count,
                                                   "gemm_fp8")[0]
        for what, xa, xb in scaled_mm_variants(a, b, sa, sb):
            try:
                d = torch._scaled_mm(a, b.T, scale_a=xa, scale_b=xb, out_dtype=torch.bfloat16)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - report what the installed torch refuses
                row.setdefault("scaled_mm refused", []).append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                continue
            row["scaled_mm layout"] = what
            row["scaled_mm err"] = rel(d, ref)
            record(row, "torch._scaled_mm", flop,
                   time_us(lambda: torch._scaled_mm(a, b.T, scale_a=xa, scale_b=xb, out_dtype=torch.bfloat16)))
            break
        rows.append(row)
        print(json.dumps({key: v for key, v in row.items() if "refused" not in key}), flush=True)
        del a, b, sa, sb, ref
        if json_path:  # written after every shape: a run cut short keeps what it measured
            with open(json_path, "w") as f:
                json.dump(rows, f, indent=1)


def _arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


if __name__ == "__main__":
    if sys.argv[1:2] == ["one"]:
        sys.exit(one(sys.argv[2], *(int(x) for x in sys.argv[3:6])))
    cfgs = _arg("--configs")
    bench(_arg("--json"), DEEPGEMM if _arg("--shapes") == "deepgemm" else SHAPES, cfgs.split(",") if cfgs else None)
