"""test_torch_reference.py - bench/torch_reference.py computes the learner's update: its loss,
TD errors and gradients on one batch equal those of tests/parity/torch_reference.py (the
reference the parity test holds the library to), for branches of one size and of different
sizes, dueling or not, double DQN or not, spectral norm none/last/all, CQL on and off, and
conv torsos (uint8 and float32 images, obs_scale, padding, torso "nature", spectral norm over
the convs, NCHW and channels_last); the two scripts' Nature tables agree. With --bf16 (bf16
autocast) its loss, TD errors and gradients equal tests/parity/torch_bf16.py's autocast
replay's, and differ from its own fp32 update (the cast is in effect).
Exits 77 (skipped) without torch. Usage: test_torch_reference.py BENCH_DIR PARITY_SCRIPT"""
import importlib.util
import os
import sys

try:
    import torch
except ImportError as exc:
    print(f"SKIP: cannot import torch with {sys.executable}: {exc}")
    sys.exit(77)

# fp32 on the CPU, the same ops in the same order except the branch layout (per-branch slices
# there, one padded (B, D, K) tensor here): a few roundings apart at most.
TOL = 1e-5
# bf16 autocast on both sides: the same bf16 GEMMs (one merged head here, value and advantage
# apart there: the same dot products), the fp32 rounding of the branch layout moving a value
# across a bf16 rounding boundary now and then (2^-8 of one element).
TOL_BF16 = 2e-3
# and the bf16 update must differ from the fp32 one by more than this
MIN_BF16_EFFECT = 1e-4
BF16_CASES = [  # as CASES
    ([3, 5, 2], True, True, 0.1, "all", "huber"),
    ([6, 6], False, True, 0.0, "none", "mse"),
]

CASES = [  # actions, dueling, double_dqn, cql_alpha, spectral_norm, loss
    ([3, 5, 2], True, True, 0.1, "all", "huber"),
    ([4], False, False, 0.0, "none", "huber"),
    ([2, 16], True, False, 1.0, "last", "mse"),
    ([6, 6], False, True, 0.0, "none", "huber"),
    ([7, 2, 7, 3], False, True, 0.5, "last", "huber"),
    ([5, 5, 5], True, True, 0.1, "all", "mse"),
]
SMALL_CONV = [{"out": 6, "kernel": 4, "stride": 2, "padding": 1}, {"out": 5, "kernel": 3, "stride": 1}]
# conv cases: (image keys, channels_last), with actions [6], dueling, double DQN, Huber, sn
IMAGE_CASES = [
    ({"obs_shape": [4, 84, 84], "obs_dtype": "uint8", "torso": "nature"}, False, "none"),
    ({"obs_shape": [4, 84, 84], "obs_dtype": "uint8", "torso": "nature"}, True, "last"),
    ({"obs_shape": [2, 12, 10], "obs_dtype": "uint8", "conv": SMALL_CONV, "hidden": [16],
      "frame_stack": 2}, False, "all"),
    ({"obs_shape": [3, 11, 13], "obs_scale": 0.5, "conv": SMALL_CONV, "hidden": [12, 8]},
     True, "all"),
]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-12))


def main():
    bench_dir, parity_script = sys.argv[1:3]
    sys.path.insert(0, bench_dir)
    tr = load("torch_reference", f"{bench_dir}/torch_reference.py")
    par = load("parity_reference", parity_script)
    failures = int(tr.NATURE != par.NATURE)
    if failures:
        print(f"FAIL torso nature: bench {tr.NATURE}, parity reference {par.NATURE}")
    for acts, duel, dbl, cql, sn, loss_kind in CASES:
        torch.manual_seed(len(acts) * 7 + sum(acts))
        keys = {"obs_dim": 9, "hidden": [16, 12]}
        failures += not check(tr, par, keys, acts, duel, dbl, cql, sn, loss_kind, False)
    for i, (keys, chl, sn) in enumerate(IMAGE_CASES):
        torch.manual_seed(100 + i)
        failures += not check(tr, par, keys, [6], True, True, 0.0, sn, "huber", chl)
    tb = load("torch_bf16", os.path.join(os.path.dirname(parity_script), "torch_bf16.py"))
    for acts, duel, dbl, cql, sn, loss_kind in BF16_CASES:
        torch.manual_seed(len(acts) * 11 + sum(acts))
        keys = {"obs_dim": 9, "hidden": [48, 40]}
        failures += not check(tr, par, keys, acts, duel, dbl, cql, sn, loss_kind, False, tb)
    n_cases = len(CASES) + len(IMAGE_CASES) + len(BF16_CASES) + 1
    print(f"{n_cases - failures} passed, {failures} failed")
    return 1 if failures else 0


