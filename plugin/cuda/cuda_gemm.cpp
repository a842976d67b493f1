/* cuda_gemm.cpp - cuBLASLt plans: fhd__linear_forward's GEMM (+ bias, ReLU epilogue) and the
 * GEMMs of fhd__linear_backward, each planned once (descriptors, alignment, algorithm) before the
 * update is captured into a graph. A narrow head's forward (few outputs, a small batch) is
 * planned as fhd__cuda_narrow_linear instead (kernels/linear.cuh).
 *
 * The algorithm: cuBLASLt's heuristic results for the descriptors at hand, then
 *   autotune "off": the rule: the first result, or for a small GEMM (m n k <= 2^28) the first
 *                   without split-K (a split-K algorithm adds a reduction kernel to the chain);
 *   "fast" / "full": the candidates timed on the real buffers and stream (cuda_autotune.cpp),
 *                   the pick cached on disk.
 * Every pick reproduces its bits run to run: split-K only with a reduction in a second kernel,
 * never the in-place (atomic) one.
 *
 * Row-major (PyTorch) tensors are column-major transposes, so with W (out, in), x (rows, in):
 *   forward  y^T (out, rows)  = W^T' x^T  : m = out, n = rows, k = in,  A = W (op T), B = x (op N)
 *   dx^T (in, B)              = W^T dy^T  : m = in,  n = B,    k = out, A = W (op N), B = dy (op N)
 *   dW^T (in, out)            = x^T dy    : m = in,  n = out,  k = B,   A = x (op N), B = dy (op T)
 * For a spectrally normalised layer alpha and beta are device pointers
 * (CUBLASLT_POINTER_MODE_DEVICE): alpha = 1/sigma is read by the GEMM itself, so W / sigma is
 * never written. Elsewhere alpha = 1 and beta = 0 are host scalars, baked into the graph.
 * matmul_precision "bf16" (fhd__gemm_spec.bf16): A and B CUDA_R_16BF, CUBLAS_COMPUTE_32F with
 * fp32 scale, C and D fp32 or (a hidden layer's forward) CUDA_R_16BF with a bf16 bias; the
 * heuristic and the autotune are asked with those types.
 */
#include <stdio.h>
#include <string.h>

#include "cuda_gemm_rule.h"
#include "cuda_internal.h"
#include "linear.cuh"

/* Largest power of two (<= 256) dividing the address: the alignment cuBLASLt may assume. */
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 4 && (a % al) != 0)
        al >>= 1;
    return al;
}

/* The same for a leading dimension of ld floats. */
static uint32_t ld_align(uint32_t ld) {
    uint32_t al = 256;
    while (al > 4 && ((uint64_t)ld * 4) % al != 0)
        al >>= 1;
    return al;
}

void fhd__gemm_destroy(fhd__gemm *g) {
    if (g->desc)
        cublasLtMatmulDescDestroy(g->desc);
    if (g->la)
        cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb)
        cublasLtMatrixLayoutDestroy(g->lb);
    if (g->lc)
        cublasLtMatrixLayoutDestroy(g->lc);
    if (g->tdesc)
        cublasLtMatrixTransformDescDestroy(g->tdesc);
    memset(g, 0, sizeof(*g));
}

int fhd__gemm_rule_pick(const fhd__gemm_spec *s, const cublasLtMatmulHeuristicResult_t *res,
                        int n) {
    return fhd__gemm_rule_index(s->m, s->n, s->k, res, n);
}

void fhd__gemm_types(const fhd__gemm_spec *s, cublasComputeType_t *ct, cudaDataType_t *ab,
                     cudaDataType_t *c) {
    *ct = s->tf32 && !s->bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    *ab = s->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    *c = s->bf16 == FHD_GEMM_BF16_OUT ? CUDA_R_16BF : CUDA_R_32F;
}

static const char *precision_name(const fhd__gemm_spec *s) {
    return s->bf16 ? "BF16" : s->tf32 ? "TF32" : "FP32";
}

