/* cuda_frames.cpp - image observations on the CUDA backend (see cuda_frames.h): setup, the
 * uint8 act and replay paths, the batch's form, and the frame-once replay's frame_add /
 * replay_add_ids with exactly the semantics of plugin/cpu/cpu_replay_frames.c.
 *
 * The host answers frame_add synchronously from its bookkeeping: ids, f_ref, the counters, and
 * the hint comparison against the pinned cache of the C newest frames. A hint older than the
 * cache (an env kept invalid while the others added C frames) reads its frame back from the
 * device: one synchronous copy, the rare path (never inside train). Kills (a frame overwritten:
 * every transition up to its f_ref dies) move the host's lo at once; the device's leaves follow
 * at the next flush (a kill kernel over the range, then the scatter, which gives a transition
 * that died before it reached the device priority 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "frames.cuh"
#include "sumtree.h"

/* ---- setup ---------------------------------------------------------------------------------- */

int32_t fhd__cuda_img_setup(fhd__backend *b) {
    fhd__cuda_img *g = (fhd__cuda_img *)calloc(1, sizeof(fhd__cuda_img));
    if (!g)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
    b->img = g;
    const fhd__config *c = &b->cfg;
    g->u8 = c->obs_dtype == FHD_OBS_UINT8;
    g->scale = fhd__config_obs_scale(c);
    g->cvt = b->lo.NC == 0 && (g->u8 || g->scale != 1.0f);
    g->frames = c->num_obs_shape > 0;
    g->k = 1;
    if (!g->frames)
        return FHD_OK;
    g->k = c->frame_stack ? c->frame_stack : 1;
    g->fe = b->lo.S / g->k;
    g->fbytes = g->fe * (g->u8 ? 1u : 4u);
    g->M = fhd__config_frame_capacity(c);
    /* the hint of an env is its last observation, at most one step of every env (2 k frames
     * each: an obs at a reset, a next_obs) old; the cache holds the n-step window's worth */
    uint64_t C = 2 * (uint64_t)g->k * c->num_envs * (c->n_step + 1) + 1;
    C = C < 2 ? 2 : C;
    g->C = C < g->M ? C : g->M;
    g->ts_rows = b->stage_rows ? b->stage_rows : 1;
    g->ts_bytes = (size_t)g->ts_rows * (16 * (size_t)g->k + 4 * (size_t)b->lo.D + 8);
    g->f_ref = (uint64_t *)malloc(sizeof(uint64_t) * g->M);
    if (!g->f_ref)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY,
                               "cuda backend: out of host memory for %llu frame references",
                               (unsigned long long)g->M);
    for (uint64_t i = 0; i < g->M; i++)
        g->f_ref[i] = FHD_FRAME_NONE;
    return FHD_OK;
}

