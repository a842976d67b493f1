"""Round trips through the binding: loading, act, observe/train/metrics, train_batch, step,
tensors. Values are checked against a numpy forward pass of the learner's own tensors."""

import ctypes
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import foxhunt_dqn
from foxhunt_dqn import _abi


def forward(learner, obs, net="online"):
    """Q (N, KT) computed in numpy from the learner's tensors (layout of plugin/layout.h)."""
    cfg = learner.config
    h = np.asarray(obs, dtype=np.float64)
    for l in range(len(cfg["hidden"])):
        w = learner.get_tensor(f"{net}.torso.{l}.weight").astype(np.float64)
        b = learner.get_tensor(f"{net}.torso.{l}.bias").astype(np.float64)
        h = np.maximum(h @ w.T + b, 0.0)
    if not cfg["dueling"]:
        w = learner.get_tensor(f"{net}.head.q.weight").astype(np.float64)
        b = learner.get_tensor(f"{net}.head.q.bias").astype(np.float64)
        return h @ w.T + b
    v = h @ learner.get_tensor(f"{net}.head.value.weight").T + learner.get_tensor(
        f"{net}.head.value.bias")
    a = h @ learner.get_tensor(f"{net}.head.advantage.weight").T + learner.get_tensor(
        f"{net}.head.advantage.bias")
    q = []
    for part in np.split(a, np.cumsum(cfg["actions"])[:-1], axis=1):
        q.append(v + part - part.mean(axis=1, keepdims=True))
    return np.concatenate(q, axis=1)


# ---- loading -------------------------------------------------------------------------------


def test_library_table(library):
    assert library.abi_major == foxhunt_dqn.ABI_MAJOR == 1
    assert library.abi_minor >= 0
    assert library.api.struct_size >= 152
    # the mirror is minor 1; obs_info ends where the minor-1 table ends
    assert ctypes.sizeof(_abi.FhdApiV1) == 160
    assert _abi.FhdApiV1.obs_info.offset == _abi.API_V1_SIZE_MINOR_0 == 152
    assert library.has_minor1 == (library.api.struct_size >= 160)
    assert library.has_minor1 == (library.fn.obs_info is not None)
    assert _abi.has_member(152, "tensor_write") and not _abi.has_member(152, "obs_info")
    assert ctypes.sizeof(_abi.FhdError) == 784
    assert library.version.count(".") == 2
    assert library.status_name(0) == "FHD_OK"
    assert library.status_name(-7) == "FHD_ERR_CONFIG_RANGE"
    assert library.status_name(-999) == "FHD_UNKNOWN_STATUS"
    assert "out of its allowed range" in library.status_message(-7)
    # one Library per file
    assert foxhunt_dqn.load_library(library.path) is library


def test_manifest(library):
    m = foxhunt_dqn.manifest(library.path)
    assert m["entry_symbol"] == _abi.ENTRY_SYMBOL
    assert m["abi"]["major"] == 1
    assert m["library_version"] == library.version
    assert "obs_dim" in m["config_schema"]
    # byte-identical to the manifest.json copied beside the library by the build, if present
    beside = library.path.parent / "manifest.json"
    if beside.is_file():
        assert json.loads(beside.read_text()) == m


def test_config_properties(make_learner):
    learner = make_learner(actions=[3, 4], num_envs=2)
    assert learner.obs_dim == 4
    assert learner.action_branches == (3, 4)
    assert learner.num_branches == 2
    assert learner.total_actions == 7
    assert learner.num_envs == 2
    assert learner.batch_size == 8
    cfg = learner.config
    assert cfg["gamma"] == 0.99  # a manifest default filled in
    cfg["gamma"] = 0.5  # a copy
    assert learner.config["gamma"] == 0.99


def test_config_as_json_text_and_path(library, small_config, tmp_path):
    text = json.dumps(small_config)
    with foxhunt_dqn.Learner(text, library=library) as a:
        assert a.obs_dim == 4
    p = tmp_path / "cfg.json"
    p.write_text(text)
    with foxhunt_dqn.Learner(p, library=library) as b:
        assert b.action_branches == (3,)
    # numpy scalars and arrays in a dict config
    cfg = dict(small_config, obs_dim=np.int64(4), actions=np.array([2, 5]))
    with foxhunt_dqn.Learner(cfg, library=library) as c:
        assert c.action_branches == (2, 5)


