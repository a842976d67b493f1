/* cpu_backend.c - the CPU reference backend: creation, replay, sampling, state access and the
 * ops table. The network and the update are in cpu_net.c (docs/design.md section 4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <pmmintrin.h>
#endif

#include "cpu_internal.h"
#include "cpu_memory.h"
#include "philox.h"
#include "priority.h"


static int fail(fhd__backend *b, int32_t code, const char *msg) {
    snprintf(b->err, sizeof b->err, "%s", msg);
    return code;
}

static void *xalloc(size_t n, size_t elem, int *ok) {
    if (!*ok)
        return NULL;
    void *p = calloc(n ? n : 1, elem);
    if (!p)
        *ok = 0;
    return p;
}

static void cpu_destroy(fhd__backend *b) {
    if (!b)
        return;
    free(b->params);
    free(b->grad);
    free(b->grad_next);
    free(b->sn_prev);
    free(b->adam_m);
    free(b->adam_v);
    free(b->sn);
    free(b->mask);
    free(b->wsn);
    free(b->w16);
    for (uint32_t l = 0; l <= FHD_MAX_HIDDEN_LAYERS; l++)
        free(b->h[l]);
    free(b->fa);
    free(b->fb);
    free(b->q);
    free(b->qt);
    free(b->qsel);
    free(b->dq);
    free(b->da);
    free(b->db);
    free(b->y);
    free(b->td);
    free(b->sn_tmp);
    free(b->xin);
    free(b->xin2);
    for (uint32_t c = 0; c < FHD_MAX_CONV_LAYERS; c++)
        free(b->ca[c]);
    free(b->cpa);
    free(b->cpb);
    free(b->cda);
    free(b->cdb);
    free(b->col);
    free(b->dcol);
    free(b->g_obs);
    free(b->g_ret);
    free(b->g_disc);
    free(b->g_w);
    free(b->g_act);
    free(b->idx);
    free(b->prio);
    free(b->rand64);
    free(b->r_obs);
    free(b->r_next);
    fhd__cpu_frames_free(b);
    free(b->r_ret);
    free(b->r_disc);
    free(b->r_act);
    fhd__sumtree_free(&b->tree);
    free(b);
}

static int32_t cpu_create(const fhd__config *cfg, const fhd__layout *lo, const float *params,
                          const float *sn, fhd__backend **out, char *msg, size_t msg_cap) {
    *out = NULL;
    fhd__backend *b = (fhd__backend *)calloc(1, sizeof(*b));
    if (!b) {
        snprintf(msg, msg_cap, "cpu backend: out of memory allocating the learner");
        return FHD_ERR_OUT_OF_MEMORY;
    }
    b->cfg = *cfg;
    b->lo = *lo;
    b->P = lo->num_params;
    b->B = cfg->batch_size;
    b->capacity = cfg->replay_capacity;
    const uint32_t B = b->B, S = lo->S, D = lo->D, KT = lo->KT, W = lo->max_width;
    const uint64_t P = b->P, N = b->capacity;
    int ok = 1;
    b->params = (float *)xalloc(2 * P, sizeof(float), &ok);
    /* + 1: the loss rides along in the all-reduce of distributed training (cpu_dist.c) */
    b->grad = (float *)xalloc(P + 1, sizeof(float), &ok);
    b->grad_next = (float *)xalloc(P + 1, sizeof(float), &ok);
    b->sn_prev = (float *)xalloc(lo->sn_size, sizeof(float), &ok);
    b->adam_m = (float *)xalloc(P, sizeof(float), &ok);
    b->adam_v = (float *)xalloc(P, sizeof(float), &ok);
    b->sn = (float *)xalloc(2 * lo->sn_size, sizeof(float), &ok);
    if (lo->num_masks)
        b->mask = (float *)xalloc(P, sizeof(float), &ok);
    uint64_t wsn = 0;
    uint32_t sn_tmp = W;
    for (uint32_t c = 0; c < lo->NC; c++) {
        const fhd__conv_layer *cv = &lo->conv[c];
        if (cv->sn)
            wsn += (uint64_t)cv->cout * cv->ckk;
        sn_tmp = cv->ckk > sn_tmp ? cv->ckk : sn_tmp;
        b->ca[c] = (float *)xalloc((size_t)2 * B * cv->cout * cv->hw, sizeof(float), &ok);
    }
    if (lo->NC) {
        const size_t A = lo->conv_max_act, C = lo->conv_max_col;
        b->cpa = (float *)xalloc((size_t)B * A, sizeof(float), &ok);
        b->cpb = (float *)xalloc((size_t)B * A, sizeof(float), &ok);
        b->cda = (float *)xalloc((size_t)B * A, sizeof(float), &ok);
        b->cdb = (float *)xalloc((size_t)B * A, sizeof(float), &ok);
        b->col = (float *)xalloc(C, sizeof(float), &ok);
        b->dcol = (float *)xalloc(C, sizeof(float), &ok);
    }
    for (uint32_t l = 0; l < lo->L; l++)
        if (lo->layers[l].sn)
            wsn += (uint64_t)lo->layers[l].out * lo->layers[l].in;
    b->wsn_half = wsn;
    b->wsn = (float *)xalloc(2 * wsn, sizeof(float), &ok);
    for (uint32_t l = 0; l <= lo->L; l++)
        b->h[l] = (float *)xalloc((size_t)2 * B * lo->layers[l].out, sizeof(float), &ok);
    b->fa = (float *)xalloc((size_t)B * W, sizeof(float), &ok);
    b->fb = (float *)xalloc((size_t)B * W, sizeof(float), &ok);
    b->q = (float *)xalloc((size_t)2 * B * KT, sizeof(float), &ok);
    b->qt = (float *)xalloc((size_t)B * KT, sizeof(float), &ok);
    b->qsel = (float *)xalloc((size_t)B * KT, sizeof(float), &ok);
    b->dq = (float *)xalloc((size_t)B * KT, sizeof(float), &ok);
    b->da = (float *)xalloc((size_t)B * W, sizeof(float), &ok);
    b->db = (float *)xalloc((size_t)B * W, sizeof(float), &ok);
    b->y = (float *)xalloc(B, sizeof(float), &ok);
    b->td = (float *)xalloc((size_t)B * D, sizeof(float), &ok);
    b->sn_tmp = (float *)xalloc(sn_tmp, sizeof(float), &ok);
    b->ob = fhd__config_obs_bytes(cfg);
    b->scale = fhd__config_obs_scale(cfg);
    const int bf16 = cfg->matmul_precision == FHD_PREC_BF16;
    if (bf16)
        b->w16 = (float *)xalloc(2 * P, sizeof(float), &ok);
    if (lo->NC == 0 && (cfg->obs_dtype == FHD_OBS_UINT8 || b->scale != 1.0f || bf16)) {
        b->xin = (float *)xalloc((size_t)2 * B * S, sizeof(float), &ok);
        b->xin2 = (float *)xalloc((size_t)B * S, sizeof(float), &ok);
    }
    b->g_obs = (unsigned char *)xalloc((size_t)2 * B, b->ob, &ok);
    b->g_next = b->g_obs + (size_t)B * b->ob;
    b->g_ret = (float *)xalloc(B, sizeof(float), &ok);
    b->g_disc = (float *)xalloc(B, sizeof(float), &ok);
    b->g_w = (float *)xalloc(B, sizeof(float), &ok);
    b->g_act = (int32_t *)xalloc((size_t)B * D, sizeof(int32_t), &ok);
    b->idx = (uint32_t *)xalloc(B, sizeof(uint32_t), &ok);
    b->prio = (uint64_t *)xalloc(B, sizeof(uint64_t), &ok);
    b->rand64 = (uint64_t *)xalloc(B, sizeof(uint64_t), &ok);
    if (cfg->num_obs_shape > 0) { /* image observations: each frame once */
        fhd__cpu_frames_alloc(b, &ok);
    } else {
        b->r_obs = (unsigned char *)xalloc(N, b->ob, &ok);
        b->r_next = (unsigned char *)xalloc(N, b->ob, &ok);
    }
    b->r_ret = (float *)xalloc(N, sizeof(float), &ok);
    b->r_disc = (float *)xalloc(N, sizeof(float), &ok);
    b->r_act = (int32_t *)xalloc(N * D, sizeof(int32_t), &ok);
    if (ok && cfg->replay == FHD_REPLAY_PRIORITIZED && fhd__sumtree_init(&b->tree, b->capacity))
        ok = 0;
    if (!ok) {
        fhd__cpu_oom_message(cfg, lo, msg, msg_cap);
        cpu_destroy(b);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    memcpy(b->params, params, sizeof(float) * 2 * P);
    for (uint64_t i = 0; b->mask && i < P; i++) /* nothing pruned yet */
        b->mask[i] = 1.0f;
    if (lo->sn_size)
        memcpy(b->sn, sn, sizeof(float) * 2 * lo->sn_size);
    b->max_q = fhd__prio_quantize(1.0);
    *out = b;
    return FHD_OK;
}

