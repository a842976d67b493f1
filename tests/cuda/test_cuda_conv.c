/* test_cuda_conv.c - convolutional torsos on the CUDA backend against the CPU reference.
 *
 * For each configuration (uint8 images with a stack of frames and padded convolutions, float32
 * images of odd sizes without padding on the first layer, the same under tf32_forward) one
 * learner per backend, same config and seed:
 *   - initial parameters identical (the same Philox draws);
 *   - act on 64 observations: Q values within tolerance, greedy actions equal but near ties;
 *   - train_batch: TD errors, targets, loss and parameters within tolerance after 1 update and
 *     after 10 more;
 *   - observe the same frame stream (episode ends, truncations), then train: sampled indices and
 *     IS weights of every update identical (the CPU's priorities copied into the CUDA learner
 *     after each update so that both sample the same batches), parameters within tolerance
 *     after 30 updates; 200 more updates without a synchronisation of the training loop.
 *   - checkpoints with the frame replay CPU -> CUDA (exact; then the same batches) -> CPU (exact).
 * FHD_CONV_SHORT=1 (for compute-sanitizer) runs the first configuration with 20 more updates.
 * Tolerances are relative L2 errors, as test_cuda_parity.c: FP32 differs only in summation
 * order; TF32 forwards round GEMM inputs to 10 mantissa bits.
 */
#include "cuda_test.h"

#include <unistd.h>

typedef struct variant {
    const char *name;
    const char *json; /* everything but the backend */
    const char *precision;
    double tol_fwd, tol_param;
} variant;

#define COMMON                                                                                     \
    "\"num_envs\": 4, \"seed\": 11, \"lr\": 0.001, \"max_grad_norm\": 1.0, "                       \
    "\"learning_starts\": 0, \"replay_capacity\": 256, "

static const variant variants[] = {
    {"u8-stack4-padded",
     COMMON "\"obs_shape\": [4, 36, 36], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
            "\"conv\": [{\"out\": 16, \"kernel\": 8, \"stride\": 4, \"padding\": 0}, "
            "{\"out\": 32, \"kernel\": 4, \"stride\": 2, \"padding\": 1}, "
            "{\"out\": 32, \"kernel\": 3, \"stride\": 1, \"padding\": 1}], \"hidden\": [64], "
            "\"actions\": [5], \"dueling\": true, \"double_dqn\": true, \"replay\": "
            "\"prioritized\", \"batch_size\": 32",
     "fp32", 1e-5, 2e-4},
    {"f32-odd",
     COMMON "\"obs_shape\": [3, 17, 19], \"conv\": [{\"out\": 8, \"kernel\": 3, \"stride\": 1, "
            "\"padding\": 0}, {\"out\": 12, \"kernel\": 3, \"stride\": 2, \"padding\": 1}], "
            "\"hidden\": [32, 24], \"actions\": [4], \"dueling\": false, \"double_dqn\": false, "
            "\"replay\": \"uniform\", \"batch_size\": 48",
     "fp32", 1e-5, 2e-4},
    {"u8-tf32-forward",
     COMMON "\"obs_shape\": [4, 36, 36], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
            "\"conv\": [{\"out\": 16, \"kernel\": 8, \"stride\": 4, \"padding\": 0}, "
            "{\"out\": 32, \"kernel\": 4, \"stride\": 2, \"padding\": 1}], \"hidden\": [64], "
            "\"actions\": [3, 4], \"dueling\": true, \"double_dqn\": true, \"replay\": "
            "\"prioritized\", \"batch_size\": 64",
     "tf32_forward", 3e-3, 3e-2},
};

static void make_json(char *buf, size_t cap, const variant *v, int cuda) {
    snprintf(buf, cap, "{\"backend\": \"%s\", \"matmul_precision\": \"%s\", %s}",
             cuda ? "cuda" : "cpu", cuda ? v->precision : "fp32", v->json);
}

static int is_u8(const fhd_learner *L) {
    return L->cfg.obs_dtype == FHD_OBS_UINT8;
}

