#!/usr/bin/env bash
# One device call for the runtime work of issues 12/13: fast-path GPU tests, first call (cold/warm cache),
# the 11-shape bench through the public API (JSON + PNG) and the host-overhead benchmark.
# Usage (repo root, on the device): bash bench/device_fastpath.sh     (results under $OUT)
set -o pipefail
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import importlib.util as u; print({m: bool(u.find_spec(m)) for m in ('platformdirs','filelock','tqdm','matplotlib')})"
timeout 240 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/test_gpu_fastpath.py tests/test_gpu_runtime.py \
  2>&1 | tee "$OUT/gpu_fastpath.log" | grep -E "passed|failed|error|host overhead|variant|ptxgen\.|torch\.|prepared|config=None|image from" | tail -30
timeout 150 python3 bench/first_call.py --json "$OUT/first_call.json" 2>&1 | tee "$OUT/first_call.txt"
timeout 300 python3 -m ptxgen.cli bench --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" | tail -30
