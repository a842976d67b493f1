"""The keywords of foxhunt_dqn.DQN, in Stable-Baselines3's units, and the learner config keys
they become: one table (PARAMS) that the code translates with and that docs_table() prints
as the documentation (python/README.md holds its output; a test keeps the two equal).

Units: N = the number of envs of the vector env; T = total_timesteps of the learn() call;
an "env step" is one transition of one env (SB3's num_timesteps counts those); a "call" is
one step() of the vector env (N env steps). The learner counts train_freq, learning_starts
and epsilon_decay_steps in env steps and target_update_interval in gradient updates.
"""

# kind: "map" (becomes learner config keys through the rule), "accept" (taken, used in Python,
# no config key), "only" (only the listed values are supported; anything else raises).
# default: SB3 2.4.1's default. rule: how the learner's keys are computed (text for the docs).
PARAMS = {
    "learning_rate": dict(kind="map", default=1e-4, keys="lr",
                          rule="a float: the same; a schedule (callable) is not supported"),
    "buffer_size": dict(kind="map", default=1_000_000, keys="replay_capacity",
                        rule="the same (transitions over all envs)"),
    "learning_starts": dict(kind="map", default=100, keys="learning_starts",
                            rule="learning_starts + 1 (SB3 trains once num_timesteps > "
                                 "learning_starts; the learner once env_steps >= it); before "
                                 "it actions are uniformly random, as in SB3"),
    "batch_size": dict(kind="map", default=32, keys="batch_size", rule="the same"),
    "tau": dict(kind="map", default=1.0, keys="tau",
                rule="the same, compounded to 1 - (1 - tau)^c when c > 1 target updates fall "
                     "between two training rounds (the online network does not move between)"),
    "gamma": dict(kind="map", default=0.99, keys="gamma", rule="the same"),
    "train_freq": dict(kind="map", default=4, keys="train_freq",
                       rule="int n or (n, \"step\"): n calls = n * N env steps; "
                            "(n, \"episode\") is not supported"),
    "gradient_steps": dict(kind="map", default=1, keys="gradient_steps",
                           rule="the same; -1 means train_freq * N (one update per env step "
                                "collected), as in SB3"),
    "target_update_interval": dict(
        kind="map", default=10000, keys="target_update_interval",
        rule="SB3 updates the target every max(interval // N, 1) calls; that is "
             "c = train_freq // max(interval // N, 1) updates per training round when c >= 1 "
             "(the learner: every gradient_steps updates, tau compounded), else every "
             "round(max(interval // N, 1) / train_freq) rounds (the learner: that many times "
             "gradient_steps updates); the phase counts from the first update, not env step 0"),
    "exploration_fraction": dict(kind="map", default=0.1, keys="epsilon_decay_steps",
                                 rule="max(1, round(exploration_fraction * T)) env steps; a later "
                                      "learn(reset_num_timesteps=False) moves the learner to "
                                      "T = num_timesteps + total_timesteps, as SB3 does"),
    "exploration_initial_eps": dict(kind="map", default=1.0, keys="epsilon_start",
                                    rule="the same"),
    "exploration_final_eps": dict(kind="map", default=0.05, keys="epsilon_end", rule="the same"),
    "max_grad_norm": dict(kind="map", default=10.0, keys="max_grad_norm",
                          rule="the same (global L2 norm clipping)"),
    "policy_kwargs": dict(kind="map", default=None, keys="hidden",
                          rule="net_arch (default [64, 64]) is hidden; activation_fn must be "
                               "ReLU; optimizer_class Adam with optimizer_kwargs eps / "
                               "weight_decay / betas (adam_eps, weight_decay, adam_beta1/2); "
                               "normalize_images is ignored; other keys raise"),
    "device": dict(kind="map", default="auto", keys="backend, device",
                   rule="\"cpu\", \"cuda\" (\"cuda:K\": device K) or \"auto\" (cuda when its "
                        "module and a GPU are there, else cpu)"),
    "seed": dict(kind="map", default=None, keys="seed",
                 rule="the same; None draws one from os.urandom; also seeds the env's first "
                      "reset and the warm-up actions"),
    "verbose": dict(kind="accept", default=0, keys="",
                    rule="0 quiet, 1 a line per log_interval episodes (Python side)"),
    "stats_window_size": dict(kind="accept", default=100, keys="",
                              rule="episodes in the recent-return mean (Python side)"),
    "replay_buffer_class": dict(kind="only", default=None, keys="", values=(None,),
                                rule="None only (uniform replay; learner_config "
                                     "{\"replay\": \"prioritized\"} for PER)"),
    "replay_buffer_kwargs": dict(kind="only", default=None, keys="", values=(None, {}),
                                 rule="None or {} (timeouts are always handled: truncated "
                                      "bootstraps, as SB3's handle_timeout_termination)"),
    "optimize_memory_usage": dict(kind="only", default=False, keys="", values=(False,),
                                  rule="False only"),
    "tensorboard_log": dict(kind="only", default=None, keys="", values=(None,),
                            rule="None only"),
    "_init_setup_model": dict(kind="only", default=True, keys="", values=(True,),
                              rule="True only"),
    "learner_config": dict(kind="map", default=None, keys="any",
                           rule="foxhunt-dqn's own keys (dueling, double_dqn, n_step, replay, "
                                "spectral_norm...), applied last; they are not SB3's"),
}

