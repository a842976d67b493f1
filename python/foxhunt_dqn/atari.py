"""Atari through ale-py's AtariVectorEnv: the evaluation protocol, the training loop, evaluation.

The protocol (docs/design.md, section 9) is one table, PROTOCOL: 84x84 grayscale, frame skip 4
with a max-pool of the last two frames, a stack of 4 (oldest frame first, newest last), up to 30
no-op starts, FIRE on reset where the game has it, no sticky actions, 108,000 frames (27,000
agent steps) at most per game. Training envs also end an episode on each life loss
(ale-py's life_loss_info: terminated is set, the game goes on); evaluation envs play whole games.
ale-py's own reward clipping is off: the loop clips for the learner and keeps the raw rewards.

Shapes: N envs; observations (N, 4, 84, 84) uint8, each call a new C-contiguous array that goes
to the learner by address (no copy); actions (N,) int32 to the env, (N, 1) from the learner.
"""

import re
import time

import numpy as np

from .errors import NotReady

# The AtariVectorEnv arguments of the protocol (training and evaluation alike).
PROTOCOL = {
    "img_height": 84,
    "img_width": 84,
    "grayscale": True,
    "stack_num": 4,
    "frameskip": 4,
    "maxpool": True,
    "noop_max": 30,
    "use_fire_reset": True,
    "repeat_action_probability": 0.0,
    "max_num_frames_per_episode": 108000,
    "reward_clipping": False,  # the loop clips; raw rewards are what is reported
    "full_action_space": False,
}
TRAIN = {"life_loss_info": True, "episodic_life": False}   # terminal on life loss, game goes on
EVAL = {"life_loss_info": False, "episodic_life": False}   # whole games
EVAL_EPSILON = 0.05  # evaluation: epsilon-greedy with 0.05 (the DQN papers' and CleanRL's)
REWARD_CLIP = 1.0    # rewards to the learner are clipped to [-REWARD_CLIP, REWARD_CLIP]


def is_atari(env_id):
    return isinstance(env_id, str) and env_id.startswith("ALE/")


def rom_name(env_id):
    """'ALE/Pong-v5' -> 'pong', 'ALE/MsPacman-v5' -> 'ms_pacman' (ale-py's ROM names)."""
    m = re.fullmatch(r"ALE/([A-Za-z0-9]+)(-v\d+)?", env_id or "")
    if not m:
        raise ValueError(f"--env {env_id!r}: expected an ALE id such as ALE/Pong-v5")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()


def make_vec(env_id, num_envs, train=True, num_threads=0, **overrides):
    """An AtariVectorEnv of num_envs envs with the protocol (TRAIN or EVAL on top of PROTOCOL;
    overrides replace keys, for tests). NEXT_STEP autoreset, all envs in every batch."""
    try:
        from ale_py.vector_env import AtariVectorEnv
        from gymnasium.vector import AutoresetMode
    except ImportError as exc:
        raise ImportError(f"Atari needs ale-py (pip install ale-py): {exc}") from exc
    from ale_py import roms
    name = rom_name(env_id)
    if name not in roms.get_all_rom_ids():
        raise ValueError(f"--env {env_id}: ale-py has no ROM {name!r} (ids: ALE/<Game>-v5 with "
                         f"the game in CamelCase, e.g. ALE/MsPacman-v5 for ms_pacman)")
    kw = dict(PROTOCOL)
    kw.update(TRAIN if train else EVAL)
    kw.update(overrides)
    return AtariVectorEnv(name, int(num_envs), num_threads=int(num_threads),
                          batch_size=0, autoreset_mode=AutoresetMode.NEXT_STEP, **kw)


def learner_keys(vec):
    """The config keys the env fixes: the observation and action spaces."""
    return {"obs_shape": list(vec.single_observation_space.shape), "obs_dtype": "uint8",
            "frame_stack": int(PROTOCOL["stack_num"]), "actions": [int(vec.single_action_space.n)]}


# Timing keys of AtariLoop.timing (seconds, summed over the run):
#   env      waiting in vec.recv for the env threads (the part of env stepping not overlapped)
#   act      Learner.act (overlap), or Learner.step calls that ran no update (step)
#   store    Learner.observe (overlap; 0 in step mode)
#   update   Learner.train (overlap: runs while the envs step; on CUDA it only enqueues), or
#            Learner.step calls that ran updates (step: act, store and the updates)
#   python   the loop's own work: clipping, masks, episode bookkeeping
TIMING_KEYS = ("env", "act", "store", "update", "python")
LOOP_MODES = ("overlap", "step")


