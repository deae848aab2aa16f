#!/usr/bin/env bash
# One device call: GPU tests (Hypothesis, 100 examples per sm_90a config) and the bench table.
# Usage (from the repo root, on the device): bash bench/device_run.sh
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
PTXGEN_GPU_EXAMPLES=${EXAMPLES:-100} timeout 330 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -4
S="--shape 4096x4096x4096 --shape 6144x6144x6144 --shape 8192x8192x8192 --shape 10240x10240x10240 --shape 12288x12288x12288"
S="$S --shape 4096x2112x7168 --shape 4096x7168x16384 --shape 4096x24576x1536 --shape 4096x7168x2048 --shape 4096x576x7168 --shape 4096x4096x7168"
C="-c h100_256x128 -c h100_128x256 -c h100_128x128 ${BENCH_CONFIGS:-}"
timeout 230 python3 -m ptxgen.cli bench $C $S --warmup 5 --iters 30 --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
