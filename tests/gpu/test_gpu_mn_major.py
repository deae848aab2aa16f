"""GPU tests of MN-major operands (marked ``gpu``): ``gemm`` and ``dual_gemm`` read transposed views in place.

``ptxgen.gemm(x, w.T)`` with ``w`` a row-major ``[K, N]`` weight (and ``x_t.T`` as A) runs the config's
``tma.major_a`` / ``major_b`` variant (``ptxgen.runtime.api``, "MN-major operands"): no staging copy.  Each case: fresh
random inputs, ``out`` poisoned with NaN, the relative Frobenius error against the fp32 reference under 1e-2 with
no NaN; the variant that ran is the one expected, and a repeated call allocates nothing.  Configs cover a CTA pair
multicasting B (its halves of an MN-major B), a pair along N (A's halves), split-K, the last-wave split, ping-pong
consumers and swap-AB (the caller's B is the kernel's A).  The dual GEMM (``silu(x @ w1) * (x @ w2)`` with ``w1``,
``w2`` row-major ``[K, N]``) on each shipped sm_90a dual config, and with only one of B1, B2 transposed (that one
copied, the kernel K-major).
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


def _close(torch, out, ref):
    assert not torch.isnan(out).any()
    err = float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref))
    assert err < TOLERANCE, err


def _check(torch, a, b, out):
    _close(torch, out, a.float() @ b.float().T)


def _rerun_allocates_nothing(torch, call, out, check):
    """``call()`` again on a NaN-poisoned ``out``: the stored call allocates no staging tensor; then ``check()``."""
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
    call()
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocs
    check()


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
    _rerun_allocates_nothing(torch, lambda: ptxgen.gemm(a, b, out=out, config=config), out,
                             lambda: _check(torch, a, b, out))


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


#: (dual config, M, N, K): ragged M, N (multiples of 8) and K; a pair, its last-wave split, the small-M tiles
DUAL_CASES = (
    ("dual_h100_128x128", 520, 392, 1000),
    ("dual_h100_128x128_c2", 1000, 1288, 264),
    ("dual_h100_128x128_c2_lw2", 2048, 2400, 520),
    ("dual_h100_128x128_lw2", 264, 1040, 2056),
    ("dual_h100_128x64", 136, 648, 200),
    ("dual_h100_64x64", 24, 1152, 4104),
)


def _dual_check(torch, a, b1, b2, out):
    _close(torch, out, torch.nn.functional.silu(a.float() @ b1.float().T) * (a.float() @ b2.float().T))


@pytest.mark.parametrize("config,m,n,k", DUAL_CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dual_gemm_reads_transposed_views_in_place(torch, config, m, n, k, layout):
    import ptxgen
    from ptxgen.runtime import api

    a, b1 = _inputs(torch, m, n, k, layout, seed=m + n + k)
    _, b2 = _inputs(torch, m, n, k, layout, seed=m + n + k + 1)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.dual_gemm(a, b1, b2, out=out, config=config)
    torch.cuda.synchronize()
    _dual_check(torch, a, b1, b2, out)
    key = api._signature(a, b1, out, config) + (b2.dtype, b2.shape, b2.stride(), b2.device)
    assert api._calls[key].loaded.spec.name == api.majors_config(config, "a" in layout, "b" in layout).name
    _rerun_allocates_nothing(torch, lambda: ptxgen.dual_gemm(a, b1, b2, out=out, config=config), out,
                             lambda: _dual_check(torch, a, b1, b2, out))


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (64, 14336, 4096), (256, 1408, 2048)])
def test_dual_gemm_chosen_config_and_one_transposed_b(torch, m, n, k):
    """``config=None``: the chosen dual config's MN-major variant reads ``w1.T`` and ``w2.T``; with only ``w1.T``
    transposed the kernel stays K-major and copies it; both match the reference."""
    import ptxgen
    from ptxgen.runtime import api

    a, b1 = _inputs(torch, m, n, k, "b", seed=k)
    _, b2 = _inputs(torch, m, n, k, "b", seed=k + 1)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ptxgen.dual_gemm(a, b1, b2, out=out)
    torch.cuda.synchronize()
    _dual_check(torch, a, b1, b2, out)
    key = api._signature(a, b1, out, None) + (b2.dtype, b2.shape, b2.stride(), b2.device)
    assert api._calls[key].loaded.spec.name.endswith("_mnb")
    b2_rows = b2.contiguous()
    out.fill_(float("nan"))
    ptxgen.dual_gemm(a, b1, b2_rows, out=out)
    torch.cuda.synchronize()
    _dual_check(torch, a, b1, b2_rows, out)
    key = api._signature(a, b1, out, None) + (b2_rows.dtype, b2_rows.shape, b2_rows.stride(), b2_rows.device)
    assert "_mn" not in api._calls[key].loaded.spec.name


@pytest.mark.parametrize("m,n,k", [(200, 1288, 1000), (4096, 4096, 4096), (64, 8192, 2048)])
def test_fused_epilogues_read_transposed_views_in_place(torch, m, n, k):
    """``ptxgen.gemm(x, w.T, epilogue=...)`` (a bias and a residual tile through TMA) and the dual GEMM's
    ``dual_gemm(x, w1.T, w2.T, epilogue=...)`` run the chosen config's MN-major variant of the fused kernel."""
    import ptxgen
    from ptxgen.runtime import api

    a, b = _inputs(torch, m, n, k, "b", seed=k + 3)
    _, b2 = _inputs(torch, m, n, k, "b", seed=k + 4)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    acc, acc2 = a.float() @ b.float().T, a.float() @ b2.float().T
    cases = (
        (lambda: ptxgen.gemm(a, b, epilogue="gelu(acc + bias[col])", bias=bias),
         torch.nn.functional.gelu(acc + bias.float(), approximate="tanh")),
        (lambda: ptxgen.gemm(a, b, epilogue="acc + residual", residual=residual), acc + residual.float()),
        (lambda: ptxgen.dual_gemm(a, b, b2, epilogue="silu(acc1) * acc2 + bias[col]", bias=bias),
         torch.nn.functional.silu(acc) * acc2 + bias.float()),
    )
    before = set(api._fused_calls)
    for run, ref in cases:
        out = run()
        torch.cuda.synchronize()
        _close(torch, out, ref)
    calls = [api._fused_calls[key][1] for key in set(api._fused_calls) - before]
    assert len(calls) == 3 and all(c.loaded.spec.name.endswith("_mnb") for c in calls)
