"""Arrays in and out: zero copies where the layout allows, conversions (strict=False) or clear
TypeError / ValueError otherwise."""

import numpy as np
import pytest

import foxhunt_dqn
from foxhunt_dqn import learner as learner_mod


@pytest.fixture
def calls(monkeypatch):
    """Records (function, {pointer field: address}) of every struct-taking library call."""
    seen = []

    def hook(name, args):
        fields = {f: getattr(args, f) for f, t in args._fields_ if f not in ("struct_size",)}
        seen.append((name, fields))

    monkeypatch.setattr(learner_mod, "_call_hook", hook)
    return seen


def test_act_writes_into_out(make_learner, rng, calls):
    learner = make_learner(actions=[3, 2])
    obs = rng.standard_normal((6, 4)).astype(np.float32)
    out = np.full((6, 2), -1, np.int32)
    q_out = np.zeros((6, 5), np.float32)
    a, q = learner.act(obs, explore=False, return_q=True, out=out, q_out=q_out)
    assert a is out and q is q_out
    assert np.all(out >= 0) and np.any(q_out != 0)
    name, f = calls[-1]
    assert name == "act"
    assert f["obs"] == obs.ctypes.data
    assert f["actions"] == out.ctypes.data
    assert f["q_values"] == q_out.ctypes.data
    assert f["num_obs"] == 6 and f["explore"] == 0
    # without out: fresh arrays each call
    a1 = learner.act(obs, explore=False)
    a2 = learner.act(obs, explore=False)
    assert not np.shares_memory(a1, a2)


def test_observe_passes_inputs_by_address(make_learner, rng, calls):
    learner = make_learner(num_envs=2)
    obs = rng.standard_normal((2, 4)).astype(np.float32)
    nxt = rng.standard_normal((2, 4)).astype(np.float32)
    act = np.array([[0], [2]], np.int32)
    rew = np.array([1.0, -1.0], np.float32)
    term = np.array([False, True])  # bool: viewed as uint8, not copied
    trunc = np.zeros(2, np.uint8)
    learner.observe(obs, act, rew, nxt, term, trunc)
    name, f = calls[-1]
    assert name == "observe"
    assert f["obs"] == obs.ctypes.data and f["next_obs"] == nxt.ctypes.data
    assert f["actions"] == act.ctypes.data and f["rewards"] == rew.ctypes.data
    assert f["terminated"] == term.ctypes.data and f["truncated"] == trunc.ctypes.data
    # (N,) actions for one branch: a view, still the same address
    act1 = np.array([1, 2], np.int32)
    learner.observe(obs, act1, rew, nxt, term, trunc)
    assert calls[-1][1]["actions"] == act1.ctypes.data


def test_step_and_train_batch_outputs(make_learner, rng, calls):
    learner = make_learner()
    obs = rng.standard_normal((1, 4)).astype(np.float32)
    out = np.zeros((1, 1), np.int32)
    assert learner.step(obs, out=out) is out
    assert calls[-1][1]["actions"] == out.ctypes.data
    assert calls[-1][1]["rewards"] is None
    final = rng.standard_normal((1, 4)).astype(np.float32)
    learner.step(obs, np.ones(1, np.float32), np.ones(1, bool), np.zeros(1, bool), final, out=out)
    # small inputs are copied into the learner's own step buffers: fixed addresses, same values
    f = calls[-1][1]
    assert f["final_obs"] == learner._st_addr["final"] != final.ctypes.data
    assert f["obs"] == learner._st_addr["obs"]
    np.testing.assert_array_equal(learner._st_final, final)
    np.testing.assert_array_equal(learner._st_obs, obs)
    assert learner._st_term[0] == 1 and learner._st_trunc[0] == 0 and learner._st_rew[0] == 1

    b = learner.batch_size
    td = np.zeros((b, 1), np.float32)
    y = np.zeros(b, np.float32)
    o = rng.standard_normal((b, 4)).astype(np.float32)
    res = learner.train_batch(o, np.zeros(b, np.int32), np.ones(b, np.float32), o,
                              np.zeros(b, np.uint8), td_errors_out=td, targets_out=y)
    assert res["td_errors"] is td and res["targets"] is y
    assert np.any(y != 0)
    f = calls[-1][1]
    assert f["td_errors"] == td.ctypes.data and f["targets"] == y.ctypes.data
    assert f["obs"] == o.ctypes.data and f["next_obs"] == o.ctypes.data
    assert f["discounts"] is None and f["weights"] is None


