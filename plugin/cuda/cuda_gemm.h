/* cuda_gemm.h - the CUDA backend's GEMM plans: one cuBLASLt call site each, its descriptors
 * and algorithm (cuda_gemm.cpp), the algorithm's configuration as the autotune cache stores it
 * and the autotune that picks it (cuda_autotune.cpp, cuda_autotune_cache.cpp). C++17, host side.
 */
#ifndef FHD_CUDA_GEMM_H
#define FHD_CUDA_GEMM_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdint.h>

extern "C" {
#include "backend.h"
}

/* One GEMM call site, column-major terms: C (m, n) = alpha op(A) (m, k) op(B) (k, n) [+ bias,
 * ReLU]. Descriptors and the algorithm are chosen once, before any graph capture. */
/* The operand types of a GEMM (fhd__gemm_spec.bf16): fp32 (or TF32), or matmul_precision
 * "bf16": A and B bf16, fp32 accumulation, C either fp32 (FHD_GEMM_BF16_IN) or bf16 with a
 * bf16 bias (FHD_GEMM_BF16_OUT: a hidden layer's forward, its output the next GEMM's operand). */
enum { FHD_GEMM_FP32 = 0, FHD_GEMM_BF16_IN = 1, FHD_GEMM_BF16_OUT = 2 };

typedef struct fhd__gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    const void *A, *B;  /* float, or bf16 (bf16 != 0) */
    void *C;            /* float, or bf16 (FHD_GEMM_BF16_OUT) */
    int bf16;           /* FHD_GEMM_* */
    const float *alpha; /* device scalar: 1, or 1/sigma of a normalised layer */
    /* epilogue done by fhd__cuda_bias_act when cuBLASLt has no bias epilogue for this call
     * (FHD_GEMM_BF16_OUT: the GEMM writes its fp32 product into C32, fhd__cuda_bias_act_bf16
     * rounds it into C with the bf16 bias) */
    const void *bias;
    float *C32;
    uint32_t rows, out, ld;
    int relu, fallback;
    int host_alpha; /* alpha = 1 passed as a host scalar (CUBLASLT_POINTER_MODE_HOST) */
    /* where the algorithm came from (FHD_PICK_*), candidates timed, the pick's and the rule's
     * microseconds per launch when timed */
    int pick, candidates, not_rule; /* not_rule: another configuration than the rule's */
    float us, rule_us;
    /* a head's forward by fhd__cuda_narrow_linear instead of cuBLASLt (no descriptors then):
     * C = alpha (B A^T) + bias with B (rows, in; ld ldb), A (out, in) */
    int narrow;
    uint32_t in, ldb;
    /* a transposition by cublasLtMatrixTransform instead (fhd__gemm_plan_transpose: la, lc, A, C
     * and tdesc only) */
    cublasLtMatrixTransformDesc_t tdesc;
    int ready;
} fhd__gemm;

enum { FHD_EPI_NONE = 0, FHD_EPI_BIAS = 1, FHD_EPI_BIAS_RELU = 2 };

typedef struct fhd__gemm_spec {
    int tf32;                         /* FAST_TF32 compute */
    int bf16;                         /* FHD_GEMM_*: the types of A, B, C and bias */
    cublasOperation_t opa, opb;
    uint32_t m, n, k;
    const void *A, *B;
    void *C;
    uint32_t lda, ldb, ldc;
    const float *alpha;
    int epilogue;                     /* FHD_EPI_* */
    const void *bias;                 /* (m), C's type */
    float *C32; /* FHD_GEMM_BF16_OUT with an epilogue: fp32 scratch of C's shape for the
                 * fallback without one (fhd__gemm.C32) */
    /* strided batch (batch > 1): element strides between the batch's A, B, C and bias */
    uint32_t batch;
    int64_t stride_a, stride_b, stride_c, stride_bias;
    const char *site; /* the call site, for the plan ("dW1", "fwd0 online", ...) */
    int beside;       /* 1: off the critical path (a dW GEMM beside the dx chain) */
} fhd__gemm_spec;

