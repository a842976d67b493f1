#!/usr/bin/env bash
# Set up a fresh machine, build everything and run the whole CPU test suite.
#   ./test.sh                 # build in build/ and run ctest
#   FHD_SANITIZE=ON ./test.sh # the same under AddressSanitizer + UBSan (build-asan/)
set -euo pipefail
cd "$(dirname "$0")"
FHD_SETUP_NCCL=1 bash scripts/setup.sh
SAN=${FHD_SANITIZE:-OFF}
BUILD=${FHD_BUILD_DIR:-build}
[ "$SAN" = "ON" ] && BUILD=${FHD_BUILD_DIR:-build-asan}
cmake -S . -B "$BUILD" -DFHD_SANITIZE="$SAN" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" ${FHD_CTEST_ARGS:-}
