/* test_cuda_nccl.c - data-parallel training on the CUDA backend over NCCL (config distributed,
 * docs/design.md section 10).
 *
 * One rank (an MPI singleton: run it directly, no mpirun), for two configurations (PER with
 * double DQN and dueling; uniform replay with spectral norm on every layer, detailed_metrics
 * and the guard):
 *   - the distributed learner equals the one-process learner bit for bit (parameters, target,
 *     Adam moments, priorities, the statistics) over 300 updates through all four captures: at
 *     W = 1 the mean is x 1.0f, and the optimiser sums the same squares in the same order;
 *   - the captured update holds the pack and scale kernels once each, and everything else of
 *     the one-process graph (NCCL adds no node for an in-place sum on one rank; at W >= 2 it
 *     must: below);
 *   - no synchronisation over 2,000 updates in calls of 100 with a metrics read after each;
 *   - the metrics' checksum fields: update 0's at init equals the host's hash of the initial
 *     parameters; after train(k n) and train(1), checksum_update is k n and params_checksum
 *     the hash of the parameters read after train(k n); ranks_agree, ranks_differing 0.
 * Under mpirun -np W (W >= 2, one GPU a rank; tests/cuda/run_nccl.sh): the graph has NCCL's
 * nodes; every rank's parameters are bitwise equal after training (an allgather of their
 * checksums, and the metrics' ranks_agree); and with uniform replay and equal replays, W ranks
 * at batch b equal one learner at batch W b (on rank 0) to float summation order.
 * Exits 77 without a GPU, without NCCL or without the MPI module.
 */
#include <mpi.h>

#include "cuda_test.h"

#define BASE                                                                                       \
    "\"obs_dim\": 8, \"actions\": [4, 3], \"hidden\": [64, 64], \"dueling\": true, "               \
    "\"double_dqn\": true, \"replay_capacity\": 4096, \"num_envs\": 4, \"learning_starts\": 0, "   \
    "\"seed\": 7, \"max_grad_norm\": 1, \"lr\": 0.001, \"target_update_interval\": 50, "           \
    "\"autotune\": \"off\"" /* the same GEMM algorithms in every learner: bitwise comparable */

static const char *const VARIANTS[2] = {
    "\"replay\": \"prioritized\"",
    "\"replay\": \"uniform\", \"spectral_norm\": \"all\", \"detailed_metrics\": true, "
    "\"guard\": {\"max_loss\": 1e20}"};
static const uint32_t K[2] = {4, 3};

static char jbuf[4][1400];
static const char *cfg(int k, uint32_t batch, const char *variant, const char *dist) {
    snprintf(jbuf[k], sizeof jbuf[k],
             "{\"backend\": \"cuda\", \"batch_size\": %u, " BASE ", %s%s%s}", batch, variant,
             dist ? ", \"distributed\": " : "", dist ? dist : "");
    return jbuf[k];
}

/* The distributed learner, or exit 77 where NCCL or the MPI module is missing. */
static fhd_learner *create_dist(const char *json) {
    ct_require_gpu();
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t rc = fhd__learner_init(json, strlen(json), &L, &err);
    if (rc == FHD_ERR_BACKEND_UNAVAILABLE) {
        printf("SKIP: %s: %s\n", err.path, err.message);
        exit(77);
    }
    if (rc != FHD_OK) {
        printf("FAIL: init of the distributed learner: %s %s: %s\n", err.path, fhd__status_name(rc),
               err.message);
        exit(1);
    }
    return L;
}

static uint64_t sync_count(fhd_learner *L) {
    uint64_t n = 0;
    ct_read(L, FHD_CUDA_STATE_SYNC_COUNT, 0, 1, &n);
    return n;
}

/* The checksum of kernels/dist.cuh, written out again: 2P terms (online, then target). */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t host_checksum(fhd_learner *L) {
    const uint64_t P = L->lo.num_params;
    float *p = ct_read_floats(L, FHD_STATE_PARAMS, 2 * P);
    uint64_t h = 0;
    for (uint64_t i = 0; i < 2 * P; i++) {
        uint32_t x;
        memcpy(&x, p + i, 4);
        h += mix(mix(i + 0x9e3779b97f4a7c15ull) ^ (uint64_t)x);
    }
    free(p);
    return h;
}

