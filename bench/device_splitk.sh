#!/usr/bin/env bash
# One device call for split-K (issues 10 and 12), under 8 minutes: the split-K GPU tests, a short regression
# run of the other GPU tests, then the public-API benches of the issue shapes (chooser's pick, and the split-K
# configs side by side with their split_k=1 bases).  Results under $OUT (at most 8 files):
#   device_splitk.log   everything printed (GPU, tests, bench tables)
#   bench_auto.json     ptxgen bench, config chosen per shape: squares 4096-12288 and M=4096 N x K of issue 12
#   bench_splitk.json   4096x576x7168 and 4096x2112x7168: h100_256x128, h100_128x192, its split_k 3 and 4
#   dual_auto.json      bench/dual_bench.py, the 8 shapes of issue 10, config chosen per shape
#   dual_splitk.json    the 4 small-M dual shapes: dual_h100_128x128 with split_k 1, 2 and 4
# Usage (repo root, on the device; wheels of .whl installed when carried): bash bench/device_splitk.sh
# SANITIZE=1 adds compute-sanitizer memcheck/racecheck/synccheck of one split-K GEMM and one split-K dual config
# at the end (about 2 more minutes).
set -o pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/device_splitk.log"
step() { echo "==== $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv 2>&1 | tee -a "$LOG"

step "split-K GPU tests (tests/test_gpu_splitk.py, ${EXAMPLES:-12} examples per case)"
PTXGEN_GPU_EXAMPLES=${EXAMPLES:-12} timeout 170 python3 -m pytest -m gpu tests/test_gpu_splitk.py -q -p no:cacheprovider \
  2>&1 | tee -a "$LOG" | tail -12

step "regression: other GPU tests, 6 examples per config, without the large shapes"
PTXGEN_GPU_EXAMPLES=6 timeout 80 python3 -m pytest -m gpu tests/test_gpu_gemm.py tests/test_gpu_dual.py \
  tests/test_gpu_fastpath.py -q -p no:cacheprovider -k "not 8192 and not large" 2>&1 | tee -a "$LOG" | tail -6

step "GEMM bench, config chosen per shape (issue 12 shapes; host overhead at the end)"
timeout 90 python3 -m ptxgen.cli bench --json "$OUT/bench_auto.json" --iters 30 --calls 1000 2>&1 | tee -a "$LOG" | tail -20

step "GEMM bench: split-K against its bases on the two under-filled shapes"
timeout 50 python3 -m ptxgen.cli bench --config h100_256x128 --config h100_128x192 \
  --config bench/configs/h100_128x192_sk3.yaml --config bench/configs/h100_128x192_sk4.yaml \
  --shape 4096x576x7168 --shape 4096x2112x7168 --iters 30 --no-host-overhead --json "$OUT/bench_splitk.json" \
  2>&1 | tee -a "$LOG" | tail -12

step "dual GEMM bench, config chosen per shape (issue 10 shapes)"
timeout 50 python3 bench/dual_bench.py --iters 20 --json "$OUT/dual_auto.json" 2>&1 | tee -a "$LOG" | tail -12

step "dual GEMM: split_k 1, 2, 4 on the small-M shapes"
timeout 40 python3 bench/dual_bench.py --iters 20 --shapes 4,5,6,7 --config dual_h100_128x128 \
  --config bench/configs/dual_h100_128x128_sk2.yaml --config bench/configs/dual_h100_128x128_sk4.yaml \
  --json "$OUT/dual_splitk.json" 2>&1 | tee -a "$LOG" | tail -16

if [ "${SANITIZE:-0}" = 1 ]; then
  step "compute-sanitizer on split-K configs (300x520x264: 5 k-blocks over the splits)"
  for c in bench/configs/h100_128x192_sk3.yaml bench/configs/dual_h100_128x128_sk2.yaml; do
    for tool in memcheck racecheck synccheck; do
      extra=""; [ $tool = memcheck ] && extra="--report-api-errors no"
      timeout 60 compute-sanitizer --tool $tool $extra python3 bench/sanitize_one.py $c 300 520 264 2>&1 \
        | tee -a "$OUT/sanitizer.log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rel err|Error" | head -4 \
        | sed "s|^|$(basename $c .yaml) $tool: |" | tee -a "$LOG"
    done
  done
fi
