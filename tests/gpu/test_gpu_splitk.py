"""GPU tests of split-K (``schedule.split_k > 1``, sm_90a) through the public API (marked ``gpu``).

Split-K variants of shipped configs (``cfg.replace(**{"schedule.split_k": s})``, as the chooser makes them):
Hypothesis draws M, N in [1, 4096] (tiny, just off a tile multiple, or anywhere) and K a multiple of 8 in
[8, 4096] (so ``ceil(K / 64) < split_k`` happens: empty splits); fresh random inputs per example, ``out``
poisoned with NaN, fp32 reference, relative Frobenius error < 1e-2.  Each example runs the same call twice
into freshly poisoned outputs and checks both (the tile counters were reset by the first launch; a stale
counter makes the wrong split reduce, before the partials are there).  The two runs need not be bitwise equal:
the split that arrives last adds the others' partials into its own registers, so the order of the fp32 adds
follows the arrival order.  CUDA-graph capture and replay with new input values (a capture of many calls, one
workspace per capture, two graphs replayed on two streams at once); a shape whose K leaves every
split but the last empty; two streams running the same config and shape at once (each its own workspace);
many launches in a row.  Split-K of the last wave (bench/configs ``*_lw*``): shapes with whole waves and a tail,
fewer tiles than SMs, ragged M/N/K, launches in a row, two streams, a graph replay, a prepared launch; a
prepared launch frees its workspace when dropped.
``PTXGEN_GPU_EXAMPLES`` sets the examples per config (default 100).
"""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptxgen.config as config_mod
from tests.gpu.test_gpu_gemm import dim, k_dim, random_operands

pytestmark = pytest.mark.gpu

EXAMPLES = int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100"))
TOLERANCE = 1e-2
#: (shipped config, split_k): 1 CTA 128x192 (the small-N tile), 256x128 (128 accumulator registers),
#: the multicast CTA pair (two CTA tiles per cluster tile), both dual-GEMM layouts
GEMM_CASES = [("h100_128x192", 3), ("h100_128x192", 4), ("h100_256x128", 2), ("h100_128x256", 3),
              ("h100_128x64", 4), ("h100_64x128", 2), ("h100_64x64", 2), ("h100_64x64", 4)]
DUAL_CASES = [("dual_h100_128x128", 2), ("dual_h100_128x128", 4), ("dual_h100_128x128_c2", 3)]


@functools.cache
def split_config(name: str, splits: int):
    """The shipped config ``name`` with ``schedule.split_k = splits`` (one object per process: one kernel load)."""
    return config_mod.load_config(name).replace(**{"schedule.split_k": splits})


def _poisoned(torch, m: int, n: int):
    return torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)


def run_twice(torch, fn, m: int, n: int, ref, label: str) -> float:
    """``fn(out)`` twice into NaN-poisoned outputs: no NaN; returns the larger relative error of the two."""
    from ptxgen.bench import relative_error

    outs = [_poisoned(torch, m, n), _poisoned(torch, m, n)]
    for out in outs:
        assert fn(out).data_ptr() == out.data_ptr()
    torch.cuda.synchronize()
    nan = int(torch.isnan(outs[0]).sum().item())
    assert nan == 0, f"{label}: {nan} of {m * n} outputs never written (NaN)"
    nan = int(torch.isnan(outs[1]).sum().item())
    assert nan == 0, f"{label}: {nan} of {m * n} outputs of the second launch never written (NaN)"
    return max(relative_error(out, ref) for out in outs)


