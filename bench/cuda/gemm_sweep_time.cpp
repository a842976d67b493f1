/* gemm_sweep_time.cpp - gemm_sweep's harness: a call site's operands on random data, its
 * descriptors and the heuristic's list (ctx_open), and the time of one GEMM configuration as
 * launches captured into one CUDA graph and replayed (eager launches would measure the host's
 * launch path, ~11 us a call, not the kernel). */
#include "gemm_sweep.h"

#include <algorithm>
#include <string.h>

/* n floats uniform in [-0.5, 0.5) from seed (an LCG), on the device. */
static float *rand_buf(size_t n, uint64_t seed) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((seed >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
    float *d;
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
    return d;
}

/* Microseconds per item of a graph of `per` items, replayed reps times after one warm-up
 * replay: the median (reps > 3) or the minimum. */
float replay_us(cudaGraphExec_t exec, cudaStream_t st, int per, int reps) {
    std::vector<float> t;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int r = 0; r <= reps; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0)
            t.push_back(ms * 1000.0f / (float)per);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(t.begin(), t.end());
    return reps > 3 ? t[t.size() / 2] : t[0];
}

/* Microseconds per GEMM of `per` launches captured as one graph, replayed reps times after one
 * warm-up replay: the median (reps > 3) or the minimum; -1 when the configuration fails to run. */
float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, const float *A,
                cublasLtMatrixLayout_t la, const float *B, cublasLtMatrixLayout_t lb,
                float *C, cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t *algo,
                void *ws, size_t wsb, cudaStream_t st, int per, int reps, size_t *kernels) {
    const float one = 1.0f, zero = 0.0f;
    if (cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wsb, st) !=
        CUBLAS_STATUS_SUCCESS)
        return -1.0f;
    CK(cudaStreamSynchronize(st));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    bool ok = true;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < per && ok; k++)
        ok = cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wsb,
                            st) == CUBLAS_STATUS_SUCCESS;
    CK(cudaStreamEndCapture(st, &graph));
    ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    size_t nodes = 0;
    if (graph)
        CK(cudaGraphGetNodes(graph, NULL, &nodes));
    if (kernels)
        *kernels = nodes / (size_t)per;
    const float us = ok ? replay_us(exec, st, per, reps) : -1.0f;
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    return us;
}

/* Site s's operands (random data), output and descriptors, and the heuristic's list of at most
 * 32 within wsb bytes of workspace. */
void ctx_open(cublasLtHandle_t lt, const site &s, int tf32, size_t wsb, site_ctx *x) {
    const bool ta = s.opa != CUBLAS_OP_N, tb = s.opb != CUBLAS_OP_N;
    const size_t na = (size_t)s.lda * (ta ? s.m : s.k), nb = (size_t)s.ldb * (tb ? s.k : s.n);
    x->nc = (size_t)s.ldc * s.n;
    x->A = rand_buf(na, 1);
    x->B = rand_buf(nb, 2);
    x->bias = rand_buf(s.m, 3);
    CK(cudaMalloc(&x->C, x->nc * 4));
    CK(cudaMalloc(&x->ref, x->nc * 4));
    CKB(cublasLtMatmulDescCreate(&x->desc,
                                 tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                 CUDA_R_32F));
    int32_t oa = s.opa, ob = s.opb;
    CKB(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    CKB(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    x->aux = NULL;
    if (s.epi) {
        static const uint32_t epis[] = {0, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                                        CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
                                        CUBLASLT_EPILOGUE_DRELU_BGRAD};
        uint32_t e = epis[s.epi];
        CKB(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
        const void *bp = x->bias;
        CKB(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                           sizeof bp));
        if (s.epi >= 3) { /* the ReLU mask: one bit per output, ld a multiple of 128 */
            const int64_t ld = ((s.m + 127) / 128) * 128;
            CK(cudaMalloc(&x->aux, (size_t)ld * s.n / 8));
            CK(cudaMemset(x->aux, 0x5a, (size_t)ld * s.n / 8));
            CKB(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &x->aux, sizeof x->aux));
            CKB(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                               sizeof ld));
        }
    }
    CKB(cublasLtMatrixLayoutCreate(&x->la, CUDA_R_32F, ta ? s.k : s.m, ta ? s.m : s.k, s.lda));
    CKB(cublasLtMatrixLayoutCreate(&x->lb, CUDA_R_32F, tb ? s.n : s.k, tb ? s.k : s.n, s.ldb));
    CKB(cublasLtMatrixLayoutCreate(&x->lc, CUDA_R_32F, s.m, s.n, s.ldc));
    cublasLtMatmulPreference_t pref;
    CKB(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsb;
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                             sizeof w));
    x->n = 0;
    CKB(cublasLtMatmulAlgoGetHeuristic(lt, x->desc, x->la, x->lb, x->lc, x->lc, pref, 32, x->res,
                                       &x->n));
    cublasLtMatmulPreferenceDestroy(pref);
}

/* Frees what ctx_open made. */
void ctx_close(site_ctx *x) {
    cublasLtMatrixLayoutDestroy(x->la);
    cublasLtMatrixLayoutDestroy(x->lb);
    cublasLtMatrixLayoutDestroy(x->lc);
    cublasLtMatmulDescDestroy(x->desc);
    cudaFree(x->A);
    cudaFree(x->B);
    cudaFree(x->bias);
    cudaFree(x->C);
    cudaFree(x->ref);
    if (x->aux)
        cudaFree(x->aux);
}

/* Does configuration c give the same bits twice into a cleared output? */
bool reproducible(cublasLtHandle_t lt, const site_ctx &x, const config &c, void *ws,
                  size_t wsb, cudaStream_t st) {
    std::vector<float> h1(x.nc), h2(x.nc);
    for (int k = 0; k < 2; k++) {
        CK(cudaMemset(x.C, 0, x.nc * 4));
        time_algo(lt, x.desc, x.A, x.la, x.B, x.lb, x.C, x.lc, &c.algo, ws, wsb, st, 1, 1, NULL);
        CK(cudaMemcpy(k ? h2.data() : h1.data(), x.C, x.nc * 4, cudaMemcpyDeviceToHost));
    }
    return memcmp(h1.data(), h2.data(), x.nc * 4) == 0;
}
