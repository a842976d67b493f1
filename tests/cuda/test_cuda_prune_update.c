/* test_cuda_prune_update.c - gradual magnitude pruning in the CUDA backend's update, against
 * the CPU backend (same config, seed and inputs; docs/design.md section 4, Pruning).
 *
 *   1. exact: weights full of ties (7 magnitudes of both signs, online and target) written into
 *      both learners, lr 1e-30 (Adam then moves no weight by a bit), so that both select from
 *      bit-identical weights: after every update of a schedule of five pruning updates the
 *      masks are identical (the tie rule: among equal magnitudes the lower flat index first) and
 *      so are the parameters; pruned weights and their Adam moments 0, the gradient 0 there,
 *      biases and out-of-scope weights never masked, each group's zeros the schedule's count.
 *      Per tensor / global, torso / all, dueling / plain head, layer 0's dW in parts (fuse_dw0,
 *      split_dw0), a conv torso; once with train(1) calls and once with one train(n) call (the
 *      FIRST / STEADY / LAST captures). Q values of act agree.
 *   2. parity over real training (lr 1e-3, 100 updates, nine pruning updates): the same batches
 *      every update (uniform replay); before each pruning update the parameters are compared
 *      (within the fp32 tolerance of test_cuda_parity.c) and the CUDA learner is then given the
 *      CPU's parameters, moments and masks, so that each selection starts from the same state;
 *      after it the masks are equal but for swaps at the threshold (an entry pruned on one
 *      backend only must be among the smallest kept magnitudes of the other: two weights whose
 *      magnitudes one update's rounding reorders), with the schedule's count on both.
 *   3. checkpoints: CPU (40 updates) -> CUDA: masks and parameters exact; 9 updates without a
 *      pruning update stay within tolerance of the CPU continuing from the same file; both
 *      cross two pruning updates (counts exact, pruned weights 0); CUDA -> CPU: exact again,
 *      and the CPU learner trains on with the masks in force.
 *   4. the graph: each capture has exactly FHD_PRUNE_PASSES + 2 more nodes than the same config
 *      without pruning (the gradient mask, the passes, the apply kernel), none of them 1x1x1;
 *      1,500 updates through the front across the whole schedule without a synchronisation by
 *      the backend, the graphs unchanged after them, and the final sparsity reached exactly.
 *   5. the guard: train_batch with a skipped update between pruning updates (prune_frequency
 *      1): the skip prunes nothing and the schedule follows the applied updates, as on the CPU
 *      (masks identical after every call).
 * Sections 1, 2 and 4 also run with spectral norm ("last", "all"; the optimiser masks the
 * corrected gradient) and detailed_metrics (the head's gradient norms masked): in 1 and 2 the
 * statistics (gradient norm, each layer's and each branch's norms; divmetrics_test.h) against
 * the CPU's after every call, within update 1's tolerances where the weights are the same (and
 * the applied gradient within 1e-4), the drift's in 2; the graph has the same FHD_PRUNE_PASSES +
 * 2 nodes more.
 * Exits 77 without a CUDA device.
 */
#include "divmetrics_test.h" /* cuda_test.h, and the statistics' comparisons */
#include "prune.cuh"
#include "prune_test.h"

#include <unistd.h>

#define MLP(dueling)                                                                               \
    "\"obs_dim\": 12, \"actions\": [6], \"hidden\": [64, 48], \"dueling\": " dueling ", "          \
    "\"double_dqn\": true, \"batch_size\": 64, \"replay_capacity\": 512, \"replay\": "             \
    "\"uniform\", \"num_envs\": 4, \"seed\": 7, \"max_grad_norm\": 1.0, \"learning_starts\": 0, "  \
    "\"target_update_interval\": 10, \"prune_sparsity\": 0.8"
#define BASE MLP("true")
#define EXACT_SCHEDULE                                                                             \
    ", \"lr\": 1e-30, \"prune_start\": 3, \"prune_end\": 15, \"prune_frequency\": 3"
