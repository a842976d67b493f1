"""foxhunt_dqn: Python binding of libfoxhunt_dqn.so, the foxhunt-dqn DQN learner plugin.

    import foxhunt_dqn
    with foxhunt_dqn.Learner({"obs_dim": 4, "actions": [2]}) as learner:
        actions = learner.step(obs)                                  # first call
        actions = learner.step(obs, rewards, terminated, truncated)  # every later call

The library is found through the `library=` argument, $FOXHUNT_DQN_LIBRARY, the package
directory, or <repo>/build*/libfoxhunt_dqn.so. Pure Python + numpy + ctypes; the Gymnasium
adapter is foxhunt_dqn.gym (needs gymnasium) and the command line trainer
`python -m foxhunt_dqn.train`.
"""

from ._abi import ABI_MAJOR, ABI_MINOR
from ._library import LIBRARY_ENV, Library, find_library, load_library, manifest
from .errors import (
    ActionRangeError,
    BackendUnavailable,
    BindingError,
    CheckpointError,
    ConfigError,
    ConfigSyntaxError,
    DeviceError,
    DivergedError,
    FoxhuntError,
    InternalError,
    InvalidArgument,
    LearnerClosedError,
    LibraryError,
    LibraryNotFoundError,
    NonFiniteError,
    NotFound,
    NotImplementedByLibrary,
    NotReady,
    OutOfMemory,
    SizeMismatch,
)
from .learner import Learner

__version__ = "0.1.0"


def __getattr__(name):
    # DQN and evaluate_policy need gymnasium: imported on first use, so that the binding
    # itself stays numpy-only.
    if name in ("DQN", "BaseCallback", "evaluate_policy"):
        from . import dqn

        return getattr(dqn, name)
    raise AttributeError(f"module 'foxhunt_dqn' has no attribute {name!r}")

__all__ = [
    "DQN",
    "BaseCallback",
    "evaluate_policy",
    "ABI_MAJOR",
    "ABI_MINOR",
    "LIBRARY_ENV",
    "Library",
    "Learner",
    "find_library",
    "load_library",
    "manifest",
    "FoxhuntError",
    "ActionRangeError",
    "BackendUnavailable",
    "BindingError",
    "CheckpointError",
    "ConfigError",
    "ConfigSyntaxError",
    "DeviceError",
    "DivergedError",
    "InternalError",
    "InvalidArgument",
    "LearnerClosedError",
    "LibraryError",
    "LibraryNotFoundError",
    "NonFiniteError",
    "NotFound",
    "NotImplementedByLibrary",
    "NotReady",
    "OutOfMemory",
    "SizeMismatch",
]
