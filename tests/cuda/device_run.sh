#!/usr/bin/env bash
# Run the CUDA backend's tests, compute-sanitizer and the timing driver on a GPU machine.
#
# Build here first:  tools/device_bundle.sh        (sm_90 build + runtime libraries in .device/)
# then, on the GPU machine, from the repository root:
#   OUT=/some/dir tests/cuda/device_run.sh [tests] [sanitize] [bench] [bench-args...]
# With no argument everything runs. Logs go to $OUT (summary.txt, tests.log, sanitizer.log,
# bench.log, graph.dot); the summary and every FAIL line are printed at the end.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fhd_device_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
BLD=$PWD/.device/build
T=$BLD/tests/cuda
BENCH=$BLD/bench/cuda/cuda_bench
export FHD_CUDA_MODULE=$BLD/libfoxhunt_dqn_cuda.so
# NCCL (for cuda_nccl): the image's copy, e.g. inside the torch or nvidia-nccl-cu13 wheels
if [ -z "${FHD_NCCL_LIBRARY:-}" ]; then
  nccl=$(find / -xdev -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$nccl" ] && export FHD_NCCL_LIBRARY=$nccl
fi
# MPI (cuda_nccl runs as an MPI singleton, with no daemon); the module is beside the library
export FHD_MPI_MODULE=${FHD_MPI_MODULE:-$BLD/libfoxhunt_dqn_mpi.so} OMPI_MCA_ess_singleton_isolated=1 \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
what=${1:-all}
[ $# -gt 0 ] && shift

summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
run() { # name timeout command...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s%N)
  { echo "==== $name: $*"; timeout "$limit" "$@"; echo "==== $name rc=$?"; } >>"$OUT/$LOG" 2>&1
  local rc=$(tail -1 "$OUT/$LOG" | sed 's/.*rc=//')
  summary "$name rc=$rc ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
}

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  ldd "$FHD_CUDA_MODULE" | grep -E "cuda|cublas"
  echo "libnccl.so.2: ${FHD_NCCL_LIBRARY:-not found}"
} >"$OUT/summary.txt" 2>&1

if [ "$what" = all ] || [ "$what" = tests ]; then
  LOG=tests.log
  # every CUDA test ctest knows (tools/device_bundle.sh wrote the list), with a scratch
  # directory in place of the build's; FHD_TESTS=a,b picks some by name
  scratch=$(mktemp -d)
  while read -r name cmd args; do
    case ",${FHD_TESTS:-$name}," in *",$name,"*) ;; *) continue ;; esac
    cmd=${cmd//@BLD@/$BLD}
    args=${args//@BLD@\/tests\/cuda/$scratch}
    FHD_GRAPH_DOT=$OUT/graph.dot run "$name" "${FHD_TEST_TIMEOUT:-300}" $cmd $args
  done <"$PWD/.device/cuda_tests.txt"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  LOG=bench.log
  run bench 240 "$BENCH" "$@"
fi
if [ "$what" = all ] || [ "$what" = sanitize ]; then
  LOG=sanitizer.log
  for tool in ${FHD_SANITIZER_TOOLS:-memcheck racecheck}; do
    # racecheck without the B3-sized learners (the smoke test's comment says why); it still
    # takes about two minutes
    large= limit=120
    [ "$tool" = racecheck ] && large=1 limit=300
    FHD_SMOKE_SHORT=1 FHD_SMOKE_NO_LARGE=$large run "sanitizer-$tool" $limit compute-sanitizer \
      --tool "$tool" --error-exitcode 9 --print-limit 20 "$T/test_cuda_smoke"
  done
fi

if [ "$what" = profile ]; then
  # per-kernel durations (Nsight Compute; clocks and caches left alone, so that the tree and
  # the weights stay in L2 as they do in a real run) of two updates after warm-up
  LOG=profile.log
  for cfg in ${FHD_PROFILE_CONFIGS:-B1-sn B3 B2-tf32}; do
    FHD_BENCH_QUICK=1 run "ncu-$cfg" 120 ncu --clock-control none --cache-control none --csv \
      --metrics gpu__time_duration.sum --launch-skip 600 --launch-count 44 "$BENCH" "$cfg"
    echo "## $cfg (kernel, unit, duration)" >>"$OUT/profile_summary.txt"
    awk -v c="ncu-$cfg" '$0 ~ "^==== "c":" {on=1; next} /^==== / {on=0} on' "$OUT/profile.log" |
      grep -E '^"[0-9]' | awk -F'","' '{n=$5; sub(/\(.*/, "", n); print n, $(NF-1), $NF}' |
      sed 's/"//g' >>"$OUT/profile_summary.txt"
  done
  # the real timeline (kernel start/end inside the graph), when Nsight Systems is there
  if command -v nsys >/dev/null 2>&1; then
    LOG=nsys.log
    for cfg in ${FHD_TIMELINE_CONFIGS:-B1}; do
      FHD_BENCH_QUICK=1 run "nsys-$cfg" 120 nsys profile --cuda-graph-trace=node -o "/tmp/tl-$cfg" \
        --force-overwrite true "$BENCH" "$cfg"
      nsys stats --report cuda_gpu_trace --format csv -o "/tmp/tl-$cfg" "/tmp/tl-$cfg.nsys-rep" \
        >>"$OUT/nsys.log" 2>&1
      tail -120 "/tmp/tl-${cfg}_cuda_gpu_trace.csv" >"$OUT/timeline-$cfg.csv" 2>/dev/null
    done
  else
    echo "nsys: not installed" >>"$OUT/summary.txt"
  fi
fi

echo "---- failures"
grep -h -E "FAIL|ERROR SUMMARY|rc=[1-9]|failed" "$OUT"/*.log 2>/dev/null | head -80
echo "---- bench"
[ -f "$OUT/bench.log" ] && grep -v "^====" "$OUT/bench.log" | tail -12
[ -f "$OUT/profile_summary.txt" ] && { echo "---- profile (duration, kernel)"; tail -60 "$OUT/profile_summary.txt"; }
echo "---- summary"
cat "$OUT/summary.txt"
