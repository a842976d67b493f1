"""The Atari protocol and loop (foxhunt_dqn.atari) against ale-py's own frames and games.

Preprocessing: the training env's stacks are checked against frames computed here from
ale-py's single-frame AtariEnv (grayscale screens, max of the last two of every 4 frames,
area-averaged to 84x84, oldest frame first); no-op starts, life-loss terminals and clipped vs
raw rewards through AtariLoop. The run itself (CLI, checkpoints, --resume, Ctrl-C) is in
test_atari_train.py. Without ale-py these tests skip, unless FHD_REQUIRE_ALE=1 (CI).
"""

import os

import numpy as np
import pytest

if os.environ.get("FHD_REQUIRE_ALE") == "1":
    import ale_py  # noqa: F401  (CI installs it: a missing ale-py is a failure there)
else:
    pytest.importorskip("ale_py")

import gymnasium as gym  # noqa: E402

from foxhunt_dqn import atari  # noqa: E402


def area_matrix(n, m):
    """(m, n) weights of an area-averaging resize from n to m samples (cv2's INTER_AREA)."""
    w = np.zeros((m, n))
    s = n / m
    for i in range(m):
        a, b = i * s, (i + 1) * s
        for j in range(int(np.floor(a)), int(np.ceil(b))):
            w[i, j] = min(b, j + 1) - max(a, j)
    return w / s


def reference_frame(screen):
    return area_matrix(210, 84) @ screen.astype(np.float64) @ area_matrix(160, 84).T


def test_rom_names():
    assert atari.rom_name("ALE/Pong-v5") == "pong"
    assert atari.rom_name("ALE/MsPacman-v5") == "ms_pacman"
    assert atari.rom_name("ALE/Breakout") == "breakout"
    for bad in ("Pong-v5", "ALE/", "ALE/Pong-v5/x", None):
        with pytest.raises(ValueError):
            atari.rom_name(bad)
    with pytest.raises(ValueError, match="no ROM 'nope'"):
        atari.make_vec("ALE/Nope-v5", 1)


def test_protocol_table():
    p = atari.PROTOCOL
    assert (p["img_height"], p["img_width"], p["grayscale"], p["stack_num"]) == (84, 84, True, 4)
    assert (p["frameskip"], p["maxpool"], p["noop_max"]) == (4, True, 30)
    assert p["repeat_action_probability"] == 0.0 and p["reward_clipping"] is False
    assert atari.TRAIN["life_loss_info"] and not atari.EVAL["life_loss_info"]


def test_presets_found():
    """configs/ALE-<Game>-v5.json: found from the checkout or an installed wheel, the agent
    of docs/design.md section 9 (the env sets the spaces)."""
    import json

    from foxhunt_dqn.atari_train import default_config
    for game in ("Pong", "Breakout"):
        path, tried = default_config(f"ALE/{game}-v5")
        assert path is not None, tried
        cfg = json.loads(open(path, encoding="utf-8").read())
        assert cfg["torso"] == "nature" and cfg["lr"] == 1e-4 and cfg["batch_size"] == 32
        assert cfg["train_freq"] == 4 and cfg["target_update_interval"] == 250
        assert not {"obs_shape", "actions", "obs_dtype", "frame_stack"} & set(cfg)


def test_every_atari_config_makes_a_learner(library):
    """Every configs/ALE-*.json (the fast Pong preset too) is a config the library accepts with
    the env's keys; the replay is shrunk so that a CPU learner fits a CI machine (backend
    "auto": the fast preset's TF32 forward GEMMs are a CUDA setting, which "auto" accepts)."""
    import json
    from pathlib import Path

    from foxhunt_dqn import Learner
    paths = sorted((Path(__file__).resolve().parents[2] / "configs").glob("ALE-*.json"))
    assert any(p.name == "ALE-Pong-v5-fast.json" for p in paths), paths
    for p in paths:
        cfg = json.loads(p.read_text(encoding="utf-8"))
        cfg.update(obs_shape=[4, 84, 84], obs_dtype="uint8", frame_stack=4, actions=[6],
                   replay_capacity=1000, learning_starts=min(cfg["learning_starts"], 1000),
                   backend="auto")
        with Learner(cfg, library=library.path) as lrn:
            assert lrn.num_envs == cfg["num_envs"], p.name


