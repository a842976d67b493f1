#!/usr/bin/python3
"""torch_bf16.py - PyTorch parity of the learner update with matmul_precision "bf16"
(docs/design.md section 4, "GEMM precision").

Runs with the Debian system python (/usr/bin/python3), python3-torch (1.13, CPU) and
python3-numpy, like torch_reference.py, whose driver, file reader, network and loss it reuses.
Exits 77 (CTest: skipped) when torch cannot be imported.

For each config (configs_bf16/*.json, all with "matmul_precision": "bf16" on the cpu backend)
parity_driver records K updates of the plugin; then each update k is replayed here from the
plugin's state after update k - 1 (the "forced" replay of torch_reference.py: bf16 rounding
makes two trajectories part at ReLU and argmax branch points far sooner than fp32 does, so
each update is checked on its own), three ways:

  emulated  the learner's bf16 rule, written out in PyTorch: every GEMM operand rounded to
            bf16 (the weights, layer 0's input obs_scale * obs, the hidden outputs, the output
            gradient dy of every layer before its dW and dx GEMMs) and multiplied in fp32
            (products of bf16 values are exact, so only the summation order differs from the
            plugin's sgemm); alpha = 1/sigma applied to the product of a normalised layer;
            hidden biases rounded, the head's bias, Q, the loss, db (a hidden linear layer's
            summed from its rounded dy, the head's and the convs' from the fp32 dy), dW, the spectral-norm
            correction, clipping and Adam in fp32. Custom autograd functions (Bf16Linear,
            Bf16Conv) state the backward exactly. Tight tolerances (TOL_EMULATED).
  autocast  the same network as a PyTorch user writes it: torso and head under
            torch.autocast("cpu", dtype=torch.bfloat16) (nn.Linear / F.conv2d outputs are
            bf16 tensors, their biases cast to bf16), the head outputs upcast with .float()
            before the dueling combination and the loss (the dueling head as one GEMM of
            1 + KT outputs, as the learner's: two would round dx twice), W_sn = W / sigma
            formed in fp32
            before the autocast GEMM, torch.optim.Adam on the fp32 parameters. Where the plugin
            differs from autocast, by design: the head's output, Q and the head's bias stay
            fp32 (autocast rounds Q to 8 mantissa bits, which quantises TD errors once |Q| is
            large); dW and db are the GEMM's fp32 sums (autocast rounds them to bf16 before the
            fp32 master weights see them); a normalised layer multiplies bf16(W) by 1/sigma in
            fp32 (autocast rounds W / sigma). Loose tolerances (TOL_AUTOCAST), a few bf16 ulps.
  fp32      the plain fp32 update (torch_reference.py's network): the plugin must differ from
            it by clearly more than from the emulation (FP32_RATIO), or bf16 is not in effect.

Metric: relative error ||a - b|| / max(||b||, floor) per tensor, as torch_reference.py (the
floor of a state tensor a tenth of its group's norm). Prints one line per config; exits 1 on
any failure.

Usage:
  torch_bf16.py --driver parity_driver --plugin libfoxhunt_dqn.so --workdir DIR CONFIG...
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402 (exits 77 without torch)

np, torch, nn, F = tr.np, tr.torch, tr.nn, tr.F

# Relative errors (see rel_err) of the plugin against the emulation. Both round the same values
# at the same places; what differs is the fp32 summation order of each GEMM (sgemm's blocking
# against PyTorch's), ~1e-7 relative, which moves a value across a bf16 rounding boundary (or a
# ReLU kink) only when it lies within that distance of one: now and then a single flip of one
# bf16 ulp (2^-8 relative) in an activation or an operand gradient, which then travels on. In
# these small networks one flip moves a gradient tensor by up to ~5e-4. Measured over these
# configs and 20 updates: losses, TD errors and statistics <= 3e-5, gradients <= 5e-4 (single
# flips; 1e-6 without them), parameters <= 7e-6, Adam moments <= 4e-4.
TOL_EMULATED = {"loss": 1e-3, "td": 1e-3, "y": 1e-3, "stats": 1e-3, "grad": 5e-3,
                "param": 1e-3, "target": 1e-3, "sn": 1e-3, "adam": 5e-3}
# Against autocast: autocast rounds GEMM outputs the plugin keeps in fp32 (Q, dW, db), and
# rounds W / sigma where the plugin rounds W and scales by 1/sigma: up to half a bf16 ulp, 2^-9
# = 2e-3 relative, per element; a tensor's norm error averages them (~1e-3). Gradients that are
# cancelling sums carry those roundings relative to a smaller result: the value head's (a sum
# over the actions' dQ, and for its bias over the batch too) and, with spectral norm, G / sigma
# minus the sigma correction. Adam's first steps move each weight by about lr sign(g), so a
# gradient entry near 0 whose sign the two roundings decide differently moves its weight by up
# to 2 lr: parameters and moments are measured against their group's norm (the floor), and the
# moments divide by a v that is itself ~g^2. Measured over these configs and 20 updates: loss
# 4e-4, TD errors and targets 7e-4, statistics (the gradient norm) 6e-3, gradients 5e-2 (the
# value head's; the torso's <= 9e-3), parameters 8e-3, Adam moments 2e-2.
TOL_AUTOCAST = {"loss": 5e-3, "td": 1e-2, "y": 1e-2, "stats": 5e-2, "grad": 1e-1,
                "param": 3e-2, "target": 3e-2, "sn": 1e-3, "adam": 1e-1}
# The plugin's gradient differs from the fp32 update's by bf16 rounding (~1e-3); from the
# emulation by ~1e-5. Required: the fp32 error at least this many times the emulated one.
FP32_RATIO = 10.0
# The autocast replay takes the emulation's ReLU masks and greedy actions (Replay.update): of
# those decisions, autocast's own may differ only where a value lies within a few bf16 ulps
# of the kink or tie; more than this fraction means the two compute different things.
MAX_FLIPS = 0.01


def q16(t):
    """t rounded to the nearest bf16 value (PyTorch's conversion rounds to nearest even)."""
    return t.to(torch.bfloat16).to(torch.float32)


class Round(torch.autograd.Function):
    """A hidden output rounded to bf16; the gradient passes unchanged (the plugin's backward
    reads the rounded output's ReLU mask and rounds dy itself, at the GEMM below)."""

    @staticmethod
    def forward(ctx, x):
        return q16(x)

    @staticmethod
    def backward(ctx, g):
        return g


class Bf16Linear(torch.autograd.Function):
    """z = alpha (x bf16(W)^T) + b, alpha = 1/sigma; x holds bf16 values. Backward: dy rounded;
    db the fp32 sum of the rounded dy (hidden) or of dy (the head); dx = alpha dy16 bf16(W); G = dy16^T x, dW = alpha G (the gradient of
    W / sigma), dsigma = -sum(G * W) / sigma^2 (with the fp32 W: the plugin's
    sn_weight_backward). hidden: b rounded to bf16 (the head's stays fp32)."""

    @staticmethod
    def forward(ctx, x, W, sigma, b, hidden):
        alpha = 1.0 / sigma
        W16 = q16(W)
        z = (x @ W16.t()) * alpha + (q16(b) if hidden else b)
        ctx.save_for_backward(x, W, W16, sigma)
        ctx.hidden = hidden
        return z

    @staticmethod
    def backward(ctx, dy):
        x, W, W16, sigma = ctx.saved_tensors
        alpha = 1.0 / sigma
        dy16 = q16(dy)
        db = (dy16 if ctx.hidden else dy).sum(0)
        G = dy16.t() @ x
        dx = (dy16 @ W16) * alpha
        ds = -(G * W).sum() / (sigma * sigma) if ctx.needs_input_grad[2] else None
        return dx, G * alpha, ds, db, None


class Bf16Conv(torch.autograd.Function):
    """The same for a convolution: z = alpha conv(x, bf16(W)) + bf16(b)."""

    @staticmethod
    def forward(ctx, x, W, sigma, b, stride, padding):
        alpha = 1.0 / sigma
        W16 = q16(W)
        z = F.conv2d(x, W16, None, stride=stride, padding=padding) * alpha
        z = z + q16(b)[None, :, None, None]
        ctx.save_for_backward(x, W, W16, sigma)
        ctx.stride, ctx.padding = stride, padding
        return z

    @staticmethod
    def backward(ctx, dy):
        x, W, W16, sigma = ctx.saved_tensors
        alpha = 1.0 / sigma
        st, pd = ctx.stride, ctx.padding
        db = dy.sum((0, 2, 3))
        dy16 = q16(dy)
        G = torch.nn.grad.conv2d_weight(x, W.shape, dy16, stride=st, padding=pd)
        dx = torch.nn.grad.conv2d_input(x.shape, W16, dy16, stride=st, padding=pd) * alpha
        ds = -(G * W).sum() / (sigma * sigma) if ctx.needs_input_grad[2] else None
        return dx, G * alpha, ds, db, None, None


def layer_weights(net, iterate):
    """(W, sigma) of every conv and torso layer: sigma = u^T W v (the gradient flows through
    it; u, v after one power iteration when iterate), or a constant 1 without spectral norm."""
    sp, one = net.spec, torch.ones(())
    out = []
    for i, cv in enumerate(net.convs):
        if not sp.conv_sn:
            out.append((cv.weight, one))
            continue
        u, v = getattr(net, f"cu{i}"), getattr(net, f"cv{i}")
        Wm = cv.weight.reshape(cv.weight.shape[0], -1)
        if iterate:
            tr.power_iteration(Wm, u, v, "parametrizations")
        out.append((cv.weight, torch.dot(u.clone(), torch.mv(Wm, v.clone()))))
    for l, lin in enumerate(net.torso):
        if l not in sp.sn_layers:
            out.append((lin.weight, one))
            continue
        u, v = getattr(net, f"u{l}"), getattr(net, f"v{l}")
        if iterate:
            tr.power_iteration(lin.weight, u, v, "parametrizations")
        out.append((lin.weight, torch.dot(u.clone(), torch.mv(lin.weight, v.clone()))))
    return out


def combine(sp, V, A):
    """Q (B, KT) from the head outputs, in fp32."""
    if V is None:
        return A
    return torch.cat([V + A[:, o:o + k] - A[:, o:o + k].mean(dim=1, keepdim=True)
                      for o, k in zip(sp.offs, sp.K)], dim=1)


def forward_emulated(net, x, ws, masks=None, force=None):
    sp = net.spec
    h = x * sp.scale if (sp.u8 or sp.scale != 1.0) else x
    h = q16(h)  # layer 0's operand (the conv's im2col of it)
    if sp.NC:
        h = h.reshape(x.shape[0], *sp.shape)
        for i, cv in enumerate(net.convs):
            W, s = ws[i]
            z = Bf16Conv.apply(h, W, s, cv.bias, cv.stride, cv.padding)
            if masks is not None:
                masks.append(z > 0)
            h = Round.apply(F.relu(z))
        h = h.flatten(1)
    for l, lin in enumerate(net.torso):
        W, s = ws[sp.NC + l]
        z = Bf16Linear.apply(h, W, s, lin.bias, True)
        if masks is not None:
            masks.append(z > 0)
        h = Round.apply(F.relu(z))
    one = torch.ones(())
    if sp.dueling:
        V = Bf16Linear.apply(h, net.value.weight, one, net.value.bias, False)
        A = Bf16Linear.apply(h, net.advantage.weight, one, net.advantage.bias, False)
        return combine(sp, V, A)
    return Bf16Linear.apply(h, net.q.weight, one, net.q.bias, False)


def forward_autocast(net, x, ws, masks=None, force=None):
    """force: the emulation's ReLU masks of this forward, taken instead of autocast's own
    decisions (see Replay.update)."""
    sp = net.spec
    sn_w = [W / s for W, s in ws]  # W_sn in fp32, as parametrizations.spectral_norm forms it
    h = x * sp.scale if (sp.u8 or sp.scale != 1.0) else x

    def relu(z, i):
        if masks is not None:
            masks.append(z > 0)
        return F.relu(z) if force is None else z * force[i].to(z.dtype)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        if sp.NC:
            h = h.reshape(x.shape[0], *sp.shape)
            for i, cv in enumerate(net.convs):
                h = relu(F.conv2d(h, sn_w[i], cv.bias, stride=cv.stride, padding=cv.padding), i)
            h = h.flatten(1)
        for l, lin in enumerate(net.torso):
            h = relu(F.linear(h, sn_w[sp.NC + l], lin.bias), sp.NC + l)
        if sp.dueling:  # one GEMM of 1 + KT outputs, as the learner's merged head
            out = F.linear(h, torch.cat([net.value.weight, net.advantage.weight]),
                           torch.cat([net.value.bias, net.advantage.bias])).float()
            V, A = out[:, :1], out[:, 1:]
        else:
            V, A = None, net.q(h).float()
    return combine(sp, V, A)


def forward_fp32(net, x, ws, masks=None, force=None):
    return net(x, [W / s for W, s in ws], masks)


FORWARDS = {"emulated": forward_emulated, "autocast": forward_autocast, "fp32": forward_fp32}


class Replay:
    """One update of kind `kind` from the plugin's state after update `step` (torch_reference's
    Reference with the forward of that kind; no pruning, diversity or detailed metrics)."""

    def __init__(self, cfg, spec, rec, step, kind):
        self.cfg, self.spec, self.step, self.fwd = cfg, spec, step, FORWARDS[kind]
        state = f"s{step}"
        self.online = tr.QNet(spec, torch.float32, "parametrizations")
        self.target = tr.QNet(spec, torch.float32, "parametrizations")
        self.online.load(rec, f"{state}.online", f"{state}.sn.online")
        self.target.load(rec, f"{state}.target", f"{state}.sn.target")
        for p in self.target.parameters():
            p.requires_grad_(False)
        params = list(self.online.params().values())
        kw = dict(lr=float(cfg["lr"]), betas=(float(cfg["adam_beta1"]), float(cfg["adam_beta2"])),
                  eps=float(cfg["adam_eps"]), weight_decay=float(cfg["weight_decay"]))
        self.opt = torch.optim.AdamW(params, **kw) if cfg["optimizer"] == "adamw" \
            else torch.optim.Adam(params, **kw)
        if step > 0:
            for name, p in self.online.params().items():
                self.opt.state[p] = {
                    "step": torch.tensor(float(step)),
                    "exp_avg": torch.from_numpy(rec[f"{state}.adam.m.{name}"].copy()),
                    "exp_avg_sq": torch.from_numpy(rec[f"{state}.adam.v.{name}"].copy()),
                }

    def update(self, b, force=None):
        """The update on batch b. Returns its results and, in "branches", its discrete choices:
        the ReLU masks of each forward (online(s), target(s'), online(s')) and a*. force: such
        choices of another replay, taken instead of this one's own (the autocast replay takes
        the emulation's: where a pre-activation lies within bf16 rounding of 0, or two Q values
        of s' within rounding of each other, the two roundings may decide differently, both
        correctly, and the continuations part by far more than rounding; forcing the choices
        measures the arithmetic, and the decisions that differ are counted instead)."""
        cfg, spec = self.cfg, self.spec
        fc = force or {}
        m_on, m_tg, m_sel = [], [], []
        self.opt.zero_grad(set_to_none=False)
        ws = layer_weights(self.online, iterate=True)
        q = self.fwd(self.online, b["obs"], ws, m_on, fc.get("on"))
        with torch.no_grad():
            qt = self.fwd(self.target, b["next_obs"], layer_weights(self.target, iterate=False),
                          m_tg, fc.get("tg"))
            sel = self.fwd(self.online, b["next_obs"], [(W.detach(), s.detach()) for W, s in ws],
                           m_sel, fc.get("sel")) if cfg["double_dqn"] else qt
            y, a_star = tr.td_target(spec, qt, sel, b["rewards"], b["disc"])
            if "a_star" in fc:  # the target of the forced greedy actions
                picks = [qt[:, o:o + k].gather(1, fc["a_star"][:, d:d + 1])
                         for d, (o, k) in enumerate(zip(spec.offs, spec.K))]
                y = b["rewards"] + b["disc"] * torch.cat(picks, dim=1).mean(dim=1)
        loss, qa = tr.td_loss(spec, cfg, q, b["actions"], y, b["weights"])
        loss.backward()
        params = list(self.online.params().values())
        gnorm = float(torch.sqrt(sum(p.grad.detach().double().square().sum() for p in params)))
        if float(cfg["max_grad_norm"]) > 0.0:
            torch.nn.utils.clip_grad_norm_(params, float(cfg["max_grad_norm"]))
        grads = {n: p.grad.detach().numpy().copy() for n, p in self.online.params().items()}
        self.opt.step()
        self.step += 1
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
        qa = qa.detach()
        td = (qa - y[:, None]).numpy()
        return {"loss": float(loss.item()), "td": td, "y": y.numpy().copy(), "grads": grads,
                "branches": {"on": m_on, "tg": m_tg, "sel": m_sel, "a_star": a_star},
                "stats": {"td_abs_mean": float(np.abs(td).mean()), "q_mean": float(qa.mean()),
                          "grad_norm": gnorm, "q_abs_mean": float(qa.abs().mean())}}

    def tensors(self):
        out = {}
        for net, m in (("online", self.online), ("target", self.target)):
            for n, p in m.params().items():
                out[f"{net}.{n}"] = p.detach().numpy().copy()
            for n, u in m.sn_vectors().items():
                out[f"sn.{net}.{n}"] = u.numpy().copy()
        for n, p in self.online.params().items():
            st = self.opt.state.get(p, {})
            out[f"adam.m.{n}"] = st["exp_avg"].numpy().copy()
            out[f"adam.v.{n}"] = st["exp_avg_sq"].numpy().copy()
        return out


class Errors:
    """Max relative error per category against one reference, and the comparisons over tol."""

    def __init__(self, tol):
        self.tol, self.max, self.fails = tol, {c: 0.0 for c in tol}, []

    def add(self, cat, err, where):
        err = err if np.isfinite(err) else float("inf")
        self.max[cat] = max(self.max[cat], err)
        if err > self.tol[cat]:
            self.fails.append((cat, err, where))


def compare(errs, rec, k, out, tensors):
    """Update k of the plugin against one replay's (out, tensors); returns the relative error
    of the whole gradient."""
    st, tiny = rec[f"u{k}.stats"], tr.TINY
    s = out["stats"]
    errs.add("loss", abs(st[0] - out["loss"]) / max(abs(out["loss"]), tiny), f"{k} loss")
    errs.add("td", tr.rel_err(rec[f"u{k}.td"], out["td"]), f"{k} td_errors")
    errs.add("y", tr.rel_err(rec[f"u{k}.targets"], out["y"]), f"{k} targets")
    errs.add("stats", abs(st[1] - s["td_abs_mean"]) / max(s["td_abs_mean"], tiny), f"{k} td_abs")
    errs.add("stats", abs(st[2] - s["q_mean"]) / max(s["q_abs_mean"], tiny), f"{k} q_mean")
    errs.add("stats", abs(st[3] - s["grad_norm"]) / max(s["grad_norm"], tiny), f"{k} grad_norm")
    ref = dict(tensors)
    ref.update({f"grad.{n}": g for n, g in out["grads"].items()})
    sq = {}
    for n, t in ref.items():
        g = tr.tensor_group(n)
        sq[g] = sq.get(g, 0.0) + float(np.sum(np.square(t, dtype=np.float64)))
    for n, t in ref.items():
        g = tr.tensor_group(n)
        a = rec.get(f"s{k}.{n}")
        if a is None or a.shape != t.shape:
            errs.fails.append(("shape", float("inf"), f"{k} {n}"))
            continue
        errs.add(tr.GROUP_CATEGORY[g], tr.rel_err(a, t, max(tr.GROUP_FLOOR * np.sqrt(sq[g]), tiny)),
                 f"{k} {n}")
    names = sorted(out["grads"])
    cat = lambda d: np.concatenate([d[n].ravel() for n in names])
    return tr.rel_err(cat({n: rec[f"s{k}.grad.{n}"] for n in names}), cat(out["grads"]))


def check(name, path):
    rec = tr.read_dump(path)
    cfg = tr.resolve_config(bytes(rec["meta.config"]).decode(), bytes(rec["meta.manifest"]).decode())
    if cfg.get("matmul_precision") != "bf16":
        print(f"FAIL {name}: not a bf16 config")
        return False
    spec = tr.Spec(cfg)
    K = int(rec["meta.end"][0])
    errs = {"emulated": Errors(TOL_EMULATED), "autocast": Errors(TOL_AUTOCAST)}
    ratio_min, fails, flips = float("inf"), [], [0, 0]
    for k in range(1, K + 1):
        b = tr.batch_tensors(rec, k, cfg, torch.float32)
        g_err, br = {}, None
        for kind in ("emulated", "autocast", "fp32"):
            rp = Replay(cfg, spec, rec, k - 1, kind)
            out = rp.update(b, br if kind == "autocast" else None)
            if kind == "emulated":
                br = out["branches"]
            elif kind == "autocast":  # its own decisions against the emulation's
                for key in ("on", "tg", "sel", "a_star"):
                    mine, theirs = out["branches"][key], br[key]
                    mine = mine if isinstance(mine, list) else [mine]
                    theirs = theirs if isinstance(theirs, list) else [theirs]
                    for x, z in zip(mine, theirs):
                        flips[0] += int((x != z).sum())
                        flips[1] += x.numel()
            e = errs.get(kind, Errors({c: float("inf") for c in TOL_EMULATED}))
            g_err[kind] = compare(e, rec, k, out, rp.tensors())
        ratio = g_err["fp32"] / max(g_err["emulated"], tr.TINY)
        ratio_min = min(ratio_min, ratio)
        if not ratio >= FP32_RATIO:
            fails.append(("fp32", ratio, f"{k}: gradient error against fp32 {g_err['fp32']:.1e} "
                                         f"is not {FP32_RATIO:g}x the emulated one "
                                         f"{g_err['emulated']:.1e}"))
    for kind, e in errs.items():
        fails += [(f"{kind} {c}", err, w) for c, err, w in e.fails]
    flip_frac = flips[0] / max(flips[1], 1)
    if not flip_frac <= MAX_FLIPS:
        fails.append(("branches", flip_frac, f"1..{K}: autocast decided {flips[0]} of "
                                             f"{flips[1]} ReLUs and greedy actions otherwise"))
    ok = not fails
    col = lambda e: " ".join(f"{c} {v:.1e}" for c, v in e.max.items())
    print(f"{'PASS' if ok else 'FAIL'} {name:14s} emulated: {col(errs['emulated'])} | autocast: "
          f"{col(errs['autocast'])} (decisions forced: {flips[0]} of {flips[1]} differed) | "
          f"fp32/emulated gradient error >= {ratio_min:.0f}x ({K} updates)")
    for cat, err, where in fails[:10]:
        print(f"    {cat}: {err:.3e} (update {where})")
    sys.stdout.flush()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", nargs="+", help="learner config JSON files (bf16)")
    ap.add_argument("--driver", required=True, help="parity_driver executable")
    ap.add_argument("--plugin", required=True, help="libfoxhunt_dqn.so")
    ap.add_argument("--workdir", default=".", help="where the driver's files go")
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--batch-seed", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    passed = failed = 0
    for c in args.configs:
        try:
            name, path = tr.run_driver(args, c)
            name = "bf16_" + name
            ok = check(name, path)
        except Exception as exc:  # a crash of one config is a failure of that config
            print(f"FAIL {c}: {type(exc).__name__}: {exc}")
            ok = False
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
