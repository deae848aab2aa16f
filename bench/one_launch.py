"""One checked launch of a config, for compute-sanitizer: ``python3 bench/one_launch.py CONFIG M N K``."""

import math
import sys

import torch

import ptxgen

config, m, n, k = sys.argv[1], *map(int, sys.argv[2:5])
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
out = torch.full((m, n), math.nan, device="cuda", dtype=torch.bfloat16)
ptxgen.gemm(a, b, out, config=config)
torch.cuda.synchronize()
ref = a.float() @ b.float().T
err = ((out.float() - ref).norm() / ref.norm()).item()
print(f"{config} {m}x{n}x{k}: rel err {err:.2e}")
sys.exit(0 if err < 1e-2 else 1)