/* After allocation: events, zeroed device state, the kernels loaded. */
int32_t fhd__cuda_img_init(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    FHD_CK(b, fhd__cuda_frames_preload());
    if (g->cvt) /* defined before the capture's warm-up update reads it */
        FHD_CK(b, cudaMemsetAsync(g->x_conv, 0, sizeof(float) * 2 * b->B * b->lo.S, b->s_main));
    if (!g->u8 && !g->frames)
        return fhd__cuda_sync(b, b->s_main);
    /* zero: saved whole, as the CPU's calloc */
    FHD_CK(b, cudaMemsetAsync(b->r_act, 0, sizeof(int32_t) * b->N * b->lo.D, b->s_main));
    FHD_CK(b, cudaMemsetAsync(b->r_ret, 0, sizeof(float) * b->N, b->s_main));
    FHD_CK(b, cudaMemsetAsync(b->r_disc, 0, sizeof(float) * b->N, b->s_main));
    if (!g->frames) {
        FHD_CK(b, cudaMemsetAsync(g->r_obs8, 0, (size_t)b->N * b->lo.S, b->s_main));
        FHD_CK(b, cudaMemsetAsync(g->r_next8, 0, (size_t)b->N * b->lo.S, b->s_main));
        return fhd__cuda_sync(b, b->s_main);
    }
    for (int i = 0; i < FHD_CUDA_FRAME_EVENTS; i++)
        FHD_CK(b, cudaEventCreateWithFlags(&g->ev_f[i], cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) {
        FHD_CK(b, cudaEventCreateWithFlags(&g->ev_ts[i], cudaEventDisableTiming));
        FHD_CK(b, cudaEventRecord(g->ev_ts[i], b->s_main));
    }
    FHD_CK(b, cudaMemsetAsync(g->d_frames, 0, g->M * g->fbytes, b->s_main));
    FHD_CK(b, cudaMemsetAsync(g->d_t_obs, 0, sizeof(uint64_t) * b->N * g->k, b->s_main));
    FHD_CK(b, cudaMemsetAsync(g->d_t_next, 0, sizeof(uint64_t) * b->N * g->k, b->s_main));
    FHD_CK(b, cudaMemsetAsync(g->d_first_live, 0, sizeof(uint64_t), b->s_main));
    memset(g->cache, 0, g->C * g->fbytes);
    return fhd__cuda_sync(b, b->s_main);
}

void fhd__cuda_img_destroy(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    if (!g)
        return;
    for (int i = 0; i < FHD_CUDA_FRAME_EVENTS; i++)
        if (g->ev_f[i])
            cudaEventDestroy(g->ev_f[i]);
    for (int i = 0; i < 2; i++)
        if (g->ev_ts[i])
            cudaEventDestroy(g->ev_ts[i]);
    free(g->f_ref);
    free(g);
    b->img = NULL;
}

/* ---- the batch's form ---------------------------------------------------------------------- */

void fhd__cuda_img_sample_args(fhd__backend *b, fhd__sample_args *a) {
    const fhd__cuda_img *g = b->img;
    a->src_u8 = g->u8;
    a->r_obs8 = g->r_obs8;
    a->r_next8 = g->r_next8;
    a->fk = g->k;
    a->N = b->N;
    if (g->frames) {
        a->frames = g->d_frames;
        a->t_obs = g->d_t_obs;
        a->t_next = g->d_t_next;
        a->first_live = g->d_first_live;
        a->M = g->M;
    }
    a->scale = g->scale;
    if (g->cvt) { /* the MLP's input, converted as it is gathered */
        a->dst = FHD_GATHER_SCALED;
        a->g_obs = g->x_conv;
        a->g_next = g->x_conv + (size_t)b->B * b->lo.S;
    } else if (g->u8) { /* raw bytes for the first conv layer */
        a->dst = FHD_GATHER_U8;
        a->g_obs8 = b->g_x8;
    } else {
        a->dst = FHD_GATHER_F32;
    }
    if (b->plan.gather_bf16) { /* the layer-0 operand itself (cuda_plan.h) */
        a->dst = FHD_GATHER_BF16;
        a->g_obs16 = b->bf.x;
        a->scale = g->cvt ? g->scale : 1.0f;
    }
}

float *fhd__cuda_img_stage_batch(fhd__backend *b, const fhd__host_batch *hb, unsigned char *h) {
    const size_t B = b->B, S = b->lo.S;
    if (b->img->u8) {
        memcpy(h, hb->obs_u8, B * S);
        memcpy(h + B * S, hb->next_obs_u8, B * S);
    } else {
        memcpy(h, hb->obs, sizeof(float) * B * S);
        memcpy(h + sizeof(float) * B * S, hb->next_obs, sizeof(float) * B * S);
    }
    return (float *)(void *)(h + ((char *)b->g_act - (char *)b->gbatch));
}

int32_t fhd__cuda_img_convert_batch(fhd__backend *b, cudaStream_t s) {
    const fhd__cuda_img *g = b->img;
    if (!g->cvt)
        return FHD_OK;
    const void *src = g->u8 ? (const void *)b->g_x8 : (const void *)b->g_x;
    FHD_CK(b, fhd__cuda_convert(g->x_conv, src, g->u8, (uint64_t)2 * b->B * b->lo.S, g->scale, s));
    return FHD_OK;
}

/* ---- the flat uint8 replay ---------------------------------------------------------------- */

int32_t fhd__cuda_replay_append_u8(fhd__backend *b, uint32_t n, const uint8_t *obs,
                                   const int32_t *actions, const float *returns,
                                   const uint8_t *next_obs, const float *disc) {
    const uint32_t S = b->lo.S, D = b->lo.D;
    if (b->img->frames)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL,
                               "replay_add: image observations go through frame_add");
    FHD_CK(b, cudaSetDevice(b->device));
    for (uint32_t r0 = 0; r0 < n; r0 += b->stage_rows) {
        const uint32_t m = n - r0 < b->stage_rows ? n - r0 : b->stage_rows;
        const int k = b->stage_next;
        b->stage_next ^= 1;
        cudaError_t e = cudaEventQuery(b->ev_stage[k]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            FHD_TRY(fhd__cuda_sync_event(b, b->ev_stage[k]));
        } else if (e != cudaSuccess) {
            return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaEventQuery (replay staging)");
        }
        /* staging, packed for these m rows: obs (m, S) bytes | next (m, S) bytes | pad to 4 |
         * act (m, D) | ret (m) | disc (m) */
        unsigned char *h = (unsigned char *)b->h_stage[k];
        const size_t rows = (size_t)m * S, tail = (2 * rows + 3) / 4 * 4;
        memcpy(h, obs + (size_t)r0 * S, rows);
        memcpy(h + rows, next_obs + (size_t)r0 * S, rows);
        memcpy(h + tail, actions + (size_t)r0 * D, sizeof(int32_t) * m * D);
        float *ft = (float *)(void *)(h + tail + sizeof(int32_t) * m * D);
        memcpy(ft, returns + r0, sizeof(float) * m);
        memcpy(ft + m, disc + r0, sizeof(float) * m);
        const size_t bytes = tail + sizeof(int32_t) * m * D + 2 * sizeof(float) * m;
        FHD_CK(b, cudaMemcpyAsync(b->d_stage, h, bytes, cudaMemcpyHostToDevice, b->s_main));
        FHD_CK(b, cudaEventRecord(b->ev_stage[k], b->s_main));
        const uint64_t new_size = b->size + m < b->N ? b->size + m : b->N;
        const unsigned char *d = (const unsigned char *)b->d_stage;
        fhd__replay_add_args a;
        memset(&a, 0, sizeof a);
        a.act = (const int32_t *)(const void *)(d + tail);
        a.ret = (const float *)(const void *)(d + tail + sizeof(int32_t) * m * D);
        a.disc = a.ret + m;
        a.n = m;
        a.pos = b->pos;
        a.N = b->N;
        a.S = S;
        a.D = D;
        a.r_act = b->r_act;
        a.r_ret = b->r_ret;
        a.r_disc = b->r_disc;
        a.prioritized = b->prioritized;
        a.nodes = b->nodes;
        a.leaves = b->leaves;
        a.st = b->st;
        a.new_size = new_size;
        FHD_CK(b, fhd__cuda_replay_add_u8(&a, d, d + rows, b->img->r_obs8, b->img->r_next8,
                                          b->s_main));
        b->pos = (b->pos + m) % b->N;
        b->size = new_size;
    }
    return FHD_OK;
}