#define REAL_SCHEDULE                                                                              \
    ", \"lr\": 0.001, \"prune_start\": 10, \"prune_end\": 90, \"prune_frequency\": 10"

static char jbuf[2][2048];

static const char *cfg_of(int k, const char *backend, const char *base, const char *extra) {
    snprintf(jbuf[k], sizeof jbuf[k], "{\"backend\": \"%s\", %s%s}", backend, base, extra);
    return jbuf[k];
}

static void pair(const char *base, const char *extra, fhd_learner **Lc, fhd_learner **Lg) {
    *Lc = ct_create(cfg_of(0, "cpu", base, extra), NULL);
    if (!*Lc) {
        printf("FAIL: cpu learner for %s%s\n", base, extra);
        exit(1);
    }
    *Lg = ct_create_cuda(cfg_of(1, "cuda", base, extra));
}

/* Observations of the config: the MLP's S floats, or an image's (frame_stack 1). */
static void feed(fhd_learner *Lc, fhd_learner *Lg, uint32_t steps, uint64_t seed) {
    fhd_learner *both[2] = {Lc, Lg};
    ct_feed(both, 2, Lc->cfg.num_envs, Lc->lo.S, Lc->lo.D, Lc->lo.K, steps, seed);
}

/* ---- 1. exact: bit-identical weights full of ties ------------------------------------------ */

static void check_act(fhd_learner *Lc, fhd_learner *Lg, const char *name) {
    const uint32_t n = 32, S = Lc->lo.S, KT = Lc->lo.KT;
    float *obs = (float *)malloc(4 * (size_t)n * S), *qc = (float *)malloc(4 * (size_t)n * KT),
          *qg = (float *)malloc(4 * (size_t)n * KT);
    int32_t *a = (int32_t *)malloc(4 * (size_t)n * Lc->lo.D);
    uint64_t s = 3;
    for (uint32_t i = 0; i < n * S; i++)
        obs[i] = ct_normal(&s);
    fhd_act_args aa = FHD_ACT_ARGS_INIT;
    aa.num_obs = n;
    aa.obs = obs;
    aa.actions = a;
    aa.q_values = qc;
    int32_t rc = fhd__learner_act(Lc, &aa);
    aa.q_values = qg;
    int32_t rg = fhd__learner_act(Lg, &aa);
    double mx, e = ct_relerr(qg, qc, (uint64_t)n * KT, &mx);
    ct_check(rc == FHD_OK && rg == FHD_OK && e <= 1e-5, "%s: act Q values rel %.2e (max abs %.2e)",
             name, e, mx);
    free(obs);
    free(qc);
    free(qg);
    free(a);
}

