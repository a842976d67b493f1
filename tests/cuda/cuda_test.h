/* cuda_test.h - helpers shared by the CUDA backend's tests (C11).
 *
 * The tests link the core's objects (white-box: fhd__learner_* and the backend ops, so that
 * state kinds such as FHD_STATE_LAST_INDICES are reachable) and dlopen the CUDA module through
 * the core's loader ($FHD_CUDA_MODULE points at it). Every test exits 77 (skipped) when the
 * process sees no CUDA device, and fails when a device is present but the backend is not.
 */
#ifndef FHD_CUDA_TEST_H
#define FHD_CUDA_TEST_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ext.h"
#include "learner.h"

static int ct_pass, ct_fail;

static inline void ct_check(int ok, const char *fmt, ...) {
    va_list ap;
    printf("%s ", ok ? "  ok  " : "  FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (ok)
        ct_pass++;
    else
        ct_fail++;
}

static inline int ct_finish(void) {
    printf("%d passed, %d failed\n", ct_pass, ct_fail);
    return ct_fail ? 1 : 0;
}

/* Exit 77 unless a CUDA device is visible. */
static inline void ct_require_gpu(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        exit(77);
    }
}

static inline double ct_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: the tests' own generator. */
static inline uint64_t ct_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double ct_unit(uint64_t *s) {
    return (double)(ct_rng(s) >> 11) * (1.0 / 9007199254740992.0);
}
static inline float ct_normal(uint64_t *s) {
    double u1 = ct_unit(s), u2 = ct_unit(s);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

/* Create a learner from JSON; on failure prints and returns NULL (code in *rc). */
static inline fhd_learner *ct_create(const char *json, int32_t *rc_out) {
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t rc = fhd__learner_init(json, strlen(json), &L, &err);
    if (rc_out)
        *rc_out = rc;
    if (rc != FHD_OK) {
        printf("init failed: %s %s: %s\n", err.path, fhd__status_name(rc), err.message);
        return NULL;
    }
    return L;
}

/* The CUDA learner, or exit 77 when the machine has no device, or exit 1. */
static inline fhd_learner *ct_create_cuda(const char *json) {
    ct_require_gpu();
    int32_t rc;
    fhd_learner *L = ct_create(json, &rc);
    if (!L) {
        printf("FAIL: a CUDA device is present but the cuda backend could not be created\n");
        exit(1);
    }
    return L;
}

/* Read count elements of a state kind (exits on error). */
static inline void ct_read(fhd_learner *L, int kind, uint64_t off, uint64_t count, void *dst) {
    int32_t rc = L->ops->read(L->be, kind, off, count, dst);
    if (rc != FHD_OK) {
        printf("FAIL read kind %d: %s\n", kind, L->ops->error(L->be));
        exit(1);
    }
}

static inline float *ct_read_floats(fhd_learner *L, int kind, uint64_t count) {
    float *p = (float *)malloc(sizeof(float) * (count ? count : 1));
    ct_read(L, kind, 0, count, p);
    return p;
}

/* |a - b| / max(|b|, 1e-12): the relative difference of two scalars. */
static inline double ct_rel(double a, double b) {
    return fabs(a - b) / (fabs(b) > 1e-12 ? fabs(b) : 1e-12);
}

/* ||a - b|| / max(||b||, tiny) over n floats; also the max abs difference. */
static inline double ct_relerr(const float *a, const float *b, uint64_t n, double *maxabs) {
    double num = 0, den = 0, mx = 0;
    for (uint64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        if (!(d == d)) {
            if (maxabs)
                *maxabs = INFINITY;
            return INFINITY;
        }
        num += d * d;
        den += (double)b[i] * b[i];
        if (fabs(d) > mx)
            mx = fabs(d);
    }
    if (maxabs)
        *maxabs = mx;
    return sqrt(num) / (den > 1e-30 ? sqrt(den) : 1e-15);
}

/* ||test - ref|| / ||ref|| (ct_relerr) of n elements from off of a state kind of two learners;
 * also the max abs difference when maxabs is not NULL. */
static inline double ct_cmp_kind(fhd_learner *ref, fhd_learner *test, int kind, uint64_t off,
                                 uint64_t n, double *maxabs) {
    float *a = (float *)malloc(sizeof(float) * (n ? n : 1));
    float *b = (float *)malloc(sizeof(float) * (n ? n : 1));
    ct_read(test, kind, off, n, a);
    ct_read(ref, kind, off, n, b);
    const double e = ct_relerr(a, b, n, maxabs);
    free(a);
    free(b);
    return e;
}

/* train_batch on one host batch of the config's batch_size rows (float observations) drawn from
 * seed (the same rows for the same seed), none terminal, row 1's return ret1. */
static inline int32_t ct_host_batch_seeded(fhd_learner *L, float ret1, uint64_t seed,
                                           fhd_train_stats *st) {
    const uint32_t B = L->cfg.batch_size, S = L->lo.S, D = L->lo.D;
    float *obs = (float *)malloc(sizeof(float) * B * S),
          *next = (float *)malloc(sizeof(float) * B * S);
    float *rew = (float *)malloc(sizeof(float) * B);
    int32_t *act = (int32_t *)malloc(sizeof(int32_t) * B * D);
    uint8_t *term = (uint8_t *)calloc(B, 1);
    uint64_t s = seed;
    for (uint32_t i = 0; i < B * S; i++) {
        obs[i] = ct_normal(&s);
        next[i] = ct_normal(&s);
    }
    for (uint32_t i = 0; i < B; i++) {
        rew[i] = ct_normal(&s);
        for (uint32_t d = 0; d < D; d++)
            act[i * D + d] = (int32_t)(ct_rng(&s) % L->lo.K[d]);
    }
    rew[1] = ret1;
    fhd_batch b = FHD_BATCH_INIT;
    b.batch_size = B;
    b.obs = obs;
    b.actions = act;
    b.rewards = rew;
    b.next_obs = next;
    b.terminated = term;
    const int32_t rc = fhd__learner_train_batch(L, &b, st);
    free(obs);
    free(next);
    free(rew);
    free(act);
    free(term);
    return rc;
}

/* ct_host_batch_seeded with seed 5: the same rows on every call. */
static inline int32_t ct_host_batch(fhd_learner *L, float ret1, fhd_train_stats *st) {
    return ct_host_batch_seeded(L, ret1, 5, st);
}

/* The bounds of ct_train_batches, relative: fwd for the TD errors, the targets and the loss,
 * grad for the gradient norm, params for both networks' parameters after each batch. With
 * one_update the statistics' check also asks updates_done == 1 (and is named "stats of this
 * update"). */
typedef struct ct_batch_tol {
    double fwd, grad, params;
    int one_update;
} ct_batch_tol;

/* train_batch on three host batches drawn from seed 555 (float observations, n-step discounts,
 * IS weights, a tenth of the rows terminal), the same batches on the CPU learner Lc and the
 * CUDA learner Lg: both succeed, then TD errors, targets, statistics and parameters within t.
 * K: the actions of each branch; the checks are named after `name`. */
static inline void ct_train_batches(const char *name, fhd_learner *Lc, fhd_learner *Lg,
                                    const uint32_t *K, const ct_batch_tol *t) {
    const uint32_t B = Lc->cfg.batch_size, S = Lc->lo.S, D = Lc->lo.D;
    const uint64_t P = Lc->lo.num_params;
    float *obs = (float *)malloc(4 * (size_t)B * S), *next = (float *)malloc(4 * (size_t)B * S);
    float *rew = (float *)malloc(4 * (size_t)B), *disc = (float *)malloc(4 * (size_t)B);
    float *w = (float *)malloc(4 * (size_t)B);
    int32_t *act = (int32_t *)malloc(4 * (size_t)B * D);
    uint8_t *term = (uint8_t *)malloc(B);
    float *tdc = (float *)malloc(4 * (size_t)B * D), *tdg = (float *)malloc(4 * (size_t)B * D);
    float *yc = (float *)malloc(4 * (size_t)B), *yg = (float *)malloc(4 * (size_t)B);
    uint64_t s = 555;
    for (int k = 1; k <= 3; k++) {
        for (uint32_t i = 0; i < B * S; i++) {
            obs[i] = ct_normal(&s);
            next[i] = ct_normal(&s);
        }
        for (uint32_t i = 0; i < B; i++) {
            rew[i] = 1.5f * ct_normal(&s);
            disc[i] = (float)pow(0.9, 1 + (int)(ct_rng(&s) % 3));
            w[i] = 0.05f + 0.95f * (float)ct_unit(&s);
            term[i] = ct_unit(&s) < 0.1;
            for (uint32_t d = 0; d < D; d++)
                act[i * D + d] = (int32_t)(ct_rng(&s) % K[d]);
        }
        fhd_batch bt = FHD_BATCH_INIT;
        bt.batch_size = B;
        bt.obs = obs;
        bt.actions = act;
        bt.rewards = rew;
        bt.next_obs = next;
        bt.terminated = term;
        bt.discounts = disc;
        bt.weights = w;
        fhd_train_stats sc = FHD_TRAIN_STATS_INIT, sg = FHD_TRAIN_STATS_INIT;
        bt.td_errors = tdc;
        bt.targets = yc;
        const int32_t rc = fhd__learner_train_batch(Lc, &bt, &sc);
        bt.td_errors = tdg;
        bt.targets = yg;
        const int32_t rg = fhd__learner_train_batch(Lg, &bt, &sg);
        ct_check(rc == FHD_OK && rg == FHD_OK, "%s train_batch %d: both succeed (%s)", name, k,
                 rg == FHD_OK ? "" : Lg->err);
        double mx;
        double e = ct_relerr(tdg, tdc, (uint64_t)B * D, &mx);
        ct_check(e <= t->fwd, "%s train_batch %d: TD errors rel %.2e (max abs %.2e)", name, k, e,
                 mx);
        e = ct_relerr(yg, yc, B, &mx);
        ct_check(e <= t->fwd, "%s train_batch %d: targets rel %.2e", name, k, e);
        const int stats_ok = sg.update_index == sc.update_index &&
                             (!t->one_update || sg.updates_done == 1) &&
                             ct_rel(sg.loss, sc.loss) <= t->fwd &&
                             ct_rel(sg.grad_norm, sc.grad_norm) <= t->grad;
        if (t->one_update)
            ct_check(stats_ok,
                     "%s train_batch %d: stats of this update (loss %.8g vs %.8g, norm %.8g vs "
                     "%.8g)",
                     name, k, sg.loss, sc.loss, sg.grad_norm, sc.grad_norm);
        else
            ct_check(stats_ok, "%s train_batch %d: loss %.8g vs %.8g, grad norm %.8g vs %.8g",
                     name, k, sg.loss, sc.loss, sg.grad_norm, sc.grad_norm);
        e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, &mx);
        ct_check(e <= t->params, "%s train_batch %d: parameters rel %.2e", name, k, e);
    }
    free(obs);
    free(next);
    free(rew);
    free(disc);
    free(w);
    free(act);
    free(term);
    free(tdc);
    free(tdg);
    free(yc);
    free(yg);
}

