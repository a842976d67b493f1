#!/usr/bin/env bash
# run_mpi.sh NP TIMEOUT PROGRAM ARGS... - run PROGRAM on NP local ranks under Open MPI's mpirun
# (docs/design.md section 10). Exit 77 (skipped) without mpirun. With MPI_EXPECT_FAIL=1 the job
# must fail (a rank died) but within TIMEOUT seconds: a job still running then is a hang.
set -u
np=$1 limit=$2
shift 2
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
# CI runs as root; localhost only; one core may carry several ranks
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_plm_rsh_agent=false
# sanitizer builds: Open MPI keeps allocations past MPI_Finalize, from components it has
# unloaded by then (stacks of unknown modules, which no suppression can name), so leak checks
# are off here; ASan's memory errors and UBSan stay on (the rest of the suite checks leaks)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
start=$(date +%s)
timeout --kill-after=10 "$limit" mpirun --oversubscribe --allow-run-as-root --bind-to none \
  -np "$np" "$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ "${MPI_EXPECT_FAIL:-0}" = 1 ]; then
  # 124: timeout ended it (mpirun itself exits 128 + the signal that ended the dead rank)
  if [ $rc -eq 124 ] || [ "$took" -ge "$limit" ]; then
    echo "FAIL: the job was still running after ${limit} s (rc $rc): the other ranks hang"
    exit 1
  fi
  if [ $rc -eq 0 ]; then
    echo "FAIL: the job succeeded although a rank died"
    exit 1
  fi
  echo "ok: the job failed (rc $rc) in ${took} s after a rank died"
  exit 0
fi
[ $rc -eq 0 ] || echo "FAIL: mpirun -np $np exited $rc after ${took} s"
exit $rc
