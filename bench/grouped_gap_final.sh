#!/bin/bash
# Second device call of docs/grouped.md "The G = 32 bf16 gap" (run from the checkout's root with this tree in
# .lab/groupedbf16 and main's in .lab/groupedbf16_base; $OUT set; ptxas and wheels set up): bench --defaults of the
# A call returns at most 8 files from $OUT: device.txt, the two bench JSONs, gpu_tests.txt (memcheck appended),
# ncu_after.csv, gap_tune_after.json and gap_tune.txt (the first run of this script wrote 11 and lost the ncu CSV).
# contiguous parts before and after, the tune problems, ncu of the G = 32 problem, GPU tests, memcheck.
set -o pipefail
A=$PWD/.lab/groupedbf16 B=$PWD/.lab/groupedbf16_base
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
t0=$(date +%s)
(cd $B && PYTHONPATH=$B:/tmp/site PTXGEN_CACHE_DIR=/tmp/cache_base timeout 50 python3 bench/grouped_bench.py bench --defaults --parts contiguous --json $OUT/grouped_h100_runs_before.json > /tmp/before.txt 2>&1); echo "before rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
(cd $A && PYTHONPATH=$A:/tmp/site PTXGEN_CACHE_DIR=/tmp/cache_after timeout 55 python3 bench/grouped_bench.py bench --defaults --parts contiguous --configs grouped_contiguous_h100_128x256_tma --json $OUT/grouped_h100_runs_after.json > /tmp/after.txt 2>&1); echo "after rc=$? $(( $(date +%s) - t0 )) s"
cd $A && export PYTHONPATH=$A:/tmp/site PTXGEN_CACHE_DIR=/tmp/cache_after
t0=$(date +%s)
PTXGEN_GPU_EXAMPLES=4 timeout 45 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k grouped > $OUT/gpu_tests.txt 2>&1; echo "tests rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_tests.txt
t0=$(date +%s)
timeout 30 compute-sanitizer --tool memcheck --report-api-errors no python3 bench/grouped_bench.py one --configs grouped_contiguous_h100_128x256_runs > /tmp/memcheck.txt 2>&1; echo "memcheck rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/memcheck.txt | tee -a $OUT/gpu_tests.txt
cd bench
t0=$(date +%s)
M1=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
timeout 20 /usr/local/cuda/bin/ncu --profile-from-start off --csv --metrics $M1 python3 grouped_gap.py ncu --problems 32x1024x4096x7168 --configs grouped_contiguous_h100_128x256_tma > $OUT/ncu_after.csv 2> /tmp/ncu_after.err; echo "ncu rc=$? $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout 30 python3 grouped_gap.py time --problems tune --configs grouped_contiguous_h100_128x256_tma --json $OUT/gap_tune_after.json > $OUT/gap_tune.txt 2>&1; echo "tune rc=$? $(( $(date +%s) - t0 )) s"
