/* test_philox.c - Philox4x32-10 known answers, the project's counter/key convention, and the
 * integer -> uniform helpers. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "philox.h"
#include "test_util.h"

uint64_t test_mulhi64_portable(uint64_t a, uint64_t b); /* philox_portable.c */

__extension__ typedef unsigned __int128 u128;

static int eq4(fhd__u32x4 a, const uint32_t *b) {
    return a.v[0] == b[0] && a.v[1] == b[1] && a.v[2] == b[2] && a.v[3] == b[3];
}

/* Random123 tests/kat_vectors, philox4x32 R = 10: counter, key, expected output. */
static const uint32_t kat[3][10] = {
    {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, /* */
     0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
    {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, /* */
     0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
    {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, /* */
     0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
};

static void test_kat(void) {
    int i;
    for (i = 0; i < 3; ++i) {
        fhd__u32x4 c, o, d;
        uint64_t seed = (uint64_t)kat[i][5] << 32 | kat[i][4];
        uint64_t n = (uint64_t)kat[i][1] << 32 | kat[i][0];
        c.v[0] = kat[i][0];
        c.v[1] = kat[i][1];
        c.v[2] = kat[i][2];
        c.v[3] = kat[i][3];
        o = fhd__philox4x32_10(c, kat[i][4], kat[i][5]);
        check(eq4(o, &kat[i][6]),
              "philox4x32_10 KAT %d: ctr %08x %08x %08x %08x key %08x %08x -> %08x %08x %08x %08x",
              i, c.v[0], c.v[1], c.v[2], c.v[3], kat[i][4], kat[i][5], o.v[0], o.v[1], o.v[2],
              o.v[3]);
        /* The convention: key = (lo32 seed, hi32 seed), ctr = (lo32 n, hi32 n, k, stream). */
        d = fhd__rng_draw(seed, kat[i][3], n, kat[i][2]);
        check(eq4(d, &kat[i][6]),
              "rng_draw(seed %016llx, stream %08x, n %016llx, k %08x) reproduces KAT %d",
              (unsigned long long)seed, kat[i][3], (unsigned long long)n, kat[i][2], i);
        check(fhd__rng_u64(seed, kat[i][3], n, kat[i][2]) ==
                  ((uint64_t)kat[i][6] << 32 | kat[i][7]),
              "rng_u64 = v[0] << 32 | v[1] for KAT %d", i);
    }
}

static void test_streams_differ(void) {
    /* Same (seed, n, k), different stream / k / n / seed: all outputs differ (no counter reuse). */
    uint64_t seen[6];
    int i, j, distinct = 1;
    seen[0] = fhd__rng_u64(42, FHD_RNG_STREAM_INIT, 7, 3);
    seen[1] = fhd__rng_u64(42, FHD_RNG_STREAM_SN_INIT, 7, 3);
    seen[2] = fhd__rng_u64(42, FHD_RNG_STREAM_SAMPLE, 7, 3);
    seen[3] = fhd__rng_u64(42, FHD_RNG_STREAM_EXPLORE, 7, 3);
    seen[4] = fhd__rng_u64(42, FHD_RNG_STREAM_SAMPLE, 7 + (UINT64_C(1) << 32), 3);
    seen[5] = fhd__rng_u64(42 + (UINT64_C(1) << 32), FHD_RNG_STREAM_SAMPLE, 7, 3);
    for (i = 0; i < 6; ++i) {
        for (j = i + 1; j < 6; ++j) {
            distinct &= seen[i] != seen[j];
        }
    }
    check(distinct,
          "streams 1..4, the high word of n and the high word of seed all change the output");
}

static void test_uniform(void) {
    const uint32_t N = 1000000;
    double sf = 0, sf2 = 0, sd = 0, sd2 = 0, mf, vf, md, vd;
    uint64_t ones = 0;
    uint32_t i, out_of_range = 0;
    for (i = 0; i < N; ++i) {
        fhd__u32x4 x = fhd__rng_draw(UINT64_C(0x0123456789abcdef), FHD_RNG_STREAM_SAMPLE, i, 0);
        float f = fhd__rng_u01f(x.v[2]);
        double d = fhd__rng_u01d(x.v[0], x.v[1]);
        int w;
        out_of_range += !(f >= 0.0f && f < 1.0f) + !(d >= 0.0 && d < 1.0);
        sf += f;
        sf2 += (double)f * f;
        sd += d;
        sd2 += d * d;
        for (w = 0; w < 4; ++w) {
            uint32_t v = x.v[w];
            while (v) {
                v &= v - 1;
                ++ones;
            }
        }
    }
    mf = sf / N;
    vf = sf2 / N - mf * mf;
    md = sd / N;
    vd = sd2 / N - md * md;
    check(out_of_range == 0, "u01f / u01d in [0,1) over %u draws (%u out of range)", N,
          out_of_range);
    /* 5 sigma: sd(mean) = sqrt(1/12 / N) = 2.9e-4; sd(var) ~ sqrt(1/180 / N) = 7.5e-5. */
    check(fabs(mf - 0.5) < 1.5e-3 && fabs(vf - 1.0 / 12) < 4e-4,
          "u01f over %u draws: mean %.6f (0.5), variance %.6f (%.6f)", N, mf, vf, 1.0 / 12);
    check(fabs(md - 0.5) < 1.5e-3 && fabs(vd - 1.0 / 12) < 4e-4,
          "u01d over %u draws: mean %.6f (0.5), variance %.6f (%.6f)", N, md, vd, 1.0 / 12);
    /* 128 N bits, sd of the fraction of ones = sqrt(1/4 / (128 N)) = 4.4e-5. */
    check(fabs((double)ones / (128.0 * N) - 0.5) < 2.5e-4,
          "fraction of one bits %.6f over %u draws", (double)ones / (128.0 * N), N);
    check(fhd__rng_u01f(0) == 0.0f && fhd__rng_u01f(0xFFFFFFFFu) == 1.0f - 1.0f / 16777216.0f &&
              fhd__rng_u01d(0, 0) == 0.0 &&
              fhd__rng_u01d(0xFFFFFFFFu, 0xFFFFFFFFu) == 1.0 - 1.0 / 9007199254740992.0,
          "u01f, u01d extremes: 0 -> 0, all ones -> 1 - 2^-24, 1 - 2^-53");
}

static void test_below(void) {
    const uint32_t N = 1000000;
    uint32_t i, bad = 0, counts[10] = {0};
    uint64_t bad64 = 0, bad_portable = 0;
    double chi2 = 0;
    test_rng r = {12345};
    for (i = 0; i < N; ++i) {
        fhd__u32x4 x = fhd__rng_draw(99, FHD_RNG_STREAM_EXPLORE, i, 1);
        uint32_t n = (uint32_t)rng_next(&r) | 1u;
        bad += fhd__rng_below(x.v[0], n) >= n;
        ++counts[fhd__rng_below(x.v[1], 10)];
    }
    for (i = 0; i < 10; ++i) {
        double e = N / 10.0;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    check(bad == 0 && fhd__rng_below(0xFFFFFFFFu, 7) == 6 && fhd__rng_below(0, 7) == 0 &&
              fhd__rng_below(0xFFFFFFFFu, 0xFFFFFFFFu) == 0xFFFFFFFEu,
          "rng_below(x, n) < n over %u draws, extremes", N);
    check(chi2 < 33.72, "rng_below(x, 10) over %u draws: chi-square %.2f < 33.72 (df 9, p 1e-4)", N,
          chi2);
    for (i = 0; i < N + 16; ++i) {
        uint64_t a, b, ref;
        if (i < 16) { /* edge values */
            static const uint64_t e[4] = {0, 1, UINT64_MAX, UINT64_C(0x8000000000000000)};
            a = e[i & 3];
            b = e[i >> 2];
        } else {
            a = rng_next(&r) >> (rng_next(&r) & 63);
            b = rng_next(&r) >> (rng_next(&r) & 63);
        }
        ref = (uint64_t)(((u128)a * b) >> 64);
        bad64 += fhd__rng_below64(a, b) != ref || (b && fhd__rng_below64(a, b) >= b);
        bad_portable += test_mulhi64_portable(a, b) != ref;
    }
    check(bad64 == 0, "rng_below64 == high 64 bits of the 128-bit product, < n (%u pairs)", N + 16);
    check(bad_portable == 0, "portable mulhi64 == unsigned __int128 (%u pairs, %llu mismatches)",
          N + 16, (unsigned long long)bad_portable);
}

int main(void) {
    double t0 = now_seconds();
    printf("test_philox\n");
    test_kat();
    test_streams_differ();
    test_uniform();
    test_below();
    printf("time %.2f s\n", now_seconds() - t0);
    return report();
}
