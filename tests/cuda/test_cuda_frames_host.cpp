/* test_cuda_frames_host.cpp - the CUDA frame replay's host logic against the CPU reference,
 * without a GPU: plugin/cuda/cuda_frames.cpp and cuda_frames_state.cpp run on a backend whose
 * "device" is host memory (the CUDA runtime calls they make are replaced below by memcpy /
 * memset and always-complete events, and the scatter and kill kernels by host loops that do
 * what kernels/frames.cu does). Random traffic as the learner front makes it (each env's obs
 * with its last next_obs ids as hint, next_obs as the obs's stack shifted by one frame, resets,
 * n-step windows holding old obs ids, envs absent for many steps so their hints outlive the
 * host cache) goes through frame_add / replay_add_ids of both; every few steps the frame kinds,
 * the counters, the replay size and first live transition, the priorities and both
 * check_invariants must agree. One run writes the CPU's frame state into the CUDA side half
 * way (a checkpoint load: the cache is rebuilt from the written frames) and goes on.
 * What the kernels themselves do is checked on the GPU by test_cuda_frames. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "frames.cuh"
#include "sumtree.h"

/* ---- the runtime calls of cuda_frames*.cpp, on host memory ---------------------------------- */

extern "C" {
cudaError_t cudaSetDevice(int) {
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) {
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) {
    *e = (cudaEvent_t)malloc(8);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}
}
int32_t fhd__cuda_fail(fhd__backend *b, cudaError_t, const char *f, int l, const char *x) {
    snprintf(b->err, sizeof b->err, "%s:%d %s", f, l, x);
    return FHD_ERR_DEVICE;
}
int32_t fhd__cuda_failf(fhd__backend *b, int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    return code;
}
int32_t fhd__cuda_sync(fhd__backend *b, cudaStream_t) {
    b->sync_count++;
    return FHD_OK;
}
int32_t fhd__cuda_sync_event(fhd__backend *b, cudaEvent_t) {
    b->sync_count++;
    return FHD_OK;
}
int32_t fhd__cuda_poll_snapshots(fhd__backend *) {
    return FHD_OK;
}
cudaError_t fhd__cuda_frames_preload(void) {
    return cudaSuccess;
}
cudaError_t fhd__cuda_convert(float *, const void *, int, uint64_t, float, cudaStream_t) {
    return cudaSuccess;
}
cudaError_t fhd__cuda_replay_add_u8(const fhd__replay_add_args *, const uint8_t *, const uint8_t *,
                                    uint8_t *, uint8_t *, cudaStream_t) {
    return cudaSuccess;
}

/* ---- kernels/frames.cu's scatter and kills as host loops ------------------------------------ */

static void tree_set(uint64_t *nodes, uint32_t leaves, uint64_t slot, uint64_t q) {
    uint32_t n = leaves + (uint32_t)slot;
    q = q > FHD_PRIO_MAX_Q ? FHD_PRIO_MAX_Q : q;
    const uint64_t delta = q - nodes[n];
    nodes[n] = q;
    if (delta)
        for (n >>= 1; n >= 1; n >>= 1)
            nodes[n] += delta;
}

cudaError_t fhd__cuda_frames_scatter(const fhd__frames_scatter_args *pa, cudaStream_t) {
    const fhd__frames_scatter_args a = *pa;
    const uint64_t T = a.t0 + a.n;
    a.st->replay_size = T - a.lo;
    *a.first_live = a.lo;
    for (uint32_t i = 0; i < a.n; i++) {
        const uint64_t t = a.t0 + i, s = t % a.N;
        if (t + a.N < T)
            continue;
        for (uint32_t j = 0; j < a.k; j++) {
            a.t_obs[s * a.k + j] = a.obs_ids[(size_t)i * a.k + j];
            a.t_next[s * a.k + j] = a.next_ids[(size_t)i * a.k + j];
        }
        for (uint32_t d = 0; d < a.D; d++)
            a.r_act[s * a.D + d] = a.act[(size_t)i * a.D + d];
        a.r_ret[s] = a.ret[i];
        a.r_disc[s] = a.disc[i];
        if (a.prioritized)
            tree_set(a.nodes, a.leaves, s, t >= a.lo ? a.st->max_q : 0);
    }
    return cudaSuccess;
}

