/* test_divisor.c - fhd_divide (divisor.h) against the division operator: every divisor up to
 * 70,000 (the row lengths of any realistic layer) with the numerators where a quotient steps,
 * and divisors up to 2^32 - 1 with numerators across the whole 32-bit range. */
#include <stdint.h>
#include <stdio.h>

#include "divisor.h"
#include "test_util.h"

static int check_div(uint32_t d, uint32_t n, int *bad) {
    const fhd_divisor v = fhd_divisor_make(d);
    const uint32_t q = fhd_divide(v, n);
    if (q != n / d) {
        if (++*bad <= 10)
            printf("FAIL %u / %u: %u, expected %u (mul %u, shifts %u %u)\n", n, d, q, n / d, v.mul,
                   v.sh1, v.sh2);
        return 1;
    }
    return 0;
}

int main(void) {
    int bad = 0;
    uint64_t checks = 0;
    test_rng r = {12345};
    for (uint32_t d = 1; d <= 70000; d++) {
        /* around the first quotients' steps, the top of the range, and random numerators */
        for (uint32_t k = 0; k < 4; k++) {
            const uint64_t b = (uint64_t)d * k;
            for (int o = -1; o <= 1; o++) {
                const int64_t n = (int64_t)b + o;
                if (n >= 0 && n <= 0xffffffffLL) {
                    check_div(d, (uint32_t)n, &bad);
                    checks++;
                }
            }
        }
        const uint32_t top = 0xffffffffu, steps[3] = {top, top - top % d, top - top % d - 1};
        for (int i = 0; i < 3; i++, checks++)
            check_div(d, steps[i], &bad);
        for (int i = 0; i < 16; i++, checks++)
            check_div(d, (uint32_t)rng_next(&r), &bad);
    }
    for (int i = 0; i < 200000; i++, checks++) {
        const uint32_t d = (uint32_t)rng_next(&r) >> (rng_next(&r) % 32);
        check_div(d ? d : 1, (uint32_t)rng_next(&r), &bad);
    }
    for (uint32_t s = 0; s < 32; s++, checks += 2) { /* powers of two and their neighbours */
        check_div(1u << s, 0xffffffffu, &bad);
        check_div((1u << s) + 1, 0xfffffffeu, &bad);
    }
    printf("%llu divisions, %d wrong\n", (unsigned long long)checks, bad);
    return bad ? 1 : 0;
}
