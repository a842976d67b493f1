"""The Gymnasium adapter: space mapping, episode ends under auto-reset, evaluation, the CLI."""

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

import foxhunt_dqn  # noqa: E402
from foxhunt_dqn import gym as fgym  # noqa: E402

FAST = {"hidden": [8], "batch_size": 4, "learning_starts": 8, "replay_capacity": 256}


class CountEnv(gymnasium.Env):
    """obs = [episode number, t, env id]; episode k of env `i` lasts 2 + (k + i) % 3 steps and
    ends terminated for even k, truncated for odd k. Checks every action against its space."""

    def __init__(self, env_id=0, action_space=None):
        self.observation_space = spaces.Box(-1e6, 1e6, (3,), np.float32)
        self.action_space = action_space if action_space is not None else spaces.Discrete(3)
        self.env_id = env_id
        self.episode = -1
        self.t = 0
        self.actions = []

    def _obs(self):
        return np.array([self.episode, self.t, self.env_id], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.actions.append(np.array(action))
        self.t += 1
        end = self.t >= 2 + (self.episode + self.env_id) % 3
        terminated = end and self.episode % 2 == 0
        truncated = end and self.episode % 2 == 1
        return self._obs(), 1.0, terminated, truncated, {}


class SpyLearner(foxhunt_dqn.Learner):
    """Records the arguments of every step call."""

    records = []

    def step(self, obs, rewards=None, terminated=None, truncated=None, final_obs=None, out=None):
        copy = lambda x: None if x is None else np.array(x, copy=True)  # noqa: E731
        SpyLearner.records.append(
            dict(obs=copy(obs), rewards=copy(rewards), terminated=copy(terminated),
                 truncated=copy(truncated), final_obs=copy(final_obs))
        )
        return super().step(obs, rewards, terminated, truncated, final_obs, out)


@pytest.fixture
def spy(monkeypatch):
    SpyLearner.records = []
    monkeypatch.setattr(fgym, "Learner", SpyLearner)
    return SpyLearner.records


def check_episode_ends(records, num_envs):
    """Every ended episode hands over its true last observation as final_obs and the new
    episode's first observation as obs; no step pairs an old episode with a new one."""
    assert records[0]["rewards"] is None
    ends = 0
    for prev, rec in zip(records, records[1:]):
        done = rec["terminated"] | rec["truncated"]
        for i in range(num_envs):
            ep, t, env_id = prev["obs"][i]
            assert env_id == i
            length = 2 + (int(ep) + i) % 3
            if done[i]:
                ends += 1
                assert rec["final_obs"] is not None
                np.testing.assert_array_equal(rec["final_obs"][i], [ep, length, i])
                np.testing.assert_array_equal(rec["obs"][i], [ep + 1, 0, i])
                assert bool(rec["terminated"][i]) == (ep % 2 == 0)
                assert bool(rec["truncated"][i]) == (ep % 2 == 1)
            else:
                np.testing.assert_array_equal(rec["obs"][i], [ep, t + 1, i])
    return ends


# ---- spaces --------------------------------------------------------------------------------


def test_discrete_mapping_with_start():
    m = fgym.SpaceMap(spaces.Box(-1, 1, (2, 3)), spaces.Discrete(4, start=-1))
    assert m.config() == {"obs_dim": 6, "actions": [4]}
    a = np.array([[0], [3]], np.int32)
    np.testing.assert_array_equal(m.to_env(a), [-1, 2])
    assert m.to_env_single(np.array([2], np.int32)) == 1
    assert m.obs(np.zeros((5, 2, 3))).shape == (5, 6)


def test_multidiscrete_mapping():
    space = spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[0, 1], [-2, 10]]))
    m = fgym.SpaceMap(spaces.Box(-1, 1, (3,)), space)
    assert m.config()["actions"] == [2, 3, 4, 5]
    a = np.array([[1, 2, 3, 4], [0, 0, 0, 0]], np.int32)
    env_a = m.to_env(a)
    assert env_a.shape == (2, 2, 2) and env_a.dtype == space.dtype
    np.testing.assert_array_equal(env_a[0], [[1, 3], [1, 14]])
    np.testing.assert_array_equal(env_a[1], [[0, 1], [-2, 10]])
    for row in env_a:
        assert space.contains(row)


