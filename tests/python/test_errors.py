"""Every error path: each becomes a clear Python exception, never a crash."""

import ctypes
import ctypes.util
import os
import subprocess
import sys

import numpy as np
import pytest

import foxhunt_dqn
from foxhunt_dqn import _abi, _library
from foxhunt_dqn.errors import make_error


# ---- library loading -----------------------------------------------------------------------


def test_missing_library_path(tmp_path):
    with pytest.raises(foxhunt_dqn.LibraryNotFoundError) as ei:
        foxhunt_dqn.load_library(tmp_path / "nope" / "libfoxhunt_dqn.so")
    assert "nope" in str(ei.value)
    assert isinstance(ei.value, FileNotFoundError)
    with pytest.raises(foxhunt_dqn.LibraryNotFoundError):
        foxhunt_dqn.Learner({"obs_dim": 4, "actions": [2]}, library=tmp_path)  # dir, no lib


def test_missing_library_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FOXHUNT_DQN_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(foxhunt_dqn.LibraryNotFoundError) as ei:
        foxhunt_dqn.load_library()
    assert "FOXHUNT_DQN_LIBRARY" in str(ei.value)


def test_library_env_names_a_directory(monkeypatch, library, tmp_path):
    monkeypatch.setenv("FOXHUNT_DQN_LIBRARY", str(library.path.parent))
    assert foxhunt_dqn.find_library() == library.path.parent / "libfoxhunt_dqn.so"
    assert foxhunt_dqn.load_library() is library
    monkeypatch.setenv("FOXHUNT_DQN_LIBRARY", str(tmp_path))  # a directory without it
    with pytest.raises(foxhunt_dqn.LibraryNotFoundError,
                       match="FOXHUNT_DQN_LIBRARY=.*holds no libfoxhunt_dqn.so"):
        foxhunt_dqn.load_library()


def test_not_a_library(tmp_path):
    bogus = tmp_path / "libfoxhunt_dqn.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(foxhunt_dqn.LibraryError) as ei:
        foxhunt_dqn.load_library(bogus)
    assert "cannot load" in str(ei.value)


def test_library_without_entry_symbol():
    libm = ctypes.util.find_library("m")  # a real shared library that is not ours
    if libm is None:
        pytest.skip("no libm to load")
    with pytest.raises(foxhunt_dqn.LibraryError) as ei:
        _library.Library(libm)
    assert "fhd_get_api_base" in str(ei.value)


def test_unsupported_abi_major(library, monkeypatch):
    monkeypatch.setattr(_abi, "ABI_MAJOR", 2)
    with pytest.raises(foxhunt_dqn.LibraryError) as ei:
        _library.Library(library.path)
    err = ei.value
    assert err.code == _abi.ERR_UNSUPPORTED_VERSION
    assert "ABI major 2" in str(err)


def test_table_too_small(library, monkeypatch):
    # pretend this binding used a member past the library's table
    real = _abi.member_end
    monkeypatch.setattr(_abi, "member_end", lambda name: 4096 if name == "tensor_write" else real(name))
    with pytest.raises(foxhunt_dqn.LibraryError) as ei:
        _library.Library(library.path)
    assert ei.value.code == _abi.ERR_STRUCT_SIZE
    assert "tensor_write" in str(ei.value)


# ---- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg, cls, path",
    [
        ({"obs_dim": 4, "actions": [2], "lr": 5.0}, foxhunt_dqn.ConfigError, "$.lr"),
        ({"obs_dim": 4, "actions": [2], "hidden": [8, 0]}, foxhunt_dqn.ConfigError, "$.hidden[1]"),
        ({"obs_dim": 4, "actions": [2], "bogus": 1}, foxhunt_dqn.ConfigError, "$.bogus"),
        ({"obs_dim": "4", "actions": [2]}, foxhunt_dqn.ConfigError, "$.obs_dim"),
        ({"actions": [2]}, foxhunt_dqn.ConfigError, "$.obs_dim"),
        ({"obs_dim": 4, "actions": [2], "epsilon_start": 0.1, "epsilon_end": 0.5},
         foxhunt_dqn.ConfigError, "$.epsilon_end"),
    ],
)
def test_bad_config_names_path(library, cfg, cls, path):
    with pytest.raises(cls) as ei:
        foxhunt_dqn.Learner(cfg, library=library)
    err = ei.value
    assert err.path == path
    assert err.code < 0 and err.name.startswith("FHD_ERR_CONFIG_")
    assert err.message
    assert isinstance(err, ValueError)  # config errors are value errors too


