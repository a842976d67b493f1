/* cuda_gemm.cpp - cuBLASLt plans: fhd__linear_forward's GEMM (+ bias, ReLU epilogue) and the
 * GEMMs of fhd__linear_backward, each chosen once (descriptors, alignment, algorithm from a
 * table of measured configurations or the heuristic) before the update is captured into a
 * graph. A narrow head's forward (few outputs, a small batch) is planned as
 * fhd__cuda_narrow_linear instead (kernels/linear.cuh).
 *
 * Row-major (PyTorch) tensors are column-major transposes, so with W (out, in), x (rows, in):
 *   forward  y^T (out, rows)  = W^T' x^T  : m = out, n = rows, k = in,  A = W (op T), B = x (op N)
 *   dx^T (in, B)              = W^T dy^T  : m = in,  n = B,    k = out, A = W (op N), B = dy (op N)
 *   dW^T (in, out)            = x^T dy    : m = in,  n = out,  k = B,   A = x (op N), B = dy (op T)
 * For a spectrally normalised layer alpha and beta are device pointers
 * (CUBLASLT_POINTER_MODE_DEVICE): alpha = 1/sigma is read by the GEMM itself, so W / sigma is
 * never written. Elsewhere alpha = 1 and beta = 0 are host scalars, baked into the graph.
 */
#include <string.h>

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

/* Configurations measured faster than the heuristic's pick, for call sites of the DESIGN.md
 * presets on sm_90 with 132 SMs (H100 SXM, H200). `gemm_sweep all PRESET` times every
 * configuration cuBLASLt accepts for each site, alone, as captured-graph replays
 * (bench/results/2026-11-30-h200-gemm-all.log); `gemm_sweep pair PRESET` times the online and
 * the target forward of a layer together, as the update runs them. A site is here where its
 * configuration beat the pick of try_plan's rule by 3% and 0.2 us (alone, or as a pair) AND
 * made the whole update faster: of the sweep's single-site candidates, B1's three (all
 * split-K, beside its path) slowed B1 and B1-sn by 1.2-2.7 us each; they are not here
 * (bench/RESULTS.md's log).
 * B3's dW1 entry leaves 1-10% of its updates slow (168 against 148 us); the table's mean is
 * still the lowest of the combinations measured (bench/CUDA_NOTES.md). Split-K entries reduce
 * in a second kernel (REDUCTION_SCHEME_COMPUTE_TYPE / OUTPUT_TYPE) and reproduce their bits, as
 * every pick must. An entry is used only when cublasLtMatmulAlgoCheck accepts it for the
 * descriptors at hand. */
struct tuned_gemm {
    uint8_t ta, tb; /* op T of A, of B */
    uint32_t m, n, k, lda, ldb, ldc, batch;
    int epi, tf32;
    int32_t algo;
    uint32_t tile, stages;
    int32_t splitk;
    uint32_t reduction, swizzle, custom;
};

static const tuned_gemm k_tuned_sm90_132[] = {
    /* B3: the target's layer-0 forward (64 x 64 tiles, CTA swizzling), beside the online one:
     * `gemm_sweep pair B3` found the pair 10.99 -> 9.67 us with both sides' 64 x 64 tiles;
     * in the update the target's alone did best (B3 144.4-144.9 -> 141.5-141.6 us; 140.2 ->
     * 139.8 with CUDA_DEVICE_MAX_CONNECTIONS=32), both sides' 143.0 (142.4 with 32 queues) */
    {1, 0, 512, 1024, 64, 64, 64, 512, 1, FHD_EPI_BIAS_RELU, 0, 55, 15, 31, 1, 0, 1, 0},
    /* B3: dW of the head and of layer 1 (split-K), dx of layer 1; alone 7.16 -> 6.50,
     * 19.29 -> 18.46, 21.02 -> 17.56 us */
    {0, 1, 512, 21, 1024, 512, 24, 512, 1, FHD_EPI_NONE, 0, 20, 15, 28, 16, 4, 0, 0},
    {0, 1, 512, 512, 1024, 512, 512, 512, 1, FHD_EPI_NONE, 0, 20, 18, 28, 4, 2, 0, 0},
    {0, 0, 512, 1024, 512, 512, 512, 512, 1, FHD_EPI_NONE, 0, 55, 15, 31, 1, 0, 0, 0},
    /* B2: the target's head in FP32 (split-K) and TF32, dx of layer 1 in FP32; alone
     * 38.95 -> 33.62, 21.10 -> 19.63, 344.6 -> 330.0 us */
    {1, 0, 33, 8192, 1024, 1024, 1024, 36, 1, FHD_EPI_BIAS, 0, 55, 15, 31, 3, 2, 0, 0},
    {1, 0, 33, 8192, 1024, 1024, 1024, 36, 1, FHD_EPI_BIAS, 1, 23, 15, 12, 1, 0, 0, 0},
    {0, 0, 1024, 8192, 1024, 1024, 1024, 1024, 1, FHD_EPI_NONE, 0, 55, 24, 31, 1, 0, 1, 0},
};

