"""One launch of a config for compute-sanitizer: ``python3 bench/sanitize_one.py CONFIG [M N K]``.

    compute-sanitizer --tool racecheck python3 bench/sanitize_one.py dual_h100_128x128 300 520 264

Dual configs run ``ptxgen.dual_gemm``, others ``ptxgen.gemm``; exits non-zero when the result is wrong.
"""

import sys

import torch
import torch.nn.functional as F

import ptxgen
from ptxgen.config import load_config

name = sys.argv[1]
m, n, k = (int(x) for x in sys.argv[2:5]) if len(sys.argv) >= 5 else (300, 520, 264)
g = torch.Generator(device="cuda").manual_seed(0)
a, b1, b2 = ((torch.randn(r, k, device="cuda", generator=g) * k ** -0.25).bfloat16() for r in (m, n, n))
if load_config(name).kernel == "dual_gemm":
    out = ptxgen.dual_gemm(a, b1, b2, config=name)
    ref = F.silu(a.float() @ b1.float().T) * (a.float() @ b2.float().T)
else:
    out = ptxgen.gemm(a, b1, config=name)
    ref = a.float() @ b1.float().T
torch.cuda.synchronize()
err = ((out.float() - ref).norm() / ref.norm()).item()
print(f"{name} {m}x{n}x{k}: rel err {err:.2e}")
sys.exit(0 if err < 1e-2 else 1)
