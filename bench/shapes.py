#!/usr/bin/python3
"""bench/shapes.py - the random-shape suite (docs/design.md sections 6 and 7): N random MLP
learner configs drawn from a seed, each timed in one run through `fhd-host bench --config`
(ours) and through bench/torch_reference.py's update (PyTorch: captured into a CUDA graph on
the GPU, eager on the CPU), and ours again with "autotune": "full" (the exhaustive plan) when
the library's manifest has that key.

Python: a python3 that imports torch. Here that is the Debian /usr/bin/python3 (python3-torch
1.13, CPU only: eager); on the GPU machine it is its python3 (torch 2.x). Drawing and writing
the configs (--configs-only, --print) needs no torch.

The draw: one random.Random(seed); shape i (0-based, named s<seed>-<i>) takes its fields in
this order, so a seed gives the same shapes on every machine and Python 3:
  obs_dim         log-uniform integer in [4, 256]
  hidden          1-3 layers (uniform), each log-uniform in [64, 1024], each rounded to a
                  multiple of 64 with probability 1/2 (users write 256 and 384 as often as 300)
  actions         1-4 branches (uniform); with probability 1/2 all of one size, else each its
                  own; sizes uniform in [2, 16]
  batch_size      log-uniform in [32, 4096], a power of two with probability 1/2
  dueling, double_dqn, replay (prioritized | uniform), spectral_norm (none | last or all),
  cql_alpha (0 | 0.1 or 1.0): each switched on with probability 1/2
  fill            max(16 B, 65536) rounded up to whole observe calls of 64: the transitions
                  `fhd-host bench` and torch_reference.py put in the replay (their default
                  fill), and the config's learning_starts, so step() would train too
  replay_capacity 2^k >= fill, k one of the three smallest such
Everything else is the manifest's default (Adam 1e-4, Huber, clip 10, fp32 GEMMs, ...).
--small caps each drawn shape afterwards (obs <= 64, widths <= 128, batch <= 64, fill and
capacity 1024) for a plumbing check on a small CPU; the same seed draws the same shapes.

Pass 1 times each shape in turn, ours and PyTorch back to back (which goes first alternates
from shape to shape); pass 2 then times the exhaustive plan of each shape, so that a run cut
short by --time-limit has the main comparison for every shape it reached:
  ours       fhd-host bench --config FILE --backend B --json --repeats R --fill F, with the
             library's default autotune and its cache under WORK/cache-default
  pytorch    torch_reference.bench_config in this process (torch imported once; its CUDA
             context stays open, idle, while fhd-host runs), or with --isolate
             torch_reference.py --config FILE in a process of its own: the same fill, warm-up
             and R timed runs
  full       ours with --set autotune="full", cache under WORK/cache-full, --full-repeats
             runs (3); skipped (and said so in the table) when the manifest lacks the key
Both tools warm up for 0.3 s, then time R runs of N updates (N for about --run-seconds, 0.1 s,
a run; at least 1000 updates on CUDA) and report the median microseconds per update.

Output in --out DIR: results.jsonl (one line per measurement: shape, column, config, and the
tool's JSON), table.md (one row per shape, then the summary against the goals of
docs/design.md section 7: PyTorch graph / ours >= 1.2 everywhere, >= 8 where batch <= 512
and every width <= 512, ours within 10% of the exhaustive plan), env.txt and run.log. Both
result files are rewritten after every shape, so a run cut short keeps what it measured.

Usage (PY: /usr/bin/python3 here, python3 on the GPU machine):
  PY bench/shapes.py --backend cuda --n 24 --seed 1 --out DIR [--build DIR] [--time-limit S]
  PY bench/shapes.py --backend cpu --n 4 --seed 1 --small --threads 1 --out DIR
  PY bench/shapes.py --n 24 --seed 1 --configs-only --work DIR   (write the configs, no timing)
  PY bench/shapes.py --n 24 --seed 1 --print                     (print them as JSON lines)
--build defaults to .device/build (tools/device_bundle.sh) when it exists, else build; with
.device/lib present it goes first on LD_LIBRARY_PATH.
"""
import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The goals of docs/design.md section 7 (on the H200).
GOAL_RATIO = 1.2             # PyTorch graph / ours, every shape
GOAL_LATENCY_RATIO = 8.0     # ... where batch <= 512 and every hidden width <= 512
LATENCY_BATCH, LATENCY_WIDTH = 512, 512
GOAL_FULL = 1.10             # ours / ours with the exhaustive plan


