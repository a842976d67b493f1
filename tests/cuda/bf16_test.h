/* bf16_test.h - test_cuda_bf16.c's comparison of a CUDA learner in bf16 with the CPU's bf16 and
 * fp32 learners (C11): the plan and the captured graph, update 1 and K updates, act,
 * train_batch and run-to-run determinism, per variant (what test_cuda_bf16.c's comment lists).
 */
#ifndef FHD_BF16_TEST_H
#define FHD_BF16_TEST_H

#include "cuda_test.h"

typedef struct variant {
    const char *name;
    const char *json; /* every key but backend and matmul_precision */
    uint32_t D, K[4];
    int updates;  /* K */
    double drift; /* the K-update tolerances' factor (0: 1); conv torsos 2: more bf16 roundings
                   * an update (columns, every conv activation, dz), which Adam's steps amplify
                   * (update 1 and train_batch keep the tight tolerances) */
} variant;

static double drift_of(const variant *v) {
    return v->drift > 0 ? v->drift : 1.0;
}

/* the keys every variant shares */
#define COMMON "\"num_envs\": 4, \"seed\": 11, \"learning_starts\": 0, "

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

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *q = strstr(hay, needle); q; q = strstr(q + 1, needle))
        n++;
    return n;
}

/* Does the plan in the metrics hold `what`? */
static int plan_says(fhd_learner *Lg, const char *what) {
    size_t need = 0;
    fhd__learner_metrics(Lg, NULL, 0, &need);
    char *m = (char *)malloc(need);
    const int ok = fhd__learner_metrics(Lg, m, need, &need) == FHD_OK && strstr(m, what);
    free(m);
    return ok;
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
                 strstr(m, "\"head_narrow\":{\"online\":false,\"target\":false}") &&
                 strstr(m, "\"pad_head\":true"),
             "%s: no narrow head kernel, no head_in_loss, no fuse_dw0; the padded head", v->name);
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
    int memcpys = 0, grid1 = 0, cvt = 0, relu16 = 0, mask16 = 0, relu32 = 0, head_dx = 0;
    int narrow = 0;
    /* the conv kernels (all of them, and those instantiated for bf16) */
    int im2col = 0, im2col16 = 0, cdz = 0, cdz16 = 0, flat = 0, flat16 = 0, perm16 = 0, pad16 = 0;
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
        mask16 += strstr(nm, "fhd_relu_mask_bf16_kernel") != NULL;
        relu32 += strstr(nm, "fhd_relu_backward_bgrad_kernel") != NULL ||
                  strstr(nm, "fhd_relu_backward_dw_kernel") != NULL;
        head_dx += strstr(nm, "fhd_head_dx_kernel") != NULL;
        narrow += strstr(nm, "fhd_narrow_linear_kernel") != NULL;
        const int b16 = strstr(nm, "nv_bfloat16") != NULL; /* a template argument */
        im2col += strstr(nm, "im2col") != NULL;
        im2col16 += strstr(nm, "im2col") != NULL && b16;
        cdz += strstr(nm, "fhd_conv_dz_kernel") != NULL;
        cdz16 += strstr(nm, "fhd_conv_dz_kernel") != NULL && b16;
        flat += strstr(nm, "fhd_conv_flatten_kernel") != NULL;
        flat16 += strstr(nm, "fhd_conv_flatten_kernel") != NULL && b16;
        perm16 += strstr(nm, "fhd_conv_permute_kernel") != NULL && b16;
        pad16 += strstr(nm, "fhd_head_pad_bf16_kernel") != NULL;
    }
    uint64_t info[FHD_CUDA_INFO_COUNT];
    ct_read(Lg, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info);
    const int paired = info[FHD_CUDA_INFO_PAIRED_FWD0] != 0;
    const int by_opt = plan_says(Lg, "\"bf16_weights\":\"optimizer\"");
    const int L = (int)Lg->lo.L, NC = (int)Lg->lo.NC;
    ct_check(memcpys == 0 && grid1 == 0,
             "%s: %zu nodes, no memcpy (%d), no 1x1x1 grid of ours (%d)", v->name, n, memcpys,
             grid1);
    /* none but, with pruning, the weights' (and the padded head's): else the optimiser writes
     * their copies; the loss kernel the head's output gradient (staged: every variant's head
     * is small), the sampling layer 0's input (below a conv torso its flatten), paired or
     * not */
    const int pruned = Lg->lo.num_masks > 0, want = pruned ? 1 : 0;
    ct_check(by_opt == !pruned && cvt == want && pad16 == want,
             "%s: the optimiser keeps the bf16 weights: %d (%s pruning); %d bf16 conversions "
             "(%d expected; layer 0 %s), %d bf16 head paddings (%d)",
             v->name, by_opt, pruned ? "with" : "without", cvt, want,
             NC       ? "from the conv flatten"
             : paired ? "paired, from the sampling"
                      : "per network, from the sampling",
             pad16, want);
    /* the conv torso in bf16: layer 0's im2col once, each layer above's once a network; a dz
     * kernel a layer; a flatten a network; the forward permutation rounding to bf16 */
    ct_check(!NC || (im2col == im2col16 && im2col == 2 * NC - 1 && cdz == NC && cdz16 == NC &&
                     flat == 2 && flat16 == 2 && perm16 == (NC > 1)),
             "%s: conv kernels in bf16: im2col %d (bf16 %d, %d expected), dz %d (bf16 %d, %d), "
             "flatten %d (bf16 %d, 2), bf16 permutation %d (%d)",
             v->name, im2col, im2col16, 2 * NC - 1, cdz, cdz16, NC, flat, flat16, perm16, NC > 1);
    /* a bf16 ReLU backward a hidden layer: in place on the dx GEMM's bf16 output, or from a
     * split dx's fp32 halves; the head's dx is never split, so the layer below it masks in
     * place */
    ct_check(relu16 + mask16 == L && (L == 0 || mask16 >= 1) && relu32 == 0 && head_dx == 0 &&
                 narrow == 0,
             "%s: %d bf16 ReLU backwards (%d in place; %d hidden layers), fp32 ReLU backward %d, "
             "head dx %d, narrow head %d",
             v->name, relu16 + mask16, mask16, L, relu32, head_dx, narrow);
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
    ct_check(sc.update_index == sg.update_index && ct_rel(sg.loss, sc.loss) <= tol &&
                 isfinite(sg.loss) && ct_rel(sg.td_abs_mean, sc.td_abs_mean) <= tol &&
                 ct_rel(sg.grad_norm, sc.grad_norm) <= 10 * tol,
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

static void write_kind(fhd_learner *L, int kind, uint64_t n, const float *x, const char *name) {
    if (L->ops->write(L->be, kind, 0, n, x) != FHD_OK) {
        printf("FAIL %s: write of kind %d: %s\n", name, kind, L->ops->error(L->be));
        exit(1);
    }
}

/* A write of the params between updates (tensor_write, a checkpoint load): the CPU learner's
 * weights halved into both learners, its Adam moments (and power-iteration vectors) into the
 * CUDA one, then one update each on the same batch. The CUDA update's GEMMs must read the
 * written weights (its bf16 copies made again): copies of the weights before the write would
 * be twice as large. */
static void check_written(const variant *v, fhd_learner *Lc, fhd_learner *Lg) {
    const uint64_t P = Lc->lo.num_params, SN = 2 * (uint64_t)Lc->lo.sn_size;
    float *p = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P);
    float *m = ct_read_floats(Lc, FHD_STATE_ADAM_M, P),
          *s2 = ct_read_floats(Lc, FHD_STATE_ADAM_V, P);
    for (uint64_t i = 0; i < 2 * P; i++)
        p[i] *= 0.5f;
    write_kind(Lc, FHD_STATE_PARAMS, 2 * P, p, v->name);
    write_kind(Lg, FHD_STATE_PARAMS, 2 * P, p, v->name);
    write_kind(Lg, FHD_STATE_ADAM_M, P, m, v->name);
    write_kind(Lg, FHD_STATE_ADAM_V, P, s2, v->name);
    if (SN) {
        float *u = ct_read_floats(Lc, FHD_STATE_SN, SN);
        write_kind(Lg, FHD_STATE_SN, SN, u, v->name);
        free(u);
    }
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    ct_check(fhd__learner_train(Lc, 1, &st) == FHD_OK && fhd__learner_train(Lg, 1, &st) == FHD_OK,
             "%s: an update after a write of the params (%s)", v->name, Lg->err);
    check_stats(v, Lc, Lg, "after a write of the params", TOL_FWD);
    const double e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, NULL);
    ct_check(e <= TOL_PARAM1, "%s: parameters after a write and an update rel %.2e (tol %.0e)",
             v->name, e, TOL_PARAM1);
    char msg[256] = {0};
    ct_check(Lg->ops->check_invariants(Lg->be, msg, sizeof msg) == FHD_OK,
             "%s: CUDA invariants after a write (%s)", v->name, msg);
    if (prioritized(v))
        ct_copy_priorities(Lc, Lg);
    free(p);
    free(m);
    free(s2);
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
            const double e16 = ct_cmp_kind(Lc, Lg, FHD_STATE_GRAD, 0, P, NULL);
            const double e32 = ct_cmp_kind(Lf, Lg, FHD_STATE_GRAD, 0, P, NULL);
            ct_check(e16 <= TOL_GRAD,
                     "%s update 1: gradient rel %.2e against the cpu's bf16 (tol "
                     "%.0e)",
                     v->name, e16, TOL_GRAD);
            ct_check(e32 >= FP32_RATIO * e16,
                     "%s update 1: the gradient is %.1fx further from the cpu's fp32 one (%.2e; "
                     "at least %.0fx): bf16 is in effect",
                     v->name, e32 / fmax(e16, 1e-30), e32, FP32_RATIO);
            double e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, 2 * P, NULL);
            ct_check(e <= TOL_PARAM1, "%s update 1: parameters rel %.2e (tol %.0e)", v->name, e,
                     TOL_PARAM1);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_ADAM_M, 0, P, NULL);
            ct_check(e <= TOL_GRAD, "%s update 1: Adam m rel %.2e", v->name, e);
            e = ct_cmp_kind(Lc, Lg, FHD_STATE_ADAM_V, 0, P, NULL);
            ct_check(e <= 2 * TOL_GRAD, "%s update 1: Adam v rel %.2e", v->name, e);
            if (Lc->lo.sn_size) {
                e = ct_cmp_kind(Lc, Lg, FHD_STATE_SN, 0, 2 * Lc->lo.sn_size, NULL);
                ct_check(e <= TOL_FWD, "%s update 1: spectral-norm vectors rel %.2e", v->name, e);
            }
        }
        if (prioritized(v))
            ct_copy_priorities(Lc, Lg);
    }
    ct_check(every_equal, "%s: indices and weights identical at every one of %d updates", v->name,
             v->updates);
    check_stats(v, Lc, Lg, "last update", 10 * TOL_FWD * drift_of(v));
    double e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, 0, P, NULL);
    ct_check(e <= TOL_PARAMK * drift_of(v), "%s update %d: online parameters rel %.2e (tol %.0e)",
             v->name, v->updates, e, TOL_PARAMK * drift_of(v));
    e = ct_cmp_kind(Lc, Lg, FHD_STATE_PARAMS, P, P, NULL);
    ct_check(e <= TOL_PARAMK * drift_of(v), "%s update %d: target parameters rel %.2e", v->name,
             v->updates, e);
    check_act(v, Lc, Lg, 10 * TOL_FWD * drift_of(v));
    check_written(v, Lc, Lg);
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
    const ct_batch_tol tol = {TOL_FWD, TOL_GRAD, 3 * TOL_PARAM1, 0};
    ct_train_batches(v->name, Lc, Lg, v->K, &tol);
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

#endif
