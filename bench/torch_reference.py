#!/usr/bin/env python3
"""bench/torch_reference.py - the foxhunt-dqn update (docs/design.md section 4) written in
plain PyTorch, timed the way `fhd-host bench` times the plugin, on the presets (every
bench/presets/NAME.json, the files fhd-host embeds) or on any learner config (--config FILE,
e.g. the random shapes of bench/shapes.py, which also imports bench_config from here).

Files: torch_ref_config.py (config resolution and checks, conv geometry, the FLOP count),
torch_ref_learner.py (the network, replay and update, op for op as the learner),
torch_ref_timing.py (the run modes, the timing protocol and the result fields); this file is the
command line, and re-exports the names bench/shapes.py and the tests use.

Runs under torch 1.13 (CPU only: eager) and torch 2.x (CUDA: eager, graph, compile).
Usage:
  torch_reference.py --device cpu|cuda --preset C0[,B1,...] --mode eager|graph|compile|all
                     [--json] [--updates N] [--repeats N] [--threads N] [--peak-tflops X]
                     [--fill N] [--tf32] [--bf16] [--channels-last]
  torch_reference.py --device cpu|cuda --config FILE [--config FILE ...] [same options]
  torch_reference.py --device cpu|cuda --sgemm      (large float32 matmul rate, GFLOP/s)
With --json each (preset or config, mode) prints one JSON object on its own line.
"""
import argparse
import json
import os
import sys

try:
    import torch
    import torch.nn.functional as F  # noqa: F401 (re-exported)
except ImportError as exc:
    print(f"error: cannot import torch with {sys.executable}: {exc}", file=sys.stderr)
    sys.exit(3)


sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # the torch_ref_* modules
from torch_ref_config import (  # noqa: E402,F401 (re-exported)
    HERE, NATURE, NATURE_HIDDEN, NO_EFFECT_KEYS, PRESET_DIR, PRESETS, REPO, UPDATE_KEYS,
    conv_geometry, gemm_flops_per_update, load_config, load_config_file, resolve_config)
from torch_ref_learner import Learner  # noqa: E402,F401
from torch_ref_timing import (  # noqa: E402,F401
    bench_config, bench_one, cpu_model, make_compile, make_eager, make_graph, percentile,
    release, sgemm_rate, sync, synthetic, time_runs)

TORCH_MAJOR = int(torch.__version__.split(".")[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--preset", default=None, help="one or more of %s, comma-separated "
                    "(default C0 when no --config is given)" % ",".join(PRESETS))
    ap.add_argument("--config", action="append", default=[], metavar="FILE",
                    help="a learner config JSON (repeatable)")
    ap.add_argument("--mode", default="eager", choices=["eager", "graph", "compile", "all"])
    ap.add_argument("--updates", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--run-seconds", type=float, default=0.25,
                    help="target length of a timed run when --updates is not given")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--fill", type=int, default=None,
                    help="replay fill (default min(capacity, max(16 B, 65536)), as fhd-host's)")
    ap.add_argument("--channels-last", action="store_true",
                    help="conv configs: weights and activations in NHWC memory")
    ap.add_argument("--act-calls", type=int, default=2000, help="0: no act timing")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on CUDA")
    ap.add_argument("--bf16", action="store_true",
                    help="matmuls and convolutions in bfloat16 under torch.autocast, fp32 "
                         "accumulation, weights and optimiser (the learner's matmul_precision "
                         "\"bf16\")")
    ap.add_argument("--sgemm", action="store_true", help="print the large-matmul rate and exit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.fill is not None and args.fill < 1:
        print(f"error: --fill is {args.fill}; allowed: an integer >= 1", file=sys.stderr)
        return 2
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("error: CUDA is not available to torch", file=sys.stderr)
            return 1
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = True  # conv algorithms timed by cuDNN per shape
    if args.sgemm:
        print(json.dumps(sgemm_rate(dev)))
        return 0
    if args.preset is None and not args.config:
        args.preset = "C0"
    presets = [p for p in (args.preset or "").split(",") if p]
    jobs = []  # (label, cfg)
    try:
        for p in presets:
            if p not in PRESETS:
                print(f"error: unknown preset {p}; known: {' '.join(PRESETS)}", file=sys.stderr)
                return 2
            jobs.append((p, load_config(p)))
        for path in args.config:
            jobs.append((os.path.splitext(os.path.basename(path))[0], load_config_file(path)))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    modes = ["eager", "graph", "compile"] if args.mode == "all" else [args.mode]
    if dev.type == "cpu" and args.mode == "all":
        modes = ["eager"]
    failed = 0
    for p, cfg in jobs:
        for m in modes:
            r = bench_config(cfg, p, m, args, dev)
            release(dev)
            failed += "error" in r and m == "eager"
            if args.json:
                print(json.dumps(r), flush=True)
            elif "error" in r:
                print(f"{p:6s} torch {m:8s} error: {r['error']}", flush=True)
            else:
                print(f"{p:6s} torch {m:8s} {r['us_per_update_median']:10.2f} us/update "
                      f"(p10 {r['us_per_update_p10']:.2f}, p90 {r['us_per_update_p90']:.2f}; "
                      f"{r['updates']} x {r['repeats']}), {r['updates_per_second']:.1f} "
                      f"updates/s, {r['tflops']:.4f} TFLOP/s, act "
                      + (f"{r['act_us_1']:.1f} / {r['act_us_64']:.1f} us"
                         if "act_us_1" in r else "not timed")
                      + f", observe {r['observe_per_second']:.3g}/s, {r['threads']} threads",
                      flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
