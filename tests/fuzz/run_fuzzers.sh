#!/usr/bin/env bash
# Build the libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer) and run each
# for a bounded time, starting from the committed corpus (tests/fuzz/corpus/<harness>/).
#
#   tests/fuzz/run_fuzzers.sh                  # 60 s per fuzzer (CI)
#   tests/fuzz/run_fuzzers.sh 600              # longer runs
#   tests/fuzz/run_fuzzers.sh --update-corpus  # after a run: minimise (-merge=1) the committed
#                                              # corpus together with what the runs found
# Environment: FHD_FUZZ_BUILD_DIR (default build-fuzz), FHD_FUZZ_HARNESSES (default all three).
#
# The working corpora and findings live in $FHD_FUZZ_BUILD_DIR/fuzz-work/: <harness>/ (inputs
# with new coverage), <harness>-artifacts/ (crash-*, leak-*, timeout-*, oom-*) and <harness>.log.
# A finding fails the script; fix it, then add the artifact to tests/fuzz/corpus/<harness>/ so
# that the fuzz_<harness> CTest test replays it in every build from then on.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${FHD_FUZZ_BUILD_DIR:-build-fuzz}
HARNESSES=${FHD_FUZZ_HARNESSES:-"config checkpoint manifest"}
UPDATE=0
SECONDS_EACH=60
for a in "$@"; do
  case "$a" in
    --update-corpus) UPDATE=1 ;;
    ''|*[!0-9]*) echo "usage: $0 [SECONDS] [--update-corpus]" >&2; exit 2 ;;
    *) SECONDS_EACH=$a ;;
  esac
done

if ! command -v clang >/dev/null; then
  echo "run_fuzzers: clang is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DFHD_FUZZ=ON -DFHD_SANITIZE=ON -DFHD_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=""
for h in $HARNESSES; do targets="$targets fuzz_$h"; done
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $targets >/dev/null

WORK=$ROOT/$BUILD/fuzz-work
BIN=$ROOT/$BUILD/tests/fuzz
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:quarantine_size_mb=64}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OPENBLAS_NUM_THREADS=1
# the harnesses' temporary files: a private directory (in memory when /dev/shm is there),
# removed at the end even when a harness crashed and left its files
if [ -w /dev/shm ]; then
  FHD_FUZZ_TMPDIR=$(mktemp -d /dev/shm/fhd-fuzz.XXXXXX)
else
  FHD_FUZZ_TMPDIR=$(mktemp -d)
fi
export FHD_FUZZ_TMPDIR
trap 'rm -rf "$FHD_FUZZ_TMPDIR"' EXIT

args_for() {
  case "$1" in
    config) echo "-dict=$ROOT/tests/fuzz/config.dict -max_len=4096" ;;
    checkpoint) echo "-max_len=65536" ;;
    manifest) echo "-max_len=16384" ;;
  esac
}

budget_kib() {
  case "$1" in
    checkpoint) echo 1400 ;;
    *) echo 200 ;;
  esac
}

if [ "$UPDATE" = 1 ]; then
  # Named inputs (seeds, regression inputs such as crash-*) are kept as they are; inputs named
  # by their SHA-1 (libFuzzer's names) are minimised together with the working corpus.
  for h in $HARNESSES; do
    committed=$ROOT/tests/fuzz/corpus/$h
    merged=$WORK/$h-merged
    hashed=$WORK/$h-hashed
    rm -rf "$merged" "$hashed"
    mkdir -p "$merged" "$hashed" "$WORK/$h"
    for f in "$committed"/*; do
      [ -f "$f" ] || continue
      if [[ "$(basename "$f")" =~ ^[0-9a-f]{40}$ ]]; then cp "$f" "$hashed/"; else cp "$f" "$merged/"; fi
    done
    # shellcheck disable=SC2046
    "$BIN/fuzz_$h" -merge=1 $(args_for "$h") "$merged" "$hashed" "$WORK/$h" \
      >"$WORK/$h-merge.log" 2>&1
    find "$committed" -maxdepth 1 -type f -regextype egrep -regex '.*/[0-9a-f]{40}$' -delete
    # keep the committed corpora under 2 MB in all: named inputs always, then the minimised
    # ones smallest first while the harness's budget lasts
    budget=$(budget_kib "$h")
    used=$(find "$committed" -type f -printf '%s\n' | awk '{s+=$1} END {print int(s/1024)}')
    while read -r size f; do
      [ -e "$committed/$(basename "$f")" ] && continue
      used=$((used + (size + 1023) / 1024))
      [ "$used" -le "$budget" ] || break
      cp "$f" "$committed/"
    done < <(find "$merged" -type f -printf '%s %p\n' | sort -n)
    echo "corpus/$h: $(find "$committed" -type f | wc -l) inputs," \
      "$(find "$committed" -type f -printf '%s\n' | awk '{s+=$1} END {print int(s/1024)}') KiB"
  done
  exit 0
fi

status=0
total=0
printf '%-11s %10s %8s %8s %s\n' harness executions exec/s new findings
for h in $HARNESSES; do
  rm -rf "$WORK/$h-artifacts" # findings of earlier runs were reported by those runs
  mkdir -p "$WORK/$h" "$WORK/$h-artifacts"
  seeds=("$ROOT/tests/fuzz/corpus/$h")
  if [ "$h" = checkpoint ]; then
    # fresh real checkpoints of the library as built now (the format may have moved on)
    rm -rf "$WORK/checkpoint-fresh"
    mkdir -p "$WORK/checkpoint-fresh"
    FHD_FUZZ_WRITE_SEEDS=$WORK/checkpoint-fresh "$BIN/fuzz_checkpoint" >/dev/null
    seeds+=("$WORK/checkpoint-fresh")
  fi
  rc=0
  # shellcheck disable=SC2046
  (cd "$WORK" && "$BIN/fuzz_$h" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
    -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$WORK/$h-artifacts/" $(args_for "$h") \
    "$WORK/$h" "${seeds[@]}") >"$WORK/$h.log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$h.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$WORK/$h.log" | tail -1)
  new=$(sed -n 's/^stat::new_units_added: *//p' "$WORK/$h.log" | tail -1)
  found=$(find "$WORK/$h-artifacts" -type f | wc -l)
  printf '%-11s %10s %8s %8s %s\n' "$h" "${execs:-?}" "${rate:-?}" "${new:-?}" "$found"
  total=$((total + ${execs:-0}))
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    echo "run_fuzzers: fuzz_$h failed (exit $rc); the end of $WORK/$h.log:" >&2
    tail -40 "$WORK/$h.log" >&2
    find "$WORK/$h-artifacts" -type f | sed 's/^/  finding: /' >&2
  fi
done
echo "run_fuzzers: $total executions in total, ${SECONDS_EACH} s per fuzzer"
exit $status