def test_config_codes(library):
    cases = {
        _abi.ERR_CONFIG_RANGE: {"obs_dim": 0, "actions": [2]},
        _abi.ERR_CONFIG_UNKNOWN_KEY: {"obs_dim": 4, "actions": [2], "lrr": 0.1},
        _abi.ERR_CONFIG_TYPE: {"obs_dim": 4, "actions": [2], "dueling": "yes"},
        _abi.ERR_CONFIG_MISSING: {"obs_dim": 4},
        _abi.ERR_CONFIG_INCONSISTENT: {"obs_dim": 4, "actions": [2], "batch_size": 64,
                                       "replay_capacity": 10},
    }
    for code, cfg in cases.items():
        with pytest.raises(foxhunt_dqn.ConfigError) as ei:
            foxhunt_dqn.Learner(cfg, library=library)
        assert ei.value.code == code, (cfg, ei.value)
        assert ei.value.name == library.status_name(code)


def test_config_syntax_error_line_column(library):
    text = '{"obs_dim": 4,\n  "actions": [2,]\n}'
    with pytest.raises(foxhunt_dqn.ConfigSyntaxError) as ei:
        foxhunt_dqn.Learner(text, library=library)
    err = ei.value
    assert err.code == _abi.ERR_CONFIG_SYNTAX
    assert err.line == 2 and err.column > 0
    assert "line 2" in str(err)


def test_config_wrong_python_types(library):
    with pytest.raises(TypeError, match="config"):
        foxhunt_dqn.Learner(42, library=library)
    with pytest.raises(ValueError, match="NaN"):
        foxhunt_dqn.Learner({"obs_dim": 4, "actions": [2], "lr": float("nan")}, library=library)


def test_backend_unavailable(library):
    try:
        learner = foxhunt_dqn.Learner({"obs_dim": 4, "actions": [2], "backend": "cuda"},
                                      library=library)
    except foxhunt_dqn.BackendUnavailable as exc:
        assert exc.code == _abi.ERR_BACKEND_UNAVAILABLE
        assert exc.message
    else:
        learner.close()
        pytest.skip("the CUDA backend is available here")
    with foxhunt_dqn.Learner({"obs_dim": 4, "actions": [2], "backend": "auto"},
                             library=library) as auto:
        m = auto.metrics()
        assert m["backend"] == "cpu" and m["backend_requested"] == "auto"
        assert m["backend_fallback_reason"]


def test_error_classes():
    assert isinstance(make_error(-17, "FHD_ERR_NOT_READY", "x"), foxhunt_dqn.NotReady)
    assert isinstance(make_error(-19, "FHD_ERR_CHECKPOINT_CORRUPT", "x"),
                      foxhunt_dqn.CheckpointError)
    assert isinstance(make_error(-12, "FHD_ERR_NOT_IMPLEMENTED", "x"), NotImplementedError)
    assert isinstance(make_error(-15, "FHD_ERR_NONFINITE", "x"), ValueError)
    e = make_error(-99, "FHD_UNKNOWN_STATUS", "x")
    assert isinstance(e, foxhunt_dqn.InternalError) and e.code == -99
    assert str(make_error(-16, "FHD_ERR_ACTION_RANGE", "msg")) == "FHD_ERR_ACTION_RANGE (-16): msg"


# ---- status codes of learner calls ---------------------------------------------------------


def test_not_ready(make_learner):
    learner = make_learner()
    with pytest.raises(foxhunt_dqn.NotReady) as ei:
        learner.train(1)
    assert ei.value.code == _abi.ERR_NOT_READY
    assert "batch_size" in ei.value.message


def test_nan_observation_names_env(make_learner):
    learner = make_learner(num_envs=3)
    obs = np.zeros((3, 4), np.float32)
    nxt = np.zeros((3, 4), np.float32)
    nxt[2, 1] = np.nan
    flags = np.zeros(3, bool)
    with pytest.raises(foxhunt_dqn.NonFiniteError) as ei:
        learner.observe(obs, np.zeros(3, np.int32), np.zeros(3), nxt, flags, flags)
    assert ei.value.code == _abi.ERR_NONFINITE
    assert "env 2" in ei.value.message and "next_obs" in ei.value.message
    assert learner.metrics()["env_steps"] == 0  # nothing stored
    obs[1, 0] = np.inf
    with pytest.raises(foxhunt_dqn.NonFiniteError, match="env 1"):
        learner.step(obs)
    with pytest.raises(foxhunt_dqn.NonFiniteError, match="observation 1"):
        learner.act(obs)