static const char *cpu_error(const fhd__backend *b) { return b ? b->err : ""; }

static const char *cpu_device_name(const fhd__backend *b) { return "cpu (OpenBLAS)"; }

/* ---- floating-point mode ----------------------------------------------------------------
 * Denormal floats (tiny gradients, Adam's second moment decaying for unused weights) cost a
 * microcode assist per operation on x86 and made Adam alone a third of a small update.
 * Compute with flush-to-zero and denormals-are-zero, as ML frameworks do, and restore the
 * host thread's mode on the way out: the library never leaves the caller's FP state changed.
 * A value below 2^-126 (1.2e-38) is treated as 0; results otherwise do not change. */
typedef struct {
    unsigned int csr;
} fpmode;

static fpmode fpmode_enter(void) {
    fpmode m = {0};
#if defined(__SSE2__)
    m.csr = _mm_getcsr();
    _mm_setcsr(m.csr | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
    return m;
}

static void fpmode_leave(fpmode m) {
#if defined(__SSE2__)
    _mm_setcsr(m.csr);
#else
    (void)m;
#endif
}

/* ---- ABI-facing operations -------------------------------------------------------------- */

static int32_t q_values_rows(fhd__backend *b, uint32_t n, const unsigned char *obs, float *q,
                             int32_t *greedy) {
    const fhd__layout *lo = &b->lo;
    fpmode fm = fpmode_enter();
    if (!b->eval_sn_fresh) { /* W_sn of the current weights, stored u, v; bf16 weights */
        if (lo->num_sn)
            fhd__cpu_sn_prepare(b, 0, 1);
        if (b->w16)
            fhd__cpu_bf16_shadow(b, 1);
        b->eval_sn_fresh = 1;
    }
    for (uint32_t r0 = 0; r0 < n; r0 += b->B) {
        uint32_t m = n - r0 < b->B ? n - r0 : b->B;
        fhd__cpu_net_forward(b, 0, obs + (size_t)r0 * b->ob, m, b->qsel, 0);
        if (q)
            memcpy(q + (size_t)r0 * lo->KT, b->qsel, sizeof(float) * m * lo->KT);
        if (greedy)
            fhd__argmax_branches(greedy + (size_t)r0 * lo->D, b->qsel, lo, m);
    }
    fpmode_leave(fm);
    return FHD_OK;
}

static int32_t cpu_q_values(fhd__backend *b, uint32_t n, const float *obs, float *q,
                            int32_t *greedy) {
    return q_values_rows(b, n, (const unsigned char *)obs, q, greedy);
}

static int32_t cpu_q_values_u8(fhd__backend *b, uint32_t n, const uint8_t *obs, float *q,
                               int32_t *greedy) {
    return q_values_rows(b, n, obs, q, greedy);
}

static int32_t replay_add_rows(fhd__backend *b, uint32_t n, const unsigned char *obs,
                               const int32_t *actions, const float *returns,
                               const unsigned char *next_obs, const float *disc) {
    if (b->frames)
        return fail(b, FHD_ERR_INTERNAL, "replay_add: image observations go through frame_add");
    const uint32_t D = b->lo.D;
    const size_t ob = (size_t)b->ob;
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t s = b->pos;
        memcpy(b->r_obs + s * ob, obs + (size_t)i * ob, ob);
        memcpy(b->r_next + s * ob, next_obs + (size_t)i * ob, ob);
        memcpy(b->r_act + s * D, actions + (size_t)i * D, sizeof(int32_t) * D);
        b->r_ret[s] = returns[i];
        b->r_disc[s] = disc[i];
        if (b->cfg.replay == FHD_REPLAY_PRIORITIZED)
            fhd__sumtree_set(&b->tree, (uint32_t)s, b->max_q);
        b->pos = (s + 1) % b->capacity;
        if (b->size < b->capacity)
            b->size++;
    }
    return FHD_OK;
}

