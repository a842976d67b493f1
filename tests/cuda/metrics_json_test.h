/* metrics_json_test.h - a CUDA test's view of a learner's metrics document (jansson), shared
 * by the tests that read fields of it. */
#ifndef FHD_TESTS_CUDA_METRICS_JSON_TEST_H
#define FHD_TESTS_CUDA_METRICS_JSON_TEST_H

#include "cuda_test.h" /* first: its feature-test macro precedes every system header */

#include <jansson.h>

/* L's metrics JSON parsed (the caller json_decref()s it), or NULL with a failed check naming
 * what went wrong. */
static inline json_t *ct_metrics(fhd_learner *L) {
    size_t need = 0;
    fhd__learner_metrics(L, NULL, 0, &need);
    char *buf = (char *)malloc(need);
    json_t *m = NULL;
    if (buf && fhd__learner_metrics(L, buf, need, &need) == FHD_OK) {
        json_error_t je;
        m = json_loads(buf, 0, &je);
        ct_check(m != NULL, "metrics parse: %s", je.text);
    } else {
        ct_check(0, "metrics: %s", L->err);
    }
    free(buf);
    return m;
}

#endif
