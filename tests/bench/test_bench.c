/* test_bench.c - `fhd-host bench` on a tiny C0 run: the JSON it prints holds the keys and the
 * values the run implies (counts, the GEMM FLOP formula, ordered percentiles, finite rates);
 * bad command lines exit 2; every file in bench/presets is a preset of fhd-host with the same
 * JSON (they are embedded at build time); --print-plan on the CPU backend; --config FILE with
 * branches of different sizes, and with uint8 images and conv torsos (their FLOPs).
 * Usage: test_bench FHD_HOST PRESETS_DIR [TMPDIR]   (TMPDIR: where a config file is written) */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "fhd_test.h"

static const char *host;

/* Run `fhd-host ARGS`, capture stdout (malloc'd) and the exit status. */
static char *run(const char *args, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", host, args);
    FILE *p = popen(cmd, "r");
    if (!p) {
        *status = -1;
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - 1 - n, p)) > 0) {
        n += r;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf)
        buf[n] = '\0';
    return buf;
}

static const char *str(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void test_c0_run(void) {
    int st;
    /* recorded as run (the CPU backend does not use it) */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
    char *out = run("bench --preset C0 --backend cpu --updates 20 --repeats 3 --warmup 5 "
                    "--fill 200 --envs 8 --act-calls 30 --json",
                    &st);
    CHECK(st == 0, "exit status %d", st);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    CHECK(j != NULL, "not one JSON object: %s", out ? out : "(no output)");
    free(out);
    if (!j)
        return;
    CHECK(!strcmp(str(j, "preset"), "C0"), "preset");
    CHECK(!strcmp(str(j, "backend"), "cpu"), "backend");
    CHECK(json_is_string(json_object_get(j, "device")), "device");
    CHECK(num(j, "updates") == 20 && num(j, "repeats") == 3 && num(j, "warmup") == 5,
          "updates %g repeats %g warmup %g", num(j, "updates"), num(j, "repeats"),
          num(j, "warmup"));
    /* 200 rounded up to whole observe calls of 8 envs */
    CHECK(num(j, "fill") == 200 && num(j, "replay_size") == 200, "fill %g replay_size %g",
          num(j, "fill"), num(j, "replay_size"));
    /* C0: F = 2*64*(4*64 + 64*64 + 64*3) = 581632; (4 + double) F - 2*64*4*64 */
    CHECK(num(j, "gemm_flops_per_update") == 2875392.0, "flops %.0f",
          num(j, "gemm_flops_per_update"));
    const double mn = num(j, "us_per_update_min"), p10 = num(j, "us_per_update_p10"),
                 med = num(j, "us_per_update_median"), p90 = num(j, "us_per_update_p90"),
                 mx = num(j, "us_per_update_max");
    CHECK(mn > 0 && mn <= p10 && p10 <= med && med <= p90 && p90 <= mx && isfinite(mx),
          "percentiles %g %g %g %g %g", mn, p10, med, p90, mx);
    CHECK(json_array_size(json_object_get(j, "us_per_update_runs")) == 3, "runs");
    const double ups = num(j, "updates_per_second");
    CHECK(fabs(ups * med - 1e6) < 1e-3 * 1e6, "updates/s %g vs median %g", ups, med);
    CHECK(fabs(num(j, "samples_per_second") - 64 * ups) <= 1e-6 * 64 * ups, "samples/s");
    CHECK(fabs(num(j, "tflops") - 2875392.0 * ups / 1e12) <= 1e-6 * num(j, "tflops"), "tflops");
    CHECK(num(j, "act_us_1") > 0 && num(j, "act_us_64") > 0 && num(j, "observe_per_second") > 0,
          "act %g %g observe %g", num(j, "act_us_1"), num(j, "act_us_64"),
          num(j, "observe_per_second"));
    CHECK(isfinite(num(j, "loss_last")), "loss %g", num(j, "loss_last"));
    CHECK(json_is_null(json_object_get(j, "peak_fraction")), "no peak given");
    CHECK(json_is_null(json_object_get(j, "plan")), "the CPU backend has no plan");
    CHECK(!strcmp(str(j, "cuda_device_max_connections"), "32"), "cuda_device_max_connections");
    CHECK(!strcmp(str(j, "timing"), "host clock around train(N) + one blocking read"), "timing");
    json_decref(j);
}

static void test_errors(void) {
    static const char *bad[] = {
        "bench",                              /* no preset */
        "bench --preset C9",                  /* unknown preset */
        "bench --preset C0 --config x.json",  /* both */
        "bench --preset C0 --updates 0",      /* out of range */
        "bench --preset C0 --repeats x",      /* not a number */
        "bench --preset C0 --peak-tflops -1", /* not positive */
        "bench --preset C0 --run-seconds 0",  /* not positive */
        "bench --preset C0 --set nokey",      /* no '=' */
        "bench --preset C0 --frobnicate",     /* unknown option */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st;
        free(run(bad[i], &st));
        CHECK(st == 2, "`%s` exited %d, expected 2", bad[i], st);
    }
    int st;
    free(run("bench --preset C0 --fill 10 --envs 1 --updates 5 --repeats 1", &st));
    CHECK(st == 2, "a fill smaller than the batch exited %d, expected 2", st);
    free(run("bench --preset C0 --set batch_size=0 --updates 5", &st));
    CHECK(st == 5, "a config the library rejects exited %d, expected 5", st);
}

/* Every file in PRESETS_DIR is a preset of fhd-host (embedded at build time) with the same
 * JSON, and fhd-host has no other: --list has one line per file. */
static void test_presets(const char *dir) {
    int st;
    char *list = run("bench --list", &st);
    CHECK(st == 0 && list, "bench --list exited %d", st);
    size_t lines = 0;
    for (const char *c = list ? list : ""; *c; c++)
        lines += *c == '\n';
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    size_t files = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        files++;
        char name[256], args[512], path[4096], head[300];
        snprintf(name, sizeof name, "%.*s", (int)(n - 5), e->d_name);
        snprintf(head, sizeof head, "\n%s ", name); /* a line that begins with the name */
        char *l2 = NULL;
        if (list && asprintf(&l2, "\n%s", list) < 0)
            l2 = NULL;
        CHECK(l2 && strstr(l2, head), "--list lacks %s", name);
        free(l2);
        snprintf(args, sizeof args, "bench --preset '%s' --print-config", name);
        char *out = run(args, &st);
        json_t *a = out ? json_loads(out, 0, NULL) : NULL;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_t *b = json_load_file(path, 0, NULL);
        CHECK(st == 0 && a && b && json_equal(a, b), "preset %s differs from %s", name, path);
        json_decref(a);
        json_decref(b);
        free(out);
    }
    if (d)
        closedir(d);
    /* the five of docs/design.md section 6 at least */
    CHECK(files >= 5 && lines == files, "%zu preset files, %zu lines in --list", files, lines);
    free(list);
}

