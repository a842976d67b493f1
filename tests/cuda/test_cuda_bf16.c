/* test_cuda_bf16.c - matmul_precision "bf16" on the CUDA backend against the CPU backend's bf16
 * reference (docs/design.md sections 4 and 5, "GEMM precision"; the CPU side is itself checked
 * against PyTorch by tests/parity/torch_bf16.py).
 *
 * For each configuration (an MLP with dueling, double DQN and PER; B1's torso with its split
 * backward GEMMs and layer 0 of both networks paired; B3's torso with spectral norm on every
 * layer and CQL; n-step with Polyak and AdamW, spectral norm on the last layer, MSE; odd widths;
 * flat uint8 observations; a batch above the loss kernel's small-batch size) a CPU learner
 * in bf16, a CUDA learner in bf16 and a CPU learner in fp32 get the same transitions, then:
 *   - the plan says bf16 for both passes, every GEMM record is bf16 or bf16_out, and none of the
 *     fp32-kernel fusions is on (narrow heads, head_in_loss, fuse_dw0);
 *   - the captured update (graph SINGLE): no memcpy node, no kernel of ours with a 1x1x1 grid,
 *     the bf16 conversions (weights, each network's layer-0 input or the paired one, the head's
 *     output gradient) and one bf16 ReLU backward per hidden layer, and none of the fp32 ReLU
 *     backward, head-dx or narrow-head kernels;
 *   - update 1: identical sampled indices and IS weights; loss, statistics, gradient, parameters
 *     and Adam moments within the tolerances below; and the CUDA gradient at least FP32_RATIO
 *     times closer to the CPU's bf16 gradient than to its fp32 one (bf16 is in effect, and it
 *     is the same bf16);
 *   - K updates, the CPU's priorities copied into the CUDA learner after each so that both
 *     sample the same batches: identical indices at every update, then online and target
 *     parameters and the statistics within tolerance;
 *   - no synchronisation by the backend over 200 further updates; the invariants hold;
 *   - act: Q values within tolerance, greedy actions equal except near-ties;
 *   - train_batch: TD errors, targets, statistics and parameters of 3 host batches;
 *   - (first variant) two CUDA learners of one config are bitwise identical after 50 updates.
 * Tolerances are relative L2 errors ||cuda - cpu|| / ||cpu||. Both sides round the same values
 * at the same places; they differ in the fp32 summation order of every GEMM (cuBLASLt's tensor
 * cores against OpenBLAS), ~1e-7 relative, which flips a value across a bf16 rounding boundary
 * (one bf16 ulp, 2^-8 relative, for that element) only when it lies within that distance of
 * one: the CPU against PyTorch with the same rule shows up to 5e-4 on a gradient from single
 * flips in small networks, 1e-6 without them. The bounds are those of the TF32 variants of
 * test_cuda_parity.c (whose rounding differs between the two sides, unlike here): forward 3e-3,
 * gradient 3e-2, parameters after one update 1e-3, after K updates 8e-2 (Adam turns gradient
 * noise into full steps for near-zero gradients, and priority near-ties part the batches).
 */
#include "cuda_test.h"

typedef struct variant {
    const char *name;
    const char *json; /* every key but backend and matmul_precision */
    uint32_t D, K[4];
    int updates; /* K */
} variant;

