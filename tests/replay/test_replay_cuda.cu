/* test_replay_cuda.cu - the device builds of philox.h, priority.h, divisor.h and the sumtree.h
 * inline pieces reproduce the host bit for bit. Exit code 77 (skipped) when no CUDA device is
 * present. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divisor.h"
#include "philox.h"
#include "priority.h"
#include "priority_golden.h"
#include "sumtree.h"
#include "test_util.h"

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- kernels -------------------------------------------------------------------------------- */

__global__ void k_divide(int n, const fhd_divisor *d, const uint32_t *x, uint32_t *q) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        q[i] = fhd_divide(d[i], x[i]);
}

__global__ void k_pow(int n, const double *x, const double *y, double *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = fhd__det_pow(x[i], y[i]);
    }
}

__global__ void k_from_td(int n, const float *td, const float *alpha, const float *eps,
                          uint64_t *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = fhd__prio_from_td(td[i], alpha[i], eps[i]);
    }
}

__global__ void k_quantize(int n, const double *p, uint64_t *q, double *deq) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        q[i] = fhd__prio_quantize(p[i]);
        deq[i] = fhd__prio_dequantize(q[i]);
    }
}

/* Draw i: seed, stream, n, k taken from the input arrays. */
__global__ void k_philox(int n, const uint64_t *seed, const uint32_t *stream, const uint64_t *ev,
                         const uint32_t *k, fhd__u32x4 *out, uint64_t *r64, float *uf, double *ud) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        fhd__u32x4 x = fhd__rng_draw(seed[i], stream[i], ev[i], k[i]);
        out[i] = x;
        r64[i] = fhd__rng_u64(seed[i], stream[i], ev[i], k[i]);
        uf[i] = fhd__rng_u01f(x.v[0]);
        ud[i] = fhd__rng_u01d(x.v[1], x.v[2]);
    }
}

__global__ void k_stratum(int n, const uint64_t *T, const uint32_t *B, const uint32_t *j,
                          const uint64_t *r, uint64_t *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = fhd__stratum_target(T[i], B[i], j[i], r[i]);
    }
}

/* Sampling as the CUDA backend will do it: thread (u, j) draws r from the sampling stream for
 * update u, row j, then descends. idx[u * B + j]. */
__global__ void k_sample(const uint64_t *nodes, uint32_t leaves, uint32_t B, uint32_t rounds,
                         uint64_t seed, uint32_t *idx) {
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < B * rounds) {
        uint32_t u = t / B, j = t % B;
        uint64_t r = fhd__rng_u64(seed, FHD_RNG_STREAM_SAMPLE, u, j);
        idx[t] = fhd__sumtree_descend(nodes, leaves, fhd__stratum_target(nodes[1], B, j, r));
    }
}

/* ---- helpers -------------------------------------------------------------------------------- */

template <typename T> static T *to_dev(const T *h, size_t n) {
    T *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, n * sizeof(T)));
    CUDA_OK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T> static T *dev_alloc(size_t n) {
    T *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, n * sizeof(T)));
    return d;
}

template <typename T> static void to_host(T *h, const T *d, size_t n) {
    CUDA_OK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
}

static unsigned grid(size_t n) {
    return (unsigned)((n + 255) / 256);
}

