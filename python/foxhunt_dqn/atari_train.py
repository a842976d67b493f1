"""python -m foxhunt_dqn.train --env ALE/<Game>-v5 [options]: an Atari training run.

Writes what `fhd-host train` writes (docs/design.md, section 9), in DIR (--out):
  metrics.jsonl          every --log-every env steps: the learner's metrics, wall_time, and
                         the run's own keys (atari_* below: raw game returns, env steps, time)
  episodes.csv           one row per finished game: episode,env,env_steps,return,length,
                         terminated,truncated (return: raw full-game score)
  checkpoint.safetensors the learner with its replay (every --checkpoint-every env steps and
                         at the end), run_state.json beside it (the run's own counters)
  eval.json              the final evaluation (raw full-game returns, epsilon --eval-epsilon)
  learning_curve.png     raw game return (mean of the last 100 games) over env steps (gnuplot)
The progress line goes to stdout (a \\r line on a terminal). Ctrl-C saves the checkpoint and
exits 130; --max-minutes stops on a wall budget, saves and exits 0; either continues with the
same command and --resume DIR/checkpoint.safetensors (metrics.jsonl and episodes.csv appended).

Exit status: 0, 1 (no library or backend, a failure while training or saving), 2 (bad
arguments or config), 130.
"""

import argparse
import json
import os
import signal
import subprocess
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from . import atari

EPISODES_HEADER = "episode,env,env_steps,return,length,terminated,truncated\n"
STATE_FILE = "run_state.json"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m foxhunt_dqn.train",
                                description="Train a foxhunt-dqn learner on an Atari game "
                                            "(ale-py, the protocol of docs/design.md section 9).")
    p.add_argument("--env", required=True, help="ALE id, e.g. ALE/Pong-v5")
    p.add_argument("--config", help="learner config (default: configs/ALE-<Game>-v5.json)")
    p.add_argument("--backend", choices=("cpu", "cuda", "auto"))
    p.add_argument("--steps", type=int, default=10_000_000,
                   help="train until N env (agent) steps in all, resumed steps included")
    p.add_argument("--envs", type=int, help="envs stepped together (overrides num_envs)")
    p.add_argument("--threads", type=int, default=0, help="ale-py env threads (0: automatic)")
    p.add_argument("--loop", choices=atari.LOOP_MODES, default="overlap",
                   help="overlap: updates run while the envs step (observe, act, send, train); "
                        "step: one Learner.step per call, then the envs (docs/design.md 9)")
    p.add_argument("--seed", type=int, help="learner and env seed (default: the config's)")
    p.add_argument("--out", help="output directory (default: runs/ALE-<Game>-v5-seedS)")
    p.add_argument("--resume", metavar="CHECKPOINT", help="continue from this checkpoint")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N")
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="stop training after this wall time, save, exit 0 (0: no limit)")
    p.add_argument("--target-return", type=float, metavar="R",
                   help="stop training once the mean raw return of the last --target-games "
                        "games reaches R (then evaluate; eval.json records the wall time)")
    p.add_argument("--target-games", type=int, default=16, metavar="K")
    p.add_argument("--target-eval", action="store_true",
                   help="confirm --target-return by an evaluation (--eval-episodes games at "
                        "--eval-epsilon): stop only when its mean reaches R too, else train "
                        "--target-games more games and check again")
    p.add_argument("--target-propose", type=float, metavar="P",
                   help="with --target-eval: the training games' mean that proposes a check "
                        "(default R; exploration makes training games score below the policy)")
    p.add_argument("--log-every", type=int, default=10000, metavar="N")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-epsilon", type=float, default=atari.EVAL_EPSILON)
    p.add_argument("--eval-envs", type=int, default=8)
    p.add_argument("--library", help="path of libfoxhunt_dqn.so")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    a = p.parse_args(argv)
    if a.steps < 1 or (a.envs is not None and a.envs < 1) or a.log_every < 1:
        p.error("--steps, --envs and --log-every must be >= 1")
    if a.checkpoint_every < 0 or a.eval_episodes < 0 or a.max_minutes < 0 or a.threads < 0:
        p.error("--checkpoint-every, --eval-episodes, --max-minutes, --threads must be >= 0")
    if a.target_games < 1:
        p.error("--target-games must be >= 1")
    if a.target_propose is not None and not a.target_eval:
        p.error("--target-propose needs --target-eval")
    if not 0.0 <= a.eval_epsilon <= 1.0 or a.eval_envs < 1:
        p.error("--eval-epsilon must be in [0, 1] and --eval-envs >= 1")
    try:
        atari.rom_name(a.env)
    except ValueError as exc:
        p.error(str(exc))
    return a


