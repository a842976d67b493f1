/* test_cuda_divmetrics.c - the action-diversity term (diversity_coef, diversity_temperature) and
 * detailed_metrics on the CUDA backend against the CPU reference (same config, seed and data),
 * and what they cost the captured update.
 *
 *   1. train, per variant (dueling / double DQN / PER / CQL together, plain uniform, spectral
 *      norm, a batch of 32-row loss blocks, 40 actions, B1's torso, a head too wide for the fused
 *      dx, a head too wide for staged tiles, a conv torso, the two-kernel optimiser forced):
 *      30 train(1) updates with the CPU's priorities copied into the CUDA learner after each, so
 *      that both sample the same batches (indices and weights identical at every update); at
 *      updates 1, 2, 5, 10, 20, 30 the loss (with the diversity term), diversity_entropy, q_delta
 *      (null without double DQN), every layer's gradient norm and the per-branch head weight and
 *      gradient norms within the tolerances below; update 1's gradient, parameters and Adam
 *      moments; the metrics JSON carries the same values; uniform variants then run train(25)
 *      (the FIRST / STEADY / LAST captures) against the CPU's.
 *   2. train_batch: the same host batches on both backends (statistics as above, TD errors), and
 *      the diversity term's own gradient: (gradient with coef) - (gradient without), unclipped,
 *      on CUDA against the CPU's.
 *   3. the guard: a skipped update leaves the entropy, q_delta and every norm those of the last
 *      applied update (on CUDA bit for bit), and the next applied update reports its own.
 *   4. graph nodes: with the diversity term every capture has as many nodes as without it; with
 *      detailed_metrics (alone or with it) exactly one more, fhd_detail_rows_kernel, with at
 *      least two blocks; no kernel of ours with a 1x1x1 grid; no synchronisation over 2,000
 *      updates with both on, metrics read between the calls.
 * Tolerances are relative errors |cuda - cpu| / |cpu|. FP32 differs only in summation order:
 * update 1 agrees to ~1e-6 (loss and entropy 1e-4, gradient norms 2e-4, weight norms 1e-6 since
 * both start from the same weights); later updates carry the parameters' drift (parity: 2e-4
 * after 100 updates), which reaches loss and entropy by 1e-3 and gradient norms by 1e-2 (the
 * parity test's tolerances for the same statistics). q_delta is a mean of differences of Q
 * values (cancellation) and meets double DQN's near-ties: 5e-3 of itself plus 1e-5 of the Q
 * scale.
 */
#include "divmetrics_test.h"

typedef struct variant {
    const char *name;
    const char *json; /* architecture and replay (everything but backend and features) */
    const char *feat; /* the features' keys */
    uint32_t D, K[4]; /* for ct_feed */
    uint64_t opt_two; /* 0, or the two-kernel optimiser with that many weights a thread */
    double tol_param; /* parameters after 30 updates */
} variant;

#define BASE                                                                                       \
    "\"num_envs\": 4, \"seed\": 7, \"lr\": 0.001, \"learning_starts\": 0, "                        \
    "\"target_update_interval\": 10, "
#define SMALL                                                                                      \
    "\"obs_dim\": 12, \"hidden\": [32, 48], \"batch_size\": 64, \"replay_capacity\": 512, "
#define BOTH(c, t)                                                                                 \
    "\"diversity_coef\": " c ", \"diversity_temperature\": " t ", \"detailed_metrics\": true"