/* The plan's record of g (spec s), when the update's GEMMs are being planned. */
static void record_choice(fhd__backend *b, const fhd__gemm *g, const fhd__gemm_spec *s) {
    fhd__cuda_plan *p = &b->plan;
    if (!b->planning || p->ngemm >= FHD_PLAN_GEMMS)
        return;
    fhd__gemm_choice *c = &p->gemm[p->ngemm++];
    memset(c, 0, sizeof *c);
    snprintf(c->site, sizeof c->site, "%s", s->site ? s->site : "?");
    c->m = s->m;
    c->n = s->n;
    c->k = s->k;
    c->op[0] = s->opa == CUBLAS_OP_N ? 'N' : 'T';
    c->op[1] = s->opb == CUBLAS_OP_N ? 'N' : 'T';
    c->batch = s->batch > 1 ? s->batch : 1;
    c->tf32 = s->tf32;
    c->bf16 = s->bf16;
    c->epilogue = s->epilogue;
    c->fallback = g->fallback;
    c->narrow = g->narrow;
    c->transpose = g->tdesc != NULL;
    c->beside = s->beside;
    c->pick = g->pick;
    c->not_rule = g->not_rule;
    c->candidates = g->candidates;
    c->us = g->us;
    c->rule_us = g->rule_us;
    if (g->narrow || g->tdesc)
        return;
    fhd__algo_config ac;
    fhd__algo_config_get(&g->algo, &ac);
    c->algo = ac.id;
    c->tile = (int32_t)ac.tile;
    c->stages = (int32_t)ac.stages;
    c->splitk = ac.splitk;
    c->reduction = (int32_t)ac.reduction;
    c->swizzle = (int32_t)ac.swizzle;
    c->inner_shape = (int32_t)ac.inner_shape;
    c->cluster_shape = (int32_t)ac.cluster_shape;
    c->custom = (int32_t)ac.custom;
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    if (cublasLtMatmulAlgoCheck(b->lt, g->desc, g->la, g->lb, g->lc, g->lc, &g->algo, &r) ==
        CUBLAS_STATUS_SUCCESS)
        c->workspace = r.workspaceSize;
}

/* Descriptors for spec s with epilogue epi; 0 and the algorithm when the heuristic offers one
 * (picked by the rule or the autotune, see above). */
