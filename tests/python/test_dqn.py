"""foxhunt_dqn.DQN: SB3's keywords mapped to the learner, vector envs in every autoreset mode,
spaces, predict / save / load, callbacks, progress, evaluate_policy."""

import json
import re
import sys
import types

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

import foxhunt_dqn  # noqa: E402
from foxhunt_dqn import DQN, BaseCallback, evaluate_policy, sb3_params  # noqa: E402
from test_gym import CountEnv  # noqa: E402

SMALL = dict(policy_kwargs={"net_arch": [8]}, batch_size=4, learning_starts=8,
             buffer_size=4096, train_freq=1, target_update_interval=20, device="cpu", seed=3)

ZOO_CARTPOLE = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                    learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
                    gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                    policy_kwargs={"net_arch": [256, 256]})


# ---- the keyword table ---------------------------------------------------------------------


def test_zoo_cartpole_keywords_in_learner_units():
    cfg = sb3_params.to_config(ZOO_CARTPOLE, num_envs=1, total_timesteps=50_000)
    assert cfg["lr"] == 2.3e-3 and cfg["batch_size"] == 64 and cfg["replay_capacity"] == 100_000
    assert cfg["learning_starts"] == 1001  # SB3 trains once num_timesteps > 1000
    assert cfg["train_freq"] == 256 and cfg["gradient_steps"] == 128
    # SB3 copies the target every 10 env steps, i.e. between every two training rounds
    assert cfg["target_update_interval"] == 128 and cfg["tau"] == 1.0
    assert cfg["epsilon_decay_steps"] == 8000 and cfg["epsilon_end"] == 0.04
    assert cfg["epsilon_start"] == 1.0 and cfg["hidden"] == [256, 256]
    assert (cfg["dueling"], cfg["double_dqn"], cfg["n_step"], cfg["loss"]) == (
        False, False, 1, "huber")
    assert "seed" not in cfg and cfg["backend"] == "auto"


@pytest.mark.parametrize("interval, n, tf, gs, tau, want", [
    (10000, 1, 4, 1, 1.0, (2500, 1.0)),         # SB3's defaults: every 2500 rounds
    (10000, 4, 4, 1, 1.0, (625, 1.0)),          # 2500 calls over 4 envs, train_freq 4 calls
    (1, 1, 4, 1, 0.005, (1, 1 - 0.995 ** 4)),   # 4 soft updates per round, compounded
    (10, 2, 1, 1, 1.0, (5, 1.0)),
    (3, 1, 1, 2, 1.0, (6, 1.0)),                # 3 calls of 2 updates
])
def test_target_update_schedule(interval, n, tf, gs, tau, want):
    got = sb3_params.target_schedule(interval, n, tf, gs, tau)
    assert got[0] == want[0] and got[1] == pytest.approx(want[1], rel=1e-12)


def test_train_freq_and_gradient_steps_forms():
    cfg = sb3_params.to_config(dict(train_freq=(4, "step"), gradient_steps=-1), 3, 1000)
    assert cfg["train_freq"] == 12 and cfg["gradient_steps"] == 12
    with pytest.raises(sb3_params.UnsupportedKeyword, match=r"train_freq=\(n, \"episode\"\)"):
        sb3_params.to_config(dict(train_freq=(1, "episode")), 1, 1000)


