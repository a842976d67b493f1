/* 2026-12-02-cpu-update-speed-drv.c - the measurement driver of 2026-12-02-cpu-update-speed.md:
 * CPU updates of several library builds side by side, a parameter dump, and the update's
 * sgemm calls timed alone. Configs: flat MLP learner JSON (obs_dim, actions [K], batch_size;
 * read with a crude key search); data: uniform synthetic transitions, one env.
 *   drv time LIB1 [LIB2 ...] -- CFG1 [CFG2 ...]  20000 transitions, 300 warm-up updates, then
 *        REPS (15) rounds of train(200) per learner, the libraries alternating who goes first;
 *        thread CPU time; median and quartiles of us/update
 *   drv dump LIB CFG OUT   1000 updates, then every state tensor, 500 act calls' Q values and
 *        actions (1 and 64 observations), the last loss and norm, into OUT (cmp two of them)
 *   drv gemm CFG...        each sgemm of one update (the S -> 256 -> 256 -> K MLP) with its
 *        shape and transposes, median of 31 x 50 calls, and their sum: the sgemm floor
 * Build (repository root):
 *   gcc -O2 -std=gnu11 -Iabi $(pkg-config --cflags openblas) \
 *       bench/log/2026-12-02-cpu-update-speed-drv.c -o drv -ldl -lopenblas
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "foxhunt_dqn.h"

static double tcpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static char *slurp(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    fread(s, 1, n, f);
    s[n] = 0;
    fclose(f);
    return s;
}
static const fhd_api_v1 *load(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    fhd_get_api_base_fn e = (fhd_get_api_base_fn)dlsym(h, FHD_ENTRY_SYMBOL);
    return (const fhd_api_v1 *)e()->get_api(1, NULL);
}
static uint64_t rs = 12345;
static uint64_t rnd(void) {
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float unif(void) {
    return (float)((rnd() >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* shape from the config text (obs_dim, actions[0], batch_size): crude parse */
static int jint(const char *s, const char *key) {
    const char *p = strstr(s, key);
    p = strchr(p, ':') + 1;
    while (*p == ' ' || *p == '[')
        p++;
    return atoi(p);
}

