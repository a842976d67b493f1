"""The Learner's state: metrics, checkpoints and named tensors (a mixin of Learner).

The methods use the Learner's handle (_h), function table (_fn), lock and error helpers; they
live here so that learner.py keeps the calls of the agent loop.
"""

import ctypes
import json
import math
import os

from . import _abi, _arrays
from .errors import make_error


class _LearnerState:
    """Metrics, save/load and the named-tensor calls of Learner."""

    def metrics_json(self):
        """The metrics as JSON text (size query, then fetch; retried if they grew between)."""
        needed = ctypes.c_size_t(0)
        with self._lock:
            self._check_open("metrics")
            rc = self._fn.metrics(self._h, None, 0, ctypes.byref(needed))
            if rc != _abi.OK:
                raise self._fail(rc)
            for _ in range(16):
                # Values (uptime, counters) may need more digits by the second call: slack.
                cap = needed.value + 64
                buf = ctypes.create_string_buffer(cap)
                rc = self._fn.metrics(self._h, ctypes.addressof(buf), cap, ctypes.byref(needed))
                if rc == _abi.OK:
                    return buf.value.decode("utf-8")
                if rc != _abi.ERR_BUFFER_TOO_SMALL:
                    raise self._fail(rc)
            raise self._fail(rc)

    def metrics(self):
        """Metrics as a dict: counters (env_steps, updates, episodes), loss, td_abs_mean,
        q_mean, grad_norm, epsilon, beta, replay_size, updates_per_second, backend, device,
        stats_update (the update the statistics belong to), episode returns, ..."""
        return json.loads(self.metrics_json())

    # ---- checkpoints -----------------------------------------------------------------------

    @staticmethod
    def _path_arg(path):
        p = os.fsencode(os.fspath(path))
        if b"\0" in p:
            raise ValueError("path: contains a NUL character")
        return p

    def save(self, path, include_replay=False):
        """Write a checkpoint (safetensors) atomically to path; include_replay also writes the
        replay buffer and the n-step staging."""
        p = self._path_arg(path)
        flags = _abi.CKPT_INCLUDE_REPLAY if include_replay else 0
        with self._lock:
            self._check_open("save")
            rc = self._fn.checkpoint_save(self._h, p, flags)
            if rc != _abi.OK:
                raise self._fail(rc)

    def load(self, path, include_replay=False):
        """Load a checkpoint into this learner (validated first; unchanged on failure). The
        architecture must match; resume_overridable hyperparameters keep this learner's
        values. include_replay also restores the replay buffer, n-step staging and step()
        state (an exact resume; the file must hold them); without it they start empty and
        the next step() call passes obs only."""
        p = self._path_arg(path)
        flags = _abi.CKPT_INCLUDE_REPLAY if include_replay else 0
        with self._lock:
            self._check_open("load")
            rc = self._fn.checkpoint_load(self._h, p, flags)
            if rc != _abi.OK:
                raise self._fail(rc)

    # ---- tensors ---------------------------------------------------------------------------

    def _tensor_table(self):
        """{name: shape} of every named tensor, in library order (lock held)."""
        if self._tensors is None:
            table = {}
            info = _abi.FhdTensorInfo()
            for i in range(1 << 20):
                info.struct_size = ctypes.sizeof(info)
                rc = self._fn.tensor_info(self._h, i, ctypes.byref(info))
                if rc == _abi.ERR_NOT_FOUND:
                    break
                if rc != _abi.OK:
                    raise self._fail(rc)
                rank = int(info.rank)
                shape = tuple(int(info.shape[k]) for k in range(rank))
                if math.prod(shape) != int(info.count):
                    raise make_error(
                        _abi.ERR_INTERNAL,
                        "FHD_ERR_INTERNAL",
                        f"tensor {info.name!r}: shape {shape} does not hold count {info.count}",
                    )
                table[info.name.decode("utf-8")] = shape
            self._tensors = table
        return self._tensors

    def tensors(self):
        """[(name, shape)] of the learner's named state tensors: online.*, target.*, grad.*
        (of the last update), adam.m.*, adam.v.*, sn.* (spectral-norm u/v)."""
        with self._lock:
            self._check_open("tensors")
            return list(self._tensor_table().items())

    @staticmethod
    def _name_arg(name):
        if not isinstance(name, str):
            raise TypeError(f"name: expected str, got {type(name).__name__}")
        if "\0" in name:
            raise ValueError("name: contains a NUL character")
        return name.encode("utf-8")

    def get_tensor(self, name, out=None):
        """A copy of tensor `name` as a float32 array of its shape (or written into out)."""
        nb = self._name_arg(name)
        with self._lock:
            self._check_open("get_tensor")
            shape = self._tensor_table().get(name)
            if shape is None:  # let the library say it: FHD_ERR_NOT_FOUND
                rc = self._fn.tensor_read(self._h, nb, None, 0)
                raise self._fail(rc if rc != _abi.OK else _abi.ERR_NOT_FOUND)
            dst = _arrays.output(out, "out", _arrays.FLOAT32, shape)
            rc = self._fn.tensor_read(self._h, nb, dst.ctypes.data, dst.size)
            if rc != _abi.OK:
                raise self._fail(rc)
        return dst

    def set_tensor(self, name, array):
        """Overwrite tensor `name` (online.*, target.*, sn.* are writable) from an array of
        its shape; values must be finite."""
        nb = self._name_arg(name)
        with self._lock:
            self._check_open("set_tensor")
            shape = self._tensor_table().get(name)
            if shape is None:
                rc = self._fn.tensor_write(self._h, nb, None, 0)
                raise self._fail(rc if rc != _abi.OK else _abi.ERR_NOT_FOUND)
        src = _arrays.float_input(array, "array", shape, self.strict)
        with self._lock:
            self._check_open("set_tensor")
            rc = self._fn.tensor_write(self._h, nb, src.ctypes.data, src.size)
            if rc != _abi.OK:
                raise self._fail(rc)