static int32_t cpu_replay_add(fhd__backend *b, uint32_t n, const float *obs,
                              const int32_t *actions, const float *returns,
                              const float *next_obs, const float *disc) {
    return replay_add_rows(b, n, (const unsigned char *)obs, actions, returns,
                           (const unsigned char *)next_obs, disc);
}

static int32_t cpu_replay_add_u8(fhd__backend *b, uint32_t n, const uint8_t *obs,
                                 const int32_t *actions, const float *returns,
                                 const uint8_t *next_obs, const float *disc) {
    return replay_add_rows(b, n, obs, actions, returns, next_obs, disc);
}

static float beta_at(const fhd__config *c, uint64_t u) {
    double f = (double)u / (double)c->per_beta_steps;
    if (f > 1.0)
        f = 1.0;
    return (float)(c->per_beta0 + (1.0 - c->per_beta0) * f);
}

/* Draw the batch of update `u` into the g_* buffers. Distributed (docs/design.md section 10):
 * rank r's batch is draws [r B, (r + 1) B) of one draw of world * B from its own replay (RNG
 * counters and, prioritized, strata), so W ranks holding equal replays draw together what one
 * rank draws at batch W B; the IS weights are normalised within each rank's share. */
static float sample_batch(fhd__backend *b, uint64_t u) {
    const fhd__config *c = &b->cfg;
    const uint32_t B = b->B, D = b->lo.D;
    const uint32_t first = b->comm ? b->comm->rank * B : 0;
    const uint32_t draws = b->comm ? b->comm->world * B : B;
    const size_t ob = (size_t)b->ob;
    for (uint32_t j = 0; j < B; j++) {
        fhd__u32x4 r = fhd__rng_draw(c->seed, FHD_RNG_STREAM_SAMPLE, u, first + j);
        b->rand64[j] = ((uint64_t)r.v[0] << 32) | r.v[1];
    }
    float beta = 0.0f;
    if (c->replay == FHD_REPLAY_PRIORITIZED) {
        fhd__sumtree_sample_strata(&b->tree, B, draws, first, b->rand64, b->idx);
        beta = beta_at(c, u);
        /* w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (p_min / p_i)^beta */
        uint64_t qmin = UINT64_MAX;
        for (uint32_t j = 0; j < B; j++) {
            uint64_t q = fhd__sumtree_get(&b->tree, b->idx[j]);
            qmin = q < qmin ? q : qmin;
        }
        for (uint32_t j = 0; j < B; j++) {
            double ratio = (double)qmin / (double)fhd__sumtree_get(&b->tree, b->idx[j]);
            b->g_w[j] = (float)fhd__det_pow(ratio, (double)beta);
        }
    } else {
        for (uint32_t j = 0; j < B; j++) {
            const uint64_t r = fhd__rng_below64(b->rand64[j], b->size);
            b->idx[j] = (uint32_t)(b->frames ? fhd__cpu_frames_slot(b, r) : r);
            b->g_w[j] = 1.0f;
        }
    }
    for (uint32_t j = 0; j < B; j++) {
        const uint64_t s = b->idx[j];
        if (b->frames) {
            fhd__cpu_frames_obs(b, s, 0, b->g_obs + (size_t)j * ob);
            fhd__cpu_frames_obs(b, s, 1, b->g_next + (size_t)j * ob);
        } else {
            memcpy(b->g_obs + (size_t)j * ob, b->r_obs + s * ob, ob);
            memcpy(b->g_next + (size_t)j * ob, b->r_next + s * ob, ob);
        }
        memcpy(b->g_act + (size_t)j * D, b->r_act + s * D, sizeof(int32_t) * D);
        b->g_ret[j] = b->r_ret[s];
        b->g_disc[j] = b->r_disc[s];
    }
    return beta;
}

