/* test_cuda_reliability.c - divergence and device memory on the CUDA backend (label cuda;
 * docs/design.md sections 4 and 5).
 *
 *   1. train_batch without a guard: a +Inf loss (MSE of a 1e30 return) returns
 *      FHD_ERR_DIVERGED naming the update, with the parameters (online, target) and Adam
 *      moments bit for bit as before; metrics count it (diverged_updates, skipped_updates) and
 *      the next sane batch is applied.
 *   2. train without a guard on a replay whose returns are all 1e30 (uniform and PER): every
 *      queued update is skipped on the device; the call that sees them complete returns
 *      FHD_ERR_DIVERGED (and counts them in diverged_updates); parameters, Adam moments, the update counter and (PER) every leaf
 *      priority and the running maximum are unchanged; a save of that learner succeeds and
 *      loads; with sane returns written back, training goes on.
 *   3. device memory: a replay larger than the device is refused at create with
 *      FHD_ERR_OUT_OF_MEMORY naming the replay; with a second learner and this test holding all
 *      but a few MiB, every call of a running learner (train, act at a new row count,
 *      checkpoint save and load with the replay) returns FHD_OK or FHD_ERR_OUT_OF_MEMORY, and
 *      after an OOM the learner is bit for bit as before; a new learner under that pressure is
 *      refused cleanly; once the memory is back, all of it works.
 * usage: test_cuda_reliability [scratch dir]
 */
#include "cuda_test.h"

#include <unistd.h>

#define BASE                                                                                       \
    "\"obs_dim\": 8, \"actions\": [4, 3], \"hidden\": [32, 32], \"dueling\": true, "               \
    "\"double_dqn\": true, \"batch_size\": 32, \"replay_capacity\": 256, \"num_envs\": 2, "        \
    "\"learning_starts\": 0, \"loss\": \"mse\", \"seed\": 11, \"max_grad_norm\": 10, "            \
    "\"backend\": \"cuda\""

static char dir[512];

static fhd_learner *make(const char *extra) {
    char j[1024];
    snprintf(j, sizeof j, "{" BASE "%s}", extra);
    return ct_create_cuda(j);
}

