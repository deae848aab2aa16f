#!/usr/bin/env bash
# GPU checks and benchmarks in one call, on a machine with an sm_90a GPU (repository root as the working directory).
#
# Usage: bash scripts/gpu.sh PART [PART ...]        (results under $OUT, default /tmp/out)
#
# Parts, run in the order given:
#   tests     every GPU test: pytest -m gpu ${GPU_TESTS:-tests/} (PTXGEN_GPU_EXAMPLES=${EXAMPLES:-25})
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck of each config in $SAN_CONFIGS at 300x520x264
#   tune      ptxgen tune on the default shapes (the table the chooser reads first; copied to $OUT)
#   gemm      ptxgen bench on the 11 default shapes, config chosen per shape (JSON, PNG, host overhead)
#   dual      bench/dual_bench.py on the 8 SwiGLU shapes, config chosen per shape
#   dualvar   the 4 small-M SwiGLU shapes for each config in $DUAL_VARIANTS ("--config X" flags)
#   first     bench/first_call.py: the first ptxgen.gemm in a fresh process, cold and warm cache
#   cublas    bench/cublas_kernels.py: the cuBLAS kernel torch.matmul runs per shape
#   ncu       ncu SpeedOfLight and WarpStateStats of ours (auto or $NCU_CONFIG) and cuBLAS per shape in $NCU_SHAPES
#   configs   ptxgen bench of the configs in $BENCH_CONFIGS ("--config X" flags) on the 11 shapes
#   ab        bench/ab.py once per line of $AB_SPECS (a line: "--config A --config B --shape MxNxK ...")
#   run       ptxgen run of each "config:MxNxK" in $RUN_CASES (checked against an fp32 reference)
#
# Wheels in .whl/ (if any) are installed first into /tmp/site (no index, no dependencies), for machines without
# network access. Example: OUT=/tmp/r bash scripts/gpu.sh tests sanitize gemm
set -o pipefail
cd "$(dirname "$0")/.."
PARTS="tests sanitize tune gemm dual dualvar first cublas ncu configs ab run"
if [ $# -eq 0 ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
for part in "$@"; do
  case " $PARTS " in *" $part "*) ;; *) echo "gpu.sh: unknown part '$part' (one of: $PARTS)" >&2; exit 2 ;; esac
done
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
SAN_CONFIGS=${SAN_CONFIGS:-h100_256x128 h100_128x256 h100_128x144 h100_192x176 dual_h100_128x128_c2 h100_128x192_sk3 h100_64x128_sk2}
for part in "$@"; do
  echo "==== $part"
  case $part in
    tests) PTXGEN_GPU_EXAMPLES=${EXAMPLES:-25} timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider -m gpu \
             ${GPU_TESTS:-tests/} 2>&1 | tee "$OUT/gpu_tests.log" | tail -8 ;;
    sanitize)
      for c in $SAN_CONFIGS; do
        for tool in memcheck racecheck synccheck; do
          extra=""; [ $tool = memcheck ] && extra="--report-api-errors no"
          timeout 120 compute-sanitizer --tool $tool $extra python3 bench/sanitize_one.py $c 300 520 264 2>&1 \
            | tee -a "$OUT/sanitizer.log" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rel err" | tr '\n' ' ' | sed "s|^|$c $tool: |"
          echo
        done
      done ;;
    tune) timeout 300 python3 -m ptxgen tune 2>&1 | tee "$OUT/tune.log" | tail -14
          cp "$(python3 -c 'from ptxgen.runtime.choose import user_table_path; print(user_table_path("sm_90a"))')" "$OUT/tuned_sm90.json" ;;
    gemm) timeout 400 python3 -m ptxgen bench --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" | tail -22 ;;
    dual) timeout 300 python3 bench/dual_bench.py --json "$OUT/dual_bench.json" 2>&1 | tee "$OUT/dual_bench.log" ;;
    dualvar) timeout 300 python3 bench/dual_bench.py --shapes 4,5,6,7 ${DUAL_VARIANTS} 2>&1 | tee "$OUT/dual_variants.log" ;;
    first) timeout 200 python3 bench/first_call.py --json "$OUT/first_call.json" 2>&1 | tee "$OUT/first_call.txt" ;;
    cublas) timeout 120 python3 bench/cublas_kernels.py --json "$OUT/cublas_kernels.json" 2>&1 | tee "$OUT/cublas_kernels.txt" ;;
    ncu) for s in ${NCU_SHAPES:-4096x576x7168}; do
           timeout 180 ncu --kernel-name regex:'ptxgen|nvjet' --section SpeedOfLight --section WarpStateStats \
             --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,sm__cycles_elapsed.avg.per_second \
             python3 bench/ncu_compare.py $s ${NCU_CONFIG} > "$OUT/ncu_$s.txt" 2>&1
           echo "== $s"; grep -E "ptxgen_gemm|nvjet|Duration|Throughput|gmma|lts__t_bytes|per_second|Stall|Warp Cycles Per Issued" "$OUT/ncu_$s.txt" | grep -v "^ *-" | head -60
         done ;;
    configs) timeout 500 python3 -m ptxgen bench ${BENCH_CONFIGS} --json "$OUT/bench_configs.json" 2>&1 | tee "$OUT/bench_configs.log" | tail -40 ;;
    ab) while IFS= read -r spec; do
          [ -n "$spec" ] || continue
          echo "== ab $spec"; timeout 300 python3 bench/ab.py $spec 2>&1 | tee -a "$OUT/ab.log"
        done <<< "$AB_SPECS" ;;
    run) for case in $RUN_CASES; do
           timeout 120 python3 -m ptxgen run --config "${case%%:*}" --shape "${case##*:}" 2>&1 | tee -a "$OUT/run.log" | tail -2
         done ;;
  esac
done
