"""parity_io.py - parity_driver's side of the PyTorch parity test: the record file it writes
(read_dump; the format is in the header of parity_driver.c), the learner config it ran
(manifest defaults, then the config's keys) and the command line that runs it for one config.
Part of torch_reference.py, which imports it after checking that numpy and torch import.
"""
import json
import os
import struct
import subprocess

import numpy as np


# ---- the record file -----------------------------------------------------------------------

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


# ---- running the driver --------------------------------------------------------------------

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
