/* gemm_sweep_all.cpp - gemm_sweep's configuration space ("all"): every configuration of every
 * algorithm that cuBLASLt accepts for a site, the pick of cuda_gemm.cpp's rule among the
 * heuristic's list, and the exhaustive screen of one site against that pick. */
#include "gemm_sweep.h"

#include "cuda_gemm_rule.h"

#include <algorithm>
#include <math.h>
#include <string.h>

void config_name(const config &c, char *buf, size_t n) {
    snprintf(buf, n,
             "algo %2d tile %3u stages %3u splitK %2d red %u swz %u custom %u inner %u cluster %u",
             c.id, c.tile, c.stages, c.sk, c.red, c.swz, c.custom, c.inner, c.cluster);
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
             {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c->custom, sizeof c->custom},
             {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c->inner, sizeof c->inner},
             {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c->cluster, sizeof c->cluster}};
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
std::vector<config> enumerate_configs(cublasLtHandle_t lt, const site &s, int tf32,
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
                                c.inner = c.cluster = 0; /* the heuristic's own add others */
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

bool same_config(const config &x, const config &y) {
    return x.id == y.id && x.tile == y.tile && x.stages == y.stages && x.sk == y.sk &&
           x.red == y.red && x.swz == y.swz && x.custom == y.custom && x.inner == y.inner &&
           x.cluster == y.cluster;
}

void add_heuristic_configs(std::vector<config> &cands, const cublasLtMatmulHeuristicResult_t *res,
                           int nres, size_t wsb) {
    for (int i = 0; i < nres; i++) {
        const config h = config_of(&res[i].algo);
        const bool seen = std::any_of(cands.begin(), cands.end(),
                                      [&](const config &c) { return same_config(c, h); });
        if (!seen && res[i].workspaceSize <= wsb)
            cands.push_back(h);
    }
}

/* The backend's rule (plugin/cuda/cuda_gemm_rule.h), the first result where there are none. */
int library_pick(const site &s, const cublasLtMatmulHeuristicResult_t *res, int nres) {
    const int i = fhd__gemm_rule_index(s.m, s.n, s.k, res, nres);
    return i < 0 ? 0 : i;
}

/* A heuristic result as a config (its attributes read back). */
config config_of(const cublasLtMatmulAlgo_t *algo) {
    config c;
    c.algo = *algo;
    size_t wr;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id, &wr);
    config_attrs(&c, false);
    c.quick = c.us = -1.0f;
    c.kernels = 0;
    return c;
}

/* Every configuration AlgoCheck accepts for this site, screened, the fastest 12 timed again and
 * checked to reproduce their bits, beside the library's pick (gemm_sweep.cpp's comment). */
void sweep_exhaustive(cublasLtHandle_t lt, const char *preset, const site &s, int tf32,
                      cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const float *A,
                      const float *B, float *C, float *ref, size_t nc,
                      const cublasLtMatmulHeuristicResult_t *res, int nres, void *ws,
                      size_t wsb, cudaStream_t st) {
    std::vector<config> cands = enumerate_configs(lt, s, tf32, desc, la, lb, lc, wsb);
    add_heuristic_configs(cands, res, nres, wsb);
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
        printf("TUNED    {%u, %u, %u, %u, %u, %u, %u, %u, %u, %s, %d, %d, %u, %u, %d, %u, %u, %u, "
               "%u, %u}, /* %s %s: %.2f -> %.2f us */\n",
               s.opa == CUBLAS_OP_N ? 0u : 1u, s.opb == CUBLAS_OP_N ? 0u : 1u, s.m, s.n, s.k,
               s.lda, s.ldb, s.ldc, 1u, epis[s.epi], tf32, best->id, best->tile, best->stages,
               best->sk, best->red, best->swz, best->custom, best->inner, best->cluster, preset,
               s.name, h, best->us);
    }
    fflush(stdout);
}
