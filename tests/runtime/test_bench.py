"""Benchmark helpers (ptxgen.bench): TFLOP/s, input sets, interleaved timing, summary, plot, and the CLI
wiring of run and bench to the chosen config."""

from __future__ import annotations

import pytest


# --------------------------------------------------------------------------- bench helpers


def test_bench_helpers(torch_mod):
    from ptxgen import bench

    assert bench.tflops(8192, 8192, 8192, 1.0) == pytest.approx(1099.5, rel=1e-3)
    gib = 1 << 30
    assert bench.input_sets_needed(3 * 8192 * 8192 * 2, 50 << 20, 80 * gib) == 2
    assert bench.input_sets_needed(1 << 20, 50 << 20, 80 * gib) == 101
    assert bench.input_sets_needed(16, 50 << 20, 80 * gib) == bench.MAX_SETS
    with pytest.raises(MemoryError):
        bench.input_sets_needed(10 * gib, 50 << 20, 8 * gib)
    ref = torch_mod.ones(4, 4)
    assert bench.relative_error(ref * 1.01, ref) == pytest.approx(0.01, rel=1e-4)
    row = dict(config="c", kernel="h100_x", m=1, n=2, k=8, api_ms=0.5, torch_ms=0.25, prepared_ms=0.4,
               torch_kernel_ms=0.2, api_tflops=1.0, ratio=0.5, kernel_ratio=0.5, rel_err_vs_torch=1e-3)
    table = bench.format_table([row]).splitlines()
    assert table[0].split()[:5] == ["config", "kernel", "M", "N", "K"] and table[2].split()[:2] == ["c", "h100_x"]


def test_time_interleaved_alternates_call_by_call(torch_mod, monkeypatch):
    """Timed calls alternate A B B A ... (drift hits both sides alike), consecutive calls never share an input set,
    and each side's median is over its own calls (faked CUDA events: a call's elapsed time is its set index)."""
    from ptxgen import bench

    log = []

    class Event:  # records the input set of the last call enqueued before it
        def __init__(self, enable_timing=False):
            self.set = None

        def record(self):
            self.set = log[-1][1] if log else None

        def elapsed_time(self, end):
            return float(end.set)

    def side(name):
        return lambda i: log.append((name, i))

    monkeypatch.setattr(torch_mod.cuda, "Event", Event)
    monkeypatch.setattr(torch_mod.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch_mod.cuda, "_sleep", lambda cycles: None, raising=False)
    medians = bench.time_interleaved({"a": side("a"), "b": side("b")}, 3, warmup=2, iters=4)
    timed = log[4:]  # after 2 warm-up calls of each side
    assert [name for name, _ in timed] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [i for _, i in timed] == [(2 + k) % 3 for k in range(8)]  # consecutive calls: different sets
    assert medians == {"a": 1.0, "b": 1.0}  # a: sets 2, 2, 0, 0; b: 0, 1, 1, 2
    log.clear()
    bench.time_interleaved({"a": side("a"), "b": side("b")}, 3, warmup=0, iters=4, rounds=2)
    assert [name for name, _ in log] == ["a", "a", "b", "b", "b", "b", "a", "a"]


# --------------------------------------------------------------------------- bench and CLI wiring


def test_bench_defaults_and_summary():
    from ptxgen import bench

    assert len(bench.DEFAULT_SHAPES) == 11 and (4096, 576, 7168) in bench.DEFAULT_SHAPES
    assert bench.geomean([1.0, 4.0]) == pytest.approx(2.0)
    rows = [dict(config="auto", ratio=r, kernel_ratio=r * 2) for r in (0.5, 2.0)]
    s = bench.summary(rows)["auto"]
    assert s["geomean_ratio"] == pytest.approx(1.0) and s["min_ratio"] == 0.5
    assert s["geomean_kernel_ratio"] == pytest.approx(2.0)
    assert bench.config_label(None) == "auto" and bench.config_label("h100_128x128") == "h100_128x128"


