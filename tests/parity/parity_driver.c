/* parity_driver.c - drives the plugin through the public ABI on deterministic batches and
 * records everything the PyTorch reference (torch_reference.py) needs to check the update.
 *
 * Usage:
 *   parity_driver PLUGIN.so CONFIG.json OUT.bin --batch B --actions K0,K1,... [--updates K]
 *                 [--nstep N --gamma G] [--weights] [--seed S] [--checkpoint PATH]
 *
 * The learner is created from CONFIG.json (a learner config, nothing else). --batch and
 * --actions repeat the config's batch_size and actions so that this program needs no JSON
 * parser. Each of the K updates gets a fresh batch from the driver's own RNG:
 *   obs, next_obs (B, S) ~ N(0, 1) (obs_dtype "uint8": uniform bytes in [0, 255], passed in
 *   the ABI 1.1 obs_u8 fields); actions (B, D) uniform in [0, K_d); rewards (B) ~ 1.5 N(0, 1);
 *   terminated (B) with probability 0.1; with --nstep N, discounts (B) = G^m, m uniform in 1..N;
 *   with --weights, importance weights (B) uniform in [0.05, 1).
 *
 * Output file (little endian): the 8 bytes "FHDPAR01", then records
 *   u32 name_len, name (no NUL), u32 dtype (0 f32, 1 i32, 2 u8), u32 ndim, u64 dims[ndim], data
 * with these names:
 *   meta.config, meta.manifest       u8 text: the config given to init, the plugin's manifest
 *   s0.<tensor>                      every named tensor of the learner before the first update
 *   b<k>.obs .actions .rewards .next_obs .terminated [.discounts] [.weights]   batch of update k
 *   u<k>.stats                       f32 [loss, td_abs_mean, q_mean, grad_norm, update_index]
 *   u<k>.td (B, D), u<k>.targets (B) TD errors and targets returned by train_batch
 *   u<k>.metrics                     u8 text: the metrics JSON after update k
 *   s<k>.<tensor>                    every named tensor after update k (online.*, target.*,
 *                                    grad.*, adam.m.*, adam.v.*, sn.online.*, sn.target.*)
 *   ck.q (B, KT), ck.actions (B, D)  with --checkpoint: after update K the learner is saved to
 *                                    PATH and act (greedy) runs on b<K>.obs: its Q-values
 *   meta.end                         i32 [K]: the file is complete
 * Exit status: 0 on success, 2 on any error (with a message on stderr).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foxhunt_dqn.h"

#define MAX_TENSORS 256
#define MAX_BRANCHES 64

enum { DT_F32 = 0, DT_I32 = 1, DT_U8 = 2 };

static FILE *out_file;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "parity_driver: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

/* ---- output records --------------------------------------------------------------------- */

static void put(const void *p, size_t n) {
    if (n && fwrite(p, 1, n, out_file) != n)
        die("write failed", NULL);
}

static void record(const char *name, uint32_t dtype, uint32_t ndim, const uint64_t *dims,
                   const void *data) {
    static const size_t elem[3] = {4, 4, 1};
    uint32_t len = (uint32_t)strlen(name);
    uint64_t count = 1;
    for (uint32_t i = 0; i < ndim; i++)
        count *= dims[i];
    put(&len, 4);
    put(name, len);
    put(&dtype, 4);
    put(&ndim, 4);
    put(dims, sizeof(uint64_t) * ndim);
    put(data, (size_t)count * elem[dtype]);
}

static void record1(const char *name, uint32_t dtype, uint64_t n, const void *data) {
    record(name, dtype, 1, &n, data);
}

static void record2(const char *name, uint32_t dtype, uint64_t rows, uint64_t cols,
                    const void *data) {
    uint64_t dims[2] = {rows, cols};
    record(name, dtype, 2, dims, data);
}

