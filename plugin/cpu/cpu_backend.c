/* cpu_backend.c - the CPU reference backend: state, replay, and the update (DESIGN.md 4).
 *
 * One update on a batch (B rows):
 *   1. spectral norm: one power iteration per normalised online layer (u, v updated), sigma;
 *      target layers use their stored u, v (no iteration). W_sn = W / sigma.
 *   2. forwards: online(s) keeping activations; target(s'); online(s') for double DQN.
 *   3. y = R + disc * mean_d Q'_d(s', a*_d); loss and dL/dQ; backward into the flat gradient.
 *   4. global-norm clipping, Adam/AdamW, updates += 1, target update every C updates.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <pmmintrin.h>
#endif

#include "backend.h"
#include "cpu_ops.h"
#include "philox.h"
#include "priority.h"
#include "sumtree.h"

struct fhd__backend {
    fhd__config cfg;
    fhd__layout lo;
    uint64_t P;
    float *params; /* (2P): online [0, P), target [P, 2P) */
    float *grad, *adam_m, *adam_v; /* (P) each */
    float *sn;     /* (2 * sn_size): online u/v, then target u/v */
    float *wsn;    /* (2 * sum of normalised W sizes): W / sigma for online, then target */
    uint64_t wsn_half;
    float sigma[FHD_MAX_HIDDEN_LAYERS]; /* online sigma of this update */
    int eval_sn_fresh;                  /* online W_sn matches the current W and u, v for act */
    uint64_t updates;

    /* update scratch, B = batch_size rows */
    uint32_t B;
    float *h[FHD_MAX_HIDDEN_LAYERS + 1]; /* online(s) activations: h_l (B, H_l), head (B, HO) */
    float *fa, *fb;                      /* (B, max_width) ping-pong for other forwards */
    float *q, *qt, *qsel, *dq;           /* (B, KT) */
    float *da, *db;                      /* (B, max_width) backward ping-pong */
    float *y, *td, *sn_tmp;              /* (B), (B, D), (max_width) */
    /* network inputs obs_scale * obs when they are not the rows themselves (uint8, or a scale
     * other than 1): xin (2B, S) for online(s) [and online(s')], xin2 (B, S) for the rest */
    float *xin, *xin2;
    float scale;
    /* gathered batch: observation rows of ob bytes (the learner's dtype) */
    uint64_t ob;
    unsigned char *g_obs, *g_next;           /* (B, S) each, g_next = g_obs + B rows */
    float *g_ret, *g_disc, *g_w;             /* (B), (B), (B) */
    int32_t *g_act;                               /* (B, D) */
    uint32_t *idx;                                /* (B) */
    uint64_t *prio, *rand64;                      /* (B) */

    /* replay ring */
    uint32_t capacity;
    unsigned char *r_obs, *r_next; /* (N, S) each, the learner's dtype */
    float *r_ret, *r_disc;         /* (N), (N) */
    int32_t *r_act;                          /* (N, D) */
    fhd__sumtree tree;                       /* prioritized only */
    uint64_t pos, size, max_q;

    fhd__update_stats last;
    char err[512];
};

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
    free(b->adam_m);
    free(b->adam_v);
    free(b->sn);
    free(b->wsn);
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
    b->grad = (float *)xalloc(P, sizeof(float), &ok);
    b->adam_m = (float *)xalloc(P, sizeof(float), &ok);
    b->adam_v = (float *)xalloc(P, sizeof(float), &ok);
    b->sn = (float *)xalloc(2 * lo->sn_size, sizeof(float), &ok);
    uint64_t wsn = 0;
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
    b->sn_tmp = (float *)xalloc(W, sizeof(float), &ok);
    b->ob = fhd__config_obs_bytes(cfg);
    b->scale = fhd__config_obs_scale(cfg);
    if (cfg->obs_dtype == FHD_OBS_UINT8 || b->scale != 1.0f) {
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
    b->r_obs = (unsigned char *)xalloc(N, b->ob, &ok);
    b->r_next = (unsigned char *)xalloc(N, b->ob, &ok);
    b->r_ret = (float *)xalloc(N, sizeof(float), &ok);
    b->r_disc = (float *)xalloc(N, sizeof(float), &ok);
    b->r_act = (int32_t *)xalloc(N * D, sizeof(int32_t), &ok);
    if (ok && cfg->replay == FHD_REPLAY_PRIORITIZED && fhd__sumtree_init(&b->tree, b->capacity))
        ok = 0;
    if (!ok) {
        uint64_t bytes = 2 * N * b->ob + (2 * N + N * D) * 4 + 5 * P * 4;
        snprintf(msg, msg_cap,
                 "cpu backend: out of memory: replay_capacity %u x obs_dim %u (%llu bytes each) "
                 "and %llu parameters need about %.1f MiB",
                 cfg->replay_capacity, S, (unsigned long long)b->ob, (unsigned long long)P,
                 (double)bytes / 1048576.0);
        cpu_destroy(b);
        return FHD_ERR_OUT_OF_MEMORY;
    }
    memcpy(b->params, params, sizeof(float) * 2 * P);
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

/* ---- network passes --------------------------------------------------------------------- */

/* Weight pointer for layer l of network `net` (0 online, 1 target): W_sn when normalised. */
static const float *layer_weight(const fhd__backend *b, int net, uint32_t l) {
    const fhd__layer *ly = &b->lo.layers[l];
    if (!ly->sn)
        return b->params + (net ? b->P : 0) + ly->w_off;
    uint64_t off = 0;
    for (uint32_t j = 0; j < l; j++)
        if (b->lo.layers[j].sn)
            off += (uint64_t)b->lo.layers[j].out * b->lo.layers[j].in;
    return b->wsn + (net ? b->wsn_half : 0) + off;
}

/* Compute W_sn of networks [0, nets) (1: online only, 2: online and target). train: one
 * power iteration on the online vectors first. */
static void sn_prepare(fhd__backend *b, int train, int nets) {
    const fhd__layout *lo = &b->lo;
    for (uint32_t l = 0; l < lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        if (!ly->sn)
            continue;
        for (int net = 0; net < nets; net++) {
            const float *W = b->params + (net ? b->P : 0) + ly->w_off;
            float *u = b->sn + (net ? lo->sn_size : 0) + ly->u_off;
            float *v = b->sn + (net ? lo->sn_size : 0) + ly->v_off;
            float sigma = (train && net == 0)
                              ? fhd__sn_power_iteration(W, u, v, ly->out, ly->in, b->sn_tmp)
                              : fhd__sn_sigma(W, u, v, ly->out, ly->in, b->sn_tmp);
            if (net == 0)
                b->sigma[l] = sigma;
            fhd__sn_scale((float *)layer_weight(b, net, l), W, sigma,
                          (uint64_t)ly->out * ly->in);
        }
    }
}

/* Network input (n, S) = scale * rows (n observation rows of the learner's dtype): the rows
 * themselves for float32 at scale 1, else converted into dst. */
static const float *as_input(const fhd__backend *b, const void *rows, uint32_t n, float *dst) {
    const uint64_t m = (uint64_t)n * b->lo.S;
    if (b->cfg.obs_dtype == FHD_OBS_UINT8) {
        const uint8_t *u = (const uint8_t *)rows;
        for (uint64_t i = 0; i < m; i++)
            dst[i] = b->scale * (float)u[i];
        return dst;
    }
    if (b->scale == 1.0f)
        return (const float *)rows;
    for (uint64_t i = 0; i < m; i++)
        dst[i] = b->scale * ((const float *)rows)[i];
    return dst;
}

/* Forward n rows (observation rows of the learner's dtype; n <= 2B when keep, else <= B)
 * through network `net`; q (n, KT). When keep, activations stay in b->h (online(s) of the
 * update); otherwise the ping-pong buffers are used. Returns the network input (n, S) that
 * layer 0 read (the backward's x). */
static const float *net_forward(fhd__backend *b, int net, const void *rows, uint32_t n, float *q,
                                int keep) {
    const fhd__layout *lo = &b->lo;
    const float *x = as_input(b, rows, n, keep ? b->xin : b->xin2);
    const float *in = x;
    for (uint32_t l = 0; l <= lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        float *out = keep ? b->h[l] : ((l % 2) ? b->fb : b->fa);
        const float *bias = b->params + (net ? b->P : 0) + ly->b_off;
        fhd__linear_forward(out, in, layer_weight(b, net, l), bias, n, ly->in, ly->out, l < lo->L);
        in = out;
    }
    fhd__head_combine(q, in, lo, n);
    return x;
}

/* The update on the batch in the g_* buffers (or pointers in hb). td (B, D) receives the TD
 * errors before the update. */
static void update(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st, float beta) {
    const fhd__layout *lo = &b->lo;
    const fhd__config *c = &b->cfg;
    const uint32_t B = hb->B;
    const void *obs = hb->obs_u8 ? (const void *)hb->obs_u8 : (const void *)hb->obs;
    const void *next = hb->next_obs_u8 ? (const void *)hb->next_obs_u8 : (const void *)hb->next_obs;
    const float *x0; /* the network input of online(s), for layer 0's backward */
    sn_prepare(b, 1, 2);
    const float *sel = b->qt;
    if (c->double_dqn) {
        if (obs != (const void *)b->g_obs) {
            memcpy(b->g_obs, obs, b->ob * B);
            memcpy(b->g_next, next, b->ob * B);
        }
        x0 = net_forward(b, 0, b->g_obs, 2 * B, b->q, 1);
        sel = b->q + (size_t)B * lo->KT;
    } else {
        x0 = net_forward(b, 0, obs, B, b->q, 1);
    }
    net_forward(b, 1, next, B, b->qt, 0);
    fhd__td_target(b->y, hb->rewards, hb->disc, b->qt, sel, lo, B);
    fhd__loss_params lp = {c->loss == FHD_LOSS_HUBER, (float)c->huber_delta, (float)c->cql_alpha};
    float td_abs, q_mean;
    float loss = fhd__td_loss(b->dq, b->td, b->q, hb->actions, b->y, hb->weights, lo, B, &lp,
                              &td_abs, &q_mean);
    /* backward: head, then torso layers from the top */
    float *dy = b->da, *dx = b->db;
    fhd__head_combine_backward(dy, b->dq, lo, B);
    for (int l = (int)lo->L; l >= 0; l--) {
        const fhd__layer *ly = &lo->layers[l];
        const float *x = l == 0 ? x0 : b->h[l - 1];
        if (l < (int)lo->L)
            fhd__relu_backward(dy, b->h[l], (uint64_t)B * ly->out);
        fhd__linear_backward(l > 0 ? dx : NULL, b->grad + ly->w_off, b->grad + ly->b_off, dy, x,
                             layer_weight(b, 0, (uint32_t)l), B, ly->in, ly->out);
        if (ly->sn)
            fhd__sn_weight_backward(b->grad + ly->w_off, b->params + ly->w_off,
                                    b->sn + ly->u_off, b->sn + ly->v_off, b->sigma[l], ly->out,
                                    ly->in);
        float *t = dy;
        dy = dx;
        dx = t;
    }
    const float gnorm = fhd__clip_grad_norm(b->grad, b->P, (float)c->max_grad_norm);
    fhd__adam_params ap = {c->lr, c->adam_beta1, c->adam_beta2, (float)c->adam_eps,
                           c->weight_decay, c->optimizer == FHD_OPT_ADAMW};
    b->updates++;
    b->eval_sn_fresh = 0;
    fhd__adam_step(b->params, b->grad, b->adam_m, b->adam_v, b->P, b->updates, &ap);
    if (b->updates % c->target_update_interval == 0) {
        fhd__polyak(b->params + b->P, b->params, b->P, (float)c->tau);
        if (lo->sn_size) /* the target keeps the online power-iteration state */
            memcpy(b->sn + lo->sn_size, b->sn, sizeof(float) * lo->sn_size);
    }
    if (hb->td)
        memcpy(hb->td, b->td, sizeof(float) * B * lo->D);
    if (hb->y)
        memcpy(hb->y, b->y, sizeof(float) * B);
    b->last = (fhd__update_stats){b->updates, loss, td_abs, q_mean, gnorm, beta};
    if (st) {
        st->updates_done++;
        st->update_index = b->updates;
        st->loss = loss;
        st->td_abs_mean = td_abs;
        st->q_mean = q_mean;
        st->grad_norm = gnorm;
    }
}

/* ---- ABI-facing operations -------------------------------------------------------------- */

static int32_t q_values_rows(fhd__backend *b, uint32_t n, const unsigned char *obs, float *q,
                             int32_t *greedy) {
    const fhd__layout *lo = &b->lo;
    fpmode fm = fpmode_enter();
    if (lo->num_sn && !b->eval_sn_fresh) { /* W_sn of the current weights, stored u, v */
        sn_prepare(b, 0, 1);
        b->eval_sn_fresh = 1;
    }
    for (uint32_t r0 = 0; r0 < n; r0 += b->B) {
        uint32_t m = n - r0 < b->B ? n - r0 : b->B;
        net_forward(b, 0, obs + (size_t)r0 * b->ob, m, b->qsel, 0);
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

/* Draw the batch of update `u` into the g_* buffers. */
static float sample_batch(fhd__backend *b, uint64_t u) {
    const fhd__config *c = &b->cfg;
    const uint32_t B = b->B, D = b->lo.D;
    const size_t ob = (size_t)b->ob;
    for (uint32_t j = 0; j < B; j++) {
        fhd__u32x4 r = fhd__rng_draw(c->seed, FHD_RNG_STREAM_SAMPLE, u, j);
        b->rand64[j] = ((uint64_t)r.v[0] << 32) | r.v[1];
    }
    float beta = 0.0f;
    if (c->replay == FHD_REPLAY_PRIORITIZED) {
        fhd__sumtree_sample_stratified(&b->tree, B, b->rand64, b->idx);
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
            b->idx[j] = (uint32_t)fhd__rng_below64(b->rand64[j], b->size);
            b->g_w[j] = 1.0f;
        }
    }
    for (uint32_t j = 0; j < B; j++) {
        const uint64_t s = b->idx[j];
        memcpy(b->g_obs + (size_t)j * ob, b->r_obs + s * ob, ob);
        memcpy(b->g_next + (size_t)j * ob, b->r_next + s * ob, ob);
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
        float beta = sample_batch(b, b->updates);
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
        update(b, &hb, stats, beta);
        if (c->replay == FHD_REPLAY_PRIORITIZED) {
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
    update(b, hb, st, 0.0f);
    fpmode_leave(fm);
    return FHD_OK;
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
    case FHD_STATE_REPLAY_OBS:
    case FHD_STATE_REPLAY_NEXT_OBS:
    case FHD_STATE_REPLAY_OBS_U8:
    case FHD_STATE_REPLAY_NEXT_OBS_U8:
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
    if (kind == FHD_STATE_REPLAY_PRIORITY)
        fhd__sumtree_rebuild(&b->tree);
    return FHD_OK;
}

static int32_t cpu_get_scalars(fhd__backend *b, fhd__backend_scalars *o) {
    o->updates = b->updates;
    o->replay_pos = b->pos;
    o->replay_size = b->size;
    o->max_priority_q = b->max_q;
    return FHD_OK;
}

static int32_t cpu_set_scalars(fhd__backend *b, const fhd__backend_scalars *in) {
    if (in->replay_pos >= b->capacity || in->replay_size > b->capacity || in->max_priority_q == 0)
        return fail(b, FHD_ERR_INVALID_ARGUMENT, "replay position/size out of range");
    b->updates = in->updates;
    b->pos = in->replay_pos;
    b->size = in->replay_size;
    b->max_q = in->max_priority_q;
    return FHD_OK;
}

static int32_t cpu_latest_stats(fhd__backend *b, fhd__update_stats *out) {
    *out = b->last;
    return FHD_OK;
}

static int32_t cpu_check_invariants(fhd__backend *b, char *msg, size_t cap) {
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
    cpu_q_values_u8,
    cpu_replay_add_u8,
};
