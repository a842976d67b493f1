"""The env loop of foxhunt_dqn.DQN: one Gymnasium vector env (N envs) driving one Learner.

Shapes: N envs, S = obs_dim, D branches. Each iteration is one call of vec.step (N env steps).
Observations go to the learner as space.learner_obs gives them: (N, S) float32, or (N, C, H, W)
uint8 for an image space (foxhunt_dqn.gym.SpaceMap).

Where transitions and actions come from
  SAME_STEP / DISABLED vector envs, after the warm-up: Learner.step does everything in one call
  (store N transitions, train on the learner's schedule, choose epsilon-greedy actions).
  SAME_STEP hands infos["final_obs"] over as final_obs; DISABLED resets the ended envs here
  with reset(options={"reset_mask": done}) and uses the last observation as final_obs.
  Warm-up (num_timesteps < SB3's learning_starts): actions are uniformly random, as in SB3,
  and transitions go in through Learner.observe (nothing to train on yet).
  NEXT_STEP vector envs: the call after an episode end returns that env's reset observation
  with a reward of 0 and no transition. With an ABI 1.1 library Learner.step does everything
  here too, with the per-env valid mask false for the envs whose call is such a reset (no
  transition stored; the reset observation becomes the env's previous observation); in the
  warm-up Learner.observe takes the same mask.
  NEXT_STEP with an ABI 1.0 library (no valid mask): transitions are queued per env in
  Python and handed to Learner.observe one from each env at a time (each env's stream keeps
  its order, so n-step returns stay per episode); the learner's schedule
  (learning_starts, train_freq, gradient_steps) is applied here with Learner.train, and actions
  come from Learner.act. An env with fewer episode ends than another lags it by the difference
  in the queue; queued transitions that are not yet in the learner are not saved.
"""

import collections
import time

import numpy as np
from gymnasium.vector import AutoresetMode

from .errors import NotReady


def autoreset_mode(vec):
    mode = getattr(vec, "autoreset_mode", None)
    if mode is None:
        mode = vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return AutoresetMode(mode)


