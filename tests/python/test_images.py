"""Image learners through the binding (ABI 1.1): obs_shape [C, H, W], uint8 observations by
address through the *_u8 fields, dtype and shape errors that name the caller's array, and the
per-env valid mask of observe / step."""

import numpy as np
import pytest
from safetensors.numpy import load_file

import foxhunt_dqn
from foxhunt_dqn import learner as learner_mod

IMAGE = {"obs_shape": [2, 6, 6], "obs_dtype": "uint8",
         "conv": [{"out": 4, "kernel": 3, "stride": 2}], "hidden": [16], "actions": [3],
         "batch_size": 4, "learning_starts": 0, "replay_capacity": 64, "seed": 5}


@pytest.fixture(autouse=True)
def needs_minor1(library):
    if not library.has_minor1:
        pytest.skip("the library is ABI minor 0")


@pytest.fixture
def hook(monkeypatch):
    """Records (function, {field: value}) of each library call the binding makes."""
    calls = []

    def record(name, args):
        calls.append((name, {f: getattr(args, f) for f, _ in args._fields_}))

    monkeypatch.setattr(learner_mod, "_call_hook", record)
    return calls


def frames(rng, *shape):
    return rng.integers(0, 256, shape, dtype=np.uint8)


def replay(learner, tmp_path):
    """(obs, next_obs, actions, returns) of the stored transitions (uint8 frames)."""
    path = tmp_path / "r.safetensors"
    learner.save(path, include_replay=True)
    t = load_file(str(path))
    n = int(t["replay.size"])
    f = t["replay.frames"]
    return (f[t["replay.obs_ids"][:n, 0]], f[t["replay.next_ids"][:n, 0]],
            t["replay.actions"][:n], t["replay.returns"][:n])


def test_shape_dtype_and_scale_come_from_obs_info(make_learner):
    L = make_learner(IMAGE)
    assert L.obs_shape == (2, 6, 6) and L.obs_dim == 72 and L.obs_dtype == np.uint8
    assert L.obs_scale == pytest.approx(1 / 255) and L.frame_stack == 1
    assert "obs_shape=[2, 6, 6] obs_dtype=uint8" in repr(L)
    flat = make_learner()
    assert flat.obs_shape == (4,) and flat.obs_dtype == np.float32 and flat.obs_scale == 1.0


def test_uint8_goes_by_address_through_the_u8_fields(make_learner, rng, hook):
    L = make_learner(IMAGE, num_envs=2)
    o, n = frames(rng, 2, 2, 6, 6), frames(rng, 2, 2, 6, 6)
    L.act(o)
    L.observe(o, [0, 1], [1.0, 2.0], n, [0, 0], [0, 0])
    L.step(o)
    L.step(n, [0.0, 0.0], [False, False], [False, False], final_obs=o)
    b = frames(rng, 4, 2, 6, 6)
    L.train_batch(b, np.zeros(4, np.int32), np.zeros(4), b, np.zeros(4, bool))
    (_, act), (_, obs), (_, st0), (_, st1), (_, bt) = hook
    assert act["obs_u8"] == o.ctypes.data and act["obs"] is None
    assert obs["obs_u8"] == o.ctypes.data and obs["next_obs_u8"] == n.ctypes.data
    assert obs["obs"] is None and obs["next_obs"] is None and obs["valid"] is None
    assert st0["obs_u8"] == o.ctypes.data and st0["obs"] is None
    assert st1["obs_u8"] == n.ctypes.data and st1["final_obs_u8"] == o.ctypes.data
    assert st1["final_obs"] is None
    assert bt["obs_u8"] == b.ctypes.data and bt["next_obs_u8"] == b.ctypes.data
    assert bt["obs"] is None and bt["next_obs"] is None


def test_uint8_and_float_learners_compute_the_same_q(make_learner, rng):
    """The uint8 learner's network sees obs / 255: a float32 learner with the same weights
    given obs / 255 gives the same Q-values."""
    u8 = make_learner(IMAGE)
    fl = make_learner(IMAGE, obs_dtype="float32")
    for name, _ in u8.tensors():
        if name.startswith("online."):
            fl.set_tensor(name, u8.get_tensor(name))
    o = frames(rng, 5, 2, 6, 6)
    _, q8 = u8.act(o, explore=False, return_q=True)
    _, qf = fl.act(o.astype(np.float32) / 255, explore=False, return_q=True)
    np.testing.assert_allclose(q8, qf, rtol=1e-5, atol=1e-6)
    a1, q1 = u8.act(o[3], explore=False, return_q=True)  # one (C, H, W) observation
    assert a1.shape == (1,) and q1.shape == (3,)
    # the same row alone: equal up to rounding (BLAS may pick another kernel for one row)
    np.testing.assert_allclose(q1, q8[3], rtol=1e-6, atol=1e-7)
    # a non-contiguous uint8 array is copied, not refused
    wide = frames(rng, 5, 2, 6, 12)[..., ::2]
    np.testing.assert_array_equal(u8.act(wide, explore=False),
                                  u8.act(np.ascontiguousarray(wide), explore=False))