static int32_t try_plan(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                        int *found) {
    *found = 0;
    cublasComputeType_t ct;
    cudaDataType_t tab, tc;
    fhd__gemm_types(s, &ct, &tab, &tc);
    FHD_CKB(b, cublasLtMatmulDescCreate(&g->desc, ct, CUDA_R_32F));
    const int32_t opa = s->opa, opb = s->opb;
    FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* alpha = 1 (no spectral norm on this layer) as a host scalar: with a device alpha the
     * heuristic offers slower kernels for some shapes (a split-K kernel plus a separate
     * epilogue for a narrow head over a large batch) */
    g->host_alpha = s->alpha == b->d_one;
    const int32_t pm = g->host_alpha ? CUBLASLT_POINTER_MODE_HOST : CUBLASLT_POINTER_MODE_DEVICE;
    FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm,
                                              sizeof pm));
    if (epi != FHD_EPI_NONE) {
        const uint32_t e = epi == FHD_EPI_BIAS_RELU ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                    : CUBLASLT_EPILOGUE_BIAS;
        FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e,
                                                  sizeof e));
        const void *bias = s->bias;
        FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &bias, sizeof bias));
    }
    const bool ta = s->opa != CUBLAS_OP_N, tb = s->opb != CUBLAS_OP_N;
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->la, tab, ta ? s->k : s->m, ta ? s->m : s->k, s->lda));
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->lb, tab, tb ? s->n : s->k, tb ? s->k : s->n, s->ldb));
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->lc, tc, s->m, s->n, s->ldc));
    if (s->batch > 1) {
        const int32_t bc = (int32_t)s->batch;
        cublasLtMatrixLayout_t ls[3] = {g->la, g->lb, g->lc};
        const int64_t st[3] = {s->stride_a, s->stride_b, s->stride_c};
        for (int i = 0; i < 3; i++) {
            FHD_CKB(b, cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &bc, sizeof bc));
            FHD_CKB(b, cublasLtMatrixLayoutSetAttribute(
                           ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i], sizeof st[i]));
        }
        if (epi != FHD_EPI_NONE)
            FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                      &s->stride_bias, sizeof s->stride_bias));
    }

    uint32_t al_a = alignment_of(s->A), al_b = alignment_of(s->B), al_c = alignment_of(s->C);
    if (s->batch > 1) { /* every matrix of the batch: the second one's address too */
        const int c16 = s->bf16 == FHD_GEMM_BF16_OUT;
        const uint32_t a2 = alignment_of(fhd__elem_at(s->A, (uint64_t)s->stride_a, s->bf16));
        const uint32_t b2 = alignment_of(fhd__elem_at(s->B, (uint64_t)s->stride_b, s->bf16));
        const uint32_t c2 = alignment_of(fhd__elem_at(s->C, (uint64_t)s->stride_c, c16));
        al_a = a2 < al_a ? a2 : al_a;
        al_b = b2 < al_b ? b2 : al_b;
        al_c = c2 < al_c ? c2 : al_c;
    }
    g->A = s->A;
    g->B = s->B;
    g->C = s->C;
    g->bf16 = s->bf16;
    g->alpha = s->alpha;
    cublasLtMatmulPreference_t pref = NULL;
    FHD_CKB(b, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = FHD_CUDA_WORKSPACE_BYTES;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS && s->bf16 == FHD_GEMM_BF16_OUT) {
        /* split-K partials of a bf16 output only in fp32 (the compute type): in the output type
         * they would be rounded to bf16 before their sum */
        const uint32_t red =
            CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                  &red, sizeof red);
    }
    cublasLtMatmulHeuristicResult_t res[FHD_TUNE_MAX_RESULTS];
    memset(res, 0, sizeof res);
    int n = 0;
    const int want = b->tune && b->plan.autotune == FHD_AUTOTUNE_FULL ? FHD_TUNE_MAX_RESULTS : 8;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(b->lt, g->desc, g->la, g->lb, g->lc, g->lc, pref, want,
                                            res, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && n > 0) {
        const int rule = fhd__gemm_rule_pick(s, res, n);
        if (rule < 0)
            return FHD_OK; /* nothing usable: not found */
        g->algo = res[rule].algo;
        if (b->tune) /* at create: the autotune may replace it */
            FHD_TRY(fhd__autotune_pick(b, g, s, epi, res, n, rule));
        *found = 1;
        return FHD_OK;
    }
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
        return fhd__cublas_fail(b, st, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic");
    return FHD_OK;
}

int32_t fhd__gemm_plan(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s) {
    memset(g, 0, sizeof(*g));
    int found = 0;
    /* a fused bias epilogue first; without one, a plain GEMM and fhd__cuda_bias_act (a bf16
     * output: the plain GEMM's fp32 product into C32, then fhd__cuda_bias_act_bf16) */
    FHD_TRY(try_plan(b, g, s, s->epilogue, &found));
    const int out16 = s->bf16 == FHD_GEMM_BF16_OUT;
    if (!found && s->epilogue != FHD_EPI_NONE && s->batch <= 1 && (!out16 || s->C32)) {
        fhd__gemm_destroy(g);
        fhd__gemm_spec plain = *s;
        if (out16) {
            plain.bf16 = FHD_GEMM_BF16_IN;
            plain.C = s->C32;
        }
        FHD_TRY(try_plan(b, g, &plain, FHD_EPI_NONE, &found));
        g->fallback = 1;
    }
    if (!found) {
        fhd__gemm_destroy(g);
        return fhd__cuda_failf(b, FHD_ERR_DEVICE,
                               "cuBLASLt has no algorithm for a %s GEMM m=%u n=%u k=%u (op %c%c, "
                               "lda %u ldb %u ldc %u)",
                               precision_name(s), s->m, s->n, s->k,
                               s->opa == CUBLAS_OP_N ? 'N' : 'T', s->opb == CUBLAS_OP_N ? 'N' : 'T',
                               s->lda, s->ldb, s->ldc);
    }
    g->A = s->A;
    g->B = s->B;
    g->C = s->C;
    g->bf16 = s->bf16;
    g->C32 = out16 && g->fallback ? s->C32 : NULL;
    g->alpha = s->alpha;
    g->bias = s->bias;
    g->rows = s->n;
    g->out = s->m;
    g->ld = s->ldc;
    g->relu = s->epilogue == FHD_EPI_BIAS_RELU;
    if (s->epilogue == FHD_EPI_NONE)
        g->fallback = 0;
    g->ready = 1;
    record_choice(b, g, s);
    return FHD_OK;
}