/* The table's configuration for spec s with epilogue epi into *algo, when there is one for this
 * device, AlgoCheck accepts it with the descriptors of g, its workspace fits and the buffers are
 * as aligned as it needs. */
static bool tuned_algo(fhd__backend *b, const fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                       const uint32_t align[3], cublasLtMatmulAlgo_t *algo) {
    if (b->sm != 90 || b->sm_count != 132)
        return false;
    const cublasComputeType_t ct = s->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    for (const tuned_gemm &t : k_tuned_sm90_132) {
        if (t.ta != (s->opa != CUBLAS_OP_N) || t.tb != (s->opb != CUBLAS_OP_N) || t.m != s->m ||
            t.n != s->n || t.k != s->k || t.lda != s->lda || t.ldb != s->ldb || t.ldc != s->ldc ||
            t.batch != (s->batch > 1 ? s->batch : 1u) || t.epi != epi || t.tf32 != (s->tf32 != 0))
            continue;
        if (cublasLtMatmulAlgoInit(b->lt, ct, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                   CUDA_R_32F, t.algo, algo) != CUBLAS_STATUS_SUCCESS)
            return false;
        const struct {
            cublasLtMatmulAlgoConfigAttributes_t attr;
            const void *v;
            size_t n;
        } cfg[] = {{CUBLASLT_ALGO_CONFIG_TILE_ID, &t.tile, sizeof t.tile},
                   {CUBLASLT_ALGO_CONFIG_STAGES_ID, &t.stages, sizeof t.stages},
                   {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &t.splitk, sizeof t.splitk},
                   {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &t.reduction, sizeof t.reduction},
                   {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &t.swizzle, sizeof t.swizzle},
                   {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &t.custom, sizeof t.custom}};
        for (const auto &c : cfg)
            if (cublasLtMatmulAlgoConfigSetAttribute(algo, c.attr, c.v, c.n) !=
                CUBLAS_STATUS_SUCCESS)
                return false;
        static const cublasLtMatmulAlgoCapAttributes_t caps[4] = {
            CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4; i++) { /* D is C */
            uint32_t need = 0;
            size_t wr = 0;
            if (cublasLtMatmulAlgoCapGetAttribute(algo, caps[i], &need, sizeof need, &wr) !=
                    CUBLAS_STATUS_SUCCESS ||
                need > align[i < 3 ? i : 2])
                return false;
        }
        cublasLtMatmulHeuristicResult_t r;
        memset(&r, 0, sizeof r);
        return cublasLtMatmulAlgoCheck(b->lt, g->desc, g->la, g->lb, g->lc, g->lc, algo, &r) ==
                   CUBLAS_STATUS_SUCCESS &&
               r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= FHD_CUDA_WORKSPACE_BYTES;
    }
    return false;
}

/* Descriptors for spec s with epilogue epi; 0 and the algorithm when the table (above) or the
 * heuristic has one. */