def check(tr, par, keys, acts, duel, dbl, cql, sn, loss_kind, chl, bf16=None):
    """One config: the bench learner's loss, TD errors and gradients on one batch against the
    parity reference's networks holding the same weights. True when within TOL. bf16: the
    torch_bf16 module: the bench learner with --bf16 against its autocast forward (TOL_BF16)."""
    cfg = tr.resolve_config(dict(
        keys, actions=acts, dueling=duel, double_dqn=dbl, cql_alpha=cql, spectral_norm=sn,
        loss=loss_kind, batch_size=8, replay="prioritized", seed=5))
    lr = tr.Learner(cfg, torch.device("cpu"), channels_last=chl, bf16=bf16 is not None)
    n, B = 32, 8
    lr.alloc_replay(n)
    shape = lr.obs_shape
    if lr.u8:  # bytes, which the parity reference takes as their float values
        obs = torch.randint(0, 256, (n + 1,) + shape, dtype=torch.uint8)
    else:
        obs = torch.randn((n + 1,) + shape)
    act = torch.stack([torch.randint(0, k, (n,)) for k in acts], 1)
    rew, term = torch.randn(n), torch.rand(n) < 0.2
    lr.observe(obs[:n], act, rew, obs[1:], term)
    idx, w = torch.randint(0, n, (B,)), torch.rand(B) + 0.1
    lr.sample = lambda: (idx, w)  # the batch both sides see

    # the parity reference's networks with the bench learner's weights and u, v
    s = par.Spec(dict(cfg))
    net = par.QNet(s, torch.float32, "parametrizations")
    tgt = par.QNet(s, torch.float32, "parametrizations")
    L, NC = lr.T, lr.NC  # torso layers (conv then linear); the head is layer L
    if (s.F, s.NC) != (lr.dims[0], NC):
        print(f"FAIL {keys}: flattened size / conv layers: bench {lr.dims[0]} / {NC}, "
              f"parity reference {s.F} / {s.NC}")
        return False
    with torch.no_grad():
        for m, P, SN in ((net, lr.params, lr.sn), (tgt, lr.target, lr.sn_target)):
            ps = list(m.params().values())
            for i in range(2 * L):
                ps[i].copy_(P[i])
            if duel:  # the merged head: row 0 the value, rows 1.. the advantages
                ps[2 * L].copy_(P[2 * L][:1])
                ps[2 * L + 1].copy_(P[2 * L + 1][:1])
                ps[2 * L + 2].copy_(P[2 * L][1:])
                ps[2 * L + 3].copy_(P[2 * L + 1][1:])
            else:
                ps[2 * L].copy_(P[2 * L])
                ps[2 * L + 1].copy_(P[2 * L + 1])
            for l, (u, v) in SN.items():  # conv layers' vectors are cu<c>, cv<c>
                pre, j = ("c", l) if l < NC else ("", l - NC)
                getattr(m, f"{pre}u{j}").copy_(u)
                getattr(m, f"{pre}v{j}").copy_(v)
    ws = net.weights(iterate=True)
    x, xn = obs[:n][idx].float(), obs[1:][idx].float()
    one = torch.ones(())
    if bf16 is not None:  # W_sn as formed above, then autocast's GEMMs
        fwd = lambda m, xx, w: bf16.forward_autocast(m, xx, [(wi, one) for wi in w])
    else:
        fwd = lambda m, xx, w: m(xx, w)
    q = fwd(net, x, ws)
    with torch.no_grad():
        qt = fwd(tgt, xn, tgt.weights(iterate=False))
        sel = fwd(net, xn, [wt.detach() for wt in ws]) if dbl else qt
        disc = (1.0 - term[idx].float()) * cfg["gamma"]
        y, _ = par.td_target(s, qt, sel, rew[idx], disc)
    ref_loss, ref_qa = par.td_loss(s, cfg, q, act[idx], y, w)
    ref_loss.backward()
    ref_g = [p.grad for p in net.params().values()]

    loss, td, _ = lr.loss_fn()
    loss.backward()
    g = [p.grad for p in lr.params]
    if duel:  # split the merged head's gradient as the parity net holds it
        g = g[:2 * L] + [g[2 * L][:1], g[2 * L + 1][:1], g[2 * L][1:], g[2 * L + 1][1:]]
    errs = {"loss": rel(loss.detach(), ref_loss.detach()),
            "td": rel(td, ref_qa.detach() - y[:, None]),
            "grad": max(rel(a, b) for a, b in zip(g, ref_g))}
    bad = {k: v for k, v in errs.items() if not v <= (TOL if bf16 is None else TOL_BF16)}
    if bf16 is not None:  # the same batch in fp32: the cast must show in the gradient
        g16 = torch.cat([p.grad.flatten() for p in lr.params])
        lr.bf16 = False
        for p in lr.params:
            p.grad = None
        lr.loss_fn()[0].backward()
        errs["fp32_effect"] = rel(torch.cat([p.grad.flatten() for p in lr.params]), g16)
        if not errs["fp32_effect"] > MIN_BF16_EFFECT:
            bad["fp32_effect"] = errs["fp32_effect"]
    image = (f" obs {shape} {cfg['obs_dtype']} conv {NC}"
             + (" channels_last" if chl else "")) if NC else ""
    print(f"{'FAIL' if bad else 'ok  '} actions {acts} dueling {duel} double {dbl} "
          f"cql {cql} sn {sn} {loss_kind}{image}{' bf16' if bf16 is not None else ''}: "
          + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
    return not bad


if __name__ == "__main__":
    sys.exit(main())
