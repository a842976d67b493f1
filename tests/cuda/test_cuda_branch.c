/* test_cuda_branch.c - the measured choice of the head's dW branch (cuda_plan.h, hdw_measure;
 * cuda_branch.cpp). A plan with no rule for the branch times both forms on the learner's first
 * updates and keeps one: without a synchronisation, and with the same parameters, bit for bit,
 * as a learner that ran the kept form from its first update (the trial's chunks alternate the
 * two forms, so any difference between them would show). The choice is cached: a second
 * learner takes it from the file; a damaged line is ignored and reported (this process's own
 * choice stands in for it, as for a GEMM pick). On a
 * plain config and on one with spectral norm, where the own branch also samples each batch
 * ahead. With autotune "off" nothing is measured.
 */
#include "metrics_json_test.h"

#include <jansson.h>
#include <unistd.h>

/* fp32, no split GEMM (B % 16 != 0, hidden widths below 128) nor fused dW_0 (obs > 64) */
static const char *const CFGS[2] = {
    "{\"backend\": \"cuda\", \"obs_dim\": 80, \"hidden\": [256], \"actions\": [6], "
    "\"dueling\": true, \"double_dqn\": true, \"batch_size\": 100, \"replay_capacity\": 8192, "
    "\"replay\": \"prioritized\", \"learning_starts\": 0, \"seed\": 9, \"num_envs\": 8",
    "{\"backend\": \"cuda\", \"obs_dim\": 96, \"hidden\": [128, 96], \"actions\": [5, 3], "
    "\"spectral_norm\": \"all\", \"batch_size\": 100, \"replay_capacity\": 8192, "
    "\"replay\": \"prioritized\", \"learning_starts\": 0, \"seed\": 4, \"num_envs\": 8"};
static const char *const NAMES[2] = {"plain", "spectral norm"};

static fhd_learner *make(int c, const char *extra) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s%s}", CFGS[c], extra);
    fhd_learner *L = ct_create_cuda(cfg);
    const uint32_t K[2][2] = {{6, 0}, {5, 3}};
    ct_feed(&L, 1, 8, L->lo.S, L->lo.D, K[c], 64, 21); /* 512 transitions */
    return L;
}

/* the plan's head_dw_choice.by ("rule", "measuring", "measured", "cache"), its form, and the
 * autotune's cache report; copies into the caller's buffers */
static void choice(fhd_learner *L, char *by, char *form, double *us, char *cache, size_t cap) {
    json_t *m = ct_metrics(L);
    json_t *plan = json_object_get(m, "plan");
    json_t *ch = json_object_get(plan, "head_dw_choice");
    const char *b = json_string_value(json_object_get(ch, "by"));
    const char *f = json_string_value(json_object_get(plan, "head_dw_branch"));
    const char *c = json_string_value(json_object_get(json_object_get(m, "autotune"), "cache"));
    snprintf(by, cap, "%s", b ? b : "(none)");
    snprintf(form, cap, "%s", f ? f : "(none)");
    snprintf(cache, cap, "%s", c ? c : "(none)");
    us[0] = json_number_value(json_object_get(ch, "us_after"));
    us[1] = json_number_value(json_object_get(ch, "us_own"));
    json_decref(m);
}

/* 50 calls of 8 updates (the trial needs 18 chunks of 8), a drain, and one more call, in which
 * the completed chunks are read */
static void run(fhd_learner *L, const char *what) {
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    int ok = 1;
    for (int k = 0; k < 50 && ok; k++)
        ok = fhd__learner_train(L, 8, &st) == FHD_OK;
    ct_check(ok, "%s: 50 train calls of 8 updates (%s)", what, ok ? "ok" : L->err);
    ct_check(L->ops->finish(L->be) == FHD_OK, "%s: finish", what);
    ct_check(fhd__learner_train(L, 8, &st) == FHD_OK, "%s: train after the drain", what);
    ct_check(L->ops->finish(L->be) == FHD_OK, "%s: finish", what);
}

