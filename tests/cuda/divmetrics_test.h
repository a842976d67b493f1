/* divmetrics_test.h - test_cuda_divmetrics.c's comparisons of a CUDA learner with a CPU learner
 * (C11): the diversity term's and detailed_metrics' statistics within tolerances, the metrics
 * JSON against them, host batches for train_batch, the CPU's priorities copied across. */
#ifndef FHD_DIVMETRICS_TEST_H
#define FHD_DIVMETRICS_TEST_H

#include "metrics_json_test.h"

#include <jansson.h>

/* L's statistics of its latest update, after the queued work. */
static inline fhd__update_stats stats_of(fhd_learner *L) {
    float dummy;
    ct_read(L, FHD_STATE_PARAMS, 0, 1, &dummy); /* drains the queue: the snapshot is current */
    fhd__update_stats s;
    memset(&s, 0, sizeof s);
    L->ops->latest_stats(L->be, &s);
    return s;
}

/* |g - c| / max(|c|, floor); infinite where g is not finite. */
static inline double rel(double g, double c, double floor) {
    const double d = fabs(g - c) / fmax(fabs(c), floor);
    return isfinite(g) ? d : INFINITY;
}

typedef struct tol {
    double fwd;  /* loss, entropy */
    double grad; /* gradient norms */
    double w;    /* head weight norms */
} tol;

static const tol tight = {1e-4, 2e-4, 1e-6}; /* update 1 */
static const tol drift = {1e-3, 1e-2, 1e-3}; /* later updates */
static const tol later = {1e-4, 1e-3, 1e-5}; /* train_batch after the first */

/* The diversity term's and detailed_metrics' statistics of the latest update: CUDA against CPU. */
static inline void check_features(const char *name, const char *when, fhd_learner *Lc,
                                  fhd_learner *Lg, const tol *t) {
    const fhd__update_stats c = stats_of(Lc), g = stats_of(Lg);
    ct_check(c.update_index == g.update_index && g.update_index > 0,
             "%s %s: statistics of update %llu (cpu %llu)", name, when,
             (unsigned long long)g.update_index, (unsigned long long)c.update_index);
    ct_check(rel(g.loss, c.loss, 1e-6) <= t->fwd, "%s %s: loss %.9g vs cpu %.9g (rel %.2e)", name,
             when, g.loss, c.loss, rel(g.loss, c.loss, 1e-6));
    if (Lc->cfg.diversity_coef > 0)
        ct_check(rel(g.entropy, c.entropy, 1e-6) <= t->fwd && g.entropy > 0,
                 "%s %s: diversity entropy %.9g vs cpu %.9g (rel %.2e, tol %.0e)", name, when,
                 g.entropy, c.entropy, rel(g.entropy, c.entropy, 1e-6), t->fwd);
    if (!Lc->cfg.detailed_metrics)
        return;
    if (!Lc->cfg.double_dqn) {
        ct_check(isnan(g.q_delta) && isnan(c.q_delta),
                 "%s %s: q_delta undefined without double "
                 "DQN (cuda %g, cpu %g)",
                 name, when, g.q_delta, c.q_delta);
    } else {
        const double d = fabs((double)g.q_delta - c.q_delta);
        const double lim = 5e-3 * fabs(c.q_delta) + 1e-5 * (1.0 + fabs(c.q_mean));
        ct_check(isfinite(g.q_delta) && d <= lim,
                 "%s %s: q_delta %.9g vs cpu %.9g (diff %.2e, tol "
                 "%.2e)",
                 name, when, g.q_delta, c.q_delta, d, lim);
    }
    const uint32_t nl = Lc->lo.NC + Lc->lo.L + 1, D = Lc->lo.D;
    double worst = 0.0;
    uint32_t at = 0;
    for (uint32_t l = 0; l < nl && l < g.n_layers; l++) {
        const double e = rel(g.layer_grad_norm[l], c.layer_grad_norm[l], 1e-12);
        if (!(e <= worst)) {
            worst = e;
            at = l;
        }
    }
    ct_check(g.n_layers == nl && c.n_layers == nl && worst <= t->grad,
             "%s %s: %u layers' gradient norms (cpu %u), worst layer %u: %.9g vs %.9g (rel %.2e, "
             "tol %.0e)",
             name, when, g.n_layers, c.n_layers, at, g.layer_grad_norm[at], c.layer_grad_norm[at],
             worst, t->grad);
    double ww = 0.0, wg = 0.0;
    for (uint32_t d = 0; d < D; d++) {
        const double ew = rel(g.head_weight_norm[d], c.head_weight_norm[d], 1e-12);
        const double eg = rel(g.head_grad_norm[d], c.head_grad_norm[d], 1e-12);
        ww = ew > ww || !(ew == ew) ? ew : ww;
        wg = eg > wg || !(eg == eg) ? eg : wg;
    }
    ct_check(ww <= t->w && wg <= t->grad && g.head_weight_norm[0] > 0 && g.head_grad_norm[0] > 0,
             "%s %s: %u branches' head weight norms rel %.2e (tol %.0e), gradient norms rel %.2e "
             "(branch 0: %.6g, %.6g)",
             name, when, D, ww, t->w, wg, g.head_weight_norm[0], g.head_grad_norm[0]);
}

