/* test_priority.c - deterministic pow and priority quantisation (priority.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "priority.h"
#include "priority_golden.h"
#include "test_util.h"

static uint64_t bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* x log-uniform in [1e-12, 1e6]. */
static double rand_x(test_rng *r) {
    return exp(log(1e-12) + rng_unit(r) * (log(1e6) - log(1e-12)));
}

/* round(p * 2^24) clamped like fhd__prio_quantize, with libm. */
static uint64_t ref_quantize(double p) {
    double v = p * 16777216.0;
    if (v >= (double)FHD_PRIO_MAX_Q) {
        return FHD_PRIO_MAX_Q;
    }
    v = round(v);
    return v < 1.0 ? 1 : (uint64_t)v;
}

static void test_pow_accuracy(void) {
    const int N = 2000000;
    static const double ys[] = {
        1e-9, 1e-6, 0.01, 0.1, 0.25, 0.4, 0.5, 0.6, 0.7, 0.75, 0.9, 0.99, 0.9999999999999999};
    static const double xs[] = {1e-12,
                                1e6,
                                1.0000000000000002,
                                0.9999999999999999,
                                0.5,
                                2.0,
                                1.4142135623730951,
                                1.4142135623730954,
                                0.7071067811865476,
                                0.7071067811865475,
                                3.0,
                                1e-6,
                                16384.0,
                                1e-3,
                                123456.789};
    test_rng r = {2024};
    double max_rel = 0, worst_x = 0, worst_y = 0;
    long quant_off[3] = {0, 0, 0}, quant_bad = 0;
    int i, j, n = 0;
    for (i = 0; i < N + (int)(sizeof xs / sizeof xs[0] * (sizeof ys / sizeof ys[0])); ++i) {
        double x, y, got, want, rel;
        uint64_t q, qr;
        if (i < N) {
            x = rand_x(&r);
            y = (i & 7) == 0 ? ys[rng_below(&r, sizeof ys / sizeof ys[0])] : rng_unit(&r);
        } else {
            j = i - N;
            x = xs[j % (int)(sizeof xs / sizeof xs[0])];
            y = ys[j / (int)(sizeof xs / sizeof xs[0])];
        }
        got = fhd__det_pow(x, y);
        want = pow(x, y);
        rel = fabs(got - want) / want;
        if (!(rel <= max_rel)) {
            max_rel = rel;
            worst_x = x;
            worst_y = y;
        }
        q = fhd__prio_quantize(got);
        qr = ref_quantize(want);
        if (q == qr) {
            ++quant_off[1];
        } else if (q + 1 == qr) {
            ++quant_off[0];
        } else if (q == qr + 1) {
            ++quant_off[2];
        } else {
            ++quant_bad;
        }
        ++n;
    }
    check(max_rel <= 1e-12,
          "det_pow vs libm pow, %d inputs x in [1e-12, 1e6], y in [0, 1]: max relative error %.3g "
          "(at x = %.17g, y = %.17g), limit 1e-12",
          n, max_rel, worst_x, worst_y);
    check(quant_bad == 0,
          "quantize(det_pow) - round(pow * 2^24): -1: %ld, 0: %ld, +1: %ld, other: %ld",
          quant_off[0], quant_off[1], quant_off[2], quant_bad);
}

static void test_pow_wide(void) {
    /* Outside the PER range: wide exponents, y outside [0, 1], subnormal x. */
    const int N = 500000;
    test_rng r = {77};
    double max_rel = 0;
    int i, special_ok;
    for (i = 0; i < N; ++i) {
        double x = exp(rng_unit(&r) * 1380.0 - 690.0); /* ~[1e-300, 1e300] */
        double y = rng_unit(&r) * 2.0 - 1.0;
        double want = pow(x, y), got = fhd__det_pow(x, y);
        double rel = fabs(got - want) / want;
        if (!(rel <= max_rel)) {
            max_rel = rel;
        }
    }
    check(max_rel <= 1e-12,
          "det_pow, %d inputs x in [1e-300, 1e300], y in [-1, 1]: max relative "
          "error %.3g",
          N, max_rel);
    {
        double sub = 4.9406564584124654e-324 * 12345.0; /* subnormal */
        double g1 = fhd__det_pow(sub, 0.5), w1 = pow(sub, 0.5);
        double g2 = fhd__det_pow(0.5, 1060.0), w2 = pow(0.5, 1060.0); /* subnormal result */
        double g3 = fhd__det_pow(2.0, 1023.5), w3 = pow(2.0, 1023.5); /* near overflow */
        check(fabs(g1 - w1) / w1 < 1e-12 && g2 == w2 && fabs(g3 - w3) / w3 < 1e-12,
              "det_pow subnormal x: %.17g (%.17g); subnormal result %.17g (%.17g); "
              "2^1023.5 = %.17g (%.17g)",
              g1, w1, g2, w2, g3, w3);
    }
    special_ok = fhd__det_pow(3.0, 0.0) == 1.0 && fhd__det_pow(1.0, 0.37) == 1.0 &&
                 fhd__det_pow(0.123, 1.0) == 0.123 && fhd__det_pow(0.0, 0.5) == 0.0 &&
                 fhd__det_pow(0.0, -0.5) == INFINITY && fhd__det_pow(INFINITY, 0.5) == INFINITY &&
                 fhd__det_pow(INFINITY, -0.5) == 0.0 && isnan(fhd__det_pow(-2.0, 0.5)) &&
                 isnan(fhd__det_pow(NAN, 0.5)) && isnan(fhd__det_pow(2.0, NAN)) &&
                 fhd__det_pow(NAN, 0.0) == 1.0 && fhd__det_pow(2.0, 2000.0) == INFINITY &&
                 fhd__det_pow(2.0, -2000.0) == 0.0 && fhd__det_pow(4.0, 0.5) == 2.0 &&
                 fhd__det_pow(1024.0, 0.1) == 2.0 && fhd__det_pow(0.25, 0.5) == 0.5;
    check(special_ok, "det_pow specials: y = 0, x = 1, y = 1, x = 0, x = inf, x < 0, NaN, "
                      "over/underflow, exact powers of two");
}

