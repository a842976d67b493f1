#!/usr/bin/env python3
"""Env-only rate of the Atari training pipeline (foxhunt_dqn.atari.make_vec), random actions:
the ceiling the whole loop is measured against at the same env count.

  python3 bench/atari_env_rate.py --env ALE/Pong-v5 --envs 16 64 128 --seconds 20

Prints one JSON line per env count: agent steps/s (frames = 4x) over --seconds after a
1-second warm-up, and the game resets seen.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from foxhunt_dqn import atari  # noqa: E402


def rate(env_id, n, seconds, threads, seed):
    vec = atari.make_vec(env_id, n, train=True, num_threads=threads)
    rng = np.random.default_rng(seed)
    k = int(vec.single_action_space.n)
    try:
        vec.reset(seed=seed)
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            vec.step(rng.integers(0, k, n).astype(np.int32))
        calls = ends = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            _, _, term, trunc, info = vec.step(rng.integers(0, k, n).astype(np.int32))
            calls += 1
            ends += int(((term | trunc) & (info["lives"] == 0)).sum())
        dt = time.monotonic() - t0
    finally:
        vec.close()
    return {"env": env_id, "envs": n, "threads": threads, "seconds": dt,
            "agent_steps_per_second": calls * n / dt, "frames_per_second": 4 * calls * n / dt,
            "game_ends": ends}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--envs", type=int, nargs="+", default=[16, 64, 128])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for n in a.envs:
        print(json.dumps(rate(a.env, n, a.seconds, a.threads, a.seed)), flush=True)


if __name__ == "__main__":
    main()