class AtariLoop:
    """Steps `vec` (NEXT_STEP, training protocol) with `learner`; one call of step() is one
    vec.send / vec.recv of all N envs.

    mode "overlap" (default): observe the call's transitions, act, send the actions, then run
    the updates the learner's schedule (learning_starts, train_freq, gradient_steps) owes
    while ale-py's threads step the envs, then recv. The updates run on this thread (CPU
    backend) or are queued on the device (CUDA) during the env stepping; act on the next
    call uses the weights they produced. mode "step": one Learner.step per call (store,
    train on schedule, act), then send; updates and env stepping take turns.

    Per env, each call is one of:
      a game reset   (the call after a game over or truncation: obs is the reset observation)
      a life restart (the call after a life loss: a real env step, but the transition would
                      start from a terminal observation, so the learner does not store it)
      an env step    (a transition: clipped reward to the learner, raw reward to the game)
    The learner's valid mask is false on the first two. A game's raw return and length count
    every real env step (life restarts included).

    episodes: list of finished games (env, env_steps, raw return, length, terminated,
    truncated), taken (and cleared) by the caller."""

    def __init__(self, learner, vec, mode="overlap"):
        if mode not in LOOP_MODES:
            raise ValueError(f"loop mode {mode!r}; allowed: {', '.join(LOOP_MODES)}")
        self.learner = learner
        self.vec = vec
        self.mode = mode
        self.n = int(vec.num_envs)
        cfg = learner.config
        self.tf, self.gs = int(cfg["train_freq"]), int(cfg["gradient_steps"])
        self.starts, self.batch = int(cfg["learning_starts"]), int(cfg["batch_size"])
        self.capacity = int(cfg["replay_capacity"])
        self.stored = None     # transitions the learner holds (overlap: its schedule's count)
        self.owed = 0          # updates due, run after the next send (overlap)
        self.obs = None
        self.actions = None
        self.after_terminal = np.zeros(self.n, bool)   # the learner's valid is false
        self.game_reset = np.zeros(self.n, bool)       # the call is a reset, not an env step
        self.lives = np.zeros(self.n, np.int64)
        self.game_ret = np.zeros(self.n)
        self.game_len = np.zeros(self.n, np.int64)
        self.env_steps = 0     # real env steps (agent steps; frames = 4x)
        self.games = 0
        self.life_losses = 0
        self.episodes = []
        self.timing = dict.fromkeys(TIMING_KEYS, 0.0)
        self.step_calls = {"act": 0, "update": 0}
        self.updates = 0

    def reset(self, seed):
        obs, info = self.vec.reset(seed=int(seed))
        self.lives[:] = info["lives"]
        self.after_terminal[:] = False
        self.game_reset[:] = False
        self.game_ret[:] = 0.0
        self.game_len[:] = 0
        self.owed = 0
        self.obs = obs
        t0 = time.perf_counter()
        if self.mode == "step":
            self.actions = self.learner.step(obs)   # first call: act only
            self.step_calls["act"] += 1
        else:
            self.stored = int(self.learner.metrics()["env_steps"])  # a resumed learner's too
            self.actions = self.learner.act(obs, explore=True)
        self.timing["act"] += time.perf_counter() - t0

    def flush(self):
        """Run the updates still owed (overlap), e.g. before a checkpoint: the learner then
        holds what it would hold at the same point of an uninterrupted run."""
        if self.owed:
            t0 = time.perf_counter()
            try:
                self.updates = int(self.learner.train(self.owed)["update_index"])
            except NotReady:
                pass
            self.owed = 0
            self.timing["update"] += time.perf_counter() - t0

    def _schedule(self, before, after):
        """Updates the learner's schedule owes for stored transitions before -> after."""
        rounds = after // self.tf - before // self.tf
        if after >= self.starts and rounds > 0 and min(after, self.capacity) >= self.batch:
            return rounds * self.gs
        return 0

    def step(self):
        """One call of all N envs; returns the number of real env steps it took."""
        tm = self.timing
        t0 = time.perf_counter()
        self.vec.send(self.actions[:, 0])
        t1 = time.perf_counter()
        self.flush()
        t2 = time.perf_counter()
        obs, rew, term, trunc, info = self.vec.recv()
        t3 = time.perf_counter()
        real = ~self.game_reset
        valid = ~self.after_terminal
        lives = np.asarray(info["lives"], np.int64)
        term = np.asarray(term, bool)
        trunc = np.asarray(trunc, bool)
        rew = np.asarray(rew, np.float64)
        # a life loss: terminated with fewer lives left, still > 0 (the game goes on)
        life_loss = term & real & (lives < self.lives) & (lives > 0)
        game_over = ((term & ~life_loss) | trunc) & real
        clipped = np.clip(rew, -REWARD_CLIP, REWARD_CLIP).astype(np.float32)
        t4 = time.perf_counter()
        if self.mode == "step":
            stats = self.learner._step_stats
            self.actions = self.learner.step(obs, clipped, term, trunc, valid=valid)
            t5 = t6 = time.perf_counter()
            kind = "update" if stats.updates_done else "act"
            if stats.updates_done:
                self.updates = int(stats.update_index)
            tm[kind] += t6 - t4
            self.step_calls[kind] += 1
        else:
            self.learner.observe(self.obs, self.actions, clipped, obs, term, trunc, valid=valid)
            t5 = time.perf_counter()
            before, self.stored = self.stored, self.stored + int(valid.sum())
            self.owed = self._schedule(before, self.stored)
            self.actions = self.learner.act(obs, explore=True)
            t6 = time.perf_counter()
            tm["store"] += t5 - t4
            tm["act"] += t6 - t5
        self.obs = obs
        k = int(real.sum())
        self.env_steps += k
        self.game_ret += np.where(real, rew, 0.0)
        self.game_len += real
        self.life_losses += int(life_loss.sum())
        for i in np.flatnonzero(game_over):
            self.episodes.append((int(i), self.env_steps, float(self.game_ret[i]),
                                  int(self.game_len[i]), bool(term[i]), bool(trunc[i])))
            self.game_ret[i] = 0.0
            self.game_len[i] = 0
        self.games += int(game_over.sum())
        self.after_terminal = (term | trunc) & real
        self.game_reset = game_over
        self.lives = lives
        t7 = time.perf_counter()
        tm["env"] += t3 - t2
        tm["python"] += (t1 - t0) + (t4 - t3) + (t7 - t6)
        return k


