/* cpu_net.c - the network on the CPU: spectral norm, forwards and the update
 * (docs/design.md section 4).
 *
 * Network: [conv_0 .. conv_{NC-1}] (ReLU each, flattened C,H,W) -> linear torso (ReLU each)
 * -> head (V and A_d, or Q_d). Shapes: B batch, S obs values, A_c = cout hw of conv c,
 * F = A_{NC-1} (the linear torso's input; S without convolutions).
 *
 * One update on a batch (B rows):
 *   1. spectral norm: one power iteration per normalised online layer (u, v updated), sigma;
 *      target layers use their stored u, v (no iteration). W_sn = W / sigma.
 *   2. forwards: online(s) keeping activations; target(s'); online(s') for double DQN.
 *   3. y = R + disc * mean_d Q'_d(s', a*_d); loss and dL/dQ; backward into the flat gradient:
 *      head, linear layers, then the conv layers (col recomputed from the kept inputs).
 *   4. pruning on: the gradient masked; global-norm clipping, Adam/AdamW, updates += 1
 *      (a pruned weight, its gradient and Adam moments are 0, so it stays 0); target update
 *      every C updates; pruning on: new masks at a pruning update (cpu_prune.c).
 * matmul_precision "bf16" (docs/design.md section 4, "GEMM precision"): at the start of each
 * update (and of act after a change) the weights are rounded into w16, which the GEMMs read
 * with alpha = 1/sigma for normalised layers; layer 0's input is rounded into xin, every hidden
 * output and every dy before its GEMMs (cpu_ops.h, fhd__gemm_mode).
 * Divergence: a non-finite loss (checked before the backward pass) or gradient norm, or a
 * norm whose square would overflow Adam's second moment, stops the update before anything is
 * applied: the gradient is computed into a spare buffer that replaces grad only on success,
 * and the power iteration's u, v are restored. The update then returns FHD_ERR_DIVERGED with
 * the learner exactly as after the previous update.
 * Training guard (config `guard`, common/guard.h): where the rule fails (non-finite values
 * included), the same nothing-applied path skips the update instead (but for the power
 * iteration's u, v, which advance as on the CUDA backend): the skip counters and the offending
 * values are recorded and the call goes on (FHD__CPU_SKIPPED).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"
#include "guard.h"

/* Offset into one network's half of wsn of normalised layer j (0..NC-1 conv, NC.. linear):
 * conv layers' W_sn come first, then the linear layers', each (out, in). */
static uint64_t wsn_offset(const fhd__layout *lo, uint32_t j) {
    uint64_t off = 0;
    for (uint32_t i = 0; i < j; i++) {
        if (i < lo->NC) {
            if (lo->conv[i].sn)
                off += (uint64_t)lo->conv[i].cout * lo->conv[i].ckk;
        } else if (lo->layers[i - lo->NC].sn) {
            off += (uint64_t)lo->layers[i - lo->NC].out * lo->layers[i - lo->NC].in;
        }
    }
    return off;
}

/* Weight pointer for linear layer l of network `net` (0 online, 1 target): W_sn when
 * normalised; with bf16 GEMMs the rounded raw W (the GEMM's alpha is 1/sigma, layer_mode). */
static const float *layer_weight(const fhd__backend *b, int net, uint32_t l) {
    const fhd__layer *ly = &b->lo.layers[l];
    if (b->w16)
        return b->w16 + (net ? b->P : 0) + ly->w_off;
    if (!ly->sn)
        return b->params + (net ? b->P : 0) + ly->w_off;
    return b->wsn + (net ? b->wsn_half : 0) + wsn_offset(&b->lo, b->lo.NC + l);
}

/* The same for conv layer c: W (cout, ckk). */
static const float *conv_weight(const fhd__backend *b, int net, uint32_t c) {
    const fhd__conv_layer *cv = &b->lo.conv[c];
    if (b->w16)
        return b->w16 + (net ? b->P : 0) + cv->w_off;
    if (!cv->sn)
        return b->params + (net ? b->P : 0) + cv->w_off;
    return b->wsn + (net ? b->wsn_half : 0) + wsn_offset(&b->lo, c);
}

/* How linear layer l (conv: conv layer c) of network `net` computes its GEMMs (cpu_ops.h). */
static fhd__gemm_mode layer_mode(const fhd__backend *b, int net, uint32_t l) {
    fhd__gemm_mode m = {b->w16 != NULL, 1.0f};
    if (m.bf16 && b->lo.layers[l].sn)
        m.alpha = 1.0f / (net ? b->sigma_tg[l] : b->sigma[l]);
    return m;
}