static int bad_kill;
cudaError_t fhd__cuda_frames_kill(uint64_t *nodes, uint32_t leaves, uint64_t N, uint64_t from,
                                  uint64_t to, cudaStream_t) {
    bad_kill |= to - from > N; /* frames.cuh: at most N transitions, distinct slots */
    for (uint64_t t = from; t < to; t++)
        tree_set(nodes, leaves, t % N, 0);
    return cudaSuccess;
}

/* ---- the backend on host memory -------------------------------------------------------------- */

static fhd__backend *host_backend(const fhd__config *c, const fhd__layout *lo, uint32_t rows) {
    fhd__backend *b = (fhd__backend *)calloc(1, sizeof *b);
    b->cfg = *c;
    b->lo = *lo;
    b->N = c->replay_capacity;
    b->B = c->batch_size;
    b->prioritized = c->replay == FHD_REPLAY_PRIORITIZED;
    b->leaves = fhd__sumtree_leaf_count(b->N);
    b->stage_rows = rows;
    b->max_q = fhd__prio_quantize(1.0);
    b->st = (fhd__dev_scalars *)calloc(1, sizeof(fhd__dev_scalars));
    b->st->max_q = b->max_q;
    b->nodes = (uint64_t *)calloc(2 * (size_t)b->leaves, 8);
    b->r_act = (int32_t *)calloc((size_t)b->N * lo->D, 4);
    b->r_ret = (float *)calloc(b->N, 4);
    b->r_disc = (float *)calloc(b->N, 4);
    if (fhd__cuda_img_setup(b) != FHD_OK)
        return NULL;
    fhd__cuda_img *g = b->img;
    g->d_frames = malloc(g->M * g->fbytes);
    g->d_t_obs = (uint64_t *)malloc(8 * (size_t)b->N * g->k);
    g->d_t_next = (uint64_t *)malloc(8 * (size_t)b->N * g->k);
    g->d_first_live = (uint64_t *)malloc(8);
    g->d_ts = (unsigned char *)malloc(g->ts_bytes);
    g->cache = (unsigned char *)malloc(g->C * g->fbytes);
    g->readback = (unsigned char *)malloc(g->fbytes);
    g->h_ts[0] = (unsigned char *)malloc(g->ts_bytes);
    g->h_ts[1] = (unsigned char *)malloc(g->ts_bytes);
    g->x_conv = (float *)malloc(sizeof(float) * 2 * b->B * lo->S);
    return fhd__cuda_img_init(b) == FHD_OK ? b : NULL;
}

static void host_backend_free(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    void *p[] = {g->d_frames, g->d_t_obs,  g->d_t_next, g->d_first_live, g->d_ts,
                 g->cache,    g->readback, g->h_ts[0],  g->h_ts[1],      g->x_conv,
                 b->st,       b->nodes,    b->r_act,    b->r_ret,        b->r_disc};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    fhd__cuda_img_destroy(b);
    free(b);
}

/* ---- the comparison ----------------------------------------------------------------------------
 */

