/* ckpt_common.h - shared pieces of the checkpoint tests: a deterministic synthetic vector
 * environment driven through step(), whole-learner comparisons through the public ABI, file
 * helpers, and an independent reader/writer of the safetensors header (jansson) with the
 * format's CRC-64/XZ, used to craft damaged or edited files. */
#ifndef CKPT_COMMON_H
#define CKPT_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fhd_file.h"
#include "fhd_test.h"

static inline double ck_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- synthetic environment: S = 4, D = 2 branches (3 and 2 actions) ----------------------- */

#define SY_S 4
#define SY_D 2
#define SY_MAX_E 8

typedef struct synth_env {
    float s[SY_S];
    uint32_t t, id;
    uint64_t episode;
} synth_env;

static inline void synth_reset(synth_env *e) {
    e->t = 0;
    e->episode++;
    uint64_t k = e->episode * 7 + (uint64_t)e->id * 13;
    for (int i = 0; i < SY_S; i++)
        e->s[i] = (float)((k * (uint64_t)(i + 3)) % 17) / 17.0f - 0.5f;
}

/* Deterministic dynamics: actions move the state, episodes terminate when |s0| > 1.5 and are
 * truncated after 20 + 5 id steps. */
static inline void synth_step(synth_env *e, const int32_t *a, float *r, uint8_t *term,
                              uint8_t *trunc) {
    const float u = (float)a[0] - 1.0f, w = (float)a[1] - 0.5f;
    float *s = e->s;
    float n0 = 0.9f * s[0] + 0.1f * s[1] + 0.35f * u;
    float n1 = 0.8f * s[1] - 0.1f * s[0] + 0.15f * w;
    float n2 = 0.5f * s[2] + 0.5f * s[3] * s[0];
    float n3 = 0.95f * s[3] + 0.05f * u * w;
    s[0] = n0, s[1] = n1, s[2] = n2, s[3] = n3;
    *r = 1.0f - n0 * n0 - 0.5f * n1 * n1 + 0.1f * u * n2;
    e->t++;
    *term = fabsf(n0) > 1.5f;
    *trunc = !*term && e->t >= 20 + 5 * e->id;
}

typedef struct synth_run {
    uint32_t E;
    synth_env env[SY_MAX_E];
    float obs[SY_MAX_E * SY_S], final_obs[SY_MAX_E * SY_S], rew[SY_MAX_E];
    uint8_t term[SY_MAX_E], trunc[SY_MAX_E];
    int32_t act[SY_MAX_E * SY_D];
    int started;
    uint64_t steps;
} synth_run;

static inline void synth_init(synth_run *r, uint32_t E) {
    memset(r, 0, sizeof *r);
    r->E = E;
    for (uint32_t e = 0; e < E; e++) {
        r->env[e].id = e;
        synth_reset(&r->env[e]);
        memcpy(r->obs + e * SY_S, r->env[e].s, sizeof(float) * SY_S);
    }
}

/* Drive L with step() until it has done `target` updates (or max_steps calls). Returns the
 * update count reached, or -1 when a call failed. */
static inline int64_t synth_run_until(const fhd_api_v1 *api, fhd_learner *L, synth_run *r,
                                      uint64_t target, uint64_t max_steps) {
    uint64_t updates = 0;
    for (uint64_t k = 0; k < max_steps; k++) {
        fhd_step_args a = FHD_STEP_ARGS_INIT;
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        a.num_envs = r->E;
        a.actions = r->act;
        a.stats = &st;
        if (r->started) {
            for (uint32_t e = 0; e < r->E; e++) {
                synth_env *ev = &r->env[e];
                synth_step(ev, r->act + e * SY_D, &r->rew[e], &r->term[e], &r->trunc[e]);
                memcpy(r->final_obs + e * SY_S, ev->s, sizeof(float) * SY_S);
                if (r->term[e] || r->trunc[e])
                    synth_reset(ev);
                memcpy(r->obs + e * SY_S, ev->s, sizeof(float) * SY_S);
            }
            a.rewards = r->rew;
            a.terminated = r->term;
            a.truncated = r->trunc;
            a.final_obs = r->final_obs;
        }
        a.obs = r->obs;
        int32_t rc = api->step(L, &a);
        if (rc != FHD_OK) {
            printf("step failed: %s: %s\n", api->status_name(rc), api->last_error(L));
            return -1;
        }
        r->started = 1;
        r->steps++;
        if (st.updates_done)
            updates = st.update_index;
        if (updates >= target)
            break;
    }
    return (int64_t)updates;
}

