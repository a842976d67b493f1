#!/usr/bin/env python3
"""The agent of `python -m foxhunt_dqn.train --env ALE/...` in plain PyTorch, CleanRL style.

Same env pipeline (foxhunt_dqn.atari.make_vec: ale-py's AtariVectorEnv with the protocol of
docs/design.md section 9, life restarts and game resets left out of the replay as the
foxhunt loop does), same network (Nature CNN, optionally dueling), same hyperparameters (read
from the same config file: configs/ALE-<Game>-v5.json), a uniform replay of uint8 stacks;
n-step returns as the learner forms them (per env, gamma^m for the m steps accumulated, cut
at a terminal or truncation: a terminal does not bootstrap, a truncation does); a config's
matmul_precision tf32 or tf32_forward allows TF32 in PyTorch's matmuls and convolutions
(PyTorch has no forward-only switch).
Runs for --minutes of wall time and writes one JSON line per --log-every env steps to
--out/torch_metrics.jsonl (env steps, updates, wall time, raw game returns, where the time
goes), so that wall time per env step can be put beside ours at the same env count:

  python3 bench/atari_torch.py --env ALE/Pong-v5 --envs 16 --minutes 5 --out runs/pong-torch

Needs torch (CUDA when there is a GPU), numpy, gymnasium and ale-py; foxhunt_dqn is imported
from the checkout (python/) for the env pipeline only.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from foxhunt_dqn import atari  # noqa: E402

DEFAULTS = {"dueling": False, "double_dqn": False, "n_step": 1, "gamma": 0.99, "loss": "huber",
            "huber_delta": 1.0, "lr": 1e-4, "adam_eps": 1e-8, "max_grad_norm": 10.0,
            "batch_size": 64, "replay_capacity": 100000, "learning_starts": 1000,
            "train_freq": 4, "gradient_steps": 1, "target_update_interval": 1000, "tau": 1.0,
            "epsilon_start": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 10000,
            "num_envs": 1, "seed": 0, "replay": "uniform", "optimizer": "adam",
            "torso": "nature", "weight_decay": 0.0}


class QNetwork(nn.Module):
    """Nature CNN (conv 32x8s4, 64x4s2, 64x3s1, dense 512) on obs / 255; dueling optional."""

    def __init__(self, k, dueling):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512),
            nn.ReLU())
        self.dueling = dueling
        self.adv = nn.Linear(512, k)
        self.val = nn.Linear(512, 1) if dueling else None

    def forward(self, x):
        h = self.torso(x.float() / 255.0)
        a = self.adv(h)
        if self.dueling:
            return self.val(h) + a - a.mean(dim=1, keepdim=True)
        return a


class Replay:
    """Uniform replay of (obs stack, action, n-step return, next obs stack, discount):
    discount is gamma^m for the m steps the return holds, 0 after a terminal. With n = 1 the
    next stack is the obs stack moved on by one frame, so only its newest frame is stored."""

    def __init__(self, capacity, n_step, rng):
        self.cap = int(capacity)
        self.one = n_step == 1
        self.obs = np.empty((self.cap, 4, 84, 84), np.uint8)   # pages are touched as it fills
        self.nxt = np.empty((self.cap, 84, 84) if self.one else (self.cap, 4, 84, 84), np.uint8)
        self.act = np.empty(self.cap, np.int64)
        self.ret = np.empty(self.cap, np.float32)
        self.disc = np.empty(self.cap, np.float32)
        self.size = 0
        self.pos = 0
        self.rng = rng

    def add(self, obs, act, ret, nxt, disc):
        m = len(act)
        idx = (self.pos + np.arange(m)) % self.cap
        self.obs[idx] = obs
        self.nxt[idx] = nxt[:, 3] if self.one else nxt
        self.act[idx], self.ret[idx], self.disc[idx] = act, ret, disc
        self.pos = (self.pos + m) % self.cap
        self.size = min(self.size + m, self.cap)

    def sample(self, b, device):
        idx = self.rng.integers(0, self.size, b)
        o = torch.from_numpy(self.obs[idx]).to(device, non_blocking=True)
        nx = torch.from_numpy(self.nxt[idx]).to(device)
        n = torch.cat([o[:, 1:], nx[:, None]], dim=1) if self.one else nx
        t = lambda x: torch.from_numpy(x[idx]).to(device)  # noqa: E731
        return o, t(self.act), t(self.ret), n, t(self.disc)


class NStep:
    """Per-env n-step staging: each env's last valid steps (obs, action, clipped reward); a
    start leaves with its return once n rewards follow it, and every pending start leaves at
    the env's terminal or truncation (the rule of the learner's front, docs/design.md
    section 4, Target)."""

    def __init__(self, num_envs, n, gamma):
        self.n, self.gamma = int(n), float(gamma)
        self.q = [[] for _ in range(num_envs)]

    def push(self, i, obs, act, rew, nxt, term, trunc, out):
        q = self.q[i]
        q.append((obs.copy(), act, float(rew)))  # the env may reuse its observation buffer
        if term or trunc:
            starts = range(len(q))
        elif len(q) == self.n:
            starts = range(1)
        else:
            return
        for k in starts:
            ret, g = 0.0, 1.0
            for _, _, r in q[k:]:
                ret += g * r
                g *= self.gamma
            out.append((q[k][0], q[k][1], ret, nxt, 0.0 if term else g))
        del q[:len(starts)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--config", help="default: configs/ALE-<Game>-v5.json")
    p.add_argument("--envs", type=int, help="overrides num_envs")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int)
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--replay-capacity", type=int, help="overrides replay_capacity")
    p.add_argument("--log-every", type=int, default=10000)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    path = a.config or str(Path(__file__).resolve().parents[1] / "configs" /
                           (a.env.replace("/", "-") + ".json"))
    cfg = dict(DEFAULTS)
    cfg.update(json.loads(Path(path).read_text()))
    for k, v in (("num_envs", a.envs), ("seed", a.seed), ("replay_capacity", a.replay_capacity)):
        if v is not None:
            cfg[k] = v
    if cfg["replay"] != "uniform" or cfg["torso"] != "nature":
        sys.exit(f"{path}: this script has uniform replay and the nature torso only")
    if str(cfg.get("matmul_precision", "fp32")).startswith("tf32"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(a.device)
    torch.manual_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    n = int(cfg["num_envs"])
    vec = atari.make_vec(a.env, n, train=True, num_threads=a.threads)
    k = int(vec.single_action_space.n)
    q = QNetwork(k, cfg["dueling"]).to(dev)
    target = QNetwork(k, cfg["dueling"]).to(dev)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=cfg["lr"], eps=cfg["adam_eps"],
                           weight_decay=cfg["weight_decay"])
    rb = Replay(cfg["replay_capacity"], int(cfg["n_step"]), rng)
    staging = NStep(n, cfg["n_step"], cfg["gamma"])
    B = int(cfg["batch_size"])

    obs, info = vec.reset(seed=int(cfg["seed"]))
    lives = np.asarray(info["lives"])
    after_terminal = np.zeros(n, bool)
    game_reset = np.zeros(n, bool)
    game_ret = np.zeros(n)
    recent, games = [], 0
    env_steps = stored = updates = 0
    owed = 0.0  # updates due by the schedule and not yet run
    tm = dict.fromkeys(("env", "act", "update", "python"), 0.0)
    log = open(out / "torch_metrics.jsonl", "w", encoding="utf-8")
    t_start = time.monotonic()
    deadline = t_start + 60.0 * a.minutes
    next_log = a.log_every
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        frac = min(stored / cfg["epsilon_decay_steps"], 1.0)
        eps = cfg["epsilon_start"] + frac * (cfg["epsilon_end"] - cfg["epsilon_start"])
        with torch.no_grad():
            greedy = q(torch.from_numpy(obs).to(dev)).argmax(dim=1).cpu().numpy()
        act = np.where(rng.random(n) < eps, rng.integers(0, k, n), greedy).astype(np.int32)
        t1 = time.perf_counter()
        nobs, rew, term, trunc, info = vec.step(act)
        t2 = time.perf_counter()
        real, valid = ~game_reset, ~after_terminal
        nl = np.asarray(info["lives"])
        life_loss = term & real & (nl < lives) & (nl > 0)
        game_over = ((term & ~life_loss) | trunc) & real
        clipped = np.clip(rew, -1.0, 1.0)
        ready = []
        for i in np.flatnonzero(valid):
            staging.push(i, obs[i], act[i], clipped[i], nobs[i], term[i], trunc[i], ready)
        if ready:
            rb.add(*(np.stack([r[k] for r in ready]) for k in range(5)))
        stored += int(valid.sum())
        env_steps += int(real.sum())
        game_ret += np.where(real, rew, 0.0)
        for i in np.flatnonzero(game_over):
            recent.append(float(game_ret[i]))
            game_ret[i] = 0.0
        games += int(game_over.sum())
        del recent[:-100]
        after_terminal, game_reset, lives, obs = (term | trunc) & real, game_over, nl, nobs
        if stored >= cfg["learning_starts"] and rb.size >= B:
            owed += int(valid.sum()) / cfg["train_freq"] * cfg["gradient_steps"]
        t3 = time.perf_counter()
        while owed >= 1.0:
            o, ac, r, nx, te = rb.sample(B, dev)
            with torch.no_grad():
                if cfg["double_dqn"]:
                    best = q(nx).argmax(dim=1, keepdim=True)
                    nv = target(nx).gather(1, best).squeeze(1)
                else:
                    nv = target(nx).max(dim=1).values
                y = r + te * nv
            qa = q(o).gather(1, ac[:, None]).squeeze(1)
            loss = (F.mse_loss(qa, y) if cfg["loss"] == "mse"
                    else F.huber_loss(qa, y, delta=cfg["huber_delta"]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg["max_grad_norm"] > 0:
                nn.utils.clip_grad_norm_(q.parameters(), cfg["max_grad_norm"])
            opt.step()
            updates += 1
            owed -= 1.0
            if updates % cfg["target_update_interval"] == 0:
                with torch.no_grad():
                    for pt, po in zip(target.parameters(), q.parameters()):
                        pt.mul_(1.0 - cfg["tau"]).add_(po, alpha=cfg["tau"])
        t4 = time.perf_counter()
        tm["act"] += t1 - t0
        tm["env"] += t2 - t1
        tm["python"] += t3 - t2
        tm["update"] += t4 - t3
        if env_steps >= next_log:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            wall = time.monotonic() - t_start
            line = {"wall_time": wall, "env_steps": env_steps, "frames": 4 * env_steps,
                    "updates": updates, "env_steps_per_second": env_steps / wall,
                    "updates_per_second": updates / wall, "games": games, "epsilon": eps,
                    "return_mean_100": float(np.mean(recent)) if recent else 0.0,
                    **{f"time_{key}": v for key, v in tm.items()}}
            log.write(json.dumps(line) + "\n")
            log.flush()
            print(json.dumps(line), flush=True)
            while next_log <= env_steps:
                next_log += a.log_every
    wall = time.monotonic() - t_start
    vec.close()
    log.close()
    print(f"torch: {a.env}, {n} envs, {env_steps} env steps, {updates} updates in {wall:.1f} s: "
          f"{1e6 * wall / max(env_steps, 1):.1f} us per env step, "
          f"{env_steps / wall:.0f} env steps/s; return(100) "
          f"{np.mean(recent) if recent else float('nan'):.2f} over {games} games", flush=True)


if __name__ == "__main__":
    main()