static uint64_t bits64(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static uint32_t bits32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_golden(void) {
    const int n = GOLDEN_N;
    double *x = (double *)malloc(n * sizeof(double)), *y = (double *)malloc(n * sizeof(double));
    double *p = (double *)malloc(n * sizeof(double));
    float *td = (float *)malloc(n * sizeof(float)), *al = (float *)malloc(n * sizeof(float));
    float *ep = (float *)malloc(n * sizeof(float));
    uint64_t *q = (uint64_t *)malloc(n * sizeof(uint64_t)), hp = FNV1A_INIT, ht = FNV1A_INIT;
    test_rng r = {GOLDEN_SEED};
    int i;
    for (i = 0; i < n; ++i) {
        golden_input g = golden_next(&r, i);
        x[i] = g.x;
        y[i] = g.y;
        td[i] = g.td;
        al[i] = g.alpha;
        ep[i] = g.eps;
    }
    {
        double *dx = to_dev(x, n), *dy = to_dev(y, n), *dp = dev_alloc<double>(n);
        float *dtd = to_dev(td, n), *dal = to_dev(al, n), *dep = to_dev(ep, n);
        uint64_t *dq = dev_alloc<uint64_t>(n);
        k_pow<<<grid(n), 256>>>(n, dx, dy, dp);
        k_from_td<<<grid(n), 256>>>(n, dtd, dal, dep, dq);
        CUDA_OK(cudaDeviceSynchronize());
        to_host(p, dp, n);
        to_host(q, dq, n);
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dp);
        cudaFree(dtd);
        cudaFree(dal);
        cudaFree(dep);
        cudaFree(dq);
    }
    for (i = 0; i < n; ++i) {
        hp = fnv1a(hp, bits64(p[i]));
        ht = fnv1a(ht, q[i]);
    }
    check(hp == GOLDEN_POW_HASH && ht == GOLDEN_TD_HASH,
          "device: %d det_pow / from_td results hash to the golden values (%016llx, %016llx)", n,
          (unsigned long long)hp, (unsigned long long)ht);
    hp = ht = FNV1A_INIT;
    for (i = 0; i < n; ++i) { /* the host side of this .cu, compiled through nvcc */
        hp = fnv1a(hp, bits64(fhd__det_pow(x[i], y[i])));
        ht = fnv1a(ht, fhd__prio_from_td(td[i], al[i], ep[i]));
    }
    check(hp == GOLDEN_POW_HASH && ht == GOLDEN_TD_HASH,
          "host code built by nvcc: the same golden values (%016llx, %016llx)",
          (unsigned long long)hp, (unsigned long long)ht);
    free(x);
    free(y);
    free(p);
    free(td);
    free(al);
    free(ep);
    free(q);
}

