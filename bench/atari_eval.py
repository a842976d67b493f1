"""Evaluate an Atari checkpoint under the protocol of docs/design.md section 9: raw full-game
returns of the greedy policy with epsilon-random actions, at one or more epsilons.

  python3 bench/atari_eval.py CHECKPOINT --env ALE/Pong-v5 [--epsilon 0.05 0] [--episodes 10]
         [--envs 8] [--seed S] [--backend cuda] [--library PATH]

Prints one JSON line per epsilon: {"epsilon", "return_mean", "return_std", "returns",
"lengths", "seconds"}. Needs ale-py and the foxhunt_dqn package (python/ on PYTHONPATH).
"""

import argparse
import json
import sys
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--env", required=True)
    p.add_argument("--epsilon", type=float, nargs="+", default=[0.05])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--seed", type=int, default=0x6576616C)
    p.add_argument("--backend", default=None, help="default: the checkpoint's")
    p.add_argument("--library")
    a = p.parse_args(argv)
    from foxhunt_dqn import Learner, atari
    from foxhunt_dqn.dqn import checkpoint_config
    cfg = checkpoint_config(a.checkpoint)
    if a.backend:
        cfg["backend"] = a.backend
    with Learner(cfg, library=a.library) as learner:
        learner.load(a.checkpoint, include_replay=False)
        for eps in a.epsilon:
            t0 = time.monotonic()
            rets, lens = atari.evaluate(learner, a.env, a.episodes, a.seed, num_envs=a.envs,
                                        epsilon=eps)
            print(json.dumps({"epsilon": eps, "return_mean": float(np.mean(rets)),
                              "return_std": float(np.std(rets)), "returns": rets,
                              "lengths": lens, "seconds": time.monotonic() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
