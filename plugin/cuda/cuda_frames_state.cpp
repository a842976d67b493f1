/* cuda_frames_state.cpp - state kinds, scalars and invariants of image observations on the
 * CUDA backend: the flat uint8 rings and every kind of the frame-once replay (backend.h), read
 * and written as the CPU reference's (checkpoints move both ways), and its check_invariants.
 * Every call first flushes the pending frames and transitions (cuda_frames.cpp), so the device
 * holds the state the host's bookkeeping describes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "frames.cuh"
#include "sumtree.h"

/* 1 when `kind` is answered here (image configs' observation kinds, the frame kinds). */
int fhd__cuda_img_kind(const fhd__backend *b, int kind) {
    switch (kind) {
    case FHD_STATE_REPLAY_OBS:
    case FHD_STATE_REPLAY_NEXT_OBS:
        return b->img->u8 || b->img->frames;
    case FHD_STATE_REPLAY_OBS_U8:
    case FHD_STATE_REPLAY_NEXT_OBS_U8:
    case FHD_STATE_FRAMES:
    case FHD_STATE_FRAMES_U8:
    case FHD_STATE_FRAME_REFS:
    case FHD_STATE_REPLAY_OBS_ID:
    case FHD_STATE_REPLAY_NEXT_ID:
    case FHD_STATE_FRAME_COUNTERS:
        return 1;
    default:
        return 0;
    }
}

/* Where a kind lives: device (*dev) or host (*host) base and its element count. */
static int32_t img_ptr(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void **dev,
                       void **host) {
    fhd__cuda_img *g = b->img;
    uint64_t n = 0;
    *dev = *host = NULL;
    switch (kind) {
    case FHD_STATE_REPLAY_OBS:
    case FHD_STATE_REPLAY_NEXT_OBS:
    case FHD_STATE_REPLAY_OBS_U8:
    case FHD_STATE_REPLAY_NEXT_OBS_U8:
        if (g->frames)
            return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND,
                                   "the replay stores frames (image observations)");
        if (g->u8 != (kind == FHD_STATE_REPLAY_OBS_U8 || kind == FHD_STATE_REPLAY_NEXT_OBS_U8))
            return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND,
                                   "the replay stores observations of the other dtype");
        *dev = kind == FHD_STATE_REPLAY_OBS_U8 ? g->r_obs8 : g->r_next8;
        n = (uint64_t)b->N * b->lo.S;
        break;
    case FHD_STATE_FRAMES:
    case FHD_STATE_FRAMES_U8:
        if (g->frames && g->u8 == (kind == FHD_STATE_FRAMES_U8)) {
            *dev = g->d_frames;
            n = g->M * g->fe;
        }
        break;
    case FHD_STATE_FRAME_REFS:
        if (g->frames) {
            *host = g->f_ref;
            n = g->M;
        }
        break;
    case FHD_STATE_REPLAY_OBS_ID:
    case FHD_STATE_REPLAY_NEXT_ID:
        if (g->frames) {
            *dev = kind == FHD_STATE_REPLAY_OBS_ID ? g->d_t_obs : g->d_t_next;
            n = (uint64_t)b->N * g->k;
        }
        break;
    case FHD_STATE_FRAME_COUNTERS:
        if (g->frames) {
            *host = g->fc;
            n = 3;
        }
        break;
    default:
        break;
    }
    if (!*dev && !*host)
        return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND, "no frame replay of this kind and dtype");
    if (offset > n || count > n - offset)
        return fhd__cuda_failf(b, FHD_ERR_SIZE_MISMATCH, "state range out of bounds");
    const size_t off = offset * fhd__state_elem_size(kind);
    if (*dev)
        *dev = (char *)*dev + off;
    else
        *host = (char *)*host + off;
    return FHD_OK;
}

int32_t fhd__cuda_img_read(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void *dst) {
    FHD_CK(b, cudaSetDevice(b->device));
    void *dev, *host;
    FHD_TRY(img_ptr(b, kind, offset, count, &dev, &host));
    FHD_TRY(fhd__cuda_img_flush(b));
    const size_t bytes = count * fhd__state_elem_size(kind);
    if (host) {
        memcpy(dst, host, bytes);
        return FHD_OK;
    }
    if (bytes)
        FHD_CK(b, cudaMemcpyAsync(dst, dev, bytes, cudaMemcpyDeviceToHost, b->s_main));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    return fhd__cuda_poll_snapshots(b);
}