def test_action_out_of_range(make_learner):
    learner = make_learner(num_envs=2)
    z = np.zeros((2, 4), np.float32)
    f = np.zeros(2, bool)
    with pytest.raises(foxhunt_dqn.ActionRangeError) as ei:
        learner.observe(z, np.array([0, 3], np.int32), np.zeros(2), z, f, f)
    assert "[0, 2]" in ei.value.message and "env 1" in ei.value.message


def test_flags_must_be_0_or_1(make_learner):
    learner = make_learner()
    z = np.zeros((1, 4), np.float32)
    with pytest.raises(foxhunt_dqn.InvalidArgument) as ei:
        learner.observe(z, [0], [0.0], z, np.array([2], np.uint8), np.zeros(1, np.uint8))
    assert "terminated" in ei.value.message
    with pytest.raises(ValueError, match="terminated: values must be 0 or 1"):
        learner.observe(z, [0], [0.0], z, np.array([2], np.int64), np.zeros(1, np.uint8))


def test_size_mismatch_from_library(make_learner):
    learner = make_learner(num_envs=2)
    z = np.zeros((3, 4), np.float32)
    # step knows num_envs: the binding says it before the library is called
    with pytest.raises(ValueError, match=r"obs: .*shape \(2, 4\), got shape \(3, 4\) "
                                         r"\(num_envs is 2\)"):
        learner.step(z)
    with pytest.raises(foxhunt_dqn.SizeMismatch) as ei:
        learner.observe(z, np.zeros(3, np.int32), np.zeros(3), z, np.zeros(3, bool),
                        np.zeros(3, bool))
    assert "num_envs" in ei.value.message
    b = learner.batch_size + 1
    with pytest.raises(foxhunt_dqn.SizeMismatch, match="batch_size"):
        learner.train_batch(np.zeros((b, 4)), np.zeros(b, np.int32), np.zeros(b),
                            np.zeros((b, 4)), np.zeros(b, bool))


def test_step_rewards_without_previous_step(make_learner):
    learner = make_learner()
    z = np.zeros((1, 4), np.float32)
    with pytest.raises(foxhunt_dqn.InvalidArgument, match="previous step"):
        learner.step(z, [1.0], [False], [False])


def test_step_argument_combinations(make_learner):
    learner = make_learner()
    z = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match="without rewards"):
        learner.step(z, terminated=[False])
    learner.step(z)
    with pytest.raises(ValueError, match="terminated and truncated are required"):
        learner.step(z, [1.0])


def test_train_batch_bad_values(make_learner):
    learner = make_learner()
    b = learner.batch_size
    args = (np.zeros((b, 4)), np.zeros(b, np.int32), np.zeros(b), np.zeros((b, 4)),
            np.zeros(b, bool))
    with pytest.raises(foxhunt_dqn.InvalidArgument, match="discounts"):
        learner.train_batch(*args, discounts=np.full(b, 1.5))
    with pytest.raises(foxhunt_dqn.InvalidArgument, match="weights"):
        learner.train_batch(*args, weights=np.full(b, -1.0))
    assert learner.metrics()["updates"] == 0


def test_tensor_errors(make_learner):
    learner = make_learner()
    with pytest.raises(foxhunt_dqn.NotFound) as ei:
        learner.get_tensor("online.nope")
    assert "online.nope" in ei.value.message
    with pytest.raises(foxhunt_dqn.NotFound):
        learner.set_tensor("nope", np.zeros(3))
    with pytest.raises(foxhunt_dqn.InvalidArgument, match="not writable"):
        learner.set_tensor("grad.torso.0.bias", np.zeros(16))
    bad = np.zeros(16)
    bad[3] = np.nan
    with pytest.raises(foxhunt_dqn.NonFiniteError):
        learner.set_tensor("online.torso.0.bias", bad)
    with pytest.raises(ValueError, match=r"array: expected .* shape \(16,\)"):
        learner.set_tensor("online.torso.0.bias", np.zeros(15))
    with pytest.raises(TypeError, match="name"):
        learner.get_tensor(3)
    with pytest.raises(ValueError, match="NUL"):
        learner.get_tensor("online\0x")


def test_metrics_survive_growth(make_learner, monkeypatch):
    # metrics text may grow between the size query and the fetch: the binding retries
    learner = make_learner()
    real = learner._fn.metrics
    calls = []

    def shrinking(h, buf, cap, needed):
        calls.append(cap)
        if buf is not None and len(calls) == 2:  # first fetch: pretend it grew
            return real(h, buf, 1, needed)
        return real(h, buf, cap, needed)

    class Fn:
        def __getattr__(self, name):
            return shrinking if name == "metrics" else getattr(learner.library.fn, name)

    learner._fn = Fn()
    m = learner.metrics()
    assert "env_steps" in m and len(calls) == 3