static const variant variants[] = {
    {"dueling-double-per-cql",
     SMALL "\"actions\": [3, 4, 5], \"dueling\": true, \"double_dqn\": true, \"replay\": "
           "\"prioritized\", \"cql_alpha\": 0.1",
     BOTH("0.5", "0.7"),
     3,
     {3, 4, 5},
     0,
     2e-4},
    {"plain-uniform",
     SMALL "\"actions\": [6], \"dueling\": false, \"double_dqn\": false, \"replay\": \"uniform\"",
     BOTH("0.2", "2.0"),
     1,
     {6},
     0,
     2e-4},
    {"spectral-norm",
     SMALL "\"actions\": [4, 4], \"spectral_norm\": \"all\", \"double_dqn\": true, \"replay\": "
           "\"prioritized\"",
     BOTH("1.0", "0.5"),
     2,
     {4, 4},
     0,
     2e-4},
    /* above FHD_LOSS_SMALL_BATCH: 32-row loss blocks whose statistics take the block-wide sum */
    {"large-batch",
     "\"obs_dim\": 12, \"hidden\": [32, 47], \"batch_size\": 4160, \"replay_capacity\": 8192, "
     "\"actions\": [3, 4, 5], \"dueling\": true, \"double_dqn\": true, \"replay\": "
     "\"prioritized\"",
     BOTH("0.3", "1.0"),
     3,
     {3, 4, 5},
     0,
     2e-4},
    /* a branch of more rows than a warp has lanes, five row-norm blocks */
    {"many-actions",
     "\"obs_dim\": 12, \"hidden\": [32, 72], \"batch_size\": 50, \"replay_capacity\": 512, "
     "\"actions\": [40], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\", "
     "\"cql_alpha\": 0.1",
     BOTH("0.1", "0.3"),
     1,
     {40},
     0,
     2e-4},
    /* B1's torso (the plan may put both heads inside the loss kernel) */
    {"b1-torso",
     "\"obs_dim\": 12, \"hidden\": [256, 256], \"batch_size\": 256, \"replay_capacity\": 1024, "
     "\"actions\": [8], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\"",
     BOTH("0.05", "1.0"),
     1,
     {8},
     0,
     2e-4},
    /* a head too large for the fused dx (the dx GEMM and ReLU-backward kernel), H = 2052 */
    {"wide-last",
     "\"obs_dim\": 12, \"hidden\": [24, 2052], \"batch_size\": 100, \"replay_capacity\": 512, "
     "\"actions\": [7], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\"",
     BOTH("0.5", "1.0"),
     1,
     {7},
     0,
     2e-4},
    /* 2000 actions: the loss kernel reads the head rows from global memory (tiles not staged) */
    {"direct-mode",
     "\"obs_dim\": 12, \"hidden\": [16], \"batch_size\": 32, \"replay_capacity\": 512, "
     "\"actions\": [2000], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\"",
     BOTH("2.0", "0.1"),
     1,
     {2000},
     0,
     1e-3},
    {"conv-f32",
     "\"obs_shape\": [3, 17, 19], \"conv\": [{\"out\": 8, \"kernel\": 3, \"stride\": 1, "
     "\"padding\": 0}, {\"out\": 12, \"kernel\": 3, \"stride\": 2, \"padding\": 1}], "
     "\"hidden\": [32], \"batch_size\": 48, \"replay_capacity\": 256, \"actions\": [4], "
     "\"dueling\": false, \"double_dqn\": true, \"replay\": \"uniform\"",
     BOTH("0.3", "1.0"),
     1,
     {4},
     0,
     2e-4},
    /* the two-kernel optimiser: the norm kernel's last block writes the segment sums */
    {"dueling-double-per-cql/opt-two-4",
     SMALL "\"actions\": [3, 4, 5], \"dueling\": true, \"double_dqn\": true, \"replay\": "
           "\"prioritized\", \"cql_alpha\": 0.1",
     BOTH("0.5", "0.7"),
     3,
     {3, 4, 5},
     4,
     2e-4},
    {"spectral-norm/opt-two-2",
     SMALL "\"actions\": [4, 4], \"spectral_norm\": \"all\", \"double_dqn\": true, \"replay\": "
           "\"prioritized\"",
     BOTH("1.0", "0.5"),
     2,
     {4, 4},
     2,
     2e-4},
};

/* The config: BASE, the architecture, the features (may be empty), extra (empty or ", ..."),
 * and max_grad_norm 1 unless extra sets it. */
