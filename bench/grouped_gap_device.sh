#!/bin/bash
# Device call of docs/grouped.md "The G = 32 bf16 gap", diagnosis: timings of the variants on every problem of
# bench/grouped_gap.py, and ncu of one launch per side (run from the tree's root, $OUT set; ptxas and wheels set up)
set -o pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
cd bench
V=configs/grouped_contiguous_h100_128x256_tma
VARS=${V}_g4.yaml,${V}_g16.yaml,${V}_g32.yaml,${V}_l2p256.yaml,${V}_l2p128.yaml,${V}_l2p256_g16.yaml,${V}_hinta.yaml,configs/grouped_contiguous_h100_128x128_tma.yaml
t0=$(date +%s)
timeout 105 python3 grouped_gap.py time --configs $VARS --json $OUT/gap_time.json > $OUT/gap_time.txt 2>&1; echo "time rc=$? $(( $(date +%s) - t0 )) s"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
M1=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
t0=$(date +%s)
timeout 50 $NCU --profile-from-start off --csv --metrics $M1 python3 grouped_gap.py ncu --problems 32x1024x4096x7168,8x4096x4096x7168 --configs ${V}_l2p256.yaml,${V}_g16.yaml,${V}_l2p256_g16.yaml > $OUT/ncu1.csv 2> $OUT/ncu1.err; echo "ncu1 rc=$? $(( $(date +%s) - t0 )) s"
M2=gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed
t0=$(date +%s)
timeout 35 $NCU --profile-from-start off --csv --metrics $M2 python3 grouped_gap.py ncu --problems 32x1024x4096x7168 --configs ${V}_l2p256.yaml > $OUT/ncu2.csv 2> $OUT/ncu2.err; echo "ncu2 rc=$? $(( $(date +%s) - t0 )) s"
tail -3 $OUT/ncu1.err $OUT/ncu2.err
