"""ctypes mirror of abi/foxhunt_dqn.h (ABI major 1, minor 1).

Every structure follows the header field by field, in header order. Data pointers inside the
argument structs are declared as ``c_void_p`` (same size and alignment as the header's
``const float *`` etc.) so that a numpy array's address can be stored without a cast; the
comment next to each field gives the C type and shape.

The sizes and offsets locked by the header's static_asserts are checked at import time, so a
mistake in this file fails loudly instead of corrupting memory.

Minor 1 appended fields to the argument structs (the uint8 observation pointers ``*_u8`` and
the per-env ``valid`` mask) and the table member ``obs_info``. The structs here are the
minor-1 layouts; a minor-0 library reads only its own smaller struct versions, so the binding
sets the minor-1 fields only when the table holds ``obs_info`` (``has_member``, the header's
FHD_API_HAS). The minor-0 sizes are kept below for that check and for tests.
"""

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int32,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

ABI_MAJOR = 1
ABI_MINOR = 1
ENTRY_SYMBOL = "fhd_get_api_base"

ERROR_PATH_MAX = 256
ERROR_MESSAGE_MAX = 512

CKPT_INCLUDE_REPLAY = 1

# Status codes (FHD_STATUS_MAP). The library's status_name/status_message are the source of
# truth at run time; this table only gives the Python side symbolic names.
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_NULL_POINTER = -2
ERR_STRUCT_SIZE = -3
ERR_CONFIG_SYNTAX = -4
ERR_CONFIG_UNKNOWN_KEY = -5
ERR_CONFIG_TYPE = -6
ERR_CONFIG_RANGE = -7
ERR_CONFIG_INCONSISTENT = -8
ERR_CONFIG_MISSING = -9
ERR_BACKEND_UNAVAILABLE = -10
ERR_OUT_OF_MEMORY = -11
ERR_NOT_IMPLEMENTED = -12
ERR_BUFFER_TOO_SMALL = -13
ERR_SIZE_MISMATCH = -14
ERR_NONFINITE = -15
ERR_ACTION_RANGE = -16
ERR_NOT_READY = -17
ERR_IO = -18
ERR_CHECKPOINT_CORRUPT = -19
ERR_CHECKPOINT_MISMATCH = -20
ERR_CHECKPOINT_VERSION = -21
ERR_UNSUPPORTED_VERSION = -22
ERR_NOT_FOUND = -23
ERR_DEVICE = -24
ERR_INTERNAL = -25
ERR_DIVERGED = -26

# fhd_obs_info.dtype
OBS_DTYPE_FLOAT32 = 0
OBS_DTYPE_UINT8 = 1

# Sizes of the minor-0 argument structs and table (FHD_*_SIZE_V1_0, FHD_API_V1_SIZE_MINOR_0).
ACT_ARGS_SIZE_V1_0 = 40
TRANSITIONS_SIZE_V1_0 = 56
STEP_ARGS_SIZE_V1_0 = 64
BATCH_SIZE_V1_0 = 80
API_V1_SIZE_MINOR_0 = 152


