#!/usr/bin/env bash
# On the GPU machine, from the repository root: the CUDA tests of the build in .device/
# (tools/device_bundle.sh), then cuda_bench alternating an older build (.device-old/: its
# libfoxhunt_dqn_cuda.so and cuda_bench) with this one at autotune off and fast, in rounds,
# so that both see the same card in the same state; then autotune full (the exhaustive plan)
# and the plans. Logs go to $OUT (summary.txt, tests.log, ab.log, plan.log).
#   OUT=/some/dir tools/device_plan_ab.sh [ROUNDS] [CONFIGS...]
# (tools/device_ab.sh runs one cuda_bench against two modules: modules of backend ops v1, before
# the plan, are refused by a v2 core, so here each build brings its own cuda_bench.)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fhd_ab_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/fhd-ab-cache # the autotune cache: empty at the start
NEW=$PWD/.device/build
OLD=$PWD/.device-old
T=$NEW/tests/cuda
BENCH=$NEW/bench/cuda/cuda_bench
rounds=${1:-2}
[ $# -gt 0 ] && shift
cfgs=${*:-C0 B1 B1-sn U1 B3 B2-fp32}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  git log --oneline -1 2>/dev/null
} >"$OUT/summary.txt" 2>&1
run() { # log name timeout command...
  local log=$1 name=$2 limit=$3
  shift 3
  local t0=$(date +%s%N)
  { echo "==== $name: $*"; timeout "$limit" "$@"; echo "==== $name rc=$?"; } >>"$OUT/$log" 2>&1
  echo "$name rc=$(tail -1 "$OUT/$log" | sed 's/.*rc=//') ($(( ($(date +%s%N) - t0) / 1000000 )) ms)" |
    tee -a "$OUT/summary.txt"
}
export FHD_CUDA_MODULE=$NEW/libfoxhunt_dqn_cuda.so
if [ -z "${FHD_AB_NO_TESTS:-}" ]; then
  for t in smoke sumtree graph parity long checkpoint threads metrics; do
    run tests.log "$t" 150 "$T/test_cuda_$t"
  done
  FHD_SMOKE_SHORT=1 FHD_SMOKE_NO_LARGE=1 run tests.log memcheck 120 compute-sanitizer \
    --tool memcheck --error-exitcode 9 --print-limit 20 "$T/test_cuda_smoke"
fi
for r in $(seq 1 "$rounds"); do
  FHD_CUDA_MODULE=$OLD/libfoxhunt_dqn_cuda.so run ab.log "old-r$r" 300 "$OLD/cuda_bench" $cfgs
  FHD_BENCH_AUTOTUNE=off run ab.log "new-off-r$r" 300 "$BENCH" $cfgs
  FHD_BENCH_AUTOTUNE=fast run ab.log "new-fast-r$r" 300 "$BENCH" $cfgs
done
FHD_BENCH_AUTOTUNE=full run ab.log "new-full" 300 "$BENCH" ${FHD_AB_FULL:-C0 B1 U1}
FHD_BENCH_PLAN=1 FHD_BENCH_QUICK=1 FHD_BENCH_AUTOTUNE=fast run plan.log plans 120 "$BENCH" $cfgs
cp "$XDG_CACHE_HOME/foxhunt-dqn/autotune-v1.txt" "$OUT/autotune-cache.txt" 2>/dev/null
echo "---- failures"
grep -h -E "^FAIL|ERROR SUMMARY: [1-9]|rc=[1-9]" "$OUT"/*.log | head -40
echo "---- ab (median_us min_us per config; old, new-off, new-fast alternating)"
awk '/^==== .*: /{split($2,a,":"); run=a[1]} /^(C0|B1|B1-sn|U1|B2|B3)/{printf "%-12s %-8s %8s %8s %s\n", run, $1, $2, $3, ($0 ~ /autotune/ ? substr($0, index($0, "autotune")) : "")}' "$OUT/ab.log" | cut -c1-170
echo "---- summary"
cat "$OUT/summary.txt"
