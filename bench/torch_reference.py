#!/usr/bin/env python3
"""bench/torch_reference.py - the foxhunt-dqn update (docs/design.md section 4) written in
plain PyTorch, timed the way `fhd-host bench` times the plugin, on the presets (every
bench/presets/NAME.json, the files fhd-host embeds) or on any learner config (--config FILE,
e.g. the random shapes of bench/shapes.py, which also imports bench_config from here).

The same update, op for op:
  network   Linear torso with ReLU and one merged head Linear(H, 1 + KT) (row 0 the value V,
            rows 1.. the advantages, branch d in columns offs_d .. offs_d + K_d), Q_d = V + A_d
            - mean(A_d) (dueling) or Q_d = A_d; branches may differ in size: Q is then laid
            out (n, D, max K) with -inf in the columns a branch lacks, which no argmax picks
            and no logsumexp counts (branches of one size: a plain view, no padding);
            spectral norm as torch.nn.utils.parametrizations.spectral_norm: persistent u, v,
            one power iteration per update (no_grad), sigma = u . (W v) with u, v constant,
            W / sigma used by online(s) and online(s'); the target net uses its stored u, v.
  pixels    obs_shape [C, H, W] with a conv list (torso "nature": 32x8s4, 64x4s2, 64x3s1,
            hidden [512]) in front of the linear torso: F.conv2d with ReLU per layer (cuDNN
            on CUDA, torch.backends.cudnn.benchmark = True: the algorithms timed per shape),
            flattened in (C, H, W) order; the input is obs_scale * obs in float32 (1/255 for
            uint8 by default), converted from the gathered batch inside the update (inside
            the graph in graph mode). Spectral norm "all" covers the convs (W as (cout,
            cin k k)). Memory NCHW, or NHWC with --channels-last (weights and activations).
  replay    on the chosen device: priorities^alpha in one float tensor; stratified sampling
            (one uniform draw per 1/B slice of the total) through cumsum + searchsorted;
            IS weights (N P(i))^-beta normalised by the batch max, beta annealed per update on
            the device; priority update (mean_d |td| + eps)^alpha by index_put_; new
            transitions get the running max priority. Observations as given (uint8 stays
            uint8): obs and next_obs of each transition, (N, *obs_shape) each (no frame
            sharing: frame_stack only changes how the learner stores them).
  update    double DQN target from target(s') at argmax online(s'), Huber (delta) or squared
            error weighted by w, optional CQL, clip_grad_norm_, Adam / AdamW; hard (tau = 1)
            or Polyak target update every target_update_interval updates, from the host.
bf16 (--bf16, the learner's matmul_precision "bf16"): the torso and head GEMMs and convolutions
            under torch.autocast(bfloat16) (bf16 operands, fp32 accumulation, bf16 outputs),
            the head's output upcast to fp32 before the dueling combination and the loss;
            W / sigma formed in fp32 first; parameters, gradients and Adam in fp32. Autocast
            rounds Q, dW and db to bf16 where the learner keeps them fp32 (docs/design.md
            section 4, "GEMM precision"): the same arithmetic cost, a few bf16 ulps apart.
Modes: eager (CPU and CUDA); graph: the whole update captured into one torch.cuda.CUDAGraph
with static buffers, warmed up on a side stream as PyTorch documents (Adam capturable=True);
compile: torch.compile of the sampling + forward + loss and of the optimizer step (failures
are caught and reported in the JSON as "error").

Timing (as fhd-host bench): fill the replay with min(capacity, max(16 B, 65536)) (or --fill)
synthetic transitions in calls of --envs (64) transitions (uniform obs in [-1, 1), uniform bytes
for uint8, rewards in [-1, 1), uniform actions, 1% terminals); warm up for 0.3 s; --repeats (7)
runs of N updates (N for about --run-seconds (0.25) a run, >= 1000 on CUDA); per-run
microseconds per update from perf_counter on CPU and CUDA events around the N updates on
CUDA; median, p10, p90 (numpy.percentile's interpolation).
act: greedy, host observations in (uint8 for uint8 configs, pageable memory), host actions
out, 1 and 64 observations, median of 2000.
gemm_flops_per_update: every layer as its GEMM (a conv as im2col's), as fhd-host bench counts.
CPU threads: torch.set_num_threads(--threads, default os.cpu_count()); reported as "threads".

Config keys: those of the update above are implemented; the ones that do not change an
update (backend, device, exploration, the step() schedule, num_envs, autotune, frame_stack)
are ignored; n_step must be 1 (the fill stores one-step transitions); matmul_precision other
than fp32 is recorded, and TF32 is used only with --tf32, bf16 only with --bf16; any other key
is an error, so a
config this script cannot run the same way is refused rather than timed as something else.

Runs under torch 1.13 (CPU only: eager) and torch 2.x (CUDA: eager, graph, compile).
Usage:
  torch_reference.py --device cpu|cuda --preset C0[,B1,...] --mode eager|graph|compile|all
                     [--json] [--updates N] [--repeats N] [--threads N] [--peak-tflops X]
                     [--fill N] [--tf32] [--bf16] [--channels-last]
  torch_reference.py --device cpu|cuda --config FILE [--config FILE ...] [same options]
  torch_reference.py --device cpu|cuda --sgemm      (large float32 matmul rate, GFLOP/s)
With --json each (preset or config, mode) prints one JSON object on its own line.
"""
import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    print(f"error: cannot import torch with {sys.executable}: {exc}", file=sys.stderr)
    sys.exit(3)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PRESET_DIR = os.path.join(HERE, "presets")