# ---- act -----------------------------------------------------------------------------------


def test_act_shapes_and_q(make_learner, rng):
    learner = make_learner(actions=[3, 4])
    obs = rng.standard_normal((5, 4)).astype(np.float32)
    actions = learner.act(obs, explore=False)
    assert actions.shape == (5, 2) and actions.dtype == np.int32
    actions2, q = learner.act(obs, explore=False, return_q=True)
    assert q.shape == (5, 7) and q.dtype == np.float32
    np.testing.assert_array_equal(actions, actions2)
    q0, q1 = learner.split_q(q)
    np.testing.assert_array_equal(actions[:, 0], q0.argmax(axis=1))
    np.testing.assert_array_equal(actions[:, 1], q1.argmax(axis=1))
    np.testing.assert_allclose(q, forward(learner, obs), rtol=1e-5, atol=1e-5)
    # a single observation
    a1, q1s = learner.act(obs[2], explore=False, return_q=True)
    assert a1.shape == (2,) and q1s.shape == (7,)
    np.testing.assert_array_equal(a1, actions[2])
    np.testing.assert_allclose(q1s, q[2], rtol=1e-6, atol=1e-6)


def test_act_no_dueling_matches_numpy(make_learner, rng):
    learner = make_learner(dueling=False, actions=[2, 3, 2])
    obs = rng.standard_normal((9, 4)).astype(np.float32)
    _, q = learner.act(obs, explore=False, return_q=True)
    np.testing.assert_allclose(q, forward(learner, obs), rtol=1e-5, atol=1e-5)


def test_act_explore_follows_epsilon(make_learner, rng):
    obs = rng.standard_normal((4000, 4)).astype(np.float32)
    greedy_all = make_learner(epsilon_start=0.0, epsilon_end=0.0)
    g = greedy_all.act(obs, explore=False)
    np.testing.assert_array_equal(greedy_all.act(obs, explore=True), g)
    eps = make_learner(epsilon_start=0.6, epsilon_end=0.6)
    g = eps.act(obs, explore=False)
    differ = np.mean(eps.act(obs, explore=True) != g)
    # a random action equals the greedy one with probability 1/3
    assert abs(differ - 0.6 * 2 / 3) < 0.03
    # exploring advances the RNG: two calls differ; greedy calls do not
    assert np.any(eps.act(obs) != eps.act(obs))
    np.testing.assert_array_equal(eps.act(obs, explore=False), g)


def test_same_seed_same_results(make_learner, rng):
    obs = rng.standard_normal((16, 4)).astype(np.float32)
    a, b = make_learner(seed=3), make_learner(seed=3)
    _, qa = a.act(obs, return_q=True)
    _, qb = b.act(obs, return_q=True)
    np.testing.assert_array_equal(qa, qb)
    np.testing.assert_array_equal(a.act(obs), b.act(obs))
    c = make_learner(seed=4)
    _, qc = c.act(obs, return_q=True)
    assert not np.array_equal(qa, qc)


# ---- observe / train / metrics -------------------------------------------------------------


def _transitions(rng, n, obs_dim=4, k=3):
    return dict(
        obs=rng.standard_normal((n, obs_dim)).astype(np.float32),
        actions=rng.integers(0, k, (n, 1)).astype(np.int32),
        rewards=rng.standard_normal(n).astype(np.float32),
        next_obs=rng.standard_normal((n, obs_dim)).astype(np.float32),
        terminated=np.zeros(n, dtype=bool),
        truncated=np.zeros(n, dtype=bool),
    )


