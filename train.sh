#!/usr/bin/env bash
# Set up a fresh machine, build what training needs, and train CartPole-v1 on the CPU backend
# (the main job). Extra arguments go to `fhd-host train`, e.g.
#   ./train.sh --env Acrobot-v1 --steps 100000 --seed 3
# Builds only the core library and fhd-host (no test suites) in build-train/, so it never
# fights ./test.sh over build/. The CUDA module is built too when a GPU is present
# (`nvidia-smi -L` lists one) or when asked for with FHD_CUDA=ON; FHD_CUDA=OFF never builds it.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
BUILD=${FHD_TRAIN_BUILD_DIR:-build-train}
CUDA=${FHD_CUDA:-}
if [ -z "$CUDA" ]; then
  if nvidia-smi -L >/dev/null 2>&1; then CUDA=ON; else CUDA=OFF; fi
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFHD_BUILD_TESTS=OFF \
  -DFHD_CUDA="$CUDA" -DFHD_MPI=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
if [ $# -eq 0 ]; then set -- --env CartPole-v1; fi
# One OpenBLAS thread unless the caller chose otherwise: the control tasks' 64- and 128-wide
# networks are too small for OpenBLAS's two-thread split (bench/RESULTS.md, CPU section)
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
exec "./$BUILD/fhd-host" train --out runs/latest "$@"
