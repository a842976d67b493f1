#!/usr/bin/env bash
# Install everything foxhunt-dqn needs to build, test and train on a fresh Debian machine.
# Idempotent; installs only what is missing. Needs root (or sudo) for apt-get.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Debian packages: toolchain, jansson, OpenBLAS, the Debian python with torch (parity tests
# use /usr/bin/python3), gnuplot for learning curves, clang for the fuzzers, Open MPI for the
# MPI module and its tests (config distributed; the core library does not need it).
DEB_PACKAGES="build-essential cmake pkg-config libjansson-dev libopenblas-dev python3 python3-numpy
python3-torch python3-pip gnuplot-nox clang libclang-rt-14-dev libopenmpi-dev openmpi-bin"
missing=""
for p in $DEB_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The Rust host's toolchain (hosts/rust: cargo test in CI): Debian's cargo and rustc, unless a
# cargo is already on PATH (rustup's, say).
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: installing Debian's cargo and rustc"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends cargo rustc >/dev/null
fi

# PyPI packages for the python binding's tests and the environment trajectories, installed
# into the default python3 (the one on PATH); ale-py (its wheels ship the Atari ROMs) for the
# Atari host and its tests.
PY=${PYTHON:-python3}
if ! $PY -c "import numpy, gymnasium, pytest, safetensors, ale_py" 2>/dev/null; then
  echo "setup: installing Python packages for $PY"
  PYPKGS="numpy gymnasium pytest safetensors ale-py"
  # shellcheck disable=SC2086
  $PY -m pip install -q --disable-pip-version-check $PYPKGS ||
    $PY -m pip install -q --disable-pip-version-check --break-system-packages $PYPKGS
fi
# NCCL's header for the CUDA module's data-parallel part (docs/design.md section 10), for the
# full build (./test.sh sets FHD_SETUP_NCCL=1; the main job, ./train.sh, trains one process and
# does not fetch it) where a CUDA toolkit is present: the nvidia-nccl-cu13 wheel
# (nvidia/nccl/include and lib, about 350 MB), which CMake finds through this python.
if [ "${FHD_SETUP_NCCL:-0}" = 1 ] && command -v nvcc >/dev/null 2>&1 &&
  ! $PY -c "import nvidia.nccl" 2>/dev/null; then
  echo "setup: installing nvidia-nccl-cu13 for $PY"
  $PY -m pip install -q --disable-pip-version-check nvidia-nccl-cu13 ||
    $PY -m pip install -q --disable-pip-version-check --break-system-packages nvidia-nccl-cu13 ||
    echo "setup: nvidia-nccl-cu13 not installed: the CUDA module is built without NCCL"
fi
# The Debian python (torch for the parity and checkpoint tests) also reads safetensors files.
if ! /usr/bin/python3 -c "import safetensors" 2>/dev/null; then
  echo "setup: installing safetensors for /usr/bin/python3"
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --break-system-packages safetensors
fi
echo "setup: ok"
