/* cuda_act.cpp - acting (greedy evaluation forward) and appending transitions to the replay.
 *
 * q_values: observations go up through a pinned buffer; spectral norm uses the stored u, v
 * (sigma only, one launch); the forward GEMMs run on the main stream (so they see every
 * update queued before); greedy actions (written by the last kernel straight into mapped
 * pinned memory) and Q values when asked (one copy) come back, and the call waits for them: the
 * caller needs the actions. All of it is one graph launch per chunk, the graphs cached with the
 * GEMM plans by row count.
 * replay_add: rows are packed into one of two pinned staging buffers, copied asynchronously and
 * scattered into the ring by one kernel that also sets the new leaves' priorities. A staging
 * buffer is reused only once its previous copy has completed.
 */
#include <string.h>

#include "cuda_internal.h"
#include "frames.cuh"

void fhd__cuda_act_plans_clear(fhd__act_plans *p) {
    for (uint32_t l = 0; l < FHD_MAXL; l++)
        if (p->fwd[l].ready || p->fwd[l].desc)
            fhd__gemm_destroy(&p->fwd[l]);
    for (uint32_t c = 0; c < FHD_MAX_CONV_LAYERS; c++)
        if (p->cfwd[c].ready || p->cfwd[c].desc)
            fhd__gemm_destroy(&p->cfwd[c]);
    for (int k = 0; k < 4; k++)
        if (p->exec[k / 2][k % 2]) {
            cudaGraphExecDestroy(p->exec[k / 2][k % 2]);
            p->exec[k / 2][k % 2] = NULL;
        }
    p->rows = 0;
}

/* Forward plans of the act path for `rows` rows (cached by row count). */
static int32_t act_plans(fhd__backend *b, uint32_t rows, fhd__act_plans **out) {
    for (uint32_t i = 0; i < FHD_CUDA_ACT_CACHE; i++)
        if (b->act_cache[i].rows == rows) {
            *out = &b->act_cache[i];
            return FHD_OK;
        }
    fhd__act_plans *p = &b->act_cache[b->act_cache_next];
    b->act_cache_next = (b->act_cache_next + 1) % FHD_CUDA_ACT_CACHE;
    fhd__cuda_act_plans_clear(p);
    const uint32_t L = b->lo.L;
    FHD_TRY(fhd__cuda_conv_act_plans(b, p->cfwd, rows));
    const float *x0 = b->lo.NC ? b->conv.act_flat : b->act_x; /* the linear torso's input */
    const int bf = b->bf.on; /* bf16 GEMMs: bf16 inputs and hidden outputs (cuda_bf16.cpp) */
    for (uint32_t l = 0; l <= L; l++) {
        const void *x = l == 0 ? (bf ? (const void *)b->bf.act_x : (const void *)x0)
                        : (l - 1) % 2 == 0
                            ? (bf ? (const void *)b->bf.act_a : (const void *)b->act_a)
                            : (bf ? (const void *)b->bf.act_b : (const void *)b->act_b);
        float *y32 = l % 2 == 0 ? b->act_a : b->act_b;
        void *y = l == L ? (void *)b->act_head
                  : bf   ? (l % 2 == 0 ? (void *)b->bf.act_a : (void *)b->bf.act_b)
                         : (void *)y32;
        const float *alpha = b->lo.layers[l].sn ? b->sn_inv + 2 * FHD_MAX_HIDDEN_LAYERS + l
                                                : b->d_one;
        FHD_TRY(fhd__gemm_plan_forward(b, &p->fwd[l], 0, l, rows, x, y, y32, alpha));
    }
    p->rows = rows;
    *out = p;
    return FHD_OK;
}

int32_t fhd__cuda_act_prepare(fhd__backend *b, uint32_t rows) {
    fhd__act_plans *p = NULL;
    return act_plans(b, rows < b->act_rows ? rows : b->act_rows, &p);
}

/* Everything one act chunk of p->rows rows does on the device, in stream order: sigma of the
 * normalised layers with the stored vectors, observations up from the pinned buffer (frames:
 * their ids up, the rows gathered from the ring), forward, greedy actions (and Q values),
 * results down into the pinned buffers. */
