/* fhd_test.h - a tiny check harness shared by the C test programs.
 * CHECK counts and reports each failed expectation; fhd_test_finish prints the closing
 * "N passed, N failed" line and returns the exit code. */
#ifndef FHD_TEST_H
#define FHD_TEST_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foxhunt_dqn.h"

/* Each file has its own counters; a test program made of several files defines
 * FHD_TEST_SHARED_COUNTERS in all of them (the build does) and defines the two counters in
 * one of them, so that every CHECK counts towards the one fhd_test_finish. */
#ifdef FHD_TEST_SHARED_COUNTERS
extern int fhd_t_pass, fhd_t_fail;
#else
static int fhd_t_pass, fhd_t_fail;
#endif

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (cond) {                                                                            \
            fhd_t_pass++;                                                                      \
        } else {                                                                               \
            fhd_t_fail++;                                                                      \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                             \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
        }                                                                                      \
    } while (0)

static inline int fhd_test_finish(void) {
    printf("%d passed, %d failed\n", fhd_t_pass, fhd_t_fail);
    return fhd_t_fail ? 1 : 0;
}

/* Load the plugin at `path` and negotiate major 1; exits the test on failure. */
static inline const fhd_api_v1 *fhd_test_load(const char *path, void **handle) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL cannot dlopen %s: %s\n", path, dlerror());
        exit(1);
    }
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(h, FHD_ENTRY_SYMBOL);
    if (!entry) {
        printf("FAIL %s does not export %s\n", path, FHD_ENTRY_SYMBOL);
        exit(1);
    }
    const fhd_api_v1 *api = (const fhd_api_v1 *)entry()->get_api(1, NULL);
    if (!api) {
        printf("FAIL get_api(1) returned NULL\n");
        exit(1);
    }
    if (handle)
        *handle = h;
    return api;
}

static inline fhd_learner *fhd_test_create(const fhd_api_v1 *api, const char *cfg) {
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t rc = api->init(cfg, strlen(cfg), &L, &err);
    if (rc != FHD_OK) {
        printf("FAIL init(%s): %s %s: %s\n", cfg, api->status_name(rc), err.path, err.message);
        exit(1);
    }
    return L;
}

#endif