def test_step_passes_large_observations_by_address(make_learner, rng, calls):
    s = learner_mod.STEP_COPY_MAX_BYTES // 4 + 1  # one float past the copy limit
    learner = make_learner(obs_dim=s, hidden=[4])
    obs = rng.standard_normal((1, s)).astype(np.float32)
    learner.step(obs)
    assert calls[-1][1]["obs"] == obs.ctypes.data
    final = rng.standard_normal(s).astype(np.float32)  # (S,): a view of the same memory
    learner.step(obs[0], 0.5, True, False, final)
    assert calls[-1][1]["obs"] == obs.ctypes.data and calls[-1][1]["final_obs"] == final.ctypes.data
    # float64 is converted into the learner's buffer, whatever its size
    learner.step(obs.astype(np.float64), 0.5, False, False)
    assert calls[-1][1]["obs"] == learner._st_addr["obs"]
    np.testing.assert_array_equal(learner._st_obs, obs)


def test_get_tensor_out(make_learner):
    learner = make_learner()
    out = np.empty((16, 4), np.float32)
    assert learner.get_tensor("online.torso.0.weight", out=out) is out
    np.testing.assert_array_equal(out, learner.get_tensor("online.torso.0.weight"))


def test_lenient_conversions(make_learner, rng, calls):
    learner = make_learner()
    obs64 = rng.standard_normal((3, 4))  # float64: converted
    a64 = learner.act(obs64, explore=False)
    assert calls[-1][1]["obs"] != obs64.ctypes.data
    np.testing.assert_array_equal(a64, learner.act(obs64.astype(np.float32), explore=False))
    # non-contiguous float32: copied
    big = rng.standard_normal((3, 8)).astype(np.float32)
    view = big[:, ::2]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(learner.act(view, explore=False),
                                  learner.act(np.ascontiguousarray(view), explore=False))
    # lists and integer arrays are fine too
    learner.act([[0, 1, 2, 3]], explore=False)
    learner.act(np.arange(4), explore=False)
    z = np.zeros((1, 4))
    learner.observe(z, np.array([[2]], np.int64), [0.5], z, np.array([1], np.int64), [0])
    assert learner.metrics()["episodes"] == 1


def test_strict_mode_refuses_copies(library, small_config, rng):
    with foxhunt_dqn.Learner(small_config, library=library, strict=True) as learner:
        with pytest.raises(TypeError, match=r"obs: expected dtype float32 .* got float64"):
            learner.act(rng.standard_normal((2, 4)))
        with pytest.raises(TypeError, match="obs: expected a numpy array"):
            learner.act([[0.0, 0.0, 0.0, 0.0]])
        view = rng.standard_normal((2, 8)).astype(np.float32)[:, ::2]
        with pytest.raises(ValueError, match="obs: the array is not C-contiguous"):
            learner.act(view)
        z = np.zeros((1, 4), np.float32)
        with pytest.raises(TypeError, match="actions: expected dtype int32"):
            learner.observe(z, np.zeros((1, 1), np.int64), np.zeros(1, np.float32), z,
                            np.zeros(1, bool), np.zeros(1, bool))
        with pytest.raises(TypeError, match="terminated: expected dtype bool or uint8"):
            learner.observe(z, np.zeros((1, 1), np.int32), np.zeros(1, np.float32), z,
                            np.zeros(1, np.int64), np.zeros(1, bool))
        learner.observe(z, np.zeros((1, 1), np.int32), np.zeros(1, np.float32), z,
                        np.zeros(1, bool), np.zeros(1, np.uint8))


