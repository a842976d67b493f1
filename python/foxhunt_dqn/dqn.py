"""foxhunt_dqn.DQN: Stable-Baselines3's DQN interface over the foxhunt-dqn learner.

    from foxhunt_dqn import DQN, evaluate_policy
    model = DQN("CartPole-v1", learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
                gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                policy_kwargs={"net_arch": [256, 256]}, seed=0)
    model.learn(50_000, progress_bar=True)
    model.save("dqn_cartpole")                       # dqn_cartpole.safetensors (+ .json)
    model = DQN.load("dqn_cartpole", env="CartPole-v1")
    mean, std = evaluate_policy(model, "CartPole-v1", n_eval_episodes=10)

evaluate_policy on the training env itself (model.get_env()) resets it; the training loop
then starts a new step chain (no transition pairs an observation from before the evaluation
with one after it), so an env of its own is better but not needed.

Every keyword, its SB3 unit and the learner config key it becomes is in
foxhunt_dqn.sb3_params.PARAMS (python/README.md prints it). Needs gymnasium >= 1.1.
"""

import json
import os
import struct
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import gymnasium
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from . import sb3_params
from ._progress import make_bar
from ._rollout import Rates, Rollout, autoreset_mode
from .gym import SpaceMap
from ._library import load_library
from .learner import Learner

__all__ = ["DQN", "BaseCallback", "evaluate_policy"]

_POLICIES = ("MlpPolicy", "CnnPolicy")
_SUFFIX = ".safetensors"
# total_timesteps assumed for the exploration schedule until learn() says it (predict before
# learn, SB3's default of a fresh model)
_PROVISIONAL_T = 100_000


def _vector_env(env):
    """(vector env, owned): an id or a single Env becomes a one-env SAME_STEP SyncVectorEnv."""
    if isinstance(env, str):
        env_id = env
        return gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(env_id)],
                                              autoreset_mode=AutoresetMode.SAME_STEP), True
    if isinstance(env, VectorEnv):
        return env, False
    if isinstance(env, gymnasium.Env):
        return gymnasium.vector.SyncVectorEnv([lambda: env],
                                              autoreset_mode=AutoresetMode.SAME_STEP), False
    raise TypeError(f"env: expected an env id, a gymnasium.Env or a VectorEnv, got "
                    f"{type(env).__name__}")


def _sidecar(path):
    return Path(str(path) + ".json")


def _checkpoint_path(path):
    p = Path(os.fspath(path))
    return p if p.suffix == _SUFFIX else Path(str(p) + _SUFFIX)


