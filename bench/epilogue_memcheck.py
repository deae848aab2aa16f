"""One small call of each new epilogue path (e4m3 D with block scale, row amax, a stored tile, the residual's pair
loads) at M and N tails, for ``compute-sanitizer --tool memcheck``."""

import torch

import ptxgen

for m, n in ((70, 261), (130, 384)):
    a, b = torch.randn(m, 64, device="cuda").bfloat16(), torch.randn(n, 64, device="cuda").bfloat16()
    r = torch.randn(m, n, device="cuda").bfloat16()
    ptxgen.gemm(a, b, config="h100_128x128", epilogue='e4m3(store("pre", acc + residual), "ds")', residual=r)
    ptxgen.gemm(a, b, epilogue='e4m3(amax("am", acc) * scale[row])', scale=torch.rand(m, device="cuda"))
    ptxgen.gemm(a, b, epilogue='e4m3(amax("am", acc, "tensor") * scale)', scale=0.5)
    ptxgen.gemm(a, b, epilogue="gelu(acc + bias[col]) + residual", bias=torch.randn(n, device="cuda").bfloat16(), residual=r)
torch.cuda.synchronize()
print("memcheck script done")
ptxgen.gemm(torch.randn(70, 64, device="cuda").bfloat16(), torch.randn(200, 64, device="cuda").bfloat16(),
            epilogue='e4m3(acc, "ds")')  # the shape's choice may not take a block scale: the fallback config
torch.cuda.synchronize()
print("memcheck fallback done")
