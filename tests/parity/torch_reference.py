#!/usr/bin/python3
"""torch_reference.py - PyTorch parity test of the foxhunt-dqn learner update (docs/design.md section 4).

Runs with the Debian system python (/usr/bin/python3) and its packages python3-torch (1.13,
CPU) and python3-numpy. Exits 77 (CTest: skipped) when torch cannot be imported.

For each config (a learner config JSON in configs/) it runs parity_driver, which drives the
plugin through the public ABI on K deterministic batches and records the initial state, every
batch, and after each update the loss, TD errors, targets and every named tensor (see the
header of parity_driver.c for the file format). Then it replays the same updates here, in
float32, with PyTorch building blocks:

  network   nn.Linear per torso layer with ReLU; dueling head = value nn.Linear(H, 1) and
            advantage nn.Linear(H, KT) (the plugin merges them into one (1 + KT, H) matrix,
            exposed as online.head.value.* and online.head.advantage.*); plain head nn.Linear
            (H, KT) (online.head.q.*). Q_d = V + A_d - mean(A_d) per branch.
  spectral  explicit, with the semantics of torch.nn.utils.parametrizations.spectral_norm
  norm      (checked against that module at start-up, see check_sn_semantics): persistent u, v;
            one power iteration per update on the online net before the forwards, under
            no_grad; sigma = dot(u, W v) with u, v held constant (gradient flows through
            sigma); W_sn = W / sigma. The target net uses its stored u, v without iterating.
  target    y = R + disc * (1 - terminated) * (1/D) sum_d Q'_d(s', a*_d), a* = argmax of the
            online net (double DQN) or of the target net.
  loss      (1/B) sum_i w_i (1/D) sum_d huber_delta | mse (Q_d(s_i, a_id) - y_i)
            + cql_alpha (1/B) sum_i (1/D) sum_d [logsumexp_a Q_d(s_i, a) - Q_d(s_i, a_id)]
            - diversity_coef (1/B) sum_i (1/D) sum_d H(softmax(Q_d(s_i, .) / T)); its mean
            entropy is compared with the plugin's metric diversity_entropy
  update    torch.nn.utils.clip_grad_norm_ (when max_grad_norm > 0), torch.optim.Adam / AdamW,
            updates += 1, every target_update_interval updates
            target <- tau * online + (1 - tau) * target and target u, v <- online u, v.
  pruning   (prune_sparsity > 0) torch.nn.utils.prune's reparametrisation W = W_orig * mask,
            kept as the product: the gradient is masked before clipping, the weights after
            the optimiser step; after the target update, at a pruning update t (start,
            start + frequency, ..., end) the masks come from prune.l1_unstructured (per tensor) or
            prune.global_unstructured (prune_global) with amount
            s_t = s_f (1 - (1 - (t - start) / (end - start))^3), on the current weights;
            the pruned weights' Adam moments are reset to 0 (PyTorch's W_orig keeps its
            moments, which change nothing of W; reset, a pruned weight stays exactly 0
            through Adam without masking the optimiser's output).
            Masks (online.<weight>_mask) must match exactly; a mask decided differently in
            the free replay is a branch point like a ReLU (see check_dump).

  metrics   with detailed_metrics, per update (before clipping and the step): the gradient
            norm of each conv, torso and head layer (W and b together), per branch the norm
            of its action rows of the head's weight (advantage or q) and of their gradient,
            and (double DQN) q_delta = mean over batch and branches of
            |Q_online(s', a*) - Q_target(s', a*)|; compared with the plugin's metrics JSON.

Two replays are compared against the plugin, tensor by tensor, after every update:
  free    the reference runs its own trajectory from the plugin's initial state (errors
          accumulate over the K updates; at a rounding-induced branch point, a ReLU or a
          greedy action decided differently, it re-bases on the plugin's state, see
          check_dump);
  forced  each update starts from the plugin's state after the previous one (parameters,
          Adam moments, u, v), which isolates the error of a single update.
And at update 1 a finite-difference check in float64 of the plugin's analytic gradient of
every parameter tensor (see fd_check).

Metric: relative error ||a - b|| / max(||b||, tiny) per tensor, a = plugin, b = reference;
for state tensors tiny is a tenth of the norm of the tensor's group (see GROUP_FLOOR).
Prints one line per config and a final "N passed, N failed"; exits 1 on any failure.

Usage:
  torch_reference.py --driver parity_driver --plugin libfoxhunt_dqn.so --workdir DIR CONFIG...
  torch_reference.py --dump FILE...      (compare files written earlier by parity_driver)
"""
import argparse
import json
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as exc:  # CI installs python3-torch; elsewhere the test is skipped
    print(f"SKIP: cannot import torch/numpy with {sys.executable}: {exc}")
    sys.exit(77)

