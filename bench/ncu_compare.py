"""One launch of ours and one of torch.matmul per shape, for an ncu comparison (device only).

Usage: ncu --kernel-name regex:'ptxgen|nvjet' --section SpeedOfLight ... python3 bench/ncu_compare.py MxNxK [CONFIG]
Each side is warmed up outside ncu's filter (the first launches of a module are not what we compare).
"""
import sys

import torch

import ptxgen

m, n, k = map(int, sys.argv[1].split("x"))
config = sys.argv[2] if len(sys.argv) > 2 else None
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
ptxgen.gemm(a, b, out, config=config)
torch.matmul(a, b.T, out=out)
torch.cuda.synchronize()
