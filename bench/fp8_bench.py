"""FP8 block-scaled GEMM on the GPU: one checked call (for compute-sanitizer) or timings against torch.

    python3 bench/fp8_bench.py one CONFIG M N K        # one ptxgen.gemm_fp8, exit 1 on a wrong result
    python3 bench/fp8_bench.py bench [--json PATH]     # TFLOP/s of ptxgen.gemm_fp8 and torch._scaled_mm

Inputs follow the recipe (docs/fp8.md): A quantized per 1 x 128 block, B per 128 x 128 block (scale = amax / 448).
``bench`` times each shipped FP8 config and the chooser's pick (scales handed MN-major: read in place; and
row-major: copied transposed per call), and ``torch._scaled_mm`` with block-wise scales where the installed torch
takes them (each scale layout tried is reported with the error it raised).  CUDA events, median of 5 runs of 20
launches after a warm-up.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

import ptxgen
from ptxgen.config import load_config, shipped_configs
from ptxgen.runtime.fp8 import quantize as quantize_recipe  # the recipe's quantization

SHAPES = [(4096, 7168, 7168), (4096, 2112, 7168), (4096, 7168, 2048), (8192, 7168, 7168)]
BLOCK = 128


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
    return statistics.median(runs)


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


def bench(json_path=None):
    rows = []
    fp8 = [c for c in shipped_configs() if load_config(c).operands == "fp8"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for m, n, k in SHAPES:
        a, b, sa, sb = operands(m, n, k)
        ref = reference(a, b, sa, sb)
        flop = 2.0 * m * n * k
        sa_mn = torch.empty((sa.shape[1], m), device="cuda").copy_(sa.T).T  # MN-major: read in place
        sb_mn = torch.empty((sb.shape[1], -(-sb.shape[0] // 4) * 4), device="cuda")[:, :sb.shape[0]].copy_(sb.T).T
        row = {"shape": f"{m}x{n}x{k}"}
        for cfg in [None] + fp8:
            label = cfg or "auto"
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            row[f"{label} err"] = rel(ptxgen.gemm_fp8(a, b, sa_mn, sb_mn, out=out, config=cfg), ref)
            us = time_us(lambda: ptxgen.gemm_fp8(a, b, sa_mn, sb_mn, out=out, config=cfg))
            row[label] = round(flop / us / 1e6, 1)
            if cfg is None:
                us2 = time_us(lambda: ptxgen.gemm_fp8(a, b, sa, sb, out=out))
                row["auto (row-major scales, copied)"] = round(flop / us2 / 1e6, 1)
        for what, xa, xb in scaled_mm_variants(a, b, sa, sb):
            try:
                d = torch._scaled_mm(a, b.T, scale_a=xa, scale_b=xb, out_dtype=torch.bfloat16)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - report what the installed torch refuses
                row.setdefault("scaled_mm refused", []).append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                continue
            row["scaled_mm layout"] = what
            row["scaled_mm err"] = rel(d, ref)
            us = time_us(lambda: torch._scaled_mm(a, b.T, scale_a=xa, scale_b=xb, out_dtype=torch.bfloat16))
            row["torch._scaled_mm"] = round(flop / us / 1e6, 1)
            break
        rows.append(row)
        print(json.dumps(row, indent=1))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["one"]:
        sys.exit(one(sys.argv[2], *(int(x) for x in sys.argv[3:6])))
    bench(sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None)