static int32_t try_plan(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                        int *found) {
    *found = 0;
    const cublasComputeType_t ct = s->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    FHD_CKB(b, cublasLtMatmulDescCreate(&g->desc, ct, CUDA_R_32F));
    const int32_t opa = s->opa, opb = s->opb;
    FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    FHD_CKB(b, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* alpha = 1 (no spectral norm on this layer) as a host scalar: with a device alpha the
     * heuristic offers other kernels for some shapes (B2's 33-output head: an sm80 split-K
     * kernel plus a separate epilogue, 67 us, against 32 us for the best host-mode one) */
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
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->la, CUDA_R_32F, ta ? s->k : s->m, ta ? s->m : s->k,
                                          s->lda));
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_32F, tb ? s->n : s->k, tb ? s->k : s->n,
                                          s->ldb));
    FHD_CKB(b, cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_32F, s->m, s->n, s->ldc));
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
        const uint32_t a2 = alignment_of(s->A + s->stride_a), b2 = alignment_of(s->B + s->stride_b);
        const uint32_t c2 = alignment_of(s->C + s->stride_c);
        al_a = a2 < al_a ? a2 : al_a;
        al_b = b2 < al_b ? b2 : al_b;
        al_c = c2 < al_c ? c2 : al_c;
    }
    /* the table's configurations need pointers and leading dimensions both aligned */
    const uint32_t align[3] = {al_a < ld_align(s->lda) ? al_a : ld_align(s->lda),
                               al_b < ld_align(s->ldb) ? al_b : ld_align(s->ldb),
                               al_c < ld_align(s->ldc) ? al_c : ld_align(s->ldc)};
    if (tuned_algo(b, g, s, epi, align, &g->algo)) {
        g->tuned = 1;
        *found = 1;
        return FHD_OK;
    }
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
    cublasLtMatmulHeuristicResult_t res[8];
    memset(res, 0, sizeof res);
    int n = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(b->lt, g->desc, g->la, g->lb, g->lc, g->lc, pref, 8, res,
                                            &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && n > 0) {
        /* Small GEMMs are latency-bound: a split-K algorithm adds a reduction kernel to the
         * chain, so take the best one without split-K when the heuristic offers it. */
        int pick = 0;
        if ((double)s->m * s->n * s->k <= (double)(1u << 28)) {
            for (int i = 0; i < n; i++) {
                int32_t sk = 1;
                size_t wr = 0;
                if (res[i].state != CUBLAS_STATUS_SUCCESS)
                    continue;
                if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo,
                                                         CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                                         sizeof sk, &wr) == CUBLAS_STATUS_SUCCESS &&
                    sk <= 1) {
                    pick = i;
                    break;
                }
            }
        }
        g->algo = res[pick].algo;
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
    /* a fused bias epilogue first; without one, a plain GEMM and fhd__cuda_bias_act */
    FHD_TRY(try_plan(b, g, s, s->epilogue, &found));
    if (!found && s->epilogue != FHD_EPI_NONE && s->batch <= 1) {
        fhd__gemm_destroy(g);
        FHD_TRY(try_plan(b, g, s, FHD_EPI_NONE, &found));
        g->fallback = 1;
    }
    if (!found) {
        fhd__gemm_destroy(g);
        return fhd__cuda_failf(b, FHD_ERR_DEVICE,
                               "cuBLASLt has no algorithm for a %s GEMM m=%u n=%u k=%u (op %c%c, "
                               "lda %u ldb %u ldc %u)",
                               s->tf32 ? "TF32" : "FP32", s->m, s->n, s->k,
                               s->opa == CUBLAS_OP_N ? 'N' : 'T', s->opb == CUBLAS_OP_N ? 'N' : 'T',
                               s->lda, s->ldb, s->ldc);
    }
    g->A = s->A;
    g->B = s->B;
    g->C = s->C;
    g->alpha = s->alpha;
    g->bias = s->bias;
    g->rows = s->n;
    g->out = s->m;
    g->ld = s->ldc;
    g->relu = s->epilogue == FHD_EPI_BIAS_RELU;
    if (s->epilogue == FHD_EPI_NONE)
        g->fallback = 0;
    g->ready = 1;
    return FHD_OK;
}