int32_t fhd__gemm_plan_transpose(fhd__backend *b, fhd__gemm *g, const float *A, uint32_t rows,
                                 uint32_t cols, float *C, const char *site) {
    memset(g, 0, sizeof(*g));
    /* A row-major (rows, cols) is column-major (cols, rows); C column-major (rows, cols) */
    FHD_CKB(b, cublasLtMatrixTransformDescCreate(&g->tdesc, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T;
    FHD_CKB(b, cublasLtMatrixTransformDescSetAttribute(
                   g->tdesc, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA, &t, sizeof t));
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->la, CUDA_R_32F, cols, rows, cols));
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_32F, rows, cols, rows));
    g->A = A;
    g->C = C;
    g->ready = 1;
    fhd__gemm_spec s;
    memset(&s, 0, sizeof s);
    s.site = site;
    s.m = rows;
    s.n = cols;
    s.beside = 1;
    record_choice(b, g, &s);
    return FHD_OK;
}

int32_t fhd__gemm_run(fhd__backend *b, const fhd__gemm *g, cudaStream_t stream, void *workspace) {
    static const float one = 1.0f, zero = 0.0f;
    if (g->tdesc) {
        FHD_CKB(b, cublasLtMatrixTransform(b->lt, g->tdesc, &one, g->A, g->la, &zero, NULL, NULL,
                                           g->C, g->lc, stream));
        return FHD_OK;
    }
    if (g->narrow) {
        FHD_CK(b, fhd__cuda_narrow_linear((float *)g->C, g->ld, (const float *)g->B, g->ldb,
                                          (const float *)g->A, (const float *)g->bias, g->alpha,
                                          g->rows, g->in, g->out, stream));
        return FHD_OK;
    }
    void *c = g->C32 ? (void *)g->C32 : g->C; /* the bf16 fallback's product goes to C32 */
    FHD_CKB(b, cublasLtMatmul(b->lt, g->desc, g->host_alpha ? &one : g->alpha, g->A, g->la, g->B,
                              g->lb, g->host_alpha ? &zero : b->d_zero, c, g->lc, c, g->lc,
                              &g->algo, workspace, FHD_CUDA_WORKSPACE_BYTES, stream));
    if (g->fallback && g->C32)
        FHD_CK(b, fhd__cuda_bias_act_bf16((__nv_bfloat16 *)g->C, g->C32,
                                          (const __nv_bfloat16 *)g->bias, g->rows, g->out, g->ld,
                                          stream));
    else if (g->fallback)
        FHD_CK(b, fhd__cuda_bias_act((float *)g->C, (const float *)g->bias, g->rows, g->out, g->ld,
                                     g->relu, stream));
    return FHD_OK;
}

/* Layer l's forward of network net: x (rows, in) and y (rows, out; the head's with row stride
 * HOs) of the types bf.on says (fhd__gemm_plan_forward). */
