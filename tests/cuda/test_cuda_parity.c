/* test_cuda_parity.c - the CUDA backend against the CPU reference, same config, seed and inputs.
 *
 * For each configuration (plain, dueling + double + PER, branching, spectral norm, CQL, n-step
 * with Polyak and AdamW, the two TF32 modes, and network shapes: B1's torso with batches of 256
 * and 512, three torso layers with a batch of partial GEMM tiles, one normalised torso layer,
 * normalised layers of 1100 and 600 units, a large batch, a wide last layer) one learner per
 * backend is fed the same transitions through observe, then both train:
 *   - replay contents and priorities identical after observe (exact);
 *   - update 1: identical sampled indices and IS weights (exact: same integer tree, same
 *     Philox numbers, same deterministic pow), then loss, gradient, parameters and Adam moments
 *     within the tolerances below;
 *   - 100 updates: with prioritized replay the CPU's priorities are copied into the CUDA
 *     learner after each update, so both sample the same batches; every update's indices must
 *     be identical; then parameters (online and target), gradient and statistics within
 *     tolerance. One configuration runs free (no copying): its indices must agree on >= 98% of
 *     the samples (TD errors differ in the last bits, so rare priority ties can break apart).
 *   - act: Q values within tolerance, greedy actions equal except where two Q values are closer
 *     than the tolerance.
 *   - train_batch: TD errors, targets, statistics and parameters within tolerance.
 * Some variants run a second time with the two-kernel optimiser forced (opt_two_runs), the form
 * of devices without cooperative launch.
 * Tolerances are relative L2 errors ||cuda - cpu|| / ||cpu||. FP32 differences come only from
 * summation order (GEMMs, reductions): 1e-5 per forward quantity is ample, Adam turns gradient
 * noise into full steps for near-zero gradients, hence the looser parameter bounds. TF32 rounds
 * GEMM inputs to 10 mantissa bits (relative 5e-4 per product).
 */
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