/* The metrics JSON of L carries latest_stats' values (floats printed to round trip). */
static inline void check_json(const char *name, fhd_learner *L) {
    const fhd__update_stats s = stats_of(L);
    json_t *m = ct_metrics(L);
    ct_check(m != NULL, "%s: metrics JSON", name);
    if (!m)
        return;
    const double e = json_number_value(json_object_get(m, "diversity_entropy"));
    ct_check(L->cfg.diversity_coef <= 0 || (float)e == s.entropy,
             "%s: metrics diversity_entropy %.9g = %.9g", name, e, s.entropy);
    json_t *qd = json_object_get(m, "q_delta");
    ct_check(L->cfg.double_dqn ? (float)json_number_value(qd) == s.q_delta : json_is_null(qd),
             "%s: metrics q_delta %s", name, L->cfg.double_dqn ? "the statistic" : "null");
    const char *keys[3] = {"grad_norm_layers", "head_weight_norms", "head_grad_norms"};
    const float *vals[3] = {s.layer_grad_norm, s.head_weight_norm, s.head_grad_norm};
    const size_t lens[3] = {L->lo.NC + L->lo.L + 1, L->lo.D, L->lo.D};
    for (int k = 0; k < 3; k++) {
        json_t *a = json_object_get(m, keys[k]);
        int same = json_array_size(a) == lens[k];
        for (size_t i = 0; same && i < lens[k]; i++)
            same = (float)json_number_value(json_array_get(a, i)) == vals[k][i];
        ct_check(same, "%s: metrics %s (%zu values) as the statistics", name, keys[k], lens[k]);
    }
    json_decref(m);
}

/* One host batch of a learner's shapes (train_batch). */
typedef struct host_batch {
    uint32_t B, S, D;
    float *obs, *next, *rew, *disc, *w;
    int32_t *act;
    uint8_t *term;
} host_batch;

/* New random rows (allocated on first use); ret1 != 0: row 1's return. */
static inline void batch_fill(host_batch *h, const fhd_learner *L, const uint32_t *K, uint64_t *s,
                              float ret1) {
    h->B = L->cfg.batch_size;
    h->S = L->lo.S;
    h->D = L->lo.D;
    const size_t BS = (size_t)h->B * h->S;
    if (!h->obs) {
        h->obs = (float *)malloc(4 * BS);
        h->next = (float *)malloc(4 * BS);
        h->rew = (float *)malloc(4 * h->B);
        h->disc = (float *)malloc(4 * h->B);
        h->w = (float *)malloc(4 * h->B);
        h->act = (int32_t *)malloc(4 * (size_t)h->B * h->D);
        h->term = (uint8_t *)malloc(h->B);
    }
    for (size_t i = 0; i < BS; i++) {
        h->obs[i] = ct_normal(s);
        h->next[i] = ct_normal(s);
    }
    for (uint32_t i = 0; i < h->B; i++) {
        h->rew[i] = 1.5f * ct_normal(s);
        h->disc[i] = (float)pow(0.9, 1 + (int)(ct_rng(s) % 3));
        h->w[i] = 0.05f + 0.95f * (float)ct_unit(s);
        h->term[i] = ct_unit(s) < 0.1;
        for (uint32_t d = 0; d < h->D; d++)
            h->act[i * h->D + d] = (int32_t)(ct_rng(s) % K[d]);
    }
    h->rew[1] = ret1 != 0.0f ? ret1 : h->rew[1];
}

static inline void batch_free(host_batch *h) {
    free(h->obs);
    free(h->next);
    free(h->rew);
    free(h->disc);
    free(h->w);
    free(h->act);
    free(h->term);
}

static inline int32_t batch_train(fhd_learner *L, const host_batch *h, float *td,
                                  fhd_train_stats *st) {
    fhd_batch b = FHD_BATCH_INIT;
    b.batch_size = h->B;
    b.obs = h->obs;
    b.actions = h->act;
    b.rewards = h->rew;
    b.next_obs = h->next;
    b.terminated = h->term;
    b.discounts = h->disc;
    b.weights = h->w;
    b.td_errors = td;
    return fhd__learner_train_batch(L, &b, st);
}

/* The same update's statistics, bit for bit. */
static inline int stats_same(const fhd__update_stats *a, const fhd__update_stats *b, uint32_t D) {
    return a->update_index == b->update_index && a->entropy == b->entropy &&
           memcmp(&a->q_delta, &b->q_delta, sizeof a->q_delta) == 0 && a->n_layers == b->n_layers &&
           memcmp(a->layer_grad_norm, b->layer_grad_norm, sizeof(float) * a->n_layers) == 0 &&
           memcmp(a->head_weight_norm, b->head_weight_norm, sizeof(float) * D) == 0 &&
           memcmp(a->head_grad_norm, b->head_grad_norm, sizeof(float) * D) == 0;
}

#endif
