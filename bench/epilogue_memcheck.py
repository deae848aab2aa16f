"""One small call of each new epilogue path (e4m3 D with block scale, row amax, a stored tile, the residual's pair
loads, the residual's TMA box load through the CD staging ring, an e4m3 D staged as bytes and stored by TMA, the
small-M, split-K and swap-AB tiles a fused call takes) at M and N tails, for ``compute-sanitizer --tool memcheck``."""

import torch

import ptxgen

for m, n in ((70, 261), (130, 384)):
    a, b = torch.randn(m, 64, device="cuda").bfloat16(), torch.randn(n, 64, device="cuda").bfloat16()
    r = torch.randn(m, n, device="cuda").bfloat16()
    ptxgen.gemm(a, b, config="h100_128x128", epilogue='e4m3(store("pre", acc + residual), "ds")', residual=r)
    ptxgen.gemm(a, b, epilogue='e4m3(amax("am", acc) * scale[row])', scale=torch.rand(m, device="cuda"))
    ptxgen.gemm(a, b, epilogue='e4m3(amax("am", acc, "tensor") * scale)', scale=0.5)
    ptxgen.gemm(a, b, epilogue="gelu(acc + bias[col]) + residual", bias=torch.randn(n, device="cuda").bfloat16(), residual=r)
for config in ("h100_128x256", "h100_256x128"):  # the staged residual (N % 8 == 0) and its direct branch (N odd)
    for m, n in ((70, 264), (300, 520), (130, 261)):
        a, b = torch.randn(m, 64, device="cuda").bfloat16(), torch.randn(n, 64, device="cuda").bfloat16()
        r = torch.randn(m, n, device="cuda").bfloat16()
        ptxgen.gemm(a, b, config=config, epilogue="acc + residual", residual=r)
        ptxgen.gemm(a, b, config=config, epilogue="gelu(acc + bias[col]) + residual",
                    bias=torch.randn(n, device="cuda").bfloat16(), residual=r)
        ptxgen.gemm(a, b, config=config, epilogue="fp16(acc - residual)", residual=r.half())
for config in ("h100_128x256", "h100_128x144"):  # the e4m3 D staged as bytes (N % 16 == 0) and its direct branch
    for m, n in ((70, 272), (300, 528), (130, 264)):
        a, b = torch.randn(m, 64, device="cuda").bfloat16(), torch.randn(n, 64, device="cuda").bfloat16()
        ptxgen.gemm(a, b, config=config, epilogue='e4m3(amax("am", acc) * scale[row])', scale=torch.rand(m, device="cuda"))
        if config == "h100_128x256":
            ptxgen.gemm(a, b, config=config, epilogue='e4m3(store("pre", acc), "ds")')
# the small-M tiles a fused call takes (its choice, or the cost model's next config where the choice is a swap-AB tile),
# split-K among them (the last arriver's epilogue), at M = 1 and 16 with N and K tails; config=None at M = 1
for config in ("h100_64x64", "h100_64x128", "h100_64x256", "h100_128x64", "h100_128x80_c2n", "h100_64x64_sk2",
               "h100_64x64_sk4", "h100_64x128_sk2", "h100_128x64_sk2", "h100_128x192_sk3", None):
    for m, n, k in ((1, 261, 1032), (16, 520, 264)):
        a, b = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16()
        ptxgen.gemm(a, b, config=config, epilogue="acc + residual", residual=torch.randn(m, n, device="cuda").bfloat16())
        ptxgen.gemm(a, b, config=config, epilogue="gelu(acc + bias[col])", bias=torch.randn(n, device="cuda").bfloat16())
# the residual staged under split-K (the tile's last arriver loads its boxes): last-wave splits of 128x256 tiles
for config in ("h100_128x256_lw2", "h100_128x256_lw4"):
    for m, n, k in ((300, 520, 640), (130, 264, 2000)):
        a, b = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16()
        ptxgen.gemm(a, b, config=config, epilogue="acc + residual", residual=torch.randn(m, n, device="cuda").bfloat16())
# swap-AB tiles (M <= 16 / 32): the operands read by the kernel's axes (a column bias per accumulator row, a row scale
# per accumulator column, the residual transposed), at M = 1, 16 and 31 with N and K tails
for config in ("h100_64x16_swap", "h100_64x32_swap"):
    for m, n, k in ((1, 261, 1032), (16, 520, 264), (31, 130, 200)):
        if m > (16 if config == "h100_64x16_swap" else 32):
            continue
        a, b = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16()
        ptxgen.gemm(a, b, config=config, epilogue="gelu(acc + bias[col]) * scale[row] + residual",
                    bias=torch.randn(n, device="cuda").bfloat16(), scale=torch.rand(m, device="cuda"),
                    residual=torch.randn(m, n, device="cuda").bfloat16())
        ptxgen.gemm(a, b, config=config, epilogue="fp16(acc - residual)",
                    residual=torch.randn(m, n, device="cuda").half())
torch.cuda.synchronize()
print("memcheck script done")
ptxgen.gemm(torch.randn(70, 64, device="cuda").bfloat16(), torch.randn(200, 64, device="cuda").bfloat16(),
            epilogue='e4m3(acc, "ds")')  # the shape's choice may not take a block scale: the fallback config
torch.cuda.synchronize()
print("memcheck fallback done")
