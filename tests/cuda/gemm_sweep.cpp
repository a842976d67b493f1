/* gemm_sweep.cpp - every cuBLASLt algorithm the heuristic offers for each GEMM of the update of
 * the DESIGN.md presets, timed on random data (not a test: a measurement that informs how
 * cuda_gemm.cpp picks algorithms). For each call site: the candidates in the heuristic's order
 * with tile id, stages, split-K, median microseconds per GEMM (20 launches replayed as one
 * captured graph, 15 repetitions after 3), and whether the output equals the first
 * candidate's bit for bit.
 *
 *   gemm_sweep [PRESET ...]     PRESET in B1 B3 B2 B2-tf32 (default: all)
 *   GEMM_SWEEP_EPI=1 gemm_sweep ...   only the sites with a ReLU-mask epilogue alternative
 */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

struct site {
    const char *name;
    cublasOperation_t opa, opb;
    uint32_t m, n, k, lda, ldb, ldc;
    int epi; /* 0 none, 1 bias, 2 bias + relu, 3 bias + relu + ReLU mask out (RELU_AUX_BIAS),
              * 4 ReLU gradient from that mask + bias gradient (DRELU_BGRAD) */
};

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

static void sweep(cublasLtHandle_t lt, const char *preset, const site &s, int tf32, void *ws,
                  size_t wsb, cudaStream_t st) {
    const bool ta = s.opa != CUBLAS_OP_N, tb = s.opb != CUBLAS_OP_N;
    const size_t na = (size_t)s.lda * (ta ? s.m : s.k), nb = (size_t)s.ldb * (tb ? s.k : s.n);
    const size_t nc = (size_t)s.ldc * s.n;
    float *A = rand_buf(na, 1), *B = rand_buf(nb, 2), *bias = rand_buf(s.m, 3), *C, *ref;
    CK(cudaMalloc(&C, nc * 4));
    CK(cudaMalloc(&ref, nc * 4));
    cublasLtMatmulDesc_t desc;
    CKB(cublasLtMatmulDescCreate(&desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                 CUDA_R_32F));
    int32_t oa = s.opa, ob = s.opb;
    CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    void *aux = NULL;
    if (s.epi) {
        static const uint32_t epis[] = {0, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                                        CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
                                        CUBLASLT_EPILOGUE_DRELU_BGRAD};
        uint32_t e = epis[s.epi];
        CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
        const void *bp = bias;
        CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
        if (s.epi >= 3) { /* the ReLU mask: one bit per output, ld a multiple of 128 */
            const int64_t ld = ((s.m + 127) / 128) * 128;
            CK(cudaMalloc(&aux, (size_t)ld * s.n / 8));
            CK(cudaMemset(aux, 0x5a, (size_t)ld * s.n / 8));
            CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                               sizeof aux));
            CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                               sizeof ld));
        }
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CKB(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? s.k : s.m, ta ? s.m : s.k, s.lda));
    CKB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? s.n : s.k, tb ? s.k : s.n, s.ldb));
    CKB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.m, s.n, s.ldc));
    cublasLtMatmulPreference_t pref;
    CKB(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsb;
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                             sizeof w));
    cublasLtMatmulHeuristicResult_t res[32];
    int n = 0;
    CKB(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, res, &n));
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> href(nc), hc(nc);
    static const char *epin[] = {"", " +bias", " +bias+relu", " RELU_AUX_BIAS", " DRELU_BGRAD"};
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
         * measure the host's launch path, ~11 us a call, not the kernel), 15 repetitions
         * after 3 */
        std::vector<float> t(15);
        bool ok = cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, out, lc, out, lc,
                                 &res[i].algo, ws, wsb, st) == CUBLAS_STATUS_SUCCESS;
        CK(cudaStreamSynchronize(st));
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        if (ok) {
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            for (int k = 0; k < 20 && ok; k++)
                ok = cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, out, lc, out, lc,
                                    &res[i].algo, ws, wsb, st) == CUBLAS_STATUS_SUCCESS;
            CK(cudaStreamEndCapture(st, &graph));
            ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
        }
        size_t nodes = 0; /* kernels per GEMM: a separate epilogue or split-K reduction shows */
        if (graph)
            CK(cudaGraphGetNodes(graph, NULL, &nodes));
        for (int r = 0; r < 18 && ok; r++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaGraphLaunch(exec, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 3)
                t[r - 3] = ms * 1000.0f / 20.0f;
        }
        if (exec)
            cudaGraphExecDestroy(exec);
        if (graph)
            cudaGraphDestroy(graph);
        if (!ok) {
            printf("  #%-2d failed to run\n", i);
            continue;
        }
        std::sort(t.begin(), t.end());
        bool same = true;
        if (i > 0) {
            CK(cudaMemcpy(href.data(), ref, nc * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hc.data(), C, nc * 4, cudaMemcpyDeviceToHost));
            for (uint32_t col = 0; col < s.n && same; col++)
                same = memcmp(&href[(size_t)col * s.ldc], &hc[(size_t)col * s.ldc], 4 * s.m) == 0;
        }
        printf("  #%-2d tile %3d stages %3d splitK %2d  %8.2f us  %zu kernel(s)  %s\n", i, tile,
               stages, sk, t[7], nodes / 20, same ? "bitwise = #0" : "differs from #0");
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(A);
    cudaFree(B);
    cudaFree(bias);
    cudaFree(C);
    cudaFree(ref);
    if (aux)
        cudaFree(aux);
    fflush(stdout);
}

