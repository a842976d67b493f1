/* cuda_head_pad.cpp - the padded head (docs/design.md section 5; the rule is plan.pad_head,
 * cuda_plan.h): both networks' head weights as (HOs, H) rows and their biases as HOs floats,
 * the rows past HO zero, which the head's forward and dx GEMMs read instead of the params'
 * (HO, H); on with bf16 GEMMs. The padding outputs are then exactly 0, and the padding rows add
 * nothing to dx (dz[L]'s padding columns are zero from create on), while cuBLASLt sees an
 * aligned head.
 * The copy is the bf16 rounding of the fp32 weights, written by the optimiser with each new
 * value (plan.w16_opt; made here after any other write of the params, cuda_bf16.cpp), else (with
 * pruning) made here at the start of every update; online only, also in act's graph.
 */
#include "cuda_internal.h"

void fhd__cuda_head_pad_plan_buffers(fhd__backend *b, struct fhd__alloc_list *p) {
    if (!b->plan.pad_head)
        return;
    const uint64_t H = b->lo.layers[b->lo.L].in;
    fhd__cuda_alloc_add(p, &b->head_w, 2 * (uint64_t)b->HOs * H * sizeof(__nv_bfloat16));
    fhd__cuda_alloc_add(p, &b->head_b, 2 * (uint64_t)b->HOs * sizeof(float));
}

int32_t fhd__cuda_head_pad_record(fhd__backend *b, uint32_t nets, cudaStream_t s) {
    if (!b->plan.pad_head)
        return FHD_OK;
    const fhd__layer *hd = &b->lo.layers[b->lo.L];
    FHD_CK(b, fhd__cuda_head_pad_bf16(b->head_w, b->head_b, b->params, b->T, hd->w_off, hd->b_off,
                                      hd->out, b->HOs, hd->in, nets, s));
    return FHD_OK;
}

const void *fhd__cuda_op_head_w(const fhd__backend *b, int net) {
    const fhd__layer *hd = &b->lo.layers[b->lo.L];
    if (!b->plan.pad_head)
        return fhd__cuda_op_w(b, net, hd->w_off);
    return b->head_w + (uint64_t)net * b->HOs * hd->in;
}

const float *fhd__cuda_op_head_b(const fhd__backend *b, int net) {
    if (!b->plan.pad_head)
        return b->params + (net ? b->T : 0) + b->lo.layers[b->lo.L].b_off;
    return b->head_b + (uint64_t)net * b->HOs;
}
