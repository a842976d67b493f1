"""Exceptions: every library status code becomes a FoxhuntError subclass.

``FoxhuntError(code, name, message)``: ``code`` is the library's negative status (None for
errors found in Python before the library was called, such as a missing library or a closed
learner), ``name`` its symbolic name ("FHD_ERR_CONFIG_RANGE") and ``message`` the library's
message for the failed call (last_error / fhd_error.message), which names the field and the
allowed range.

Array arguments with the wrong dtype or shape are rejected in Python with the built-in
TypeError / ValueError before the library sees them.
"""

from . import _abi


class FoxhuntError(Exception):
    """Base class of every error raised by foxhunt_dqn for a failed library call."""

    def __init__(self, code, name, message):
        self.code = code
        self.name = name
        self.message = message
        super().__init__(code, name, message)

    def __str__(self):
        if self.code is None:
            return f"{self.name}: {self.message}"
        return f"{self.name} ({self.code}): {self.message}"


class LibraryError(FoxhuntError, OSError):
    """The library could not be found or loaded, or does not provide ABI major 1."""


class LibraryNotFoundError(LibraryError, FileNotFoundError):
    """No libfoxhunt_dqn.so at the given path, in FOXHUNT_DQN_LIBRARY or the build dirs."""


class LearnerClosedError(FoxhuntError, ValueError):
    """A method was called on a learner after close()."""

    def __init__(self, what):
        super().__init__(None, "FHD_LEARNER_CLOSED", f"{what}: the learner is closed")


class InvalidArgument(FoxhuntError, ValueError):
    """FHD_ERR_INVALID_ARGUMENT and the value errors below."""


class SizeMismatch(InvalidArgument):
    """FHD_ERR_SIZE_MISMATCH: an array size does not match the learner's configuration."""


class NonFiniteError(InvalidArgument):
    """FHD_ERR_NONFINITE: an input holds NaN or Inf (the message names the env / row)."""


class ActionRangeError(InvalidArgument):
    """FHD_ERR_ACTION_RANGE: an action index is out of range for its branch."""


class BindingError(FoxhuntError):
    """FHD_ERR_NULL_POINTER / FHD_ERR_STRUCT_SIZE: a mistake in this binding, not the caller."""


class ConfigError(FoxhuntError, ValueError):
    """The config was rejected. ``path`` is the JSON path of the offending field ("$.hidden[1]")
    or ""; ``line`` / ``column`` locate a JSON syntax error (1-based, else 0)."""

    def __init__(self, code, name, message, path="", line=0, column=0):
        super().__init__(code, name, message)
        self.path = path
        self.line = line
        self.column = column

    def __str__(self):
        where = ""
        if self.line:
            where = f" at line {self.line}, column {self.column}"
        elif self.path and self.path not in self.message:
            where = f" at {self.path}"
        return f"{self.name} ({self.code}){where}: {self.message}"


class ConfigSyntaxError(ConfigError):
    """FHD_ERR_CONFIG_SYNTAX: the config is not well-formed JSON."""


class BackendUnavailable(FoxhuntError, RuntimeError):
    """FHD_ERR_BACKEND_UNAVAILABLE: the requested backend cannot run on this machine."""


class OutOfMemory(FoxhuntError, MemoryError):
    """FHD_ERR_OUT_OF_MEMORY."""


class NotImplementedByLibrary(FoxhuntError, NotImplementedError):
    """FHD_ERR_NOT_IMPLEMENTED: this library build does not implement the call."""


class NotReady(FoxhuntError, RuntimeError):
    """FHD_ERR_NOT_READY: not enough data in the replay buffer to train."""


class CheckpointError(FoxhuntError, OSError):
    """FHD_ERR_IO and FHD_ERR_CHECKPOINT_*: a checkpoint could not be written or read."""


class NotFound(FoxhuntError, LookupError):
    """FHD_ERR_NOT_FOUND: no such item (for example a tensor name)."""


class DeviceError(FoxhuntError, RuntimeError):
    """FHD_ERR_DEVICE: a CUDA call failed."""


class DivergedError(FoxhuntError, ArithmeticError):
    """FHD_ERR_DIVERGED: an update's loss or gradient norm (or the learner's state) would be
    NaN or Inf. That update was not applied; updates before it in the same call were, and
    step() still stored its transitions and chose its actions (see the header): from
    Learner.step, ``actions`` holds them (as step would have returned them), else None.
    From save(): the state holds NaN/Inf and no file was written."""

    actions = None


class InternalError(FoxhuntError, RuntimeError):
    """FHD_ERR_INTERNAL and unknown status codes."""


_BY_CODE = {
    _abi.ERR_INVALID_ARGUMENT: InvalidArgument,
    _abi.ERR_NULL_POINTER: BindingError,
    _abi.ERR_STRUCT_SIZE: BindingError,
    _abi.ERR_CONFIG_SYNTAX: ConfigSyntaxError,
    _abi.ERR_CONFIG_UNKNOWN_KEY: ConfigError,
    _abi.ERR_CONFIG_TYPE: ConfigError,
    _abi.ERR_CONFIG_RANGE: ConfigError,
    _abi.ERR_CONFIG_INCONSISTENT: ConfigError,
    _abi.ERR_CONFIG_MISSING: ConfigError,
    _abi.ERR_BACKEND_UNAVAILABLE: BackendUnavailable,
    _abi.ERR_OUT_OF_MEMORY: OutOfMemory,
    _abi.ERR_NOT_IMPLEMENTED: NotImplementedByLibrary,
    _abi.ERR_BUFFER_TOO_SMALL: BindingError,
    _abi.ERR_SIZE_MISMATCH: SizeMismatch,
    _abi.ERR_NONFINITE: NonFiniteError,
    _abi.ERR_ACTION_RANGE: ActionRangeError,
    _abi.ERR_NOT_READY: NotReady,
    _abi.ERR_IO: CheckpointError,
    _abi.ERR_CHECKPOINT_CORRUPT: CheckpointError,
    _abi.ERR_CHECKPOINT_MISMATCH: CheckpointError,
    _abi.ERR_CHECKPOINT_VERSION: CheckpointError,
    _abi.ERR_UNSUPPORTED_VERSION: LibraryError,
    _abi.ERR_NOT_FOUND: NotFound,
    _abi.ERR_DEVICE: DeviceError,
    _abi.ERR_INTERNAL: InternalError,
    _abi.ERR_DIVERGED: DivergedError,
}


def error_class(code):
    """The exception class for a status code."""
    return _BY_CODE.get(code, InternalError)


def make_error(code, name, message, path="", line=0, column=0):
    """Build the exception for a failed call from the library's report."""
    cls = error_class(code)
    if issubclass(cls, ConfigError):
        return cls(code, name, message, path=path, line=line, column=column)
    return cls(code, name, message)