static int32_t cpu_train(fhd__backend *b, uint32_t num_updates, fhd_train_stats *stats) {
    const fhd__config *c = &b->cfg;
    if (b->size < b->B)
        return fail(b, FHD_ERR_NOT_READY, "train: the replay holds fewer transitions than batch_size");
    fpmode fm = fpmode_enter();
    for (uint32_t k = 0; k < num_updates; k++) {
        float beta = sample_batch(b, b->updates + b->skipped);
        const int u8 = c->obs_dtype == FHD_OBS_UINT8;
        fhd__host_batch hb = {b->B,
                              u8 ? NULL : (const float *)(void *)b->g_obs,
                              b->g_act,
                              b->g_ret,
                              u8 ? NULL : (const float *)(void *)b->g_next,
                              b->g_disc,
                              b->g_w,
                              NULL,
                              NULL,
                              u8 ? b->g_obs : NULL,
                              u8 ? b->g_next : NULL};
        const int32_t rc = fhd__cpu_update(b, &hb, stats, beta);
        if (rc == FHD_ERR_DIVERGED) {
            fpmode_leave(fm);
            return FHD_ERR_DIVERGED;
        }
        if (rc == FHD_OK && c->replay == FHD_REPLAY_PRIORITIZED) { /* not for a skipped one */
            const uint32_t D = b->lo.D;
            for (uint32_t j = 0; j < b->B; j++) {
                float a = 0.0f;
                for (uint32_t d = 0; d < D; d++) {
                    float t = b->td[(size_t)j * D + d];
                    a += t < 0 ? -t : t;
                }
                b->prio[j] = fhd__prio_from_td(a / (float)D, (float)c->per_alpha, (float)c->per_eps);
                if (b->prio[j] > b->max_q)
                    b->max_q = b->prio[j];
            }
            fhd__sumtree_set_batch(&b->tree, b->B, b->idx, b->prio);
        }
    }
    fpmode_leave(fm);
    return FHD_OK;
}

