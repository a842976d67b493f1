/* host_train.c - `fhd-host train` and `fhd-host eval`: the agent loop on the classic-control
 * environments through the ABI's `step`, logging, checkpoints and greedy evaluation. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host_cmds.h"
#include "host_plugin.h"
#include "host_train_util.h"

static const char train_usage[] =
    "usage: fhd-host train --env ENV [OPTIONS]\n"
    "\n"
    "Train a DQN learner on ENV (CartPole-v1, Acrobot-v1, MountainCar-v0) with vectorised,\n"
    "auto-resetting environments driven through the plugin's `step`, then evaluate it greedily.\n"
    "\n"
    "  --env ENV               environment (required)\n"
    "  --config FILE           learner config (default: configs/ENV.json, found in\n"
    "                          $FHD_CONFIG_DIR, ./configs, or beside fhd-host or the plugin);\n"
    "                          obs_dim and actions always come from ENV\n"
    "  --backend cpu|cuda|auto overrides the config's backend\n"
    "  --steps N               train until the learner has seen N env steps (default: the\n"
    "                          env's budget: CartPole-v1 50000, Acrobot-v1 100000,\n"
    "                          MountainCar-v0 120000); with --resume the steps already taken\n"
    "                          count towards N\n"
    "  --envs N                environments stepped together (overrides num_envs)\n"
    "  --seed S                learner and environment seed (overrides the config's seed)\n"
    "  --out DIR               output directory (default: runs/ENV-seedS)\n"
    "  --resume CHECKPOINT     load a checkpoint (with its replay buffer) before training;\n"
    "                          the seed defaults to the checkpoint's; DIR's metrics.jsonl\n"
    "                          and episodes.csv are appended to\n"
    "  --checkpoint-every N    also save DIR/checkpoint.safetensors every N env steps\n"
    "                          (default 0: only at the end and on Ctrl-C)\n"
    "  --eval-episodes N       greedy evaluation episodes at the end (default 100; 0: none)\n"
    "  --log-every N           env steps per line of DIR/metrics.jsonl (default 1000)\n"
    "  --plugin PATH           the plugin library\n"
    "\n"
    "Writes DIR/metrics.jsonl (the learner's metrics plus wall_time per interval),\n"
    "DIR/episodes.csv (episode,env,env_steps,return,length,terminated,truncated),\n"
    "DIR/checkpoint.safetensors, DIR/eval.json and DIR/learning_curve.png (with gnuplot).\n"
    "The last line is: eval_return_mean=<x> eval_return_std=<y> episodes=<n>\n"
    "Ctrl-C stops training, saves the checkpoint and exits with 130.\n";

static const char eval_usage[] =
    "usage: fhd-host eval --checkpoint FILE --env ENV [OPTIONS]\n"
    "\n"
    "Load a checkpoint into a learner built from the config it records (or, for a file\n"
    "without one, from ENV's config) and run greedy episodes.\n"
    "\n"
    "  --checkpoint FILE       the checkpoint (required)\n"
    "  --env ENV               environment (required)\n"
    "  --episodes N            episodes (default 100)\n"
    "  --render-ascii          print the frames of the first episode\n"
    "  --config FILE           change the config recorded in the checkpoint: the FILE's keys\n"
    "                          that a resumed learner may change (the manifest's\n"
    "                          resume_overridable: backend, device, ...) replace it\n"
    "  --backend cpu|cuda|auto overrides the config's backend\n"
    "  --seed S                the evaluation episodes of `train --seed S` (default: the\n"
    "                          checkpoint's seed, so eval repeats train's final evaluation)\n"
    "  --plugin PATH           the plugin library\n"
    "\n"
    "The last line is: eval_return_mean=<x> eval_return_std=<y> episodes=<n>\n";

/* Env-step budgets of the default configs (bench/LEARNING.md). */
static uint64_t default_steps(const char *env_id) {
    if (!strcmp(env_id, "CartPole-v1"))
        return 50000;
    if (!strcmp(env_id, "MountainCar-v0"))
        return 120000;
    return 100000;
}

static volatile sig_atomic_t stop_requested = 0;

static void on_sigint(int sig) {
    (void)sig;
    stop_requested = 1;
}

/* ---- command lines ------------------------------------------------------------------------- */

typedef struct run_opts {
    const char *env, *config, *backend, *out, *resume, *checkpoint;
    char plugin[4096];
    int have_seed, have_steps, render;
    uint64_t seed, steps, envs, ckpt_every, eval_episodes, log_every;
} run_opts;

