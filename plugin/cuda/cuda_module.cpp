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

/* ---- destroy ---------------------------------------------------------------------------- */

static void cuda_destroy(fhd__backend *b) {
    if (!b)
        return;
    cudaSetDevice(b->device);
    fhd__cuda_dist_destroy(b); /* first: a bounded wait, then NCCL's communicator freed */
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
    if (b->s_tree)
        cudaStreamSynchronize(b->s_tree);
    fhd__cuda_drop_graphs(b);
    fhd__cuda_branch_destroy(b);
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
    for (uint32_t i = 0; i < FHD_CUDA_ACT_CACHE; i++)
        fhd__cuda_act_plans_clear(&b->act_cache[i]);
    if (b->lt)
        cublasLtDestroy(b->lt);
    fhd__cuda_free_buffers(b); /* every buffer, through the list that allocated it */
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
    if (b->ev_scal)
        cudaEventDestroy(b->ev_scal);
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
    if (b->s_tree)
        cudaStreamDestroy(b->s_tree);
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
    if (b->plan.use_tree)
        FHD_CK(b, cudaStreamCreateWithFlags(&b->s_tree, cudaStreamNonBlocking));
    FHD_CK(b, cudaEventCreateWithFlags(&b->ev_tree, cudaEventDisableTiming));
    FHD_CK(b, cudaEventCreateWithFlags(&b->ev_scal, cudaEventDisableTiming));
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
    if (b->bf.on) /* the head's bf16 dz: its padding columns stay zero (cuda_bf16.cpp) */
        FHD_CK(b, cudaMemsetAsync(b->bf.dz[lo->L], 0, (size_t)b->B * b->HOs * 2, s));
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

/* The device of a rank (config distributed): the config's device plus the rank's local rank
 * on its node, from the launcher's environment (Open MPI, MPICH/Hydra, Slurm, or LOCAL_RANK),
 * modulo the devices this process sees: one device per rank whether every rank sees all of
 * the node's devices or each only its own (CUDA_VISIBLE_DEVICES). One process: the config's. */
static int rank_device(const fhd__config *cfg) {
    if (!cfg->distributed.on)
        return cfg->device;
    const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                           "LOCAL_RANK"};
    int local = 0, n = 0;
    for (const char *nm : names) {
        const char *v = getenv(nm);
        if (v && *v) {
            local = atoi(v);
            break;
        }
    }
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        return cfg->device;
    }
    return (int)(((long long)cfg->device + (local > 0 ? local : 0)) % n);
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
    b->device = rank_device(cfg);
    b->P = lo->num_params;
    b->T = (b->P + 63) / 64 * 64;
    b->B = cfg->batch_size;
    b->N = cfg->replay_capacity;
    b->prioritized = cfg->replay == FHD_REPLAY_PRIORITIZED;
    b->leaves = fhd__sumtree_leaf_count(b->N);
    b->rows_on = cfg->double_dqn ? 2 * b->B : b->B;
    b->has_sn = lo->num_sn > 0;
    b->snap_bytes = cfg->detailed_metrics ? sizeof(fhd__dev_record) : sizeof(fhd__dev_scalars);
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
            /* head rows: 16-byte aligned for the GEMMs that read or write them (4 floats), 8
             * with the padded head (cuda_plan.h, pad_head) */
            const uint32_t head_align = b->plan.pad_head ? 8u : 4u;
            b->HOs = (lo->head_out + head_align - 1) / head_align * head_align;
            snprintf(b->device_name, sizeof b->device_name, "%s (cuda:%d, sm_%d%d, %.0f GiB)",
                     prop.name, b->device, prop.major, prop.minor,
                     (double)prop.totalGlobalMem / 1073741824.0);
        }
    }
    if (rc == FHD_OK)
        rc = fhd__cuda_conv_check(b);
    if (rc == FHD_OK) {
        fhd__cuda_conv_init(b);
        fhd__cuda_bf16_init(b);
        rc = create_objects(b);
    }
    if (rc == FHD_OK)
        rc = fhd__cuda_conv_create_events(b);
    if (rc == FHD_OK)
        rc = fhd__cuda_img_setup(b);
    if (rc == FHD_OK) /* cuda_destroy frees through the list whatever this got to */
        rc = fhd__cuda_allocate_buffers(b);
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
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_q_values(b, n, obs, q, greedy);
}
static int32_t op_replay_add(fhd__backend *b, uint32_t n, const float *obs,
                             const int32_t *actions, const float *returns, const float *next_obs,
                             const float *disc) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_replay_append(b, n, obs, actions, returns, next_obs, disc);
}
static int32_t op_train(fhd__backend *b, uint32_t n, fhd_train_stats *st) {
    FHD_TRY(fhd__cuda_alive(b));
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b)); /* the frame replay's pending adds first */
    return fhd__cuda_train(b, n, st);
}
static int32_t op_train_batch(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_train_batch(b, hb, st);
}
static int32_t op_read(fhd__backend *b, int kind, uint64_t off, uint64_t n, void *dst) {
    FHD_TRY(fhd__cuda_alive(b));
    if (fhd__cuda_img_kind(b, kind))
        return fhd__cuda_img_read(b, kind, off, n, dst);
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    return fhd__cuda_read(b, kind, off, n, dst);
}
static int32_t op_write(fhd__backend *b, int kind, uint64_t off, uint64_t n, const void *src) {
    FHD_TRY(fhd__cuda_alive(b));
    if (fhd__cuda_img_kind(b, kind))
        return fhd__cuda_img_write(b, kind, off, n, src);
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    return fhd__cuda_write(b, kind, off, n, src);
}
static int32_t op_get_scalars(fhd__backend *b, fhd__backend_scalars *o) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_get_scalars(b, o);
}
static int32_t op_set_scalars(fhd__backend *b, const fhd__backend_scalars *in) {
    FHD_TRY(fhd__cuda_alive(b));
    if (in->replay_pos >= b->N || in->replay_size > b->N || in->max_priority_q == 0)
        return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT, "replay position/size out of range");
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    FHD_TRY(fhd__cuda_set_scalars(b, in));
    return fhd__cuda_img_set_scalars(b, in);
}
static int32_t op_latest_stats(fhd__backend *b, fhd__update_stats *o) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_latest_stats(b, o);
}

