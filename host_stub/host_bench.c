/* host_bench.c - `fhd-host bench`: times the learner's full update, act and observe on the
 * benchmark presets of docs/design.md section 6 or any config, through the public ABI, as any
 * host sees them.
 *
 * The config: --preset NAME (bench/presets/NAME.json, embedded at build time: host_bench.h;
 * bench/torch_reference.py reads the same file) or --config FILE (any learner config, e.g. one
 * of bench/shapes.py's); then the command line's --backend, --envs (num_envs), --seed and
 * --set KEY=VALUE (host_bench_opts.c). The measurement (fill, warm-up, timed runs, act) is
 * host_bench_run.c's; this file creates the learner and prints the result.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "host_bench.h"
#include "host_bench_geom.h"
#include "host_bench_opts.h"
#include "host_bench_run.h"
#include "host_cmds.h"
#include "host_plugin.h"

static void host_cpu(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            const char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                snprintf(out, cap, "%.*s", (int)strcspn(c, "\n"), c);
            }
            break;
        }
    }
    fclose(f);
}

/* --print-plan: the "plan" object of the learner's metrics, which the CUDA backend fills at
 * create (docs/design.md section 7); a backend without one says so. */
static int print_plan(const bench_opts *o, bench_run *r) {
    json_t *m = fhd_bench_read_metrics(r);
    if (!m)
        return FHD_EXIT_FAILURE;
    const char *backend = json_string_value(json_object_get(m, "backend"));
    const char *device = json_string_value(json_object_get(m, "device"));
    json_t *plan = json_object_get(m, "plan");
    if (o->json) {
        json_t *j = json_pack("{s:s, s:s, s:O}", "backend", backend ? backend : "?", "device",
                              device ? device : "?", "plan", plan ? plan : json_null());
        char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(7)) : NULL;
        if (s)
            puts(s);
        free(s);
        json_decref(j);
    } else if (plan) {
        printf("plan of the %s backend (%s):\n", backend ? backend : "?", device ? device : "?");
        char *s = json_dumps(plan, JSON_INDENT(2) | JSON_REAL_PRECISION(7));
        if (s)
            puts(s);
        free(s);
    } else {
        printf("the %s backend (%s) has no plan: its metrics carry no \"plan\" object\n",
               backend ? backend : "?", device ? device : "?");
    }
    json_decref(m);
    return FHD_EXIT_OK;
}

