"""Masked FP8 decode: the shipped masked tiles, the 64-row variants and the default call's scale path, timed on tune
problems of their own, every side interleaved in one process (docs/grouped.md, "Masked FP8 decode: the 128-row
tile's idle half and the per-call scale copies").

    python3 bench/grouped_masked_tune.py check [--json PATH]  # new paths on the GPU, NaN-poisoned D; exit 1 if wrong
    python3 bench/grouped_masked_tune.py time [--json PATH]

Problems (not the bench's 18): G in {4, 12}, M_max in {64, 128, 256}, N x K in {3072x4096, 4096x1536,
14336x4096}, masked_m uniform in [M_max / 2, M_max] (as ``bench/grouped_masked_pair.py``).  Sides per problem
(:func:`grouped_bench.interleaved_us`: 7 rounds, each one run of 10 calls of every side in a rotated order): each
config of ``CONFIGS`` with scales in the kernel's layout and ``check_tables=False`` (the kernel), and the default
call (``config=None``, ``check_tables=True``) with row-major scales through the runtime's scale path (``default``),
through the path before this change (``default, old scale path``: both scales copied every call by
empty + slice + ``copy_``) and with scales in place (``default, scales in place``).  ``time`` then splits the
default call of a few problems: host microseconds per call (:func:`grouped_bench.host_us`) and GPU microseconds per
kernel (torch.profiler, :func:`grouped_bench.kernel_us`) of each scale path.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from grouped_bench import (copy_bandwidth, host_us, interleaved_us, kernel_us, operands, paired_ratio,  # noqa: E402
                           reference_rows, rel)

import ptxgen  # noqa: E402
from ptxgen.runtime import api, grouped  # noqa: E402

HERE = Path(__file__).resolve().parent
#: the 64-row tiles: the shipped 64x128 (a bench/configs variant when measured, same YAML) and the 64x256 variant
VARIANTS = ["grouped_masked_fp8_h100_64x128", str(HERE / "configs" / "grouped_masked_fp8_h100_64x256.yaml")]
CONFIGS = ["grouped_masked_fp8_h100_128x128", "grouped_masked_fp8_h100_128x256", "grouped_masked_fp8_h100_256x128",
           "grouped_masked_fp8_h100_128x256_c2"] + VARIANTS
TUNE = [(g, m, n, k) for g in (4, 12) for m in (64, 128, 256) for n, k in ((3072, 4096), (4096, 1536), (14336, 4096))]
SPLIT = [(4, 64, 4096, 1536), (12, 64, 4096, 1536), (12, 128, 14336, 4096)]


def old_scale_map(t, device):
    """The scale copy before this change, for scale tensors not in the kernel's layout (the only ones the timing
    passes it): ``torch.empty`` + a slice + ``copy_`` every call."""
    if t.dim() == 2:
        t = t.unsqueeze(0)
    groups, rows, kblocks = t.shape
    pad = -(-rows // 4) * 4
    staged = torch.empty((kblocks, groups, pad), dtype=torch.float32, device=device)
    staged[:, :, :rows].copy_(t.permute(2, 0, 1))
    return (staged.data_ptr(), kblocks, groups * pad, groups * pad), staged


def old_path(fn):
    """``fn`` run with the runtime's scale path before this change (module attributes patched for the call)."""
    new_map, new_b = api._scale_map, grouped.GroupedCall._scale_b_map

    def run():
        api._scale_map = old_scale_map
        grouped.GroupedCall._scale_b_map = lambda self, t, stream: old_scale_map(t, self.device)
        try:
            return fn()
        finally:
            api._scale_map, grouped.GroupedCall._scale_b_map = new_map, new_b
    return run