/* ---- the driver's RNG: splitmix64 seeding an xorshift64* stream ------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void) {
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(2685821657736338717);
}

static void rng_seed(uint64_t seed) {
    uint64_t z = seed + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    rng_state = (z ^ (z >> 31)) | 1u;
}

static double rng_u01(void) {
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static uint32_t rng_below(uint32_t n) {
    return (uint32_t)(rng_u01() * n) % n;
}

static float rng_normal(void) {
    double u1 = rng_u01(), u2 = rng_u01();
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

/* ---- plugin ----------------------------------------------------------------------------- */

static const fhd_api_v1 *load_api(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        die("dlopen failed", dlerror());
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(lib, FHD_ENTRY_SYMBOL);
    if (!entry)
        die("the plugin does not export " FHD_ENTRY_SYMBOL, NULL);
    const fhd_api_base *base = entry();
    if (!base || base->abi_major < 1)
        die("the plugin provides no ABI major >= 1", NULL);
    fhd_error err = FHD_ERROR_INIT;
    const fhd_api_v1 *api = (const fhd_api_v1 *)base->get_api(1, &err);
    if (!api)
        die("get_api(1) failed", err.message);
    if (!FHD_API_HAS(api, tensor_write))
        die("the v1 table lacks the tensor functions", NULL);
    return api;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open", path);
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 > cap) {
            cap = 2 * cap + 4096;
            char *nb = (char *)realloc(buf, cap);
            if (!nb)
                die("out of memory", NULL);
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

typedef struct {
    fhd_tensor_info info[MAX_TENSORS];
    uint32_t count;
    float *scratch; /* max count floats */
} tensor_set;

static void list_tensors(const fhd_api_v1 *api, fhd_learner *L, tensor_set *ts) {
    uint64_t maxc = 1;
    ts->count = 0;
    for (uint32_t i = 0;; i++) {
        fhd_tensor_info info = FHD_TENSOR_INFO_INIT;
        int32_t rc = api->tensor_info(L, i, &info);
        if (rc == FHD_ERR_NOT_FOUND)
            break;
        if (rc != FHD_OK)
            die("tensor_info failed", api->last_error(L));
        if (ts->count == MAX_TENSORS)
            die("more tensors than the driver can hold", NULL);
        ts->info[ts->count++] = info;
        if (info.count > maxc)
            maxc = info.count;
    }
    if (ts->count == 0)
        die("the learner lists no tensors", NULL);
    ts->scratch = (float *)malloc(sizeof(float) * maxc);
    if (!ts->scratch)
        die("out of memory", NULL);
}

/* Records every tensor as "<prefix>.<name>". */
static void snapshot(const fhd_api_v1 *api, fhd_learner *L, const tensor_set *ts,
                     const char *prefix) {
    char name[160];
    for (uint32_t i = 0; i < ts->count; i++) {
        const fhd_tensor_info *t = &ts->info[i];
        int32_t rc = api->tensor_read(L, t->name, ts->scratch, t->count);
        if (rc != FHD_OK)
            die("tensor_read failed", api->last_error(L));
        snprintf(name, sizeof name, "%s.%s", prefix, t->name);
        uint64_t dims[4] = {t->shape[0], t->shape[1], t->shape[2], t->shape[3]};
        record(name, DT_F32, t->rank, dims, ts->scratch);
    }
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct {
    const char *plugin, *config, *out, *checkpoint;
    uint32_t B, D, K[MAX_BRANCHES], updates, nstep, weights;
    double gamma;
    uint64_t seed;
} options;

static void usage(void) {
    die("usage: parity_driver PLUGIN.so CONFIG.json OUT.bin --batch B --actions K0,K1,... "
        "[--updates K] [--nstep N --gamma G] [--weights] [--seed S] [--checkpoint PATH]",
        NULL);
}

static void parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof(*o));
    o->updates = 20;
    o->seed = 12345;
    if (argc < 4)
        usage();
    o->plugin = argv[1];
    o->config = argv[2];
    o->out = argv[3];
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--weights") == 0) {
            o->weights = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--batch") == 0) {
            o->B = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--updates") == 0) {
            o->updates = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--nstep") == 0) {
            o->nstep = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--gamma") == 0) {
            o->gamma = strtod(v, NULL);
        } else if (strcmp(a, "--checkpoint") == 0) {
            o->checkpoint = v;
        } else if (strcmp(a, "--seed") == 0) {
            o->seed = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--actions") == 0) {
            const char *p = v;
            while (*p) {
                char *end;
                unsigned long k = strtoul(p, &end, 10);
                if (end == p || k < 2 || o->D == MAX_BRANCHES)
                    usage();
                o->K[o->D++] = (uint32_t)k;
                p = *end == ',' ? end + 1 : end;
            }
        } else {
            usage();
        }
    }
    if (o->B == 0 || o->D == 0 || o->updates == 0 || (o->nstep && o->gamma <= 0.0))
        usage();
}

