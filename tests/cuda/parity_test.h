/* parity_test.h - test_cuda_parity.c's comparison of a CUDA learner with the CPU reference of the
 * same config (C11): a variant's config, then observe, update 1, 100 updates, act and the plan's
 * facts (run_variant), and train_batch (run_train_batch), as test_cuda_parity.c's comment lists.
 */
#ifndef FHD_PARITY_TEST_H
#define FHD_PARITY_TEST_H

#include "cuda_test.h"

typedef struct variant {
    const char *name;
    const char *json;      /* extra config keys */
    const char *precision; /* CUDA matmul_precision */
    uint32_t D, K[4];
    double tol_fwd;        /* loss, Q, TD, targets */
    double tol_grad;       /* gradient after 1 update */
    double tol_param1;     /* parameters after 1 update (relative to their norm) */
    double tol_param100;   /* parameters after 100 updates */
    int free_running;      /* do not copy priorities */
    const char *sizes;     /* hidden, batch and replay keys; NULL: SIZES */
    double tol_prio;       /* new priorities (copy_priorities' measure); 0: 200 tol_fwd */
} variant;

#define SIZES "\"hidden\": [32, 48], \"batch_size\": 64, \"replay_capacity\": 512, "
#define BASE                                                                                   \
    "\"obs_dim\": 12, "                                                                         \
    "\"num_envs\": 4, \"seed\": 7, \"lr\": 0.001, \"max_grad_norm\": 1.0, "                    \
    "\"learning_starts\": 0, "

static void make_json(char *buf, size_t cap, const variant *v, int cuda) {
    snprintf(buf, cap, "{" BASE "%s%s, \"backend\": \"%s\", \"matmul_precision\": \"%s\"%s}",
             v->sizes ? v->sizes : SIZES, v->json, cuda ? "cuda" : "cpu", cuda ? v->precision : "fp32",
             strstr(v->json, "target_update_interval") ? "" : ", \"target_update_interval\": 10");
}

static int prioritized(const variant *v) {
    return strstr(v->json, "prioritized") != NULL;
}

static void check_stats(const variant *v, fhd_learner *Lc, fhd_learner *Lg, const char *when,
                        double tol) {
    float dummy;
    ct_read(Lg, FHD_STATE_PARAMS, 0, 1, &dummy); /* drains the queue: the snapshot is current */
    fhd__update_stats sc, sg;
    Lc->ops->latest_stats(Lc->be, &sc);
    Lg->ops->latest_stats(Lg->be, &sg);
    ct_check(sc.update_index == sg.update_index, "%s %s: statistics of update %llu (cpu %llu)",
             v->name, when, (unsigned long long)sg.update_index,
             (unsigned long long)sc.update_index);
    ct_check(ct_rel(sg.loss, sc.loss) <= tol && isfinite(sg.loss),
             "%s %s: loss %.9g vs cpu %.9g (rel %.2e, tol %.0e)", v->name, when, sg.loss, sc.loss,
             ct_rel(sg.loss, sc.loss), tol);
    ct_check(ct_rel(sg.td_abs_mean, sc.td_abs_mean) <= tol, "%s %s: td_abs_mean %.9g vs %.9g",
             v->name, when, sg.td_abs_mean, sc.td_abs_mean);
    ct_check(ct_rel(sg.q_mean, sc.q_mean) <= 10 * tol || fabs(sg.q_mean - sc.q_mean) < 1e-5,
             "%s %s: q_mean %.9g vs %.9g", v->name, when, sg.q_mean, sc.q_mean);
    ct_check(ct_rel(sg.grad_norm, sc.grad_norm) <= 10 * tol, "%s %s: grad_norm %.9g vs %.9g",
             v->name, when, sg.grad_norm, sc.grad_norm);
    ct_check(sg.beta == sc.beta, "%s %s: beta %.9g vs %.9g (bit-identical)", v->name, when,
             sg.beta, sc.beta);
}

