"""parity_net.py - the PyTorch network of the parity reference: the learner's shapes from its
config (Spec) and the Q-network (QNet) built of nn.Conv2d / nn.Linear, with the dueling head
and the explicit spectral norm that torch_reference.py's header describes. Part of
torch_reference.py, which imports it after checking that numpy and torch import.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

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
