/* divisor.h - unsigned 32-bit division by an invariant divisor as a multiply-high, an add and
 * two shifts, header-only, C11 and CUDA.
 *
 * A kernel that turns flat element indices into (row, column) of a matrix divides by the row
 * length once per element; a division by a run-time value is some twenty instructions on the
 * GPU. fhd_divisor_make(d) computes, once on the host, the multiplier and shifts of Granlund and
 * Montgomery ("Division by invariant integers using multiplication", PLDI 1994, figure 4.1):
 *     l = ceil(log2 d), mul = floor(2^32 (2^l - d) / d) + 1, sh1 = min(l, 1), sh2 = max(l - 1, 0)
 *     t = mulhi(n, mul), n / d = (t + ((n - t) >> sh1)) >> sh2
 * exact for every d >= 1 and every n < 2^32 (tests/replay/test_divisor.c checks it).
 */
#ifndef FHD_DIVISOR_H
#define FHD_DIVISOR_H

#include <stdint.h>

#include "hostdev.h"

typedef struct fhd_divisor {
    uint32_t d, mul, sh1, sh2;
} fhd_divisor;

/* d >= 1 (d = 0 gives the divisor 1). */
FHD_HOSTDEV fhd_divisor fhd_divisor_make(uint32_t d) {
    fhd_divisor v;
    uint32_t l = 0;
    if (d == 0)
        d = 1;
    while (l < 32 && ((uint64_t)1 << l) < d)
        l++;
    v.d = d;
    v.mul = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - d)) / d + 1);
    v.sh1 = l < 1 ? l : 1;
    v.sh2 = l > 1 ? l - 1 : 0;
    return v;
}

/* floor(n / v.d) */
FHD_HOSTDEV uint32_t fhd_divide(fhd_divisor v, uint32_t n) {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, v.mul);
#else
    const uint32_t t = (uint32_t)(((uint64_t)n * v.mul) >> 32);
#endif
    return (t + ((n - t) >> v.sh1)) >> v.sh2;
}

#endif