@pytest.mark.parametrize("call", ["act", "observe", "step", "train_batch"])
def test_the_other_dtype_is_refused_naming_both(make_learner, call):
    L = make_learner(IMAGE, num_envs=2)
    F = make_learner(IMAGE, obs_dtype="float32", num_envs=2)
    for learner, arr, want, got in ((L, np.zeros((2, 2, 6, 6), np.float32), "uint8", "float32"),
                                    (F, np.zeros((2, 2, 6, 6), np.uint8), "float32", "uint8")):
        run = {"act": lambda: learner.act(arr),
               "observe": lambda: learner.observe(arr, [0, 0], [0, 0], arr, [0, 0], [0, 0]),
               "step": lambda: learner.step(arr),
               "train_batch": lambda: learner.train_batch(
                   np.concatenate([arr, arr]), np.zeros(4, np.int32), np.zeros(4),
                   np.concatenate([arr, arr]), np.zeros(4, bool))}[call]
        with pytest.raises(TypeError) as ei:
            run()
        msg = str(ei.value)
        assert f"takes {want} observations" in msg and f"array of {got}" in msg, msg
        assert "with shape (2, 2, 6, 6)" in msg or "with shape (4, 2, 6, 6)" in msg, msg


def test_shapes_name_the_callers_shape(make_learner):
    L = make_learner(IMAGE, num_envs=2)
    with pytest.raises(ValueError, match=r"obs: .*\(N, 2, 6, 6\), got shape \(2, 72\)$"):
        L.act(np.zeros((2, 72), np.uint8))
    with pytest.raises(ValueError, match=r"obs: .*\(N, 2, 6, 6\) or \(2, 6, 6\), "
                                         r"got shape \(2, 6, 5\)$"):
        L.act(np.zeros((2, 6, 5), np.uint8))
    with pytest.raises(ValueError, match=r"obs: .*\(2, 2, 6, 6\), got shape \(3, 2, 6, 6\)"):
        L.step(np.zeros((3, 2, 6, 6), np.uint8))
    with pytest.raises(ValueError, match=r"next_obs: .*\(2, 2, 6, 6\), got shape \(2, 6, 6\)"):
        z = np.zeros((2, 2, 6, 6), np.uint8)
        L.observe(z, [0, 0], [0, 0], z[0], [0, 0], [0, 0])
    one = make_learner(IMAGE)  # num_envs 1: step takes one (C, H, W) observation
    assert one.step(np.zeros((2, 6, 6), np.uint8)).shape == (1,)


def test_observe_valid_stores_only_valid_envs(make_learner, rng, tmp_path):
    L = make_learner(IMAGE, num_envs=3)
    o, n = frames(rng, 3, 2, 6, 6), frames(rng, 3, 2, 6, 6)
    L.observe(o, [0, 1, 2], [1.0, 2.0, 3.0], n, [0, 0, 0], [0, 0, 0],
              valid=np.array([True, False, True]))
    obs, nxt, act, ret = replay(L, tmp_path)
    np.testing.assert_array_equal(obs.reshape(2, 2, 6, 6), o[[0, 2]])
    np.testing.assert_array_equal(nxt.reshape(2, 2, 6, 6), n[[0, 2]])
    np.testing.assert_array_equal(act[:, 0], [0, 2])
    np.testing.assert_array_equal(ret, [1.0, 3.0])
    with pytest.raises(ValueError, match="valid: values must be 0 or 1"):
        L.observe(o, [0, 1, 2], [0, 0, 0], n, [0, 0, 0], [0, 0, 0], valid=[1, 2, 0])


