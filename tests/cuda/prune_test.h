/* prune_test.h - helpers of the CUDA pruning tests (C11; test_cuda_prune_update.c): the masks'
 * groups and zero counts against the schedule of plugin/prune.h, the masks' invariants on a
 * learner, exact comparisons and copies of state kinds between two learners, weights full of
 * ties, and the masks' differences at the threshold. Include after cuda_test.h.
 */
#ifndef FHD_PRUNE_TEST_H
#define FHD_PRUNE_TEST_H

#include "prune.h"

static uint32_t group_count(const fhd_learner *L) {
    return L->cfg.prune_global ? 1u : L->lo.num_masks;
}

/* Zeros of each group's masks (z, group_count entries) and its size (n). */
static void zeros_of(const fhd_learner *L, const float *mask, uint64_t *z, uint64_t *n) {
    for (uint32_t g = 0; g < group_count(L); g++)
        z[g] = n[g] = 0;
    for (uint32_t j = 0; j < L->lo.num_masks; j++) {
        fhd__tensor_ref t;
        fhd__layout_mask(&L->lo, j, &t);
        const uint32_t g = L->cfg.prune_global ? 0 : j;
        n[g] += t.count;
        for (uint64_t i = 0; i < t.count; i++)
            z[g] += mask[t.offset + i] == 0.0f;
    }
}

/* 1 if every group has the count of the latest pruning update <= t (0 before the first). */
static int counts_as_schedule(const fhd_learner *L, const float *mask, uint64_t t) {
    double s = 0.0, st;
    for (uint64_t u = 1; u <= t; u++)
        if (fhd__prune_at(&L->cfg, u, &st))
            s = st;
    uint64_t z[FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 2],
        n[FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 2];
    zeros_of(L, mask, z, n);
    int ok = 1;
    for (uint32_t g = 0; g < group_count(L); g++)
        ok &= z[g] == fhd__prune_count(s, n[g]);
    return ok;
}

/* The invariants of one learner: masks 0 or 1, 1 outside the mask views; online weights and
 * their Adam moments 0 where pruned (and, grad_too, the gradient of the last update). */
static int invariants(fhd_learner *L, int grad_too, const char *what) {
    const uint64_t P = L->lo.num_params;
    float *mask = ct_read_floats(L, FHD_STATE_MASK, P), *w = ct_read_floats(L, FHD_STATE_PARAMS, P);
    float *m = ct_read_floats(L, FHD_STATE_ADAM_M, P), *v = ct_read_floats(L, FHD_STATE_ADAM_V, P);
    float *g = ct_read_floats(L, FHD_STATE_GRAD, P);
    char *in = (char *)calloc(P, 1);
    for (uint32_t j = 0; j < L->lo.num_masks; j++) {
        fhd__tensor_ref t;
        fhd__layout_mask(&L->lo, j, &t);
        memset(in + t.offset, 1, t.count);
    }
    uint64_t bad = 0;
    for (uint64_t i = 0; i < P; i++) {
        if (mask[i] != 0.0f && mask[i] != 1.0f)
            bad++;
        else if (!in[i] && mask[i] != 1.0f)
            bad++;
        else if (mask[i] == 0.0f &&
                 (w[i] != 0.0f || m[i] != 0.0f || v[i] != 0.0f || (grad_too && g[i] != 0.0f)))
            bad++;
    }
    if (bad)
        printf("       %s: %llu entries break the masks' invariants\n", what,
               (unsigned long long)bad);
    free(mask);
    free(w);
    free(m);
    free(v);
    free(g);
    free(in);
    return bad == 0;
}

static int same_floats(fhd_learner *A, fhd_learner *B, int kind, uint64_t n, uint64_t *diff) {
    float *a = ct_read_floats(A, kind, n), *b = ct_read_floats(B, kind, n);
    uint64_t d = 0;
    for (uint64_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], 4) != 0;
    free(a);
    free(b);
    if (diff)
        *diff = d;
    return d == 0;
}

static void copy_kind(fhd_learner *from, fhd_learner *to, int kind, uint64_t n) {
    float *x = ct_read_floats(from, kind, n);
    if (to->ops->write(to->be, kind, 0, n, x) != FHD_OK) {
        printf("FAIL write kind %d: %s\n", kind, to->ops->error(to->be));
        exit(1);
    }
    free(x);
}

static void write_ties(fhd_learner *L) {
    const uint64_t P = L->lo.num_params;
    float *w = (float *)malloc(sizeof(float) * 2 * P);
    uint64_t s = 99;
    for (uint64_t i = 0; i < P; i++) {
        const uint64_t r = ct_rng(&s);
        w[i] = w[P + i] = (float)((r % 7) + 1) * ((r >> 40) & 1 ? -0.01f : 0.01f);
    }
    if (L->ops->write(L->be, FHD_STATE_PARAMS, 0, 2 * P, w) != FHD_OK) {
        printf("FAIL write parameters: %s\n", L->ops->error(L->be));
        exit(1);
    }
    free(w);
}

/* Entries where the masks differ; each must be kept on one backend with a magnitude among that
 * backend's smallest kept ones of its group (within 1e-3 relative): a swap at the threshold. */
static uint64_t mask_swaps(fhd_learner *Lc, fhd_learner *Lg, int *explained) {
    const fhd__layout *lo = &Lc->lo;
    const uint64_t P = lo->num_params;
    fhd_learner *Ls[2] = {Lc, Lg};
    float *mk[2], *w[2];
    for (int k = 0; k < 2; k++) {
        mk[k] = ct_read_floats(Ls[k], FHD_STATE_MASK, P);
        w[k] = ct_read_floats(Ls[k], FHD_STATE_PARAMS, P);
    }
    uint64_t swaps = 0;
    *explained = 1;
    for (uint32_t g = 0; g < group_count(Lc); g++) {
        float minkept[2] = {INFINITY, INFINITY};
        for (uint32_t j = 0; j < lo->num_masks; j++) {
            fhd__tensor_ref t;
            fhd__layout_mask(lo, j, &t);
            if ((Lc->cfg.prune_global ? 0u : j) != g)
                continue;
            for (int k = 0; k < 2; k++)
                for (uint64_t i = t.offset; i < t.offset + t.count; i++)
                    if (mk[k][i] != 0.0f && fabsf(w[k][i]) < minkept[k])
                        minkept[k] = fabsf(w[k][i]);
        }
        for (uint32_t j = 0; j < lo->num_masks; j++) {
            fhd__tensor_ref t;
            fhd__layout_mask(lo, j, &t);
            if ((Lc->cfg.prune_global ? 0u : j) != g)
                continue;
            for (uint64_t i = t.offset; i < t.offset + t.count; i++) {
                if (mk[0][i] == mk[1][i])
                    continue;
                swaps++;
                const int keeper = mk[0][i] != 0.0f ? 0 : 1;
                if (fabsf(w[keeper][i]) > minkept[keeper] * (1.0f + 1e-3f)) {
                    *explained = 0;
                    printf("       entry %llu kept with |w| %.9g, the smallest kept %.9g\n",
                           (unsigned long long)i, (double)fabsf(w[keeper][i]),
                           (double)minkept[keeper]);
                }
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        free(mk[k]);
        free(w[k]);
    }
    return swaps;
}

#endif