static fhd__gemm_mode conv_mode(const fhd__backend *b, int net, uint32_t c) {
    fhd__gemm_mode m = {b->w16 != NULL, 1.0f};
    if (m.bf16 && b->lo.conv[c].sn)
        m.alpha = 1.0f / (net ? b->sigma_conv_tg[c] : b->sigma_conv[c]);
    return m;
}

/* Bias of a layer at offset off of network net: with bf16 GEMMs a hidden layer's is rounded
 * (PyTorch autocast's), the head's stays fp32 (its output is the fp32 Q). */
static const float *layer_bias(const fhd__backend *b, int net, uint64_t off, int hidden) {
    return (b->w16 && hidden ? b->w16 : b->params) + (net ? b->P : 0) + off;
}

void fhd__cpu_bf16_shadow(fhd__backend *b, int nets) {
    fhd__bf16_round_n(b->w16, b->params, (uint64_t)nets * b->P);
}

/* sigma of W (m, k) with u (m), v (k) of network `net`; the online one iterates when train. */
static float sn_sigma(fhd__backend *b, int train, int net, const float *W, float *u, float *v,
                      uint32_t m, uint32_t k) {
    return (train && net == 0) ? fhd__sn_power_iteration(W, u, v, m, k, b->sn_tmp)
                               : fhd__sn_sigma(W, u, v, m, k, b->sn_tmp);
}

void fhd__cpu_sn_prepare(fhd__backend *b, int train, int nets) {
    const fhd__layout *lo = &b->lo;
    for (uint32_t c = 0; c < lo->NC; c++) {
        const fhd__conv_layer *cv = &lo->conv[c];
        if (!cv->sn)
            continue;
        for (int net = 0; net < nets; net++) {
            const float *W = b->params + (net ? b->P : 0) + cv->w_off;
            float *u = b->sn + (net ? lo->sn_size : 0) + cv->u_off;
            float *v = b->sn + (net ? lo->sn_size : 0) + cv->v_off;
            float sigma = sn_sigma(b, train, net, W, u, v, cv->cout, cv->ckk);
            *(net ? &b->sigma_conv_tg[c] : &b->sigma_conv[c]) = sigma;
            if (!b->w16)
                fhd__sn_scale(b->wsn + (net ? b->wsn_half : 0) + wsn_offset(lo, c), W, sigma,
                              (uint64_t)cv->cout * cv->ckk);
        }
    }
    for (uint32_t l = 0; l < lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        if (!ly->sn)
            continue;
        for (int net = 0; net < nets; net++) {
            const float *W = b->params + (net ? b->P : 0) + ly->w_off;
            float *u = b->sn + (net ? lo->sn_size : 0) + ly->u_off;
            float *v = b->sn + (net ? lo->sn_size : 0) + ly->v_off;
            float sigma = sn_sigma(b, train, net, W, u, v, ly->out, ly->in);
            *(net ? &b->sigma_tg[l] : &b->sigma[l]) = sigma;
            if (!b->w16) /* bf16 GEMMs take the raw W and 1/sigma (layer_mode) */
                fhd__sn_scale(b->wsn + (net ? b->wsn_half : 0) + wsn_offset(lo, lo->NC + l), W,
                              sigma, (uint64_t)ly->out * ly->in);
        }
    }
}

/* Network input (n, S) = scale * rows (n observation rows of the learner's dtype): the rows
 * themselves for float32 at scale 1, else converted into dst; with bf16 GEMMs rounded into dst
 * (layer 0's operand). (Without convolutions only: the first conv layer converts while it
 * packs its im2col matrix.) */
static const float *as_input(const fhd__backend *b, const void *rows, uint32_t n, float *dst) {
    const uint64_t m = (uint64_t)n * b->lo.S;
    const float *x = dst;
    if (b->cfg.obs_dtype == FHD_OBS_UINT8) {
        const uint8_t *u = (const uint8_t *)rows;
        for (uint64_t i = 0; i < m; i++)
            dst[i] = b->scale * (float)u[i];
    } else if (b->scale == 1.0f) {
        x = (const float *)rows;
    } else {
        for (uint64_t i = 0; i < m; i++)
            dst[i] = b->scale * ((const float *)rows)[i];
    }
    if (!b->w16)
        return x;
    fhd__bf16_round_n(dst, x, m);
    return dst;
}

