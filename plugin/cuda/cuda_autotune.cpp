/* cuda_autotune.cpp - the update's GEMM algorithms measured at create (autotune fast / full):
 * the candidates, their timing and the pick.
 *
 * For each cuBLASLt call site of the update (cuda_gemm.cpp): the candidates are the heuristic's
 * results (fast: its top 8 and the rule pick's variants, CTA swizzling toggled and the other
 * deterministic split-K reduction; full: up to FHD_TUNE_MAX_RESULTS, plus variants of the first
 * four: CTA swizzling toggled, split-K 2..16 with each deterministic reduction; fast then
 * also times the fastest one's neighbours: split-K halved or doubled, swizzling toggled), less
 * those that would not reproduce their bits (split-K reduced in place, by atomics) and, in fast
 * mode, split-K candidates of small GEMMs beside the critical path where the rule's pick has no
 * split-K (m n k <= 2^26: alone they may be faster, but their extra blocks and reduction kernel
 * compete with the dx chain beside them). Each is timed on the real buffers on the main stream
 * with CUDA events: 16 launches captured as one graph, so that device time is measured and not the
 * host's launch cost, one replay of warm-up, the best of 3 (this is create, outside the training
 * loop, so it waits). Fast keeps the rule's pick unless a candidate is faster by 3% and 0.2 us
 * (timing noise must not change the plan); full takes the fastest. The whole tuning stops timing at
 * its budget (fast 2 s, full 30 s): the sites left take the rule's pick.
 *
 * The cache that makes the measured plan the same plan every run, and the tuning's begin and
 * end, are cuda_autotune_cache.cpp's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_autotune.h"
#include "cuda_internal.h"

/* picks of this process, by key (the same plan for every learner of a shape) */
static std::mutex g_mu;
struct process_pick {
    fhd__algo_config c;
    std::string line; /* as written to the cache file */
};
static std::map<std::string, process_pick> g_picks;

void fhd__algo_config_get(const cublasLtMatmulAlgo_t *algo, fhd__algo_config *c) {
    memset(c, 0, sizeof *c);
    size_t wr = 0;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &c->id, sizeof c->id, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c->tile,
                                         sizeof c->tile, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c->stages,
                                         sizeof c->stages, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c->splitk,
                                         sizeof c->splitk, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c->reduction,
                                         sizeof c->reduction, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c->swizzle,
                                         sizeof c->swizzle, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c->custom,
                                         sizeof c->custom, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c->inner_shape,
                                         sizeof c->inner_shape, &wr);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                         &c->cluster_shape, sizeof c->cluster_shape, &wr);
}

int fhd__algo_config_set(fhd__backend *b, const fhd__gemm_spec *s, const fhd__algo_config *c,
                         cublasLtMatmulAlgo_t *algo) {
    cublasComputeType_t ct;
    cudaDataType_t tab, tc;
    fhd__gemm_types(s, &ct, &tab, &tc);
    if (cublasLtMatmulAlgoInit(b->lt, ct, CUDA_R_32F, tab, tab, tc, tc, c->id, algo) !=
        CUBLAS_STATUS_SUCCESS)
        return -1;
    const struct {
        cublasLtMatmulAlgoConfigAttributes_t attr;
        const void *v;
        size_t n;
    } cfg[] = {{CUBLASLT_ALGO_CONFIG_TILE_ID, &c->tile, sizeof c->tile},
               {CUBLASLT_ALGO_CONFIG_STAGES_ID, &c->stages, sizeof c->stages},
               {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c->splitk, sizeof c->splitk},
               {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c->reduction, sizeof c->reduction},
               {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c->swizzle, sizeof c->swizzle},
               {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c->custom, sizeof c->custom},
               {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c->inner_shape, sizeof c->inner_shape},
               {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c->cluster_shape, sizeof c->cluster_shape}};
    for (const auto &x : cfg)
        if (cublasLtMatmulAlgoConfigSetAttribute(algo, x.attr, x.v, x.n) != CUBLAS_STATUS_SUCCESS)
            return -1;
    return 0;
}

