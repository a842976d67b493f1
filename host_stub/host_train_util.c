/* host_train_util.c - option values, run configs, learner creation, metrics, checkpoints and
 * greedy evaluation for `fhd-host train` and `fhd-host eval` (see host_train_util.h). */
#include "host_train_util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- command line -------------------------------------------------------------------------- */

int fhd_host_parse_u64(const char *opt, const char *text, uint64_t lo, uint64_t hi, uint64_t *out) {
    const char *s = text;
    uint64_t v = 0;
    int overflow = 0;
    if (!*s)
        goto bad;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            goto bad;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
    }
    if (overflow || v < lo || v > hi) {
        fprintf(stderr, "error: %s is %s; allowed: [%llu, %llu]\n", opt, text,
                (unsigned long long)lo, (unsigned long long)hi);
        return FHD_EXIT_USAGE;
    }
    *out = v;
    return FHD_EXIT_OK;
bad:
    fprintf(stderr, "error: %s needs a non-negative integer, got \"%s\"\n", opt, text);
    return FHD_EXIT_USAGE;
}

const fhd_env_spec *fhd_host_find_env(const char *id) {
    const fhd_env_spec *spec = fhd_env_find(id);
    if (spec)
        return spec;
    char known[256] = {0};
    size_t n = 0;
    for (const char *const *e = fhd_env_ids(); *e; e++)
        n += (size_t)snprintf(known + n, n < sizeof known ? sizeof known - n : 0, "%s%s",
                              n ? ", " : "", *e);
    fprintf(stderr, "error: unknown environment \"%s\"; known: %s\n", id, known);
    return NULL;
}

/* ---- the learner's config -------------------------------------------------------------------- */

static int readable(const char *path) {
    return access(path, R_OK) == 0;
}

/* Directory part of `path` into out ("." when there is none). */
static void dir_of(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

int fhd_host_default_config(const char *env_id, const char *plugin_path, char *out, size_t cap) {
    char dirs[6][4096];
    int nd = 0;
    const char *env = getenv("FHD_CONFIG_DIR");
    if (env && *env)
        snprintf(dirs[nd++], sizeof dirs[0], "%s", env);
    snprintf(dirs[nd++], sizeof dirs[0], "configs");
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char base[2][4096];
    int nb = 0;
    if (n > 0) {
        exe[n] = '\0';
        dir_of(exe, base[nb++], sizeof base[0]);
    }
    if (plugin_path && *plugin_path)
        dir_of(plugin_path, base[nb++], sizeof base[0]);
    for (int b = 0; b < nb; b++) {
        snprintf(dirs[nd++], sizeof dirs[0], "%.4000s/configs", base[b]);
        snprintf(dirs[nd++], sizeof dirs[0], "%.4000s/../configs", base[b]);
    }
    for (int d = 0; d < nd; d++) {
        snprintf(out, cap, "%.4000s/%s.json", dirs[d], env_id);
        if (readable(out))
            return 0;
    }
    snprintf(out, cap, "configs/%s.json", env_id);
    return -1;
}

static void warn_replaced(const char *path, json_t *root, const char *key, json_t *value,
                          const char *env_id) {
    json_t *old = json_object_get(root, key);
    if (old && !json_equal(old, value)) {
        char *a = json_dumps(old, JSON_COMPACT | JSON_ENCODE_ANY);
        char *b = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(stderr, "warning: config %s: %s %s replaced by %s (the spaces of %s)\n", path, key,
                a ? a : "?", b ? b : "?", env_id);
        free(a);
        free(b);
    }
    json_object_set_new(root, key, value);
}

/* Read and parse a config file (a JSON object). */
static int read_config_file(const char *path, json_t **out) {
    size_t len = 0;
    char *text = fhd_host_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "error: cannot read config %s: %s\n", path, strerror(errno));
        return FHD_EXIT_CONFIG;
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root) {
        fprintf(stderr, "error: config %s: invalid JSON at line %d, column %d: %s\n", path, je.line,
                je.column, je.text);
        return FHD_EXIT_CONFIG;
    }
    if (!json_is_object(root)) {
        fprintf(stderr, "error: config %s: expected a JSON object\n", path);
        json_decref(root);
        return FHD_EXIT_CONFIG;
    }
    *out = root;
    return FHD_EXIT_OK;
}