static long long metric(fhd_learner *L, const char *key) {
    static char buf[16384];
    char pat[64];
    size_t need = 0;
    if (fhd__learner_metrics(L, buf, sizeof buf, &need) != FHD_OK)
        return -1;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(buf, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

/* The learner's trainable state (online + target, Adam moments) and, with PER, the leaves. */
typedef struct snap {
    float *p, *m, *v;
    uint64_t *prio, max_q, updates;
} snap;

static snap take(fhd_learner *L, int per) {
    const uint64_t P = L->lo.num_params, N = L->cfg.replay_capacity;
    snap s;
    s.p = ct_read_floats(L, FHD_STATE_PARAMS, 2 * P);
    s.m = ct_read_floats(L, FHD_STATE_ADAM_M, P);
    s.v = ct_read_floats(L, FHD_STATE_ADAM_V, P);
    s.prio = NULL;
    if (per) {
        s.prio = (uint64_t *)malloc(sizeof(uint64_t) * N);
        ct_read(L, FHD_STATE_REPLAY_PRIORITY, 0, N, s.prio);
    }
    fhd__backend_scalars bs;
    L->ops->get_scalars(L->be, &bs);
    s.max_q = bs.max_priority_q;
    s.updates = bs.updates;
    return s;
}

static int same(fhd_learner *L, const snap *a, int per) {
    snap b = take(L, per);
    const uint64_t P = L->lo.num_params, N = L->cfg.replay_capacity;
    int ok = !memcmp(a->p, b.p, sizeof(float) * 2 * P) && !memcmp(a->m, b.m, sizeof(float) * P) &&
             !memcmp(a->v, b.v, sizeof(float) * P) && a->max_q == b.max_q &&
             a->updates == b.updates && (!per || !memcmp(a->prio, b.prio, sizeof(uint64_t) * N));
    free(b.p);
    free(b.m);
    free(b.v);
    free(b.prio);
    return ok;
}

static void drop(snap *s) {
    free(s->p);
    free(s->m);
    free(s->v);
    free(s->prio);
}

/* ---- 1, 2: divergence without a guard ------------------------------------------------------ */

static void test_diverge_batch(void) {
    fhd_learner *L = make("");
    ct_check(ct_host_batch(L, 1.0f, NULL) == FHD_OK, "a sane batch: %s", L->err);
    snap s0 = take(L, 0);
    int32_t rc = ct_host_batch(L, 1e30f, NULL);
    ct_check(rc == FHD_ERR_DIVERGED && strstr(L->err, "update 2 diverged") &&
                 strstr(L->err, "not applied"),
             "train_batch of a +Inf loss: %s: %s", fhd__status_name(rc), L->err);
    ct_check(same(L, &s0, 0), "the diverged batch changed parameters, moments or counters");
    ct_check(metric(L, "diverged_updates") == 1 && metric(L, "skipped_updates") == 1,
             "metrics: diverged_updates %lld, skipped_updates %lld", metric(L, "diverged_updates"),
             metric(L, "skipped_updates"));
    ct_check(ct_host_batch(L, 1.0f, NULL) == FHD_OK && metric(L, "updates") == 2,
             "the next sane batch is applied (updates %lld)", metric(L, "updates"));
    drop(&s0);
    fhd__learner_destroy(L);
}

static void test_diverge_train(int per) {
    const char *name = per ? "PER" : "uniform";
    fhd_learner *L = make(per ? ", \"replay\": \"prioritized\"" : "");
    uint32_t K[2] = {4, 3};
    ct_feed(&L, 1, 2, 8, 2, K, 80, 3);
    ct_check(fhd__learner_train(L, 4, NULL) == FHD_OK, "%s: sane updates: %s", name, L->err);
    const uint64_t n = 160;
    float *ret = (float *)malloc(sizeof(float) * n), *bad = (float *)malloc(sizeof(float) * n);
    ct_read(L, FHD_STATE_REPLAY_RETURNS, 0, n, ret);
    for (uint64_t i = 0; i < n; i++)
        bad[i] = 1e30f;
    ct_check(L->ops->write(L->be, FHD_STATE_REPLAY_RETURNS, 0, n, bad) == FHD_OK,
             "%s: plant 1e30 returns", name);
    snap s0 = take(L, per);
    int32_t rc1 = fhd__learner_train(L, 6, NULL);
    char m1[1024];
    snprintf(m1, sizeof m1, "%s", L->err);
    float one;
    ct_read(L, FHD_STATE_PARAMS, 0, 1, &one); /* the queue drained: every snapshot is complete */
    int32_t rc2 = fhd__learner_train(L, 1, NULL);
    ct_read(L, FHD_STATE_PARAMS, 0, 1, &one);
    int32_t rc3 = fhd__learner_train(L, 1, NULL);
    const char *m = rc1 == FHD_ERR_DIVERGED ? m1 : L->err;
    ct_check((rc1 == FHD_ERR_DIVERGED || rc2 == FHD_ERR_DIVERGED) && rc3 == FHD_ERR_DIVERGED &&
                 strstr(m, "diverged") && strstr(m, "skipped on the device"),
             "%s: train on 1e30 returns: %s, %s, %s: %s", name, fhd__status_name(rc1),
             fhd__status_name(rc2), fhd__status_name(rc3), m);
    ct_check(same(L, &s0, per), "%s: diverged updates changed the learner", name);
    /* 8 skipped; the last call's own one is reported by the next train call */
    ct_check(metric(L, "diverged_updates") == 7 && metric(L, "skipped_updates") == 8 &&
                 metric(L, "updates") == 4,
             "%s: diverged_updates %lld, skipped_updates %lld, updates %lld", name,
             metric(L, "diverged_updates"), metric(L, "skipped_updates"), metric(L, "updates"));
    char path[700];
    snprintf(path, sizeof path, "%s/diverged-%s.safetensors", dir, name);
    ct_check(fhd__checkpoint_save(L, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
             "%s: a learner that skipped diverged updates saves: %s", name, L->err);
    fhd_learner *M = make(per ? ", \"replay\": \"prioritized\"" : "");
    ct_check(fhd__checkpoint_load(M, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
             "%s: and loads: %s", name, M->err);
    fhd__learner_destroy(M);
    ct_check(L->ops->write(L->be, FHD_STATE_REPLAY_RETURNS, 0, n, ret) == FHD_OK,
             "%s: sane returns back", name);
    /* the first call after reports the last skip (update 12), and its own updates apply */
    int32_t rc4 = fhd__learner_train(L, 3, NULL);
    ct_check(rc4 == FHD_ERR_DIVERGED && strstr(L->err, "update 12 diverged") &&
                 strstr(L->err, "1 diverged since the last report"),
             "%s: the next call reports the last skipped update: %s: %s", name,
             fhd__status_name(rc4), L->err);
    ct_check(metric(L, "updates") == 7 && metric(L, "diverged_updates") == 8 &&
                 !same(L, &s0, per),
             "%s: 3 updates applied (%lld), diverged_updates %lld", name, metric(L, "updates"),
             metric(L, "diverged_updates"));
    ct_check(fhd__learner_train(L, 2, NULL) == FHD_OK, "%s: training goes on: %s", name, L->err);
    drop(&s0);
    free(ret);
    free(bad);
    fhd__learner_destroy(L);
}

/* ---- 3: device memory ------------------------------------------------------------------------ */

typedef struct hog {
    void *p[65536];
    int n;
} hog;

/* Takes device memory in 1 MiB pieces until none is left. */
static void hog_all(hog *h) {
    h->n = 0;
    while (h->n < 65536 && cudaMalloc(&h->p[h->n], 1 << 20) == cudaSuccess)
        h->n++;
    (void)cudaGetLastError();
}

static void hog_free(hog *h) {
    for (int i = 0; i < h->n; i++)
        cudaFree(h->p[i]);
    h->n = 0;
}

/* rc is FHD_OK, or an OOM that left L as s says; what: the call. */
static void ok_or_clean_oom(fhd_learner *L, int32_t rc, const snap *s, const char *what) {
    if (rc == FHD_OK) {
        printf("  under memory pressure: %s: FHD_OK\n", what);
        ct_check(1, "");
        return;
    }
    printf("  under memory pressure: %s: %s: %s\n", what, fhd__status_name(rc), L->err);
    ct_check(rc == FHD_ERR_OUT_OF_MEMORY && strstr(L->err, "memory"),
             "%s under memory pressure: %s: %s", what, fhd__status_name(rc), L->err);
    ct_check(s == NULL || same(L, s, 0), "%s: a refused call changed the learner", what);
}

static void test_memory(void) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    /* a replay of twice the free memory: refused at create, naming the replay */
    char j[1024];
    const uint64_t cap = (uint64_t)(2.0 * (double)fr / (2.0 * 4096 * 4));
    snprintf(j, sizeof j,
             "{\"obs_dim\": 4096, \"actions\": [4], \"hidden\": [64], \"replay_capacity\": %llu, "
             "\"backend\": \"cuda\"}",
             (unsigned long long)cap);
    int32_t rc;
    double t0 = ct_now();
    fhd_learner *X = ct_create(j, &rc);
    ct_check(!X && rc == FHD_ERR_OUT_OF_MEMORY, "a %.0f GiB replay: %s",
             (double)cap * 2 * 4096 * 4 / (1 << 30), fhd__status_name(rc));
    printf("  refused in %.3f s\n", ct_now() - t0);
    if (X)
        fhd__learner_destroy(X);

    /* a running learner, its checkpoint with the replay */
    fhd_learner *A = make("");
    uint32_t K[2] = {4, 3};
    ct_feed(&A, 1, 2, 8, 2, K, 80, 9);
    ct_check(fhd__learner_train(A, 10, NULL) == FHD_OK, "A trains: %s", A->err);
    char path[700];
    snprintf(path, sizeof path, "%s/pressure.safetensors", dir);
    ct_check(fhd__checkpoint_save(A, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "A saves: %s",
             A->err);
    ct_check(fhd__learner_train(A, 5, NULL) == FHD_OK, "A trains on: %s", A->err);

    /* a second learner takes what it can (a replay of most of the free memory), the test the rest */
    cudaMemGetInfo(&fr, &tot);
    fhd_learner *H = NULL;
    for (double frac = 0.9; !H && frac > 0.3; frac -= 0.1) {
        snprintf(j, sizeof j,
                 "{\"obs_dim\": 4096, \"actions\": [4], \"hidden\": [64], "
                 "\"replay_capacity\": %llu, \"backend\": \"cuda\"}",
                 (unsigned long long)(frac * (double)fr / (2.0 * 4096 * 4)));
        H = ct_create(j, &rc);
    }
    ct_check(H != NULL, "a second learner holding most of the device");
    hog h;
    hog_all(&h);
    cudaMemGetInfo(&fr, &tot);
    printf("  held: the second learner and %d MiB; %.1f MiB free\n", h.n, (double)fr / (1 << 20));

    snap s = take(A, 0);
    ok_or_clean_oom(A, fhd__learner_train(A, 3, NULL), NULL, "train(3)");
    float one;
    if (A->ops->read(A->be, FHD_STATE_PARAMS, 0, 1, &one) == FHD_OK) {
        drop(&s);
        s = take(A, 0);
    }
    float obs[7 * 8];
    int32_t act[7 * 2];
    for (int i = 0; i < 7 * 8; i++)
        obs[i] = 0.01f * (float)i;
    fhd_act_args aa = FHD_ACT_ARGS_INIT;
    aa.num_obs = 7; /* a row count A never acted on: a new act plan */
    aa.obs = obs;
    aa.actions = act;
    ok_or_clean_oom(A, fhd__learner_act(A, &aa), &s, "act on 7 rows");
    ok_or_clean_oom(A, fhd__checkpoint_load(A, path, FHD_CKPT_INCLUDE_REPLAY), &s,
                    "checkpoint_load with the replay");
    drop(&s);
    s = take(A, 0);
    char path2[760];
    snprintf(path2, sizeof path2, "%s.2", path);
    ok_or_clean_oom(A, fhd__checkpoint_save(A, path2, FHD_CKPT_INCLUDE_REPLAY), &s,
                    "checkpoint_save with the replay");
    fhd_learner *C = ct_create("{\"obs_dim\": 8, \"actions\": [4], \"backend\": \"cuda\"}", &rc);
    printf("  a new learner under pressure: %s\n", fhd__status_name(rc));
    ct_check(C || rc == FHD_ERR_OUT_OF_MEMORY, "a new learner under memory pressure: %s",
             fhd__status_name(rc));
    if (C)
        fhd__learner_destroy(C);

    /* the memory back: everything works */
    hog_free(&h);
    fhd__learner_destroy(H);
    ct_check(fhd__learner_train(A, 3, NULL) == FHD_OK, "A trains after the pressure: %s", A->err);
    ct_check(fhd__learner_act(A, &aa) == FHD_OK, "A acts on 7 rows: %s", A->err);
    ct_check(fhd__checkpoint_load(A, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
             "A loads its checkpoint: %s", A->err);
    ct_check(metric(A, "updates") == 10, "A is at its checkpoint's update 10 (%lld)",
             metric(A, "updates"));
    C = ct_create("{\"obs_dim\": 8, \"actions\": [4], \"backend\": \"cuda\"}", &rc);
    ct_check(C != NULL, "a new learner after the pressure: %s", fhd__status_name(rc));
    if (C)
        fhd__learner_destroy(C);
    drop(&s);
    fhd__learner_destroy(A);
    unlink(path);
    unlink(path2);
}

int main(int argc, char **argv) {
    ct_require_gpu();
    snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : "/tmp");
    test_diverge_batch();
    test_diverge_train(0);
    test_diverge_train(1);
    test_memory();
    return ct_finish();
}