#define COMMON "\"num_envs\": 4, \"seed\": 11, \"learning_starts\": 0, "
static const variant variants[] = {
    {"mlp-dueling",
     "\"obs_dim\": 16, \"hidden\": [64, 48], \"actions\": [6], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.001, \"max_grad_norm\": 10, "
     "\"batch_size\": 64, \"replay_capacity\": 512, \"target_update_interval\": 10",
     1,
     {6},
     100},
    /* B1's torso: split_dx of layer 1, split_dw0, layer 0 paired (no spectral norm) */
    {"b1-torso",
     "\"obs_dim\": 64, \"hidden\": [256, 256], \"actions\": [8], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.0001, \"max_grad_norm\": 10, "
     "\"batch_size\": 256, \"replay_capacity\": 1024, \"target_update_interval\": 10",
     1,
     {8},
     50},
    /* B3's torso: spectral norm on both layers (the GEMMs' device alpha 1/sigma), CQL,
     * branching; sampling beside the power iteration */
    {"b3-torso",
     "\"obs_dim\": 64, \"hidden\": [512, 512], \"actions\": [5, 5, 5, 5], \"dueling\": true, "
     "\"double_dqn\": true, \"spectral_norm\": \"all\", \"cql_alpha\": 0.1, "
     "\"replay\": \"prioritized\", \"lr\": 0.0001, \"max_grad_norm\": 10, "
     "\"batch_size\": 1024, \"replay_capacity\": 2048, \"target_update_interval\": 10",
     4,
     {5, 5, 5, 5},
     20},
    {"nstep-polyak-adamw-sn-last",
     "\"obs_dim\": 24, \"hidden\": [96, 64], \"actions\": [5], \"n_step\": 3, \"gamma\": 0.9, "
     "\"tau\": 0.05, \"target_update_interval\": 1, \"optimizer\": \"adamw\", "
     "\"weight_decay\": 0.01, \"spectral_norm\": \"last\", \"loss\": \"mse\", "
     "\"replay\": \"uniform\", \"lr\": 0.001, \"max_grad_norm\": 1, "
     "\"batch_size\": 128, \"replay_capacity\": 512",
     1,
     {5},
     100},
    /* flat uint8 observations (converted with obs_scale on the device, then rounded) */
    {"uint8-flat",
     "\"obs_dim\": 20, \"obs_dtype\": \"uint8\", \"hidden\": [64, 64], \"actions\": [4], "
     "\"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.001, "
     "\"max_grad_norm\": 10, \"batch_size\": 96, \"replay_capacity\": 512, "
     "\"target_update_interval\": 10",
     1,
     {4},
     100},
    /* a batch above FHD_LOSS_SMALL_BATCH and three hidden layers */
    {"large-batch-deep",
     "\"obs_dim\": 32, \"hidden\": [128, 96, 64], \"actions\": [4, 4], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.0003, "
     "\"max_grad_norm\": 10, \"batch_size\": 4160, \"replay_capacity\": 8192, "
     "\"target_update_interval\": 10",
     2,
     {4, 4},
     20},
    /* last (a create that fails exits the test): widths and an input size that are not
     * multiples of 8 (bf16 operands 2-byte aligned), a head of 3 + 2 outputs, one layer */
    {"odd-widths",
     "\"obs_dim\": 7, \"hidden\": [37], \"actions\": [3, 2], \"dueling\": false, "
     "\"double_dqn\": false, \"replay\": \"prioritized\", \"lr\": 0.001, \"max_grad_norm\": 1, "
     "\"batch_size\": 50, \"replay_capacity\": 512, \"target_update_interval\": 10",
     2,
     {3, 2},
     100},
};

#define TOL_FWD 3e-3
#define TOL_GRAD 3e-2
#define TOL_PARAM1 1e-3
#define TOL_PARAMK 8e-2
#define FP32_RATIO 4.0

static void make_json(char *buf, size_t cap, const variant *v, const char *backend,
                      const char *precision) {
    snprintf(buf, cap, "{" COMMON "%s, \"backend\": \"%s\", \"matmul_precision\": \"%s\"}", v->json,
             backend, precision);
}

static int prioritized(const variant *v) {
    return strstr(v->json, "prioritized") != NULL;
}

static double cmp_kind(fhd_learner *La, fhd_learner *Lb, int kind, uint64_t off, uint64_t n) {
    float *a = (float *)malloc(sizeof(float) * (n ? n : 1));
    float *b = (float *)malloc(sizeof(float) * (n ? n : 1));
    ct_read(La, kind, off, n, a);
    ct_read(Lb, kind, off, n, b);
    double mx;
    const double e = ct_relerr(a, b, n, &mx);
    free(a);
    free(b);
    return e;
}

static double rel(double a, double b) {
    return fabs(a - b) / (fabs(b) > 1e-12 ? fabs(b) : 1e-12);
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *q = strstr(hay, needle); q; q = strstr(q + 1, needle))
        n++;
    return n;
}

