/* fuzz_common.h - shared pieces of the fuzz harnesses.
 *
 * A harness defines LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize). It is linked
 * either with libFuzzer (-fsanitize=fuzzer, the fuzz build) or with replay_main.c, which runs
 * committed inputs through the same function in the normal test suite.
 *
 * FUZZ_REQUIRE states a property every input must keep (a status from the table, a message, an
 * unchanged learner after a rejected call...). A violated property aborts: libFuzzer records the
 * input as a crash, and the replay test fails.
 */
#ifndef FHD_FUZZ_COMMON_H
#define FHD_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foxhunt_dqn.h"

#define FUZZ_REQUIRE(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz property violated at %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A status is FHD_OK or one of the table's codes. */
static inline int fuzz_status_known(int32_t rc) {
    return rc <= 0 && rc >= FHD_STATUS_MIN_;
}

/* A message is NUL-terminated inside its buffer and not empty. */
static inline int fuzz_message_ok(const char *m, size_t cap) {
    return m != NULL && memchr(m, '\0', cap) != NULL && m[0] != '\0';
}

/* The libraries' learners never look for the CUDA module of the machine they run on: a fuzz
 * run must not depend on whether a GPU build sits next to the executable. */
static inline void fuzz_no_cuda_module(void) {
    setenv("FHD_CUDA_MODULE", "/nonexistent/libfoxhunt_dqn_cuda.so", 1);
}

#endif