@pytest.mark.parametrize("kwargs, exc, pattern", [
    (dict(learning_rat=1e-3), TypeError, "unknown keyword 'learning_rat'"),
    (dict(tensorboard_log="runs"), ValueError, "tensorboard_log='runs' is not supported"),
    (dict(optimize_memory_usage=True), ValueError, "optimize_memory_usage=True"),
    (dict(learning_rate=lambda p: 1e-3), ValueError, "learning_rate as a schedule"),
    (dict(policy_kwargs={"net_arch": [8], "features_extractor_class": object}), ValueError,
     r"policy_kwargs\['features_extractor_class'\]"),
    (dict(policy_kwargs={"activation_fn": type("Tanh", (), {})}), ValueError,
     r"policy_kwargs\['activation_fn'\]"),
    (dict(policy_kwargs={"optimizer_kwargs": {"amsgrad": True}}), ValueError,
     r"optimizer_kwargs'\]\['amsgrad'\]"),
    (dict(device="tpu"), ValueError, "device='tpu'"),
    (dict(replay_buffer_class=object), ValueError, "replay_buffer_class"),
])
def test_unknown_and_unsupported_keywords_name_the_keyword(library, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        DQN(CountEnv(), library=library, **kwargs)


def test_policy_kwargs_optimizer_and_device():
    relu = type("ReLU", (), {})
    cfg = sb3_params.to_config(dict(policy_kwargs={
        "net_arch": [32, 16], "activation_fn": relu,
        "optimizer_kwargs": {"eps": 1e-5, "betas": (0.8, 0.99)}}, device="cuda:1"), 1, 100)
    assert cfg["hidden"] == [32, 16] and cfg["adam_eps"] == 1e-5
    assert (cfg["adam_beta1"], cfg["adam_beta2"]) == (0.8, 0.99)
    assert cfg["backend"] == "cuda" and cfg["device"] == 1


def test_readme_holds_the_generated_table():
    from pathlib import Path
    readme = (Path(foxhunt_dqn.__file__).resolve().parents[1] / "README.md")
    if not readme.is_file():
        pytest.skip("installed package: the README is not beside it")
    assert sb3_params.docs_table() in readme.read_text()


def test_learner_config_key_from_learner_config_wins(library):
    with DQN(CountEnv(), library=library, learner_config={"dueling": True, "n_step": 3},
             **SMALL) as m:
        cfg = m.learner.config
        assert cfg["dueling"] is True and cfg["n_step"] == 3 and cfg["double_dqn"] is False


# ---- vector envs in every autoreset mode -----------------------------------------------------


def replay_rows(model, tmp_path):
    """(obs, next_obs, discounts, returns) of every transition in the learner's replay."""
    path = model.save(tmp_path / "r", include_replay=True)
    t = load_file(str(path))
    n = int(t["replay.size"])
    return t["replay.obs"][:n], t["replay.next_obs"][:n], t["replay.discounts"][:n], \
        t["replay.returns"][:n]


def check_transitions(obs, nxt, disc, ret):
    """Each CountEnv transition goes from [ep, t, env] to [ep, t + 1, env]; the episode of
    length L = 2 + (ep + env) % 3 ends at t + 1 == L, terminated (no bootstrap) for even ep,
    truncated (bootstrap) for odd ep; never from one episode into the next."""
    np.testing.assert_array_equal(nxt[:, 0], obs[:, 0])
    np.testing.assert_array_equal(nxt[:, 2], obs[:, 2])
    np.testing.assert_array_equal(nxt[:, 1], obs[:, 1] + 1)
    length = 2 + (obs[:, 0] + obs[:, 2]) % 3
    assert np.all(nxt[:, 1] <= length)
    terminal = (nxt[:, 1] == length) & (obs[:, 0] % 2 == 0)
    np.testing.assert_array_equal(disc == 0, terminal)
    np.testing.assert_allclose(disc[~terminal], 0.99, rtol=1e-6)
    np.testing.assert_array_equal(ret, 1.0)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED,
                                  AutoresetMode.NEXT_STEP])
def test_sync_vector_env_every_autoreset_mode(library, tmp_path, mode):
    vec = SyncVectorEnv([lambda i=i: CountEnv(i) for i in range(3)], autoreset_mode=mode)
    with DQN(vec, library=library, **SMALL) as m:
        m.learn(300)
        assert m.num_timesteps >= 300
        obs, nxt, disc, ret = replay_rows(m, tmp_path)
        check_transitions(obs, nxt, disc, ret)
        queued = sum(len(q) for q in m._rollout.queues)
        # every genuine env step is stored (NEXT_STEP's reset calls are not env steps)
        assert len(obs) + queued == m.num_timesteps
        if mode != AutoresetMode.NEXT_STEP:
            assert queued == 0 and m.num_timesteps == 300
        assert m.learner.metrics()["updates"] > 0
        assert len(m._rollout.returns) > 60
        assert set(m._rollout.lengths) == {2, 3, 4}
    vec.close()


