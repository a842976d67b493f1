/* test_sumtree_sampling.c - sampling from the fixed-point sum tree (sumtree.h / sumtree.c): the
 * stratum arithmetic against a 128-bit reference, sampling frequencies (chi-square), duplicates
 * inside a batch of sets, and strata shares of one draw. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "priority.h"
#include "sumtree.h"
#include "sumtree_model.h"
#include "test_util.h"

/* ---- 1. stratum arithmetic ------------------------------------------------------------------- */

static void test_stratum_target(void) {
    static const uint64_t Ts[] = {1,
                                  2,
                                  3,
                                  255,
                                  256,
                                  257,
                                  UINT64_C(1) << 32,
                                  (UINT64_C(1) << 26) * FHD_PRIO_MAX_Q,
                                  UINT64_MAX - 1,
                                  UINT64_MAX};
    static const uint32_t Bs[] = {1, 2, 3, 255, 256, 257, 1000, 0x7FFFFFFFu, 0xFFFFFFFFu};
    test_rng r = {99};
    long n = 0, bad = 0;
    int i;
    for (i = 0; i < 1000000; ++i) {
        uint64_t T = (i & 3) ? rng_next(&r) >> rng_below(&r, 64) : Ts[rng_below(&r, 10)];
        uint32_t B = (i & 4) ? 1 + (uint32_t)(rng_next(&r) >> (32 + rng_below(&r, 32)))
                             : Bs[rng_below(&r, 9)];
        uint32_t c = (uint32_t)rng_below(&r, 4);
        uint32_t j = c == 0 ? 0 : c == 1 ? B - 1 : (uint32_t)rng_below(&r, B);
        uint64_t rv = (i & 8) ? rng_next(&r) : ((i & 16) ? UINT64_MAX : 0);
        uint64_t got, lo;
        if (T == 0) {
            T = 1;
        }
        got = fhd__stratum_target(T, B, j, rv);
        lo = fhd__stratum_bound(T, B, j);
        bad += got != ref_stratum_target(T, B, j, rv) || got >= T || got < lo ||
               lo != (uint64_t)(((u128)j * T) / B) || fhd__stratum_bound(T, B, B) != T;
        ++n;
    }
    check(bad == 0,
          "stratum_target == 128-bit reference, lo <= target < T, bound(B) == T: %ld cases with "
          "T up to 2^64-1, B up to 2^32-1 (%ld bad)",
          n, bad);
}

/* ---- 2. sampling frequencies ---------------------------------------------------------------- */

/* Chi-square of counts against expected frequencies q[j] / total, over 64 leaves. */
static double chi_square(const uint64_t *counts, const uint64_t *q, uint32_t n, uint64_t draws) {
    uint64_t total = 0;
    double chi2 = 0;
    uint32_t j;
    for (j = 0; j < n; ++j) {
        total += q[j];
    }
    for (j = 0; j < n; ++j) {
        double e = (double)draws * (double)q[j] / (double)total;
        double d = (double)counts[j] - e;
        chi2 += d * d / e;
    }
    return chi2;
}

static void test_chi_square(void) {
    const double crit = 113.505;                   /* chi-square, 63 degrees of freedom, p = 1e-4 */
    const uint32_t L = 64, B = 256, rounds = 7813; /* 2,000,128 draws */
    uint64_t qs[2][64], counts[64];
    fhd__sumtree t;
    int set;
    test_rng r = {4242};
    uint32_t j;
    /* Set 0: small integers 1..97, so an off-by-one in the descent moves whole percents.
     * Set 1: realistic quantised priorities (|td| log-spread, alpha 0.6, eps 1e-6). */
    for (j = 0; j < L; ++j) {
        qs[0][j] = 1 + (j * 37u) % 97u;
        qs[1][j] = fhd__prio_from_td((float)exp(rng_unit(&r) * 12.0 - 8.0), 0.6f, 1e-6f);
    }
    fhd__sumtree_init(&t, L);
    for (set = 0; set < 2; ++set) {
        uint64_t rr[256];
        uint32_t idx[256], u, zero_hits = 0;
        uint64_t draws = 0, total;
        double chi2;
        for (j = 0; j < L; ++j) {
            fhd__sumtree_set(&t, j, qs[set][j]);
        }
        total = fhd__sumtree_total(&t);
        /* (a) independent draws: target uniform in [0, total) from Philox. */
        memset(counts, 0, sizeof counts);
        for (u = 0; u < rounds * B; ++u) {
            uint64_t x = fhd__rng_u64(SEED, FHD_RNG_STREAM_SAMPLE, 1000000 + u, 0);
            ++counts[fhd__sumtree_find(&t, fhd__rng_below64(x, total))];
            ++draws;
        }
        chi2 = chi_square(counts, qs[set], L, draws);
        check(chi2 < crit,
              "%s priorities (total %llu), %llu independent find() draws: chi-square %.2f < %.2f "
              "(df 63, p 1e-4)",
              set == 0 ? "small-integer" : "realistic", (unsigned long long)total,
              (unsigned long long)draws, chi2, crit);
        /* (b) stratified, B = 256 per update, r from the project's sampling stream. */
        memset(counts, 0, sizeof counts);
        draws = 0;
        for (u = 0; u < rounds; ++u) {
            for (j = 0; j < B; ++j) {
                rr[j] = fhd__rng_u64(SEED, FHD_RNG_STREAM_SAMPLE, u, j);
            }
            fhd__sumtree_sample_stratified(&t, B, rr, idx);
            for (j = 0; j < B; ++j) {
                ++counts[idx[j]];
                zero_hits += qs[set][idx[j]] == 0;
            }
            draws += B;
        }
        chi2 = chi_square(counts, qs[set], L, draws);
        check(chi2 < crit && zero_hits == 0,
              "%s priorities, %llu stratified draws (B = %u): chi-square %.2f < %.2f",
              set == 0 ? "small-integer" : "realistic", (unsigned long long)draws, B, chi2, crit);
    }
    fhd__sumtree_free(&t);
}