static int check_backend(const char *v) {
    if (!strcmp(v, "cpu") || !strcmp(v, "cuda") || !strcmp(v, "auto"))
        return FHD_EXIT_OK;
    fprintf(stderr, "error: --backend is \"%s\"; allowed: cpu, cuda, auto\n", v);
    return FHD_EXIT_USAGE;
}

/* Options of both commands; `is_train` selects which are accepted. Returns -1 after printing
 * the help, else an FHD_EXIT_* code. */
static int parse_opts(int argc, char **argv, int is_train, run_opts *o) {
    memset(o, 0, sizeof(*o));
    fhd_host_default_plugin(o->plugin, sizeof o->plugin);
    o->eval_episodes = 100;
    o->log_every = 1000;
    for (int i = 1; i < argc; i++) {
        int bad = 0, rc = FHD_EXIT_OK;
        const char *v;
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(is_train ? train_usage : eval_usage, stdout);
            return -1;
        } else if ((v = fhd_opt(argc, argv, &i, "--env", &bad))) {
            o->env = v;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--config", &bad))) {
            o->config = v;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--plugin", &bad))) {
            snprintf(o->plugin, sizeof o->plugin, "%s", v);
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--backend", &bad))) {
            rc = check_backend(v);
            o->backend = v;
        } else if (!bad && (v = fhd_opt(argc, argv, &i, "--seed", &bad))) {
            rc = fhd_host_parse_u64("--seed", v, 0, FHD_HOST_SEED_MAX, &o->seed);
            o->have_seed = 1;
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--steps", &bad))) {
            rc = fhd_host_parse_u64("--steps", v, 1, UINT64_MAX / 2, &o->steps);
            o->have_steps = 1;
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--envs", &bad))) {
            rc = fhd_host_parse_u64("--envs", v, 1, 65536, &o->envs);
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--out", &bad))) {
            o->out = v;
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--resume", &bad))) {
            o->resume = v;
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--checkpoint-every", &bad))) {
            rc = fhd_host_parse_u64("--checkpoint-every", v, 0, UINT64_MAX / 2, &o->ckpt_every);
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--eval-episodes", &bad))) {
            rc = fhd_host_parse_u64("--eval-episodes", v, 0, 1000000, &o->eval_episodes);
        } else if (!bad && is_train && (v = fhd_opt(argc, argv, &i, "--log-every", &bad))) {
            rc = fhd_host_parse_u64("--log-every", v, 1, UINT64_MAX / 2, &o->log_every);
        } else if (!bad && !is_train && (v = fhd_opt(argc, argv, &i, "--checkpoint", &bad))) {
            o->checkpoint = v;
        } else if (!bad && !is_train && (v = fhd_opt(argc, argv, &i, "--episodes", &bad))) {
            rc = fhd_host_parse_u64("--episodes", v, 1, 1000000, &o->eval_episodes);
        } else if (!bad && !is_train && !strcmp(a, "--render-ascii")) {
            o->render = 1;
        } else if (!bad) {
            fprintf(stderr, "error: %s: unknown option \"%s\"; run fhd-host %s --help\n",
                    is_train ? "train" : "eval", a, is_train ? "train" : "eval");
            return FHD_EXIT_USAGE;
        }
        if (bad || rc != FHD_EXIT_OK)
            return FHD_EXIT_USAGE;
    }
    if (!o->env) {
        fprintf(stderr, "error: %s needs --env ENV; run fhd-host %s --help\n",
                is_train ? "train" : "eval", is_train ? "train" : "eval");
        return FHD_EXIT_USAGE;
    }
    if (!is_train && !o->checkpoint) {
        fprintf(stderr, "error: eval needs --checkpoint FILE; run fhd-host eval --help\n");
        return FHD_EXIT_USAGE;
    }
    return FHD_EXIT_OK;
}

/* Environment, plugin, config and learner of a command, in the order of their exit codes'
 * checks: unknown env (6), unreadable checkpoint (7), plugin (3, 4), config (5), learner
 * config (5). `ckpt` (may be
 * NULL) is the checkpoint the learner will load: its recorded config is the base of eval's
 * config (`recorded_is_base`) and gives train --resume its seed. */