# Tolerances (relative error per tensor, see rel_err). The plugin computes in fp32 with
# OpenBLAS GEMMs; PyTorch computes in fp32 with its own kernels, so the two differ by the
# rounding of different summation orders: about 1e-7 relative per operation.
TOL = {
    # Loss, TD errors, targets and the batch statistics come straight out of one forward
    # pass: a few roundings of ~6e-8 each, so 1e-5 leaves two orders of margin.
    "loss": 1e-5,
    "td": 1e-5,
    "y": 1e-5,
    "stats": 1e-5,
    # Gradients go through the backward GEMMs (sums over the batch with cancellation) and,
    # with spectral norm, the sigma correction term; 1e-4 allows for that cancellation.
    "grad": 1e-4,
    # Parameters, target parameters, u/v and Adam moments after K = 20 updates: every update
    # adds its own rounding and later updates act on slightly different weights (Adam
    # normalises the step, so a relative error in the gradient becomes a relative error in
    # the step of lr size). The errors grow roughly linearly with K; 1e-4 holds for K = 20.
    # Adam also amplifies the gradient of a unit whose ReLU is barely active (pre-activation
    # ~1e-7, relative rounding O(1)) when its second moment is still ~0: over 60 batch seeds
    # x 14 configs the largest error after 20 updates was 6.4e-5 (once), typically 1e-6.
    # adam.v carries a constant 1.3e-5: (1 - beta2) is formed from beta2 rounded to fp32
    # (1 - 0.99900001f) where PyTorch forms it in double (0.001); the bias correction divides
    # the same factor out again, so the parameters do not see it.
    "param": 1e-4,
    "target": 1e-4,
    "sn": 1e-4,
    "adam": 1e-4,
    # fp32 analytic gradient of the plugin against a float64 central difference: the
    # difference quotient is exact to ~1e-9 (h = 1e-6, float64 loss; entries whose step
    # crosses a ReLU kink are replaced), the plugin's gradient carries fp32 rounding (~1e-6
    # relative, more where the batch sum cancels); 1e-3 still catches every real error (a
    # wrong or missing term is O(1) relative).
    "fd": 1e-3,
    # The reference's own float64 autograd gradient against the same difference quotient:
    # only the difference quotient's error remains.
    "fd_ref": 1e-6,
}
TINY = 1e-12  # floor of the denominator: an all-zero reference tensor needs an exact match
FD_H = 1e-6
FD_MIN_ENTRIES = 24
FD_FLOOR = 1e-6  # an FD subset whose gradient is ~0 (dead ReLU units) is compared absolutely

MAX_REBASES = 2  # see check_dump

CATEGORY_ORDER = ["loss", "td", "y", "stats", "grad", "param", "target", "sn", "adam"]


def rel_err(a, b, tiny=TINY):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), tiny))


# ---- driver output -------------------------------------------------------------------------

DTYPES = [np.float32, np.int32, np.uint8]


def read_dump(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"FHDPAR01":
        raise ValueError(f"{path}: not a parity_driver file")
    pos, rec = 8, {}
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + n].decode()
        pos += n
        dtype, ndim = struct.unpack_from("<II", data, pos)
        pos += 8
        dims = struct.unpack_from(f"<{ndim}Q", data, pos)
        pos += 8 * ndim
        dt = np.dtype(DTYPES[dtype])
        count = int(np.prod(dims)) if ndim else 1
        rec[name] = np.frombuffer(data, dtype=dt, count=count, offset=pos).reshape(dims).copy()
        pos += count * dt.itemsize
    if "meta.end" not in rec:
        raise ValueError(f"{path}: truncated (no meta.end record)")
    return rec


def resolve_config(cfg_text, manifest_text):
    """The learner's config: manifest defaults, then the given keys."""
    schema = json.loads(manifest_text)["config_schema"]
    cfg = {k: v["default"] for k, v in schema.items() if "default" in v}
    cfg.update(json.loads(cfg_text))
    return cfg


# ---- the network ---------------------------------------------------------------------------

NATURE = [{"out": 32, "kernel": 8, "stride": 4}, {"out": 64, "kernel": 4, "stride": 2},
          {"out": 64, "kernel": 3, "stride": 1}]


