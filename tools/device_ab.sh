#!/usr/bin/env bash
# Side-by-side timing of two CUDA modules, the way every optimisation in bench/log/2026-11-results-rounds.md's GPU
# log was measured: `cuda_bench PRESET` in separate processes, alternating the modules, R
# rounds, then each update's length over N updates of one train(n) per module (a bimodal
# update shows as two clusters, which a median hides).
#
# Here:   tools/device_bundle.sh                          (the change: .device/build)
#         tools/device_ab.sh --base-rev REV               (builds REV's module into .device/base)
# There:  tools/device_ab.sh --run [--presets "B1 C0"] [--rounds 2] [--updates 100]
#
# --base-rev builds the module and cuda_bench of a commit in a git worktree (/tmp/fhd-ab-base)
# and copies them to .device/base; run it after device_bundle.sh (which empties .device/). Each
# side runs its own cuda_bench: the bench links the core, whose backend ops version must match
# the module's. --run prints lines
# "NEW|BASE <cuda_bench row>" and, per preset and module, the mean and the sorted update
# lengths of the trace, and how many of them lie 8% above their median. With $OUT set the
# output is also written to $OUT/ab.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mode= base_rev= presets="B1 B1-sn B3 C0" rounds=2 updates=100
while [ $# -gt 0 ]; do
  case "$1" in
    --base-rev) mode=build; base_rev="$2"; shift ;;
    --run) mode=run ;;
    --presets) presets="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --updates) updates="$2"; shift ;;
    *) echo "device_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$mode" = build ]; then
  wt=/tmp/fhd-ab-base
  git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
  git worktree add --detach "$wt" "$base_rev" >/dev/null
  cmake -S "$wt" -B "$wt/build" -DFHD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$wt/build" -j"$(nproc)" --target foxhunt_dqn_cuda cuda_bench >/dev/null
  mkdir -p .device/base
  # (older revisions built the bench under tests/cuda)
  base_bench=$wt/build/bench/cuda/cuda_bench
  [ -f "$base_bench" ] || base_bench=$wt/build/tests/cuda/cuda_bench
  cp "$wt/build/libfoxhunt_dqn_cuda.so" "$base_bench" .device/base/
  echo "device_ab.sh: .device/base holds the CUDA module and cuda_bench of $(git rev-parse --short "$base_rev")"
  exit 0
fi
if [ "$mode" != run ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi

export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
new_bench=$PWD/.device/build/bench/cuda/cuda_bench
base_bench=$PWD/.device/base/cuda_bench
new=$PWD/.device/build/libfoxhunt_dqn_cuda.so
base=$PWD/.device/base/libfoxhunt_dqn_cuda.so
for f in "$new_bench" "$base_bench" "$new" "$base"; do
  [ -f "$f" ] || { echo "device_ab.sh: $f is missing (device_bundle.sh, --base-rev)" >&2; exit 2; }
done
log=/dev/null
[ -n "${OUT:-}" ] && { mkdir -p "$OUT"; log=$OUT/ab.log; }
{
  for ((r = 1; r <= rounds; r++)); do
    for p in $presets; do
      for m in NEW BASE; do
        mod=$new bench=$new_bench
        [ $m = BASE ] && mod=$base bench=$base_bench
        FHD_CUDA_MODULE=$mod "$bench" "$p" 2>&1 | grep -E "^$p " | sed "s/^/$m  /" || true
      done
    done
  done
  for p in $presets; do
    for m in NEW BASE; do
      mod=$new bench=$new_bench
      [ $m = BASE ] && mod=$base bench=$base_bench
      t=$(FHD_CUDA_MODULE=$mod FHD_BENCH_TRACE=1 FHD_BENCH_TRACE_N=$updates FHD_BENCH_QUICK=1 \
        "$bench" "$p" 2>&1 || true)
      echo "$t" | grep "per update" | head -1 | sed "s/^/$m  /" || true
      # the update lengths: the indented lines of numbers after that line, sorted
      lens=$(echo "$t" | sed -n '/per update/,/^trace/p' | grep -E '^  [0-9]' |
        tr -s ' ' '\n' | grep -v '^$' | sort -n)
      echo "$m  sorted: $(echo "$lens" | tr '\n' ' ')"
      # a second mode (B3's slow updates in the tenth round): updates 8% above the median
      echo "$lens" | awk -v m="$m" 'NF { v[n++] = $1 } END { if (!n) exit;
        med = v[int(n / 2)]; for (i = 0; i < n; i++) if (v[i] > 1.08 * med) k++;
        printf "%s  slow: %d of %d updates above 1.08 x the median (%s)\n", m, k, n, med }'
    done
  done
} | tee "$log"
