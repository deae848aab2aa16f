"""GPU tests of MN-major operands (marked ``gpu``): ``gemm`` reads transposed views in place.

``ptxgen.gemm(x, w.T)`` with ``w`` a row-major ``[K, N]`` weight (and ``x_t.T`` as A) runs the config's
``tma.major_a`` / ``major_b`` variant (``ptxgen.runtime.api``, "MN-major operands"): no staging copy.  Each case: fresh
random inputs, ``out`` poisoned with NaN, the relative Frobenius error against the fp32 reference under 1e-2 with
no NaN; the variant that ran is the one expected, and a repeated call allocates nothing.  Configs cover a CTA pair
multicasting B (its halves of an MN-major B), a pair along N (A's halves), split-K, the last-wave split, ping-pong
consumers and swap-AB (the caller's B is the kernel's A).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

TOLERANCE = 1e-2

#: (config, M, N, K): ragged M, N (multiples of 8) and K, one k-block, tails of the pair's tiles
CASES = (
    ("h100_128x256", 1000, 1288, 1000),
    ("h100_128x128", 264, 200, 72),
    ("h100_256x128", 520, 392, 136),
    ("h100_128x80_c2n", 136, 1040, 264),
    ("h100_64x128_sk2", 64, 1152, 4104),
    ("h100_128x256_lw2", 2048, 2400, 520),
    ("h100_128x128_pp", 392, 648, 200),
    ("h100_64x32_swap", 24, 4096, 1032),
)
LAYOUTS = ("a", "b", "ab")


def _inputs(torch, m, n, k, layout, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    scale = k ** -0.25

    def randn(*shape):
        return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(torch.bfloat16)

    a = randn(k, m).T if "a" in layout else randn(m, k)
    b = randn(k, n).T if "b" in layout else randn(n, k)
    return a, b


def _check(torch, a, b, out):
    ref = a.float() @ b.float().T
    assert not torch.isnan(out).any()
    err = float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref))
    assert err < TOLERANCE, err


@pytest.mark.parametrize("config,m,n,k", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_transposed_views_run_the_mn_major_variant(torch, config, m, n, k, layout):
    import ptxgen
    from ptxgen.runtime import api

    a, b = _inputs(torch, m, n, k, layout, seed=m + n + k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.gemm(a, b, out=out, config=config)
    torch.cuda.synchronize()
    _check(torch, a, b, out)
    call = api._calls[api._signature(a, b, out, config)]
    variant = api.majors_config(config, "a" in layout, "b" in layout)
    if variant is None:  # this config cannot read the view MN-major (a share of rows not whole 64-row boxes)
        assert "_mn" not in call.loaded.spec.name
        return
    assert call.loaded.spec.name == variant.name
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
    ptxgen.gemm(a, b, out=out, config=config)  # the stored call: no staging tensor
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocs
    _check(torch, a, b, out)


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (64, 8192, 8192), (8, 4096, 4096), (1000, 3000, 2000)])
def test_chosen_config_reads_w_t_in_place(torch, m, n, k):
    """``config=None``: the chooser's config (or the best-ranked one that can) reads ``w.T`` MN-major; a
    misaligned view and a K row pitch not a multiple of 8 are copied MN-major; all match the reference."""
    import ptxgen
    from ptxgen.runtime import api

    a, b = _inputs(torch, m, n, k, "b", seed=k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.gemm(a, b, out=out)
    torch.cuda.synchronize()
    _check(torch, a, b, out)
    assert api._calls[api._signature(a, b, out, None)].loaded.spec.name.endswith("_mnb")
    w = torch.randn(k, n + 8, device="cuda").to(torch.bfloat16)
    for view in (w[:, 8:].T, w[:, 1:n + 1].T):  # 16-byte aligned / not: copied MN-major per call
        out.fill_(float("nan"))
        ptxgen.gemm(a, view, out=out)
        torch.cuda.synchronize()
        _check(torch, a, view, out)


def test_graph_replay_and_side_stream(torch):
    import ptxgen

    a, b = _inputs(torch, 512, 2048, 1024, "ab", seed=7)
    out = torch.full((512, 2048), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.gemm(a, b, out=out)  # load and choose outside the capture
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out.fill_(float("nan"))
        ptxgen.gemm(a, b, out=out)
    side.synchronize()
    _check(torch, a, b, out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ptxgen.gemm(a, b, out=out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(torch, a, b, out)
