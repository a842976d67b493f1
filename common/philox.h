/* philox.h - Philox4x32-10 counter-based RNG, header-only, shared by the C11 and CUDA backends.
 *
 * Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11) maps a 128-bit counter and a 64-bit key to 128 random bits with 10 rounds. It is
 * stateless: every random number in the project is a pure function of (seed, stream, n, k), so
 * the CPU and the GPU produce the same bits without sharing any generator state.
 *
 * Project convention (used everywhere, do not change without a checkpoint version bump):
 *     key     = (lo32(seed), hi32(seed))
 *     counter = (lo32(n), hi32(n), k, stream)
 * where n is a 64-bit event index (update number, env step, ...), k a 32-bit sub-index inside
 * the event (batch row, parameter block, ...) and stream one of FHD_RNG_STREAM_*, so that
 * different purposes never reuse a counter.
 *
 * Everything here is integer arithmetic (plus exact integer -> float conversions), so results
 * are bit-identical on the host and on the device.
 */
#ifndef FHD_PHILOX_H
#define FHD_PHILOX_H

#include <stdint.h>

#include "hostdev.h"

typedef struct {
    uint32_t v[4];
} fhd__u32x4;

/* Purpose ids: the last counter word. */
enum {
    FHD_RNG_STREAM_INIT = 1,    /* parameter initialisation */
    FHD_RNG_STREAM_SN_INIT = 2, /* spectral-norm power-iteration start vectors */
    FHD_RNG_STREAM_SAMPLE = 3,  /* replay sampling */
    FHD_RNG_STREAM_EXPLORE = 4  /* exploration */
};

#define FHD_PHILOX_M0 UINT32_C(0xD2511F53)
#define FHD_PHILOX_M1 UINT32_C(0xCD9E8D57)
#define FHD_PHILOX_W0 UINT32_C(0x9E3779B9) /* golden ratio */
#define FHD_PHILOX_W1 UINT32_C(0xBB67AE85) /* sqrt(3) - 1 */

/* High 64 bits of the 128-bit product a * b. Device: __umul64hi; host: unsigned __int128 where
 * the compiler has it (define FHD_PHILOX_NO_INT128 to force the portable path, for testing). */
FHD_HOSTDEV uint64_t fhd__mulhi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#elif defined(__SIZEOF_INT128__) && !defined(FHD_PHILOX_NO_INT128)
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)a * b) >> 64);
#else
    /* Schoolbook on 32-bit limbs; every partial sum fits in 64 bits. */
    uint64_t a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32;
    uint64_t b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    uint64_t mid = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

/* One Philox round: two 32x32 -> 64 multiplies, then a Feistel-like mix with the key. */
FHD_HOSTDEV fhd__u32x4 fhd__philox4x32_round(fhd__u32x4 c, uint32_t key0, uint32_t key1) {
    uint64_t p0 = (uint64_t)FHD_PHILOX_M0 * c.v[0];
    uint64_t p1 = (uint64_t)FHD_PHILOX_M1 * c.v[2];
    fhd__u32x4 o;
    o.v[0] = (uint32_t)(p1 >> 32) ^ c.v[1] ^ key0;
    o.v[1] = (uint32_t)p1;
    o.v[2] = (uint32_t)(p0 >> 32) ^ c.v[3] ^ key1;
    o.v[3] = (uint32_t)p0;
    return o;
}

/* Philox4x32 with 10 rounds; the key is bumped by (W0, W1) between rounds. */
FHD_HOSTDEV fhd__u32x4 fhd__philox4x32_10(fhd__u32x4 ctr, uint32_t key0, uint32_t key1) {
    int r;
    for (r = 0; r < 10; ++r) {
        if (r > 0) {
            key0 += FHD_PHILOX_W0;
            key1 += FHD_PHILOX_W1;
        }
        ctr = fhd__philox4x32_round(ctr, key0, key1);
    }
    return ctr;
}

/* The project's draw: key = (lo32(seed), hi32(seed)), counter = (lo32(n), hi32(n), k, stream). */
FHD_HOSTDEV fhd__u32x4 fhd__rng_draw(uint64_t seed, uint32_t stream, uint64_t n, uint32_t k) {
    fhd__u32x4 c;
    c.v[0] = (uint32_t)n;
    c.v[1] = (uint32_t)(n >> 32);
    c.v[2] = k;
    c.v[3] = stream;
    return fhd__philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* 64 random bits from one draw: v[0] is the high word, v[1] the low word (v[2], v[3] unused). */
FHD_HOSTDEV uint64_t fhd__rng_u64(uint64_t seed, uint32_t stream, uint64_t n, uint32_t k) {
    fhd__u32x4 x = fhd__rng_draw(seed, stream, n, k);
    return (uint64_t)x.v[0] << 32 | x.v[1];
}

/* Uniform float in [0, 1) on a 2^-24 grid: (x >> 8) * 2^-24. Exact (24-bit integer). */
FHD_HOSTDEV float fhd__rng_u01f(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Uniform double in [0, 1) on a 2^-53 grid: the top 53 bits of (hi:lo) times 2^-53. Exact. */
FHD_HOSTDEV double fhd__rng_u01d(uint32_t hi, uint32_t lo) {
    uint64_t m = ((uint64_t)hi << 32 | lo) >> 11;
    return (double)m * (1.0 / 9007199254740992.0);
}

/* Integer in [0, n) by multiply-shift: (x * n) >> 32. Bias <= n / 2^32 per value; n == 0 gives
 * 0. */
FHD_HOSTDEV uint32_t fhd__rng_below(uint32_t x, uint32_t n) {
    return (uint32_t)(((uint64_t)x * n) >> 32);
}

/* Integer in [0, n) by 64-bit multiply-shift: high 64 bits of r * n. n == 0 gives 0. */
FHD_HOSTDEV uint64_t fhd__rng_below64(uint64_t r, uint64_t n) {
    return fhd__mulhi64(r, n);
}

#endif /* FHD_PHILOX_H */