static int fails, checks;
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static int same(const fhd__backend_ops *ops, fhd__backend *c, fhd__backend *g, const char *name,
                int step) {
    const fhd__config *cfg = &g->cfg;
    const uint64_t N = cfg->replay_capacity, k = g->img->k, M = g->img->M;
    const struct {
        int kind;
        uint64_t n;
    } ks[] = {{FHD_STATE_FRAMES_U8, M * g->img->fe},
              {FHD_STATE_FRAME_REFS, M},
              {FHD_STATE_REPLAY_OBS_ID, N * k},
              {FHD_STATE_REPLAY_NEXT_ID, N * k},
              {FHD_STATE_FRAME_COUNTERS, 3}};
    int ok = 1;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const size_t bytes = ks[i].n * fhd__state_elem_size(ks[i].kind);
        unsigned char *a = (unsigned char *)malloc(bytes), *b = (unsigned char *)malloc(bytes);
        if (ops->read(c, ks[i].kind, 0, ks[i].n, a) != FHD_OK ||
            fhd__cuda_img_read(g, ks[i].kind, 0, ks[i].n, b) != FHD_OK) {
            printf("  FAIL %s step %d: read of kind %d: %s\n", name, step, ks[i].kind, g->err);
            ok = 0;
        } else if (memcmp(a, b, bytes) != 0) {
            printf("  FAIL %s step %d: state kind %d differs from the cpu's\n", name, step,
                   ks[i].kind);
            ok = 0;
        }
        free(a);
        free(b);
    }
    uint64_t fc[3];
    fhd__backend_scalars sc;
    ops->read(c, FHD_STATE_FRAME_COUNTERS, 0, 3, fc);
    ops->get_scalars(c, &sc);
    fhd__cuda_img_flush(g);
    if (g->st->replay_size != sc.replay_size || *g->img->d_first_live != fc[2] ||
        g->pos != sc.replay_pos || g->size != sc.replay_size) {
        printf("  FAIL %s step %d: device size %llu first live %llu, host pos %llu size %llu; "
               "cpu size %llu lo %llu pos %llu\n",
               name, step, (unsigned long long)g->st->replay_size,
               (unsigned long long)*g->img->d_first_live, (unsigned long long)g->pos,
               (unsigned long long)g->size, (unsigned long long)sc.replay_size,
               (unsigned long long)fc[2], (unsigned long long)sc.replay_pos);
        ok = 0;
    }
    if (g->prioritized) {
        uint64_t *p = (uint64_t *)malloc(8 * N);
        ops->read(c, FHD_STATE_REPLAY_PRIORITY, 0, N, p);
        for (uint64_t s = 0; s < N; s++)
            if (p[s] != g->nodes[g->leaves + s]) {
                printf("  FAIL %s step %d: slot %llu priority %llu, cpu %llu\n", name, step,
                       (unsigned long long)s, (unsigned long long)g->nodes[g->leaves + s],
                       (unsigned long long)p[s]);
                ok = 0;
                break;
            }
        free(p);
    }
    char msg[512] = "";
    if (fhd__cuda_img_check(g, msg, sizeof msg) != FHD_OK) {
        printf("  FAIL %s step %d: cuda check_invariants: %s\n", name, step, msg);
        ok = 0;
    }
    if (ops->check_invariants(c, msg, sizeof msg) != FHD_OK) {
        printf("  FAIL %s step %d: cpu check_invariants: %s\n", name, step, msg);
        ok = 0;
    }
    return ok;
}

/* The CPU's frame state written into g (as a checkpoint load does), over scrambled contents. */
static int write_state(const fhd__backend_ops *ops, fhd__backend *c, fhd__backend *g) {
    const uint64_t N = g->N, k = g->img->k, M = g->img->M;
    const struct {
        int kind;
        uint64_t n;
    } ks[] = {{FHD_STATE_FRAME_COUNTERS, 3},
              {FHD_STATE_FRAMES_U8, M * g->img->fe},
              {FHD_STATE_FRAME_REFS, M},
              {FHD_STATE_REPLAY_OBS_ID, N * k},
              {FHD_STATE_REPLAY_NEXT_ID, N * k}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const size_t bytes = ks[i].n * fhd__state_elem_size(ks[i].kind);
        unsigned char *a = (unsigned char *)malloc(bytes);
        memset(a, 0x5a, bytes);
        if (ks[i].kind != FHD_STATE_FRAME_COUNTERS &&
            fhd__cuda_img_write(g, ks[i].kind, 0, ks[i].n, a) != FHD_OK)
            return 0;
        ops->read(c, ks[i].kind, 0, ks[i].n, a);
        if (fhd__cuda_img_write(g, ks[i].kind, 0, ks[i].n, a) != FHD_OK)
            return 0;
        free(a);
    }
    return 1;
}

#define MAXE 8
#define MAXK 4
#define MAXN 8