static int setup(const run_opts *o, const char *ckpt, int recorded_is_base,
                 const fhd_env_spec **env, fhd_host_config *cfg, fhd_host_plugin *p,
                 fhd_learner **L) {
    memset(p, 0, sizeof(*p));
    memset(cfg, 0, sizeof(*cfg));
    *L = NULL;
    if (!(*env = fhd_host_find_env(o->env)))
        return FHD_EXIT_ENV;
    if (ckpt && access(ckpt, R_OK) != 0) {
        fprintf(stderr, "error: cannot read checkpoint %s: %s\n", ckpt, strerror(errno));
        return FHD_EXIT_IO;
    }
    int rc = fhd_host_load(p, o->plugin);
    if (rc != FHD_EXIT_OK)
        return rc;
    json_t *recorded = ckpt ? fhd_host_checkpoint_config(ckpt) : NULL;
    fhd_host_config_req req = {*env,    o->config,        o->plugin,         o->have_seed,
                               o->seed, o->backend,       (uint32_t)o->envs, recorded,
                               ckpt,    recorded_is_base, p->manifest};
    rc = fhd_host_config_build(&req, cfg);
    json_decref(recorded);
    if (rc != FHD_EXIT_OK)
        return rc;
    return fhd_host_learner_create(p, cfg, L);
}

static void teardown(fhd_host_config *cfg, fhd_host_plugin *p, fhd_learner *L) {
    if (L && p->api)
        p->api->destroy(L);
    fhd_host_config_free(cfg);
    fhd_host_unload(p);
}

/* ---- train --------------------------------------------------------------------------------- */

typedef struct loop_bufs {
    float *obs, *final_obs, *rew;
    uint8_t *term, *trunc;
    int32_t *act;
    double *ep_ret;
    uint64_t *ep_len;
} loop_bufs;

static int loop_bufs_alloc(loop_bufs *b, uint32_t E, uint32_t S) {
    b->obs = malloc(sizeof(float) * E * S);
    b->final_obs = malloc(sizeof(float) * E * S);
    b->rew = malloc(sizeof(float) * E);
    b->term = malloc(E);
    b->trunc = malloc(E);
    b->act = malloc(sizeof(int32_t) * E);
    b->ep_ret = calloc(E, sizeof(double));
    b->ep_len = calloc(E, sizeof(uint64_t));
    return b->obs && b->final_obs && b->rew && b->term && b->trunc && b->act && b->ep_ret &&
           b->ep_len;
}

static void loop_bufs_free(loop_bufs *b) {
    free(b->obs);
    free(b->final_obs);
    free(b->rew);
    free(b->term);
    free(b->trunc);
    free(b->act);
    free(b->ep_ret);
    free(b->ep_len);
}

static int step_failed(const fhd_host_plugin *p, fhd_learner *L, int32_t st) {
    fprintf(stderr, "error: step: %s: %s\n", p->api->status_name(st), p->api->last_error(L));
    return FHD_EXIT_FAILURE;
}

/* Log an interval: metrics.jsonl line, curve point, plain line. */
static int log_interval(const fhd_host_plugin *p, fhd_learner *L, fhd_host_runlog *log,
                        int progress_only) {
    json_t *m = fhd_host_metrics(p, L);
    if (!m)
        return FHD_EXIT_FAILURE;
    if (progress_only) {
        fhd_host_runlog_progress(log, m);
    } else {
        fhd_host_runlog_interval(log, m);
        fhd_host_runlog_progress(log, m);
    }
    json_decref(m);
    return FHD_EXIT_OK;
}

/* The agent loop from `start` to `target` env steps. Returns an FHD_EXIT_* code; *steps
 * receives the env steps reached. */
