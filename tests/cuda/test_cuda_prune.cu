/* test_cuda_prune.cu - the device pruning selection (kernels/prune.cu) against the rule of
 * plugin/prune.h as oracle: the schedule and count of plugin/prune.c (the CPU's own code) and
 * a brute-force sort by (|w|, index) per group.
 *
 * Segments shaped like a network's weight tensors (gaps between them for the biases, one of
 * 300k weights so that a segment spans many blocks), weights full of ties (a few magnitudes of
 * both signs, +-0) and continuous ones, per tensor and global: the masks must be exactly the
 * rule's, the pruned weights and their Adam moments 0, everything else unchanged (also outside
 * the segments). The selection is captured once into a graph and replayed at a non-pruning
 * update (nothing changes), then at pruning updates of growing sparsity (each exact: the
 * scratch resets itself), so one graph serves every update; no kernel node has a 1x1x1 grid.
 * The gradient mask kernel zeroes exactly the pruned entries. Exits 77 without a CUDA device.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "prune.h"
}
#include "prune.cuh"

static int passed, failed;

static void check(bool ok, const char *what, long long a = 0, long long b = 0) {
    printf("%s %s (%lld, %lld)\n", ok ? "  ok  " : "  FAIL", what, a, b);
    fflush(stdout);
    ok ? passed++ : failed++;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct Setup {
    fhd__prune_args a;
    uint64_t P;
    fhd__config cfg;
};

/* Segments of counts `counts`, a gap of 13 floats (a bias) after each. */
static Setup make_setup(const std::vector<uint64_t> &counts, int global) {
    Setup s;
    memset(&s, 0, sizeof s);
    uint64_t off = 0;
    s.a.nsegs = (uint32_t)counts.size();
    s.a.ngroups = global ? 1 : s.a.nsegs;
    for (uint32_t i = 0; i < s.a.nsegs; i++) {
        s.a.seg[i].off = off;
        s.a.seg[i].count = counts[i];
        s.a.seg[i].group = global ? 0 : i;
        s.a.group_n[s.a.seg[i].group] += counts[i];
        off += counts[i] + 13;
    }
    s.P = off;
    s.cfg.prune_sparsity = 0.9;
    s.cfg.prune_start = 5;
    s.cfg.prune_end = 45;
    s.cfg.prune_frequency = 10;
    s.cfg.prune_global = global;
    s.a.sparsity = s.cfg.prune_sparsity;
    s.a.start = s.cfg.prune_start;
    s.a.end = s.cfg.prune_end;
    s.a.frequency = s.cfg.prune_frequency;
    fhd__cuda_prune_plan(&s.a);
    return s;
}

/* The rule on the host: masks (P) for weights W at update t (1 outside the segments). */
static void expected(const Setup &s, const std::vector<float> &W, uint64_t t,
                     std::vector<float> &mask) {
    double sp = 0.0;
    const bool on = fhd__prune_at(&s.cfg, t, &sp);
    for (uint32_t g = 0; g < s.a.ngroups; g++) {
        std::vector<std::pair<uint32_t, uint64_t>> e; /* (|w| bits, index) */
        for (uint32_t i = 0; i < s.a.nsegs; i++) {
            if (s.a.seg[i].group != g)
                continue;
            for (uint64_t j = 0; j < s.a.seg[i].count; j++) {
                const uint64_t o = s.a.seg[i].off + j;
                e.push_back({fhd__prune_key(W[o]), o});
                mask[o] = 1.0f;
            }
        }
        if (!on)
            continue;
        std::sort(e.begin(), e.end());
        const uint64_t k = fhd__prune_count(sp, e.size());
        for (uint64_t q = 0; q < k; q++)
            mask[e[q].second] = 0.0f;
    }
}

static void fill(std::vector<float> &W, uint64_t *seed, int ties) {
    for (auto &w : W) {
        const uint64_t r = rng(seed);
        const float v = ties ? (float)(r % 9) / 8.0f : (float)((r >> 11) * 0x1.0p-53);
        w = (r >> 63) ? -v : v;
    }
}

