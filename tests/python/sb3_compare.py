"""One training run of foxhunt_dqn.DQN or Stable-Baselines3's DQN with rl-baselines3-zoo's
hyperparameters, then the same evaluation for both; prints one JSON line.

    # ours: the default python3 (gymnasium >= 1.1, foxhunt_dqn on PYTHONPATH)
    PYTHONPATH=python FOXHUNT_DQN_LIBRARY=build \
        python3 tests/python/sb3_compare.py ours CartPole-v1 0
    # SB3 2.4.1: a venv with system site packages over the Debian python (torch 1.13)
    build-sb3venv/bin/python tests/python/sb3_compare.py sb3 CartPole-v1 0
    # medians and the Mann-Whitney U test over files of such lines
    python3 tests/python/sb3_compare.py summary bench/log/2026-12-0[12]-sb3-compare.jsonl

LunarLander-v3 needs Box2D in both environments (`pip install box2d pygame`; PyPI has wheels).
Both sides run one thread (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1)). Evaluation:
the final policy, greedy, 20 episodes of a fresh env seeded seed + 10007 on its first reset.
cpu_s is the process's user + system time of training and evaluation.
"""

import itertools
import json
import os
import resource
import sys
import time

# rl-baselines3-zoo hyperparams/dqn.yml (the entries for these envs)
ZOO = {
    "CartPole-v1": dict(n_timesteps=50_000, learning_rate=2.3e-3, batch_size=64,
                        buffer_size=100_000, learning_starts=1000, gamma=0.99,
                        target_update_interval=10, train_freq=256, gradient_steps=128,
                        exploration_fraction=0.16, exploration_final_eps=0.04,
                        policy_kwargs={"net_arch": [256, 256]}),
    "Acrobot-v1": dict(n_timesteps=100_000, learning_rate=6.3e-4, batch_size=128,
                       buffer_size=50_000, learning_starts=0, gamma=0.99,
                       target_update_interval=250, train_freq=4, gradient_steps=-1,
                       exploration_fraction=0.12, exploration_final_eps=0.1,
                       policy_kwargs={"net_arch": [256, 256]}),
    "MountainCar-v0": dict(n_timesteps=120_000, learning_rate=4e-3, batch_size=128,
                           buffer_size=10_000, learning_starts=1000, gamma=0.98,
                           target_update_interval=600, train_freq=16, gradient_steps=8,
                           exploration_fraction=0.2, exploration_final_eps=0.07,
                           policy_kwargs={"net_arch": [256, 256]}),
    # the zoo's LunarLander-v2 entry; Gymnasium 1.x names the same task LunarLander-v3
    "LunarLander-v3": dict(n_timesteps=100_000, learning_rate=6.3e-4, batch_size=128,
                           buffer_size=50_000, learning_starts=0, gamma=0.99,
                           target_update_interval=250, train_freq=4, gradient_steps=-1,
                           exploration_fraction=0.12, exploration_final_eps=0.1,
                           policy_kwargs={"net_arch": [256, 256]}),
}
EVAL_EPISODES = 20


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(impl, env_id, seed):
    hp = dict(ZOO[env_id])
    steps = hp.pop("n_timesteps")
    t0, c0 = time.monotonic(), cpu_seconds()
    if impl == "ours":
        from foxhunt_dqn import DQN, evaluate_policy
        import gymnasium as gym
        model = DQN("MlpPolicy", env_id, seed=seed, device="cpu", **hp)
    else:
        import torch
        torch.set_num_threads(1)
        from stable_baselines3 import DQN
        from stable_baselines3.common.evaluation import evaluate_policy
        import gymnasium as gym
        model = DQN("MlpPolicy", env_id, seed=seed, device="cpu", **hp)
    model.learn(steps)
    train_wall, train_cpu = time.monotonic() - t0, cpu_seconds() - c0
    env = gym.make(env_id)
    env.reset(seed=seed + 10007)
    if impl == "sb3":
        from stable_baselines3.common.monitor import Monitor
        env = Monitor(env)
    returns, _ = evaluate_policy(model, env, n_eval_episodes=EVAL_EPISODES, deterministic=True,
                                 return_episode_rewards=True)
    import numpy as np
    return {"impl": impl, "env": env_id, "seed": seed, "steps": steps,
            "eval_mean": float(np.mean(returns)), "eval_std": float(np.std(returns)),
            "train_wall_s": round(train_wall, 2), "train_cpu_s": round(train_cpu, 2),
            "wall_s": round(time.monotonic() - t0, 2), "cpu_s": round(cpu_seconds() - c0, 2)}


def mann_whitney(a, b):
    """U of a against b and the exact two-sided p-value (all splits of the pooled sample;
    ties count one half)."""
    def u_stat(x, y):
        return sum(1.0 if xi > yi else 0.5 if xi == yi else 0.0 for xi in x for yi in y)
    u = u_stat(a, b)
    pooled = list(a) + list(b)
    n = len(a)
    mean_u = len(a) * len(b) / 2
    extreme = total = 0
    for idx in itertools.combinations(range(len(pooled)), n):
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        if abs(u_stat(x, y) - mean_u) >= abs(u - mean_u) - 1e-12:
            extreme += 1
    return u, extreme / total


def summary(paths):
    import statistics
    rows = [json.loads(line) for path in paths for line in open(path) if line.strip()]
    out = []
    for env_id in sorted({r["env"] for r in rows}):
        by = {impl: [r for r in rows if r["env"] == env_id and r["impl"] == impl]
              for impl in ("ours", "sb3")}
        if not by["ours"] or not by["sb3"]:
            continue
        a = [r["eval_mean"] for r in by["ours"]]
        b = [r["eval_mean"] for r in by["sb3"]]
        u, p = mann_whitney(a, b)
        med = {k: {f: statistics.median(r[f] for r in v) for f in
                   ("eval_mean", "train_wall_s", "train_cpu_s", "cpu_s")} for k, v in by.items()}
        out.append({"env": env_id, "seeds": {k: [r["seed"] for r in v] for k, v in by.items()},
                    "scores": {"ours": a, "sb3": b}, "median": med, "mann_whitney_u": u,
                    "p_two_sided": round(p, 4),
                    "cpu_ratio_sb3_over_ours": round(med["sb3"]["train_cpu_s"]
                                                     / med["ours"]["train_cpu_s"], 2)})
    print(json.dumps(out, indent=1))


def main(argv):
    if argv[0] == "summary":
        summary(argv[1:])
        return 0
    impl, env_id, seed = argv[0], argv[1], int(argv[2])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    print(json.dumps(run(impl, env_id, seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
