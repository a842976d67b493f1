/* test_bf16.c - matmul_precision "bf16" on the CPU backend (white-box through the core objects;
 * docs/design.md section 4, "GEMM precision"; tests/parity/torch_bf16.py checks the update's
 * numbers against PyTorch):
 *   - common/bf16.h's rounding: chosen cases (ties to even, NaN, infinity, overflow,
 *     subnormals) and 2^20 random floats against a double-precision nearest-even oracle;
 *   - the learner: deterministic, close to but not equal to the fp32 learner, master weights
 *     and gradients fp32 (not bf16 values), act after tensor_write using the written weights
 *     (the rounded copy is refreshed), a checkpoint resumed in bf16 continuing bit for bit;
 *   - the backend choice: "auto" keeps bf16 on the CPU (where TF32 becomes fp32); "cuda" takes
 *     bf16 with a conv torso (no refusal at $.matmul_precision) and "auto" runs it in bf16.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "fhd_test.h"
#include "learner.h"

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The bf16 value nearest to finite x, ties to the even mantissa, from the distances in double
 * (exact for floats) to its two bf16 neighbours: an oracle independent of the bit trick. lo is
 * x cut toward zero, the neighbour away from zero lies one bf16 ulp further (2^(e - 134) for
 * the biased exponent e, 2^-133 among subnormals; its bits lo + 0x10000 carry into the
 * exponent, up to infinity past the largest bf16). */
static float oracle(float x) {
    const uint32_t lo_bits = bits(x) & 0xffff0000u;
    const float lo = from_bits(lo_bits);
    if (lo == x)
        return x;
    const int e = (int)((lo_bits >> 23) & 0xffu);
    const double ulp = ldexp(1.0, (e ? e : 1) - 134);
    const double d = fabs((double)x) - fabs((double)lo); /* in (0, ulp) */
    const int up = d > ulp / 2 || (d == ulp / 2 && ((lo_bits >> 16) & 1u));
    return up ? from_bits(lo_bits + 0x10000u) : lo;
}

