#!/bin/bash
# One device call (docs/performance.md, "The fixup's verdict made warp-uniform"): each split-K config with the
# verdict's vote.sync.any against the same kernel without it (bench/ab.py --rewrite novote), compute-sanitizer
# memcheck, the GPU tests of the split and last-wave kernels; results under $OUT.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,power.limit --format=csv > $OUT/device.txt 2>&1
LW="--shape 1024x5120x4096 --shape 1024x5120x8192 --shape 1024x5120x16384 --shape 1024x5120x25600 --shape 1024x4224x16384 --shape 1024x1024x32768 --shape 256x18432x16384 --shape 256x51200x5120"
timeout 230 python3 bench/ab.py --config h100_128x128_c2_lw2 --rewrite novote $LW --iters 20 --repeat 5 > $OUT/ab_c2_lw2.txt 2>&1
timeout 90 python3 bench/ab.py --config h100_128x192_sk3 --config h100_64x128_sk2 --config h100_128x64_sk2 --rewrite novote --shape 64x2112x7168 --shape 16x4096x4096 --shape 128x10240x5120 --iters 20 --repeat 5 > $OUT/ab_sk.txt 2>&1
for s in "h100_128x128_c2_lw2 300 520 264" "h100_128x128_c2_lw2 1024 4224 1024" "h100_128x192_sk3 300 520 264" "h100_64x128_sk2 64 2112 1024" "dual_h100_128x128_lw2 256 2560 512"; do
  timeout 60 compute-sanitizer --tool memcheck --report-api-errors no python3 bench/sanitize_one.py $s >> $OUT/memcheck.txt 2>&1; echo "rc=$? [$s]" >> $OUT/memcheck.txt
done
PTXGEN_GPU_EXAMPLES=10 timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k "lw or sk or split or dual" > $OUT/gpu_tests.txt 2>&1
echo "rc=$?" >> $OUT/gpu_tests.txt
