"""Microbenchmark: what Learner.step costs in Python on top of the library's own step.

    PYTHONPATH=python FOXHUNT_DQN_LIBRARY=build-cpu python3 tests/python/bench_step_overhead.py

Runs the default python3 (numpy only). A tiny learner (obs_dim 4, two actions, one 8-wide
layer, learning_starts beyond the run so that no update is timed) is stepped the way a single
Gymnasium env is driven: an (S,) float32 observation and Python scalars for reward /
terminated / truncated (the "gym" row; the "batched" row passes (1, S) and one-element lists,
as the old API needed). "raw" calls the table's step directly through ctypes with an argument
struct built once: the library's own time plus the unavoidable ctypes call. The overhead is
the difference of the medians of `--repeats` runs of `--calls` calls each.
"""

import argparse
import ctypes
import statistics
import sys
import time

import numpy as np

import foxhunt_dqn
from foxhunt_dqn import _abi

CONFIG = {"obs_dim": 4, "actions": [2], "hidden": [8], "learning_starts": 10**12,
          "replay_capacity": 1 << 16, "batch_size": 8, "seed": 1}


def _time(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def measure(calls=20000, repeats=7, library=None):
    learner = foxhunt_dqn.Learner(CONFIG, library=library)
    obs = np.array([0.01, -0.02, 0.03, 0.04], np.float32)
    learner.step(obs.reshape(1, 4))
    rows = {}

    def gym_call():
        learner.step(obs, 1.0, False, False)

    obs2 = obs.reshape(1, 4)

    def batched_call():
        learner.step(obs2, [1.0], [False], [False])

    # raw: one struct, one set of buffers, the table's function called directly
    rew = np.ones(1, np.float32)
    flags = np.zeros(1, np.uint8)
    acts = np.zeros((1, 1), np.int32)
    args = _abi.FhdStepArgs()
    args.struct_size = ctypes.sizeof(args)
    args.num_envs = 1
    args.obs = obs.ctypes.data
    args.rewards = rew.ctypes.data
    args.terminated = flags.ctypes.data
    args.truncated = flags.ctypes.data
    args.actions = acts.ctypes.data
    fn, h, ref = learner._fn.step, learner._h, ctypes.byref(args)

    def raw_call():
        fn(h, ref)

    for name, f in (("raw", raw_call), ("gym", gym_call), ("batched", batched_call)):
        try:
            f()
        except (TypeError, ValueError) as exc:  # a binding that does not take this form
            print(f"{name}: not accepted ({exc})")
            continue
        rows[name] = statistics.median(_time(f, calls) for _ in range(repeats))
    learner.close()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--library")
    a = p.parse_args(argv)
    rows = measure(a.calls, a.repeats, a.library)
    for name, us in rows.items():
        extra = "" if name == "raw" else f"  overhead {us - rows['raw']:.2f} us"
        print(f"{name:8s} {us:8.2f} us/call{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
