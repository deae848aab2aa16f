"""Benchmarks and one-shot runs of generated GEMMs against torch, in one process, on the same inputs.

Method (:func:`bench`): for each shape, allocate enough ``(A, B, D)`` input
sets that together they exceed twice the GPU's L2 and rotate through them,
so neither side is timed on L2-resident operands.  Ours (a prepared launch:
checks and tensor maps done beforehand) and ``torch.matmul(a, b.T)`` run on
the same sets.  Each implementation gets ``warmup`` untimed calls, then
``iters`` calls each bracketed by its own pair of CUDA events; the reported
time is the median.  Before the timed calls a short device-side sleep (when
torch provides ``torch.cuda._sleep``) lets the host queue the launches ahead
of the GPU, so launch overhead is not counted as kernel time.

TFLOP/s = ``2*M*N*K / t``; ``ratio`` = ours / torch (TFLOP/s; > 1 is faster).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

#: stop adding input sets once they would take this fraction of free GPU memory
MEMORY_FRACTION = 0.5
MAX_SETS = 1024
#: GPU cycles of pre-sleep per timed iteration (about 20 us at ~2 GHz)
SLEEP_CYCLES_PER_ITER = 40_000
TOLERANCE = 1e-2


def tflops(m: int, n: int, k: int, ms: float) -> float:
    """``2*m*n*k`` flops in ``ms`` milliseconds, in TFLOP/s."""
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def relative_error(out: Any, ref: Any) -> float:
    """Relative Frobenius error ``||out - ref|| / ||ref||`` in fp32 (absolute if ``ref`` is all zeros)."""
    diff = (out.float() - ref.float()).norm().item()
    scale = ref.float().norm().item()
    return diff / scale if scale > 0 else diff


def input_sets_needed(set_bytes: int, l2_bytes: int, free_bytes: int) -> int:
    """How many input sets of ``set_bytes`` exceed ``2 * l2_bytes`` (at least 2, within memory limits).

    Raises:
        MemoryError: not even one set fits in ``MEMORY_FRACTION`` of ``free_bytes``.
    """
    budget = int(free_bytes * MEMORY_FRACTION)
    if set_bytes > budget:
        raise MemoryError(f"one input set needs {set_bytes} B; only {budget} B of GPU memory may be used")
    wanted = max(2, 2 * l2_bytes // set_bytes + 1)
    return max(1, min(wanted, MAX_SETS, budget // set_bytes))


def time_ms(fn: Callable[[int], Any], n_sets: int, *, warmup: int, iters: int) -> float:
    """Median time of ``fn(set_index)`` over ``iters`` calls (after ``warmup``), in ms, by CUDA events.

    Args:
        fn: enqueues one call on torch's current stream, working on input set ``set_index``.
        n_sets: set indices rotate through ``range(n_sets)``.
        warmup: untimed calls first.
        iters: timed calls (>= 1).
    """
    import torch

    if iters < 1:
        raise ValueError(f"iters={iters}: must be >= 1")
    for i in range(warmup):
        fn(i % n_sets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(SLEEP_CYCLES_PER_ITER * iters)
    for i in range(iters):
        starts[i].record()
        fn((warmup + i) % n_sets)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def _random_bf16(rows: int, cols: int, device: Any, generator: Any = None) -> Any:
    """``[rows, cols]`` bf16 normal(0, 1) values on ``device``."""
    import torch

    return torch.randn((rows, cols), device=device, dtype=torch.float32, generator=generator).to(torch.bfloat16)


def bench_shape(configs: Sequence[Any], m: int, n: int, k: int, *, warmup: int, iters: int) -> list[dict]:
    """Time every config and torch on one shape; one result dict per config (see :func:`bench`)."""
    import torch

    from ptxgen.runtime import driver, prepare

    device = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(device.index)
    set_bytes = 2 * (m * k + n * k + 2 * m * n)
    free_bytes, _ = torch.cuda.mem_get_info(device)
    n_sets = input_sets_needed(set_bytes, info.l2_bytes, free_bytes)
    a_sets = [_random_bf16(m, k, device) for _ in range(n_sets)]
    b_sets = [_random_bf16(n, k, device) for _ in range(n_sets)]
    d_torch = [torch.empty((m, n), device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    d_ours = [torch.empty((m, n), device=device, dtype=torch.bfloat16) for _ in range(n_sets)]

    torch_ms = time_ms(lambda i: torch.matmul(a_sets[i], b_sets[i].T, out=d_torch[i]), n_sets,
                       warmup=warmup, iters=iters)
    rows = []
    for config in configs:
        launches = [prepare(a_sets[i], b_sets[i], d_ours[i], config) for i in range(n_sets)]
        ours_ms = time_ms(lambda i: launches[i].launch(), n_sets, warmup=warmup, iters=iters)
        torch.cuda.synchronize()
        ours_tf, torch_tf = tflops(m, n, k, ours_ms), tflops(m, n, k, torch_ms)
        rows.append({
            "config": launches[0].kernel.spec.name,
            "m": m, "n": n, "k": k,
            "ours_ms": ours_ms, "torch_ms": torch_ms,
            "ours_tflops": ours_tf, "torch_tflops": torch_tf,
            "ratio": ours_tf / torch_tf,
            "rel_err_vs_torch": relative_error(d_ours[0], d_torch[0]),
            "input_sets": n_sets, "warmup": warmup, "iters": iters,
        })
    return rows


def format_table(rows: Iterable[dict]) -> str:
    """A plain-text table of :func:`bench` results (one line per row, header first)."""
    header = f"{'config':<24} {'M':>6} {'N':>6} {'K':>6} {'ours ms':>9} {'ours TF/s':>9} " \
             f"{'torch ms':>9} {'torch TF/s':>10} {'ratio':>6} {'rel err':>8}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['config']:<24} {r['m']:>6} {r['n']:>6} {r['k']:>6} {r['ours_ms']:>9.4f} {r['ours_tflops']:>9.1f} "
            f"{r['torch_ms']:>9.4f} {r['torch_tflops']:>10.1f} {r['ratio']:>6.3f} {r['rel_err_vs_torch']:>8.1e}"
        )
    return "\n".join(lines)


def bench(
    configs: Sequence[Any],
    shapes: Sequence[tuple[int, int, int]],
    *,
    warmup: int = 10,
    iters: int = 50,
    json_path: str | Path | None = None,
    stream: TextIO | None = sys.stdout,
) -> list[dict]:
    """Benchmark configs against ``torch.matmul(a, b.T)`` on the current CUDA device.

    Args:
        configs: config names, YAML paths or ``Config`` objects.
        shapes: ``(M, N, K)`` triples.
        warmup: untimed calls per implementation and shape.
        iters: timed calls; the median is reported.
        json_path: where to write ``{"device", "torch", "results"}`` JSON; None writes nothing.
        stream: where to print the table; None prints nothing.

    Returns:
        One dict per (shape, config): ``config, m, n, k, ours_ms, torch_ms, ours_tflops,
        torch_tflops, ratio, rel_err_vs_torch, input_sets, warmup, iters``.
    """
    import torch

    results: list[dict] = []
    for m, n, k in shapes:
        results.extend(bench_shape(configs, m, n, k, warmup=warmup, iters=iters))
    if stream is not None:
        print(format_table(results), file=stream)
    if json_path is not None:
        doc = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "results": results,
        }
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n")
    return results


def run_one(config: Any, m: int, n: int, k: int, *, seed: int = 0, warmup: int = 3, iters: int = 20) -> dict:
    """Run one shape on the GPU, check it against an fp32 reference, and time it.

    Args:
        config: config name, YAML path, ``Config`` object, or None for the device default.
        m, n, k: problem shape.
        seed: seed of the random inputs (normal(0, 1), rounded to bf16).

    Returns:
        ``config, m, n, k, rel_err`` (relative Frobenius error vs ``a.float() @ b.float().T``),
        ``has_nan``, ``ok`` (``rel_err < 1e-2`` and no NaN), ``ms`` (median), ``tflops``.

    Raises:
        ShapeError / ConfigError / CudaError: as :func:`ptxgen.runtime.gemm`.
    """
    import torch

    from ptxgen.runtime import prepare

    device = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=device).manual_seed(seed)
    a = _random_bf16(m, k, device, gen)
    b = _random_bf16(n, k, device, gen)
    out = torch.full((m, n), math.nan, device=device, dtype=torch.bfloat16)
    launch = prepare(a, b, out, config)
    launch.launch()
    ref = a.float() @ b.float().T
    torch.cuda.synchronize()
    has_nan = bool(torch.isnan(out).any().item())
    err = relative_error(out, ref)
    ms = time_ms(lambda _i: launch.launch(), 1, warmup=warmup, iters=iters)
    return {
        "config": launch.kernel.spec.name,
        "m": m, "n": n, "k": k,
        "rel_err": err, "has_nan": has_nan, "ok": (err < TOLERANCE) and not has_nan,
        "ms": ms, "tflops": tflops(m, n, k, ms),
    }
