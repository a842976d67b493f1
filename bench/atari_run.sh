#!/usr/bin/env bash
# bench/atari_run.sh - one seed of an Atari run (python -m foxhunt_dqn.train) in pieces that fit
# a 10-minute command: each call trains for at most PIECE_MINUTES, saves the checkpoint and
# exits; the next call with the same arguments resumes it (--resume), until --steps is reached
# and the final evaluation is written (RUN_DIR/eval.json).
#
#   bench/atari_run.sh RUN_DIR [LOG_DIR] [-- extra train options]
#
# RUN_DIR holds the run (checkpoint with its replay, metrics.jsonl, episodes.csv, ...); keep it
# where it survives between calls (runs/ is ignored by git, so on the GPU machine it stays
# while that machine is held). LOG_DIR (e.g. $OUT) gets copies of the small files after each
# piece: metrics.jsonl, episodes.csv, run_state.json, eval.json, learning_curve.png, piece logs.
# Environment (defaults): ENV (ALE/Pong-v5), SEED (0), STEPS (10000000), ENVS (16),
# BACKEND (cuda), PIECE_MINUTES (7.5: leaves time for the start, loading and saving a 1M
# replay, and the evaluation),
# CKPT_EVERY (0: the checkpoint at the end of each piece only), EVAL_EPISODES (10),
# CONFIG (configs/ALE-<Game>-v5.json), PYTHON (python3).
# On the GPU machine, with .device/ (tools/device_bundle.sh) and .whl/ carried (its image
# lacks ale-py and gymnasium; fetch them here for its python 3.12:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl ale-py gymnasium farama-notifications):
#   bench/atari_run.sh runs/pong-s0 $OUT            # repeat until it prints "run complete"
# Exit status: 0 when a piece ended normally (or the run is complete), else train's status.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 1 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }
run_dir=$1; shift
log_dir=""
if [ $# -ge 1 ] && [ "$1" != "--" ]; then log_dir=$1; shift; fi
[ "${1:-}" = "--" ] && shift
PY=${PYTHON:-python3}
ENV_ID=${ENV:-ALE/Pong-v5}

if [ -f "$run_dir/eval.json" ]; then
  echo "run complete: $run_dir/eval.json"; cat "$run_dir/eval.json" | head -c 400; echo
  exit 0
fi
# ale-py and gymnasium: carried as wheels when the python lacks them
if ! "$PY" -c "import ale_py, gymnasium" 2>/dev/null; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "error: no ale-py/gymnasium and no .whl/" >&2; exit 2; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/atari-site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/atari-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
lib_args=()
if [ -f .device/build/libfoxhunt_dqn.so ]; then
  export LD_LIBRARY_PATH=$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  lib_args=(--library "$PWD/.device/build/libfoxhunt_dqn.so")
fi

mkdir -p "$run_dir"
args=(--env "$ENV_ID" --backend "${BACKEND:-cuda}" --seed "${SEED:-0}" --steps "${STEPS:-10000000}"
      --envs "${ENVS:-16}" --out "$run_dir" --max-minutes "${PIECE_MINUTES:-7.5}"
      --checkpoint-every "${CKPT_EVERY:-0}" --eval-episodes "${EVAL_EPISODES:-10}" --quiet)
[ -n "${CONFIG:-}" ] && args+=(--config "$CONFIG")
[ -f "$run_dir/checkpoint.safetensors" ] && args+=(--resume "$run_dir/checkpoint.safetensors")
piece=$(ls "$run_dir"/piece-*.log 2>/dev/null | wc -l)
log="$run_dir/piece-$piece.log"
echo "piece $piece: $PY -m foxhunt_dqn.train ${lib_args[*]} ${args[*]} $*" | tee "$log"
t0=$(date +%s)
"$PY" -m foxhunt_dqn.train "${lib_args[@]}" "${args[@]}" "$@" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "piece $piece: exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$log"
if [ -n "$log_dir" ]; then
  mkdir -p "$log_dir"
  for f in metrics.jsonl episodes.csv run_state.json eval.json learning_curve.png \
           "$run_dir"/piece-*.log; do
    f=$(basename "$f"); [ -f "$run_dir/$f" ] && cp "$run_dir/$f" "$log_dir/"
  done
fi
[ -f "$run_dir/eval.json" ] && echo "run complete: $run_dir/eval.json"
exit "$rc"