# What SB3's DQN is, in the learner's keys: plain (not double, not dueling) 1-step DQN with
# the Huber (smooth L1) loss and Adam at PyTorch's defaults.
SB3_FIXED = {
    "dueling": False,
    "double_dqn": False,
    "n_step": 1,
    "loss": "huber",
    "huber_delta": 1.0,
    "optimizer": "adam",
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-8,
    "weight_decay": 0.0,
    "replay": "uniform",
}

_POLICY_KWARGS = ("net_arch", "activation_fn", "optimizer_class", "optimizer_kwargs",
                  "normalize_images")
_OPTIMIZER_KWARGS = {"eps": "adam_eps", "weight_decay": "weight_decay"}


class UnsupportedKeyword(ValueError):
    """A DQN keyword (or value) that foxhunt_dqn does not support; names the keyword."""


def check_keywords(kwargs):
    """Raise TypeError for keywords SB3's DQN does not have, UnsupportedKeyword for values
    this implementation does not support."""
    for key in kwargs:
        if key not in PARAMS:
            raise TypeError(f"DQN: unknown keyword {key!r} (the keywords are: "
                            f"{', '.join(PARAMS)})")
    for key, p in PARAMS.items():
        if p["kind"] == "only" and key in kwargs and kwargs[key] not in p["values"]:
            raise UnsupportedKeyword(f"DQN: {key}={kwargs[key]!r} is not supported ({p['rule']})")


def _train_freq(value):
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or value[1] not in ("step", "episode"):
            raise UnsupportedKeyword(f"DQN: train_freq={value!r}: expected n or (n, \"step\")")
        if value[1] == "episode":
            raise UnsupportedKeyword("DQN: train_freq=(n, \"episode\") is not supported; the "
                                     "learner trains every n env steps: use (n, \"step\")")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedKeyword(f"DQN: train_freq={value!r}: expected an int >= 1")
    return int(value)


def _policy(policy_kwargs, cfg):
    pk = dict(policy_kwargs or {})
    for key in pk:
        if key not in _POLICY_KWARGS:
            raise UnsupportedKeyword(f"DQN: policy_kwargs[{key!r}] is not supported (supported: "
                                     f"{', '.join(_POLICY_KWARGS)})")
    arch = pk.get("net_arch", [64, 64])
    if isinstance(arch, dict) or not all(isinstance(w, int) and w > 0 for w in arch) or not arch:
        raise UnsupportedKeyword(f"DQN: policy_kwargs['net_arch']={arch!r}: expected a list "
                                 f"of layer widths")
    cfg["hidden"] = [int(w) for w in arch]
    fn = pk.get("activation_fn")
    if fn is not None and getattr(fn, "__name__", None) != "ReLU":
        raise UnsupportedKeyword(f"DQN: policy_kwargs['activation_fn']={fn!r}: only ReLU")
    opt = pk.get("optimizer_class")
    if opt is not None and getattr(opt, "__name__", None) not in ("Adam", "AdamW"):
        raise UnsupportedKeyword(f"DQN: policy_kwargs['optimizer_class']={opt!r}: Adam or AdamW")
    if opt is not None and opt.__name__ == "AdamW":
        cfg["optimizer"] = "adamw"
        cfg["weight_decay"] = 0.01  # torch.optim.AdamW's default
    for key, value in (pk.get("optimizer_kwargs") or {}).items():
        if key in _OPTIMIZER_KWARGS:
            cfg[_OPTIMIZER_KWARGS[key]] = float(value)
        elif key == "betas":
            cfg["adam_beta1"], cfg["adam_beta2"] = (float(b) for b in value)
        else:
            raise UnsupportedKeyword(f"DQN: policy_kwargs['optimizer_kwargs'][{key!r}] is not "
                                     f"supported (eps, betas, weight_decay)")


def _device(device):
    d = str(device)
    if d in ("cpu", "auto"):
        return {"backend": d}
    if d == "cuda":
        return {"backend": "cuda"}
    if d.startswith("cuda:") and d[5:].isdigit():
        return {"backend": "cuda", "device": int(d[5:])}
    raise UnsupportedKeyword(f"DQN: device={device!r}: expected \"cpu\", \"cuda\", \"cuda:K\" "
                             f"or \"auto\"")


