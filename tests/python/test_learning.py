"""CartPole-v1 trained through Gymnasium itself: greedy mean >= 475 over 100 episodes."""

import time

import pytest

pytest.importorskip("gymnasium")

from foxhunt_dqn import gym as fgym  # noqa: E402

# Dueling double DQN, 3-step returns (fgym.DEFAULT_CONFIG, spelled out here so that a change
# of the defaults does not silently change this test).
CARTPOLE = {
    "hidden": [128, 128],
    "dueling": True,
    "double_dqn": True,
    "n_step": 3,
    "gamma": 0.99,
    "loss": "huber",
    "lr": 6.3e-4,
    "max_grad_norm": 10.0,
    "batch_size": 64,
    "replay_capacity": 50000,
    "learning_starts": 1000,
    "train_freq": 1,
    "gradient_steps": 1,
    "target_update_interval": 500,
    "tau": 1.0,
    "epsilon_start": 1.0,
    "epsilon_end": 0.04,
    "epsilon_decay_steps": 16000,
}


@pytest.mark.learning
def test_cartpole_v1_solved(library):
    t0 = time.monotonic()
    # Greedy checks every 5k env steps (10 episodes each, outside the 50k training steps) keep
    # the best policy, as SB3's EvalCallback does: single DQN snapshots on CartPole swing
    # between 100 and 500 even when training goes well. The final score is measured on 100
    # other episodes.
    learner, hist = fgym.train("CartPole-v1", config=CARTPOLE, total_steps=50000, seed=0,
                               eval_episodes=100, progress=False, library=library,
                               check_every=5000, check_episodes=10)
    with learner:
        m = learner.metrics()
        summary = (f"eval {hist['eval_mean']:.1f} +- {hist['eval_std']:.1f}, checks "
                   f"{[(s, round(v)) for s, v in hist['checks']]}, best {hist['best_check']}, "
                   f"{time.monotonic() - t0:.0f} s")
        print(summary)
        assert m["env_steps"] == 50000 and hist["env_steps"] == 50000
        assert m["updates"] == 49001  # one per env step from learning_starts on
        assert hist["eval_episodes"] == 100
        assert hist["eval_mean"] >= 475, summary