static int agent_loop(const fhd_host_plugin *p, fhd_learner *L, const run_opts *o, fhd_venv *venv,
                      fhd_host_runlog *log, const char *ckpt_path, fhd_host_ckpt_state *ck,
                      uint64_t start, uint64_t target, uint64_t *steps) {
    const uint32_t E = (uint32_t)fhd_venv_num_envs(venv);
    const uint32_t S = (uint32_t)fhd_venv_spec(venv)->obs_dim;
    loop_bufs b = {0};
    int rc = FHD_EXIT_OK;
    *steps = start;
    if (!loop_bufs_alloc(&b, E, S)) {
        fprintf(stderr, "error: train: out of memory\n");
        loop_bufs_free(&b);
        return FHD_EXIT_FAILURE;
    }
    fhd_venv_reset(venv, b.obs);
    fhd_step_args sa = FHD_STEP_ARGS_INIT;
    sa.num_envs = E;
    sa.obs = b.obs;
    sa.actions = b.act;
    int32_t st = p->api->step(L, &sa); /* first call: act only */
    if (st != FHD_OK) {
        rc = step_failed(p, L, st);
        goto done;
    }
    sa.rewards = b.rew;
    sa.terminated = b.term;
    sa.truncated = b.trunc;
    sa.final_obs = b.final_obs;
    uint64_t next_log = (start / o->log_every + 1) * o->log_every;
    uint64_t next_ckpt = o->ckpt_every ? (start / o->ckpt_every + 1) * o->ckpt_every : 0;
    uint64_t logged_at = start;
    double last_refresh = fhd_host_now();
    while (*steps < target && !stop_requested) {
        if (fhd_venv_step(venv, b.act, b.obs, b.final_obs, b.rew, b.term, b.trunc) != 0) {
            fprintf(stderr, "error: train: the learner chose an action out of range\n");
            rc = FHD_EXIT_FAILURE;
            goto done;
        }
        const uint64_t now_steps = *steps + E;
        for (uint32_t i = 0; i < E; i++) {
            b.ep_ret[i] += b.rew[i];
            b.ep_len[i]++;
            if (b.term[i] || b.trunc[i]) {
                fhd_host_runlog_episode(log, i, now_steps, b.ep_ret[i], b.ep_len[i], b.term[i],
                                        b.trunc[i]);
                b.ep_ret[i] = 0.0;
                b.ep_len[i] = 0;
            }
        }
        st = p->api->step(L, &sa);
        if (st != FHD_OK) {
            rc = step_failed(p, L, st);
            goto done;
        }
        *steps = now_steps;
        if (*steps >= next_log) {
            if ((rc = log_interval(p, L, log, 0)) != FHD_EXIT_OK)
                goto done;
            logged_at = *steps;
            while (next_log <= *steps)
                next_log += o->log_every;
        }
        if (next_ckpt && *steps >= next_ckpt) {
            if (!ck->saved && !ck->unsupported) /* the first save may print a warning */
                fhd_host_runlog_end_line(log);
            if ((rc = fhd_host_checkpoint_save(p, L, ckpt_path, ck)) != FHD_EXIT_OK)
                goto done;
            while (next_ckpt <= *steps)
                next_ckpt += o->ckpt_every;
        }
        if (log->tty) {
            double t = fhd_host_now();
            if (t - last_refresh >= 0.1) {
                last_refresh = t;
                if ((rc = log_interval(p, L, log, 1)) != FHD_EXIT_OK)
                    goto done;
            }
        }
    }
    if (logged_at != *steps)
        rc = log_interval(p, L, log, 0);
done:
    loop_bufs_free(&b);
    return rc;
}