/* n observations: uint8 rows, or floats in [0, 1) (the same values either way). */
static void *make_obs(const fhd_learner *L, uint32_t n, uint64_t *s) {
    const size_t S = L->lo.S;
    if (is_u8(L)) {
        uint8_t *o = (uint8_t *)malloc(n * S);
        for (size_t i = 0; i < n * S; i++)
            o[i] = (uint8_t)(ct_rng(s) & 255);
        return o;
    }
    float *o = (float *)malloc(sizeof(float) * n * S);
    for (size_t i = 0; i < n * S; i++)
        o[i] = (float)ct_unit(s);
    return o;
}

static void compare_floats(const char *what, const variant *v, fhd_learner *Lc, fhd_learner *Lg,
                           int kind, uint64_t count, double tol) {
    float *a = ct_read_floats(Lc, kind, count), *b = ct_read_floats(Lg, kind, count);
    double mx;
    const double e = ct_relerr(b, a, count, &mx);
    ct_check(e <= tol, "%s %s: rel %.2e (max abs %.2e, tol %.0e)", v->name, what, e, mx, tol);
    free(a);
    free(b);
}

static void check_act(const variant *v, fhd_learner *Lc, fhd_learner *Lg) {
    const uint32_t n = 64, D = Lc->lo.D, KT = Lc->lo.KT;
    uint64_t s = 5;
    void *obs = make_obs(Lc, n, &s);
    float *qc = (float *)malloc(sizeof(float) * n * KT),
          *qg = (float *)malloc(sizeof(float) * n * KT);
    int32_t *ac = (int32_t *)malloc(4 * n * D), *ag = (int32_t *)malloc(4 * n * D);
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = n;
    if (is_u8(Lc))
        a.obs_u8 = (const uint8_t *)obs;
    else
        a.obs = (const float *)obs;
    a.actions = ac;
    a.q_values = qc;
    int32_t rc = fhd__learner_act(Lc, &a);
    a.actions = ag;
    a.q_values = qg;
    int32_t rg = fhd__learner_act(Lg, &a);
    ct_check(rc == FHD_OK && rg == FHD_OK, "%s act: both succeed (%s)", v->name,
             rg == FHD_OK ? "" : Lg->err);
    double mx;
    const double e = ct_relerr(qg, qc, (uint64_t)n * KT, &mx);
    ct_check(e <= v->tol_fwd, "%s act: Q values rel %.2e (max abs %.2e)", v->name, e, mx);
    int bad = 0;
    for (uint32_t i = 0; i < n * D; i++)
        if (ac[i] != ag[i]) {
            const uint32_t d = i % D;
            const float *q = qc + (size_t)(i / D) * KT + Lc->lo.k_off[d];
            bad += fabsf(q[ac[i]] - q[ag[i]]) > (float)v->tol_fwd * (1.0f + fabsf(q[ac[i]]));
        }
    ct_check(bad == 0, "%s act: greedy actions equal but near ties (%d differ)", v->name, bad);
    free(obs);
    free(qc);
    free(qg);
    free(ac);
    free(ag);
}

