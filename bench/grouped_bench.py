"""Grouped GEMM (mixture-of-experts) on the GPU: checked small problems (for compute-sanitizer) or timings.

    python3 bench/grouped_bench.py one [--configs A,B]  # one small problem per layout and dtype (or per named
                                                        # config, of its layout and dtype); exit 1 if wrong
    python3 bench/grouped_bench.py bench [--json PATH] [--quick] [--defaults] [--configs A,B] [--parts P,Q]
    python3 bench/grouped_bench.py host [--json PATH]   # per-call host time against GPU time (HOST_CASES)
    python3 bench/grouped_bench.py gkn [--json PATH]    # bf16 weights stored [G, K, N] (:func:`gkn`)

``bench`` times, with CUDA events, the median of 5 runs of 10 launches, each after a warm-up (with the spread, min
and max of the 5; contiguous FP8: 7 rounds, each timing one run of every side in a rotated order, and the ratio to
the loop paired by round, with the CUDA-graph GPU time of the loop and of each config's scales-in-place call and
the loop's host time, :func:`fp8_sides`; docs/grouped.md, "The FP8 baseline and what bounds the FP8 pair"):

* contiguous BF16 (``m_indices``), every shipped config of the layout, against ``torch._grouped_mm`` (2-D A x 3-D
  B with ``offs``, the segments' padded ends) where the installed torch has it;
* contiguous FP8 against a loop of per-group ``torch._scaled_mm`` with the recipe's block scales;
* masked decode (``masked_m``; G in {8, 16, 32}, M_max in {64, 128, 256}, N x K in {4096 x 7168, 7168 x 2048}),
  bf16 and FP8: the bytes of the weights read (every group with rows reads its whole B) over the time, against a
  device-to-device copy's bandwidth timed in the same run (bytes read + written over its time).

Each ptxgen timing is taken twice: the default call (``check_tables=True``: the table is read on the host by the
first call and, while it is the same unchanged tensor, not again) and ``check_tables=False``.  ``--defaults`` times
only the shipped choice (``config=None``) of each problem.  ``--configs`` (names or YAML paths, e.g. the
``bench/configs`` variants) adds configs, each timed in the parts of its layout and operand type after the ones the
run times anyway; ``--parts`` (``contiguous``, ``masked``; default both) runs only those parts.  The JSON has every
row, the device name and the torch version.  Parts run in the order contiguous FP8, contiguous BF16, masked FP8,
masked BF16; the JSON is written after each part.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys

import torch

import ptxgen
from fp8_bench import scaled_mm_variants  # the block-scale layouts torch._scaled_mm may take (same folder)
from fp8_bench import time_us as fp8_time_us
from ptxgen.config import load_config, shipped_configs
from ptxgen.runtime import grouped
from ptxgen.runtime.fp8 import dequantize, quantize
from ptxgen.runtime.grouped import contiguous_layout

BLOCK = 128
DECODE = [(g, m, n, k) for n, k in ((4096, 7168), (7168, 2048)) for g in (8, 16, 32) for m in (64, 128, 256)]
PREFILL = [(8, 4096, 4096, 7168), (8, 4096, 7168, 2048), (32, 1024, 4096, 7168), (32, 1024, 7168, 2048)]


def configs_for(layout: str, fp8: bool) -> list[str]:
    """Every shipped config of the layout and operand type."""
    return [c for c in shipped_configs() if (cfg := load_config(c)).schedule.grouped == layout
            and (cfg.operands == "fp8") == fp8]


def _list_arg(flag: str) -> list[str]:
    return sys.argv[sys.argv.index(flag) + 1].split(",") if flag in sys.argv else []


#: ``--configs``: configs timed beside the shipped ones (names or YAML paths)
EXTRA_CONFIGS = _list_arg("--configs") if sys.argv[1:2] == ["bench"] else []
#: ``--parts``: the layouts timed
PARTS = _list_arg("--parts") or ["contiguous", "masked"]


def timed_configs(layout: str, fp8: bool) -> list:
    """The configs a part times: the shipped choice (``--defaults``) or every shipped config of the layout and
    operand type, then the ``--configs`` of that layout and type."""
    extra = [c for c in EXTRA_CONFIGS if (cfg := load_config(c)).schedule.grouped == layout
             and (cfg.operands == "fp8") == fp8]
    return ([None] if DEFAULTS_ONLY else configs_for(layout, fp8)) + extra


def config_label(cfg: str | None) -> str:
    """A config's name in the results: ``default`` for None, a YAML path's config name."""
    return "default" if cfg is None else load_config(cfg).name


def time_us(fn, reps=5, inner=10):
    """(median, min, max) microseconds per call over ``reps`` runs of ``inner`` calls (fp8_bench's timing: CUDA
    events after a warm-up)."""
    runs = [fp8_time_us(fn, reps=1, inner=inner)[0] for _ in range(reps)]
    return statistics.median(runs), min(runs), max(runs)


def interleaved_us(fns: dict, reps: int = 7, inner: int = 10) -> dict:
    """Per side, the microseconds per call of each of ``reps`` rounds: a round times one run of ``inner`` calls of
    every side (CUDA events, each run after its own warm-up, :func:`time_us`), the sides in an order rotated by one
    each round, so a drift of the device over the measurement (clocks, temperature, another tenant) falls on every
    side alike and two sides' runs of one round are a pair.  ``fns``: label -> callable."""
    names = list(fns)
    runs = {n: [] for n in names}
    for r in range(reps):
        for n in names[r % len(names):] + names[:r % len(names)]:
            runs[n].append(fp8_time_us(fns[n], reps=1, inner=inner)[0])
    return runs