static int32_t cpu_train_batch(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st) {
    fpmode fm = fpmode_enter();
    int32_t rc = fhd__cpu_update(b, hb, st, 0.0f);
    fpmode_leave(fm);
    return rc == FHD__CPU_SKIPPED ? FHD_OK : rc;
}

/* ---- state access ----------------------------------------------------------------------- */

static int32_t state_ptr(fhd__backend *b, int kind, uint64_t offset, uint64_t count, int writing,
                         void **p) {
    uint64_t n;
    void *base;
    const uint64_t N = b->capacity;
    switch (kind) {
    case FHD_STATE_PARAMS: base = b->params; n = 2 * b->P; break;
    case FHD_STATE_GRAD: base = b->grad; n = b->P; break;
    case FHD_STATE_ADAM_M: base = b->adam_m; n = b->P; break;
    case FHD_STATE_ADAM_V: base = b->adam_v; n = b->P; break;
    case FHD_STATE_SN: base = b->sn; n = 2 * b->lo.sn_size; break;
    case FHD_STATE_MASK:
        if (!b->mask)
            return fail(b, FHD_ERR_NOT_FOUND, "no pruning masks (prune_sparsity is 0)");
        base = b->mask;
        n = b->P;
        break;
    case FHD_STATE_REPLAY_OBS:
    case FHD_STATE_REPLAY_NEXT_OBS:
    case FHD_STATE_REPLAY_OBS_U8:
    case FHD_STATE_REPLAY_NEXT_OBS_U8:
        if (b->frames)
            return fail(b, FHD_ERR_NOT_FOUND, "the replay stores frames (image observations)");
        if ((b->cfg.obs_dtype == FHD_OBS_UINT8) !=
            (kind == FHD_STATE_REPLAY_OBS_U8 || kind == FHD_STATE_REPLAY_NEXT_OBS_U8))
            return fail(b, FHD_ERR_NOT_FOUND,
                                 "the replay stores observations of the other dtype");
        base = (kind == FHD_STATE_REPLAY_OBS || kind == FHD_STATE_REPLAY_OBS_U8) ? b->r_obs
                                                                                 : b->r_next;
        n = N * b->lo.S;
        break;
    case FHD_STATE_REPLAY_ACTIONS: base = b->r_act; n = N * b->lo.D; break;
    case FHD_STATE_REPLAY_RETURNS: base = b->r_ret; n = N; break;
    case FHD_STATE_REPLAY_DISC: base = b->r_disc; n = N; break;
    case FHD_STATE_REPLAY_PRIORITY:
        if (b->cfg.replay != FHD_REPLAY_PRIORITIZED)
            return fail(b, FHD_ERR_NOT_FOUND, "the replay is uniform: no priorities");
        base = b->tree.nodes + b->tree.leaves;
        n = N;
        break;
    case FHD_STATE_LAST_INDICES: base = b->idx; n = b->B; break;
    case FHD_STATE_LAST_WEIGHTS: base = b->g_w; n = b->B; break;
    case FHD_STATE_FRAMES:
    case FHD_STATE_FRAMES_U8:
    case FHD_STATE_FRAME_REFS:
    case FHD_STATE_REPLAY_OBS_ID:
    case FHD_STATE_REPLAY_NEXT_ID:
    case FHD_STATE_FRAME_COUNTERS:
        base = b->frames ? fhd__cpu_frames_state(b, kind, &n) : NULL;
        if (!base)
            return fail(b, FHD_ERR_NOT_FOUND, "no frame replay of this kind and dtype");
        break;
    default: return fail(b, FHD_ERR_NOT_FOUND, "unknown state kind");
    }
    if (writing && (kind == FHD_STATE_LAST_INDICES || kind == FHD_STATE_LAST_WEIGHTS))
        return fail(b, FHD_ERR_INVALID_ARGUMENT, "state kind is read-only");
    if (offset > n || count > n - offset)
        return fail(b, FHD_ERR_SIZE_MISMATCH, "state range out of bounds");
    *p = (char *)base + offset * fhd__state_elem_size(kind);
    return FHD_OK;
}

