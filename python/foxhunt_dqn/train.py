"""Command line trainer: python -m foxhunt_dqn.train --env CartPole-v1 [options].

An ALE id (--env ALE/Pong-v5) runs the Atari trainer instead (foxhunt_dqn.atari_train: its
own options and run directory, see --env ALE/Pong-v5 --help).

Trains on a Gymnasium environment (Box observations; Discrete or MultiDiscrete actions),
shows progress on stderr (a bar on a terminal, plain lines otherwise), optionally saves a
checkpoint, evaluates greedily and prints, on stdout:

    eval_return_mean=<x> eval_return_std=<y> episodes=<n>

Exit status: 0 on success, 1 when saving the checkpoint failed (the evaluation line is still
printed), 2 for bad arguments or a config the library rejects.
"""

import argparse
import json
import sys


def _parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m foxhunt_dqn.train",
        description="Train a foxhunt-dqn learner on a Gymnasium environment.",
    )
    p.add_argument("--env", required=True, help="Gymnasium env id, e.g. CartPole-v1")
    p.add_argument("--steps", type=int, default=50000, help="env steps (all envs together)")
    p.add_argument("--envs", type=int, default=1, help="parallel envs (SyncVectorEnv)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", help="JSON file of config keys over the default config")
    p.add_argument("--save", metavar="PATH", help="write a checkpoint here after training")
    p.add_argument("--save-replay", action="store_true", help="include the replay buffer")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--check-every", type=int, default=0, metavar="N",
                   help="score the greedy policy every N env steps and keep the best one")
    p.add_argument("--check-episodes", type=int, default=10)
    p.add_argument("--library", help="path of libfoxhunt_dqn.so")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    args = p.parse_args(argv)
    if args.steps < 1 or args.envs < 1 or args.eval_episodes < 0 or args.check_every < 0:
        p.error("--steps and --envs must be >= 1, --eval-episodes and --check-every >= 0")
    if args.check_episodes < 1:
        p.error("--check-episodes must be >= 1")
    return args


def _env_arg(argv):
    """The --env value of argv (None when absent), to pick the Atari trainer before parsing."""
    for i, a in enumerate(argv):
        if a == "--env" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--env="):
            return a[len("--env="):]
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    env = _env_arg(argv)
    if env is not None and env.startswith("ALE/"):
        from .atari_train import main as atari_main  # ale-py's AtariVectorEnv (atari.py)
        return atari_main(argv)
    args = _parse_args(argv)
    try:
        from . import gym as fgym
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .errors import ConfigError, FoxhuntError

    config = None
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"error: --config {args.config}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(config, dict):
            print(f"error: --config {args.config}: expected a JSON object", file=sys.stderr)
            return 2
    try:
        learner, history = fgym.train(
            args.env,
            config=config,
            total_steps=args.steps,
            num_envs=args.envs,
            seed=args.seed,
            eval_episodes=0,
            progress=not args.quiet,
            library=args.library,
            check_every=args.check_every,
            check_episodes=args.check_episodes,
        )
    except (ConfigError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    status = 0
    with learner:
        if not args.quiet:
            print(
                f"trained {history['env_steps']} env steps, "
                f"{len(history['episode_returns'])} episodes in {history['train_time']:.1f} s",
                file=sys.stderr,
            )
            best = history["best_check"]
            if best is not None:
                print(f"kept the policy of env step {best['env_steps']} "
                      f"(check mean {best['mean']:.1f})", file=sys.stderr)
        if args.save:
            try:
                learner.save(args.save, include_replay=args.save_replay)
                if not args.quiet:
                    print(f"saved {args.save}", file=sys.stderr)
            except (FoxhuntError, OSError) as exc:
                print(f"error: saving {args.save}: {exc}", file=sys.stderr)
                status = 1
        n = args.eval_episodes
        if n:
            mean, std = fgym.evaluate(learner, args.env, episodes=n, seed=args.seed + 10007)
        else:
            mean, std = float("nan"), float("nan")
        print(f"eval_return_mean={mean:.2f} eval_return_std={std:.2f} episodes={n}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
