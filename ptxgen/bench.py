"""Benchmarks and one-shot runs of generated GEMMs against torch, in one process, on the same inputs.

Method (:func:`bench`): after about two seconds of matmuls (:func:`warm_gpu`: clocks
boosted before anything is timed), for each shape, allocate enough ``(A, B, D)`` input
sets that together they exceed twice the GPU's L2 and rotate through them, so
neither side is timed on L2-resident operands.  Each shape and config is measured
in ``runs`` separate runs (default :data:`RUNS`); a run times ``iters`` calls per
side after ``warmup`` untimed ones, each call bracketed by its own pair of CUDA
events, ours and torch alternating call by call (A B B A ..., :func:`time_interleaved`),
so drift of clocks and temperature hits both sides alike.  A row reports the median
over the runs of each run's median, and the lowest and highest run ratio (the
spread: small kernels move between runs, docs/performance.md, "Method").  Timings:

* ``api_ms``: the public call ``ptxgen.gemm(a, b, out=d, config=...)``, host
  overhead included (no queueing ahead: a call whose host work outlasts the
  previous kernel shows up in the event pair, as it does for a user);
* ``torch_ms``: ``torch.matmul(a, b.T, out=d)`` timed the same way;
* ``prepared_ms``: a prepared launch (checks and tensor maps done beforehand),
  the kernel alone: a short device-side sleep (``torch.cuda._sleep``) first
  lets the host queue the launches ahead of the GPU.  None for a shape the
  public call computes through a staging copy (K % 8 != 0, ...: there is no
  single kernel to prepare; ``staged`` is True);
* ``torch_kernel_ms``: torch.matmul timed like the prepared launch;
* ``graph_ms`` / ``torch_graph_ms``: per call, when :data:`GRAPH_CALLS` public calls
  (rotating input sets) captured in one CUDA graph are replayed (:func:`time_graphs`):
  the launch cost of both sides leaves the measurement (None if capture fails).

``ratio`` = ``torch_ms / api_ms`` (as users see it, > 1 is faster than
torch); ``kernel_ratio`` = ``torch_kernel_ms / prepared_ms``; ``graph_ratio`` =
``torch_graph_ms / graph_ms``.  ``config=None`` (``auto``) lets
:func:`ptxgen.runtime.choose.choose` pick per shape.

:func:`host_overhead`: host microseconds per call of back-to-back calls on a
tiny GEMM (default 2000 calls of 256x256x256, in rounds of 400), each round
queued behind a GPU kept busy, ``time.perf_counter`` around the round.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

#: stop adding input sets once they would take this fraction of free GPU memory
MEMORY_FRACTION = 0.5
MAX_SETS = 1024
#: GPU cycles of pre-sleep per timed iteration (about 20 us at ~2 GHz)
SLEEP_CYCLES_PER_ITER = 40_000
TOLERANCE = 1e-2
#: separate runs per shape and config (medians of at least five runs, with their spread)
RUNS = 5
#: public calls captured in one CUDA graph for the graph-replayed timing, and replays timed per side
GRAPH_CALLS = 20
GRAPH_REPLAYS = 10
#: squares, then the DeepGEMM M=4096 shapes (N x K)
DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192), (10240, 10240, 10240), (12288, 12288, 12288),
    (4096, 2112, 7168), (4096, 7168, 16384), (4096, 24576, 1536), (4096, 7168, 2048), (4096, 576, 7168),
    (4096, 4096, 7168),
)
AUTO = "auto"


def tflops(m: int, n: int, k: int, ms: float) -> float:
    """``2*m*n*k`` flops in ``ms`` milliseconds, in TFLOP/s."""
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive numbers (nan for none)."""
    vals = [v for v in values]
    if not vals:
        return math.nan
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


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


