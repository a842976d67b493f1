#!/usr/bin/env bash
# Build the wheel (pip wheel ./python: scikit-build-core drives CMake) in a clean virtualenv,
# install it there with the test dependencies, and run the Python tests against the installed
# package: no PYTHONPATH, no FOXHUNT_DQN_LIBRARY, run from outside the checkout, so the
# library the tests load is the one inside the wheel (test_installed_package checks it).
# Needs network access to PyPI (scikit-build-core, numpy, gymnasium, pytest, safetensors, ale-py:
# its wheels ship the ROMs; FHD_REQUIRE_ALE=1 makes the Atari tests fail rather than skip).
#   tests/python/run_wheel_test.sh            # the default python3
#   PYTHON=/usr/bin/python3 tests/python/run_wheel_test.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/venv"
V="$work/venv/bin/python"
PIP=("$V" -m pip -q --disable-pip-version-check)
t0=$(date +%s)
"${PIP[@]}" wheel --no-deps "$root/python" -w "$work/dist"
echo "wheel: $(cd "$work/dist" && ls) built in $(( $(date +%s) - t0 )) s"
"${PIP[@]}" install "$work"/dist/foxhunt_dqn-*.whl numpy "gymnasium>=1.1" pytest safetensors \
  "ale-py>=0.11"
cd "$work"
env -u FOXHUNT_DQN_LIBRARY -u PYTHONPATH FHD_EXPECT_PACKAGED=1 FHD_REQUIRE_ALE=1 OPENBLAS_NUM_THREADS=1 \
  "$V" -m pytest -q -p no:cacheprovider "$root/tests/python" -m "not learning"
