#!/usr/bin/env bash
# Set up a fresh machine, build, and train CartPole-v1 on the CPU backend (the main job).
# Extra arguments go to `fhd-host train`, e.g. ./train.sh --env Acrobot-v1 --steps 100000
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
if [ $# -eq 0 ]; then set -- --env CartPole-v1; fi
# One OpenBLAS thread unless the caller chose otherwise: the control tasks' 64- and 128-wide
# networks are too small for OpenBLAS's two-thread split (20-30k steps: CartPole 1.42 s against
# 1.71, Acrobot 5.09 against 5.44, MountainCar 2.70 against 3.26, at half the CPU time or less;
# bench/RESULTS.md, CPU section)
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
exec ./build/fhd-host train --out runs/latest "$@"