static void test_pow_elementwise(void) {
    const int n = 4000000;
    double *x = (double *)malloc(n * sizeof(double)), *y = (double *)malloc(n * sizeof(double));
    double *p = (double *)malloc(n * sizeof(double)), *pq = (double *)malloc(n * sizeof(double));
    double *deq = (double *)malloc(n * sizeof(double));
    float *td = (float *)malloc(n * sizeof(float)), *al = (float *)malloc(n * sizeof(float));
    float *ep = (float *)malloc(n * sizeof(float));
    uint64_t *q = (uint64_t *)malloc(n * sizeof(uint64_t));
    uint64_t *qq = (uint64_t *)malloc(n * sizeof(uint64_t));
    long bad_pow = 0, bad_td = 0, bad_q = 0;
    test_rng r = {271828};
    int i;
    for (i = 0; i < n; ++i) {
        uint64_t u = rng_next(&r);
        int c = i & 7;
        if (c < 4) { /* PER range */
            x[i] = rand_x_bits(&r);
            y[i] = rng_unit(&r);
        } else if (c < 6) { /* any finite positive double, subnormals included */
            u = rng_next(&r) % UINT64_C(0x7FF0000000000000);
            memcpy(&x[i], &u, sizeof u);
            y[i] = rng_unit(&r) * 3.0 - 1.0;
        } else { /* raw bit patterns: NaN, inf, negative, zero */
            memcpy(&x[i], &u, sizeof u);
            y[i] = (i & 8) ? rng_unit(&r) : (double)(int64_t)rng_below(&r, 5) * 0.5 - 1.0;
        }
        td[i] = (float)rng_unit(&r) * (float)(1u << rng_below(&r, 20)) * 1e-3f;
        if ((i & 63) == 0) {
            uint32_t b = (uint32_t)rng_next(&r);
            memcpy(&td[i], &b, sizeof b); /* any bits */
        }
        al[i] = (i & 15) == 0 ? (float)(rng_below(&r, 3)) * 0.5f : (float)rng_unit(&r);
        ep[i] = (i & 3) == 0 ? 0.0f : (float)rng_unit(&r) * 1e-3f;
        pq[i] = (i & 1) ? rng_unit(&r) * 20000.0 : x[i];
    }
    {
        double *dx = to_dev(x, n), *dy = to_dev(y, n), *dp = dev_alloc<double>(n);
        float *dtd = to_dev(td, n), *dal = to_dev(al, n), *dep = to_dev(ep, n);
        double *dpq = to_dev(pq, n), *ddeq = dev_alloc<double>(n);
        uint64_t *dq = dev_alloc<uint64_t>(n), *dqq = dev_alloc<uint64_t>(n);
        k_pow<<<grid(n), 256>>>(n, dx, dy, dp);
        k_from_td<<<grid(n), 256>>>(n, dtd, dal, dep, dq);
        k_quantize<<<grid(n), 256>>>(n, dpq, dqq, ddeq);
        CUDA_OK(cudaDeviceSynchronize());
        to_host(p, dp, n);
        to_host(q, dq, n);
        to_host(qq, dqq, n);
        to_host(deq, ddeq, n);
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dp);
        cudaFree(dtd);
        cudaFree(dal);
        cudaFree(dep);
        cudaFree(dpq);
        cudaFree(ddeq);
        cudaFree(dq);
        cudaFree(dqq);
    }
    for (i = 0; i < n; ++i) {
        double h = fhd__det_pow(x[i], y[i]);
        /* NaN payloads may differ; any NaN matches any NaN. */
        bad_pow += !(bits64(h) == bits64(p[i]) || (h != h && p[i] != p[i]));
        bad_td += fhd__prio_from_td(td[i], al[i], ep[i]) != q[i];
        bad_q += fhd__prio_quantize(pq[i]) != qq[i] ||
                 bits64(fhd__prio_dequantize(qq[i])) != bits64(deq[i]);
    }
    check(bad_pow == 0,
          "device det_pow == host bit for bit: %d inputs (PER range, all finite "
          "doubles, raw bit patterns): %ld differ",
          n, bad_pow);
    check(bad_td == 0,
          "device from_td == host: %d inputs (incl. NaN/inf/negative bits): %ld differ", n, bad_td);
    check(bad_q == 0, "device quantize / dequantize == host: %d inputs: %ld differ", n, bad_q);
    (void)bits32;
    free(x);
    free(y);
    free(p);
    free(pq);
    free(deq);
    free(td);
    free(al);
    free(ep);
    free(q);
    free(qq);
}