# ---- the draw -------------------------------------------------------------------------------

def log_uniform_int(rng, lo, hi):
    return min(hi, max(lo, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))))


def draw_shape(rng, seed, index):
    """One config, its fields drawn in the order of the header."""
    S = log_uniform_int(rng, 4, 256)
    hidden = []
    for _ in range(rng.randint(1, 3)):
        w = log_uniform_int(rng, 64, 1024)
        if rng.random() < 0.5:
            w = min(1024, max(64, 64 * round(w / 64)))
        hidden.append(w)
    D = rng.randint(1, 4)
    if rng.random() < 0.5:
        actions = [rng.randint(2, 16)] * D
    else:
        actions = [rng.randint(2, 16) for _ in range(D)]
    B = log_uniform_int(rng, 32, 4096)
    if rng.random() < 0.5:
        B = min(4096, max(32, 1 << round(math.log2(B))))
    dueling = rng.random() < 0.5
    double = rng.random() < 0.5
    per = rng.random() < 0.5
    sn = rng.choice(["last", "all"]) if rng.random() < 0.5 else "none"
    cql = rng.choice([0.1, 1.0]) if rng.random() < 0.5 else 0.0
    fill = -(-max(16 * B, 65536) // 64) * 64
    capacity = (1 << (fill - 1).bit_length()) << rng.randint(0, 2)
    cfg = {"obs_dim": S, "hidden": hidden, "actions": actions, "batch_size": B,
           "dueling": dueling, "double_dqn": double,
           "replay": "prioritized" if per else "uniform", "spectral_norm": sn,
           "cql_alpha": cql, "replay_capacity": capacity, "learning_starts": fill}
    return {"name": f"s{seed}-{index:02d}", "seed": seed, "index": index, "fill": fill,
            "config": cfg}


def shrink(shape):
    """--small: the drawn shape capped for a small CPU (see the header)."""
    c = dict(shape["config"])
    c["obs_dim"] = min(c["obs_dim"], 64)
    c["hidden"] = [min(w, 128) for w in c["hidden"]]
    c["batch_size"] = min(c["batch_size"], 64)
    c["replay_capacity"] = c["learning_starts"] = 1024
    return dict(shape, fill=1024, config=c, small=True)


def generate(n, seed, small=False):
    """The suite: n shapes from seed (the one generator; see the header)."""
    rng = random.Random(seed)
    shapes = [draw_shape(rng, seed, i) for i in range(n)]
    return [shrink(s) for s in shapes] if small else shapes


def latency_bound(cfg):
    return cfg["batch_size"] <= LATENCY_BATCH and max(cfg["hidden"]) <= LATENCY_WIDTH


def gemm_flops(cfg):
    """GEMM FLOPs of one update, the formula of fhd-host bench (host_bench_geom.c)."""
    B, S = cfg["batch_size"], cfg["obs_dim"]
    dims = [S] + list(cfg["hidden"]) + [sum(cfg["actions"]) + int(cfg["dueling"])]
    f = sum(2.0 * B * dims[i] * dims[i + 1] for i in range(len(dims) - 1))
    return (4.0 + int(cfg["double_dqn"])) * f - 2.0 * B * S * dims[1]


def summary(cfg):
    """"S=37 h=384x192 a=[7] B=512 duel dbl PER SN:all CQL0.1" """
    a = cfg["actions"]
    acts = f"{len(a)}x{a[0]}" if len(a) > 1 and len(set(a)) == 1 else \
        "[" + ",".join(map(str, a)) + "]"
    out = [f"S={cfg['obs_dim']}", "h=" + "x".join(map(str, cfg["hidden"])), f"a={acts}",
           f"B={cfg['batch_size']}"]
    out += ["duel"] if cfg["dueling"] else []
    out += ["dbl"] if cfg["double_dqn"] else []
    out += ["PER"] if cfg["replay"] == "prioritized" else []
    out += [f"SN:{cfg['spectral_norm']}"] if cfg["spectral_norm"] != "none" else []
    out += [f"CQL{cfg['cql_alpha']:g}"] if cfg["cql_alpha"] > 0 else []
    return " ".join(out)


def write_configs(shapes, folder):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for s in shapes:
        p = os.path.join(folder, s["name"] + ".json")
        with open(p, "w") as f:
            json.dump(s["config"], f, indent=2)
            f.write("\n")
        paths.append(p)
    return paths


# ---- the runs -------------------------------------------------------------------------------

class Suite:
    def __init__(self, args):
        self.args = args
        self.host = os.path.join(args.build, "fhd-host")
        if not os.access(self.host, os.X_OK):
            raise SystemExit(f"error: {self.host} not found; build first or pass --build DIR")
        with open(os.path.join(args.build, "manifest.json")) as f:
            schema = json.load(f)["config_schema"]
        at = schema.get("autotune", {})
        self.full = "full" in at.get("enum", [])
        self.full_note = None if self.full else (
            "not measured: the library's manifest has no \"autotune\" key with \"full\"")
        if args.no_full and self.full:
            self.full, self.full_note = False, "not measured (--no-full)"
        self.env = dict(os.environ)
        lib = os.path.join(REPO, ".device", "lib")
        if os.path.isdir(lib):
            self.env["LD_LIBRARY_PATH"] = lib + (":" + self.env["LD_LIBRARY_PATH"]
                                                 if self.env.get("LD_LIBRARY_PATH") else "")
        if args.threads:
            self.env["OPENBLAS_NUM_THREADS"] = str(args.threads)
        self.log = open(os.path.join(args.out, "run.log"), "w")
        self.mode = "graph" if args.backend == "cuda" else "eager"
        self.torch = self.tr = self.dev = None
        if not args.isolate:  # PyTorch in this process: torch imported once
            import torch
            sys.path.insert(0, HERE)
            import torch_reference
            self.torch, self.tr = torch, torch_reference
            if args.backend == "cpu":
                torch.set_num_threads(args.threads or os.cpu_count())
            self.dev = torch.device(args.backend)
            if self.dev.type == "cuda" and not torch.cuda.is_available():
                raise SystemExit("error: CUDA is not available to torch")
        self.targs = argparse.Namespace(seed=args.seed_learner, envs=64, warmup=args.warmup,
                                        updates=args.updates, repeats=args.repeats,
                                        run_seconds=args.run_seconds,
                                        act_calls=0, peak_tflops=None, tf32=False)

    def note(self, msg):
        print(msg, file=sys.stderr, flush=True)
        self.log.write(msg + "\n")
        self.log.flush()

    def ours(self, shape, path, column):
        a = self.args
        repeats = a.full_repeats if column == "full" else a.repeats
        cmd = [self.host, "bench", "--config", path, "--backend", a.backend, "--json",
               "--repeats", str(repeats), "--fill", str(shape["fill"]), "--act-calls", "1",
               "--seed", str(a.seed_learner)]
        cmd += ["--updates", str(a.updates)] if a.updates else \
            ["--run-seconds", str(a.run_seconds)]
        cmd += ["--warmup", str(a.warmup)] if a.warmup is not None else []
        cache = os.path.join(a.work, "cache-" + column)
        os.makedirs(cache, exist_ok=True)
        env = dict(self.env, XDG_CACHE_HOME=cache)
        if column == "full":
            cmd += ["--set", 'autotune="full"']
        self.note("  $ " + " ".join(cmd))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                               timeout=a.run_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"fhd-host bench ran past {a.run_timeout} s"}
        self.log.write(p.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            return {"error": f"fhd-host bench exited {p.returncode}: {why[:300]}"}
        r = json.loads(lines[-1])
        r["wall_seconds"] = time.perf_counter() - t0
        return r

    def pytorch(self, shape, path):
        if self.args.isolate:
            return self.pytorch_process(path)
        t0 = time.perf_counter()
        try:
            cfg = self.tr.resolve_config(shape["config"])
            r = self.tr.bench_config(cfg, shape["name"], self.mode, self.targs, self.dev)
        except Exception as exc:  # a failure is a result row, and the suite goes on
            r = {"error": f"{type(exc).__name__}: {exc}"}
        self.tr.release(self.dev)
        r["wall_seconds"] = time.perf_counter() - t0
        return r

    def pytorch_process(self, path):
        """--isolate: torch_reference.py in a process of its own for this shape."""
        a = self.args
        cmd = [sys.executable, os.path.join(HERE, "torch_reference.py"), "--config", path,
               "--device", a.backend, "--mode", self.mode, "--json", "--repeats",
               str(a.repeats), "--act-calls", "0", "--seed", str(a.seed_learner),
               "--threads", str(a.threads or os.cpu_count())]
        cmd += ["--updates", str(a.updates)] if a.updates else \
            ["--run-seconds", str(a.run_seconds)]
        cmd += ["--warmup", str(a.warmup)] if a.warmup is not None else []
        self.note("  $ " + " ".join(cmd))
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                               timeout=a.run_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"torch_reference.py ran past {a.run_timeout} s"}
        self.log.write(p.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if not lines:
            why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            return {"error": f"torch_reference.py exited {p.returncode}: {why[:300]}"}
        r = json.loads(lines[-1])
        r["wall_seconds"] = time.perf_counter() - t0
        return r

    def run(self, shapes, paths):
        """Pass 1: ours and PyTorch, shape by shape; pass 2: the exhaustive plan's column."""
        rows, t_start = [], time.perf_counter()
        passes = [("pass 1", ["ours", "torch"])] + ([("pass 2", ["full"])] if self.full else [])
        for label, cols in passes:
            for i, (shape, path) in enumerate(zip(shapes, paths)):
                base = {"shape": shape["name"], "seed": shape["seed"], "index": shape["index"],
                        "summary": summary(shape["config"]), "config": shape["config"],
                        "fill": shape["fill"], "small": bool(shape.get("small"))}
                order = cols if i % 2 == 0 else cols[::-1]
                if self.args.time_limit and time.perf_counter() - t_start > self.args.time_limit:
                    rows += [dict(base, column=self.column(c),
                                  error="not run: --time-limit reached") for c in order]
                    continue
                self.note(f"[{label} {i + 1}/{len(shapes)}] {shape['name']}: {base['summary']}"
                          f" (load {os.getloadavg()[0]:.2f})")
                got = {}
                for col in order:
                    if col == "torch":
                        r = self.pytorch(shape, path)
                    else:
                        r = self.ours(shape, path, "default" if col == "ours" else "full")
                    got[self.column(col)] = r
                    rows.append(dict(base, column=self.column(col),
                                     **{k: v for k, v in r.items()
                                        if k not in ("config", "preset")}))
                self.note("  " + ", ".join(
                    f"{k} {v['us_per_update_median']:.1f} us" if "us_per_update_median" in v
                    else f"{k} error: {v.get('error')}" for k, v in got.items()))
                self.write(rows, shapes)
        self.write(rows, shapes)
        return rows

    def column(self, col):
        return {"ours": "ours", "torch": "torch-" + self.mode, "full": "ours-full"}[col]

    def write(self, rows, shapes):
        a = self.args
        with open(os.path.join(a.out, "results.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(table(rows, shapes, self.mode, a.backend, self.full_note) + "\n")


# ---- the table ------------------------------------------------------------------------------

# Fields of the CUDA plan (metrics "plan") that record how the choice was made or timed rather
# than the choice: two plans are the same when they agree on everything else.
PLAN_RECORD_KEYS = {"autotune", "pick", "rule", "candidates", "us", "rule_us"}


def plan_choices(plan):
    if isinstance(plan, dict):
        return {k: plan_choices(v) for k, v in plan.items() if k not in PLAN_RECORD_KEYS}
    if isinstance(plan, list):
        return [plan_choices(v) for v in plan]
    return plan


def autotune_ms(row):
    at = (row.get("plan") or {}).get("autotune") if isinstance(row.get("plan"), dict) else None
    return at.get("ms") if isinstance(at, dict) else None


def median(v):
    v = sorted(v)
    n = len(v)
    return None if not n else (v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2]))


def table(rows, shapes, mode, backend, full_note):
    """One row per shape, then the summary against the goals (see the header)."""
    by = {}
    for r in rows:
        by.setdefault(r["shape"], {})[r["column"]] = r
    tcol = "torch-" + mode
    tname = "PyTorch graph" if mode == "graph" else f"PyTorch {mode}"
    out = [f"| shape | config | GFLOP/update | ours us/update | {tname} us | {tname} / ours "
           f"| ours-full us | ours / full | same plan | autotune ms (default / full) | goals |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios, misses, lat_n, lat_ok, full_n, full_ok, errors = [], [], 0, 0, 0, 0, []
    skipped = {}  # column -> shapes not run (--time-limit)
    for s in shapes:
        cols = by.get(s["name"], {})
        cfg = s["config"]
        us = {k: v.get("us_per_update_median") for k, v in cols.items()}
        for k, v in cols.items():
            if v.get("error", "").startswith("not run"):
                skipped.setdefault(k, []).append(s["name"])
            elif "error" in v:
                errors.append(f"{s['name']} {k}: {v['error']}")
        o, t, fu = us.get("ours"), us.get(tcol), us.get("ours-full")
        ratio = t / o if o and t else None
        rf = o / fu if o and fu else None
        goals = []
        if ratio is not None:
            ratios.append(ratio)
            need = GOAL_LATENCY_RATIO if latency_bound(cfg) else GOAL_RATIO
            goals.append(f">= {need:g}x " + ("ok" if ratio >= need else "MISS"))
            if ratio < GOAL_RATIO:
                misses.append(s["name"])
            if latency_bound(cfg):
                lat_n += 1
                lat_ok += ratio >= GOAL_LATENCY_RATIO
        if rf is not None:
            full_n += 1
            full_ok += rf <= GOAL_FULL
            goals.append("full " + ("ok" if rf <= GOAL_FULL else "MISS"))
        plan_o = cols.get("ours", {}).get("plan")
        plan_f = cols.get("ours-full", {}).get("plan")
        same = "-" if plan_o is None or plan_f is None else \
            ("yes" if plan_choices(plan_o) == plan_choices(plan_f) else "no")
        ms = [autotune_ms(cols.get(c, {})) for c in ("ours", "ours-full")]
        ms_cell = "-" if ms == [None, None] else " / ".join(
            "-" if m is None else f"{m:.0f}" for m in ms)
        fmt = lambda x, nd=1: "-" if x is None else f"{x:.{nd}f}"
        lat = " (latency-bound)" if latency_bound(cfg) else ""
        out.append(f"| {s['name']} | {summary(cfg)}{lat} | {gemm_flops(cfg) / 1e9:.3f} "
                   f"| {fmt(o)} | {fmt(t)} | {fmt(ratio, 2) + 'x' if ratio else '-'} | {fmt(fu)} "
                   f"| {fmt(rf, 3) if rf else '-'} | {same} | {ms_cell} "
                   f"| {'; '.join(goals) or '-'} |")
    n = len(ratios)
    out += ["", f"Summary ({backend}, {len(shapes)} shapes, {n} with both times):"]
    if n:
        out.append(f"- {tname} / ours: min {min(ratios):.2f}x, median {median(ratios):.2f}x, "
                   f"max {max(ratios):.2f}x")
        out.append(f"- >= {GOAL_RATIO:g}x: {n - len(misses)} of {n}"
                   + (f" (below: {', '.join(misses)})" if misses else ""))
        out.append(f"- latency-bound (batch <= {LATENCY_BATCH}, widths <= {LATENCY_WIDTH}) "
                   f">= {GOAL_LATENCY_RATIO:g}x: {lat_ok} of {lat_n}")
    out.append(f"- within {100 * (GOAL_FULL - 1):.0f}% of the exhaustive plan: "
               + (f"{full_ok} of {full_n}" if full_note is None else full_note))
    if mode != "graph":
        out.append(f"- the goals are the H200's against PyTorch's CUDA graph; against PyTorch "
                   f"{mode} on the {backend} they only show the plumbing")
    wall = {}
    for r in rows:
        if "wall_seconds" in r:
            wall[r["column"]] = wall.get(r["column"], 0.0) + r["wall_seconds"]
    if wall:
        out.append("- wall time of the measurements: " + ", ".join(
            f"{k} {v:.1f} s" for k, v in wall.items()))
    out += [f"- not run ({k}, --time-limit): {', '.join(v)}" for k, v in skipped.items()]
    out += [f"- error: {e}" for e in errors]
    return "\n".join(out)


def environment(args, suite):
    lines = [f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
             f"host: {platform.platform()}; {os.cpu_count()} cores; load {os.getloadavg()}",
             f"python: {sys.executable} {platform.python_version()}; torch "
             + (suite.torch.__version__ if suite.torch else "in a process per shape (--isolate)"),
             f"fhd-host: {suite.host}; OPENBLAS_NUM_THREADS="
             f"{suite.env.get('OPENBLAS_NUM_THREADS', 'unset')}; CUDA_DEVICE_MAX_CONNECTIONS="
             f"{suite.env.get('CUDA_DEVICE_MAX_CONNECTIONS', 'unset')}",
             f"suite: --n {args.n} --seed {args.seed}{' --small' if args.small else ''} "
             f"--backend {args.backend} --repeats {args.repeats}; work {args.work}",
             f"exhaustive plan column: {suite.full_note or 'measured'}"]
    try:
        info = subprocess.run([suite.host, "info"], env=suite.env, capture_output=True,
                              text=True, timeout=60).stdout
        lines += [l for l in info.splitlines() if l.startswith(("version", "  cpu", "  cuda"))]
    except (OSError, subprocess.TimeoutExpired):
        pass
    if suite.dev is not None and suite.dev.type == "cuda":
        lines.append(f"gpu: {suite.torch.cuda.get_device_name(suite.dev)}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=24, help="shapes (default 24)")
    ap.add_argument("--seed", type=int, default=1, help="the draw's seed (default 1)")
    ap.add_argument("--small", action="store_true", help="cap the shapes for a small CPU")
    ap.add_argument("--print", action="store_true", help="print the configs and exit")
    ap.add_argument("--configs-only", action="store_true",
                    help="write WORK/configs/NAME.json and exit")
    ap.add_argument("--backend", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--build", default=None,
                    help="the build folder with fhd-host (default .device/build, else build)")
    ap.add_argument("--out", default=None, help="results folder (required to time)")
    ap.add_argument("--work", default=None,
                    help="configs and autotune caches (default: a new temporary folder)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per measurement")
    ap.add_argument("--full-repeats", type=int, default=3,
                    help="timed runs of the exhaustive-plan column")
    ap.add_argument("--updates", type=int, default=None, help="updates per timed run")
    ap.add_argument("--run-seconds", type=float, default=0.1,
                    help="target length of a timed run without --updates (0.1; at least 1000 "
                    "updates on CUDA)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up updates")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads of both (OPENBLAS_NUM_THREADS, torch.set_num_threads)")
    ap.add_argument("--no-full", action="store_true", help="skip the exhaustive-plan column")
    ap.add_argument("--isolate", action="store_true",
                    help="run torch_reference.py in a process per shape (slower: torch is "
                    "imported each time), so no CUDA context of PyTorch lives beside fhd-host's")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="start no new shape after this many seconds")
    ap.add_argument("--run-timeout", type=float, default=300.0,
                    help="seconds one fhd-host bench may take")
    ap.add_argument("--seed-learner", type=int, default=1, help="the learners' seed")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("--n must be >= 1")
    shapes = generate(args.n, args.seed, args.small)
    if args.print:
        for s in shapes:
            print(json.dumps(s))
        return 0
    if args.work is None:
        args.work = tempfile.mkdtemp(prefix="fhd-shapes-")
    paths = write_configs(shapes, os.path.join(args.work, "configs"))
    if args.configs_only:
        print("\n".join(paths))
        return 0
    if not args.out:
        ap.error("--out DIR is needed to time the shapes")
    if args.build is None:
        dev_build = os.path.join(REPO, ".device", "build")
        args.build = dev_build if os.path.exists(os.path.join(dev_build, "fhd-host")) \
            else os.path.join(REPO, "build")
    os.makedirs(args.out, exist_ok=True)
    suite = Suite(args)
    with open(os.path.join(args.out, "env.txt"), "w") as f:
        f.write(environment(args, suite))
    suite.note(f"shapes: {args.n} from seed {args.seed}; configs in {args.work}/configs; "
               f"exhaustive plan: {suite.full_note or 'measured'}")
    rows = suite.run(shapes, paths)
    with open(os.path.join(args.out, "table.md")) as f:
        print(f.read())
    return 1 if all("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