def test_stack_and_maxpool_match_ale_frames():
    """Each stack is the last 4 max-pooled frames, oldest first (zeros before the reset)."""
    import ale_py
    gym.register_envs(ale_py)
    vec = atari.make_vec("ALE/Pong-v5", 1, num_threads=1, noop_max=0, use_fire_reset=False)
    single = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0,
                      obs_type="grayscale")
    try:
        obs, _ = vec.reset(seed=0)
        screen, _ = single.reset(seed=0)
        assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
        assert obs.flags.c_contiguous
        ref = [np.zeros((84, 84))] * 3 + [reference_frame(screen)]
        rng = np.random.default_rng(3)
        pooled_differs = 0
        for t in range(40):
            a = int(rng.integers(0, 6))
            obs, *_ = vec.step(np.array([a], np.int32))
            screens = [single.step(a)[0] for _ in range(4)]
            ref = ref[1:] + [reference_frame(np.maximum(screens[-2], screens[-1]))]
            for j in range(4):  # frame j of the stack is ref[j]: oldest first
                assert np.abs(obs[0, j] - ref[j]).max() <= 0.51, (t, j)
            last_only = reference_frame(screens[-1])
            pooled_differs += np.abs(obs[0, 3] - last_only).max() > 1.0
        assert pooled_differs > 0  # the max-pool is visible (Pong's ball flickers)
    finally:
        vec.close()
        single.close()


def test_noop_starts():
    """Up to 30 no-op frames after a reset: the start frame differs across seeds."""
    vec = atari.make_vec("ALE/Pong-v5", 8, num_threads=1)
    fixed = atari.make_vec("ALE/Pong-v5", 8, num_threads=1, noop_max=0)
    try:
        _, info = vec.reset(seed=11)
        starts = np.asarray(info["episode_frame_number"])
        _, info0 = fixed.reset(seed=11)
        base = np.asarray(info0["episode_frame_number"])
        assert len(set(base.tolist())) == 1
        assert len(set(starts.tolist())) >= 3
        assert (starts >= base).all() and (starts <= base + 30).all()
    finally:
        vec.close()
        fixed.close()


class RecordingVec:
    """vec wrapper keeping every recv: (obs, raw rewards, term, trunc, lives)."""

    def __init__(self, vec):
        self.vec = vec
        self.num_envs = vec.num_envs
        self.log = []

    def reset(self, seed=None):
        return self.vec.reset(seed=seed)

    def send(self, actions):
        self.vec.send(actions)

    def recv(self):
        out = self.vec.recv()
        self.log.append((out[1].copy(), out[2].copy(), out[3].copy(), out[4]["lives"].copy()))
        return out


class _Stats:
    updates_done = 0
    update_index = 0


class RecordingLearner:
    """Stands in for the Learner in both loop modes: random actions, the transitions' rewards,
    flags and valid masks kept (from step or observe), train calls counted."""

    config = {"train_freq": 4, "gradient_steps": 1, "learning_starts": 8, "batch_size": 4,
              "replay_capacity": 1000}

    def __init__(self, n, k, seed=0):
        self.n, self.k = n, k
        self.rng = np.random.default_rng(seed)
        self._step_stats = _Stats()
        self.calls = []
        self.trained = 0

    def _actions(self, obs):
        assert obs.dtype == np.uint8 and obs.shape == (self.n, 4, 84, 84)
        return self.rng.integers(0, self.k, (self.n, 1)).astype(np.int32)

    def step(self, obs, rewards=None, terminated=None, truncated=None, valid=None):
        if rewards is not None:
            self.calls.append((np.array(rewards), np.array(terminated), np.array(truncated),
                               np.array(valid)))
        return self._actions(obs)

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated, valid=None):
        assert actions.shape == (self.n, 1) and next_obs.shape == obs.shape
        self.calls.append((np.array(rewards), np.array(terminated), np.array(truncated),
                           np.array(valid)))

    def act(self, obs, explore=True):
        assert explore
        return self._actions(obs)

    def train(self, n):
        self.trained += n
        return {"update_index": self.trained}

    def metrics(self):
        return {"env_steps": 0}


