/* cuda_bf16.cpp - matmul_precision "bf16" on the CUDA backend: its buffers, the operands the
 * update's GEMMs read, and the conversions it records (docs/design.md section 5, "bf16
 * GEMMs"; the rule is section 4's "GEMM precision", plugin/cpu/cpu_ops.h the reference).
 *
 * Every GEMM reads bf16 A and B and accumulates in fp32 (cuda_gemm.cpp). Where the operands
 * come from, per update (B batch, rows_on online rows, P parameters, T the target's offset):
 *   weights   bf.w (T + P) and the padded head: with plan.w16_opt written by the optimiser
 *             beside each new value (online, and the target when it is updated), and made
 *             again from the params before the next update after any other write of them
 *             (create, FHD_STATE_PARAMS: tensor_write, a checkpoint load), which marks them
 *             stale; otherwise (pruning) one conversion of both networks at the start of each
 *             update, before the spectral norm and the fork. act's graph converts the online
 *             part itself
 *   layer 0   bf.x (2B, in_0): without a conv torso written by the update's sampling itself
 *             (plan.gather_bf16; train_batch converts mlp_in's 2B rows), the target reading its
 *             next_obs rows; below a conv torso bf.x and bf.x_tg (the target's B rows) are
 *             written in bf16 by its flatten (cuda_conv.cpp, whose own operands are bf16 too)
 *   hidden    bf.h / bf.tg_a / bf.tg_b: written by the forward GEMMs' bias+ReLU epilogue as
 *             bf16 (with the bf16 bias of bf.w), the next forward's and the dW GEMM's operand
 *   head      its output stays fp32 (h[L], head_t): the loss kernel reads it as before; its
 *             forward and dx GEMMs read the padded head (cuda_head_pad.cpp), which with bf16
 *             GEMMs is always on and rounded to bf16, so that both are GEMMs of 16-byte rows
 *             whatever HO is
 *   dz        the head's d(outputs): written in bf16 into bf.dz[L] by the loss kernel itself in
 *             its staged mode (else converted from its fp32 dz[L]);
 *             each torso layer's written in bf16 by the dx GEMM above it (plan dx16) and masked
 *             in place by fhd__cuda_relu_mask_bf16, or for a split dx by
 *             fhd__cuda_relu_backward_bf16 from the two fp32 halves (dz[l], dxp); both give the
 *             bias partials summed from the bf16 dz
 * The gradient stays fp32; the optimiser is unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "cuda_internal.h"

void fhd__cuda_bf16_init(fhd__backend *b) {
    memset(&b->bf, 0, sizeof b->bf);
    b->bf.on = b->plan.bf16;
    b->bf.stale = 1; /* nothing converted yet */
}

void fhd__cuda_bf16_plan_buffers(fhd__backend *b, struct fhd__alloc_list *p) {
    fhd__cuda_bf16 *bf = &b->bf;
    if (!bf->on)
        return;
    const fhd__layout *lo = &b->lo;
    const uint64_t B = b->B, R = b->act_rows, in0 = lo->layers[0].in, h = 2;
    uint64_t W = 1;
    for (uint32_t l = 0; l < lo->L; l++)
        W = lo->layers[l].out > W ? lo->layers[l].out : W;
    fhd__cuda_alloc_add(p, &bf->w, (b->T + b->P) * h);
    fhd__cuda_alloc_add(p, &bf->x, 2 * B * in0 * h);
    if (!b->plan.gather_bf16) /* else the target reads bf.x's next_obs rows */
        fhd__cuda_alloc_add(p, &bf->x_tg, B * in0 * h);
    for (uint32_t l = 0; l < lo->L; l++) {
        const uint64_t nets = l == 0 && b->plan.pair_fwd0 ? 2 : 1;
        fhd__cuda_alloc_add(p, &bf->h[l], nets * b->rows_on * lo->layers[l].out * h);
    }
    for (uint32_t l = 0; l <= lo->L; l++)
        fhd__cuda_alloc_add(p, &bf->dz[l], B * (l == lo->L ? b->HOs : lo->layers[l].out) * h);
    fhd__cuda_alloc_add(p, &bf->tg_a, B * W * h);
    fhd__cuda_alloc_add(p, &bf->tg_b, B * W * h);
    fhd__cuda_alloc_add(p, &bf->act_x, R * in0 * h); /* in0: S, or F below a conv torso */
    fhd__cuda_alloc_add(p, &bf->act_a, R * W * h);
    fhd__cuda_alloc_add(p, &bf->act_b, R * W * h);
}