/* --config FILE (what bench/shapes.py runs): a config with branches of different sizes and
 * no dueling head runs, and the JSON carries the file's config and its FLOPs. */
static void test_config_file(const char *tmpdir) {
    char path[4096], args[4400];
    snprintf(path, sizeof path, "%s/test_bench_config.json", tmpdir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    fputs("{\"obs_dim\": 5, \"actions\": [3, 7], \"hidden\": [16], \"dueling\": false, "
          "\"double_dqn\": false, \"batch_size\": 8, \"replay_capacity\": 256}\n",
          f);
    fclose(f);
    snprintf(args, sizeof args,
             "bench --config '%s' --backend cpu --updates 5 --repeats 2 --warmup 2 --fill 64 "
             "--envs 8 --act-calls 5 --json",
             path);
    int st;
    char *out = run(args, &st);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    CHECK(st == 0 && j, "bench --config exited %d: %s", st, out ? out : "(no output)");
    free(out);
    if (!j)
        return;
    json_t *acts = json_object_get(json_object_get(j, "config"), "actions");
    CHECK(!strcmp(str(j, "preset"), path) && json_array_size(acts) == 2 &&
              json_integer_value(json_array_get(acts, 1)) == 7,
          "preset %s, config actions", str(j, "preset"));
    /* F = 2*8*(5*16 + 16*10) = 3840; (4 + 0) F - 2*8*5*16 = 14080 */
    CHECK(num(j, "gemm_flops_per_update") == 14080.0, "flops %.0f",
          num(j, "gemm_flops_per_update"));
    CHECK(num(j, "updates") == 5 && num(j, "fill") == 64 && isfinite(num(j, "loss_last")),
          "updates %g fill %g loss %g", num(j, "updates"), num(j, "fill"), num(j, "loss_last"));
    json_decref(j);
    remove(path);
}

/* `fhd-host bench --config` on `text` (written to TMPDIR/name.json) on the CPU: the parsed
 * JSON, NULL (and a failed check) when it did not run. */
static json_t *bench_file(const char *tmpdir, const char *name, const char *text) {
    char path[4096], args[4400];
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return NULL;
    fputs(text, f);
    fclose(f);
    snprintf(args, sizeof args,
             "bench --config '%s' --backend cpu --updates 3 --repeats 1 --warmup 1 --fill 64 "
             "--envs 8 --act-calls 3 --json",
             path);
    int st;
    char *out = run(args, &st);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    CHECK(st == 0 && j, "bench --config %s exited %d: %s", name, st, out ? out : "(no output)");
    free(out);
    remove(path);
    return j;
}

/* Pixel configs: uint8 images through the *_u8 observe and act fields, a conv list with
 * padding and torso "nature" (the host's expansion is checked against the learner's tensors,
 * a mismatch is exit 1); the FLOPs count every conv as its im2col GEMM. */
static void test_config_pixels(const char *tmpdir) {
    /* conv0 2x9x11 -> 3x5x6 (k3 s2 p1): 2*30*3*18 = 3240; conv1 -> 4x4x5 (k2 s1): 2*20*4*12 =
     * 1920; linear 80 -> 8: 1280; head 8 -> 4: 64; per image 6504, B 4: F = 26016;
     * (4 + 1) F - 4 * 3240 = 117120 */
    json_t *j = bench_file(tmpdir, "test_bench_pixels",
                           "{\"obs_shape\": [2, 9, 11], \"obs_dtype\": \"uint8\", \"conv\": "
                           "[{\"out\": 3, \"kernel\": 3, \"stride\": 2, \"padding\": 1}, "
                           "{\"out\": 4, \"kernel\": 2, \"stride\": 1}], \"hidden\": [8], "
                           "\"actions\": [3], \"dueling\": true, \"double_dqn\": true, "
                           "\"batch_size\": 4, \"replay_capacity\": 256}\n");
    if (j) {
        CHECK(num(j, "gemm_flops_per_update") == 117120.0, "conv flops %.0f",
              num(j, "gemm_flops_per_update"));
        CHECK(num(j, "updates") == 3 && isfinite(num(j, "loss_last")) && num(j, "act_us_64") > 0,
              "conv run: updates %g loss %g", num(j, "updates"), num(j, "loss_last"));
    }
    json_decref(j);
    /* nature on 1x36x36: 32x8x8 (2*64*32*64 = 262144), 64x3x3 (2*9*64*512 = 589824), 64x1x1
     * (2*64*576 = 73728); 64 -> 512: 65536; 512 -> 7: 7168; per image 998400, B 2: F =
     * 1996800; 5 F - 2 * 262144 = 9459712 */
    j = bench_file(tmpdir, "test_bench_nature",
                   "{\"obs_shape\": [1, 36, 36], \"obs_dtype\": \"uint8\", \"torso\": \"nature\", "
                   "\"actions\": [6], \"dueling\": true, \"double_dqn\": true, \"batch_size\": 2, "
                   "\"replay_capacity\": 256}\n");
    if (j)
        CHECK(num(j, "gemm_flops_per_update") == 9459712.0, "nature flops %.0f",
              num(j, "gemm_flops_per_update"));
    json_decref(j);
}

/* --print-plan on the CPU backend: it creates the learner, says the backend has no plan and
 * exits 0; with --json the object carries "plan": null. */
static void test_print_plan(void) {
    int st;
    char *out = run("bench --preset C0 --backend cpu --print-plan", &st);
    CHECK(st == 0 && out && strstr(out, "the cpu backend") && strstr(out, "has no plan"),
          "--print-plan exited %d: %s", st, out ? out : "(no output)");
    free(out);
    out = run("bench --preset C0 --backend cpu --print-plan --json", &st);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    CHECK(st == 0 && j && !strcmp(str(j, "backend"), "cpu") &&
              json_is_null(json_object_get(j, "plan")),
          "--print-plan --json exited %d: %s", st, out ? out : "(no output)");
    json_decref(j);
    free(out);
    out = run("bench --preset C0 --backend cpu --set batch_size=0 --print-plan", &st);
    CHECK(st == 5, "--print-plan of a rejected config exited %d, expected 5", st);
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: test_bench FHD_HOST PRESETS_DIR [TMPDIR]\n");
        return 2;
    }
    host = argv[1];
    test_presets(argv[2]);
    test_errors();
    test_print_plan();
    test_config_file(argc > 3 ? argv[3] : ".");
    test_config_pixels(argc > 3 ? argv[3] : ".");
    test_c0_run();
    return fhd_test_finish();
}