def test_unsupported_spaces():
    with pytest.raises(TypeError, match="only Box"):
        fgym.SpaceMap(spaces.Discrete(3), spaces.Discrete(2))
    with pytest.raises(TypeError, match="Discrete and MultiDiscrete"):
        fgym.SpaceMap(spaces.Box(-1, 1, (2,)), spaces.Box(-1, 1, (1,)))
    with pytest.raises(ValueError, match="at least 2 actions"):
        fgym.SpaceMap(spaces.Box(-1, 1, (2,)), spaces.MultiDiscrete([3, 1]))


def test_train_multidiscrete_env(library, spy):
    space = spaces.MultiDiscrete([3, 4], start=[1, -2])
    env = CountEnv(action_space=space)
    learner, hist = fgym.train(env, config=FAST, total_steps=300, eval_episodes=0,
                               progress=False, library=library)
    with learner:
        assert learner.action_branches == (3, 4)
        assert learner.config["actions"] == [3, 4]
        acts = np.array(env.actions)
        assert acts.shape == (300, 2)
        # both branches explored over their whole (shifted) range
        assert set(acts[:, 0]) == {1, 2, 3} and set(acts[:, 1]) == {-2, -1, 0, 1}
        assert learner.metrics()["env_steps"] == 300
        assert learner.metrics()["updates"] > 0
    assert check_episode_ends(spy, 1) == len(hist["episode_returns"]) > 50


# ---- auto-reset modes ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_vector_env_episode_ends(library, spy, mode):
    vec = SyncVectorEnv([lambda i=i: CountEnv(i) for i in range(3)], autoreset_mode=mode)
    learner, hist = fgym.train(vec, config=FAST, total_steps=240, eval_episodes=0,
                               progress=False, library=library)
    with learner:
        m = learner.metrics()
        assert m["env_steps"] == 240 and learner.num_envs == 3
        assert m["episodes"] == len(hist["episode_returns"])
    assert check_episode_ends(spy, 3) == len(hist["episode_returns"]) > 60
    vec.close()


def test_env_id_uses_same_step(library, spy):
    vec, owned = fgym.make_vector_env("CartPole-v1", num_envs=2)
    assert owned and fgym._autoreset_mode(vec) == AutoresetMode.SAME_STEP
    vec.close()


def test_next_step_vector_env_refused(library):
    vec = SyncVectorEnv([lambda: CountEnv(0)], autoreset_mode=AutoresetMode.NEXT_STEP)
    with pytest.raises(ValueError, match="SAME_STEP"):
        fgym.train(vec, config=FAST, total_steps=10, progress=False, library=library)
    vec.close()


def test_config_conflicting_with_env(library):
    with pytest.raises(ValueError, match="obs_dim"):
        fgym.train(CountEnv(), config=dict(FAST, obs_dim=5), total_steps=10, progress=False,
                   library=library)


def test_config_errors_pass_through(library):
    with pytest.raises(foxhunt_dqn.ConfigError) as ei:
        fgym.train(CountEnv(), config=dict(FAST, lr=-1.0), total_steps=10, progress=False,
                   library=library)
    assert ei.value.path == "$.lr"


# ---- evaluation, history, progress ---------------------------------------------------------


def test_evaluate_counts_episode_returns(library):
    learner, hist = fgym.train(CountEnv(), config=FAST, total_steps=50, eval_episodes=0,
                               progress=False, library=library)
    with learner:
        env = CountEnv()
        mean, std = fgym.evaluate(learner, env, episodes=6)
        # episodes 0..5 of env 0 last 2, 3, 4, 2, 3, 4 steps, reward 1 per step
        assert mean == pytest.approx(3.0) and std == pytest.approx(np.std([2, 3, 4] * 2))
        assert len(env.actions) == 18
    assert hist["eval_mean"] is None
    assert hist["log"] and hist["log"][-1]["env_steps"] == 50


def test_progress_plain_lines(library):
    stream = io.StringIO()
    learner, _ = fgym.train(CountEnv(), config=FAST, total_steps=200, eval_episodes=0,
                            progress=True, library=library, stream=stream)
    learner.close()
    lines = stream.getvalue().splitlines()
    assert 5 <= len(lines) <= 13
    assert re.search(r"200/200 steps \| \d+ steps/s \| return\(avg100\) [\d.]+ \| eps [\d.]+", lines[-1])
    assert "\r" not in stream.getvalue()