class FhdError(Structure):
    """fhd_error: filled by init and get_api."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("code", c_int32),
        ("line", c_int32),
        ("column", c_int32),
        ("path", c_char * ERROR_PATH_MAX),
        ("message", c_char * ERROR_MESSAGE_MAX),
    ]

    @classmethod
    def new(cls):
        err = cls()
        err.struct_size = ctypes.sizeof(cls)
        return err


class FhdActArgs(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("num_obs", c_uint32),
        ("obs", c_void_p),  # const float * (N, S)
        ("actions", c_void_p),  # int32_t * out (N, D)
        ("q_values", c_void_p),  # float * optional out (N, KT)
        ("explore", c_uint32),
        ("reserved", c_uint32),
        # minor 1
        ("obs_u8", c_void_p),  # const uint8_t * (N, S) (obs_dtype uint8; then obs is NULL)
    ]


class FhdTransitions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("num_envs", c_uint32),
        ("obs", c_void_p),  # const float * (N, S)
        ("actions", c_void_p),  # const int32_t * (N, D)
        ("rewards", c_void_p),  # const float * (N)
        ("next_obs", c_void_p),  # const float * (N, S)
        ("terminated", c_void_p),  # const uint8_t * (N)
        ("truncated", c_void_p),  # const uint8_t * (N)
        # minor 1
        ("obs_u8", c_void_p),  # const uint8_t * (N, S) (then obs is NULL)
        ("next_obs_u8", c_void_p),  # const uint8_t * (N, S) (then next_obs is NULL)
        ("valid", c_void_p),  # const uint8_t * optional (N) 0/1; NULL: every env is valid
    ]


class FhdTrainStats(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("updates_done", c_uint32),
        ("update_index", c_uint64),
        ("loss", ctypes.c_float),
        ("td_abs_mean", ctypes.c_float),
        ("q_mean", ctypes.c_float),
        ("grad_norm", ctypes.c_float),
        # appended after minor 1 (the training guard); an older library leaves it 0
        ("updates_skipped", c_uint32),
    ]

    def as_dict(self):
        return {
            "updates_done": int(self.updates_done),
            "update_index": int(self.update_index),
            "loss": float(self.loss),
            "td_abs_mean": float(self.td_abs_mean),
            "q_mean": float(self.q_mean),
            "grad_norm": float(self.grad_norm),
            "updates_skipped": int(self.updates_skipped),
        }


class FhdStepArgs(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("num_envs", c_uint32),
        ("obs", c_void_p),  # const float * (N, S)
        ("rewards", c_void_p),  # const float * (N) or NULL on the first call
        ("terminated", c_void_p),  # const uint8_t * (N) or NULL
        ("truncated", c_void_p),  # const uint8_t * (N) or NULL
        ("final_obs", c_void_p),  # const float * optional (N, S)
        ("actions", c_void_p),  # int32_t * out (N, D)
        ("stats", POINTER(FhdTrainStats)),  # fhd_train_stats * optional out
        # minor 1
        ("obs_u8", c_void_p),  # const uint8_t * (N, S) (then obs is NULL)
        ("final_obs_u8", c_void_p),  # const uint8_t * optional (N, S) (then final_obs NULL)
        ("valid", c_void_p),  # const uint8_t * optional (N) 0/1; NULL: every env is valid
    ]


class FhdBatch(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("batch_size", c_uint32),
        ("obs", c_void_p),  # const float * (B, S)
        ("actions", c_void_p),  # const int32_t * (B, D)
        ("rewards", c_void_p),  # const float * (B)
        ("next_obs", c_void_p),  # const float * (B, S)
        ("terminated", c_void_p),  # const uint8_t * (B)
        ("discounts", c_void_p),  # const float * optional (B)
        ("weights", c_void_p),  # const float * optional (B)
        ("td_errors", c_void_p),  # float * optional out (B, D)
        ("targets", c_void_p),  # float * optional out (B)
        # minor 1
        ("obs_u8", c_void_p),  # const uint8_t * (B, S) (then obs is NULL)
        ("next_obs_u8", c_void_p),  # const uint8_t * (B, S) (then next_obs is NULL)
    ]


class FhdTensorInfo(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("rank", c_uint32),
        ("shape", c_uint64 * 4),
        ("count", c_uint64),
        ("name", c_char * 96),
    ]


class FhdObsInfo(Structure):
    """fhd_obs_info (minor 1): the learner's observation dtype, shape and scale."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("dtype", c_uint32),  # OBS_DTYPE_FLOAT32 or OBS_DTYPE_UINT8
        ("rank", c_uint32),  # 1 (flat, shape[0] = S) or 3 (image, shape = C, H, W)
        ("shape", c_uint32 * 3),
        ("size", c_uint32),  # S
        ("frame_stack", c_uint32),
        ("scale", ctypes.c_float),
        ("reserved", c_uint32),
    ]


# The learner handle is opaque: a void pointer.
LearnerHandle = c_void_p

GetApiFn = CFUNCTYPE(c_void_p, c_uint32, POINTER(FhdError))


class FhdApiBase(Structure):
    """fhd_api_base: frozen forever."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("abi_major", c_uint32),
        ("version", c_char_p),
        ("get_api", GetApiFn),
    ]


GetApiBaseFn = CFUNCTYPE(POINTER(FhdApiBase))

ManifestFn = CFUNCTYPE(c_char_p)
StatusStrFn = CFUNCTYPE(c_char_p, c_int32)
InitFn = CFUNCTYPE(c_int32, c_char_p, c_size_t, POINTER(LearnerHandle), POINTER(FhdError))
DestroyFn = CFUNCTYPE(None, LearnerHandle)
LastErrorFn = CFUNCTYPE(c_char_p, LearnerHandle)
ActFn = CFUNCTYPE(c_int32, LearnerHandle, POINTER(FhdActArgs))
ObserveFn = CFUNCTYPE(c_int32, LearnerHandle, POINTER(FhdTransitions))
TrainFn = CFUNCTYPE(c_int32, LearnerHandle, c_uint32, POINTER(FhdTrainStats))
TrainBatchFn = CFUNCTYPE(c_int32, LearnerHandle, POINTER(FhdBatch), POINTER(FhdTrainStats))
StepFn = CFUNCTYPE(c_int32, LearnerHandle, POINTER(FhdStepArgs))
MetricsFn = CFUNCTYPE(c_int32, LearnerHandle, c_void_p, c_size_t, POINTER(c_size_t))
CheckpointFn = CFUNCTYPE(c_int32, LearnerHandle, c_char_p, c_uint32)
TensorInfoFn = CFUNCTYPE(c_int32, LearnerHandle, c_uint32, POINTER(FhdTensorInfo))
TensorReadFn = CFUNCTYPE(c_int32, LearnerHandle, c_char_p, c_void_p, c_uint64)
TensorWriteFn = CFUNCTYPE(c_int32, LearnerHandle, c_char_p, c_void_p, c_uint64)
ObsInfoFn = CFUNCTYPE(c_int32, LearnerHandle, POINTER(FhdObsInfo))


class FhdApiV1(Structure):
    """fhd_api_v1, minor 1: the function table, in header order."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("abi_major", c_uint32),
        ("abi_minor", c_uint32),
        ("reserved", c_uint32),
        ("manifest", ManifestFn),
        ("status_name", StatusStrFn),
        ("status_message", StatusStrFn),
        ("init", InitFn),
        ("destroy", DestroyFn),
        ("last_error", LastErrorFn),
        ("act", ActFn),
        ("observe", ObserveFn),
        ("train", TrainFn),
        ("train_batch", TrainBatchFn),
        ("step", StepFn),
        ("metrics", MetricsFn),
        ("checkpoint_save", CheckpointFn),
        ("checkpoint_load", CheckpointFn),
        ("tensor_info", TensorInfoFn),
        ("tensor_read", TensorReadFn),
        ("tensor_write", TensorWriteFn),
        # minor 1
        ("obs_info", ObsInfoFn),
    ]


