#!/usr/bin/env python3
"""Checkpoints read from Python: the `safetensors` package opens them, every checksum and the
layout check out against an independent reader, and the Q-network loaded into a PyTorch module
(nn.Linear + torch.nn.utils.parametrizations.spectral_norm, the module of docs/checkpoints.md)
gives the learner's Q-values and greedy actions.

Usage: ckpt_torch.py <dir written by test_ckpt_export>
Exits 77 (skipped) when numpy, torch or safetensors cannot be imported.
"""
import json
import os
import struct
import sys

try:
    import numpy as np
    import torch
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as exc:  # the test is skipped, not failed
    print(f"SKIP: {exc}")
    sys.exit(77)

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL {what}")


# ---- the format's checksum: CRC-64/XZ ----------------------------------------------------------

_POLY = 0xC96C5795D7870F42
_TABLE = []
for _i in range(256):
    _r = _i
    for _ in range(8):
        _r = (_r >> 1) ^ _POLY if _r & 1 else _r >> 1
    _TABLE.append(_r)


def crc64_xz(data, crc=0):
    r = crc ^ 0xFFFFFFFFFFFFFFFF
    for b in data:
        r = _TABLE[(r ^ b) & 0xFF] ^ (r >> 8)
    return r ^ 0xFFFFFFFFFFFFFFFF


def metadata_crc(meta):
    h = 0
    for k in sorted(k for k in meta if not k.startswith("checksum.")):
        h = crc64_xz(k.encode() + b"\0" + meta[k].encode() + b"\0", h)
    return h


# ---- the PyTorch module (as in docs/checkpoints.md) --------------------------------------------

class QNet(torch.nn.Module):
    """Q_d(s, .) of every branch d, concatenated: (N, sum(actions))."""

    def __init__(self, cfg):
        super().__init__()
        dims = [cfg["obs_dim"]] + cfg["hidden"]
        self.torso = torch.nn.ModuleList(
            torch.nn.Linear(i, o) for i, o in zip(dims[:-1], dims[1:]))
        last = len(self.torso) - 1
        for l, lin in enumerate(self.torso):
            if cfg["spectral_norm"] == "all" or (cfg["spectral_norm"] == "last" and l == last):
                torch.nn.utils.parametrizations.spectral_norm(lin)
        self.actions = cfg["actions"]
        self.dueling = cfg["dueling"]
        if self.dueling:
            self.value = torch.nn.Linear(dims[-1], 1)
            self.advantage = torch.nn.Linear(dims[-1], sum(self.actions))
        else:
            self.q = torch.nn.Linear(dims[-1], sum(self.actions))

    def forward(self, x):
        for lin in self.torso:
            x = torch.relu(lin(x))
        if not self.dueling:
            return self.q(x)
        v = self.value(x)
        a = self.advantage(x)
        return torch.cat([v + ad - ad.mean(dim=1, keepdim=True)
                          for ad in torch.split(a, self.actions, dim=1)], dim=1)


def load_qnet(path, which="online"):
    """The online (or target) Q-network of a foxhunt-dqn checkpoint, in eval mode."""
    tensors = load_file(path)
    with safe_open(path, framework="np") as f:
        cfg = json.loads(f.metadata()["config"])
    net = QNet(cfg)
    state = {}
    for name in net.state_dict():
        parts = name.split(".")
        if parts[0] == "torso" and "parametrizations" in parts:
            l = parts[1]
            src = {"original": f"{which}.torso.{l}.weight",
                   "_u": f"sn.{which}.torso.{l}.u",
                   "_v": f"sn.{which}.torso.{l}.v"}[parts[-1]]
        elif parts[0] == "torso":
            src = f"{which}.{name}"
        else:  # value.*, advantage.*, q.*
            src = f"{which}.head.{name}"
        state[name] = torch.from_numpy(tensors[src].copy())
    net.load_state_dict(state)
    return net.eval(), cfg


# ---- checks -------------------------------------------------------------------------------------