def target_schedule(interval, num_envs, train_freq, gradient_steps, tau):
    """SB3's target update (every max(interval // N, 1) calls, tau each time) as the
    learner's (target_update_interval in updates, tau). train_freq in calls."""
    every = max(int(interval) // num_envs, 1)  # calls between SB3's target updates
    if every <= train_freq:
        copies = train_freq // every  # target updates between two training rounds
        return gradient_steps, 1.0 - (1.0 - tau) ** copies
    rounds = max(1, round(every / train_freq))
    return rounds * gradient_steps, tau


def to_config(kwargs, num_envs, total_timesteps, policy="MlpPolicy"):
    """The learner config (without obs_dim / actions / num_envs) for DQN keywords `kwargs`
    (SB3's defaults for those left out), N = num_envs, T = total_timesteps.

    policy "CnnPolicy" is SB3's NatureCNN features (three convolutions and a 512-wide
    layer) with no further q_net layers (SB3's net_arch default for NatureCNN): the
    learner's torso "nature", which defines conv and hidden itself, so net_arch is refused
    with it. learner_config may still replace the torso: conv or hidden given there without
    torso make it "custom" (a small convolution for tests and small images)."""
    check_keywords(kwargs)
    p = {k: kwargs.get(k, v["default"]) for k, v in PARAMS.items()}
    cfg = dict(SB3_FIXED)
    lr = p["learning_rate"]
    if callable(lr):
        raise UnsupportedKeyword("DQN: learning_rate as a schedule (callable) is not supported; "
                                 "pass a float")
    cfg["lr"] = float(lr)
    cfg["replay_capacity"] = int(p["buffer_size"])
    cfg["learning_starts"] = int(p["learning_starts"]) + 1
    cfg["batch_size"] = int(p["batch_size"])
    cfg["gamma"] = float(p["gamma"])
    tf = _train_freq(p["train_freq"])
    cfg["train_freq"] = tf * num_envs
    gs = int(p["gradient_steps"])
    if gs == -1:
        gs = tf * num_envs
    if gs < 1:
        raise UnsupportedKeyword(f"DQN: gradient_steps={gs}: expected >= 1 or -1")
    cfg["gradient_steps"] = gs
    cfg["target_update_interval"], cfg["tau"] = target_schedule(
        p["target_update_interval"], num_envs, tf, gs, float(p["tau"]))
    frac = float(p["exploration_fraction"])
    if not 0.0 <= frac <= 1.0:
        raise UnsupportedKeyword(f"DQN: exploration_fraction={frac}: expected [0, 1]")
    cfg["epsilon_decay_steps"] = max(1, int(round(frac * max(1, int(total_timesteps)))))
    cfg["epsilon_start"] = float(p["exploration_initial_eps"])
    cfg["epsilon_end"] = float(p["exploration_final_eps"])
    cfg["max_grad_norm"] = float(p["max_grad_norm"])
    _policy(p["policy_kwargs"], cfg)
    if policy == "CnnPolicy":
        if "net_arch" in (p["policy_kwargs"] or {}):
            raise UnsupportedKeyword("DQN: policy_kwargs['net_arch'] with CnnPolicy: the "
                                     "nature torso defines hidden [512]; pass conv and "
                                     "hidden through learner_config instead")
        del cfg["hidden"]
        cfg["torso"] = "nature"
    cfg.update(_device(p["device"]))
    if p["seed"] is not None:
        cfg["seed"] = int(p["seed"])
    extra = p["learner_config"] or {}
    if cfg.get("torso") == "nature" and "torso" not in extra and (
            "conv" in extra or "hidden" in extra):
        cfg["torso"] = "custom"
        cfg.setdefault("hidden", [64, 64])
    for key, value in extra.items():
        cfg[key] = value
    return cfg


def docs_table():
    """The mapping as a Markdown table (python/README.md, "DQN keywords")."""
    rows = ["| DQN keyword (SB3 units) | SB3 default | learner config | rule |",
            "|---|---|---|---|"]
    for key, p in PARAMS.items():
        keys = p["keys"] or ("-" if p["kind"] == "accept" else "(unsupported values raise)")
        rows.append(f"| `{key}` | `{p['default']!r}` | {keys} | {p['rule']} |")
    fixed = ", ".join(f"{k}={v!r}" for k, v in SB3_FIXED.items())
    rows.append(f"| (fixed, SB3's DQN) | | {fixed} | what SB3's DQN is; learner_config "
                f"overrides |")
    return "\n".join(rows) + "\n"
