#!/usr/bin/env bash
# One device call of the lead's perf round (issues 10, 12): runtime GPU tests, first call (cold/warm),
# the 11-shape GEMM bench (auto) and the 8-shape dual bench through the public API, plus optional variants.
# Usage (repo root, device, .whl carried): bash bench/device_round.sh [tests] [first] [gemm] [dual] [dualvar]
set -o pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
for part in "$@"; do
  case $part in
    tests) timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu ${GPU_TESTS:-tests/} 2>&1 | tee "$OUT/gpu_tests.log" | tail -6 ;;
    first) timeout 200 python3 bench/first_call.py --warm-runs 3 --json "$OUT/first_call.json" 2>&1 | tee "$OUT/first_call.txt" ;;
    gemm) timeout 400 python3 -m ptxgen.cli bench --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" | tail -16 ;;
    dual) timeout 300 python3 bench/dual_bench.py --json "$OUT/dual_bench.json" 2>&1 | tee "$OUT/dual_bench.log" ;;
    dualvar) timeout 300 python3 bench/dual_bench.py --shapes 4,5,6,7 ${DUAL_VARIANTS} 2>&1 | tee "$OUT/dual_variants.log" ;;
  esac
done
