"""Learner: one fhd_learner handle of libfoxhunt_dqn.so, driven with numpy arrays.

Shapes (row-major): N observations / environments, B batch size, S = obs_dim, D = number of
action branches, KT = sum of the branches' action counts. Array rules (what is passed by
address, what is converted, what is rejected) are in foxhunt_dqn._arrays.

Observations: one observation has the learner's obs_shape, (S,) for a flat config (obs_dim)
or (C, H, W) for an image config (obs_shape), and its obs_dtype, float32 or uint8 (ABI minor
1, read from the library's obs_info). Calls take (N, *obs_shape) arrays; act() takes a single
obs_shape observation too, and so does step() with num_envs 1. float32 learners get the
minor-0 float pointers; uint8 learners get the *_u8 pointers, the caller's array by address
when it is C-contiguous uint8 (no conversion and no copy in Python). The other dtype is
refused with a TypeError naming both dtypes and the caller's shape: a uint8 image is never
silently turned into floats (the network's 1/255 scale would be skipped), nor floats into
uint8.

A Learner may be used by one thread at a time; calls on one Learner from several threads are
serialised by a lock. Different Learners are independent.
"""

import ctypes
import json
import math
import os
import threading

import numpy as np

from . import _abi, _arrays
from ._learner_state import _LearnerState
from ._learner_step import _StepStaging
from ._library import load_library
from .errors import LearnerClosedError, NotImplementedByLibrary, make_error

# Test hook: when set, called as hook(function_name, args) just before each library call that
# takes an argument struct (act, observe, step, train_batch), with the ctypes struct whose
# pointer fields the library will read. Lets tests check that arrays are passed by address.
_call_hook = None

_U32_MAX = 2**32 - 1

# step() copies inputs up to this size into the learner's own buffers (a copy of a small
# array costs less than taking its address); larger float32 C-contiguous ones go by address.
STEP_COPY_MAX_BYTES = 16384


def _json_default(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"config: {type(x).__name__} is not JSON serialisable")


def config_to_json(config):
    """JSON text of a config given as a dict, JSON text (str/bytes) or a path (os.PathLike)."""
    if isinstance(config, dict):
        try:
            return json.dumps(config, default=_json_default, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"config: {exc} (NaN and Inf cannot be written as JSON)") from None
    if isinstance(config, str):
        return config
    if isinstance(config, (bytes, bytearray)):
        return bytes(config).decode("utf-8")
    if isinstance(config, os.PathLike):
        with open(config, encoding="utf-8") as f:
            return f.read()
    raise TypeError(
        f"config: expected a dict, JSON text (str) or a path (os.PathLike), "
        f"got {type(config).__name__}"
    )


