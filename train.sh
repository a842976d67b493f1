#!/usr/bin/env bash
# Set up a fresh machine, build, and train CartPole-v1 on the CPU backend (the main job).
# Extra arguments go to `fhd-host train`, e.g. ./train.sh --env Acrobot-v1 --steps 100000
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
if [ $# -eq 0 ]; then set -- --env CartPole-v1; fi
exec ./build/fhd-host train --out runs/latest "$@"