/* Feed T steps of E envs of deterministic transitions through observe. */
static inline void ct_feed(fhd_learner **Ls, int nl, uint32_t E, uint32_t S, uint32_t D,
                           const uint32_t *K, uint32_t T, uint64_t seed) {
    float *obs = (float *)malloc(sizeof(float) * E * S),
          *next = (float *)malloc(sizeof(float) * E * S);
    float *rew = (float *)malloc(sizeof(float) * E);
    int32_t *act = (int32_t *)malloc(sizeof(int32_t) * E * D);
    uint8_t *term = (uint8_t *)malloc(E), *trunc = (uint8_t *)malloc(E);
    uint64_t s = seed;
    for (uint32_t i = 0; i < E * S; i++)
        obs[i] = ct_normal(&s);
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t i = 0; i < E * S; i++)
            next[i] = 0.9f * obs[i] + 0.3f * ct_normal(&s);
        for (uint32_t e = 0; e < E; e++) {
            rew[e] = ct_normal(&s);
            for (uint32_t d = 0; d < D; d++)
                act[e * D + d] = (int32_t)(ct_rng(&s) % K[d]);
            double u = ct_unit(&s);
            term[e] = u < 0.03;
            trunc[e] = !term[e] && u < 0.05;
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        tr.obs = obs;
        tr.actions = act;
        tr.rewards = rew;
        tr.next_obs = next;
        tr.terminated = term;
        tr.truncated = trunc;
        for (int l = 0; l < nl; l++) {
            int32_t rc = fhd__learner_observe(Ls[l], &tr);
            if (rc != FHD_OK) {
                printf("FAIL observe: %s\n", Ls[l]->err);
                exit(1);
            }
        }
        memcpy(obs, next, sizeof(float) * E * S);
    }
    free(obs);
    free(next);
    free(rew);
    free(act);
    free(term);
    free(trunc);
}