static void print_result(const bench_opts *o, json_t *cfg, const bench_geom *g,
                         const bench_result *res, json_t *metrics) {
    const char *label = o->preset ? o->preset : o->config_path;
    const char *backend = json_string_value(json_object_get(metrics, "backend"));
    const char *device = json_string_value(json_object_get(metrics, "device"));
    const double ups = 1e6 / res->us_med;
    const double tflops = res->flops * ups / 1e12;
    char cpu[256];
    host_cpu(cpu, sizeof cpu);
    const char *obt = getenv("OPENBLAS_NUM_THREADS");
    /* hardware work queues per CUDA context change the timing of wide graphs (README, Building),
     * so the record says which it ran with */
    const char *cmc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "preset", json_string(label));
        json_object_set_new(j, "impl", json_string("foxhunt-dqn"));
        json_object_set_new(j, "backend", json_string(backend ? backend : "?"));
        json_object_set_new(j, "device", json_string(device ? device : "?"));
        json_object_set_new(j, "host_cpu", json_string(cpu));
        json_object_set_new(j, "host_cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
        json_object_set_new(j, "openblas_num_threads", obt ? json_string(obt) : json_null());
        json_object_set_new(j, "cuda_device_max_connections", cmc ? json_string(cmc) : json_null());
        json_object_set_new(j, "config", json_deep_copy(cfg));
        json_object_set_new(j, "batch_size", json_integer(g->B));
        json_object_set_new(j, "fill", json_integer((json_int_t)res->fill));
        json_object_set_new(j, "replay_size", json_integer((json_int_t)res->replay_size));
        json_object_set_new(j, "warmup", json_integer((json_int_t)res->warmup));
        json_object_set_new(j, "updates", json_integer((json_int_t)res->updates));
        json_object_set_new(j, "repeats", json_integer((json_int_t)res->repeats));
        json_object_set_new(j, "timing",
                            json_string("host clock around train(N) + one blocking read"));
        json_object_set_new(j, "us_per_update_min", json_real(res->us_min));
        json_object_set_new(j, "us_per_update_p10", json_real(res->us_p10));
        json_object_set_new(j, "us_per_update_median", json_real(res->us_med));
        json_object_set_new(j, "us_per_update_p90", json_real(res->us_p90));
        json_object_set_new(j, "us_per_update_max", json_real(res->us_max));
        json_t *runs = json_array();
        for (uint64_t k = 0; k < res->repeats; k++)
            json_array_append_new(runs, json_real(res->run_us[k]));
        json_object_set_new(j, "us_per_update_runs", runs);
        json_object_set_new(j, "cpu_us_per_update_median", json_real(res->cpu_med));
        json_object_set_new(j, "updates_per_second", json_real(ups));
        json_object_set_new(j, "samples_per_second", json_real(ups * g->B));
        json_object_set_new(j, "gemm_flops_per_update", json_real(res->flops));
        json_object_set_new(j, "tflops", json_real(tflops));
        json_object_set_new(j, "peak_tflops",
                            o->peak_tflops > 0 ? json_real(o->peak_tflops) : json_null());
        json_object_set_new(j, "peak_fraction",
                            o->peak_tflops > 0 ? json_real(tflops / o->peak_tflops) : json_null());
        json_object_set_new(j, "act_us_1", json_real(res->act1));
        json_object_set_new(j, "act_us_1_p90", json_real(res->act1_p90));
        json_object_set_new(j, "act_us_64", json_real(res->act64));
        json_object_set_new(j, "act_us_64_p90", json_real(res->act64_p90));
        json_object_set_new(j, "act_calls", json_integer((json_int_t)o->act_calls));
        json_object_set_new(j, "step_act_us", res->step_act > 0 ? json_real(res->step_act) : json_null());
        json_object_set_new(j, "step_act_us_p90",
                            res->step_act > 0 ? json_real(res->step_act_p90) : json_null());
        json_object_set_new(j, "observe_per_second", json_real(res->observe_per_s));
        json_object_set_new(j, "observe_envs", json_integer((json_int_t)o->envs));
        json_object_set_new(j, "loss_last", json_real(res->last.loss));
        json_object_set_new(j, "metrics_updates_per_second",
                            json_deep_copy(json_object_get(metrics, "updates_per_second")));
        json_t *plan = json_object_get(metrics, "plan"); /* the CUDA backend's (--print-plan) */
        json_object_set_new(j, "plan", plan ? json_deep_copy(plan) : json_null());
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(7));
        if (s)
            puts(s);
        free(s);
        json_decref(j);
        return;
    }
    printf("fhd-host bench: preset %s, backend %s, device %s\n", label, backend ? backend : "?",
           device ? device : "?");
    printf("  host            %s, %ld cores, OPENBLAS_NUM_THREADS=%s\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), obt ? obt : "(unset)");
    printf("  network         S=%u%s", g->S, g->u8 ? " uint8" : "");
    for (uint32_t c = 0; c < g->NC; c++) { /* out x kernel s stride [p padding] */
        printf("%s%ux%us%u", c ? " " : " conv ", g->conv[c].cout, g->conv[c].k, g->conv[c].stride);
        if (g->conv[c].pad)
            printf("p%u", g->conv[c].pad);
    }
    printf(" hidden");
    for (uint32_t l = 0; l < g->L; l++)
        printf("%s%u", l ? "x" : " ", g->hidden[l]);
    printf(" head %u (KT %u, D %u), batch %u, %s\n", g->HO, g->KT, g->D, g->B,
           g->double_dqn ? "double DQN" : "max target");
    printf("  replay          %llu transitions observed (%llu per call), %.3g transitions/s\n",
           (unsigned long long)res->fill, (unsigned long long)o->envs, res->observe_per_s);
    printf("  timing          %llu warm-up updates, then %llu runs of train(%llu); host clock "
           "around train(N) + one blocking read\n",
           (unsigned long long)res->warmup, (unsigned long long)res->repeats,
           (unsigned long long)res->updates);
    printf("  us/update       median %.2f  (min %.2f, p10 %.2f, p90 %.2f, max %.2f)\n", res->us_med,
           res->us_min, res->us_p10, res->us_p90, res->us_max);
    printf("  process CPU     median %.2f us/update (all threads)\n", res->cpu_med);
    printf("  updates/s       %.1f\n", ups);
    printf("  samples/s       %.4g\n", ups * g->B);
    printf("  GEMM            %.4g FLOP/update, %.4f TFLOP/s", res->flops, tflops);
    if (o->peak_tflops > 0)
        printf(" (%.1f%% of %.4g)", 100.0 * tflops / o->peak_tflops, o->peak_tflops);
    printf("\n  act (greedy)    1 obs: median %.2f us (p90 %.2f); 64 obs: median %.2f us "
           "(p90 %.2f)\n",
           res->act1, res->act1_p90, res->act64, res->act64_p90);
    if (res->step_act > 0)
        printf("  step's act      %llu envs, one new frame each: median %.2f us (p90 %.2f)\n",
               (unsigned long long)o->envs, res->step_act, res->step_act_p90);
    printf("  last loss       %.6g\n", (double)res->last.loss);
}

