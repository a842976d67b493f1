"""step()'s argument staging (a mixin of Learner): copying small inputs into the learner's own
buffers, whose addresses sit in a cached fhd_step_args, and the strict path that validates
everything first. Shapes as in learner.py.
"""

import sys

import numpy as np

from . import _abi, _arrays


def _learner_module():
    """foxhunt_dqn.learner, where STEP_COPY_MAX_BYTES and the tests' _call_hook live (read at
    call time, so that a test that sets them is seen here too)."""
    return sys.modules[__package__ + ".learner"]


class _StepStaging:
    """The staging helpers and the strict path of Learner.step."""

    def _stage_obs(self, x, name, buf, key):
        """Point step's `name` field at observations x: (N, S), or (S,) when N == 1. Returns
        whether x was a single (S,) observation."""
        shapes = self._obs_shapes
        if type(x) is not np.ndarray:
            x = _arrays.as_real_array(x, name, shapes)
        shape = x.shape
        if shape not in shapes:
            raise ValueError(self._step_shape_message(name, shape))
        if (x.dtype is _arrays.FLOAT32 and x.nbytes > _learner_module().STEP_COPY_MAX_BYTES
                and x.flags.c_contiguous and x.flags.aligned):
            addr = x.ctypes.data
        else:
            if x.dtype is _arrays.UINT8:
                raise TypeError(self._dtype_message(name, x))
            try:
                np.copyto(buf, x.reshape(buf.shape), casting="same_kind")
            except TypeError:
                raise TypeError(
                    f"{name}: expected dtype float32 with shape "
                    f"{_arrays.fmt_shapes(shapes)}, got {x.dtype} (only real number dtypes "
                    f"are converted)"
                ) from None
            addr = self._st_addr[key]
        if key == "obs":
            self._step_args.obs = addr
        else:
            self._step_args.final_obs = addr
        return len(shape) == self._rank

    def _step_shape_message(self, name, shape):
        hint = (f" (num_envs is {self._E})"
                if len(shape) == len(self._shape) + 1 and shape[1:] == self._shape else "")
        return _arrays.shape_message(name, self._dtype_name, self._obs_shapes, shape) + hint

    def _stage_obs_u8(self, x, name, buf, key):
        """_stage_obs of a uint8 learner: a C-contiguous uint8 array goes by address (no copy);
        another layout of uint8 is copied into buf; any other dtype is refused."""
        if type(x) is not np.ndarray:
            x = _arrays.as_real_array(x, name, self._obs_shapes)
        shape = x.shape
        if shape not in self._obs_shapes:
            raise ValueError(self._step_shape_message(name, shape))
        if x.dtype != _arrays.UINT8:
            raise TypeError(self._dtype_message(name, x))
        if x.flags.c_contiguous and x.flags.aligned:
            addr = x.ctypes.data
        else:
            np.copyto(buf, x.reshape(buf.shape))
            addr = self._st_addr[key]
        if key == "obs":
            self._step_args.obs_u8 = addr
        else:
            self._step_args.final_obs_u8 = addr
        return len(shape) == self._rank

    def _stage_vec(self, x, name, buf, flag):
        """Copy rewards (N,) / flags (N,) into buf; a scalar is accepted when N == 1."""
        t = type(x)
        if self._E == 1 and (t is float or t is bool or t is int):
            if flag and t is float:
                raise TypeError(f"{name}: expected a bool (or 0/1), got float {x!r}")
            buf[0] = x
            return
        if (t is list or t is tuple) and len(x) == self._E and self._E <= 64:
            kinds = (bool, int) if flag else (float, int, bool)
            if all(type(v) in kinds for v in x):  # Python scalars: no array needed
                if flag and not all(v == 0 or v == 1 for v in x):
                    raise ValueError(f"{name}: values must be 0 or 1")
                buf[:] = x
                return
        shapes = self._vec_shapes
        if t is not np.ndarray:
            x = _arrays.as_real_array(x, name, shapes)
        if x.shape not in shapes:
            raise ValueError(
                _arrays.shape_message(name, "bool or uint8" if flag else "float32", shapes,
                                      x.shape))
        k = x.dtype.kind
        if flag:
            if k == "b" or x.dtype is _arrays.UINT8:
                np.copyto(buf, x, casting="unsafe")
                return
            if k not in "iu":
                raise TypeError(
                    f"{name}: expected dtype bool or uint8 with shape "
                    f"{_arrays.fmt_shapes(shapes)}, got {x.dtype}")
            if x.size and not np.all((x == 0) | (x == 1)):
                raise ValueError(f"{name}: values must be 0 or 1")
            np.copyto(buf, x, casting="unsafe")
            return
        if k not in "fiub":
            raise TypeError(
                f"{name}: expected dtype float32 with shape {_arrays.fmt_shapes(shapes)}, "
                f"got {x.dtype} (only real number dtypes are converted)")
        np.copyto(buf, x, casting="unsafe")

    def _step_strict(self, obs, rewards, terminated, truncated, final_obs, out, valid):
        """step() with strict=True: inputs pass by address and must need no conversion."""
        single_ok = self._E == 1
        o, single = self._obs_input(obs, "obs", None, single_ok=single_ok)
        n = o.shape[0]
        va = None
        if rewards is None:
            if (terminated is not None or truncated is not None or final_obs is not None
                    or valid is not None):
                raise ValueError("step: terminated, truncated, final_obs or valid given "
                                 "without rewards; the first call passes obs only")
            r = te = tr = fo = None
        else:
            if terminated is None or truncated is None:
                raise ValueError("step: rewards given; terminated and truncated are required too")
            r = _arrays.float_input(rewards, "rewards", (n,), True)
            te = _arrays.flag_input(terminated, "terminated", (n,), True)
            tr = _arrays.flag_input(truncated, "truncated", (n,), True)
            fo = None
            if final_obs is not None:
                fo, _ = self._obs_input(final_obs, "final_obs", n, single_ok=single)
            if valid is not None:
                self._need_minor1("step(valid=...)")
                va = _arrays.flag_input(valid, "valid", (n,), True)
        actions = _arrays.output(out, "out", _arrays.INT32,
                                 (self._D,) if single else (n, self._D))
        with self._lock:
            self._check_open("step")
            args = self._step_args
            args.num_envs = n
            if self._u8:
                args.obs_u8 = o.ctypes.data
                args.final_obs_u8 = fo.ctypes.data if fo is not None else None
            else:
                args.obs = o.ctypes.data
                args.final_obs = fo.ctypes.data if fo is not None else None
            args.rewards = r.ctypes.data if r is not None else None
            args.terminated = te.ctypes.data if te is not None else None
            args.truncated = tr.ctypes.data if tr is not None else None
            args.valid = va.ctypes.data if va is not None else None
            args.actions = actions.ctypes.data
            hook = _learner_module()._call_hook
            if hook is not None:
                hook("step", args)
            rc = self._fn.step(self._h, args)
            args.num_envs = self._E
            args.actions = self._st_addr["act"]
            args.valid = None
            self._step_valid = False
            if rc != _abi.OK:
                raise self._step_fail(rc, actions)
        return actions
