/* gemm_sweep.cpp - every cuBLASLt algorithm the heuristic offers for each GEMM of the update of
 * the presets (docs/design.md section 6), timed on random data (not a test: a measurement that
 * informs how cuda_gemm.cpp and cuda_autotune.cpp pick algorithms). For each call site: the
 * candidates in the heuristic's order with tile id, stages, split-K, median microseconds per
 * GEMM (20 launches replayed as one captured graph, 15 repetitions after one), and whether the
 * output equals the first candidate's bit for bit.
 *
 *   gemm_sweep [PRESET ...]     PRESET in C0 B1 B3 B2 B2-tf32 (default: all)
 *   GEMM_SWEEP_EPI=1 gemm_sweep ...   only the sites with a ReLU-mask epilogue alternative
 *   gemm_sweep all PRESET ...   every configuration cuBLASLt accepts (all algorithm ids, tiles,
 *                               stages, split-K counts with each reduction scheme, CTA
 *                               swizzling, custom options), each screened with one replay of
 *                               about 2 ms of launches, the fastest 12 timed again and checked
 *                               to reproduce their bits; beside the pick of cuda_gemm.cpp's rule,
 *                               with a line "TUNED {...}" where one beats it (the fields of a
 *                               configuration: algo, tile, stages, split-K, reduction, swizzle,
 *                               custom, as the autotune cache of cuda_autotune.cpp holds them)
 *   GEMM_SWEEP_SITE=NAME gemm_sweep all ...   one call site ("fwd1 online", "dx1 half", ...)
 *   GEMM_SWEEP_B2_HO=N gemm_sweep ... B2     B2's head with N outputs (default 33)
 *   gemm_sweep pair PRESET ...  the online and the target forward of each layer, which the update
 *                               runs at once: each site's library pick and its 8 fastest
 *                               configurations alone, every pair timed running together on two
 *                               streams, with "TUNED" lines where a pair beats the picks' pair
 *   GEMM_SWEEP_PAIR="NAME,NAME" gemm_sweep pair ...   one pair of sites, every pair printed
 */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
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

static bool g_all = false; /* "all": the exhaustive search instead of the heuristic's list */
static bool g_pair = false; /* "pair": two sites timed running together */
static void *g_ws2;         /* the second GEMM's workspace in "pair" mode */
static cudaStream_t g_st2;

/* Microseconds per item of a graph of `per` items, replayed reps times after one warm-up
 * replay: the median (reps > 3) or the minimum. */