static int32_t cpu_read(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void *dst) {
    void *p;
    int32_t rc = state_ptr(b, kind, offset, count, 0, &p);
    if (rc == FHD_OK)
        memcpy(dst, p, count * fhd__state_elem_size(kind));
    return rc;
}

static int32_t cpu_write(fhd__backend *b, int kind, uint64_t offset, uint64_t count,
                         const void *src) {
    void *p;
    int32_t rc = state_ptr(b, kind, offset, count, 1, &p);
    if (rc != FHD_OK)
        return rc;
    memcpy(p, src, count * fhd__state_elem_size(kind));
    b->eval_sn_fresh = 0;
    if (b->mask && (kind == FHD_STATE_MASK || (kind == FHD_STATE_PARAMS && offset < b->P)))
        fhd__cpu_prune_apply(b, b->params); /* online weights stay 0 where pruned */
    if (kind == FHD_STATE_REPLAY_PRIORITY)
        fhd__sumtree_rebuild(&b->tree);
    if (kind == FHD_STATE_FRAME_COUNTERS)
        fhd__cpu_frames_sync(b);
    return FHD_OK;
}

static int32_t cpu_get_scalars(fhd__backend *b, fhd__backend_scalars *o) {
    o->updates = b->updates;
    o->replay_pos = b->pos;
    o->replay_size = b->size;
    o->max_priority_q = b->max_q;
    o->skipped = b->skipped;
    return FHD_OK;
}

