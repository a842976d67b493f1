/* test_cuda_sumtree.cu - the device sum tree against the CPU fhd__sumtree as oracle.
 *
 * The kernels that change the tree in training are exercised directly:
 *   - fhd__cuda_sumtree_set_sorted: batches of non-decreasing slot indices with duplicates
 *     (what stratified sampling yields), random values including 0, the maximum and values
 *     above it (clamped), the last occurrence winning - the CPU applies fhd__sumtree_set_batch;
 *   - fhd__cuda_replay_add: ring appends with wrap-around, also several times round the ring in
 *     one call, new leaves taking the running max priority;
 *   - fhd__cuda_sample_gather: stratified sampling (the warp's five-levels-a-step descent)
 *     against fhd__sumtree_sample_stratified for the same update counter, with the leaf values
 *     and the batch minimum, on trees of depth 0 to 20.
 * Over a million set operations the node arrays must be identical integers (checked after every
 * batch at the root and periodically in full). Exits 77 without a CUDA device.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "replay.cuh"
#include "sample.cuh"
#include "sumtree.h"

static int passed, failed;

static void check(bool ok, const char *what, long long a = 0, long long b = 0) {
    printf("%s %s (%lld, %lld)\n", ok ? "  ok  " : "  FAIL", what, a, b);
    fflush(stdout);
    ok ? passed++ : failed++;
}

#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t random_q(uint64_t *s) {
    switch (rng(s) % 16) {
    case 0: return 0;
    case 1: return FHD_PRIO_MAX_Q;
    case 2: return FHD_PRIO_MAX_Q + 1 + rng(s) % 1000; /* clamped */
    case 3: return 1;
    default: return 1 + rng(s) % (UINT64_C(1) << (4 + rng(s) % 34));
    }
}

static bool same_nodes(const fhd__sumtree &t, const uint64_t *d_nodes) {
    std::vector<uint64_t> h(2 * (size_t)t.leaves);
    CK(cudaMemcpy(h.data(), d_nodes, 8 * h.size(), cudaMemcpyDeviceToHost));
    return memcmp(h.data(), t.nodes, 8 * h.size()) == 0;
}

static void test_set_sorted(uint32_t capacity, uint64_t total_ops, uint64_t seed) {
    fhd__sumtree t;
    fhd__sumtree_init(&t, capacity);
    uint64_t *d_nodes;
    uint32_t *d_idx;
    uint64_t *d_q;
    const uint32_t maxb = 8192;
    CK(cudaMalloc(&d_nodes, 16 * (size_t)t.leaves));
    CK(cudaMemset(d_nodes, 0, 16 * (size_t)t.leaves));
    CK(cudaMalloc(&d_idx, 4 * maxb));
    CK(cudaMalloc(&d_q, 8 * maxb));
    std::vector<uint32_t> idx(maxb);
    std::vector<uint64_t> q(maxb);
    uint64_t s = seed, ops = 0;
    int batches = 0;
    bool roots = true, full = true;
    while (ops < total_ops) {
        const uint32_t n = 1 + (uint32_t)(rng(&s) % maxb);
        const uint32_t span = 1 + (uint32_t)(rng(&s) % capacity); /* duplicates when small */
        const uint32_t lo = (uint32_t)(rng(&s) % (capacity - span + 1));
        for (uint32_t i = 0; i < n; i++) {
            idx[i] = lo + (uint32_t)(rng(&s) % span);
            q[i] = random_q(&s);
        }
        std::sort(idx.begin(), idx.begin() + n);
        fhd__sumtree_set_batch(&t, n, idx.data(), q.data());
        CK(cudaMemcpy(d_idx, idx.data(), 4 * n, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_q, q.data(), 8 * n, cudaMemcpyHostToDevice));
        CK(fhd__cuda_sumtree_set_sorted(d_nodes, t.leaves, n, d_idx, d_q, 0));
        uint64_t root = 0;
        CK(cudaMemcpy(&root, d_nodes + 1, 8, cudaMemcpyDeviceToHost));
        roots = roots && root == t.nodes[1];
        if (++batches % 32 == 0)
            full = full && same_nodes(t, d_nodes);
        ops += n;
    }
    full = full && same_nodes(t, d_nodes);
    char what[160];
    snprintf(what, sizeof what, "capacity %u: %llu sorted set operations in %d batches: roots equal",
             capacity, (unsigned long long)ops, batches);
    check(roots, what);
    snprintf(what, sizeof what, "capacity %u: whole node arrays identical (and the CPU tree valid)",
             capacity);
    check(full && fhd__sumtree_check(&t) == 0, what);
    cudaFree(d_nodes);
    cudaFree(d_idx);
    cudaFree(d_q);
    fhd__sumtree_free(&t);
}