static const variant variants[] = {
    {"plain", "\"actions\": [6], \"dueling\": false, \"double_dqn\": false, \"replay\": \"uniform\"",
     "fp32", 1, {6}, 1e-5, 1e-4, 1e-5, 2e-4, 0, NULL, 0},
    {"dueling", "\"actions\": [6], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\"",
     "fp32", 1, {6}, 1e-5, 1e-4, 1e-5, 2e-4, 0, NULL, 0},
    {"dueling-free", "\"actions\": [6], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\"",
     "fp32", 1, {6}, 1e-5, 1e-4, 1e-5, 1e-3, 1, NULL, 0},
    {"branching", "\"actions\": [3, 4, 5], \"dueling\": true, \"replay\": \"prioritized\", \"loss\": \"mse\"",
     "fp32", 3, {3, 4, 5}, 1e-5, 1e-4, 1e-5, 2e-4, 0, NULL, 0},
    {"spectral-norm", "\"actions\": [6], \"spectral_norm\": \"all\", \"replay\": \"prioritized\"",
     "fp32", 1, {6}, 1e-5, 1e-4, 1e-5, 2e-4, 0, NULL, 0},
    {"sn-last-cql", "\"actions\": [4, 4], \"spectral_norm\": \"last\", \"cql_alpha\": 0.5, "
     "\"replay\": \"prioritized\", \"double_dqn\": false",
     "fp32", 2, {4, 4}, 1e-5, 1e-4, 1e-5, 2e-4, 0, NULL, 0},
    {"nstep-polyak-adamw", "\"actions\": [5], \"n_step\": 3, \"gamma\": 0.9, \"tau\": 0.05, "
     "\"target_update_interval\": 1, \"optimizer\": \"adamw\", \"weight_decay\": 0.01, "
     "\"replay\": \"prioritized\"",
     "fp32", 1, {5}, 1e-5, 1e-4, 1e-5, 2e-4, 0, NULL, 0},
    /* TF32: gradient rel ~5e-4 after one update (measured on H200); 100 updates of a chaotic
     * optimisation amplify that to ~3e-2 in the parameters and more in the SN vectors */
    {"tf32_forward", "\"actions\": [6], \"spectral_norm\": \"all\", \"replay\": \"prioritized\"",
     "tf32_forward", 1, {6}, 3e-3, 3e-2, 1e-3, 8e-2, 0, NULL, 0},
    {"tf32", "\"actions\": [6], \"spectral_norm\": \"all\", \"replay\": \"prioritized\"",
     "tf32", 1, {6}, 3e-3, 3e-2, 1e-3, 8e-2, 0, NULL, 0},
    /* a batch above FHD_LOSS_SMALL_BATCH (the loss kernel's 32-row blocks, one thread per row
     * and branch) and a last hidden width that is not a multiple of 4 (the narrow head
     * forward's scalar loads) */
    {"large-batch", "\"actions\": [3, 4, 5], \"dueling\": true, \"replay\": \"prioritized\", "
     "\"cql_alpha\": 0.1", "fp32", 3, {3, 4, 5}, 1e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [32, 47], \"batch_size\": 4160, \"replay_capacity\": 8192, ", 0},
    /* a head too large for the loss kernel's fused dx (HO x H > FHD_LOSS_FUSE_MAX): the head's
     * dx GEMM and the ReLU-backward kernel, with partial tiles and row chunks; sums
     * over 2052 terms: 2e-5 (priorities measured 2.7e-3 relative where |td| is near 0) */
    {"wide-last", "\"actions\": [7], \"dueling\": true, \"replay\": \"prioritized\"", "fp32", 1,
     {7}, 2e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [24, 2052], \"batch_size\": 100, \"replay_capacity\": 512, ", 0},
    /* B1's torso (256-wide layers, batch 256; sums over 256 terms: 2e-5, priorities measured
     * 2.1e-3 relative where |td| is near 0), three torso layers with a batch that leaves
     * partial tiles everywhere, and a single spectrally normalised torso layer */
    {"b1-torso", "\"actions\": [8], \"dueling\": true, \"replay\": \"prioritized\"", "fp32", 1,
     {8}, 2e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [256, 256], \"batch_size\": 256, \"replay_capacity\": 1024, ", 0},
    /* the same with a batch of 512: layer 0's dW in four chunk partials, the optimiser's
     * instances for several further parts. Measured on H200: update 1's gradient 3.5e-7,
     * parameters after 100 updates 5.9e-5; new priorities 0.10 (relative to max(|td|, 1e-3)):
     * over 51,200 rows double DQN's argmax meets near-ties, and a different pick moves that
     * row's target by a whole Q difference (as b3-torso's, below) */
    {"b1-torso-512", "\"actions\": [8], \"dueling\": true, \"replay\": \"prioritized\"", "fp32",
     1, {8}, 2e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [256, 256], \"batch_size\": 512, \"replay_capacity\": 1024, ", 0.3},
    /* B1-sn's torso. Each learner runs its own power iteration, one step per update: over 100
     * updates their sigmas drift apart by ~1e-5 relative, which moves Q values of order 5 by
     * ~1e-4, and the new priorities' |td| by as much (measured 1.5e-1 relative where |td| is
     * near 1e-3); the parameters stay within 2e-4 */
    /* the loss kernel's other paths: a branch of 30 actions with CQL, a fused head dx over two
     * rounds of W_head loads (31 outputs) and 300 columns (a second column for some of a block's
     * threads); sums over 300 terms */
    {"cql-wide", "\"actions\": [30], \"dueling\": true, \"cql_alpha\": 0.3, \"replay\": "
     "\"prioritized\"", "fp32", 1, {30}, 2e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [40, 300], \"batch_size\": 64, \"replay_capacity\": 512, ", 0},
    {"b1-sn-torso", "\"actions\": [8], \"dueling\": true, \"spectral_norm\": \"all\", "
     "\"replay\": \"prioritized\"", "fp32", 1, {8}, 2e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [256, 256], \"batch_size\": 256, \"replay_capacity\": 1024, ", 0.3},
    /* B3's torso, head and batch (obs_dim aside): its dW GEMMs of the head and of layer 1
     * (split-K) and dx GEMM of layer 1 take configurations of cuda_gemm.cpp's table on sm_90
     * with 132 SMs. Update 1 is the close check (gradient rel 2.2e-7, sums over 1024 terms).
     * After 100 updates at lr 1e-3 the learners have drifted apart, by the same amount with the
     * heuristic's algorithms as with the table's (measured on H200: parameters 1.33e-2, new
     * priorities 0.72, act Q 7.1e-3 either way): double DQN's argmax over 4096 branch rows an
     * update meets near-ties, and a different pick moves that row's target by a whole Q
     * difference (without double DQN it drifts further: 2.8e-2) */
    {"b3-torso", "\"actions\": [5, 5, 5, 5], \"dueling\": true, \"spectral_norm\": \"all\", "
     "\"cql_alpha\": 0.1, \"replay\": \"prioritized\"", "fp32", 4, {5, 5, 5, 5}, 2e-5, 1e-4, 1e-5,
     3e-2, 0, "\"hidden\": [512, 512], \"batch_size\": 1024, \"replay_capacity\": 2048, ", 1.5},
    {"three-layers", "\"actions\": [3, 4], \"dueling\": true, \"replay\": \"prioritized\"", "fp32",
     2, {3, 4}, 1e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [64, 32, 96], \"batch_size\": 50, \"replay_capacity\": 512, ", 0},
    {"one-layer-sn", "\"actions\": [5], \"spectral_norm\": \"all\", \"replay\": \"prioritized\"",
     "fp32", 1, {5}, 1e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [128], \"batch_size\": 40, \"replay_capacity\": 512, ", 0},
    /* TF32 with the dW GEMMs of layers 1 and 2 reading dz transposed (layer 2's dz from the
     * ReLU-backward kernel: a head too wide for the loss kernel's fused dx), a batch that leaves
     * partial row and column tiles. The gradient of update 1 is this variant's close check
     * (2.8e-3 relative). Over 100 updates TF32's rounding in sums over 2052 terms moves |td| by
     * up to ~0.09 where |td| is near 1e-3: new priorities measured 88 (relative to
     * max(|td|, 1e-3)) here and 91 in the control below, which has no transposed copies. */
    {"tf32-deep", "\"actions\": [7], \"dueling\": true, \"replay\": \"prioritized\"", "tf32", 1,
     {7}, 3e-3, 3e-2, 1e-3, 8e-2, 0,
     "\"hidden\": [40, 36, 2052], \"batch_size\": 100, \"replay_capacity\": 512, ", 200},
    /* the same network with a TF32 forward only (an fp32 backward: no transposed copies) */
    {"tf32f-deep", "\"actions\": [7], \"dueling\": true, \"replay\": \"prioritized\"",
     "tf32_forward", 1, {7}, 3e-3, 3e-2, 1e-3, 8e-2, 0,
     "\"hidden\": [40, 36, 2052], \"batch_size\": 100, \"replay_capacity\": 512, ", 200},
    /* spectral norm on wide layers (1100 and 600 units): the V pass's finish in its general
     * form (more than 512 rows or columns: not held in registers); sums over 1100 terms. Update
     * 1 is the close check (gradient measured 3.4e-7 relative on H200). Over 100 updates the
     * two learners' power iterations drift apart as B1-sn's torso's do (above): parameters
     * measured 4.3e-4, new priorities 1.1e-2 */
    {"sn-wide", "\"actions\": [6], \"dueling\": true, \"spectral_norm\": \"all\", "
     "\"replay\": \"prioritized\"", "fp32", 1, {6}, 2e-5, 1e-4, 1e-5, 1e-3, 0,
     "\"hidden\": [1100, 600], \"batch_size\": 64, \"replay_capacity\": 512, ", 5e-2},
    /* more actions than a warp has lanes (the loss kernel's loops over actions: the argmax, the
     * mean, CQL's log-sum-exp, the dueling backward; 41 outputs with dueling), with CQL, a last
     * hidden width that is not a multiple of 32 and a batch of 50 */
    {"many-actions", "\"actions\": [40], \"dueling\": true, \"replay\": \"prioritized\", "
     "\"cql_alpha\": 0.1", "fp32", 1, {40}, 1e-5, 1e-4, 1e-5, 2e-4, 0,
     "\"hidden\": [32, 72], \"batch_size\": 50, \"replay_capacity\": 512, ", 0},
};