static void check_act(const variant *v, fhd_learner *Lc, fhd_learner *Lg, double tol) {
    const uint32_t n = 64, S = Lc->lo.S, D = Lc->lo.D, KT = Lc->lo.KT;
    float *obs = (float *)malloc(sizeof(float) * n * S);
    float *qc = (float *)malloc(sizeof(float) * n * KT), *qg = (float *)malloc(sizeof(float) * n * KT);
    int32_t *ac = (int32_t *)malloc(sizeof(int32_t) * n * D), *ag = (int32_t *)malloc(sizeof(int32_t) * n * D);
    uint64_t s = 99;
    for (uint32_t i = 0; i < n * S; i++)
        obs[i] = ct_normal(&s);
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = n;
    a.obs = obs;
    a.actions = ac;
    a.q_values = qc;
    int32_t rc = fhd__learner_act(Lc, &a);
    a.actions = ag;
    a.q_values = qg;
    int32_t rg = fhd__learner_act(Lg, &a);
    ct_check(rc == FHD_OK && rg == FHD_OK, "%s act: both succeed (%s)", v->name,
             rg == FHD_OK ? "" : Lg->err);
    double mx;
    double e = ct_relerr(qg, qc, (uint64_t)n * KT, &mx);
    ct_check(e <= tol, "%s act: Q values rel %.2e (max abs %.2e, tol %.0e)", v->name, e, mx, tol);
    int bad = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < D; d++) {
            const int32_t x = ac[i * D + d], y = ag[i * D + d];
            if (x == y)
                continue;
            const float *q = qc + (size_t)i * KT + Lc->lo.k_off[d];
            if (fabsf(q[x] - q[y]) > (float)tol * (1.0f + fabsf(q[x])))
                bad++;
        }
    ct_check(bad == 0, "%s act: greedy actions equal (except near-ties): %d differ", v->name, bad);
    free(obs);
    free(qc);
    free(qg);
    free(ac);
    free(ag);
}

/* The |TD| a quantised priority q = quantize((|td| + eps)^alpha) stands for. */
static double td_of_priority(uint64_t q, double alpha, double eps) {
    return pow((double)q / 16777216.0, 1.0 / alpha) - eps;
}

/* Compares the two learners' priorities as the |TD| errors they come from, relative to
 * max(|td|, 1e-3): near |td| = 0 the power alpha < 1 turns the last bits of a TD error into a
 * large relative difference of the priority itself (B1-sn's torso: 9e-2 where |td| ~ 1e-5),
 * and below 1e-3 a TD error is rounding noise of Q values of order one. Then copies the CPU's
 * priorities and running maximum into the CUDA learner (ct_copy_priorities), so that both
 * sample the same batches. */
static void copy_priorities(fhd_learner *Lc, fhd_learner *Lg, uint32_t N, double *max_rel) {
    uint64_t *pc = (uint64_t *)malloc(8 * N), *pg = (uint64_t *)malloc(8 * N);
    ct_read(Lc, FHD_STATE_REPLAY_PRIORITY, 0, N, pc);
    ct_read(Lg, FHD_STATE_REPLAY_PRIORITY, 0, N, pg);
    const double alpha = Lc->cfg.per_alpha, eps = Lc->cfg.per_eps;
    for (uint32_t i = 0; i < N; i++) {
        const double tc = td_of_priority(pc[i], alpha, eps), tg = td_of_priority(pg[i], alpha, eps);
        const double r = fabs(tg - tc) / fmax(fabs(tc), 1e-3);
        if (r > *max_rel)
            *max_rel = r;
    }
    free(pc);
    free(pg);
    ct_copy_priorities(Lc, Lg);
}

