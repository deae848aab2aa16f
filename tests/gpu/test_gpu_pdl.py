"""Programmatic dependent launch on the GPU (marked ``gpu``): kernels built with ``schedule.pdl`` launch while the
previous kernel on the stream drains, and wait (``griddepcontrol.wait``) before they touch global memory.

Each test chains calls on one stream with no synchronization between them, so a kernel that read or wrote global
memory before its wait would race with the kernel before it:

* read after write: ``D1 = A B1^T`` into a NaN-poisoned D1 by a long kernel (K = 16384), then ``D2 = D1 B2^T``
  at once; D2 is checked against an fp32 reference computed from the D1 the first call left (NaN never passes);
* write after read: ``D = A B^T``, then a call whose ``out`` is A; D is checked against the A it was given;
* the same chain captured in a CUDA graph and replayed.

Relative Frobenius error < 1e-2 against fp32 references (the bf16 tolerance of every GEMM test).
"""

from __future__ import annotations

import pytest

import ptxgen
from ptxgen.runtime import api
from tests.gpu.test_gpu_gemm import random_operands

pytestmark = pytest.mark.gpu

TOL = 1e-2
#: one config of each launch shape: one CTA per tile, a CTA pair, a pair along N, split-K with its workspace and
#: counters, swap-AB (per-element stores), a ping-pong consumer
CHAIN_CONFIGS = ("h100_128x256", "h100_128x128_c2", "h100_128x80_c2n", "h100_64x64_sk4", "h100_64x32_swap",
                 "h100_64x256_pp")


@pytest.fixture(autouse=True)
def pdl_on(monkeypatch):
    """``PTXGEN_PDL=1`` whatever the environment, with the process's loaded kernels and call signatures set aside
    (the knob is read when a kernel is loaded), restored after the test."""
    monkeypatch.setenv("PTXGEN_PDL", "1")
    monkeypatch.setattr(api, "_loaded", {})
    monkeypatch.setattr(api, "_calls", {})


def _rel(torch, out, ref) -> float:
    assert not torch.isnan(out).any(), "NaN in the output"
    return ((out.float() - ref).norm() / ref.norm()).item()


def _reference(a, b):
    return a.float() @ b.float().T


def test_shipped_kernels_are_launched_with_pdl(torch):
    """Every config of the chain is built with ``schedule.pdl`` and, with the knob on, launched with it."""
    for name in CHAIN_CONFIGS:
        loaded = api.loaded_kernel(name, torch.cuda.current_device())
        assert loaded.spec.pdl and loaded.kernel.pdl, name


@pytest.mark.parametrize("second", CHAIN_CONFIGS)
@pytest.mark.parametrize("first", ("h100_128x256", "h100_64x64_sk4"))
def test_chained_calls_read_what_the_previous_call_wrote(torch, first, second):
    m, n1, k1, n2 = 256, 1024, 16384, 768
    if second == "h100_64x32_swap":
        m = 32  # swap-AB: the caller's M is the kernel's N tile
    a, b1 = random_operands(torch, m, n1, k1, seed=1)
    _, b2 = random_operands(torch, 1, n2, n1, seed=2)
    d1 = torch.full((m, n1), float("nan"), dtype=torch.bfloat16, device="cuda")
    d2 = torch.full((m, n2), float("nan"), dtype=torch.bfloat16, device="cuda")
    ptxgen.gemm(a, b1, out=d1, config=first)
    ptxgen.gemm(d1, b2, out=d2, config=second)  # launched while the first drains: its loads wait for D1
    torch.cuda.synchronize()
    assert _rel(torch, d1, _reference(a, b1)) < TOL
    assert _rel(torch, d2, _reference(d1, b2)) < TOL


@pytest.mark.parametrize("second", CHAIN_CONFIGS)
def test_a_call_writing_the_previous_calls_input_waits_for_it(torch, second):
    m, n, k = 256, 2048, 8192
    if second == "h100_64x32_swap":
        m = 32
    a, b = random_operands(torch, m, n, k, seed=3)
    c, e = random_operands(torch, m, k, 512, seed=4)  # c @ e^T is [m, k]: written over A
    a_given = a.clone()
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    ptxgen.gemm(a, b, out=d, config="h100_128x256")
    ptxgen.gemm(c, e, out=a, config=second)  # its stores wait until the first call has read all of A
    torch.cuda.synchronize()
    assert _rel(torch, d, _reference(a_given, b)) < TOL
    assert _rel(torch, a, _reference(c, e)) < TOL


def test_a_chain_captured_in_a_graph_replays_in_order(torch):
    m, n, k = 256, 1024, 4096
    a, b1 = random_operands(torch, m, n, k, seed=5)
    _, b2 = random_operands(torch, 1, n, n, seed=6)
    d = [torch.empty((m, n), dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    configs = ("h100_128x256", "h100_64x64_sk4", "h100_128x128_c2", "h100_128x80_c2n")
    chain = lambda: [ptxgen.gemm(a if i == 0 else d[i - 1], b1 if i == 0 else b2, out=d[i], config=cfg)  # noqa: E731
                     for i, cfg in enumerate(configs)]
    chain()  # load the kernels and their workspaces outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    for _ in range(2):
        for t in d:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel(torch, d[0], _reference(a, b1)) < TOL
        for i in range(1, 4):
            assert _rel(torch, d[i], _reference(d[i - 1], b2)) < TOL, configs[i]