def time_ms(fn: Callable[[int], Any], n_sets: int, *, warmup: int, iters: int, queue_ahead: bool = True) -> float:
    """Median time of ``fn(set_index)`` over ``iters`` calls (after ``warmup``), in ms, by CUDA events.

    Args:
        fn: enqueues one call on torch's current stream, working on input set ``set_index``.
        n_sets: set indices rotate through ``range(n_sets)``.
        warmup: untimed calls first.
        iters: timed calls (>= 1).
        queue_ahead: sleep on the GPU first so the host queues the calls ahead (kernel time only);
            False times the calls as a user's loop sees them (host overhead included when it dominates).
    """
    return time_interleaved({"fn": fn}, n_sets, warmup=warmup, iters=iters, queue_ahead=queue_ahead)["fn"]


def time_interleaved(fns: dict[str, Callable[[int], Any]], n_sets: int, *, warmup: int, iters: int,
                     rounds: int | None = None, queue_ahead: bool = True) -> dict[str, float]:
    """Median times (ms) of several calls measured in alternating rounds, so clock and thermal drift hit all alike.

    Each function gets ``warmup`` untimed calls, then ``rounds`` rounds of about ``iters / rounds`` timed calls
    each; the order of the functions within a round reverses every round (A B, B A, A B, ...).  The default,
    one call per round (``rounds = iters``: A B B A A B ...), cancels drift at the finest grain: a kernel of
    milliseconds heats the card, and rounds of 30 calls (0.15 s at 12288^3) let the ratio of two kernels move by
    several per cent between runs (docs/performance.md, "Method").  Every timed call is enqueued back to back,
    each between its own pair of CUDA events, with one synchronize at the end; the k-th call of the whole sequence
    uses input set ``(warmup + k) % n_sets``, so consecutive calls never share their operands.  Arguments as :func:`time_ms`.

    Raises:
        ValueError: ``iters`` < 1 or ``rounds`` < 1.
    """
    import torch

    rounds = iters if rounds is None else rounds
    if iters < 1 or rounds < 1:
        raise ValueError(f"iters={iters}, rounds={rounds}: both must be >= 1")
    for fn in fns.values():
        for i in range(warmup):
            fn(i % n_sets)
    torch.cuda.synchronize()
    per_round = max(1, -(-iters // rounds))
    order = list(fns)
    calls = [name for r in range(rounds) for name in (order if r % 2 == 0 else order[::-1]) for _ in range(per_round)]
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in calls]
    sleep = getattr(torch.cuda, "_sleep", None)
    if queue_ahead and sleep is not None:
        sleep(SLEEP_CYCLES_PER_ITER * len(calls))
    for k, (name, (start, end)) in enumerate(zip(calls, events)):
        start.record()
        fns[name]((warmup + k) % n_sets)
        end.record()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for name, (start, end) in zip(calls, events):
        samples[name].append(start.elapsed_time(end))
    return {name: statistics.median(v) for name, v in samples.items()}


def time_graphs(fns: dict[str, Callable[[int], Any]], n_sets: int, *, calls: int = GRAPH_CALLS,
                replays: int = GRAPH_REPLAYS) -> dict[str, float | None]:
    """Per-call time (ms) of each function replayed from a CUDA graph, replays alternating between functions.

    Each function's ``calls`` calls (input sets rotating through ``range(n_sets)``) are captured into one graph
    (``torch.cuda.graph``) after one eager call; the graphs are replayed in alternating order (A B, B A, ...)
    ``replays`` times each, every replay between its own pair of CUDA events; the median replay time divided
    by ``calls`` is the per-call time.  A function whose capture raises gets None (its error is not hidden:
    it is returned under ``"<name>_error"``).
    """
    import torch

    graphs: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, fn in fns.items():
        fn(0)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for k in range(calls):
                    fn(k % n_sets)
        except Exception as exc:  # noqa: BLE001 - a side that cannot be captured is reported, not fatal
            errors[f"{name}_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            torch.cuda.synchronize()
            continue
        graphs[name] = graph
    for graph in graphs.values():
        graph.replay()  # first replay uploads the graph
    torch.cuda.synchronize()
    order = list(graphs)
    seq = [name for r in range(replays) for name in (order if r % 2 == 0 else order[::-1])]
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in seq]
    for name, (start, end) in zip(seq, events):
        start.record()
        graphs[name].replay()
        end.record()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in graphs}
    for name, (start, end) in zip(seq, events):
        samples[name].append(start.elapsed_time(end) / calls)
    out: dict[str, Any] = {name: (statistics.median(samples[name]) if name in samples else None) for name in fns}
    out.update(errors)
    return out


