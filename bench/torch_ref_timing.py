"""bench/torch_ref_timing.py - how bench/torch_reference.py times the Learner: the run modes,
the replay fill, warm-up and timed runs, act latency and the result dict of one (config, mode).

Modes: eager (CPU and CUDA); graph: the whole update captured into one torch.cuda.CUDAGraph
with static buffers, warmed up on a side stream as PyTorch documents (Adam capturable=True);
compile: torch.compile of the sampling + forward + loss and of the optimizer step (failures
are caught and reported in the JSON as "error").

Timing (as fhd-host bench): fill the replay with min(capacity, max(16 B, 65536)) (or --fill)
synthetic transitions in calls of --envs (64) transitions (uniform obs in [-1, 1), uniform bytes
for uint8, rewards in [-1, 1), uniform actions, 1% terminals); warm up for 0.3 s; --repeats (7)
runs of N updates (N for about --run-seconds (0.25) a run, >= 1000 on CUDA); per-run
microseconds per update from perf_counter on CPU and CUDA events around the N updates on
CUDA; median, p10, p90 (numpy.percentile's interpolation).
act: greedy, host observations in (uint8 for uint8 configs, pageable memory), host actions
out, 1 and 64 observations, median of 2000.
CPU threads: torch.set_num_threads(--threads, default os.cpu_count()); reported as "threads".
"""
import math
import os
import platform
import time

import torch

from torch_ref_config import gemm_flops_per_update, load_config
from torch_ref_learner import Learner


def percentile(v, q):
    v = sorted(v)
    pos = q / 100.0 * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)



# ---- modes: a function that runs n updates --------------------------------------------------

def make_eager(lr):
    def run(n):
        for _ in range(n):
            lr.step()
            lr.target_update()
    return run