static void forward_spec(fhd__backend *b, fhd__gemm_spec *sp, char *site, int net, uint32_t l,
                         uint32_t rows, const void *x, void *y, float *y32, const float *alpha) {
    const fhd__layer *ly = &b->lo.layers[l];
    const int head = l == b->lo.L;
    fhd__gemm_spec &s = *sp;
    memset(&s, 0, sizeof s);
    s.tf32 = b->plan.tf32_fwd;
    s.bf16 = !b->bf.on ? FHD_GEMM_FP32 : head ? FHD_GEMM_BF16_IN : FHD_GEMM_BF16_OUT;
    s.opa = CUBLAS_OP_T;
    s.opb = CUBLAS_OP_N;
    s.m = ly->out;
    s.n = rows;
    s.k = ly->in;
    s.A = fhd__cuda_op_w(b, net, ly->w_off);
    s.lda = ly->in;
    s.B = x;
    s.ldb = ly->in;
    s.C = y;
    s.C32 = s.bf16 == FHD_GEMM_BF16_OUT ? y32 : NULL;
    s.ldc = head ? b->HOs : ly->out; /* head outputs: 16-byte aligned rows */
    s.alpha = alpha;
    s.epilogue = head ? FHD_EPI_BIAS : FHD_EPI_BIAS_RELU;
    /* a hidden layer's bias in its output's type: bf16 rounded (docs/design.md section 4) */
    s.bias = s.bf16 == FHD_GEMM_BF16_OUT ? fhd__cuda_op_w(b, net, ly->b_off)
                                         : (const void *)(b->params + (net ? b->T : 0) + ly->b_off);
    if (head && b->plan.pad_head) { /* the padded head: all HOs outputs, the padding ones 0 */
        s.m = b->HOs;
        s.A = fhd__cuda_op_head_w(b, net);
        s.bias = fhd__cuda_op_head_b(b, net);
    }
    snprintf(site, 24, "fwd%u %s", l, net ? "target" : "online");
    s.site = site;
}

int32_t fhd__gemm_plan_forward_pair(fhd__backend *b, fhd__gemm *g, uint32_t l, uint32_t rows,
                                    const void *x, int64_t sx, void *y, int64_t sy, float *y32) {
    fhd__gemm_spec s;
    char site[24];
    forward_spec(b, &s, site, 0, l, rows, x, y, y32, b->d_one);
    snprintf(site, sizeof site, "fwd%u pair", l);
    s.batch = 2;
    s.stride_a = (int64_t)b->T; /* the target network: the same layout T floats on */
    s.stride_bias = (int64_t)b->T;
    s.stride_b = sx;
    s.stride_c = sy;
    s.C32 = NULL; /* batched: no epilogue fallback (the plan then runs two GEMMs) */
    return fhd__gemm_plan(b, g, &s);
}

int32_t fhd__gemm_plan_forward(fhd__backend *b, fhd__gemm *g, int net, uint32_t l, uint32_t rows,
                               const void *x, void *y, float *y32, const float *alpha) {
    const fhd__layer *ly = &b->lo.layers[l];
    fhd__gemm_spec s;
    char site[24];
    forward_spec(b, &s, site, net, l, rows, x, y, y32, alpha);
    if (l == b->lo.L && !b->bf.on && fhd__cuda_head_narrow(&b->lo, rows)) {
        /* a head of a few outputs: cuBLASLt's tiles would be mostly padding (see linear.cuh;
         * an fp32 kernel, so not with bf16 GEMMs) */
        memset(g, 0, sizeof(*g));
        g->narrow = 1; /* the params' head (HO rows), padded or not */
        g->A = fhd__cuda_op_w(b, net, ly->w_off);
        g->B = x;
        g->C = y;
        g->alpha = alpha;
        g->bias = b->params + (net ? b->T : 0) + ly->b_off;
        g->rows = rows;
        g->out = ly->out;
        g->in = ly->in;
        g->ld = s.ldc;
        g->ldb = s.ldb;
        g->ready = 1;
        s.m = ly->out;
        record_choice(b, g, &s);
        return FHD_OK;
    }
    return fhd__gemm_plan(b, g, &s);
}
