"""parity_update.py - the float32 reference update of the parity test: the TD target and loss,
the batch of one update, pruning by torch.nn.utils.prune, and Reference, the learner's state
(online, target, u/v, Adam, masks) with one update of it, resumed from a recorded state.
Part of torch_reference.py, which imports it after checking that numpy and torch import.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from parity_net import QNet


# ---- the TD target, the loss and the batch -------------------------------------------------

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