static void exact_variant(const char *name, const char *base, const char *extra, int one_call) {
    char ex[1024];
    snprintf(ex, sizeof ex, EXACT_SCHEDULE "%s", extra);
    fhd_learner *Lc, *Lg;
    pair(base, ex, &Lc, &Lg);
    const uint64_t P = Lc->lo.num_params;
    feed(Lc, Lg, 140, 1234);
    write_ties(Lc);
    write_ties(Lg);
    const uint64_t T = 17; /* pruning updates 3, 6, 9, 12, 15; two more after the end */
    int masks = 1, params = 1, inv = 1, counts = 1;
    uint64_t dm = 0, dp = 0;
    /* spectral norm (its masked correction) and detailed_metrics: their statistics too */
    const int stats = Lc->cfg.spectral_norm != FHD_SN_NONE || Lc->cfg.detailed_metrics;
    double worst_s = 0.0, worst_g = 0.0;
    const char *worst_what = "-";
    for (uint64_t t = 1; t <= T; t += one_call ? T : 1) {
        const uint32_t n = one_call ? (uint32_t)T : 1u;
        ct_check(fhd__learner_train(Lc, n, NULL) == FHD_OK &&
                     fhd__learner_train(Lg, n, NULL) == FHD_OK,
                 "%s: train(%u) (%s)", name, n, Lg->err);
        const uint64_t done = t + n - 1;
        masks &= same_floats(Lc, Lg, FHD_STATE_MASK, P, &dm);
        params &= same_floats(Lc, Lg, FHD_STATE_PARAMS, 2 * P, &dp);
        char what[96];
        snprintf(what, sizeof what, "%s after update %llu", name, (unsigned long long)done);
        double sp; /* a pruning update masked its gradient with the masks before it */
        inv &= invariants(Lg, !fhd__prune_at(&Lg->cfg, done, &sp), what) && invariants(Lc, 0, what);
        float *mask = ct_read_floats(Lg, FHD_STATE_MASK, P);
        counts &= counts_as_schedule(Lg, mask, done);
        free(mask);
        if (stats) { /* the same weights: the statistics and the applied gradient agree */
            const char *wh;
            const double e = stats_worst(Lc, Lg, &wh),
                         eg = ct_cmp_kind(Lc, Lg, FHD_STATE_GRAD, 0, P, NULL);
            worst_what = !(e <= worst_s) ? wh : worst_what;
            worst_s = !(e <= worst_s) ? e : worst_s;
            worst_g = !(eg <= worst_g) ? eg : worst_g;
        }
        if (!masks || !params)
            printf("       %s: update %llu: %llu masks, %llu parameters differ\n", name,
                   (unsigned long long)done, (unsigned long long)dm, (unsigned long long)dp);
    }
    ct_check(masks, "%s: masks identical to the cpu's after every call", name);
    ct_check(params, "%s: parameters (online and target) bit for bit the cpu's", name);
    ct_check(inv, "%s: pruned weights, moments and gradients 0; biases never masked", name);
    ct_check(counts, "%s: each group's zeros the schedule's count", name);
    if (stats) {
        ct_check(worst_s <= tight.grad && worst_g <= 1e-4,
                 "%s: after every call the statistics within rel %.2e of the cpu's (%s; tol %.0e), "
                 "the applied gradient within %.2e (tol 1e-4)",
                 name, worst_s, worst_what, tight.grad, worst_g);
        check_features(name, "at the end", Lc, Lg, &tight);
        if (Lc->cfg.detailed_metrics)
            check_json(name, Lg);
    }
    check_act(Lc, Lg, name);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* ---- 2. parity over real training ---------------------------------------------------------- */

/* The CUDA learner from the CPU's state: masks, parameters, moments, spectral-norm vectors. */
static void start_equal(fhd_learner *Lc, fhd_learner *Lg) {
    const uint64_t P = Lc->lo.num_params;
    copy_kind(Lc, Lg, FHD_STATE_MASK, P);
    copy_kind(Lc, Lg, FHD_STATE_PARAMS, 2 * P);
    copy_kind(Lc, Lg, FHD_STATE_ADAM_M, P);
    copy_kind(Lc, Lg, FHD_STATE_ADAM_V, P);
    if (Lc->lo.sn_size)
        copy_kind(Lc, Lg, FHD_STATE_SN, 2 * Lc->lo.sn_size);
}

static void parity_variant(const char *name, const char *base, const char *extra) {
    char ex[1024];
    snprintf(ex, sizeof ex, REAL_SCHEDULE "%s", extra);
    fhd_learner *Lc, *Lg;
    pair(base, ex, &Lc, &Lg);
    const uint64_t P = Lc->lo.num_params;
    const uint32_t B = Lc->cfg.batch_size;
    feed(Lc, Lg, 200, 4321);
    uint32_t *ic = (uint32_t *)malloc(4 * B), *ig = (uint32_t *)malloc(4 * B);
    int idx_same = 1, counts = 1, inv = 1, explained_all = 1;
    double worst = 0.0, worst_s = 0.0;
    uint64_t swaps = 0, events = 0;
    const int stats = Lc->cfg.spectral_norm != FHD_SN_NONE || Lc->cfg.detailed_metrics;
    const char *worst_what = "-";
    for (uint64_t t = 1; t <= 100; t++) {
        double s;
        const int event = fhd__prune_at(&Lc->cfg, t, &s);
        if (event) { /* compare the drift since the last event, then start from the cpu's state */
            double mx, e = 0.0;
            float *a = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
                  *b = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
            e = ct_relerr(a, b, 2 * P, &mx);
            worst = e > worst ? e : worst;
            free(a);
            free(b);
            start_equal(Lc, Lg);
        }
        ct_check(fhd__learner_train(Lc, 1, NULL) == FHD_OK &&
                     fhd__learner_train(Lg, 1, NULL) == FHD_OK,
                 "%s: train update %llu (%s)", name, (unsigned long long)t, Lg->err);
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        idx_same &= memcmp(ic, ig, 4 * (size_t)B) == 0;
        if (stats) { /* the update's statistics, every update */
            const char *what;
            const double es = stats_worst(Lc, Lg, &what);
            worst_what = !(es <= worst_s) ? what : worst_what;
            worst_s = !(es <= worst_s) ? es : worst_s;
        }
        if (!event)
            continue;
        events++;
        int explained;
        const uint64_t sw = mask_swaps(Lc, Lg, &explained);
        swaps += sw;
        explained_all &= explained;
        float *mc = ct_read_floats(Lc, FHD_STATE_MASK, P),
              *mg = ct_read_floats(Lg, FHD_STATE_MASK, P);
        counts &= counts_as_schedule(Lc, mc, t) && counts_as_schedule(Lg, mg, t);
        free(mc);
        free(mg);
        inv &= invariants(Lg, 0, name);
        if (sw) { /* a swapped pair differs by a whole weight: the next stretch starts equal */
            printf("       %s: update %llu: %llu entries swapped at the threshold\n", name,
                   (unsigned long long)t, (unsigned long long)sw);
            start_equal(Lc, Lg);
        }
    }
    double mx, e = 0.0;
    float *a = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
          *b = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
    e = ct_relerr(a, b, 2 * P, &mx);
    worst = e > worst ? e : worst;
    free(a);
    free(b);
    ct_check(idx_same, "%s: the same batches at every update", name);
    ct_check(events == 9 && counts, "%s: %llu pruning updates, each group at the schedule's count",
             name, (unsigned long long)events);
    ct_check(swaps <= 4 && explained_all,
             "%s: masks equal but for %llu swaps at the threshold over 9 selections", name,
             (unsigned long long)swaps);
    ct_check(inv, "%s: pruned weights and their moments 0", name);
    ct_check(worst <= 2e-4, "%s: parameters within rel %.2e of the cpu's (worst stretch, tol 2e-4)",
             name, worst);
    if (stats) {
        ct_check(worst_s <= drift.grad,
                 "%s: every update's statistics within rel %.2e of the cpu's (%s; tol %.0e)", name,
                 worst_s, worst_what, drift.grad);
        check_features(name, "after 100 updates", Lc, Lg, &drift);
    }
    free(ic);
    free(ig);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* ---- 3. checkpoints CPU -> CUDA -> CPU ------------------------------------------------------- */

static void checkpoints(void) {
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "/tmp/fhd_prune_cpu_%d.safetensors", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/fhd_prune_cuda_%d.safetensors", (int)getpid());
    const char *ex = REAL_SCHEDULE ", \"prune_scope\": \"all\"";
    fhd_learner *Lc, *Lg;
    pair(BASE, ex, &Lc, &Lg);
    const uint64_t P = Lc->lo.num_params;
    fhd_learner *one[1] = {Lc};
    ct_feed(one, 1, Lc->cfg.num_envs, Lc->lo.S, Lc->lo.D, Lc->lo.K, 200, 55);
    ct_check(fhd__learner_train(Lc, 40, NULL) == FHD_OK, "ckpt: cpu trains 40 updates");
    ct_check(fhd__checkpoint_save(Lc, pa, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "ckpt: cpu save (%s)",
             Lc->err);
    ct_check(fhd__checkpoint_load(Lg, pa, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
             "ckpt: cuda load (%s)", Lg->err);
    float *m0 = ct_read_floats(Lc, FHD_STATE_MASK, P);
    ct_check(same_floats(Lc, Lg, FHD_STATE_MASK, P, NULL) &&
                 same_floats(Lc, Lg, FHD_STATE_PARAMS, 2 * P, NULL) &&
                 same_floats(Lc, Lg, FHD_STATE_ADAM_M, P, NULL) && counts_as_schedule(Lg, m0, 40),
             "ckpt: cpu -> cuda: masks (at update 40's sparsity), parameters and moments exact");
    free(m0);
    /* named mask tensors read through the front, as torch.nn.utils.prune names them */
    fhd__tensor_ref t;
    fhd__layout_mask(&Lg->lo, 0, &t);
    float *tm = (float *)malloc(4 * t.count), *all = ct_read_floats(Lc, FHD_STATE_MASK, P);
    ct_check(fhd__learner_tensor_read(Lg, t.name, tm, t.count) == FHD_OK &&
                 memcmp(tm, all + t.offset, 4 * t.count) == 0,
             "ckpt: tensor_read(\"%s\") on cuda", t.name);
    free(tm);
    free(all);
    /* the cpu continuing from the same file is the reference */
    fhd_learner *Lr = ct_create(cfg_of(0, "cpu", BASE, ex), NULL);
    ct_check(fhd__checkpoint_load(Lr, pa, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "ckpt: cpu reload");
    ct_check(fhd__learner_train(Lr, 9, NULL) == FHD_OK && fhd__learner_train(Lg, 9, NULL) == FHD_OK,
             "ckpt: 9 updates on both (41..49: no pruning update)");
    {
        double mx;
        float *a = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
              *b = ct_read_floats(Lr, FHD_STATE_PARAMS, 2 * P);
        const double e = ct_relerr(a, b, 2 * P, &mx);
        ct_check(e <= 1e-4 && same_floats(Lr, Lg, FHD_STATE_MASK, P, NULL),
                 "ckpt: after the load cuda stays within rel %.2e of the cpu, masks unchanged", e);
        free(a);
        free(b);
    }
    ct_check(fhd__learner_train(Lr, 11, NULL) == FHD_OK &&
                 fhd__learner_train(Lg, 11, NULL) == FHD_OK,
             "ckpt: 11 more on both (pruning updates 50 and 60)");
    {
        float *mc = ct_read_floats(Lr, FHD_STATE_MASK, P),
              *mg = ct_read_floats(Lg, FHD_STATE_MASK, P);
        int explained;
        const uint64_t sw = mask_swaps(Lr, Lg, &explained);
        ct_check(counts_as_schedule(Lr, mc, 60) && counts_as_schedule(Lg, mg, 60) &&
                     invariants(Lg, 0, "ckpt cuda"),
                 "ckpt: both at update 60's sparsity (%llu swaps at the threshold, explained %d)",
                 (unsigned long long)sw, explained);
        free(mc);
        free(mg);
    }
    ct_check(fhd__checkpoint_save(Lg, pb, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
             "ckpt: cuda save (%s)", Lg->err);
    fhd_learner *Lb = ct_create(cfg_of(0, "cpu", BASE, ex), NULL);
    ct_check(fhd__checkpoint_load(Lb, pb, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "ckpt: cpu load (%s)",
             Lb->err);
    ct_check(same_floats(Lb, Lg, FHD_STATE_MASK, P, NULL) &&
                 same_floats(Lb, Lg, FHD_STATE_PARAMS, 2 * P, NULL) &&
                 same_floats(Lb, Lg, FHD_STATE_ADAM_V, P, NULL),
             "ckpt: cuda -> cpu: masks, parameters and moments exact");
    ct_check(fhd__learner_train(Lb, 35, NULL) == FHD_OK && invariants(Lb, 0, "ckpt cpu"),
             "ckpt: the cpu trains on to update 95 with the masks in force");
    float *mb = ct_read_floats(Lb, FHD_STATE_MASK, P);
    ct_check(counts_as_schedule(Lb, mb, 95), "ckpt: the final sparsity on the cpu after the trip");
    free(mb);
    unlink(pa);
    unlink(pb);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
    fhd__learner_destroy(Lr);
    fhd__learner_destroy(Lb);
}

/* ---- 4. the graph ---------------------------------------------------------------------------- */

static void graph(const char *name, const char *base) {
    const char *sched = ", \"lr\": 0.0001, \"prune_start\": 100, \"prune_end\": 1000, "
                        "\"prune_frequency\": 100";
    fhd_learner *Lg = ct_create_cuda(cfg_of(1, "cuda", base, sched));
    char plain[2048];
    snprintf(plain, sizeof plain, "%s", base);
    char *p = strstr(plain, ", \"prune_sparsity\": 0.8");
    if (p)
        memmove(p, p + strlen(", \"prune_sparsity\": 0.8"),
                strlen(p + strlen(", \"prune_sparsity\": 0.8")) + 1);
    fhd_learner *La = ct_create_cuda(cfg_of(0, "cuda", plain, ""));
    cudaGraph_t gs[FHD_CUDA_GRAPHS];
    size_t ns[FHD_CUDA_GRAPHS];
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        int pn, one, pn0, one0;
        cudaGraph_t g0;
        ns[v] = nodes_of(Lg, v, &pn, &one, &gs[v]);
        const size_t n0 = nodes_of(La, v, &pn0, &one0, &g0);
        if (!gs[v] && !g0)
            continue;
        ct_check(ns[v] == n0 + FHD_PRUNE_PASSES + 2 && pn == FHD_PRUNE_PASSES + 2 && one == 0 &&
                     pn0 == 0,
                 "%s capture %d: %zu nodes, %zu without pruning; %d pruning kernels (%d expected), "
                 "%d of them 1x1x1",
                 name, v, ns[v], n0, pn, FHD_PRUNE_PASSES + 2, one);
    }
    fhd_learner *Ls[1] = {Lg};
    ct_feed(Ls, 1, Lg->cfg.num_envs, Lg->lo.S, Lg->lo.D, Lg->lo.K, 150, 9);
    const uint64_t s0 = ct_sync_count(Lg);
    int ok = 1;
    for (int k = 0; k < 15 && ok; k++)
        ok = fhd__learner_train(Lg, 100, NULL) == FHD_OK;
    const uint64_t s1 = ct_sync_count(Lg);
    ct_check(ok && s1 == s0, "%s: 1,500 updates across the schedule, %llu synchronisations", name,
             (unsigned long long)(s1 - s0));
    int same = 1;
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        int pn, one;
        cudaGraph_t g;
        same &= nodes_of(Lg, v, &pn, &one, &g) == ns[v] && g == gs[v];
    }
    ct_check(same, "%s: the same graphs with the same nodes after them", name);
    const uint64_t P = Lg->lo.num_params;
    float *mask = ct_read_floats(Lg, FHD_STATE_MASK, P);
    uint64_t z[FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 2],
        n[FHD_MAX_CONV_LAYERS + FHD_MAX_HIDDEN_LAYERS + 2];
    zeros_of(Lg, mask, z, n);
    int exact = 1;
    for (uint32_t g = 0; g < group_count(Lg); g++) {
        exact &= z[g] == fhd__prune_count(0.8, n[g]);
        printf("       %s group %u: %llu of %llu weights pruned (%.4f)\n", name, g,
               (unsigned long long)z[g], (unsigned long long)n[g], (double)z[g] / (double)n[g]);
    }
    ct_check(exact && invariants(Lg, 1, name), "%s: the final sparsity 0.8 reached exactly", name);
    free(mask);
    fhd__learner_destroy(Lg);
    fhd__learner_destroy(La);
}

/* ---- 5. the guard ---------------------------------------------------------------------------- */

static void guard(void) {
    const char *ex =
        ", \"lr\": 1e-30, \"prune_start\": 2, \"prune_end\": 8, \"prune_frequency\": 1, "
        "\"prune_scope\": \"all\", \"loss\": \"mse\", \"guard\": {\"max_loss\": 1e20}";
    fhd_learner *Lc, *Lg;
    pair(BASE, ex, &Lc, &Lg);
    const uint64_t P = Lc->lo.num_params;
    write_ties(Lc);
    write_ties(Lg);
    /* calls 3 and 5 skipped: applied updates 1, 2, -, 3, -, 4, ..., 8 */
    int masks = 1, counts = 1;
    uint64_t applied = 0;
    for (int k = 1; k <= 10; k++) {
        const float r = k == 3 || k == 5 ? 1e30f : 0.5f;
        ct_check(ct_host_batch_seeded(Lc, r, (uint64_t)k, NULL) == FHD_OK &&
                     ct_host_batch_seeded(Lg, r, (uint64_t)k, NULL) == FHD_OK,
                 "guard: train_batch %d", k);
        applied += r < 1.0f;
        masks &= same_floats(Lc, Lg, FHD_STATE_MASK, P, NULL) &&
                 same_floats(Lc, Lg, FHD_STATE_PARAMS, 2 * P, NULL);
        float *mg = ct_read_floats(Lg, FHD_STATE_MASK, P);
        counts &= counts_as_schedule(Lg, mg, applied);
        free(mg);
    }
    fhd__backend_scalars sc, sg;
    Lc->ops->get_scalars(Lc->be, &sc);
    Lg->ops->get_scalars(Lg->be, &sg);
    ct_check(sg.updates == 8 && sg.skipped == 2 && sc.updates == 8 && sc.skipped == 2,
             "guard: 8 applied, 2 skipped on both (cuda %llu / %llu)",
             (unsigned long long)sg.updates, (unsigned long long)sg.skipped);
    ct_check(masks && counts, "guard: masks and weights as the cpu's after every call, the "
                              "schedule at the applied updates");
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

#define CONV_BASE                                                                                  \
    "\"obs_shape\": [3, 11, 11], \"conv\": [{\"out\": 8, \"kernel\": 3, \"stride\": 2}, "          \
    "{\"out\": 12, \"kernel\": 3, \"stride\": 1, \"padding\": 1}], \"hidden\": [32], "             \
    "\"actions\": [4], \"dueling\": true, \"double_dqn\": true, \"batch_size\": 48, "              \
    "\"replay_capacity\": 512, \"replay\": \"uniform\", \"num_envs\": 4, \"seed\": 5, "            \
    "\"max_grad_norm\": 1.0, \"learning_starts\": 0, \"target_update_interval\": 10, "             \
    "\"prune_sparsity\": 0.8"
/* layer 0's dW as the ReLU backward's partials (two hidden layers, batch 256: fuse_dw0) and as
 * two halves of the batch (one hidden layer, batch 128: split_dw0) */
#define FUSE_BASE                                                                                  \
    "\"obs_dim\": 16, \"actions\": [5], \"hidden\": [128, 64], \"dueling\": true, "                \
    "\"double_dqn\": true, \"batch_size\": 256, \"replay_capacity\": 1024, \"replay\": "           \
    "\"uniform\", \"num_envs\": 8, \"seed\": 9, \"max_grad_norm\": 1.0, \"learning_starts\": 0, "  \
    "\"target_update_interval\": 10, \"prune_sparsity\": 0.8"
#define SPLIT_BASE                                                                                 \
    "\"obs_dim\": 16, \"actions\": [5], \"hidden\": [128], \"dueling\": false, "                   \
    "\"double_dqn\": false, \"batch_size\": 128, \"replay_capacity\": 1024, \"replay\": "          \
    "\"uniform\", \"num_envs\": 8, \"seed\": 9, \"max_grad_norm\": 1.0, \"learning_starts\": 0, "  \
    "\"target_update_interval\": 10, \"prune_sparsity\": 0.8"

/* The metrics' plan of a pruning learner of `base` holds `what` (the path a variant is for). */
static void plan_has(const char *name, const char *base, const char *what) {
    fhd_learner *L = ct_create_cuda(cfg_of(1, "cuda", base, ""));
    size_t need = 0;
    fhd__learner_metrics(L, NULL, 0, &need);
    char *m = (char *)malloc(need + 1);
    const int ok = fhd__learner_metrics(L, m, need + 1, &need) == FHD_OK && strstr(m, what) &&
                   strstr(m, "\"prune\":true");
    ct_check(ok, "%s: the plan says %s and \"prune\":true", name, what);
    free(m);
    fhd__learner_destroy(L);
}

int main(void) {
    ct_require_gpu();
    plan_has("fuse config", FUSE_BASE, "\"fuse_dw0\":true");
    plan_has("split config", SPLIT_BASE, "\"split_dw0\":true");
    plan_has("conv config", CONV_BASE, "\"prune\":true");
    exact_variant("exact per-tensor torso", BASE, "", 0);
    exact_variant("exact global all", BASE, ", \"prune_global\": true, \"prune_scope\": \"all\"",
                  0);
    exact_variant("exact per-tensor all, plain head", MLP("false"), ", \"prune_scope\": \"all\"",
                  0);
    exact_variant("exact train(n) global", BASE, ", \"prune_global\": true", 1);
    exact_variant("exact fuse_dw0 all", FUSE_BASE, ", \"prune_scope\": \"all\"", 0);
    exact_variant("exact split_dw0 global", SPLIT_BASE, ", \"prune_global\": true", 1);
    exact_variant("exact conv all", CONV_BASE, ", \"prune_scope\": \"all\"", 0);
    exact_variant("exact conv global train(n)", CONV_BASE, ", \"prune_global\": true", 1);
    parity_variant("parity per-tensor torso", BASE, "");
    parity_variant("parity global all", BASE, ", \"prune_global\": true, \"prune_scope\": \"all\"");
    parity_variant("parity fuse_dw0 all adamw", FUSE_BASE,
                   ", \"prune_scope\": \"all\", \"optimizer\": \"adamw\", \"weight_decay\": 0.01");
    parity_variant("parity conv all", CONV_BASE, ", \"prune_scope\": \"all\"");
    /* with spectral norm (the optimiser's masked correction) and detailed_metrics */
    exact_variant("exact sn last", BASE, ", \"spectral_norm\": \"last\"", 0);
    exact_variant("exact sn all global all", BASE,
                  ", \"spectral_norm\": \"all\", \"prune_global\": true, \"prune_scope\": \"all\"",
                  0);
    exact_variant("exact sn all fuse_dw0 train(n)", FUSE_BASE, ", \"spectral_norm\": \"all\"", 1);
    exact_variant("exact sn all split_dw0", SPLIT_BASE, ", \"spectral_norm\": \"all\"", 0);
    exact_variant("exact detailed all", BASE,
                  ", \"prune_scope\": \"all\", \"detailed_metrics\": true", 0);
    exact_variant("exact detailed sn all global all, plain head", MLP("false"),
                  ", \"prune_scope\": \"all\", \"prune_global\": true, \"detailed_metrics\": true, "
                  "\"spectral_norm\": \"all\"",
                  0);
    parity_variant("parity sn last", BASE, ", \"spectral_norm\": \"last\"");
    parity_variant("parity sn all fuse_dw0 all", FUSE_BASE,
                   ", \"spectral_norm\": \"all\", \"prune_scope\": \"all\"");
    parity_variant(
        "parity detailed global all", BASE,
        ", \"prune_global\": true, \"prune_scope\": \"all\", \"detailed_metrics\": true");
    parity_variant(
        "parity detailed sn last all", BASE,
        ", \"prune_scope\": \"all\", \"detailed_metrics\": true, \"spectral_norm\": \"last\"");
    checkpoints();
    graph("B1-like", FUSE_BASE);
    graph("conv", CONV_BASE);
    graph("sn all + detailed_metrics",
          BASE ", \"spectral_norm\": \"all\", \"detailed_metrics\": true");
    guard();
    return ct_finish();
}
