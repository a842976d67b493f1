/* test_envs.c - checks host_stub/env*.c against trajectories recorded from Gymnasium
 * (tools/gen_env_trajectories.py) and tests the vector wrapper's semantics.
 * This file holds the reporting and main; the replay is in envs_replay.c, the API and
 * semantics tests in envs_api.c, what they share in envs_test.h.
 *
 * usage: test_envs DATA_DIR [-v]
 */
#include <stdarg.h>

#include "envs_test.h"

int g_passed, g_failed, g_verbose;

/* ---- reporting ------------------------------------------------------------------------------- */

/* starts a case named by a printf format */
void tc_begin(tcase *tc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tc->name, sizeof tc->name, fmt, ap);
    va_end(ap);
    tc->failures = 0;
}

/* records a failure; the first five are printed */
void tc_fail(tcase *tc, const char *fmt, ...) {
    if (tc->failures++ < 5) {
        va_list ap;
        va_start(ap, fmt);
        printf("    %s: ", tc->name);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    } else if (tc->failures == 6) {
        printf("    %s: (further failures not shown)\n", tc->name);
    }
}

int tc_end(tcase *tc, const char *detail) {
    const int ok = tc->failures == 0;
    if (ok)
        g_passed++;
    else
        g_failed++;
    printf("  [%s] %s%s%s\n", ok ? "PASS" : "FAIL", tc->name, detail ? "  " : "",
           detail ? detail : "");
    return ok;
}

/* ---- single-state functions by id ------------------------------------------------------------ */

step_fn pure_step(const char *id) {
    if (strcmp(id, "CartPole-v1") == 0)
        return fhd_cartpole_step;
    if (strcmp(id, "Acrobot-v1") == 0)
        return fhd_acrobot_step;
    if (strcmp(id, "MountainCar-v0") == 0)
        return fhd_mountaincar_step;
    return NULL;
}

observe_fn pure_observe(const char *id) {
    if (strcmp(id, "CartPole-v1") == 0)
        return fhd_cartpole_observe;
    if (strcmp(id, "Acrobot-v1") == 0)
        return fhd_acrobot_observe;
    if (strcmp(id, "MountainCar-v0") == 0)
        return fhd_mountaincar_observe;
    return NULL;
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    const char *dir = NULL;
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "-v") == 0)
            g_verbose = 1;
        else
            dir = argv[k];
    }
    if (!dir) {
        fprintf(stderr, "usage: %s DATA_DIR [-v]\n", argv[0]);
        return 2;
    }
    const char *const *ids = fhd_env_ids();
    printf("Gymnasium reference replay (%s)\n", dir);
    for (int k = 0; ids[k]; k++)
        replay_file(dir, ids[k]);
    printf("API and semantics\n");
    test_registry();
    test_seeds_differ();
    for (int k = 0; ids[k]; k++) {
        test_reset(ids[k]);
        test_determinism(ids[k]);
        test_bad_args(ids[k]);
        test_autoreset(ids[k]);
        test_render(ids[k]);
    }
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
