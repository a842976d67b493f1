/* test_util.h - tiny check/report helpers and a test-only RNG for the replay tests. */
#ifndef FHD_TEST_UTIL_H
#define FHD_TEST_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static int g_passed, g_failed;

/* Records one named check; prints it with its details (printf-style). */
static inline void check(int ok, const char *fmt, ...) {
    va_list ap;
    printf("%s ", ok ? "  ok  " : "  FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
    }
}

/* Prints the summary line and returns the process exit code. */
static inline int report(void) {
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}

static inline double now_seconds(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64: the tests' own generator, independent of the code under test. */
typedef struct {
    uint64_t s;
} test_rng;

static inline uint64_t rng_next(test_rng *r) {
    uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n >= 1), by rejection: exactly unbiased. */
static inline uint64_t rng_below(test_rng *r, uint64_t n) {
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, x;
    do {
        x = rng_next(r);
    } while (x >= lim);
    return x % n;
}

/* Uniform double in [0, 1). */
static inline double rng_unit(test_rng *r) {
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

#endif /* FHD_TEST_UTIL_H */