class Spec:
    def __init__(self, cfg):
        shape = [int(x) for x in cfg.get("obs_shape", [])]
        self.shape = shape
        self.S = int(np.prod(shape)) if shape else int(cfg["obs_dim"])
        self.u8 = cfg.get("obs_dtype", "float32") == "uint8"
        scale = float(cfg.get("obs_scale", 0.0))
        self.scale = np.float32(scale if scale != 0.0 else (1.0 / 255.0 if self.u8 else 1.0))
        conv = NATURE if cfg.get("torso") == "nature" else cfg.get("conv", [])
        if cfg.get("torso") == "nature":
            cfg["hidden"] = [512]
        self.conv = [(int(c["out"]), int(c["kernel"]), int(c["stride"]), int(c.get("padding", 0)))
                     for c in conv]
        self.NC = len(self.conv)
        self.conv_in = []  # (cin, h, w) of each conv layer, then the flattened size F
        if self.NC:
            c, h, w = shape
            for (o, k, st, p) in self.conv:
                self.conv_in.append((c, h, w))
                c, h, w = o, (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1
            self.F = c * h * w
        else:
            self.F = self.S
        self.conv_sn = cfg["spectral_norm"] == "all"
        self.K = [int(k) for k in cfg["actions"]]
        self.D = len(self.K)
        self.KT = sum(self.K)
        self.offs = [sum(self.K[:d]) for d in range(self.D)]
        self.hidden = [int(h) for h in cfg["hidden"]]
        self.L = len(self.hidden)
        self.dueling = bool(cfg["dueling"])
        mode = cfg["spectral_norm"]
        self.sn_layers = {"none": [], "last": [self.L - 1], "all": list(range(self.L))}[mode]


def power_iteration(W, u, v, order):
    """One power iteration, in place on u and v (no_grad). F.normalize uses eps 1e-12."""
    with torch.no_grad():
        if order == "parametrizations":
            # torch.nn.utils.parametrizations.spectral_norm (_SpectralNorm._power_method):
            #   u = normalize(W v), then v = normalize(W^T u)
            u.copy_(F.normalize(torch.mv(W, v), dim=0, eps=1e-12))
            v.copy_(F.normalize(torch.mv(W.t(), u), dim=0, eps=1e-12))
        else:
            # legacy torch.nn.utils.spectral_norm (forward pre-hook):
            #   v = normalize(W^T u), then u = normalize(W v)
            v.copy_(F.normalize(torch.mv(W.t(), u), dim=0, eps=1e-12))
            u.copy_(F.normalize(torch.mv(W, v), dim=0, eps=1e-12))


def sn_weight(W, u, v):
    """W / sigma with sigma = dot(u, W v); u, v are cloned constants, as PyTorch does, so the
    gradient reaches W directly and through sigma: dW = G / sigma - (sum(G * W) / sigma^2) u v^T."""
    sigma = torch.dot(u.clone(), torch.mv(W, v.clone()))
    return W / sigma


class QNet(nn.Module):
    def __init__(self, spec, dtype, sn_order):
        super().__init__()
        self.spec, self.sn_order = spec, sn_order
        self.convs = nn.ModuleList(nn.Conv2d(spec.conv_in[i][0], o, k, stride=st, padding=p)
                                   for i, (o, k, st, p) in enumerate(spec.conv))
        if spec.conv_sn:
            for i, (o, k, st, p) in enumerate(spec.conv):
                self.register_buffer(f"cu{i}", torch.zeros(o))
                self.register_buffer(f"cv{i}", torch.zeros(spec.conv_in[i][0] * k * k))
        dims = [spec.F] + spec.hidden
        self.torso = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(spec.L))
        H = dims[-1]
        if spec.dueling:
            self.value = nn.Linear(H, 1)
            self.advantage = nn.Linear(H, spec.KT)
        else:
            self.q = nn.Linear(H, spec.KT)
        for l in spec.sn_layers:
            self.register_buffer(f"u{l}", torch.zeros(dims[l + 1]))
            self.register_buffer(f"v{l}", torch.zeros(dims[l]))
        self.to(dtype)

    def params(self):
        """Parameters by the plugin's tensor names (without the "online."/"target." prefix)."""
        out = {}
        for i, cv in enumerate(self.convs):
            out[f"torso.conv{i}.weight"] = cv.weight  # (out, in, kh, kw)
            out[f"torso.conv{i}.bias"] = cv.bias
        for l, lin in enumerate(self.torso):
            out[f"torso.{l}.weight"] = lin.weight
            out[f"torso.{l}.bias"] = lin.bias
        heads = [("value", self.value), ("advantage", self.advantage)] if self.spec.dueling \
            else [("q", self.q)]
        for name, lin in heads:
            out[f"head.{name}.weight"] = lin.weight
            out[f"head.{name}.bias"] = lin.bias
        return out

    def sn_vectors(self):
        out = {}
        if self.spec.conv_sn:
            for i in range(self.spec.NC):
                out[f"torso.conv{i}.u"] = getattr(self, f"cu{i}")
                out[f"torso.conv{i}.v"] = getattr(self, f"cv{i}")
        for l in self.spec.sn_layers:
            out[f"torso.{l}.u"] = getattr(self, f"u{l}")
            out[f"torso.{l}.v"] = getattr(self, f"v{l}")
        return out

    def load(self, rec, prefix, sn_prefix):
        with torch.no_grad():
            for name, p in self.params().items():
                p.copy_(torch.from_numpy(rec[f"{prefix}.{name}"]))
            for name, b in self.sn_vectors().items():
                b.copy_(torch.from_numpy(rec[f"{sn_prefix}.{name}"]))

    def weights(self, iterate):
        """Effective torso weights of this update: W_sn for normalised layers (after one power
        iteration when iterate), W otherwise."""
        ws = []
        for i, cv in enumerate(self.convs):  # PyTorch's spectral_norm on Conv2d: W as (out, -1)
            if self.spec.conv_sn:
                u, v = getattr(self, f"cu{i}"), getattr(self, f"cv{i}")
                Wm = cv.weight.reshape(cv.weight.shape[0], -1)
                if iterate:
                    power_iteration(Wm, u, v, self.sn_order)
                ws.append(sn_weight(Wm, u, v).reshape(cv.weight.shape))
            else:
                ws.append(cv.weight)
        for l, lin in enumerate(self.torso):
            if l in self.spec.sn_layers:
                u, v = getattr(self, f"u{l}"), getattr(self, f"v{l}")
                if iterate:
                    power_iteration(lin.weight, u, v, self.sn_order)
                ws.append(sn_weight(lin.weight, u, v))
            else:
                ws.append(lin.weight)
        return ws

    def forward(self, x, ws, relu_masks=None):
        sp = self.spec
        h = x * sp.scale if (sp.u8 or sp.scale != 1.0) else x  # the network's input
        if sp.NC:
            h = h.reshape(x.shape[0], *sp.shape)
            for i, cv in enumerate(self.convs):
                z = F.conv2d(h, ws[i], cv.bias, stride=cv.stride, padding=cv.padding)
                if relu_masks is not None:
                    relu_masks.append(z > 0)
                h = F.relu(z)
            h = h.flatten(1)  # (B, C H W), nn.Flatten's order
        for lin, W in zip(self.torso, ws[sp.NC:]):
            z = F.linear(h, W, lin.bias)
            if relu_masks is not None:
                relu_masks.append(z > 0)
            h = F.relu(z)
        if not sp.dueling:
            return self.q(h)
        V = self.value(h)      # (B, 1)
        A = self.advantage(h)  # (B, KT)
        return torch.cat([V + A[:, o:o + k] - A[:, o:o + k].mean(dim=1, keepdim=True)
                          for o, k in zip(sp.offs, sp.K)], dim=1)  # (B, KT)


def td_target(spec, qt, sel, rewards, disc):
    """y (B) = R + disc * (1/D) sum_d qt_d(a*_d), a*_d = first argmax of sel_d.
    Returns (y, a* (B, D))."""
    picks, stars = [], []
    for o, k in zip(spec.offs, spec.K):
        a_star = torch.argmax(sel[:, o:o + k], dim=1, keepdim=True)  # first maximum
        picks.append(qt[:, o:o + k].gather(1, a_star))
        stars.append(a_star)
    return rewards + disc * torch.cat(picks, dim=1).mean(dim=1), torch.cat(stars, dim=1)


