/* envs_test.h - what the parts of test_envs share: the test-case reporting (tcase, CHECK,
 * the pass/fail counters of test_envs.c), the single-state step and observe functions by id,
 * and the test entry points that main calls. */
#ifndef FHD_ENVS_TEST_H
#define FHD_ENVS_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs.h"

extern int g_passed, g_failed, g_verbose;

/* one test case: collects failure messages, prints the first few */
typedef struct tcase {
    char name[96];
    int failures;
} tcase;

void tc_begin(tcase *tc, const char *fmt, ...);
void tc_fail(tcase *tc, const char *fmt, ...);
/* closes the case: counts it passed or failed, prints its line (with `detail` if not NULL);
 * returns 1 if it passed */
int tc_end(tcase *tc, const char *detail);

#define CHECK(tc, cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            tc_fail((tc), __VA_ARGS__);                                                            \
    } while (0)

typedef double (*step_fn)(double *state, int action, int *terminated);
typedef void (*observe_fn)(const double *state, float *obs);

/* the single-state functions of an id (NULL for an unknown one) */
step_fn pure_step(const char *id);
observe_fn pure_observe(const char *id);

/* envs_replay.c: every episode of DIR/ID.txt through the vector API and the single-state
 * functions */
void replay_file(const char *dir, const char *id);

/* envs_api.c: the registry, the vector wrapper's API and its semantics */
void test_registry(void);
void test_seeds_differ(void);
void test_reset(const char *id);
void test_determinism(const char *id);
void test_bad_args(const char *id);
void test_autoreset(const char *id);
void test_render(const char *id);

#endif