int fhd_cmd_train(int argc, char **argv) {
    run_opts o;
    int rc = parse_opts(argc, argv, 1, &o);
    if (rc != FHD_EXIT_OK)
        return rc < 0 ? FHD_EXIT_OK : rc;
    const fhd_env_spec *env;
    fhd_host_config cfg;
    fhd_host_plugin p;
    fhd_learner *L;
    fhd_venv *venv = NULL;
    fhd_host_runlog log;
    fhd_host_ckpt_state ck = {0, 0};
    fhd_host_eval_result ev = {0};
    int log_open = 0;
    memset(&log, 0, sizeof log);
    rc = setup(&o, o.resume, 0, &env, &cfg, &p, &L);
    if (rc != FHD_EXIT_OK)
        goto out;
    if (o.resume) {
        if ((rc = fhd_host_checkpoint_load(&p, L, o.resume, FHD_CKPT_INCLUDE_REPLAY)) !=
            FHD_EXIT_OK)
            goto out;
    }
    json_t *m0 = fhd_host_metrics(&p, L);
    if (!m0) {
        rc = FHD_EXIT_FAILURE;
        goto out;
    }
    const uint64_t start = (uint64_t)fhd_host_metric(m0, "env_steps");
    const uint64_t first_episode = (uint64_t)fhd_host_metric(m0, "episodes");
    printf("fhd-host train: %s, config %s, backend %s (%s), seed %llu, %u env%s\n", env->id,
           cfg.path, json_string_value(json_object_get(m0, "backend")),
           json_string_value(json_object_get(m0, "device")), (unsigned long long)cfg.seed,
           cfg.num_envs, cfg.num_envs == 1 ? "" : "s");
    const char *fallback = json_string_value(json_object_get(m0, "backend_fallback_reason"));
    if (fallback && *fallback)
        printf("backend auto fell back to cpu: %s\n", fallback);
    json_decref(m0);
    const uint64_t target = o.have_steps ? o.steps : default_steps(env->id);
    char out_dir[4096], ckpt_path[4200];
    if (o.out)
        snprintf(out_dir, sizeof out_dir, "%s", o.out);
    else
        snprintf(out_dir, sizeof out_dir, "runs/%s-seed%llu", env->id,
                 (unsigned long long)cfg.seed);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/checkpoint.safetensors", out_dir);
    if ((rc = fhd_host_runlog_open(&log, out_dir, env->id, target, first_episode,
                                   o.resume != NULL)) != FHD_EXIT_OK)
        goto out;
    log_open = 1;
    if (start)
        printf("resumed from %s at %llu env steps\n", o.resume, (unsigned long long)start);
    /* resumed runs see fresh episodes, not a replay of the first ones */
    const uint64_t env_seed = start ? cfg.seed ^ (start * 0x9e3779b97f4a7c15ull) : cfg.seed;
    char err[256];
    venv = fhd_venv_create(env->id, (int)cfg.num_envs, env_seed, err, sizeof err);
    if (!venv) {
        fprintf(stderr, "error: train: %s\n", err);
        rc = FHD_EXIT_FAILURE;
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the process at once */
    sigaction(SIGINT, &sa, NULL);
    const double t0 = fhd_host_now();
    uint64_t steps = start;
    rc = agent_loop(&p, L, &o, venv, &log, ckpt_path, &ck, start, target, &steps);
    const double train_s = fhd_host_now() - t0;
    fhd_host_runlog_end_line(&log);
    if (rc != FHD_EXIT_OK)
        goto out;
    if ((rc = fhd_host_checkpoint_save(&p, L, ckpt_path, &ck)) != FHD_EXIT_OK)
        goto out;
    json_t *m1 = fhd_host_metrics(&p, L);
    double updates = m1 ? fhd_host_metric(m1, "updates") : 0.0;
    json_decref(m1);
    printf("trained %llu env steps (%llu in this run), %.0f updates in %.2f s (%.0f env steps/s)"
           "%s%s\n",
           (unsigned long long)steps, (unsigned long long)(steps - start), updates, train_s,
           train_s > 0 ? (double)(steps - start) / train_s : 0.0, ck.saved ? "; checkpoint " : "",
           ck.saved ? ckpt_path : "");
    if (stop_requested) {
        printf("interrupted at %llu env steps%s%s\n", (unsigned long long)steps,
               ck.saved ? "; continue with the same command and --resume " : "",
               ck.saved ? ckpt_path : "");
        fhd_host_runlog_plot(&log, NULL);
        rc = FHD_EXIT_INTERRUPTED;
        goto out;
    }
    if (o.eval_episodes > 0) {
        const uint64_t eval_seed = cfg.seed ^ FHD_HOST_EVAL_SEED_SALT;
        rc = fhd_host_evaluate(&p, L, env->id, (uint32_t)o.eval_episodes, eval_seed, NULL,
                               &stop_requested, &ev);
        if (rc != FHD_EXIT_OK)
            goto out;
        fhd_host_runlog_eval(&log, &ev, eval_seed);
        fhd_host_runlog_plot(&log, &ev);
        rc = fhd_host_runlog_close(&log);
        log_open = 0;
        if (rc == FHD_EXIT_OK)
            fhd_host_eval_print(stdout, &ev);
    } else {
        fhd_host_runlog_plot(&log, NULL);
    }
out:
    if (log_open) {
        int crc = fhd_host_runlog_close(&log);
        if (rc == FHD_EXIT_OK)
            rc = crc;
    }
    fhd_host_eval_free(&ev);
    fhd_venv_destroy(venv);
    teardown(&cfg, &p, L);
    fflush(stdout);
    return rc;
}

/* ---- eval ---------------------------------------------------------------------------------- */

int fhd_cmd_eval(int argc, char **argv) {
    run_opts o;
    int rc = parse_opts(argc, argv, 0, &o);
    if (rc != FHD_EXIT_OK)
        return rc < 0 ? FHD_EXIT_OK : rc;
    const fhd_env_spec *env;
    fhd_host_config cfg;
    fhd_host_plugin p;
    fhd_learner *L;
    fhd_host_eval_result ev = {0};
    /* --seed picks the evaluation episodes; the learner keeps the checkpoint's seed */
    const int have_seed = o.have_seed;
    o.have_seed = 0;
    rc = setup(&o, o.checkpoint, 1, &env, &cfg, &p, &L);
    if (rc != FHD_EXIT_OK)
        goto out;
    if ((rc = fhd_host_checkpoint_load(&p, L, o.checkpoint, 0)) != FHD_EXIT_OK)
        goto out;
    const uint64_t seed = have_seed ? o.seed : cfg.seed;
    rc = fhd_host_evaluate(&p, L, env->id, (uint32_t)o.eval_episodes,
                           seed ^ FHD_HOST_EVAL_SEED_SALT, o.render ? stdout : NULL, NULL, &ev);
    if (rc == FHD_EXIT_OK)
        fhd_host_eval_print(stdout, &ev);
out:
    fhd_host_eval_free(&ev);
    teardown(&cfg, &p, L);
    return rc;
}
