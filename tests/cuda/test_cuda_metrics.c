/* test_cuda_metrics.c - what the CUDA backend adds to the metrics: the executed update rate
 * against a wall-clock measurement, the plan and the autotune's record, and the autotune cache
 * (a miss, then a hit with the same plan, then a damaged line ignored and reported).
 *
 * The rate check is tolerant (a factor of 1.15 either way; the H200 gave 1.002): it tells the
 * device's rate of completed updates from the host's enqueue rate, which runs ahead (1.36x on
 * this loop, where the launch queue fills; 10x and more where train(n) returns early).
 */
#include "metrics_json_test.h"

#include <jansson.h>
#include <unistd.h>

#define CFG                                                                                        \
    "{\"backend\": \"cuda\", \"obs_dim\": 37, \"hidden\": [384, 192], \"actions\": [7], "          \
    "\"dueling\": true, \"double_dqn\": true, \"batch_size\": 512, \"replay_capacity\": 65536, "   \
    "\"replay\": \"prioritized\", \"learning_starts\": 0, \"seed\": 5, \"num_envs\": 16"

static fhd_learner *make(const char *extra) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg, CFG "%s}", extra);
    fhd_learner *L = ct_create_cuda(cfg);
    static const uint32_t K[1] = {7};
    ct_feed(&L, 1, 16, 37, 1, K, 64, 11); /* 1024 transitions */
    return L;
}

/* The GEMM choices of a plan as one string (site and configuration of each). */
static char *picks(json_t *m) {
    json_t *g = json_object_get(json_object_get(m, "plan"), "gemms");
    json_t *keep = json_array();
    for (size_t i = 0; i < json_array_size(g); i++) {
        json_t *e = json_array_get(g, i), *k = json_object();
        static const char *const f[] = {"site",        "algo",         "tile",    "stages",
                                        "splitk",      "reduction",    "swizzle", "custom",
                                        "inner_shape", "cluster_shape"};
        for (size_t j = 0; j < sizeof f / sizeof f[0]; j++)
            if (json_object_get(e, f[j]))
                json_object_set(k, f[j], json_object_get(e, f[j]));
        json_array_append_new(keep, k);
    }
    char *s = json_dumps(keep, JSON_COMPACT);
    json_decref(keep);
    return s;
}

static const char *cache_of(json_t *m) {
    const char *c = json_string_value(json_object_get(json_object_get(m, "autotune"), "cache"));
    return c ? c : "(none)";
}

static void test_rate(void) {
    fhd_learner *L = make(", \"autotune\": \"off\"");
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    ct_check(fhd__learner_train(L, 20, &st) == FHD_OK, "warm-up train: %s", L->err);
    ct_check(L->ops->finish(L->be) == FHD_OK, "finish");
    json_t *m0 = ct_metrics(L);
    const double before = json_number_value(json_object_get(m0, "updates_per_second"));
    json_decref(m0);
    /* 2000 updates, queued far faster than they run; the wall clock waits for the last */
    const uint32_t calls = 40, per = 50;
    const double t0 = ct_now();
    for (uint32_t k = 0; k < calls; k++)
        ct_check(fhd__learner_train(L, per, &st) == FHD_OK, "train: %s", L->err);
    const double t_enqueued = ct_now();
    ct_check(L->ops->finish(L->be) == FHD_OK, "finish");
    const double wall = ct_now() - t0;
    json_t *m = ct_metrics(L);
    const double rate = json_number_value(json_object_get(m, "updates_per_second"));
    const double wall_rate = calls * per / wall, enqueue_rate = calls * per / (t_enqueued - t0);
    printf("updates/s: metrics %.0f (before the timed run %.0f), wall clock %.0f, enqueue %.0f\n",
           rate, before, wall_rate, enqueue_rate);
    /* the metric sums every completed timed call (the warm-up's 20 updates too): it is the
     * executed rate, whatever the host's rate of enqueuing */
    ct_check(rate > wall_rate / 1.15 && rate < wall_rate * 1.15,
             "updates_per_second %.0f within 1.15x of the wall-clock rate %.0f", rate, wall_rate);
    ct_check(before > 0, "the warm-up's rate is reported once it completed (%.0f)", before);
    json_t *plan = json_object_get(m, "plan");
    ct_check(json_is_object(plan), "metrics hold the plan (an object)");
    json_t *gemms = json_object_get(plan, "gemms");
    ct_check(json_array_size(gemms) >= 6, "the plan lists the update's GEMMs (%zu)",
             json_array_size(gemms));
    int rule = 1;
    for (size_t i = 0; i < json_array_size(gemms); i++) {
        const char *pk = json_string_value(json_object_get(json_array_get(gemms, i), "pick"));
        rule = rule && (!pk || strcmp(pk, "rule") == 0);
    }
    ct_check(rule, "autotune off: every GEMM by the rule");
    ct_check(strcmp(json_string_value(json_object_get(json_object_get(m, "autotune"), "mode")),
                    "off") == 0,
             "autotune mode off reported");
    json_decref(m);
    fhd__learner_destroy(L);
}