static void check_train_batch(const variant *v, fhd_learner *Lc, fhd_learner *Lg) {
    const uint32_t B = Lc->cfg.batch_size, D = Lc->lo.D;
    uint64_t s = 17;
    for (int u = 0; u < 11; u++) {
        void *obs = make_obs(Lc, B, &s), *next = make_obs(Lc, B, &s);
        int32_t *act = (int32_t *)malloc(4 * B * D);
        float *rew = (float *)malloc(4 * B), *tdc = (float *)malloc(4 * B * D);
        float *tdg = (float *)malloc(4 * B * D), *yc = (float *)malloc(4 * B);
        float *yg = (float *)malloc(4 * B);
        uint8_t *term = (uint8_t *)malloc(B);
        for (uint32_t i = 0; i < B; i++) {
            rew[i] = ct_normal(&s);
            term[i] = ct_unit(&s) < 0.1;
            for (uint32_t d = 0; d < D; d++)
                act[i * D + d] = (int32_t)(ct_rng(&s) % Lc->lo.K[d]);
        }
        fhd_batch bt = FHD_BATCH_INIT;
        bt.batch_size = B;
        if (is_u8(Lc)) {
            bt.obs_u8 = (const uint8_t *)obs;
            bt.next_obs_u8 = (const uint8_t *)next;
        } else {
            bt.obs = (const float *)obs;
            bt.next_obs = (const float *)next;
        }
        bt.actions = act;
        bt.rewards = rew;
        bt.terminated = term;
        fhd_train_stats sc = FHD_TRAIN_STATS_INIT, sg = FHD_TRAIN_STATS_INIT;
        bt.td_errors = tdc;
        bt.targets = yc;
        int32_t rc = fhd__learner_train_batch(Lc, &bt, &sc);
        bt.td_errors = tdg;
        bt.targets = yg;
        int32_t rg = fhd__learner_train_batch(Lg, &bt, &sg);
        ct_check(rc == FHD_OK && rg == FHD_OK, "%s train_batch %d: both succeed (%s)", v->name, u,
                 rg == FHD_OK ? "" : Lg->err);
        if (u == 0 || u == 10) {
            double mx;
            double e = ct_relerr(tdg, tdc, (uint64_t)B * D, &mx);
            ct_check(e <= v->tol_fwd * 10, "%s train_batch %d: TD errors rel %.2e", v->name, u, e);
            e = ct_relerr(yg, yc, B, &mx);
            ct_check(e <= v->tol_fwd * 10, "%s train_batch %d: targets rel %.2e", v->name, u, e);
            ct_check(fabs(sg.loss - sc.loss) <= v->tol_fwd * 10 * (1 + fabs(sc.loss)),
                     "%s train_batch %d: loss %.9g vs cpu %.9g", v->name, u, sg.loss, sc.loss);
            if (u == 0)
                compare_floats("gradient after train_batch 1", v, Lc, Lg, FHD_STATE_GRAD,
                               Lc->lo.num_params, v->tol_fwd * 100);
            compare_floats(u == 0 ? "parameters after train_batch 1"
                                  : "parameters after train_batch 11",
                           v, Lc, Lg, FHD_STATE_PARAMS, 2 * Lc->lo.num_params, v->tol_param);
        }
        free(obs);
        free(next);
        free(act);
        free(rew);
        free(tdc);
        free(tdg);
        free(yc);
        free(yg);
        free(term);
    }
}