def test_step_valid_skips_the_reset_call(make_learner, rng, tmp_path):
    """NEXT_STEP shape: env 1's second call carries its reset observation, valid false: no
    transition from it; its third call pairs the reset observation with the next one."""
    L = make_learner(IMAGE, num_envs=2, learning_starts=100)
    s = [frames(rng, 2, 2, 6, 6) for _ in range(3)]
    L.step(s[0])
    L.step(s[1], [1.0, 2.0], [False, True], [False, False])
    L.step(s[2], [3.0, 9.0], [False, False], [False, False], valid=[True, False])
    L.step(s[0], [4.0, 5.0], [False, False], [False, False])  # valid back to None: all
    obs, nxt, act, ret = replay(L, tmp_path)
    obs, nxt = obs.reshape(-1, 2, 6, 6), nxt.reshape(-1, 2, 6, 6)
    pairs = {(o.tobytes(), x.tobytes(), float(r)) for o, x, r in zip(obs, nxt, ret)}
    # (call of obs, env, call of next_obs, reward)
    want = {(s[a][e].tobytes(), s[b][e].tobytes(), r)
            for a, e, b, r in ((0, 0, 1, 1.0), (0, 1, 1, 2.0), (1, 0, 2, 3.0), (2, 0, 0, 4.0),
                               (2, 1, 0, 5.0))}
    assert len(ret) == 5 and pairs == want
    with pytest.raises(ValueError, match="valid given without rewards"):
        L.step(s[0], valid=[True, True])


def test_valid_on_a_float_learner_and_strict(make_learner, rng, tmp_path):
    L = make_learner(num_envs=2)
    o = rng.standard_normal((2, 4)).astype(np.float32)
    L.step(o)
    L.step(o + 1, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool),
           valid=np.array([False, True]))
    assert L.metrics()["replay_size"] == 1
    S = foxhunt_dqn.Learner(dict(IMAGE, num_envs=2), library=L.library, strict=True)
    try:
        f = frames(rng, 2, 2, 6, 6)
        S.step(f)
        S.step(f, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool),
               valid=np.array([True, False]))
        assert S.metrics()["replay_size"] == 1
        with pytest.raises(TypeError, match="takes uint8 observations"):
            S.act(f.astype(np.float32))
    finally:
        S.close()


def test_evaluate_policy_with_a_bare_uint8_learner(make_learner):
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium import spaces

    class Frames(gymnasium.Env):
        observation_space = spaces.Box(0, 255, (2, 6, 6), np.uint8)
        action_space = spaces.Discrete(3)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.full((2, 6, 6), 10, np.uint8), {}

        def step(self, action):
            self.t += 1
            return np.full((2, 6, 6), 10 * self.t, np.uint8), 1.0, self.t >= 4, False, {}

    L = make_learner(IMAGE)
    returns, lengths = foxhunt_dqn.evaluate_policy(L, Frames(), n_eval_episodes=2,
                                                   return_episode_rewards=True)
    assert returns == [4.0, 4.0] and lengths == [4, 4]


def test_gym_train_takes_uint8_images_as_images(library, tmp_path):
    """foxhunt_dqn.gym.train on a channel-last uint8 env: the learner takes (C, H, W) uint8
    frames (the env's transposed, episode ends included), evaluate reads them the same way;
    images=False flattens them to float32 as before."""
    pytest.importorskip("gymnasium")
    from foxhunt_dqn import gym as fgym
    from test_dqn import ImageEnv  # (6, 6, 2) frames whose pixel [0, 0, 0] is 7t

    cfg = {"hidden": [16], "n_step": 1, "batch_size": 8, "learning_starts": 8,
           "replay_capacity": 256, "dueling": False}
    learner, hist = fgym.train(ImageEnv(), config=cfg, total_steps=60, eval_episodes=2,
                               progress=False, library=library)
    with learner:
        assert learner.obs_dtype == np.uint8 and learner.obs_shape == (2, 6, 6)
        assert learner.config["obs_shape"] == [2, 6, 6] and learner.metrics()["updates"] > 0
        assert 0.0 <= hist["eval_mean"] <= 6.0  # the evaluation ran on the uint8 learner
        obs, nxt, _, _ = replay(learner, tmp_path)
        obs, nxt = obs.reshape(-1, 2, 6, 6), nxt.reshape(-1, 2, 6, 6)
        t = obs[:, 0, 0, 0] // 7  # each stored frame is the env's frame t, transposed
        np.testing.assert_array_equal(obs, np.stack([ImageEnv.frame(k).transpose(2, 0, 1)
                                                     for k in t]))
        np.testing.assert_array_equal(nxt, np.stack([ImageEnv.frame(k + 1).transpose(2, 0, 1)
                                                     for k in t]))  # episode ends: final_obs
        assert set(t) == {0, 1, 2, 3, 4, 5}
    flat, _ = fgym.train(ImageEnv(), config=cfg, total_steps=20, eval_episodes=1,
                         progress=False, library=library, images=False)
    with flat:
        assert flat.obs_dtype == np.float32 and flat.obs_dim == 72