/* The rule's pick among the heuristic's n results (cuda_gemm_rule.h); -1 when n is 0. */
int fhd__gemm_rule_pick(const fhd__gemm_spec *s, const cublasLtMatmulHeuristicResult_t *res,
                        int n);

/* An algorithm's configuration, as cuBLASLt's config attributes hold it (all of them: an
 * algorithm initialised from fewer, e.g. without the cluster shape, may be another kernel). */
typedef struct fhd__algo_config {
    int32_t id;
    uint32_t tile, stages;
    int32_t splitk;
    uint32_t reduction, swizzle, custom;
    uint16_t inner_shape, cluster_shape;
} fhd__algo_config;
void fhd__algo_config_get(const cublasLtMatmulAlgo_t *algo, fhd__algo_config *c);
/* Initialise *algo to configuration c for the types of spec s; 0 on success. */
int fhd__algo_config_set(fhd__backend *b, const fhd__gemm_spec *s, const fhd__algo_config *c,
                         cublasLtMatmulAlgo_t *algo);
/* The compute type and the cuBLASLt types of A (and B) and of C (and D) of spec s. */
void fhd__gemm_types(const fhd__gemm_spec *s, cublasComputeType_t *ct, cudaDataType_t *ab,
                     cudaDataType_t *c);

/* ---- the autotune (cuda_autotune.cpp, cuda_autotune_cache.cpp) ------------------------------ */

#define FHD_TUNE_MAX_RESULTS 64 /* heuristic results asked for by autotune "full" */
/* Begin / end the autotune of the update's GEMMs at create (b->tune; autotune "off": nothing):
 * begin resolves and reads the cache file, end writes the new picks to it and fills the plan's
 * autotune record. */
int32_t fhd__autotune_begin(fhd__backend *b);
void fhd__autotune_end(fhd__backend *b);
/* Replace g->algo (the rule's pick, res[rule]) by the cached or the fastest timed candidate for
 * spec s with epilogue epi; sets g->pick, candidates, us, rule_us. */
int32_t fhd__autotune_pick(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                           const cublasLtMatmulHeuristicResult_t *res, int n, int rule);

int32_t fhd__gemm_plan(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s);
int32_t fhd__gemm_run(fhd__backend *b, const fhd__gemm *g, cudaStream_t stream, void *workspace);
/* C (cols, rows) = A^T for A (rows, cols), both row-major and dense: run by fhd__gemm_run. */
int32_t fhd__gemm_plan_transpose(fhd__backend *b, fhd__gemm *g, const float *A, uint32_t rows,
                                 uint32_t cols, float *C, const char *site);
void fhd__gemm_destroy(fhd__gemm *g);
/* Plan the forward of layer l of network net (0 online, 1 target): y (rows, out) = x W^T + b,
 * ReLU on torso layers, alpha = 1/sigma on normalised layers. With bf16 GEMMs (b->bf.on) x is
 * bf16, W and a torso layer's bias the bf16 copy's, a torso layer's y bf16 (y32 its fp32
 * scratch for the epilogue fallback), the head's y fp32; else all fp32 (y32 unused). */
int32_t fhd__gemm_plan_forward(fhd__backend *b, fhd__gemm *g, int net, uint32_t l, uint32_t rows,
                               const void *x, void *y, float *y32, const float *alpha);
/* Layer l's forward of the online network (batch 0, into y) and of the target (batch 1, input
 * x + sx, output y + sy elements), both with alpha = 1, as one batched GEMM. */
int32_t fhd__gemm_plan_forward_pair(fhd__backend *b, fhd__gemm *g, uint32_t l, uint32_t rows,
                                    const void *x, int64_t sx, void *y, int64_t sy, float *y32);

#endif