@pytest.mark.parametrize("mode", atari.LOOP_MODES)
def test_life_loss_terminals_and_raw_game_returns(mode):
    """Breakout, random play: every life loss is a terminal to the learner, the game goes on;
    a game (5 lives) ends only at game over, with its raw return and length."""
    n = 4
    vec = RecordingVec(atari.make_vec("ALE/Breakout-v5", n, num_threads=1))
    learner = RecordingLearner(n, int(vec.vec.single_action_space.n))
    loop = atari.AtariLoop(learner, vec, mode=mode)
    try:
        loop.reset(seed=5)
        while loop.games < 6:
            loop.step()
            assert len(learner.calls) < 20000
    finally:
        vec.vec.close()
    rew = np.array([c[0] for c in learner.calls])
    term = np.array([c[1] for c in learner.calls])
    valid = np.array([c[3] for c in learner.calls])
    raw = np.array([r[0] for r in vec.log])
    lives = np.array([r[3] for r in vec.log])
    assert (np.abs(rew) <= 1.0).all()
    # valid is false exactly on the call after a terminal (life loss or game over)
    assert (valid[1:] == ~term[:-1]).all() and valid[0].all()
    games = {}
    for env, steps, ret, length, te, tr in loop.episodes:
        games.setdefault(env, []).append((steps, ret, length, te))
    assert sum(len(g) for g in games.values()) == loop.games >= 6
    for env, rows in games.items():
        col_term, col_lives, col_raw = term[:, env], lives[:, env], raw[:, env]
        ends = [t for t in range(len(col_term)) if col_term[t] and col_lives[t] == 0]
        assert len(ends) >= len(rows)
        start = 0
        for (steps, ret, length, te), end in zip(rows, ends):
            assert te
            # 5 lives: 4 life-loss terminals then the game-over terminal
            assert int(col_term[start:end + 1].sum()) == 5
            # the game's raw return: every real step's reward, the life restarts included
            assert ret == pytest.approx(float(col_raw[start:end + 1].sum()))
            assert length == end + 1 - start
            start = end + 2  # the call after a game over is its reset
    assert loop.life_losses >= 4 * loop.games
    if mode == "overlap":  # the learner's schedule: train_freq 4, learning_starts 8
        loop.flush()
        due, before = 0, 0
        for v in valid:
            after = before + int(v.sum())
            if after >= 8:
                due += after // 4 - before // 4
            before = after
        assert learner.trained == due > 0


class FakeVec:
    """One scripted env: each recv gives (reward, terminated, lives) from `script`."""

    num_envs = 1

    def __init__(self, script):
        self.script = list(script)
        self.t = 0

    def reset(self, seed=None):
        return np.zeros((1, 4, 84, 84), np.uint8), {"lives": np.array([3])}

    def send(self, actions):
        assert actions.shape == (1,)

    def recv(self):
        r, te, lives = self.script[self.t]
        self.t += 1
        obs = np.full((1, 4, 84, 84), self.t % 256, np.uint8)
        return (obs, np.array([r]), np.array([te]), np.array([False]),
                {"lives": np.array([lives])})


@pytest.mark.parametrize("mode", atari.LOOP_MODES)
def test_clipped_rewards_to_learner_raw_to_games(mode):
    script = [(4.0, False, 3), (-3.0, False, 3), (0.5, True, 2),   # a life lost
              (2.0, False, 2), (7.0, True, 0),                    # the game over
              (9.0, False, 3), (1.0, False, 3)]                   # its reset, the next game
    learner = RecordingLearner(1, 4)
    loop = atari.AtariLoop(learner, FakeVec(script), mode=mode)
    loop.reset(seed=0)
    for _ in script:
        loop.step()
    rew = [float(c[0][0]) for c in learner.calls]
    valid = [bool(c[3][0]) for c in learner.calls]
    assert rew == [1.0, -1.0, 0.5, 1.0, 1.0, 1.0, 1.0]
    assert valid == [True, True, True, False, True, False, True]
    assert loop.episodes == [(0, 5, 4.0 - 3.0 + 0.5 + 2.0 + 7.0, 5, True, False)]
    assert loop.env_steps == 6 and loop.games == 1 and loop.life_losses == 1
    assert loop.game_ret[0] == 1.0  # the reset call's reward is not part of any game
