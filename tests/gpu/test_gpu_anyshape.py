"""GPU tests of ``gemm``/``dual_gemm`` on the shapes and views torch takes and the kernels do not (marked ``gpu``).

K not a multiple of 8, M or N = 1, N not a multiple of 8, transposed views (``torch.randn(k, m).T``), strided
slices (``x[:, ::2]``, ``x[1:, 3:]``) and a strided ``out``: each is staged by the call (``ptxgen.runtime.api``,
"Staging"), except the transposed views the config's MN-major variant reads in place ("MN-major operands").  Fresh random inputs per case, ``out`` poisoned with NaN, no NaN allowed and a relative Frobenius error
under 1e-2 against the fp32 reference.  Hypothesis draws shapes and view kinds (``PTXGEN_GPU_EXAMPLES`` examples,
default 100).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.gpu

EXAMPLES = int(os.environ.get("PTXGEN_GPU_EXAMPLES", "100"))
TOLERANCE = 1e-2
VIEWS = ("contiguous", "transposed", "strided", "offset", "padded")


def make(torch, kind: str, rows: int, cols: int, gen, scale: float):
    """A ``[rows, cols]`` bf16 CUDA tensor of random values laid out as ``kind``."""
    def randn(*shape):
        return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(torch.bfloat16)

    if kind == "contiguous":
        return randn(rows, cols)
    if kind == "transposed":
        return randn(cols, rows).T
    if kind == "strided":
        return randn(rows, 2 * cols)[:, ::2]
    if kind == "offset":
        return randn(rows + 1, cols + 3)[1:, 3:]
    if kind == "padded":
        return randn(rows, cols + 16 - cols % 8)[:, :cols]
    raise ValueError(kind)


def poisoned_out(torch, kind: str, m: int, n: int):
    """A NaN-filled ``[m, n]`` out laid out as ``kind`` (its base, to check the untouched gaps)."""
    nan = float("nan")
    if kind == "contiguous":
        base = torch.full((m, n), nan, device="cuda", dtype=torch.bfloat16)
        return base, base
    if kind == "transposed":
        base = torch.full((n, m), nan, device="cuda", dtype=torch.bfloat16)
        return base.T, base
    if kind == "strided":
        base = torch.full((m, 2 * n), nan, device="cuda", dtype=torch.bfloat16)
        return base[:, ::2], base
    if kind in ("offset", "padded"):
        base = torch.full((m + 1, n + 8), nan, device="cuda", dtype=torch.bfloat16)
        return (base[1:, 3:3 + n] if kind == "offset" else base[:m, :n]), base
    raise ValueError(kind)


def relative_error(torch, out, ref) -> float:
    return float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref).clamp_min(1e-30))


def run_case(torch, m, n, k, a_kind="contiguous", b_kind="contiguous", out_kind="contiguous", seed=0,
             config=None, dual=False):
    """One call of gemm (or dual_gemm) on fresh inputs; returns the relative error (NaN fails here)."""
    import ptxgen
    from ptxgen.errors import ShapeError

    gen = torch.Generator(device="cuda").manual_seed(seed)
    scale = max(k, 1) ** -0.25
    a = make(torch, a_kind, m, k, gen, scale)
    b = make(torch, b_kind, n, k, gen, scale)
    out, base = poisoned_out(torch, out_kind, m, n)
    if out.data_ptr() % 16 and (out.stride(1) == 1 or n == 1) and (out.stride(0) == n or m == 1):
        # a row-major out is the kernel's D itself: one not 16-byte aligned is refused, out untouched
        before = base.clone()
        with pytest.raises(ShapeError, match="16-byte"):
            ptxgen.gemm(a, b, out=out, config=config)
        torch.cuda.synchronize()
        assert torch.equal(base.isnan(), before.isnan())
        return 0.0
    if dual:
        b2 = make(torch, b_kind, n, k, gen, scale)
        result = ptxgen.dual_gemm(a, b, b2, out=out, config=config)
        af = a.float()
        ref = torch.nn.functional.silu(af @ b.float().T) * (af @ b2.float().T)
    else:
        result = ptxgen.gemm(a, b, out=out, config=config)
        ref = a.float() @ b.float().T
    torch.cuda.synchronize()
    label = f"{m}x{n}x{k} a={a_kind} b={b_kind} out={out_kind} seed={seed}"
    assert result is out, label
    nans = int(torch.isnan(out.float()).sum())
    assert nans == 0, f"{label}: {nans} of {m * n} outputs never written (NaN)"
    gaps = int((~torch.isnan(base.float())).sum()) - m * n
    assert gaps == 0, f"{label}: {gaps} elements outside out were written"
    return relative_error(torch, out, ref)


@pytest.mark.parametrize("k", [4095, 4100, 9999, 1, 7])
def test_k_not_a_multiple_of_8(torch, k):
    err = run_case(torch, 300, 520, k, seed=k)
    assert err < TOLERANCE


@pytest.mark.parametrize("m, n, k", [(1, 520, 256), (300, 1, 256), (1, 1, 99), (1, 4096, 4095), (257, 13, 130),
                                     (64, 8191, 1000)])
def test_m_or_n_one_and_n_off_8(torch, m, n, k):
    assert run_case(torch, m, n, k, seed=m + n + k) < TOLERANCE


@pytest.mark.parametrize("a_kind, b_kind", [("transposed", "contiguous"), ("contiguous", "transposed"),
                                            ("transposed", "transposed"), ("strided", "offset"),
                                            ("offset", "strided"), ("padded", "padded")])
@pytest.mark.parametrize("k", [512, 1001])
def test_views(torch, a_kind, b_kind, k):
    assert run_case(torch, 384, 640, k, a_kind, b_kind, seed=k) < TOLERANCE


@pytest.mark.parametrize("out_kind", ["strided", "offset", "padded", "transposed"])
def test_strided_out(torch, out_kind):
    assert run_case(torch, 200, 264, 520, out_kind=out_kind, seed=3) < TOLERANCE


def test_dual_gemm_views(torch):
    assert run_case(torch, 300, 520, 4095, "transposed", "strided", "offset", seed=5, dual=True) < TOLERANCE
    assert run_case(torch, 1, 13, 7, "offset", "transposed", seed=6, dual=True) < TOLERANCE


def test_staging_on_a_side_stream_and_repeated(torch):
    """Staged calls on two streams and back to back: each call's staging tensors are its own."""
    import ptxgen

    gen = torch.Generator(device="cuda").manual_seed(9)
    pairs = [(make(torch, "transposed", 256, 1001, gen, 0.2), make(torch, "strided", 384, 1001, gen, 0.2))
             for _ in range(4)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs = []
    for i, (a, b) in enumerate(pairs):
        with torch.cuda.stream(streams[i % 2]):
            outs.append(ptxgen.gemm(a, b))
    torch.cuda.synchronize()
    for (a, b), out in zip(pairs, outs):
        assert relative_error(torch, out, a.float() @ b.float().T) < TOLERANCE


def test_empty_dims_as_torch(torch):
    import ptxgen

    for m, n, k in ((0, 5, 8), (5, 0, 8), (5, 6, 0)):
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        out = ptxgen.gemm(a, b)
        assert torch.equal(out.float(), a.float() @ b.float().T)


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_any_shape_and_view(torch, data):
    dims = st.one_of(st.integers(1, 16), st.integers(1, 2048))
    m, n = data.draw(dims, label="m"), data.draw(dims, label="n")
    k = data.draw(st.one_of(st.integers(1, 24), st.integers(1, 4200)), label="k")
    kinds = st.sampled_from(VIEWS)
    a_kind, b_kind, out_kind = data.draw(kinds, label="a"), data.draw(kinds, label="b"), data.draw(kinds, label="out")
    dual = data.draw(st.booleans(), label="dual")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    err = run_case(torch, m, n, k, a_kind, b_kind, out_kind, seed=seed, dual=dual)
    assert err < TOLERANCE, f"{m}x{n}x{k} a={a_kind} b={b_kind} out={out_kind} dual={dual}: {err:.3e}"
