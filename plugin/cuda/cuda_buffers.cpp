/* cuda_buffers.cpp - every device and pinned buffer of the CUDA backend, as one allocation list:
 * plan_buffers adds the items (sizes from the layout, the config and the plan), allocate takes
 * them in order and names the group that ran out of memory, fhd__cuda_free_buffers frees them
 * through the same list (docs/design.md section 5, "Resources and the plan").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_frames.h"
#include "cuda_internal.h"
#include "linear.cuh"

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
    alloc_item items[192];
    int n;
    size_t dev[G_COUNT];
    size_t pinned;
};
typedef fhd__alloc_list alloc_plan;

static void plan_add(alloc_plan *p, void *ptr, size_t bytes, int kind, int group) {
    if (p->n == (int)(sizeof p->items / sizeof p->items[0]))
        return; /* cannot happen: 192 > the most items plan_buffers adds (160: 8 conv and 8
                 * hidden layers, the frame replay, every split and transposition, pruning) */
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
        plan_add(p, &g->act_ids, R * g->k * 8, MEM_DEVICE, G_ACT);
        plan_add(p, &g->h_act_ids, R * g->k * 8, MEM_PINNED, 0);
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
    /* distributed: the all-reduce's buffer is the gradient, the loss and the checksum slots
     * (kernels/dist.cuh), one contiguous range */
    const uint64_t grad_tail =
        b->cfg.distributed.on ? 1 + (uint64_t)FHD_DIST_CK_WORDS * FHD_DIST_MAX_RANKS : 0;
    plan_add(p, &b->grad, (P + grad_tail) * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->adam_m, P * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->adam_v, P * f, MEM_DEVICE, G_PARAMS);
    plan_add(p, &b->sn, 2 * lo->sn_size * f, MEM_DEVICE, G_PARAMS);
    if (b->plan.prune) { /* the masks (one network's layout) and the selection's scratch */
        plan_add(p, &b->mask, P * f, MEM_DEVICE, G_PARAMS);
        plan_add(p, &b->prune_groups, lo->num_masks * sizeof(fhd__prune_group), MEM_DEVICE, G_WORK);
        plan_add(p, &b->prune_hist, (size_t)lo->num_masks * FHD_PRUNE_BINS * 4, MEM_DEVICE, G_WORK);
        plan_add(p, &b->prune_done, 4, MEM_DEVICE, G_WORK);
    }
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
    fhd__cuda_bf16_plan_buffers(b, p);
    fhd__cuda_head_pad_plan_buffers(b, p);
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
    /* scalars, detail (distributed: and the checksum record, then the pack kernel's state) */
    const size_t rec =
        sizeof(fhd__dev_record) +
        (b->cfg.distributed.on ? sizeof(fhd__dist_record) + sizeof(fhd__dist_state) : 0);
    plan_add(p, &b->st, rec, MEM_DEVICE, G_WORK);
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
    plan_add(p, &b->statpart, lg * FHD_LOSS_NSTAT * 8, MEM_DEVICE, G_WORK);
    /* detailed_metrics: W_head's action rows' sums and a counter (kernels/metrics.cuh) */
    plan_add(p, &b->det_rows, b->cfg.detailed_metrics ? (KT * 2 + 1) * 8 : 0, MEM_DEVICE, G_WORK);
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
        plan_add(p, &b->h_snap[i], rec, MEM_PINNED, 0);
}

static int32_t oom_message(fhd__backend *b, const alloc_plan *p, const char *what, size_t bytes) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    (void)cudaGetLastError();
    size_t sum = 0, pinned = 0;
    for (int g = 0; g < G_COUNT; g++)
        sum += p->dev[g];
    for (int i = 0; i < p->n; i++)
        pinned += p->items[i].kind == MEM_PINNED ? p->items[i].bytes : 0;
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
        "MiB; the device has %.1f MiB free of %.1f MiB (and %.1f MiB of pinned host memory for "
        "staging)",
        what, mib(bytes), mib(sum), b->device_name, mib(p->dev[G_REPLAY]), ring,
        mib(p->dev[G_TREE]), mib(p->dev[G_PARAMS]), (unsigned long long)b->P, mib(p->dev[G_ACT]),
        b->B, mib(p->dev[G_WORK]), mib(fr), mib(tot), mib(pinned));
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

int32_t fhd__cuda_allocate_buffers(fhd__backend *b) {
    b->allocs = (alloc_plan *)calloc(1, sizeof(alloc_plan));
    if (!b->allocs)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
    plan_buffers(b, b->allocs);
    return allocate(b, b->allocs);
}

void fhd__cuda_free_buffers(fhd__backend *b) {
    if (!b->allocs)
        return;
    for (int i = b->allocs->n - 1; i >= 0; i--) { /* last first */
        alloc_item *it = &b->allocs->items[i];
        if (*it->ptr)
            (void)(it->kind == MEM_DEVICE ? cudaFree(*it->ptr) : cudaFreeHost(*it->ptr));
        *it->ptr = NULL;
    }
    free(b->allocs);
    b->allocs = NULL;
}