def test_async_vector_env_next_step(library, tmp_path):
    vec = AsyncVectorEnv([lambda i=i: CountEnv(i) for i in range(2)],
                         autoreset_mode=AutoresetMode.NEXT_STEP)
    with DQN(vec, library=library, **SMALL) as m:
        m.learn(120)
        check_transitions(*replay_rows(m, tmp_path))
    vec.close()


def expected_transitions(vec):
    """Every genuine env step of the CountEnvs of `vec`, as sorted rows (ep, t, env, action,
    discount): from [ep, t, env] to [ep, t + 1, env] with the action the env received."""
    rows = []
    for env in vec.envs:
        ep, t = 0, 0
        for a in env.actions:
            end = t + 1 == 2 + (ep + env.env_id) % 3
            disc = 0.0 if end and ep % 2 == 0 else 0.99
            rows.append((ep, t, env.env_id, int(a), disc))
            ep, t = (ep + 1, 0) if end else (ep, t + 1)
    return sorted(rows)


def test_next_step_with_valid_stores_exactly_the_genuine_transitions(library, tmp_path):
    """NEXT_STEP on ABI 1.1: Learner.step with the valid mask (no Python queues) stores one
    transition per genuine env step, with its action, and none for the reset calls."""
    if not library.has_minor1:
        pytest.skip("the library is ABI minor 0")
    vec = SyncVectorEnv([lambda i=i: CountEnv(i) for i in range(3)],
                        autoreset_mode=AutoresetMode.NEXT_STEP)
    with DQN(vec, library=library, **SMALL) as m:
        m.learn(200)
        assert not m._rollout.queued and not any(m._rollout.queues)
        assert m.learner.metrics()["updates"] > 0  # Learner.step trained on its schedule
        path = m.save(tmp_path / "r", include_replay=True)
        t = load_file(str(path))
        n = int(t["replay.size"])
        obs, nxt = t["replay.obs"][:n], t["replay.next_obs"][:n]
        check_transitions(obs, nxt, t["replay.discounts"][:n], t["replay.returns"][:n])
        got = sorted((int(o[0]), int(o[1]), int(o[2]), int(a[0]), float(np.round(d, 6)))
                     for o, a, d in zip(obs, t["replay.actions"][:n], t["replay.discounts"][:n]))
        want = expected_transitions(vec)
        assert n == m.num_timesteps == len(want)
        assert got == [(e, s, i, a, float(np.float32(d))) for e, s, i, a, d in want]
    vec.close()


def test_next_step_on_an_abi_1_0_library_uses_the_queues(library, tmp_path, monkeypatch):
    """With a library without the valid mask (a 1.0 table: simulated by the binding's
    has_minor1 and the 1.0 struct sizes) NEXT_STEP goes through the Python queues."""
    monkeypatch.setattr(library, "has_minor1", False)
    vec = SyncVectorEnv([lambda i=i: CountEnv(i) for i in range(3)],
                        autoreset_mode=AutoresetMode.NEXT_STEP)
    with DQN(vec, library=library, **SMALL) as m:
        assert m.learner._step_args.struct_size == foxhunt_dqn._abi.STEP_ARGS_SIZE_V1_0
        with pytest.raises(foxhunt_dqn.NotImplementedByLibrary, match="ABI 1.1"):
            m.learner.observe(np.zeros((3, 3)), [0, 0, 0], [0, 0, 0], np.zeros((3, 3)),
                              [0, 0, 0], [0, 0, 0], valid=[1, 1, 1])
        m.learn(300)
        assert m._rollout.queued
        obs, nxt, disc, ret = replay_rows(m, tmp_path)
        check_transitions(obs, nxt, disc, ret)
        assert len(obs) + sum(len(q) for q in m._rollout.queues) == m.num_timesteps
        assert m.learner.metrics()["updates"] > 0
    vec.close()


