/* cuda_bench.c - microseconds per full update of the CUDA backend on the docs/design.md section 6
 * configurations (not a test: timing never decides pass/fail).
 *
 * The replay is filled directly through the backend's state writes (random observations,
 * actions, returns and priorities over the whole capacity), then after a warm-up each
 * repetition times train(n) from the first launch to the completion of the last update (a
 * synchronous read waits for the queue; n is chosen so that a repetition lasts ~0.3 s, so the
 * final wait is noise). Prints the median and the minimum over the repetitions, and the act
 * latency (greedy actions for 1 and 256 observations, host to host).
 *
 *   cuda_bench [NAME ...]     NAME a preset of bench/presets, PRESET-fp32|tf32f|tf32|bf16 or
 *                             U1 (bench_configs.h: the rule and the default list, C0 B1 B1-sn
 *                             U1 A1 A1-tf32f A1-bf16 A2 A2-tf32f A2-bf16 B2-fp32 B2-tf32f
 *                             B2-tf32 B2-bf16 B3 B3-tf32f B3-tf32 B3-bf16); run in the order
 *                             given
 *   cuda_bench --configs [NAME ...]   each name's config JSON, checked by the config parser
 *                             (no GPU needed)
 * FHD_BENCH_AUTOTUNE=off|fast|full sets the configs' autotune key; FHD_BENCH_PLAN prints the
 * plan (the backend's describe() text). Each line ends with the autotune's time at create, the
 * cache's state and the metrics' executed rate.
 * With FHD_BENCH_QUICK set, only the fill and 50 warm-up updates run (for a profiler).
 * With FHD_BENCH_TRACE set, the kernels of 8 updates after the warm-up (one train(8), or
 * train(FHD_BENCH_TRACE_N); with
 * FHD_BENCH_TRACE=single eight train(1) calls, with =pairs eight train(2) calls: the captures
 * of cuda_ext.h's FHD_CUDA_GRAPH_*) are also recorded with CUPTI (real start and end times
 * inside the graph, nothing serialised) and the last two updates are printed as timelines:
 * start and end of every kernel relative to the end of the update before, and the gap since
 * the previous kernel on the critical path ends. With FHD_BENCH_TRACE_LAUNCH each kernel's
 * launch follows: blocks x threads, registers, shared memory and the hardware channel it ran on.
 */
#include "cuda_test.h"

#include <cupti.h>

#include "bench_configs.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void must(fhd_learner *L, int32_t rc, const char *what) {
    if (rc != FHD_OK) {
        printf("FAIL %s: %s\n", what, L->ops->error(L->be));
        exit(1);
    }
}

/* Image configs: 16384 transitions of random uint8 frames through observe (the frame-once
 * replay has no row state to write), episodes of about 100 steps. */
