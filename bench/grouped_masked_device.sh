#!/bin/bash
# The device call of docs/grouped.md "Masked FP8 decode: the 128-row tile's idle half and the per-call scale copies"
# (run from the tree's root, $OUT set; ptxas and wheels set up): the new paths checked on the GPU (NaN-poisoned D)
# and under compute-sanitizer memcheck, the tune timing, then the report check
# (`grouped_bench.py bench --defaults --parts masked` with the 64-row variants beside the defaults).
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/device.txt
V=grouped_masked_fp8_h100_64x128,bench/configs/grouped_masked_fp8_h100_64x256.yaml
t0=$(date +%s)
timeout ${T_CHECK:-40} python3 bench/grouped_masked_tune.py check --json $OUT/check.json > $OUT/check.txt 2>&1; echo "check rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout ${T_SAN:-35} $SAN --tool memcheck --report-api-errors no python3 bench/grouped_bench.py one --configs $V > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${T_TIME:-75} python3 bench/grouped_masked_tune.py time --json $OUT/tune.json > $OUT/tune.txt 2>&1; echo "tune rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout ${T_REPORT:-105} python3 bench/grouped_bench.py bench --defaults --parts masked --configs $V --json $OUT/report.json > $OUT/report.txt 2>&1; echo "report rc=$? $(( $(date +%s) - t0 )) s"
tail -3 $OUT/check.txt $OUT/memcheck.txt
