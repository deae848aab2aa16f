#!/bin/bash
# Device calls of docs/grouped.md "The FP8 per-tile cost" (run from the tree's root, $OUT set; ptxas and wheels set
# up).  MODE=tune (first call): the FP8 baseline's method (grouped_gap.py time --fp8: the loop interleaved with ours,
# paired ratios, CUDA-graph GPU time) on the tune problems with the per-tile variants, compute-sanitizer memcheck of
# one small ragged problem per variant, the GPU tests of the grouped paths.  MODE=report (second call): the shipped
# pair against its load side alone (grouped_fp8tile_probe.py: no stores, so ptxas drops the wgmmas and promotions)
# over K = 1024..7168 at G = 16, N = 4096, the tune comparison again with it, then the report problems
# (`grouped_bench.py bench --defaults --parts contiguous`).  Both log the SM clock and the power draw every 500 ms.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/device.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
C=configs/grouped_contiguous_fp8_h100_128x256_c2
VARS=${VARS:-${C}_la.yaml,${C}_e2.yaml,${C}_e2la.yaml}
cd bench
if [ "${MODE:-tune}" = tune ]; then
  t0=$(date +%s)
  timeout ${T_TIME:-170} python3 grouped_gap.py time --fp8 --problems tune --configs $VARS --json $OUT/tune.json > $OUT/tune.txt 2>&1; echo "time rc=$? $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  timeout ${T_SAN:-60} $SAN --tool memcheck --report-api-errors no python3 grouped_bench.py one --configs $VARS > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? $(( $(date +%s) - t0 )) s"
  tail -4 $OUT/memcheck.txt
  cd ..
  t0=$(date +%s)
  timeout ${T_TEST:-140} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k grouped > $OUT/gpu_tests.txt 2>&1; echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"
  tail -3 $OUT/gpu_tests.txt
else
  t0=$(date +%s)  # the shipped pair and its load side alone over K at G = 16, 4096 x K (grouped_fp8tile_probe.py)
  timeout ${T_SWEEP:-90} python3 grouped_fp8tile_probe.py time --fp8 --problems 16x2048x4096x1024,16x2048x4096x2048,16x2048x4096x4096,16x2048x4096x7168 --json $OUT/ksweep.json > $OUT/ksweep.txt 2>&1; echo "k sweep rc=$? $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  timeout ${T_TIME:-110} python3 grouped_fp8tile_probe.py time --fp8 --problems tune --configs $VARS --json $OUT/tune2.json > $OUT/tune2.txt 2>&1; echo "time rc=$? $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  timeout ${T_BENCH:-170} python3 grouped_bench.py bench --defaults --parts contiguous --json $OUT/report.json > $OUT/report.txt 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"
fi
kill $SMI