/* ---- 3. duplicates inside a batch ------------------------------------------------------------ */

static void test_batch_duplicates(void) {
    const uint32_t cap = 100, n = 2000;
    uint32_t *idx = (uint32_t *)malloc(n * sizeof(uint32_t));
    uint64_t *q = (uint64_t *)malloc(n * sizeof(uint64_t));
    uint64_t last[100];
    fhd__sumtree whole, single, split;
    test_rng r = {7};
    uint32_t i, s, splits_bad = 0;
    int ok;
    fhd__sumtree_init(&whole, cap);
    fhd__sumtree_init(&single, cap);
    fhd__sumtree_init(&split, cap);
    for (i = 0; i < cap; ++i) {
        last[i] = 0;
    }
    for (i = 0; i < n; ++i) {
        idx[i] = (uint32_t)rng_below(&r, 40); /* ~50 occurrences of each of 40 slots */
        q[i] = 1 + rng_below(&r, FHD_PRIO_MAX_Q);
        last[idx[i]] = q[i];
    }
    fhd__sumtree_set_batch(&whole, n, idx, q);
    for (i = 0; i < n; ++i) {
        fhd__sumtree_set(&single, idx[i], q[i]);
    }
    ok = memcmp(fhd__sumtree_leaf_values(&whole), last, sizeof last) == 0 &&
         memcmp(whole.nodes, single.nodes, 2 * (size_t)whole.leaves * sizeof(uint64_t)) == 0 &&
         fhd__sumtree_check(&whole) == 0;
    /* 50 random splits into consecutive chunks, applied in order. */
    for (s = 0; s < 50; ++s) {
        uint32_t pos = 0;
        fhd__sumtree_clear(&split);
        while (pos < n) {
            uint32_t len = (uint32_t)rng_below(&r, s < 25 ? 8 : 400);
            if (len > n - pos) {
                len = n - pos;
            }
            fhd__sumtree_set_batch(&split, len, idx + pos, q + pos);
            pos += len;
        }
        splits_bad +=
            memcmp(split.nodes, whole.nodes, 2 * (size_t)whole.leaves * sizeof(uint64_t)) != 0;
    }
    check(
        ok && splits_bad == 0,
        "batch of %u sets on 40 slots (~50 duplicates each): last occurrence wins; whole batch == "
        "one by one == 50 random splits (%u differ)",
        n, splits_bad);
    fhd__sumtree_free(&whole);
    fhd__sumtree_free(&single);
    fhd__sumtree_free(&split);
    free(idx);
    free(q);
}

/* W shares [r B, (r + 1) B) of one draw of W B strata, each sampled on its own
 * (fhd__sumtree_sample_strata, a rank's share in distributed training), equal the one draw. */
static void test_strata_shares(void) {
    enum { CAP = 1000, B = 24, W = 4 };
    uint64_t rr[W * B];
    uint32_t whole[W * B], part[W * B];
    fhd__sumtree t;
    test_rng r = {11};
    uint32_t i, w, bad = 0, nonstrat = 0;
    fhd__sumtree_init(&t, CAP);
    for (i = 0; i < CAP; ++i)
        fhd__sumtree_set(&t, i, 1 + rng_below(&r, 1000));
    for (i = 0; i < W * B; ++i)
        rr[i] = rng_next(&r);
    fhd__sumtree_sample_stratified(&t, W * B, rr, whole);
    for (w = 0; w < W; ++w)
        fhd__sumtree_sample_strata(&t, B, W * B, w * B, rr + w * B, part + w * B);
    for (i = 0; i < W * B; ++i)
        bad += part[i] != whole[i];
    /* and a share is not the share's own stratified draw of B */
    fhd__sumtree_sample_stratified(&t, B, rr + B, part);
    for (i = 0; i < B; ++i)
        nonstrat += part[i] != whole[B + i];
    check(bad == 0 && nonstrat > 0,
          "%d shares of %d strata of one draw of %d: %u slots differ from the one draw; the "
          "share's own draw of %d differs in %u",
          W, B, W * B, bad, B, nonstrat);
    fhd__sumtree_free(&t);
}

int main(void) {
    double t0 = now_seconds();
    printf("test_sumtree_sampling\n");
    test_stratum_target();
    test_chi_square();
    test_batch_duplicates();
    test_strata_shares();
    printf("time %.2f s\n", now_seconds() - t0);
    return report();
}