static int32_t record_act(fhd__backend *b, const fhd__act_plans *p, int frames, int want_q,
                          cudaStream_t s) {
    const fhd__layout *lo = &b->lo;
    const uint32_t m = p->rows;
    if (b->has_sn)
        FHD_CK(b, fhd__cuda_sn_launch(&b->a_sn_eval, s));
    const fhd__cuda_img *g = b->img;
    FHD_TRY(fhd__cuda_bf16_record_act_weights(b, s)); /* bf16: before the first GEMM reads them */
    if (!p->fwd[lo->L].narrow)                        /* the padded head: the online one */
        FHD_TRY(fhd__cuda_head_pad_record(b, 1, s));
    /* the raw rows: up from the pinned buffer, or gathered from the frame ring */
    void *raw = g->u8 ? (void *)g->act_x8 : (void *)b->act_x;
    if (frames) {
        FHD_CK(b, cudaMemcpyAsync(g->act_ids, g->h_act_ids, sizeof(uint64_t) * m * g->k,
                                  cudaMemcpyHostToDevice, s));
        FHD_CK(b, fhd__cuda_frames_gather(raw, g->d_frames, g->act_ids, m, g->k, g->M, g->fbytes,
                                          s));
    }
    if (lo->NC) { /* raw rows up; the conv torso's first im2col converts and scales them */
        if (!frames)
            FHD_CK(b, cudaMemcpyAsync(raw, b->h_act_obs,
                                      (size_t)m * lo->S * (g->u8 ? 1 : sizeof(float)),
                                      cudaMemcpyHostToDevice, s));
        FHD_TRY(fhd__cuda_conv_record_act(b, p->cfwd, raw, m, s));
    } else if (g->u8) { /* m rows of S bytes up, then the floats layer 0 reads (cuda_frames.h) */
        if (!frames)
            FHD_CK(b, cudaMemcpyAsync(g->act_x8, b->h_act_obs, (size_t)m * lo->S,
                                      cudaMemcpyHostToDevice, s));
        FHD_CK(b, fhd__cuda_convert(b->act_x, g->act_x8, 1, (uint64_t)m * lo->S, g->scale, s));
    } else {
        if (!frames)
            FHD_CK(b, cudaMemcpyAsync(b->act_x, b->h_act_obs, sizeof(float) * m * lo->S,
                                      cudaMemcpyHostToDevice, s));
        if (g->cvt) /* obs_scale != 1, in place */
            FHD_CK(b, fhd__cuda_convert(b->act_x, b->act_x, 0, (uint64_t)m * lo->S, g->scale, s));
    }
    FHD_TRY(fhd__cuda_bf16_record_act_input(b, m, s)); /* bf16 without conv: the input */
    for (uint32_t l = 0; l <= lo->L; l++)
        FHD_TRY(fhd__gemm_run(b, &p->fwd[l], s, b->ws_main));
    /* the greedy actions written by the kernel into the mapped pinned buffer (a copy node after
     * it cost more than its few bytes), or copied down where the mapping is not there; the Q
     * values (KT per row, each thread's at a stride: scattered small writes over the bus for
     * many rows) copied down in one piece */
    const int mapped = b->d_act_greedy_host != NULL;
    fhd__act_args a;
    memset(&a, 0, sizeof a);
    a.head = b->act_head;
    a.q = want_q ? b->act_q : NULL;
    a.greedy = mapped ? b->d_act_greedy_host : b->act_greedy;
    a.n = m;
    a.D = lo->D;
    a.KT = lo->KT;
    a.HO = lo->head_out;
    a.HOs = b->HOs;
    a.dueling = lo->dueling;
    for (uint32_t d = 0; d < lo->D; d++) {
        a.K[d] = lo->K[d];
        a.k_off[d] = lo->k_off[d];
    }
    FHD_CK(b, fhd__cuda_act_head(&a, s));
    if (!mapped)
        FHD_CK(b, cudaMemcpyAsync(b->h_act_greedy, b->act_greedy, sizeof(int32_t) * m * lo->D,
                                  cudaMemcpyDeviceToHost, s));
    if (want_q)
        FHD_CK(b, cudaMemcpyAsync(b->h_act_q, b->act_q, sizeof(float) * m * lo->KT,
                                  cudaMemcpyDeviceToHost, s));
    return FHD_OK;
}

/* The act graph of p for its input (host rows or frames) and want_q, captured on first use (one
 * launch instead of seven or more: the host-to-host latency of a small act is mostly launch
 * overhead). */