def test_misaligned_input_is_copied_or_refused(make_learner, library, small_config):
    raw = np.zeros(4 * 4 + 1, np.uint8)
    misaligned = raw[1:].view(np.float32).reshape(1, 4)
    assert not misaligned.flags.aligned
    make_learner().act(misaligned)  # copied
    with foxhunt_dqn.Learner(small_config, library=library, strict=True) as strict:
        with pytest.raises(ValueError, match="aligned"):
            strict.act(misaligned)


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda L: L.act(np.zeros((2, 5), np.float32)), ValueError,
         r"obs: expected an array of float32 with shape \(N, 4\), got shape \(2, 5\)"),
        (lambda L: L.act(np.zeros((2, 2, 4), np.float32)), ValueError, r"obs: .*\(2, 2, 4\)"),
        (lambda L: L.act(np.zeros((2, 4), np.complex64)), TypeError, "obs: expected dtype float32"),
        (lambda L: L.act(np.array([["a"] * 4])), TypeError, "obs: expected dtype float32"),
        (lambda L: L.act(np.zeros((2, 4), np.float32), out=np.zeros((2, 1), np.int64)),
         TypeError, "out: expected dtype int32"),
        (lambda L: L.act(np.zeros((2, 4), np.float32), out=np.zeros((3, 1), np.int32)),
         ValueError, r"out: .*shape \(2, 1\)"),
        (lambda L: L.act(np.zeros((2, 4), np.float32), out=np.zeros((2, 2), np.int32)[:, :1]),
         ValueError, "out: the output array must be C-contiguous"),
        (lambda L: L.act(np.zeros((2, 4), np.float32), out=[[0], [0]]), TypeError,
         "out: expected a numpy array"),
        (lambda L: L.act(np.zeros((2, 4), np.float32), return_q=True,
                         q_out=np.zeros((2, 2), np.float32)), ValueError, r"q_out: .*\(2, 3\)"),
        (lambda L: L.observe(np.zeros((1, 4)), np.zeros((1, 2), np.int32), [0.0],
                             np.zeros((1, 4)), [0], [0]), ValueError, r"actions: .*\(1, 1\)"),
        (lambda L: L.observe(np.zeros((1, 4)), [0], [0.0, 1.0], np.zeros((1, 4)), [0], [0]),
         ValueError, r"rewards: .*\(1,\), got shape \(2,\)"),
        (lambda L: L.observe(np.zeros((1, 4)), [0.5], [0.0], np.zeros((1, 4)), [0], [0]),
         TypeError, "actions: expected dtype int32"),
        (lambda L: L.observe(np.zeros((1, 4)), [0], [0.0], np.zeros((1, 3)), [0], [0]),
         ValueError, r"next_obs: .*\(1, 4\)"),
        (lambda L: L.observe(np.zeros((1, 4)), [0], [0.0], np.zeros((1, 4)), [0.0], [0]),
         TypeError, "terminated: expected dtype bool or uint8"),
        (lambda L: L.observe(np.zeros((1, 4)), [2**40], [0.0], np.zeros((1, 4)), [0], [0]),
         ValueError, "actions: values do not fit in int32"),
        (lambda L: L.step(np.zeros((1, 4)), [0.0], [0], [0], final_obs=np.zeros(5)),
         ValueError, r"final_obs: .*shape \(1, 4\) or \(4,\), got shape \(5,\)$"),
        (lambda L: L.step(np.zeros(5)), ValueError,
         r"obs: .*shape \(1, 4\) or \(4,\), got shape \(5,\)$"),
        (lambda L: L.act(np.zeros(5)), ValueError,
         r"obs: .*shape \(N, 4\) or \(4,\), got shape \(5,\)$"),
        (lambda L: L.step(np.zeros((1, 5))), ValueError, r"obs: .*got shape \(1, 5\)$"),
        (lambda L: L.step(np.zeros(4), [0.0, 1.0], False, False), ValueError,
         r"rewards: .*shape \(1,\) or \(\), got shape \(2,\)$"),
        (lambda L: L.step(np.zeros(4), 0.0, 0.5, False), TypeError,
         r"terminated: expected a bool \(or 0/1\), got float 0.5"),
        (lambda L: L.step(np.zeros(4), 0.0, [2], False), ValueError,
         r"terminated: values must be 0 or 1"),
        (lambda L: L.step(np.zeros(4, np.complex64)), TypeError, r"obs: expected dtype float32"),
        (lambda L: L.step(np.zeros(4), "x", False, False), TypeError,
         r"rewards: expected dtype float32"),
        (lambda L: L.train_batch(np.zeros((8, 4)), np.zeros(8, np.int32), np.zeros(8),
                                 np.zeros((8, 4)), np.zeros(8, bool), weights=np.zeros(7)),
         ValueError, r"weights: .*\(8,\)"),
        (lambda L: L.train(-1), ValueError, "train: n is -1"),
        (lambda L: L.get_tensor("online.torso.0.bias", out=np.zeros(16)), TypeError,
         "out: expected dtype float32"),
    ],
)
def test_wrong_arrays_raise_clear_errors(make_learner, call, exc, pattern):
    learner = make_learner()
    with pytest.raises(exc, match=pattern):
        call(learner)
    # and the learner is still usable
    learner.act(np.zeros((1, 4), np.float32))
