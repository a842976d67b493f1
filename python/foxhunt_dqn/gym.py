"""Gymnasium adapter: train a Learner on any environment with a Box observation space and a
Discrete or MultiDiscrete action space, single or vectorised.

Spaces
  Box observations of any shape are flattened to obs_dim = prod(shape) float32 values, except
  uint8 images (a uint8 Box of rank 2 or 3), which the learner takes as they are: obs_shape
  [C, H, W] (channel-last spaces transposed, as SpaceMap says), obs_dtype uint8 and the network
  input scaled by 1/255 (train(images=False) flattens them to float32 instead).
  Discrete(n, start) is one branch of n actions (config "actions" = [n]).
  MultiDiscrete(nvec, start) is action branching: one branch per entry of nvec (flattened, C
  order), config "actions" = nvec. Learner actions (N, D) are mapped back to the env's dtype,
  shape and `start` offsets.

Episode ends and auto-reset
  Environments named by id are wrapped in gymnasium.vector.SyncVectorEnv with
  autoreset_mode=AutoresetMode.SAME_STEP: when an episode ends, the observation returned by
  step() is already the first one of the next episode and infos["final_obs"][i] is the true
  last one. Both are handed to Learner.step (obs and final_obs), with terminated and truncated
  passed through separately (terminated: no bootstrap; truncated: bootstrap from final_obs).
  A vector env you build yourself may use SAME_STEP or DISABLED (ended envs are then reset
  here with reset(options={"reset_mask": ...})). NEXT_STEP is refused: there the step after
  an episode end returns the reset observation for that env only, and the library's step()
  stores a transition for every env on every call, so that pseudo-transition cannot be left
  out. A single (non-vector) gymnasium.Env is wrapped in a one-env SAME_STEP SyncVectorEnv.
Requires gymnasium >= 1.1.
"""

import math
import time
import warnings

import numpy as np

try:
    import gymnasium
    from gymnasium import spaces
    from gymnasium.vector import AutoresetMode, VectorEnv
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "foxhunt_dqn.gym needs gymnasium >= 1.1: pip install 'foxhunt-dqn[gym]' "
        f"(or pip install 'gymnasium>=1.1') ({exc})"
    ) from exc

from ._progress import Progress, fmt_fields
from .learner import Learner

__all__ = [
    "DEFAULT_CONFIG",
    "SpaceMap",
    "make_vector_env",
    "config_for",
    "train",
    "evaluate",
]

# Dueling double DQN with 3-step returns. On CartPole-v1 (50k env steps, seeds 0-2) the final
# greedy policy scores 500, 284, 500 over 100 episodes, and 500 on all three with
# check_every=5000 (see python/README.md). A reasonable starting point for other small
# control tasks; keys given by the caller win.
DEFAULT_CONFIG = {
    "hidden": [128, 128],
    "dueling": True,
    "double_dqn": True,
    "n_step": 3,
    "gamma": 0.99,
    "loss": "huber",
    "lr": 6.3e-4,
    "max_grad_norm": 10.0,
    "batch_size": 64,
    "replay_capacity": 50000,
    "learning_starts": 1000,
    "train_freq": 1,
    "gradient_steps": 1,
    "target_update_interval": 500,
    "tau": 1.0,
    "epsilon_start": 1.0,
    "epsilon_end": 0.04,
    "epsilon_decay_steps": 16000,
}