/* ---- whole-learner state through the ABI -------------------------------------------------- */

typedef struct snapshot {
    uint32_t n;
    char names[512][96];
    float *vals[512];
    uint64_t counts[512];
    char metrics[8][64]; /* counters and statistics that describe state (no timings) */
} snapshot;

static const char *const snap_metric_keys[8] = {"env_steps",
                                                "updates",
                                                "episodes",
                                                "replay_size",
                                                "epsilon",
                                                "episode_return_last",
                                                "episode_return_mean_100",
                                                "replay_capacity"};

static inline void snap_take(const fhd_api_v1 *api, fhd_learner *L, snapshot *s) {
    memset(s, 0, sizeof *s);
    for (uint32_t i = 0; i < 512; i++) {
        fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
        if (api->tensor_info(L, i, &ti) != FHD_OK)
            break;
        snprintf(s->names[i], 96, "%s", ti.name);
        s->counts[i] = ti.count;
        s->vals[i] = malloc(sizeof(float) * (ti.count ? ti.count : 1));
        api->tensor_read(L, ti.name, s->vals[i], ti.count);
        s->n = i + 1;
    }
    char buf[8192];
    size_t need = 0;
    api->metrics(L, buf, sizeof buf, &need);
    json_t *m = json_loads(buf, 0, NULL);
    for (int k = 0; k < 8; k++) {
        char *v = m ? json_dumps(json_object_get(m, snap_metric_keys[k]), JSON_ENCODE_ANY) : NULL;
        snprintf(s->metrics[k], 64, "%s", v ? v : "?");
        free(v);
    }
    json_decref(m);
}

static inline void snap_free(snapshot *s) {
    for (uint32_t i = 0; i < s->n; i++)
        free(s->vals[i]);
    s->n = 0;
}

/* Number of differing tensors/metrics (bitwise), printing the first few when verbose. grad.*
 * (the last update's gradient) is not part of a checkpoint: skip it with skip_grad. */
static inline int snap_diff_ex(const snapshot *a, const snapshot *b, int verbose, int skip_grad) {
    int diffs = 0;
    if (a->n != b->n)
        return 1000;
    for (uint32_t i = 0; i < a->n; i++) {
        if (skip_grad && strncmp(a->names[i], "grad.", 5) == 0)
            continue;
        if (strcmp(a->names[i], b->names[i]) || a->counts[i] != b->counts[i] ||
            memcmp(a->vals[i], b->vals[i], sizeof(float) * a->counts[i])) {
            if (verbose && diffs < 5)
                printf("  tensor %s differs\n", a->names[i]);
            diffs++;
        }
    }
    for (int k = 0; k < 8; k++)
        if (strcmp(a->metrics[k], b->metrics[k])) {
            if (verbose && diffs < 5)
                printf("  metric %s: %s vs %s\n", snap_metric_keys[k], a->metrics[k],
                       b->metrics[k]);
            diffs++;
        }
    return diffs;
}

static inline int snap_diff(const snapshot *a, const snapshot *b, int verbose) {
    return snap_diff_ex(a, b, verbose, 0);
}

/* Whether L's tensors and state metrics still equal *before bitwise (the differences printed):
 * the check that a refused call left the learner unchanged. */
static inline int snap_unchanged(const fhd_api_v1 *api, fhd_learner *L, const snapshot *before) {
    snapshot now;
    snap_take(api, L, &now);
    const int d = snap_diff(before, &now, 1);
    snap_free(&now);
    return d == 0;
}

/* mkdir -p; returns 0 when the directory exists afterwards. */
static inline int make_dirs(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++) {
        if (*c == '/') {
            *c = '\0';
            mkdir(p, 0755);
            *c = '/';
        }
    }
    mkdir(p, 0755);
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* The checkpoint tests' start, `PROG LIBRARY SCRATCH_DIR`: the plugin loaded into *api and the
 * scratch directory created and copied into dir (cap bytes). Returns -1 when the test goes on,
 * else the exit code it returns (2: usage, 1: no directory). */
