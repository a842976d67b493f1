#!/usr/bin/env python3
"""A checkpoint of a Nature-CNN learner (tests/parity/configs/nature.json: uint8 [4, 84, 84],
dueling, two branches, spectral norm on every layer) loaded into a plain PyTorch module:
nn.Conv2d / nn.Linear with torch.nn.utils.parametrizations.spectral_norm, the checkpoint's
tensors by name (online.torso.conv<i>.weight of shape (out, in, kh, kw), ...), the stored u, v
(eval mode: no power iteration). Its Q-values and greedy actions on the driver's last batch
must be the learner's.

Usage: checkpoint_nature.py --driver parity_driver --plugin libfoxhunt_dqn.so
                            --config nature.json --workdir DIR
Exits 77 (skipped) when numpy, torch or safetensors cannot be imported.
"""
import argparse
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    from torch import nn
    from safetensors.numpy import load_file
except ImportError as exc:
    print(f"SKIP: {exc}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import read_dump  # noqa: E402


def sn(module, t, prefix):
    """`module` under PyTorch's spectral norm with the checkpoint's W, u, v."""
    m = torch.nn.utils.parametrizations.spectral_norm(module)
    par = m.parametrizations.weight[0]
    with torch.no_grad():
        m.parametrizations.weight.original.copy_(torch.from_numpy(t[f"online.{prefix}.weight"]))
        m.bias.copy_(torch.from_numpy(t[f"online.{prefix}.bias"]))
        par._u.copy_(torch.from_numpy(t[f"sn.online.{prefix}.u"]))
        par._v.copy_(torch.from_numpy(t[f"sn.online.{prefix}.v"]))
    return m


class NatureQ(nn.Module):
    """Mnih et al. 2015 torso, dueling heads over branches K."""

    def __init__(self, t, K):
        super().__init__()
        self.K = K
        self.torso = nn.Sequential(
            sn(nn.Conv2d(4, 32, 8, stride=4), t, "torso.conv0"), nn.ReLU(),
            sn(nn.Conv2d(32, 64, 4, stride=2), t, "torso.conv1"), nn.ReLU(),
            sn(nn.Conv2d(64, 64, 3, stride=1), t, "torso.conv2"), nn.ReLU(),
            nn.Flatten(),
            sn(nn.Linear(3136, 512), t, "torso.0"), nn.ReLU())
        self.value = nn.Linear(512, 1)
        self.advantage = nn.Linear(512, sum(K))
        with torch.no_grad():
            for name, lin in (("value", self.value), ("advantage", self.advantage)):
                lin.weight.copy_(torch.from_numpy(t[f"online.head.{name}.weight"]))
                lin.bias.copy_(torch.from_numpy(t[f"online.head.{name}.bias"]))

    def forward(self, x):
        h = self.torso(x)
        v, a = self.value(h), self.advantage(h)
        out, o = [], 0
        for k in self.K:
            ak = a[:, o:o + k]
            out.append(v + ak - ak.mean(dim=1, keepdim=True))
            o += k
        return torch.cat(out, dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", default=".")
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    K = [int(k) for k in cfg["actions"]]
    dump = os.path.join(args.workdir, "checkpoint_nature.bin")
    ckpt = os.path.join(args.workdir, "checkpoint_nature.safetensors")
    r = subprocess.run([args.driver, args.plugin, args.config, dump, "--batch",
                        str(cfg["batch_size"]), "--actions", ",".join(map(str, K)),
                        "--updates", "3", "--checkpoint", ckpt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(f"FAIL parity_driver: {r.stdout.strip()}")
        return 1
    rec = read_dump(dump)
    t = load_file(ckpt)
    fails = []
    w = t["online.torso.conv0.weight"]
    if w.shape != (32, 4, 8, 8) or t["online.torso.0.weight"].shape != (512, 3136):
        fails.append(f"shapes: conv0 {w.shape}, torso.0 {t['online.torso.0.weight'].shape}")
    net = NatureQ(t, K).eval()
    obs = rec["b3.obs"]  # (B, 4*84*84) uint8
    x = torch.from_numpy(obs.astype(np.float32)).reshape(-1, 4, 84, 84) * np.float32(1 / 255)
    with torch.no_grad():
        q = net(x).numpy()
    err = float(np.linalg.norm(q - rec["ck.q"]) / np.linalg.norm(q))
    if not err < 1e-5:
        fails.append(f"Q-values differ by {err:.2e} (relative)")
    greedy, o = [], 0
    for k in K:
        greedy.append(np.argmax(q[:, o:o + k], axis=1))
        o += k
    if not np.array_equal(np.stack(greedy, axis=1), rec["ck.actions"]):
        fails.append("greedy actions differ")
    for f in fails:
        print(f"FAIL {f}")
    print(f"{'PASS' if not fails else 'FAIL'} nature checkpoint in a plain PyTorch module: "
          f"Q rel err {err:.1e} over {q.shape[0]} observations x {q.shape[1]} actions")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