# ---- checkpoints ---------------------------------------------------------------------------


def _transitions(rng, n=1):
    z = lambda: rng.standard_normal((n, 4)).astype(np.float32)  # noqa: E731
    return dict(obs=z(), actions=rng.integers(0, 3, (n, 1)).astype(np.int32),
                rewards=rng.standard_normal(n).astype(np.float32), next_obs=z(),
                terminated=np.zeros(n, bool), truncated=np.zeros(n, bool))


def _save_or_skip(learner, path, **kw):
    try:
        learner.save(path, **kw)
    except foxhunt_dqn.NotImplementedByLibrary as exc:
        assert exc.code == _abi.ERR_NOT_IMPLEMENTED and exc.message
        pytest.skip(f"checkpoints are not implemented by this library: {exc.message}")


def test_checkpoint_round_trip(make_learner, rng, tmp_path):
    learner = make_learner()
    for _ in range(20):
        learner.observe(**_transitions(rng))
    learner.train(3)
    obs = rng.standard_normal((4, 4)).astype(np.float32)
    _, q = learner.act(obs, explore=False, return_q=True)
    path = tmp_path / "ckpt.safetensors"
    _save_or_skip(learner, path, include_replay=True)
    assert path.is_file()
    # weights, optimiser state and counters
    fresh = make_learner()
    fresh.load(path)
    _, q2 = fresh.act(obs, explore=False, return_q=True)
    np.testing.assert_array_equal(q, q2)
    for name, _ in learner.tensors():
        if not name.startswith("grad."):
            np.testing.assert_array_equal(fresh.get_tensor(name), learner.get_tensor(name))
    assert fresh.metrics()["updates"] == 3
    assert fresh.metrics()["replay_size"] == 0  # not restored without include_replay
    # exact resume: the next updates are bit for bit those of the original learner
    resumed = make_learner()
    resumed.load(path, include_replay=True)
    assert resumed.metrics()["replay_size"] == 20
    assert resumed.train(2) == learner.train(2)


def test_checkpoint_errors(make_learner, rng, tmp_path):
    learner = make_learner()
    ok = tmp_path / "ok.safetensors"
    _save_or_skip(learner, ok)
    with pytest.raises(foxhunt_dqn.CheckpointError) as ei:
        learner.save(tmp_path / "no" / "such" / "dir" / "x.safetensors")
    assert ei.value.code == _abi.ERR_IO and ei.value.message
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(foxhunt_dqn.CheckpointError) as ei:
        learner.load(junk)
    assert ei.value.code == _abi.ERR_CHECKPOINT_CORRUPT
    with pytest.raises(foxhunt_dqn.CheckpointError) as ei:
        learner.load(tmp_path / "missing.safetensors")
    assert ei.value.code == _abi.ERR_IO
    with pytest.raises(foxhunt_dqn.CheckpointError) as ei:
        make_learner(hidden=[8]).load(ok)
    assert ei.value.code == _abi.ERR_CHECKPOINT_MISMATCH and "hidden" in ei.value.message
    with pytest.raises(foxhunt_dqn.CheckpointError) as ei:
        make_learner().load(ok, include_replay=True)  # saved without the replay
    assert ei.value.code == _abi.ERR_CHECKPOINT_MISMATCH
    # a failed load leaves the learner as it was
    obs = rng.standard_normal((2, 4)).astype(np.float32)
    other = make_learner(seed=8)
    _, before = other.act(obs, explore=False, return_q=True)
    with pytest.raises(foxhunt_dqn.CheckpointError):
        other.load(ok)  # another seed: refused
    _, after = other.act(obs, explore=False, return_q=True)
    np.testing.assert_array_equal(before, after)


def test_checkpoint_path_with_nul(make_learner):
    with pytest.raises(ValueError, match="NUL"):
        make_learner().save("a\0b")


# ---- closed learners -----------------------------------------------------------------------


def test_calls_after_close(make_learner):
    learner = make_learner()
    z = np.zeros((1, 4), np.float32)
    learner.close()
    learner.close()  # idempotent
    assert learner.closed
    calls = [
        lambda: learner.act(z),
        lambda: learner.observe(z, [0], [0.0], z, [False], [False]),
        lambda: learner.step(z),
        lambda: learner.train(1),
        lambda: learner.train_batch(np.zeros((8, 4)), np.zeros(8, np.int32), np.zeros(8),
                                    np.zeros((8, 4)), np.zeros(8, bool)),
        lambda: learner.metrics(),
        lambda: learner.save("x"),
        lambda: learner.load("x"),
        lambda: learner.tensors(),
        lambda: learner.get_tensor("online.torso.0.bias"),
        lambda: learner.set_tensor("online.torso.0.bias", np.zeros(16)),
    ]
    for call in calls:
        with pytest.raises(foxhunt_dqn.LearnerClosedError, match="closed"):
            call()
    assert "closed" in repr(learner)