static char *make_json(const char *backend, const char *json, const char *feat, const char *extra) {
    static char buf[4][2048];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "{" BASE "%s%s%s%s%s, \"backend\": \"%s\"}", json,
             feat[0] ? ", " : "", feat, extra,
             strstr(extra, "max_grad_norm") ? "" : ", \"max_grad_norm\": 1.0", backend);
    return b;
}

/* The CUDA learner, with the two-kernel optimiser forced where opt_two is 2, 4 or 8. */
static fhd_learner *create_cuda(const char *json, uint64_t opt_two) {
    fhd_learner *L = ct_create_cuda(json);
    if (opt_two) {
        int32_t rc = L->ops->write(L->be, FHD_CUDA_STATE_OPT_FORM, 0, 1, &opt_two);
        ct_check(rc == FHD_OK, "two-kernel optimiser with %llu weights a thread (%s)",
                 (unsigned long long)opt_two, rc == FHD_OK ? "" : L->ops->error(L->be));
    }
    return L;
}

static void run_variant(const variant *v) {
    fhd_learner *Lc = ct_create(make_json("cpu", v->json, v->feat, ""), NULL);
    if (!Lc) {
        ct_check(0, "%s: cpu learner", v->name);
        return;
    }
    fhd_learner *Lg = create_cuda(make_json("cuda", v->json, v->feat, ""), v->opt_two);
    {
        uint64_t info[FHD_CUDA_INFO_COUNT];
        ct_read(Lg, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info);
        printf("-- %s on %s (optimiser form %llu, heads in the loss kernel %llu)\n", v->name,
               Lg->ops->device_name(Lg->be), (unsigned long long)info[FHD_CUDA_INFO_OPT_FORM],
               (unsigned long long)info[FHD_CUDA_INFO_HEAD_IN_LOSS]);
    }
    const uint32_t N = Lc->cfg.replay_capacity, B = Lc->cfg.batch_size;
    const uint64_t P = Lc->lo.num_params;
    const int per = Lc->cfg.replay == FHD_REPLAY_PRIORITIZED;
    fhd_learner *both[2] = {Lc, Lg};
    const uint32_t steps = N / Lc->cfg.num_envs + 8 > 200 ? N / Lc->cfg.num_envs + 8 : 200;
    ct_feed(both, 2, Lc->cfg.num_envs, Lc->lo.S, v->D, v->K, steps, 1234);
    uint32_t *ic = (uint32_t *)malloc(4 * (size_t)B), *ig = (uint32_t *)malloc(4 * (size_t)B);
    float *wc = (float *)malloc(4 * (size_t)B), *wg = (float *)malloc(4 * (size_t)B);
    int same_batches = 1;
    for (int k = 1; k <= 30; k++) {
        const int32_t rc = fhd__learner_train(Lc, 1, NULL), rg = fhd__learner_train(Lg, 1, NULL);
        if (rc != FHD_OK || rg != FHD_OK) {
            ct_check(0, "%s: train update %d: cpu %s / cuda %s", v->name, k, Lc->err, Lg->err);
            break;
        }
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        ct_read(Lc, FHD_STATE_LAST_WEIGHTS, 0, B, wc);
        ct_read(Lg, FHD_STATE_LAST_WEIGHTS, 0, B, wg);
        same_batches &= memcmp(ic, ig, 4 * (size_t)B) == 0 && memcmp(wc, wg, 4 * (size_t)B) == 0;
        if (k == 1 || k == 2 || k == 5 || k == 10 || k == 20 || k == 30) {
            char when[32];
            snprintf(when, sizeof when, "update %d", k);
            check_features(v->name, when, Lc, Lg, k == 1 ? &tight : &drift);
        }
        if (k == 1) {
            double e = ct_cmp_kind(Lc, Lg, FHD_STATE_GRAD, 0, P, NULL);
            ct_check(e <= 1e-4, "%s update 1: gradient rel %.2e", v->name, e);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, NULL);
            ct_check(e <= 1e-5, "%s update 1: parameters rel %.2e", v->name, e);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_ADAM_M, 0, P, NULL);
            ct_check(e <= 1e-4, "%s update 1: Adam m rel %.2e", v->name, e);
        }
        if (per)
            ct_copy_priorities(Lc, Lg);
    }
    ct_check(same_batches, "%s: indices and weights identical at every one of 30 updates", v->name);
    double e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, NULL);
    ct_check(e <= v->tol_param, "%s update 30: parameters rel %.2e (tol %.0e)", v->name, e,
             v->tol_param);
    check_json(v->name, Lg);
    if (!per) { /* train(n): FIRST, STEADY, LAST (uniform sampling: the same batches) */
        const int32_t rc = fhd__learner_train(Lc, 25, NULL), rg = fhd__learner_train(Lg, 25, NULL);
        ct_check(rc == FHD_OK && rg == FHD_OK, "%s: train(25) (%s)", v->name,
                 rg == FHD_OK ? "" : Lg->err);
        check_features(v->name, "after train(25)", Lc, Lg, &drift);
        e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, NULL);
        ct_check(e <= 2 * v->tol_param, "%s update 55: parameters rel %.2e", v->name, e);
        check_json(v->name, Lg);
    }
    char msg[256] = {0};
    ct_check(Lg->ops->check_invariants(Lg->be, msg, sizeof msg) == FHD_OK,
             "%s: CUDA invariants hold (%s)", v->name, msg);
    free(ic);
    free(ig);
    free(wc);
    free(wg);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* ---- train_batch ------------------------------------------------------------------------- */