/* The CPU learner's priorities and running maximum into the CUDA learner Lg, so that both
 * sample the same batches next (exits on error). The maximum too: a raw priority write leaves
 * it alone, and a copied priority may exceed Lg's own maximum by the last bits of a TD error. */
static inline void ct_copy_priorities(fhd_learner *Lc, fhd_learner *Lg) {
    const uint32_t N = Lc->cfg.replay_capacity;
    uint64_t *pc = (uint64_t *)malloc(8 * (size_t)N);
    ct_read(Lc, FHD_STATE_REPLAY_PRIORITY, 0, N, pc);
    fhd__backend_scalars sc, sg;
    if (Lg->ops->write(Lg->be, FHD_STATE_REPLAY_PRIORITY, 0, N, pc) != FHD_OK ||
        Lc->ops->get_scalars(Lc->be, &sc) != FHD_OK ||
        Lg->ops->get_scalars(Lg->be, &sg) != FHD_OK) {
        printf("FAIL write priorities: %s\n", Lg->ops->error(Lg->be));
        exit(1);
    }
    sg.max_priority_q = sc.max_priority_q;
    if (Lg->ops->set_scalars(Lg->be, &sg) != FHD_OK) {
        printf("FAIL set the running maximum: %s\n", Lg->ops->error(Lg->be));
        exit(1);
    }
    free(pc);
}

static inline uint64_t ct_sync_count(fhd_learner *L) {
    uint64_t c = 0;
    ct_read(L, FHD_CUDA_STATE_SYNC_COUNT, 0, 1, &c);
    return c;
}

#endif