class SpaceMap:
    """Maps between a Gymnasium (single-env) observation/action space and the learner's
    observations and actions (N, D) int32.

    Observations are flat (N, S) float32, or, with images=True and a uint8 Box of rank 2 or 3
    (ABI 1.1), uint8 images (N, C, H, W): (H, W) is one channel (1, H, W); a rank-3 shape
    is channel first (C, H, W) when its first dimension is the smallest, as SB3's
    is_image_space_channels_first decides, else channel last (H, W, C) and transposed to
    (C, H, W) here (one copy per batch, what SB3's VecTransposeImage does)."""

    def __init__(self, observation_space, action_space, images=False):
        if not isinstance(observation_space, spaces.Box):
            raise TypeError(
                f"observation space: only Box is supported, got {observation_space}"
            )
        self.obs_shape = tuple(observation_space.shape)
        self.obs_dim = int(math.prod(self.obs_shape)) if self.obs_shape else 1
        self.image = bool(images) and observation_space.dtype == np.uint8 and \
            len(self.obs_shape) in (2, 3)
        self.hwc = False
        if self.image:
            shape = self.obs_shape
            if len(shape) == 2:
                shape = (1,) + shape
            elif int(np.argmin(shape)) != 0:  # channel last: (H, W, C)
                self.hwc = True
                shape = (shape[2], shape[0], shape[1])
            self.chw = tuple(int(d) for d in shape)
        self.obs_dtype = np.dtype(np.uint8) if self.image else np.dtype(np.float32)
        self.action_space = action_space
        if isinstance(action_space, spaces.Discrete):
            self.actions = [int(action_space.n)]
            self.start = np.array([int(action_space.start)], dtype=np.int64)
            self.act_shape = ()
        elif isinstance(action_space, spaces.MultiDiscrete):
            nvec = np.asarray(action_space.nvec)
            self.actions = [int(k) for k in nvec.ravel()]
            self.start = np.asarray(action_space.start, dtype=np.int64).ravel()
            self.act_shape = tuple(nvec.shape)
        else:
            raise TypeError(
                f"action space: only Discrete and MultiDiscrete are supported, got {action_space}"
            )
        small = [k for k in self.actions if k < 2]
        if small:
            raise ValueError(
                f"action space {action_space}: every branch needs at least 2 actions "
                f"(got {self.actions})"
            )
        self.dtype = action_space.dtype

    def config(self):
        """The config keys the spaces determine."""
        if self.image:
            return {"obs_shape": list(self.chw), "obs_dtype": "uint8",
                    "actions": list(self.actions)}
        return {"obs_dim": self.obs_dim, "actions": list(self.actions)}

    def obs(self, batch):
        """Batched observations (N, *obs_shape) -> (N, S) (a view when possible), or for
        images (N, C, H, W) uint8 (HWC transposed)."""
        batch = np.asarray(batch)
        if self.image:
            n = batch.shape[0]
            if self.hwc:
                return batch.reshape((n,) + self.obs_shape).transpose(0, 3, 1, 2)
            return batch.reshape((n,) + self.chw)
        return batch.reshape(batch.shape[0], self.obs_dim)

    def learner_obs(self, batch):
        """obs(batch) as the C-contiguous array of the learner's dtype that it takes."""
        return np.ascontiguousarray(self.obs(batch), dtype=self.obs_dtype)

    def to_env(self, actions):
        """Learner actions (N, D) -> the batched action of a vector env."""
        a = actions.astype(np.int64) + self.start
        n = a.shape[0]
        if self.act_shape == ():
            return a[:, 0].astype(self.dtype)
        return a.reshape((n,) + self.act_shape).astype(self.dtype)

    def to_env_single(self, actions):
        """Learner actions (D,) -> the action of a single env."""
        a = self.to_env(np.asarray(actions).reshape(1, -1))[0]
        return a.item() if self.act_shape == () else a


def _autoreset_mode(env):
    mode = getattr(env, "autoreset_mode", None)
    if mode is None:
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return AutoresetMode(mode)


