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
 *                               custom, inner and cluster shape, as the autotune cache of
 *                               cuda_autotune.cpp holds them); the heuristic's own results join
 *                               the enumeration, which leaves the two shape ids at 0
 *   GEMM_SWEEP_SITE=NAME gemm_sweep all ...   one call site ("fwd1 online", "dx1 half", ...)
 *   GEMM_SWEEP_B2_HO=N gemm_sweep ... B2     B2's head with N outputs (default its own, 33)
 *   gemm_sweep pair PRESET ...  the online and the target forward of each layer, which the update
 *                               runs at once: each site's library pick and its 8 fastest
 *                               configurations alone, every pair timed running together on two
 *                               streams, with "TUNED" lines where a pair beats the picks' pair
 *   GEMM_SWEEP_PAIR="NAME,NAME" gemm_sweep pair ...   one pair of sites, every pair printed
 *
 * The presets' shapes are those of their files in bench/presets (bench_configs.c's
 * bench_mlp_shape, as cuda_bench reads them). The parts: gemm_sweep.h lists them.
 */
#include "gemm_sweep.h"

#include <string.h>

extern "C" {
#include "bench_configs.h"
}

static bool g_all = false; /* "all": the exhaustive search instead of the heuristic's list */
static bool g_pair = false; /* "pair": two sites timed running together */
static void *g_ws2;         /* the second GEMM's workspace in "pair" mode */
static cudaStream_t g_st2;

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
            sweep(lt, name, s, tf32, g_all, ws, wsb, st);
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
    /* the presets in their order, each as named on the command line, the preset file it is and
     * whether its GEMMs run in TF32 */
    static const struct {
        const char *arg, *preset;
        int tf32;
    } runs[] = {{"C0", "C0", 0}, {"B1", "B1", 0}, {"B3", "B3", 0}, {"B2", "B2", 0},
                {"B2-tf32", "B2", 1}};
    for (const auto &r : runs) {
        if (!want(r.arg))
            continue;
        uint32_t S, H, HO, B;
        char err[256];
        if (!bench_mlp_shape(r.preset, &S, &H, &HO, &B, err, sizeof err)) {
            printf("FAIL: %s\n", err);
            exit(1);
        }
        /* GEMM_SWEEP_B2_HO=N: B2 with N head outputs instead of its own 33 (how the head's
         * width, odd or padded, changes what cuBLASLt offers) */
        if (!strcmp(r.preset, "B2") && getenv("GEMM_SWEEP_B2_HO"))
            HO = (uint32_t)atoi(getenv("GEMM_SWEEP_B2_HO"));
        preset(lt, r.preset, S, H, HO, B, r.tf32, ws, wsb, st);
    }
    cudaFree(ws);
    if (g_pair) {
        cudaFree(g_ws2);
        cudaStreamDestroy(g_st2);
    }
    cublasLtDestroy(lt);
    return 0;
}