/* Does cuBLASLt offer fp32 algorithms for the backward epilogues (ReLU-gradient with bias
 * gradient on the dx GEMM, bias gradient on the dW GEMM) and the forward's ReLU mask output? */
static void probe_epilogues(cublasLtHandle_t lt, uint32_t H, uint32_t B) {
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

/* The update's call sites for an MLP S -> H -> H -> HO, batch B, with online(s) and online(s')
 * as 2B rows (as cuda_setup.cpp plans them). */
static void preset(cublasLtHandle_t lt, const char *name, uint32_t S, uint32_t H, uint32_t HO,
                   uint32_t B, int tf32, void *ws, size_t wsb, cudaStream_t st) {
    const uint32_t HOs = (HO + 3) & ~3u;
    const site sites[] = {
        {"fwd0 online", CUBLAS_OP_T, CUBLAS_OP_N, H, 2 * B, S, S, S, H, 2},
        {"fwd1 online", CUBLAS_OP_T, CUBLAS_OP_N, H, 2 * B, H, H, H, H, 2},
        {"head online", CUBLAS_OP_T, CUBLAS_OP_N, HO, 2 * B, H, H, H, HOs, 1},
        {"fwd0 target", CUBLAS_OP_T, CUBLAS_OP_N, H, B, S, S, S, H, 2},
        {"fwd1 target", CUBLAS_OP_T, CUBLAS_OP_N, H, B, H, H, H, H, 2},
        {"head target", CUBLAS_OP_T, CUBLAS_OP_N, HO, B, H, H, H, HOs, 1},
        {"dW head", CUBLAS_OP_N, CUBLAS_OP_T, H, HO, B, H, HOs, H, 0},
        {"dx head", CUBLAS_OP_N, CUBLAS_OP_N, H, B, HO, H, HOs, H, 0},
        {"dW1", CUBLAS_OP_N, CUBLAS_OP_T, H, H, B, H, H, H, 0},
        /* with a TF32 backward the plan transposes dz first (cuda_internal.h, dzt): K, the
         * batch, contiguous in the second operand */
        {"dW1 dz^T", CUBLAS_OP_N, CUBLAS_OP_N, H, H, B, H, B, H, 0},
        {"dx1", CUBLAS_OP_N, CUBLAS_OP_N, H, B, H, H, H, H, 0},
        {"dW0", CUBLAS_OP_N, CUBLAS_OP_T, S, H, B, S, H, S, 0},
        /* the ReLU-mask alternative to the ReLU-backward kernel: the torso's forward writes
         * the mask, the dx GEMMs apply it and reduce the bias gradient */
        {"fwd0 online", CUBLAS_OP_T, CUBLAS_OP_N, H, 2 * B, S, S, S, H, 3},
        {"fwd1 online", CUBLAS_OP_T, CUBLAS_OP_N, H, 2 * B, H, H, H, H, 3},
        {"dx head", CUBLAS_OP_N, CUBLAS_OP_N, H, B, HO, H, HOs, H, 4},
        {"dx1", CUBLAS_OP_N, CUBLAS_OP_N, H, B, H, H, H, H, 4},
    };
    /* GEMM_SWEEP_EPI=1: only the sites that have a mask alternative (a site of the same name
     * with epilogue 3 or 4), both ways */
    const bool only = getenv("GEMM_SWEEP_EPI") != NULL;
    for (const site &s : sites) {
        bool masked = false;
        for (const site &o : sites)
            masked = masked || (o.epi >= 3 && !strcmp(o.name, s.name));
        if (!only || masked)
            sweep(lt, name, s, tf32, ws, wsb, st);
    }
}

int main(int argc, char **argv) {
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || nd == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    cublasLtHandle_t lt;
    CKB(cublasLtCreate(&lt));
    const size_t wsb = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, wsb));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    auto want = [&](const char *p) {
        if (argc == 1)
            return true;
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], p))
                return true;
        return false;
    };
    if (want("epilogues")) {
        probe_epilogues(lt, 256, 256);
        probe_epilogues(lt, 1024, 8192);
    }
    if (want("B1"))
        preset(lt, "B1", 64, 256, 9, 256, 0, ws, wsb, st);
    if (want("B3"))
        preset(lt, "B3", 64, 512, 21, 1024, 0, ws, wsb, st);
    if (want("B2"))
        preset(lt, "B2", 256, 1024, 33, 8192, 0, ws, wsb, st);
    if (want("B2-tf32"))
        preset(lt, "B2", 256, 1024, 33, 8192, 1, ws, wsb, st);
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