/* The metrics' "distributed" object's fields. */
typedef struct dist_facts {
    long long rank, world, ck_update, differing, compared;
    unsigned long long checksum;
    int agree;
} dist_facts;

static int facts(fhd_learner *L, dist_facts *f) {
    static char buf[1 << 16];
    size_t need = 0;
    memset(f, 0, sizeof *f);
    if (fhd__learner_metrics(L, buf, sizeof buf, &need) != FHD_OK)
        return 0;
    const char *d = strstr(buf, "\"distributed\":{");
    if (!d)
        return 0;
    const char *k;
    int ok = 1;
#define FIELD(name, fmt, dst)                                                                      \
    ok = ok && (k = strstr(d, "\"" name "\":")) && sscanf(k + strlen(name) + 3, fmt, dst) == 1
    FIELD("rank", "%lld", &f->rank);
    FIELD("world_size", "%lld", &f->world);
    FIELD("checksum_update", "%lld", &f->ck_update);
    FIELD("ranks_differing", "%lld", &f->differing);
    FIELD("checksums_compared", "%lld", &f->compared);
    ok = ok && (k = strstr(d, "\"params_checksum\":\"")) &&
         sscanf(k + 19, "%llx", &f->checksum) == 1;
#undef FIELD
    f->agree = strstr(d, "\"ranks_agree\":true") != NULL;
    return ok;
}

/* Kernel nodes of one captured variant: all, and those whose name holds `name`. */
static int graph_nodes(fhd_learner *L, int v, const char *name, int *named) {
    cudaGraph_t g = NULL;
    ct_read(L, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
    size_t n = 0;
    if (!g || cudaGraphGetNodes(g, NULL, &n) != cudaSuccess)
        return -1;
    cudaGraphNode_t *ns = (cudaGraphNode_t *)malloc(sizeof *ns * (n ? n : 1));
    cudaGraphGetNodes(g, ns, &n);
    *named = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        cudaGraphNodeGetType(ns[i], &t);
        if (t != cudaGraphNodeTypeKernel)
            continue;
        struct cudaKernelNodeParams kp;
        memset(&kp, 0, sizeof kp);
        const char *nm = NULL;
        if (cudaGraphKernelNodeGetParams(ns[i], &kp) == cudaSuccess && kp.func &&
            cudaFuncGetName(&nm, kp.func) == cudaSuccess && nm && strstr(nm, name))
            (*named)++;
        (void)cudaGetLastError();
    }
    free(ns);
    return (int)n;
}

static int same(fhd_learner *A, fhd_learner *B, int kind, uint64_t n, uint64_t elem) {
    void *a = malloc(n * elem), *b = malloc(n * elem);
    ct_read(A, kind, 0, n, a);
    ct_read(B, kind, 0, n, b);
    const int ok = memcmp(a, b, n * elem) == 0;
    free(a);
    free(b);
    return ok;
}

