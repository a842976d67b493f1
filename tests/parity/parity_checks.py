"""parity_checks.py - the comparisons of the parity test: tolerances and the relative-error
metric, the per-update comparison of the plugin's record with a reference update (Errors,
compare_update), the float64 finite-difference check of the plugin's gradient (fd_check) and the
explicit spectral norm against PyTorch's own module (check_sn_semantics). Part of
torch_reference.py, which imports it after checking that numpy and torch import.
"""
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from parity_net import QNet, power_iteration, sn_weight
from parity_update import batch_tensors, td_loss, td_target

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

CATEGORY_ORDER = ["loss", "td", "y", "stats", "grad", "param", "target", "sn", "adam"]


def rel_err(a, b, tiny=TINY):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), tiny))


# ---- comparing an update -------------------------------------------------------------------

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
