"""python -m foxhunt_dqn.train --env ALE/Pong-v5 on the CPU backend: a short run with a small
replay (the Nature CNN learner), its run directory, checkpoints, an exact --resume (two
resumes of one checkpoint give the same run) and Ctrl-C (checkpoint saved, exit 130).
Without ale-py these tests skip, unless FHD_REQUIRE_ALE=1 (CI)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.environ.get("FHD_REQUIRE_ALE") == "1":
    import ale_py  # noqa: F401
else:
    pytest.importorskip("ale_py")

SMALL = {  # the preset's agent (configs/ALE-Pong-v5.json) with a small replay and schedule
    "torso": "nature", "dueling": False, "double_dqn": False, "loss": "mse", "lr": 1e-4,
    "max_grad_norm": 0.0, "batch_size": 8, "replay_capacity": 2000, "learning_starts": 400,
    "train_freq": 16, "target_update_interval": 20, "epsilon_decay_steps": 1200,
    "epsilon_end": 0.01, "num_envs": 8, "seed": 3, "backend": "cpu",
}
TIMING = ("atari_time_env", "atari_time_act", "atari_time_store", "atari_time_update",
          "atari_time_python")
# metrics that two runs of the same steps must agree on (no clocks)
SAME = ("env_steps", "updates", "episodes", "replay_size", "epsilon", "loss", "q_mean",
        "grad_norm", "atari_env_steps", "atari_games", "atari_life_losses")


def train(lib, *args, check=True):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "foxhunt_dqn.train", "--env", "ALE/Pong-v5", "--library",
           str(lib.path), "--threads", "2", "--eval-episodes", "0", "--quiet", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def read_metrics(d):
    return [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def config(tmp_path):
    p = tmp_path / "small.json"
    p.write_text(json.dumps(SMALL))
    return p


def test_run_checkpoint_and_exact_resume(library, config, tmp_path):
    first = tmp_path / "first"
    train(library, "--config", str(config), "--steps", "1600", "--log-every", "400",
          "--checkpoint-every", "800", "--out", str(first))
    m = read_metrics(first)
    assert [x["atari_env_steps"] for x in m] == [400, 800, 1200, 1600]
    last = m[-1]
    assert last["backend"] == "cpu" and last["env_steps"] == 1600 and last["updates"] > 0
    assert last["atari_frames"] == 4 * 1600
    assert all(last[k] > 0 for k in TIMING)
    assert sum(last[k] for k in TIMING) <= last["wall_time"]
    assert (first / "episodes.csv").read_text().startswith(
        "episode,env,env_steps,return,length,terminated,truncated\n")
    state = json.loads((first / "run_state.json").read_text())
    assert state["env_steps"] == 1600
    assert (first / "checkpoint.safetensors").stat().st_size > 2000 * 84 * 84 // 4

    # two resumes of the same checkpoint are the same run: the learner continues exactly
    runs = []
    for name in ("a", "b"):
        d = tmp_path / name
        shutil.copytree(first, d)
        r = train(library, "--config", str(config), "--steps", "2400", "--log-every", "400",
                  "--out", str(d), "--resume", str(d / "checkpoint.safetensors"))
        assert "resumed from" in r.stdout and "at 1600 env steps" in r.stdout
        runs.append(read_metrics(d))
    a, b = runs
    assert [x["atari_env_steps"] for x in a] == [400, 800, 1200, 1600, 2000, 2400]
    assert a[:4] == m  # appended to
    assert a[4]["updates"] > last["updates"] and a[4]["env_steps"] == 2000
    assert a[4]["replay_size"] > 1600  # the replay came back with the checkpoint
    for x, y in zip(a, b):
        assert {k: x[k] for k in SAME} == {k: y[k] for k in SAME}


def test_ctrl_c_saves_and_exits_130(library, config, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "foxhunt_dqn.train", "--env", "ALE/Pong-v5", "--library",
           str(library.path), "--config", str(config), "--steps", "1000000", "--log-every",
           "200", "--eval-episodes", "0", "--quiet", "--out", str(out), "--loop", "step"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        t0 = time.monotonic()
        while not ((out / "metrics.jsonl").exists() and (out / "metrics.jsonl").stat().st_size):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() - t0 < 300
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stdout + stderr
    assert "--resume" in stdout
    state = json.loads((out / "run_state.json").read_text())
    assert 200 <= state["env_steps"] < 1000000
    assert (out / "checkpoint.safetensors").is_file()


def test_target_return_stops_then_evaluates(library, config, tmp_path):
    """--target-return: training stops at the first game that lifts the mean of the last
    --target-games raw returns to the target (--target-eval: and an evaluation's mean), and
    eval.json records why, when, and the confirming evaluation as the final one."""
    out = tmp_path / "run"
    r = train(library, "--config", str(config), "--steps", "1000000", "--target-return", "-21",
              "--target-games", "2", "--target-eval", "--eval-episodes", "1", "--eval-envs",
              "1", "--out", str(out))
    assert "target reached" in r.stdout, r.stdout
    games = (out / "episodes.csv").read_text().splitlines()[1:]
    rets = [float(g.split(",")[3]) for g in games]
    assert len(rets) >= 2 and sum(rets[-2:]) / 2 >= -21
    ev = json.loads((out / "eval.json").read_text())
    assert ev["stopped"] == "target" and ev["episodes"] == 1
    assert 0 < ev["env_steps"] < 1000000 and ev["wall_time_at_stop"] > 0
    checks = ev["target_checks"]
    assert len(checks) == 1 and checks[0]["return_mean"] == ev["return_mean"] >= -21
    # a target no game reaches: the run goes to --steps
    out2 = tmp_path / "run2"
    r = train(library, "--config", str(config), "--steps", "800", "--target-return", "22",
              "--out", str(out2))
    assert "target reached" not in r.stdout
    assert json.loads((out2 / "run_state.json").read_text())["env_steps"] >= 800


def test_bad_arguments_exit_2(library, tmp_path):
    assert train(library, "--steps", "0", check=False).returncode == 2
    r = train(library, "--config", str(tmp_path / "missing.json"), check=False)
    assert r.returncode == 2 and "missing.json" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(SMALL, batch_size=0)))
    r = train(library, "--config", str(bad), "--steps", "10", check=False)
    assert r.returncode == 2 and "batch_size" in r.stderr
    assert train(library, "--target-games", "0", check=False).returncode == 2
    assert train(library, "--target-propose", "19", check=False).returncode == 2