static void fill_pixels(fhd_learner *L) {
    const uint32_t E = L->cfg.num_envs, S = L->lo.S, D = L->lo.D, T = 16384 / E + 1;
    uint8_t *obs = (uint8_t *)malloc((size_t)E * S), *next = (uint8_t *)malloc((size_t)E * S);
    float *rew = (float *)malloc(4 * E);
    int32_t *act = (int32_t *)malloc(4 * (size_t)E * D);
    uint8_t *term = (uint8_t *)calloc(E, 1), *trunc = (uint8_t *)calloc(E, 1);
    uint64_t s = 42;
    for (size_t i = 0; i < (size_t)E * S; i++)
        obs[i] = (uint8_t)ct_rng(&s);
    for (uint32_t t = 0; t < T; t++) {
        for (size_t i = 0; i < (size_t)E * S; i++)
            next[i] = (uint8_t)(ct_rng(&s) >> 7);
        for (uint32_t e = 0; e < E; e++) {
            rew[e] = ct_normal(&s);
            term[e] = ct_rng(&s) % 100 == 0;
            for (uint32_t d = 0; d < D; d++)
                act[e * D + d] = (int32_t)(ct_rng(&s) % L->lo.K[d]);
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        tr.obs_u8 = obs;
        tr.next_obs_u8 = next;
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        if (fhd__learner_observe(L, &tr) != FHD_OK) {
            printf("FAIL observe: %s\n", L->err);
            exit(1);
        }
        uint8_t *x = obs;
        obs = next;
        next = x;
    }
    free(obs);
    free(next);
    free(rew);
    free(act);
    free(term);
    free(trunc);
}

static void fill(fhd_learner *L) {
    if (L->cfg.num_obs_shape) {
        fill_pixels(L);
        return;
    }
    const uint32_t N = L->cfg.replay_capacity, S = L->lo.S, D = L->lo.D;
    const uint32_t chunk = 65536;
    float *f = (float *)malloc(sizeof(float) * (size_t)chunk * S);
    int32_t *a = (int32_t *)malloc(sizeof(int32_t) * (size_t)chunk * D);
    uint64_t *q = (uint64_t *)malloc(8 * (size_t)N);
    uint64_t s = 42, maxq = 1;
    for (uint32_t r0 = 0; r0 < N; r0 += chunk) {
        const uint32_t m = N - r0 < chunk ? N - r0 : chunk;
        for (size_t i = 0; i < (size_t)m * S; i++) /* uniform in [-1, 1): cheap to make */
            f[i] = (float)(ct_rng(&s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
        must(L, L->ops->write(L->be, FHD_STATE_REPLAY_OBS, (uint64_t)r0 * S, (uint64_t)m * S, f),
             "write obs");
        must(L,
             L->ops->write(L->be, FHD_STATE_REPLAY_NEXT_OBS, (uint64_t)r0 * S, (uint64_t)m * S, f),
             "write next_obs");
        for (size_t i = 0; i < (size_t)m * D; i++)
            a[i] = (int32_t)(ct_rng(&s) % L->lo.K[i % D]);
        must(L,
             L->ops->write(L->be, FHD_STATE_REPLAY_ACTIONS, (uint64_t)r0 * D, (uint64_t)m * D, a),
             "write actions");
        for (uint32_t i = 0; i < m; i++)
            f[i] = ct_normal(&s);
        must(L, L->ops->write(L->be, FHD_STATE_REPLAY_RETURNS, r0, m, f), "write returns");
        for (uint32_t i = 0; i < m; i++)
            f[i] = 0.99f;
        must(L, L->ops->write(L->be, FHD_STATE_REPLAY_DISC, r0, m, f), "write disc");
    }
    for (uint32_t i = 0; i < N; i++) {
        q[i] = 1 + ct_rng(&s) % (UINT64_C(1) << 25);
        maxq = q[i] > maxq ? q[i] : maxq;
    }
    must(L, L->ops->write(L->be, FHD_STATE_REPLAY_PRIORITY, 0, N, q), "write priorities");
    fhd__backend_scalars sc;
    memset(&sc, 0, sizeof sc);
    sc.replay_size = N;
    sc.max_priority_q = maxq;
    must(L, L->ops->set_scalars(L->be, &sc), "set_scalars");
    free(f);
    free(a);
    free(q);
}

static double timed(fhd_learner *L, uint32_t n) {
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    float probe;
    const double t0 = ct_now();
    must(L, L->ops->train(L->be, n, &st), "train");
    must(L, L->ops->read(L->be, FHD_STATE_PARAMS, 0, 1, &probe), "read");
    return (ct_now() - t0) * 1e6 / n;
}

/* ---- CUPTI kernel timeline ---------------------------------------------------------------- */

#define TRACE_MAX 4096
typedef struct trace_rec {
    uint64_t start, end;
    uint32_t stream;
    uint32_t blocks, threads, regs, smem, channel;
    char name[72];
} trace_rec;
static trace_rec trace[TRACE_MAX];
static int trace_n;

static void CUPTIAPI trace_buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buf = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI trace_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf,
                                            size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || trace_n >= TRACE_MAX)
            continue;
        const CUpti_ActivityKernel9 *k = (const CUpti_ActivityKernel9 *)rec;
        trace_rec *t = &trace[trace_n++];
        t->start = k->start;
        t->end = k->end;
        t->stream = k->streamId;
        t->blocks = (uint32_t)(k->gridX * k->gridY * k->gridZ);
        t->threads = (uint32_t)(k->blockX * k->blockY * k->blockZ);
        t->regs = k->registersPerThread;
        t->smem = (uint32_t)(k->staticSharedMemory + k->dynamicSharedMemory);
        t->channel = k->channelID;
        snprintf(t->name, sizeof t->name, "%s", k->name ? k->name : "?");
    }
    free(buf);
}