/* W = 1: the distributed learner against the one-process learner. */
static void one_rank(int variant) {
    const char *vn = variant ? "uniform+sn" : "per";
    fhd_learner *A = ct_create_cuda(cfg(0, 64, VARIANTS[variant], NULL));
    fhd_learner *B = create_dist(cfg(1, 64, VARIANTS[variant], "{\"checksum_interval\": 10}"));
    const uint64_t P = A->lo.num_params;
    dist_facts f;
    ct_check(facts(B, &f) && f.rank == 0 && f.world == 1 && f.ck_update == 0 && f.agree &&
                 f.differing == 0 && f.compared == 1 && f.checksum == host_checksum(B),
             "%s: init: rank %lld of %lld, checksum of update %lld %016llx = the host's %016llx",
             vn, f.rank, f.world, f.ck_update, f.checksum, (unsigned long long)host_checksum(B));
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        int pa = 0, pb = 0, sa = 0, sb = 0;
        const int na = graph_nodes(A, v, "fhd_dist_pack_kernel", &pa);
        const int nb = graph_nodes(B, v, "fhd_dist_pack_kernel", &pb);
        graph_nodes(A, v, "fhd_dist_scale_kernel", &sa);
        graph_nodes(B, v, "fhd_dist_scale_kernel", &sb);
        if (na < 0 && nb < 0)
            continue; /* a variant the plan does not capture */
        ct_check(pa == 0 && sa == 0 && pb == 1 && sb == 1 && nb >= na + 2,
                 "%s: graph %d: %d nodes, distributed %d (pack %d, scale %d; NCCL's: %d)", vn, v,
                 na, nb, pb, sb, nb - na - 2);
    }
    fhd_learner *both[2] = {A, B};
    ct_feed(both, 2, 4, 8, 2, K, 200, 5);
    const uint32_t calls[5] = {1, 2, 37, 200, 60}; /* SINGLE; FIRST+LAST; STEADY runs */
    int ok = 1;
    uint64_t done = 0;
    for (int c = 0; c < 5; c++) {
        fhd_train_stats sa = FHD_TRAIN_STATS_INIT, sb = FHD_TRAIN_STATS_INIT;
        ok = ok && fhd__learner_train(A, calls[c], &sa) == FHD_OK &&
             fhd__learner_train(B, calls[c], &sb) == FHD_OK;
        done += calls[c];
        const int params = same(A, B, FHD_STATE_PARAMS, 2 * P, 4);
        const int adam = same(A, B, FHD_STATE_ADAM_M, P, 4) && same(A, B, FHD_STATE_ADAM_V, P, 4);
        const int prio = variant || same(A, B, FHD_STATE_REPLAY_PRIORITY, 4096, 8);
        fhd__update_stats ua, ub;
        memset(&ua, 0, sizeof ua);
        memset(&ub, 0, sizeof ub);
        A->ops->latest_stats(A->be, &ua);
        B->ops->latest_stats(B->be, &ub);
        const int stats =
            ua.update_index == ub.update_index && ua.loss == ub.loss &&
            ua.grad_norm == ub.grad_norm && ua.q_mean == ub.q_mean &&
            ua.td_abs_mean == ub.td_abs_mean &&
            memcmp(ua.layer_grad_norm, ub.layer_grad_norm, sizeof ua.layer_grad_norm) == 0 &&
            memcmp(ua.head_grad_norm, ub.head_grad_norm, sizeof ua.head_grad_norm) == 0;
        ct_check(ok && params && adam && prio && stats,
                 "%s: after %llu updates: parameters+target %s, Adam %s, priorities %s, stats %s "
                 "(loss %.9g / %.9g, norm %.9g / %.9g)",
                 vn, (unsigned long long)done, params ? "equal" : "DIFFER",
                 adam ? "equal" : "DIFFER", prio ? "equal" : "DIFFER", stats ? "equal" : "DIFFER",
                 (double)ua.loss, (double)ub.loss, (double)ua.grad_norm, (double)ub.grad_norm);
    }
    /* checksums: train to a multiple of the interval, hash on the host, one update more */
    const uint64_t to = (done / 10 + 1) * 10;
    ct_check(fhd__learner_train(B, (uint32_t)(to - done), NULL) == FHD_OK, "%s: train to %llu", vn,
             (unsigned long long)to);
    const uint64_t h = host_checksum(B);
    ct_check(fhd__learner_train(B, 1, NULL) == FHD_OK && B->ops->finish(B->be) == FHD_OK &&
                 facts(B, &f) && f.ck_update == (long long)to && f.checksum == h && f.agree &&
                 f.differing == 0 && f.compared == (long long)(1 + to / 10 + 1),
             "%s: checksum of update %lld: %016llx, the host's of update %llu %016llx, %lld "
             "compared",
             vn, f.ck_update, f.checksum, (unsigned long long)to, (unsigned long long)h,
             f.compared);
    /* no synchronisation over 2,000 updates with the metrics read after every call */
    uint64_t w0[FHD_CUDA_INFO_COUNT], w1[FHD_CUDA_INFO_COUNT];
    ct_read(B, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, w0); /* synchronous: before s0b */
    const uint64_t s0b = sync_count(B);
    int run_ok = 1;
    for (int c = 0; c < 20 && run_ok; c++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        run_ok = fhd__learner_train(B, 100, &st) == FHD_OK && facts(B, &f);
    }
    const uint64_t s1 = sync_count(B);
    ct_read(B, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, w1);
    ct_check(run_ok && s1 == s0b,
             "%s: 2,000 updates: %llu synchronisations (train's queue waited %llu times, at most "
             "64 updates queued)",
             vn, (unsigned long long)(s1 - s0b),
             (unsigned long long)(w1[FHD_CUDA_INFO_DIST_WAITS] - w0[FHD_CUDA_INFO_DIST_WAITS]));
    ct_check(B->ops->finish(B->be) == FHD_OK && facts(B, &f) && f.agree && f.differing == 0 &&
                 f.ck_update == (long long)((to + 2000) / 10 * 10),
             "%s: after them: checksum of update %lld, ranks agree", vn, f.ck_update);
    fhd__learner_destroy(A);
    fhd__learner_destroy(B);
}