static void test_rounding(void) {
    static const struct {
        uint32_t in, out;
    } cases[] = {
        {0x3f800000u, 0x3f800000u}, /* 1 */
        {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: a tie, to the even 1 */
        {0x3f818000u, 0x3f820000u}, /* 1 + 3 2^-8: a tie, to the even 1 + 2^-6 */
        {0x3f808001u, 0x3f810000u}, /* just above the tie */
        {0xbf808001u, 0xbf810000u}, /* negative */
        {0x7f7fffffu, 0x7f800000u}, /* FLT_MAX overflows to infinity */
        {0x7f7f7fffu, 0x7f7f0000u}, /* below the last boundary: the largest bf16 */
        {0x7f800000u, 0x7f800000u}, /* infinity */
        {0xff800000u, 0xff800000u},
        {0x00000001u, 0x00000000u}, /* the smallest subnormal rounds to 0 */
        {0x00008000u, 0x00000000u}, /* a subnormal tie, to the even 0 */
        {0x00018000u, 0x00020000u}, /* a subnormal tie, to the even 2 */
        {0x80000000u, 0x80000000u}, /* -0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float got = fhd__bf16_round(from_bits(cases[i].in));
        CHECK(bits(got) == cases[i].out, "round(%08x) = %08x, expected %08x", (unsigned)cases[i].in,
              (unsigned)bits(got), (unsigned)cases[i].out);
    }
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const float got = fhd__bf16_round(from_bits(nans[i]));
        CHECK(got != got, "round(NaN %08x) is a NaN (%08x)", (unsigned)nans[i],
              (unsigned)bits(got));
    }
    uint64_t s = 12345, bad = 0, n = 0;
    for (int i = 0; i < (1 << 20); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float x = from_bits((uint32_t)(s >> 32));
        if (x != x)
            continue;
        n++;
        const float want = oracle(x), got = fhd__bf16_round(x);
        if (bits(got) != bits(want) && bad++ < 5)
            printf("  round(%08x) = %08x, oracle %08x\n", (unsigned)bits(x), (unsigned)bits(got),
                   (unsigned)bits(want));
        if (fhd__bf16_float(fhd__bf16_bits(x)) != got)
            bad++;
    }
    CHECK(bad == 0, "%llu of %llu random floats round otherwise than nearest-even",
          (unsigned long long)bad, (unsigned long long)n);
}

/* ---- the learner ------------------------------------------------------------------------- */

#define MLP                                                                                        \
    "\"obs_dim\": 10, \"actions\": [4, 3], \"hidden\": [48, 32], \"dueling\": true, "              \
    "\"double_dqn\": true, \"spectral_norm\": \"last\", \"replay\": \"prioritized\", "             \
    "\"batch_size\": 32, \"replay_capacity\": 256, \"learning_starts\": 0, "                       \
    "\"lr\": 0.003, \"seed\": 5, \"target_update_interval\": 4, \"num_envs\": 4"

static fhd_learner *make(const char *precision, const char *backend) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{" MLP ", \"backend\": \"%s\", \"matmul_precision\": \"%s\"}",
             backend, precision);
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    if (fhd__learner_init(cfg, strlen(cfg), &L, &err) != FHD_OK) {
        printf("FAIL init %s: %s: %s\n", cfg, err.path, err.message);
        exit(1);
    }
    return L;
}

/* 80 steps of 4 envs of the same transitions into each learner. */
static void feed(fhd_learner **Ls, int n) {
    const uint32_t E = 4, S = 10;
    float obs[4 * 10], next[4 * 10], rew[4];
    int32_t act[4 * 2];
    uint8_t term[4] = {0}, trunc[4] = {0};
    uint32_t s = 7;
    for (int t = 0; t < 80; t++) {
        for (uint32_t i = 0; i < E * S; i++) {
            s = s * 1664525u + 1013904223u;
            obs[i] = (float)((int)(s >> 8) % 2001 - 1000) / 500.0f;
            next[i] = 0.8f * obs[i] + 0.1f;
        }
        for (uint32_t e = 0; e < E; e++) {
            s = s * 1664525u + 1013904223u;
            rew[e] = (float)((s >> 8) % 100) / 50.0f - 1.0f;
            act[2 * e] = (int32_t)((s >> 4) % 4);
            act[2 * e + 1] = (int32_t)((s >> 12) % 3);
            term[e] = (s >> 20) % 17 == 0;
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        tr.obs = obs;
        tr.actions = act;
        tr.rewards = rew;
        tr.next_obs = next;
        tr.terminated = term;
        tr.truncated = trunc;
        for (int l = 0; l < n; l++)
            if (fhd__learner_observe(Ls[l], &tr) != FHD_OK) {
                printf("FAIL observe: %s\n", Ls[l]->err);
                exit(1);
            }
    }
}

static float *read_all(fhd_learner *L, int kind, uint64_t n) {
    float *p = (float *)malloc(sizeof(float) * n);
    if (L->ops->read(L->be, kind, 0, n, p) != FHD_OK) {
        printf("FAIL read: %s\n", L->ops->error(L->be));
        exit(1);
    }
    return p;
}

static double relerr(const float *a, const float *b, uint64_t n) {
    double num = 0, den = 0;
    for (uint64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

/* Entries of x (n) that are not bf16 values. */
static uint64_t not_bf16(const float *x, uint64_t n) {
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; i++)
        c += (bits(x[i]) & 0xffffu) != 0;
    return c;
}

static void q_values(fhd_learner *L, const float *obs, uint32_t n, float *q) {
    int32_t a[64 * 2];
    fhd_act_args args = FHD_ACT_ARGS_INIT;
    args.num_obs = n;
    args.obs = obs;
    args.actions = a;
    args.q_values = q;
    if (fhd__learner_act(L, &args) != FHD_OK) {
        printf("FAIL act: %s\n", L->err);
        exit(1);
    }
}

static void test_learner(void) {
    fhd_learner *A = make("bf16", "cpu"), *B = make("bf16", "cpu"), *F = make("fp32", "cpu");
    fhd_learner *all[3] = {A, B, F};
    feed(all, 3);
    const uint64_t P = A->lo.num_params;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    CHECK(fhd__learner_train(A, 1, &st) == FHD_OK && fhd__learner_train(B, 1, &st) == FHD_OK &&
              fhd__learner_train(F, 1, &st) == FHD_OK,
          "one update each");
    float *ga = read_all(A, FHD_STATE_GRAD, P), *gf = read_all(F, FHD_STATE_GRAD, P);
    const double e1 = relerr(ga, gf, P);
    CHECK(e1 > 1e-5 && e1 < 5e-2,
          "update 1: the bf16 gradient differs from the fp32 one by %.2e "
          "(rounding, not another computation)",
          e1);
    CHECK(not_bf16(ga, P) > P / 2, "gradients are fp32 sums (%llu of %llu not bf16 values)",
          (unsigned long long)not_bf16(ga, P), (unsigned long long)P);
    CHECK(fhd__learner_train(A, 29, &st) == FHD_OK && fhd__learner_train(B, 29, &st) == FHD_OK,
          "29 more updates");
    float *pa = read_all(A, FHD_STATE_PARAMS, 2 * P), *pb = read_all(B, FHD_STATE_PARAMS, 2 * P);
    CHECK(memcmp(pa, pb, sizeof(float) * 2 * P) == 0, "two bf16 learners: the same bits");
    CHECK(not_bf16(pa, P) > P / 2, "the master weights are fp32 (%llu of %llu not bf16 values)",
          (unsigned long long)not_bf16(pa, P), (unsigned long long)P);

    /* act reads the weights written last: write F's weights into A, then compare Q values with
     * F's (fp32: close) and with A's before the write (stale rounding: far) */
    float obs[16 * 10], qa0[16 * 7], qa[16 * 7], qf[16 * 7];
    for (int i = 0; i < 16 * 10; i++)
        obs[i] = (float)((i * 37) % 23 - 11) / 7.0f;
    q_values(A, obs, 16, qa0);
    float *pf = read_all(F, FHD_STATE_PARAMS, 2 * P);
    float *sf = A->lo.sn_size ? read_all(F, FHD_STATE_SN, 2 * A->lo.sn_size) : NULL;
    CHECK(A->ops->write(A->be, FHD_STATE_PARAMS, 0, 2 * P, pf) == FHD_OK &&
              (!sf || A->ops->write(A->be, FHD_STATE_SN, 0, 2 * A->lo.sn_size, sf) == FHD_OK),
          "the fp32 learner's weights written into the bf16 one");
    q_values(A, obs, 16, qa);
    q_values(F, obs, 16, qf);
    const double eq = relerr(qa, qf, 16 * 7), e0 = relerr(qa0, qf, 16 * 7);
    CHECK(eq > 0 && eq < 2e-2 && e0 > 10 * eq,
          "act after the write: Q values %.2e from the fp32 learner's (before it %.2e)", eq, e0);

    /* a checkpoint of a bf16 learner resumes bit for bit */
    char path[] = "/tmp/fhd_test_bf16_XXXXXX";
    const int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    fhd_learner *C = make("bf16", "cpu");
    CHECK(fd >= 0 && fhd__checkpoint_save(B, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK &&
              fhd__checkpoint_load(C, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK,
          "checkpoint saved and loaded (%s)", C->err);
    CHECK(fhd__learner_train(B, 10, &st) == FHD_OK && fhd__learner_train(C, 10, &st) == FHD_OK,
          "10 updates each after the checkpoint");
    float *p1 = read_all(B, FHD_STATE_PARAMS, 2 * P), *p2 = read_all(C, FHD_STATE_PARAMS, 2 * P);
    CHECK(memcmp(p1, p2, sizeof(float) * 2 * P) == 0, "the resumed learner: the same bits");
    unlink(path);
    free(ga);
    free(gf);
    free(pa);
    free(pb);
    free(pf);
    free(sf);
    free(p1);
    free(p2);
    fhd__learner_destroy(A);
    fhd__learner_destroy(B);
    fhd__learner_destroy(C);
    fhd__learner_destroy(F);
}

static void test_backends(void) {
    /* "auto": on a machine without the CUDA backend bf16 runs on the CPU, TF32 becomes fp32 */
    fhd_learner *A = make("bf16", "auto"), *T = make("tf32", "auto");
    if (strcmp(A->ops->name, "cpu") == 0) {
        CHECK(A->cfg.matmul_precision == FHD_PREC_BF16 && A->be &&
                  A->cfg.backend == FHD_BACKEND_AUTO,
              "auto on the cpu keeps bf16");
        CHECK(T->cfg.matmul_precision == FHD_PREC_FP32, "auto on the cpu turns tf32 into fp32");
    } else {
        printf("  (the cuda backend is available: auto ran on %s)\n", A->ops->name);
    }
    fhd__learner_destroy(A);
    fhd__learner_destroy(T);
    const char *conv = "{\"obs_shape\": [2, 8, 8], \"conv\": [{\"out\": 4, \"kernel\": 3, "
                       "\"stride\": 1}], \"hidden\": [16], \"actions\": [3], \"backend\": \"%s\", "
                       "\"matmul_precision\": \"bf16\"}";
    char cfg[512];
    snprintf(cfg, sizeof cfg, conv, "cuda");
    fhd_learner *L = NULL;
    fhd_error err = FHD_ERROR_INIT;
    const int32_t rc = fhd__learner_init(cfg, strlen(cfg), &L, &err);
    CHECK(rc == FHD_OK || strcmp(err.path, "$.matmul_precision") != 0,
          "cuda takes bf16 with a conv torso (not refused at $.matmul_precision; here: %s%s%s)",
          rc == FHD_OK ? "created" : err.path, rc == FHD_OK ? "" : ": ",
          rc == FHD_OK ? "" : err.message);
    fhd__learner_destroy(L);
    L = NULL;
    snprintf(cfg, sizeof cfg, conv, "auto");
    CHECK(fhd__learner_init(cfg, strlen(cfg), &L, &err) == FHD_OK && L &&
              L->cfg.matmul_precision == FHD_PREC_BF16 &&
              strstr(L->fallback_reason, "matmul_precision") == NULL,
          "auto runs bf16 with a conv torso in bf16 (on %s; %s)", L ? L->ops->name : "-",
          L ? L->fallback_reason : err.message);
    fhd__learner_destroy(L);
}

int main(void) {
    test_rounding();
    test_learner();
    test_backends();
    return fhd_test_finish();
}