static void run(const std::vector<uint64_t> &counts, int global, int ties, const char *what) {
    Setup s = make_setup(counts, global);
    const uint64_t P = s.P;
    uint64_t seed = 1234 + (uint64_t)global * 7 + (uint64_t)ties;
    std::vector<float> W(P), m(P), v(P), mask(P, 1.0f), want(P, 1.0f);
    fill(W, &seed, ties);
    for (uint64_t i = 0; i < P; i++) {
        m[i] = 0.01f * (float)(i % 97) + 0.5f;
        v[i] = 0.02f * (float)(i % 89) + 0.25f;
    }
    float *dW, *dm, *dv, *dmask;
    fhd__dev_scalars *dev;
    CK(cudaMalloc(&dW, P * 4));
    CK(cudaMalloc(&dm, P * 4));
    CK(cudaMalloc(&dv, P * 4));
    CK(cudaMalloc(&dmask, P * 4));
    CK(cudaMalloc(&dev, sizeof(fhd__dev_scalars)));
    CK(cudaMalloc(&s.a.groups, sizeof(fhd__prune_group) * s.a.ngroups));
    CK(cudaMalloc(&s.a.hist, sizeof(uint32_t) * FHD_PRUNE_BINS * s.a.ngroups));
    CK(cudaMalloc(&s.a.counter, sizeof(unsigned int)));
    CK(cudaMemset(s.a.groups, 0, sizeof(fhd__prune_group) * s.a.ngroups));
    CK(cudaMemset(s.a.hist, 0, sizeof(uint32_t) * FHD_PRUNE_BINS * s.a.ngroups));
    CK(cudaMemset(s.a.counter, 0, sizeof(unsigned int)));
    CK(cudaMemcpy(dW, W.data(), P * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dm, m.data(), P * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, v.data(), P * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dmask, mask.data(), P * 4, cudaMemcpyHostToDevice));
    s.a.W = dW;
    s.a.adam_m = dm;
    s.a.adam_v = dv;
    s.a.mask = dmask;
    s.a.dev = dev;

    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CK(fhd__cuda_prune_select(&s.a, st));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    size_t nn = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nn));
    std::vector<cudaGraphNode_t> nodes(nn);
    CK(cudaGraphGetNodes(graph, nodes.data(), &nn));
    int one = 0, kernels = 0;
    for (auto n : nodes) {
        cudaGraphNodeType ty;
        CK(cudaGraphNodeGetType(n, &ty));
        if (ty != cudaGraphNodeTypeKernel)
            continue;
        cudaKernelNodeParams kp;
        CK(cudaGraphKernelNodeGetParams(n, &kp));
        kernels++;
        one += kp.gridDim.x * kp.gridDim.y * kp.gridDim.z == 1;
    }
    char buf[160];
    snprintf(buf, sizeof buf, "%s: %d kernel nodes (passes + apply), none 1x1x1", what, kernels);
    check(kernels == FHD_PRUNE_PASSES + 1 && one == 0, buf, kernels, one);

    std::vector<float> gW(P), gm(P), gv(P), gmask(P);
    const uint64_t ts[] = {7, 5, 15, 16, 25, 35, 45, 46};
    for (uint64_t t : ts) {
        fhd__dev_scalars h;
        memset(&h, 0, sizeof h);
        h.updates = t;
        CK(cudaMemcpy(dev, &h, sizeof h, cudaMemcpyHostToDevice));
        /* the host model of the same update, from the weights before it */
        std::vector<float> W0 = W;
        double sp;
        const bool on = fhd__prune_at(&s.cfg, t, &sp);
        if (on) {
            expected(s, W0, t, want);
            for (uint64_t i = 0; i < P; i++)
                if (want[i] == 0.0f)
                    W[i] = m[i] = v[i] = 0.0f;
        }
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(gW.data(), dW, P * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gm.data(), dm, P * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gv.data(), dv, P * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gmask.data(), dmask, P * 4, cudaMemcpyDeviceToHost));
        long long bad_mask = 0, bad_state = 0, zeros = 0;
        for (uint64_t i = 0; i < P; i++) {
            bad_mask += gmask[i] != want[i];
            bad_state += memcmp(&gW[i], &W[i], 4) != 0 || gm[i] != m[i] || gv[i] != v[i];
            zeros += gmask[i] == 0.0f;
        }
        snprintf(buf, sizeof buf, "%s: update %llu (%s): masks as the rule, state as the model",
                 what, (unsigned long long)t, on ? "pruning" : "not pruning");
        check(bad_mask == 0 && bad_state == 0, buf, bad_mask, bad_state);
        if (on && t > 5) {
            snprintf(buf, sizeof buf, "%s: update %llu prunes", what, (unsigned long long)t);
            check(zeros > 0, buf, zeros, 0);
        }
    }
    /* the gradient mask: exactly the pruned entries become 0 */
    std::vector<float> g(P, 1.0f), gg(P);
    float *dg;
    CK(cudaMalloc(&dg, P * 4));
    CK(cudaMemcpy(dg, g.data(), P * 4, cudaMemcpyHostToDevice));
    CK(fhd__cuda_prune_mask(&s.a, dg, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(gg.data(), dg, P * 4, cudaMemcpyDeviceToHost));
    long long bad = 0;
    for (uint64_t i = 0; i < P; i++)
        bad += gg[i] != (want[i] == 0.0f ? 0.0f : 1.0f);
    snprintf(buf, sizeof buf, "%s: gradient masked exactly where pruned", what);
    check(bad == 0, buf, bad, 0);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(st));
    cudaFree(dg);
    cudaFree(dW);
    cudaFree(dm);
    cudaFree(dv);
    cudaFree(dmask);
    cudaFree(dev);
    cudaFree(s.a.groups);
    cudaFree(s.a.hist);
    cudaFree(s.a.counter);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const std::vector<uint64_t> net = {231, 561, 17, 85};           /* a small MLP, scope all */
    const std::vector<uint64_t> big = {4 * 2 * 9, 300000, 1024, 6}; /* conv, a wide layer, head */
    run(net, 0, 1, "small, per tensor, ties");
    run(net, 1, 1, "small, global, ties");
    run(big, 0, 1, "big, per tensor, ties");
    run(big, 1, 1, "big, global, ties");
    run(big, 0, 0, "big, per tensor, continuous");
    run(big, 1, 0, "big, global, continuous");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