def checkpoint_config(path):
    """The learner config recorded in a checkpoint's safetensors metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["config"])


class BaseCallback:
    """SB3-shaped callback: subclass and override _on_step (return False to stop training).
    Attributes set by DQN.learn: model, n_calls (vector env calls), num_timesteps, locals
    (the loop's rewards, dones, infos of the last call)."""

    def __init__(self, verbose=0):
        self.verbose = verbose
        self.model = None
        self.n_calls = 0
        self.num_timesteps = 0
        self.locals = {}

    def init_callback(self, model):
        self.model = model

    def on_training_start(self, locals_, globals_):
        self.locals = locals_
        self._on_training_start()

    def on_step(self):
        self.n_calls += 1
        self.num_timesteps = self.model.num_timesteps
        return self._on_step()

    def on_training_end(self):
        self._on_training_end()

    def _on_training_start(self):
        pass

    def _on_step(self):
        return True

    def _on_training_end(self):
        pass


class _FunctionCallback(BaseCallback):
    """A plain callable f(locals, globals) -> bool | None, as SB3 accepts."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def _on_step(self):
        return self.fn(self.locals, globals()) is not False


def _callbacks(callback):
    if callback is None:
        return []
    if isinstance(callback, (list, tuple)):
        return [c for cb in callback for c in _callbacks(cb)]
    if isinstance(callback, BaseCallback):
        return [callback]
    if callable(callback):
        return [_FunctionCallback(callback)]
    raise TypeError(f"callback: expected a BaseCallback, a callable or a list, got "
                    f"{type(callback).__name__}")


class DQN:
    """DQN(env, **keywords) or DQN("MlpPolicy", env, **keywords), with SB3's keywords and
    defaults (foxhunt_dqn.sb3_params.PARAMS); library= picks libfoxhunt_dqn.so.

    env: an env id, a gymnasium.Env, or a gymnasium vector env (SyncVectorEnv /
    AsyncVectorEnv, any autoreset mode). Box observations of any shape and float dtype, or
    uint8 images (ABI 1.1) of shape (H, W), (C, H, W) or (H, W, C): the learner gets
    obs_shape [C, H, W] and obs_dtype uint8 (scale 1/255, as SB3 normalizes images), and a
    channel-last space is transposed to channel first (foxhunt_dqn.gym.SpaceMap says how
    the layout is told). Discrete or MultiDiscrete actions (MultiDiscrete: one learner
    branch per entry). "CnnPolicy" is the learner's torso "nature" (sb3_params.to_config);
    "MlpPolicy" on images is a plain MLP over the scaled pixels."""

    def __init__(self, env, *args, library=None, **kwargs):
        self.policy = "MlpPolicy"
        if isinstance(env, str) and env in _POLICIES:
            if not args:
                raise TypeError(f"DQN({env!r}, env, ...): env is missing")
            self.policy = env
            env, args = args[0], args[1:]
        elif isinstance(env, str) and env.endswith("Policy"):
            raise sb3_params.UnsupportedKeyword(f"DQN: policy {env!r} is not supported "
                                                f"(MlpPolicy, CnnPolicy)")
        if args:
            raise TypeError("DQN: pass the hyperparameters as keywords (SB3's names)")
        sb3_params.check_keywords(kwargs)
        self.kwargs = dict(kwargs)
        self.library = library
        self.verbose = int(kwargs.get("verbose", 0))
        self.seed = kwargs.get("seed")
        if self.seed is None:
            self.seed = int.from_bytes(os.urandom(6), "little")
        self.kwargs["seed"] = self.seed
        self.env, self._owned = _vector_env(env)
        self.n_envs = int(self.env.num_envs)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self._check_spaces()
        self.space = SpaceMap(self.observation_space, self.action_space, images=True)
        if self.policy == "CnnPolicy" and not self.space.image:
            raise TypeError(f"DQN: CnnPolicy needs a uint8 image observation space (H, W), "
                            f"(C, H, W) or (H, W, C); got {self.observation_space}")
        self.num_timesteps = 0
        self._total_timesteps = None
        self.learner = None
        self._rollout = None
        self._build(_PROVISIONAL_T)

    # ---- construction ------------------------------------------------------------------------

    def _check_spaces(self):
        obs = self.observation_space
        if not isinstance(obs, spaces.Box):
            raise TypeError(f"observation space {obs}: only Box is supported")
        if obs.dtype == np.uint8 and len(obs.shape) in (2, 3):
            lib = load_library(self.library)
            if not lib.has_minor1:
                raise TypeError(f"observation space {obs}: uint8 images need an ABI 1.1 "
                                f"library; {lib.path} is ABI {lib.abi_major}.{lib.abi_minor}")
        elif not np.issubdtype(obs.dtype, np.floating):
            raise TypeError(f"observation space {obs}: Box of a float dtype, or uint8 images "
                            f"of shape (H, W), (C, H, W) or (H, W, C), are supported")

    def learner_config(self, total_timesteps):
        """The learner config these keywords give for a run of total_timesteps env steps."""
        cfg = sb3_params.to_config(self.kwargs, self.n_envs, total_timesteps, self.policy)
        cfg.update(self.space.config())
        cfg["num_envs"] = self.n_envs
        return cfg

    def _build(self, total_timesteps):
        cfg = self.learner_config(total_timesteps)
        old = self.learner
        self.learner = Learner(cfg, library=self.library)
        if old is not None:
            old.close()
        self._config = cfg
        self._rollout = None

    def _reschedule(self, total_timesteps):
        """Move a learner with data to the config of a run of total_timesteps (the
        exploration schedule is resume-overridable): through a checkpoint with its replay
        and step() state, an exact resume under the new schedule."""
        cfg = self.learner_config(total_timesteps)
        self._total_timesteps = total_timesteps
        if cfg == self._config:
            return
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "resume.safetensors")
            self.learner.save(path, include_replay=True)
            new = Learner(cfg, library=self.library)
            try:
                new.load(path, include_replay=True)
            except BaseException:
                new.close()
                raise
        self.learner.close()
        self.learner, self._config = new, cfg
        if self._rollout is not None:
            self._rollout.learner = new

    # ---- SB3's methods -----------------------------------------------------------------------

    def get_env(self):
        return self.env

    @property
    def exploration_rate(self):
        return float(self.learner.metrics()["epsilon"])

    def learn(self, total_timesteps, callback=None, log_interval=4, tb_log_name="DQN",
              reset_num_timesteps=True, progress_bar=False):
        """Train for total_timesteps env steps (over all envs). Returns self."""
        total = int(total_timesteps)
        if total < 1:
            raise ValueError(f"learn: total_timesteps is {total}; at least 1")
        if self.num_timesteps == 0 and self.learner.metrics()["env_steps"] == 0:
            self._build(total)  # the exploration schedule is a fraction of this run
            self._total_timesteps = total
        elif not reset_num_timesteps:
            # SB3 goes on over num_timesteps + total_timesteps: the same fraction of that
            self._reschedule(self.num_timesteps + total)
        elif self.learner_config(total) != self._config:
            warnings.warn("DQN.learn(reset_num_timesteps=True) on a trained model: the "
                          "learner's exploration goes on from its env step count (SB3 "
                          "restarts it); the schedule stays epsilon_decay_steps "
                          f"{self._config['epsilon_decay_steps']}", stacklevel=2)
        if reset_num_timesteps:
            self.num_timesteps = 0
        if self._rollout is None or reset_num_timesteps:
            warm = int(self.kwargs.get("learning_starts",
                                       sb3_params.PARAMS["learning_starts"]["default"]))
            self._rollout = Rollout(self.learner, self.env, self.space, warm,
                                    np.random.default_rng(self.seed))
            # SB3 takes random warm-up actions while num_timesteps < learning_starts: again
            # after reset_num_timesteps, not when a loaded model goes on
            self._rollout.env_steps = self.num_timesteps
            self._rollout.reset(seed=int(self.seed))
        ro = self._rollout
        cbs = _callbacks(callback)
        loop = {"self": self, "total_timesteps": total, "rewards": None, "dones": None}
        for cb in cbs:
            cb.init_callback(self)
            cb.on_training_start(loop, globals())
        window = int(self.kwargs.get("stats_window_size", 100))
        bar = make_bar(total, progress_bar)
        rates = Rates()
        start_steps, t0 = ro.env_steps, time.monotonic()
        episodes_logged = len(ro.returns)
        try:
            while ro.env_steps - start_steps < total:
                before = ro.env_steps
                rewards, dones = ro.step()
                self.num_timesteps += ro.env_steps - before
                loop.update(rewards=rewards, dones=dones)
                if cbs and not all([cb.on_step() for cb in cbs]):
                    break
                if bar is not None:
                    rates.add(ro.env_steps, ro.updates)
                    if bar.due():
                        sps, ups = rates.rates()
                        bar.update(ro.env_steps - start_steps, self._fields(sps, ups, window))
                if self.verbose and log_interval and dones.any():
                    n = len(ro.returns)
                    if n // log_interval > episodes_logged // log_interval:
                        episodes_logged = n
                        self._log_line(t0, start_steps, window)
        finally:
            if bar is not None:
                sps, ups = rates.rates()
                bar.update(ro.env_steps - start_steps, self._fields(sps, ups, window))
                bar.close()
            for cb in cbs:
                cb.on_training_end()
        return self

    def _recent(self, window):
        r = self._rollout.returns[-window:]
        return float(np.mean(r)) if r else None

    def _fields(self, sps, ups, window):
        recent = self._recent(window)
        return {"env steps/s": f"{sps:.0f}", "updates/s": f"{ups:.0f}",
                "return": "-" if recent is None else f"{recent:.1f}"}

    def _log_line(self, t0, start_steps, window):
        ro = self._rollout
        dt = max(time.monotonic() - t0, 1e-9)
        fps = (ro.env_steps - start_steps) / dt
        print(f"episodes {len(ro.returns)} | timesteps {self.num_timesteps} | "
              f"ep_rew_mean {self._recent(window):.2f} | fps {fps:.0f} | updates {ro.updates}",
              file=sys.stdout, flush=True)

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        """(actions, state) for one observation (the space's shape) or a batch (n, ...);
        epsilon-greedy with the schedule's current epsilon unless deterministic."""
        obs = np.asarray(observation)
        single = obs.shape == tuple(self.observation_space.shape)
        rows = self.space.learner_obs(obs[None] if single else obs)
        actions = self.space.to_env(self.learner.act(rows, explore=not deterministic))
        return (actions[0] if single else actions), state

    # ---- checkpoints -------------------------------------------------------------------------

    def save(self, path, include_replay=False):
        """The learner's safetensors checkpoint at path (".safetensors" added when missing)
        and the keywords in path + ".json" beside it (for DQN.load)."""
        p = _checkpoint_path(path)
        self.learner.save(p, include_replay=include_replay)
        kwargs = {k: v for k, v in self.kwargs.items() if k != "policy_kwargs"}
        pk = dict(self.kwargs.get("policy_kwargs") or {})
        for key in ("activation_fn", "optimizer_class"):
            if key in pk:
                pk[key] = getattr(pk[key], "__name__", str(pk[key]))
        meta = {"format": "foxhunt-dqn-sb3", "format_version": 1, "policy": self.policy,
                "kwargs": kwargs,
                "policy_kwargs": pk, "num_timesteps": self.num_timesteps,
                "total_timesteps": self._total_timesteps or _PROVISIONAL_T,
                "n_envs": self.n_envs, "config": self._config}
        _sidecar(p).write_text(json.dumps(meta, indent=1, default=str))
        return p

    @classmethod
    def load(cls, path, env=None, device=None, library=None, include_replay=False, **kwargs):
        """A DQN from save()'s files. env: the env to run (id, Env or vector env); without it
        the spaces must come from the saved keywords' env, so pass it. Keywords given here
        override the saved ones (SB3's custom_objects-free form)."""
        p = _checkpoint_path(path)
        side = _sidecar(p)
        meta = json.loads(side.read_text()) if side.is_file() else None
        if env is None:
            raise TypeError("DQN.load: pass env= (the spaces are not stored in the checkpoint)")
        if meta is not None:
            kw = dict(meta["kwargs"])
            if meta["policy_kwargs"]:
                pk = dict(meta["policy_kwargs"])
                for key in ("activation_fn", "optimizer_class"):
                    if key in pk:  # names stand for the classes the checks accept
                        pk[key] = type(pk[key], (), {})
                kw["policy_kwargs"] = pk
            total = int(meta["total_timesteps"])
        else:  # a checkpoint without the sidecar: its own config, in the learner's units
            cfg = checkpoint_config(p)
            kw, total = {"learner_config": cfg}, _PROVISIONAL_T
        kw.update(kwargs)
        if device is not None:
            kw["device"] = device
        policy = meta.get("policy", "MlpPolicy") if meta is not None else "MlpPolicy"
        model = cls(policy, env, library=library, **kw)
        model._build(total)
        model._total_timesteps = total
        model.learner.load(p, include_replay=include_replay)
        model.num_timesteps = int(meta["num_timesteps"]) if meta else 0
        return model

    def close(self):
        if self.learner is not None:
            self.learner.close()
        if self._owned:
            self.env.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def evaluate_policy(model, env, n_eval_episodes=10, deterministic=True, render=False,
                    callback=None, reward_threshold=None, return_episode_rewards=False,
                    warn=True):
    """SB3's evaluate_policy: (mean, std) of the episode returns over n_eval_episodes, or
    (returns, lengths) with return_episode_rewards. env: an id, a gymnasium.Env or a vector
    env (any autoreset mode; the episodes are spread over its envs as SB3 does:
    (n_eval_episodes + i) // n_envs for env i)."""
    vec, owned = _vector_env(env)
    try:
        n = int(vec.num_envs)
        if hasattr(model, "space"):  # a DQN
            images = model.space.image
        else:  # a bare Learner: images when it takes uint8
            images = model.obs_dtype == np.uint8
        space = SpaceMap(vec.single_observation_space, vec.single_action_space, images=images)
        mode = autoreset_mode(vec)
        targets = np.array([(n_eval_episodes + i) // n for i in range(n)], np.int64)
        counts = np.zeros(n, np.int64)
        ret, length = np.zeros(n), np.zeros(n, np.int64)
        returns, lengths = [], []
        resetting = np.zeros(n, bool)
        obs, _ = vec.reset()
        while (counts < targets).any():
            rows = space.learner_obs(obs)
            if hasattr(model, "learner"):
                a = model.learner.act(rows, explore=not deterministic)
            else:  # a bare Learner
                a = model.act(rows, explore=not deterministic)
            obs, rew, term, trunc, infos = vec.step(space.to_env(a))
            valid = ~resetting
            done = (np.asarray(term) | np.asarray(trunc)) & valid
            ret += np.where(valid, rew, 0.0)
            length += valid
            if callback is not None:
                callback(locals(), globals())
            for i in np.flatnonzero(done):
                if counts[i] < targets[i]:
                    returns.append(float(ret[i]))
                    lengths.append(int(length[i]))
                    counts[i] += 1
                ret[i], length[i] = 0.0, 0
            if mode == AutoresetMode.NEXT_STEP:
                resetting = done
            elif mode == AutoresetMode.DISABLED and done.any():
                obs, _ = vec.reset(options={"reset_mask": done})
    finally:
        if owned:
            vec.close()
        ro = getattr(model, "_rollout", None)
        if ro is not None and vec is ro.vec:
            ro.reset()  # the training env was reset here: the loop starts a new step chain
    mean, std = float(np.mean(returns)), float(np.std(returns))
    if reward_threshold is not None:
        assert mean > reward_threshold, f"mean reward {mean:.2f} <= {reward_threshold:.2f}"
    if return_episode_rewards:
        return returns, lengths
    return mean, std