PRESETS = sorted(f[:-5] for f in os.listdir(PRESET_DIR) if f.endswith(".json"))
TORCH_MAJOR = int(torch.__version__.split(".")[0])


# ---- config ---------------------------------------------------------------------------------

# Keys of the update, implemented below.
UPDATE_KEYS = {
    "obs_dim", "obs_shape", "obs_dtype", "obs_scale", "conv", "torso", "actions", "hidden",
    "dueling", "spectral_norm", "double_dqn", "gamma", "loss", "huber_delta", "cql_alpha",
    "optimizer", "lr", "adam_beta1", "adam_beta2", "adam_eps", "weight_decay", "max_grad_norm",
    "target_update_interval", "tau", "batch_size", "replay_capacity", "replay", "per_alpha",
    "per_beta0", "per_beta_steps", "per_eps", "seed", "n_step", "matmul_precision"}
# Keys that do not change an update (where it runs, exploration, step()'s schedule, the plan,
# and frame_stack: how the learner's replay stores the frames of an observation, not what the
# network sees).
NO_EFFECT_KEYS = {
    "backend", "device", "learning_starts", "train_freq", "gradient_steps", "num_envs",
    "epsilon_start", "epsilon_end", "epsilon_decay_steps", "autotune", "autotune_cache",
    "frame_stack"}
# torso "nature" (Mnih et al. 2015), as plugin/config_pixels.c expands it: these convolutions,
# then hidden [512]. tests/bench/test_torch_reference.py checks it against the parity
# reference's table.
NATURE = [{"out": 32, "kernel": 8, "stride": 4}, {"out": 64, "kernel": 4, "stride": 2},
          {"out": 64, "kernel": 3, "stride": 1}]
NATURE_HIDDEN = [512]


def resolve_config(given):
    """A learner config over the defaults of manifest.json's config_schema, after checking
    that this script runs it as the learner would (see the header). Image configs come back
    with obs_dim = C H W, torso "nature" expanded into conv and hidden, conv items with their
    padding, and obs_scale resolved (0: 1/255 for uint8, 1 for float32)."""
    unknown = sorted(set(given) - UPDATE_KEYS - NO_EFFECT_KEYS)
    if unknown:
        raise ValueError(f"torch_reference.py does not implement config key(s) {unknown}")
    with open(os.path.join(REPO, "manifest.json")) as f:
        schema = json.load(f)["config_schema"]
    cfg = {k: v["default"] for k, v in schema.items() if "default" in v}
    cfg.update(given)
    if int(cfg.get("n_step", 1)) != 1:
        raise ValueError(f"n_step is {cfg['n_step']}; the bench fill stores 1-step transitions")
    shape = [int(x) for x in cfg.get("obs_shape") or []]
    if shape:
        if "obs_dim" in given:
            raise ValueError("obs_shape and obs_dim are both given (with obs_shape [C, H, W], "
                             "obs_dim is C*H*W)")
        if len(shape) != 3:
            raise ValueError(f"obs_shape {shape}: allowed [C, H, W]")
        cfg["obs_shape"], cfg["obs_dim"] = shape, shape[0] * shape[1] * shape[2]
    if cfg.get("torso") == "nature":
        for k in ("conv", "hidden"):
            if k in given:
                raise ValueError(f"torso \"nature\" defines {k}; give either torso or {k}")
        cfg["conv"], cfg["hidden"] = [dict(c) for c in NATURE], list(NATURE_HIDDEN)
    cfg["conv"] = [dict(c, padding=int(c.get("padding", 0))) for c in cfg.get("conv") or []]
    if cfg["conv"] and not shape:
        raise ValueError("conv needs image observations (obs_shape [C, H, W])")
    u8 = cfg["obs_dtype"] == "uint8"
    if not float(cfg["obs_scale"]):
        cfg["obs_scale"] = 1.0 / 255.0 if u8 else 1.0
    conv_geometry(cfg)  # every layer fits its input
    return cfg


