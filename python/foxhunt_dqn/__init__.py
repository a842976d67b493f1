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

__all__ = [
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
