#!/usr/bin/env bash
# Build the library and the concurrency test (test_threads) under ThreadSanitizer and run it.
# A separate build directory (default build-tsan) with -fsanitize=thread in the C flags of
# every target, the library included; only the two targets needed are built.
# OPENBLAS_NUM_THREADS=1 keeps OpenBLAS's own (uninstrumented) thread pool out of the picture.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${FHD_TSAN_BUILD_DIR:-build-tsan}
cmake -S . -B "$BUILD" -DFHD_CUDA=OFF -DFHD_SANITIZE=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target foxhunt_dqn test_threads >/dev/null
export OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1}
run=("$BUILD/tests/reliability/test_threads" "$BUILD/libfoxhunt_dqn.so" "$BUILD/tsan-scratch")
# ThreadSanitizer of gcc 12 cannot map its shadow memory under the high-entropy address space
# randomisation of newer kernels ("unexpected memory mapping"): run without randomisation then.
if command -v setarch >/dev/null && ! "${run[@]}" 50 >/dev/null 2>&1; then
  echo "run_tsan: retrying without address space randomisation (setarch -R)"
  run=(setarch "$(uname -m)" -R "${run[@]}")
fi
"${run[@]}"
echo "run_tsan: ThreadSanitizer reported nothing"
