/* host_bench_run.c - the measurement of `fhd-host bench` (host_bench.c is the command): the
 * learner under test, the synthetic data, and the protocol of one run.
 *
 * One run, on a learner created from the config (host_bench_opts.c builds it):
 *   1. fill: synthetic transitions through observe, num_envs per call: observations and next
 *      observations uniform in [-1, 1) (uint8 configs: uniform bytes, through the *_u8 fields),
 *      rewards uniform in [-1, 1), uniform actions, 1% of them terminated, none truncated.
 *      Default count min(capacity, max(16 B, 65536)), rounded up to a multiple of num_envs:
 *      B1 holds 65536 transitions, so a batch of 256 is drawn from 256x as many, through the
 *      real sum tree. The wall time of the fill (host clock, one blocking read at its end)
 *      gives observe_per_second; it includes the first touch of the replay pages, as a
 *      learner's first pass through its buffer does.
 *   2. warm-up: train() in growing chunks until 0.3 s have passed (or exactly --warmup N
 *      updates); the last chunk estimates the time of one update.
 *   3. timed runs: --repeats runs of train(N); each run is timed with the host clock around
 *      train(N) plus one blocking tensor_read of the smallest online tensor. On CUDA train() is
 *      asynchronous and that read waits for the device, so N (default >= 1000 there) amortises
 *      it. Default N: enough for about --run-seconds (0.25 s) per run. Reported:
 *      min/p10/median/p90/max of the per-run microseconds per update (p10/p90 interpolated
 *      linearly, as numpy.percentile).
 *   4. act: greedy latency for 1 and 64 observations, each call timed alone, median (and p90)
 *      over --act-calls calls after 20 untimed ones.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "host_bench_run.h"
#include "host_cmds.h"
#include "host_plugin.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process (all threads, OpenBLAS's included). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 24 random bits */
static float rand01(uint64_t *s) {
    return (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q-th percentile (0..100) of sorted v (n >= 1), linear interpolation as numpy.percentile. */
static double percentile(const double *v, size_t n, double q) {
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

/* ---- the learner under test ------------------------------------------------------------------ */

static int api_fail(const bench_run *r, const char *what, int32_t rc) {
    fprintf(stderr, "error: %s: %s: %s\n", what, r->api->status_name(rc), r->api->last_error(r->L));
    return FHD_EXIT_FAILURE;
}

static int find_sync_tensor(bench_run *r) {
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    r->sync_count = UINT64_MAX;
    for (uint32_t i = 0; r->api->tensor_info(r->L, i, &ti) == FHD_OK; i++)
        if (!strncmp(ti.name, "online.", 7) && ti.count < r->sync_count && ti.count <= 64) {
            r->sync_count = ti.count;
            snprintf(r->sync_name, sizeof r->sync_name, "%s", ti.name);
        }
    if (r->sync_count == UINT64_MAX) {
        fprintf(stderr, "error: bench: the learner has no online tensor of <= 64 floats\n");
        return FHD_EXIT_FAILURE;
    }
    return FHD_EXIT_OK;
}

/* Wait until the learner's queued work is done (a blocking read of a small tensor). */
static int sync_learner(bench_run *r) {
    int32_t rc = r->api->tensor_read(r->L, r->sync_name, r->sync_buf, r->sync_count);
    return rc == FHD_OK ? FHD_EXIT_OK : api_fail(r, "tensor_read", rc);
}

/* Seconds of train(n) followed by the blocking read (wall, and the process's CPU time in
 * *cpu when not NULL); the stats of the call in *st. */
static int timed_train(bench_run *r, uint32_t n, fhd_train_stats *st, double *secs, double *cpu) {
    *st = (fhd_train_stats)FHD_TRAIN_STATS_INIT;
    double c0 = cpu_s(), t0 = now_s();
    int32_t rc = r->api->train(r->L, n, st);
    if (rc != FHD_OK)
        return api_fail(r, "train", rc);
    int e = sync_learner(r);
    *secs = now_s() - t0;
    if (cpu)
        *cpu = cpu_s() - c0;
    if (e != FHD_EXIT_OK)
        return e;
    if (st->updates_done != n || !isfinite(st->loss) || !isfinite(st->grad_norm)) {
        fprintf(stderr, "error: train(%u) did %u updates; loss %g, grad norm %g\n", n,
                st->updates_done, (double)st->loss, (double)st->grad_norm);
        return FHD_EXIT_FAILURE;
    }
    return FHD_EXIT_OK;
}

/* Synthetic data: `rows` consecutive observations (transition j: obs row j, next row j+1),
 * and per-row actions, rewards and terminal flags. */
typedef struct bench_data {
    uint32_t rows; /* usable start rows; the arrays hold rows + envs + 1 */
    float *obs, *rew;
    int32_t *act;
    uint8_t *term, *trunc;
    uint8_t *obs8; /* uint8 configs: the same observations as bytes */
} bench_data;

static int make_data(bench_data *d, const bench_geom *g, json_t *cfg, json_t *manifest,
                     uint32_t envs, uint64_t seed) {
    uint64_t rows = (16ull << 20) / g->S; /* at most 64 MiB of observations */
    rows = rows > 4096 ? 4096 : rows < 128 ? 128 : rows;
    d->rows = (uint32_t)rows;
    const uint64_t n = rows + envs + 1;
    d->obs = malloc(sizeof(float) * n * g->S);
    d->rew = malloc(sizeof(float) * n);
    d->act = malloc(sizeof(int32_t) * n * g->D);
    d->term = malloc(n);
    d->trunc = calloc(n, 1);
    if (!d->obs || !d->rew || !d->act || !d->term || !d->trunc) {
        fprintf(stderr, "error: bench: out of memory for the synthetic data\n");
        return FHD_EXIT_FAILURE;
    }
    json_t *acts = fhd_host_cfg_get(cfg, manifest, "actions");
    uint64_t s = seed ^ 0x62656e63682d6461ull; /* "bench-da" */
    for (uint64_t i = 0; i < n * g->S; i++)
        d->obs[i] = 2.0f * rand01(&s) - 1.0f;
    if (g->u8 && !(d->obs8 = malloc(n * g->S)))
        return FHD_EXIT_FAILURE;
    for (uint64_t i = 0; g->u8 && i < n * g->S; i++)
        d->obs8[i] = (uint8_t)(127.5f * (d->obs[i] + 1.0f));
    for (uint64_t i = 0; i < n; i++) {
        d->rew[i] = 2.0f * rand01(&s) - 1.0f;
        d->term[i] = rand01(&s) < 0.01f;
        for (uint32_t k = 0; k < g->D; k++) {
            uint64_t K = (uint64_t)json_integer_value(json_array_get(acts, k));
            d->act[i * g->D + k] = (int32_t)(splitmix64(&s) % K);
        }
    }
    return FHD_EXIT_OK;
}

static void free_data(bench_data *d) {
    free(d->obs);
    free(d->obs8);
    free(d->rew);
    free(d->act);
    free(d->term);
    free(d->trunc);
}

/* observe `count` transitions (rounded up to whole calls of `envs`); *secs: wall time. */
static int fill_replay(bench_run *r, const bench_data *d, const bench_geom *g, uint32_t envs,
                       uint64_t count, double *secs) {
    fhd_transitions t = FHD_TRANSITIONS_INIT;
    t.num_envs = envs;
    double t0 = now_s();
    for (uint64_t done = 0, c = 0; done < count; done += envs, c++) {
        const uint64_t off = (c * envs) % d->rows;
        t.obs = g->u8 ? NULL : d->obs + off * g->S;
        t.next_obs = g->u8 ? NULL : d->obs + (off + 1) * g->S;
        t.obs_u8 = g->u8 ? d->obs8 + off * g->S : NULL;
        t.next_obs_u8 = g->u8 ? d->obs8 + (off + 1) * g->S : NULL;
        t.actions = d->act + off * g->D;
        t.rewards = d->rew + off;
        t.terminated = d->term + off;
        t.truncated = d->trunc + off;
        int32_t rc = r->api->observe(r->L, &t);
        if (rc != FHD_OK)
            return api_fail(r, "observe", rc);
    }
    int e = sync_learner(r);
    *secs = now_s() - t0;
    return e;
}

/* Greedy act latency for n observations: median and p90 over `calls` calls (microseconds). */
static int time_act(bench_run *r, const bench_data *d, const bench_geom *g, uint32_t n,
                    uint64_t calls, double *median, double *p90) {
    int32_t *actions = malloc(sizeof(int32_t) * n * g->D);
    double *us = malloc(sizeof(double) * calls);
    if (!actions || !us) {
        free(actions);
        free(us);
        fprintf(stderr, "error: bench: out of memory\n");
        return FHD_EXIT_FAILURE;
    }
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = n;
    a.actions = actions;
    a.explore = 0;
    int e = FHD_EXIT_OK;
    for (uint64_t i = 0; i < calls + 20 && e == FHD_EXIT_OK; i++) {
        a.obs = g->u8 ? NULL : d->obs + ((i * n) % (d->rows - n)) * g->S;
        a.obs_u8 = g->u8 ? d->obs8 + ((i * n) % (d->rows - n)) * g->S : NULL;
        double t0 = now_s();
        int32_t rc = r->api->act(r->L, &a);
        double dt = now_s() - t0;
        if (rc != FHD_OK)
            e = api_fail(r, "act", rc);
        else if (i >= 20)
            us[i - 20] = dt * 1e6;
    }
    for (uint32_t i = 0; i < n * g->D && e == FHD_EXIT_OK; i++)
        if (actions[i] < 0) {
            fprintf(stderr, "error: act returned action %d\n", actions[i]);
            e = FHD_EXIT_FAILURE;
        }
    if (e == FHD_EXIT_OK) {
        qsort(us, calls, sizeof(double), cmp_double);
        *median = percentile(us, calls, 50.0);
        *p90 = percentile(us, calls, 90.0);
    }
    free(actions);
    free(us);
    return e;
}

/* Image configs (obs_shape): step() latency for `envs` envs acting on stacked observations, each
 * call's stack every env's previous one moved on by one new frame (as a frame-stacking host
 * gives them), without a transition (rewards NULL: no ingest, no training), so it times
 * sending the new frames and acting; median and p90 over `calls` calls after 20 untimed. */
static int time_step_act(bench_run *r, const bench_data *d, const bench_geom *g, json_t *cfg,
                         json_t *manifest, uint32_t envs, uint64_t calls, double *median,
                         double *p90) {
    const uint32_t k = (uint32_t)json_integer_value(fhd_host_cfg_get(cfg, manifest, "frame_stack"));
    const size_t es = g->u8 ? 1 : sizeof(float), fe = g->S / (k ? k : 1), row = g->S * es;
    unsigned char *st = malloc(row * envs);
    int32_t *actions = malloc(sizeof(int32_t) * envs * g->D);
    double *us = malloc(sizeof(double) * calls);
    if (!st || !actions || !us) {
        free(st);
        free(actions);
        free(us);
        fprintf(stderr, "error: bench: out of memory\n");
        return FHD_EXIT_FAILURE;
    }
    const unsigned char *src = g->u8 ? (const unsigned char *)d->obs8 : (const unsigned char *)d->obs;
    memcpy(st, src, row * envs);
    int e = FHD_EXIT_OK;
    for (uint64_t i = 0; i < calls + 20 && e == FHD_EXIT_OK; i++) {
        for (uint32_t v = 0; v < envs && i > 0; v++) { /* one new frame per env */
            unsigned char *s = st + v * row;
            memmove(s, s + fe * es, (g->S - fe) * es);
            memcpy(s + (g->S - fe) * es, src + ((i * envs + v) % d->rows) * row, fe * es);
        }
        fhd_step_args a = FHD_STEP_ARGS_INIT;
        a.num_envs = envs;
        a.obs = g->u8 ? NULL : (const float *)(const void *)st;
        a.obs_u8 = g->u8 ? st : NULL;
        a.actions = actions;
        double t0 = now_s();
        int32_t rc = r->api->step(r->L, &a);
        double dt = now_s() - t0;
        if (rc != FHD_OK)
            e = api_fail(r, "step", rc);
        else if (i >= 20)
            us[i - 20] = dt * 1e6;
    }
    if (e == FHD_EXIT_OK) {
        qsort(us, calls, sizeof(double), cmp_double);
        *median = percentile(us, calls, 50.0);
        *p90 = percentile(us, calls, 90.0);
    }
    free(st);
    free(actions);
    free(us);
    return e;
}

json_t *fhd_bench_read_metrics(bench_run *r) {
    size_t need = 0;
    r->api->metrics(r->L, NULL, 0, &need);
    json_t *m = NULL;
    for (int attempt = 0; attempt < 2 && !m; attempt++) {
        size_t cap = need + 256;
        char *buf = malloc(cap);
        if (buf && r->api->metrics(r->L, buf, cap, &need) == FHD_OK)
            m = json_loads(buf, 0, NULL);
        free(buf);
    }
    if (!m)
        fprintf(stderr, "warning: bench: cannot read the learner's metrics: %s\n",
                r->api->last_error(r->L));
    return m;
}

int fhd_bench_run(const bench_opts *o, bench_run *r, json_t *cfg, json_t *manifest,
                  const bench_geom *g, bench_result *res) {
    int e = find_sync_tensor(r);
    if (e != FHD_EXIT_OK)
        return e;
    json_t *m = fhd_bench_read_metrics(r);
    const char *be = json_string_value(json_object_get(m, "backend"));
    const int cuda = be && !strcmp(be, "cuda");
    json_decref(m);

    /* 1. fill */
    const uint32_t envs = (uint32_t)o->envs;
    uint64_t fill = o->fill;
    if (!o->have_fill) {
        fill = 16ull * g->B > 65536 ? 16ull * g->B : 65536;
        fill = fill < g->capacity ? fill : g->capacity;
    }
    fill = (fill + envs - 1) / envs * envs;
    bench_data d = {0};
    e = make_data(&d, g, cfg, manifest, envs, o->seed);
    double secs = 0.0;
    if (e == FHD_EXIT_OK)
        e = fill_replay(r, &d, g, envs, fill, &secs);
    res->fill = fill;
    res->observe_per_s = secs > 0 ? (double)fill / secs : 0.0;
    if (e == FHD_EXIT_OK) {
        m = fhd_bench_read_metrics(r);
        res->replay_size = (uint64_t)json_integer_value(json_object_get(m, "replay_size"));
        json_decref(m);
        if (res->replay_size < g->B) {
            fprintf(stderr,
                    "error: bench: the replay holds %llu transitions after the fill; "
                    "batch_size %u are needed (raise --fill)\n",
                    (unsigned long long)res->replay_size, g->B);
            e = FHD_EXIT_USAGE;
        }
    }

    /* 2. warm-up: fixed count, or growing chunks for 0.3 s; the last chunk estimates t */
    fhd_train_stats st;
    if (e == FHD_EXIT_OK && o->have_warmup) {
        res->warmup = o->warmup;
        if (o->warmup)
            e = timed_train(r, (uint32_t)o->warmup, &st, &secs, NULL);
        res->est_us = o->warmup ? secs * 1e6 / (double)o->warmup : 0.0;
    } else if (e == FHD_EXIT_OK) {
        double t0 = now_s();
        for (uint32_t chunk = cuda ? 100 : 5; e == FHD_EXIT_OK; chunk *= 2) {
            e = timed_train(r, chunk, &st, &secs, NULL);
            res->warmup += chunk;
            res->est_us = secs * 1e6 / chunk;
            if (now_s() - t0 > 0.3 || res->warmup > 100000)
                break;
        }
    }
    if (e == FHD_EXIT_OK && !o->have_updates && !(res->est_us > 0.0)) {
        e = timed_train(r, 10, &st, &secs, NULL); /* --warmup 0: estimate from 10 updates */
        res->est_us = secs * 1e5;
    }

    /* 3. timed runs */
    res->updates = o->updates;
    if (!o->have_updates) {
        double n = ceil(o->run_seconds * 1e6 / res->est_us);
        n = n < 10 ? 10 : n > 1000000 ? 1000000 : n;
        res->updates = (uint64_t)(cuda && n < 1000 ? 1000 : n);
    }
    res->repeats = o->repeats;
    res->run_us = calloc(o->repeats, sizeof(double));
    if (!res->run_us && e == FHD_EXIT_OK) {
        fprintf(stderr, "error: bench: out of memory\n");
        e = FHD_EXIT_FAILURE;
    }
    res->cpu_us = calloc(o->repeats, sizeof(double));
    if (!res->cpu_us && e == FHD_EXIT_OK) {
        fprintf(stderr, "error: bench: out of memory\n");
        e = FHD_EXIT_FAILURE;
    }
    for (uint64_t k = 0; k < o->repeats && e == FHD_EXIT_OK; k++) {
        double cpu = 0.0;
        e = timed_train(r, (uint32_t)res->updates, &res->last, &secs, &cpu);
        res->run_us[k] = secs * 1e6 / (double)res->updates;
        res->cpu_us[k] = cpu * 1e6 / (double)res->updates;
    }
    if (e == FHD_EXIT_OK) {
        const size_t n = (size_t)o->repeats;
        qsort(res->cpu_us, n, sizeof(double), cmp_double);
        res->cpu_med = percentile(res->cpu_us, n, 50.0);
        qsort(res->run_us, n, sizeof(double), cmp_double);
        res->us_min = res->run_us[0];
        res->us_p10 = percentile(res->run_us, n, 10.0);
        res->us_med = percentile(res->run_us, n, 50.0);
        res->us_p90 = percentile(res->run_us, n, 90.0);
        res->us_max = res->run_us[n - 1];
    }

    /* 4. act latency */
    if (e == FHD_EXIT_OK)
        e = time_act(r, &d, g, 1, o->act_calls, &res->act1, &res->act1_p90);
    if (e == FHD_EXIT_OK)
        e = time_act(r, &d, g, 64, o->act_calls, &res->act64, &res->act64_p90);
    /* 5. step's act on image observations (the greedy forward runs unless epsilon is 1) */
    m = e == FHD_EXIT_OK ? fhd_bench_read_metrics(r) : NULL;
    const double eps = json_number_value(json_object_get(m, "epsilon"));
    json_decref(m);
    if (e == FHD_EXIT_OK && json_object_get(cfg, "obs_shape") && eps < 1.0)
        e = time_step_act(r, &d, g, cfg, manifest, envs, o->act_calls, &res->step_act,
                          &res->step_act_p90);
    free_data(&d);
    res->flops = fhd_host_bench_flops(g);
    return e;
}