/* The plan in the metrics: bf16 everywhere, the fp32-kernel fusions off. */
static void check_plan(const variant *v, fhd_learner *Lg) {
    size_t need = 0;
    fhd__learner_metrics(Lg, NULL, 0, &need);
    char *m = (char *)malloc(need);
    const int ok = fhd__learner_metrics(Lg, m, need, &need) == FHD_OK;
    ct_check(ok && strstr(m, "\"precision\":{\"forward\":\"bf16\",\"backward\":\"bf16\"}"),
             "%s: the plan's precision is bf16 for both passes", v->name);
    const size_t gemms = count(m, "\"kernel\":\"cublasLt\"");
    const size_t b16 = count(m, "\"precision\":\"bf16\"") + count(m, "\"precision\":\"bf16_out\"");
    ct_check(ok && gemms > 0 && b16 == gemms,
             "%s: every cuBLASLt GEMM record is bf16 (%zu of %zu; %zu with a bf16 output)", v->name,
             b16, gemms, count(m, "\"precision\":\"bf16_out\""));
    ct_check(ok && !strstr(m, "narrow_linear") && strstr(m, "\"fuse_dw0\":false") &&
                 strstr(m, "\"head_in_loss\":false") &&
                 strstr(m, "\"head_narrow\":{\"online\":false,\"target\":false}"),
             "%s: no narrow head kernel, no head_in_loss, no fuse_dw0", v->name);
    free(m);
}

/* The captured single update's kernels (cudaFuncGetName of each kernel node). */
static void check_graph(const variant *v, fhd_learner *Lg) {
    cudaGraph_t g = NULL;
    ct_read(Lg, FHD_CUDA_STATE_GRAPH, (uint64_t)FHD_CUDA_GRAPH_SINGLE, 1, &g);
    ct_check(g != NULL, "%s: the update was captured", v->name);
    if (!g)
        return;
    size_t n = 0;
    cudaGraphGetNodes(g, NULL, &n);
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    cudaGraphGetNodes(g, nodes, &n);
    int memcpys = 0, grid1 = 0, cvt = 0, relu16 = 0, relu32 = 0, head_dx = 0, narrow = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        cudaGraphNodeGetType(nodes[i], &t);
        memcpys += t == cudaGraphNodeTypeMemcpy;
        if (t != cudaGraphNodeTypeKernel)
            continue;
        struct cudaKernelNodeParams kp;
        memset(&kp, 0, sizeof kp);
        const char *nm = NULL;
        if (cudaGraphKernelNodeGetParams(nodes[i], &kp) != cudaSuccess || !kp.func ||
            cudaFuncGetName(&nm, kp.func) != cudaSuccess || !nm) {
            (void)cudaGetLastError(); /* a library kernel */
            continue;
        }
        if (!strstr(nm, "fhd_"))
            continue;
        grid1 += kp.gridDim.x * kp.gridDim.y * kp.gridDim.z == 1;
        cvt += strstr(nm, "fhd_to_bf16_kernel") != NULL;
        relu16 += strstr(nm, "fhd_relu_backward_bf16_kernel") != NULL;
        relu32 += strstr(nm, "fhd_relu_backward_bgrad_kernel") != NULL ||
                  strstr(nm, "fhd_relu_backward_dw_kernel") != NULL;
        head_dx += strstr(nm, "fhd_head_dx_kernel") != NULL;
        narrow += strstr(nm, "fhd_narrow_linear_kernel") != NULL;
    }
    uint64_t info[FHD_CUDA_INFO_COUNT];
    ct_read(Lg, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info);
    const int paired = info[FHD_CUDA_INFO_PAIRED_FWD0] != 0;
    const int L = (int)Lg->lo.L;
    ct_check(memcpys == 0 && grid1 == 0,
             "%s: %zu nodes, no memcpy (%d), no 1x1x1 grid of ours (%d)", v->name, n, memcpys,
             grid1);
    /* the weights, layer 0's input (paired: one conversion, else one a network), the head's
     * output gradient */
    ct_check(cvt == (paired ? 3 : 4), "%s: %d bf16 conversions (%d expected; layer 0 %s)", v->name,
             cvt, paired ? 3 : 4, paired ? "paired" : "per network");
    ct_check(relu16 == L && relu32 == 0 && head_dx == 0 && narrow == 0,
             "%s: %d bf16 ReLU backwards (%d hidden layers), fp32 ReLU backward %d, head dx %d, "
             "narrow head %d",
             v->name, relu16, L, relu32, head_dx, narrow);
    printf("       %s: %llu GEMMs without a cuBLASLt bias epilogue\n", v->name,
           (unsigned long long)info[FHD_CUDA_INFO_GEMM_FALLBACKS]);
    free(nodes);
}