/* The recorded config must be for the environment's spaces. */
static int check_recorded_spaces(const fhd_host_config_req *req) {
    json_t *obs = json_object_get(req->recorded, "obs_dim");
    json_t *act = json_object_get(req->recorded, "actions");
    json_t *want = json_pack("[i]", req->env->num_actions);
    int same = json_is_integer(obs) && json_integer_value(obs) == req->env->obs_dim &&
               json_equal(act, want);
    json_decref(want);
    if (same)
        return FHD_EXIT_OK;
    char *a = json_dumps(act, JSON_COMPACT | JSON_ENCODE_ANY);
    fprintf(stderr,
            "error: checkpoint %s: its learner has obs_dim %lld and actions %s; %s has obs_dim %d "
            "and actions [%d]\n",
            req->recorded_from, (long long)json_integer_value(obs), a ? a : "?", req->env->id,
            req->env->obs_dim, req->env->num_actions);
    free(a);
    return FHD_EXIT_IO;
}

int fhd_host_config_build(const fhd_host_config_req *req, fhd_host_config *out) {
    memset(out, 0, sizeof(*out));
    const int use_recorded = req->recorded && req->recorded_is_base;
    json_t *root = NULL, *file = NULL;
    if (req->config_path) {
        snprintf(out->path, sizeof out->path, "%s", req->config_path);
    } else if (use_recorded) {
        snprintf(out->path, sizeof out->path, "%s (recorded config)", req->recorded_from);
    } else if (fhd_host_default_config(req->env->id, req->plugin_path, out->path,
                                       sizeof out->path) != 0) {
        fprintf(stderr,
                "error: cannot find the default config %s (looked in $FHD_CONFIG_DIR, ./configs "
                "and beside fhd-host and the plugin); pass --config FILE\n",
                out->path);
        return FHD_EXIT_CONFIG;
    }
    if ((req->config_path || !use_recorded)) {
        int rc = read_config_file(out->path, &file);
        if (rc != FHD_EXIT_OK)
            return rc;
    }
    if (use_recorded) {
        int rc = check_recorded_spaces(req);
        if (rc != FHD_EXIT_OK) {
            json_decref(file);
            return rc;
        }
        root = json_deep_copy(req->recorded);
        /* an explicit config changes only what a resumed learner may change */
        json_t *keys = json_object_get(req->manifest, "resume_overridable");
        size_t i;
        json_t *k;
        json_array_foreach(keys, i, k) {
            json_t *v = file ? json_object_get(file, json_string_value(k)) : NULL;
            if (v)
                json_object_set(root, json_string_value(k), v);
        }
        json_decref(file);
    } else {
        root = file;
        if (req->recorded && !req->have_seed) {
            json_t *seed = json_object_get(req->recorded, "seed");
            if (json_is_integer(seed))
                json_object_set(root, "seed", seed);
        }
    }
    if (!root) {
        fprintf(stderr, "error: config %s: out of memory\n", out->path);
        return FHD_EXIT_FAILURE;
    }
    const fhd_env_spec *env = req->env;
    warn_replaced(out->path, root, "obs_dim", json_integer(env->obs_dim), env->id);
    warn_replaced(out->path, root, "actions", json_pack("[i]", env->num_actions), env->id);
    if (req->have_seed)
        json_object_set_new(root, "seed", json_integer((json_int_t)req->seed));
    if (req->backend)
        json_object_set_new(root, "backend", json_string(req->backend));
    if (req->num_envs)
        json_object_set_new(root, "num_envs", json_integer((json_int_t)req->num_envs));
    /* the values the learner will see (a wrong type is reported by init) */
    json_t *seed = json_object_get(root, "seed");
    json_t *ne = json_object_get(root, "num_envs");
    out->seed = json_is_integer(seed) && json_integer_value(seed) > 0
                    ? (uint64_t)json_integer_value(seed)
                    : 0;
    out->num_envs =
        json_is_integer(ne) && json_integer_value(ne) > 0 && json_integer_value(ne) <= 65536
            ? (uint32_t)json_integer_value(ne)
            : 1;
    out->json = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!out->json) {
        fprintf(stderr, "error: config %s: out of memory\n", out->path);
        return FHD_EXIT_FAILURE;
    }
    return FHD_EXIT_OK;
}

void fhd_host_config_free(fhd_host_config *c) {
    free(c->json);
    c->json = NULL;
}

int fhd_host_learner_create(const fhd_host_plugin *p, const fhd_host_config *c, fhd_learner **out) {
    fhd_error err = FHD_ERROR_INIT;
    *out = NULL;
    int32_t st = p->api->init(c->json, strlen(c->json), out, &err);
    if (st == FHD_OK)
        return FHD_EXIT_OK;
    char what[4200];
    snprintf(what, sizeof what, "config %s", c->path);
    fhd_host_print_error(p, what, &err);
    return st == FHD_ERR_BACKEND_UNAVAILABLE || st == FHD_ERR_OUT_OF_MEMORY ? FHD_EXIT_FAILURE
                                                                            : FHD_EXIT_CONFIG;
}

