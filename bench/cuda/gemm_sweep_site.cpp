/* gemm_sweep_site.cpp - one call site of gemm_sweep: the heuristic's candidates in its order,
 * each timed and compared bit for bit with the first (or, with all, the exhaustive screen of
 * gemm_sweep_all.cpp); and the probe of which fused epilogues cuBLASLt offers in fp32. */
#include "gemm_sweep.h"

#include <string.h>

/* Site s of preset: the heuristic's candidates (up to 32), or with all the exhaustive screen. */
void sweep(cublasLtHandle_t lt, const char *preset, const site &s, int tf32, bool all, void *ws,
           size_t wsb, cudaStream_t st) {
    site_ctx x;
    ctx_open(lt, s, tf32, wsb, &x);
    const cublasLtMatmulDesc_t desc = x.desc;
    const cublasLtMatrixLayout_t la = x.la, lb = x.lb, lc = x.lc;
    const float *A = x.A, *B = x.B;
    float *C = x.C, *ref = x.ref;
    const size_t nc = x.nc;
    const cublasLtMatmulHeuristicResult_t *res = x.res;
    int n = x.n;
    if (all) {
        if (n > 0)
            sweep_exhaustive(lt, preset, s, tf32, desc, la, lb, lc, A, B, C, ref, nc, res, n, ws,
                             wsb, st);
        n = 0; /* the heuristic's list is the default mode's */
    }
    std::vector<float> href(nc), hc(nc);
    static const char *epin[] = {"", " +bias", " +bias+relu", " RELU_AUX_BIAS", " DRELU_BGRAD"};
    if (!all)
        printf("%s %s%s%s m=%u n=%u k=%u: %d candidates\n", preset, s.name, tf32 ? " tf32" : "",
           epin[s.epi], s.m, s.n, s.k, n);
    for (int i = 0; i < n; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        int32_t tile = -1, stages = -1, sk = -1;
        size_t wr;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &wr);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &wr);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                             sizeof sk, &wr);
        float *out = i == 0 ? ref : C;
        /* 20 launches captured into one graph and timed as graph replays (eager launches
         * measure the host's launch path, ~11 us a call, not the kernel): median of 15 */
        size_t kernels = 0; /* a separate epilogue or split-K reduction shows */
        const float us = time_algo(lt, desc, A, la, B, lb, out, lc, &res[i].algo, ws, wsb, st, 20,
                                   15, &kernels);
        if (us < 0) {
            printf("  #%-2d failed to run\n", i);
            continue;
        }
        bool same = true;
        if (i > 0) {
            CK(cudaMemcpy(href.data(), ref, nc * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hc.data(), C, nc * 4, cudaMemcpyDeviceToHost));
            for (uint32_t col = 0; col < s.n && same; col++)
                same = memcmp(&href[(size_t)col * s.ldc], &hc[(size_t)col * s.ldc], 4 * s.m) == 0;
        }
        printf("  #%-2d tile %3d stages %3d splitK %2d  %8.2f us  %zu kernel(s)  %s\n", i, tile,
               stages, sk, us, kernels, same ? "bitwise = #0" : "differs from #0");
    }
    ctx_close(&x);
    fflush(stdout);
}

/* Does cuBLASLt offer fp32 algorithms for the backward epilogues (ReLU-gradient with bias
 * gradient on the dx GEMM, bias gradient on the dW GEMM) and the forward's ReLU mask output? */
void probe_epilogues(cublasLtHandle_t lt, uint32_t H, uint32_t B) {
    struct { const char *name; uint32_t epi; cublasOperation_t opa, opb; uint32_t m, n, k; } c[] = {
        {"forward RELU_AUX_BIAS", CUBLASLT_EPILOGUE_RELU_AUX_BIAS, CUBLAS_OP_T, CUBLAS_OP_N, H, B, H},
        {"dx DRELU_BGRAD", CUBLASLT_EPILOGUE_DRELU_BGRAD, CUBLAS_OP_N, CUBLAS_OP_N, H, B, H},
        {"dx DRELU", CUBLASLT_EPILOGUE_DRELU, CUBLAS_OP_N, CUBLAS_OP_N, H, B, H},
        {"dW BGRADB", CUBLASLT_EPILOGUE_BGRADB, CUBLAS_OP_N, CUBLAS_OP_T, H, H, B},
        {"dW BGRADA", CUBLASLT_EPILOGUE_BGRADA, CUBLAS_OP_N, CUBLAS_OP_T, H, H, B},
    };
    void *aux, *bias;
    CK(cudaMalloc(&aux, (size_t)H * B * 4));
    CK(cudaMalloc(&bias, (size_t)H * 4));
    for (int tf = 0; tf < 2; tf++)
        for (auto &e : c) {
            cublasLtMatmulDesc_t desc;
            CKB(cublasLtMatmulDescCreate(&desc, tf ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                         CUDA_R_32F));
            int32_t oa = e.opa, ob = e.opb;
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e.epi, sizeof e.epi);
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                           sizeof aux);
            int64_t ld = ((e.m + 127) / 128) * 128;
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
            const bool ta = e.opa != CUBLAS_OP_N, tb = e.opb != CUBLAS_OP_N;
            cublasLtMatrixLayout_t la, lb, lc;
            cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? e.k : e.m, ta ? e.m : e.k, ta ? e.k : e.m);
            cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? e.n : e.k, tb ? e.k : e.n, tb ? e.n : e.k);
            cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, e.m, e.n, e.m);
            cublasLtMatmulPreference_t pref;
            cublasLtMatmulPreferenceCreate(&pref);
            uint64_t w = 32u << 20;
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                                 sizeof w);
            cublasLtMatmulHeuristicResult_t res[8];
            int n = 0;
            cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, res, &n);
            printf("epilogue %-22s %s m=%u n=%u k=%u: status %d, %d algorithms\n", e.name,
                   tf ? "tf32" : "fp32", e.m, e.n, e.k, (int)s, n);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(desc);
        }
    cudaFree(aux);
    cudaFree(bias);
    fflush(stdout);
}
