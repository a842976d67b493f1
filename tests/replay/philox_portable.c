/* philox_portable.c - fhd__mulhi64 compiled without unsigned __int128, so test_philox can check
 * the portable path against the native one. */
#define FHD_PHILOX_NO_INT128
#include "philox.h"

uint64_t test_mulhi64_portable(uint64_t a, uint64_t b);

uint64_t test_mulhi64_portable(uint64_t a, uint64_t b) {
    return fhd__mulhi64(a, b);
}
