#!/usr/bin/env bash
# run_nccl.sh NP BUILD_DIR - test_cuda_nccl on NP local ranks, one GPU each (device = local
# rank), under Open MPI's mpirun (docs/design.md section 10). Needs NP visible GPUs; exits 77
# with fewer or without mpirun. Example: tests/cuda/run_nccl.sh 2 build
set -u
np=${1:-2} build=${2:-build}
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge "$np" ] || { echo "$np ranks need $np GPUs; $gpus visible: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export FHD_CUDA_MODULE="$build/libfoxhunt_dqn_cuda.so" FHD_MPI_MODULE="$build/libfoxhunt_dqn_mpi.so"
export FHD_NCCL_TIMEOUT=${FHD_NCCL_TIMEOUT:-60}
timeout --kill-after=10 300 mpirun --oversubscribe --allow-run-as-root --bind-to none \
  -x FHD_CUDA_MODULE -x FHD_MPI_MODULE -x FHD_NCCL_TIMEOUT -np "$np" \
  "$build/tests/cuda/test_cuda_nccl"