static inline int ckpt_start(int argc, char **argv, const fhd_api_v1 **api, char *dir,
                             size_t cap) {
    if (argc < 3) {
        printf("usage: %s <libfoxhunt_dqn.so> <scratch dir>\n", argv[0]);
        return 2;
    }
    *api = fhd_test_load(argv[1], NULL);
    snprintf(dir, cap, "%s", argv[2]);
    if (make_dirs(dir) != 0) {
        printf("FAIL cannot create %s\n", dir);
        return 1;
    }
    return -1;
}

/* ---- files -------------------------------------------------------------------------------- */


static inline int file_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

/* Save L to `path` and return the file's bytes (NULL on failure). */
static inline unsigned char *save_bytes(const fhd_api_v1 *api, fhd_learner *L, const char *path,
                                        uint32_t flags, size_t *len) {
    int32_t rc = api->checkpoint_save(L, path, flags);
    if (rc != FHD_OK) {
        printf("save failed: %s: %s\n", api->status_name(rc), api->last_error(L));
        return NULL;
    }
    return fhd_test_read_file(path, len);
}

/* ---- independent safetensors reader/writer and the format's checksums ---------------------- */

static inline uint64_t ck_crc64(uint64_t crc, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t r = ~crc;
    while (n--) { /* bitwise reference implementation */
        r ^= *p++;
        for (int k = 0; k < 8; k++)
            r = (r & 1) ? (r >> 1) ^ UINT64_C(0xC96C5795D7870F42) : r >> 1;
    }
    return ~r;
}

typedef struct st_file {
    json_t *header;
    unsigned char *data; /* data section */
    size_t data_len;
} st_file;

static inline int st_parse(const unsigned char *b, size_t len, st_file *f) {
    memset(f, 0, sizeof *f);
    if (len < 8)
        return -1;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    if (n > len - 8)
        return -1;
    f->header = json_loadb((const char *)b + 8, n, JSON_REJECT_DUPLICATES, NULL);
    f->data_len = len - 8 - n;
    f->data = malloc(f->data_len ? f->data_len : 1);
    memcpy(f->data, b + 8 + n, f->data_len);
    return f->header ? 0 : -1;
}

static inline void st_free(st_file *f) {
    json_decref(f->header);
    free(f->data);
}

static inline int by_str(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Recompute checksum.__metadata__ as docs/checkpoints.md defines it. */
static inline void st_restamp_metadata(st_file *f) {
    json_t *m = json_object_get(f->header, "__metadata__");
    const char *keys[256];
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (strncmp(key, "checksum.", 9) != 0 && k < 256)
            keys[k++] = key;
    }
    qsort(keys, k, sizeof(char *), by_str);
    uint64_t h = 0;
    const unsigned char zero = 0;
    for (size_t i = 0; i < k; i++) {
        const char *val = json_string_value(json_object_get(m, keys[i]));
        h = ck_crc64(h, keys[i], strlen(keys[i]));
        h = ck_crc64(h, &zero, 1);
        h = ck_crc64(h, val, strlen(val));
        h = ck_crc64(h, &zero, 1);
    }
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    json_object_set_new(m, "checksum.__metadata__", json_string(hex));
}

/* Byte range of tensor `name` in the data section. */
static inline int st_range(const st_file *f, const char *name, size_t *b, size_t *e) {
    json_t *o = json_object_get(json_object_get(f->header, name), "data_offsets");
    if (!o)
        return -1;
    *b = (size_t)json_integer_value(json_array_get(o, 0));
    *e = (size_t)json_integer_value(json_array_get(o, 1));
    return 0;
}

static inline void st_restamp_tensor(st_file *f, const char *name) {
    size_t b, e;
    if (st_range(f, name, &b, &e) != 0)
        return;
    char key[128], hex[17];
    snprintf(key, sizeof key, "checksum.%s", name);
    snprintf(hex, sizeof hex, "%016" PRIx64, ck_crc64(0, f->data + b, e - b));
    json_object_set_new(json_object_get(f->header, "__metadata__"), key, json_string(hex));
}

static inline int st_write(const char *path, const st_file *f, const unsigned char *tail,
                           size_t tail_len) {
    char *h = json_dumps(f->header, JSON_COMPACT | JSON_SORT_KEYS);
    size_t n = strlen(h);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(h);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)n >> (8 * i));
    fwrite(len8, 1, 8, fp);
    fwrite(h, 1, n, fp);
    fwrite(f->data, 1, f->data_len, fp);
    if (tail_len)
        fwrite(tail, 1, tail_len, fp);
    free(h);
    return fclose(fp);
}

#endif