static int32_t act_graph(fhd__backend *b, fhd__act_plans *p, int frames, int want_q,
                         cudaGraphExec_t *out) {
    cudaGraphExec_t *slot = &p->exec[frames][want_q];
    if (*slot) {
        *out = *slot;
        return FHD_OK;
    }
    cudaStream_t s = b->s_main;
    FHD_CK(b, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int32_t rc = record_act(b, p, frames, want_q, s);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (rc == FHD_OK && e != cudaSuccess)
        rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaStreamEndCapture (act graph)");
    if (rc == FHD_OK) {
        e = cudaGraphInstantiate(slot, g, 0);
        if (e != cudaSuccess) {
            *slot = NULL;
            rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaGraphInstantiate (act graph)");
        }
    }
    if (g)
        cudaGraphDestroy(g);
    if (rc != FHD_OK) {
        (void)cudaGetLastError();
        return rc;
    }
    *out = *slot;
    return FHD_OK;
}

/* Observation rows of rb bytes (S floats, or S bytes for uint8), in chunks of act_rows; or
 * (ids != NULL) rows of k frame ids in the ring. */
static int32_t q_values_rows(fhd__backend *b, uint32_t n, const unsigned char *obs, size_t rb,
                             const uint64_t *ids, float *q, int32_t *greedy) {
    const fhd__layout *lo = &b->lo;
    const uint32_t D = lo->D, KT = lo->KT, k = b->img->k;
    const int want_q = q != NULL, frames = ids != NULL;
    FHD_CK(b, cudaSetDevice(b->device));
    if (frames)
        FHD_TRY(fhd__cuda_img_flush(b)); /* the ring holds every frame added so far */
    for (uint32_t r0 = 0; r0 < n; r0 += b->act_rows) {
        const uint32_t m = n - r0 < b->act_rows ? n - r0 : b->act_rows;
        fhd__act_plans *p = NULL;
        FHD_TRY(act_plans(b, m, &p));
        cudaGraphExec_t exec = NULL;
        FHD_TRY(act_graph(b, p, frames, want_q, &exec));
        if (frames) /* the previous chunk's graph, which read them, is complete */
            memcpy(b->img->h_act_ids, ids + (size_t)r0 * k, sizeof(uint64_t) * m * k);
        else
            memcpy(b->h_act_obs, obs + (size_t)r0 * rb, rb * m);
        FHD_CK(b, cudaGraphLaunch(exec, b->s_main));
        FHD_TRY(fhd__cuda_sync(b, b->s_main));
        if (greedy)
            memcpy(greedy + (size_t)r0 * D, b->h_act_greedy, sizeof(int32_t) * m * D);
        if (q)
            memcpy(q + (size_t)r0 * KT, b->h_act_q, sizeof(float) * m * KT);
    }
    return FHD_OK;
}

int32_t fhd__cuda_q_values(fhd__backend *b, uint32_t n, const float *obs, float *q,
                           int32_t *greedy) {
    return q_values_rows(b, n, (const unsigned char *)obs, sizeof(float) * b->lo.S, NULL, q,
                         greedy);
}

int32_t fhd__cuda_q_values_u8(fhd__backend *b, uint32_t n, const uint8_t *obs, float *q,
                              int32_t *greedy) {
    return q_values_rows(b, n, obs, b->lo.S, NULL, q, greedy);
}

int32_t fhd__cuda_q_values_frames(fhd__backend *b, uint32_t n, const uint64_t *ids, float *q,
                                  int32_t *greedy) {
    if (!b->img->frames)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "q_values_frames: the config has no obs_shape");
    const uint64_t nk = (uint64_t)n * b->img->k;
    for (uint64_t i = 0; i < nk; i++)
        if (!fhd__cuda_img_stored(b, ids[i]))
            return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT,
                                   "act: frame id %llu (row %llu) is not in the frame ring",
                                   (unsigned long long)ids[i], (unsigned long long)(i / b->img->k));
    return q_values_rows(b, n, NULL, 0, ids, q, greedy);
}

int32_t fhd__cuda_replay_append(fhd__backend *b, uint32_t n, const float *obs,
                                const int32_t *actions, const float *returns,
                                const float *next_obs, const float *disc) {
    const uint32_t S = b->lo.S, D = b->lo.D;
    if (b->img->u8 || b->img->frames)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL,
                               "replay_add: this replay takes uint8 rows or frames");
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
        /* staging layout, packed for these m rows: obs (m, S) | next (m, S) | act (m, D) | ret |
         * disc */
        const uint32_t R = m;
        float *h = b->h_stage[k];
        memcpy(h, obs + (size_t)r0 * S, sizeof(float) * m * S);
        memcpy(h + (size_t)R * S, next_obs + (size_t)r0 * S, sizeof(float) * m * S);
        memcpy(h + (size_t)2 * R * S, actions + (size_t)r0 * D, sizeof(int32_t) * m * D);
        float *tail = h + (size_t)2 * R * S + (size_t)R * D;
        memcpy(tail, returns + r0, sizeof(float) * m);
        memcpy(tail + R, disc + r0, sizeof(float) * m);
        const size_t bytes = sizeof(float) * ((size_t)2 * R * S + (size_t)R * D + 2 * (size_t)R);
        FHD_CK(b, cudaMemcpyAsync(b->d_stage, h, bytes, cudaMemcpyHostToDevice, b->s_main));
        FHD_CK(b, cudaEventRecord(b->ev_stage[k], b->s_main));
        const uint64_t new_size = b->size + m < b->N ? b->size + m : b->N;
        fhd__replay_add_args a;
        memset(&a, 0, sizeof a);
        a.obs = b->d_stage;
        a.next = b->d_stage + (size_t)R * S;
        a.act = (const int32_t *)(b->d_stage + (size_t)2 * R * S);
        a.ret = b->d_stage + (size_t)2 * R * S + (size_t)R * D;
        a.disc = a.ret + R;
        a.n = m;
        a.pos = b->pos;
        a.N = b->N;
        a.S = S;
        a.D = D;
        a.r_obs = b->r_obs;
        a.r_next = b->r_next;
        a.r_act = b->r_act;
        a.r_ret = b->r_ret;
        a.r_disc = b->r_disc;
        a.prioritized = b->prioritized;
        a.nodes = b->nodes;
        a.leaves = b->leaves;
        a.st = b->st;
        a.new_size = new_size;
        FHD_CK(b, fhd__cuda_replay_add(&a, b->s_main));
        b->pos = (b->pos + m) % b->N;
        b->size = new_size;
    }
    return FHD_OK;
}