# Members of the table this binding calls.
API_MEMBERS = tuple(name for name, _ in FhdApiV1._fields_[4:])
# Members added after minor 0: used only where the library's table holds them (has_member).
OPTIONAL_MEMBERS = ("obs_info",)
# Members every library of major 1 has: the binding refuses a table without them.
REQUIRED_MEMBERS = tuple(m for m in API_MEMBERS if m not in OPTIONAL_MEMBERS)


def member_end(name):
    """Byte offset just past table member `name` (FHD_API_HAS)."""
    field = getattr(FhdApiV1, name)
    return field.offset + field.size


def has_member(table_size, name):
    """FHD_API_HAS: whether a table of `table_size` bytes holds member `name`."""
    return table_size >= member_end(name)


def _check_layout():
    """The header's static_asserts, restated for this mirror."""
    checks = [
        (FhdApiBase.get_api.offset, 16, "offsetof(fhd_api_base, get_api)"),
        (FhdApiV1.manifest.offset, 16, "offsetof(fhd_api_v1, manifest)"),
        (FhdApiV1.init.offset, 40, "offsetof(fhd_api_v1, init)"),
        (FhdApiV1.tensor_write.offset, 144, "offsetof(fhd_api_v1, tensor_write)"),
        (FhdApiV1.obs_info.offset, API_V1_SIZE_MINOR_0, "offsetof(fhd_api_v1, obs_info)"),
        (ctypes.sizeof(FhdApiV1), 160, "sizeof(fhd_api_v1)"),
        (ctypes.sizeof(FhdError), 784, "sizeof(fhd_error)"),
        (FhdStepArgs.stats.offset, 56, "offsetof(fhd_step_args, stats)"),
        (FhdBatch.targets.offset, 72, "offsetof(fhd_batch, targets)"),
        (FhdActArgs.obs_u8.offset, ACT_ARGS_SIZE_V1_0, "offsetof(fhd_act_args, obs_u8)"),
        (ctypes.sizeof(FhdActArgs), 48, "sizeof(fhd_act_args)"),
        (FhdTransitions.obs_u8.offset, TRANSITIONS_SIZE_V1_0,
         "offsetof(fhd_transitions, obs_u8)"),
        (FhdTransitions.valid.offset, 72, "offsetof(fhd_transitions, valid)"),
        (ctypes.sizeof(FhdTransitions), 80, "sizeof(fhd_transitions)"),
        (FhdStepArgs.obs_u8.offset, STEP_ARGS_SIZE_V1_0, "offsetof(fhd_step_args, obs_u8)"),
        (FhdStepArgs.valid.offset, 80, "offsetof(fhd_step_args, valid)"),
        (ctypes.sizeof(FhdStepArgs), 88, "sizeof(fhd_step_args)"),
        (FhdBatch.obs_u8.offset, BATCH_SIZE_V1_0, "offsetof(fhd_batch, obs_u8)"),
        (ctypes.sizeof(FhdBatch), 96, "sizeof(fhd_batch)"),
        (ctypes.sizeof(FhdObsInfo), 40, "sizeof(fhd_obs_info)"),
        (FhdTrainStats.updates_skipped.offset, 32, "offsetof(fhd_train_stats, updates_skipped)"),
        (ctypes.sizeof(FhdTrainStats), 40, "sizeof(fhd_train_stats)"),
        (ctypes.sizeof(FhdTensorInfo), 144, "sizeof(fhd_tensor_info)"),
    ]
    for got, want, what in checks:
        if got != want:
            raise ImportError(
                f"foxhunt_dqn: the ctypes mirror of foxhunt_dqn.h is wrong on this platform: "
                f"{what} is {got}, the header locks it at {want}"
            )


_check_layout()