static void test_philox(void) {
    const int n = 1000000;
    uint64_t *seed = (uint64_t *)malloc(n * sizeof(uint64_t)), *ev = (uint64_t *)malloc(n * 8);
    uint32_t *st = (uint32_t *)malloc(n * 4), *k = (uint32_t *)malloc(n * 4);
    fhd__u32x4 *out = (fhd__u32x4 *)malloc(n * sizeof(fhd__u32x4));
    uint64_t *r64 = (uint64_t *)malloc(n * 8);
    float *uf = (float *)malloc(n * 4);
    double *ud = (double *)malloc(n * 8);
    test_rng r = {31};
    long bad = 0, kat_bad = 0;
    int i;
    for (i = 0; i < n; ++i) {
        seed[i] = rng_next(&r);
        st[i] = (uint32_t)rng_below(&r, 6);
        ev[i] = (i & 1) ? rng_next(&r) : (uint64_t)i;
        k[i] = (uint32_t)rng_next(&r);
    }
    /* The three Random123 known answers, through the project convention. */
    seed[0] = 0;
    st[0] = 0;
    ev[0] = 0;
    k[0] = 0;
    seed[1] = UINT64_MAX;
    st[1] = 0xFFFFFFFFu;
    ev[1] = UINT64_MAX;
    k[1] = 0xFFFFFFFFu;
    seed[2] = UINT64_C(0x299f31d0a4093822);
    st[2] = 0x03707344;
    ev[2] = UINT64_C(0x85a308d3243f6a88);
    k[2] = 0x13198a2e;
    {
        uint64_t *dseed = to_dev(seed, n), *dev_ = to_dev(ev, n), *dr64 = dev_alloc<uint64_t>(n);
        uint32_t *dst = to_dev(st, n), *dk = to_dev(k, n);
        fhd__u32x4 *dout = dev_alloc<fhd__u32x4>(n);
        float *duf = dev_alloc<float>(n);
        double *dud = dev_alloc<double>(n);
        k_philox<<<grid(n), 256>>>(n, dseed, dst, dev_, dk, dout, dr64, duf, dud);
        CUDA_OK(cudaDeviceSynchronize());
        to_host(out, dout, n);
        to_host(r64, dr64, n);
        to_host(uf, duf, n);
        to_host(ud, dud, n);
        cudaFree(dseed);
        cudaFree(dev_);
        cudaFree(dr64);
        cudaFree(dst);
        cudaFree(dk);
        cudaFree(dout);
        cudaFree(duf);
        cudaFree(dud);
    }
    kat_bad = out[0].v[0] != 0x6627e8d5u || out[0].v[3] != 0x9b00dbd8u ||
              out[1].v[0] != 0x408f276du || out[1].v[3] != 0x6d5451fdu ||
              out[2].v[0] != 0xd16cfe09u || out[2].v[1] != 0x94fdccebu ||
              out[2].v[2] != 0x5001e420u || out[2].v[3] != 0x24126ea1u;
    for (i = 0; i < n; ++i) {
        fhd__u32x4 h = fhd__rng_draw(seed[i], st[i], ev[i], k[i]);
        bad += memcmp(&h, &out[i], sizeof h) != 0 ||
               fhd__rng_u64(seed[i], st[i], ev[i], k[i]) != r64[i] ||
               bits32(fhd__rng_u01f(h.v[0])) != bits32(uf[i]) ||
               bits64(fhd__rng_u01d(h.v[1], h.v[2])) != bits64(ud[i]);
    }
    check(kat_bad == 0, "device philox reproduces the Random123 known answers");
    check(bad == 0, "device rng_draw / rng_u64 / u01f / u01d == host: %d draws, %ld differ", n,
          bad);
    free(seed);
    free(ev);
    free(st);
    free(k);
    free(out);
    free(r64);
    free(uf);
    free(ud);
}

static void test_stratum(void) {
    const int n = 1000000;
    uint64_t *T = (uint64_t *)malloc(n * 8), *rv = (uint64_t *)malloc(n * 8);
    uint64_t *out = (uint64_t *)malloc(n * 8);
    uint32_t *B = (uint32_t *)malloc(n * 4), *j = (uint32_t *)malloc(n * 4);
    test_rng r = {17};
    long bad = 0;
    int i;
    for (i = 0; i < n; ++i) {
        T[i] = 1 + (rng_next(&r) >> rng_below(&r, 64));
        if ((i & 15) == 0) {
            T[i] = UINT64_MAX - rng_below(&r, 3);
        }
        B[i] = 1 + (uint32_t)(rng_next(&r) >> (32 + rng_below(&r, 32)));
        if ((i & 31) == 1) {
            B[i] = 0xFFFFFFFFu;
        }
        j[i] = (i & 3) == 0 ? B[i] - 1 : (uint32_t)rng_below(&r, B[i]);
        rv[i] = (i & 7) == 2 ? UINT64_MAX : rng_next(&r);
    }
    {
        uint64_t *dT = to_dev(T, n), *dr = to_dev(rv, n), *dout = dev_alloc<uint64_t>(n);
        uint32_t *dB = to_dev(B, n), *dj = to_dev(j, n);
        k_stratum<<<grid(n), 256>>>(n, dT, dB, dj, dr, dout);
        CUDA_OK(cudaDeviceSynchronize());
        to_host(out, dout, n);
        cudaFree(dT);
        cudaFree(dr);
        cudaFree(dout);
        cudaFree(dB);
        cudaFree(dj);
    }
    for (i = 0; i < n; ++i) {
        bad += fhd__stratum_target(T[i], B[i], j[i], rv[i]) != out[i];
    }
    check(bad == 0,
          "device stratum_target == host: %d cases, T up to 2^64-1, B up to 2^32-1: %ld "
          "differ",
          n, bad);
    free(T);
    free(rv);
    free(out);
    free(B);
    free(j);
}