/* The two-kernel optimiser (a norm kernel, then the Adam kernel: the form of devices without
 * cooperative launch, which the H200 never takes by itself), forced through
 * FHD_CUDA_STATE_OPT_FORM for variants that cover its paths: AdamW with Polyak averaging, SN
 * gradients, layer 0's dW partials (B1's torso: one further part; with a batch of 512: three,
 * the norm kernel's many-parts instance), and every block size. */
static const struct {
    const char *variant;
    uint64_t per; /* weights a thread: 2, 4 or 8 */
} opt_two_runs[] = {
    {"nstep-polyak-adamw", 2}, {"spectral-norm", 4}, {"b1-torso", 8},
    {"b1-torso-512", 4},       {"b1-sn-torso", 2},
};

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

int main(int argc, char **argv) {
    ct_require_gpu();
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (!only || strcmp(only, variants[i].name) == 0)
            run_variant(&variants[i], 0);
    for (size_t r = 0; r < sizeof opt_two_runs / sizeof opt_two_runs[0]; r++) {
        int found = 0;
        for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
            if (strcmp(variants[i].name, opt_two_runs[r].variant) == 0) {
                found = 1;
                if (!only || strcmp(only, "opt-two") == 0)
                    run_variant(&variants[i], opt_two_runs[r].per);
            }
        ct_check(found, "two-kernel optimiser run: variant %s exists", opt_two_runs[r].variant);
    }
    if (!only || strcmp(only, "train_batch") == 0) {
        run_train_batch(&variants[4]); /* spectral norm, dueling, double */
        run_train_batch(&variants[5]); /* branching, CQL */
    }
    return ct_finish();
}