int main(int argc, char **argv) {
    options o;
    parse_args(argc, argv, &o);
    const fhd_api_v1 *api = load_api(o.plugin);

    size_t cfg_len;
    char *cfg = read_text(o.config, &cfg_len);
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    int32_t rc = api->init(cfg, cfg_len, &L, &err);
    if (rc != FHD_OK) {
        fprintf(stderr, "parity_driver: init failed: %s at %s: %s\n", api->status_name(rc),
                err.path, err.message);
        return 2;
    }
    tensor_set ts;
    list_tensors(api, L, &ts);
    if (!FHD_API_HAS(api, obs_info))
        die("the library lacks obs_info (ABI 1.1)", NULL);
    fhd_obs_info oi = FHD_OBS_INFO_INIT;
    if (api->obs_info(L, &oi) != FHD_OK)
        die("obs_info failed", api->last_error(L));
    const uint32_t S = oi.size;
    const int u8 = oi.dtype == FHD_OBS_DTYPE_UINT8;

    out_file = fopen(o.out, "wb");
    if (!out_file)
        die("cannot create", o.out);
    put("FHDPAR01", 8);
    record1("meta.config", DT_U8, cfg_len, cfg);
    const char *manifest = api->manifest();
    record1("meta.manifest", DT_U8, strlen(manifest), manifest);
    snapshot(api, L, &ts, "s0");

    const uint32_t B = o.B, D = o.D;
    float *obs = malloc(sizeof(float) * B * S), *next = malloc(sizeof(float) * B * S);
    float *rew = malloc(sizeof(float) * B), *disc = malloc(sizeof(float) * B);
    float *w = malloc(sizeof(float) * B), *y = malloc(sizeof(float) * B);
    float *td = malloc(sizeof(float) * B * D);
    int32_t *act = malloc(sizeof(int32_t) * B * D);
    uint8_t *term = malloc(B), *obs8 = malloc((size_t)B * S), *next8 = malloc((size_t)B * S);
    if (!obs || !next || !rew || !disc || !w || !y || !td || !act || !term || !obs8 || !next8)
        die("out of memory", NULL);

    rng_seed(o.seed);
    char name[64];
    for (uint32_t k = 1; k <= o.updates; k++) {
        for (uint32_t i = 0; i < B * S; i++) {
            if (u8)
                obs8[i] = (uint8_t)rng_below(256);
            else
                obs[i] = rng_normal();
        }
        for (uint32_t i = 0; i < B * S; i++) {
            if (u8)
                next8[i] = (uint8_t)rng_below(256);
            else
                next[i] = rng_normal();
        }
        for (uint32_t i = 0; i < B; i++) {
            for (uint32_t d = 0; d < D; d++)
                act[i * D + d] = (int32_t)rng_below(o.K[d]);
            rew[i] = 1.5f * rng_normal();
            term[i] = rng_u01() < 0.1 ? 1 : 0;
            disc[i] = o.nstep ? (float)pow(o.gamma, (double)(1 + rng_below(o.nstep))) : 0.0f;
            w[i] = o.weights ? (float)(0.05 + 0.95 * rng_u01()) : 1.0f;
        }
        fhd_batch batch = FHD_BATCH_INIT;
        batch.batch_size = B;
        batch.obs = u8 ? NULL : obs;
        batch.obs_u8 = u8 ? obs8 : NULL;
        batch.actions = act;
        batch.rewards = rew;
        batch.next_obs = u8 ? NULL : next;
        batch.next_obs_u8 = u8 ? next8 : NULL;
        batch.terminated = term;
        batch.discounts = o.nstep ? disc : NULL;
        batch.weights = o.weights ? w : NULL;
        batch.td_errors = td;
        batch.targets = y;
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        rc = api->train_batch(L, &batch, &st);
        if (rc != FHD_OK)
            die("train_batch failed", api->last_error(L));
        if (st.updates_done != 1 || st.update_index != k)
            die("train_batch: stats report the wrong update count", NULL);

        snprintf(name, sizeof name, "b%u.obs", k);
        if (u8)
            record2(name, DT_U8, B, S, obs8);
        else
            record2(name, DT_F32, B, S, obs);
        snprintf(name, sizeof name, "b%u.actions", k);
        record2(name, DT_I32, B, D, act);
        snprintf(name, sizeof name, "b%u.rewards", k);
        record1(name, DT_F32, B, rew);
        snprintf(name, sizeof name, "b%u.next_obs", k);
        if (u8)
            record2(name, DT_U8, B, S, next8);
        else
            record2(name, DT_F32, B, S, next);
        snprintf(name, sizeof name, "b%u.terminated", k);
        record1(name, DT_U8, B, term);
        if (o.nstep) {
            snprintf(name, sizeof name, "b%u.discounts", k);
            record1(name, DT_F32, B, disc);
        }
        if (o.weights) {
            snprintf(name, sizeof name, "b%u.weights", k);
            record1(name, DT_F32, B, w);
        }
        float stats[5] = {st.loss, st.td_abs_mean, st.q_mean, st.grad_norm, (float)st.update_index};
        snprintf(name, sizeof name, "u%u.stats", k);
        record1(name, DT_F32, 5, stats);
        snprintf(name, sizeof name, "u%u.td", k);
        record2(name, DT_F32, B, D, td);
        snprintf(name, sizeof name, "u%u.targets", k);
        record1(name, DT_F32, B, y);
        {
            static char mt[1 << 16];
            size_t need = 0;
            if (api->metrics(L, mt, sizeof mt, &need) != FHD_OK)
                die("metrics failed", api->last_error(L));
            snprintf(name, sizeof name, "u%u.metrics", k);
            record1(name, DT_U8, strlen(mt), mt);
        }
        snprintf(name, sizeof name, "s%u", k);
        snapshot(api, L, &ts, name);
    }
    if (o.checkpoint) {
        uint32_t KT = 0;
        for (uint32_t d = 0; d < D; d++)
            KT += o.K[d];
        float *q = malloc(sizeof(float) * B * KT);
        if (!q)
            die("out of memory", NULL);
        if (api->checkpoint_save(L, o.checkpoint, 0) != FHD_OK)
            die("checkpoint_save failed", api->last_error(L));
        fhd_act_args a = FHD_ACT_ARGS_INIT;
        a.num_obs = B;
        a.obs = u8 ? NULL : obs;
        a.obs_u8 = u8 ? obs8 : NULL;
        a.actions = act;
        a.q_values = q;
        if (api->act(L, &a) != FHD_OK)
            die("act failed", api->last_error(L));
        record2("ck.q", DT_F32, B, KT, q);
        record2("ck.actions", DT_I32, B, D, act);
        free(q);
    }
    int32_t done = (int32_t)o.updates;
    record1("meta.end", DT_I32, 1, &done);
    if (fclose(out_file) != 0)
        die("closing the output failed", o.out);
    api->destroy(L);
    free(cfg);
    free(ts.scratch);
    free(obs);
    free(obs8);
    free(next8);
    free(next);
    free(rew);
    free(disc);
    free(w);
    free(y);
    free(td);
    free(act);
    free(term);
    return 0;
}