/* W >= 2 (under mpirun): agreement, NCCL's nodes, and W ranks at b = one learner at W b. */
static void many_ranks(void) {
    const char *uni = "\"replay\": \"uniform\"";
    fhd_learner *B = create_dist(cfg(1, 32, uni, "{\"checksum_interval\": 25}"));
    dist_facts f;
    facts(B, &f);
    const int rank = (int)f.rank, W = (int)f.world;
    printf("rank %d of %d on %s\n", rank, W, B->ops->device_name(B->be));
    fhd_learner *A = rank == 0 ? ct_create_cuda(cfg(0, 32 * (uint32_t)W, uni, NULL)) : NULL;
    int pa = 0, pb = 0;
    const int nb = graph_nodes(B, FHD_CUDA_GRAPH_STEADY, "fhd_dist", &pb);
    fhd_learner *Lg = ct_create_cuda(cfg(2, 32, uni, NULL)); /* the one-process graph */
    const int na = graph_nodes(Lg, FHD_CUDA_GRAPH_STEADY, "fhd_dist", &pa);
    fhd__learner_destroy(Lg);
    ct_check(nb > na + 2 && pb == 2, "rank %d: steady graph %d nodes, one process %d: NCCL's %d",
             rank, nb, na, nb - na - 2);
    /* equal replays on every rank (and the reference) */
    fhd_learner *ls[2] = {B, A};
    ct_feed(ls, A ? 2 : 1, 4, 8, 2, K, 300, 9);
    const uint32_t calls[4] = {1, 9, 40, 150};
    for (int c = 0; c < 4; c++) {
        ct_check(fhd__learner_train(B, calls[c], NULL) == FHD_OK, "rank %d: train(%u)", rank,
                 calls[c]);
        if (A)
            ct_check(fhd__learner_train(A, calls[c], NULL) == FHD_OK, "reference: train(%u)",
                     calls[c]);
    }
    const uint64_t P = B->lo.num_params;
    uint64_t mine = host_checksum(B), all[64];
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int equal = 1;
    for (int r = 0; r < W && r < 64; r++)
        equal = equal && all[r] == all[0];
    ct_check(equal, "rank %d: every rank's parameters bitwise equal after 200 updates", rank);
    ct_check(B->ops->finish(B->be) == FHD_OK && facts(B, &f) && f.agree && f.differing == 0 &&
                 f.ck_update == 175,
             "rank %d: metrics: checksum of update %lld, ranks_agree %d", rank, f.ck_update,
             f.agree);
    if (A) {
        double mx = 0;
        const double e = ct_cmp_kind(A, B, FHD_STATE_PARAMS, 0, 2 * P, &mx);
        ct_check(e < 1e-4,
                 "%d ranks at batch 32 vs one learner at batch %d: relative %.3g, max "
                 "abs %.3g",
                 W, 32 * W, e, mx);
        fhd__learner_destroy(A);
    }
    fhd__learner_destroy(B);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    ct_require_gpu();
    /* MPI first, so that the singleton or mpirun's world is ours; the MPI module then leaves
     * finalising to us */
    int provided = 0, world = 1;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world == 1) {
        one_rank(0);
        one_rank(1);
    } else {
        many_ranks();
    }
    const int rc = ct_finish();
    int all = rc;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return all;
}