static float replay_us(cudaGraphExec_t exec, cudaStream_t st, int per, int reps) {
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
static float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, const float *A,
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

struct config {
    cublasLtMatmulAlgo_t algo;
    int32_t id, sk;
    uint32_t tile, stages, red, swz, custom;
    float quick, us;
    size_t kernels;
};

static void config_name(const config &c, char *buf, size_t n) {
    snprintf(buf, n, "algo %2d tile %3u stages %3u splitK %2d red %u swz %u custom %u", c.id,
             c.tile, c.stages, c.sk, c.red, c.swz, c.custom);
}

/* The configuration's attributes into c.algo (set) or out of it. */
static void config_attrs(config *c, bool set) {
    const struct {
        cublasLtMatmulAlgoConfigAttributes_t attr;
        void *v;
        size_t n;
    } f[] = {{CUBLASLT_ALGO_CONFIG_TILE_ID, &c->tile, sizeof c->tile},
             {CUBLASLT_ALGO_CONFIG_STAGES_ID, &c->stages, sizeof c->stages},
             {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c->sk, sizeof c->sk},
             {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c->red, sizeof c->red},
             {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c->swz, sizeof c->swz},
             {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c->custom, sizeof c->custom}};
    for (const auto &x : f) {
        size_t wr;
        if (set)
            cublasLtMatmulAlgoConfigSetAttribute(&c->algo, x.attr, x.v, x.n);
        else
            cublasLtMatmulAlgoConfigGetAttribute(&c->algo, x.attr, x.v, x.n, &wr);
    }
}

/* Every configuration AlgoCheck accepts for this site: all algorithm ids, tiles, stages,
 * split-K counts with each reduction scheme, CTA swizzling, custom options. */
static std::vector<config> enumerate_configs(cublasLtHandle_t lt, const site &s, int tf32,
                                             cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                             cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                             size_t wsb) {
    const cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int ids[256], nids = 0;
    CKB(cublasLtMatmulAlgoGetIds(lt, ct, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                 CUDA_R_32F, 256, ids, &nids));
    std::vector<config> cands;
    static const int32_t splits[] = {1, 2, 3, 4, 6, 8, 12, 16};
    static const uint32_t reds[] = {CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE};
    for (int a = 0; a < nids; a++) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(lt, ct, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                   CUDA_R_32F, ids[a], &algo) != CUBLAS_STATUS_SUCCESS)
            continue;
        size_t sz = 0;
        std::vector<uint32_t> tiles, stages;
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &sz) ==
                CUBLAS_STATUS_SUCCESS && sz > 0) {
            tiles.resize(sz / sizeof(uint32_t));
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data(), sz,
                                              &sz);
        }
        if (tiles.empty())
            tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, NULL, 0, &sz) ==
                CUBLAS_STATUS_SUCCESS && sz > 0) {
            stages.resize(sz / sizeof(uint32_t));
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages.data(),
                                              sz, &sz);
        }
        if (stages.empty())
            stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
        int32_t splitk = 0, swz_ok = 0, cmax = 0;
        uint32_t redmask = 0;
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk,
                                          sizeof splitk, &sz);
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &redmask,
                                          sizeof redmask, &sz);
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok,
                                          sizeof swz_ok, &sz);
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &cmax,
                                          sizeof cmax, &sz);
        for (uint32_t tile : tiles)
            for (uint32_t stg : stages)
                for (uint32_t swz = 0; swz <= (swz_ok ? 1u : 0u); swz++)
                    for (uint32_t cu = 0; cu <= (uint32_t)(cmax < 7 ? cmax : 7); cu++)
                        for (int32_t sk : splits) {
                            if (sk > 1 && !splitk)
                                break;
                            if (sk > 1 && (uint32_t)sk * 8 > s.k)
                                break;
                            for (uint32_t r = 0; r < (sk > 1 ? 3u : 1u); r++) {
                                const uint32_t red = sk > 1 ? reds[r] : 0u;
                                if (sk > 1 && !(redmask & red))
                                    continue;
                                config c;
                                c.algo = algo;
                                c.sk = sk;
                                c.tile = tile;
                                c.stages = stg;
                                c.red = red;
                                c.swz = swz;
                                c.custom = cu;
                                config_attrs(&c, true);
                                cublasLtMatmulHeuristicResult_t hr;
                                memset(&hr, 0, sizeof hr);
                                if (cublasLtMatmulAlgoCheck(lt, desc, la, lb, lc, lc, &c.algo,
                                                            &hr) != CUBLAS_STATUS_SUCCESS ||
                                    hr.workspaceSize > wsb)
                                    continue;
                                c.id = ids[a];
                                c.quick = c.us = -1.0f;
                                c.kernels = 0;
                                cands.push_back(c);
                            }
                        }
    }
    return cands;
}

/* The pick of cuda_gemm.cpp's rule: the heuristic's first of 8, or for m n k <= 2^28 its first
 * without split-K. */
static int library_pick(const site &s, const cublasLtMatmulHeuristicResult_t *res, int nres) {
    if ((double)s.m * s.n * s.k <= (double)(1u << 28))
        for (int i = 0; i < nres && i < 8; i++) {
            int32_t sk = 1;
            size_t wr;
            if (res[i].state == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &sk, sizeof sk, &wr) ==
                    CUBLAS_STATUS_SUCCESS &&
                sk <= 1)
                return i;
        }
    return 0;
}

/* A heuristic result as a config (its attributes read back). */
static config config_of(const cublasLtMatmulAlgo_t *algo) {
    config c;
    c.algo = *algo;
    size_t wr;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id, &wr);
    config_attrs(&c, false);
    c.quick = c.us = -1.0f;
    c.kernels = 0;
    return c;
}

