/* gemm_sweep_pair.cpp - gemm_sweep's "pair" mode: two call sites that the update runs at once,
 * each with its library pick and its fastest configurations alone, every pair timed running
 * together on two streams. */
#include "gemm_sweep.h"

#include <algorithm>
#include <string.h>

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
    add_heuristic_configs(all, x.res, x.n, wsb);
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
        if (!same_config(c, pick))
            out.push_back(c);
    }
    return out;
}

/* Two call sites that the update runs at once (the online and the target forward of a layer):
 * the pairs of their candidates, each pair timed running together, against the pair of the
 * library's picks. A configuration faster alone can lose beside another GEMM (bench/log/2026-11-results-rounds.md,
 * tenth round); what the update waits for is the later of the two. */
void sweep_pair(cublasLtHandle_t lt, const char *preset, const site &sx, const site &sy,
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
                       "%u, %u, %u, %u}, /* %s %s beside %s: the pair %.2f -> %.2f us%s */\n",
                       s.opa == CUBLAS_OP_N ? 0u : 1u, s.opb == CUBLAS_OP_N ? 0u : 1u, s.m, s.n,
                       s.k, s.lda, s.ldb, s.ldc, 1u, epis[s.epi < 3 ? s.epi : 0], tf32, c.id,
                       c.tile, c.stages, c.sk, c.red, c.swz, c.custom, c.inner, c.cluster, preset,
                       s.name,
                       ss[1 - q]->name, base, r[0].us,
                       reproducible(lt, *xs[q], c, ws, wsb, st) ? "" : "; NOT reproducible");
            }
        }
    }
    ctx_close(&x);
    ctx_close(&y);
    fflush(stdout);
}