def warm_gpu(seconds: float = 2.0, size: int = 8192) -> None:
    """Keep the GPU busy with ``size``-cubed bf16 matmuls for about ``seconds`` before anything is timed.

    An idle H100 sits at a low clock (345 MHz seen on the device, 2026-11-24) and boosts under load; the
    first shapes of a run otherwise time the ramp (one dual-bench run measured the same torch call at 0.111 and
    0.071 ms a few seconds apart).  Timing starts once the clocks have settled.
    """
    import torch

    a = torch.randn((size, size), device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(4):
            torch.matmul(a, a)
        torch.cuda.synchronize()
    del a


def _random_bf16(rows: int, cols: int, device: Any, generator: Any = None) -> Any:
    """``[rows, cols]`` bf16 normal(0, 1) values on ``device``."""
    import torch

    return torch.randn((rows, cols), device=device, dtype=torch.float32, generator=generator).to(torch.bfloat16)


def config_label(config: Any) -> str:
    """How a config is shown in tables: its name/path, or ``auto`` for None."""
    return AUTO if config is None else str(getattr(config, "name", config))


def _runs_summary(runs: list[dict[str, float | None]], key: str) -> float | None:
    """Median over the runs of ``run[key]`` (None if any run lacks it)."""
    values = [r[key] for r in runs]
    return None if any(v is None for v in values) else statistics.median(values)


def bench_shape(configs: Sequence[Any], m: int, n: int, k: int, *, warmup: int, iters: int,
                rounds: int | None = None, runs: int = RUNS, graph: bool = True) -> list[dict]:
    """Time every config (None = auto) and torch on one shape; one result dict per config (see :func:`bench`).

    Raises:
        ShapeError: the public call refuses the shape (before anything is timed).
    """
    import torch

    import ptxgen
    from ptxgen.errors import ShapeError
    from ptxgen.runtime import driver, prepare
    from ptxgen.runtime.api import loaded_kernel, resolve_config

    if runs < 1:
        raise ValueError(f"runs={runs}: must be >= 1")
    device = torch.device("cuda", torch.cuda.current_device())
    info = driver.device_info(device.index)
    set_bytes = 2 * (m * k + n * k + 2 * m * n)
    free_bytes, _ = torch.cuda.mem_get_info(device)
    n_sets = input_sets_needed(set_bytes, info.l2_bytes, free_bytes)
    a_sets = [_random_bf16(m, k, device) for _ in range(n_sets)]
    b_sets = [_random_bf16(n, k, device) for _ in range(n_sets)]
    d_torch = [torch.empty((m, n), device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    d_ours = [torch.empty((m, n), device=device, dtype=torch.bfloat16) for _ in range(n_sets)]

    def torch_call(i: int) -> Any:
        return torch.matmul(a_sets[i], b_sets[i].T, out=d_torch[i])

    rows = []
    for config in configs:
        def api_call(i: int, config=config) -> Any:
            return ptxgen.gemm(a_sets[i], b_sets[i], out=d_ours[i], config=config)

        api_call(0)  # raises ShapeError for a shape the public call refuses
        kernel = loaded_kernel(resolve_config(config, m, n, k, device.index), device.index).spec.name
        try:
            launches = [prepare(a_sets[i], b_sets[i], d_ours[i], config) for i in range(n_sets)]
        except ShapeError:  # computed through a staging copy: no single kernel to prepare
            launches = None
        per_run = []
        for _ in range(runs):
            user = time_interleaved({"torch": torch_call, "api": api_call},
                                    n_sets, warmup=warmup, iters=iters, rounds=rounds, queue_ahead=False)
            run = {"api_ms": user["api"], "torch_ms": user["torch"], "ratio": user["torch"] / user["api"],
                   "prepared_ms": None, "torch_kernel_ms": None, "kernel_ratio": None}
            if launches is not None:
                queued = time_interleaved({"torch": torch_call, "prepared": lambda i: launches[i].launch()},
                                          n_sets, warmup=warmup, iters=iters, rounds=rounds)
                run.update(prepared_ms=queued["prepared"], torch_kernel_ms=queued["torch"],
                           kernel_ratio=queued["torch"] / queued["prepared"])
            per_run.append(run)
        graphed = time_graphs({"api": api_call, "torch": torch_call}, n_sets) if graph else {}
        api_ms, torch_ms = _runs_summary(per_run, "api_ms"), _runs_summary(per_run, "torch_ms")
        prepared_ms = _runs_summary(per_run, "prepared_ms")
        row = {
            "config": config_label(config),
            "kernel": kernel,
            "staged": launches is None,
            "m": m, "n": n, "k": k,
            "api_ms": api_ms, "prepared_ms": prepared_ms, "torch_ms": torch_ms,
            "torch_kernel_ms": _runs_summary(per_run, "torch_kernel_ms"),
            "api_tflops": tflops(m, n, k, api_ms),
            "prepared_tflops": None if prepared_ms is None else tflops(m, n, k, prepared_ms),
            "torch_tflops": tflops(m, n, k, torch_ms),
            "ratio": _runs_summary(per_run, "ratio"),
            "ratio_min": min(r["ratio"] for r in per_run), "ratio_max": max(r["ratio"] for r in per_run),
            "kernel_ratio": _runs_summary(per_run, "kernel_ratio"),
            "graph_ms": graphed.get("api"), "torch_graph_ms": graphed.get("torch"),
            "graph_ratio": (graphed["torch"] / graphed["api"]) if graphed.get("api") and graphed.get("torch") else None,
            **{key: value for key, value in graphed.items() if key.endswith("_error")},
            "runs": per_run,
            # set 0 is always among the calls (index 0 of the warm-up, or of the timed calls)
            "rel_err_vs_torch": relative_error(d_ours[0], d_torch[0]),
            "input_sets": n_sets, "warmup": warmup, "iters": iters, "rounds": rounds or iters,
        }
        rows.append(row)
    del a_sets, b_sets, d_torch, d_ours
    torch.cuda.empty_cache()
    return rows


def _cell(value: float | None, fmt: str, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"


def format_table(rows: Iterable[dict]) -> str:
    """A plain-text table of :func:`bench` results (one line per row, header first).

    ``spread``: the lowest and highest ratio of the separate runs; ``-``: not measured (a staged shape has no
    prepared launch; a side that could not be captured has no graph time).
    """
    header = (f"{'config':<14} {'kernel':<14} {'M':>6} {'N':>6} {'K':>6} {'api ms':>8} {'torch ms':>8} "
              f"{'ratio':>6} {'spread':>11} {'kern ms':>8} {'tkern ms':>8} {'kratio':>6} {'gratio':>6} "
              f"{'api TF/s':>8} {'rel err':>8}")
    lines = [header, "-" * len(header)]
    for r in rows:
        spread = f"{r.get('ratio_min', r['ratio']):.3f}-{r.get('ratio_max', r['ratio']):.3f}"
        kernel = r["kernel"] + ("*" if r.get("staged") else "")
        lines.append(
            f"{r['config']:<14} {kernel:<14} {r['m']:>6} {r['n']:>6} {r['k']:>6} {r['api_ms']:>8.4f} "
            f"{r['torch_ms']:>8.4f} {r['ratio']:>6.3f} {spread:>11} {_cell(r['prepared_ms'], '.4f', 8)} "
            f"{_cell(r['torch_kernel_ms'], '.4f', 8)} {_cell(r['kernel_ratio'], '.3f', 6)} "
            f"{_cell(r.get('graph_ratio'), '.3f', 6)} {r['api_tflops']:>8.1f} {r['rel_err_vs_torch']:>8.1e}"
        )
    if any(r.get("staged") for r in rows):
        lines.append("* staged: the public call copies an operand (K % 8, strides, N a TMA store cannot write)")
    return "\n".join(lines)


def summary(rows: Sequence[dict]) -> dict:
    """Per config label: geomean and minimum of ``ratio``, ``kernel_ratio`` and ``graph_ratio`` over the shapes
    that have them (``kernel_shapes``/``graph_shapes``: how many)."""
    out: dict[str, dict] = {}
    for label in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == label]
        kernel = [r["kernel_ratio"] for r in mine if r.get("kernel_ratio") is not None]
        graph = [r["graph_ratio"] for r in mine if r.get("graph_ratio") is not None]
        out[label] = {
            "shapes": len(mine),
            "geomean_ratio": geomean(r["ratio"] for r in mine),
            "min_ratio": min(r["ratio"] for r in mine),
            "kernel_shapes": len(kernel),
            "geomean_kernel_ratio": geomean(kernel),
            "min_kernel_ratio": min(kernel, default=math.nan),
            "graph_shapes": len(graph),
            "geomean_graph_ratio": geomean(graph),
            "min_graph_ratio": min(graph, default=math.nan),
        }
    return out


#: calls per timed round of :func:`host_overhead`: fewer than the launches a CUDA stream queues before the host
#: blocks on it (about a thousand), so a round never waits for the GPU
HOST_ROUND_CALLS = 400
#: clock cycles of the ``torch.cuda._sleep`` kernel enqueued before each round: ~50-100 ms at the H100's 1-2 GHz,
#: longer than a round of HOST_ROUND_CALLS calls at up to 100 us each, so the GPU is busy for the whole round
HOST_ROUND_SLEEP_CYCLES = 100_000_000


def host_overhead(*, n_calls: int = 2000, size: int = 256, config: Any = None, warmup: int = 100) -> dict:
    """Host microseconds per call of back-to-back ``size``-cubed GEMMs, ours vs torch.

    For each variant: warm-up calls, synchronize, then rounds of ``min(n_calls, HOST_ROUND_CALLS)`` calls
    (``ceil(n_calls / HOST_ROUND_CALLS)`` rounds, at least 5), each after a ``torch.cuda._sleep`` kernel that keeps
    the GPU busy past the round's end: ``t0 = perf_counter()``, the calls, ``t1``, synchronize.  The launches
    queue behind the sleep, so a round times the host alone, never a wait for a kernel (without it, a variant
    whose kernel outlasts its host time measures the kernel).  ``us_per_call_no_sync`` is the median over the
    rounds of ``(t1 - t0) / calls``, with ``min`` and ``max``.

    Variants: ``ptxgen.gemm(out=)``, ``ptxgen.gemm`` (allocating D), the prepared launch,
    ``torch.matmul(out=)``, ``torch.matmul`` (allocating), and a fused epilogue against torch eager:
    ``ptxgen.gemm(out=, epilogue="acc + residual")`` and ``torch.matmul(a, b.T) + residual``.

    Returns:
        ``{"m", "n", "k", "calls", "rounds", "config", "kernel", "variants": {name: {"us_per_call_no_sync",
        "min", "max"}}}``.
    """
    import torch

    import ptxgen
    from ptxgen.runtime import prepare

    device = torch.device("cuda", torch.cuda.current_device())
    a = _random_bf16(size, size, device)
    b = _random_bf16(size, size, device)
    out = torch.empty((size, size), device=device, dtype=torch.bfloat16)
    launch = prepare(a, b, out, config)
    bt = b.T
    residual = _random_bf16(size, size, device)
    variants: dict[str, Callable[[], Any]] = {
        "ptxgen.gemm(out=)": lambda: ptxgen.gemm(a, b, out=out, config=config),
        "ptxgen.gemm": lambda: ptxgen.gemm(a, b, config=config),
        "prepared launch": launch.launch,
        "torch.matmul(out=)": lambda: torch.matmul(a, bt, out=out),
        "torch.matmul": lambda: torch.matmul(a, bt),
        "ptxgen.gemm(out=, acc + residual)": lambda: ptxgen.gemm(a, b, out=out, config=config,
                                                                 epilogue="acc + residual", residual=residual),
        "torch.matmul + residual": lambda: torch.matmul(a, bt) + residual,
    }
    per_round = min(n_calls, HOST_ROUND_CALLS)
    rounds = max(5, -(-n_calls // per_round))
    results = {}
    for name, fn in variants.items():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(rounds):
            torch.cuda._sleep(HOST_ROUND_SLEEP_CYCLES)
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            times.append((time.perf_counter() - t0) / per_round * 1e6)
            torch.cuda.synchronize()
        results[name] = {"us_per_call_no_sync": statistics.median(times), "min": min(times), "max": max(times)}
    return {"m": size, "n": size, "k": size, "calls": per_round, "rounds": rounds, "config": config_label(config),
            "kernel": launch.kernel.spec.name, "variants": results}


def format_host_overhead(doc: dict) -> str:
    """Plain-text table of :func:`host_overhead`."""
    lines = [f"host overhead: {doc['rounds']} rounds of {doc['calls']} back-to-back calls of "
             f"{doc['m']}x{doc['n']}x{doc['k']} behind a busy GPU (config {doc['config']}, kernel {doc['kernel']})",
             f"{'variant':<33} {'host us/call, median':>21} {'min':>7} {'max':>7}"]
    for name, v in doc["variants"].items():
        lines.append(f"{name:<33} {v['us_per_call_no_sync']:>21.2f} {v['min']:>7.2f} {v['max']:>7.2f}")
    return "\n".join(lines)


def plot(rows: Sequence[dict], path: str | Path, title: str = "") -> bool:
    """Bar chart of ``ratio`` (and ``kernel_ratio``) per shape into a PNG; False when matplotlib is missing.

    Needs the optional ``plot`` extra (matplotlib); the Agg backend, no display.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = list(dict.fromkeys(r["config"] for r in rows))
    shapes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in rows))
    width = 0.8 / (2 * len(labels))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(shapes)), 4.8))
    for j, label in enumerate(labels):
        by_shape = {(r["m"], r["n"], r["k"]): r for r in rows if r["config"] == label}
        for h, (key, hatch) in enumerate((("ratio", None), ("kernel_ratio", "//"))):
            xs = [i + (2 * j + h) * width - 0.4 + width / 2 for i in range(len(shapes))]
            ys = [(by_shape[s].get(key) or 0.0) if s in by_shape else 0.0 for s in shapes]  # 0: not measured
            name = f"{label}: {'public API' if key == 'ratio' else 'prepared launch'}"
            ax.bar(xs, ys, width, label=name, hatch=hatch, alpha=0.9 if h == 0 else 0.6)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{m}x{n}x{k}" for m, n, k in shapes], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("speed vs torch.matmul (>1 faster)")
    ax.set_title(title or "ptxgen vs torch.matmul")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def bench(
    configs: Sequence[Any],
    shapes: Sequence[tuple[int, int, int]] = DEFAULT_SHAPES,
    *,
    warmup: int = 10,
    iters: int = 30,
    rounds: int | None = None,
    runs: int = RUNS,
    graph: bool = True,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    host: bool = True,
    stream: TextIO | None = sys.stdout,
) -> dict:
    """Benchmark configs (None = auto per shape) against ``torch.matmul(a, b.T)`` on the current CUDA device.

    Args:
        configs: config names, YAML paths, ``Config`` objects or None (auto).
        shapes: ``(M, N, K)`` triples.
        warmup: untimed calls per implementation and shape.
        iters: timed calls per side and run; each run's median is taken.
        rounds: alternating rounds per side (:func:`time_interleaved`; default one call per round).
        runs: separate runs per shape and config; rows report the median over runs and the spread.
        graph: also time CUDA-graph replays of both sides (:func:`time_graphs`).
        json_path: where to write the JSON document; None writes nothing.
        plot_path: where to write a PNG (needs matplotlib; skipped with a message without it).
        host: also run :func:`host_overhead` (with the first config).
        stream: where to print tables; None prints nothing.

    Returns:
        ``{"device", "torch", "ptxgen", "results": [row...], "refused", "summary", "host_overhead"}``; rows as
        :func:`bench_shape`: ``config, kernel, m, n, k, api_ms, prepared_ms, torch_ms, torch_kernel_ms,
        api_tflops, prepared_tflops, torch_tflops, ratio, ratio_min, ratio_max, kernel_ratio, graph_ms,
        torch_graph_ms, graph_ratio, staged, runs, rel_err_vs_torch, input_sets, warmup, iters``; ``refused``: ``{m, n, k, error}`` of each shape the public call refused
        (:class:`~ptxgen.errors.ShapeError`), skipped rather than ending the run.
    """
    import torch

    import ptxgen

    def say(text: str) -> None:
        if stream is not None:
            print(text, file=stream, flush=True)

    from .errors import ShapeError

    results: list[dict] = []
    refused: list[dict] = []
    warm_gpu()
    for m, n, k in shapes:
        try:
            rows = bench_shape(configs, m, n, k, warmup=warmup, iters=iters, rounds=rounds, runs=runs, graph=graph)
        except ShapeError as exc:  # a shape the public API refuses: recorded, the run goes on
            refused.append({"m": m, "n": n, "k": k, "error": str(exc)})
            say(f"  {m}x{n}x{k}: refused: {exc}")
            continue
        results.extend(rows)
        for r in rows:
            kratio = "staged" if r["kernel_ratio"] is None else f"{r['kernel_ratio']:.3f}"
            gratio = "-" if r["graph_ratio"] is None else f"{r['graph_ratio']:.3f}"
            say(f"  {r['config']} ({r['kernel']}) {m}x{n}x{k}: ratio {r['ratio']:.3f} "
                f"({r['ratio_min']:.3f}-{r['ratio_max']:.3f} over {runs} runs), kernel ratio {kratio}, graph ratio {gratio}")
    doc = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "ptxgen": ptxgen.__version__,
        "results": results,
        "refused": refused,
        "summary": summary(results),
        "host_overhead": host_overhead(config=configs[0]) if host else None,
    }
    say(format_table(results))
    for label, s in doc["summary"].items():
        say(f"{label}: geomean ratio {s['geomean_ratio']:.3f} (min {s['min_ratio']:.3f}) over {s['shapes']} shapes; "
            f"kernel geomean {s['geomean_kernel_ratio']:.3f} (min {s['min_kernel_ratio']:.3f}) over "
            f"{s['kernel_shapes']}; graph geomean {s['geomean_graph_ratio']:.3f} (min {s['min_graph_ratio']:.3f}) "
            f"over {s['graph_shapes']}")
    if doc["host_overhead"] is not None:
        say(format_host_overhead(doc["host_overhead"]))
    if json_path is not None:
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n")
    if plot_path is not None:
        if plot(results, plot_path, title=f"ptxgen vs torch.matmul on {doc['device']}"):
            say(f"wrote {plot_path}")
        else:
            say("matplotlib is not installed (pip install 'ptxgen[plot]'): no PNG written")
    return doc


def run_one(config: Any, m: int, n: int, k: int, *, seed: int = 0, warmup: int = 3, iters: int = 20) -> dict:
    """Run one shape on the GPU, check it against an fp32 reference, and time it.

    Args:
        config: config name, YAML path, ``Config`` object, or None to choose for the shape and device.
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


def tune(
    shapes: Sequence[tuple[int, int, int]] = DEFAULT_SHAPES,
    *,
    configs: Sequence[str] | None = None,
    warmup: int = 5,
    iters: int = 60,
    output: str | Path | None = None,
    progress: bool | None = None,
    stream: TextIO | None = sys.stdout,
) -> dict:
    """Time every candidate config on every shape (prepared launch, kernel time) and write the tuned table.

    A shape the kernels cannot take as they are (K % 8 != 0, ...) is timed through the public call
    ``ptxgen.gemm(a, b, out=d, config=name)``, staging included, for every candidate alike (entry ``staged``).

    The candidates of one shape are timed together in alternating rounds (:func:`time_interleaved`) on the
    same rotated inputs, so clock and thermal drift hit them alike: timed one after the other, two kernels
    within 5 % of each other swapped places from run to run (docs/performance.md, "Swizzle groups").

    Args:
        shapes: ``(M, N, K)`` triples to tune.
        configs: config names to try (default: every shipped config for the device's arch).
        warmup, iters: per candidate, as :func:`time_interleaved`.
        output: table path (default: :func:`ptxgen.runtime.choose.user_table_path`, which the
            chooser prefers over the shipped table).
        progress: tqdm progress bar on stderr (default: when stderr is a terminal; needs tqdm).
        stream: where to print the summary; None prints nothing.

    Returns:
        The table document (``ptxgen.runtime.choose.table_doc``), entries with ``m, n, k, config, ms``
        and ``all_ms`` (every candidate's time).

    Raises:
        ConfigError: the device has no shipped config for its arch.
    """
    import torch

    import ptxgen
    from ptxgen.errors import ConfigError, ShapeError
    from ptxgen.runtime import choose, driver, prepare

    device = torch.device("cuda", torch.cuda.current_device())
    driver.ensure_context(device.index)
    info = driver.device_info(device.index)
    arch = choose.ARCH_OF_CAPABILITY.get(tuple(info.capability))
    names = list(configs) if configs else [c.name for c in choose.candidates(arch)] if arch else []
    if not names:
        raise ConfigError(f"device {info.name} (compute capability {info.capability[0]}.{info.capability[1]}): "
                          "no shipped config to tune")
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(shapes) * len(names), desc="ptxgen tune", unit="run", file=sys.stderr)
        except ImportError:
            bar = None
    entries = []
    for m, n, k in shapes:
        set_bytes = 2 * (m * k + n * k + m * n)
        free_bytes, _ = torch.cuda.mem_get_info(device)
        n_sets = input_sets_needed(set_bytes, info.l2_bytes, free_bytes)
        a_sets = [_random_bf16(m, k, device) for _ in range(n_sets)]
        b_sets = [_random_bf16(n, k, device) for _ in range(n_sets)]
        d_sets = [torch.empty((m, n), device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
        calls = {}
        try:
            prepare(a_sets[0], b_sets[0], d_sets[0], names[0])
            staged = False
        except ShapeError:  # the public call stages it (for every candidate alike)
            staged = True
        for name in names:
            if bar is not None:
                bar.set_postfix_str(f"{m}x{n}x{k} {name}")
            if staged:
                calls[name] = lambda i, name=name: ptxgen.gemm(a_sets[i], b_sets[i], out=d_sets[i], config=name)
            else:
                launches = [prepare(a_sets[i], b_sets[i], d_sets[i], name) for i in range(n_sets)]
                calls[name] = lambda i, ls=launches: ls[i].launch()
            if bar is not None:
                bar.update(1)
        timings = time_interleaved(calls, n_sets, warmup=warmup, iters=iters)
        del calls
        best = min(timings, key=timings.get)
        timings = {name: round(ms, 4) for name, ms in timings.items()}  # 0.1 µs: below the run-to-run spread
        entries.append({"m": m, "n": n, "k": k, "config": best, "ms": timings[best], "all_ms": timings,
                        **({"staged": True} if staged else {})})
        del a_sets, b_sets, d_sets
        torch.cuda.empty_cache()
    if bar is not None:
        bar.close()
    doc = choose.table_doc(arch, info.name, entries,
                           f"ptxgen tune (prepared launches timed in alternating rounds, median of {iters})")
    path = Path(output) if output is not None else choose.user_table_path(arch)
    choose.write_table(path, doc)
    if stream is not None:
        for e in entries:
            others = ", ".join(f"{c} {t:.4f}" for c, t in sorted(e["all_ms"].items(), key=lambda kv: kv[1]))
            print(f"{e['m']}x{e['n']}x{e['k']}: {e['config']} ({others} ms)", file=stream)
        print(f"wrote {path}", file=stream)
    return doc
