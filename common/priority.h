/* priority.h - prioritized-replay priority quantisation, header-only, C11 and CUDA.
 *
 * A PER priority is p = (|delta| + eps)^alpha. The sum tree stores it as an unsigned 64-bit
 * fixed-point integer with FHD_PRIO_FRAC_BITS = 24 fractional bits:
 *     q = round_half_up(p * 2^24), clamped to [1, FHD_PRIO_MAX_Q],  FHD_PRIO_MAX_Q = 2^38 - 1.
 * So the largest priority is ~16384 and the smallest non-zero one 2^-24. A tree over at most
 * 2^26 leaves (FHD_SUMTREE_MAX_CAPACITY) sums to at most 2^26 * (2^38 - 1) < 2^64: no
 * uint64 node can overflow.
 *
 * Determinism: the CPU and the CUDA backend must produce the same q for the same inputs, but
 * libm's pow and CUDA's pow may differ in the last ulp, and nvcc contracts a*b+c into an FMA
 * by default. fhd__det_pow therefore uses only IEEE-754 basic operations (+, -, *, /,
 * comparisons) in round-to-nearest-even and integer bit manipulation of the exponent, each
 * product rounded on its own:
 *   - device code: every operation goes through __dmul_rn / __dadd_rn / __dsub_rn /
 *     __ddiv_rn, which are never contracted;
 *   - host code: plain operators when the target is x86 without FMA (baseline x86-64), where
 *     nothing can be contracted; clang is also told #pragma STDC FP_CONTRACT OFF at the top of
 *     each function body. On any target that may have an FMA (-march=haswell, AArch64, ...)
 *     every product is forced through a volatile store, because GNU modes and clang's
 *     -ffp-contract=fast contract regardless of the pragma. -ffast-math and excess precision
 *     (x87) are rejected at compile time. The rounding mode must be the default
 *     round-to-nearest.
 * Accuracy: relative error ~1e-15 against a correctly rounded pow for x in [1e-12, 1e6] and
 * y in [0, 1] (tested <= 1e-12), so q is within 1 of round(pow(x, y) * 2^24).
 */
#ifndef FHD_PRIORITY_H
#define FHD_PRIORITY_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "hostdev.h"

#if !defined(__CUDA_ARCH__)
#if defined(__FAST_MATH__)
#error "priority.h: fhd__det_pow needs IEEE semantics; do not compile with -ffast-math"
#endif
#if defined(FLT_EVAL_METHOD) && (FLT_EVAL_METHOD == 1 || FLT_EVAL_METHOD == 2)
#error "priority.h: fhd__det_pow needs doubles evaluated in double precision (SSE2, not x87)"
#endif
#endif

#define FHD_PRIO_FRAC_BITS 24
#define FHD_PRIO_MAX_Q ((UINT64_C(1) << 38) - 1)

/* ---- uncontracted basic operations -------------------------------------------------------- */

#if defined(__clang__)
#define FHD_FP_NO_CONTRACT _Pragma("STDC FP_CONTRACT OFF")
#else
#define FHD_FP_NO_CONTRACT
#endif

#if defined(__CUDA_ARCH__)
#define FHD_DADD(a, b) __dadd_rn((a), (b))
#define FHD_DSUB(a, b) __dsub_rn((a), (b))
#define FHD_DMUL(a, b) __dmul_rn((a), (b))
#define FHD_DDIV(a, b) __ddiv_rn((a), (b))
#else
#define FHD_DADD(a, b) ((a) + (b))
#define FHD_DSUB(a, b) ((a) - (b))
#define FHD_DDIV(a, b) ((a) / (b))
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__FP_FAST_FMA) && !defined(__FMA__) &&  \
    !defined(__FMA4__) && !defined(__AVX512F__)
/* No fused multiply-add instruction on the target: the compiler cannot contract. */
#define FHD_DMUL(a, b) ((a) * (b))
#else
/* The target may have an FMA, and GNU modes or clang's -ffp-contract=fast contract across
 * statements and ignore the pragma: the product is rounded into memory, so no later addition
 * can fuse with it. */
FHD_HOSTDEV double fhd__dmul_nofma(double a, double b) {
    volatile double r = a * b;
    return r;
}
#define FHD_DMUL(a, b) fhd__dmul_nofma((a), (b))
#endif
#endif

/* ---- bit access ----------------------------------------------------------------------------- */