def config_name(env_id):
    return env_id.replace("/", "-") + ".json"


def default_config(env_id):
    """<ALE-Game-v5>.json in $FHD_CONFIG_DIR, ./configs, the package's configs/ (a wheel's) or
    the checkout's configs/."""
    name = config_name(env_id)
    here = Path(__file__).resolve().parent
    dirs = [os.environ.get("FHD_CONFIG_DIR"), "configs", str(here / "configs"),
            str(here.parents[1] / "configs")]
    tried = [str(Path(d) / name) for d in dirs if d]
    for t in tried:
        if os.path.isfile(t):
            return t, tried
    return None, tried


def build_config(args, vec_keys):
    """The learner config: the file, then the env's spaces, then the command line."""
    path = args.config
    if path is None:
        path, tried = default_config(args.env)
        if path is None:
            raise ValueError(f"no config for {args.env}: tried {', '.join(tried)}; give --config")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--config {path}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ValueError(f"--config {path}: expected a JSON object")
    if args.resume and args.seed is None:  # the recorded seed, unless --seed (as fhd-host)
        from .dqn import checkpoint_config
        try:
            cfg["seed"] = checkpoint_config(args.resume).get("seed", 0)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"--resume {args.resume}: not a readable checkpoint: {exc}") from exc
    cfg.update(vec_keys)
    if args.envs is not None:
        cfg["num_envs"] = args.envs
    if args.seed is not None:
        cfg["seed"] = args.seed
    if args.backend:
        cfg["backend"] = args.backend
    return path, cfg


class RunLog:
    """DIR's metrics.jsonl, episodes.csv, progress line and learning curve."""

    def __init__(self, out, env_id, target, first_episode, append, quiet):
        self.dir = Path(out)
        self.dir.mkdir(parents=True, exist_ok=True)
        mode = "a" if append else "w"
        self.metrics = open(self.dir / "metrics.jsonl", mode, encoding="utf-8")
        self.episodes = open(self.dir / "episodes.csv", mode, encoding="utf-8")
        if not append or self.episodes.tell() == 0:
            self.episodes.write(EPISODES_HEADER)
        self.env_id, self.target, self.episode = env_id, target, first_episode
        self.tty = not quiet and sys.stdout.isatty()
        self.quiet = quiet
        self.t0 = time.monotonic()
        self.line_open = False

    def game(self, env, env_steps, ret, length, term, trunc):
        self.episodes.write(f"{self.episode},{env},{env_steps},{ret:.9g},{length},"
                            f"{int(term)},{int(trunc)}\n")
        self.episode += 1

    def interval(self, m):
        self.metrics.write(json.dumps(m) + "\n")
        self.metrics.flush()
        self.episodes.flush()
        if self.quiet:
            return
        s, t = m["atari_env_steps"], self.target
        text = (f"{self.env_id} steps {s}/{t} ({100 * s / t:.0f}%)  wall {m['wall_time']:.1f}s  "
                f"{m['atari_env_steps_per_second']:.0f} steps/s  updates {m['updates']} "
                f"({m['updates_per_second']:.0f}/s)  game return(100) "
                f"{m['atari_return_mean_100']:.2f}  eps {m['epsilon']:.3f}  loss {m['loss']:.4g}")
        if self.tty:
            print("\r" + text + "\033[K", end="", flush=True)
            self.line_open = True
        else:
            print(text, flush=True)

    def end_line(self):
        if self.line_open:
            print(flush=True)
            self.line_open = False

    def close(self):
        self.metrics.close()
        self.episodes.close()

    def plot(self, eval_point=None):
        """DIR/learning_curve.png from episodes.csv (gnuplot; skipped with a warning without)."""
        gp = shutil.which("gnuplot")
        png = self.dir / "learning_curve.png"
        if gp is None:
            print(f"warning: gnuplot not found on PATH; {png} not written", file=sys.stderr)
            return
        with open(self.dir / "episodes.csv", encoding="utf-8") as f:
            lines = f.read().splitlines()[1:]
        if not lines:
            print(f"note: no game finished yet; {png} not written", file=sys.stderr)
            return
        rows = np.array([[float(x) for x in ln.split(",")] for ln in lines]).reshape(-1, 7)
        ret = rows[:, 3]
        mean = np.convolve(ret, np.ones(100), "full")[:len(ret)] / np.minimum(
            np.arange(1, len(ret) + 1), 100)
        data = "\n".join(f"{s:.0f},{r:.6g},{m:.6g}" for s, r, m in zip(rows[:, 2], ret, mean))
        ev = ""
        if eval_point is not None:
            ev = (f"$eval << EOD\n{eval_point[0]:.0f},{eval_point[1]:.6g}\nEOD\n")
        script = (
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "  set terminal pngcairo size 960,540 noenhanced\n} else {\n"
            "  set terminal png size 960,540 noenhanced\n}\n"
            f"set output '{str(png).replace(chr(39), chr(39) * 2)}'\n"
            f"set title '{self.env_id}: raw game returns during training'\n"
            "set datafile separator ','\nset xlabel 'env steps'\nset ylabel 'game return'\n"
            "set key bottom right\nset grid\n"
            f"$d << EOD\n{data}\nEOD\n{ev}"
            "plot $d using 1:2 with points pt 7 ps 0.3 lc rgb '#b0b0b0' title 'game', "
            "$d using 1:3 with lines lw 2 lc rgb '#1f77b4' title 'mean of 100'"
            + (", $eval using 1:2 with points pt 9 ps 2 lc rgb '#d62728' title 'evaluation'"
               if ev else "") + "\n")
        (self.dir / "learning_curve.gp").write_text(script, encoding="utf-8")
        r = subprocess.run([gp, str(self.dir / "learning_curve.gp")], capture_output=True)
        if r.returncode != 0:
            print(f"warning: gnuplot failed: {r.stderr.decode()[-200:]}; {png} not written",
                  file=sys.stderr)


