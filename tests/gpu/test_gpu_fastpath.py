"""GPU tests of the per-call fast path of ``ptxgen.gemm`` (marked ``gpu``; need a compute capability 9.0 GPU).

- results through the fast path (cached signature, cached tensor maps) are bit-identical to a
  prepared launch and to the first (slow-path) call;
- the tensor-map cache never serves a stale map: the same pointer with another shape is right;
- CUDA-graph capture and replay of ``ptxgen.gemm`` (new input values, same buffers);
- ``config=None`` runs the chosen config; ``out=None`` allocates;
- a kernel image from the disk cache loads without building;
- host microseconds per call, printed (regression guard only).
"""

from __future__ import annotations

import time

import pytest

from ptxgen.errors import ShapeError

pytestmark = pytest.mark.gpu
CONFIG = "h100_128x256"


def operands(torch, m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.25).to(torch.bfloat16)
    return a, b


def rel_err(torch, out, a, b):
    ref = a.float() @ b.float().T
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("config", [CONFIG, "h100_256x128", "h100_128x128"])
def test_fast_path_is_bit_identical_to_prepared_launch(torch, config):
    from ptxgen.runtime import gemm, prepare

    a, b = operands(torch, 1000, 1032, 512, seed=1)
    first = gemm(a, b, config=config)  # slow path: checks, load, signature stored
    fast = torch.full_like(first, float("nan"))
    for _ in range(3):
        gemm(a, b, out=fast, config=config)  # cached signature, cached tensor maps
    prepared = torch.full_like(first, float("nan"))
    prepare(a, b, prepared, config).launch()
    torch.cuda.synchronize()
    assert torch.equal(first, fast) and torch.equal(first, prepared)
    assert rel_err(torch, fast, a, b) < 1e-2


def test_same_pointer_other_shape_gets_a_fresh_tensor_map(torch):
    """One allocation viewed as A with two shapes (same data_ptr): the second call must not reuse the map."""
    from ptxgen.runtime import gemm

    k = 256
    storage = torch.randn(512 * k, device="cuda").to(torch.bfloat16) * 0.1
    b = (torch.randn(384, k, device="cuda") * 0.1).to(torch.bfloat16)
    a1 = storage[: 512 * k].view(512, k)
    a2 = storage[: 200 * 128].view(200, 128)
    b2 = (torch.randn(384, 128, device="cuda") * 0.1).to(torch.bfloat16)
    assert a1.data_ptr() == a2.data_ptr()
    o1 = gemm(a1, b, config=CONFIG)
    o2 = gemm(a2, b2, config=CONFIG)
    o1b = gemm(a1, b, config=CONFIG)  # back to the first shape: cached map, still right
    torch.cuda.synchronize()
    assert rel_err(torch, o1, a1, b) < 1e-2
    assert rel_err(torch, o2, a2, b2) < 1e-2
    assert torch.equal(o1, o1b)


def test_cuda_graph_capture_and_replay(torch):
    from ptxgen.runtime import gemm

    a, b = operands(torch, 512, 768, 512, seed=2)
    out = torch.empty(512, 768, device="cuda", dtype=torch.bfloat16)
    gemm(a, b, out=out, config=CONFIG)  # load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm(a, b, out=out, config=CONFIG)
    for seed in (3, 4):
        na, nb = operands(torch, 512, 768, 512, seed=seed)
        a.copy_(na)
        b.copy_(nb)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(torch, out, a, b) < 1e-2


def test_default_choice_and_allocation(torch):
    from ptxgen.runtime import choose, driver, gemm

    a, b = operands(torch, 4096, 4096, 4096, seed=5)
    out = gemm(a, b)
    torch.cuda.synchronize()
    info = driver.device_info(torch.cuda.current_device())
    name, why = choose.choose_cached(4096, 4096, 4096, info.capability, info.sm_count)
    print(f"\nconfig=None at 4096^3 on {info.name}: {name} ({why})")
    assert out.shape == (4096, 4096) and rel_err(torch, out, a, b) < 1e-2


def test_cached_signature_with_misaligned_out_is_refused(torch):
    from ptxgen.runtime import gemm

    a, b = operands(torch, 128, 256, 128, seed=6)
    good = torch.empty(128, 256, device="cuda", dtype=torch.bfloat16)
    gemm(a, b, out=good, config=CONFIG)  # stores the signature (out given, this shape and stride)
    flat = torch.full((128 * 256 + 8,), 7.0, device="cuda", dtype=torch.bfloat16)
    bad_out = flat[1:1 + 128 * 256].view(128, 256)  # same shape/stride signature, 2-byte offset
    before = flat.clone()
    with pytest.raises(ShapeError, match="16-byte aligned"):
        gemm(a, b, out=bad_out, config=CONFIG)
    torch.cuda.synchronize()
    assert torch.equal(flat, before)


def test_image_cache_hit_loads_without_building(torch, tmp_path, monkeypatch):
    from ptxgen.config import load_config
    from ptxgen.runtime import driver, loader
    from ptxgen.runtime.module import jit_ptx

    monkeypatch.setenv("PTXGEN_CACHE_DIR", str(tmp_path))
    ordinal = driver.ensure_context()
    info = driver.device_info(ordinal)
    cfg = load_config(CONFIG)
    first = loader.load_image(cfg, driver.driver_version(), info.capability, jit_ptx)
    monkeypatch.setattr(loader, "build_image", lambda *a: pytest.fail("built on a cache hit"))
    t0 = time.perf_counter()
    again = loader.load_image(cfg, driver.driver_version(), info.capability, jit_ptx)
    print(f"\nimage from the disk cache in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    assert again.cubin == first.cubin


def test_dump_knob_writes_files(torch, tmp_path, monkeypatch):
    from ptxgen.config import load_config
    from ptxgen.runtime import driver, loader
    from ptxgen.runtime.module import jit_ptx

    monkeypatch.setenv("PTXGEN_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("PTXGEN_DUMP", str(tmp_path / "d"))
    ordinal = driver.ensure_context()
    info = driver.device_info(ordinal)
    loader.load_image(load_config(CONFIG), driver.driver_version(), info.capability, jit_ptx)
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    print(f"\ndumped: {names}")
    assert f"{CONFIG}.ptx" in names and f"{CONFIG}.cubin" in names and f"{CONFIG}.json" in names


def test_host_overhead_per_call(torch):
    from ptxgen.bench import format_host_overhead, host_overhead

    doc = host_overhead(n_calls=2000, config=CONFIG)
    print("\n" + format_host_overhead(doc))
    ours = doc["variants"]["ptxgen.gemm(out=)"]["us_per_call_no_sync"]
    assert ours < 100.0, f"ptxgen.gemm host time {ours:.1f} us per call (was ~420 us before the fast path)"
    fused = doc["variants"]["ptxgen.gemm(out=, acc + residual)"]["us_per_call_no_sync"]
    assert fused < 2 * ours + 20.0, f"fused call host time {fused:.1f} us against the plain call's {ours:.1f}"
