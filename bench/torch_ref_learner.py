"""bench/torch_ref_learner.py - the foxhunt-dqn update (docs/design.md section 4) in plain
PyTorch: the Learner that bench/torch_reference.py times.

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
"""
import contextlib
import math

import torch
import torch.nn.functional as F

from torch_ref_config import conv_geometry


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