class Learner(_StepStaging, _LearnerState):
    """A DQN learner created from a JSON config (schema: manifest()["config_schema"]).

    config: dict, JSON text (str or bytes) or a pathlib.Path of a JSON file.
    library: path of libfoxhunt_dqn.so (file or directory) or a Library; None searches
        $FOXHUNT_DQN_LIBRARY, then the package directory, then <repo>/build*/.
    strict: when True, array inputs that would need a copy (wrong dtype, non-contiguous)
        raise instead of being converted.
    """

    def __init__(self, config, library=None, *, strict=False):
        self._handle = None  # set first: __del__ may run when __init__ fails
        self._lock = threading.Lock()
        self.library = lib = load_library(library)
        self._fn = lib.fn
        self.strict = bool(strict)
        text = config_to_json(config)
        data = text.encode("utf-8")
        handle = _abi.LearnerHandle()
        err = _abi.FhdError.new()
        rc = self._fn.init(data, len(data), ctypes.byref(handle), ctypes.byref(err))
        if rc != _abi.OK:
            code = err.code if err.code else rc
            raise make_error(
                code,
                lib.status_name(code),
                err.message.decode("utf-8", "replace") or lib.status_message(code),
                path=err.path.decode("utf-8", "replace"),
                line=int(err.line),
                column=int(err.column),
            )
        if not handle.value:
            raise make_error(_abi.ERR_INTERNAL, "FHD_ERR_INTERNAL", "init returned a NULL learner")
        self._handle = handle
        self._h = handle.value

        # The effective config: the manifest's defaults, then the given keys.
        schema = lib.manifest()["config_schema"]
        cfg = {k: v.get("default") for k, v in schema.items()}
        cfg.update(json.loads(text))
        self._config = cfg
        self._minor1 = lib.has_minor1
        self._read_obs_info(cfg)
        self._K = tuple(int(k) for k in cfg["actions"])
        self._D = len(self._K)
        self._KT = sum(self._K)
        self._E = int(cfg["num_envs"])
        self._B = int(cfg["batch_size"])

        # Argument structs reused by every call (a learner is used by one thread at a time).
        # Their struct_size is the minor-1 size where the library reads minor 1, else the
        # minor-0 size (the trailing fields are then never read).
        m1 = self._minor1
        self._act_args = _abi.FhdActArgs()
        self._act_args.struct_size = (ctypes.sizeof(_abi.FhdActArgs) if m1
                                      else _abi.ACT_ARGS_SIZE_V1_0)
        self._tr = _abi.FhdTransitions()
        self._tr.struct_size = (ctypes.sizeof(_abi.FhdTransitions) if m1
                                else _abi.TRANSITIONS_SIZE_V1_0)
        self._step_args = _abi.FhdStepArgs()
        self._step_args.struct_size = (ctypes.sizeof(_abi.FhdStepArgs) if m1
                                       else _abi.STEP_ARGS_SIZE_V1_0)
        self._step_stats = _abi.FhdTrainStats()
        self._step_stats.struct_size = ctypes.sizeof(_abi.FhdTrainStats)
        self._step_args.stats = ctypes.pointer(self._step_stats)
        self._step_args.num_envs = self._E
        # step()'s own input and output buffers: small inputs are copied into them (cheaper
        # than taking an array's address), so their pointers are set once, here.
        E, S, D = self._E, self._S, self._D
        self._st_obs = np.zeros((E, S), self._dtype)     # (N, S)
        self._st_final = np.zeros((E, S), self._dtype)   # (N, S)
        self._st_rew = np.zeros(E, np.float32)           # (N,)
        self._st_term = np.zeros(E, np.uint8)            # (N,)
        self._st_trunc = np.zeros(E, np.uint8)           # (N,)
        self._st_valid = np.zeros(E, np.uint8)           # (N,)
        self._st_act = np.zeros((E, D), np.int32)        # (N, D)
        self._st_addr = {k: getattr(self, "_st_" + k).ctypes.data
                         for k in ("obs", "final", "rew", "term", "trunc", "valid", "act")}
        self._step_args.actions = self._st_addr["act"]
        self._step_valid = False  # whether step_args.valid is set (reset only then)
        self._step_ref = ctypes.byref(self._step_args)
        self._step_fn = self._fn.step
        shape = self._shape
        self._obs_shapes = ((E,) + shape, shape) if E == 1 else ((E,) + shape,)
        if self._u8:
            self._stage_obs = self._stage_obs_u8
        self._vec_shapes = ((E,), ()) if E == 1 else ((E,),)
        self._batch = _abi.FhdBatch()
        self._batch.struct_size = ctypes.sizeof(_abi.FhdBatch) if m1 else _abi.BATCH_SIZE_V1_0
        self._tensors = None

    def _read_obs_info(self, cfg):
        """Observation dtype, shape, size and scale: the library's obs_info (minor 1), else
        the config's obs_dim (a minor-0 library has float32 flat observations only)."""
        if self._minor1:
            info = _abi.FhdObsInfo()
            info.struct_size = ctypes.sizeof(info)
            rc = self._fn.obs_info(self._h, ctypes.byref(info))
            if rc != _abi.OK:
                raise self._fail(rc)
            rank = int(info.rank)
            self._shape = tuple(int(info.shape[k]) for k in range(rank))
            self._S = int(info.size)
            self._u8 = int(info.dtype) == _abi.OBS_DTYPE_UINT8
            self._scale = float(info.scale)
            self._frame_stack = int(info.frame_stack)
            if math.prod(self._shape) != self._S:
                raise make_error(_abi.ERR_INTERNAL, "FHD_ERR_INTERNAL",
                                 f"obs_info: shape {self._shape} does not hold size {self._S}")
        else:
            self._S = int(cfg["obs_dim"])
            self._shape = (self._S,)
            self._u8 = False
            self._scale = 1.0
            self._frame_stack = 1
        self._rank = len(self._shape)
        self._dtype = _arrays.UINT8 if self._u8 else _arrays.FLOAT32
        self._dtype_name = str(self._dtype)

    # ---- lifetime --------------------------------------------------------------------------

    def close(self):
        """Destroy the learner. Idempotent; later calls of other methods raise
        LearnerClosedError."""
        handle = getattr(self, "_handle", None)
        if handle is None:
            return
        with self._lock:
            if self._handle is not None:
                self._handle = None
                self._fn.destroy(self._h)
                self._h = None

    @property
    def closed(self):
        return self._handle is None

    def __enter__(self):
        self._check_open("__enter__")
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self.closed:
            state = "closed"
        elif len(self._shape) == 1 and not self._u8:
            state = f"obs_dim={self._S} actions={list(self._K)}"
        else:
            state = (f"obs_shape={list(self._shape)} obs_dtype={self._dtype_name} "
                     f"actions={list(self._K)}")
        return f"<foxhunt_dqn.Learner {state}>"

    def _check_open(self, what):
        if self._handle is None:
            raise LearnerClosedError(what)

    def _fail(self, rc):
        """The exception for status rc of the last call (lock held)."""
        msg = self._fn.last_error(self._h)
        message = msg.decode("utf-8", "replace") if msg else ""
        return make_error(
            rc, self.library.status_name(rc), message or self.library.status_message(rc)
        )

    # ---- configuration ---------------------------------------------------------------------

    @property
    def config(self):
        """The effective config (manifest defaults + the given keys), a copy."""
        return json.loads(json.dumps(self._config))

    @property
    def obs_dim(self):
        """S: values per observation (C*H*W for an image learner)."""
        return self._S

    @property
    def obs_shape(self):
        """Shape of one observation: (S,) flat, or (C, H, W) for an image learner."""
        return self._shape

    @property
    def obs_dtype(self):
        """numpy dtype of the observations: float32, or uint8 (config obs_dtype "uint8")."""
        return self._dtype

    @property
    def obs_scale(self):
        """The network's input is obs_scale * obs (1/255 for uint8 by default)."""
        return self._scale

    @property
    def frame_stack(self):
        """Frames the host stacks along C of obs_shape (1: none)."""
        return self._frame_stack

    def _obs_input(self, x, name, n=None, single_ok=False):
        """Observations x (n, *obs_shape), or one observation obs_shape when single_ok, as
        an array of the learner's dtype whose memory is C-contiguous (N, S); returns
        (array, single). Shape and dtype errors name the caller's shape."""
        shape = self._shape
        if not isinstance(x, np.ndarray):
            if self.strict:
                raise TypeError(
                    f"{name}: expected a numpy array of {self._dtype_name} with shape "
                    f"{_arrays.fmt_shape((n,) + shape)}, got {type(x).__name__}")
            x = _arrays.as_real_array(x, name, ((n,) + shape,))
        single = single_ok and x.shape == shape
        if not single and (x.ndim != len(shape) + 1 or x.shape[1:] != shape
                           or (n is not None and x.shape[0] != n)):
            one = single_ok and x.ndim == len(shape)  # a single observation was meant
            shapes = ((n,) + shape, shape) if one else ((n,) + shape,)
            raise ValueError(_arrays.shape_message(name, self._dtype_name, shapes, x.shape))
        if single:
            x = x.reshape((1,) + shape)
        if self._u8:
            if x.dtype != _arrays.UINT8:
                raise TypeError(self._dtype_message(name, x, single))
            return _arrays.finish(x, name, _arrays.UINT8, self.strict), single
        if x.dtype == _arrays.UINT8:
            raise TypeError(self._dtype_message(name, x, single))
        return _arrays.float_input(x, name, x.shape, self.strict), single

    def _dtype_message(self, name, x, single=False):
        got = x.shape[1:] if single else x.shape
        want, other = self._dtype_name, ("float32" if self._u8 else "uint8")
        return (f"{name}: the learner takes {want} observations (obs_dtype {want!r}); got an "
                f"array of {x.dtype} with shape {tuple(got)}. Pass {want} (the library does "
                f"not convert), or create the learner with obs_dtype {other!r}")

    def _need_minor1(self, what):
        if not self._minor1:
            raise NotImplementedByLibrary(
                None, "FHD_NEEDS_ABI_MINOR_1",
                f"{what} needs ABI 1.1; {self.library.path} is ABI "
                f"{self.library.abi_major}.{self.library.abi_minor}")

    @property
    def action_branches(self):
        """(K_0, ..., K_{D-1}): actions of each branch (config "actions")."""
        return self._K

    @property
    def num_branches(self):
        """D."""
        return self._D

    @property
    def total_actions(self):
        """KT = sum of action_branches (columns of the Q-value matrix)."""
        return self._KT

    @property
    def num_envs(self):
        """Environments per step / observe call (config num_envs)."""
        return self._E

    @property
    def batch_size(self):
        return self._B

    def split_q(self, q):
        """Split a (..., KT) Q-value array into a list of D views (..., K_d), one per branch."""
        return np.split(q, np.cumsum(self._K)[:-1], axis=-1)

    # ---- acting and learning ---------------------------------------------------------------

    def act(self, obs, explore=True, return_q=False, out=None, q_out=None):
        """Actions for observations obs (N, *obs_shape) -> int32 (N, D); a single observation
        of obs_shape ((S,) or (C, H, W)) gives (D,). explore: epsilon-greedy with the
        schedule's current epsilon, else greedy.
        return_q: also return Q values (N, KT) float32 (each branch's K_d columns in order).
        out / q_out: arrays to write into instead of allocating (same shapes as returned)."""
        a = obs
        if not isinstance(a, np.ndarray) and not self.strict:
            a = np.asarray(a)
        a, single = self._obs_input(a, "obs", None, single_ok=True)
        n = a.shape[0]
        if n > _U32_MAX:
            raise ValueError(f"obs: {n} observations; at most {_U32_MAX} per call")
        act_shape = (self._D,) if single else (n, self._D)
        actions = _arrays.output(out, "out", _arrays.INT32, act_shape)
        q = None
        if return_q or q_out is not None:
            q_shape = (self._KT,) if single else (n, self._KT)
            q = _arrays.output(q_out, "q_out", _arrays.FLOAT32, q_shape)
        with self._lock:
            self._check_open("act")
            args = self._act_args
            args.num_obs = n
            if self._u8:
                args.obs_u8 = a.ctypes.data
            else:
                args.obs = a.ctypes.data
            args.actions = actions.ctypes.data
            args.q_values = q.ctypes.data if q is not None else None
            args.explore = 1 if explore else 0
            if _call_hook is not None:
                _call_hook("act", args)
            rc = self._fn.act(self._h, args)
            if rc != _abi.OK:
                raise self._fail(rc)
        if return_q:
            return actions, q
        return actions

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated, valid=None):
        """Store N transitions, one per env stream (N = num_envs): obs (N, *obs_shape),
        actions (N, D) (or (N,) when D == 1), rewards (N,), next_obs (N, *obs_shape),
        terminated (N,), truncated (N,) (bool or 0/1). Gymnasium semantics: terminated does
        not bootstrap, truncated bootstraps from next_obs. Does not train.
        valid (N,) bool or 0/1 (ABI 1.1): env i takes part only where valid[i]; an invalid
        env stores nothing, its n-step stream does not advance and its other inputs are
        not read. None: every env is valid."""
        strict = self.strict
        o, _ = self._obs_input(obs, "obs")
        n = o.shape[0]
        act = _arrays.int_input(actions, "actions", (n, self._D), strict, allow_1d=True)
        r = _arrays.float_input(rewards, "rewards", (n,), strict)
        nxt, _ = self._obs_input(next_obs, "next_obs", n)
        te = _arrays.flag_input(terminated, "terminated", (n,), strict)
        tr = _arrays.flag_input(truncated, "truncated", (n,), strict)
        va = None
        if valid is not None:
            self._need_minor1("observe(valid=...)")
            va = _arrays.flag_input(valid, "valid", (n,), strict)
        if n > _U32_MAX:
            raise ValueError(f"obs: {n} rows; at most {_U32_MAX}")
        with self._lock:
            self._check_open("observe")
            t = self._tr
            t.num_envs = n
            if self._u8:
                t.obs_u8 = o.ctypes.data
                t.next_obs_u8 = nxt.ctypes.data
            else:
                t.obs = o.ctypes.data
                t.next_obs = nxt.ctypes.data
            t.actions = act.ctypes.data
            t.rewards = r.ctypes.data
            t.terminated = te.ctypes.data
            t.truncated = tr.ctypes.data
            t.valid = va.ctypes.data if va is not None else None
            if _call_hook is not None:
                _call_hook("observe", t)
            rc = self._fn.observe(self._h, t)
            if rc != _abi.OK:
                raise self._fail(rc)

    def step(self, obs, rewards=None, terminated=None, truncated=None, final_obs=None, out=None,
             valid=None):
        """The agent loop for N = num_envs environments in one call; returns actions (N, D).

        First call (or after an interruption): step(obs) only chooses actions. Then
        step(obs, rewards, terminated, truncated, final_obs) stores, for each env i, the
        transition from the previous call's observation and action with rewards[i], trains on
        schedule, and chooses actions for obs with epsilon-greedy exploration. For an env
        whose episode ended (terminated or truncated) after an auto-reset, obs[i] is the first
        observation of the new episode and final_obs[i] the last of the old one; rows of
        final_obs for envs that did not end are ignored. Without final_obs, obs[i] is used as
        the next observation. The training done by the call is in last_train_stats.

        With num_envs == 1 it also takes what a single Gymnasium env returns: obs (S,), a
        Python (or numpy) scalar reward, bools terminated / truncated, final_obs (S,); then
        the actions come back as (D,), as act() does for an (S,) observation.

        Observations are (N, *obs_shape) of the learner's obs_dtype (module docstring).
        valid (N,) bool or 0/1 (ABI 1.1; with rewards): an env with valid[i] false stores no
        transition this call (its reward and flags are not read, its n-step stream does not
        advance) and still gets an action for obs[i], which becomes its previous observation:
        Gymnasium's NEXT_STEP autoreset, valid[i] false on the call whose obs[i] is the reset
        observation. None: every env is valid.

        Inputs of at most STEP_COPY_MAX_BYTES are copied into the learner's own buffers
        (one copy, no allocation); larger float32 C-contiguous obs / final_obs are passed by
        address. With strict=True every input must already have the exact dtype."""
        if self.strict:
            return self._step_strict(obs, rewards, terminated, truncated, final_obs, out, valid)
        args = self._step_args
        single = self._stage_obs(obs, "obs", self._st_obs, "obs")
        if valid is not None:
            if rewards is not None:
                self._need_minor1("step(valid=...)")
                self._stage_vec(valid, "valid", self._st_valid, True)
                args.valid = self._st_addr["valid"]
                self._step_valid = True
        elif self._step_valid:
            args.valid = None
            self._step_valid = False
        if rewards is None:
            if (terminated is not None or truncated is not None or final_obs is not None
                    or valid is not None):
                extra = [k for k, v in (("terminated", terminated), ("truncated", truncated),
                                        ("final_obs", final_obs), ("valid", valid))
                         if v is not None]
                raise ValueError(
                    f"step: {', '.join(extra)} given without rewards; the first call passes "
                    f"obs only"
                )
            args.rewards = args.terminated = args.truncated = args.final_obs = None
        else:
            if terminated is None or truncated is None:
                raise ValueError("step: rewards given; terminated and truncated are required too")
            self._stage_vec(rewards, "rewards", self._st_rew, False)
            self._stage_vec(terminated, "terminated", self._st_term, True)
            self._stage_vec(truncated, "truncated", self._st_trunc, True)
            a = self._st_addr
            args.rewards, args.terminated, args.truncated = a["rew"], a["term"], a["trunc"]
            if final_obs is None:
                if self._u8:
                    args.final_obs_u8 = None
                else:
                    args.final_obs = None
            else:
                self._stage_obs(final_obs, "final_obs", self._st_final, "final")
        if out is not None:
            shape = (self._D,) if single else (self._E, self._D)
            out = _arrays.output(out, "out", _arrays.INT32, shape)
            args.actions = out.ctypes.data
        with self._lock:
            if self._handle is None:
                raise LearnerClosedError("step")
            if _call_hook is not None:
                _call_hook("step", args)
            rc = self._step_fn(self._h, self._step_ref)
            if out is not None:
                args.actions = self._st_addr["act"]
            if rc != _abi.OK:
                raise self._step_fail(rc, out if out is not None else (
                    self._st_act[0].copy() if single else self._st_act.copy()))
            if out is not None:
                return out
            return self._st_act[0].copy() if single else self._st_act.copy()

    def _step_fail(self, rc, actions):
        """The exception of a failed step; FHD_ERR_DIVERGED carries the actions the call
        still chose (its transitions were stored too): DivergedError.actions."""
        exc = self._fail(rc)
        if rc == _abi.ERR_DIVERGED:
            exc.actions = actions
        return exc


    @property
    def last_train_stats(self):
        """Training done by the last step() call: dict with updates_done, update_index, loss,
        td_abs_mean, q_mean, grad_norm, updates_skipped (the training guard's skips; all zero
        when it did no update)."""
        return self._step_stats.as_dict()

    def train(self, n=1):
        """Run n gradient updates sampled from replay; returns the stats of the last one.
        Raises NotReady while the replay holds fewer than batch_size transitions."""
        n = int(n)
        if not 0 <= n <= _U32_MAX:
            raise ValueError(f"train: n is {n}; allowed: [0, {_U32_MAX}]")
        stats = _abi.FhdTrainStats()
        stats.struct_size = ctypes.sizeof(stats)
        with self._lock:
            self._check_open("train")
            rc = self._fn.train(self._h, n, ctypes.byref(stats))
            if rc != _abi.OK:
                raise self._fail(rc)
        return stats.as_dict()

    def train_batch(self, obs, actions, rewards, next_obs, terminated, discounts=None,
                    weights=None, td_errors_out=None, targets_out=None):
        """One gradient update on a host-supplied batch of B = batch_size rows: obs
        (B, *obs_shape), actions (B, D) (or (B,) when D == 1), rewards (B,) (n-step returns),
        next_obs (B, *obs_shape),
        terminated (B,), discounts (B,) bootstrap discounts (None: gamma), weights (B,)
        importance weights (None: 1). The replay buffer is not touched.

        Returns a dict: loss, td_abs_mean, q_mean, grad_norm, updates_done, update_index,
        updates_skipped (1 where the training guard skipped the update), td_errors (B, D)
        float32 = Q_d(s, a_d) - y before the update, targets (B,) float32 = y.
        td_errors_out / targets_out: arrays to write those into instead of allocating."""
        strict = self.strict
        o, _ = self._obs_input(obs, "obs")
        b = o.shape[0]
        if b > _U32_MAX:
            raise ValueError(f"obs: {b} rows; at most {_U32_MAX}")
        act = _arrays.int_input(actions, "actions", (b, self._D), strict, allow_1d=True)
        r = _arrays.float_input(rewards, "rewards", (b,), strict)
        nxt, _ = self._obs_input(next_obs, "next_obs", b)
        te = _arrays.flag_input(terminated, "terminated", (b,), strict)
        disc = None if discounts is None else _arrays.float_input(
            discounts, "discounts", (b,), strict)
        w = None if weights is None else _arrays.float_input(weights, "weights", (b,), strict)
        td = _arrays.output(td_errors_out, "td_errors_out", _arrays.FLOAT32, (b, self._D))
        y = _arrays.output(targets_out, "targets_out", _arrays.FLOAT32, (b,))
        stats = _abi.FhdTrainStats()
        stats.struct_size = ctypes.sizeof(stats)
        with self._lock:
            self._check_open("train_batch")
            bt = self._batch
            bt.batch_size = b
            if self._u8:
                bt.obs_u8 = o.ctypes.data
                bt.next_obs_u8 = nxt.ctypes.data
            else:
                bt.obs = o.ctypes.data
                bt.next_obs = nxt.ctypes.data
            bt.actions = act.ctypes.data
            bt.rewards = r.ctypes.data
            bt.terminated = te.ctypes.data
            bt.discounts = disc.ctypes.data if disc is not None else None
            bt.weights = w.ctypes.data if w is not None else None
            bt.td_errors = td.ctypes.data
            bt.targets = y.ctypes.data
            if _call_hook is not None:
                _call_hook("train_batch", bt)
            rc = self._fn.train_batch(self._h, bt, ctypes.byref(stats))
            if rc != _abi.OK:
                raise self._fail(rc)
        result = stats.as_dict()
        result["td_errors"] = td
        result["targets"] = y
        return result

    # ---- metrics ---------------------------------------------------------------------------