def evaluate(learner, env_id, episodes, seed, num_envs=8, epsilon=EVAL_EPSILON,
             num_threads=0, max_seconds=None):
    """Whole-game raw returns of `episodes` games under the evaluation protocol, epsilon-greedy
    with `epsilon` (0: greedy). Env i plays games i, i + n, ... (each env a fixed quota, so
    short games are not favoured). Returns (returns, lengths) lists; with max_seconds, stops
    early and returns the games finished by then."""
    n = max(1, min(int(num_envs), int(episodes)))
    quota = np.array([len(range(i, episodes, n)) for i in range(n)])
    vec = make_vec(env_id, n, train=False, num_threads=num_threads)
    rng = np.random.default_rng(int(seed) + 1)
    returns = [[] for _ in range(n)]
    lengths = [[] for _ in range(n)]
    t0 = time.monotonic()
    try:
        obs, _ = vec.reset(seed=int(seed))
        ret = np.zeros(n)
        length = np.zeros(n, np.int64)
        resetting = np.zeros(n, bool)
        k = int(vec.single_action_space.n)
        while any(len(r) < q for r, q in zip(returns, quota)):
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                break
            a = learner.act(obs, explore=False)[:, 0]
            if epsilon > 0:
                rand = rng.random(n) < epsilon
                a = np.where(rand, rng.integers(0, k, n), a).astype(np.int32)
            obs, rew, term, trunc, _ = vec.step(a)
            real = ~resetting
            ret += np.where(real, rew, 0.0)
            length += real
            done = (np.asarray(term) | np.asarray(trunc)) & real
            for i in np.flatnonzero(done):
                if len(returns[i]) < quota[i]:
                    returns[i].append(float(ret[i]))
                    lengths[i].append(int(length[i]))
                ret[i] = 0.0
                length[i] = 0
            resetting = done
    finally:
        vec.close()
    return [x for r in returns for x in r], [x for r in lengths for x in r]