/* The cache again from the device ring (frames [fc0 - C, fc0)), after a write of frames or
 * counters; every copy is complete afterwards. */
static int32_t rebuild_cache(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    const uint64_t F = g->fc[0], first = F > g->C ? F - g->C : 0;
    for (uint64_t id = first; id < F;) {
        const uint64_t rc = id % g->C, rm = id % g->M;
        uint64_t run = F - id;
        run = run < g->C - rc ? run : g->C - rc;
        run = run < g->M - rm ? run : g->M - rm;
        FHD_CK(b, cudaMemcpyAsync(g->cache + rc * g->fbytes,
                                  (unsigned char *)g->d_frames + rm * g->fbytes, run * g->fbytes,
                                  cudaMemcpyDeviceToHost, b->s_main));
        id += run;
    }
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    g->f_sent = g->f_done = F;
    g->ev_n = 0;
    return FHD_OK;
}

/* The device's replay size and first live transition from the counters (the scatter kernel
 * with no rows), and the host mirrors. */
static int32_t counters_to_device(fhd__backend *b) {
    fhd__cuda_img *g = b->img;
    g->t_sent = g->fc[1];
    g->lo_sent = g->fc[2];
    g->ts_n = 0;
    b->pos = g->fc[1] % b->N;
    b->size = g->fc[1] - g->fc[2];
    fhd__frames_scatter_args a;
    memset(&a, 0, sizeof a);
    a.k = g->k;
    a.D = b->lo.D;
    a.t0 = g->fc[1];
    a.lo = g->fc[2];
    a.N = b->N;
    a.st = b->st;
    a.first_live = g->d_first_live;
    FHD_CK(b, fhd__cuda_frames_scatter(&a, b->s_main));
    return FHD_OK;
}

int32_t fhd__cuda_img_write(fhd__backend *b, int kind, uint64_t offset, uint64_t count,
                            const void *src) {
    FHD_CK(b, cudaSetDevice(b->device));
    void *dev, *host;
    FHD_TRY(img_ptr(b, kind, offset, count, &dev, &host));
    FHD_TRY(fhd__cuda_img_flush(b));
    const size_t bytes = count * fhd__state_elem_size(kind);
    if (host)
        memcpy(host, src, bytes);
    else if (bytes)
        FHD_CK(b, cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, b->s_main));
    if (kind == FHD_STATE_FRAME_COUNTERS)
        FHD_TRY(counters_to_device(b));
    if (kind == FHD_STATE_FRAME_COUNTERS || kind == FHD_STATE_FRAMES || kind == FHD_STATE_FRAMES_U8)
        return rebuild_cache(b); /* waits for everything above */
    return fhd__cuda_sync(b, b->s_main);
}

/* set_scalars' frame part (after the common one): an empty replay has no frames either. */
int32_t fhd__cuda_img_set_scalars(fhd__backend *b, const fhd__backend_scalars *in) {
    fhd__cuda_img *g = b->img;
    if (!g->frames || in->replay_size != 0)
        return FHD_OK;
    memset(g->fc, 0, sizeof g->fc);
    for (uint64_t i = 0; i < g->M; i++)
        g->f_ref[i] = FHD_FRAME_NONE;
    FHD_TRY(counters_to_device(b));
    return rebuild_cache(b);
}

/* check_invariants of the frame-once replay: the CPU's checks (cpu_replay_frames.c) on the
 * state read back, plus the device record (size, update counter, first live) and the tree. */