def paired_ratio(num: list[float], den: list[float]) -> list[float]:
    """(median, min, max) over the rounds of ``num[r] / den[r]`` (two sides of :func:`interleaved_us`)."""
    ratios = [x / y for x, y in zip(num, den)]
    return [round(statistics.median(ratios), 3), round(min(ratios), 3), round(max(ratios), 3)]


def group_rows(groups: int, mean: int, seed: int) -> list[int]:
    """Rows per group: uniform in [mean / 2, 3 mean / 2], one group empty when G > 4."""
    g = torch.Generator().manual_seed(seed)
    rows = [int(x) for x in torch.randint(mean // 2, mean * 3 // 2 + 1, (groups,), generator=g)]
    if groups > 4:
        rows[1] = 0
    return rows


def operands(rows: int, groups: int, n: int, k: int, fp8: bool, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(rows, k, device="cuda", generator=gen)
    b = torch.randn(groups, n, k, device="cuda", generator=gen)
    if not fp8:
        return a.bfloat16(), b.bfloat16(), None, None
    qa, sa = quantize(a, 1)
    qb = [quantize(b[g], BLOCK) for g in range(groups)]
    return qa, torch.stack([q for q, _ in qb]), sa, torch.stack([s for _, s in qb])


def rel(x, ref):
    return float((x.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def reference_rows(a, b, sa, sb, g, r0, r1):
    if sa is None:
        return a[r0:r1].float() @ b[g].float().T
    return dequantize(a[r0:r1], sa[r0:r1], 1) @ dequantize(b[g], sb[g], BLOCK).T


def one(configs: list[str] | None = None) -> int:
    """One small problem per (layout, dtype), or per config of ``configs`` (its layout and dtype; ragged groups: 70,
    0, 1 and 129 rows): D per group against fp32, untouched rows still NaN."""
    bad = 0
    runs = ([(load_config(c).operands == "fp8", load_config(c).schedule.grouped, c) for c in configs] if configs
            else [(fp8, layout, None) for fp8 in (False, True) for layout in ("masked", "contiguous")])
    for fp8, layout, cfg in runs:
        rows, n, k = [70, 0, 1, 129], 200, 272 if fp8 else 264
        groups = len(rows)
        if layout == "masked":
            m_max = 130
            a, b, sa, sb = operands(groups * m_max, groups, n, k, fp8)
            spans = [(g * m_max, g * m_max + r) for g, r in enumerate(rows)]
            out = torch.full((groups, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            ptxgen.grouped_gemm(a.reshape(groups, m_max, k), b,
                                masked_m=torch.tensor(rows, dtype=torch.int32, device="cuda"),
                                scale_a=None if sa is None else sa.reshape(groups, m_max, -1), scale_b=sb, out=out,
                                config=cfg)
        else:
            idx = contiguous_layout(rows, device="cuda")
            a, b, sa, sb = operands(idx.numel(), groups, n, k, fp8)
            starts = [0]
            for r in rows:
                starts.append(starts[-1] + -(-r // BLOCK) * BLOCK)
            spans = [(starts[g], starts[g] + r) for g, r in enumerate(rows)]
            out = torch.full((idx.numel(), n), float("nan"), device="cuda", dtype=torch.bfloat16)
            ptxgen.grouped_gemm(a, b, m_indices=idx, scale_a=sa, scale_b=sb, out=out, config=cfg)
        torch.cuda.synchronize()
        flat = out.reshape(-1, n)
        valid = torch.zeros(flat.shape[0], dtype=torch.bool, device="cuda")
        errs = []
        for g, (r0, r1) in enumerate(spans):
            valid[r0:r1] = True
            if r1 > r0:
                errs.append(rel(flat[r0:r1], reference_rows(a, b, sa, sb, g, r0, r1)))
        written = int((~torch.isnan(flat[~valid].float())).sum())
        ok = max(errs) < 1e-2 and written == 0
        bad += not ok
        print(f"{cfg or layout} {'fp8' if fp8 else 'bf16'}: max group rel err {max(errs):.2e}, untouched elements "
              f"written {written}: {'ok' if ok else 'WRONG'}")
    return 1 if bad else 0


def copy_bandwidth() -> float:
    """Device-to-device copy, GB/s of bytes read + written (1 GiB copied)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us, _, _ = time_us(lambda: dst.copy_(src), inner=5)
    return 2 * src.numel() / us / 1e3


#: ``--defaults``: time only ``config=None`` (the shipped choice), not every config of the layout
DEFAULTS_ONLY = "--defaults" in sys.argv


def label(cfg: str | None, checked: bool) -> str:
    """A timing's key: the config (``default`` for None) and the table mode."""
    return f"{config_label(cfg)}{'' if checked else ' check_tables=False'}"


def variants(cfg: str | None, sa, sb) -> list:
    """(label, check_tables, (scale_a, scale_b)) of each timing: the table modes, and for FP8 where the runtime has
    :func:`ptxgen.runtime.grouped.tma_scale_layout` the default call with scales in the kernel's layout (read in
    place, no copy per call)."""
    out = [(label(cfg, checked), checked, (sa, sb)) for checked in (False, True)]
    if sa is not None and hasattr(grouped, "tma_scale_layout"):
        out.append((f"{config_label(cfg)} scales in place", True,
                    (grouped.tma_scale_layout(sa), grouped.tma_scale_layout(sb))))
    return out


def _timed(row: dict, label: str, fn, flop: float = 0.0, nbytes: float = 0.0) -> None:
    med, lo, hi = time_us(fn)
    row[label] = {"us": round(med, 2), "us_min": round(lo, 2), "us_max": round(hi, 2)}
    if flop:
        row[label]["tflops"] = round(flop / med / 1e6, 1)
    if nbytes:
        row[label]["weight_GBps"] = round(nbytes / med / 1e3, 1)


def scaled_mm_loop(a, b, sa, sb, rows: list[int], starts: list[int], row: dict):
    """The contiguous FP8 baseline: a loop of per-group ``torch._scaled_mm`` with the recipe's block scales, in the
    first scale layout the installed torch takes (``fp8_bench.scaled_mm_variants``); per-group operands sliced once,
    rows padded to 16 (the segments' padding).  Records the layout, the refusals and group 0's relative error in
    ``row``; returns the loop (a callable) or None when torch refuses every layout."""
    spans = [(starts[g], starts[g] + r) for g, r in enumerate(rows) if r]
    gs = [g for g, r in enumerate(rows) if r]
    per = [(a[r0:r0 + -(-(r1 - r0) // 16) * 16], b[g], sa[r0:r0 + -(-(r1 - r0) // 16) * 16], sb[g])
           for g, (r0, r1) in zip(gs, spans)]
    for i in range(len(scaled_mm_variants(*per[0]))):
        args = [(x, y) + scaled_mm_variants(x, y, u, v)[i][1:] for x, y, u, v in per]
        what = scaled_mm_variants(*per[0])[i][0]
        try:
            d = [torch._scaled_mm(x, y.T, scale_a=u, scale_b=v, out_dtype=torch.bfloat16) for x, y, u, v in args]
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - report what the installed torch refuses
            row.setdefault("scaled_mm refused", []).append(f"{what}: {type(exc).__name__}: "
                                                           f"{str(exc).splitlines()[0][:160]}")
            continue
        err = rel(d[0][:rows[gs[0]]], reference_rows(a, b, sa, sb, gs[0], spans[0][0], spans[0][1]))
        if err > 1e-2:  # a layout torch accepts but reads otherwise (square scale_b: N == K)
            row.setdefault("scaled_mm refused", []).append(f"{what}: accepted, group 0 rel err {err:.3g}")
            continue
        row["scaled_mm layout"] = what
        row["torch._scaled_mm loop rel err (group 0)"] = err
        return lambda first_only=False: [torch._scaled_mm(x, y.T, scale_a=u, scale_b=v, out_dtype=torch.bfloat16)
                                         for x, y, u, v in (args[:1] if first_only else args)]
    return None


LOOP = "torch._scaled_mm loop"


def fp8_sides(row: dict, sides: dict, flop: float) -> None:
    """Contiguous FP8: every ptxgen timing and the ``_scaled_mm`` loop, interleaved (:func:`interleaved_us`, 7
    rounds); each ptxgen timing's ratio to the loop paired by round (``ratio to loop``: median, min, max); and the
    GPU time without the host path of the loop and of each config's scales-in-place call (``graph``: a CUDA graph
    of 10 calls replayed, :func:`graph_us`).  The loop launches one kernel per group, each behind torch's host path:
    where a group's kernel is shorter than that path the events time the host (docs/grouped.md, "The FP8 baseline and
    what bounds the FP8 pair")."""
    runs = interleaved_us(sides)
    for what, us in runs.items():
        med = statistics.median(us)
        row[what] = {"us": round(med, 2), "us_min": round(min(us), 2), "us_max": round(max(us), 2),
                     "tflops": round(flop / med / 1e6, 1)}
        if what != LOOP and LOOP in runs:
            row[what]["ratio to loop"] = paired_ratio(runs[LOOP], us)
    for what, fn in sides.items():
        if what == LOOP or what.endswith("scales in place"):
            try:
                med, lo, hi = graph_us(fn)
                row[f"{what} graph"] = {"us": round(med, 2), "us_min": round(lo, 2), "us_max": round(hi, 2),
                                        "tflops": round(flop / med / 1e6, 1)}
            except Exception as exc:  # noqa: BLE001 - a call that cannot be captured says why
                row[f"{what} graph"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                torch.cuda.synchronize()
    if LOOP in sides:
        row[f"{LOOP} host_us"] = [round(x, 2) for x in host_us(sides[LOOP])]


def contiguous_rows(fp8: bool, quick: bool) -> list[dict]:
    out_rows = []
    for groups, mean, n, k in PREFILL[:2] if quick else PREFILL:
        rows = group_rows(groups, mean, 7)
        idx = contiguous_layout(rows, device="cuda")
        a, b, sa, sb = operands(idx.numel(), groups, n, k, fp8)
        flop = 2.0 * sum(rows) * n * k
        out = torch.empty((idx.numel(), n), device="cuda", dtype=torch.bfloat16)
        row = {"layout": "contiguous", "dtype": "fp8" if fp8 else "bf16", "G": groups, "rows": rows, "N": n, "K": k}
        starts = [0]
        for r in rows:
            starts.append(starts[-1] + -(-r // BLOCK) * BLOCK)
        sides = {}
        for cfg in timed_configs("contiguous", fp8):
            out.fill_(float("nan"))
            ptxgen.grouped_gemm(a, b, m_indices=idx, scale_a=sa, scale_b=sb, out=out, config=cfg)  # checks the table
            last = max(g for g, r in enumerate(rows) if r)
            row[f"{config_label(cfg)} rel err (first, last group)"] = [
                rel(out[:rows[0]], reference_rows(a, b, sa, sb, 0, 0, rows[0])),
                rel(out[starts[last]:starts[last] + rows[last]],
                    reference_rows(a, b, sa, sb, last, starts[last], starts[last] + rows[last]))]
            for what, checked, (u, v) in variants(cfg, sa, sb):
                fn = (lambda cfg=cfg, u=u, v=v, checked=checked: ptxgen.grouped_gemm(
                    a, b, m_indices=idx, scale_a=u, scale_b=v, out=out, check_tables=checked, config=cfg))
                if fp8:
                    sides[what] = fn  # timed below, interleaved with the loop
                else:
                    _timed(row, what, fn, flop)
        if not fp8:
            if hasattr(torch, "_grouped_mm"):
                offs = torch.tensor(starts[1:], dtype=torch.int32, device="cuda")
                bt = b.transpose(-2, -1)
                try:
                    d = torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)
                    torch.cuda.synchronize()
                    row["torch._grouped_mm rel err (group 0)"] = rel(d[:rows[0]], out[:rows[0]].float())
                    _timed(row, "torch._grouped_mm", lambda: torch._grouped_mm(a, bt, offs=offs,
                                                                               out_dtype=torch.bfloat16), flop)
                except Exception as exc:  # noqa: BLE001 - report what the installed torch refuses
                    row["torch._grouped_mm"] = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            else:
                row["torch._grouped_mm"] = "absent in this torch"
        else:
            loop = scaled_mm_loop(a, b, sa, sb, rows, starts, row)
            if loop is not None:
                sides[LOOP] = loop
            fp8_sides(row, sides, flop)
        out_rows.append(row)
        print(json.dumps(row))
    return out_rows


def masked_rows(fp8: bool, quick: bool, copy_gbps: float) -> list[dict]:
    out_rows = []
    for groups, m_max, n, k in (DECODE[::4] if quick else DECODE):
        g = torch.Generator().manual_seed(groups * m_max)
        rows = [int(x) for x in torch.randint(m_max // 2, m_max + 1, (groups,), generator=g)]
        a, b, sa, sb = operands(groups * m_max, groups, n, k, fp8)
        a = a.reshape(groups, m_max, k)
        sa = None if sa is None else sa.reshape(groups, m_max, -1)
        mm = torch.tensor(rows, dtype=torch.int32, device="cuda")
        out = torch.empty((groups, m_max, n), device="cuda", dtype=torch.bfloat16)
        nbytes = sum(1 for r in rows if r) * n * k * b.element_size()
        row = {"layout": "masked", "dtype": "fp8" if fp8 else "bf16", "G": groups, "M_max": m_max,
               "masked_m_mean": round(sum(rows) / groups, 1), "N": n, "K": k, "weight_bytes": nbytes}
        for cfg in timed_configs("masked", fp8):
            ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=sa, scale_b=sb, out=out, config=cfg)  # checks the table
            row[f"{config_label(cfg)} rel err (group 0)"] = rel(out[0, :rows[0]], reference_rows(
                a.reshape(groups * m_max, k), b, None if sa is None else sa.reshape(groups * m_max, -1), sb, 0, 0, rows[0]))
            for what, checked, (u, v) in variants(cfg, sa, sb):
                _timed(row, what, lambda: ptxgen.grouped_gemm(a, b, masked_m=mm, scale_a=u, scale_b=v, out=out,
                                                              check_tables=checked, config=cfg),
                       2.0 * sum(rows) * n * k, nbytes)
                row[what]["fraction_of_copy_bw"] = round(row[what]["weight_GBps"] / copy_gbps, 3)
        out_rows.append(row)
        print(json.dumps(row))
    return out_rows


def bench(json_path: str | None, quick: bool) -> None:
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "has_grouped_mm": hasattr(torch, "_grouped_mm")}
    if info["has_grouped_mm"]:
        import inspect

        try:
            info["grouped_mm_signature"] = str(inspect.signature(torch._grouped_mm))
        except (TypeError, ValueError):
            info["grouped_mm_signature"] = (torch._grouped_mm.__doc__ or "")[:300]
    info["copy_GBps"] = round(copy_bandwidth(), 1)
    print(json.dumps(info))
    rows = []
    parts = [("contiguous", lambda: contiguous_rows(True, quick)),
             ("contiguous", lambda: contiguous_rows(False, quick)),
             ("masked", lambda: masked_rows(True, quick, info["copy_GBps"])),
             ("masked", lambda: masked_rows(False, quick, info["copy_GBps"]))]
    for layout, part in parts:
        if layout not in PARTS:
            continue
        rows += part()
        if json_path:  # after each part: a run cut short keeps what it measured
            with open(json_path, "w") as f:
                json.dump({"info": info, "rows": rows}, f, indent=1)


#: (layout, fp8, G, M_max or mean rows per group, N, K) of the host-time measurement: the masked rows that sat on
#: the per-call floor, one that did not, and one contiguous problem of each dtype
HOST_CASES = [("masked", True, 8, 64, 7168, 2048), ("masked", True, 8, 128, 4096, 7168),
              ("masked", True, 32, 64, 4096, 7168), ("masked", False, 8, 64, 7168, 2048),
              ("contiguous", True, 8, 4096, 4096, 7168), ("contiguous", False, 8, 4096, 7168, 2048)]


def host_problem(layout, fp8, groups, rows_per, n, k):
    """Operands and a ``grouped_gemm`` keyword set of one HOST_CASES row (default config)."""
    if layout == "masked":
        g = torch.Generator().manual_seed(groups * rows_per)
        rows = [int(x) for x in torch.randint(rows_per // 2, rows_per + 1, (groups,), generator=g)]
        a, b, sa, sb = operands(groups * rows_per, groups, n, k, fp8)
        kw = {"a": a.reshape(groups, rows_per, k), "b": b, "masked_m": torch.tensor(rows, dtype=torch.int32,
                                                                                    device="cuda"),
              "scale_a": None if sa is None else sa.reshape(groups, rows_per, -1), "scale_b": sb,
              "out": torch.empty((groups, rows_per, n), device="cuda", dtype=torch.bfloat16)}
    else:
        rows = group_rows(groups, rows_per, 7)
        idx = contiguous_layout(rows, device="cuda")
        a, b, sa, sb = operands(idx.numel(), groups, n, k, fp8)
        kw = {"a": a, "b": b, "m_indices": idx, "scale_a": sa, "scale_b": sb,
              "out": torch.empty((idx.numel(), n), device="cuda", dtype=torch.bfloat16)}
    return rows, kw


def host_us(fn, reps=5, inner=10):
    """(median, min, max) microseconds of host time per call: ``inner`` calls back to back, no synchronize between
    them (a call that synchronizes itself pays its GPU time here too)."""
    import time

    runs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        runs.append((time.perf_counter() - t0) * 1e6 / inner)
    torch.cuda.synchronize()
    return statistics.median(runs), min(runs), max(runs)


def graph_us(fn, reps=5, inner=10):
    """(median, min, max) microseconds per call of a CUDA graph holding ``inner`` calls, replayed (the GPU time of
    the call's kernels, staging copies included, without the host path)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up on a side stream, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    med, lo, hi = time_us(graph.replay, reps=reps, inner=1)
    return med / inner, lo / inner, hi / inner


def kernel_us(fn, inner=10):
    """GPU microseconds per call by kernel name (torch.profiler, CUPTI), over ``inner`` calls."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
    per = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t:
            per[ev.key[:60]] = round(t / inner, 2)
    return per


def host_parts(kw) -> dict:
    """Host microseconds of the parts of one call (median of 200): the operand check with and without the table
    read, and the scale staging where this version has it."""
    import time

    from ptxgen.runtime import grouped

    def us(fn, n=200):
        for _ in range(5):
            fn()
        t = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        return round(statistics.median(t) * 1e6, 2)

    args = {x: kw.get(x) for x in ("a", "b", "m_indices", "masked_m", "scale_a", "scale_b", "out")}
    parts = {"torch.empty(1) on cuda": us(lambda: torch.empty(1, device="cuda")),
             "check, check_tables=False": us(lambda: grouped.check_grouped_operands(**args, check_tables=False)),
             "check, check_tables=True": us(lambda: grouped.check_grouped_operands(**args, check_tables=True))}
    if kw.get("scale_b") is not None and hasattr(grouped, "_scale_b_map"):  # before the cached call signature
        parts["scale_b staging"] = us(lambda: grouped._scale_b_map(kw["scale_b"], kw["a"].device))
        if "masked_m" in kw and hasattr(grouped, "_scale_a_map"):
            parts["scale_a staging"] = us(lambda: grouped._scale_a_map(kw["scale_a"], kw["a"].device))
    elif kw.get("scale_b") is not None:
        from ptxgen.runtime import api

        for name in ("scale_a", "scale_b"):
            parts[f"{name} map (copied)"] = us(lambda: api._scale_map(kw[name], kw["a"].device))
            fast = grouped.tma_scale_layout(kw[name])
            parts[f"{name} map (in place)"] = us(lambda: api._scale_map(fast, kw["a"].device))
    return parts


def host(json_path: str | None) -> None:
    """Per call: host time, event time (what ``bench`` reports), CUDA-graph replay and kernel time, with
    ``check_tables`` True and False, for each HOST_CASES problem at its default config."""
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "copy_GBps": round(copy_bandwidth(), 1)}
    print(json.dumps(info))
    rows = []
    for case in HOST_CASES:
        layout, fp8, groups, rows_per, n, k = case
        _, kw = host_problem(*case)
        row = {"layout": layout, "dtype": "fp8" if fp8 else "bf16", "G": groups,
               ("M_max" if layout == "masked" else "mean rows"): rows_per, "N": n, "K": k}
        ptxgen.grouped_gemm(**kw)  # loads the kernel, checks the table
        try:
            row["kernels_us"] = kernel_us(lambda: ptxgen.grouped_gemm(**kw, check_tables=False))
        except Exception as exc:  # noqa: BLE001 - no CUPTI: the graph time stands for it
            row["kernels_us"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        for checked in (False, True):
            fn = lambda: ptxgen.grouped_gemm(**kw, check_tables=checked)  # noqa: E731
            part = row[f"check_tables={checked}"] = {}
            for what, timer in (("host_us", host_us), ("events_us", time_us), ("graph_us", graph_us)):
                if what == "graph_us" and checked and not hasattr(grouped, "GroupedCall"):
                    part[what] = "not capturable: the table check copies the table to the host"
                    continue
                try:
                    med, lo, hi = timer(fn)
                    part[what] = [round(med, 2), round(lo, 2), round(hi, 2)]
                except Exception as exc:  # noqa: BLE001 - a call that cannot be captured says why
                    part[what] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    torch.cuda.synchronize()
        if hasattr(grouped, "GroupedCall"):  # the cached call signature: the modes it adds
            modes = {"cpu table": dict(kw, **{t: kw[t].cpu() for t in ("masked_m", "m_indices") if t in kw})}
            if fp8:
                modes["scales in place"] = dict(kw, scale_a=grouped.tma_scale_layout(kw["scale_a"]),
                                                scale_b=grouped.tma_scale_layout(kw["scale_b"]))
            name = "masked_m" if layout == "masked" else "m_indices"
            tables = itertools.cycle([kw[name].clone(), kw[name].clone()])  # another object each call: read each time
            modes["new table object per call"] = None
            for mode, kw2 in modes.items():
                if kw2 is None:
                    fn = lambda: ptxgen.grouped_gemm(**dict(kw, **{name: next(tables)}))  # noqa: E731
                else:
                    ptxgen.grouped_gemm(**kw2)
                    fn = lambda: ptxgen.grouped_gemm(**kw2)  # noqa: E731
                part = row[mode] = {}
                for what, timer in (("host_us", host_us), ("events_us", time_us)) + (
                        (("graph_us", graph_us),) if mode == "scales in place" else ()):
                    med, lo, hi = timer(fn)
                    part[what] = [round(med, 2), round(lo, 2), round(hi, 2)]
        row["host_parts_us"] = host_parts(kw)
        rows.append(row)
        print(json.dumps(row))
        if json_path:
            with open(json_path, "w") as f:
                json.dump({"info": info, "rows": rows}, f, indent=1)


#: (layout, G, mean rows per group or M_max, N, K) of :func:`gkn`: the contiguous prefill problems, masked decode
GKN_CASES = [("contiguous", *p) for p in PREFILL] + [("masked", 8, 64, 4096, 7168), ("masked", 8, 256, 4096, 7168),
                                                      ("masked", 32, 64, 7168, 2048), ("masked", 32, 256, 7168, 2048)]


def gkn(json_path: str | None) -> None:
    """bf16 expert weights stored ``[G, K, N]`` (``torch._grouped_mm``'s layout, ``w``), default configs, rounds of
    :func:`interleaved_us` (7 x 10 calls): ``torch._grouped_mm(a, w, offs)`` (masked: 3-D A, every row of M_max),
    ``ptxgen.grouped_gemm(a, w.transpose(1, 2))`` read in place (MN-major), the copy it replaces
    (``w.transpose(1, 2).contiguous()`` then the call) and the K-major kernel on a ``[G, N, K]`` copy made once.
    Each side is checked once against the fp32 reference of the first and last group with rows."""
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(json.dumps(info))
    rows_out = []
    for layout, groups, per, n, k in GKN_CASES:
        if layout == "masked":
            rows = group_rows(groups, per, 7)
            rows = [min(r, per) for r in rows]
            a, b, _, _ = operands(groups * per, groups, n, k, False)
            a = a.reshape(groups, per, k)
            table = {"masked_m": torch.tensor(rows, dtype=torch.int32, device="cuda")}
            out = torch.empty((groups, per, n), device="cuda", dtype=torch.bfloat16)
            spans = [(g * per, g * per + r) for g, r in enumerate(rows)]
        else:
            rows = group_rows(groups, per, 7)
            table = {"m_indices": contiguous_layout(rows, device="cuda")}
            total = table["m_indices"].numel()
            a, b, _, _ = operands(total, groups, n, k, False)
            out = torch.empty((total, n), device="cuda", dtype=torch.bfloat16)
            starts = [0]
            for r in rows:
                starts.append(starts[-1] + -(-r // BLOCK) * BLOCK)
            spans = [(s0, s0 + r) for s0, r in zip(starts, rows)]
        w = b.transpose(1, 2).contiguous()  # [G, K, N]
        del b
        b_nk = w.transpose(1, 2).contiguous()  # the K-major kernel's B, made once
        flat_a = a.reshape(-1, k)
        sides = {"mn": lambda: ptxgen.grouped_gemm(a, w.transpose(1, 2), out=out, **table),
                 "copy": lambda: ptxgen.grouped_gemm(a, w.transpose(1, 2).contiguous(), out=out, **table),
                 "kmajor": lambda: ptxgen.grouped_gemm(a, b_nk, out=out, **table)}
        row = {"layout": layout, "G": groups, "rows": rows, "N": n, "K": k}
        check = [g for g, r in enumerate(rows) if r][::max(1, sum(1 for r in rows if r) - 1)]
        for name, fn in sides.items():
            out.fill_(float("nan"))
            fn()
            flat = out.reshape(-1, n)
            row[f"{name} rel err"] = [rel(flat[spans[g][0]:spans[g][1]], flat_a[spans[g][0]:spans[g][1]].float()
                                          @ w[g].float()) for g in check]
        if hasattr(torch, "_grouped_mm"):
            try:
                if layout == "masked":
                    torch_fn = lambda: torch._grouped_mm(a, w, out_dtype=torch.bfloat16)  # noqa: E731
                else:
                    offs = torch.tensor(starts[1:], dtype=torch.int32, device="cuda")
                    torch_fn = lambda: torch._grouped_mm(a, w, offs=offs, out_dtype=torch.bfloat16)  # noqa: E731
                torch_fn()
                sides = {"torch._grouped_mm": torch_fn, **sides}
            except Exception as exc:  # noqa: BLE001 - report what the installed torch refuses
                row["torch._grouped_mm"] = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        runs = interleaved_us(sides)
        for name, v in runs.items():
            row[f"{name} us"] = [round(statistics.median(v), 2), round(min(v), 2), round(max(v), 2)]
        for name in runs:
            if name != "mn":
                row[f"{name} / mn"] = paired_ratio(runs[name], runs["mn"])
        rows_out.append(row)
        print(json.dumps(row), flush=True)
        del a, w, b_nk, out
        torch.cuda.empty_cache()
        if json_path:
            with open(json_path, "w") as f:
                json.dump({"info": info, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["gkn"]:
        sys.exit(gkn(sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None))
    if sys.argv[1:2] == ["host"]:
        sys.exit(host(sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None))
    if sys.argv[1:2] == ["one"]:
        sys.exit(one(sys.argv[sys.argv.index("--configs") + 1].split(",") if "--configs" in sys.argv else None))
    bench(sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None, "--quick" in sys.argv)