def test_observe_train_metrics_counters(make_learner, rng):
    learner = make_learner(num_envs=2)
    m = learner.metrics()
    assert (m["env_steps"], m["updates"], m["episodes"], m["replay_size"]) == (0, 0, 0, 0)
    assert m["backend"] == "cpu"
    for i in range(5):
        t = _transitions(rng, 2)
        t["terminated"][0] = i == 2
        t["truncated"][1] = i == 4
        learner.observe(**t)
    m = learner.metrics()
    assert m["env_steps"] == 10
    assert m["replay_size"] == 10
    assert m["episodes"] == 2
    assert m["updates"] == 0
    stats = learner.train(3)
    assert stats["updates_done"] == 3
    assert stats["update_index"] == 3
    assert np.isfinite(stats["loss"]) and stats["loss"] > 0
    assert stats["grad_norm"] > 0
    m = learner.metrics()
    assert m["updates"] == 3
    assert m["stats_update"] == 3
    assert m["loss"] == pytest.approx(stats["loss"], rel=1e-6)
    assert learner.train(0)["updates_done"] == 0
    assert learner.metrics()["updates"] == 3
    assert json.loads(learner.metrics_json()) .keys() == m.keys()


def test_actions_1d_when_one_branch(make_learner, rng):
    learner = make_learner()
    t = _transitions(rng, 1)
    t["actions"] = t["actions"].reshape(1)
    learner.observe(**t)
    assert learner.metrics()["replay_size"] == 1


def test_epsilon_schedule_in_metrics(make_learner, rng):
    learner = make_learner(epsilon_start=1.0, epsilon_end=0.2, epsilon_decay_steps=10)
    for _ in range(5):
        learner.observe(**_transitions(rng, 1))
    assert learner.metrics()["epsilon"] == pytest.approx(0.6, abs=1e-6)
    for _ in range(10):
        learner.observe(**_transitions(rng, 1))
    assert learner.metrics()["epsilon"] == pytest.approx(0.2, abs=1e-6)


# ---- train_batch ---------------------------------------------------------------------------