/* The conv stack on n rows: returns the last activation (n, F). keep: into b->ca. */
static const float *conv_forward(fhd__backend *b, int net, const void *rows, uint32_t n, int keep) {
    const fhd__layout *lo = &b->lo;
    const void *in = rows;
    for (uint32_t c = 0; c < lo->NC; c++) {
        const fhd__conv_layer *cv = &lo->conv[c];
        float *out = keep ? b->ca[c] : ((c % 2) ? b->cpb : b->cpa);
        const float *bias = layer_bias(b, net, cv->b_off, 1);
        const int first = c == 0;
        const fhd__gemm_mode m = conv_mode(b, net, c);
        fhd__conv_forward(out, in, first && b->cfg.obs_dtype == FHD_OBS_UINT8,
                          first ? b->scale : 1.0f, conv_weight(b, net, c), bias, cv, n, b->col, &m);
        in = out;
    }
    return (const float *)in;
}

/* Forward n rows through network `net`; returns the linear torso's input (n, F) that layer
 * 0 read (the backward's x). */
static const float *forward(fhd__backend *b, int net, const void *rows, uint32_t n, float *q,
                            int keep) {
    const fhd__layout *lo = &b->lo;
    const float *x = lo->NC ? conv_forward(b, net, rows, n, keep)
                            : as_input(b, rows, n, keep ? b->xin : b->xin2);
    const float *in = x;
    for (uint32_t l = 0; l <= lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        float *out = keep ? b->h[l] : ((l % 2) ? b->fb : b->fa);
        const float *bias = layer_bias(b, net, ly->b_off, l < lo->L);
        const fhd__gemm_mode m = layer_mode(b, net, l);
        fhd__linear_forward(out, in, layer_weight(b, net, l), bias, n, ly->in, ly->out, l < lo->L,
                            &m);
        in = out;
    }
    fhd__head_combine(q, in, lo, n);
    return x;
}

void fhd__cpu_net_forward(fhd__backend *b, int net, const void *rows, uint32_t n, float *q,
                          int keep) {
    forward(b, net, rows, n, q, keep);
}

/* Backward through the conv stack of online(s): dy (B, F) = dL/d(last activation), in
 * b->cda; the kept activations b->ca; rows the batch's observations. */
static void conv_backward(fhd__backend *b, float *grad, const void *rows, uint32_t B) {
    const fhd__layout *lo = &b->lo;
    float *dy = b->cda, *dx = b->cdb;
    for (int c = (int)lo->NC - 1; c >= 0; c--) {
        const fhd__conv_layer *cv = &lo->conv[c];
        const int first = c == 0;
        const fhd__gemm_mode m = conv_mode(b, 0, (uint32_t)c);
        fhd__relu_backward(dy, b->ca[c], (uint64_t)B * cv->cout * cv->hw);
        fhd__conv_backward(first ? NULL : dx, grad + cv->w_off, grad + cv->b_off, dy,
                           first ? rows : (const void *)b->ca[c - 1],
                           first && b->cfg.obs_dtype == FHD_OBS_UINT8, first ? b->scale : 1.0f,
                           conv_weight(b, 0, (uint32_t)c), cv, B, b->col, b->dcol, &m);
        if (cv->sn)
            fhd__sn_weight_backward(grad + cv->w_off, b->params + cv->w_off, b->sn + cv->u_off,
                                    b->sn + cv->v_off, b->sigma_conv[c], cv->cout, cv->ckk);
        float *t = dy;
        dy = dx;
        dx = t;
    }
}

/* Why the update is not applied (FHD_ERR_DIVERGED, message in b->err): the statistic, and the
 * first non-finite TD target or Q value of the batch that explains it. */
static int32_t diverged(fhd__backend *b, const fhd__host_batch *hb, float loss, float gnorm) {
    const uint32_t B = hb->B, KT = b->lo.KT;
    char why[160] = "";
    for (uint32_t i = 0; i < B && !why[0]; i++)
        if (!isfinite(b->y[i]))
            snprintf(why, sizeof why, "; the TD target y[%u] is %g", i, (double)b->y[i]);
    for (uint64_t i = 0; i < (uint64_t)B * KT && !why[0]; i++)
        if (!isfinite(b->q[i]))
            snprintf(why, sizeof why, "; Q(s)[%llu][%llu] is %g", (unsigned long long)(i / KT),
                     (unsigned long long)(i % KT), (double)b->q[i]);
    snprintf(b->err, sizeof b->err,
             "update %llu diverged: loss %g, gradient norm %g%s%s; it was not applied (the "
             "learner is as after update %llu)",
             (unsigned long long)b->updates + 1, (double)loss, (double)gnorm,
             isfinite(gnorm) && isfinite(loss) ? " (its square overflows Adam's second moment)"
                                               : "",
             why, (unsigned long long)b->updates);
    return FHD_ERR_DIVERGED;
}

