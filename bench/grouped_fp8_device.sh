#!/bin/bash
# Device calls of docs/grouped.md "What bounds the FP8 pair" (run from the tree's root, $OUT set; ptxas and wheels
# set up).  MODE=tune (first call): the FP8 baseline's method on the tune problems (the loop interleaved with ours,
# paired ratios, CUDA-graph GPU time, host time, CUPTI kernel times) with config variants, and ncu of one launch
# each: the pair, the single-CTA tile, one of the loop's kernels, the dense FP8 GEMM.  MODE=report (final call):
# `grouped_bench.py bench --defaults --parts contiguous` and the same ncu on two report problems.  Both log the SM
# clock and the power draw every 500 ms.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/device.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
cd bench
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats"
if [ "${MODE:-tune}" = tune ]; then
  C=configs/grouped_contiguous_fp8_h100_128x256_c2
  VARS=grouped_contiguous_fp8_h100_128x256_tma,${C}_g4.yaml,${C}_hintb.yaml,${C}_s3e4.yaml,configs/grouped_contiguous_fp8_h100_128x128_c2.yaml,configs/grouped_contiguous_fp8_h100_128x128_c2_u2.yaml
  t0=$(date +%s)
  timeout ${T_TIME:-120} python3 grouped_gap.py time --fp8 --problems tune --configs $VARS --json $OUT/tune.json > $OUT/tune.txt 2>&1; echo "time rc=$? $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  timeout 30 python3 -c "
import sys; sys.argv = ['grouped_bench.py', 'bench', '--defaults', '--parts', 'contiguous']
import grouped_bench as g
g.PREFILL = [(4, 256, 512, 512)]
g.PARTS = ['contiguous']
g.DEFAULTS_ONLY = True
g.bench(None, False)" > $OUT/bench_smoke.txt 2>&1; echo "bench smoke rc=$? $(( $(date +%s) - t0 )) s"
  kill $SMI
  P=16x2048x4096x7168
  EXTRA="--configs grouped_contiguous_fp8_h100_128x256_tma"
else
  t0=$(date +%s)
  timeout ${T_TIME:-150} python3 grouped_bench.py bench --defaults --parts contiguous --json $OUT/report.json > $OUT/report.txt 2>&1; echo "bench rc=$? $(( $(date +%s) - t0 )) s"
  kill $SMI
  P=8x4096x7168x2048,32x1024x7168x2048
  EXTRA=""
fi
t0=$(date +%s)
timeout ${T_NCU:-110} $NCU --profile-from-start off $S --metrics $M --page raw --csv python3 grouped_gap.py ncu --fp8 --problems $P $EXTRA --dense fp8_h100_128x256_c2 > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$? $(( $(date +%s) - t0 )) s"
tail -5 $OUT/ncu.err