def test_context_manager_closes(library, small_config):
    with foxhunt_dqn.Learner(small_config, library=library) as learner:
        learner.act(np.zeros(4, np.float32))
    assert learner.closed
    with pytest.raises(foxhunt_dqn.LearnerClosedError):
        with learner:
            pass


def test_failed_init_does_not_leak_a_handle(library):
    with pytest.raises(foxhunt_dqn.ConfigError):
        foxhunt_dqn.Learner({"obs_dim": -1, "actions": [2]}, library=library)


def test_bad_calls_do_not_crash_the_interpreter(library):
    """A batch of wrong calls in a child process: it must exit normally."""
    code = f"""
import numpy as np, foxhunt_dqn
L = foxhunt_dqn.Learner({{"obs_dim": 4, "actions": [2]}}, library={str(library.path)!r})
bad = [
    lambda: L.act(np.zeros((2, 3), np.float32)),
    lambda: L.act(np.zeros(5)),
    lambda: L.act(np.zeros((2, 4)), out=np.zeros((1, 1), np.int32)),
    lambda: L.observe(np.zeros((1, 4)), [0], [0.0, 1.0], np.zeros((1, 4)), [0], [0]),
    lambda: L.step(np.zeros((1, 4)), None, None, None, np.zeros((1, 4))),
    lambda: L.train(-1),
    lambda: L.train(2**40),
    lambda: L.get_tensor("online.torso.0.weight", out=np.zeros(3, np.float32)),
    lambda: L.metrics() and L._fn.metrics(L._h, None, 0, None),
]
for f in bad:
    try:
        f()
    except Exception:
        pass
L.close()
L.close()
print("alive")
"""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "alive"


def test_diverged_update_raises_diverged_error(make_learner, rng):
    """FHD_ERR_DIVERGED (ABI minor 1): an update whose MSE loss would be Inf is not applied;
    the exception carries the library's message and the learner is unchanged."""
    learner = make_learner(loss="mse")
    b = learner.batch_size
    obs = rng.standard_normal((b, 4)).astype(np.float32)
    rewards = np.zeros(b, np.float32)
    rewards[1] = 1e30
    before = learner.get_tensor("online.torso.0.weight")
    with pytest.raises(foxhunt_dqn.DivergedError) as ei:
        learner.train_batch(obs, np.zeros(b, np.int32), rewards, obs, np.zeros(b, bool))
    err = ei.value
    assert err.code == _abi.ERR_DIVERGED == -26
    assert err.name == learner.library.status_name(-26) == "FHD_ERR_DIVERGED"
    assert "diverged" in err.message and "not applied" in err.message
    assert learner.metrics()["diverged_updates"] == 1 and learner.metrics()["updates"] == 0
    np.testing.assert_array_equal(learner.get_tensor("online.torso.0.weight"), before)
    assert isinstance(make_error(-26, "FHD_ERR_DIVERGED", "x"), ArithmeticError)


@pytest.mark.parametrize("strict", [False, True])
def test_diverged_step_still_returns_its_actions(library, strict):
    """step() on a diverging schedule (MSE of 1e30 returns) stores its transition and chooses
    actions; DivergedError.actions holds them."""
    cfg = {"obs_dim": 4, "actions": [3], "hidden": [8], "batch_size": 2, "learning_starts": 0,
           "replay_capacity": 100, "loss": "mse", "seed": 1}
    with foxhunt_dqn.Learner(cfg, library=library, strict=strict) as learner:
        o = np.zeros((1, 4), np.float32)
        learner.step(o)
        for i in range(1, 20):
            try:
                learner.step(o + i, np.array([1e30], np.float32), np.zeros(1, bool),
                             np.zeros(1, bool))
            except foxhunt_dqn.DivergedError as exc:
                assert exc.code == _abi.ERR_DIVERGED and "diverged" in exc.message
                assert exc.actions.shape == (1, 1) and exc.actions.dtype == np.int32
                assert 0 <= exc.actions[0, 0] < 3
                assert learner.metrics()["replay_size"] == i  # stored all the same
                break
        else:
            pytest.fail("no update diverged")
