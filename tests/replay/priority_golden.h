/* priority_golden.h - the fixed input set whose det_pow / from_td results every build of
 * priority.h (any host compiler or target, the CUDA device) must reproduce bit for bit. The
 * inputs are built from integer bits only, so they do not depend on the libm in use. */
#ifndef FHD_PRIORITY_GOLDEN_H
#define FHD_PRIORITY_GOLDEN_H

#include <stdint.h>
#include <string.h>

#include "test_util.h"

#define GOLDEN_N 200000
#define GOLDEN_SEED UINT64_C(0xC0FFEE)
/* FNV-1a over the 64-bit results, in input order. */
#define GOLDEN_POW_HASH UINT64_C(0x41764052c07339b7)
#define GOLDEN_TD_HASH UINT64_C(0x77c56beff6e6d4af)

typedef struct {
    double x, y;          /* det_pow(x, y) */
    float td, alpha, eps; /* from_td(td, alpha, eps) */
} golden_input;

static inline uint64_t fnv1a(uint64_t h, uint64_t v) {
    int i;
    for (i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xFF;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

#define FNV1A_INIT UINT64_C(0xcbf29ce484222325)

/* x = 2^e * (1 + m), e uniform in [-40, 19], m uniform on the 52-bit mantissa grid. */
static inline double rand_x_bits(test_rng *r) {
    uint64_t e = 1023 - 40 + rng_below(r, 60);
    uint64_t u = e << 52 | (rng_next(r) >> 12);
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Input i of the golden set; call for i = 0, 1, ... in order with one generator. */
static inline golden_input golden_next(test_rng *r, int i) {
    golden_input g;
    g.x = rand_x_bits(r);
    g.y = rng_unit(r);
    g.td = (float)(rand_x_bits(r) * 0.0078125);
    g.alpha = (float)rng_unit(r);
    g.eps = (i & 1) ? 1e-6f : (float)(rng_unit(r) * 0.0009765625);
    return g;
}

#endif /* FHD_PRIORITY_GOLDEN_H */