def test_make_vec_same_step_cartpole(library):
    vec = gymnasium.make_vec("CartPole-v1", 2, "sync",
                             vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    with DQN(vec, library=library, **SMALL) as m:
        m.learn(200)
        mean, std = evaluate_policy(m, "CartPole-v1", n_eval_episodes=2)
        assert 8 <= mean <= 500
    vec.close()


def test_warm_up_and_training_count_as_in_sb3(library):
    """learning_starts=50, train_freq=1, gradient_steps=1: SB3 updates once per env step with
    num_timesteps > 50, i.e. 50 updates in 100 steps."""
    with DQN(CountEnv(), library=library, **dict(SMALL, learning_starts=50)) as m:
        m.learn(50)
        assert m.learner.metrics()["updates"] == 0 and m.learner.metrics()["env_steps"] == 50
        m.learn(50, reset_num_timesteps=False)
        assert m.num_timesteps == 100
        assert m.learner.metrics()["updates"] == 50


def test_exploration_schedule_is_a_fraction_of_the_run(library):
    with DQN(CountEnv(), library=library,
             **dict(SMALL, exploration_fraction=0.25, exploration_final_eps=0.1)) as m:
        m.learn(400)
        assert m.learner.config["epsilon_decay_steps"] == 100
        assert m.exploration_rate == pytest.approx(0.1)


def test_a_later_learn_extends_the_schedule_as_sb3_does(library):
    """learn(T2, reset_num_timesteps=False) after T1 steps: SB3's schedule spans T1 + T2; the
    learner moves to it through an exact resume (replay, counters and step() state kept)."""
    kw = dict(SMALL, exploration_fraction=0.5, exploration_final_eps=0.0)
    with DQN(CountEnv(), library=library, **kw) as m:
        m.learn(100)
        assert m.learner.config["epsilon_decay_steps"] == 50 and m.exploration_rate == 0.0
        before = m.learner.metrics()
        m.learn(100, reset_num_timesteps=False)
        after = m.learner.metrics()
        assert m.learner.config["epsilon_decay_steps"] == 100 and m.num_timesteps == 200
        assert after["env_steps"] == 200 and after["replay_size"] == 200
        assert after["updates"] == before["updates"] + 100  # step() went on without a gap
        assert after["episodes"] == len(m._rollout.returns)


# ---- spaces --------------------------------------------------------------------------------


class BoxEnv(gymnasium.Env):
    """(2, 3) float64 observations; 5 steps an episode; any action space."""

    def __init__(self, action_space):
        self.observation_space = spaces.Box(-1, 1, (2, 3), np.float64)
        self.action_space = action_space
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.full((2, 3), 0.1 * self.t), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        return np.full((2, 3), 0.1 * self.t), float(self.t), self.t >= 5, False, {}


@pytest.mark.parametrize("space, branches", [
    (spaces.Discrete(3, start=-1), (3,)),
    (spaces.MultiDiscrete([2, 4]), (2, 4)),
    (spaces.MultiDiscrete([[2, 3], [3, 2]], start=[[1, 0], [0, -1]]), (2, 3, 3, 2)),
])
def test_spaces_and_predict(library, space, branches):
    with DQN(BoxEnv(space), library=library, **SMALL) as m:
        assert m.learner.obs_dim == 6 and m.learner.action_branches == branches
        m.learn(40)
        single, state = m.predict(np.zeros((2, 3)), deterministic=True)
        assert state is None and space.contains(np.asarray(single, dtype=space.dtype))
        batch, _ = m.predict(np.zeros((4, 2, 3), np.float32))
        assert len(batch) == 4 and all(space.contains(np.asarray(a, space.dtype)) for a in batch)


def test_integer_observations_that_are_not_images_refused(library):
    env = BoxEnv(spaces.Discrete(2))
    env.observation_space = spaces.Box(0, 255, (16,), np.uint8)
    with pytest.raises(TypeError, match="float dtype"):
        DQN(env, library=library)
    with pytest.raises(TypeError, match="CnnPolicy needs a uint8 image"):
        DQN("CnnPolicy", BoxEnv(spaces.Discrete(2)), library=library)


# ---- uint8 images (ABI 1.1) ----------------------------------------------------------------


class ImageEnv(gymnasium.Env):
    """Channel-last (6, 6, 2) uint8 frames: pixel [h, w, c] of step t is (6h + w + 36c + 7t)
    mod 256 (so t = pixel [0, 0, 0] / 7); 6 steps an episode; reward 1 when the action is
    t % 2."""

    def __init__(self):
        self.observation_space = spaces.Box(0, 255, (6, 6, 2), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    @staticmethod
    def frame(t):
        h, w, c = np.meshgrid(np.arange(6), np.arange(6), np.arange(2), indexing="ij")
        return ((6 * h + w + 36 * c + 7 * t) % 256).astype(np.uint8)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.frame(0), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        reward = float(action == self.t % 2)
        self.t += 1
        return self.frame(self.t), reward, self.t >= 6, False, {}


TINY_CONV = {"conv": [{"out": 4, "kernel": 3, "stride": 1}], "hidden": [16]}


def test_image_spaces_map_to_obs_shape_and_cnn_policy_to_nature(library):
    if not library.has_minor1:
        pytest.skip("the library is ABI minor 0")
    small = dict(SMALL, policy_kwargs=None, buffer_size=64)
    for shape, chw in (((4, 84, 84), [4, 84, 84]), ((84, 84, 4), [4, 84, 84]),
                       ((84, 84), [1, 84, 84])):
        env = BoxEnv(spaces.Discrete(2))
        env.observation_space = spaces.Box(0, 255, shape, np.uint8)
        with DQN("CnnPolicy", env, library=library, **small) as m:
            cfg = m.learner_config(1000)
            assert cfg["obs_shape"] == chw and cfg["obs_dtype"] == "uint8"
            assert cfg["torso"] == "nature" and "hidden" not in cfg and "obs_dim" not in cfg
            assert m.space.hwc == (shape == (84, 84, 4))
            names = dict(m.learner.tensors())
            assert names["online.torso.conv0.weight"] == (32, chw[0], 8, 8)
            assert names["online.torso.0.weight"] == (512, 3136)
    with pytest.raises(sb3_params.UnsupportedKeyword, match="net_arch.*CnnPolicy"):
        DQN("CnnPolicy", env, library=library, **dict(small, policy_kwargs={"net_arch": [8]}))


def test_cnn_policy_trains_and_predicts_on_channel_last_frames(library, tmp_path):
    """A small conv (learner_config) on a tiny channel-last image env: trains, predicts, and
    the replay holds the env's frames transposed to (C, H, W) as uint8."""
    if not library.has_minor1:
        pytest.skip("the library is ABI minor 0")
    kw = dict(SMALL, policy_kwargs=None, learner_config=TINY_CONV, buffer_size=512)
    with DQN("CnnPolicy", ImageEnv(), library=library, **kw) as m:
        assert m._config["torso"] == "custom" and m.learner.obs_shape == (2, 6, 6)
        assert m.learner.obs_dtype == np.uint8
        m.learn(300)
        assert m.num_timesteps == 300 and m.learner.metrics()["updates"] > 0
        a, _ = m.predict(ImageEnv.frame(3), deterministic=True)
        assert a in (0, 1)
        batch, _ = m.predict(np.stack([ImageEnv.frame(t) for t in range(4)]))
        assert batch.shape == (4,) and set(batch.tolist()) <= {0, 1}
        path = m.save(tmp_path / "img", include_replay=True)
        t = load_file(str(path))
        n = int(t["replay.size"])
        assert n == 300
        f = t["replay.frames"]
        obs = f[t["replay.obs_ids"][:n, 0]].reshape(n, 2, 6, 6)
        nxt = f[t["replay.next_ids"][:n, 0]].reshape(n, 2, 6, 6)
        steps = obs[:, 0, 0, 0] // 7
        for o, x, k in zip(obs, nxt, steps):
            np.testing.assert_array_equal(o, ImageEnv.frame(k).transpose(2, 0, 1))
            np.testing.assert_array_equal(x, ImageEnv.frame(k + 1).transpose(2, 0, 1))
        loaded = DQN.load(path, env=ImageEnv(), library=library)
        try:
            assert loaded.policy == "CnnPolicy" and loaded.learner.obs_shape == (2, 6, 6)
            b2, _ = loaded.predict(np.stack([ImageEnv.frame(t) for t in range(4)]),
                                   deterministic=True)
            d1, _ = m.predict(np.stack([ImageEnv.frame(t) for t in range(4)]),
                              deterministic=True)
            np.testing.assert_array_equal(b2, d1)
            mean, _ = evaluate_policy(loaded, ImageEnv(), n_eval_episodes=2)
            assert 0.0 <= mean <= 6.0
        finally:
            loaded.close()


# ---- save / load ---------------------------------------------------------------------------


def test_save_load_round_trip(library, tmp_path):
    m = DQN("MlpPolicy", CountEnv(), library=library, **SMALL)
    m.learn(100)
    path = m.save(tmp_path / "model")
    assert path.name == "model.safetensors" and (tmp_path / "model.safetensors.json").is_file()
    obs = np.array([[0, 1, 0], [3, 2, 0], [5, 0, 0]], np.float32)
    want = m.predict(obs, deterministic=True)[0]
    weights = m.learner.get_tensor("online.torso.0.weight")
    for loaded in (DQN.load(tmp_path / "model", env=CountEnv(), library=library),
                   DQN.load(path, env=CountEnv(), library=library)):
        with loaded:
            np.testing.assert_array_equal(loaded.learner.get_tensor("online.torso.0.weight"),
                                          weights)
            np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], want)
            assert loaded.num_timesteps == 100 and loaded.kwargs["batch_size"] == 4
            assert loaded.learner.config["target_update_interval"] == 20
            before = loaded.learner.metrics()["updates"]
            loaded.learn(20, reset_num_timesteps=False)  # and it trains on, with no warm-up
            assert loaded.num_timesteps == 120
            # one update per env step once the (emptied: no include_replay) replay holds a
            # batch of 4; no random warm-up (that would add none until learning_starts)
            assert loaded.learner.metrics()["updates"] == before + 20 - 3
    # without the sidecar: the checkpoint's own config
    (tmp_path / "model.safetensors.json").unlink()
    with DQN.load(path, env=CountEnv(), library=library) as bare:
        np.testing.assert_array_equal(bare.predict(obs, deterministic=True)[0], want)
        assert bare.learner.config["hidden"] == [8]
    m.close()