int32_t fhd__gemm_plan_transpose(fhd__backend *b, fhd__gemm *g, const float *A, uint32_t rows,
                                 uint32_t cols, float *C) {
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
        FHD_CK(b, fhd__cuda_narrow_linear(g->C, g->ld, g->B, g->ldb, g->A, g->bias, g->alpha,
                                          g->rows, g->in, g->out, stream));
        return FHD_OK;
    }
    FHD_CKB(b, cublasLtMatmul(b->lt, g->desc, g->host_alpha ? &one : g->alpha, g->A, g->la, g->B,
                              g->lb, g->host_alpha ? &zero : b->d_zero, g->C, g->lc, g->C, g->lc,
                              &g->algo, workspace, FHD_CUDA_WORKSPACE_BYTES, stream));
    if (g->fallback)
        FHD_CK(b, fhd__cuda_bias_act(g->C, g->bias, g->rows, g->out, g->ld, g->relu, stream));
    return FHD_OK;
}

static void forward_spec(fhd__backend *b, fhd__gemm_spec *sp, int net, uint32_t l, uint32_t rows,
                         const float *x, float *y, const float *alpha) {
    const fhd__layer *ly = &b->lo.layers[l];
    const float *base = b->params + (net ? b->T : 0);
    fhd__gemm_spec &s = *sp;
    memset(&s, 0, sizeof s);
    s.tf32 = b->tf32_fwd;
    s.opa = CUBLAS_OP_T;
    s.opb = CUBLAS_OP_N;
    s.m = ly->out;
    s.n = rows;
    s.k = ly->in;
    s.A = base + ly->w_off;
    s.lda = ly->in;
    s.B = x;
    s.ldb = ly->in;
    s.C = y;
    s.ldc = l == b->lo.L ? b->HOs : ly->out; /* head outputs: 16-byte aligned rows */
    s.alpha = alpha;
    s.epilogue = l < b->lo.L ? FHD_EPI_BIAS_RELU : FHD_EPI_BIAS;
    s.bias = base + ly->b_off;
}

int32_t fhd__gemm_plan_forward_pair(fhd__backend *b, fhd__gemm *g, uint32_t l, uint32_t rows,
                                    const float *x, int64_t sx, float *y, int64_t sy) {
    fhd__gemm_spec s;
    forward_spec(b, &s, 0, l, rows, x, y, b->d_one);
    s.batch = 2;
    s.stride_a = (int64_t)b->T; /* the target network: the same layout T floats on */
    s.stride_bias = (int64_t)b->T;
    s.stride_b = sx;
    s.stride_c = sy;
    return fhd__gemm_plan(b, g, &s);
}

/* A head planned as fhd__cuda_narrow_linear rather than a cuBLASLt GEMM. */
static int head_narrow(const fhd__backend *b, uint32_t rows) {
    const fhd__layer *ly = &b->lo.layers[b->lo.L];
    return ly->out <= FHD_NARROW_MAX_OUT && (uint64_t)rows * ly->in <= FHD_NARROW_MAX_X;
}

int32_t fhd__gemm_plan_forward(fhd__backend *b, fhd__gemm *g, int net, uint32_t l, uint32_t rows,
                               const float *x, float *y, const float *alpha) {
    const fhd__layer *ly = &b->lo.layers[l];
    fhd__gemm_spec s;
    forward_spec(b, &s, net, l, rows, x, y, alpha);
    if (l == b->lo.L && head_narrow(b, rows)) {
        /* a head of a few outputs: cuBLASLt's tiles would be mostly padding (see linear.cuh) */
        memset(g, 0, sizeof(*g));
        g->narrow = 1;
        g->A = s.A;
        g->B = x;
        g->C = y;
        g->alpha = alpha;
        g->bias = s.bias;
        g->rows = rows;
        g->out = ly->out;
        g->in = ly->in;
        g->ld = s.ldc;
        g->ldb = s.ldb;
        g->ready = 1;
        return FHD_OK;
    }
    return fhd__gemm_plan(b, g, &s);
}
