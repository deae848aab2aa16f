#!/bin/bash
# Device call of docs/performance.md "A 2x2 cluster multicasting A and B" (run from the tree's root, $OUT set; ptxas
# and wheels set up): the GPU tests of the three 2x2-cluster probes (Hypothesis shapes against torch on NaN-poisoned
# outputs, the grid against the resident clusters), compute-sanitizer memcheck of each, then timing: bench/survey.py
# (prepared launches alternating with torch call by call on L2-rotated inputs, median of 5 runs of 20 calls) of the
# GEMM probes, their pairs and h100_256x128 on the shapes of docs/results/square_cluster_predictions.json (the gemm
# suite's tune half and four off-suite L2-bound grids), and bench/dual_lastwave.py of the dual probe against its pair
# on SwiGLU tune shapes.  The report half is timed only after the tune shapes decide.
set -o pipefail
P=bench/configs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/device.txt
t0=$(date +%s)
PTXGEN_GPU_EXAMPLES=${EXAMPLES:-30} timeout ${T_TEST:-200} python3 -m pytest -q -s -p no:cacheprovider -m gpu \
  tests/gpu/test_gpu_gemm.py tests/gpu/test_gpu_dual.py -k c4 > $OUT/gpu_tests.txt 2>&1; echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"
grep -E "resident|passed|failed" $OUT/gpu_tests.txt
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for c in h100_128x128_c4 h100_128x256_c4 dual_h100_128x128_c4; do
  timeout ${T_SAN:-60} $SAN --tool memcheck --report-api-errors no python3 bench/sanitize_one.py $P/$c.yaml 300 520 264 2>&1 | tail -2
done > $OUT/memcheck.txt; cat $OUT/memcheck.txt
S="--shape 1024x1024x4096 --shape 512x2048x4096 --shape 1536x2048x8192 --shape 768x6144x4096"
S="$S --shape 5000x3000x2000 --shape 3072x5120x7040 --shape 2500x6000x4072 --shape 777x2176x5000 --shape 8191x7000x1234"
S="$S --shape 1024x5120x2880 --shape 4096x5760x2880 --shape 256x8192x8192 --shape 4096x4608x3584 --shape 8192x4096x4096"
S="$S --shape 8192x4096x14336 --shape 8192x37888x3584"
C="--config h100_128x128_c2 --config $P/h100_128x128_c4.yaml --config h100_128x256 --config $P/h100_128x256_c4.yaml"
t0=$(date +%s)
timeout ${T_SURVEY:-330} python3 bench/survey.py $S $C --config h100_256x128 --json $OUT/square_tune.json \
  > $OUT/square_tune.txt 2>&1; echo "survey rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${T_DUAL:-150} python3 bench/dual_lastwave.py --half tune --shape 2048x18944x3584 --shape 4096x25600x5120 \
  --shape 2048x18432x7168 --shape 4096x2048x7168 --shape 8192x2048x7168 --config dual_h100_128x128_c2 \
  --config dual_h100_128x128_c4 --runs 5 --iters 20 --json $OUT/square_dual_tune.json > $OUT/square_dual_tune.txt 2>&1
echo "dual rc=$? $(( $(date +%s) - t0 )) s"