# ---- callbacks, progress, verbose ----------------------------------------------------------


def test_callbacks(library):
    class Counter(BaseCallback):
        def _on_training_start(self):
            self.started = True

        def _on_step(self):
            assert self.locals["rewards"].shape == (2,)
            return True

        def _on_training_end(self):
            self.ended = True

    calls = []

    def stop_after_10(locals_, globals_):
        calls.append(locals_["self"].num_timesteps)
        return len(calls) < 10

    vec = SyncVectorEnv([lambda i=i: CountEnv(i) for i in range(2)],
                        autoreset_mode=AutoresetMode.SAME_STEP)
    counter = Counter()
    with DQN(vec, library=library, **SMALL) as m:
        m.learn(1000, callback=[counter, stop_after_10])
        assert calls == list(range(2, 21, 2)) and m.num_timesteps == 20
        assert counter.n_calls == 10 and counter.num_timesteps == 20 and counter.model is m
        assert counter.started and counter.ended
    vec.close()


def test_plain_progress_lines(library, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if tqdm were not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with DQN(CountEnv(), library=library, verbose=1, **SMALL) as m:
        m.learn(300, progress_bar=True, log_interval=50)
    err = capsys.readouterr()
    last = err.err.strip().splitlines()[-1]
    assert re.search(r"300/300 steps \| \d+ steps/s \| env steps/s \d+ \| updates/s \d+ \| "
                     r"return [\d.]+$", last), last
    assert re.search(r"episodes 100 \| timesteps \d+ \| ep_rew_mean [\d.]+ \| fps \d+", err.out)


def test_tqdm_progress(library, monkeypatch):
    seen = []

    class FakeTqdm:
        def __init__(self, total, **kw):
            self.total, self.n = total, 0

        def set_postfix(self, fields, refresh=True):
            seen.append((self.n, dict(fields)))

        def refresh(self):
            pass

        def close(self):
            seen.append("closed")

    fake = types.ModuleType("tqdm.auto")
    fake.tqdm = FakeTqdm
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    monkeypatch.setitem(sys.modules, "tqdm.auto", fake)
    with DQN(CountEnv(), library=library, **SMALL) as m:
        m.learn(200, progress_bar=True)
    assert seen[-1] == "closed"
    n, fields = seen[-2]
    assert n == 200 and set(fields) == {"env steps/s", "updates/s", "return"}
    assert float(fields["updates/s"]) > 0 and float(fields["return"]) > 0


# ---- evaluate_policy -----------------------------------------------------------------------


def test_evaluate_policy_single_and_vector(library):
    with DQN(CountEnv(), library=library, **SMALL) as m:
        m.learn(20)
        # episodes of env 0 last 2, 3, 4, 2, 3, 4 steps with reward 1 per step
        mean, std = evaluate_policy(m, CountEnv(), n_eval_episodes=6)
        assert mean == pytest.approx(3.0) and std == pytest.approx(np.std([2, 3, 4] * 2))
        for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED):
            vec = SyncVectorEnv([lambda i=i: CountEnv(i) for i in range(2)], autoreset_mode=mode)
            rets, lens = evaluate_policy(m, vec, n_eval_episodes=5, return_episode_rewards=True)
            # env 0 plays 2 episodes (2, 3), env 1 plays 3 (3, 4, 2): SB3's split
            assert sorted(rets) == [2, 2, 3, 3, 4] and rets == [float(x) for x in lens]
            vec.close()


