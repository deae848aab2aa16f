"""One launch of a config for compute-sanitizer: ``python3 bench/sanitize_one.py CONFIG [M N K] [--graph]``.

    compute-sanitizer --tool racecheck python3 bench/sanitize_one.py dual_h100_128x128 300 520 264

Dual configs run ``ptxgen.dual_gemm``, others ``ptxgen.gemm``; exits non-zero when the result is wrong.  ``--graph``:
three calls (three outputs) captured in one CUDA graph, which shares one split-K workspace among them, replayed twice
with new values of A; every output of the last replay is checked.
"""

import sys

import torch
import torch.nn.functional as F

import ptxgen
from ptxgen.config import load_config

args = [x for x in sys.argv[1:] if x != "--graph"]
graphed = "--graph" in sys.argv[1:]
name = args[0]
m, n, k = (int(x) for x in args[1:4]) if len(args) >= 4 else (300, 520, 264)
g = torch.Generator(device="cuda").manual_seed(0)
a, b1, b2 = ((torch.randn(r, k, device="cuda", generator=g) * k ** -0.25).bfloat16() for r in (m, n, n))
dual = load_config(name).kernel == "dual_gemm"


def call(out=None):
    return ptxgen.dual_gemm(a, b1, b2, out=out, config=name) if dual else ptxgen.gemm(a, b1, out=out, config=name)


if graphed:
    outs = [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(outs[0])  # load the kernel outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for out in outs:
            call(out)
    for _ in range(2):
        a.copy_((torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).bfloat16())
        for out in outs:
            out.fill_(float("nan"))
        graph.replay()
else:
    outs = [call()]
torch.cuda.synchronize()
ref = F.silu(a.float() @ b1.float().T) * (a.float() @ b2.float().T) if dual else a.float() @ b1.float().T
err = max(((out.float() - ref).norm() / ref.norm()).item() for out in outs)
print(f"{name} {m}x{n}x{k}{' (graph of 3 calls)' if graphed else ''}: rel err {err:.2e}")
sys.exit(0 if err < 1e-2 else 1)
