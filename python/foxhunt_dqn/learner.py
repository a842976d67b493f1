"""Learner: one fhd_learner handle of libfoxhunt_dqn.so, driven with numpy arrays.

Shapes (row-major): N observations / environments, B batch size, S = obs_dim, D = number of
action branches, KT = sum of the branches' action counts. Array rules (what is passed by
address, what is converted, what is rejected) are in foxhunt_dqn._arrays.

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
from ._library import load_library
from .errors import LearnerClosedError, make_error

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


class Learner:
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
        self._S = int(cfg["obs_dim"])
        self._K = tuple(int(k) for k in cfg["actions"])
        self._D = len(self._K)
        self._KT = sum(self._K)
        self._E = int(cfg["num_envs"])
        self._B = int(cfg["batch_size"])

        # Argument structs reused by every call (a learner is used by one thread at a time).
        self._act_args = _abi.FhdActArgs()
        self._act_args.struct_size = ctypes.sizeof(_abi.FhdActArgs)
        self._tr = _abi.FhdTransitions()
        self._tr.struct_size = ctypes.sizeof(_abi.FhdTransitions)
        self._step_args = _abi.FhdStepArgs()
        self._step_args.struct_size = ctypes.sizeof(_abi.FhdStepArgs)
        self._step_stats = _abi.FhdTrainStats()
        self._step_stats.struct_size = ctypes.sizeof(_abi.FhdTrainStats)
        self._step_args.stats = ctypes.pointer(self._step_stats)
        self._step_args.num_envs = self._E
        # step()'s own input and output buffers: small inputs are copied into them (cheaper
        # than taking an array's address), so their pointers are set once, here.
        E, S, D = self._E, self._S, self._D
        self._st_obs = np.zeros((E, S), np.float32)      # (N, S)
        self._st_final = np.zeros((E, S), np.float32)    # (N, S)
        self._st_rew = np.zeros(E, np.float32)           # (N,)
        self._st_term = np.zeros(E, np.uint8)            # (N,)
        self._st_trunc = np.zeros(E, np.uint8)           # (N,)
        self._st_act = np.zeros((E, D), np.int32)        # (N, D)
        self._st_addr = {k: getattr(self, "_st_" + k).ctypes.data
                         for k in ("obs", "final", "rew", "term", "trunc", "act")}
        self._step_args.actions = self._st_addr["act"]
        self._step_ref = ctypes.byref(self._step_args)
        self._step_fn = self._fn.step
        self._obs_shapes = ((E, S), (S,)) if E == 1 else ((E, S),)
        self._vec_shapes = ((E,), ()) if E == 1 else ((E,),)
        self._batch = _abi.FhdBatch()
        self._batch.struct_size = ctypes.sizeof(_abi.FhdBatch)
        self._tensors = None

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
        state = "closed" if self.closed else f"obs_dim={self._S} actions={list(self._K)}"
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
        """S: floats per observation."""
        return self._S

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
        """Actions for observations obs (N, S) -> int32 (N, D); a single observation (S,)
        gives (D,). explore: epsilon-greedy with the schedule's current epsilon, else greedy.
        return_q: also return Q values (N, KT) float32 (each branch's K_d columns in order).
        out / q_out: arrays to write into instead of allocating (same shapes as returned)."""
        a = obs
        if not isinstance(a, np.ndarray) and not self.strict:
            a = np.asarray(a)
        single = isinstance(a, np.ndarray) and a.ndim == 1
        if single:
            if a.shape != (self._S,):  # report the caller's shape, not the reshaped one
                raise ValueError(_arrays.shape_message(
                    "obs", "float32", ((None, self._S), (self._S,)), a.shape))
            a = a.reshape(1, -1)
        a = _arrays.float_input(a, "obs", (None, self._S), self.strict)
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

    def observe(self, obs, actions, rewards, next_obs, terminated, truncated):
        """Store N transitions, one per env stream (N = num_envs): obs (N, S), actions
        (N, D) (or (N,) when D == 1), rewards (N,), next_obs (N, S), terminated (N,),
        truncated (N,) (bool or 0/1). Gymnasium semantics: terminated does not bootstrap,
        truncated bootstraps from next_obs. Does not train."""
        strict, S = self.strict, self._S
        o = _arrays.float_input(obs, "obs", (None, S), strict)
        n = o.shape[0]
        act = _arrays.int_input(actions, "actions", (n, self._D), strict, allow_1d=True)
        r = _arrays.float_input(rewards, "rewards", (n,), strict)
        nxt = _arrays.float_input(next_obs, "next_obs", (n, S), strict)
        te = _arrays.flag_input(terminated, "terminated", (n,), strict)
        tr = _arrays.flag_input(truncated, "truncated", (n,), strict)
        if n > _U32_MAX:
            raise ValueError(f"obs: {n} rows; at most {_U32_MAX}")
        with self._lock:
            self._check_open("observe")
            t = self._tr
            t.num_envs = n
            t.obs = o.ctypes.data
            t.actions = act.ctypes.data
            t.rewards = r.ctypes.data
            t.next_obs = nxt.ctypes.data
            t.terminated = te.ctypes.data
            t.truncated = tr.ctypes.data
            if _call_hook is not None:
                _call_hook("observe", t)
            rc = self._fn.observe(self._h, t)
            if rc != _abi.OK:
                raise self._fail(rc)

    def step(self, obs, rewards=None, terminated=None, truncated=None, final_obs=None, out=None):
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

        Inputs of at most STEP_COPY_MAX_BYTES are copied into the learner's own buffers
        (one copy, no allocation); larger float32 C-contiguous obs / final_obs are passed by
        address. With strict=True every input must already have the exact dtype."""
        if self.strict:
            return self._step_strict(obs, rewards, terminated, truncated, final_obs, out)
        args = self._step_args
        single = self._stage_obs(obs, "obs", self._st_obs, "obs")
        if rewards is None:
            if terminated is not None or truncated is not None or final_obs is not None:
                extra = [k for k, v in (("terminated", terminated), ("truncated", truncated),
                                        ("final_obs", final_obs)) if v is not None]
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
                raise self._fail(rc)
            if out is not None:
                return out
            return self._st_act[0].copy() if single else self._st_act.copy()

    def _stage_obs(self, x, name, buf, key):
        """Point step's `name` field at observations x: (N, S), or (S,) when N == 1. Returns
        whether x was a single (S,) observation."""
        shapes = self._obs_shapes
        if type(x) is not np.ndarray:
            x = _arrays.as_real_array(x, name, shapes)
        shape = x.shape
        if shape not in shapes:
            hint = (f" (num_envs is {self._E})" if len(shape) == 2 and shape[1] == self._S
                    else "")
            raise ValueError(_arrays.shape_message(name, "float32", shapes, shape) + hint)
        if (x.dtype is _arrays.FLOAT32 and x.nbytes > STEP_COPY_MAX_BYTES
                and x.flags.c_contiguous and x.flags.aligned):
            addr = x.ctypes.data
        else:
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
        return len(shape) == 1

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

    def _step_strict(self, obs, rewards, terminated, truncated, final_obs, out):
        """step() with strict=True: inputs pass by address and must need no conversion."""
        S = self._S
        single = isinstance(obs, np.ndarray) and obs.ndim == 1 and self._E == 1
        o = _arrays.float_input(obs.reshape(1, S) if single and obs.shape == (S,) else obs,
                                "obs", (None, S), True)
        n = o.shape[0]
        if rewards is None:
            if terminated is not None or truncated is not None or final_obs is not None:
                raise ValueError("step: terminated, truncated or final_obs given without "
                                 "rewards; the first call passes obs only")
            r = te = tr = fo = None
        else:
            if terminated is None or truncated is None:
                raise ValueError("step: rewards given; terminated and truncated are required too")
            r = _arrays.float_input(rewards, "rewards", (n,), True)
            te = _arrays.flag_input(terminated, "terminated", (n,), True)
            tr = _arrays.flag_input(truncated, "truncated", (n,), True)
            fo = None if final_obs is None else _arrays.float_input(
                final_obs, "final_obs", (n, S), True)
        actions = _arrays.output(out, "out", _arrays.INT32,
                                 (self._D,) if single else (n, self._D))
        with self._lock:
            self._check_open("step")
            args = self._step_args
            args.num_envs = n
            args.obs = o.ctypes.data
            args.rewards = r.ctypes.data if r is not None else None
            args.terminated = te.ctypes.data if te is not None else None
            args.truncated = tr.ctypes.data if tr is not None else None
            args.final_obs = fo.ctypes.data if fo is not None else None
            args.actions = actions.ctypes.data
            if _call_hook is not None:
                _call_hook("step", args)
            rc = self._fn.step(self._h, args)
            args.num_envs = self._E
            args.actions = self._st_addr["act"]
            if rc != _abi.OK:
                raise self._fail(rc)
        return actions

    @property
    def last_train_stats(self):
        """Training done by the last step() call: dict with updates_done, update_index, loss,
        td_abs_mean, q_mean, grad_norm (all zero when it did no update)."""
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
        """One gradient update on a host-supplied batch of B = batch_size rows: obs (B, S),
        actions (B, D) (or (B,) when D == 1), rewards (B,) (n-step returns), next_obs (B, S),
        terminated (B,), discounts (B,) bootstrap discounts (None: gamma), weights (B,)
        importance weights (None: 1). The replay buffer is not touched.

        Returns a dict: loss, td_abs_mean, q_mean, grad_norm, updates_done, update_index,
        td_errors (B, D) float32 = Q_d(s, a_d) - y before the update, targets (B,) float32 = y.
        td_errors_out / targets_out: arrays to write those into instead of allocating."""
        strict, S = self.strict, self._S
        o = _arrays.float_input(obs, "obs", (None, S), strict)
        b = o.shape[0]
        if b > _U32_MAX:
            raise ValueError(f"obs: {b} rows; at most {_U32_MAX}")
        act = _arrays.int_input(actions, "actions", (b, self._D), strict, allow_1d=True)
        r = _arrays.float_input(rewards, "rewards", (b,), strict)
        nxt = _arrays.float_input(next_obs, "next_obs", (b, S), strict)
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
            bt.obs = o.ctypes.data
            bt.actions = act.ctypes.data
            bt.rewards = r.ctypes.data
            bt.next_obs = nxt.ctypes.data
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