/* Ring appends (with wrap) and stratified sampling on a small replay (S = 3, D = 2). */
static void test_replay_and_sampling(uint32_t N, uint64_t seed) {
    const uint32_t S = 3, D = 2, B = 64;
    fhd__sumtree t;
    fhd__sumtree_init(&t, N);
    uint64_t *d_nodes, *d_q, *d_part;
    float *r_obs, *r_next, *r_ret, *r_disc, *stage, *g;
    int32_t *r_act;
    uint32_t *d_idx;
    fhd__dev_scalars *st;
    const uint32_t maxn = 3 * N + 7;
    CK(cudaMalloc(&d_nodes, 16 * (size_t)t.leaves));
    CK(cudaMemset(d_nodes, 0, 16 * (size_t)t.leaves));
    CK(cudaMalloc(&r_obs, 4 * (size_t)N * S));
    CK(cudaMalloc(&r_next, 4 * (size_t)N * S));
    CK(cudaMalloc(&r_ret, 4 * (size_t)N));
    CK(cudaMalloc(&r_disc, 4 * (size_t)N));
    CK(cudaMalloc(&r_act, 4 * (size_t)N * D));
    CK(cudaMalloc(&stage, 4 * (size_t)maxn * (2 * S + D + 2)));
    CK(cudaMalloc(&g, 4 * (size_t)B * (2 * S + D + 2)));
    CK(cudaMalloc(&d_idx, 4 * B));
    CK(cudaMalloc(&d_q, 8 * B));
    CK(cudaMalloc(&d_part, 8 * fhd__cuda_sample_grid(B)));
    CK(cudaMalloc(&st, sizeof(fhd__dev_scalars)));
    fhd__dev_scalars hs;
    memset(&hs, 0, sizeof hs);
    uint64_t s = seed, pos = 0, size = 0, maxq = fhd__prio_quantize(1.0);
    std::vector<float> h_obs((size_t)N * S, 0.0f), h_stage((size_t)maxn * (2 * S + D + 2));
    bool ring_ok = true, tree_ok = true, sample_ok = true, q_ok = true, gather_ok = true;
    std::vector<uint64_t> r64(B);
    std::vector<uint32_t> cidx(B), gidx(B);
    std::vector<uint64_t> gq(B);
    std::vector<float> gobs((size_t)B * S);
    for (int round = 0; round < 300; round++) {
        /* append n rows (sometimes more than the capacity) */
        const uint32_t n = 1 + (uint32_t)(rng(&s) % (round % 10 == 0 || maxn < 40 ? maxn : 40));
        float *ho = h_stage.data();
        for (uint32_t i = 0; i < n * S; i++)
            ho[i] = (float)(rng(&s) % 100000);
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t slot = (pos + i) % N;
            memcpy(&h_obs[slot * S], ho + (size_t)i * S, 4 * S);
            fhd__sumtree_set(&t, (uint32_t)slot, maxq);
        }
        CK(cudaMemcpy(stage, ho, 4 * (size_t)n * (2 * S + D + 2), cudaMemcpyHostToDevice));
        pos = (pos + n) % N;
        size = size + n < N ? size + n : N;
        hs.max_q = maxq;
        CK(cudaMemcpy(st, &hs, sizeof hs, cudaMemcpyHostToDevice));
        fhd__replay_add_args a;
        memset(&a, 0, sizeof a);
        a.obs = stage;
        a.next = stage + (size_t)n * S;
        a.act = (const int32_t *)(stage + (size_t)2 * n * S);
        a.ret = stage + (size_t)2 * n * S + (size_t)n * D;
        a.disc = a.ret + n;
        a.n = n;
        a.pos = (pos + N - n % N) % N;
        a.N = N;
        a.S = S;
        a.D = D;
        a.r_obs = r_obs;
        a.r_next = r_next;
        a.r_act = r_act;
        a.r_ret = r_ret;
        a.r_disc = r_disc;
        a.prioritized = 1;
        a.nodes = d_nodes;
        a.leaves = t.leaves;
        a.st = st;
        a.new_size = size;
        CK(fhd__cuda_replay_add(&a, 0));
        /* random priority updates on the filled part */
        const uint32_t m = 1 + (uint32_t)(rng(&s) % 64);
        std::vector<uint32_t> ui(m);
        std::vector<uint64_t> uq(m);
        for (uint32_t i = 0; i < m; i++) {
            ui[i] = (uint32_t)(rng(&s) % size);
            uq[i] = 1 + rng(&s) % (UINT64_C(1) << 30);
            maxq = uq[i] > maxq ? uq[i] : maxq;
        }
        std::sort(ui.begin(), ui.end());
        fhd__sumtree_set_batch(&t, m, ui.data(), uq.data());
        uint32_t *d_ui;
        uint64_t *d_uq;
        CK(cudaMalloc(&d_ui, 4 * m));
        CK(cudaMalloc(&d_uq, 8 * m));
        CK(cudaMemcpy(d_ui, ui.data(), 4 * m, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_uq, uq.data(), 8 * m, cudaMemcpyHostToDevice));
        CK(fhd__cuda_sumtree_set_sorted(d_nodes, t.leaves, m, d_ui, d_uq, 0));
        cudaFree(d_ui);
        cudaFree(d_uq);
        tree_ok = tree_ok && same_nodes(t, d_nodes);
        /* stratified sampling for update `round` */
        hs.updates = (uint64_t)round * 7919;
        hs.replay_size = size;
        CK(cudaMemcpy(st, &hs, sizeof hs, cudaMemcpyHostToDevice));
        fhd__sample_args sa;
        memset(&sa, 0, sizeof sa);
        sa.st = st;
        sa.nodes = d_nodes;
        sa.leaves = t.leaves;
        sa.prioritized = 1;
        sa.seed = 0x1234567890ull;
        sa.B = B;
        sa.S = S;
        sa.D = D;
        sa.r_obs = r_obs;
        sa.r_next = r_next;
        sa.r_act = r_act;
        sa.r_ret = r_ret;
        sa.r_disc = r_disc;
        sa.g_obs = g;
        sa.g_next = g + (size_t)B * S;
        sa.g_act = (int32_t *)(g + (size_t)2 * B * S);
        sa.g_ret = g + (size_t)2 * B * S + (size_t)B * D;
        sa.g_disc = sa.g_ret + B;
        sa.idx = d_idx;
        sa.q = d_q;
        sa.part_min = d_part;
        CK(fhd__cuda_sample_gather(&sa, 0));
        for (uint32_t j = 0; j < B; j++)
            r64[j] = fhd__rng_u64(sa.seed, FHD_RNG_STREAM_SAMPLE, hs.updates, j);
        fhd__sumtree_sample_stratified(&t, B, r64.data(), cidx.data());
        uint64_t qmin = 0;
        CK(cudaMemcpy(gidx.data(), d_idx, 4 * B, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gq.data(), d_q, 8 * B, cudaMemcpyDeviceToHost));
        { /* the batch minimum over the blocks' minima, as the loss kernel takes it */
            const uint32_t ng = fhd__cuda_sample_grid(B);
            std::vector<uint64_t> parts(ng);
            CK(cudaMemcpy(parts.data(), d_part, 8 * (size_t)ng, cudaMemcpyDeviceToHost));
            qmin = *std::min_element(parts.begin(), parts.end());
        }
        CK(cudaMemcpy(gobs.data(), g, 4 * (size_t)B * S, cudaMemcpyDeviceToHost));
        uint64_t cmin = UINT64_MAX;
        for (uint32_t j = 0; j < B; j++) {
            sample_ok = sample_ok && gidx[j] == cidx[j];
            const uint64_t qj = fhd__sumtree_get(&t, cidx[j]);
            q_ok = q_ok && gq[j] == qj && qj > 0;
            cmin = qj < cmin ? qj : cmin;
            gather_ok = gather_ok && memcmp(&gobs[(size_t)j * S], &h_obs[(size_t)cidx[j] * S], 4 * S) == 0;
        }
        q_ok = q_ok && qmin == cmin;
    }
    std::vector<float> dev_obs((size_t)N * S);
    CK(cudaMemcpy(dev_obs.data(), r_obs, 4 * (size_t)N * S, cudaMemcpyDeviceToHost));
    ring_ok = memcmp(dev_obs.data(), h_obs.data(), 4 * (size_t)N * S) == 0;
    char what[160];
    snprintf(what, sizeof what, "capacity %u: ring contents after appends with wrap-around", N);
    check(ring_ok, what);
    snprintf(what, sizeof what, "capacity %u: tree identical after appends and updates", N);
    check(tree_ok, what);
    snprintf(what, sizeof what, "capacity %u: stratified sample indices identical (300 updates)", N);
    check(sample_ok, what);
    snprintf(what, sizeof what, "capacity %u: sampled leaf values and batch minimum", N);
    check(q_ok, what);
    snprintf(what, sizeof what, "capacity %u: gathered observations", N);
    check(gather_ok, what);
    cudaFree(d_nodes);
    cudaFree(r_obs);
    cudaFree(r_next);
    cudaFree(r_ret);
    cudaFree(r_disc);
    cudaFree(r_act);
    cudaFree(stage);
    cudaFree(g);
    cudaFree(d_idx);
    cudaFree(d_q);
    cudaFree(d_part);
    cudaFree(st);
    fhd__sumtree_free(&t);
}

int main(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    test_set_sorted(1, 20000, 1);
    test_set_sorted(100003, 1000000, 2);
    test_set_sorted(1u << 16, 300000, 3);
    /* tree depths 0, 1, 3, 6, 7, 9, 10, 12, 14, 18 and 20: the warp descent takes five levels a
     * step, so every remainder of depth / 5 (with one to four steps), the single-leaf tree and
     * the presets' 2^20 slots are covered */
    test_replay_and_sampling(1, 13);
    test_replay_and_sampling(2, 17);
    test_replay_and_sampling(7, 14);
    test_replay_and_sampling(33, 15);
    test_replay_and_sampling(100, 18);
    test_replay_and_sampling(300, 19);
    test_replay_and_sampling(1000, 11);
    test_replay_and_sampling(4096, 12);
    test_replay_and_sampling(16384, 20);
    test_replay_and_sampling(200003, 16);
    test_replay_and_sampling(1u << 20, 21);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