/* The guard skipped the update (nothing was applied): count it and keep its values. */
static int32_t skipped(fhd__backend *b, fhd_train_stats *st, float loss, float gnorm) {
    b->skipped++;
    b->last.skipped = b->skipped;
    b->last.skip_update = b->updates + b->skipped;
    b->last.skip_loss = loss;
    b->last.skip_grad_norm = gnorm;
    if (st) {
        st->updates_skipped++;
        st->update_index = b->updates;
    }
    return FHD__CPU_SKIPPED;
}

int32_t fhd__cpu_update(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st,
                        float beta) {
    const fhd__layout *lo = &b->lo;
    const fhd__config *c = &b->cfg;
    const uint32_t B = hb->B;
    float *const grad = b->grad_next;
    if (lo->sn_size)
        memcpy(b->sn_prev, b->sn, sizeof(float) * lo->sn_size);
    const void *obs = hb->obs_u8 ? (const void *)hb->obs_u8 : (const void *)hb->obs;
    const void *next = hb->next_obs_u8 ? (const void *)hb->next_obs_u8 : (const void *)hb->next_obs;
    const void *rows = obs; /* online(s) rows as the backward reads them */
    const float *x0;        /* the linear torso's input of online(s) (B, F) */
    fhd__cpu_sn_prepare(b, 1, 2);
    if (b->w16) /* both networks' weights as the bf16 GEMMs read them */
        fhd__cpu_bf16_shadow(b, 2);
    const float *sel = b->qt;
    if (c->double_dqn) {
        if (obs != (const void *)b->g_obs) {
            memcpy(b->g_obs, obs, b->ob * B);
            memcpy(b->g_next, next, b->ob * B);
        }
        rows = b->g_obs;
        x0 = forward(b, 0, b->g_obs, 2 * B, b->q, 1);
        sel = b->q + (size_t)B * lo->KT;
    } else {
        x0 = forward(b, 0, obs, B, b->q, 1);
    }
    forward(b, 1, next, B, b->qt, 0);
    fhd__td_target(b->y, hb->rewards, hb->disc, b->qt, sel, lo, B);
    fhd__loss_params lp = {c->loss == FHD_LOSS_HUBER, (float)c->huber_delta, (float)c->cql_alpha};
    float td_abs, q_mean;
    float loss = fhd__td_loss(b->dq, b->td, b->q, hb->actions, b->y, hb->weights, lo, B, &lp,
                              &td_abs, &q_mean);
    if (c->diversity_coef > 0) { /* the action-diversity term (cpu_diversity.c) */
        b->pend.entropy = fhd__diversity_term(b->dq, b->q, lo, B, (float)c->diversity_coef,
                                              (float)c->diversity_temperature);
        loss = (float)((double)loss - c->diversity_coef * (double)b->pend.entropy);
    }
    float gnorm = NAN;
    const fhd__guard_spec *gd = &c->guard;
    /* a finite loss over the guard's bound still gets its norm (as CUDA); distributed, a
     * non-finite loss still takes part in the all-reduce, as a NaN gradient every rank sees */
    if (!isfinite(loss) && !b->comm)
        goto refuse;
    if (isfinite(loss)) {
        /* backward: head, then linear torso layers from the top, then the convolutions */
        float *dy = b->da, *dx = b->db;
        fhd__head_combine_backward(dy, b->dq, lo, B);
        for (int l = (int)lo->L; l >= 0; l--) {
            const fhd__layer *ly = &lo->layers[l];
            const float *x = l == 0 ? x0 : b->h[l - 1];
            float *dxl = l > 0 ? dx : (lo->NC ? b->cda : NULL); /* d(conv output) (B, F) */
            const fhd__gemm_mode m = layer_mode(b, 0, (uint32_t)l);
            fhd__linear_backward(dxl, grad + ly->w_off, grad + ly->b_off, dy,
                                 l < (int)lo->L ? b->h[l] : NULL, x,
                                 layer_weight(b, 0, (uint32_t)l), B, ly->in, ly->out, &m);
            if (ly->sn)
                fhd__sn_weight_backward(grad + ly->w_off, b->params + ly->w_off, b->sn + ly->u_off,
                                        b->sn + ly->v_off, b->sigma[l], ly->out, ly->in);
            float *t = dy;
            dy = dx;
            dx = t;
        }
        if (lo->NC)
            conv_backward(b, grad, rows, B);
    } else {
        for (uint64_t i = 0; i < b->P; i++)
            grad[i] = NAN;
    }
    if (lo->num_masks) /* pruned weights get no gradient (torch.nn.utils.prune) */
        fhd__cpu_prune_apply(b, grad);
    /* distributed: the one hook; from here on every rank holds the same gradient and loss, so
     * they decide clipping, the guard and divergence alike (docs/design.md section 10) */
    if (b->comm && fhd__cpu_dist_reduce(b, grad, &loss) != FHD_OK) {
        if (lo->sn_size)
            memcpy(b->sn, b->sn_prev, sizeof(float) * lo->sn_size);
        b->eval_sn_fresh = 0;
        return FHD_ERR_INTERNAL;
    }
    if (c->detailed_metrics) /* before clipping and the update */
        fhd__cpu_detailed_metrics(b, grad, c->double_dqn ? sel : NULL, B, &b->pend);
    gnorm = fhd__clip_grad_norm(grad, b->P, (float)c->max_grad_norm);
    /* Adam squares the applied gradient: its norm squared must stay a float */
    const float applied =
        c->max_grad_norm > 0 && gnorm > (float)c->max_grad_norm ? (float)c->max_grad_norm : gnorm;
    if (gd->on ? !fhd__guard_ok(loss, gnorm, (float)c->max_grad_norm, (float)gd->max_loss,
                                (float)gd->max_grad_norm)
               : (!isfinite(gnorm) || !isfinite(applied * applied)))
        goto refuse;
    b->grad_next = b->grad; /* the new gradient becomes grad.* */
    b->grad = grad;
    fhd__adam_params ap = {c->lr,           c->adam_beta1,
                           c->adam_beta2,   (float)c->adam_eps,
                           c->weight_decay, c->optimizer == FHD_OPT_ADAMW};
    b->updates++;
    b->eval_sn_fresh = 0;
    fhd__adam_step(b->params, b->grad, b->adam_m, b->adam_v, b->P, b->updates, &ap);
    if (b->updates % c->target_update_interval == 0) {
        fhd__polyak(b->params + b->P, b->params, b->P, (float)c->tau);
        if (lo->sn_size) /* the target keeps the online power-iteration state */
            memcpy(b->sn + lo->sn_size, b->sn, sizeof(float) * lo->sn_size);
    }
    fhd__cpu_prune_after_update(b);
    if (b->comm && b->updates % c->distributed.checksum_interval == 0 &&
        fhd__cpu_dist_checksum(b) != FHD_OK)
        return FHD_ERR_INTERNAL;
    if (hb->td)
        memcpy(hb->td, b->td, sizeof(float) * B * lo->D);
    if (hb->y)
        memcpy(hb->y, b->y, sizeof(float) * B);
    b->last.update_index = b->updates;
    b->last.loss = loss;
    b->last.td_abs_mean = td_abs;
    b->last.q_mean = q_mean;
    b->last.grad_norm = gnorm;
    b->last.beta = beta;
    b->last.entropy = b->pend.entropy;
    if (c->detailed_metrics) {
        b->last.q_delta = b->pend.q_delta;
        b->last.n_layers = b->pend.n_layers;
        memcpy(b->last.layer_grad_norm, b->pend.layer_grad_norm, sizeof b->last.layer_grad_norm);
        memcpy(b->last.head_weight_norm, b->pend.head_weight_norm, sizeof b->last.head_weight_norm);
        memcpy(b->last.head_grad_norm, b->pend.head_grad_norm, sizeof b->last.head_grad_norm);
    }
    if (st) {
        st->updates_done++;
        st->update_index = b->updates;
        st->loss = loss;
        st->td_abs_mean = td_abs;
        st->q_mean = q_mean;
        st->grad_norm = gnorm;
    }
    return FHD_OK;
refuse:
    /* the power iteration's u, v; W_sn is recomputed before its next use. A guard's skip keeps
     * them, as the CUDA backend does: they depend on the unchanged, finite weights only */
    if (lo->sn_size && !gd->on)
        memcpy(b->sn, b->sn_prev, sizeof(float) * lo->sn_size);
    b->eval_sn_fresh = 0;
    if (gd->on) { /* the TD errors and targets it computed still go out, as on CUDA */
        if (hb->td)
            memcpy(hb->td, b->td, sizeof(float) * B * lo->D);
        if (hb->y)
            memcpy(hb->y, b->y, sizeof(float) * B);
        return skipped(b, st, loss, gnorm);
    }
    return diverged(b, hb, loss, gnorm);
}