def make_vector_env(env, num_envs=1):
    """A vector env for `env`: an id (str) gives SyncVectorEnv of num_envs envs in SAME_STEP
    mode; a VectorEnv is used as it is (num_envs must match or be 1); a single Env is wrapped
    in a one-env SAME_STEP SyncVectorEnv (num_envs must be 1). Returns (vector_env, owned):
    owned tells whether the caller should close it."""
    if isinstance(env, str):
        env_id = env
        vec = gymnasium.vector.SyncVectorEnv(
            [lambda: gymnasium.make(env_id) for _ in range(int(num_envs))],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
        return vec, True
    if isinstance(env, VectorEnv):
        if num_envs not in (1, env.num_envs):
            raise ValueError(f"num_envs is {num_envs} but the vector env has {env.num_envs}")
        mode = _autoreset_mode(env)
        if mode == AutoresetMode.NEXT_STEP:
            raise ValueError(
                "the vector env uses autoreset_mode NEXT_STEP; create it with "
                "autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (or DISABLED), or "
                "train it with foxhunt_dqn.DQN, which takes NEXT_STEP too"
            )
        return env, False
    if isinstance(env, gymnasium.Env):
        if num_envs != 1:
            raise ValueError(
                f"num_envs is {num_envs}: pass an env id or a vector env to train on several"
            )
        vec = gymnasium.vector.SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
        return vec, False
    raise TypeError(f"env: expected an env id, a gymnasium.Env or a VectorEnv, got {type(env)}")


def is_image_space(space):
    """A uint8 Box of rank 2 or 3: what SpaceMap(images=True) gives the learner as images."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def config_for(vec_env, config=None, seed=0, images=None):
    """DEFAULT_CONFIG, then `config`, then the keys set by the env (obs_dim or obs_shape and
    obs_dtype, actions, num_envs) and the seed (unless config sets it). images: uint8 image
    spaces as images (None: whenever the space is one; False: flattened to float32)."""
    space = vec_env.single_observation_space
    if images is None:
        images = is_image_space(space)
    m = SpaceMap(space, vec_env.single_action_space, images=images)
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    for key, value in m.config().items():
        if key in (config or {}) and list(np.ravel(config[key])) != list(np.ravel(value)):
            raise ValueError(f"config {key} = {config[key]} does not match the env's {value}")
        cfg[key] = value
    cfg["num_envs"] = int(vec_env.num_envs)
    if "seed" not in (config or {}):
        cfg["seed"] = int(seed)
    return cfg, m


class _Episodes:
    """Returns and lengths of finished episodes, per env stream."""

    def __init__(self, n):
        self.ret = np.zeros(n)
        self.len = np.zeros(n, dtype=np.int64)
        self.returns, self.lengths, self.end_steps = [], [], []

    def add(self, rewards, done, step):
        self.ret += rewards
        self.len += 1
        for i in np.flatnonzero(done):
            self.returns.append(float(self.ret[i]))
            self.lengths.append(int(self.len[i]))
            self.end_steps.append(int(step))
            self.ret[i] = 0.0
            self.len[i] = 0

    def mean(self, last=100):
        return float(np.mean(self.returns[-last:])) if self.returns else None


def train(env, config=None, total_steps=50000, num_envs=1, seed=0, eval_episodes=100,
          progress=True, library=None, log_every=None, eval_env=None, stream=None,
          check_every=0, check_episodes=10, save=None, save_replay=False, images=None):
    """Train a Learner on `env` (an env id, a gymnasium.Env or a VectorEnv) for total_steps
    env steps (summed over the num_envs envs), then (save given) write a checkpoint, then
    evaluate it greedily for eval_episodes episodes (0 skips it). A failing evaluation does
    not lose the run: it warns, sets history["eval_error"] and returns the learner.

    config: keys over DEFAULT_CONFIG (obs_dim or obs_shape, actions and num_envs come from the
        env).
    images: uint8 image observations as uint8 images (None: when the space is one; False:
        flattened to float32 as any other Box).
    progress: a bar on a TTY, plain lines otherwise (on `stream`, default stderr).
    log_every: env steps between metrics snapshots in history["log"] (default total/100).
    eval_env: env (or id) for the evaluations; default: the env id, the single env itself,
        or a new env made from the vector env's spec.
    check_every: when > 0, every check_every env steps (and at the end) the greedy policy is
        scored on check_episodes episodes of a separate env, and the online network of the
        best check (the latest among equals) is restored at the end, into the online and the
        target network (what SB3's EvalCallback calls the best model). The checks' env steps
        are not counted in total_steps; their scores are in history["checks"]. The final
        evaluation uses other episodes than the checks.

    Returns (learner, history): history holds episode_returns, episode_lengths,
    episode_end_steps, log (metrics snapshots), checks [(env_steps, mean)], best_check,
    env_steps, train_time, wall_time and eval_mean, eval_std, eval_episodes."""
    vec, owned = make_vector_env(env, num_envs)
    try:
        cfg, m = config_for(vec, config, seed, images)
        target = eval_env
        if target is None and (check_every or eval_episodes):
            target = _eval_target(env, vec)
        learner = Learner(cfg, library=library)
    except BaseException:
        if owned:
            vec.close()
        raise
    n = vec.num_envs
    mode = _autoreset_mode(vec)
    episodes = _Episodes(n)
    log, checks = [], []
    log_every = max(n, int(log_every or max(1, total_steps // 100)))
    bar = Progress(total_steps, enabled=progress, stream=stream)
    check_env = None
    best = None  # (score, env_steps, {name: online tensor})
    t0 = time.monotonic()
    steps = 0
    try:
        if check_every:
            check_env = _make_check_env(target)
        # integer observations flattened for a float32 learner are converted here (step takes
        # floats of any width as they are, and refuses integers)
        kind = np.dtype(vec.single_observation_space.dtype).kind
        rows = m.learner_obs if not m.image and kind in "iub" else m.obs
        obs, _ = vec.reset(seed=int(seed))
        o = rows(obs)
        actions = learner.step(o)
        next_log, next_check = 0, check_every
        while steps < total_steps:
            obs, rewards, terminated, truncated, infos = vec.step(m.to_env(actions))
            steps += n
            done = np.logical_or(terminated, truncated)
            o = rows(obs)
            final = None
            if done.any():
                if mode == AutoresetMode.SAME_STEP:
                    final = o.copy()
                    final_obs = infos["final_obs"]
                    for i in np.flatnonzero(done):
                        final[i] = rows(np.asarray(final_obs[i])[None])[0]
                else:  # DISABLED: obs holds the last observations; reset the ended envs here
                    final = o.copy()
                    obs, _ = vec.reset(options={"reset_mask": done})
                    o = rows(obs)
            actions = learner.step(o, rewards, terminated, truncated, final)
            episodes.add(rewards, done, steps)
            if check_every and (steps >= next_check or steps >= total_steps):
                next_check = steps + check_every
                score, _ = evaluate(learner, check_env, episodes=check_episodes,
                                    seed=int(seed) + 1000003 if not checks else None)
                checks.append((steps, score))
                if best is None or score >= best[0]:
                    best = (score, steps, _online_tensors(learner))
            if steps >= next_log or steps >= total_steps:
                next_log = steps + log_every
                met = learner.metrics()
                rec = {
                    "env_steps": steps,
                    "updates": met["updates"],
                    "episodes": len(episodes.returns),
                    "return_mean_100": episodes.mean(),
                    "epsilon": met["epsilon"],
                    "loss": met["loss"] if met["updates"] else None,
                    "q_mean": met["q_mean"] if met["updates"] else None,
                    "check": checks[-1][1] if checks else None,
                    "wall": time.monotonic() - t0,
                }
                log.append(rec)
                bar.update(steps, **fmt_fields(rec["return_mean_100"], rec["epsilon"], rec["loss"]))
            elif bar.due():
                bar.update(steps, **fmt_fields(episodes.mean(), *_last_fields(log)))
        bar.close()
        if best is not None and best[1] != steps:
            _restore_online(learner, best[2])
    except BaseException:
        learner.close()
        raise
    finally:
        if owned:
            vec.close()
        if check_env is not None:
            check_env.close()
    train_time = time.monotonic() - t0
    history = {
        "episode_returns": episodes.returns,
        "episode_lengths": episodes.lengths,
        "episode_end_steps": episodes.end_steps,
        "log": log,
        "checks": checks,
        "best_check": None if best is None else {"env_steps": best[1], "mean": best[0]},
        "env_steps": steps,
        "train_time": train_time,
        "eval_mean": None,
        "eval_error": None,
        "eval_std": None,
        "eval_episodes": 0,
    }
    if save is not None:  # before the evaluation: a failure there must not lose the run
        learner.save(save, include_replay=save_replay)
        history["saved"] = str(save)
    if eval_episodes:
        try:
            mean, std = evaluate(learner, target, episodes=eval_episodes,
                                 seed=int(seed) + 10007)
            history.update(eval_mean=mean, eval_std=std, eval_episodes=int(eval_episodes))
        except Exception as exc:  # the trained learner is still returned
            history["eval_error"] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"foxhunt_dqn.gym.train: the final evaluation failed; the trained "
                          f"learner is returned without it ({history['eval_error']})",
                          RuntimeWarning, stacklevel=2)
    history["wall_time"] = time.monotonic() - t0
    return learner, history


def _online_tensors(learner):
    return {name: learner.get_tensor(name) for name, _ in learner.tensors()
            if name.startswith(("online.", "sn.online."))}


def _restore_online(learner, tensors):
    for name, value in tensors.items():
        learner.set_tensor(name, value)
        learner.set_tensor(name.replace("online.", "target.", 1), value)


def _make_check_env(target):
    if isinstance(target, gymnasium.Env):
        spec = target.spec
        if spec is None:
            raise ValueError("check_every: pass eval_env (the env has no spec to copy)")
        return gymnasium.make(spec)
    return gymnasium.make(target)


def _last_fields(log):
    if not log:
        return None, None
    return log[-1]["epsilon"], log[-1]["loss"]


# Keys that gymnasium.make_vec adds to a vector env's spec.kwargs; the single env's
# constructor does not take them.
_VECTOR_SPEC_KEYS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")


def single_env_spec(vec):
    """The EnvSpec of one env of vector env `vec` (for evaluation envs), or None: the first
    sub-env's spec of a SyncVectorEnv, else the vector env's spec without the keys make_vec
    added to its kwargs (num_envs, vectorization_mode, vector_kwargs, wrappers)."""
    envs = getattr(vec, "envs", None)
    if envs:
        spec = getattr(envs[0], "spec", None)
        if spec is not None:
            return spec
    spec = getattr(vec, "spec", None)
    if spec is None:
        return None
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k not in _VECTOR_SPEC_KEYS}
    import dataclasses
    return dataclasses.replace(spec, kwargs=kwargs)


def _eval_target(env, vec):
    if isinstance(env, (str, gymnasium.Env)):
        return env
    spec = single_env_spec(vec)
    if spec is None:
        raise ValueError("evaluation: pass eval_env (the training env has no spec to copy)")
    return spec


def evaluate(learner, env, episodes=100, seed=None, max_steps=None):
    """Greedy evaluation: the mean and standard deviation of the undiscounted return over
    `episodes` episodes of `env` (an env id, an EnvSpec or a single gymnasium.Env; one made
    here is closed here). seed seeds the first reset. max_steps (optional) cuts episodes
    that the env's own time limit does not."""
    owned = not isinstance(env, gymnasium.Env)
    e = gymnasium.make(env) if owned else env
    try:
        m = SpaceMap(e.observation_space, e.action_space,
                     images=learner.obs_dtype == np.uint8)
        if m.obs_dim != learner.obs_dim or m.actions != list(learner.action_branches) or \
                (m.image and m.chw != tuple(learner.obs_shape)):
            raise ValueError(
                f"evaluation env has observations {m.chw if m.image else m.obs_dim}, actions "
                f"{m.actions}; the learner has "
                f"{tuple(learner.obs_shape) if m.image else learner.obs_dim}, "
                f"{list(learner.action_branches)}"
            )
        returns = []
        for k in range(int(episodes)):
            obs, _ = e.reset(seed=seed if k == 0 else None)
            total, t = 0.0, 0
            while True:
                a = learner.act(m.learner_obs(np.asarray(obs)[None])[0], explore=False)
                obs, r, terminated, truncated, _ = e.step(m.to_env_single(a))
                total += float(r)
                t += 1
                if terminated or truncated or (max_steps is not None and t >= max_steps):
                    break
            returns.append(total)
    finally:
        if owned:
            e.close()
    return float(np.mean(returns)), float(np.std(returns))