def td_loss(spec, cfg, q, actions, y, w):
    """Returns (loss, qa (B, D)). actions (B, D) int64."""
    qa = torch.cat([q[:, o:o + k].gather(1, actions[:, d:d + 1])
                    for d, (o, k) in enumerate(zip(spec.offs, spec.K))], dim=1)  # (B, D)
    yy = y[:, None].expand_as(qa)
    if cfg["loss"] == "huber":
        el = F.huber_loss(qa, yy, reduction="none", delta=float(cfg["huber_delta"]))
    else:
        el = F.mse_loss(qa, yy, reduction="none")
    loss = (w[:, None] * el).mean()  # (1/B) sum_i w_i (1/D) sum_d
    alpha = float(cfg["cql_alpha"])
    if alpha > 0.0:
        lse = torch.stack([torch.logsumexp(q[:, o:o + k], dim=1)
                           for o, k in zip(spec.offs, spec.K)], dim=1)  # (B, D)
        loss = loss + alpha * (lse - qa).mean()
    coef = float(cfg.get("diversity_coef", 0.0))
    if coef > 0.0:  # - coef * mean_{i,d} H(softmax(Q_d(s_i, .) / T))
        temp = float(cfg.get("diversity_temperature", 1.0))
        ent = torch.stack([-(F.softmax(q[:, o:o + k] / temp, dim=1) *
                             F.log_softmax(q[:, o:o + k] / temp, dim=1)).sum(dim=1)
                           for o, k in zip(spec.offs, spec.K)], dim=1)  # (B, D)
        loss = loss - coef * ent.mean()
        td_loss.entropy = float(ent.detach().double().mean())
    return loss, qa