class Rollout:
    """Drives `learner` with vector env `vec` through space map `space`. warmup: env steps
    of uniformly random actions (SB3's learning_starts). rng: numpy Generator for them."""

    def __init__(self, learner, vec, space, warmup, rng):
        self.learner = learner
        self.vec = vec
        self.space = space
        self.mode = autoreset_mode(vec)
        self.next_step = self.mode == AutoresetMode.NEXT_STEP
        # NEXT_STEP through Learner.step's valid mask (ABI 1.1), else the Python queues
        self.queued = self.next_step and not learner.library.has_minor1
        self.same_step = self.mode == AutoresetMode.SAME_STEP
        self.n = int(vec.num_envs)
        self.warmup = int(warmup)
        self.rng = rng
        cfg = learner.config
        self.tf = int(cfg["train_freq"])
        self.gs = int(cfg["gradient_steps"])
        self.starts = int(cfg["learning_starts"])
        self.batch = int(cfg["batch_size"])
        self.capacity = int(cfg["replay_capacity"])
        self.obs = None           # (N, S) float32 or (N, C, H, W) uint8 observations to act on
        self.actions = None       # (N, D) int32 actions for them
        self.stepping = False     # Learner.step has seen the previous call (rewards may follow)
        self.resetting = np.zeros(self.n, bool)  # NEXT_STEP: this env's next call is a reset
        self.queues = [collections.deque() for _ in range(self.n)]  # NEXT_STEP on ABI 1.0
        self.ret = np.zeros(self.n)
        self.len = np.zeros(self.n, np.int64)
        self.returns, self.lengths = [], []
        self.env_steps = 0        # env steps taken (SB3's num_timesteps)
        self.updates = 0
        self.stored = 0           # transitions handed to the learner

    def reset(self, seed=None):
        obs, _ = self.vec.reset(seed=seed)
        self.obs = self.space.learner_obs(obs)
        self.stepping = False
        self.resetting[:] = False
        for q in self.queues:
            q.clear()
        self.ret[:] = 0
        self.len[:] = 0
        self.actions = self._choose(self.obs)

    def _random(self):
        k = np.asarray(self.space.actions)
        return (self.rng.random((self.n, k.size)) * k).astype(np.int32)

    def _choose(self, obs):
        """Actions for obs when Learner.step is not choosing them."""
        if self.env_steps < self.warmup:
            return self._random()
        if self.queued:
            return self.learner.act(obs, explore=True)
        self.stepping = True  # the first Learner.step call: obs only
        return self.learner.step(obs)

    def _train_on_schedule(self, before):
        """The learner's step() schedule, for transitions stored with observe()."""
        after = self.stored
        rounds = after // self.tf - before // self.tf
        if after >= self.starts and rounds > 0 and min(after, self.capacity) >= self.batch:
            try:
                stats = self.learner.train(rounds * self.gs)
            except NotReady:
                return
            self.updates = stats["update_index"]

    def _observe(self, obs, act, rew, nxt, term, trunc):
        before = self.stored
        self.learner.observe(obs, act, rew, nxt, term, trunc)
        self.stored += self.n
        if self.queued:
            self._train_on_schedule(before)

    def _queue(self, valid, prev_obs, act, rew, nxt, term, trunc):
        for i in np.flatnonzero(valid):
            self.queues[i].append((prev_obs[i].copy(), act[i].copy(), float(rew[i]),
                                   nxt[i].copy(), bool(term[i]), bool(trunc[i])))
        while all(self.queues):
            rows = [q.popleft() for q in self.queues]
            cols = [np.array(c) for c in zip(*rows)]
            self._observe(cols[0], cols[1], cols[2].astype(np.float32), cols[3], cols[4],
                          cols[5])

    def step(self):
        """One call of vec.step; returns (rewards (N,), done (N,)) of the valid env steps."""
        prev_obs, act = self.obs, self.actions
        obs, rew, term, trunc, infos = self.vec.step(self.space.to_env(act))
        rew = np.asarray(rew, dtype=np.float64)
        term = np.asarray(term, dtype=bool)
        trunc = np.asarray(trunc, dtype=bool)
        done = term | trunc
        o = self.space.learner_obs(obs)
        if self.queued:
            return self._step_next(prev_obs, act, o, rew, term, trunc, done)
        if self.next_step:
            return self._step_valid(prev_obs, act, o, rew, term, trunc, done)
        any_done = done.any()
        nxt = o
        if any_done:
            if self.same_step:
                nxt = o.copy()
                final = infos["final_obs"]
                for i in np.flatnonzero(done):
                    nxt[i] = self.space.learner_obs(np.asarray(final[i])[None])[0]
            else:  # DISABLED: obs holds the last observations; reset the ended envs here
                obs, _ = self.vec.reset(options={"reset_mask": done})
                o = self.space.learner_obs(obs)
        self.env_steps += self.n
        if self.stepping:
            stats = self.learner._step_stats
            self.actions = self.learner.step(o, rew, term, trunc, nxt if any_done else None)
            self.stored += self.n
            if stats.updates_done:
                self.updates = stats.update_index
        else:  # warm-up: random actions, transitions through observe
            self._observe(prev_obs, act, rew.astype(np.float32), nxt, term, trunc)
            self.actions = self._choose(o)
        self.obs = o
        self.ret += rew
        self.len += 1
        if any_done:
            self._episodes_ended(done)
        return rew, done

    def _step_valid(self, prev_obs, act, o, rew, term, trunc, done):
        """NEXT_STEP on ABI 1.1: the call after an env's episode end is its reset, not an env
        step: valid is false there. An env's episode end comes with its true last
        observation in obs, which is then next_obs of the transition (no final_obs)."""
        valid = ~self.resetting
        ended = done & valid
        k = int(valid.sum())
        self.env_steps += k
        if self.stepping:
            stats = self.learner._step_stats
            self.actions = self.learner.step(o, rew, term, trunc, valid=valid)
            if stats.updates_done:
                self.updates = stats.update_index
        else:  # warm-up: random actions, transitions through observe
            self.learner.observe(prev_obs, act, rew.astype(np.float32), o, term, trunc,
                                 valid=valid)
            self.actions = self._choose(o)
        self.stored += k
        self.resetting = ended
        self.obs = o
        self.ret += np.where(valid, rew, 0.0)
        self.len += valid
        if ended.any():
            self._episodes_ended(ended)
        return rew, ended

    def _step_next(self, prev_obs, act, o, rew, term, trunc, done):
        """NEXT_STEP on ABI 1.0: the call after an env's episode end is its reset, not an env
        step; transitions go through the per-env queues."""
        valid = ~self.resetting
        ended = done & valid
        self.env_steps += int(valid.sum())
        self._queue(valid, prev_obs, act, rew, o, term, trunc)
        self.resetting = ended
        self.actions = self._random() if self.env_steps < self.warmup else \
            self.learner.act(o, explore=True)
        self.obs = o
        self.ret += np.where(valid, rew, 0.0)
        self.len += valid
        if ended.any():
            self._episodes_ended(ended)
        return rew, ended

    def _episodes_ended(self, ended):
        for i in np.flatnonzero(ended):
            self.returns.append(float(self.ret[i]))
            self.lengths.append(int(self.len[i]))
            self.ret[i] = 0.0
            self.len[i] = 0


class Rates:
    """Env steps and updates per second over the last `window` seconds."""

    def __init__(self, window=5.0):
        self.window = window
        self.marks = collections.deque()

    def add(self, steps, updates):
        now = time.monotonic()
        self.marks.append((now, steps, updates))
        while len(self.marks) > 2 and now - self.marks[1][0] > self.window:
            self.marks.popleft()

    def rates(self):
        if len(self.marks) < 2:
            return 0.0, 0.0
        (t0, s0, u0), (t1, s1, u1) = self.marks[0], self.marks[-1]
        dt = max(t1 - t0, 1e-9)
        return (s1 - s0) / dt, (u1 - u0) / dt