json_t *fhd_host_metrics(const fhd_host_plugin *p, fhd_learner *L) {
    size_t need = 0;
    int32_t st = p->api->metrics(L, NULL, 0, &need);
    char *buf = NULL;
    for (int tries = 0; st == FHD_OK && tries < 3; tries++) {
        free(buf);
        buf = malloc(need + 256);
        if (!buf)
            break;
        st = p->api->metrics(L, buf, need + 256, &need);
        if (st != FHD_ERR_BUFFER_TOO_SMALL)
            break;
        st = FHD_OK;
    }
    if (!buf || st != FHD_OK) {
        fprintf(stderr, "error: metrics: %s\n", buf ? p->api->last_error(L) : "out of memory");
        free(buf);
        return NULL;
    }
    json_error_t je;
    json_t *m = json_loads(buf, 0, &je);
    if (!m || !json_is_object(m))
        fprintf(stderr, "error: metrics: the library returned invalid JSON: %s\n", je.text);
    free(buf);
    if (m && !json_is_object(m)) {
        json_decref(m);
        m = NULL;
    }
    return m;
}

double fhd_host_metric(const json_t *m, const char *key) {
    json_t *v = json_object_get(m, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

int fhd_host_checkpoint_save(const fhd_host_plugin *p, fhd_learner *L, const char *path,
                             fhd_host_ckpt_state *st) {
    if (st->unsupported)
        return FHD_EXIT_OK;
    int32_t rc = p->api->checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY);
    if (rc == FHD_OK) {
        st->saved++;
        return FHD_EXIT_OK;
    }
    if (rc == FHD_ERR_NOT_IMPLEMENTED) {
        st->unsupported = 1;
        fprintf(stderr, "warning: checkpoints are not supported by this plugin (%s): %s\n",
                p->api->status_name(rc), p->api->last_error(L));
        return FHD_EXIT_OK;
    }
    fprintf(stderr, "error: checkpoint %s: %s: %s\n", path, p->api->status_name(rc),
            p->api->last_error(L));
    return FHD_EXIT_IO;
}

json_t *fhd_host_checkpoint_config(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char len8[8];
    json_t *cfg = NULL;
    char *header = NULL;
    if (fread(len8, 1, 8, f) != 8)
        goto done;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i]; /* little-endian, as safetensors writes it */
    if (n < 2 || n > (64u << 20))
        goto done;
    header = malloc((size_t)n);
    if (!header || fread(header, 1, (size_t)n, f) != n)
        goto done;
    json_t *h = json_loadb(header, (size_t)n, 0, NULL);
    const char *text =
        json_string_value(json_object_get(json_object_get(h, "__metadata__"), "config"));
    if (text)
        cfg = json_loads(text, 0, NULL);
    json_decref(h);
    if (cfg && !json_is_object(cfg)) {
        json_decref(cfg);
        cfg = NULL;
    }
done:
    free(header);
    fclose(f);
    return cfg;
}

int fhd_host_checkpoint_load(const fhd_host_plugin *p, fhd_learner *L, const char *path,
                             uint32_t flags) {
    int32_t rc = p->api->checkpoint_load(L, path, flags);
    if (rc == FHD_OK)
        return FHD_EXIT_OK;
    fprintf(stderr, "error: checkpoint %s: %s: %s\n", path, p->api->status_name(rc),
            p->api->last_error(L));
    return FHD_EXIT_IO;
}

/* ---- greedy evaluation ----------------------------------------------------------------------- */

#define EVAL_MAX_COPIES 16

typedef struct eval_bufs {
    float *obs, *final_obs, *rew;
    uint8_t *term, *trunc;
    int32_t *act;
    double *ret;
    uint32_t *len, *done, *quota, *base;
} eval_bufs;

static void eval_bufs_free(eval_bufs *b) {
    free(b->obs);
    free(b->final_obs);
    free(b->rew);
    free(b->term);
    free(b->trunc);
    free(b->act);
    free(b->ret);
    free(b->len);
    free(b->done);
    free(b->quota);
    free(b->base);
}

static int render_frame(FILE *f, const fhd_venv *v) {
    char frame[FHD_ENV_RENDER_CAP];
    if (fhd_venv_render_ascii(v, 0, frame, sizeof frame) < 0)
        return -1;
    fputs(frame, f);
    fputc('\n', f);
    return 0;
}

