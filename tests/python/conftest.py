"""Shared fixtures of the Python binding tests.

The library under test is $FOXHUNT_DQN_LIBRARY (CTest sets it to the built target); without
it the binding's own search (<repo>/build*/libfoxhunt_dqn.so) is used, and the tests are
skipped when nothing is found.
"""

import os

import numpy as np
import pytest

import foxhunt_dqn


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "learning: trains an agent to a score (slow; ctest label 'learning')"
    )


@pytest.fixture(scope="session")
def library():
    env = os.environ.get(foxhunt_dqn.LIBRARY_ENV)
    if env:
        return foxhunt_dqn.load_library(env)  # set but wrong: fail loudly
    try:
        return foxhunt_dqn.load_library()
    except foxhunt_dqn.LibraryNotFoundError as exc:
        pytest.skip(f"libfoxhunt_dqn.so is not built: {exc}")


SMALL = {
    "obs_dim": 4,
    "actions": [3],
    "hidden": [16, 16],
    "batch_size": 8,
    "learning_starts": 0,
    "replay_capacity": 1000,
    "seed": 7,
}


@pytest.fixture
def small_config():
    return dict(SMALL)


@pytest.fixture
def make_learner(library):
    """make_learner(**overrides) -> a Learner over SMALL, closed after the test."""
    made = []

    def make(config=None, **overrides):
        cfg = dict(SMALL) if config is None else dict(config)
        cfg.update(overrides)
        learner = foxhunt_dqn.Learner(cfg, library=library)
        made.append(learner)
        return learner

    yield make
    for learner in made:
        learner.close()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
