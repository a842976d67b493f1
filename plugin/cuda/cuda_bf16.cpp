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
 *   layer 0   bf.x: mlp_in's rows_on rows converted on s0 (all 2B with pair_fwd0), bf.x_tg:
 *             the target's B rows on s1 before its forward; below a conv torso written in
 *             bf16 by its flatten (cuda_conv.cpp, whose own operands are bf16 too)
 *   hidden    bf.h / bf.tg_a / bf.tg_b: written by the forward GEMMs' bias+ReLU epilogue as
 *             bf16 (with the bf16 bias of bf.w), the next forward's and the dW GEMM's operand
 *   head      its output stays fp32 (h[L], head_t): the loss kernel reads it as before; its
 *             forward and dx GEMMs read bf.head_w / bf.head_b, the head padded to HOs rows
 *             with zeros (written after bf.w, from the same fp32 weights), so that both are
 *             GEMMs of 16-byte rows whatever HO is
 *   dz        the head's d(outputs) from the loss kernel (fp32 dz[L]) converted into bf.dz[L];
 *             each torso layer's by fhd__cuda_relu_backward_bf16 from the fp32 dx GEMM output,
 *             with the bias partials from the fp32 values
 * The fp32 dx outputs (dz[l], dxp) and the gradient stay fp32; the optimiser is unchanged.
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
    fhd__cuda_alloc_add(p, &bf->head_w, 2 * (uint64_t)b->HOs * lo->layers[lo->L].in * h);
    fhd__cuda_alloc_add(p, &bf->head_b, 2 * (uint64_t)b->HOs * sizeof(float));
}

/* bf.head_w / bf.head_b of the first `nets` networks (online, then target) from params. */
static int32_t record_head_pad(fhd__backend *b, uint32_t nets, cudaStream_t s) {
    const fhd__layer *hd = &b->lo.layers[b->lo.L];
    FHD_CK(b, fhd__cuda_head_pad_bf16(b->bf.head_w, b->bf.head_b, b->params, b->T, hd->w_off,
                                      hd->b_off, hd->out, b->HOs, hd->in, nets, s));
    return FHD_OK;
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

const void *fhd__cuda_op_head_w(const fhd__backend *b, int net) {
    if (b->bf.on)
        return b->bf.head_w + (uint64_t)net * b->HOs * b->lo.layers[b->lo.L].in;
    return fhd__cuda_op_w(b, net, b->lo.layers[b->lo.L].w_off);
}

const void *fhd__cuda_op_w(const fhd__backend *b, int net, uint64_t off) {
    const uint64_t at = (net ? b->T : 0) + off;
    return b->bf.on ? (const void *)(b->bf.w + at) : (const void *)(b->params + at);
}

int32_t fhd__cuda_bf16_record_weights(fhd__backend *b, cudaStream_t s) {
    if (!b->bf.on)
        return FHD_OK;
    FHD_CK(b, fhd__cuda_to_bf16(b->bf.w, b->params, b->T + b->P, s));
    return record_head_pad(b, 2, s);
}

int32_t fhd__cuda_bf16_record_input(fhd__backend *b, int net, cudaStream_t s) {
    if (!b->bf.on || b->lo.NC) /* a conv torso's flatten writes bf.x and bf.x_tg */
        return FHD_OK;
    const uint64_t in0 = b->lo.layers[0].in;
    if (net == 0) /* online(s) [and online(s')]; with the pair, the target's rows too */
        FHD_CK(b,
               fhd__cuda_to_bf16(b->bf.x, b->mlp_in,
                                 (b->plan.pair_fwd0 ? 2 * (uint64_t)b->B : b->rows_on) * in0, s));
    else
        FHD_CK(b, fhd__cuda_to_bf16(b->bf.x_tg, b->mlp_in_tg, (uint64_t)b->B * in0, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_record_head_dz(fhd__backend *b, cudaStream_t s) {
    const uint32_t L = b->lo.L;
    if (b->bf.on) /* (B, HOs): the padding columns are zero (create) and stay so */
        FHD_CK(b, fhd__cuda_to_bf16(b->bf.dz[L], b->dz[L], (uint64_t)b->B * b->HOs, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_record_act_weights(fhd__backend *b, cudaStream_t s) {
    if (!b->bf.on)
        return FHD_OK;
    /* the online weights as they are now */
    FHD_CK(b, fhd__cuda_to_bf16(b->bf.w, b->params, b->P, s));
    return record_head_pad(b, 1, s);
}

int32_t fhd__cuda_bf16_record_act_input(fhd__backend *b, uint32_t rows, cudaStream_t s) {
    if (b->bf.on && !b->lo.NC) /* a conv torso's flatten writes bf.act_x */
        FHD_CK(b, fhd__cuda_to_bf16(b->bf.act_x, b->act_x, (uint64_t)rows * b->lo.S, s));
    return FHD_OK;
}

int32_t fhd__cuda_bf16_relu_backward(fhd__backend *b, uint32_t l, const float *dx2,
                                     cudaStream_t s) {
    const uint32_t H = b->lo.layers[l].out;
    FHD_CK(b, fhd__cuda_relu_backward_bf16(b->bf.dz[l], b->dz[l], dx2, b->bf.h[l], b->bpart[l],
                                           b->B, H, s));
    return FHD_OK;
}