def test_bench_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from ptxgen import bench

    rows = [dict(config=c, m=4096, n=n, k=4096, ratio=0.9, kernel_ratio=1.0) for c in ("auto", "x") for n in (1, 2)]
    path = tmp_path / "b.png"
    assert bench.plot(rows, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_run_and_bench_default_to_chosen_config(monkeypatch):
    from ptxgen import bench, cli

    seen = []
    monkeypatch.setattr(cli, "_require_gpu", lambda: None)  # the CPU torch build: run/bench are stubbed here
    monkeypatch.setattr(bench, "run_one", lambda config, m, n, k: seen.append(config) or
                        dict(config="h100_x", rel_err=0.0, ms=1.0, tflops=1.0))
    assert cli.main(["run", "--shape", "64x64x64"]) == 0
    monkeypatch.setattr(bench, "bench", lambda configs, shapes, **kw: seen.append((configs, shapes, kw)))
    assert cli.main(["bench", "--plot", "p.png"]) == 0
    assert seen[0] is None
    configs, shapes, kw = seen[1]
    assert configs == [None] and shapes == bench.DEFAULT_SHAPES and kw["plot_path"] == "p.png" and kw["host"]


def test_table_and_summary_of_staged_rows():
    """A staged shape has no prepared launch: its cells print '-', the summary's kernel geomean skips it, and the
    spread of the runs is shown."""
    from ptxgen import bench

    base = dict(config="auto", m=64, n=64, k=63, api_ms=0.02, torch_ms=0.01, api_tflops=1.0, rel_err_vs_torch=1e-3)
    rows = [dict(base, kernel="h100_x", staged=True, prepared_ms=None, torch_kernel_ms=None, kernel_ratio=None,
                 graph_ratio=None, ratio=0.5, ratio_min=0.4, ratio_max=0.6),
            dict(base, kernel="h100_x", staged=False, prepared_ms=0.01, torch_kernel_ms=0.02, kernel_ratio=2.0,
                 graph_ratio=1.5, ratio=2.0, ratio_min=1.9, ratio_max=2.1)]
    table = bench.format_table(rows).splitlines()
    assert "h100_x*" in table[2] and "0.400-0.600" in table[2] and table[2].split().count("-") == 4
    assert "1.900-2.100" in table[3] and table[-1].startswith("* staged")
    s = bench.summary(rows)["auto"]
    assert s["geomean_ratio"] == pytest.approx(1.0) and s["kernel_shapes"] == 1 and s["geomean_kernel_ratio"] == 2.0
    assert s["graph_shapes"] == 1 and s["min_graph_ratio"] == 1.5


def test_time_graphs_reports_a_capture_failure(torch_mod, monkeypatch):
    """A side whose capture raises gets None and its error text; the other side is still timed per call."""
    from ptxgen import bench

    class Graph:
        def replay(self):
            pass

    class Capture:
        def __init__(self, graph):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def elapsed_time(self, end):
            return 2.0

    def bad(i):
        if capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    capturing = False

    def good(i):
        pass

    class CaptureFlag(Capture):
        def __enter__(self):
            nonlocal capturing
            capturing = True
            return self

        def __exit__(self, *exc):
            nonlocal capturing
            capturing = False
            return False

    monkeypatch.setattr(torch_mod.cuda, "CUDAGraph", Graph, raising=False)
    monkeypatch.setattr(torch_mod.cuda, "graph", CaptureFlag, raising=False)
    monkeypatch.setattr(torch_mod.cuda, "Event", Event)
    monkeypatch.setattr(torch_mod.cuda, "synchronize", lambda: None)
    out = bench.time_graphs({"api": bad, "torch": good}, 3, calls=4, replays=2)
    assert out["api"] is None and "capturing" in out["api_error"]
    assert out["torch"] == pytest.approx(0.5)  # 2 ms per replay of 4 calls


def test_format_host_overhead_lists_every_variant_with_its_spread():
    from ptxgen.bench import format_host_overhead

    doc = {"m": 256, "n": 256, "k": 256, "calls": 400, "rounds": 5, "config": "auto", "kernel": "h100_64x64",
           "variants": {"ptxgen.gemm(out=)": {"us_per_call_no_sync": 9.5, "min": 9.1, "max": 11.6},
                        "torch.matmul(out=)": {"us_per_call_no_sync": 12.0, "min": 11.8, "max": 14.9}}}
    text = format_host_overhead(doc).splitlines()
    assert "5 rounds of 400" in text[0] and "h100_64x64" in text[0]
    assert text[2].split() == ["ptxgen.gemm(out=)", "9.50", "9.10", "11.60"]
    assert text[3].split() == ["torch.matmul(out=)", "12.00", "11.80", "14.90"]