class Run:
    """One training run: the learner, the env loop, DIR's files, checkpoints."""

    def __init__(self, args, learner, loop, log, ckpt, state):
        self.args, self.learner, self.loop, self.log = args, learner, loop, log
        self.ckpt = ckpt
        self.state = state                 # the run's counters (run_state.json)
        self.recent = list(state.get("recent_returns", []))
        self.t_start = time.monotonic()
        self.rate_mark = (self.t_start, loop.env_steps)
        self.logged_at = None
        self.save_seconds = 0.0
        self.checks = []        # --target-eval: each confirming evaluation's summary
        self.confirmed = None   # the one that reached the target: (returns, lengths, seconds)
        self.check_after = 0    # games (len of all games seen) before the next check

    def total_steps(self):
        return self.state["env_steps"] + self.loop.env_steps

    def counters(self):
        """run_state.json: what the checkpoint does not hold (the run's own counters)."""
        lp = self.loop
        timing = {k: self.state["timing"].get(k, 0.0) + v for k, v in lp.timing.items()}
        return {"env_steps": self.total_steps(), "games": self.state["games"] + lp.games,
                "life_losses": self.state["life_losses"] + lp.life_losses,
                "episode": self.log.episode, "recent_returns": self.recent[-100:],
                "wall_time": self.state["wall_time"] + time.monotonic() - self.t_start,
                "timing": timing}

    def drain_games(self):
        base = self.state["env_steps"]
        for env, steps, ret, length, term, trunc in self.loop.episodes:
            self.log.game(env, base + steps, ret, length, term, trunc)
            self.recent.append(ret)
        del self.recent[:-100]
        self.loop.episodes.clear()

    def metrics(self):
        m = self.learner.metrics()
        c = self.counters()
        now = time.monotonic()
        t0, s0 = self.rate_mark
        rate = (self.loop.env_steps - s0) / max(now - t0, 1e-9)
        self.rate_mark = (now, self.loop.env_steps)
        m["wall_time"] = c["wall_time"]
        m["atari_env_steps"] = c["env_steps"]
        m["atari_frames"] = 4 * c["env_steps"]
        m["atari_games"] = c["games"]
        m["atari_life_losses"] = c["life_losses"]
        m["atari_return_mean_100"] = float(np.mean(self.recent)) if self.recent else 0.0
        m["atari_env_steps_per_second"] = rate
        for k, v in c["timing"].items():
            m[f"atari_time_{k}"] = v
        m["atari_step_calls_act"] = self.loop.step_calls["act"]
        m["atari_step_calls_update"] = self.loop.step_calls["update"]
        return m

    def save(self):
        self.loop.flush()
        t0 = time.monotonic()
        self.learner.save(self.ckpt, include_replay=True)
        self.save_seconds = time.monotonic() - t0
        tmp = self.ckpt.parent / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.counters()), encoding="utf-8")
        os.replace(tmp, self.ckpt.parent / STATE_FILE)

    def reached_target(self):
        """--target-return: the mean raw return of the last --target-games games reaches it
        (with --target-eval, then an evaluation's mean too)."""
        a = self.args
        k = a.target_games
        games = self.log.episode
        bar = a.target_propose if a.target_eval and a.target_propose is not None else \
            a.target_return
        if (a.target_return is None or len(self.recent) < k or games < self.check_after or
                float(np.mean(self.recent[-k:])) < bar):
            return False
        if not a.target_eval:
            return True
        self.loop.flush()  # the owed updates first: the evaluation acts on their weights
        t0 = time.monotonic()
        seed = (int(self.learner.config["seed"]) ^ 0x6576616C) + len(self.checks)
        rets, lens = atari.evaluate(self.learner, a.env, max(a.eval_episodes, 1), seed,
                                    num_envs=a.eval_envs, epsilon=a.eval_epsilon,
                                    num_threads=a.threads)
        dt = time.monotonic() - t0
        mean = float(np.mean(rets))
        self.checks.append({"env_steps": self.total_steps(), "return_mean": mean,
                            "seconds": dt, "env_seed": seed})
        if mean >= a.target_return:
            self.confirmed = (rets, lens, dt, seed)
            return True
        self.check_after = games + k
        return False

    def train(self, stop):
        """Until --steps, --target-return, a stop request or the wall budget; returns why it
        stopped: done, target, interrupted or budget."""
        a = self.args
        start = self.total_steps()
        next_log = (start // a.log_every + 1) * a.log_every
        ce = a.checkpoint_every
        next_ckpt = (start // ce + 1) * ce if ce else None
        deadline = self.t_start + 60.0 * a.max_minutes if a.max_minutes else None
        while self.total_steps() < a.steps:
            if stop["requested"]:
                return "interrupted"
            if deadline is not None and time.monotonic() >= deadline:
                return "budget"
            self.loop.step()
            if self.loop.episodes:
                self.drain_games()
                if self.reached_target():
                    return "target"
            s = self.total_steps()
            if s >= next_log:
                self.log.interval(self.metrics())
                self.logged_at = s
                while next_log <= s:
                    next_log += a.log_every
            if next_ckpt is not None and s >= next_ckpt:
                self.save()
                while next_ckpt <= s:
                    next_ckpt += ce
        return "done"


def load_state(args):
    fresh = {"env_steps": 0, "games": 0, "life_losses": 0, "episode": 0, "recent_returns": [],
             "wall_time": 0.0, "timing": {}}
    if not args.resume:
        return fresh
    p = Path(args.resume).parent / STATE_FILE
    if not p.is_file():
        return fresh
    state = json.loads(p.read_text(encoding="utf-8"))
    fresh.update(state)
    return fresh


def main(argv=None):
    t_process = time.monotonic()  # the wall time to a score counts the start (learner, envs)
    args = parse_args(argv)
    from .errors import ConfigError, FoxhuntError
    from .learner import Learner
    try:
        probe = atari.make_vec(args.env, 1)
        keys = atari.learner_keys(probe)
        probe.close()
        cfg_path, cfg = build_config(args, keys)
        learner = Learner(cfg, library=args.library)
    except (ImportError, ValueError, TypeError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except FoxhuntError as exc:  # no library, backend unavailable, out of memory
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with learner:
        return _run(args, learner, cfg_path, cfg, FoxhuntError, t_process)


def _run(args, learner, cfg_path, cfg, FoxhuntError, t_process):
    seed = int(learner.config["seed"])
    n = learner.num_envs
    if args.resume:
        try:
            learner.load(args.resume, include_replay=True)
        except (FoxhuntError, OSError) as exc:
            print(f"error: --resume {args.resume}: {exc}", file=sys.stderr)
            return 1
    state = load_state(args)
    m0 = learner.metrics()
    if args.resume and not state["env_steps"]:  # a checkpoint without its run_state.json
        state["env_steps"] = int(m0["env_steps"])
    out = Path(args.out or f"runs/{args.env.replace('/', '-')}-seed{seed}")
    print(f"foxhunt_dqn.train: {args.env}, config {cfg_path}, backend {m0['backend']} "
          f"({m0['device']}), seed {seed}, {n} envs", flush=True)
    start = int(state["env_steps"])
    if args.resume:
        print(f"resumed from {args.resume} at {start} env steps", flush=True)
    log = RunLog(out, args.env, args.steps, int(state["episode"]), bool(args.resume), args.quiet)
    vec = atari.make_vec(args.env, n, train=True, num_threads=args.threads)
    loop = atari.AtariLoop(learner, vec, mode=args.loop)
    # resumed runs see fresh games, not a replay of the first ones (as fhd-host train)
    env_seed = (seed ^ (start * 0x9E3779B97F4A7C15)) % (2 ** 31) if start else seed % (2 ** 31)
    run = Run(args, learner, loop, log, out / "checkpoint.safetensors", state)
    stop = {"requested": False}

    def on_sigint(signum, frame):
        stop["requested"] = True
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C ends the process

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        loop.reset(env_seed)
        why = run.train(stop)
        train_end = time.monotonic()
        run.drain_games()
        log.end_line()
        loop.flush()  # the updates owed for the last call, before the last line and the save
        if run.logged_at != run.total_steps():
            log.interval(run.metrics())
        run.save()
    except (FoxhuntError, OSError) as exc:
        log.end_line()
        print(f"error: train: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, old)
        vec.close()
        log.close()
    c = run.counters()
    # wall time from this process's start (earlier pieces' whole wall added) to the stop
    stop_wall = run.state["wall_time"] + train_end - t_process
    this = c["env_steps"] - start
    wall = train_end - run.t_start  # training only: saving a large replay takes a while
    print(f"trained {c['env_steps']} env steps ({this} in this run), {loop.updates} updates "
          f"in {wall:.2f} s ({this / max(wall, 1e-9):.0f} env steps/s); checkpoint "
          f"{run.ckpt} (saved in {run.save_seconds:.1f} s)", flush=True)
    if why == "target":
        k = args.target_games
        how = (f"the evaluation's mean {run.checks[-1]['return_mean']:.2f} (proposed by the "
               f"last {k} games' {np.mean(run.recent[-k:]):.2f})" if run.confirmed else
               f"the last {k} games' mean {np.mean(run.recent[-k:]):.2f}")
        print(f"target reached: {how} >= {args.target_return} at {c['env_steps']} env steps, "
              f"{stop_wall:.1f} s of wall time", flush=True)
    elif why != "done":
        print(f"{'interrupted' if why == 'interrupted' else 'wall budget reached'} at "
              f"{c['env_steps']} env steps; continue with the same command and --resume "
              f"{run.ckpt}", flush=True)
        log.plot()
        return 130 if why == "interrupted" else 0
    point = None
    if args.eval_episodes or run.confirmed:
        t0 = time.monotonic()
        if run.confirmed:  # the evaluation that confirmed the target is the final one
            rets, lens, secs, ev_seed = run.confirmed
        else:
            ev_seed = seed ^ 0x6576616C
            rets, lens = atari.evaluate(learner, args.env, args.eval_episodes, ev_seed,
                                        num_envs=args.eval_envs, epsilon=args.eval_epsilon,
                                        num_threads=args.threads)
            secs = time.monotonic() - t0
        mean, std = float(np.mean(rets)), float(np.std(rets))
        ev = {"env": args.env, "env_seed": ev_seed, "episodes": len(rets),
              "epsilon": args.eval_epsilon, "return_mean": mean, "return_std": std,
              "seconds": secs, "env_steps": c["env_steps"],
              "returns": rets, "lengths": lens, "stopped": why,
              "wall_time_at_stop": stop_wall, "target_checks": run.checks}
        (out / "eval.json").write_text(json.dumps(ev, indent=1), encoding="utf-8")
        point = (c["env_steps"], mean)
        print(f"eval_return_mean={mean:.2f} eval_return_std={std:.2f} episodes={len(rets)} "
              f"epsilon={args.eval_epsilon}", flush=True)
    log.plot(point)
    return 0