static int32_t cpu_set_scalars(fhd__backend *b, const fhd__backend_scalars *in) {
    if (in->replay_pos >= b->capacity || in->replay_size > b->capacity || in->max_priority_q == 0)
        return fail(b, FHD_ERR_INVALID_ARGUMENT, "replay position/size out of range");
    b->updates = in->updates;
    b->skipped = in->skipped;
    b->last.skipped = in->skipped;
    b->pos = in->replay_pos;
    b->size = in->replay_size;
    b->max_q = in->max_priority_q;
    if (b->frames && in->replay_size == 0) { /* an empty replay: no frames either */
        memset(b->fc, 0, sizeof b->fc);
        for (uint64_t i = 0; i < b->M; i++)
            b->f_ref[i] = FHD_FRAME_NONE;
        b->pos = 0;
    }
    return FHD_OK;
}

static int32_t cpu_latest_stats(fhd__backend *b, fhd__update_stats *out) {
    *out = b->last;
    return FHD_OK;
}

static int32_t cpu_check_invariants(fhd__backend *b, char *msg, size_t cap) {
    if (b->frames) {
        if (b->cfg.replay == FHD_REPLAY_PRIORITIZED && fhd__sumtree_check(&b->tree) != 0) {
            snprintf(msg, cap, "sum tree: an internal node differs from the sum of its children");
            return FHD_ERR_INTERNAL;
        }
        return fhd__cpu_frames_check(b, msg, cap);
    }
    if (b->pos >= b->capacity || b->size > b->capacity ||
        (b->size < b->capacity && b->pos != b->size)) {
        snprintf(msg, cap, "ring: pos %llu size %llu capacity %u", (unsigned long long)b->pos,
                 (unsigned long long)b->size, b->capacity);
        return FHD_ERR_INTERNAL;
    }
    if (b->cfg.replay != FHD_REPLAY_PRIORITIZED)
        return FHD_OK;
    if (fhd__sumtree_check(&b->tree) != 0) {
        snprintf(msg, cap, "sum tree: an internal node differs from the sum of its children");
        return FHD_ERR_INTERNAL;
    }
    for (uint32_t i = 0; i < b->capacity; i++) {
        uint64_t q = fhd__sumtree_get(&b->tree, i);
        if ((i < b->size) != (q != 0) || q > b->max_q) {
            snprintf(msg, cap, "sum tree: slot %u holds %llu (size %llu, running max %llu)", i,
                     (unsigned long long)q, (unsigned long long)b->size,
                     (unsigned long long)b->max_q);
            return FHD_ERR_INTERNAL;
        }
    }
    return FHD_OK;
}

const fhd__backend_ops fhd__cpu_backend_ops = {
    FHD_BACKEND_OPS_VERSION,
    "cpu",
    cpu_create,
    cpu_destroy,
    cpu_error,
    cpu_device_name,
    cpu_q_values,
    cpu_replay_add,
    cpu_train,
    cpu_train_batch,
    cpu_read,
    cpu_write,
    cpu_get_scalars,
    cpu_set_scalars,
    cpu_latest_stats,
    cpu_check_invariants,
    NULL, /* finish: the CPU backend is synchronous */
    fhd__cpu_describe, /* distributed: the ranks and the checksum (cpu_dist.c) */
    cpu_q_values_u8,
    cpu_replay_add_u8,
    fhd__cpu_frame_add,
    fhd__cpu_replay_add_ids,
    fhd__cpu_set_comm,
    NULL, /* q_values_frames: the host's rows are where the frames are */
};