static int cmp_trace(const void *a, const void *b) {
    const trace_rec *x = (const trace_rec *)a, *y = (const trace_rec *)b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int is_opt(const trace_rec *t) {
    return strstr(t->name, "fhd_opt_fused_kernel") || strstr(t->name, "fhd_adam_step_kernel");
}

/* Every update ends with its optimiser kernel; one update is the kernels that start after the
 * previous update's optimiser starts, up to its own (a batch sampled ahead for it runs beside
 * the previous optimiser: negative times). Times from the end of the previous optimiser; the
 * second-to-last complete update is shown. */
static void print_update(const char *cfg, const char *mode, int p, int z);

static void print_trace(const char *cfg, const char *mode) {
    qsort(trace, (size_t)trace_n, sizeof trace[0], cmp_trace);
    static int ends[TRACE_MAX];
    int ne = 0;
    for (int i = 0; i < trace_n; i++)
        if (is_opt(&trace[i]))
            ends[ne++] = i;
    if (ne < 3) {
        printf("trace %s: %d updates recorded, too few\n", cfg, ne);
        return;
    }
    if (ne > 3) /* every update's length, from one optimiser's end to the next's */
        printf("trace %s (%s): %d updates, %.1f us per update (mean from the second)\n", cfg, mode,
               ne - 1,
               ((double)trace[ends[ne - 1]].end - (double)trace[ends[0]].end) / 1000.0 / (ne - 1));
    if (ne > 3 && getenv("FHD_BENCH_TRACE_N")) { /* and each one's */
        for (int k = 1; k < ne; k++)
            printf("%s%.0f", k % 25 == 1 ? "\n  " : " ",
                   ((double)trace[ends[k]].end - (double)trace[ends[k - 1]].end) / 1000.0);
        printf("\n");
    }
    print_update(cfg, mode, ends[ne - 3], ends[ne - 2]);
    print_update(cfg, mode, ends[ne - 2], ends[ne - 1]);
}

static void print_update(const char *cfg, const char *mode, int p, int z) {
    const uint64_t t0 = trace[p].end;
    uint64_t busy_end = t0;
    const int launch = getenv("FHD_BENCH_TRACE_LAUNCH") != NULL;
    printf("trace %s (%s): one update, %.1f us from the previous update's end to its own\n", cfg,
           mode, ((double)trace[z].end - (double)t0) / 1000.0);
    printf("  %8s %8s %7s %7s  %s\n", "start", "end", "dur", "gap", "kernel");
    for (int i = p + 1; i <= z; i++) {
        if (is_opt(&trace[i]) && i != z)
            continue;
        const double gap = trace[i].start > busy_end ? (trace[i].start - busy_end) / 1000.0 : 0.0;
        printf("  %8.2f %8.2f %7.2f %7.2f  [s%u] %.60s",
               ((double)trace[i].start - (double)t0) / 1000.0,
               ((double)trace[i].end - (double)t0) / 1000.0,
               (trace[i].end - trace[i].start) / 1000.0, gap, trace[i].stream, trace[i].name);
        if (launch) /* blocks x threads, registers, shared memory (KB), hardware channel */
            printf("  {%ux%u r%u smem %.1fK ch%u}", trace[i].blocks, trace[i].threads,
                   trace[i].regs, trace[i].smem / 1024.0, trace[i].channel);
        printf("\n");
        if (trace[i].end > busy_end)
            busy_end = trace[i].end;
    }
    fflush(stdout);
}

/* FHD_BENCH_TRACE=act: the kernels of one act on 64 observations from the frame ring (the
 * last of four calls), each with its start, duration and the idle gap before it. */
static void trace_act(const char *cfg, fhd_learner *L, const uint64_t *ids) {
    int32_t act[64 * FHD_MAX_BRANCHES];
    trace_n = 0;
    if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) !=
            CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        printf("trace %s: CUPTI unavailable\n", cfg);
        return;
    }
    for (int r = 0; r < 4; r++)
        must(L, L->ops->q_values_frames(L->be, 64, ids, NULL, act), "q_values_frames");
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    qsort(trace, (size_t)trace_n, sizeof trace[0], cmp_trace);
    int heads[8], nh = 0; /* each call ends with its act head kernel */
    for (int i = 0; i < trace_n && nh < 8; i++)
        if (strstr(trace[i].name, "act_head"))
            heads[nh++] = i;
    if (nh < 2) {
        printf("trace %s: %d act calls recorded, too few\n", cfg, nh);
        return;
    }
    const int p = heads[nh - 2], z = heads[nh - 1];
    const uint64_t t0 = trace[p + 1].start;
    printf("trace %s (act, 64 rows from the frame ring): %.1f us from the first kernel to the "
           "last's end\n", cfg, ((double)trace[z].end - (double)t0) / 1000.0);
    uint64_t busy = t0;
    for (int i = p + 1; i <= z; i++) {
        const double gap = trace[i].start > busy ? (trace[i].start - busy) / 1000.0 : 0.0;
        printf("  %8.2f %7.2f %7.2f  %.60s {%ux%u}\n", ((double)trace[i].start - (double)t0) / 1000.0,
               (trace[i].end - trace[i].start) / 1000.0, gap, trace[i].name, trace[i].blocks,
               trace[i].threads);
        busy = trace[i].end > busy ? trace[i].end : busy;
    }
    fflush(stdout);
}