static void test_train_batch(const variant *v) {
    fhd_learner *Lc = ct_create(make_json("cpu", v->json, v->feat, ""), NULL);
    fhd_learner *Lg = create_cuda(make_json("cuda", v->json, v->feat, ""), 0);
    const uint32_t B = Lc->cfg.batch_size, D = Lc->lo.D;
    float *tdc = (float *)malloc(4 * (size_t)B * D), *tdg = (float *)malloc(4 * (size_t)B * D);
    host_batch h = {0};
    uint64_t s = 555;
    char name[96];
    snprintf(name, sizeof name, "train_batch %s", v->name);
    for (int k = 1; k <= 3; k++) {
        batch_fill(&h, Lc, v->K, &s, 0.0f);
        fhd_train_stats sc = FHD_TRAIN_STATS_INIT, sg = FHD_TRAIN_STATS_INIT;
        const int32_t rc = batch_train(Lc, &h, tdc, &sc), rg = batch_train(Lg, &h, tdg, &sg);
        ct_check(rc == FHD_OK && rg == FHD_OK && sg.updates_done == 1, "%s %d: both succeed (%s)",
                 name, k, rg == FHD_OK ? "" : Lg->err);
        const double e = ct_relerr(tdg, tdc, (uint64_t)B * D, NULL);
        ct_check(e <= 1e-4, "%s %d: TD errors rel %.2e", name, k, e);
        char when[16];
        snprintf(when, sizeof when, "batch %d", k);
        check_features(name, when, Lc, Lg, k == 1 ? &tight : &later);
    }
    check_json(name, Lg);
    batch_free(&h);
    free(tdc);
    free(tdg);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* The diversity term's own gradient: one host batch on learners with and without it, clipping
 * off, so that grad holds dL/dparams itself; (with - without) on CUDA against the CPU's. */
static void test_diversity_gradient(const variant *v) {
    const char *off = "\"detailed_metrics\": true";
    fhd_learner *L[4]; /* cpu without, cpu with, cuda without, cuda with */
    for (int i = 0; i < 4; i++) {
        const char *j = make_json(i < 2 ? "cpu" : "cuda", v->json, i % 2 ? v->feat : off,
                                  ", \"max_grad_norm\": 0");
        L[i] = i < 2 ? ct_create(j, NULL) : ct_create_cuda(j);
        if (!L[i]) {
            ct_check(0, "diversity gradient: learner %d", i);
            exit(1);
        }
    }
    const uint64_t P = L[0]->lo.num_params;
    host_batch h = {0};
    uint64_t s = 77;
    batch_fill(&h, L[0], v->K, &s, 0.0f);
    float *g[4];
    for (int i = 0; i < 4; i++) {
        const int32_t rc = batch_train(L[i], &h, NULL, NULL);
        ct_check(rc == FHD_OK, "diversity gradient: train_batch on learner %d (%s)", i,
                 rc == FHD_OK ? "" : L[i]->err);
        g[i] = ct_read_floats(L[i], FHD_STATE_GRAD, P);
    }
    double n0 = 0.0, nd = 0.0, ne = 0.0;
    for (uint64_t k = 0; k < P; k++) {
        const double dc = (double)g[1][k] - g[0][k], dg = (double)g[3][k] - g[2][k];
        n0 += (double)g[0][k] * g[0][k];
        nd += dc * dc;
        ne += (dg - dc) * (dg - dc);
    }
    ct_check(sqrt(nd) > 1e-3 * sqrt(n0),
             "diversity gradient %s: the term moves the gradient (|d| %.3e of |g| %.3e)", v->name,
             sqrt(nd), sqrt(n0));
    ct_check(sqrt(ne) <= 1e-3 * sqrt(nd),
             "diversity gradient %s: cuda's term against the cpu's rel %.2e", v->name,
             sqrt(ne) / sqrt(nd));
    /* the same parameters and batch: the TD part is the same bits, the term as the CPU rounds */
    const double coef = L[1]->cfg.diversity_coef;
    const fhd__update_stats s0 = stats_of(L[2]), s1 = stats_of(L[3]);
    const fhd__update_stats c0 = stats_of(L[0]), c1 = stats_of(L[1]);
    ct_check(s1.loss == (float)((double)s0.loss - coef * (double)s1.entropy) &&
                 c1.loss == (float)((double)c0.loss - coef * (double)c1.entropy) &&
                 rel(s1.loss, c1.loss, 1e-6) <= 1e-4 && rel(s1.entropy, c1.entropy, 1e-6) <= 1e-4,
             "diversity loss %s: cuda %.9g = %.9g - coef x %.9g, cpu %.9g = %.9g - coef x %.9g",
             v->name, s1.loss, s0.loss, s1.entropy, c1.loss, c0.loss, c1.entropy);
    for (int i = 0; i < 4; i++) {
        free(g[i]);
        fhd__learner_destroy(L[i]);
    }
    batch_free(&h);
}

/* ---- the guard --------------------------------------------------------------------------- */

static void test_guard(const variant *v) {
    const char *g = ", \"loss\": \"mse\", \"guard\": {\"max_loss\": 1e20}";
    fhd_learner *Lc = ct_create(make_json("cpu", v->json, v->feat, g), NULL);
    fhd_learner *Lg = ct_create_cuda(make_json("cuda", v->json, v->feat, g));
    fhd_learner *both[2] = {Lc, Lg};
    const uint32_t D = Lc->lo.D;
    host_batch h = {0};
    uint64_t s = 91;
    for (int k = 0; k < 3; k++) { /* three applied updates: online and target apart */
        batch_fill(&h, Lc, v->K, &s, 0.0f);
        for (int i = 0; i < 2; i++)
            ct_check(batch_train(both[i], &h, NULL, NULL) == FHD_OK, "guard: sane batch %d on %s",
                     k, i ? "cuda" : "cpu");
    }
    check_features("guard", "before the skip", Lc, Lg, &later);
    const fhd__update_stats before_c = stats_of(Lc), before_g = stats_of(Lg);
    for (int r = 0; r < 2; r++) { /* two skips in a row: both write the pending slot */
        batch_fill(&h, Lc, v->K, &s, 1e30f);
        for (int i = 0; i < 2; i++) {
            fhd_train_stats st = FHD_TRAIN_STATS_INIT;
            const int32_t rc = batch_train(both[i], &h, NULL, &st);
            ct_check(rc == FHD_OK && st.updates_skipped == 1 && st.updates_done == 0,
                     "guard: a +Inf loss skipped on %s (%d)", i ? "cuda" : "cpu", rc);
        }
        const fhd__update_stats now_c = stats_of(Lc), now_g = stats_of(Lg);
        ct_check(stats_same(&now_g, &before_g, D) && stats_same(&now_c, &before_c, D),
                 "guard: skip %d leaves entropy, q_delta and every norm those of update %llu "
                 "(cuda bit for bit)",
                 r + 1, (unsigned long long)before_g.update_index);
    }
    batch_fill(&h, Lc, v->K, &s, 0.0f);
    for (int i = 0; i < 2; i++)
        ct_check(batch_train(both[i], &h, NULL, NULL) == FHD_OK,
                 "guard: sane batch after the skips "
                 "on %s",
                 i ? "cuda" : "cpu");
    const fhd__update_stats after_g = stats_of(Lg);
    ct_check(after_g.update_index == before_g.update_index + 1 &&
                 after_g.layer_grad_norm[0] != before_g.layer_grad_norm[0],
             "guard: the next applied update %llu reports its own norms",
             (unsigned long long)after_g.update_index);
    check_features("guard", "after the skips", Lc, Lg, &later);
    batch_free(&h);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* ---- graph nodes ------------------------------------------------------------------------- */

/* Nodes of capture v (0: not captured); *detail: kernels named fhd_detail_rows_kernel, each
 * with at least two blocks (else counted negative); *one: kernels of ours with a 1x1x1 grid. */
static size_t graph_nodes(fhd_learner *L, int v, int *detail, int *one) {
    cudaGraph_t g = NULL;
    ct_read(L, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
    size_t n = 0;
    *detail = 0;
    *one = 0;
    if (!g || cudaGraphGetNodes(g, NULL, &n) != cudaSuccess)
        return 0;
    cudaGraphNode_t *all = (cudaGraphNode_t *)malloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    cudaGraphGetNodes(g, all, &n);
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        cudaGraphNodeGetType(all[i], &t);
        if (t != cudaGraphNodeTypeKernel)
            continue;
        struct cudaKernelNodeParams kp;
        memset(&kp, 0, sizeof kp);
        const char *fn = NULL;
        if (cudaGraphKernelNodeGetParams(all[i], &kp) != cudaSuccess || !kp.func ||
            cudaFuncGetName(&fn, kp.func) != cudaSuccess || !fn) {
            (void)cudaGetLastError(); /* a library kernel */
            continue;
        }
        const unsigned blocks = kp.gridDim.x * kp.gridDim.y * kp.gridDim.z;
        if (strstr(fn, "fhd_") && blocks == 1)
            (*one)++;
        if (strstr(fn, "fhd_detail_rows_kernel"))
            *detail += blocks >= 2 ? 1 : -1000;
    }
    free(all);
    return n;
}

static void test_nodes(const char *name, const char *arch, const uint32_t *K, uint32_t D) {
    static const char *const feats[4] = {"", "\"diversity_coef\": 0.5",
                                         "\"detailed_metrics\": true", BOTH("0.5", "0.7")};
    static const char *const fname[4] = {"neither", "diversity", "detailed_metrics", "both"};
    fhd_learner *L[4];
    for (int f = 0; f < 4; f++)
        /* autotune off: every learner the rule's GEMM algorithms (and so their nodes) */
        L[f] = ct_create_cuda(make_json("cuda", arch, feats[f], ", \"autotune\": \"off\""));
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        int det[4], one[4];
        size_t n[4];
        for (int f = 0; f < 4; f++)
            n[f] = graph_nodes(L[f], v, &det[f], &one[f]);
        if (v == FHD_CUDA_GRAPH_SINGLE)
            ct_check(n[0] > 0, "%s: the SINGLE update captured (%zu nodes)", name, n[0]);
        if (n[0] == 0) {
            ct_check(n[1] == 0 && n[2] == 0 && n[3] == 0, "%s capture %d: captured by none", name,
                     v);
            continue;
        }
        for (int f = 1; f < 4; f++) {
            const size_t want = n[0] + (f >= 2 ? 1 : 0);
            ct_check(n[f] == want && det[f] == (f >= 2 ? 1 : 0) && one[f] == 0,
                     "%s capture %d, %s: %zu nodes (%zu without; %zu expected), row-norm kernels "
                     "%d, 1x1x1 kernels of ours %d",
                     name, v, fname[f], n[f], n[0], want, det[f], one[f]);
        }
    }
    /* no synchronisation in the training loop with both, metrics read between the calls */
    fhd_learner *G = L[3];
    fhd_learner *Ls[1] = {G};
    ct_feed(Ls, 1, G->cfg.num_envs, G->lo.S, D, K, 200, 9);
    const uint64_t s0 = ct_sync_count(G);
    char *buf = (char *)malloc(1 << 16);
    int metrics_ok = 1, bad_rc = FHD_OK, bad_call = -1;
    size_t bad_need = 0;
    for (int k = 0; k < 20; k++) {
        ct_check(fhd__learner_train(G, 100, NULL) == FHD_OK, "%s: train(100) with both", name);
        size_t need = 0;
        const int32_t rc = fhd__learner_metrics(G, buf, 1 << 16, &need);
        const int ok = rc == FHD_OK && strstr(buf, "\"grad_norm_layers\":[") != NULL;
        if (!ok && metrics_ok) { /* the first bad read, for the message */
            bad_rc = rc;
            bad_call = k;
            bad_need = need;
        }
        metrics_ok &= ok;
    }
    const uint64_t s1 = ct_sync_count(G);
    ct_check(s1 == s0 && metrics_ok,
             "%s: %llu synchronisations over 2,000 updates with both, metrics read 20 times "
             "(first bad read: call %d, status %d, %zu bytes)",
             name, (unsigned long long)(s1 - s0), bad_call, (int)bad_rc, bad_need);
    if (bad_call >= 0 && bad_rc == FHD_OK)
        fprintf(stderr, "%s: metrics without grad_norm_layers: %.400s\n", name, buf);
    const fhd__update_stats st = stats_of(G);
    ct_check(st.update_index == 2000 && isfinite(st.entropy) &&
                 isfinite(st.q_delta) == (G->cfg.double_dqn != 0) &&
                 isfinite(st.layer_grad_norm[0]) && st.head_grad_norm[0] > 0,
             "%s: statistics of update %llu finite after 2,000 (entropy %g, q_delta %g)", name,
             (unsigned long long)st.update_index, st.entropy, st.q_delta);
    free(buf);
    for (int f = 0; f < 4; f++)
        fhd__learner_destroy(L[f]);
}

int main(int argc, char **argv) {
    ct_require_gpu();
    const char *only = argc > 1 ? argv[1] : NULL;
    const size_t nv = sizeof variants / sizeof variants[0];
    for (size_t i = 0; i < nv; i++)
        if (!only || strcmp(only, variants[i].name) == 0)
            run_variant(&variants[i]);
    if (!only || strcmp(only, "train_batch") == 0) {
        test_train_batch(&variants[0]); /* dueling, double DQN, CQL */
        test_train_batch(&variants[8]); /* conv torso */
        test_diversity_gradient(&variants[0]);
        test_diversity_gradient(&variants[2]); /* spectral norm */
    }
    if (!only || strcmp(only, "guard") == 0)
        test_guard(&variants[0]);
    if (!only || strcmp(only, "nodes") == 0) {
        const uint32_t K3[3] = {3, 4, 5}, K6[1] = {6};
        test_nodes("per", variants[0].json, K3, 3);
        test_nodes("uniform", variants[1].json, K6, 1);
        test_nodes("sn", variants[2].json, variants[2].K, 2);
    }
    return ct_finish();
}
