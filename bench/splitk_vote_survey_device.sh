#!/bin/bash
# One device call (docs/performance.md, "The fixup's verdict made warp-uniform"): every shipped candidate re-timed
# (bench/survey.py) on what the last-wave main-loop fit reads (the K-sweep, the fixup probes, the last-wave tune
# shapes) and on the last-wave report shapes, with the split-K verdict through vote.sync.any; JSON under $OUT.
cd "$(dirname "$0")/.."
S="python3 bench/survey.py --repeat 5 --iters 20"
sh() { for s in "$@"; do printf -- "--shape %s " "$s"; done; }
timeout 100 $S $(sh 1024x5120x4096 1024x5120x8192 1024x5120x16384 1024x5120x25600 1024x4224x16384) \
  --config h100_128x256_lw4 --config h100_128x128_c2_lw2 --config h100_128x256 --config h100_128x128_c2 \
  --json $OUT/vote_ksweep_h100.json > $OUT/log.txt 2>&1
timeout 60 $S --shipped $(sh 8192x7936x1024 4096x23296x2048) --json $OUT/vote_fixup_offsuite_h100.json >> $OUT/log.txt 2>&1
timeout 80 $S --shipped $(sh 256x4096x14336 256x8192x8192 64x16384x16384 777x2176x5000 4096x4608x3584) --json $OUT/vote_lastwave_tune_a.json >> $OUT/log.txt 2>&1
timeout 80 $S --shipped $(sh 256x59136x8192 1024x5120x25600 512x36864x7168 128x16384x53248 1024x16384x16384) --json $OUT/vote_lastwave_tune_b.json >> $OUT/log.txt 2>&1
timeout 100 $S --shipped $(sh 1024x57344x8192 2048x36864x7168 8192x32768x512 8192x10240x8192 4096x8192x28672) --json $OUT/vote_lastwave_tune_c.json >> $OUT/log.txt 2>&1
timeout 80 $S --shipped $(sh 256x18432x16384 256x51200x5120 1024x1024x32768 1024x10240x8192) --json $OUT/vote_lastwave_report_a.json >> $OUT/log.txt 2>&1
timeout 70 $S --shipped $(sh 4096x28672x4096 4096x3584x18944 2048x51200x5120 4100x4100x4100) --json $OUT/vote_lastwave_report_b.json >> $OUT/log.txt 2>&1
