/* cuda_bf16.cpp - matmul_precision "bf16" on the CUDA backend: its buffers, the operands the
 * update's GEMMs read, and the conversions it records (docs/design.md section 5, "bf16
 * GEMMs"; the rule is section 4's "GEMM precision", plugin/cpu/cpu_ops.h the reference).
 *
 * Every GEMM reads bf16 A and B and accumulates in fp32 (cuda_gemm.cpp). Where the operands
 * come from, per update (B batch, rows_on online rows, P parameters, T the target's offset):
 *   weights   bf.w (T + P): one conversion of the whole flat params buffer (both networks) at
 *             the start of the update, before the spectral norm and the fork, so that it reads
 *             whatever wrote the fp32 weights last (the previous update's optimiser, a target
 *             update, tensor_write, a checkpoint load) and no writer needs to know of it; act's
 *             graph converts the online part itself
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
#include <string.h>

#include "cuda_internal.h"

void fhd__cuda_bf16_init(fhd__backend *b) {
    memset(&b->bf, 0, sizeof b->bf);
    b->bf.on = b->plan.bf16;
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

int32_t fhd__cuda_bf16_record_weights(fhd__backend *b, cudaStream_t s) {
    if (!b->bf.on)
        return FHD_OK;
    FHD_CK(b, fhd__cuda_to_bf16(b->bf.w, b->params, b->T + b->P, s));
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
