/* faults.h - what the parts of test_faults share: the learner and scratch directory of the
 * run, the injection harness of faults_inject.c (one child process per injected allocation
 * failure, its outcome classified into a sweep_result) and the operations of faults_ops.c.
 * The CHECK counters of fhd_test.h are shared (FHD_TEST_SHARED_COUNTERS) and defined in
 * test_faults.c. */
#ifndef FHD_FAULTS_H
#define FHD_FAULTS_H

#include "alloc_shim.h"
#include "fhd_proc.h"
#include "fhd_test.h"
#include "rel_common.h"

extern const fhd_api_v1 *api;
extern char dir[512];
extern int metrics_incomplete; /* set by op_metrics: a success with a key missing */

typedef int32_t (*op_fn)(fhd_learner *L, void *ctx);

typedef struct sweep_result {
    uint64_t sites;        /* allocations of the successful call */
    uint64_t failures;     /* injected failures reported as FHD_ERR_OUT_OF_MEMORY */
    uint64_t misreported;  /* injected failures reported cleanly, but with another status */
    uint64_t absorbed;     /* injected failures after which the call still did its whole work */
    uint64_t known_aborts; /* aborts inside jansson's lexer (akheron/jansson#362) */
    uint64_t check_failures;
    uint64_t by_status[32]; /* misreported failures by -status */
} sweep_result;

/* Child exit codes of one injection. */
enum {
    K_OOM = 0,         /* failure injected; FHD_ERR_OUT_OF_MEMORY, clean */
    K_CHECK = 1,       /* a check failed (printed) */
    K_ABSORBED = 3,    /* failure injected; the call succeeded with the right result */
    K_DONE = 10,       /* no failure left to inject; the call succeeded with the right result */
    K_CHECK_DONE = 11, /* no failure left to inject, but a check failed (printed) */
    K_OTHER_BASE = 64  /* + (-status): failure injected; another documented status, clean */
};

/* ---- faults_inject.c: the injection harness --------------------------------------------- */

/* Installs the crash handler that tells jansson's known crash (akheron/jansson#362) from ours. */
void crash_handler_install(void);
/* Ends a child with `code`, or with K_CHECK / K_CHECK_DONE when one of its checks failed. */
void child_exit(int code);
/* Run `body(k)` in a child process; classify the outcome into r. Returns 1 when the sweep is
 * complete (no failure was injected). Failures inside the child are printed there. */
int run_injection(const char *name, uint64_t k, void (*body)(uint64_t k, void *arg), void *arg,
                  sweep_result *r);
void print_result(const char *name, const sweep_result *r);
/* FHD_FAULTS_ONLY=NAME restricts the run to the sweeps whose name starts with NAME. */
int selected(const char *name);
/* Sweep op over L (twin: the same op, no failures, gives the expected final state). */
sweep_result sweep(const char *name, fhd_learner *L, fhd_learner *twin, op_fn op, void *ctx,
                   void *twin_ctx, const char *file);

/* ---- faults_ops.c: the operations swept ------------------------------------------------- */

typedef struct metrics_ctx {
    char buf[4096];
} metrics_ctx;

typedef struct ckpt_ctx {
    const char *path;
    uint32_t flags;
} ckpt_ctx;

int32_t op_act(fhd_learner *L, void *ctx);
int32_t op_observe(fhd_learner *L, void *ctx); /* ctx: the step index, an int */
int32_t op_train(fhd_learner *L, void *ctx);
int32_t op_train_batch(fhd_learner *L, void *ctx);
int32_t op_step(fhd_learner *L, void *ctx);
/* ctx: a metrics_ctx; FHD_ERR_INTERNAL (and metrics_incomplete set) for a success that lacks
 * a key */
int32_t op_metrics(fhd_learner *L, void *ctx);
int32_t op_save(fhd_learner *L, void *ctx); /* ctx: a ckpt_ctx */
int32_t op_load(fhd_learner *L, void *ctx); /* ctx: a ckpt_ctx */

#endif