def test_cli_train_and_eval_line(library, tmp_path):
    env = dict(os.environ, FOXHUNT_DQN_LIBRARY=str(library.path))
    save = tmp_path / "c.safetensors"
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"hidden": [16], "learning_starts": 100}')
    r = subprocess.run(
        [sys.executable, "-m", "foxhunt_dqn.train", "--env", "CartPole-v1", "--steps", "600",
         "--seed", "1", "--config", str(cfg), "--eval-episodes", "3", "--save", str(save)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert r.returncode in (0, 1), r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"eval_return_mean=[\d.]+ eval_return_std=[\d.]+ episodes=3", last)
    assert "600/600 steps" in r.stderr
    if r.returncode == 1:  # checkpoints not implemented yet: a clear message, not a traceback
        assert "error: saving" in r.stderr and "Traceback" not in r.stderr
    else:
        assert save.is_file()


def test_cli_bad_config(library, tmp_path):
    env = dict(os.environ, FOXHUNT_DQN_LIBRARY=str(library.path))
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"hidden": [16, -3]}')
    r = subprocess.run(
        [sys.executable, "-m", "foxhunt_dqn.train", "--env", "CartPole-v1", "--steps", "10",
         "--config", str(cfg), "--quiet"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert r.returncode == 2
    assert "$.hidden[1]" in r.stderr and "Traceback" not in r.stderr


def test_checks_keep_the_best_policy(library):
    learner, hist = fgym.train("CartPole-v1", config=dict(FAST, learning_starts=50),
                               total_steps=600, eval_episodes=2, progress=False,
                               library=library, check_every=150, check_episodes=2)
    with learner:
        steps = [s for s, _ in hist["checks"]]
        assert steps == [150, 300, 450, 600]
        scores = [v for _, v in hist["checks"]]
        best = hist["best_check"]
        assert best["mean"] == max(scores)
        assert best["env_steps"] == max(s for s, v in hist["checks"] if v == best["mean"])
        if best["env_steps"] != 600:  # restored into online and target
            for name, _ in learner.tensors():
                if name.startswith("online."):
                    np.testing.assert_array_equal(
                        learner.get_tensor(name), learner.get_tensor("target." + name[7:]))
        assert hist["eval_episodes"] == 2 and hist["eval_mean"] >= 8


def test_progress_bar_on_a_terminal():
    from foxhunt_dqn._progress import Progress, fmt_fields

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    bar = Progress(100, stream=stream, interval=0.0)
    for done in range(0, 101, 10):
        bar.update(done, **fmt_fields(12.5, 0.5, 0.25))
    bar.close()
    text = stream.getvalue()
    assert text.count("\r[") == 12 and text.endswith("\n")
    assert "[########################] 100.0% 100/100 steps" in text
    assert "return(avg100) 12.5 | eps 0.500 | loss 0.25" in text


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_env_trains_and_evaluates(library, mode):
    """gym.make_vec's spec carries num_envs / vector_kwargs, which CartPoleEnv does not take:
    the evaluation env is built from the single env's spec."""
    vec = gymnasium.make_vec("CartPole-v1", 2, mode,
                             vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    spec = fgym.single_env_spec(vec)
    assert spec.id == "CartPole-v1" and "num_envs" not in spec.kwargs
    learner, hist = fgym.train(vec, config=dict(FAST, learning_starts=50), total_steps=200,
                               eval_episodes=2, progress=False, library=library)
    with learner:
        assert hist["eval_error"] is None and hist["eval_episodes"] == 2
        assert 8 <= hist["eval_mean"] <= 500
        assert learner.metrics()["env_steps"] == 200
    vec.close()


def test_failed_evaluation_keeps_the_trained_learner(library, tmp_path):
    save = tmp_path / "run.safetensors"
    bad_eval = CountEnv(action_space=spaces.Discrete(5))  # 5 actions: the learner has 3
    with pytest.warns(RuntimeWarning, match="final evaluation failed"):
        learner, hist = fgym.train(CountEnv(), config=FAST, total_steps=60, eval_episodes=2,
                                   eval_env=bad_eval, progress=False, library=library,
                                   save=save)
    with learner:
        assert "actions [5]" in hist["eval_error"] and hist["eval_mean"] is None
        assert learner.metrics()["env_steps"] == 60
        assert save.is_file() and hist["saved"] == str(save)
        with foxhunt_dqn.Learner(learner.config, library=library) as again:
            again.load(save)
            np.testing.assert_array_equal(again.get_tensor("online.torso.0.weight"),
                                          learner.get_tensor("online.torso.0.weight"))
