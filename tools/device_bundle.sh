#!/usr/bin/env bash
# Build foxhunt-dqn with the CUDA module for sm_90 here and gather what a bare GPU machine
# needs to run it into .device/ (ignored by git): the build outputs, jansson (in case that
# machine's image lacks it) and CUPTI (the bench's kernel timeline). Its image has OpenBLAS.
# On the GPU machine:  export LD_LIBRARY_PATH=$PWD/.device/lib:$LD_LIBRARY_PATH
#                      .device/build/fhd-host info
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-dev}
cmake -S . -B "$BUILD" -DFHD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  ${FHD_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
rm -rf .device && mkdir -p .device/lib .device/build
# the whole build tree (tests, bench/cuda's drivers, fhd-host, both libraries, manifest.json), without CMake's objects
# and what a local ctest run left there (checkpoints, parity dumps, scratch directories)
tar -C "$BUILD" --exclude='CMakeFiles' --exclude='*.o' --exclude='Testing' --exclude='*.bin' \
  --exclude='*.safetensors' --exclude='scratch' -cf - . | tar -C .device/build -xf -
# (the GPU image has OpenBLAS; jansson and CUPTI, for the bench timeline, travel with the build)
for lib in libjansson.so.4 libcupti.so.13; do
  src=$(ldconfig -p | awk -v l="$lib" '$1 == l && !s { s = $NF } END { print s }')
  [ -n "$src" ] || src=$(find /usr/lib /lib -name "$lib" 2>/dev/null | head -1)
  [ -n "$src" ] && cp -L "$src" .device/lib/
done
# the CUDA tests as CMake registered them (name, command, arguments; the build directory written
# as @BLD@), so that tests/cuda/device_run.sh runs exactly ctest's list on the GPU machine
abs=$(cd "$BUILD" && pwd)
sed -n 's/^add_test(\[=\[\([^]]*\)\]=\] \(.*\))$/\1 \2/p' "$BUILD/tests/cuda/CTestTestfile.cmake" |
  sed "s|$abs|@BLD@|g; s|\"||g" >.device/cuda_tests.txt
du -sh .device | cut -f1 | sed 's/^/.device: /'
