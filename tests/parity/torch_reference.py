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

Files: parity_io.py (the driver's record file and config, running the driver), parity_net.py
(the network), parity_update.py (target, loss, pruning, the update), parity_checks.py
(tolerances, comparisons, finite differences); this file checks one config and holds the CLI.
The other scripts reach those names through this module (import torch_reference as tr).

Usage:
  torch_reference.py --driver parity_driver --plugin libfoxhunt_dqn.so --workdir DIR CONFIG...
  torch_reference.py --dump FILE...      (compare files written earlier by parity_driver)
"""
import argparse
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as exc:  # CI installs python3-torch; elsewhere the test is skipped
    print(f"SKIP: cannot import torch/numpy with {sys.executable}: {exc}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the modules below, and the names the other parity scripts use through this module
from parity_io import DTYPES, read_dump, resolve_config, run_driver  # noqa: E402,F401
from parity_net import NATURE, QNet, Spec, power_iteration, sn_weight  # noqa: E402,F401
from parity_update import (Reference, batch_tensors, prune_names,  # noqa: E402,F401
                           prune_sparsity_at, td_loss, td_target, torch_masks)
from parity_checks import (CATEGORY_ORDER, FD_FLOOR, FD_H, FD_MIN_ENTRIES,  # noqa: E402,F401
                           GROUP_CATEGORY, GROUP_FLOOR, TINY, TOL, Errors, check_sn_semantics,
                           compare_update, fd_check, rel_err, tensor_group)

MAX_REBASES = 2  # see check_dump


# ---- one config ----------------------------------------------------------------------------

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
