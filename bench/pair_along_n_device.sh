#!/bin/bash
# Device call of docs/performance.md "CTA pairs along N" (run from the tree's root, $OUT set; ptxas and wheels set
# up): GPU correctness of the pairs along N through the public call, the GPU tests of their configs, compute-sanitizer
# memcheck at two shapes, then timing (bench/survey.py: prepared launches alternating with torch call by call on
# L2-rotated inputs, median of 5 runs of 20 calls) of every shipped config on the target shapes, and of the new
# configs on the suite's tune half (their tile factors' fit) and report half.  MODE=fit (second call): the tune half
# again (the first call's tune.json was left on the device: at most 8 files come back) and every shipped config on
# the M <= 256 shapes where the pair along N ran near or ahead of torch.
set -o pipefail
if [ "${MODE:-}" = fit ]; then
  CFG="--config h100_128x80_c2n --config h100_128x192_c2n"
  t0=$(date +%s)
  timeout 100 python3 bench/survey.py --suite gemm --half tune $CFG --json $OUT/tune.json > $OUT/tune.txt 2>&1; echo "tune rc=$? $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  timeout 150 python3 bench/survey.py --shipped --shape 128x10240x5120 --shape 128x8192x28672 --shape 128x6144x4096 \
    --shape 128x3584x18944 --shape 128x24576x1536 --shape 256x4096x14336 --shape 128x2880x4096 --shape 256x8192x8192 \
    --shape 128x16384x53248 --json $OUT/small_m.json > $OUT/small_m.txt 2>&1; echo "small M rc=$? $(( $(date +%s) - t0 )) s"
  exit 0
fi
NEW=${NEW:-h100_128x80_c2n,h100_128x192_c2n}
CFG=$(echo $NEW | sed 's/^/--config /; s/,/ --config /g')
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/device.txt
t0=$(date +%s)
timeout ${T_CHECK:-50} python3 bench/pair_along_n_check.py ${NEW//,/ } --json $OUT/check.json > $OUT/check.txt 2>&1; echo "check rc=$? $(( $(date +%s) - t0 )) s"
tail -3 $OUT/check.txt
t0=$(date +%s)
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for cs in "h100_128x80_c2n 300 520 264" "h100_128x80_c2n 128 10240 512" "h100_128x192_c2n 300 520 264"; do
  timeout ${T_SAN:-30} $SAN --tool memcheck --report-api-errors no python3 bench/sanitize_one.py $cs 2>&1 | tail -2
done > $OUT/memcheck.txt; echo "memcheck rc=$? $(( $(date +%s) - t0 )) s"
cat $OUT/memcheck.txt
t0=$(date +%s)
timeout ${T_TARGET:-70} python3 bench/survey.py --shipped $CFG --shape 128x10240x5120 --shape 384x1536x14336 \
  --shape 512x5120x14336 --shape 1024x1024x4096 --shape 1536x2048x8192 --shape 512x2048x4096 --shape 384x6144x16384 \
  --shape 768x6144x4096 --json $OUT/target.json > $OUT/target.txt 2>&1; echo "target rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${T_TUNE:-100} python3 bench/survey.py --suite gemm --half tune $CFG --json $OUT/tune.json > $OUT/tune.txt 2>&1; echo "tune rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${T_TEST:-30} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_gemm.py -k "c2n and matches" > $OUT/gpu_tests.txt 2>&1; echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"
tail -3 $OUT/gpu_tests.txt
t0=$(date +%s)
timeout ${T_REPORT:-60} python3 bench/survey.py --suite gemm --half report $CFG --json $OUT/report.json > $OUT/report.txt 2>&1; echo "report rc=$? $(( $(date +%s) - t0 )) s"