static void check_stats(const variant *v, fhd_learner *Lc, fhd_learner *Lg, const char *when,
                        double tol) {
    float dummy;
    ct_read(Lg, FHD_STATE_PARAMS, 0, 1, &dummy); /* drains the queue: the snapshot is current */
    fhd__update_stats sc, sg;
    Lc->ops->latest_stats(Lc->be, &sc);
    Lg->ops->latest_stats(Lg->be, &sg);
    ct_check(sc.update_index == sg.update_index && rel(sg.loss, sc.loss) <= tol &&
                 isfinite(sg.loss) && rel(sg.td_abs_mean, sc.td_abs_mean) <= tol &&
                 rel(sg.grad_norm, sc.grad_norm) <= 10 * tol,
             "%s %s: update %llu, loss %.8g vs cpu %.8g, |td| %.8g vs %.8g, grad norm %.8g vs "
             "%.8g (tol %.0e)",
             v->name, when, (unsigned long long)sg.update_index, sg.loss, sc.loss, sg.td_abs_mean,
             sc.td_abs_mean, sg.grad_norm, sc.grad_norm, tol);
}

static void check_act(const variant *v, fhd_learner *Lc, fhd_learner *Lg, double tol) {
    const uint32_t n = 64, S = Lc->lo.S, D = Lc->lo.D, KT = Lc->lo.KT;
    const int u8 = Lc->cfg.obs_dtype == FHD_OBS_UINT8;
    float *obs = (float *)malloc(sizeof(float) * n * S);
    uint8_t *obs8 = (uint8_t *)malloc(n * S);
    float *qc = (float *)malloc(sizeof(float) * n * KT),
          *qg = (float *)malloc(sizeof(float) * n * KT);
    int32_t *ac = (int32_t *)malloc(sizeof(int32_t) * n * D),
            *ag = (int32_t *)malloc(sizeof(int32_t) * n * D);
    uint64_t s = 99;
    for (uint32_t i = 0; i < n * S; i++) {
        obs[i] = ct_normal(&s);
        obs8[i] = (uint8_t)(ct_rng(&s) & 255);
    }
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = n;
    a.obs = u8 ? NULL : obs;
    a.obs_u8 = u8 ? obs8 : NULL;
    a.actions = ac;
    a.q_values = qc;
    const int32_t rc = fhd__learner_act(Lc, &a);
    a.actions = ag;
    a.q_values = qg;
    const int32_t rg = fhd__learner_act(Lg, &a);
    ct_check(rc == FHD_OK && rg == FHD_OK, "%s act: both succeed (%s)", v->name,
             rg == FHD_OK ? "" : Lg->err);
    double mx;
    const double e = ct_relerr(qg, qc, (uint64_t)n * KT, &mx);
    ct_check(e <= tol, "%s act: Q values rel %.2e (max abs %.2e, tol %.0e)", v->name, e, mx, tol);
    int bad = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < D; d++) {
            const int32_t x = ac[i * D + d], y = ag[i * D + d];
            const float *q = qc + (size_t)i * KT + Lc->lo.k_off[d];
            bad += x != y && fabsf(q[x] - q[y]) > (float)tol * (1.0f + fabsf(q[x]));
        }
    ct_check(bad == 0, "%s act: greedy actions equal (except near-ties): %d differ", v->name, bad);
    free(obs);
    free(obs8);
    free(qc);
    free(qg);
    free(ac);
    free(ag);
}