static void test_cache(void) {
    char dir[] = "/tmp/fhd-tune-XXXXXX";
    ct_check(mkdtemp(dir) != NULL, "mkdtemp");
    char extra[256], file[300];
    snprintf(extra, sizeof extra, ", \"autotune\": \"fast\", \"autotune_cache\": \"%s/c\"", dir);
    snprintf(file, sizeof file, "%s/c/autotune-v2.txt", dir);

    fhd_learner *A = make(extra);
    json_t *ma = ct_metrics(A);
    printf("A: cache %s, %.1f ms\n", cache_of(ma),
           json_number_value(json_object_get(json_object_get(ma, "autotune"), "ms")));
    ct_check(strncmp(cache_of(ma), "miss", 4) == 0 || strncmp(cache_of(ma), "hit", 3) == 0,
             "first learner: the cache misses (or this process tuned the shape already): %s",
             cache_of(ma));
    ct_check(access(file, R_OK) == 0, "the cache file is written (%s)", file);
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    ct_check(fhd__learner_train(A, 10, &st) == FHD_OK, "tuned plan trains: %s", A->err);
    ct_check(A->ops->finish(A->be) == FHD_OK, "finish");

    fhd_learner *B = make(extra);
    json_t *mb = ct_metrics(B);
    char *pa = picks(ma), *pb = picks(mb);
    ct_check(strcmp(cache_of(mb), "hit") == 0, "second learner: cache hit (%s)", cache_of(mb));
    ct_check(strcmp(pa, pb) == 0, "a cache hit gives the same plan");
    fhd__learner_destroy(B);
    json_decref(mb);
    free(pb);

    /* damage the first entry's configuration: its checksum no longer matches */
    FILE *f = fopen(file, "r+");
    char line[2048];
    long off = 0;
    while (f && fgets(line, sizeof line, f) && line[0] == '#')
        off = ftell(f);
    char *tab = strchr(line, '\t');
    ct_check(f && tab, "a cache line to damage");
    if (f && tab) {
        fseek(f, off + (tab - line) + 1, SEEK_SET);
        fputc(tab[1] == '9' ? '8' : '9', f);
    }
    if (f)
        fclose(f);
    fhd_learner *C = make(extra);
    json_t *mc = ct_metrics(C);
    char *pc = picks(mc);
    printf("C: cache %s\n", cache_of(mc));
    ct_check(strncmp(cache_of(mc), "ignored: ", 9) == 0 && strstr(cache_of(mc), "checksum"),
             "a damaged entry is ignored and reported (%s)", cache_of(mc));
    ct_check(strcmp(pa, pc) == 0, "the damaged site takes this process's pick: the same plan");
    fhd__learner_destroy(C);
    json_decref(mc);
    free(pc);

    /* a file that is not a cache at all */
    f = fopen(file, "w");
    if (f) {
        fputs("not a cache\n", f);
        fclose(f);
    }
    fhd_learner *D = make(extra);
    json_t *md = ct_metrics(D);
    printf("D: cache %s\n", cache_of(md));
    ct_check(strstr(cache_of(md), "unreadable") != NULL, "unreadable lines reported (%s)",
             cache_of(md));
    fhd__learner_destroy(D);
    json_decref(md);

    fhd__learner_destroy(A);
    json_decref(ma);
    free(pa);
    unlink(file);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/c", dir);
    rmdir(sub);
    rmdir(dir);
}

int main(void) {
    ct_require_gpu();
    test_rate();
    test_cache();
    return ct_finish();
}
