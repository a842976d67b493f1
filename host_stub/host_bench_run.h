/* host_bench_run.h - one timed run of `fhd-host bench` on a created learner: the learner under
 * test, the protocol's result and the learner's metrics read (host_bench_run.c). */
#ifndef FHD_HOST_BENCH_RUN_H
#define FHD_HOST_BENCH_RUN_H

#include <stdint.h>

#include <jansson.h>

#include "foxhunt_dqn.h"
#include "host_bench_geom.h"
#include "host_bench_opts.h"

/* The learner under test, and its smallest online tensor, whose read waits for the device. */
typedef struct bench_run {
    const fhd_api_v1 *api;
    fhd_learner *L;
    char sync_name[96]; /* smallest online tensor: reading it waits for the device */
    uint64_t sync_count;
    float sync_buf[64];
} bench_run;

/* What one run measured: times in microseconds per update unless named otherwise. */
typedef struct bench_result {
    uint64_t fill, replay_size, warmup, updates, repeats;
    double observe_per_s, est_us;
    double *run_us; /* (repeats) sorted */
    double *cpu_us; /* (repeats) process CPU microseconds per update, sorted */
    double cpu_med;
    double us_min, us_p10, us_med, us_p90, us_max;
    double act1, act1_p90, act64, act64_p90;
    /* image configs: step() without a transition on every env's stack moved on by one frame
     * (the observations step acts on, in; greedy actions out); 0 where not measured */
    double step_act, step_act_p90;
    double flops;
    fhd_train_stats last;
} bench_result;

/* The protocol (host_bench_run.c's header) on the created learner r->L: fill, warm-up, timed
 * runs and act latency, into *res (run_us and cpu_us allocated: the caller frees them). An
 * FHD_EXIT_* code; failures are reported on stderr. */
int fhd_bench_run(const bench_opts *o, bench_run *r, json_t *cfg, json_t *manifest,
                  const bench_geom *g, bench_result *res);

/* The learner's metrics, parsed (NULL on failure). The text can grow between the size query
 * and the read (uptime_seconds and the rates change length), so ask with room to spare and
 * retry once with the new size. */
json_t *fhd_bench_read_metrics(bench_run *r);

#endif