static void feed(fhd_learner **Ls, int nl, const variant *v) {
    const fhd_learner *L = Ls[0];
    const uint32_t N = L->cfg.replay_capacity, E = L->cfg.num_envs;
    const uint32_t steps = N / E + 8 > 200 ? N / E + 8 : 200; /* fills the replay */
    if (L->cfg.obs_dtype != FHD_OBS_UINT8) {
        ct_feed(Ls, nl, E, L->lo.S, L->lo.D, v->K, steps, 1234);
        return;
    }
    const uint32_t S = L->lo.S, D = L->lo.D;
    uint8_t *obs = (uint8_t *)malloc((size_t)E * S), *next = (uint8_t *)malloc((size_t)E * S);
    float *rew = (float *)malloc(sizeof(float) * E);
    int32_t *act = (int32_t *)malloc(sizeof(int32_t) * E * D);
    uint8_t *term = (uint8_t *)malloc(E), *trunc = (uint8_t *)malloc(E);
    uint64_t s = 4321;
    for (uint32_t i = 0; i < E * S; i++)
        obs[i] = (uint8_t)(ct_rng(&s) & 255);
    for (uint32_t t = 0; t < steps; t++) {
        for (uint32_t i = 0; i < E * S; i++)
            next[i] = (uint8_t)(ct_rng(&s) & 255);
        for (uint32_t e = 0; e < E; e++) {
            rew[e] = ct_normal(&s);
            for (uint32_t d = 0; d < D; d++)
                act[e * D + d] = (int32_t)(ct_rng(&s) % v->K[d]);
            term[e] = ct_unit(&s) < 0.03;
            trunc[e] = 0;
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        tr.obs_u8 = obs;
        tr.next_obs_u8 = next;
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        for (int l = 0; l < nl; l++)
            if (fhd__learner_observe(Ls[l], &tr) != FHD_OK) {
                printf("FAIL observe: %s\n", Ls[l]->err);
                exit(1);
            }
        memcpy(obs, next, (size_t)E * S);
    }
    free(obs);
    free(next);
    free(rew);
    free(act);
    free(term);
    free(trunc);
}

static void run_variant(const variant *v) {
    char jc[1024], jg[1024], jf[1024];
    make_json(jc, sizeof jc, v, "cpu", "bf16");
    make_json(jg, sizeof jg, v, "cuda", "bf16");
    make_json(jf, sizeof jf, v, "cpu", "fp32");
    fhd_learner *Lc = ct_create(jc, NULL), *Lf = ct_create(jf, NULL);
    if (!Lc || !Lf) {
        ct_check(0, "%s: cpu learners", v->name);
        return;
    }
    fhd_learner *Lg = ct_create_cuda(jg);
    printf("-- %s on %s\n", v->name, Lg->ops->device_name(Lg->be));
    check_plan(v, Lg);
    check_graph(v, Lg);
    fhd_learner *all[3] = {Lc, Lg, Lf};
    feed(all, 3, v);
    const uint32_t B = Lc->cfg.batch_size;
    const uint64_t P = Lc->lo.num_params;
    uint32_t *ic = (uint32_t *)malloc(4 * (size_t)B), *ig = (uint32_t *)malloc(4 * (size_t)B);
    float *wc = (float *)malloc(4 * (size_t)B), *wg = (float *)malloc(4 * (size_t)B);
    int every_equal = 1;
    for (int k = 1; k <= v->updates; k++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        const int32_t rc = fhd__learner_train(Lc, 1, &st), rg = fhd__learner_train(Lg, 1, &st);
        if (rc != FHD_OK || rg != FHD_OK) {
            ct_check(0, "%s: train update %d: cpu %s / cuda %s", v->name, k, Lc->err, Lg->err);
            break;
        }
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        ct_read(Lc, FHD_STATE_LAST_WEIGHTS, 0, B, wc);
        ct_read(Lg, FHD_STATE_LAST_WEIGHTS, 0, B, wg);
        const int same = memcmp(ic, ig, 4 * (size_t)B) == 0 && memcmp(wc, wg, 4 * (size_t)B) == 0;
        every_equal &= same;
        if (k == 1) {
            ct_check(fhd__learner_train(Lf, 1, &st) == FHD_OK, "%s: the fp32 cpu update", v->name);
            ct_check(same, "%s update 1: sampled indices and IS weights identical", v->name);
            check_stats(v, Lc, Lg, "update 1", TOL_FWD);
            const double e16 = cmp_kind(Lg, Lc, FHD_STATE_GRAD, 0, P);
            const double e32 = cmp_kind(Lg, Lf, FHD_STATE_GRAD, 0, P);
            ct_check(e16 <= TOL_GRAD,
                     "%s update 1: gradient rel %.2e against the cpu's bf16 (tol "
                     "%.0e)",
                     v->name, e16, TOL_GRAD);
            ct_check(e32 >= FP32_RATIO * e16,
                     "%s update 1: the gradient is %.1fx further from the cpu's fp32 one (%.2e; "
                     "at least %.0fx): bf16 is in effect",
                     v->name, e32 / fmax(e16, 1e-30), e32, FP32_RATIO);
            double e = cmp_kind(Lg, Lc, FHD_STATE_PARAMS, 0, 2 * P);
            ct_check(e <= TOL_PARAM1, "%s update 1: parameters rel %.2e (tol %.0e)", v->name, e,
                     TOL_PARAM1);
            e = cmp_kind(Lg, Lc, FHD_STATE_ADAM_M, 0, P);
            ct_check(e <= TOL_GRAD, "%s update 1: Adam m rel %.2e", v->name, e);
            e = cmp_kind(Lg, Lc, FHD_STATE_ADAM_V, 0, P);
            ct_check(e <= 2 * TOL_GRAD, "%s update 1: Adam v rel %.2e", v->name, e);
            if (Lc->lo.sn_size) {
                e = cmp_kind(Lg, Lc, FHD_STATE_SN, 0, 2 * Lc->lo.sn_size);
                ct_check(e <= TOL_FWD, "%s update 1: spectral-norm vectors rel %.2e", v->name, e);
            }
        }
        if (prioritized(v))
            ct_copy_priorities(Lc, Lg);
    }
    ct_check(every_equal, "%s: indices and weights identical at every one of %d updates", v->name,
             v->updates);
    check_stats(v, Lc, Lg, "last update", 10 * TOL_FWD);
    double e = cmp_kind(Lg, Lc, FHD_STATE_PARAMS, 0, P);
    ct_check(e <= TOL_PARAMK, "%s update %d: online parameters rel %.2e (tol %.0e)", v->name,
             v->updates, e, TOL_PARAMK);
    e = cmp_kind(Lg, Lc, FHD_STATE_PARAMS, P, P);
    ct_check(e <= TOL_PARAMK, "%s update %d: target parameters rel %.2e", v->name, v->updates, e);
    check_act(v, Lc, Lg, 10 * TOL_FWD);
    {
        const uint64_t c0 = ct_sync_count(Lg);
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        const int32_t rg = fhd__learner_train(Lg, 200, &st);
        const uint64_t c1 = ct_sync_count(Lg);
        ct_check(rg == FHD_OK && c1 == c0,
                 "%s: 200 more updates without a synchronisation "
                 "(%llu, %llu)",
                 v->name, (unsigned long long)c0, (unsigned long long)c1);
        char msg[256] = {0};
        ct_check(Lg->ops->check_invariants(Lg->be, msg, sizeof msg) == FHD_OK,
                 "%s: CUDA invariants hold (%s)", v->name, msg);
    }
    free(ic);
    free(ig);
    free(wc);
    free(wg);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
    fhd__learner_destroy(Lf);
}

/* train_batch: the same host batches on both backends, in bf16. */
static void run_train_batch(const variant *v) {
    char jc[1024], jg[1024];
    make_json(jc, sizeof jc, v, "cpu", "bf16");
    make_json(jg, sizeof jg, v, "cuda", "bf16");
    fhd_learner *Lc = ct_create(jc, NULL);
    fhd_learner *Lg = ct_create_cuda(jg);
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
                act[i * D + d] = (int32_t)(ct_rng(&s) % v->K[d]);
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
        ct_check(rc == FHD_OK && rg == FHD_OK, "%s train_batch %d: both succeed (%s)", v->name, k,
                 rg == FHD_OK ? "" : Lg->err);
        double mx;
        double e = ct_relerr(tdg, tdc, (uint64_t)B * D, &mx);
        ct_check(e <= TOL_FWD, "%s train_batch %d: TD errors rel %.2e (max abs %.2e)", v->name, k,
                 e, mx);
        e = ct_relerr(yg, yc, B, &mx);
        ct_check(e <= TOL_FWD, "%s train_batch %d: targets rel %.2e", v->name, k, e);
        ct_check(sg.update_index == sc.update_index && rel(sg.loss, sc.loss) <= TOL_FWD &&
                     rel(sg.grad_norm, sc.grad_norm) <= TOL_GRAD,
                 "%s train_batch %d: loss %.8g vs %.8g, grad norm %.8g vs %.8g", v->name, k,
                 sg.loss, sc.loss, sg.grad_norm, sc.grad_norm);
        e = cmp_kind(Lg, Lc, FHD_STATE_PARAMS, 0, 2 * P);
        ct_check(e <= 3 * TOL_PARAM1, "%s train_batch %d: parameters rel %.2e", v->name, k, e);
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
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* Two CUDA learners of one config: the same bits after 50 updates (the backend's run-to-run
 * determinism holds for bf16 GEMMs too: no split-K reduced by atomics). */
static void run_determinism(const variant *v) {
    char jg[1024];
    make_json(jg, sizeof jg, v, "cuda", "bf16");
    fhd_learner *A = ct_create_cuda(jg), *B = ct_create_cuda(jg);
    fhd_learner *both[2] = {A, B};
    feed(both, 2, v);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    const int ok =
        fhd__learner_train(A, 50, &st) == FHD_OK && fhd__learner_train(B, 50, &st) == FHD_OK;
    const uint64_t P = A->lo.num_params;
    float *pa = ct_read_floats(A, FHD_STATE_PARAMS, 2 * P),
          *pb = ct_read_floats(B, FHD_STATE_PARAMS, 2 * P);
    ct_check(ok && memcmp(pa, pb, 8 * (size_t)P) == 0,
             "%s: two CUDA learners bitwise identical after 50 updates", v->name);
    free(pa);
    free(pb);
    fhd__learner_destroy(A);
    fhd__learner_destroy(B);
}

/* A config the CUDA backend cannot run in bf16 is refused by name, "auto" falls back to the CPU
 * in bf16. */
static void check_refusals(void) {
    const char *conv = "{\"obs_shape\": [2, 8, 8], \"conv\": [{\"out\": 4, \"kernel\": 3, "
                       "\"stride\": 1}], \"hidden\": [16], \"actions\": [3], \"backend\": "
                       "\"%s\", \"matmul_precision\": \"bf16\"}";
    char j[512];
    snprintf(j, sizeof j, conv, "cuda");
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t rc = fhd__learner_init(j, strlen(j), &L, &err);
    ct_check(rc == FHD_ERR_BACKEND_UNAVAILABLE && strcmp(err.path, "$.matmul_precision") == 0,
             "bf16 with a conv torso on cuda: refused at %s (%s)", err.path, err.message);
    fhd__learner_destroy(L);
    L = NULL;
    snprintf(j, sizeof j, conv, "auto");
    rc = fhd__learner_init(j, strlen(j), &L, &err);
    ct_check(rc == FHD_OK && L && strcmp(L->ops->name, "cpu") == 0 &&
                 L->cfg.matmul_precision == FHD_PREC_BF16,
             "bf16 with a conv torso on auto: the cpu backend, in bf16");
    fhd__learner_destroy(L);
}

int main(int argc, char **argv) {
    ct_require_gpu();
    const char *only = argc > 1 ? argv[1] : NULL;
    if (!only || strcmp(only, "refusals") == 0)
        check_refusals();
    if (!only || strcmp(only, "train_batch") == 0) {
        run_train_batch(&variants[0]);
        run_train_batch(&variants[2]); /* spectral norm, branching, CQL */
    }
    if (!only || strcmp(only, "determinism") == 0)
        run_determinism(&variants[1]);
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) /* odd-widths last */
        if (!only || strcmp(only, variants[i].name) == 0)
            run_variant(&variants[i]);
    return ct_finish();
}
