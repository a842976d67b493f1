/* prune_test.h - helpers of the CUDA pruning tests (C11; test_cuda_prune_update.c): the masks'
 * groups and zero counts against the schedule of plugin/prune.h, the masks' invariants on a
 * learner, exact comparisons and copies of state kinds between two learners, weights full of
 * ties, the masks' differences at the threshold, the statistics of an update against the CPU's
 * and the pruning kernels of a captured graph. Include after divmetrics_test.h.
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

/* The statistics of the two learners' latest update (divmetrics_test.h's measures): the gradient
 * norm and, with detailed_metrics, every layer's gradient norm and each branch's head weight and
 * gradient norms. Returns the worst relative error (infinite for another update), naming it. */
static double stats_worst(fhd_learner *Lc, fhd_learner *Lg, const char **what) {
    const fhd__update_stats c = stats_of(Lc), g = stats_of(Lg);
    *what = "the update index";
    if (c.update_index != g.update_index || g.update_index == 0)
        return INFINITY;
    double worst = rel(g.grad_norm, c.grad_norm, 1e-12);
    *what = "grad_norm";
    if (!Lc->cfg.detailed_metrics)
        return worst;
    const uint32_t nl = Lc->lo.NC + Lc->lo.L + 1;
    if (g.n_layers != nl || c.n_layers != nl) {
        *what = "the number of layers";
        return INFINITY;
    }
    for (uint32_t l = 0; l < nl; l++) {
        const double e = rel(g.layer_grad_norm[l], c.layer_grad_norm[l], 1e-12);
        if (!(e <= worst)) {
            worst = e;
            *what = "a layer's gradient norm";
        }
    }
    for (uint32_t d = 0; d < Lc->lo.D; d++) {
        const double ew = rel(g.head_weight_norm[d], c.head_weight_norm[d], 1e-12);
        const double eg = rel(g.head_grad_norm[d], c.head_grad_norm[d], 1e-12);
        if (!(ew <= worst)) {
            worst = ew;
            *what = "a branch's head weight norm";
        }
        if (!(eg <= worst)) {
            worst = eg;
            *what = "a branch's head gradient norm";
        }
    }
    return worst;
}

/* Nodes of capture v (0: not captured); *prune_nodes / *one: kernel nodes of prune.cu, and those
 * with a 1x1x1 grid. */
static size_t nodes_of(fhd_learner *L, int v, int *prune_nodes, int *one, cudaGraph_t *gout) {
    cudaGraph_t g = NULL;
    ct_read(L, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
    *gout = g;
    size_t n = 0;
    *prune_nodes = *one = 0;
    if (!g || cudaGraphGetNodes(g, NULL, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaGraphNode_t *all = (cudaGraphNode_t *)malloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    cudaGraphGetNodes(g, all, &n);
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType ty;
        cudaGraphNodeGetType(all[i], &ty);
        if (ty != cudaGraphNodeTypeKernel)
            continue;
        struct cudaKernelNodeParams kp;
        memset(&kp, 0, sizeof kp);
        const char *fn = NULL;
        if (cudaGraphKernelNodeGetParams(all[i], &kp) != cudaSuccess ||
            cudaFuncGetName(&fn, kp.func) != cudaSuccess || !fn) {
            /* a library kernel (cuBLASLt) has no runtime name: keep the last-error slot clean,
             * which the backend's next launch check reads */
            (void)cudaGetLastError();
            continue;
        }
        if (strstr(fn, "prune_")) {
            (*prune_nodes)++;
            *one += kp.gridDim.x * kp.gridDim.y * kp.gridDim.z == 1;
        }
    }
    free(all);
    return n;
}

#endif