int fhd_cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = fhd_bench_parse_args(argc, argv, &o);
    if (rc != FHD_EXIT_OK)
        return rc;
    if (o.help) {
        fputs(fhd_bench_usage, stdout);
        return FHD_EXIT_OK;
    }
    if (o.list) {
        fhd_host_list_presets(stdout);
        return FHD_EXIT_OK;
    }
    json_t *cfg = NULL;
    rc = fhd_bench_build_config(&o, !o.print_config, &cfg);
    if (rc != FHD_EXIT_OK)
        return rc;
    if (o.print_config) {
        char *s = json_dumps(cfg, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
        if (s)
            puts(s);
        free(s);
        json_decref(cfg);
        return FHD_EXIT_OK;
    }
    fhd_host_plugin p;
    rc = fhd_host_load(&p, o.plugin);
    if (rc != FHD_EXIT_OK) {
        fhd_host_unload(&p);
        json_decref(cfg);
        return rc;
    }
    bench_geom g;
    char why[256];
    bench_result res;
    memset(&res, 0, sizeof res);
    bench_run r = {p.api, NULL, {0}, 0, {0}};
    char *text = json_dumps(cfg, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fhd_error err = FHD_ERROR_INIT;
    int32_t st = text ? p.api->init(text, strlen(text), &r.L, &err) : FHD_ERR_OUT_OF_MEMORY;
    free(text);
    if (st != FHD_OK) {
        fhd_host_print_error(&p, o.preset ? o.preset : o.config_path, &err);
        rc = st == FHD_ERR_BACKEND_UNAVAILABLE || st == FHD_ERR_OUT_OF_MEMORY ? FHD_EXIT_FAILURE
                                                                              : FHD_EXIT_CONFIG;
    } else if (o.print_plan) {
        rc = print_plan(&o, &r);
    } else if (fhd_host_bench_geom(cfg, p.manifest, &g) != 0) {
        fprintf(stderr, "error: bench: cannot read the network's shape from the config\n");
        rc = FHD_EXIT_CONFIG;
    } else if (fhd_host_bench_geom_check(p.api, r.L, &g, why, sizeof why) != 0) {
        fprintf(stderr,
                "error: bench: the network's shape as read from the config differs "
                "from the learner's: %s\n",
                why);
        rc = FHD_EXIT_FAILURE;
    } else {
        rc = fhd_bench_run(&o, &r, cfg, p.manifest, &g, &res);
        if (rc == FHD_EXIT_OK) {
            json_t *m = fhd_bench_read_metrics(&r);
            print_result(&o, cfg, &g, &res, m);
            json_decref(m);
        }
    }
    free(res.run_us);
    free(res.cpu_us);
    p.api->destroy(r.L);
    fhd_host_unload(&p);
    json_decref(cfg);
    return rc;
}