/* The configuration is usable for g's descriptors within the workspace (and its bits are
 * reproducible: no in-place split-K reduction). */
static bool usable(fhd__backend *b, const fhd__gemm *g, const cublasLtMatmulAlgo_t *algo) {
    fhd__algo_config c;
    fhd__algo_config_get(algo, &c);
    if (c.splitk > 1 && (c.reduction == CUBLASLT_REDUCTION_SCHEME_INPLACE ||
                         c.reduction == CUBLASLT_REDUCTION_SCHEME_NONE))
        return false;
    /* a bf16 output's split-K partials summed in fp32 only (cuda_gemm.cpp) */
    if (c.splitk > 1 && g->bf16 == FHD_GEMM_BF16_OUT &&
        c.reduction != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
        return false;
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    return cublasLtMatmulAlgoCheck(b->lt, g->desc, g->la, g->lb, g->lc, g->lc, algo, &r) ==
               CUBLAS_STATUS_SUCCESS &&
           r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= FHD_CUDA_WORKSPACE_BYTES;
}

/* ---- timing --------------------------------------------------------------------------------- */

/* Microseconds per launch of g with algo on the main stream, device time: TUNE_REPS launches
 * captured as one graph (so that the host's launch cost, larger than a small GEMM, stays out),
 * one replay of warm-up, the best of TUNE_ROUNDS replays; < 0 when it does not run. */
static float time_algo(fhd__backend *b, const fhd__gemm *g, const cublasLtMatmulAlgo_t *algo) {
    static const float one = 1.0f, zero = 0.0f;
    fhd__autotune *t = b->tune;
    cudaStream_t s = b->s_main;
    const void *alpha = g->host_alpha ? (const void *)&one : (const void *)g->alpha;
    const void *beta = g->host_alpha ? (const void *)&zero : (const void *)b->d_zero;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -1.0f;
    bool ok = true;
    for (int i = 0; i < TUNE_REPS && ok; i++)
        ok = cublasLtMatmul(b->lt, g->desc, alpha, g->A, g->la, g->B, g->lb, beta, g->C, g->lc,
                            g->C, g->lc, algo, b->ws_main, FHD_CUDA_WORKSPACE_BYTES,
                            s) == CUBLAS_STATUS_SUCCESS;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    ok = cudaStreamEndCapture(s, &graph) == cudaSuccess && ok;
    ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    float best = -1.0f;
    for (int r = -1; r < TUNE_ROUNDS && ok; r++) { /* r = -1: the warm-up */
        float ms = 0.0f;
        ok = cudaEventRecord(t->e0, s) == cudaSuccess && cudaGraphLaunch(exec, s) == cudaSuccess &&
             cudaEventRecord(t->e1, s) == cudaSuccess && fhd__cuda_sync_event(b, t->e1) == FHD_OK &&
             cudaEventElapsedTime(&ms, t->e0, t->e1) == cudaSuccess;
        const float us = ms * 1000.0f / TUNE_REPS;
        if (ok && r >= 0)
            best = best < 0 || us < best ? us : best;
    }
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return ok ? best : -1.0f;
}

/* The site's key: everything that decides which configurations run and how fast. */
static std::string site_key(const fhd__autotune *t, const fhd__gemm *g, const fhd__gemm_spec *s,
                            int epi) {
    auto al = [](const void *ptr) {
        uintptr_t a = (uintptr_t)ptr;
        unsigned v = 256;
        while (v > 4 && a % v)
            v >>= 1;
        return v;
    };
    char k[400];
    snprintf(k, sizeof k,
             "%s|%s op=%c%c m=%u n=%u k=%u ld=%u,%u,%u batch=%u strides=%lld,%lld,%lld,%lld "
             "epi=%d al=%u,%u,%u alpha=%s",
             t->key_base.c_str(),
             s->bf16 == FHD_GEMM_BF16_OUT ? "bf16out"
             : s->bf16                    ? "bf16"
             : s->tf32                    ? "tf32"
                                          : "fp32",
             s->opa == CUBLAS_OP_N ? 'N' : 'T', s->opb == CUBLAS_OP_N ? 'N' : 'T', s->m, s->n, s->k,
             s->lda, s->ldb, s->ldc, s->batch > 1 ? s->batch : 1u, (long long)s->stride_a,
             (long long)s->stride_b, (long long)s->stride_c, (long long)s->stride_bias, epi,
             al(s->A), al(s->B), al(s->C), g->host_alpha ? "host" : "device");
    return k;
}

static std::string config_text(const fhd__algo_config &c, float us) {
    char v[160];
    snprintf(v, sizeof v, "%d %u %u %d %u %u %u %u %u %.3f", c.id, c.tile, c.stages, c.splitk,
             c.reduction, c.swizzle, c.custom, (unsigned)c.inner_shape, (unsigned)c.cluster_shape,
             us);
    return v;
}

/* A cached line's configuration for g, or false with t->why_ignored set. */
static bool from_line(fhd__backend *b, fhd__autotune *t, const fhd__gemm *g,
                      const fhd__gemm_spec *s, const std::string &line, cublasLtMatmulAlgo_t *algo,
                      float *us) {
    const char *why = NULL;
    fhd__algo_config c;
    memset(&c, 0, sizeof c);
    if (line.empty()) {
        why = "checksum mismatch";
    } else {
        const size_t t1 = line.find('\t'), t2 = line.rfind('\t');
        const std::string v = line.substr(t1 + 1, t2 - t1 - 1);
        unsigned inner = 0, cluster = 0;
        if (sscanf(v.c_str(), "%d %u %u %d %u %u %u %u %u %f", &c.id, &c.tile, &c.stages, &c.splitk,
                   &c.reduction, &c.swizzle, &c.custom, &inner, &cluster, us) != 10 ||
            inner > UINT16_MAX || cluster > UINT16_MAX)
            why = "unreadable configuration";
        c.inner_shape = (uint16_t)inner;
        c.cluster_shape = (uint16_t)cluster;
        if (!why && (fhd__algo_config_set(b, s, &c, algo) != 0 || !usable(b, g, algo)))
            why = "configuration rejected by cuBLASLt";
    }
    if (!why)
        return true;
    if (t->why_ignored.empty()) {
        char m[200];
        snprintf(m, sizeof m, "%s: %s", s->site ? s->site : "?", why);
        t->why_ignored = m;
    }
    return false;
}

static bool same_config(const cublasLtMatmulAlgo_t *x, const cublasLtMatmulAlgo_t *y) {
    fhd__algo_config a, c;
    fhd__algo_config_get(x, &a);
    fhd__algo_config_get(y, &c);
    return a.id == c.id && a.tile == c.tile && a.stages == c.stages && a.splitk == c.splitk &&
           (a.splitk <= 1 || a.reduction == c.reduction) && a.swizzle == c.swizzle &&
           a.custom == c.custom && a.inner_shape == c.inner_shape &&
           a.cluster_shape == c.cluster_shape;
}

static int32_t pick(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                    const cublasLtMatmulHeuristicResult_t *res, int n, int rule);

int32_t fhd__autotune_pick(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                           const cublasLtMatmulHeuristicResult_t *res, int n, int rule) {
    const int32_t rc = pick(b, g, s, epi, res, n, rule);
    g->not_rule = !same_config(&g->algo, &res[rule].algo);
    return rc;
}

/* A configuration rebuilt from its attributes, replaced by the heuristic's own result of the
 * same configuration where there is one: that is the algorithm the pick was timed as (the
 * opaque descriptor holds more than the attributes say). */
static void as_heuristic(cublasLtMatmulAlgo_t *algo, const cublasLtMatmulHeuristicResult_t *res,
                         int n) {
    for (int i = 0; i < n; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && same_config(&res[i].algo, algo)) {
            *algo = res[i].algo;
            return;
        }
}

static int32_t pick(fhd__backend *b, fhd__gemm *g, const fhd__gemm_spec *s, int epi,
                    const cublasLtMatmulHeuristicResult_t *res, int n, int rule) {
    fhd__autotune *t = b->tune;
    const int full = b->plan.autotune == FHD_AUTOTUNE_FULL;
    const std::string key = site_key(t, g, s, epi);
    /* 1. the cache file's pick, then this process's */
    auto line = t->lines.find(key);
    if (line != t->lines.end()) {
        cublasLtMatmulAlgo_t algo;
        float us = 0.0f;
        if (from_line(b, t, g, s, line->second, &algo, &us)) {
            as_heuristic(&algo, res, n);
            g->algo = algo;
            g->pick = FHD_PICK_CACHE;
            g->us = us;
            t->hits++;
            process_pick pp;
            fhd__algo_config_get(&algo, &pp.c);
            pp.line = line->second;
            std::lock_guard<std::mutex> lock(g_mu);
            g_picks[key] = pp;
            return FHD_OK;
        }
        t->lines.erase(line);
    }
    /* this process's pick (the file had none, or a damaged one) */
    {
        std::lock_guard<std::mutex> lock(g_mu);
        auto it = g_picks.find(key);
        cublasLtMatmulAlgo_t algo;
        if (it != g_picks.end() && fhd__algo_config_set(b, s, &it->second.c, &algo) == 0 &&
            usable(b, g, &algo)) {
            as_heuristic(&algo, res, n);
            g->algo = algo;
            g->pick = FHD_PICK_CACHE;
            t->hits++;
            t->lines[key] = it->second.line; /* the file gets it back */
            t->fresh.push_back(key);
            return FHD_OK;
        }
    }
    t->misses++;
    if (now_ms() > t->deadline_ms) {
        t->over_budget++;
        return FHD_OK; /* the rule's pick */
    }
    /* 2. the candidates */
    const uint64_t mnk = (uint64_t)s->m * s->n * s->k;
    std::vector<cublasLtMatmulAlgo_t> cands;
    cands.push_back(res[rule].algo);
    fhd__algo_config rc0;
    fhd__algo_config_get(&res[rule].algo, &rc0);
    const int32_t rule_splitk = rc0.splitk;
    for (int i = 0; i < n; i++) {
        if (i == rule || res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        fhd__algo_config c;
        fhd__algo_config_get(&res[i].algo, &c);
        if (!full && s->beside && c.splitk > 1 && rule_splitk <= 1 &&
            mnk <= TUNE_SPLITK_BESIDE_MAX_MNK)
            continue;
        if (usable(b, g, &res[i].algo))
            cands.push_back(res[i].algo);
    }
    if (!full) { /* the rule pick's variants: CTA swizzling toggled, the other reduction */
        fhd__algo_config v = rc0;
        v.swizzle = rc0.swizzle ? 0 : 1;
        std::vector<fhd__algo_config> vs(1, v);
        if (rc0.splitk > 1) {
            v = rc0;
            v.reduction = rc0.reduction == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE
                              ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                              : CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
            vs.push_back(v);
        }
        for (const fhd__algo_config &x : vs) {
            cublasLtMatmulAlgo_t a;
            if (fhd__algo_config_set(b, s, &x, &a) == 0 && usable(b, g, &a))
                cands.push_back(a);
        }
    }
    if (full) { /* variants of the heuristic's first four */
        static const int32_t splits[] = {2, 4, 8, 16};
        static const uint32_t reds[] = {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                        CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE};
        const size_t base = cands.size();
        for (size_t i = 0; i < base && i < 4; i++) {
            fhd__algo_config c0;
            fhd__algo_config_get(&cands[i], &c0);
            std::vector<fhd__algo_config> vs;
            fhd__algo_config v = c0;
            v.swizzle = c0.swizzle ? 0 : 1;
            vs.push_back(v);
            for (int32_t sk : splits)
                for (uint32_t red : reds) {
                    if ((uint64_t)sk * 8 > s->k)
                        continue;
                    v = c0;
                    v.splitk = sk;
                    v.reduction = red;
                    vs.push_back(v);
                }
            for (const fhd__algo_config &x : vs) {
                cublasLtMatmulAlgo_t a;
                if (fhd__algo_config_set(b, s, &x, &a) == 0 && usable(b, g, &a))
                    cands.push_back(a);
            }
        }
    }
    /* 3. time them */
    float rule_us = -1.0f, best_us = -1.0f;
    size_t best = 0;
    int timed = 0;
    for (size_t i = 0; i < cands.size(); i++) {
        if (i > 0 && now_ms() > t->deadline_ms)
            break;
        const float us = time_algo(b, g, &cands[i]);
        (void)cudaGetLastError(); /* a candidate that failed to launch leaves nothing behind */
        if (us < 0)
            continue;
        timed++;
        if (i == 0)
            rule_us = us;
        if (best_us < 0 || us < best_us) {
            best_us = us;
            best = i;
        }
    }
    /* 3b. fast: the neighbours of the fastest (a local search over our variants): split-K
     * halved, doubled or (beside the critical path: only where the rule's pick splits) none,
     * CTA swizzling toggled */
    if (!full && best_us > 0) {
        fhd__algo_config c0;
        fhd__algo_config_get(&cands[best], &c0);
        std::vector<fhd__algo_config> vs;
        fhd__algo_config v = c0;
        v.swizzle = c0.swizzle ? 0 : 1;
        vs.push_back(v);
        if (c0.splitk > 1) {
            v = c0;
            v.splitk = c0.splitk / 2;
            if (v.splitk <= 1) {
                v.splitk = 1;
                v.reduction = 0;
            }
            vs.push_back(v);
        }
        if (c0.splitk >= 1 && (!s->beside || rule_splitk > 1) &&
            (uint64_t)(c0.splitk > 1 ? 2 * c0.splitk : 2) * 8 <= s->k) {
            v = c0;
            v.splitk = c0.splitk > 1 ? 2 * c0.splitk : 2;
            if (c0.splitk <= 1)
                v.reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            vs.push_back(v);
        }
        for (const fhd__algo_config &x : vs) {
            if (now_ms() > t->deadline_ms)
                break;
            cublasLtMatmulAlgo_t a;
            if (fhd__algo_config_set(b, s, &x, &a) != 0 || !usable(b, g, &a))
                continue;
            const float us = time_algo(b, g, &a);
            (void)cudaGetLastError();
            if (us < 0)
                continue;
            timed++;
            cands.push_back(a);
            if (us < best_us) {
                best_us = us;
                best = cands.size() - 1;
            }
        }
    }
    b->plan.timed++;
    g->candidates = timed;
    g->rule_us = rule_us;
    if (rule_us < 0) /* the rule's pick did not run in the timing: keep it, untimed */
        return FHD_OK;
    if (!full && best != 0 && !(best_us < 0.97f * rule_us && best_us < rule_us - 0.2f))
        best = 0; /* not faster than the noise */
    g->algo = cands[best];
    g->pick = best == 0 ? FHD_PICK_RULE : FHD_PICK_TUNED;
    g->us = best == 0 ? rule_us : best_us;
    /* 4. remember it */
    process_pick pp;
    fhd__algo_config_get(&g->algo, &pp.c);
    const std::string head = key + "\t" + config_text(pp.c, g->us);
    char sum[20];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)fnv1a(head));
    pp.line = head + "\t" + sum;
    t->lines[key] = pp.line;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        g_picks[key] = pp;
    }
    t->fresh.push_back(key);
    return FHD_OK;
}
