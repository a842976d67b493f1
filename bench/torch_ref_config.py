"""bench/torch_ref_config.py - the learner configs bench/torch_reference.py runs: a config over
the defaults of manifest.json's config_schema, checked to be one this reference runs the way the
learner would, its conv geometry, and its GEMM FLOP count per update.

Config keys: those of the update (bench/torch_ref_learner.py) are implemented; the ones that do
not change an update (backend, device, exploration, the step() schedule, num_envs, autotune,
frame_stack) are ignored; n_step must be 1 (the fill stores one-step transitions);
matmul_precision other than fp32 is recorded, and TF32 is used only with --tf32, bf16 only with
--bf16; any other key is an error, so a config this script cannot run the same way is refused
rather than timed as something else.
gemm_flops_per_update: every layer as its GEMM (a conv as im2col's), as fhd-host bench counts.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PRESET_DIR = os.path.join(HERE, "presets")
PRESETS = sorted(f[:-5] for f in os.listdir(PRESET_DIR) if f.endswith(".json"))

# Keys of the update, implemented below.
UPDATE_KEYS = {
    "obs_dim", "obs_shape", "obs_dtype", "obs_scale", "conv", "torso", "actions", "hidden",
    "dueling", "spectral_norm", "double_dqn", "gamma", "loss", "huber_delta", "cql_alpha",
    "optimizer", "lr", "adam_beta1", "adam_beta2", "adam_eps", "weight_decay", "max_grad_norm",
    "target_update_interval", "tau", "batch_size", "replay_capacity", "replay", "per_alpha",
    "per_beta0", "per_beta_steps", "per_eps", "seed", "n_step", "matmul_precision"}
# Keys that do not change an update (where it runs, exploration, step()'s schedule, the plan,
# and frame_stack: how the learner's replay stores the frames of an observation, not what the
# network sees).
NO_EFFECT_KEYS = {
    "backend", "device", "learning_starts", "train_freq", "gradient_steps", "num_envs",
    "epsilon_start", "epsilon_end", "epsilon_decay_steps", "autotune", "autotune_cache",
    "frame_stack"}
# torso "nature" (Mnih et al. 2015), as plugin/config_pixels.c expands it: these convolutions,
# then hidden [512]. tests/bench/test_torch_reference.py checks it against the parity
# reference's table.
NATURE = [{"out": 32, "kernel": 8, "stride": 4}, {"out": 64, "kernel": 4, "stride": 2},
          {"out": 64, "kernel": 3, "stride": 1}]
NATURE_HIDDEN = [512]


def resolve_config(given):
    """A learner config over the defaults of manifest.json's config_schema, after checking
    that this script runs it as the learner would (see the header). Image configs come back
    with obs_dim = C H W, torso "nature" expanded into conv and hidden, conv items with their
    padding, and obs_scale resolved (0: 1/255 for uint8, 1 for float32)."""
    unknown = sorted(set(given) - UPDATE_KEYS - NO_EFFECT_KEYS)
    if unknown:
        raise ValueError(f"torch_reference.py does not implement config key(s) {unknown}")
    with open(os.path.join(REPO, "manifest.json")) as f:
        schema = json.load(f)["config_schema"]
    cfg = {k: v["default"] for k, v in schema.items() if "default" in v}
    cfg.update(given)
    if int(cfg.get("n_step", 1)) != 1:
        raise ValueError(f"n_step is {cfg['n_step']}; the bench fill stores 1-step transitions")
    shape = [int(x) for x in cfg.get("obs_shape") or []]
    if shape:
        if "obs_dim" in given:
            raise ValueError("obs_shape and obs_dim are both given (with obs_shape [C, H, W], "
                             "obs_dim is C*H*W)")
        if len(shape) != 3:
            raise ValueError(f"obs_shape {shape}: allowed [C, H, W]")
        cfg["obs_shape"], cfg["obs_dim"] = shape, shape[0] * shape[1] * shape[2]
    if cfg.get("torso") == "nature":
        for k in ("conv", "hidden"):
            if k in given:
                raise ValueError(f"torso \"nature\" defines {k}; give either torso or {k}")
        cfg["conv"], cfg["hidden"] = [dict(c) for c in NATURE], list(NATURE_HIDDEN)
    cfg["conv"] = [dict(c, padding=int(c.get("padding", 0))) for c in cfg.get("conv") or []]
    if cfg["conv"] and not shape:
        raise ValueError("conv needs image observations (obs_shape [C, H, W])")
    u8 = cfg["obs_dtype"] == "uint8"
    if not float(cfg["obs_scale"]):
        cfg["obs_scale"] = 1.0 / 255.0 if u8 else 1.0
    conv_geometry(cfg)  # every layer fits its input
    return cfg


def conv_geometry(cfg):
    """The conv torso of a resolved config as PyTorch's Conv2d computes it: a list of
    (cin, cout, k, stride, pad, hout, wout) per layer, and F, the flattened size of the last
    output (the linear torso's input; obs_dim without convolutions)."""
    if not cfg["conv"]:
        return [], cfg["obs_dim"]
    c, h, w = cfg["obs_shape"]
    out = []
    for i, cv in enumerate(cfg["conv"]):
        o, k, st, p = (int(cv[f]) for f in ("out", "kernel", "stride", "padding"))
        if h + 2 * p < k or w + 2 * p < k:
            raise ValueError(f"conv[{i}]: kernel {k} is larger than its padded input "
                             f"{h + 2 * p}x{w + 2 * p}")
        ho, wo = (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1
        out.append((c, o, k, st, p, ho, wo))
        c, h, w = o, ho, wo
    return out, c * h * w


def load_config(preset):
    """bench/presets/<preset>.json over the manifest's defaults."""
    with open(os.path.join(PRESET_DIR, preset + ".json")) as f:
        return resolve_config(json.load(f))


def load_config_file(path):
    with open(path) as f:
        given = json.load(f)
    if not isinstance(given, dict):
        raise ValueError(f"{path}: not a JSON object")
    return resolve_config(given)


def gemm_flops_per_update(cfg):
    """The formula of host_stub/host_bench_geom.c: each layer as the GEMM it is (conv c per
    image: 2 hout wout cout cin k k, im2col's GEMM; linear: 2 in out); F = B sum_l f_l per
    forward; (2 + double) forwards, backward dW for every layer and dx for all but the first:
    total (4 + double) F - B f_0."""
    B = cfg["batch_size"]
    convs, Fl = conv_geometry(cfg)
    f = [2.0 * ho * wo * o * c * k * k for (c, o, k, _, _, ho, wo) in convs]
    dims = [Fl] + list(cfg["hidden"]) + [sum(cfg["actions"]) + (1 if cfg["dueling"] else 0)]
    f += [2.0 * dims[i] * dims[i + 1] for i in range(len(dims) - 1)]
    return (4.0 + (1 if cfg["double_dqn"] else 0)) * B * sum(f) - B * f[0]