/* ---- the frame-once replay: flush ------------------------------------------------------------ */

/* Wait until event e has completed: a query, and a synchronisation only while it has not. */
static int32_t wait_event(fhd__backend *b, cudaEvent_t e) {
    cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess)
        return FHD_OK;
    if (q != cudaErrorNotReady)
        return fhd__cuda_fail(b, q, __FILE__, __LINE__, "cudaEventQuery (frame staging)");
    (void)cudaGetLastError();
    return fhd__cuda_sync_event(b, e);
}

/* Wait for the oldest frame copy in flight; f_done moves to its end. */
static int32_t wait_oldest(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    FHD_TRY(wait_event(b, g->ev_f[g->ev_head]));
    g->f_done = g->ev_f_end[g->ev_head];
    g->ev_head = (g->ev_head + 1) % FHD_CUDA_FRAME_EVENTS;
    g->ev_n--;
    return FHD_OK;
}

int32_t fhd__cuda_img_flush(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    if (!g || !g->frames)
        return FHD_OK;
    cudaStream_t s = b->s_main;
    const uint64_t F = g->fc[0], T = g->fc[1], lo = g->fc[2];
    if (F > g->f_sent) { /* the pending frames, straight from the cache to their ring rows */
        if (g->ev_n == FHD_CUDA_FRAME_EVENTS)
            FHD_TRY(wait_oldest(b));
        for (uint64_t id = g->f_sent; id < F;) {
            const uint64_t rc = id % g->C, rm = id % g->M;
            uint64_t run = F - id;
            run = run < g->C - rc ? run : g->C - rc;
            run = run < g->M - rm ? run : g->M - rm;
            FHD_CK(b, cudaMemcpyAsync((unsigned char *)g->d_frames + rm * g->fbytes,
                                      g->cache + rc * g->fbytes, run * g->fbytes,
                                      cudaMemcpyHostToDevice, s));
            id += run;
        }
        const int e = (g->ev_head + g->ev_n) % FHD_CUDA_FRAME_EVENTS;
        FHD_CK(b, cudaEventRecord(g->ev_f[e], s));
        g->ev_f_end[e] = F;
        g->ev_n++;
        g->f_sent = F;
    }
    const uint64_t kill_to = lo < g->t_sent ? lo : g->t_sent;
    if (b->prioritized && kill_to > g->lo_sent)
        FHD_CK(b, fhd__cuda_frames_kill(b->nodes, b->leaves, b->N, g->lo_sent, kill_to, s));
    if (T == g->t_sent && lo == g->lo_sent)
        return FHD_OK;
    const uint32_t n = g->ts_n, k = g->k, D = b->lo.D, R = g->ts_rows;
    if (n)
        FHD_CK(b, cudaMemcpyAsync(g->d_ts, g->h_ts[g->ts_cur], g->ts_bytes, cudaMemcpyHostToDevice,
                                  s));
    fhd__frames_scatter_args a;
    memset(&a, 0, sizeof a);
    a.obs_ids = (const uint64_t *)(const void *)g->d_ts;
    a.next_ids = a.obs_ids + (size_t)R * k;
    a.act = (const int32_t *)(const void *)(a.next_ids + (size_t)R * k);
    a.ret = (const float *)(const void *)(a.act + (size_t)R * D);
    a.disc = a.ret + R;
    a.n = n;
    a.k = k;
    a.D = D;
    a.t0 = g->t_sent;
    a.lo = lo;
    a.N = b->N;
    a.t_obs = g->d_t_obs;
    a.t_next = g->d_t_next;
    a.r_act = b->r_act;
    a.r_ret = b->r_ret;
    a.r_disc = b->r_disc;
    a.prioritized = b->prioritized;
    a.nodes = b->nodes;
    a.leaves = b->leaves;
    a.st = b->st;
    a.first_live = g->d_first_live;
    FHD_CK(b, fhd__cuda_frames_scatter(&a, s));
    g->t_sent = T;
    g->lo_sent = lo;
    if (n) { /* the other staging buffer next (replay_add_ids waits for its last copy) */
        FHD_CK(b, cudaEventRecord(g->ev_ts[g->ts_cur], s));
        g->ts_cur ^= 1;
        g->ts_n = 0;
    }
    return FHD_OK;
}

