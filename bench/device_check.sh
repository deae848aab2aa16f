#!/usr/bin/env bash
# One device call: compute-sanitizer (memcheck, racecheck, synccheck) on one launch of each sm_90a config,
# then the multicast configs re-benchmarked. Usage (repo root, on the device): bash bench/device_check.sh
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for c in h100_128x128 h100_128x256 h100_256x128; do
  for tool in memcheck racecheck synccheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 bench/one_launch.py $c 300 520 264 > "$OUT/san_${c}_${tool}.log" 2>&1
    echo "$c $tool rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/san_${c}_${tool}.log" | tr '\n' ' ')"
  done
done | tee "$OUT/sanitizer.txt"
S="--shape 4096x4096x4096 --shape 8192x8192x8192 --shape 12288x12288x12288 --shape 4096x7168x16384"
timeout 150 python3 -m ptxgen.cli bench -c h100_256x128 -c h100_128x256 -c bench/configs/h100_128x256_nomc.yaml -c bench/configs/h100_256x128_c2.yaml $S --warmup 5 --iters 30 --json "$OUT/bench_mc.json" 2>&1 | tee "$OUT/bench_mc.log"