static void test_config(int c, const char *dir) {
    char extra[300], file[400];
    snprintf(extra, sizeof extra, ", \"autotune\": \"fast\", \"autotune_cache\": \"%s/c%d\"", dir,
             c);
    snprintf(file, sizeof file, "%s/c%d/autotune-v2.txt", dir, c);
    char by[200], form[200], cache[200], name[64];
    double us[2];

    /* A: the trial */
    fhd_learner *A = make(c, extra);
    choice(A, by, form, us, cache, sizeof by);
    printf("%s A at create: by %s, form %s, cache %s\n", NAMES[c], by, form, cache);
    ct_check(strcmp(by, "measuring") == 0, "%s: no rule decides the branch: measured (%s)",
             NAMES[c], by);
    const uint64_t sync0 = ct_sync_count(A);
    snprintf(name, sizeof name, "%s A", NAMES[c]);
    run(A, name);
    ct_check(ct_sync_count(A) == sync0 + 2, "%s: the trial synchronises nothing (%llu: only the "
             "two finish calls)", NAMES[c], (unsigned long long)(ct_sync_count(A) - sync0));
    char form_a[200];
    choice(A, by, form_a, us, cache, sizeof by);
    printf("%s A after 408 updates: by %s, form %s, us after %.2f own %.2f\n", NAMES[c], by,
           form_a, us[0], us[1]);
    ct_check(strcmp(by, "measured") == 0, "%s: decided after the trial (%s)", NAMES[c], by);
    ct_check(us[0] > 0 && us[1] > 0 && us[0] < 1e5 && us[1] < 1e5,
             "%s: both forms timed (%.2f, %.2f us an update)", NAMES[c], us[0], us[1]);
    ct_check(access(file, R_OK) == 0, "%s: the choice is written to the cache", NAMES[c]);

    /* B: the cache's choice from its first update, the same updates */
    fhd_learner *B = make(c, extra);
    choice(B, by, form, us, cache, sizeof by);
    printf("%s B at create: by %s, form %s, cache %s\n", NAMES[c], by, form, cache);
    ct_check(strcmp(by, "cache") == 0 && strcmp(form, form_a) == 0,
             "%s: the second learner takes the cached choice (%s, %s)", NAMES[c], by, form);
    ct_check(strcmp(cache, "hit") == 0, "%s: every GEMM from the cache too (%s)", NAMES[c], cache);
    snprintf(name, sizeof name, "%s B", NAMES[c]);
    run(B, name);
    const uint64_t P = A->lo.num_params;
    double mx = 0;
    const double e = ct_cmp_kind(A, B, FHD_STATE_PARAMS, 0, 2 * P, &mx);
    ct_check(e == 0 && mx == 0, "%s: the trial's alternating forms and the kept form alone give "
             "the same parameters (rel %.3g, max %.3g)", NAMES[c], e, mx);
    const double eq = ct_cmp_kind(A, B, FHD_STATE_ADAM_V, 0, P, &mx);
    ct_check(eq == 0, "%s: and the same Adam moments (rel %.3g)", NAMES[c], eq);
    fhd__learner_destroy(B);

    /* C: the branch line damaged */
    FILE *f = fopen(file, "r");
    char *text = NULL;
    size_t len = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text = (char *)calloc(len + 1, 1);
        len = fread(text, 1, len, f);
        fclose(f);
    }
    char *at = text ? strstr(text, "head-dw-branch") : NULL;
    char *tab = at ? strchr(at, '\t') : NULL;
    ct_check(tab != NULL, "%s: the cache holds the branch line", NAMES[c]);
    if (tab) {
        tab[1] = tab[1] == 'o' ? 'a' : 'o'; /* "own" <-> "aft...": the checksum fails */
        f = fopen(file, "w");
        if (f) {
            fwrite(text, 1, len, f);
            fclose(f);
        }
    }
    free(text);
    fhd_learner *C = make(c, extra);
    choice(C, by, form, us, cache, sizeof by);
    printf("%s C at create: by %s, cache %s\n", NAMES[c], by, cache);
    ct_check(strcmp(by, "cache") == 0,
             "%s: a damaged line: this process's choice is taken instead (%s)", NAMES[c], by);
    ct_check(strstr(cache, "head dW branch") != NULL && strstr(cache, "checksum") != NULL,
             "%s: and the damage is reported (%s)", NAMES[c], cache);
    fhd__learner_destroy(C);
    fhd__learner_destroy(A);
    unlink(file);
    char sub[400];
    snprintf(sub, sizeof sub, "%s/c%d", dir, c);
    rmdir(sub);
}

static void test_off(void) {
    fhd_learner *L = make(0, ", \"autotune\": \"off\"");
    char by[200], form[200], cache[200];
    double us[2];
    choice(L, by, form, us, cache, sizeof by);
    ct_check(strcmp(by, "rule") == 0 && strcmp(form, "after_priority_update") == 0,
             "autotune off: the rule's form, nothing measured (%s, %s)", by, form);
    fhd__learner_destroy(L);
}

int main(void) {
    ct_require_gpu();
    char dir[] = "/tmp/fhd-branch-XXXXXX";
    ct_check(mkdtemp(dir) != NULL, "mkdtemp");
    test_config(0, dir);
    test_config(1, dir);
    test_off();
    rmdir(dir);
    return ct_finish();
}