static void run(const char *name, const char *json, uint32_t rows, int write_at) {
    fhd__config cfg;
    fhd_error err = FHD_ERROR_INIT;
    fhd__layout lo;
    if (fhd__config_parse(json, strlen(json), &cfg, &err) != FHD_OK ||
        fhd__layout_init(&lo, &cfg) != 0) {
        printf("  FAIL %s: config: %s\n", name, err.message);
        fails++;
        return;
    }
    float *params = (float *)calloc(2 * lo.num_params + 1, 4);
    float *sn = (float *)calloc(2 * lo.sn_size + 1, 4);
    const fhd__backend_ops *ops = &fhd__cpu_backend_ops;
    fhd__backend *c = NULL, *g = host_backend(&cfg, &lo, rows);
    char msg[256] = "";
    if (ops->create(&cfg, &lo, params, sn, &c, msg, sizeof msg) != FHD_OK || !g) {
        printf("  FAIL %s: create: %s\n", name, msg);
        fails++;
        return;
    }
    const uint32_t E = cfg.num_envs, k = g->img->k, S = lo.S, fe = S / k, n = cfg.n_step;
    uint8_t *stack = (uint8_t *)calloc(E, S), *nxt = (uint8_t *)malloc(S);
    uint64_t last_c[MAXE * MAXK], last_g[MAXE * MAXK], pend[MAXE][MAXN][MAXK];
    int npend[MAXE] = {0}, away[MAXE] = {0}, ok = 1, reads_back = 0;
    for (uint32_t i = 0; i < E * k; i++)
        last_c[i] = last_g[i] = FHD_FRAME_NONE;
    uint64_t kills = 0;
    for (int step = 0; step < 3000 && ok; step++) {
        for (uint32_t e = 0; e < E && ok; e++) {
            if (away[e] > 0) {
                away[e]--;
                continue;
            }
            if (rnd() % 97 == 0) { /* absent a while: its hint ages past the cache */
                away[e] = 5 + (int)(rnd() % 40);
                continue;
            }
            uint8_t *o = stack + (size_t)e * S;
            const uint64_t lo0 = g->img->fc[2];
            uint64_t oc[MAXK], og[MAXK], nc[MAXK], ng[MAXK];
            const uint64_t F = g->img->fc[0];
            const int old_hint = last_g[e * k] != FHD_FRAME_NONE && last_g[e * k] + g->img->C < F &&
                                 last_g[e * k] + g->img->M >= F;
            if (ops->frame_add(c, o, last_c + e * k, oc) != FHD_OK ||
                fhd__cuda_frame_add(g, o, last_g + e * k, og) != FHD_OK ||
                memcmp(oc, og, 8 * k) != 0) {
                printf("  FAIL %s step %d env %u: obs ids differ (%s)\n", name, step, e, g->err);
                ok = 0;
                break;
            }
            reads_back += old_hint;
            memmove(nxt, o + fe, (size_t)fe * (k - 1));
            for (uint32_t i = 0; i < fe; i++) /* zero frames repeat: equal neighbours */
                nxt[(k - 1) * fe + i] = (uint8_t)(rnd() % 3 == 0 ? 0 : rnd());
            if (ops->frame_add(c, nxt, oc, nc) != FHD_OK ||
                fhd__cuda_frame_add(g, nxt, og, ng) != FHD_OK || memcmp(nc, ng, 8 * k) != 0) {
                printf("  FAIL %s step %d env %u: next ids differ (%s)\n", name, step, e, g->err);
                ok = 0;
                break;
            }
            memcpy(pend[e][npend[e]++], oc, 8 * k);
            const int reset = rnd() % 12 == 0;
            const int emit = reset ? npend[e] : (npend[e] >= (int)n ? 1 : 0);
            const int32_t act = (int32_t)(rnd() % 3);
            const float r = (float)(rnd() % 7), d = reset ? 0.0f : 0.5f;
            for (int j = 0; j < emit; j++)
                if (ops->replay_add_ids(c, 1, pend[e][j], &act, &r, nc, &d) != FHD_OK ||
                    fhd__cuda_replay_add_ids(g, 1, pend[e][j], &act, &r, ng, &d) != FHD_OK) {
                    printf("  FAIL %s: replay_add_ids: %s\n", name, g->err);
                    ok = 0;
                }
            /* lo moved past the slots' own wrap: frames retired live transitions */
            kills += g->img->fc[2] > lo0 &&
                     g->img->fc[2] > (g->img->fc[1] > g->N ? g->img->fc[1] - g->N : 0);
            memmove(pend[e], pend[e] + emit, sizeof(pend[e][0]) * (size_t)(npend[e] - emit));
            npend[e] -= emit;
            if (reset) { /* a new episode: a stack of one frame */
                const uint8_t f0 = (uint8_t)rnd();
                for (uint32_t i = 0; i < S; i++)
                    o[i] = (uint8_t)(f0 + i % fe);
                for (uint32_t j = 0; j < k; j++)
                    last_c[e * k + j] = last_g[e * k + j] = FHD_FRAME_NONE;
            } else {
                memcpy(o, nxt, S);
                memcpy(last_c + e * k, nc, 8 * k);
                memcpy(last_g + e * k, ng, 8 * k);
            }
        }
        if (ok && step == write_at && !write_state(ops, c, g)) {
            printf("  FAIL %s: writing the cpu state: %s\n", name, g->err);
            ok = 0;
        }
        if (ok && (step % 5 == 0 || step == 2999))
            ok = same(ops, c, g, name, step);
    }
    ok = ok && !bad_kill;
    printf("%s %s: %llu frames, %llu transitions (first live %llu); %llu calls killed live "
           "transitions, %d hints older than the cache (%llu frames)%s\n",
           ok ? "  ok  " : "  FAIL", name, (unsigned long long)g->img->fc[0],
           (unsigned long long)g->img->fc[1], (unsigned long long)g->img->fc[2],
           (unsigned long long)kills, reads_back, (unsigned long long)g->img->C,
           write_at >= 0 ? ", the cpu state written in half way" : "");
    checks++;
    fails += !ok;
    if (ok && (kills == 0 || reads_back == 0)) {
        printf("  FAIL %s: the traffic must kill transitions and use old hints\n", name);
        fails++;
    }
    free(stack);
    free(nxt);
    free(params);
    free(sn);
    ops->destroy(c);
    host_backend_free(g);
}