FHD_HOSTDEV uint64_t fhd__f64_bits(double x) {
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(x);
#else
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

FHD_HOSTDEV double fhd__f64_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* 2^n for n in [-1022, 1023], built from the exponent field. */
FHD_HOSTDEV double fhd__pow2i(int n) {
    return fhd__f64_from_bits((uint64_t)(n + 1023) << 52);
}

/* ---- deterministic pow ---------------------------------------------------------------------- */

/* log2(x) for finite x > 0. x = 2^e * m with m in (sqrt(1/2), sqrt(2)]; ln m = 2 atanh(s) with
 * s = (m - 1) / (m + 1), |s| <= 0.1716, summed as s * sum_{k=0..11} s^(2k) / (2k + 1) (the first
 * omitted term is < 1e-18 relative). Absolute error ~(|e| + 1) * 1e-16. */
FHD_HOSTDEV double fhd__det_log2(double x) {
    FHD_FP_NO_CONTRACT
    uint64_t u = fhd__f64_bits(x);
    int e = (int)((u >> 52) & 0x7FF);
    double m, s, z, p;
    if (e == 0) { /* subnormal: scale into the normal range (exact) */
        u = fhd__f64_bits(FHD_DMUL(x, 18014398509481984.0)); /* 2^54 */
        e = (int)((u >> 52) & 0x7FF) - 54;
    }
    e -= 1023;
    m = fhd__f64_from_bits((u & UINT64_C(0x000FFFFFFFFFFFFF)) | UINT64_C(0x3FF0000000000000));
    if (m > 1.4142135623730951) { /* sqrt(2), rounded */
        m = FHD_DMUL(m, 0.5);
        e += 1;
    }
    s = FHD_DDIV(FHD_DSUB(m, 1.0), FHD_DADD(m, 1.0)); /* m - 1 is exact (Sterbenz) */
    z = FHD_DMUL(s, s);
    p = 0.043478260869565216;                           /* 1/23 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.047619047619047616); /* 1/21 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.05263157894736842);  /* 1/19 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.058823529411764705); /* 1/17 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.06666666666666667);  /* 1/15 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.07692307692307693);  /* 1/13 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.09090909090909091);  /* 1/11 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.1111111111111111);   /* 1/9 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.14285714285714285);  /* 1/7 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.2);                  /* 1/5 */
    p = FHD_DADD(FHD_DMUL(p, z), 0.3333333333333333);   /* 1/3 */
    p = FHD_DADD(FHD_DMUL(p, z), 1.0);
    /* log2(m) = (2 / ln 2) * s * p */
    return FHD_DADD((double)e, FHD_DMUL(FHD_DMUL(s, p), 2.8853900817779268));
}

/* 2^t for any t (NaN -> NaN). t = k + f, k = nearest integer, |f| <= 1/2;
 * 2^f = sum_{j=0..14} (f ln 2)^j / j! (first omitted term < 1e-19), then scaled by 2^k with at
 * most one rounding (only for subnormal results). */
FHD_HOSTDEV double fhd__det_exp2(double t) {
    FHD_FP_NO_CONTRACT
    const double round_magic = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to integer */
    double k, f, r;
    int ki;
    if (t != t) {
        return t;
    }
    if (t >= 1024.0) {
        return fhd__f64_from_bits(UINT64_C(0x7FF0000000000000)); /* +inf */
    }
    if (t < -1080.0) {
        return 0.0; /* below half the smallest subnormal */
    }
    k = FHD_DSUB(FHD_DADD(t, round_magic), round_magic);
    f = FHD_DSUB(t, k); /* exact */
    ki = (int)k;
    r = 6.778726354822545e-14;                            /* ln2^14 / 14! */
    r = FHD_DADD(FHD_DMUL(r, f), 1.3691488853904128e-12); /* ln2^13 / 13! */
    r = FHD_DADD(FHD_DMUL(r, f), 2.5678435993488206e-11); /* ln2^12 / 12! */
    r = FHD_DADD(FHD_DMUL(r, f), 4.4455382718708116e-10); /* ln2^11 / 11! */
    r = FHD_DADD(FHD_DMUL(r, f), 7.054911620801123e-09);  /* ln2^10 / 10! */
    r = FHD_DADD(FHD_DMUL(r, f), 1.01780860092397e-07);   /* ln2^9 / 9! */
    r = FHD_DADD(FHD_DMUL(r, f), 1.321548679014431e-06);  /* ln2^8 / 8! */
    r = FHD_DADD(FHD_DMUL(r, f), 1.5252733804059841e-05); /* ln2^7 / 7! */
    r = FHD_DADD(FHD_DMUL(r, f), 0.0001540353039338161);  /* ln2^6 / 6! */
    r = FHD_DADD(FHD_DMUL(r, f), 0.0013333558146428443);  /* ln2^5 / 5! */
    r = FHD_DADD(FHD_DMUL(r, f), 0.009618129107628477);   /* ln2^4 / 4! */
    r = FHD_DADD(FHD_DMUL(r, f), 0.05550410866482158);    /* ln2^3 / 3! */
    r = FHD_DADD(FHD_DMUL(r, f), 0.24022650695910072);    /* ln2^2 / 2! */
    r = FHD_DADD(FHD_DMUL(r, f), 0.6931471805599453);     /* ln2 */
    r = FHD_DADD(FHD_DMUL(r, f), 1.0);
    /* r in [0.70, 1.42]; ki in [-1080, 1024] */
    if (ki > 1023) {
        return FHD_DMUL(FHD_DMUL(r, fhd__pow2i(1023)), fhd__pow2i(ki - 1023));
    }
    if (ki < -1022) { /* exact scaling to 2^(ki + 1000), then one rounding into the subnormals */
        return FHD_DMUL(FHD_DMUL(r, fhd__pow2i(ki + 1000)), fhd__pow2i(-1000));
    }
    return FHD_DMUL(r, fhd__pow2i(ki));
}

/* x^y computed as 2^(y * log2 x), bit-identical on host and device. Meant for x > 0 and
 * y in [0, 1] (PER's alpha); other inputs follow pow's conventions where it is cheap:
 * y == 0 -> 1 (even for NaN x), x == 1 -> 1, y == 1 -> x, x == 0 -> 0 (y > 0) or +inf (y < 0),
 * x == +inf -> +inf (y > 0) or 0 (y < 0), x < 0 or NaN -> NaN. */
FHD_HOSTDEV double fhd__det_pow(double x, double y) {
    FHD_FP_NO_CONTRACT
    const double inf = fhd__f64_from_bits(UINT64_C(0x7FF0000000000000));
    if (y == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (x != x || y != y) {
        return fhd__f64_from_bits(UINT64_C(0x7FF8000000000000));
    }
    if (y == 1.0) {
        return x;
    }
    if (x < 0.0) {
        return fhd__f64_from_bits(UINT64_C(0x7FF8000000000000));
    }
    if (x == 0.0) {
        return y > 0.0 ? 0.0 : inf;
    }
    if (x == inf) {
        return y > 0.0 ? inf : 0.0;
    }
    return fhd__det_exp2(FHD_DMUL(y, fhd__det_log2(x)));
}

/* ---- quantisation --------------------------------------------------------------------------- */

/* p >= 0 -> q = round_half_up(p * 2^24) clamped to [1, FHD_PRIO_MAX_Q]. p <= 0 (and -0) -> 1;
 * p = +inf -> FHD_PRIO_MAX_Q. NaN must be rejected by the caller; if it arrives anyway it maps
 * to FHD_PRIO_MAX_Q, so the offending transition is replayed soon rather than never. */
FHD_HOSTDEV uint64_t fhd__prio_quantize(double p) {
    FHD_FP_NO_CONTRACT
    double v, frac;
    uint64_t q;
    if (p != p) {
        return FHD_PRIO_MAX_Q;
    }
    if (!(p > 0.0)) {
        return 1;
    }
    v = FHD_DMUL(p, 16777216.0);       /* * 2^24: exact unless it overflows to +inf */
    if (v >= (double)FHD_PRIO_MAX_Q) { /* 2^38 - 1 is exact in a double */
        return FHD_PRIO_MAX_Q;
    }
    q = (uint64_t)v;               /* truncation, v < 2^38 */
    frac = FHD_DSUB(v, (double)q); /* exact */
    if (frac >= 0.5) {
        q += 1; /* q <= 2^38 - 1 still */
    }
    return q < 1 ? 1 : q;
}

/* q * 2^-24 (exact for q < 2^53). */
FHD_HOSTDEV double fhd__prio_dequantize(uint64_t q) {
    FHD_FP_NO_CONTRACT
    return FHD_DMUL((double)q, 1.0 / 16777216.0);
}

/* quantize(det_pow((double)abs_td + eps, alpha)), the sum is rounded once in double.
 * Preconditions: abs_td finite (a negative value is taken by magnitude), eps >= 0,
 * alpha in [0, 1]. A NaN anywhere gives FHD_PRIO_MAX_Q (alpha NaN too); abs_td = +inf gives
 * FHD_PRIO_MAX_Q for alpha > 0. Non-decreasing in abs_td (tested). */
FHD_HOSTDEV uint64_t fhd__prio_from_td(float abs_td, float alpha, float eps) {
    FHD_FP_NO_CONTRACT
    double a = (double)abs_td, x;
    if (a != a || alpha != alpha || eps != eps) {
        return FHD_PRIO_MAX_Q;
    }
    if (a < 0.0) {
        a = -a;
    }
    x = FHD_DADD(a, (double)eps);
    return fhd__prio_quantize(fhd__det_pow(x, (double)alpha));
}

#endif /* FHD_PRIORITY_H */