@pytest.mark.parametrize("name,splits", GEMM_CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_splitk_gemm_matches_reference(torch, name, splits, data):
    random_gemm_matches_reference(torch, split_config(name, splits), f"{name} split_k={splits}", data)


def random_gemm_matches_reference(torch, cfg, name: str, data) -> None:
    """One Hypothesis-drawn GEMM of ``cfg`` (M, N near its tile, K a multiple of 8), run twice (:func:`run_twice`)."""
    from ptxgen import gemm

    m = data.draw(dim(cfg.tile.block_m * cfg.cluster.size), label="m")
    n = data.draw(dim(cfg.tile.block_n), label="n")
    k = data.draw(k_dim(8), label="k")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    a, b = random_operands(torch, m, n, k, seed)
    label = f"{name} {m}x{n}x{k} seed {seed}"
    err = run_twice(torch, lambda out: gemm(a, b, out=out, config=cfg), m, n, a.float() @ b.float().T, label)
    assert err < TOLERANCE, f"{label}: relative Frobenius error {err:.3e}"


def dual_reference(torch, a, b1, b2):
    af = a.float()
    return torch.nn.functional.silu(af @ b1.float().T) * (af @ b2.float().T)


@pytest.mark.parametrize("name,splits", DUAL_CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_splitk_dual_matches_reference(torch, name, splits, data):
    from ptxgen import dual_gemm

    cfg = split_config(name, splits)
    m = data.draw(dim(cfg.tile.block_m * cfg.cluster.size), label="m")
    n = data.draw(dim(cfg.tile.block_n), label="n")
    k = data.draw(k_dim(8), label="k")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    a, b1 = random_operands(torch, m, n, k, seed)
    b2 = random_operands(torch, 1, n, k, seed + 1)[1]
    label = f"{name} split_k={splits} {m}x{n}x{k} seed {seed}"
    err = run_twice(torch, lambda out: dual_gemm(a, b1, b2, out=out, config=cfg), m, n,
                    dual_reference(torch, a, b1, b2), label)
    assert err < TOLERANCE, f"{label}: relative Frobenius error {err:.3e}"


@pytest.mark.parametrize("name,splits,shape", [("h100_128x192", 4, (4096, 576, 7168)),
                                               ("h100_128x192", 3, (4096, 2112, 7168)),
                                               ("h100_128x192", 4, (300, 200, 8)),  # one k-block: 3 empty splits
                                               ("h100_128x192", 3, (1000, 1000, 136))])  # 3 k-blocks of 64, 8
def test_splitk_gemm_fixed_shapes(torch, name, splits, shape):
    from ptxgen import gemm

    m, n, k = shape
    a, b = random_operands(torch, m, n, k, seed=5)
    cfg = split_config(name, splits)
    err = run_twice(torch, lambda out: gemm(a, b, out=out, config=cfg), m, n, a.float() @ b.float().T,
                    f"{name} split_k={splits} {m}x{n}x{k}")
    assert err < TOLERANCE


@pytest.mark.parametrize("name,splits,shape", [("dual_h100_128x128", 4, (256, 4096, 7168)),
                                               ("dual_h100_128x128", 2, (512, 3072, 7168))])
def test_splitk_dual_fixed_shapes(torch, name, splits, shape):
    from ptxgen import dual_gemm

    m, n, k = shape
    a, b1 = random_operands(torch, m, n, k, seed=6)
    b2 = random_operands(torch, 1, n, k, seed=7)[1]
    cfg = split_config(name, splits)
    err = run_twice(torch, lambda out: dual_gemm(a, b1, b2, out=out, config=cfg), m, n,
                    dual_reference(torch, a, b1, b2), f"{name} split_k={splits} {m}x{n}x{k}")
    assert err < TOLERANCE


@pytest.mark.parametrize("name,splits", [("h100_128x192", 3), ("dual_h100_128x128", 2)])
def test_splitk_cuda_graph_capture_and_replay(torch, name, splits):
    """Captured once, replayed three times with new input values: each replay starts from reset counters."""
    from ptxgen import dual_gemm, gemm
    from ptxgen.bench import relative_error

    cfg = split_config(name, splits)
    dual = cfg.kernel == "dual_gemm"
    m, n, k = 520, 600, 1000
    a, b = random_operands(torch, m, n, k, seed=11)
    b2 = random_operands(torch, 1, n, k, seed=12)[1]
    out = _poisoned(torch, m, n)

    def call():
        return dual_gemm(a, b, b2, out=out, config=cfg) if dual else gemm(a, b, out=out, config=cfg)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm-up outside capture: kernel load, tensor maps, workspace allocation
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for seed in range(3):
        a.copy_(random_operands(torch, m, n, k, seed=100 + seed)[0])
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = dual_reference(torch, a, b, b2) if dual else a.float() @ b.float().T
        assert not torch.isnan(out).any(), f"replay {seed}: NaN in out"
        assert relative_error(out, ref) < TOLERANCE, f"replay {seed}"


def test_splitk_graph_of_many_calls_shares_one_workspace_per_capture(torch):
    """One capture of eight split-K calls (two shapes, an output each) takes one workspace per (config, size), not
    one per call; two graphs captured that way, replayed on two streams at once with new inputs, each write right
    values (each capture's workspace is its own)."""
    from ptxgen import gemm
    from ptxgen.bench import relative_error
    from ptxgen.runtime import api

    cfg = split_config("h100_128x192", 3)
    shapes = [(300, 520, 1000), (128, 1000, 2048)]
    graphs, sides = [], []
    for g in range(2):
        operands = [random_operands(torch, m, n, k, seed=200 + 10 * g + i) for i, (m, n, k) in enumerate(shapes)]
        outs = [_poisoned(torch, m, n) for _ in range(4) for (m, n, k) in shapes]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for (a, b), out in zip(operands * 4, outs):
                gemm(a, b, out=out, config=cfg)  # warm-up outside capture: kernel load, tensor maps
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        before = len(api._workspaces)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for (a, b), out in zip(operands * 4, outs):
                gemm(a, b, out=out, config=cfg)
        assert len(api._workspaces) - before == len(shapes), "one workspace per size in a capture, not per call"
        graphs.append(graph)
        sides.append((operands, outs))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for seed in range(3):
        for g, (operands, outs) in enumerate(sides):
            for i, ((a, _), (m, n, k)) in enumerate(zip(operands, shapes)):
                a.copy_(random_operands(torch, m, n, k, seed=300 + 10 * seed + 2 * g + i)[0])
            for out in outs:
                out.fill_(float("nan"))
        torch.cuda.synchronize()
        for graph, stream in zip(graphs, streams):
            with torch.cuda.stream(stream):
                graph.replay()
        torch.cuda.synchronize()
        for g, (operands, outs) in enumerate(sides):
            for j, ((a, b), out) in enumerate(zip(operands * 4, outs)):
                assert not torch.isnan(out).any(), f"replay {seed}, graph {g}, call {j}: NaN"
                assert relative_error(out, a.float() @ b.float().T) < TOLERANCE, f"replay {seed}, graph {g}, call {j}"


def test_splitk_prepared_launch(torch):
    """``prepare()`` of a split-K config (the bench's kernel-only timing) launches through the fast path."""
    from ptxgen.bench import relative_error
    from ptxgen.runtime.api import prepare

    m, n, k = 700, 450, 1032
    a, b = random_operands(torch, m, n, k, seed=21)
    out = _poisoned(torch, m, n)
    prepared = prepare(a, b, out=out, config=split_config("h100_128x192", 4))
    spec = prepared.kernel.spec  # ptxgen bench names a row by its prepared kernel's spec
    assert (spec.name, spec.grid.split_k) == ("h100_128x192", 4)
    for _ in range(3):  # counters reset by each launch
        out.fill_(float("nan"))
        prepared.launch()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any()
        assert relative_error(out, a.float() @ b.float().T) < TOLERANCE


def test_splitk_prepared_launch_frees_its_workspace_with_it(torch):
    """A prepared split-K launch owns its workspace: dropping the launch frees it, so preparing again and again (a
    benchmark over many shapes) does not hold every workspace for the process; each launch is still right."""
    import gc

    from ptxgen.bench import relative_error
    from ptxgen.runtime.api import prepare

    m, n, k = 700, 4500, 1032
    a, b = random_operands(torch, m, n, k, seed=22)
    out = _poisoned(torch, m, n)
    cfg = split_config("h100_128x192", 4)
    prepare(a, b, out=out, config=cfg).launch()  # the kernel loaded; its workspace dropped with the launch
    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.memory_allocated()
    workspace = prepare(a, b, out=out, config=cfg).kernel.held[0].numel()
    assert workspace > 0 and torch.cuda.memory_allocated() == before  # a dropped launch leaves nothing behind
    for _ in range(20):
        out.fill_(float("nan"))
        prepare(a, b, out=out, config=cfg).launch()
        torch.cuda.synchronize()
        assert relative_error(out, a.float() @ b.float().T) < TOLERANCE
    gc.collect()
    assert torch.cuda.memory_allocated() == before, f"{torch.cuda.memory_allocated() - before} B held after 20 launches"


@pytest.mark.parametrize("name,splits,shape", [("h100_128x64", 4, (1000, 1000, 8200)), ("h100_64x128", 2, (130, 3000, 5000)),
                                               ("h100_64x64", 4, (70, 700, 40))])
def test_splitk_many_launches_reset_the_counters(torch, name, splits, shape):
    """Twenty launches in a row into one output: each is right (a counter left nonzero makes the next launch's
    tile reduce early or never)."""
    from ptxgen import gemm
    from ptxgen.bench import relative_error

    m, n, k = shape
    a, b = random_operands(torch, m, n, k, seed=31)
    ref = a.float() @ b.float().T
    cfg = split_config(name, splits)
    for i in range(20):
        out = _poisoned(torch, m, n)
        gemm(a, b, out=out, config=cfg)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), f"launch {i}: NaN"
        assert relative_error(out, ref) < TOLERANCE, f"launch {i}"


def test_splitk_two_streams_at_once(torch):
    """The same config and shape on two streams, launched back to back many times without syncing between
    them: each stream has its own workspace, so the launches may overlap on the GPU and both stay right."""
    two_streams_at_once(torch, split_config("h100_128x64", 4), (256, 2048, 8192), seed=41, launches=8)


def two_streams_at_once(torch, cfg, shape, seed: int, launches: int) -> None:
    """``launches`` calls of ``cfg`` on each of two streams, back to back without syncing between them; every output
    right (no NaN, relative error < TOLERANCE)."""
    from ptxgen import gemm
    from ptxgen.bench import relative_error

    m, n, k = shape
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    inputs = [random_operands(torch, m, n, k, seed=seed + i) for i in range(2)]
    outs = [[_poisoned(torch, m, n) for _ in range(launches)] for _ in range(2)]
    torch.cuda.synchronize()
    for j in range(launches):
        for s, (a, b), o in zip(streams, inputs, outs):
            with torch.cuda.stream(s):
                gemm(a, b, out=o[j], config=cfg)
    torch.cuda.synchronize()
    for (a, b), o in zip(inputs, outs):
        ref = a.float() @ b.float().T
        for j, out in enumerate(o):
            assert not torch.isnan(out).any(), f"launch {j}: NaN"
            assert relative_error(out, ref) < TOLERANCE, f"launch {j}"


# --------------------------------------------------------------------------- split-K of the last wave

#: configs with ``schedule.split_k_tiles: last_wave`` (docs/performance.md, "Split-K of the last wave"), bench/configs
#: variants and shipped ones: one CTA and CTA pairs, 1 and 2 consumer warpgroups, the tail split 2 to 8 ways
LAST_WAVE = ["h100_128x128_lw2", "h100_128x256_lw2", "h100_256x128_lw4", "h100_128x192_lw3", "h100_128x128_c2_lw4",
             "h100_128x256_lw8"]


@functools.cache
def last_wave_config(name: str):
    from pathlib import Path

    bench = Path(__file__).parents[2] / "bench" / "configs" / f"{name}.yaml"
    return config_mod.load_config(bench if bench.is_file() else name)  # shipped, or a bench/configs variant


@pytest.mark.parametrize("name", LAST_WAVE)
@pytest.mark.parametrize("shape", [(2048, 1152, 4096), (2048, 1300, 1000), (2047, 1201, 4104), (1024, 1024, 8192),
                                   (256, 18432, 1024), (300, 200, 8)],
                         ids=["144tiles", "176tiles", "ragged", "64tiles", "pairs_tail", "one_kblock"])
def test_last_wave_gemm_fixed_shapes(torch, name, shape):
    """Whole waves plus a tail (128x128 tiles at M=2048, N=1152..1300: 144-176 tiles on 132 SMs), ragged M/N/K,
    fewer tiles than SMs (every tile split), one k-block (empty splits): each launch twice into NaN-poisoned outputs."""
    from ptxgen import gemm

    m, n, k = shape
    a, b = random_operands(torch, m, n, k, seed=51)
    cfg = last_wave_config(name)
    err = run_twice(torch, lambda out: gemm(a, b, out=out, config=cfg), m, n, a.float() @ b.float().T,
                    f"{name} {m}x{n}x{k}")
    assert err < TOLERANCE, f"{name} {m}x{n}x{k}: relative Frobenius error {err:.3e}"


@pytest.mark.parametrize("name", LAST_WAVE[:3])
@settings(max_examples=max(1, EXAMPLES // 4))
@given(data=st.data())
def test_last_wave_gemm_matches_reference(torch, name, data):
    random_gemm_matches_reference(torch, last_wave_config(name), name, data)


def test_last_wave_many_launches_two_streams_and_graph(torch):
    """Twenty launches in a row, two streams at once (each its own workspace) and a CUDA graph replayed with new
    inputs: every tail tile's counters are reset by its last arriver, whole tiles never touch them."""
    from ptxgen import gemm
    from ptxgen.bench import relative_error

    cfg = last_wave_config("h100_128x128_lw2")
    m, n, k = 2048, 1200, 2048  # 160 tiles: 132 whole, 28 split
    a, b = random_operands(torch, m, n, k, seed=61)
    ref = a.float() @ b.float().T
    for i in range(20):
        out = _poisoned(torch, m, n)
        gemm(a, b, out=out, config=cfg)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any() and relative_error(out, ref) < TOLERANCE, f"launch {i}"
    two_streams_at_once(torch, cfg, (m, n, k), seed=62, launches=6)
    out = _poisoned(torch, m, n)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gemm(a, b, out=out, config=cfg)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm(a, b, out=out, config=cfg)
    for seed in range(3):
        a.copy_(random_operands(torch, m, n, k, seed=70 + seed)[0])
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any(), f"replay {seed}: NaN"
        assert relative_error(out, a.float() @ b.float().T) < TOLERANCE, f"replay {seed}"


def test_last_wave_prepared_launch(torch):
    """``prepare()`` (the bench's launch) sizes the workspace for the grid it launches."""
    from ptxgen.bench import relative_error
    from ptxgen.runtime.api import prepare

    m, n, k = 2048, 1152, 3000
    a, b = random_operands(torch, m, n, k, seed=81)
    out = _poisoned(torch, m, n)
    prepared = prepare(a, b, out=out, config=last_wave_config("h100_128x256_lw2"))
    assert prepared.kernel.spec.grid.split_tiles == "last_wave"
    for _ in range(3):
        out.fill_(float("nan"))
        prepared.launch()
        torch.cuda.synchronize()
        assert not torch.isnan(out).any()
        assert relative_error(out, a.float() @ b.float().T) < TOLERANCE
