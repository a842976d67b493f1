/* bf16.h - rounding a float to bfloat16, the operand precision of matmul_precision "bf16"
 * (docs/design.md section 4, "GEMM precision"), header-only C11 and CUDA.
 *
 * bfloat16 is a float's upper 16 bits: sign, the same 8 exponent bits, 7 mantissa bits. The
 * rounding is to nearest, ties to even, on the bits, so it covers subnormals and overflows to
 * infinity exactly as IEEE rounding does; a NaN stays a NaN (its quiet bit set, so that the
 * truncated pattern cannot become an infinity). For every non-NaN float it gives the bits of
 * CUDA's __float2bfloat16_rn, which the CUDA backend's kernels use. The CPU backend keeps bf16
 * values in float storage (fhd__bf16_round): a product of two of them is exact in fp32.
 */
#ifndef FHD_BF16_H
#define FHD_BF16_H

#include <stdint.h>
#include <string.h>

#include "hostdev.h"

/* The bfloat16 bits of x, rounded to nearest even. */
FHD_HOSTDEV uint16_t fhd__bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float of bfloat16 bits h (exact). */
FHD_HOSTDEV float fhd__bf16_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to the nearest bfloat16, as a float. */
FHD_HOSTDEV float fhd__bf16_round(float x) {
    return fhd__bf16_float(fhd__bf16_bits(x));
}

#endif