static int32_t op_check_invariants(fhd__backend *b, char *msg, size_t cap) {
    FHD_TRY(fhd__cuda_alive(b));
    FHD_TRY(fhd__cuda_bf16_check(b, msg, cap)); /* bf16: the GEMMs' copies are the params' */
    if (b->img->frames)
        return fhd__cuda_img_check(b, msg, cap);
    return fhd__cuda_check_invariants(b, msg, cap);
}

static int32_t op_describe(fhd__backend *b, char *buf, size_t cap) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_describe(b, buf, cap);
}

static int32_t op_finish(fhd__backend *b) {
    FHD_TRY(fhd__cuda_alive(b));
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_img_flush(b));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    return fhd__cuda_poll_snapshots(b); /* every snapshot is complete now */
}

static int32_t op_q_values_u8(fhd__backend *b, uint32_t n, const uint8_t *obs, float *q,
                              int32_t *greedy) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_q_values_u8(b, n, obs, q, greedy);
}
static int32_t op_replay_add_u8(fhd__backend *b, uint32_t n, const uint8_t *obs,
                                const int32_t *actions, const float *returns,
                                const uint8_t *next_obs, const float *disc) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_replay_append_u8(b, n, obs, actions, returns, next_obs, disc);
}
static int32_t op_frame_add(fhd__backend *b, const void *row, const uint64_t *hint,
                            uint64_t *ids) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_frame_add(b, row, hint, ids);
}
static int32_t op_replay_add_ids(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                                 const int32_t *actions, const float *returns,
                                 const uint64_t *next_ids, const float *disc) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_replay_add_ids(b, n, obs_ids, actions, returns, next_ids, disc);
}
static int32_t op_q_values_frames(fhd__backend *b, uint32_t n, const uint64_t *ids, float *q,
                                  int32_t *greedy) {
    FHD_TRY(fhd__cuda_alive(b));
    return fhd__cuda_q_values_frames(b, n, ids, q, greedy);
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
    op_q_values_u8,
    op_replay_add_u8,
    op_frame_add,
    op_replay_add_ids,
#if FHD_HAVE_NCCL
    fhd__cuda_set_comm, /* over NCCL (cuda_dist.cpp) */
#else
    nullptr, /* set_comm: built without NCCL, distributed is refused (backend_loader.c) */
#endif
    op_q_values_frames,
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