/* An image stream: each env's frames drift (a shifted stack of its own), episodes end. */
static void feed(fhd_learner **Ls, uint32_t T, uint64_t seed) {
    const fhd_learner *L = Ls[0];
    const uint32_t E = L->cfg.num_envs, D = L->lo.D;
    const size_t S = L->lo.S;
    uint64_t s = seed;
    void *obs = make_obs(L, E, &s);
    float *rew = (float *)malloc(4 * E);
    int32_t *act = (int32_t *)malloc(4 * E * D);
    uint8_t *term = (uint8_t *)malloc(E), *trunc = (uint8_t *)malloc(E);
    for (uint32_t t = 0; t < T; t++) {
        void *next = make_obs(L, E, &s);
        for (uint32_t e = 0; e < E; e++) {
            rew[e] = ct_normal(&s);
            for (uint32_t d = 0; d < D; d++)
                act[e * D + d] = (int32_t)(ct_rng(&s) % L->lo.K[d]);
            const double u = ct_unit(&s);
            term[e] = u < 0.04;
            trunc[e] = !term[e] && u < 0.06;
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        if (is_u8(L)) {
            tr.obs_u8 = (const uint8_t *)obs;
            tr.next_obs_u8 = (const uint8_t *)next;
        } else {
            tr.obs = (const float *)obs;
            tr.next_obs = (const float *)next;
        }
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        for (int l = 0; l < 2; l++)
            if (fhd__learner_observe(Ls[l], &tr) != FHD_OK) {
                printf("FAIL observe: %s\n", Ls[l]->err);
                exit(1);
            }
        free(obs);
        obs = next;
        (void)S;
    }
    free(obs);
    free(rew);
    free(act);
    free(term);
    free(trunc);
}

static void check_train(const variant *v, fhd_learner *Lc, fhd_learner *Lg) {
    fhd_learner *Ls[2] = {Lc, Lg};
    feed(Ls, 150, 23);
    const uint32_t B = Lc->cfg.batch_size, N = Lc->cfg.replay_capacity;
    const int per = Lc->cfg.replay == FHD_REPLAY_PRIORITIZED;
    uint32_t *ic = (uint32_t *)malloc(4 * B), *ig = (uint32_t *)malloc(4 * B);
    float *wc = (float *)malloc(4 * B), *wg = (float *)malloc(4 * B);
    uint64_t *pc = (uint64_t *)malloc(8 * N);
    int same_idx = 1, same_w = 1;
    for (int u = 0; u < 30; u++) {
        int32_t rc = fhd__learner_train(Lc, 1, NULL), rg = fhd__learner_train(Lg, 1, NULL);
        if (rc != FHD_OK || rg != FHD_OK) {
            ct_check(0, "%s train %d: both succeed (%s)", v->name, u, Lg->err);
            break;
        }
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        ct_read(Lc, FHD_STATE_LAST_WEIGHTS, 0, B, wc);
        ct_read(Lg, FHD_STATE_LAST_WEIGHTS, 0, B, wg);
        same_idx &= memcmp(ic, ig, 4 * B) == 0;
        same_w &= memcmp(wc, wg, 4 * B) == 0;
        if (per) { /* both sample the same batches from here on */
            ct_read(Lc, FHD_STATE_REPLAY_PRIORITY, 0, N, pc);
            fhd__backend_scalars sc, sg;
            if (Lg->ops->write(Lg->be, FHD_STATE_REPLAY_PRIORITY, 0, N, pc) != FHD_OK ||
                Lc->ops->get_scalars(Lc->be, &sc) != FHD_OK ||
                Lg->ops->get_scalars(Lg->be, &sg) != FHD_OK) {
                printf("FAIL copy priorities: %s\n", Lg->ops->error(Lg->be));
                exit(1);
            }
            sg.max_priority_q = sc.max_priority_q;
            Lg->ops->set_scalars(Lg->be, &sg);
        }
    }
    ct_check(same_idx, "%s train: sampled indices identical over 30 updates", v->name);
    ct_check(same_w, "%s train: IS weights identical over 30 updates", v->name);
    compare_floats("parameters after 30 updates", v, Lc, Lg, FHD_STATE_PARAMS,
                   2 * Lc->lo.num_params, v->tol_param * 5);
    char msg[256];
    int32_t rc =
        Lg->ops->check_invariants ? Lg->ops->check_invariants(Lg->be, msg, sizeof msg) : FHD_OK;
    ct_check(rc == FHD_OK, "%s: CUDA invariants (%s)", v->name, rc == FHD_OK ? "ok" : msg);
    const uint64_t sync0 = ct_sync_count(Lg);
    rc = fhd__learner_train(Lg, getenv("FHD_CONV_SHORT") ? 20 : 200, NULL);
    const uint64_t sync1 = ct_sync_count(Lg);
    ct_check(rc == FHD_OK && sync1 == sync0, "%s: more updates, %llu synchronisations", v->name,
             (unsigned long long)(sync1 - sync0));
    float *p = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * Lg->lo.num_params);
    int finite = 1;
    for (uint64_t i = 0; i < 2 * Lg->lo.num_params; i++)
        finite &= isfinite(p[i]) != 0;
    ct_check(finite, "%s: parameters finite after 230 updates", v->name);
    free(p);
    free(ic);
    free(ig);
    free(wc);
    free(wg);
    free(pc);
}

/* Checkpoints both ways with the frame replay: the CPU learner's file into a fresh CUDA
 * learner, both train the same batches (the CPU's priorities copied over), then the CUDA
 * learner's file into a fresh CPU learner, whose parameters must equal the CUDA ones exactly. */
