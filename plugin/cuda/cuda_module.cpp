/* cuda_module.cpp - the module's one exported symbol, the ops table, errors, create/destroy.
 *
 * libfoxhunt_dqn_cuda.so is dlopened by the core (plugin/backend_loader.c) and exports only
 * fhd_cuda_module_get_ops (version script cuda_module.map, hidden visibility). It links the CUDA
 * runtime and cuBLASLt, never the core: the layout and the initial parameters come in through
 * create().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "linear.cuh"
#include "sumtree.h"

/* ---- errors ----------------------------------------------------------------------------- */

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int32_t fhd__cuda_fail(fhd__backend *b, cudaError_t e, const char *file, int line,
                       const char *expr) {
    (void)cudaGetLastError(); /* clear a non-sticky error so later checks see their own */
    snprintf(b->err, sizeof b->err, "%s:%d: %s failed: %s (%s)", base_name(file), line, expr,
             cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? FHD_ERR_OUT_OF_MEMORY : FHD_ERR_DEVICE;
}

int32_t fhd__cublas_fail(fhd__backend *b, cublasStatus_t s, const char *file, int line,
                         const char *expr) {
    snprintf(b->err, sizeof b->err, "%s:%d: %s failed: %s (%s)", base_name(file), line, expr,
             cublasLtGetStatusString(s), cublasLtGetStatusName(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? FHD_ERR_OUT_OF_MEMORY : FHD_ERR_DEVICE;
}

int32_t fhd__cuda_failf(fhd__backend *b, int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- the allocation list ------------------------------------------------------------------ */

/* Every buffer of the backend is one item of this list: plan_buffers adds them, allocate takes
 * them in order, cuda_destroy frees them through the same list (b->allocs). */

enum { MEM_DEVICE = 0, MEM_PINNED = 1 };

typedef struct alloc_item {
    void **ptr;
    size_t bytes;
    int kind;
    int group; /* for the out-of-memory message */
} alloc_item;

enum { G_REPLAY = 0, G_TREE, G_PARAMS, G_ACT, G_WORK, G_COUNT };
static const char *const group_names[G_COUNT] = {"replay ring", "sum tree",
                                                 "parameters, gradient and Adam moments",
                                                 "activations and batch", "workspaces and scratch"};

struct fhd__alloc_list {
    alloc_item items[160];
    int n;
    size_t dev[G_COUNT];
    size_t pinned;
};
typedef fhd__alloc_list alloc_plan;

static void plan_add(alloc_plan *p, void *ptr, size_t bytes, int kind, int group) {
    if (p->n == (int)(sizeof p->items / sizeof p->items[0]))
        return; /* cannot happen: 160 > the most items plan_buffers adds (about 110) */
    alloc_item *it = &p->items[p->n++];
    it->ptr = (void **)ptr;
    it->bytes = bytes ? bytes : 16;
    it->kind = kind;
    it->group = group;
    if (kind == MEM_DEVICE)
        p->dev[group] += it->bytes;
    else
        p->pinned += it->bytes;
}

void fhd__cuda_alloc_add(struct fhd__alloc_list *p, void *ptr, size_t bytes) {
    plan_add(p, ptr, bytes, MEM_DEVICE, G_ACT);
}

static double mib(size_t b) {
    return (double)b / 1048576.0;
}

/* ---- destroy ---------------------------------------------------------------------------- */

static void cuda_destroy(fhd__backend *b) {
    if (!b)
        return;
    cudaSetDevice(b->device);
    if (b->s_main)
        cudaStreamSynchronize(b->s_main);
    if (b->s_side)
        cudaStreamSynchronize(b->s_side);
    if (b->s_prio)
        cudaStreamSynchronize(b->s_prio);
    if (b->s_aux)
        cudaStreamSynchronize(b->s_aux);
    if (b->s_hdw)
        cudaStreamSynchronize(b->s_hdw);
    fhd__cuda_drop_graphs(b);
    for (uint32_t l = 0; l < FHD_MAXL; l++) {
        fhd__gemm *gs[6] = {&b->fwd_on[l], &b->fwd_tg[l], &b->bwd_dw[l], &b->bwd_dx[l],
                            &b->bwd_dx2[l], &b->bwd_dzt[l]};
        for (int i = 0; i < 6; i++)
            if (gs[i]->ready || gs[i]->desc || gs[i]->tdesc)
                fhd__gemm_destroy(gs[i]);
    }
    if (b->bwd_dw0b.ready || b->bwd_dw0b.desc)
        fhd__gemm_destroy(&b->bwd_dw0b);
    fhd__cuda_conv_destroy(b);
    for (uint32_t i = 0; i < FHD_CUDA_ACT_CACHE; i++) {
        for (uint32_t l = 0; l < FHD_MAXL; l++)
            if (b->act_cache[i].fwd[l].ready || b->act_cache[i].fwd[l].desc)
                fhd__gemm_destroy(&b->act_cache[i].fwd[l]);
        for (uint32_t c = 0; c < FHD_MAX_CONV_LAYERS; c++)
            if (b->act_cache[i].cfwd[c].ready || b->act_cache[i].cfwd[c].desc)
                fhd__gemm_destroy(&b->act_cache[i].cfwd[c]);
        for (int k = 0; k < 2; k++)
            if (b->act_cache[i].exec[k])
                cudaGraphExecDestroy(b->act_cache[i].exec[k]);
    }
    if (b->lt)
        cublasLtDestroy(b->lt);
    if (b->allocs) { /* every buffer, through the list that allocated it, last first */
        for (int i = b->allocs->n - 1; i >= 0; i--) {
            alloc_item *it = &b->allocs->items[i];
            if (*it->ptr)
                (void)(it->kind == MEM_DEVICE ? cudaFree(*it->ptr) : cudaFreeHost(*it->ptr));
            *it->ptr = NULL;
        }
        free(b->allocs);
    }
    for (int i = 0; i < FHD_CUDA_SNAPSHOTS; i++) {
        if (b->ev_snaps[i])
            cudaEventDestroy(b->ev_snaps[i]);
        for (int k = 0; k < 2; k++)
            if (b->ev_rate[i][k])
                cudaEventDestroy(b->ev_rate[i][k]);
    }
    cudaEvent_t evs[] = {b->ev_pre,   b->ev_sample,   b->ev_fork,     b->ev_tgt, b->ev_dw,
                         b->ev_loss,  b->ev_prio,     b->ev_stage[0], b->ev_stage[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            cudaEventDestroy(evs[i]);
    for (uint32_t l = 0; l < FHD_MAXL; l++) {
        cudaEvent_t le[3] = {b->ev_dz[l], b->ev_aux_fork[l], b->ev_aux_join[l]};
        for (int i = 0; i < 3; i++)
            if (le[i])
                cudaEventDestroy(le[i]);
    }
    if (b->ev_aux_dw)
        cudaEventDestroy(b->ev_aux_dw);
    if (b->ev_hdw)
        cudaEventDestroy(b->ev_hdw);
    if (b->ev_tree)
        cudaEventDestroy(b->ev_tree);
    if (b->ev_ahead)
        cudaEventDestroy(b->ev_ahead);

    fhd__cuda_img_destroy(b);
    if (b->s_main)
        cudaStreamDestroy(b->s_main);
    if (b->s_side)
        cudaStreamDestroy(b->s_side);
    if (b->s_prio)
        cudaStreamDestroy(b->s_prio);
    if (b->s_aux)
        cudaStreamDestroy(b->s_aux);
    if (b->s_hdw)
        cudaStreamDestroy(b->s_hdw);
    (void)cudaGetLastError();
    free(b);
}

/* ---- create ----------------------------------------------------------------------------- */

static int32_t create_objects(fhd__backend *b) {
    FHD_CK(b, cudaStreamCreateWithFlags(&b->s_main, cudaStreamNonBlocking));
    FHD_CK(b, cudaStreamCreateWithFlags(&b->s_side, cudaStreamNonBlocking));
    FHD_CK(b, cudaStreamCreateWithFlags(&b->s_prio, cudaStreamNonBlocking));
    /* the further streams only where the plan puts a node on them: the number of streams a
     * process creates changes how the graph's branches map to the device's hardware queues */
    if (b->plan.use_aux)
        FHD_CK(b, cudaStreamCreateWithFlags(&b->s_aux, cudaStreamNonBlocking));
    FHD_CK(b, cudaEventCreateWithFlags(&b->ev_aux_dw, cudaEventDisableTiming));
    if (b->plan.use_hdw)
        FHD_CK(b, cudaStreamCreateWithFlags(&b->s_hdw, cudaStreamNonBlocking));
    FHD_CK(b, cudaEventCreateWithFlags(&b->ev_hdw, cudaEventDisableTiming));
    FHD_CK(b, cudaEventCreateWithFlags(&b->ev_tree, cudaEventDisableTiming));
    FHD_CK(b, cudaEventCreateWithFlags(&b->ev_ahead, cudaEventDisableTiming));

    cudaEvent_t *evs[] = {&b->ev_pre,  &b->ev_sample, &b->ev_fork,     &b->ev_tgt,     &b->ev_dw,
                          &b->ev_loss, &b->ev_prio,   &b->ev_stage[0], &b->ev_stage[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        FHD_CK(b, cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
    for (int i = 0; i < FHD_CUDA_SNAPSHOTS; i++)
        FHD_CK(b, cudaEventCreateWithFlags(&b->ev_snaps[i], cudaEventDisableTiming));
    for (int i = 0; i < FHD_CUDA_SNAPSHOTS; i++) /* timing: the executed rate */
        for (int k = 0; k < 2; k++)
            FHD_CK(b, cudaEventCreate(&b->ev_rate[i][k]));
    for (uint32_t l = 0; l <= b->lo.L; l++) {
        FHD_CK(b, cudaEventCreateWithFlags(&b->ev_dz[l], cudaEventDisableTiming));
        FHD_CK(b, cudaEventCreateWithFlags(&b->ev_aux_fork[l], cudaEventDisableTiming));
        FHD_CK(b, cudaEventCreateWithFlags(&b->ev_aux_join[l], cudaEventDisableTiming));
    }
    FHD_CKB(b, cublasLtCreate(&b->lt));
    return FHD_OK;
}

static void plan_buffers(fhd__backend *b, alloc_plan *p) {
    const fhd__layout *lo = &b->lo;
    const uint64_t P = b->P, N = b->N, S = lo->S, D = lo->D, B = b->B, KT = lo->KT;
    const uint64_t HO = lo->head_out, R = b->act_rows;
    uint64_t W = 1; /* torso width: the target ping-pong and act buffers hold torso outputs */
    for (uint32_t l = 0; l < lo->L; l++)
        W = lo->layers[l].out > W ? lo->layers[l].out : W;
    const size_t f = sizeof(float);
    fhd__cuda_img *g = b->img;
    /* replay: float32 rows, or (cuda_frames.h) uint8 rows or the frame-once replay */
    if (!g->u8 && !g->frames) {
        plan_add(p, &b->r_obs, N * S * f, MEM_DEVICE, G_REPLAY);
        plan_add(p, &b->r_next, N * S * f, MEM_DEVICE, G_REPLAY);
    }
    /* ---- image observations (cuda_frames.h) ---- */
    if (g->u8 && !g->frames) {
        plan_add(p, &g->r_obs8, N * S, MEM_DEVICE, G_REPLAY);
        plan_add(p, &g->r_next8, N * S, MEM_DEVICE, G_REPLAY);
    }
    if (g->frames) {
        plan_add(p, &g->d_frames, g->M * g->fbytes, MEM_DEVICE, G_REPLAY);
        plan_add(p, &g->d_t_obs, N * g->k * 8, MEM_DEVICE, G_REPLAY);
        plan_add(p, &g->d_t_next, N * g->k * 8, MEM_DEVICE, G_REPLAY);
        plan_add(p, &g->d_first_live, 8, MEM_DEVICE, G_REPLAY);
        plan_add(p, &g->d_ts, g->ts_bytes, MEM_DEVICE, G_ACT);
        plan_add(p, &g->cache, g->C * g->fbytes, MEM_PINNED, 0);
        plan_add(p, &g->readback, g->fbytes, MEM_PINNED, 0);
        plan_add(p, &g->h_ts[0], g->ts_bytes, MEM_PINNED, 0);
        plan_add(p, &g->h_ts[1], g->ts_bytes, MEM_PINNED, 0);
    }
    if (g->cvt)
        plan_add(p, &g->x_conv, 2 * B * S * f, MEM_DEVICE, G_ACT);
    if (g->u8)
        plan_add(p, &g->act_x8, R * S, MEM_DEVICE, G_ACT);
    /* ---- */
    plan_add(p, &b->r_act, N * D * 4, MEM_DEVICE, G_REPLAY);
    plan_add(p, &b->r_ret, N * f, MEM_DEVICE, G_REPLAY);
    plan_add(p, &b->r_disc, N * f, MEM_DEVICE, G_REPLAY);
    if (b->prioritized)
        plan_add(p, &b->nodes, 2 * (size_t)b->leaves * 8, MEM_DEVICE, G_TREE);
    /* parameters */
    plan_add(p, &b->params, (b->T + P) * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->grad, P * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->adam_m, P * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->adam_v, P * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->sn, 2 * lo->sn_size * f, MEM_DEVICE, G_PARAMS);
    /* activations and batch */
    for (uint32_t l = 0; l <= lo->L; l++) {
        const uint64_t w = l == lo->L ? b->HOs : lo->layers[l].out;
        /* pair_fwd0: h[0] holds the target's layer 0 too (cuda_plan.h) */
        const uint64_t nets = l == 0 && b->plan.pair_fwd0 ? 2 : 1;
        plan_add(p, &b->h[l], nets * b->rows_on * w * f, MEM_DEVICE, G_ACT);
        plan_add(p, &b->dz[l], B * w * f, MEM_DEVICE, G_ACT);
        if (b->plan.split_dx[l])
            plan_add(p, &b->dxp[l], B * lo->layers[l].in * f, MEM_DEVICE, G_ACT);
        if (b->plan.dz_t[l])
            plan_add(p, &b->dzt[l], B * w * f, MEM_DEVICE, G_ACT);
    }
    if (b->plan.split_dw0 || b->plan.fuse_dw0) /* one further part, or a part per further chunk */
        plan_add(p, &b->gpart0,
                 (size_t)(b->plan.split_dw0 ? 1 : fhd__cuda_relu_dw_chunks(b->B) - 1) *
                     lo->layers[0].out * lo->layers[0].in * f,
                 MEM_DEVICE, G_WORK);
    plan_add(p, &b->tg_a, B * W * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->tg_b, B * W * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->head_t, B * b->HOs * f, MEM_DEVICE, G_ACT);
    /* obs | next_obs (float32, or uint8 rounded up to 16 bytes) | actions | R | disc | w */
    b->gbatch_bytes = (g->u8 ? (2 * B * S + 15) / 16 * 16 : 2 * B * S * f) + (B * D + 3 * B) * f;
    plan_add(p, &b->gbatch, b->gbatch_bytes, MEM_DEVICE, G_ACT);
    fhd__cuda_conv_plan_buffers(b, p);
    plan_add(p, &b->w_out, B * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->td, B * D * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->y, B * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->idx, B * 4, MEM_DEVICE, G_ACT);
    plan_add(p, &b->qs, B * 8, MEM_DEVICE, G_ACT);
    plan_add(p, &b->td_row, B * 4, MEM_DEVICE, G_ACT);
    if (b->cfg.guard.on && b->prioritized) /* the training guard's staged priorities */
        plan_add(p, &b->prio_stage, B * 8, MEM_DEVICE, G_ACT);
    plan_add(p, &b->act_x, R * S * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->act_a, R * W * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->act_b, R * W * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->act_head, R * b->HOs * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->act_q, R * KT * f, MEM_DEVICE, G_ACT);
    plan_add(p, &b->act_greedy, R * D * 4, MEM_DEVICE, G_ACT);
    /* replay staging rows (float32 or uint8 observations; the frame replay stages its own) */
    const uint64_t stage_obs = g->frames ? 0 : S;
    plan_add(p, &b->d_stage, (size_t)b->stage_rows * (2 * stage_obs + D + 2) * f, MEM_DEVICE,
             G_ACT);
    /* small state, scratch, workspaces */
    plan_add(p, &b->st, sizeof(fhd__dev_scalars), MEM_DEVICE, G_WORK);
    plan_add(p, &b->sn_sigma, 3 * FHD_MAX_HIDDEN_LAYERS * f, MEM_DEVICE, G_WORK);
    plan_add(p, &b->sn_inv, 3 * FHD_MAX_HIDDEN_LAYERS * f, MEM_DEVICE, G_WORK);
    plan_add(p, &b->sn_norms, 2 * FHD_MAX_HIDDEN_LAYERS * f, MEM_DEVICE, G_WORK);
    uint64_t scr = 0, sigma_blocks = 0;
    for (uint32_t l = 0; l < lo->L; l++)
        if (lo->layers[l].sn) {
            const uint32_t m = lo->layers[l].out, k = lo->layers[l].in;
            scr += fhd__cuda_sn_scratch_floats(m, k);
            sigma_blocks += fhd__cuda_sn_job_blocks(SN_JOB_SIGMA, m, k);
        }
    plan_add(p, &b->sn_scratch, scr * f, MEM_DEVICE, G_WORK);
    plan_add(p, &b->sn_partial, 2 * sigma_blocks * 8, MEM_DEVICE, G_WORK);
    plan_add(p, &b->part_min, fhd__cuda_sample_grid(b->B) * 8, MEM_DEVICE, G_WORK);
    const uint64_t lg = fhd__cuda_td_loss_grid(b->B);
    plan_add(p, &b->colpart, lg * HO * f, MEM_DEVICE, G_WORK);
    plan_add(p, &b->statpart, lg * 4 * 8, MEM_DEVICE, G_WORK);
    /* bias-gradient partials of the torso layers: ReLU-backward chunks, or loss blocks for the
     * layer below the head when the loss kernel does its dx */
    uint64_t bias_total = 0;
    for (uint32_t l = 0; l < lo->L; l++) {
        const uint64_t chunks = fhd__cuda_relu_bgrad_chunks(b->B);
        const uint64_t parts = l + 1 == lo->L && lg > chunks ? lg : chunks;
        plan_add(p, &b->bpart[l], parts * lo->layers[l].out * f, MEM_DEVICE, G_WORK);
        bias_total += lo->layers[l].out;
    }
    bias_total += HO;
    for (uint32_t c = 0; c < lo->NC; c++) /* the conv layers' biases are segments too */
        bias_total += lo->conv[c].cout;
    /* the optimiser grid: one block per 512 weights at most and per 32 biases, one more per
     * segment */
    plan_add(p, &b->opt_partial,
             (P / FHD_OPT_CHUNK_MIN + bias_total / FHD_OPT_BIAS_COLS + 2 * FHD_OPT_MAX_SEGMENTS + 2) *
                 4 * 8,
             MEM_DEVICE, G_WORK);
    plan_add(p, &b->clip, sizeof(fhd__clip_info), MEM_DEVICE, G_WORK);
    plan_add(p, &b->counters, 64 * 4, MEM_DEVICE, G_WORK);
    plan_add(p, &b->d_one, 2 * f, MEM_DEVICE, G_WORK);
    plan_add(p, &b->ws_main, FHD_CUDA_WORKSPACE_BYTES, MEM_DEVICE, G_WORK);
    plan_add(p, &b->ws_side, FHD_CUDA_WORKSPACE_BYTES, MEM_DEVICE, G_WORK);
    plan_add(p, &b->ws_prio, FHD_CUDA_WORKSPACE_BYTES, MEM_DEVICE, G_WORK);
    if (b->plan.use_aux)
        plan_add(p, &b->ws_aux, FHD_CUDA_WORKSPACE_BYTES, MEM_DEVICE, G_WORK);
    /* pinned host buffers */
    plan_add(p, &b->h_act_obs, R * S * f, MEM_PINNED, 0);
    plan_add(p, &b->h_act_q, R * KT * f, MEM_PINNED, 0);
    plan_add(p, &b->h_act_greedy, R * D * 4, MEM_PINNED, 0);
    plan_add(p, &b->h_stage[0], (size_t)b->stage_rows * (2 * stage_obs + D + 2) * f, MEM_PINNED,
             0);
    plan_add(p, &b->h_stage[1], (size_t)b->stage_rows * (2 * stage_obs + D + 2) * f, MEM_PINNED,
             0);
    plan_add(p, &b->h_batch, b->gbatch_bytes, MEM_PINNED, 0);
    plan_add(p, &b->h_tdy, (B * D + B) * f, MEM_PINNED, 0);
    for (int i = 0; i < FHD_CUDA_SNAPSHOTS; i++)
        plan_add(p, &b->h_snap[i], sizeof(fhd__dev_scalars), MEM_PINNED, 0);
}

static int32_t oom_message(fhd__backend *b, const alloc_plan *p, const char *what, size_t bytes) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    (void)cudaGetLastError();
    size_t sum = 0;
    for (int g = 0; g < G_COUNT; g++)
        sum += p->dev[g];
    char ring[160]; /* what the replay group holds */
    if (b->img->frames)
        snprintf(ring, sizeof ring,
                 "%llu frames of %llu bytes + replay_capacity %u x (16 x frame_stack %u + 4 x "
                 "%u actions + 8) bytes",
                 (unsigned long long)b->img->M, (unsigned long long)b->img->fbytes, b->N,
                 b->img->k, b->lo.D);
    else
        snprintf(ring, sizeof ring,
                 "replay_capacity %u x (2 x obs_dim %u x %u + %u actions x 4 + 8) bytes", b->N,
                 b->lo.S, b->img->u8 ? 1u : 4u, b->lo.D);
    return fhd__cuda_failf(
        b, FHD_ERR_OUT_OF_MEMORY,
        "cuda backend: out of device memory (%s of %.1f MiB failed): the learner needs %.1f MiB "
        "on %s: replay %.1f MiB (%s), sum tree %.1f MiB, parameters/gradient/Adam %.1f MiB "
        "(%llu parameters), activations and batch %.1f MiB (batch_size %u), workspaces %.1f "
        "MiB; the device has %.1f MiB free of %.1f MiB",
        what, mib(bytes), mib(sum), b->device_name, mib(p->dev[G_REPLAY]), ring,
        mib(p->dev[G_TREE]), mib(p->dev[G_PARAMS]), (unsigned long long)b->P, mib(p->dev[G_ACT]),
        b->B, mib(p->dev[G_WORK]), mib(fr), mib(tot));
}

static int32_t allocate(fhd__backend *b, alloc_plan *p) {
    size_t fr = 0, tot = 0, sum = 0;
    FHD_CK(b, cudaMemGetInfo(&fr, &tot));
    for (int g = 0; g < G_COUNT; g++)
        sum += p->dev[g];
    if (sum > fr)
        return oom_message(b, p, "the plan", sum);
    for (int i = 0; i < p->n; i++) {
        alloc_item *it = &p->items[i];
        cudaError_t e = it->kind == MEM_DEVICE ? cudaMalloc(it->ptr, it->bytes)
                                               : cudaHostAlloc(it->ptr, it->bytes, 0);
        if (e == cudaErrorMemoryAllocation) {
            *it->ptr = NULL;
            (void)cudaGetLastError();
            return it->kind == MEM_DEVICE ? oom_message(b, p, group_names[it->group], it->bytes)
                                          : fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY,
                                                            "cuda backend: out of pinned host "
                                                            "memory (%.1f MiB)",
                                                            mib(it->bytes));
        }
        if (e != cudaSuccess) {
            *it->ptr = NULL;
            return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaMalloc");
        }
    }
    return FHD_OK;
}

/* Initial contents: parameters, SN vectors, zeroed state; all before the first update. */
static int32_t initialise(fhd__backend *b, const float *params, const float *sn) {
    const fhd__layout *lo = &b->lo;
    const uint64_t P = b->P;
    cudaStream_t s = b->s_main;
    FHD_CK(b, cudaMemcpyAsync(b->params, params, P * sizeof(float), cudaMemcpyHostToDevice, s));
    if (b->T > P) /* the gap between the networks is never read; keep it defined */
        FHD_CK(b, cudaMemsetAsync(b->params + P, 0, (b->T - P) * sizeof(float), s));
    FHD_CK(b, cudaMemcpyAsync(b->params + b->T, params + P, P * sizeof(float),
                              cudaMemcpyHostToDevice, s));
    if (lo->sn_size)
        FHD_CK(b, cudaMemcpyAsync(b->sn, sn, 2 * lo->sn_size * sizeof(float),
                                  cudaMemcpyHostToDevice, s));
    /* zero-initialised state (the CPU reference callocs the same buffers) */
    FHD_CK(b, cudaMemsetAsync(b->grad, 0, P * sizeof(float), s));
    FHD_CK(b, cudaMemsetAsync(b->adam_m, 0, P * sizeof(float), s));
    FHD_CK(b, cudaMemsetAsync(b->adam_v, 0, P * sizeof(float), s));
    FHD_CK(b, cudaMemsetAsync(b->idx, 0, b->B * sizeof(uint32_t), s));
    FHD_CK(b, cudaMemsetAsync(b->gbatch, 0, b->gbatch_bytes, s));
    for (uint32_t l = 0; l <= lo->L; l++)
        FHD_CK(b, cudaMemsetAsync(b->dz[l], 0,
                                  (size_t)b->B * (l == lo->L ? b->HOs : lo->layers[l].out) *
                                      sizeof(float),
                                  s));
    FHD_CK(b, cudaMemsetAsync(b->w_out, 0, b->B * sizeof(float), s));
    FHD_CK(b, cudaMemsetAsync(b->counters, 0, 64 * 4,
                              s));
    if (b->prioritized)
        FHD_CK(b, cudaMemsetAsync(b->nodes, 0, 2 * (size_t)b->leaves * sizeof(uint64_t), s));
    const float consts[2] = {1.0f, 0.0f};
    FHD_CK(b, cudaMemcpyAsync(b->d_one, consts, sizeof consts, cudaMemcpyHostToDevice, s));
    b->d_zero = b->d_one + 1;
    fhd__dev_scalars st;
    memset(&st, 0, sizeof st);
    st.max_q = b->max_q;
    FHD_CK(b, cudaMemcpyAsync(b->st, &st, sizeof st, cudaMemcpyHostToDevice, s));
    b->snap_last = st;
    /* the staging events start completed */
    FHD_CK(b, cudaEventRecord(b->ev_stage[0], s));
    FHD_CK(b, cudaEventRecord(b->ev_stage[1], s));
    return fhd__cuda_sync(b, s);
}

static int32_t cuda_create(const fhd__config *cfg, const fhd__layout *lo, const float *params,
                           const float *sn, fhd__backend **out, char *msg, size_t msg_cap) {
    *out = NULL;
    fhd__backend *b = (fhd__backend *)calloc(1, sizeof(*b));
    if (!b) {
        snprintf(msg, msg_cap, "cuda backend: out of host memory allocating the learner");
        return FHD_ERR_OUT_OF_MEMORY;
    }
    b->cfg = *cfg;
    b->lo = *lo;
    b->device = cfg->device;
    b->P = lo->num_params;
    b->T = (b->P + 63) / 64 * 64;
    b->B = cfg->batch_size;
    b->N = cfg->replay_capacity;
    b->prioritized = cfg->replay == FHD_REPLAY_PRIORITIZED;
    b->leaves = fhd__sumtree_leaf_count(b->N);
    b->rows_on = cfg->double_dqn ? 2 * b->B : b->B;
    b->HOs = (lo->head_out + 3u) & ~3u;
    b->has_sn = lo->num_sn > 0;
    b->max_q = fhd__prio_quantize(1.0);
    {
        /* act chunk rows: the front asks for at most max(num_envs, 256) rows per call */
        uint64_t r = cfg->num_envs > 256 ? cfg->num_envs : 256;
        const uint64_t cap = (UINT64_C(1) << 26) / (lo->max_width ? lo->max_width : 1);
        b->act_rows = (uint32_t)(r < cap ? r : (cap ? cap : 1));
        uint64_t st = (uint64_t)cfg->num_envs * cfg->n_step;
        b->stage_rows = (uint32_t)(st < 65536 ? st : 65536);
    }
    int32_t rc = FHD_OK;
    cudaError_t e = cudaSetDevice(b->device);
    if (e != cudaSuccess)
        rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaSetDevice");
    if (rc == FHD_OK) {
        cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, b->device);
        if (e != cudaSuccess) {
            rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaGetDeviceProperties");
        } else {
            b->dev.sm = prop.major * 10 + prop.minor;
            b->dev.sm_count = prop.multiProcessorCount;
            fhd__cuda_plan_make(lo, cfg, &b->dev, &b->plan);
            snprintf(b->device_name, sizeof b->device_name, "%s (cuda:%d, sm_%d%d, %.0f GiB)",
                     prop.name, b->device, prop.major, prop.minor,
                     (double)prop.totalGlobalMem / 1073741824.0);
        }
    }
    if (rc == FHD_OK)
        rc = fhd__cuda_conv_check(b);
    if (rc == FHD_OK) {
        fhd__cuda_conv_init(b);
        rc = create_objects(b);
    }
    if (rc == FHD_OK)
        rc = fhd__cuda_conv_create_events(b);
    if (rc == FHD_OK) { /* cuda_destroy frees through the list whatever allocate got to */
        b->allocs = (alloc_plan *)calloc(1, sizeof(alloc_plan));
        if (!b->allocs)
            rc = fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
    }
    if (rc == FHD_OK)
        rc = fhd__cuda_img_setup(b);
    if (rc == FHD_OK) {
        plan_buffers(b, b->allocs);
        rc = allocate(b, b->allocs);
    }
    if (rc == FHD_OK) { /* act's greedy actions straight into the pinned buffer, where mapped */
        void *dg = NULL;
        if (cudaHostGetDevicePointer(&dg, b->h_act_greedy, 0) == cudaSuccess)
            b->d_act_greedy_host = (int32_t *)dg;
        (void)cudaGetLastError();
    }
    if (rc == FHD_OK) {
        const size_t xb = b->gbatch_bytes - ((size_t)b->B * lo->D + 3 * (size_t)b->B) * 4;
        b->g_x = b->img->u8 ? NULL : b->gbatch;
        b->g_x8 = b->img->u8 ? (uint8_t *)(void *)b->gbatch : NULL;
        b->g_act = (int32_t *)(void *)((char *)b->gbatch + xb);
        b->g_ret = (float *)(void *)(b->g_act + (size_t)b->B * lo->D);
        b->g_disc = b->g_ret + b->B;
        b->g_w = b->g_disc + b->B;
        b->mlp_in = lo->NC ? b->conv.flat_on : b->img->cvt ? b->img->x_conv : b->g_x;
        b->mlp_in_tg = lo->NC ? b->conv.flat_tg : b->mlp_in + (size_t)b->B * lo->layers[0].in;
        rc = initialise(b, params, sn);
    }
    if (rc == FHD_OK)
        rc = fhd__cuda_img_init(b);
    if (rc == FHD_OK)
        rc = fhd__cuda_prepare_kernels(b);
    if (rc == FHD_OK)
        rc = fhd__cuda_capture(b);
    if (rc != FHD_OK) {
        snprintf(msg, msg_cap, "%s", b->err);
        cuda_destroy(b);
        return rc;
    }
    *out = b;
    return FHD_OK;
}

static const char *cuda_error(const fhd__backend *b) {
    return b ? b->err : "";
}

static const char *cuda_device_name(const fhd__backend *b) {
    return b ? b->device_name : "cuda";
}

/* ---- the ops table and the module entry ------------------------------------------------- */

static int32_t op_q_values(fhd__backend *b, uint32_t n, const float *obs, float *q,
                           int32_t *greedy) {
    return fhd__cuda_q_values(b, n, obs, q, greedy);
}
static int32_t op_replay_add(fhd__backend *b, uint32_t n, const float *obs,
                             const int32_t *actions, const float *returns, const float *next_obs,
                             const float *disc) {
    return fhd__cuda_replay_append(b, n, obs, actions, returns, next_obs, disc);
}
static int32_t op_train(fhd__backend *b, uint32_t n, fhd_train_stats *st) {
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b)); /* the frame replay's pending adds first */
    return fhd__cuda_train(b, n, st);
}
static int32_t op_train_batch(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st) {
    return fhd__cuda_train_batch(b, hb, st);
}
static int32_t op_read(fhd__backend *b, int kind, uint64_t off, uint64_t n, void *dst) {
    if (fhd__cuda_img_kind(b, kind))
        return fhd__cuda_img_read(b, kind, off, n, dst);
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    return fhd__cuda_read(b, kind, off, n, dst);
}
static int32_t op_write(fhd__backend *b, int kind, uint64_t off, uint64_t n, const void *src) {
    if (fhd__cuda_img_kind(b, kind))
        return fhd__cuda_img_write(b, kind, off, n, src);
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    return fhd__cuda_write(b, kind, off, n, src);
}
static int32_t op_get_scalars(fhd__backend *b, fhd__backend_scalars *o) {
    return fhd__cuda_get_scalars(b, o);
}
static int32_t op_set_scalars(fhd__backend *b, const fhd__backend_scalars *in) {
    if (in->replay_pos >= b->N || in->replay_size > b->N || in->max_priority_q == 0)
        return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT, "replay position/size out of range");
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    FHD_TRY(fhd__cuda_set_scalars(b, in));
    return fhd__cuda_img_set_scalars(b, in);
}
static int32_t op_latest_stats(fhd__backend *b, fhd__update_stats *o) {
    return fhd__cuda_latest_stats(b, o);
}

static int32_t op_check_invariants(fhd__backend *b, char *msg, size_t cap) {
    if (b->img->frames)
        return fhd__cuda_img_check(b, msg, cap);
    return fhd__cuda_check_invariants(b, msg, cap);
}

static int32_t op_describe(fhd__backend *b, char *buf, size_t cap) {
    return fhd__cuda_describe(b, buf, cap);
}

static int32_t op_finish(fhd__backend *b) {
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    return fhd__cuda_poll_snapshots(b); /* every snapshot is complete now */
}

static const fhd__backend_ops cuda_ops = {
    FHD_BACKEND_OPS_VERSION,
    "cuda",
    cuda_create,
    cuda_destroy,
    cuda_error,
    cuda_device_name,
    op_q_values,
    op_replay_add,
    op_train,
    op_train_batch,
    op_read,
    op_write,
    op_get_scalars,
    op_set_scalars,
    op_latest_stats,
    op_check_invariants,
    op_finish,
    op_describe,
    fhd__cuda_q_values_u8,
    fhd__cuda_replay_append_u8,
    fhd__cuda_frame_add,
    fhd__cuda_replay_add_ids,
};

extern "C" __attribute__((visibility("default"))) const fhd__backend_ops *
fhd_cuda_module_get_ops(uint32_t ops_version, int device, char *msg, size_t msg_cap) {
    if (ops_version != FHD_BACKEND_OPS_VERSION) {
        snprintf(msg, msg_cap, "the CUDA module implements backend ops version %u, not %u",
                 FHD_BACKEND_OPS_VERSION, ops_version);
        return NULL;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(msg, msg_cap, "no usable CUDA driver or device: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        (void)cudaGetLastError();
        return NULL;
    }
    if (n == 0) {
        snprintf(msg, msg_cap, "no CUDA device is present");
        return NULL;
    }
    if (device < 0 || device >= n) {
        snprintf(msg, msg_cap, "$.device is %d; this machine has %d CUDA device(s): allowed [0, %d]",
                 device, n, n - 1);
        return NULL;
    }
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        snprintf(msg, msg_cap, "cannot query CUDA device %d", device);
        (void)cudaGetLastError();
        return NULL;
    }
    if (major < 8) {
        snprintf(msg, msg_cap,
                 "CUDA device %d has compute capability %d.%d; the CUDA backend needs 8.0 or newer",
                 device, major, minor);
        return NULL;
    }
    return &cuda_ops;
}