/* ---- the frame-once replay: frame_add, replay_add_ids ------------------------------------ */

static int alive(const fhd__cuda_img *g, uint64_t id) {
    return id < g->fc[0] && id + g->M >= g->fc[0]; /* ids [fc0 - M, fc0) are stored */
}

int fhd__cuda_img_stored(const fhd__backend *b, uint64_t id) {
    return alive(b->img, id);
}

/* Transitions numbered below x die (lo <= x <= T); the device's leaves follow at the flush. */
static void kill_below(fhd__backend *b, uint64_t x) {
    fhd__cuda_img *g = b->img;
    if (x > g->fc[2])
        g->fc[2] = x;
    b->size = g->fc[1] - g->fc[2];
}

/* The bytes of stored frame id: from the cache, or (older than the cache) read back from the
 * device ring, synchronously. */
static int32_t frame_bytes(fhd__backend *b, uint64_t id, const unsigned char **out) {
    fhd__cuda_img *g = b->img;
    if (id + g->C >= g->fc[0]) {
        *out = g->cache + (id % g->C) * g->fbytes;
        return FHD_OK;
    }
    FHD_TRY(fhd__cuda_img_flush(b));
    FHD_CK(b, cudaMemcpyAsync(g->readback, (unsigned char *)g->d_frames + (id % g->M) * g->fbytes,
                              g->fbytes, cudaMemcpyDeviceToHost, b->s_main));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    *out = g->readback;
    return FHD_OK;
}

static int32_t frame_equal(fhd__backend *b, uint64_t id, const unsigned char *src, int *eq) {
    const unsigned char *f = NULL;
    FHD_TRY(frame_bytes(b, id, &f));
    *eq = memcmp(f, src, (size_t)b->img->fbytes) == 0;
    return FHD_OK;
}

/* Store one frame; its id in *out. The frame it overwrites dies, and with it every transition
 * up to the last one that used it. */
static int32_t add_one(fhd__backend *b, const unsigned char *src, uint64_t *out) {
    fhd__cuda_img *g = b->img;
    const uint64_t id = g->fc[0], r = id % g->M;
    if (id >= g->C) { /* cache row id mod C held frame id - C: its copy must be done */
        const uint64_t old = id - g->C;
        if (g->f_sent <= old)
            FHD_TRY(fhd__cuda_img_flush(b));
        while (g->f_done <= old && g->ev_n > 0)
            FHD_TRY(wait_oldest(b));
    }
    if (g->f_ref[r] != FHD_FRAME_NONE && g->f_ref[r] + 1 > g->fc[2])
        kill_below(b, g->f_ref[r] + 1);
    memcpy(g->cache + (id % g->C) * g->fbytes, src, (size_t)g->fbytes);
    g->f_ref[r] = FHD_FRAME_NONE;
    g->fc[0] = id + 1;
    *out = id;
    if (g->fc[0] - g->f_sent >= g->C / 2) /* half the cache pending: send it */
        FHD_TRY(fhd__cuda_img_flush(b));
    return FHD_OK;
}