/* The value of "key": in the backend's describe() text, as text ("" when absent). */
static void describe_value(fhd_learner *L, const char *key, char *out, size_t cap) {
    static char text[1 << 16];
    out[0] = '\0';
    if (!L->ops->describe || L->ops->describe(L->be, text, sizeof text) < 0)
        return;
    const char *p = strstr(text, key);
    if (!p)
        return;
    p += strlen(key);
    size_t n = 0;
    while (p[n] && p[n] != ',' && p[n] != '}' && n + 1 < cap)
        n++;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* Time config `name` (its JSON: bench_config_json); tune: FHD_BENCH_AUTOTUNE or NULL. */
static void run(const char *name, const char *json, const char *tune) {
    const double tc = ct_now();
    fhd_learner *L = ct_create_cuda(json);
    const double create_ms = (ct_now() - tc) * 1e3;
    char tune_ms[32], tune_cache[160];
    describe_value(L, "\"ms\":", tune_ms, sizeof tune_ms);
    describe_value(L, "\"cache\":", tune_cache, sizeof tune_cache);
    if (getenv("FHD_BENCH_PLAN")) {
        static char text[1 << 16];
        if (L->ops->describe && L->ops->describe(L->be, text, sizeof text) >= 0)
            printf("plan %s: %s\n", name, text);
    }
    fill(L);
    timed(L, 50); /* warm-up, then until the head dW branch's measured choice is made */
    char by[32], branch[40];
    for (int k = 0; k < 40; k++) {
        describe_value(L, "\"head_dw_choice\":{\"by\":", by, sizeof by);
        if (strcmp(by, "\"measuring\"") != 0)
            break;
        timed(L, 50);
    }
    if (getenv("FHD_BENCH_TRACE") && strcmp(getenv("FHD_BENCH_TRACE"), "act") != 0) {
        /* train(8): the steady state (batches sampled ahead); =single: eight train(1) calls,
         * each update sampling its own batch; =pairs: eight train(2) calls */
        const int single = strcmp(getenv("FHD_BENCH_TRACE"), "single") == 0;
        const int pairs = strcmp(getenv("FHD_BENCH_TRACE"), "pairs") == 0;
        trace_n = 0;
        if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) ==
                CUPTI_SUCCESS &&
            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS) {
            const char *tn = getenv("FHD_BENCH_TRACE_N"); /* updates (default 8) */
            const uint32_t nt = tn && atoi(tn) > 2 ? (uint32_t)atoi(tn) : 8;
            if (single || pairs) {
                fhd_train_stats st = FHD_TRAIN_STATS_INIT;
                for (uint32_t k = 0; k < (pairs ? nt / 2 : nt); k++)
                    must(L, L->ops->train(L->be, pairs ? 2 : 1, &st), "train");
                float probe;
                must(L, L->ops->read(L->be, FHD_STATE_PARAMS, 0, 1, &probe), "read");
            } else {
                timed(L, nt);
            }
            cuptiActivityFlushAll(1);
            cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
            print_trace(name, single ? "train(1) calls" : pairs ? "train(2) calls" : "train(n)");
        } else {
            printf("trace %s: CUPTI unavailable\n", name);
        }
    }
    if (getenv("FHD_BENCH_QUICK")) { /* profiling: the warm-up is all we need */
        fhd__learner_destroy(L);
        return;
    }
    const double est = timed(L, 20);
    uint32_t n = (uint32_t)(0.3e6 / (est > 1 ? est : 1));
    n = n < 20 ? 20 : (n > 20000 ? 20000 : n);
    double t[7];
    for (int r = 0; r < 7; r++)
        t[r] = timed(L, n);
    qsort(t, 7, sizeof t[0], cmp_double);
    /* act latency (uint8 configs: the same zero buffer read as bytes) */
    const uint32_t S = L->lo.S, D = L->lo.D;
    float *obs = (float *)calloc((size_t)256 * S, 4);
    int32_t *act = (int32_t *)calloc((size_t)256 * D, 4);
    double al[2];
    const uint32_t rows[2] = {1, 256};
    for (int k = 0; k < 2; k++) {
        double v[101];
        for (int r = 0; r < 101; r++) {
            const double t0 = ct_now();
            must(L,
                 L->cfg.obs_dtype == FHD_OBS_UINT8
                     ? L->ops->q_values_u8(L->be, rows[k], (const uint8_t *)obs, NULL, act)
                     : L->ops->q_values(L->be, rows[k], obs, NULL, act),
                 "q_values");
            v[r] = (ct_now() - t0) * 1e6;
        }
        qsort(v, 101, sizeof v[0], cmp_double);
        al[k] = v[50];
    }
    /* image configs: act on 64 observations already in the frame ring (q_values_frames: ids
     * up, rows gathered on the device), the latency without the observations' bytes */
    double ring64 = 0;
    if (L->frames && L->ops->q_values_frames) {
        uint64_t fc[3], ids[64 * 16];
        const uint32_t k = L->fk;
        must(L, L->ops->read(L->be, FHD_STATE_FRAME_COUNTERS, 0, 3, fc), "read");
        const int ok = k <= 16 && fc[0] >= 64ull * k;
        for (uint32_t i = 0; ok && i < 64 * k; i++)
            ids[i] = fc[0] - 1 - i;
        double v[101] = {0};
        for (int r = 0; r < 101 && ok; r++) {
            const double t0 = ct_now();
            must(L, L->ops->q_values_frames(L->be, 64, ids, NULL, act), "q_values_frames");
            v[r] = (ct_now() - t0) * 1e6;
        }
        qsort(v, 101, sizeof v[0], cmp_double);
        ring64 = v[50];
        if (ok && getenv("FHD_BENCH_TRACE") && strcmp(getenv("FHD_BENCH_TRACE"), "act") == 0)
            trace_act(name, L, ids);
    }
    fhd__update_stats us;
    L->ops->latest_stats(L->be, &us);
    /* a module built before the fact existed answers fewer: -1 */
    uint64_t info[FHD_CUDA_INFO_COUNT];
    const long long tuned =
        L->ops->read(L->be, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info) == FHD_OK
            ? (long long)info[FHD_CUDA_INFO_GEMM_TUNED]
            : -1;
    char exec_rate[32];
    describe_value(L, "\"updates_per_second\":", exec_rate, sizeof exec_rate);
    describe_value(L, "\"head_dw_branch\":", branch, sizeof branch);
    describe_value(L, "\"head_dw_choice\":{\"by\":", by, sizeof by);
    char us_after[24], us_own[24];
    describe_value(L, "\"us_after\":", us_after, sizeof us_after);
    describe_value(L, "\"us_own\":", us_own, sizeof us_own);
    printf("%-8s %10.1f %10.1f %12.0f %8u %10.1f %10.1f  loss %.4g  tuned GEMMs %lld  "
           "autotune %s %s ms (create %.0f ms, cache %s)  metric %s/s  (%s)  head dW %s by %s (%s / %s us)  act 64 from the frame ring %.1f us\n",
           name, t[3], t[0], 1e6 / t[3], n, al[0], al[1], us.loss, tuned, tune ? tune : "default",
           tune_ms, create_ms, tune_cache, exec_rate, L->ops->device_name(L->be), branch, by, us_after, us_own, ring64);
    fflush(stdout);
    free(obs);
    free(act);
    fhd__learner_destroy(L);
}

