#!/usr/bin/env bash
# One device call: GPU tests, compute-sanitizer on the sm_90a dual configs, the dual-GEMM bench.
# Usage (repo root, device, with the wheels of .whl carried): bash bench/device_session.sh [tests|sanitize|dual|fast]...
set -o pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
for part in "${@:-tests sanitize dual}"; do
  case $part in
    tests)
      PTXGEN_GPU_EXAMPLES=${EXAMPLES:-25} timeout ${TESTS_TIMEOUT:-330} python3 -m pytest -m gpu tests/ -q -p no:cacheprovider \
        2>&1 | tee "$OUT/gpu_tests.log" | tail -15 ;;
    sanitize)
      for c in ${SAN_CONFIGS:-dual_h100_128x128 dual_h100_128x128_c2}; do
        for tool in memcheck racecheck synccheck; do
          extra=""; [ $tool = memcheck ] && extra="--report-api-errors no"
          timeout 120 compute-sanitizer --tool $tool $extra python3 bench/sanitize_one.py $c 300 520 264 2>&1 \
            | tee -a "$OUT/sanitizer.log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rel err|Error" | head -4 \
            | sed "s/^/$c $tool: /"
        done
      done ;;
    dual)
      timeout ${DUAL_TIMEOUT:-240} python3 bench/dual_bench.py --json "$OUT/dual_bench.json" 2>&1 | tee "$OUT/dual_bench.log" ;;
    fast)
      bash bench/device_fastpath.sh ;;
  esac
done