/* Every configuration AlgoCheck accepts for this site (see the file's comment). */
static void sweep_exhaustive(cublasLtHandle_t lt, const char *preset, const site &s, int tf32,
                             cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                             cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const float *A,
                             const float *B, float *C, float *ref, size_t nc,
                             const cublasLtMatmulHeuristicResult_t *res, int nres, void *ws,
                             size_t wsb, cudaStream_t st) {
    std::vector<config> cands = enumerate_configs(lt, s, tf32, desc, la, lb, lc, wsb);
    int nids = 0;
    {
        int ids[256];
        CKB(cublasLtMatmulAlgoGetIds(lt, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                     CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                     256, ids, &nids));
    }
    const int lib = library_pick(s, res, nres);
    const cublasLtMatmulAlgo_t *heur = &res[lib].algo;
    const float h0 = time_algo(lt, desc, A, la, B, lb, ref, lc, heur, ws, wsb, st, 4, 5, NULL);
    /* about 2 ms of GEMMs per screening replay: 10 launches of the small ones, 1-3 of B2's */
    const int per = h0 > 1000.0f ? 1 : h0 > 200.0f ? (int)(2000.0f / h0) : 10;
    const float h = time_algo(lt, desc, A, la, B, lb, ref, lc, heur, ws, wsb, st, per * 2, 15, NULL);
    const config lc0 = config_of(heur);
    char lname[160];
    config_name(lc0, lname, sizeof lname);
    printf("%s %s%s m=%u n=%u k=%u: the library's pick (heuristic #%d: %s) %.2f us; %zu "
           "configurations from %d ids\n",
           preset, s.name, tf32 ? " tf32" : "", s.m, s.n, s.k, lib, lname, h, cands.size(), nids);
    fflush(stdout);
    for (config &c : cands)
        c.quick = time_algo(lt, desc, A, la, B, lb, C, lc, &c.algo, ws, wsb, st, per, 3, NULL);
    std::sort(cands.begin(), cands.end(), [](const config &x, const config &y) {
        if ((x.quick < 0) != (y.quick < 0))
            return y.quick < 0;
        return x.quick < y.quick;
    });
    std::vector<float> href(nc), hc(nc), hc2(nc);
    CK(cudaMemcpy(href.data(), ref, nc * 4, cudaMemcpyDeviceToHost));
    const size_t top = cands.size() < 12 ? cands.size() : 12;
    for (size_t i = 0; i < top; i++) {
        config &c = cands[i];
        if (c.quick < 0)
            break;
        CK(cudaMemset(C, 0, nc * 4));
        c.us = time_algo(lt, desc, A, la, B, lb, C, lc, &c.algo, ws, wsb, st, per * 2, 15,
                         &c.kernels);
        CK(cudaMemcpy(hc.data(), C, nc * 4, cudaMemcpyDeviceToHost));
        /* a second run into a cleared output: the same bits (no order-dependent reduction) */
        CK(cudaMemset(C, 0, nc * 4));
        time_algo(lt, desc, A, la, B, lb, C, lc, &c.algo, ws, wsb, st, 1, 1, NULL);
        CK(cudaMemcpy(hc2.data(), C, nc * 4, cudaMemcpyDeviceToHost));
        double maxd = 0.0;
        for (size_t e = 0; e < nc; e++) {
            const double d = fabs((double)hc[e] - (double)href[e]);
            maxd = d > maxd ? d : maxd;
        }
        char name[160];
        config_name(c, name, sizeof name);
        printf("  %s  screen %7.2f  %7.2f us  %zu kernel(s)  max|d| vs pick %.2e  %s\n", name,
               c.quick, c.us, c.kernels, maxd,
               memcmp(hc.data(), hc2.data(), nc * 4) ? "NOT reproducible" : "reproducible");
    }
    /* the fastest of the second timing, as a configuration line when it beats the
     * library's pick by 3% and 0.2 us */
    const config *best = NULL;
    for (size_t i = 0; i < top; i++)
        if (cands[i].us > 0 && (!best || cands[i].us < best->us))
            best = &cands[i];
    if (best && h > 0 && best->us < 0.97f * h && h - best->us > 0.2f) {
        static const char *epis[] = {"FHD_EPI_NONE", "FHD_EPI_BIAS", "FHD_EPI_BIAS_RELU"};
        printf("TUNED    {%u, %u, %u, %u, %u, %u, %u, %u, %u, %s, %d, %d, %u, %u, %d, %u, %u, %u}, "
               "/* %s %s: %.2f -> %.2f us */\n",
               s.opa == CUBLAS_OP_N ? 0u : 1u, s.opb == CUBLAS_OP_N ? 0u : 1u, s.m, s.n, s.k,
               s.lda, s.ldb, s.ldc, 1u, epis[s.epi], tf32, best->id, best->tile, best->stages,
               best->sk, best->red, best->swz, best->custom, preset, s.name, h, best->us);
    }
    fflush(stdout);
}

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