static void check_checkpoint(const variant *v, fhd_learner *Lc, const char *jc, const char *jg) {
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "/tmp/fhd_conv_cpu_%d.safetensors", (int)getpid());
    snprintf(pb, sizeof pb, "/tmp/fhd_conv_cuda_%d.safetensors", (int)getpid());
    const uint64_t P2 = 2 * Lc->lo.num_params;
    const uint32_t B = Lc->cfg.batch_size, N = Lc->cfg.replay_capacity;
    int32_t rc = fhd__checkpoint_save(Lc, pa, FHD_CKPT_INCLUDE_REPLAY);
    ct_check(rc == FHD_OK, "%s: cpu checkpoint_save (%s)", v->name, rc == FHD_OK ? "" : Lc->err);
    fhd_learner *Lg = ct_create_cuda(jg);
    rc = fhd__checkpoint_load(Lg, pa, FHD_CKPT_INCLUDE_REPLAY);
    ct_check(rc == FHD_OK, "%s: cuda checkpoint_load of the cpu file (%s)", v->name,
             rc == FHD_OK ? "" : Lg->err);
    compare_floats("parameters after cpu -> cuda", v, Lc, Lg, FHD_STATE_PARAMS, P2, 0.0);
    uint32_t *ic = (uint32_t *)malloc(4 * B), *ig = (uint32_t *)malloc(4 * B);
    uint64_t *q = (uint64_t *)malloc(8 * (size_t)N);
    int same = 1;
    for (int k = 0; k < 5; k++) {
        same &=
            fhd__learner_train(Lc, 1, NULL) == FHD_OK && fhd__learner_train(Lg, 1, NULL) == FHD_OK;
        ct_read(Lc, FHD_STATE_LAST_INDICES, 0, B, ic);
        ct_read(Lg, FHD_STATE_LAST_INDICES, 0, B, ig);
        same &= memcmp(ic, ig, 4 * B) == 0;
        if (Lc->cfg.replay == FHD_REPLAY_PRIORITIZED) { /* the same batches from here on */
            ct_read(Lc, FHD_STATE_REPLAY_PRIORITY, 0, N, q);
            Lg->ops->write(Lg->be, FHD_STATE_REPLAY_PRIORITY, 0, N, q);
        }
    }
    ct_check(same, "%s: the resumed CUDA learner samples the CPU's batches", v->name);
    compare_floats("parameters 5 updates after the load", v, Lc, Lg, FHD_STATE_PARAMS, P2,
                   v->tol_param);
    rc = fhd__checkpoint_save(Lg, pb, FHD_CKPT_INCLUDE_REPLAY);
    ct_check(rc == FHD_OK, "%s: cuda checkpoint_save (%s)", v->name, rc == FHD_OK ? "" : Lg->err);
    fhd_learner *Lc2 = ct_create(jc, NULL);
    rc = Lc2 ? fhd__checkpoint_load(Lc2, pb, FHD_CKPT_INCLUDE_REPLAY) : FHD_ERR_INTERNAL;
    ct_check(rc == FHD_OK, "%s: cpu checkpoint_load of the cuda file (%s)", v->name,
             rc == FHD_OK || !Lc2 ? "" : Lc2->err);
    if (Lc2)
        compare_floats("parameters after cuda -> cpu", v, Lg, Lc2, FHD_STATE_PARAMS, P2, 0.0);
    remove(pa);
    remove(pb);
    free(ic);
    free(ig);
    free(q);
    fhd__learner_destroy(Lg);
    if (Lc2)
        fhd__learner_destroy(Lc2);
}

int main(void) {
    ct_require_gpu();
    /* FHD_CONV_SHORT (compute-sanitizer): the first configuration, fewer updates */
    const size_t nv = getenv("FHD_CONV_SHORT") ? 1 : sizeof variants / sizeof variants[0];
    for (size_t i = 0; i < nv; i++) {
        const variant *v = &variants[i];
        char jc[2048], jg[2048];
        make_json(jc, sizeof jc, v, 0);
        make_json(jg, sizeof jg, v, 1);
        fhd_learner *Lc = ct_create(jc, NULL);
        if (!Lc) {
            ct_check(0, "%s: cpu learner", v->name);
            continue;
        }
        fhd_learner *Lg = ct_create_cuda(jg);
        printf("-- %s (%s) on %s\n", v->name, v->precision, Lg->ops->device_name(Lg->be));
        compare_floats("initial parameters", v, Lc, Lg, FHD_STATE_PARAMS, 2 * Lc->lo.num_params,
                       0.0);
        check_act(v, Lc, Lg);
        check_train_batch(v, Lc, Lg);
        fhd__learner_destroy(Lc);
        fhd__learner_destroy(Lg);
        Lc = ct_create(jc, NULL);
        Lg = ct_create_cuda(jg);
        check_train(v, Lc, Lg);
        fhd__learner_destroy(Lg);
        check_checkpoint(v, Lc, jc, jg);
        fhd__learner_destroy(Lc);
    }
    return ct_finish();
}