@pytest.mark.parametrize("double_dqn", [True, False])
def test_train_batch_targets_match_numpy(make_learner, rng, double_dqn):
    learner = make_learner(actions=[3, 2], gamma=0.9, double_dqn=double_dqn)
    # make the target network differ from the online one
    for name, shape in learner.tensors():
        if name.startswith("target."):
            learner.set_tensor(name, learner.get_tensor(name) + 0.3 * rng.standard_normal(shape))
    b = learner.batch_size
    obs = rng.standard_normal((b, 4)).astype(np.float32)
    nxt = rng.standard_normal((b, 4)).astype(np.float32)
    actions = np.stack([rng.integers(0, 3, b), rng.integers(0, 2, b)], axis=1).astype(np.int32)
    rewards = rng.standard_normal(b).astype(np.float32)
    terminated = np.array([0, 1] * (b // 2), dtype=np.uint8)
    discounts = np.linspace(0.5, 1.0, b).astype(np.float32)

    q = forward(learner, obs)
    q_on, q_tg = forward(learner, nxt), forward(learner, nxt, "target")
    boot = np.zeros(b)
    for d, (lo, k) in enumerate([(0, 3), (3, 2)]):
        sel = q_on[:, lo:lo + k] if double_dqn else q_tg[:, lo:lo + k]
        star = sel.argmax(axis=1)
        boot += q_tg[np.arange(b), lo + star] / 2
    y = rewards + discounts * (1 - terminated) * boot
    td = np.stack([q[np.arange(b), actions[:, 0]], q[np.arange(b), 3 + actions[:, 1]]], 1)
    td = td - y[:, None]

    out = learner.train_batch(obs, actions, rewards, nxt, terminated, discounts=discounts)
    assert out["updates_done"] == 1 and out["update_index"] == 1
    assert out["targets"].shape == (b,) and out["td_errors"].shape == (b, 2)
    np.testing.assert_allclose(out["targets"], y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["td_errors"], td, rtol=1e-4, atol=1e-4)
    huber = np.where(np.abs(td) <= 1, 0.5 * td**2, np.abs(td) - 0.5)
    assert out["loss"] == pytest.approx(huber.mean(), rel=1e-4)
    assert out["td_abs_mean"] == pytest.approx(np.abs(td).mean(), rel=1e-4)
    # the update changed the online network and recorded a gradient
    assert not np.allclose(forward(learner, obs), q)
    assert np.any(learner.get_tensor("grad.torso.0.weight") != 0)


def test_train_batch_default_discount_and_weights(make_learner, rng):
    learner = make_learner(gamma=0.8)
    b = learner.batch_size
    obs = rng.standard_normal((b, 4)).astype(np.float32)
    nxt = rng.standard_normal((b, 4)).astype(np.float32)
    rewards = rng.standard_normal(b).astype(np.float32)
    q_on, q_tg = forward(learner, nxt), forward(learner, nxt, "target")
    y = rewards + 0.8 * q_tg[np.arange(b), q_on.argmax(axis=1)]
    out = learner.train_batch(obs, np.zeros(b, np.int32), rewards, nxt, np.zeros(b, bool),
                              weights=np.zeros(b, np.float32))
    np.testing.assert_allclose(out["targets"], y, rtol=1e-4, atol=1e-4)
    assert out["loss"] == 0.0  # all weights zero


# ---- step ----------------------------------------------------------------------------------


def test_step_stores_and_trains_on_schedule(make_learner, rng):
    learner = make_learner(num_envs=2, train_freq=4, gradient_steps=3, learning_starts=8)
    obs = rng.standard_normal((2, 4)).astype(np.float32)
    a = learner.step(obs)
    assert a.shape == (2, 1)
    assert learner.last_train_stats["updates_done"] == 0
    assert learner.metrics()["env_steps"] == 0
    updates = []
    for i in range(8):
        obs = rng.standard_normal((2, 4)).astype(np.float32)
        a = learner.step(obs, np.ones(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
        updates.append(learner.last_train_stats["updates_done"])
    # env steps 2, 4, ..., 16; rounds every 4 env steps once 8 have been seen
    assert updates == [0, 0, 0, 3, 0, 3, 0, 3]
    m = learner.metrics()
    assert m["env_steps"] == 16 and m["updates"] == 9 and m["replay_size"] == 16
    assert learner.last_train_stats["update_index"] == 9


def test_step_episode_end_uses_final_obs(make_learner, rng):
    learner = make_learner(num_envs=2, learning_starts=10**6)
    obs = rng.standard_normal((2, 4)).astype(np.float32)
    learner.step(obs)
    final = np.full((2, 4), np.nan, dtype=np.float32)  # row 1 is ignored: env 1 did not end
    final[0] = 1.0
    learner.step(obs, [1.0, 2.0], [True, False], [False, False], final_obs=final)
    learner.step(obs, [1.0, 2.0], [False, False], [False, True], final_obs=np.ones((2, 4)))
    m = learner.metrics()
    assert m["episodes"] == 2
    assert m["env_steps"] == 4


# ---- tensors -------------------------------------------------------------------------------


def test_tensors_get_set_round_trip(make_learner, rng):
    learner = make_learner(hidden=[5], actions=[2, 3])
    table = dict(learner.tensors())
    assert table["online.torso.0.weight"] == (5, 4)
    assert table["online.torso.0.bias"] == (5,)
    assert table["online.head.value.weight"] == (1, 5)
    assert table["online.head.advantage.weight"] == (5, 5)
    for prefix in ("online.", "target.", "grad.", "adam.m.", "adam.v."):
        assert prefix + "torso.0.weight" in table
    for name, shape in learner.tensors():
        t = learner.get_tensor(name)
        assert t.shape == shape and t.dtype == np.float32
    w = learner.get_tensor("online.torso.0.weight")
    bound = 1 / np.sqrt(4)  # nn.Linear init U(-1/sqrt(in), 1/sqrt(in))
    assert np.all(np.abs(w) <= bound) and w.std() > bound / 4
    np.testing.assert_array_equal(w, learner.get_tensor("target.torso.0.weight"))
    new = rng.standard_normal((5, 4)).astype(np.float32)
    learner.set_tensor("online.torso.0.weight", new)
    np.testing.assert_array_equal(learner.get_tensor("online.torso.0.weight"), new)
    # float64 input converted; the target copy untouched
    learner.set_tensor("online.torso.0.bias", np.arange(5.0))
    np.testing.assert_array_equal(learner.get_tensor("online.torso.0.bias"), np.arange(5.0))
    np.testing.assert_array_equal(learner.get_tensor("target.torso.0.weight"), w)
    # the forward pass uses the written values
    obs = rng.standard_normal((3, 4)).astype(np.float32)
    _, q = learner.act(obs, explore=False, return_q=True)
    np.testing.assert_allclose(q, forward(learner, obs), rtol=1e-5, atol=1e-5)


def test_spectral_norm_tensors(make_learner):
    learner = make_learner(spectral_norm="all")
    names = [n for n, _ in learner.tensors()]
    assert "sn.online.torso.0.u" in names and "sn.target.torso.1.v" in names
    u = learner.get_tensor("sn.online.torso.0.u")
    assert u.shape == (16,) and np.linalg.norm(u) == pytest.approx(1.0, rel=1e-4)


# ---- threads -------------------------------------------------------------------------------


def test_one_learner_from_several_threads(make_learner, rng):
    learner = make_learner()
    obs = rng.standard_normal((32, 4)).astype(np.float32)
    expected = learner.act(obs, explore=False)
    errors = []

    def work():
        try:
            for _ in range(200):
                np.testing.assert_array_equal(learner.act(obs, explore=False), expected)
                learner.metrics()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_step_takes_what_a_single_gym_env_returns(make_learner, rng):
    """(S,) observations and Python scalars, as gymnasium.Env.step returns them, give the same
    learner state as the batched (1, S) / one-element-array form."""
    a, b = make_learner(), make_learner()
    obs = rng.standard_normal((40, 4))  # float64, as many envs return
    rew = rng.standard_normal(40)
    ends = rng.random(40) < 0.2
    act_a = a.step(obs[0])
    act_b = b.step(obs[0:1].astype(np.float32))
    assert act_a.shape == (1,) and act_b.shape == (1, 1)
    for t in range(1, 40):
        te, tr = bool(ends[t]), bool(ends[t] and t % 2)
        final = obs[t] * 2 if te or tr else None
        act_a = a.step(obs[t], float(rew[t]), te, tr, final)
        act_b = b.step(obs[t:t + 1].astype(np.float32), np.array([rew[t]], np.float32),
                       np.array([te]), np.array([tr]),
                       None if final is None else final[None].astype(np.float32))
        assert act_a.dtype == np.int32 and act_a.shape == (1,)
        assert act_a[0] == act_b[0, 0]
    ma, mb = a.metrics(), b.metrics()
    assert ma["env_steps"] == mb["env_steps"] == 39 and ma["updates"] == mb["updates"] > 0
    assert ma["episodes"] == mb["episodes"] == int(ends[1:].sum())
    np.testing.assert_array_equal(a.get_tensor("online.torso.0.weight"),
                                  b.get_tensor("online.torso.0.weight"))
    # numpy scalars and 0-d arrays are scalars too; the returned actions are fresh arrays
    r1 = a.step(obs[0], np.float32(1.0), np.bool_(False), np.array(False))
    r2 = a.step(obs[1], 1, 0, 0)
    assert not np.shares_memory(r1, r2)


@pytest.mark.skipif(not os.environ.get("FHD_EXPECT_PACKAGED"),
                    reason="only when testing an installed wheel (run_wheel_test.sh)")
def test_installed_package(library):
    """The wheel's own library is the one found first, and its fhd-host runs against it."""
    pkg = Path(foxhunt_dqn.__file__).resolve().parent
    assert "site-packages" in str(pkg)
    assert library.path.resolve() == pkg / "libfoxhunt_dqn.so"
    assert (pkg / "manifest.json").read_text() == library.manifest_text()
    host = Path(sys.executable).parent / "foxhunt-dqn-host"
    r = subprocess.run([str(host), "info"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert str(pkg / "libfoxhunt_dqn.so") in r.stdout + r.stderr