const void *fhd__cuda_op_in(const fhd__backend *b, uint32_t l) {
    if (l == 0)
        return b->bf.on ? (const void *)b->bf.x : (const void *)b->mlp_in;
    return b->bf.on ? (const void *)b->bf.h[l - 1] : (const void *)b->h[l - 1];
}

void *fhd__cuda_op_out(fhd__backend *b, uint32_t l) {
    if (l == b->lo.L || !b->bf.on)
        return b->h[l];
    return b->bf.h[l];
}

const void *fhd__cuda_op_dz(const fhd__backend *b, uint32_t l) {
    return b->bf.on ? (const void *)b->bf.dz[l] : (const void *)b->dz[l];
}

const void *fhd__cuda_op_w(const fhd__backend *b, int net, uint64_t off) {
    const uint64_t at = (net ? b->T : 0) + off;
    return b->bf.on ? (const void *)(b->bf.w + at) : (const void *)(b->params + at);
}

/* Both networks' copies from the params: bf.w and the padded head. */
static int32_t convert_weights(fhd__backend *b, cudaStream_t s) {
    FHD_CK(b, fhd__cuda_to_bf16(b->bf.w, b->params, b->T + b->P, s));
    return fhd__cuda_head_pad_record(b, 2, s);
}

int32_t fhd__cuda_bf16_record_weights(fhd__backend *b, cudaStream_t s) {
    if (!b->bf.on || b->plan.w16_opt)
        return FHD_OK;
    return convert_weights(b, s);
}

int32_t fhd__cuda_bf16_refresh(fhd__backend *b) {
    if (!b->plan.w16_opt || !b->bf.stale)
        return FHD_OK;
    FHD_TRY(convert_weights(b, b->s_main));
    b->bf.stale = 0;
    return FHD_OK;
}

int32_t fhd__cuda_bf16_opt_copies(fhd__backend *b, fhd__opt_args *a) {
    if (!b->plan.w16_opt)
        return FHD_OK;
    const fhd__layer *hd = &b->lo.layers[b->lo.L];
    for (uint32_t s = 0; s < a->nseg; s++) {
        fhd__opt_segment *g = &a->seg[s];
        if (g->nextra > 1 || (g->sn >= 0 && a->sn[g->sn].mask))
            return fhd__cuda_failf(b, FHD_ERR_INTERNAL,
                                   "bf16 copies by the optimiser with layer 0's dW partials or "
                                   "pruning masks (segment %u)",
                                   s);
        if (b->plan.pad_head && g->off == hd->w_off) { /* (HOs, H) rows: W_head's, then zeros */
            g->w16 = (uint16_t *)(void *)b->head_w;
            g->copy_net = (uint64_t)b->HOs * hd->in;
        } else if (b->plan.pad_head && g->off == hd->b_off) {
            g->f32 = b->head_b;
            g->copy_net = b->HOs;
        } else {
            g->w16 = (uint16_t *)(void *)(b->bf.w + g->off);
            g->copy_net = b->T;
        }
    }
    return FHD_OK;
}