def check_layout(path):
    """Parse the file by hand and check it against the format description."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    check((8 + n) % 8 == 0, f"{path}: data section not 8-aligned")
    text = raw[8:8 + n].decode("utf-8")
    check(text.rstrip(" ") == text.strip(), f"{path}: header padding is not spaces")
    header = json.loads(text)
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        check(b == at, f"{path}: {k} is not contiguous")
        at = e
    check(at == len(data), f"{path}: tensors do not cover the data section")
    bad = [k for b, e, k in spans if f"{crc64_xz(data[b:e]):016x}" != meta[f"checksum.{k}"]]
    check(not bad, f"{path}: checksums differ from an independent CRC-64/XZ: {bad[:3]}")
    check(f"{metadata_crc(meta):016x}" == meta["checksum.__metadata__"],
          f"{path}: metadata checksum")
    for key, want in (("format", "foxhunt-dqn"), ("format_version", "1"),
                      ("checksum_algorithm", "crc64-xz"), ("backend", "cpu")):
        check(meta.get(key) == want, f"{path}: __metadata__.{key} = {meta.get(key)!r}")
    dtypes = {v["dtype"] for v in header.values()}
    check(dtypes <= {"F32", "F64", "I32", "U32", "U64", "U8"}, f"{path}: dtypes {dtypes}")
    return header, meta


def main():
    out = sys.argv[1]
    names = ["dueling_sn_all", "plain", "branch3_sn_last"]
    worst = 0.0
    for name in names:
        path = os.path.join(out, f"{name}.safetensors")
        ref = json.load(open(os.path.join(out, f"{name}.json")))
        header, meta = check_layout(path)
        tensors = load_file(path)  # the safetensors package reads every tensor
        check(set(tensors) == set(header), f"{name}: safetensors sees other tensors")
        check(meta["library_version"] == ref["library_version"],
              f"{name}: library_version {meta['library_version']}")
        check(meta["includes_replay"] == ("true" if ref["includes_replay"] else "false"),
              f"{name}: includes_replay")
        check(("replay.obs" in tensors) == ref["includes_replay"], f"{name}: replay tensors")
        m = ref["metrics"]
        check(int(tensors["counters.updates"]) == m["updates"], f"{name}: counters.updates")
        check(int(tensors["counters.env_steps"]) == m["env_steps"], f"{name}: env_steps")
        check(tensors["counters.updates"].dtype == np.uint64 and
              tensors["counters.updates"].shape == (), f"{name}: counters.updates dtype/shape")
        if ref["includes_replay"]:
            check(int(tensors["replay.size"]) == m["replay_size"], f"{name}: replay.size")
            check(tensors["replay.obs"].dtype == np.float32, f"{name}: replay.obs dtype")

        net, cfg = load_qnet(path)
        check(int(tensors["rng.seed"]) == cfg["seed"], f"{name}: rng.seed")
        obs = torch.tensor(ref["obs"], dtype=torch.float32)
        want = np.array(ref["q"], dtype=np.float32)
        with torch.no_grad():
            got = net(obs).numpy()
        scale = max(float(np.abs(want).max()), 1e-6)
        err = float(np.abs(got - want).max()) / scale
        worst = max(worst, err)
        check(got.shape == want.shape and err <= 1e-5,
              f"{name}: PyTorch Q-values differ from the learner's by {err:.3g} (relative)")
        greedy = np.stack([np.argmax(c, axis=1) for c in
                           np.split(got, np.cumsum(cfg["actions"])[:-1], axis=1)], axis=1)
        check((greedy == np.array(ref["greedy"])).all(), f"{name}: greedy actions differ")
        # the target network loads the same way
        tnet, _ = load_qnet(path, "target")
        with torch.no_grad():
            check(np.isfinite(tnet(obs).numpy()).all(), f"{name}: target network")
        print(f"{name}: {len(tensors)} tensors, {os.path.getsize(path)} bytes, "
              f"Q-values of {obs.shape[0]} observations match within {err:.2e} (relative to "
              f"max |Q|), greedy actions equal")
    print(f"worst relative Q difference {worst:.2e}; {len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
