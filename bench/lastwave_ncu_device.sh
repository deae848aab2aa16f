#!/bin/bash
# Device call of docs/performance.md "The pair's last-wave k-loop", diagnosis: timings of the two pairs at 1024x5120
# and of the 128x128 pair on a tail-free 1024x4224 (every tile in whole waves for both), then ncu of one launch per
# config and shape (run from the tree's root, $OUT set; ptxas and wheels set up)
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
cd bench
C="--config h100_128x128_c2 --config h100_128x128_c2_lw2 --config h100_128x256 --config h100_128x256_lw4"
S="--shape 1024x5120x16384 --shape 1024x4224x16384 --shape 1024x5120x8192"
t0=$(date +%s)
timeout 80 python3 lastwave_ncu.py time $S $C --json $OUT/time.json > $OUT/time.txt 2>&1; echo "time rc=$? $(( $(date +%s) - t0 )) s"
cat $OUT/time.txt | tail -5
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,gpc__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max
M=$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.sum,sm__pipe_tensor_op_gmma_cycles_active.min,sm__pipe_tensor_op_gmma_cycles_active.max
M=$M,smsp__inst_executed.sum,smsp__inst_issued.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
t0=$(date +%s)
timeout 110 $NCU --profile-from-start off --kernel-name regex:ptxgen --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section InstructionStats --section LaunchStats --section Occupancy --section SourceCounters \
  --section MemoryWorkloadAnalysis --metrics $M -o $OUT/lwncu \
  python3 lastwave_ncu.py ncu --shape 1024x5120x16384 --shape 1024x4224x16384 $C > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(( $(date +%s) - t0 )) s"
tail -4 $OUT/ncu.log
timeout 20 $NCU -i $OUT/lwncu.ncu-rep --csv --page raw > $OUT/raw.csv 2> $OUT/raw.err; echo "raw rc=$? $(wc -c < $OUT/raw.csv)"
timeout 30 $NCU -i $OUT/lwncu.ncu-rep --csv --page source --print-source sass > /tmp/lwncu_source.csv 2> /tmp/lwncu_source.err; echo "source rc=$? $(wc -c < /tmp/lwncu_source.csv)"
head -c 600 /tmp/lwncu_source.err; gzip -c /tmp/lwncu_source.csv > $OUT/source.csv.gz
ls -la $OUT