int32_t fhd__cuda_bf16_record_input(fhd__backend *b, int train, cudaStream_t s) {
    /* the update's sampling writes bf.x itself, a conv torso's flatten bf.x and bf.x_tg */
    if (!b->plan.gather_bf16 || train)
        return FHD_OK;
    FHD_CK(b, fhd__cuda_to_bf16(b->bf.x, b->mlp_in, 2 * (uint64_t)b->B * b->lo.layers[0].in, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_record_head_dz(fhd__backend *b, cudaStream_t s) {
    const uint32_t L = b->lo.L;
    /* (B, HOs): the padding columns are zero (create) and stay so; a staged loss kernel wrote
     * the bf16 copy itself (fhd__loss_args.dout16) */
    if (b->bf.on && !b->a_loss_train.dout16)
        FHD_CK(b, fhd__cuda_to_bf16(b->bf.dz[L], b->dz[L], (uint64_t)b->B * b->HOs, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_record_act_weights(fhd__backend *b, cudaStream_t s) {
    if (!b->bf.on)
        return FHD_OK;
    /* the online weights as they are now */
    FHD_CK(b, fhd__cuda_to_bf16(b->bf.w, b->params, b->P, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_record_act_input(fhd__backend *b, uint32_t rows, cudaStream_t s) {
    if (b->bf.on && !b->lo.NC) /* a conv torso's flatten writes bf.act_x */
        FHD_CK(b, fhd__cuda_to_bf16(b->bf.act_x, b->act_x, (uint64_t)rows * b->lo.S, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_relu_backward(fhd__backend *b, uint32_t l, const float *dx2,
                                     cudaStream_t s) {
    const uint32_t H = b->lo.layers[l].out;
    if (b->plan.dx16[l + 1]) /* the dx GEMM above wrote bf.dz[l] */
        FHD_CK(b, fhd__cuda_relu_mask_bf16(b->bf.dz[l], b->bf.h[l], b->bpart[l], b->B, H, s));
    else
        FHD_CK(b, fhd__cuda_relu_backward_bf16(b->bf.dz[l], b->dz[l], dx2, b->bf.h[l],
                                               b->bpart[l], b->B, H, s));
    return FHD_OK;
}

/* Are `bits` the bf16 copy of x (element `at` of the params, for the message)? */
static int copy_ok(uint16_t bits, float x, char *msg, size_t cap, const char *what, uint64_t at) {
    if (bits == fhd__bf16_bits(x))
        return 1;
    snprintf(msg, cap,
             "bf16: the GEMMs' copy of %s (params element %llu) is 0x%04x, not 0x%04x "
             "(%g rounded)",
             what, (unsigned long long)at, bits, fhd__bf16_bits(x), (double)x);
    return 0;
}

int32_t fhd__cuda_bf16_check(fhd__backend *b, char *msg, size_t cap) {
    if (!b->plan.w16_opt || b->bf.stale)
        return FHD_OK;
    const fhd__layer *hd = &b->lo.layers[b->lo.L];
    const uint64_t n = b->T + b->P, H = hd->in, HO = hd->out, HOs = b->HOs;
    float *p = (float *)malloc(sizeof(float) * (n + 2 * HOs));
    uint16_t *w = (uint16_t *)malloc(sizeof(uint16_t) * (n + 2 * HOs * H));
    if (!p || !w) {
        free(p);
        free(w);
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "check: out of host memory");
    }
    float *hb = p + n;
    uint16_t *hw = w + n;
    cudaStream_t s = b->s_main;
    int32_t rc = FHD_OK;
    if (cudaMemcpyAsync(p, b->params, sizeof(float) * n, cudaMemcpyDeviceToHost, s) !=
            cudaSuccess ||
        cudaMemcpyAsync(w, b->bf.w, sizeof(uint16_t) * n, cudaMemcpyDeviceToHost, s) !=
            cudaSuccess ||
        cudaMemcpyAsync(hw, b->head_w, sizeof(uint16_t) * 2 * HOs * H, cudaMemcpyDeviceToHost, s) !=
            cudaSuccess ||
        cudaMemcpyAsync(hb, b->head_b, sizeof(float) * 2 * HOs, cudaMemcpyDeviceToHost, s) !=
            cudaSuccess)
        rc = fhd__cuda_failf(b, FHD_ERR_DEVICE, "check: reading the bf16 copies failed");
    if (rc == FHD_OK)
        rc = fhd__cuda_sync(b, s);
    int ok = rc == FHD_OK;
    for (uint64_t i = 0; ok && i < n; i++) {
        const uint64_t o = i >= b->T ? i - b->T : i; /* offset within its network */
        if (i >= b->P && i < b->T)
            continue; /* the gap before the target */
        if (b->plan.pad_head &&
            ((o >= hd->w_off && o < hd->w_off + HO * H) || (o >= hd->b_off && o < hd->b_off + HO)))
            continue; /* the head's copy is the padded one */
        ok = copy_ok(w[i], p[i], msg, cap, "a weight", i);
    }
    for (uint64_t net = 0; ok && b->plan.pad_head && net < 2; net++)
        for (uint64_t r = 0; ok && r < HOs; r++) {
            const uint64_t at = net * b->T + hd->b_off + r;
            const float bias = r < HO ? p[at] : 0.0f;
            if (hb[net * HOs + r] != bias) {
                snprintf(msg, cap,
                         "bf16: the padded head's bias %llu of network %llu is %g, not %g",
                         (unsigned long long)r, (unsigned long long)net, (double)hb[net * HOs + r],
                         (double)bias);
                ok = 0;
            }
            for (uint64_t c = 0; ok && c < H; c++) {
                const uint64_t wa = net * b->T + hd->w_off + r * H + c;
                ok = copy_ok(hw[(net * HOs + r) * H + c], r < HO ? p[wa] : 0.0f, msg, cap,
                             r < HO ? "a head weight" : "a head padding row (0)", wa);
            }
        }
    free(p);
    free(w);
    if (rc == FHD_OK && !ok)
        rc = FHD_ERR_INTERNAL;
    return rc;
}