def problem(groups, m_max, n, k, seed=0):
    gen = torch.Generator().manual_seed(groups * m_max + n + seed)
    rows = [int(x) for x in torch.randint(m_max // 2, m_max + 1, (groups,), generator=gen)]
    a, b, sa, sb = operands(groups * m_max, groups, n, k, True, seed)
    return rows, a.reshape(groups, m_max, k), b, sa.reshape(groups, m_max, -1), sb


def check_d(out, a, b, sa, sb, rows, tag):
    """Max group rel. Frobenius error against fp32 and the count of elements written past masked_m (NaN before)."""
    groups, m_max, n = out.shape
    k = a.shape[-1]
    fa, fsa = a.reshape(groups * m_max, k), sa.reshape(groups * m_max, -1)
    errs = [rel(out[g, :r], reference_rows(fa, b, fsa, sb, g, g * m_max, g * m_max + r))
            for g, r in enumerate(rows) if r]
    written = sum(int((~torch.isnan(out[g, r:].float())).sum()) for g, r in enumerate(rows))
    ok = max(errs) < 1e-2 and written == 0
    print(f"{tag}: max group rel err {max(errs):.2e}, untouched elements written {written}: {'ok' if ok else 'WRONG'}",
          flush=True)
    return {"case": tag, "max_rel_err": max(errs), "written": written, "ok": ok}


def check(json_path):
    """The 64-row variants at M_max = 64 and 130 (groups of 64/70, 0, 1, 33/129 rows) and the default call's scale
    path: scale_a cloned (M_max % 4 == 0) or padded (M_max = 62), scale_b kept, then written in place, replaced,
    and the call captured in a CUDA graph; each D NaN-poisoned first."""
    results = []
    for cfg in VARIANTS:
        for m_max, rows in ((64, [64, 0, 1, 33]), (130, [70, 0, 1, 129])):
            _, a, b, sa, sb = problem(4, m_max, 200, 272)
            out = torch.full((4, m_max, 200), float("nan"), device="cuda", dtype=torch.bfloat16)
            ptxgen.grouped_gemm(a, b, masked_m=torch.tensor(rows, dtype=torch.int32, device="cuda"), scale_a=sa,
                                scale_b=sb, out=out, config=cfg)
            torch.cuda.synchronize()
            results.append(check_d(out, a, b, sa, sb, rows, f"{Path(cfg).stem} M_max={m_max}"))
    for m_max, rows in ((64, [64, 0, 1, 40, 17, 64, 2, 63]), (62, [62, 0, 1, 40, 17, 61, 2, 3])):
        _, a, b, sa, sb = problem(8, m_max, 7168, 2048)
        mm = torch.tensor(rows, dtype=torch.int32, device="cuda")

        def call(sa=sa, sb=sb, tag=""):
            out = torch.full(a.shape[:2] + (b.shape[1],), float("nan"), device="cuda", dtype=torch.bfloat16)
            ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb, out=out)
            torch.cuda.synchronize()
            results.append(check_d(out, a, b, sa, sb, rows, f"default M_max={m_max} {tag}"))
        call(tag="first call")
        call(tag="scale_b kept")
        sb.mul_(2.0)
        call(tag="scale_b written in place")
        sb2 = sb.clone() * 0.5
        call(sb=sb2, tag="scale_b replaced")
        sa.mul_(0.25)
        call(sb=sb2, tag="scale_a written in place")
        out = torch.full(a.shape[:2] + (b.shape[1],), float("nan"), device="cuda", dtype=torch.bfloat16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb2, out=out, check_tables=False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb2, out=out, check_tables=False)
        out.fill_(float("nan"))
        sb2.mul_(3.0)  # the graph's copy reads scale_b at replay
        graph.replay()
        torch.cuda.synchronize()
        results.append(check_d(out, a, b, sa, sb2, rows, f"default M_max={m_max} CUDA graph replay"))
    from ptxgen.runtime.fp8 import dequantize, quantize

    for m, n in ((256, 512), (250, 384)):  # gemm_fp8's scale copy: cloned (256 and 512 / 128 rows), padded (250, 3)
        gen = torch.Generator(device="cuda").manual_seed(m)
        qa, sa = quantize(torch.randn(m, 1024, device="cuda", generator=gen), 1)
        qb, sb = quantize(torch.randn(n, 1024, device="cuda", generator=gen), 128)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ptxgen.gemm_fp8(qa, qb, sa, sb, out=out)
        torch.cuda.synchronize()
        err = rel(out, dequantize(qa, sa, 1) @ dequantize(qb, sb, 128).T)
        ok = err < 1e-2
        print(f"gemm_fp8 {m}x{n}x1024: rel err {err:.2e}: {'ok' if ok else 'WRONG'}", flush=True)
        results.append({"case": f"gemm_fp8 {m}x{n}x1024", "max_rel_err": err, "ok": ok})
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


def label(cfg):
    return Path(cfg).stem


def time(json_path):
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_GBps": round(copy_bandwidth(), 1)}
    print(json.dumps(info), flush=True)
    out_rows, split_rows = [], []
    for groups, m_max, n, k in TUNE:
        rows, a, b, sa, sb = problem(groups, m_max, n, k)
        fast_a, fast_b = grouped.tma_scale_layout(sa), grouped.tma_scale_layout(sb)
        mm = torch.tensor(rows, dtype=torch.int32, device="cuda")
        out = torch.empty((groups, m_max, n), device="cuda", dtype=torch.bfloat16)
        nbytes = groups * n * k
        row = {"G": groups, "M_max": m_max, "N": n, "K": k, "masked_m_mean": round(sum(rows) / groups, 1),
               "default_config": grouped.default_config(grouped.GroupedProblem("masked", True, groups, groups * m_max,
                                                                               m_max, n, k))}
        fns = {}
        for cfg in CONFIGS:
            fns[label(cfg)] = (lambda cfg=cfg: ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=fast_a, scale_b=fast_b,
                                                                   out=out, config=cfg, check_tables=False))
        fns["default"] = lambda: ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb, out=out)
        fns["default, old scale path"] = old_path(fns["default"])
        fns["default, scales in place"] = lambda: ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=fast_a,
                                                                      scale_b=fast_b, out=out)
        for fn in fns.values():
            fn()
        runs = interleaved_us(fns)
        for name, r in runs.items():
            med = statistics.median(r)
            row[name] = {"us": round(med, 2), "us_min": round(min(r), 2), "us_max": round(max(r), 2),
                         "of_copy": round(nbytes / med / 1e3 / info["copy_GBps"], 3),
                         "over_128x128": paired_ratio(runs["grouped_masked_fp8_h100_128x128"], r)}
        out_rows.append(row)
        print(json.dumps({key: (v["us"], v["of_copy"]) if isinstance(v, dict) else v for key, v in row.items()}),
              flush=True)
        if (groups, m_max, n, k) in SPLIT:
            split = {"G": groups, "M_max": m_max, "N": n, "K": k}
            for name in ("default", "default, old scale path", "default, scales in place"):
                med, lo, hi = host_us(fns[name])
                split[name] = {"host_us": [round(med, 2), round(lo, 2), round(hi, 2)]}
                try:
                    split[name]["kernels_us"] = kernel_us(fns[name])
                except Exception as exc:  # noqa: BLE001 - no CUPTI
                    split[name]["kernels_us"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            split["host_us_scale_map"] = {}
            for name, fn in (("scale_a new", lambda: api._scale_map(sa, a.device)),
                             ("scale_a old", lambda: old_scale_map(sa, a.device))):
                med, lo, hi = host_us(fn, inner=50)
                split["host_us_scale_map"][name] = [round(med, 2), round(lo, 2), round(hi, 2)]
            split_rows.append(split)
            print(json.dumps(split), flush=True)
        del a, b, sa, sb, fast_a, fast_b, out
        if json_path:
            with open(json_path, "w") as f:
                json.dump({"info": info, "rows": out_rows, "split": split_rows}, f, indent=1)


if __name__ == "__main__":
    path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    sys.exit(check(path) if sys.argv[1:2] == ["check"] else time(path))