int32_t fhd__cuda_img_check(fhd__backend *b, char *msg, size_t cap) {
    fhd__cuda_img *g = b->img;
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    const uint64_t N = b->N, T = g->fc[1], lo = g->fc[2], k = g->k;
    if (lo > T || T - lo > N || b->pos != T % N || b->size != T - lo) {
        snprintf(msg, cap, "frame replay: T %llu lo %llu pos %llu size %llu capacity %llu",
                 (unsigned long long)T, (unsigned long long)lo, (unsigned long long)b->pos,
                 (unsigned long long)b->size, (unsigned long long)N);
        return FHD_ERR_INTERNAL;
    }
    fhd__dev_scalars s;
    uint64_t first_live = 0;
    FHD_CK(b, cudaMemcpyAsync(&s, b->st, sizeof s, cudaMemcpyDeviceToHost, b->s_main));
    FHD_CK(b, cudaMemcpyAsync(&first_live, g->d_first_live, sizeof first_live,
                              cudaMemcpyDeviceToHost, b->s_main));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    if (s.replay_size != b->size || s.updates != b->updates || first_live != lo) {
        snprintf(msg, cap,
                 "frame replay: device record size %llu updates %llu first live %llu; host %llu, "
                 "%llu, %llu",
                 (unsigned long long)s.replay_size, (unsigned long long)s.updates,
                 (unsigned long long)first_live, (unsigned long long)b->size,
                 (unsigned long long)b->updates, (unsigned long long)lo);
        return FHD_ERR_INTERNAL;
    }
    uint64_t *ids = (uint64_t *)malloc(sizeof(uint64_t) * 2 * N * k);
    if (!ids)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "check: out of host memory");
    int32_t rc = FHD_OK;
    cudaError_t e = cudaMemcpyAsync(ids, g->d_t_obs, sizeof(uint64_t) * N * k,
                                    cudaMemcpyDeviceToHost, b->s_main);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ids + N * k, g->d_t_next, sizeof(uint64_t) * N * k,
                            cudaMemcpyDeviceToHost, b->s_main);
    if (e != cudaSuccess)
        rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "frame ids read");
    if (rc == FHD_OK)
        rc = fhd__cuda_sync(b, b->s_main);
    const uint64_t F = g->fc[0], M = g->M;
    for (uint64_t t = lo; rc == FHD_OK && t < T; t++) {
        const uint64_t sl = t % N;
        for (uint64_t j = 0; j < k; j++) {
            const uint64_t o = ids[sl * k + j], x = ids[N * k + sl * k + j];
            if (!(o < F && o + M >= F) || !(x < F && x + M >= F)) {
                snprintf(msg, cap,
                         "frame replay: live transition %llu (slot %llu) uses frames %llu, "
                         "%llu; frames added %llu, ring %llu",
                         (unsigned long long)t, (unsigned long long)sl, (unsigned long long)o,
                         (unsigned long long)x, (unsigned long long)F, (unsigned long long)M);
                rc = FHD_ERR_INTERNAL;
                break;
            }
        }
    }
    free(ids);
    if (rc != FHD_OK || !b->prioritized)
        return rc;
    fhd__sumtree t;
    if (fhd__sumtree_init(&t, b->N) != 0)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "check: out of host memory");
    e = cudaMemcpyAsync(t.nodes, b->nodes, sizeof(uint64_t) * 2 * t.leaves, cudaMemcpyDeviceToHost,
                        b->s_main);
    if (e != cudaSuccess)
        rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "tree read");
    if (rc == FHD_OK)
        rc = fhd__cuda_sync(b, b->s_main);
    if (rc == FHD_OK && fhd__sumtree_check(&t) != 0) {
        snprintf(msg, cap, "sum tree: an internal node differs from the sum of its children");
        rc = FHD_ERR_INTERNAL;
    }
    for (uint64_t sl = 0; rc == FHD_OK && sl < N; sl++) {
        const uint64_t last = T - 1 - ((T - 1 - sl) % N + N) % N; /* last number in slot sl */
        const int live = T > 0 && sl < (T < N ? T : N) && last >= lo && last < T;
        const uint64_t q = t.nodes[t.leaves + sl];
        if (live != (q != 0) || q > s.max_q) {
            snprintf(msg, cap,
                     "frame replay: slot %llu is %s but has priority %llu (running max "
                     "%llu)",
                     (unsigned long long)sl, live ? "live" : "dead", (unsigned long long)q,
                     (unsigned long long)s.max_q);
            rc = FHD_ERR_INTERNAL;
        }
    }
    fhd__sumtree_free(&t);
    return rc;
}