def conv_geometry(cfg):
    """The conv torso of a resolved config as PyTorch's Conv2d computes it: a list of
    (cin, cout, k, stride, pad, hout, wout) per layer, and F, the flattened size of the last
    output (the linear torso's input; obs_dim without convolutions)."""
    if not cfg["conv"]:
        return [], cfg["obs_dim"]
    c, h, w = cfg["obs_shape"]
    out = []
    for i, cv in enumerate(cfg["conv"]):
        o, k, st, p = (int(cv[f]) for f in ("out", "kernel", "stride", "padding"))
        if h + 2 * p < k or w + 2 * p < k:
            raise ValueError(f"conv[{i}]: kernel {k} is larger than its padded input "
                             f"{h + 2 * p}x{w + 2 * p}")
        ho, wo = (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1
        out.append((c, o, k, st, p, ho, wo))
        c, h, w = o, ho, wo
    return out, c * h * w


def load_config(preset):
    """bench/presets/<preset>.json over the manifest's defaults."""
    with open(os.path.join(PRESET_DIR, preset + ".json")) as f:
        return resolve_config(json.load(f))


def load_config_file(path):
    with open(path) as f:
        given = json.load(f)
    if not isinstance(given, dict):
        raise ValueError(f"{path}: not a JSON object")
    return resolve_config(given)


def gemm_flops_per_update(cfg):
    """The formula of host_stub/host_bench_geom.c: each layer as the GEMM it is (conv c per
    image: 2 hout wout cout cin k k, im2col's GEMM; linear: 2 in out); F = B sum_l f_l per
    forward; (2 + double) forwards, backward dW for every layer and dx for all but the first:
    total (4 + double) F - B f_0."""
    B = cfg["batch_size"]
    convs, Fl = conv_geometry(cfg)
    f = [2.0 * ho * wo * o * c * k * k for (c, o, k, _, _, ho, wo) in convs]
    dims = [Fl] + list(cfg["hidden"]) + [sum(cfg["actions"]) + (1 if cfg["dueling"] else 0)]
    f += [2.0 * dims[i] * dims[i + 1] for i in range(len(dims) - 1)]
    return (4.0 + (1 if cfg["double_dqn"] else 0)) * B * sum(f) - B * f[0]


def percentile(v, q):
    v = sorted(v)
    pos = q / 100.0 * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# ---- the learner ----------------------------------------------------------------------------

class Learner:
    """Parameters, target, spectral-norm vectors, optimizer and replay on one device.
    Layers j = 0 .. T: the NC conv layers, the L linear torso layers, then the head (j = T);
    params[2 j], params[2 j + 1] are layer j's W and b (conv W (cout, cin, k, k)).
    channels_last: conv weights and activations in NHWC memory (the same math); bf16: the
    forward's GEMMs and convolutions under autocast (see the header)."""

    def __init__(self, cfg, device, capturable=False, channels_last=False, bf16=False):
        self.cfg, self.dev = cfg, device
        self.bf16 = bool(bf16)
        self.obs_shape = tuple(cfg["obs_shape"]) if cfg.get("obs_shape") else (cfg["obs_dim"],)
        self.u8 = cfg["obs_dtype"] == "uint8"
        self.obs_dtype = torch.uint8 if self.u8 else torch.float32
        self.scale = float(cfg["obs_scale"])  # the network's input is scale * obs
        self.convs, flat = conv_geometry(cfg)  # (cin, cout, k, stride, pad, hout, wout)
        self.NC = len(self.convs)
        self.channels_last = bool(channels_last and self.NC)
        K = [int(k) for k in cfg["actions"]]
        self.D, self.Ks, self.KT = len(K), K, sum(K)
        self.K = max(K)  # the last extent of Q (n, D, K)
        self.uniform = len(set(K)) == 1
        if not self.uniform:
            # pad_idx (D, K): column of the merged head (flat KT) of branch d's action a, or KT
            # (a padding column) where a >= K_d; pad_mask marks those; k_d (D, 1) the sizes
            offs = [sum(K[:d]) for d in range(self.D)]
            pad_idx = torch.tensor([[offs[d] + a if a < K[d] else self.KT
                                     for a in range(self.K)] for d in range(self.D)],
                                   device=device)
            self.pad_mask = pad_idx == self.KT
            self.pad_idx = pad_idx.view(1, -1)  # (1, D K), expanded over the rows by gather
            self.k_d = torch.tensor(K, dtype=torch.float32, device=device).unsqueeze(1)
        self.dueling = bool(cfg["dueling"])
        self.dims = [flat] + list(cfg["hidden"]) + [self.KT + int(self.dueling)]
        self.L = len(cfg["hidden"])
        self.T = self.NC + self.L
        # (out, in) of each layer's W as a matrix: a conv's (cout, cin k k)
        mats = [(o, c * k * k) for (c, o, k, _, _, _, _) in self.convs]
        mats += [(self.dims[i + 1], self.dims[i]) for i in range(self.L + 1)]
        self.sn_layers = {"none": [], "last": [self.T - 1],
                          "all": list(range(self.T))}[cfg["spectral_norm"]]
        g = torch.Generator().manual_seed(int(cfg["seed"]))
        self.params = []
        for j, (out, fan_in) in enumerate(mats):  # nn.Linear's and nn.Conv2d's default init
            bound = 1.0 / math.sqrt(fan_in)
            W = (torch.rand(out, fan_in, generator=g) * 2 - 1) * bound
            b = (torch.rand(out, generator=g) * 2 - 1) * bound
            if j < self.NC:
                c, o, k = self.convs[j][:3]
                W = W.view(o, c, k, k)
                if self.channels_last:
                    W = W.contiguous(memory_format=torch.channels_last)
            self.params += [W.to(device).requires_grad_(), b.to(device).requires_grad_()]
        self.target = [p.detach().clone() for p in self.params]
        self.sn = {}
        for l in self.sn_layers:  # u, v ~ N(0, 1) normalised, then 15 power iterations
            W = self.params[2 * l].detach().reshape(mats[l])
            u = F.normalize(torch.randn(mats[l][0], generator=g).to(device), dim=0)
            v = F.normalize(torch.randn(mats[l][1], generator=g).to(device), dim=0)
            for _ in range(15):
                u = F.normalize(torch.mv(W, v), dim=0, eps=1e-12)
                v = F.normalize(torch.mv(W.t(), u), dim=0, eps=1e-12)
            self.sn[l] = (u, v)
        self.sn_target = {l: (u.clone(), v.clone()) for l, (u, v) in self.sn.items()}
        opt = torch.optim.AdamW if cfg["optimizer"] == "adamw" else torch.optim.Adam
        kw = dict(lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                  eps=cfg["adam_eps"], weight_decay=cfg["weight_decay"])
        if capturable:
            kw["capturable"] = True
        self.opt = opt(self.params, **kw)
        self.updates = 0
        self.step_t = torch.zeros((), device=device)  # update counter on the device (beta)
        self.loss = torch.zeros((), device=device)
        self.per = cfg["replay"] == "prioritized"

    # -- network --
    def weights(self, params, sn, iterate):
        """Effective weights: W, or W / sigma for normalised layers (sigma through W only; a
        conv's W as the matrix (cout, cin k k), as PyTorch's spectral_norm on a Conv2d)."""
        Ws = []
        for l in range(self.T + 1):
            W = params[2 * l]
            if l in sn:
                u, v = sn[l]
                Wm = W.reshape(W.shape[0], -1)
                if iterate:
                    with torch.no_grad():
                        u.copy_(F.normalize(torch.mv(Wm, v), dim=0, eps=1e-12))
                        v.copy_(F.normalize(torch.mv(Wm.t(), u), dim=0, eps=1e-12))
                W = W / torch.dot(u, torch.mv(Wm, v))
            Ws.append(W)
        return Ws

    def forward(self, Ws, params, x):
        """Q (n, D, K), K = max K_d; -inf where a >= K_d. x (n, *obs_shape) as stored (uint8
        or float32), converted here: scale * x in float32."""
        h = x
        if self.u8 or self.scale != 1.0:
            h = h.to(torch.float32) * self.scale
        # bf16: autocast without its weight-cast cache (the cache must not outlive a CUDA graph
        # capture); the head's bf16 output comes back to fp32 for the combination and the loss
        amp = (torch.autocast(torch.device(self.dev).type, dtype=torch.bfloat16,
                              cache_enabled=False) if self.bf16 else contextlib.nullcontext())
        with amp:
            if self.NC:
                if self.channels_last:
                    h = h.contiguous(memory_format=torch.channels_last)
                for c, (_, _, _, st, pad, _, _) in enumerate(self.convs):
                    h = torch.relu(F.conv2d(h, Ws[c], params[2 * c + 1], stride=st, padding=pad))
                h = h.flatten(1)  # (n, C H W), nn.Flatten's order
            for l in range(self.NC, self.T):
                h = torch.relu(F.linear(h, Ws[l], params[2 * l + 1]))
            out = F.linear(h, Ws[self.T], params[2 * self.T + 1])
        out = out.float()
        if self.uniform:
            if not self.dueling:
                return out.view(-1, self.D, self.K)
            A = out[:, 1:].reshape(-1, self.D, self.K)
            return out[:, :1].unsqueeze(-1) + (A - A.mean(-1, keepdim=True))
        if not self.dueling:
            return self.padded(out, float("-inf"))
        A = self.padded(out[:, 1:], 0.0)  # (n, D, K), 0 in the padding
        Q = out[:, :1].unsqueeze(-1) + (A - A.sum(-1, keepdim=True) / self.k_d)
        return Q.masked_fill(self.pad_mask, float("-inf"))

    def padded(self, flat, fill):
        """(n, KT) -> (n, D, K), `fill` where a >= K_d. A gather (its backward a scatter_add),
        not advanced indexing, whose backward (index_put_ with accumulate) breaks CUDA graph
        capture."""
        p = F.pad(flat, (0, 1), value=fill)
        return p.gather(1, self.pad_idx.expand(p.shape[0], -1)).view(-1, self.D, self.K)

    # -- replay --
    def alloc_replay(self, size):
        """Storage for the `size` transitions of the fill (<= capacity; the bench never adds
        more, so the priority cumsum runs over exactly the filled part)."""
        dev, shape, dt = self.dev, self.obs_shape, self.obs_dtype
        self.size = size
        # obs and next_obs of every transition, as given: (size, *obs_shape) uint8 or float32
        self.r_obs = torch.zeros(size, *shape, dtype=dt, device=dev)
        self.r_next = torch.zeros(size, *shape, dtype=dt, device=dev)
        self.r_act = torch.zeros(size, self.D, dtype=torch.long, device=dev)
        self.r_ret = torch.zeros(size, device=dev)
        self.r_disc = torch.zeros(size, device=dev)
        self.prio = torch.zeros(size, device=dev)  # p^alpha
        self.max_p = torch.ones((), device=dev)
        self.pos = 0

    def observe(self, obs, act, rew, nxt, term):
        """Append n transitions (host tensors), as one observe call of n envs."""
        n, p = obs.shape[0], self.pos
        self.r_obs[p:p + n].copy_(obs)
        self.r_next[p:p + n].copy_(nxt)
        self.r_act[p:p + n].copy_(act)
        self.r_ret[p:p + n].copy_(rew)
        self.r_disc[p:p + n].copy_((1.0 - term.float()) * self.cfg["gamma"])
        self.prio[p:p + n] = self.max_p
        self.pos = p + n

    def sample(self):
        c, B = self.cfg, self.cfg["batch_size"]
        if not self.per:
            idx = torch.randint(0, self.size, (B,), device=self.dev)
            return idx, torch.ones(B, device=self.dev)
        cum = torch.cumsum(self.prio, 0)
        total = cum[-1]
        u = (torch.arange(B, device=self.dev) + torch.rand(B, device=self.dev)) * (total / B)
        idx = torch.searchsorted(cum, u, right=True).clamp_(max=self.size - 1)
        p = self.prio[idx]
        frac = torch.clamp(self.step_t / float(c["per_beta_steps"]), max=1.0)
        beta = c["per_beta0"] + (1.0 - c["per_beta0"]) * frac
        w = (self.size * p / total) ** (-beta)
        return idx, w / w.max()

    # -- the update --
    def loss_fn(self):
        """Sample, gather, forwards, loss. Returns (loss, td (B, D), idx)."""
        c = self.cfg
        idx, w = self.sample()
        obs, nxt = self.r_obs[idx], self.r_next[idx]
        act, ret, disc = self.r_act[idx], self.r_ret[idx], self.r_disc[idx]
        Ws = self.weights(self.params, self.sn, True)
        q = self.forward(Ws, self.params, obs)
        qa = q.gather(2, act.unsqueeze(-1)).squeeze(-1)  # (B, D)
        with torch.no_grad():
            Wt = self.weights(self.target, self.sn_target, False)
            qt = self.forward(Wt, self.target, nxt)
            if c["double_dqn"]:
                sel = self.forward([W.detach() for W in Ws], self.params, nxt)
            else:
                sel = qt
            a_star = sel.argmax(-1, keepdim=True)
            y = ret + disc * qt.gather(2, a_star).squeeze(-1).mean(1)
        yb = y.unsqueeze(1).expand_as(qa)
        if c["loss"] == "huber":
            l = F.huber_loss(qa, yb, reduction="none", delta=c["huber_delta"])
        else:
            l = (qa - yb) ** 2
        loss = (w.unsqueeze(1) * l).mean()
        if c["cql_alpha"] > 0:
            loss = loss + c["cql_alpha"] * (torch.logsumexp(q, -1) - qa).mean()
        return loss, (qa - yb).detach(), idx

    def after_backward(self):
        if self.cfg["max_grad_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg["max_grad_norm"])

    def priority_update(self, td, idx):
        if self.per:
            c = self.cfg
            new = (td.abs().mean(1) + c["per_eps"]) ** c["per_alpha"]
            self.prio.index_put_((idx,), new)
            self.max_p.copy_(torch.maximum(self.max_p, new.max()))
        self.step_t += 1

    def step(self):
        """One whole update, eager."""
        loss, td, idx = self.loss_fn()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.after_backward()
        self.opt.step()
        self.priority_update(td, idx)
        self.loss = loss.detach()

    def target_update(self):
        """Host-side schedule: every C updates (after the update that reaches it)."""
        self.updates += 1
        if self.updates % self.cfg["target_update_interval"]:
            return
        tau = self.cfg["tau"]
        with torch.no_grad():
            for t, p in zip(self.target, self.params):
                if tau >= 1.0:
                    t.copy_(p)
                else:
                    t.lerp_(p, tau)
            for l, (u, v) in self.sn.items():
                self.sn_target[l][0].copy_(u)
                self.sn_target[l][1].copy_(v)

    def act(self, obs_host):
        """Greedy actions for host observations, returned to the host."""
        with torch.no_grad():
            x = obs_host.to(self.dev)
            Ws = self.weights(self.params, self.sn, False)
            return self.forward(Ws, self.params, x).argmax(-1).cpu()


# ---- modes: a function that runs n updates --------------------------------------------------

def make_eager(lr):
    def run(n):
        for _ in range(n):
            lr.step()
            lr.target_update()
    return run


def make_graph(lr):
    """The whole update captured once into a CUDA graph and replayed (static buffers)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as the CUDA graphs docs do
        for _ in range(3):
            lr.step()
            lr.target_update()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    lr.opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss, td, idx = lr.loss_fn()
        loss.backward()
        lr.after_backward()
        lr.opt.step()
        lr.priority_update(td, idx)
        lr.loss.copy_(loss.detach())

    def run(n):
        for _ in range(n):
            g.replay()
            lr.target_update()
    return run


def make_compile(lr):
    loss_fn = torch.compile(lr.loss_fn)

    @torch.compile(fullgraph=False)
    def opt_step():
        lr.opt.step()

    def one():
        loss, td, idx = loss_fn()
        lr.opt.zero_grad(set_to_none=True)
        loss.backward()
        lr.after_backward()
        opt_step()
        lr.priority_update(td, idx)
        lr.loss = loss.detach()
        lr.target_update()

    def run(n):
        for _ in range(n):
            one()
    return run


# ---- the benchmark --------------------------------------------------------------------------

def synthetic(cfg, rows, envs, seed):
    """rows + envs + 1 observations (n, *obs_shape), as fhd-host bench makes them: uniform
    bytes for uint8, uniform in [-1, 1) for float32; rewards, 1% terminals, actions."""
    g = torch.Generator().manual_seed(seed)
    n = rows + envs + 1
    shape = tuple(cfg["obs_shape"]) if cfg.get("obs_shape") else (cfg["obs_dim"],)
    if cfg["obs_dtype"] == "uint8":
        obs = torch.randint(0, 256, (n,) + shape, dtype=torch.uint8, generator=g)
    else:
        obs = torch.rand((n,) + shape, generator=g) * 2 - 1
    rew = torch.rand(n, generator=g) * 2 - 1
    term = torch.rand(n, generator=g) < 0.01
    act = torch.stack([torch.randint(0, k, (n,), generator=g) for k in cfg["actions"]], 1)
    return obs, rew, term, act


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_runs(run, dev, n, repeats, cpu=None):
    """Per-run microseconds per update: CUDA events on the GPU, perf_counter on the CPU.
    cpu (a list) receives the process CPU microseconds per update of each run."""
    out = []
    for _ in range(repeats):
        c0 = time.process_time()
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run(n)
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e3 / n)
        else:
            t0 = time.perf_counter()
            run(n)
            out.append((time.perf_counter() - t0) * 1e6 / n)
        if cpu is not None:
            cpu.append((time.process_time() - c0) * 1e6 / n)
    return out


def bench_one(preset, mode, args, dev):
    return bench_config(load_config(preset), preset, mode, args, dev)


def bench_config(cfg, label, mode, args, dev):
    """Time one resolved config in one mode; the result dict (with "error" on failure).
    args: seed, envs, warmup, updates, repeats, act_calls (0: no act timing), peak_tflops,
    tf32, and optionally fill (None: the default), channels_last and bf16 (the attributes of
    this script's command line)."""
    cfg = dict(cfg, seed=args.seed)
    chl = bool(getattr(args, "channels_last", False)) and bool(cfg["conv"])
    res = {"preset": label, "impl": "pytorch", "mode": mode, "backend": "torch-" + mode,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_model(),
           "torch_version": torch.__version__, "threads": torch.get_num_threads(),
           "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
           "batch_size": cfg["batch_size"], "tf32": bool(args.tf32),
           "bf16": bool(getattr(args, "bf16", False)),
           "matmul_precision": cfg.get("matmul_precision", "fp32"),
           "obs_dtype": cfg["obs_dtype"]}
    if cfg["conv"]:
        res.update(memory_format="channels_last" if chl else "nchw",
                   cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
                   cudnn_version=torch.backends.cudnn.version() if dev.type == "cuda" else None,
                   replay_layout="obs and next_obs per transition, (N, C, H, W) "
                                 + cfg["obs_dtype"] + " each, on the device")
    if mode != "eager" and dev.type != "cuda":
        res["error"] = f"mode {mode} needs CUDA"
        return res
    if mode == "compile" and not hasattr(torch, "compile"):
        res["error"] = f"torch {torch.__version__} has no torch.compile"
        return res
    B, envs = cfg["batch_size"], args.envs
    fill = getattr(args, "fill", None) or min(cfg["replay_capacity"], max(16 * B, 65536))
    fill = -(-fill // envs) * envs
    fill = min(fill, cfg["replay_capacity"])
    lr = Learner(cfg, dev, capturable=(mode == "graph"), channels_last=chl,
                 bf16=getattr(args, "bf16", False))
    rows = max(128, min(4096, (16 << 20) // cfg["obs_dim"]))
    obs, rew, term, act = synthetic(cfg, rows, envs, args.seed)
    lr.alloc_replay(fill)
    sync(dev)
    t0 = time.perf_counter()
    done = 0
    for c in range(fill // envs + (fill % envs > 0)):
        n = min(envs, fill - done)
        off = (c * envs) % rows
        lr.observe(obs[off:off + n], act[off:off + n], rew[off:off + n],
                   obs[off + 1:off + 1 + n], term[off:off + n])
        done += n
    sync(dev)
    res.update(fill=fill, replay_size=fill, observe_envs=envs,
               observe_per_second=fill / (time.perf_counter() - t0))
    try:
        make = {"eager": make_eager, "graph": make_graph, "compile": make_compile}[mode]
        t0 = time.perf_counter()
        run = make(lr)
        # warm-up: growing chunks for 0.3 s (or --warmup N); the last chunk estimates t
        warm, est, chunk = 0, None, (100 if dev.type == "cuda" else 5)
        if args.warmup is not None:
            if args.warmup:
                est = time_runs(run, dev, args.warmup, 1)[0]
            warm = args.warmup
        else:
            ts = time.perf_counter()
            while True:
                est = time_runs(run, dev, chunk, 1)[0]
                warm += chunk
                chunk *= 2
                if time.perf_counter() - ts > 0.3 or warm > 100000:
                    break
        res["setup_seconds"] = time.perf_counter() - t0
        if est is None:
            est = time_runs(run, dev, 10, 1)[0]
        run_s = getattr(args, "run_seconds", None) or 0.25
        n = args.updates or int(min(1e6, max(10, math.ceil(run_s * 1e6 / est))))
        if dev.type == "cuda" and not args.updates:
            n = max(n, 1000)
        cpu = []
        runs = time_runs(run, dev, n, args.repeats, cpu)
    except Exception as exc:  # torch.compile / capture failures are results too
        res["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return res
    loss = float(lr.loss)
    if not math.isfinite(loss):
        res["error"] = f"non-finite loss {loss}"
        return res
    med = percentile(runs, 50)
    flops = gemm_flops_per_update(cfg)
    res.update(warmup=warm, updates=n, repeats=args.repeats,
               timing="CUDA events around N updates" if dev.type == "cuda"
               else "perf_counter around N updates",
               us_per_update_min=min(runs), us_per_update_p10=percentile(runs, 10),
               us_per_update_median=med, us_per_update_p90=percentile(runs, 90),
               us_per_update_max=max(runs), us_per_update_runs=sorted(runs),
               cpu_us_per_update_median=percentile(cpu, 50),
               updates_per_second=1e6 / med, samples_per_second=1e6 / med * B,
               gemm_flops_per_update=flops, tflops=flops * 1e6 / med / 1e12,
               peak_tflops=args.peak_tflops,
               peak_fraction=(flops * 1e6 / med / 1e12 / args.peak_tflops
                              if args.peak_tflops else None),
               loss_last=loss)
    for m in ((1, 64) if args.act_calls > 0 else ()):  # greedy act latency, host in, host out
        lat = []
        for i in range(args.act_calls + 20):
            x = obs[(i * m) % (rows - m):][:m]
            t0 = time.perf_counter()
            lr.act(x)
            if i >= 20:
                lat.append((time.perf_counter() - t0) * 1e6)
        res[f"act_us_{m}"] = percentile(lat, 50)
        res[f"act_us_{m}_p90"] = percentile(lat, 90)
    res["act_calls"] = args.act_calls
    return res


def release(dev):
    """Give the caching allocator's memory back between configs (graphs hold pools)."""
    import gc
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def sgemm_rate(dev, n=4096, reps=5):
    a = torch.rand(n, n, device=dev)
    b = torch.rand(n, n, device=dev)
    for _ in range(2):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return {"preset": "sgemm", "impl": "pytorch", "sgemm_n": n,
            "sgemm_gflops": 2.0 * n ** 3 / best / 1e9, "device": str(dev),
            "threads": torch.get_num_threads(), "torch_version": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--preset", default=None, help="one or more of %s, comma-separated "
                    "(default C0 when no --config is given)" % ",".join(PRESETS))
    ap.add_argument("--config", action="append", default=[], metavar="FILE",
                    help="a learner config JSON (repeatable)")
    ap.add_argument("--mode", default="eager", choices=["eager", "graph", "compile", "all"])
    ap.add_argument("--updates", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--run-seconds", type=float, default=0.25,
                    help="target length of a timed run when --updates is not given")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--fill", type=int, default=None,
                    help="replay fill (default min(capacity, max(16 B, 65536)), as fhd-host's)")
    ap.add_argument("--channels-last", action="store_true",
                    help="conv configs: weights and activations in NHWC memory")
    ap.add_argument("--act-calls", type=int, default=2000, help="0: no act timing")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on CUDA")
    ap.add_argument("--bf16", action="store_true",
                    help="matmuls and convolutions in bfloat16 under torch.autocast, fp32 "
                         "accumulation, weights and optimiser (the learner's matmul_precision "
                         "\"bf16\")")
    ap.add_argument("--sgemm", action="store_true", help="print the large-matmul rate and exit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.fill is not None and args.fill < 1:
        print(f"error: --fill is {args.fill}; allowed: an integer >= 1", file=sys.stderr)
        return 2
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("error: CUDA is not available to torch", file=sys.stderr)
            return 1
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = True  # conv algorithms timed by cuDNN per shape
    if args.sgemm:
        print(json.dumps(sgemm_rate(dev)))
        return 0
    if args.preset is None and not args.config:
        args.preset = "C0"
    presets = [p for p in (args.preset or "").split(",") if p]
    jobs = []  # (label, cfg)
    try:
        for p in presets:
            if p not in PRESETS:
                print(f"error: unknown preset {p}; known: {' '.join(PRESETS)}", file=sys.stderr)
                return 2
            jobs.append((p, load_config(p)))
        for path in args.config:
            jobs.append((os.path.splitext(os.path.basename(path))[0], load_config_file(path)))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    modes = ["eager", "graph", "compile"] if args.mode == "all" else [args.mode]
    if dev.type == "cpu" and args.mode == "all":
        modes = ["eager"]
    failed = 0
    for p, cfg in jobs:
        for m in modes:
            r = bench_config(cfg, p, m, args, dev)
            release(dev)
            failed += "error" in r and m == "eager"
            if args.json:
                print(json.dumps(r), flush=True)
            elif "error" in r:
                print(f"{p:6s} torch {m:8s} error: {r['error']}", flush=True)
            else:
                print(f"{p:6s} torch {m:8s} {r['us_per_update_median']:10.2f} us/update "
                      f"(p10 {r['us_per_update_p10']:.2f}, p90 {r['us_per_update_p90']:.2f}; "
                      f"{r['updates']} x {r['repeats']}), {r['updates_per_second']:.1f} "
                      f"updates/s, {r['tflops']:.4f} TFLOP/s, act "
                      + (f"{r['act_us_1']:.1f} / {r['act_us_64']:.1f} us"
                         if "act_us_1" in r else "not timed")
                      + f", observe {r['observe_per_second']:.3g}/s, {r['threads']} threads",
                      flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