static void test_divide(void) {
    const int n = 1000000;
    fhd_divisor *d = (fhd_divisor *)malloc(n * sizeof(fhd_divisor));
    uint32_t *x = (uint32_t *)malloc(n * 4), *q = (uint32_t *)malloc(n * 4);
    test_rng r = {29};
    long bad = 0;
    int i;
    /* small row lengths, then any divisor; numerators of every magnitude up to 2^32 - 1 */
    for (i = 0; i < n; ++i) {
        const uint32_t dv = (i & 1) ? 1 + (uint32_t)rng_below(&r, 4096)
                                    : 1 + (uint32_t)(rng_next(&r) >> (32 + rng_below(&r, 32)));
        d[i] = fhd_divisor_make(dv);
        x[i] = (i & 7) == 0 ? 0xFFFFFFFFu : (uint32_t)(rng_next(&r) >> (32 + rng_below(&r, 32)));
    }
    {
        fhd_divisor *dd = to_dev(d, n);
        uint32_t *dx = to_dev(x, n), *dq = dev_alloc<uint32_t>(n);
        k_divide<<<grid(n), 256>>>(n, dd, dx, dq);
        CUDA_OK(cudaDeviceSynchronize());
        to_host(q, dq, n);
        cudaFree(dd);
        cudaFree(dx);
        cudaFree(dq);
    }
    for (i = 0; i < n; ++i)
        bad += q[i] != x[i] / d[i].d || q[i] != fhd_divide(d[i], x[i]);
    check(bad == 0, "device fhd_divide == host and == x / d: %d cases: %ld differ", n, bad);
    free(d);
    free(x);
    free(q);
}

static void test_sampling(void) {
    const uint32_t cap = 65539, B = 256, rounds = 4000;
    const uint64_t seed = UINT64_C(0xABCDEF0123456789);
    fhd__sumtree t;
    test_rng r = {3};
    uint32_t u, jj, *dev_idx = (uint32_t *)malloc((size_t)B * rounds * 4), host_idx[256];
    uint64_t rr[256];
    long bad = 0;
    fhd__sumtree_init(&t, cap);
    for (u = 0; u < cap; ++u) {
        uint64_t c = rng_below(&r, 10);
        fhd__sumtree_set(&t, u,
                         c == 0   ? 0
                         : c == 1 ? FHD_PRIO_MAX_Q
                         : c == 2 ? 1
                                  : fhd__prio_from_td((float)rng_unit(&r) * 50.0f, 0.6f, 1e-6f));
    }
    {
        uint64_t *dn = to_dev(t.nodes, 2 * (size_t)t.leaves);
        uint32_t *di = dev_alloc<uint32_t>((size_t)B * rounds);
        k_sample<<<grid((size_t)B * rounds), 256>>>(dn, t.leaves, B, rounds, seed, di);
        CUDA_OK(cudaDeviceSynchronize());
        to_host(dev_idx, di, (size_t)B * rounds);
        cudaFree(dn);
        cudaFree(di);
    }
    for (u = 0; u < rounds; ++u) {
        for (jj = 0; jj < B; ++jj) {
            rr[jj] = fhd__rng_u64(seed, FHD_RNG_STREAM_SAMPLE, u, jj);
        }
        fhd__sumtree_sample_stratified(&t, B, rr, host_idx);
        for (jj = 0; jj < B; ++jj) {
            bad += host_idx[jj] != dev_idx[(size_t)u * B + jj];
        }
    }
    check(bad == 0,
          "device sampling (philox + stratum_target + descend) == host sample_stratified: "
          "capacity %u, %u updates x B = %u: %ld differ",
          cap, rounds, B, bad);
    fhd__sumtree_free(&t);
    free(dev_idx);
}

int main(void) {
    int ndev = 0;
    double t0 = now_seconds();
    cudaDeviceProp prop;
    printf("test_replay_cuda\n");
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    test_golden();
    test_pow_elementwise();
    test_philox();
    test_stratum();
    test_divide();
    test_sampling();
    printf("time %.2f s\n", now_seconds() - t0);
    return report();
}