static fhd_learner *make(const fhd_api_v1 *api, const char *cfg, uint32_t fill) {
    fhd_learner *L;
    fhd_error err;
    memset(&err, 0, sizeof err);
    err.struct_size = sizeof err;
    int32_t rc = api->init(cfg, strlen(cfg), &L, &err);
    if (rc) {
        fprintf(stderr, "init %d %s\n", rc, err.message);
        exit(1);
    }
    int S = jint(cfg, "\"obs_dim\""), K = jint(cfg, "\"actions\"");
    rs = 777;
    float o[64], no[64], r;
    int32_t a;
    uint8_t term, trunc = 0;
    for (uint32_t i = 0; i < fill; i++) {
        for (int j = 0; j < S; j++) {
            o[j] = unif();
            no[j] = unif();
        }
        r = unif();
        a = (int32_t)(rnd() % K);
        term = rnd() % 100 == 0;
        fhd_transitions t = FHD_TRANSITIONS_INIT;
        t.num_envs = 1;
        t.obs = o;
        t.actions = &a;
        t.rewards = &r;
        t.next_obs = no;
        t.terminated = &term;
        t.truncated = &trunc;
        if ((rc = api->observe(L, &t))) {
            fprintf(stderr, "observe %d\n", rc);
            exit(1);
        }
    }
    return L;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void gemm_floor(const char *cfgp) {
    char *cfg = slurp(cfgp);
    int S = jint(cfg, "\"obs_dim\""), K = jint(cfg, "\"actions\""), B = jint(cfg, "\"batch_size\"");
    int H = 256;
    float *A = malloc(4 * 1024 * 1024), *Bm = malloc(4 * 1024 * 1024), *C = malloc(4 * 1024 * 1024);
    for (int i = 0; i < 1024 * 1024; i++) {
        A[i] = unif();
        Bm[i] = unif();
        C[i] = 0;
    }
    struct {
        const char *n;
        int ta, tb, M, N, Kd, cnt;
    } g[] = {
        {"fwd0 NT", 0, 1, B, H, S, 2}, {"fwd1 NT", 0, 1, B, H, H, 2}, {"fwd2 NT", 0, 1, B, K, H, 2},
        {"dW2 TN", 1, 0, K, H, B, 1},  {"dx2 NN", 0, 0, B, H, K, 1},  {"dW1 TN", 1, 0, H, H, B, 1},
        {"dx1 NN", 0, 0, B, H, H, 1},  {"dW0 TN", 1, 0, H, S, B, 1},
    };
    double tot = 0, flop = 0;
    printf("%s (B %d S %d K %d)\n", cfgp, B, S, K);
    for (unsigned i = 0; i < sizeof g / sizeof g[0]; i++) {
        double t[31];
        int M = g[i].M, N = g[i].N, Kd = g[i].Kd;
        int lda = g[i].ta ? M : Kd, ldb = g[i].tb ? Kd : N;
        for (int rep = 0; rep < 31; rep++) {
            double t0 = tcpu();
            for (int it = 0; it < 50; it++)
                cblas_sgemm(CblasRowMajor, g[i].ta ? CblasTrans : CblasNoTrans,
                            g[i].tb ? CblasTrans : CblasNoTrans, M, N, Kd, 1.f, A, lda, Bm, ldb,
                            0.f, C, N);
            t[rep] = (tcpu() - t0) / 50 * 1e6;
        }
        qsort(t, 31, sizeof(double), cmpd);
        double f = 2.0 * M * N * Kd;
        printf("  %-8s M %4d N %4d K %4d x%d  %8.2f us  %6.1f GFLOP/s\n", g[i].n, M, N, Kd,
               g[i].cnt, t[15], f / t[15] * 1e-3);
        tot += t[15] * g[i].cnt;
        flop += f * g[i].cnt;
    }
    printf("  sgemm floor (these calls): %.1f us/update, %.3g FLOP/update, %.1f GFLOP/s\n", tot,
           flop, flop / tot * 1e-3);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 1;
    if (!strcmp(argv[1], "gemm")) {
        for (int i = 2; i < argc; i++)
            gemm_floor(argv[i]);
        return 0;
    }
    if (!strcmp(argv[1], "dump")) {
        const fhd_api_v1 *api = load(argv[2]);
        char *cfg = slurp(argv[3]);
        fhd_learner *L = make(api, cfg, 5000);
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        if (api->train(L, 1000, &st)) {
            fprintf(stderr, "train failed\n");
            return 1;
        }
        FILE *f = fopen(argv[4], "wb");
        for (uint32_t i = 0;; i++) {
            fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
            if (api->tensor_info(L, i, &ti))
                break;
            float *buf = malloc(4 * ti.count);
            if (api->tensor_read(L, ti.name, buf, ti.count) == 0) {
                fwrite(ti.name, 1, strlen(ti.name) + 1, f);
                fwrite(buf, 4, ti.count, f);
            }
            free(buf);
        }
        { /* greedy Q of single observations, and of a batch of 64 */
            int S = jint(cfg, "\"obs_dim\""), K = jint(cfg, "\"actions\"");
            float o[64 * 64], q[64 * 64];
            int32_t a[64];
            for (int it = 0; it < 500; it++) {
                int n = it % 2 ? 1 : 64;
                for (int j = 0; j < n * S; j++)
                    o[j] = unif();
                fhd_act_args aa = FHD_ACT_ARGS_INIT;
                aa.num_obs = n;
                aa.obs = o;
                aa.actions = a;
                aa.q_values = q;
                if (api->act(L, &aa)) {
                    fprintf(stderr, "act failed\n");
                    return 1;
                }
                fwrite(q, 4, n * K, f);
                fwrite(a, 4, n, f);
            }
        }
        fprintf(f, "loss %a gnorm %a\n", st.loss, st.grad_norm);
        fclose(f);
        printf("dump %s: loss %.9g gnorm %.9g\n", argv[3], st.loss, st.grad_norm);
        return 0;
    }
    /* time */
    int sep = 2;
    while (strcmp(argv[sep], "--"))
        sep++;
    int nl = sep - 2, nc = argc - sep - 1;
    const int R = atoi(getenv("REPS") ? getenv("REPS") : "15"), N = 200;
    fhd_learner *L[8][8];
    const fhd_api_v1 *api[8];
    double *t[8][8];
    for (int l = 0; l < nl; l++) {
        api[l] = load(argv[2 + l]);
        for (int c = 0; c < nc; c++) {
            L[l][c] = make(api[l], slurp(argv[sep + 1 + c]), 20000);
            api[l]->train(L[l][c], 300, NULL); /* warm-up */
            t[l][c] = calloc(R, sizeof(double));
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < nc; c++)
            for (int l0 = 0; l0 < nl; l0++) {
                int l = (l0 + r) % nl; /* alternate who goes first */
                double t0 = tcpu();
                api[l]->train(L[l][c], N, NULL);
                t[l][c][r] = (tcpu() - t0) / N * 1e6;
            }
    for (int c = 0; c < nc; c++) {
        printf("%-40s", argv[sep + 1 + c]);
        for (int l = 0; l < nl; l++) {
            qsort(t[l][c], R, sizeof(double), cmpd);
            printf("  lib%d median %7.1f us (p25 %7.1f p75 %7.1f)", l, t[l][c][R / 2],
                   t[l][c][R / 4], t[l][c][3 * R / 4]);
        }
        printf("\n");
    }
    return 0;
}