def batch_tensors(rec, k, cfg, dtype):
    """Batch of update k with every default resolved: disc = gamma^m (or gamma) * (1 - term)."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dtype)
    b = f"b{k}."
    B = rec[b + "rewards"].shape[0]
    term = rec[b + "terminated"].astype(bool)
    disc = rec.get(b + "discounts", np.full(B, np.float32(cfg["gamma"]), dtype=np.float32))
    disc = np.where(term, np.float32(0.0), disc).astype(np.float32)
    w = rec.get(b + "weights", np.ones(B, dtype=np.float32))
    # uint8 observations arrive as their byte values; QNet.forward applies the scale
    return {
        "obs": t(rec[b + "obs"].astype(np.float32)),
        "next_obs": t(rec[b + "next_obs"].astype(np.float32)),
        "actions": torch.from_numpy(rec[b + "actions"].astype(np.int64)),
        "rewards": t(rec[b + "rewards"]), "disc": t(disc), "weights": t(w),
    }


# ---- pruning --------------------------------------------------------------------------------

def prune_names(cfg, net):
    """Weight names (the plugin's, without "online.") in the prune scope, in layout order."""
    if not float(cfg.get("prune_sparsity", 0.0)) > 0.0:
        return []
    names = [n for n in net.params() if n.endswith(".weight")]
    return [n for n in names if cfg["prune_scope"] == "all" or not n.startswith("head.")]


def prune_sparsity_at(cfg, t):
    """The sparsity of pruning update t, or None when t is not one (the Zhu & Gupta schedule)."""
    start, end, freq = int(cfg["prune_start"]), int(cfg["prune_end"]), int(cfg["prune_frequency"])
    if not (start <= t <= end and (t - start) % freq == 0):
        return None
    r = 1.0 - (t - start) / (end - start) if end > start else 0.0
    return float(cfg["prune_sparsity"]) * (1.0 - r * r * r)


def torch_masks(cfg, weights, sparsity):
    """New masks from PyTorch's own pruning functions on copies of the weights."""
    import torch.nn.utils.prune as prune
    holders = {}
    for n, w in weights.items():
        h = nn.Module()
        h.weight = nn.Parameter(w.detach().clone())
        holders[n] = h
    if cfg["prune_global"]:
        prune.global_unstructured([(h, "weight") for h in holders.values()],
                                  pruning_method=prune.L1Unstructured, amount=sparsity)
    else:
        for h in holders.values():
            prune.l1_unstructured(h, "weight", amount=sparsity)
    return {n: h.weight_mask.detach().clone() for n, h in holders.items()}


# ---- the float32 reference update ----------------------------------------------------------

class Reference:
    """Learner state (online, target, u/v, Adam) and the update, from a recorded state."""

    def __init__(self, cfg, spec, rec, state, step, sn_order):
        self.cfg, self.spec, self.step = cfg, spec, step
        self.online = QNet(spec, torch.float32, sn_order)
        self.target = QNet(spec, torch.float32, sn_order)
        self.online.load(rec, f"{state}.online", f"{state}.sn.online")
        self.target.load(rec, f"{state}.target", f"{state}.sn.target")
        for p in self.target.parameters():
            p.requires_grad_(False)
        params = list(self.online.params().values())
        kw = dict(lr=float(cfg["lr"]), betas=(float(cfg["adam_beta1"]), float(cfg["adam_beta2"])),
                  eps=float(cfg["adam_eps"]), weight_decay=float(cfg["weight_decay"]))
        self.opt = torch.optim.AdamW(params, **kw) if cfg["optimizer"] == "adamw" \
            else torch.optim.Adam(params, **kw)
        self.prune = prune_names(cfg, self.online)
        self.masks = {n: torch.from_numpy(rec[f"{state}.online.{n}_mask"].copy())
                      for n in self.prune}
        if step > 0:  # resume the plugin's Adam moments
            for name, p in self.online.params().items():
                self.opt.state[p] = {
                    "step": torch.tensor(float(step)),
                    "exp_avg": torch.from_numpy(rec[f"{state}.adam.m.{name}"].copy()),
                    "exp_avg_sq": torch.from_numpy(rec[f"{state}.adam.v.{name}"].copy()),
                }

    def update(self, b):
        cfg, spec = self.cfg, self.spec
        self.opt.zero_grad(set_to_none=False)
        ws = self.online.weights(iterate=True)  # the one power iteration of this update
        masks = []
        q = self.online(b["obs"], ws, masks)
        with torch.no_grad():
            qt = self.target(b["next_obs"], self.target.weights(iterate=False))
            sel = self.online(b["next_obs"], [w.detach() for w in ws]) if cfg["double_dqn"] \
                else qt
            y, a_star = td_target(spec, qt, sel, b["rewards"], b["disc"])
        loss, qa = td_loss(spec, cfg, q, b["actions"], y, b["weights"])
        loss.backward()
        named = self.online.params()
        for n, m in self.masks.items():  # the gradient reaching W_orig of W_orig * mask
            named[n].grad.mul_(m)
        detail = self.detailed(qt, sel, a_star) if cfg.get("detailed_metrics") else None
        entropy = td_loss.entropy if float(cfg.get("diversity_coef", 0.0)) > 0.0 else None
        params = list(self.online.params().values())
        # The norm the statistic is compared with: in float64. PyTorch's fp32 norm of a
        # million-entry gradient (the Nature CNN's) is off by ~2e-5 relative, the plugin's
        # double sum by ~1e-7 (both measured against this one); clipping still uses
        # clip_grad_norm_'s own value.
        gnorm64 = float(torch.sqrt(sum(p.grad.detach().double().square().sum() for p in params)))
        max_norm = float(cfg["max_grad_norm"])
        if max_norm > 0.0:
            gnorm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:  # the same norm clip_grad_norm_ computes, without clipping
            gnorm = torch.norm(torch.stack([torch.norm(p.grad.detach(), 2) for p in params]), 2)
        grads = {n: p.grad.detach().numpy().copy() for n, p in self.online.params().items()}
        self.opt.step()
        self.step += 1
        with torch.no_grad():
            for n, m in self.masks.items():
                named[n].mul_(m)
        if self.step % int(cfg["target_update_interval"]) == 0:
            tau = float(cfg["tau"])
            with torch.no_grad():
                tp = self.target.params()
                for n, p in self.online.params().items():
                    if tau >= 1.0:
                        tp[n].copy_(p)
                    else:
                        tp[n].mul_(1.0 - tau).add_(p, alpha=tau)
                ts = self.target.sn_vectors()
                for n, u in self.online.sn_vectors().items():
                    ts[n].copy_(u)
        sp = prune_sparsity_at(cfg, self.step) if self.masks else None
        if sp is not None:  # after the target update: the target catches up at its next one
            with torch.no_grad():
                self.masks = torch_masks(cfg, {n: named[n] for n in self.prune}, sp)
                for n, m in self.masks.items():
                    named[n].mul_(m)
                    st = self.opt.state[named[n]]  # a pruned weight's moments are reset
                    st["exp_avg"].mul_(m)
                    st["exp_avg_sq"].mul_(m)
        qa_d = qa.detach()
        td = (qa_d - y[:, None]).numpy()
        return {
            "loss": float(loss.item()), "td": td, "y": y.numpy().copy(), "grads": grads,
            # the discrete choices of the update: ReLU patterns of online(s) and a*
            "branches": masks + [a_star] + [m.clone() for m in self.masks.values()],
            "stats": {"td_abs_mean": float(np.abs(td).mean()), "q_mean": float(qa_d.mean()),
                      "grad_norm": gnorm64, "q_abs_mean": float(qa_d.abs().mean())},
            "detail": detail, "entropy": entropy,
        }

    def detailed(self, qt, sel, a_star):
        """detailed_metrics of this update (gradients before clipping, weights before the
        step), in float64 sums."""
        spec, P = self.spec, self.online.params()
        norm = lambda ts: float(torch.sqrt(sum(t.detach().double().square().sum() for t in ts)))
        layers = [[f"torso.conv{i}.{w}" for w in ("weight", "bias")] for i in range(spec.NC)]
        layers += [[f"torso.{l}.{w}" for w in ("weight", "bias")] for l in range(spec.L)]
        layers += [[n for n in P if n.startswith("head.")]]
        hw = P["head.advantage.weight"] if spec.dueling else P["head.q.weight"]
        rows = lambda t, d: t[spec.offs[d]:spec.offs[d] + spec.K[d]]
        out = {"grad_norm_layers": [norm([P[n].grad for n in ns]) for ns in layers],
               "head_weight_norms": [norm([rows(hw, d)]) for d in range(spec.D)],
               "head_grad_norms": [norm([rows(hw.grad, d)]) for d in range(spec.D)],
               "q_delta": None}
        if self.cfg["double_dqn"]:
            idx = a_star + torch.tensor(spec.offs)[None, :]
            out["q_delta"] = float((sel.gather(1, idx) - qt.gather(1, idx)).abs().double().mean())
        return out

    def tensors(self):
        """Every stateful tensor by the plugin's names."""
        out = {}
        for net, m in (("online", self.online), ("target", self.target)):
            for n, p in m.params().items():
                out[f"{net}.{n}"] = p.detach().numpy().copy()
            for n, u in m.sn_vectors().items():
                out[f"sn.{net}.{n}"] = u.numpy().copy()
        for n, m in self.masks.items():
            out[f"online.{n}_mask"] = m.numpy().copy()
        for n, p in self.online.params().items():
            st = self.opt.state.get(p, {})
            if "exp_avg" in st:
                out[f"adam.m.{n}"] = st["exp_avg"].numpy().copy()
                out[f"adam.v.{n}"] = st["exp_avg_sq"].numpy().copy()
        return out


def tensor_group(name):
    """Tensors of one kind (grad, online, target, adam.m, adam.v, sn.online, sn.target)."""
    for g in ("grad", "online", "target", "adam.m", "adam.v", "sn.online", "sn.target"):
        if name.startswith(g + "."):
            return g
    raise ValueError(name)


GROUP_CATEGORY = {"grad": "grad", "online": "param", "target": "target", "adam.m": "adam",
                  "adam.v": "adam", "sn.online": "sn", "sn.target": "sn"}
# Floor of the denominator of a tensor's relative error, as a fraction of the norm of all the
# tensors of its group. Some tensors are small next to the rest of their group: the value-head
# bias is one scalar whose gradient is a cancelling sum over the whole batch (seen at 1e-3 of
# the gradient's norm), and a bias can pass through 0 during training. Their absolute rounding
# noise is that of the group (~1e-7 of its norm), so their error is measured against at least
# a tenth of the group's norm; an error in the math moves any tensor by far more than that.
GROUP_FLOOR = 0.1


class Errors:
    """Max relative error per category, and every comparison over its tolerance."""

    def __init__(self):
        self.max = {c: 0.0 for c in CATEGORY_ORDER}
        self.fails = []

    def add(self, cat, err, where):
        if not np.isfinite(err):
            err = float("inf")
        self.max[cat] = max(self.max[cat], err)
        if err > TOL[cat]:
            self.fails.append((cat, err, where))


def compare_update(errs, rec, k, out, ref_tensors, mode):
    st = rec[f"u{k}.stats"]  # loss, td_abs_mean, q_mean, grad_norm, update_index
    where = lambda what: f"{mode} update {k} {what}"
    errs.add("loss", abs(st[0] - out["loss"]) / max(abs(out["loss"]), TINY), where("loss"))
    errs.add("td", rel_err(rec[f"u{k}.td"], out["td"]), where("td_errors"))
    errs.add("y", rel_err(rec[f"u{k}.targets"], out["y"]), where("targets"))
    s = out["stats"]
    errs.add("stats", abs(st[1] - s["td_abs_mean"]) / max(s["td_abs_mean"], TINY),
             where("td_abs_mean"))
    # q_mean may be near 0: relative to the mean |Q(s, a)|
    errs.add("stats", abs(st[2] - s["q_mean"]) / max(s["q_abs_mean"], TINY), where("q_mean"))
    errs.add("stats", abs(st[3] - s["grad_norm"]) / max(s["grad_norm"], TINY),
             where("grad_norm"))
    if out.get("entropy") is not None:  # the diversity term's mean entropy
        m = json.loads(bytes(rec[f"u{k}.metrics"]).decode())
        e = m.get("diversity_entropy")
        errs.add("stats", abs(e - out["entropy"]) / max(abs(out["entropy"]), TINY)
                 if isinstance(e, float) else float("inf"), where("diversity_entropy"))
    if out.get("detail") is not None:  # detailed_metrics against the plugin's metrics JSON
        m = json.loads(bytes(rec[f"u{k}.metrics"]).decode())
        d = out["detail"]
        for key in ("grad_norm_layers", "head_weight_norms", "head_grad_norms"):
            a, r = m.get(key), d[key]
            if not isinstance(a, list) or len(a) != len(r):
                errs.fails.append(("metrics", float("inf"), where(f"{key}: {a} vs {r}")))
                continue
            for i, (x, y) in enumerate(zip(a, r)):
                cat = "stats" if key == "head_weight_norms" else "grad"
                errs.add(cat, abs(x - y) / max(abs(y), TINY), where(f"{key}[{i}]"))
        if d["q_delta"] is None:
            if m.get("q_delta") is not None:
                errs.fails.append(("metrics", float("inf"), where("q_delta without double DQN")))
        else:  # near 0 after a target update: relative to the mean |Q(s, a)|
            errs.add("stats", abs(m["q_delta"] - d["q_delta"]) / max(s["q_abs_mean"], TINY),
                     where("q_delta"))
    ref = dict(ref_tensors)
    ref.update({f"grad.{n}": g for n, g in out["grads"].items()})
    sq = {}
    for n, t in ref.items():
        g = tensor_group(n)
        sq[g] = sq.get(g, 0.0) + float(np.sum(np.square(t, dtype=np.float64)))
    plugin = {n[len(f"s{k}."):] for n in rec if n.startswith(f"s{k}.")}
    if plugin != set(ref):
        errs.fails.append(("names", float("inf"), where(
            f"tensors only in the plugin {sorted(plugin - set(ref))}, "
            f"only in the reference {sorted(set(ref) - plugin)}")))
    for n, t in ref.items():
        g = tensor_group(n)
        floor = max(GROUP_FLOOR * np.sqrt(sq[g]), TINY)
        a = rec.get(f"s{k}.{n}")
        if a is None or a.shape != t.shape:
            errs.fails.append(("shape", float("inf"), where(
                f"{n}: plugin {None if a is None else a.shape}, reference {t.shape}")))
            continue
        errs.add(GROUP_CATEGORY[g], rel_err(a, t, floor), where(n))
        if n.endswith("_mask") and not np.array_equal(a, t):
            errs.fails.append(("mask", float(np.sum(a != t)), where(
                f"{n}: {int(np.sum(a != t))} entries differ from torch.nn.utils.prune's")))


# ---- finite differences in float64 ---------------------------------------------------------

def fd_check(cfg, spec, rec, sn_order, seed):
    """Update 1: the plugin's analytic gradient (grad.* of s1) against a float64 central
    difference of the same loss: same batch, the u, v the plugin used (its sn.online after
    update 1 = after the power iteration; the target's initial vectors), W_sn = W / (u^T W v)
    recomputed from the perturbed W, y held fixed (it is detached). The plugin's grad.* is
    after clipping: the difference quotient is scaled by the same clip coefficient, computed
    from the plugin's pre-clip norm (which the main comparison checks against
    clip_grad_norm_). Entries are drawn at random; one whose +-h step switches a ReLU (some
    pre-activation of the batch lies within ~h of 0) is replaced by another, since the
    difference quotient across a kink is not the derivative. Returns (max plugin error, max
    reference-autograd error, entries checked, fails)."""
    online = QNet(spec, torch.float64, sn_order)
    target = QNet(spec, torch.float64, sn_order)
    online.load(rec, "s0.online", "s1.sn.online")
    target.load(rec, "s0.target", "s0.sn.target")
    b = batch_tensors(rec, 1, cfg, torch.float64)
    with torch.no_grad():
        ws = online.weights(iterate=False)
        qt = target(b["next_obs"], target.weights(iterate=False))
        sel = online(b["next_obs"], ws) if cfg["double_dqn"] else qt
        y = td_target(spec, qt, sel, b["rewards"], b["disc"])[0]

    def loss_at(masks=None):
        q = online(b["obs"], online.weights(iterate=False), masks)
        return td_loss(spec, cfg, q, b["actions"], y, b["weights"])[0]

    base_masks = []
    loss = loss_at(base_masks)
    same_pattern = lambda ms: all(torch.equal(a, c) for a, c in zip(ms, base_masks))
    loss.backward()  # the reference's own float64 gradient, checked against the same FD
    gnorm = float(rec["u1.stats"][3])
    max_norm = float(cfg["max_grad_norm"])
    coef = min(1.0, max_norm / (gnorm + 1e-6)) if max_norm > 0.0 else 1.0
    rng = np.random.default_rng(seed)
    worst, worst_ref, entries, fails = 0.0, 0.0, 0, []
    with torch.no_grad():
        for name, p in online.params().items():
            flat = p.view(-1)
            idx, fd = [], []
            for i in rng.permutation(flat.numel()):
                orig = float(flat[i])
                mp, mm = [], []
                flat[i] = orig + FD_H
                lp = float(loss_at(mp))
                flat[i] = orig - FD_H
                lm = float(loss_at(mm))
                flat[i] = orig
                if not (same_pattern(mp) and same_pattern(mm)):
                    continue  # across a ReLU kink
                idx.append(int(i))
                fd.append((lp - lm) / (2.0 * FD_H))
                if len(idx) == FD_MIN_ENTRIES:
                    break
            idx, fd = np.array(idx, dtype=np.int64), np.array(fd)
            if len(idx) < min(FD_MIN_ENTRIES, flat.numel()) // 2:
                fails.append(("fd", float("inf"), f"update 1 {name}: too few entries away from "
                                                  f"ReLU kinks ({len(idx)})"))
                continue
            entries += len(idx)
            c_grad = rec[f"s1.grad.{name}"].astype(np.float64).ravel()[idx]
            ref_grad = p.grad.view(-1).numpy()[idx]
            e = rel_err(c_grad, coef * fd, FD_FLOOR)
            e_ref = rel_err(ref_grad, fd, FD_FLOOR)
            worst, worst_ref = max(worst, e), max(worst_ref, e_ref)
            if not e <= TOL["fd"]:
                fails.append(("fd", e, f"update 1 grad.{name} vs float64 finite difference"))
            if not e_ref <= TOL["fd_ref"]:
                fails.append(("fd_ref", e_ref,
                              f"reference float64 autograd of {name} vs finite difference"))
    return worst, worst_ref, entries, fails


# ---- spectral norm semantics ---------------------------------------------------------------

def check_sn_semantics(order):
    """The explicit spectral norm above against PyTorch's own module on a random layer: u, v
    after one training forward, the output, and the weight gradient. Returns the max error."""
    g = torch.Generator().manual_seed(1234)
    W = torch.randn(5, 7, generator=g)
    bias = torch.randn(5, generator=g)
    x = torch.randn(4, 7, generator=g)
    if order == "parametrizations":
        m = torch.nn.utils.parametrizations.spectral_norm(nn.Linear(7, 5))
        with torch.no_grad():
            m.parametrizations.weight.original.copy_(W)
            m.bias.copy_(bias)
        par = m.parametrizations.weight[0]
        get_uv = lambda: (par._u, par._v)
        get_grad = lambda: m.parametrizations.weight.original.grad
    else:
        m = torch.nn.utils.spectral_norm(nn.Linear(7, 5))
        with torch.no_grad():
            m.weight_orig.copy_(W)
            m.bias.copy_(bias)
        get_uv = lambda: (m.weight_u, m.weight_v)
        get_grad = lambda: m.weight_orig.grad
    u0, v0 = (t.detach().clone() for t in get_uv())
    m.train()
    out = m(x)
    out.square().sum().backward()
    Wm = W.clone().requires_grad_(True)
    u, v = u0.clone(), v0.clone()
    power_iteration(Wm, u, v, order)
    mine = F.linear(x, sn_weight(Wm, u, v), bias)
    mine.square().sum().backward()
    tu, tv = get_uv()
    return max(rel_err(u, tu), rel_err(v, tv), rel_err(mine.detach(), out.detach()),
               rel_err(Wm.grad, get_grad()))


# ---- one config ----------------------------------------------------------------------------

def run_driver(args, cfg_path):
    name = os.path.splitext(os.path.basename(cfg_path))[0]
    with open(cfg_path) as f:
        cfg_text = f.read()
    # defaults for the driver's arguments: the manifest beside the plugin, else the source's
    here = os.path.dirname(os.path.abspath(__file__))
    for m in (os.path.join(os.path.dirname(os.path.abspath(args.plugin)), "manifest.json"),
              os.path.join(here, "..", "..", "manifest.json")):
        if os.path.exists(m):
            with open(m) as f:
                cfg = resolve_config(cfg_text, f.read())
            break
    else:
        raise RuntimeError("no manifest.json beside the plugin or in the source tree")
    out = os.path.join(args.workdir, f"parity_{name}.bin")
    cmd = [args.driver, args.plugin, cfg_path, out, "--batch", str(cfg["batch_size"]),
           "--actions", ",".join(str(k) for k in cfg["actions"]), "--updates", str(args.updates),
           "--seed", str(args.batch_seed + int(cfg["seed"]))]
    if int(cfg["n_step"]) > 1:  # per-sample gamma^m, m in 1..n, as n-step replay gives
        cmd += ["--nstep", str(cfg["n_step"]), "--gamma", repr(float(cfg["gamma"]))]
    if cfg["replay"] == "prioritized":  # importance weights, as prioritised replay gives
        cmd += ["--weights"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"parity_driver exited {r.returncode}: {r.stdout.strip()}")
    return name, out


def check_dump(name, path, args):
    rec = read_dump(path)
    cfg = resolve_config(bytes(rec["meta.config"]).decode(), bytes(rec["meta.manifest"]).decode())
    spec = Spec(cfg)
    K = int(rec["meta.end"][0])
    free, forced = Errors(), Errors()
    ref = Reference(cfg, spec, rec, "s0", 0, args.sn_order)
    clipped, gnorm_max, rebased = 0, 0.0, []
    for k in range(1, K + 1):
        b = batch_tensors(rec, k, cfg, torch.float32)
        step_ref = Reference(cfg, spec, rec, f"s{k - 1}", k - 1, args.sn_order)
        out_f = step_ref.update(b)
        compare_update(forced, rec, k, out_f, step_ref.tensors(), "forced")
        out = ref.update(b)
        # Two fp32 trajectories that differ by rounding reach, now and then, a branch point:
        # a ReLU of online(s) or a greedy action a* that one state sends one way and the
        # other state the other way. Both continuations are correct, but they part by far
        # more than rounding. So when the reference's state and the plugin's state (both
        # evaluated here, with the same math) disagree on a branch, the free replay re-bases
        # on the plugin's state: its update k becomes the forced one. A re-base needs the
        # states to agree before it (checked at update k - 1), and more than MAX_REBASES fail.
        if not all(torch.equal(x, z) for x, z in zip(out["branches"], out_f["branches"])):
            rebased.append(k)
            ref, out = step_ref, out_f
        compare_update(free, rec, k, out, ref.tensors(), "free")
        gn = float(rec[f"u{k}.stats"][3])
        gnorm_max = max(gnorm_max, gn)
        if 0.0 < float(cfg["max_grad_norm"]) < gn:
            clipped += 1
    fd, fd_ref, fd_n, fd_fails = fd_check(cfg, spec, rec, args.sn_order,
                                          seed=int(cfg["seed"]))
    fails = free.fails + forced.fails + fd_fails
    if len(rebased) > MAX_REBASES:
        fails.append(("rebase", len(rebased), f"free replay re-based at updates {rebased}"))
    # The test must exercise the update: the online network moved over the K updates.
    names = list(ref.online.params())
    flat = lambda s: np.concatenate([rec[f"{s}.online.{n}"].ravel() for n in names])
    moved = rel_err(flat(f"s{K}"), flat("s0"))
    if not moved > 1e-2:
        fails.append(("moved", moved, f"the online parameters barely changed over {K} updates"))
    # A pruning config must prune: its final masks hold zeros.
    pruned = sum(int(np.sum(rec[f"s{K}.online.{n}_mask"] == 0)) for n in ref.prune)
    if ref.prune and not pruned > 0:
        fails.append(("pruned", 0, f"no weight was pruned over {K} updates"))
    for e in args.expect_grad_norm_above:
        cname, x = e.split("=")
        if cname == name and not gnorm_max > float(x):
            fails.append(("grad_norm", gnorm_max, f"no update had a gradient norm above {x}"))
    ok = not fails
    cols = " ".join(f"{c} {free.max[c]:.1e}" for c in CATEGORY_ORDER
                    if c not in ("sn",) or spec.sn_layers)
    print(f"{'PASS' if ok else 'FAIL'} {name:22s} free: {cols} | forced max "
          f"{max(forced.max.values()):.1e} | fd {fd:.1e} (ref {fd_ref:.1e}, {fd_n} entries) | "
          f"clipped {clipped}/{K}, max grad norm {gnorm_max:.3g}, moved {moved:.2f}"
          + (f", pruned {pruned}" if ref.prune else "")
          + (f", re-based at {rebased}" if rebased else ""))
    shown = set()
    for cat, err, where in fails:  # the first failure of each kind and replay, at most 10
        key = (cat, where.split(" ")[0])
        if key in shown:
            continue
        shown.add(key)
        if len(shown) > 10:
            print("    ... and more")
            break
        limit = f" > {TOL[cat]:.0e}" if cat in TOL else ""
        print(f"    {cat}: {err:.3e}{limit} ({where})")
    sys.stdout.flush()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", nargs="*", help="learner config JSON files")
    ap.add_argument("--driver", help="parity_driver executable")
    ap.add_argument("--plugin", help="libfoxhunt_dqn.so")
    ap.add_argument("--workdir", default=".", help="where the driver's files go")
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--batch-seed", type=int, default=1000,
                    help="seed of the driver's batches (added to the config's seed)")
    ap.add_argument("--dump", nargs="*", default=[], help="driver files to check")
    ap.add_argument("--sn-order", choices=["parametrizations", "legacy"],
                    default="parametrizations",
                    help="power-iteration order: torch.nn.utils.parametrizations.spectral_norm "
                         "(docs/design.md section 4) or the legacy torch.nn.utils.spectral_norm hook")
    ap.add_argument("--expect-grad-norm-above", action="append", default=[],
                    metavar="CONFIG=X",
                    help="config CONFIG must have an update whose pre-clip gradient norm "
                         "exceeds X (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(True)

    sn_err = check_sn_semantics(args.sn_order)
    if not sn_err < 1e-6:
        print(f"FAIL the explicit spectral norm ({args.sn_order} order) differs from PyTorch's "
              f"module by {sn_err:.2e}")
        print("0 passed, 1 failed")
        return 1

    passed = failed = 0
    jobs = [(os.path.splitext(os.path.basename(p))[0].removeprefix("parity_"), p, False)
            for p in args.dump]
    jobs += [(None, c, True) for c in args.configs]
    if args.configs and not (args.driver and args.plugin):
        ap.error("configs need --driver and --plugin")
    for name, path, needs_driver in jobs:
        try:
            if needs_driver:
                name, path = run_driver(args, path)
            ok = check_dump(name, path, args)
        except Exception as exc:  # a crash of one config is a failure of that config
            print(f"FAIL {name or path}: {type(exc).__name__}: {exc}")
            ok = False
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not jobs else 0


if __name__ == "__main__":
    sys.exit(main())
