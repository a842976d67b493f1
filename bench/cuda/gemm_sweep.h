/* gemm_sweep.h - what the parts of gemm_sweep share (gemm_sweep.cpp's comment says what the tool
 * measures and how it is run): the error checks, a call site, a configuration of cuBLASLt and a
 * site's operands, and the functions of each part:
 *   gemm_sweep_time.cpp    operands and the graph-replay timing of one GEMM
 *   gemm_sweep_all.cpp     the configuration space and the exhaustive screen ("all")
 *   gemm_sweep_site.cpp    one site's sweep (the heuristic's list, or "all"), the epilogue probe
 *   gemm_sweep_pair.cpp    two sites timed running together ("pair")
 *   gemm_sweep.cpp         the presets' call sites and main
 */
#ifndef FHD_GEMM_SWEEP_H
#define FHD_GEMM_SWEEP_H

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)
#define CKB(x)                                                                                 \
    do {                                                                                       \
        cublasStatus_t s_ = (x);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            printf("FAIL %s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)s_);                    \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* One GEMM of the update: C (m x n, ldc) = op(A) op(B) with K = k. */
struct site {
    const char *name;
    cublasOperation_t opa, opb;
    uint32_t m, n, k, lda, ldb, ldc;
    int epi; /* 0 none, 1 bias, 2 bias + relu, 3 bias + relu + ReLU mask out (RELU_AUX_BIAS),
              * 4 ReLU gradient from that mask + bias gradient (DRELU_BGRAD) */
};

/* A configuration of one algorithm (the fields of the autotune cache of cuda_autotune.cpp),
 * with its screening and its second timing (-1: not timed or failed) and kernels a GEMM. */
struct config {
    cublasLtMatmulAlgo_t algo;
    int32_t id, sk;
    uint32_t tile, stages, red, swz, custom;
    uint16_t inner, cluster; /* sm90 kernels' inner and cluster shape ids (0: the default) */
    float quick, us;
    size_t kernels;
};

/* A call site's operands, output and descriptors (random data), with the heuristic's list. */
struct site_ctx {
    float *A, *B, *bias, *C, *ref;
    void *aux;
    size_t nc;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t res[32];
    int n;
};

/* gemm_sweep_time.cpp */
float replay_us(cudaGraphExec_t exec, cudaStream_t st, int per, int reps);
float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, const float *A,
                cublasLtMatrixLayout_t la, const float *B, cublasLtMatrixLayout_t lb, float *C,
                cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb,
                cudaStream_t st, int per, int reps, size_t *kernels);
void ctx_open(cublasLtHandle_t lt, const site &s, int tf32, size_t wsb, site_ctx *x);
void ctx_close(site_ctx *x);
bool reproducible(cublasLtHandle_t lt, const site_ctx &x, const config &c, void *ws, size_t wsb,
                  cudaStream_t st);

/* gemm_sweep_all.cpp */
void config_name(const config &c, char *buf, size_t n);
std::vector<config> enumerate_configs(cublasLtHandle_t lt, const site &s, int tf32,
                                      cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                      size_t wsb);
int library_pick(const site &s, const cublasLtMatmulHeuristicResult_t *res, int nres);
config config_of(const cublasLtMatmulAlgo_t *algo);
/* Every attribute equal (the inner and cluster shapes too). */
bool same_config(const config &x, const config &y);
/* The heuristic's results appended to cands where not there yet: their inner and cluster
 * shapes are configurations that enumerate_configs (shape ids left at 0) does not produce. */
void add_heuristic_configs(std::vector<config> &cands, const cublasLtMatmulHeuristicResult_t *res,
                           int nres, size_t wsb);
void sweep_exhaustive(cublasLtHandle_t lt, const char *preset, const site &s, int tf32,
                      cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const float *A,
                      const float *B, float *C, float *ref, size_t nc,
                      const cublasLtMatmulHeuristicResult_t *res, int nres, void *ws, size_t wsb,
                      cudaStream_t st);

/* gemm_sweep_site.cpp: all false, the heuristic's list; true, the exhaustive screen */
void sweep(cublasLtHandle_t lt, const char *preset, const site &s, int tf32, bool all, void *ws,
           size_t wsb, cudaStream_t st);
void probe_epilogues(cublasLtHandle_t lt, uint32_t H, uint32_t B);

/* gemm_sweep_pair.cpp */
void sweep_pair(cublasLtHandle_t lt, const char *preset, const site &sx, const site &sy, int tf32,
                void *ws, void *ws2, size_t wsb, cudaStream_t st, cudaStream_t st2);

#endif