static void test_quantize(void) {
    const double ulp24 = 1.0 / 16777216.0;
    int ok_clamp, ok_round, ok_deq;
    long bad = 0;
    uint64_t q;
    test_rng r = {5};
    ok_clamp = fhd__prio_quantize(0.0) == 1 && fhd__prio_quantize(-0.0) == 1 &&
               fhd__prio_quantize(-5.0) == 1 && fhd__prio_quantize(1e-30) == 1 &&
               fhd__prio_quantize(0.49 * ulp24) == 1 && fhd__prio_quantize(NAN) == FHD_PRIO_MAX_Q &&
               fhd__prio_quantize(INFINITY) == FHD_PRIO_MAX_Q &&
               fhd__prio_quantize(-INFINITY) == 1 &&
               fhd__prio_quantize(16384.0) == FHD_PRIO_MAX_Q &&
               fhd__prio_quantize(1e300) == FHD_PRIO_MAX_Q &&
               fhd__prio_quantize(16384.0 - ulp24) == FHD_PRIO_MAX_Q &&
               fhd__prio_quantize(16384.0 - 2 * ulp24) == FHD_PRIO_MAX_Q - 1;
    check(ok_clamp,
          "quantize clamps: p <= 0, tiny -> 1; NaN, inf, >= 16384 - 2^-24 -> 2^38 - 1 = %llu",
          (unsigned long long)FHD_PRIO_MAX_Q);
    ok_round = fhd__prio_quantize(1.0) == 16777216 && fhd__prio_quantize(1.5 * ulp24) == 2 &&
               fhd__prio_quantize(1.4999 * ulp24) == 1 && fhd__prio_quantize(2.5 * ulp24) == 3 &&
               fhd__prio_quantize(ulp24) == 1 && fhd__prio_quantize(0.5 * ulp24) == 1 &&
               fhd__prio_quantize(1000.5 * ulp24) == 1001;
    check(ok_round,
          "quantize rounds half up: 1.0 -> 2^24, 1.5, 2.5, 1000.5 grid units -> 2, 3, 1001");
    for (q = 1; q < 2000000; ++q) {
        uint64_t qq = q < 1000000 ? q : 1 + rng_below(&r, FHD_PRIO_MAX_Q);
        bad += fhd__prio_quantize(fhd__prio_dequantize(qq)) != qq;
    }
    ok_deq = bad == 0 && fhd__prio_dequantize(FHD_PRIO_MAX_Q) == 16384.0 - ulp24;
    check(ok_deq, "quantize(dequantize(q)) == q for 2e6 q in [1, 2^38 - 1] (%ld mismatches)", bad);
    {
        long bad_r = 0;
        int i;
        for (i = 0; i < 1000000; ++i) {
            double p = rng_unit(&r) * 20000.0 * (i & 1 ? 1.0 : rng_unit(&r) * 1e-3);
            bad_r += fhd__prio_quantize(p) != ref_quantize(p);
        }
        check(bad_r == 0,
              "quantize == round(p * 2^24) clamped, 1e6 random p in [0, 20000] (%ld "
              "mismatches)",
              bad_r);
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_from_td(void) {
    static const float alphas[] = {0.0f, 0.01f, 0.2f, 0.4f, 0.5f, 0.6f, 0.7f, 0.9f, 1.0f};
    static const float epss[] = {0.0f, 1e-6f, 1e-2f};
    static const float starts[] = {0.0f, 1e-30f, 1e-8f, 1e-3f, 0.4999f, 1.0f, 99.0f, 16383.0f};
    const int per_start = 100000;
    long steps = 0, violations = 0, off = 0, consistency = 0;
    int a, e, s, i;
    test_rng r = {31337};
    float *sorted = (float *)malloc(200000 * sizeof(float));
    for (a = 0; a < (int)(sizeof alphas / sizeof alphas[0]); ++a) {
        for (e = 0; e < (int)(sizeof epss / sizeof epss[0]); ++e) {
            float alpha = alphas[a], eps = epss[e];
            /* Runs of consecutive floats. */
            for (s = 0; s < (int)(sizeof starts / sizeof starts[0]); ++s) {
                float td = starts[s];
                uint64_t prev = fhd__prio_from_td(td, alpha, eps);
                for (i = 0; i < per_start; ++i) {
                    uint64_t q;
                    td = nextafterf(td, INFINITY);
                    q = fhd__prio_from_td(td, alpha, eps);
                    violations += q < prev;
                    prev = q;
                    ++steps;
                    if ((i & 63) == 0) {
                        double p = pow((double)td + (double)eps, (double)alpha);
                        uint64_t qr = ref_quantize(p);
                        off += q + 1 < qr || q > qr + 1;
                        consistency +=
                            q != fhd__prio_quantize(fhd__det_pow((double)td + (double)eps, alpha));
                    }
                }
            }
            /* A sorted random sample over [0, 1) and [0, 1e5). */
            {
                const int n = 200000;
                uint64_t prev;
                for (i = 0; i < n; ++i) {
                    sorted[i] = (float)(rng_unit(&r) * (i & 1 ? 1e5 : 1.0));
                }
                qsort(sorted, (size_t)n, sizeof(float), cmp_float);
                prev = fhd__prio_from_td(sorted[0], alpha, eps);
                for (i = 1; i < n; ++i) {
                    uint64_t q = fhd__prio_from_td(sorted[i], alpha, eps);
                    violations += q < prev;
                    prev = q;
                    ++steps;
                }
            }
        }
    }
    free(sorted);
    check(violations == 0,
          "from_td non-decreasing in abs_td: %ld steps (consecutive floats from 8 starts, sorted "
          "random) over 9 alphas x 3 eps (%ld decreases)",
          steps, violations);
    check(off == 0 && consistency == 0,
          "from_td within +-1 of round(pow(td + eps, alpha) * 2^24) (%ld off) and == "
          "quantize(det_pow) (%ld differ)",
          off, consistency);
    check(fhd__prio_from_td(NAN, 0.6f, 1e-6f) == FHD_PRIO_MAX_Q &&
              fhd__prio_from_td(1.0f, NAN, 1e-6f) == FHD_PRIO_MAX_Q &&
              fhd__prio_from_td(INFINITY, 0.6f, 1e-6f) == FHD_PRIO_MAX_Q &&
              fhd__prio_from_td(-2.0f, 0.6f, 0.0f) == fhd__prio_from_td(2.0f, 0.6f, 0.0f) &&
              fhd__prio_from_td(0.0f, 0.6f, 0.0f) == 1 &&
              fhd__prio_from_td(0.0f, 0.0f, 0.0f) == 16777216 &&
              fhd__prio_from_td(123.0f, 0.0f, 1e-6f) == 16777216 &&
              fhd__prio_from_td(3.0f, 1.0f, 1.0f) == 4 * UINT64_C(16777216),
          "from_td specials: NaN -> max, inf -> max, sign ignored, 0^a -> 1, alpha 0 -> 2^24, "
          "alpha 1 exact");
}

static void test_golden(void) {
    uint64_t hp = FNV1A_INIT, ht = FNV1A_INIT;
    test_rng r = {GOLDEN_SEED};
    int i;
    for (i = 0; i < GOLDEN_N; ++i) {
        golden_input g = golden_next(&r, i);
        hp = fnv1a(hp, bits(fhd__det_pow(g.x, g.y)));
        ht = fnv1a(ht, fhd__prio_from_td(g.td, g.alpha, g.eps));
    }
    printf("       det_pow hash %016llx, from_td hash %016llx\n", (unsigned long long)hp,
           (unsigned long long)ht);
    check(hp == GOLDEN_POW_HASH && ht == GOLDEN_TD_HASH,
          "%d det_pow / from_td results hash to the golden values (bit-identical to the "
          "reference build)",
          GOLDEN_N);
}

int main(void) {
    double t0 = now_seconds();
    printf("test_priority\n");
    test_pow_accuracy();
    test_pow_wide();
    test_quantize();
    test_from_td();
    test_golden();
    printf("time %.2f s\n", now_seconds() - t0);
    return report();
}