def test_evaluating_on_the_training_env_keeps_the_transitions_genuine(library, tmp_path):
    with DQN(CountEnv(), library=library, **SMALL) as m:
        m.learn(50)
        evaluate_policy(m, m.get_env(), n_eval_episodes=2)
        m.learn(50, reset_num_timesteps=False)
        obs, nxt, disc, ret = replay_rows(m, tmp_path)
        check_transitions(obs, nxt, disc, ret)
        assert len(obs) == 100


def test_sidecar_is_json_with_the_keywords(library, tmp_path):
    with DQN(CountEnv(), library=library, **dict(SMALL, policy_kwargs={
            "net_arch": [8], "activation_fn": type("ReLU", (), {})})) as m:
        p = m.save(tmp_path / "x.safetensors")
        meta = json.loads((tmp_path / "x.safetensors.json").read_text())
        assert p.name == "x.safetensors" and meta["format"] == "foxhunt-dqn-sb3"
        assert meta["policy_kwargs"] == {"net_arch": [8], "activation_fn": "ReLU"}
        assert meta["config"]["hidden"] == [8]
        with DQN.load(p, env=CountEnv(), library=library) as again:
            assert again.learner.config["hidden"] == [8]


def test_errors_pass_through_as_config_errors(library):
    with pytest.raises(foxhunt_dqn.ConfigError) as ei:
        DQN(CountEnv(), library=library, **dict(SMALL, gamma=1.5))
    assert ei.value.path == "$.gamma"