static int usage(FILE *out) {
    fputs("usage: cuda_bench [--configs] [NAME ...]\n", out);
    bench_print_names(out);
    return out == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return usage(stdout);
    const int list = argc > 1 && !strcmp(argv[1], "--configs"), a0 = 1 + list;
    const char *const *names = argc > a0 ? (const char *const *)argv + a0 : bench_default_names;
    size_t n = argc > a0 ? (size_t)(argc - a0) : 0;
    while (argc <= a0 && names[n])
        n++;
    /* FHD_BENCH_AUTOTUNE=off|fast|full: the configs' autotune key (default: the config's) */
    const char *tune = getenv("FHD_BENCH_AUTOTUNE");
    char **json = (char **)calloc(n, sizeof *json);
    char err[256];
    for (size_t i = 0; i < n; i++) /* every name first: a typo fails before any timing */
        if (!(json[i] = bench_config_json(names[i], tune, err, sizeof err))) {
            fprintf(stderr, "cuda_bench: %s\n", err);
            return usage(stderr);
        }
    int bad = 0;
    if (list) {
        for (size_t i = 0; i < n; i++) {
            fhd__config cfg;
            fhd_error e = FHD_ERROR_INIT;
            const int32_t rc = fhd__config_parse(json[i], strlen(json[i]), &cfg, &e);
            if (rc != FHD_OK) {
                printf("FAIL %s: %s %s: %s\n", names[i], e.path, fhd__status_name(rc), e.message);
                bad = 1;
            } else {
                printf("%s %s\n", names[i], json[i]);
            }
        }
    } else {
        ct_require_gpu();
        printf("%-8s %10s %10s %12s %8s %10s %10s\n", "config", "median_us", "min_us", "updates/s",
               "n/rep", "act1_us", "act256_us");
        for (size_t i = 0; i < n; i++)
            run(names[i], json[i], tune);
    }
    for (size_t i = 0; i < n; i++)
        free(json[i]);
    free(json);
    return bad;
}