def make_graph(lr):
    """The whole update captured once into a CUDA graph and replayed (static buffers)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as the CUDA graphs docs do
        for _ in range(3):
            lr.step()
            lr.target_update()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    lr.opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss, td, idx = lr.loss_fn()
        loss.backward()
        lr.after_backward()
        lr.opt.step()
        lr.priority_update(td, idx)
        lr.loss.copy_(loss.detach())

    def run(n):
        for _ in range(n):
            g.replay()
            lr.target_update()
    return run


def make_compile(lr):
    loss_fn = torch.compile(lr.loss_fn)

    @torch.compile(fullgraph=False)
    def opt_step():
        lr.opt.step()

    def one():
        loss, td, idx = loss_fn()
        lr.opt.zero_grad(set_to_none=True)
        loss.backward()
        lr.after_backward()
        opt_step()
        lr.priority_update(td, idx)
        lr.loss = loss.detach()
        lr.target_update()

    def run(n):
        for _ in range(n):
            one()
    return run


# ---- the benchmark --------------------------------------------------------------------------

def synthetic(cfg, rows, envs, seed):
    """rows + envs + 1 observations (n, *obs_shape), as fhd-host bench makes them: uniform
    bytes for uint8, uniform in [-1, 1) for float32; rewards, 1% terminals, actions."""
    g = torch.Generator().manual_seed(seed)
    n = rows + envs + 1
    shape = tuple(cfg["obs_shape"]) if cfg.get("obs_shape") else (cfg["obs_dim"],)
    if cfg["obs_dtype"] == "uint8":
        obs = torch.randint(0, 256, (n,) + shape, dtype=torch.uint8, generator=g)
    else:
        obs = torch.rand((n,) + shape, generator=g) * 2 - 1
    rew = torch.rand(n, generator=g) * 2 - 1
    term = torch.rand(n, generator=g) < 0.01
    act = torch.stack([torch.randint(0, k, (n,), generator=g) for k in cfg["actions"]], 1)
    return obs, rew, term, act


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_runs(run, dev, n, repeats, cpu=None):
    """Per-run microseconds per update: CUDA events on the GPU, perf_counter on the CPU.
    cpu (a list) receives the process CPU microseconds per update of each run."""
    out = []
    for _ in range(repeats):
        c0 = time.process_time()
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run(n)
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e3 / n)
        else:
            t0 = time.perf_counter()
            run(n)
            out.append((time.perf_counter() - t0) * 1e6 / n)
        if cpu is not None:
            cpu.append((time.process_time() - c0) * 1e6 / n)
    return out


def bench_one(preset, mode, args, dev):
    return bench_config(load_config(preset), preset, mode, args, dev)


def bench_config(cfg, label, mode, args, dev):
    """Time one resolved config in one mode; the result dict (with "error" on failure).
    args: seed, envs, warmup, updates, repeats, act_calls (0: no act timing), peak_tflops,
    tf32, and optionally fill (None: the default), channels_last and bf16 (the attributes of
    this script's command line)."""
    cfg = dict(cfg, seed=args.seed)
    chl = bool(getattr(args, "channels_last", False)) and bool(cfg["conv"])
    res = {"preset": label, "impl": "pytorch", "mode": mode, "backend": "torch-" + mode,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_model(),
           "torch_version": torch.__version__, "threads": torch.get_num_threads(),
           "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
           "batch_size": cfg["batch_size"], "tf32": bool(args.tf32),
           "bf16": bool(getattr(args, "bf16", False)),
           "matmul_precision": cfg.get("matmul_precision", "fp32"),
           "obs_dtype": cfg["obs_dtype"]}
    if cfg["conv"]:
        res.update(memory_format="channels_last" if chl else "nchw",
                   cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
                   cudnn_version=torch.backends.cudnn.version() if dev.type == "cuda" else None,
                   replay_layout="obs and next_obs per transition, (N, C, H, W) "
                                 + cfg["obs_dtype"] + " each, on the device")
    if mode != "eager" and dev.type != "cuda":
        res["error"] = f"mode {mode} needs CUDA"
        return res
    if mode == "compile" and not hasattr(torch, "compile"):
        res["error"] = f"torch {torch.__version__} has no torch.compile"
        return res
    B, envs = cfg["batch_size"], args.envs
    fill = getattr(args, "fill", None) or min(cfg["replay_capacity"], max(16 * B, 65536))
    fill = -(-fill // envs) * envs
    fill = min(fill, cfg["replay_capacity"])
    lr = Learner(cfg, dev, capturable=(mode == "graph"), channels_last=chl,
                 bf16=getattr(args, "bf16", False))
    rows = max(128, min(4096, (16 << 20) // cfg["obs_dim"]))
    obs, rew, term, act = synthetic(cfg, rows, envs, args.seed)
    lr.alloc_replay(fill)
    sync(dev)
    t0 = time.perf_counter()
    done = 0
    for c in range(fill // envs + (fill % envs > 0)):
        n = min(envs, fill - done)
        off = (c * envs) % rows
        lr.observe(obs[off:off + n], act[off:off + n], rew[off:off + n],
                   obs[off + 1:off + 1 + n], term[off:off + n])
        done += n
    sync(dev)
    res.update(fill=fill, replay_size=fill, observe_envs=envs,
               observe_per_second=fill / (time.perf_counter() - t0))
    try:
        make = {"eager": make_eager, "graph": make_graph, "compile": make_compile}[mode]
        t0 = time.perf_counter()
        run = make(lr)
        # warm-up: growing chunks for 0.3 s (or --warmup N); the last chunk estimates t
        warm, est, chunk = 0, None, (100 if dev.type == "cuda" else 5)
        if args.warmup is not None:
            if args.warmup:
                est = time_runs(run, dev, args.warmup, 1)[0]
            warm = args.warmup
        else:
            ts = time.perf_counter()
            while True:
                est = time_runs(run, dev, chunk, 1)[0]
                warm += chunk
                chunk *= 2
                if time.perf_counter() - ts > 0.3 or warm > 100000:
                    break
        res["setup_seconds"] = time.perf_counter() - t0
        if est is None:
            est = time_runs(run, dev, 10, 1)[0]
        run_s = getattr(args, "run_seconds", None) or 0.25
        n = args.updates or int(min(1e6, max(10, math.ceil(run_s * 1e6 / est))))
        if dev.type == "cuda" and not args.updates:
            n = max(n, 1000)
        cpu = []
        runs = time_runs(run, dev, n, args.repeats, cpu)
    except Exception as exc:  # torch.compile / capture failures are results too
        res["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return res
    loss = float(lr.loss)
    if not math.isfinite(loss):
        res["error"] = f"non-finite loss {loss}"
        return res
    med = percentile(runs, 50)
    flops = gemm_flops_per_update(cfg)
    res.update(warmup=warm, updates=n, repeats=args.repeats,
               timing="CUDA events around N updates" if dev.type == "cuda"
               else "perf_counter around N updates",
               us_per_update_min=min(runs), us_per_update_p10=percentile(runs, 10),
               us_per_update_median=med, us_per_update_p90=percentile(runs, 90),
               us_per_update_max=max(runs), us_per_update_runs=sorted(runs),
               cpu_us_per_update_median=percentile(cpu, 50),
               updates_per_second=1e6 / med, samples_per_second=1e6 / med * B,
               gemm_flops_per_update=flops, tflops=flops * 1e6 / med / 1e12,
               peak_tflops=args.peak_tflops,
               peak_fraction=(flops * 1e6 / med / 1e12 / args.peak_tflops
                              if args.peak_tflops else None),
               loss_last=loss)
    for m in ((1, 64) if args.act_calls > 0 else ()):  # greedy act latency, host in, host out
        lat = []
        for i in range(args.act_calls + 20):
            x = obs[(i * m) % (rows - m):][:m]
            t0 = time.perf_counter()
            lr.act(x)
            if i >= 20:
                lat.append((time.perf_counter() - t0) * 1e6)
        res[f"act_us_{m}"] = percentile(lat, 50)
        res[f"act_us_{m}_p90"] = percentile(lat, 90)
    res["act_calls"] = args.act_calls
    return res


def release(dev):
    """Give the caching allocator's memory back between configs (graphs hold pools)."""
    import gc
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def sgemm_rate(dev, n=4096, reps=5):
    a = torch.rand(n, n, device=dev)
    b = torch.rand(n, n, device=dev)
    for _ in range(2):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return {"preset": "sgemm", "impl": "pytorch", "sgemm_n": n,
            "sgemm_gflops": 2.0 * n ** 3 / best / 1e9, "device": str(dev),
            "threads": torch.get_num_threads(), "torch_version": torch.__version__}