/* opt_two: 0, or the two-kernel optimiser forced with that many weights a thread */
static void run_variant(const variant *v0, uint64_t opt_two) {
    variant named = *v0;
    char name[96];
    if (opt_two) {
        snprintf(name, sizeof name, "%s/opt-two-%llu", v0->name, (unsigned long long)opt_two);
        named.name = name;
    }
    const variant *v = &named;
    char jc[1024], jg[1024];
    make_json(jc, sizeof jc, v, 0);
    make_json(jg, sizeof jg, v, 1);
    fhd_learner *Lc = ct_create(jc, NULL);
    if (!Lc) {
        ct_check(0, "%s: cpu learner", v->name);
        return;
    }
    fhd_learner *Lg = ct_create_cuda(jg);
    printf("-- %s (%s) on %s\n", v->name, v->precision, Lg->ops->device_name(Lg->be));
    if (opt_two) {
        const uint64_t bad = 3;
        int32_t rc = Lg->ops->write(Lg->be, FHD_CUDA_STATE_OPT_FORM, 0, 1, &bad);
        ct_check(rc == FHD_ERR_INVALID_ARGUMENT && strstr(Lg->ops->error(Lg->be), "form 3"),
                 "%s: optimiser form 3 refused (%d: %s)", v->name, rc, Lg->ops->error(Lg->be));
        rc = Lg->ops->write(Lg->be, FHD_CUDA_STATE_OPT_FORM, 0, 1, &opt_two);
        ct_check(rc == FHD_OK, "%s: optimiser form written (%s)", v->name,
                 rc == FHD_OK ? "" : Lg->ops->error(Lg->be));
    }
    {   /* the optimiser's form: the fused pass wherever the device has cooperative launch,
         * unless forced */
        uint64_t all[FHD_CUDA_INFO_COUNT];
        int dev = 0, coop = 0;
        ct_read(Lg, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, all);
        const enum cudaDeviceAttr ca = cudaDevAttrCooperativeLaunch;
        ct_check(cudaGetDevice(&dev) == cudaSuccess &&
                     cudaDeviceGetAttribute(&coop, ca, dev) == cudaSuccess,
                 "device attributes");
        const int form_ok = opt_two ? all[FHD_CUDA_INFO_OPT_FORM] == 0 &&
                                          all[FHD_CUDA_INFO_OPT_PER] == opt_two
                                    : (all[FHD_CUDA_INFO_OPT_FORM] != 0) == (coop != 0);
        ct_check(form_ok, "%s: optimiser form %llu with %llu weights a thread", v->name,
                 (unsigned long long)all[FHD_CUDA_INFO_OPT_FORM],
                 (unsigned long long)all[FHD_CUDA_INFO_OPT_PER]);
    }
    {   /* the plan's facts: all of them, or the first few (a reader built with fewer) */
        uint64_t all[FHD_CUDA_INFO_COUNT], first[2] = {9, 9};
        ct_read(Lg, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, all);
        ct_read(Lg, FHD_CUDA_STATE_INFO, 0, 2, first);
        ct_check(first[0] == all[0] && first[1] == all[1] &&
                     all[FHD_CUDA_INFO_ROWS_ONLINE] == Lg->cfg.batch_size * (1u + !!Lg->cfg.double_dqn),
                 "%s: plan facts (fallbacks %llu, online rows %llu), the first two alone the same",
                 v->name, (unsigned long long)all[0],
                 (unsigned long long)all[FHD_CUDA_INFO_ROWS_ONLINE]);
        /* dz transposed for the dW GEMMs: TF32 backward only, torso layers above layer 0 (in
         * "tf32" the loss kernel makes that dz, in "tf32-deep" the ReLU-backward kernel) */
        const uint64_t dzt = strcmp(v0->name, "tf32-deep") == 0 ? 6
                             : strcmp(v0->name, "tf32") == 0    ? 2
                                                               : 0;
        ct_check(all[FHD_CUDA_INFO_DZ_TRANSPOSED] == dzt,
                 "%s: dz transposed for layers %#llx (expected %#llx)", v->name,
                 (unsigned long long)all[FHD_CUDA_INFO_DZ_TRANSPOSED], (unsigned long long)dzt);
        /* the autotune's picks that are not the rule's: as many as the metrics' plan lists */
        size_t need = 0;
        fhd__learner_metrics(Lg, NULL, 0, &need);
        char *mt = (char *)malloc(need);
        uint64_t not_rule = 0;
        if (fhd__learner_metrics(Lg, mt, need, &need) == FHD_OK)
            for (const char *q = strstr(mt, "\"rule\":false"); q;
                 q = strstr(q + 1, "\"rule\":false"))
                not_rule++;
        ct_check(strstr(mt, "\"plan\":{") != NULL && all[FHD_CUDA_INFO_GEMM_TUNED] == not_rule,
                 "%s: %llu GEMMs with another configuration than the rule's, as the plan lists "
                 "(%llu)", v->name, (unsigned long long)all[FHD_CUDA_INFO_GEMM_TUNED],
                 (unsigned long long)not_rule);
        free(mt);
    }
    const uint32_t N = Lc->cfg.replay_capacity, S = Lc->lo.S, D = Lc->lo.D;
    const uint64_t P = Lc->lo.num_params, SN = Lc->lo.sn_size;
    fhd_learner *both[2] = {Lc, Lg};
    /* at least 200 steps, and enough to fill the replay (and so hold a batch) */
    const uint32_t steps = N / Lc->cfg.num_envs + 8 > 200 ? N / Lc->cfg.num_envs + 8 : 200;
    ct_feed(both, 2, Lc->cfg.num_envs, S, D, v->K, steps, 1234);

    /* replay contents */
    double mx;
    int same = ct_cmp_kind(Lc, Lg, FHD_STATE_REPLAY_OBS, 0, (uint64_t)N * S, &mx) == 0.0 &&
               ct_cmp_kind(Lc, Lg, FHD_STATE_REPLAY_NEXT_OBS, 0, (uint64_t)N * S, &mx) == 0.0 &&
               ct_cmp_kind(Lc, Lg, FHD_STATE_REPLAY_RETURNS, 0, N, &mx) == 0.0 &&
               ct_cmp_kind(Lc, Lg, FHD_STATE_REPLAY_DISC, 0, N, &mx) == 0.0;
    {
        int32_t *ac = (int32_t *)malloc(4 * (size_t)N * D), *ag = (int32_t *)malloc(4 * (size_t)N * D);
        ct_read(Lc, FHD_STATE_REPLAY_ACTIONS, 0, (uint64_t)N * D, ac);
        ct_read(Lg, FHD_STATE_REPLAY_ACTIONS, 0, (uint64_t)N * D, ag);
        same = same && memcmp(ac, ag, 4 * (size_t)N * D) == 0;
        free(ac);
        free(ag);
    }
    fhd__backend_scalars scc, scg;
    Lc->ops->get_scalars(Lc->be, &scc);
    Lg->ops->get_scalars(Lg->be, &scg);
    ct_check(same && scc.replay_pos == scg.replay_pos && scc.replay_size == scg.replay_size,
             "%s: replay ring identical after observe (size %llu, pos %llu)", v->name,
             (unsigned long long)scg.replay_size, (unsigned long long)scg.replay_pos);
    if (prioritized(v)) {
        uint64_t *pc = (uint64_t *)malloc(8 * N), *pg = (uint64_t *)malloc(8 * N);
        ct_read(Lc, FHD_STATE_REPLAY_PRIORITY, 0, N, pc);
        ct_read(Lg, FHD_STATE_REPLAY_PRIORITY, 0, N, pg);
        ct_check(memcmp(pc, pg, 8 * (size_t)N) == 0, "%s: priorities identical after observe",
                 v->name);
        free(pc);
        free(pg);
    }

    float *p0 = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
    uint32_t *ic = (uint32_t *)malloc(4 * Lc->cfg.batch_size), *ig = (uint32_t *)malloc(4 * Lc->cfg.batch_size);
    float *wc = (float *)malloc(4 * Lc->cfg.batch_size), *wg = (float *)malloc(4 * Lc->cfg.batch_size);
    const uint32_t B = Lc->cfg.batch_size;
    uint64_t idx_equal = 0, idx_total = 0;
    int every_update_equal = 1;
    double prio_rel = 0.0;
    for (int k = 1; k <= 100; k++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        int32_t rc = fhd__learner_train(Lc, 1, &st);
        int32_t rg = fhd__learner_train(Lg, 1, &st);
        if (rc != FHD_OK || rg != FHD_OK) {
            ct_check(0, "%s: train update %d: cpu %s / cuda %s", v->name, k, Lc->err, Lg->err);
            break;
        }
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        ct_read(Lc, FHD_STATE_LAST_WEIGHTS, 0, B, wc);
        ct_read(Lg, FHD_STATE_LAST_WEIGHTS, 0, B, wg);
        uint32_t eq = 0;
        for (uint32_t j = 0; j < B; j++)
            eq += ic[j] == ig[j];
        idx_equal += eq;
        idx_total += B;
        if (eq != B || memcmp(wc, wg, 4 * (size_t)B) != 0)
            every_update_equal = 0;
        if (k == 1) {
            ct_check(eq == B, "%s update 1: sampled indices identical (%u of %u)", v->name, eq, B);
            ct_check(memcmp(wc, wg, 4 * (size_t)B) == 0,
                     "%s update 1: importance weights bit-identical", v->name);
            check_stats(v, Lc, Lg, "update 1", v->tol_fwd * 10);
            double e = ct_cmp_kind(Lc, Lg, FHD_STATE_GRAD, 0, P, &mx);
            ct_check(e <= v->tol_grad, "%s update 1: gradient rel %.2e (max abs %.2e, tol %.0e)",
                     v->name, e, mx, v->tol_grad);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, &mx);
            ct_check(e <= v->tol_param1, "%s update 1: parameters rel %.2e (max abs %.2e)",
                     v->name, e, mx);
            /* the step itself */
            float *pc1 = ct_read_floats(Lc, FHD_STATE_PARAMS, P), *pg1 = ct_read_floats(Lg, FHD_STATE_PARAMS, P);
            for (uint64_t i = 0; i < P; i++) {
                pc1[i] -= p0[i];
                pg1[i] -= p0[i];
            }
            e = ct_relerr(pg1, pc1, P, &mx);
            ct_check(e <= 100 * v->tol_grad, "%s update 1: parameter step rel %.2e (max abs %.2e)",
                     v->name, e, mx);
            free(pc1);
            free(pg1);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_ADAM_M, 0, P, &mx);
            ct_check(e <= v->tol_grad, "%s update 1: Adam m rel %.2e", v->name, e);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_ADAM_V, 0, P, &mx);
            ct_check(e <= 2 * v->tol_grad, "%s update 1: Adam v rel %.2e", v->name, e);
            if (SN) {
                e = ct_cmp_kind(Lc, Lg, FHD_STATE_SN, 0, 2 * SN, &mx);
                ct_check(e <= v->tol_fwd * 10, "%s update 1: spectral-norm vectors rel %.2e",
                         v->name, e);
            }
        }
        if (prioritized(v) && !v->free_running)
            copy_priorities(Lc, Lg, N, &prio_rel);
    }
    if (prioritized(v) && !v->free_running) {
        ct_check(every_update_equal,
                 "%s: indices and weights identical at every one of 100 updates", v->name);
        /* FP32 2e-3, TF32 0.6 (see copy_priorities) */
        const double tol = v->tol_prio > 0 ? v->tol_prio : 200 * v->tol_fwd;
        ct_check(prio_rel <= tol,
                 "%s: new priorities agree (their |td|: max difference %.2e relative to "
                 "max(|td|, 1e-3), tol %.0e)", v->name, prio_rel, tol);
    } else {
        const double frac = (double)idx_equal / (double)idx_total;
        ct_check(frac >= (prioritized(v) ? 0.98 : 1.0),
                 "%s: %.4f of the sampled indices identical over 100 updates", v->name, frac);
    }
    check_stats(v, Lc, Lg, "update 100", v->tol_fwd * 100);
    double e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, P, &mx);
    ct_check(e <= v->tol_param100, "%s update 100: online parameters rel %.2e (max abs %.2e, tol %.0e)",
             v->name, e, mx, v->tol_param100);
    e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, P, P, &mx);
    ct_check(e <= v->tol_param100, "%s update 100: target parameters rel %.2e (max abs %.2e)",
             v->name, e, mx);
    if (SN) {
        e = ct_cmp_kind(Lc, Lg, FHD_STATE_SN, 0, 2 * SN, &mx);
        ct_check(e <= v->tol_param100 * 10, "%s update 100: spectral-norm vectors rel %.2e",
                 v->name, e);
    }
    if (opt_two) { /* refused once the learner has trained (the capture zeroes the gradient) */
        const uint64_t autom = 0;
        const int32_t rc = Lg->ops->write(Lg->be, FHD_CUDA_STATE_OPT_FORM, 0, 1, &autom);
        ct_check(rc == FHD_ERR_INVALID_ARGUMENT, "%s: optimiser form refused after training (%d)",
                 v->name, rc);
    }
    char msg[256] = {0};
    int32_t inv = Lg->ops->check_invariants(Lg->be, msg, sizeof msg);
    ct_check(inv == FHD_OK, "%s: CUDA invariants hold (%s)", v->name, msg);
    check_act(v, Lc, Lg, v->tol_param100 * 10);
    free(p0);
    free(ic);
    free(ig);
    free(wc);
    free(wg);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* train_batch: same host batches on both backends. */
static void run_train_batch(const variant *v) {
    char jc[1024], jg[1024];
    make_json(jc, sizeof jc, v, 0);
    make_json(jg, sizeof jg, v, 1);
    fhd_learner *Lc = ct_create(jc, NULL);
    fhd_learner *Lg = ct_create_cuda(jg);
    const ct_batch_tol tol = {v->tol_fwd * 10, v->tol_grad, v->tol_param1 * 3, 1};
    ct_train_batches(v->name, Lc, Lg, v->K, &tol);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

#endif