int main(void) {
    run("stack4-per",
        "{\"obs_shape\": [4, 2, 2], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
        "\"actions\": [3], \"replay\": \"prioritized\", \"replay_capacity\": 30, \"num_envs\": 3, "
        "\"n_step\": 2, \"batch_size\": 4}",
        6, -1);
    run("stack1-per-256",
        "{\"obs_shape\": [1, 2, 2], \"obs_dtype\": \"uint8\", \"actions\": [3], "
        "\"replay\": \"prioritized\", \"replay_capacity\": 256, \"num_envs\": 2, \"n_step\": 3, "
        "\"batch_size\": 4}",
        6, 1500);
    run("stack2-uniform-rows1",
        "{\"obs_shape\": [2, 2, 2], \"obs_dtype\": \"uint8\", "
        "\"frame_stack\": 2, \"actions\": [3], \"replay_capacity\": 100, \"num_envs\": 5, "
        "\"n_step\": 1, \"batch_size\": 4}",
        1, -1);
    run("stack3-uniform-small",
        "{\"obs_shape\": [3, 1, 1], \"obs_dtype\": \"uint8\", "
        "\"frame_stack\": 3, \"actions\": [3], \"replay_capacity\": 64, \"num_envs\": 4, "
        "\"n_step\": 5, \"batch_size\": 4}",
        2, 1000);
    run("stack4-per-8envs",
        "{\"obs_shape\": [4, 1, 3], \"obs_dtype\": \"uint8\", "
        "\"frame_stack\": 4, \"actions\": [3], \"replay\": \"prioritized\", \"replay_capacity\": "
        "64, "
        "\"num_envs\": 8, \"n_step\": 4, \"batch_size\": 4}",
        3, 2000);
    printf("%d runs, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