int fhd_host_evaluate(const fhd_host_plugin *p, fhd_learner *L, const char *env_id,
                      uint32_t episodes, uint64_t env_seed, FILE *render,
                      volatile const sig_atomic_t *stop, fhd_host_eval_result *out) {
    memset(out, 0, sizeof(*out));
    const uint32_t E = episodes < EVAL_MAX_COPIES ? episodes : EVAL_MAX_COPIES;
    char err[256];
    fhd_venv *v = fhd_venv_create(env_id, (int)E, env_seed, err, sizeof err);
    if (!v) {
        fprintf(stderr, "error: evaluation environment: %s\n", err);
        return FHD_EXIT_FAILURE;
    }
    const uint32_t S = (uint32_t)fhd_venv_spec(v)->obs_dim;
    eval_bufs b = {0};
    b.obs = malloc(sizeof(float) * E * S);
    b.final_obs = malloc(sizeof(float) * E * S);
    b.rew = malloc(sizeof(float) * E);
    b.term = malloc(E);
    b.trunc = malloc(E);
    b.act = malloc(sizeof(int32_t) * E);
    b.ret = calloc(E, sizeof(double));
    b.len = calloc(E, sizeof(uint32_t));
    b.done = calloc(E, sizeof(uint32_t));
    b.quota = calloc(E, sizeof(uint32_t));
    b.base = calloc(E, sizeof(uint32_t));
    out->returns = calloc(episodes, sizeof(double));
    out->lengths = calloc(episodes, sizeof(uint32_t));
    int rc = FHD_EXIT_OK;
    if (!b.obs || !b.final_obs || !b.rew || !b.term || !b.trunc || !b.act || !b.ret || !b.len ||
        !b.done || !b.quota || !b.base || !out->returns || !out->lengths) {
        fprintf(stderr, "error: evaluation: out of memory\n");
        rc = FHD_EXIT_FAILURE;
        goto done;
    }
    /* copy i runs a fixed share of the episodes: no bias towards short episodes */
    for (uint32_t i = 0, acc = 0; i < E; i++) {
        b.quota[i] = episodes / E + (i < episodes % E);
        b.base[i] = acc;
        acc += b.quota[i];
    }
    const double t0 = fhd_host_now();
    fhd_venv_reset(v, b.obs);
    if (render)
        render_frame(render, v);
    uint32_t remaining = episodes;
    while (remaining > 0) {
        if (stop && *stop) {
            rc = FHD_EXIT_INTERRUPTED;
            goto done;
        }
        fhd_act_args a = FHD_ACT_ARGS_INIT;
        a.num_obs = E;
        a.obs = b.obs;
        a.actions = b.act;
        a.explore = 0;
        int32_t st = p->api->act(L, &a);
        if (st != FHD_OK) {
            fprintf(stderr, "error: evaluation: act: %s: %s\n", p->api->status_name(st),
                    p->api->last_error(L));
            rc = FHD_EXIT_FAILURE;
            goto done;
        }
        if (fhd_venv_step(v, b.act, b.obs, b.final_obs, b.rew, b.term, b.trunc) != 0) {
            fprintf(stderr, "error: evaluation: the learner chose an action out of range\n");
            rc = FHD_EXIT_FAILURE;
            goto done;
        }
        out->env_steps += E;
        for (uint32_t i = 0; i < E; i++) {
            if (b.done[i] >= b.quota[i])
                continue;
            b.ret[i] += b.rew[i];
            b.len[i]++;
            if (render && i == 0 && b.done[0] == 0) {
                if (b.term[0] || b.trunc[0])
                    fprintf(render, "episode end: return %.2f, length %u, %s\n\n", b.ret[0],
                            b.len[0], b.term[0] ? "terminated" : "truncated");
                else
                    render_frame(render, v);
            }
            if (b.term[i] || b.trunc[i]) {
                const uint32_t k = b.base[i] + b.done[i];
                out->returns[k] = b.ret[i];
                out->lengths[k] = b.len[i];
                b.done[i]++;
                b.ret[i] = 0.0;
                b.len[i] = 0;
                remaining--;
            }
        }
    }
    double sum = 0.0, sq = 0.0;
    for (uint32_t k = 0; k < episodes; k++)
        sum += out->returns[k];
    out->mean = sum / episodes;
    for (uint32_t k = 0; k < episodes; k++)
        sq += (out->returns[k] - out->mean) * (out->returns[k] - out->mean);
    out->std = sqrt(sq / episodes);
    out->episodes = episodes;
    out->seconds = fhd_host_now() - t0;
done:
    eval_bufs_free(&b);
    fhd_venv_destroy(v);
    if (rc != FHD_EXIT_OK)
        fhd_host_eval_free(out);
    return rc;
}

void fhd_host_eval_free(fhd_host_eval_result *r) {
    free(r->returns);
    free(r->lengths);
    r->returns = NULL;
    r->lengths = NULL;
}

void fhd_host_eval_print(FILE *f, const fhd_host_eval_result *r) {
    fprintf(f, "eval_return_mean=%.2f eval_return_std=%.2f episodes=%u\n", r->mean, r->std,
            r->episodes);
    fflush(f);
}

double fhd_host_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
