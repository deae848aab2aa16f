#!/usr/bin/env bash
# The grouped TMA-store variants on the GPU (docs/grouped.md, "TMA stores of whole m-blocks"): GPU tests (NaN-poisoned
# D, random groups with empty groups and groups of one row), compute-sanitizer memcheck of one small problem per
# variant, and the contiguous bench of the variants next to the shipped defaults (masked: --quick).  Run from the
# repository root with PYTHONPATH set and a whole-program ptxas where the runtime finds it; about 150 s on an H100.
# Results (7 files) under $OUT.
set -u
OUT=${OUT:-/tmp/grouped_tma}
mkdir -p "$OUT"
V=bench/configs
CONTIGUOUS=grouped_contiguous_h100_128x256_tma,$V/grouped_contiguous_h100_128x128_tma.yaml
CONTIGUOUS=$CONTIGUOUS,grouped_contiguous_fp8_h100_128x256_tma,$V/grouped_contiguous_fp8_h100_128x128_tma.yaml
MASKED=$V/grouped_masked_h100_128x256_tma.yaml,$V/grouped_masked_fp8_h100_128x128_tma.yaml
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
PTXGEN_GPU_EXAMPLES=10 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_grouped.py -k _tma \
    > "$OUT/gpu_tests.txt" 2>&1
tail -5 "$OUT/gpu_tests.txt"; echo "tests done at $((SECONDS - start)) s"
compute-sanitizer --tool memcheck --report-api-errors no python3 bench/grouped_bench.py one \
    --configs "$CONTIGUOUS,$MASKED" > "$OUT/memcheck.txt" 2>&1
tail -12 "$OUT/memcheck.txt"; echo "memcheck done at $((SECONDS - start)) s"
python3 bench/grouped_bench.py bench --defaults --parts contiguous --configs "$CONTIGUOUS" \
    --json "$OUT/grouped_tma_contiguous.json" > "$OUT/bench_contiguous.txt" 2>&1
echo "contiguous bench done at $((SECONDS - start)) s"
python3 bench/grouped_bench.py bench --defaults --quick --parts masked --configs "$MASKED" \
    --json "$OUT/grouped_tma_masked.json" > "$OUT/bench_masked.txt" 2>&1
echo "masked bench done at $((SECONDS - start)) s"
python3 - "$OUT" <<'PY'
import json, sys
for part in ("contiguous", "masked"):
    try:
        data = json.load(open(f"{sys.argv[1]}/grouped_tma_{part}.json"))
    except OSError as exc:
        print(part, "no results:", exc)
        continue
    print(part, data["info"].get("device"), "copy GB/s", data["info"].get("copy_GBps"))
    for row in data["rows"]:
        key = "tflops" if part == "contiguous" else "fraction_of_copy_bw"
        cells = {k: v[key] for k, v in row.items() if isinstance(v, dict) and key in v and "check_tables" not in k}
        shape = {k: row[k] for k in ("dtype", "G", "M_max", "N", "K") if k in row}
        print(" ", shape, cells)
PY