int32_t fhd__cuda_frame_add(fhd__backend *b, const void *row, const uint64_t *hint, uint64_t *ids) {
    fhd__cuda_img *g = b->img;
    if (!g->frames)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "frame_add: the config has no obs_shape");
    FHD_CK(b, cudaSetDevice(b->device));
    const uint32_t k = g->k;
    const size_t fb = (size_t)g->fbytes;
    const unsigned char *r = (const unsigned char *)row;
    uint32_t j0 = 0; /* frames [0, j0) come from the hint */
    int usable = hint != NULL;
    for (uint32_t j = 0; usable && j < k; j++)
        usable = hint[j] != FHD_FRAME_NONE && alive(g, hint[j]);
    if (usable) {
        int same = 1, shifted = k > 1;
        for (uint32_t j = 0; j < k && same; j++)
            FHD_TRY(frame_equal(b, hint[j], r + j * fb, &same));
        if (same) { /* the same observation: an env's next_obs that is its next obs */
            memcpy(ids, hint, sizeof(uint64_t) * k);
            return FHD_OK;
        }
        for (uint32_t j = 0; j + 1 < k && shifted; j++)
            FHD_TRY(frame_equal(b, hint[j + 1], r + j * fb, &shifted));
        if (shifted) { /* the hint's stack moved on by one frame */
            memcpy(ids, hint + 1, sizeof(uint64_t) * (k - 1));
            j0 = k - 1;
        }
    }
    for (uint32_t j = j0; j < k; j++) { /* new frames; equal neighbours once */
        if (j > 0 && memcmp(r + j * fb, r + (j - 1) * fb, fb) == 0)
            ids[j] = ids[j - 1];
        else
            FHD_TRY(add_one(b, r + j * fb, &ids[j]));
    }
    return FHD_OK;
}

int32_t fhd__cuda_replay_add_ids(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                                 const int32_t *actions, const float *returns,
                                 const uint64_t *next_ids, const float *disc) {
    fhd__cuda_img *g = b->img;
    if (!g->frames)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "replay_add_ids: the config has no obs_shape");
    FHD_CK(b, cudaSetDevice(b->device));
    const uint32_t D = b->lo.D, k = g->k, R = g->ts_rows;
    const uint64_t N = b->N;
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t *oi = obs_ids + (size_t)i * k, *ni = next_ids + (size_t)i * k;
        int ok = 1;
        for (uint32_t j = 0; j < k; j++)
            ok &= alive(g, oi[j]) && alive(g, ni[j]);
        if (!ok) { /* its frames already left the ring: nothing left to store */
            g->dropped++;
            continue;
        }
        if (g->ts_n == R)
            FHD_TRY(fhd__cuda_img_flush(b));
        if (g->ts_n == 0) /* the buffer's previous copy is done before it is written again */
            FHD_TRY(wait_event(b, g->ev_ts[g->ts_cur]));
        const uint64_t t = g->fc[1];
        if (t >= N && g->fc[2] < t - N + 1)
            kill_below(b, t - N + 1); /* the slot's previous transition */
        for (uint32_t j = 0; j < k; j++) {
            g->f_ref[oi[j] % g->M] = t;
            g->f_ref[ni[j] % g->M] = t;
        }
        unsigned char *h = g->h_ts[g->ts_cur];
        uint64_t *so = (uint64_t *)(void *)h, *sn = so + (size_t)R * k;
        int32_t *sa = (int32_t *)(void *)(sn + (size_t)R * k);
        float *sr = (float *)(void *)(sa + (size_t)R * D), *sd = sr + R;
        const uint32_t row = g->ts_n++;
        memcpy(so + (size_t)row * k, oi, sizeof(uint64_t) * k);
        memcpy(sn + (size_t)row * k, ni, sizeof(uint64_t) * k);
        memcpy(sa + (size_t)row * D, actions + (size_t)i * D, sizeof(int32_t) * D);
        sr[row] = returns[i];
        sd[row] = disc[i];
        g->fc[1] = t + 1;
        b->pos = g->fc[1] % N;
        b->size = g->fc[1] - g->fc[2];
    }
    return FHD_OK;
}