static void ctx_open(cublasLtHandle_t lt, const site &s, int tf32, size_t wsb, site_ctx *x) {
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

static void ctx_close(site_ctx *x) {
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

static void sweep(cublasLtHandle_t lt, const char *preset, const site &s, int tf32, void *ws,
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
    if (g_all) {
        if (n > 0)
            sweep_exhaustive(lt, preset, s, tf32, desc, la, lb, lc, A, B, C, ref, nc, res, n, ws,
                             wsb, st);
        n = 0; /* the heuristic's list is the default mode's */
    }
    std::vector<float> href(nc), hc(nc);
    static const char *epin[] = {"", " +bias", " +bias+relu", " RELU_AUX_BIAS", " DRELU_BGRAD"};
    if (!g_all)
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

/* Microseconds per pair of GEMMs run at once: x's with configuration cx on st, y's with cy on
 * st2 (a fork and a join each), `per` pairs captured as one graph, the median of `reps` replays
 * after one; -1 when one fails to run. */
static float time_pair(cublasLtHandle_t lt, const site_ctx &x, const config &cx, void *wsx,
                       const site_ctx &y, const config &cy, void *wsy, size_t wsb,
                       cudaStream_t st, cudaStream_t st2, int per, int reps) {
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    bool ok = true;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < per && ok; k++) {
        CK(cudaEventRecord(fork, st));
        CK(cudaStreamWaitEvent(st2, fork, 0));
        ok = cublasLtMatmul(lt, x.desc, &one, x.A, x.la, x.B, x.lb, &zero, x.C, x.lc, x.C, x.lc,
                            &cx.algo, wsx, wsb, st) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmul(lt, y.desc, &one, y.A, y.la, y.B, y.lb, &zero, y.C, y.lc, y.C, y.lc,
                            &cy.algo, wsy, wsb, st2) == CUBLAS_STATUS_SUCCESS;
        CK(cudaEventRecord(join, st2));
        CK(cudaStreamWaitEvent(st, join, 0));
    }
    if (cudaStreamEndCapture(st, &graph) != cudaSuccess)
        ok = false;
    ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    (void)cudaGetLastError();
    const float us = ok ? replay_us(exec, st, per, reps) : -1.0f;
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    return us;
}

/* The library's pick first, then the fastest `keep` other configurations of the site, each
 * screened alone. */
static std::vector<config> pair_candidates(cublasLtHandle_t lt, const site &s, int tf32,
                                           const site_ctx &x, void *ws, size_t wsb,
                                           cudaStream_t st, size_t keep) {
    std::vector<config> all = enumerate_configs(lt, s, tf32, x.desc, x.la, x.lb, x.lc, wsb);
    config pick = config_of(&x.res[library_pick(s, x.res, x.n)].algo);
    pick.quick = time_algo(lt, x.desc, x.A, x.la, x.B, x.lb, x.ref, x.lc, &pick.algo, ws, wsb, st,
                           10, 5, NULL);
    for (config &c : all)
        c.quick = time_algo(lt, x.desc, x.A, x.la, x.B, x.lb, x.C, x.lc, &c.algo, ws, wsb, st, 10,
                            3, NULL);
    std::sort(all.begin(), all.end(), [](const config &a, const config &b) {
        if ((a.quick < 0) != (b.quick < 0))
            return b.quick < 0;
        return a.quick < b.quick;
    });
    std::vector<config> out(1, pick);
    for (const config &c : all) {
        if (out.size() > keep || c.quick < 0)
            break;
        const bool same = c.id == pick.id && c.tile == pick.tile && c.stages == pick.stages &&
                          c.sk == pick.sk && c.red == pick.red && c.swz == pick.swz &&
                          c.custom == pick.custom;
        if (!same)
            out.push_back(c);
    }
    return out;
}

/* Does configuration c give the same bits twice into a cleared output? */
static bool reproducible(cublasLtHandle_t lt, const site_ctx &x, const config &c, void *ws,
                         size_t wsb, cudaStream_t st) {
    std::vector<float> h1(x.nc), h2(x.nc);
    for (int k = 0; k < 2; k++) {
        CK(cudaMemset(x.C, 0, x.nc * 4));
        time_algo(lt, x.desc, x.A, x.la, x.B, x.lb, x.C, x.lc, &c.algo, ws, wsb, st, 1, 1, NULL);
        CK(cudaMemcpy(k ? h2.data() : h1.data(), x.C, x.nc * 4, cudaMemcpyDeviceToHost));
    }
    return memcmp(h1.data(), h2.data(), x.nc * 4) == 0;
}

/* Two call sites that the update runs at once (the online and the target forward of a layer):
 * the pairs of their candidates, each pair timed running together, against the pair of the
 * library's picks. A configuration faster alone can lose beside another GEMM (bench/log/2026-11-results-rounds.md,
 * tenth round); what the update waits for is the later of the two. */
static void sweep_pair(cublasLtHandle_t lt, const char *preset, const site &sx, const site &sy,
                       int tf32, void *ws, void *ws2, size_t wsb, cudaStream_t st,
                       cudaStream_t st2) {
    site_ctx x, y;
    ctx_open(lt, sx, tf32, wsb, &x);
    ctx_open(lt, sy, tf32, wsb, &y);
    if (x.n > 0 && y.n > 0) {
        const size_t keep = 8;
        std::vector<config> cx = pair_candidates(lt, sx, tf32, x, ws, wsb, st, keep);
        std::vector<config> cy = pair_candidates(lt, sy, tf32, y, ws, wsb, st, keep);
        struct res_t {
            size_t i, j;
            float us;
        };
        std::vector<res_t> r;
        for (size_t i = 0; i < cx.size(); i++)
            for (size_t j = 0; j < cy.size(); j++)
                r.push_back({i, j, time_pair(lt, x, cx[i], ws, y, cy[j], ws2, wsb, st, st2, 10, 7)});
        const float base = r[0].us; /* both picks */
        std::sort(r.begin(), r.end(), [](const res_t &a, const res_t &b) {
            if ((a.us < 0) != (b.us < 0))
                return b.us < 0;
            return a.us < b.us;
        });
        printf("%s pair [%s] + [%s]: the library's picks together %.2f us (alone %.2f, %.2f); "
               "%zu x %zu pairs\n",
               preset, sx.name, sy.name, base, cx[0].quick, cy[0].quick, cx.size(), cy.size());
        /* the 8 best pairs; with GEMM_SWEEP_PAIR (one pair asked for) every pair */
        const size_t show = getenv("GEMM_SWEEP_PAIR") ? r.size() : 8;
        for (size_t k = 0; k < r.size() && k < show; k++) {
            char nx[160], ny[160];
            config_name(cx[r[k].i], nx, sizeof nx);
            config_name(cy[r[k].j], ny, sizeof ny);
            printf("  %7.2f us  [%s%s] (alone %.2f) + [%s%s] (alone %.2f)\n", r[k].us, nx,
                   r[k].i ? "" : ", pick", cx[r[k].i].quick, ny, r[k].j ? "" : ", pick",
                   cy[r[k].j].quick);
        }
        if (r[0].us > 0 && base > 0 && r[0].us < 0.97f * base && base - r[0].us > 0.2f) {
            static const char *epis[] = {"FHD_EPI_NONE", "FHD_EPI_BIAS", "FHD_EPI_BIAS_RELU"};
            const site *ss[2] = {&sx, &sy};
            const config *cs[2] = {&cx[r[0].i], &cy[r[0].j]};
            const size_t idx[2] = {r[0].i, r[0].j};
            const site_ctx *xs[2] = {&x, &y};
            for (int q = 0; q < 2; q++) {
                if (idx[q] == 0) /* the pick already */
                    continue;
                const site &s = *ss[q];
                const config &c = *cs[q];
                printf("TUNED    {%u, %u, %u, %u, %u, %u, %u, %u, %u, %s, %d, %d, %u, %u, %d, %u, "
                       "%u, %u}, /* %s %s beside %s: the pair %.2f -> %.2f us%s */\n",
                       s.opa == CUBLAS_OP_N ? 0u : 1u, s.opb == CUBLAS_OP_N ? 0u : 1u, s.m, s.n,
                       s.k, s.lda, s.ldb, s.ldc, 1u, epis[s.epi < 3 ? s.epi : 0], tf32, c.id,
                       c.tile, c.stages, c.sk, c.red, c.swz, c.custom, preset, s.name,
                       ss[1 - q]->name, base, r[0].us,
                       reproducible(lt, *xs[q], c, ws, wsb, st) ? "" : "; NOT reproducible");
            }
        }
    }
    ctx_close(&x);
    ctx_close(&y);
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
        /* the split GEMMs of the small presets (cuda_setup.cpp): dx1 over half of K, dW0 over
         * half of the batch */
        {"dx1 half", CUBLAS_OP_N, CUBLAS_OP_N, H, B, H / 2, H, H, H, 0},
        {"dW0 half", CUBLAS_OP_N, CUBLAS_OP_T, S, H, B / 2, S, H, S, 0},
        /* the ReLU-mask alternative to the ReLU-backward kernel: the torso's forward writes
         * the mask, the dx GEMMs apply it and reduce the bias gradient */
        {"fwd0 online", CUBLAS_OP_T, CUBLAS_OP_N, H, 2 * B, S, S, S, H, 3},
        {"fwd1 online", CUBLAS_OP_T, CUBLAS_OP_N, H, 2 * B, H, H, H, H, 3},
        {"dx head", CUBLAS_OP_N, CUBLAS_OP_N, H, B, HO, H, HOs, H, 4},
        {"dx1", CUBLAS_OP_N, CUBLAS_OP_N, H, B, H, H, H, H, 4},
    };
    if (g_pair) { /* GEMM_SWEEP_PAIR="fwd1 online,fwd1 target" (default: both forward layers) */
        const char *want = getenv("GEMM_SWEEP_PAIR");
        static const char *const def[][2] = {{"fwd0 online", "fwd0 target"},
                                             {"fwd1 online", "fwd1 target"}};
        for (int p = 0; p < 2; p++) {
            char nx[64], ny[64];
            if (want) {
                if (p > 0 || sscanf(want, "%63[^,],%63[^\n]", nx, ny) != 2)
                    break;
            } else {
                snprintf(nx, sizeof nx, "%s", def[p][0]);
                snprintf(ny, sizeof ny, "%s", def[p][1]);
            }
            const site *sx = NULL, *sy = NULL;
            for (const site &s : sites) {
                if (s.epi < 3 && !strcmp(s.name, nx) && !sx)
                    sx = &s;
                if (s.epi < 3 && !strcmp(s.name, ny) && !sy)
                    sy = &s;
            }
            if (!sx || !sy) {
                printf("FAIL: no site named \"%s\" or \"%s\"\n", nx, ny);
                exit(1);
            }
            sweep_pair(lt, name, *sx, *sy, tf32, ws, g_ws2, wsb, st, g_st2);
        }
        return;
    }
    /* GEMM_SWEEP_EPI=1: only the sites that have a mask alternative (a site of the same name
     * with epilogue 3 or 4), both ways */
    const bool only = getenv(g_all ? "GEMM_SWEEP_SITE" : "GEMM_SWEEP_EPI") != NULL;
    const char *only_site = getenv("GEMM_SWEEP_SITE"); /* "all" mode: one site by name */
    for (const site &s : sites) {
        bool masked = false;
        for (const site &o : sites)
            masked = masked || (o.epi >= 3 && !strcmp(o.name, s.name));
        if (g_all ? s.epi < 3 && (!only || !strcmp(only_site, s.name)) : !only || masked)
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
    if (argc > 1 && !strcmp(argv[1], "all")) {
        g_all = true;
        argv++;
        argc--;
    } else if (argc > 1 && !strcmp(argv[1], "pair")) {
        g_pair = true;
        CK(cudaMalloc(&g_ws2, wsb));
        CK(cudaStreamCreateWithFlags(&g_st2, cudaStreamNonBlocking));
        argv++;
        argc--;
    }
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
    if (want("C0"))
        preset(lt, "C0", 4, 64, 3, 64, 0, ws, wsb, st);
    if (want("B1"))
        preset(lt, "B1", 64, 256, 9, 256, 0, ws, wsb, st);
    if (want("B3"))
        preset(lt, "B3", 64, 512, 21, 1024, 0, ws, wsb, st);
    /* GEMM_SWEEP_B2_HO=N: B2 with N head outputs instead of 33 (how the head's width, odd or
     * padded, changes what cuBLASLt offers) */
    const uint32_t b2_ho = getenv("GEMM_SWEEP_B2_HO") ? (uint32_t)atoi(getenv("GEMM_SWEEP_B2_HO")) : 33;
    if (want("B2"))
        preset(lt, "B2", 256, 1024, b2_ho, 8192, 0, ws, wsb, st);
    if (want("B2-tf32"))
        preset(lt, "B2", 256, 1024, b2_ho, 8192, 1, ws, wsb, st);
    cudaFree(ws);
    if (g_pair) {
        cudaFree(g_ws2);
        cudaStreamDestroy(g_st2);
    }
    cublasLtDestroy(lt);
    return 0;
}
