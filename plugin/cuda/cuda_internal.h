/* cuda_internal.h - the CUDA backend's state and the helpers its files share (C++17, host side).
 *
 * Shapes: B batch, S obs dim, D branches, KT total actions, HO head outputs (KT + dueling),
 * H_l torso widths, N replay capacity, P parameters of one network, R rows of an act chunk.
 *
 * Everything lives on the device: one flat parameter buffer (online [0, P), target [P, 2P)),
 * flat gradient and Adam moments, spectral-norm vectors, the replay ring and its integer sum
 * tree, the batch, and a 64-byte scalar record (update counter, replay size, max priority,
 * statistics) that the kernels read and write. Host to device: new transitions (replay_add),
 * observations to act on and train_batch batches, through pinned staging buffers; device to
 * host: actions / Q values and the statistics snapshots.
 */
#ifndef FHD_CUDA_INTERNAL_H
#define FHD_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "backend.h"
}

#include "cuda_ext.h"
#include "cuda_frames.h"
#include "cuda_gemm.h"
#include "cuda_plan.h"

#include "act.cuh"
#include "bf16.cuh"
#include "conv.cuh"
#include "device_state.cuh"
#include "dist.cuh"
#include "metrics.cuh"
#include "optim.cuh"
#include "prune.cuh"
#include "replay.cuh"
#include "sample.cuh"
#include "spectral_norm.cuh"
#include "td_loss.cuh"

#define FHD_CUDA_WORKSPACE_BYTES (32u << 20) /* cuBLASLt workspace per stream */
#define FHD_CUDA_ACT_CACHE 8                  /* act GEMM plans kept for this many row counts */
#define FHD_CUDA_SNAPSHOTS 8                  /* pinned statistics snapshots in flight */

/* ---- errors ----------------------------------------------------------------------------- */

/* Record a failed CUDA runtime / cuBLASLt call in b->err ("file:line: call: name: string") and
 * map it to a status: FHD_ERR_OUT_OF_MEMORY for allocation failures, else FHD_ERR_DEVICE. */
int32_t fhd__cuda_fail(fhd__backend *b, cudaError_t e, const char *file, int line,
                       const char *expr);
int32_t fhd__cublas_fail(fhd__backend *b, cublasStatus_t s, const char *file, int line,
                         const char *expr);
int32_t fhd__cuda_failf(fhd__backend *b, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* FHD_OK, or FHD_ERR_DEVICE naming the latched fault once a sticky error has made the context
 * unusable (cuda_fault.cpp): the first check of every op but destroy. */
int32_t fhd__cuda_alive(fhd__backend *b);

#define FHD_CK(b, call)                                                                        \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return fhd__cuda_fail((b), e_, __FILE__, __LINE__, #call);                        \
    } while (0)

#define FHD_CKB(b, call)                                                                       \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return fhd__cublas_fail((b), s_, __FILE__, __LINE__, #call);                      \
    } while (0)

#define FHD_TRY(expr)                                                                          \
    do {                                                                                       \
        int32_t rc_ = (expr);                                                                  \
        if (rc_ != FHD_OK)                                                                     \
            return rc_;                                                                        \
    } while (0)

/* ---- matmul_precision "bf16" (cuda_bf16.cpp; docs/design.md section 5) -------------------- */

/* The bf16 operands of the update and of act. Shapes as fhd__backend's fp32 buffers; W the
 * widest torso layer. */
typedef struct fhd__cuda_bf16 {
    int on;
    __nv_bfloat16 *w;            /* (T + P): params rounded (plan.w16_opt: by the optimiser with
                                  * each new value, else at the start of every update; the online
                                  * part also in every act graph) */
    int stale;                   /* w16_opt: the params were written since the copies were
                                  * (create, a write of FHD_STATE_PARAMS): train and
                                  * train_batch make them again first (fhd__cuda_bf16_refresh) */
    __nv_bfloat16 *x, *x_tg;     /* layer 0's input: x (2B, in_0) online (+ the pair's target)
                                  * rows, x_tg (B, in_0) the target's (not pair_fwd0) */
    __nv_bfloat16 *h[FHD_MAXL];  /* (rows_on, out_l), l < L: online hidden outputs (h[0] holds
                                  * the target's too with pair_fwd0) */
    __nv_bfloat16 *tg_a, *tg_b;  /* (B, W) target ping-pong */
    __nv_bfloat16 *dz[FHD_MAXL]; /* (B, out_l): dz_l rounded; dz[L] (B, HOs) the head's */
    __nv_bfloat16 *act_x, *act_a, *act_b; /* (R, S), (R, W) x2: act */
} fhd__cuda_bf16;

/* p advanced by n elements of a bf16 (bf16 != 0) or float buffer. */
static inline const void *fhd__elem_at(const void *p, uint64_t n, int bf16) {
    return (const char *)p + n * (bf16 ? 2u : 4u);
}

/* ---- the backend ------------------------------------------------------------------------- */

/* The act path for one row count: its GEMM plans and, captured on first use, one graph per
 * input (host rows, or frames in the ring) and output set (greedy actions only, or Q values
 * too) holding the whole call: spectral-norm sigmas, upload, forward, head, download. */
typedef struct fhd__act_plans {
    uint32_t rows; /* 0: empty */
    fhd__gemm fwd[FHD_MAXL];
    fhd__gemm cfwd[FHD_MAX_CONV_LAYERS]; /* the conv layers' forwards (cuda_conv.cpp) */
    cudaGraphExec_t exec[2][2]; /* [frames: the rows gathered from the ring][want_q] */
} fhd__act_plans;

/* The convolutional torso (cuda_conv.cpp; NC = 0: none). Shapes: rows_on online images, B
 * target / backward images, hw_c and ckk_c of layer c, F the linear torso's input, R act rows;
 * every activation channels-last (images hw_c, cout_c). The buffers marked T hold bf16 with
 * bf16 GEMMs (bf16: the GEMMs' operands), float otherwise. */
typedef struct fhd__cuda_conv {
    uint32_t NC;
    int bf16;     /* matmul_precision "bf16" (plan.bf16) */
    fhd__conv_geom g[FHD_MAX_CONV_LAYERS];
    int in_kind;  /* FHD_CONV_IN_U8 or FHD_CONV_IN_F32: what layer 0 reads */
    float scale;  /* obs_scale */
    uint32_t F;
    void *col_on[FHD_MAX_CONV_LAYERS];  /* T (rows_on hw_c, ckk_c), kept for dW; layer 0's over
                                         * all 2B batch images (the target reads next_obs's) */
    void *y_on[FHD_MAX_CONV_LAYERS];    /* T (rows_on hw_c, cout_c) */
    void *col_tg, *y_tg[2];             /* T (B max hw ckk), (B max hw cout) x2: target(s') */
    float *flat_on, *flat_tg;           /* (rows_on, F), (B, F): the linear torso's inputs (bf16:
                                         * unused, the flatten writes bf.x and bf.x_tg) */
    float *dflat;                       /* (B, F) */
    void *dz[FHD_MAX_CONV_LAYERS];      /* T (B hw_c, cout_c) */
    float *dcol;                        /* (B max hw ckk) */
    float *bpart[FHD_MAX_CONV_LAYERS];  /* (bparts_c, cout_c) bias-gradient partials */
    uint32_t bparts[FHD_MAX_CONV_LAYERS];
    void *act_col, *act_y[2];           /* act: T (R max hw ckk), (R max hw cout) x2 */
    float *act_flat;                    /* act: (R, F) (bf16: unused, the flatten writes bf.act_x) */
    /* bf16: the fp32 product of a forward GEMM without a bf16 bias+ReLU epilogue (fhd__gemm's
     * C32): y32 (max(rows_on, R) max hw cout) online and act, y32_tg (B max hw cout) target */
    float *y32, *y32_tg;
    /* the weights of the layers above the first in channels-last column order (kernels/
     * conv.cuh): wperm (T, 2 wp_total: online, target), layer c at wp_off[c]; their gradients in
     * that order (dwperm, wp_total, float), put back into grad by perm_back */
    void *wperm;
    float *dwperm;
    uint64_t wp_off[FHD_MAX_CONV_LAYERS], wp_total;
    fhd__conv_perm_args perm_fwd, perm_act, perm_back;
    fhd__gemm fwd_on[FHD_MAX_CONV_LAYERS], fwd_tg[FHD_MAX_CONV_LAYERS];
    fhd__gemm dw[FHD_MAX_CONV_LAYERS], dx[FHD_MAX_CONV_LAYERS], dx_flat;
    cudaEvent_t ev_dz[FHD_MAX_CONV_LAYERS];
} fhd__cuda_conv;

struct fhd__backend {
    fhd__config cfg;
    fhd__layout lo;
    int device;
    fhd__cuda_device dev;     /* compute capability and SMs */
    fhd__cuda_plan plan;      /* every decision about the update (cuda_plan.h) */
    struct fhd__alloc_list *allocs; /* every buffer below, as allocated (cuda_module.cpp) */
    struct fhd__autotune *tune; /* at create, while the update's GEMMs are tuned; else NULL */
    int planning;             /* 1 while the update's GEMMs are planned (recorded in plan) */
    char device_name[256];
    char err[1024];
    cudaError_t fault;   /* a sticky error seen by any call (cuda_fault.cpp); cudaSuccess: none */
    char fault_msg[768]; /* the message of the call that saw it */
    uint64_t P;
    uint64_t T;               /* offset of the target network in params: P rounded up to 64 floats,
                               * so that its weights are as aligned as the online ones (cuBLASLt
                               * picks its vectorised kernels and fused epilogues only then) */
    uint32_t B, N, leaves, rows_on; /* rows_on: 2B with double DQN (online(s) and online(s')) */
    uint32_t HOs;             /* row stride of head outputs / their gradient: HO rounded up to 4
                               * floats (8 with the padded head: plan.pad_head) */
    __nv_bfloat16 *head_w;    /* plan.pad_head: (2, HOs, H_L) both heads' weights in bf16, rows
                               * past HO zero: the head GEMMs' operand */
    float *head_b;            /* plan.pad_head: (2, HOs) both heads' biases, zero past HO */
    int prioritized, has_sn;

    cudaStream_t s_main, s_side, s_prio; /* s_prio: the priority update beside the backward */
    cudaStream_t s_aux;       /* the second halves of split backward GEMMs (plan.use_aux) */
    cudaStream_t s_hdw;       /* the head's dW GEMM beside the priority update and the next
                               * update's batch sampled ahead (plan.use_hdw) */
    cudaEvent_t ev_aux_fork[FHD_MAXL], ev_aux_join[FHD_MAXL], ev_aux_dw, ev_hdw;
    cudaEvent_t ev_tree, ev_ahead; /* after the priority update; after the sampling ahead */
    cudaEvent_t ev_scal;           /* after the loss scalars (s_prio's first node) */
    cudaStream_t s_tree;           /* the priority update (plan.use_tree) */
    cudaEvent_t ev_pre, ev_sample, ev_fork, ev_tgt, ev_dw, ev_loss, ev_prio, ev_dz[FHD_MAXL];
    cudaEvent_t ev_stage[2];
    cublasLtHandle_t lt;
    void *ws_main, *ws_side, *ws_prio, *ws_aux; /* cuBLASLt workspaces of the four streams */

    /* parameters and optimiser state */
    float *params;            /* (T + P): online [0, P), target [T, T + P) */
    float *grad, *adam_m, *adam_v; /* (P) */
    float *sn;                /* (2 sn_size): online u/v, then target */
    float *mask;              /* (P) pruning masks, 1 kept, 0 pruned (plan.prune; else NULL) */
    fhd__prune_group *prune_groups; /* (lo.num_masks) selection scratch (plan.prune) */
    uint32_t *prune_hist;     /* (lo.num_masks, FHD_PRUNE_BINS) selection scratch */
    unsigned int *prune_done; /* (1) the selection's last-block counter */
    /* forward activations */
    float *h[FHD_MAXL];       /* online: (rows_on, out_l); h[L] is the head output (rows_on, HOs) */
    float *tg_a, *tg_b;       /* (B, torso width: max H_l) target ping-pong */
    float *head_t;            /* (B, HOs) target(s') head output */
    float *dz[FHD_MAXL];      /* (B, out_l): gradient at layer l's pre-activation; dz[L] (B, HOs) */
    float *dxp[FHD_MAXL];     /* (B, in_l): split_dx's second halves */
    float *dzt[FHD_MAXL];     /* (out_l, B): dz_l transposed (plan.dz_t) */
    float *gpart0;            /* (parts, out_0 in_0): split_dw0 one, fuse_dw0 chunks - 1 */
    /* the batch: one contiguous region so that train_batch uploads it in one copy */
    float *gbatch;
    float *g_x;               /* (2B, S): obs rows, then next_obs rows (float32 observations;
                               * NULL for uint8) */
    uint8_t *g_x8;            /* (2B, S) bytes in place of g_x for obs_dtype uint8 */
    /* the MLP's layer-0 input, (2B, layers[0].in) rows: g_x for float32 at scale 1, the
     * converted rows img->x_conv (img->cvt: uint8 or scaled inputs without conv layers), the
     * conv torso's output with conv layers */
    const float *mlp_in;
    const float *mlp_in_tg; /* target(s') layer-0 input (B, layers[0].in): mlp_in + B rows,
                             * or the conv torso's target output */
    int32_t *g_act;           /* (B, D) */
    float *g_ret, *g_disc, *g_w; /* (B): g_w holds host weights (train_batch) */
    size_t gbatch_bytes;
    float *w_out, *td, *y;    /* (B), (B, D), (B) */
    uint32_t *idx;            /* (B) */
    uint64_t *qs;             /* (B) */
    float *td_row;            /* (B) mean |td| per row from the loss kernel (new priorities) */
    uint64_t *prio_stage;     /* (B) the guard with PER: new priorities until the commit */
    /* replay */
    float *r_obs, *r_next, *r_ret, *r_disc; /* (N, S), (N, S), (N), (N) */
    int32_t *r_act;           /* (N, D) */
    uint64_t *nodes;          /* (2 leaves) sum tree (prioritized) */
    fhd__dev_scalars *st;     /* the record's scalars; its detail follows (fhd__dev_record) */
    double *det_rows;         /* detailed_metrics' (KT, 2) W_head row sums, then the row-norm
                               * kernel's counter (kernels/metrics.cuh) */
    /* spectral norm */
    float *sn_sigma, *sn_inv; /* (3 * FHD_MAX_HIDDEN_LAYERS): online, target, eval slots */
    float *sn_norms;          /* (2 * FHD_MAX_HIDDEN_LAYERS) */
    float *sn_scratch;        /* (sum over SN layers of max(m, k)) */
    double *sn_partial;
    unsigned int *sn_done;
    /* kernel scratch */
    uint64_t *part_min;
    float *colpart;
    double *statpart;
    float *bpart[FHD_MAXL];   /* per layer: (parts, out_l) column partials of its bias gradient;
                               * bpart[L] is colpart */
    uint32_t bparts[FHD_MAXL];
    double *opt_partial;
    fhd__clip_info *clip;
    unsigned int *counters;   /* last-block counters, zeroed once */
    float *d_one, *d_zero;
    /* act */
    uint32_t act_rows;        /* R */
    /* act_x (R, S): the observations as floats (converted from img->act_x8 / scaled in place
     * when img->cvt), layer 0's input without conv layers; act_a, act_b (R, max H_l) */
    float *act_x, *act_a, *act_b, *act_head, *act_q; /* (R, HOs) head, (R, KT) Q values */
    int32_t *act_greedy;      /* (R, D) */
    float *h_act_obs, *h_act_q;
    int32_t *h_act_greedy;
    /* the device's address of h_act_greedy (pinned, mapped): the act head kernel writes the
     * greedy actions there, no copy node after it; NULL where the mapping is not offered */
    int32_t *d_act_greedy_host;
    fhd__act_plans act_cache[FHD_CUDA_ACT_CACHE];
    uint32_t act_cache_next;
    /* replay staging */
    uint32_t stage_rows;
    float *d_stage;
    float *h_stage[2];
    int stage_next;
    /* train_batch staging (pinned) and outputs */
    float *h_batch;
    float *h_tdy;             /* (B, D) td then (B) y */
    /* statistics snapshots (a ring of pinned buffers) */
    fhd__dev_scalars *h_snap[FHD_CUDA_SNAPSHOTS];
    cudaEvent_t ev_snaps[FHD_CUDA_SNAPSHOTS];
    uint64_t snap_seq[FHD_CUDA_SNAPSHOTS], snap_counter, snap_last_seq;
    int snap_next, snap_newest;
    fhd__dev_scalars snap_last;
    fhd__dev_detail_slot snap_detail; /* detailed_metrics: snap_last's update's slot */
    /* the executed update rate: timing events before and after each train call's launches (a
     * ring; a call that finds its slot still pending goes untimed), summed once completed */
    cudaEvent_t ev_rate[FHD_CUDA_SNAPSHOTS][2];
    uint32_t rate_n[FHD_CUDA_SNAPSHOTS]; /* updates of the pending slot; 0: free */
    int rate_next;
    uint64_t exec_updates;
    double exec_ms;

    /* GEMM plans of the update */
    fhd__gemm fwd_on[FHD_MAXL], fwd_tg[FHD_MAXL], bwd_dw[FHD_MAXL], bwd_dx[FHD_MAXL];
    fhd__gemm bwd_dx2[FHD_MAXL], bwd_dw0b; /* the second halves (split_dx, split_dw0) */
    fhd__gemm bwd_dzt[FHD_MAXL];           /* dzt[l] = dz[l]^T (dz_t[l]) */
    fhd__cuda_conv conv;
    fhd__cuda_bf16 bf; /* matmul_precision "bf16" (bf.on) */
    /* kernel arguments, fixed at create */
    fhd__sample_args a_sample;
    fhd__sample_args a_sample_desc, a_sample_obs; /* the next update's batch (ahead): all but
                                                   * the obs rows, then those */
    fhd__sn_args a_sn1, a_sn2, a_sn_eval;
    fhd__loss_args a_loss_train, a_loss_batch;
    fhd__opt_args a_opt;
    fhd__detail_args a_detail; /* detailed_metrics' row norms (cuda_divmetrics.cpp) */
    fhd__prune_args a_prune; /* pruning (plan.prune): masks and selection (cuda_prune.cpp) */
    /* the captured update, FHD_CUDA_GRAPHS variants (cuda_ext.h: FHD_CUDA_GRAPH_*) */
    cudaGraph_t graph[FHD_CUDA_GRAPHS];
    cudaGraphExec_t gexec[FHD_CUDA_GRAPHS];
    /* the measured choice of the head's dW branch while it runs (cuda_branch.cpp); else NULL */
    struct fhd__cuda_branch *branch;

    /* image observations: uint8 / scaled inputs and the frame-once replay (cuda_frames.h) */
    struct fhd__cuda_img *img;

    /* config distributed (cuda_dist.cpp): the NCCL communicator, the distributed update's
     * kernel arguments and the host's waits; NULL otherwise (and in a build without NCCL) */
    struct fhd__cuda_dist *dist;
    /* bytes of the device record a snapshot copies: the scalars, with detailed_metrics the
     * detail after them, distributed also the checksum record after that */
    size_t snap_bytes;
    fhd__dist_record snap_dist; /* distributed: snap_last's checksum record */

    /* host mirrors */
    uint64_t updates, pos, size, max_q; /* updates: run, applied or skipped by the guard */
    uint64_t skip_reported; /* the guard's skips train()/train_batch have reported */
    uint64_t sync_count; /* stream/event/device synchronisations done by the backend */
    uint64_t dist_waits; /* distributed: train's waits for a shorter queue (cuda_dist.cpp) */
};

/* cuda_update.cpp */
/* Record one update into the capture or the stream. train: sample with PER loss arguments (else
 * the host batch already in the batch buffers); sample_in: the update samples its own batch
 * (else it was sampled ahead by the update before); ahead: sample the next update's batch at
 * the end. */
int32_t fhd__cuda_record_update(fhd__backend *b, int train, int sample_in, int ahead);
/* The update's graphs (and the measured branch's other form): fhd__cuda_capture preloads and
 * plans the optimiser first, fhd__cuda_capture_graphs captures the plan's form alone. */
int32_t fhd__cuda_capture(fhd__backend *b);
int32_t fhd__cuda_capture_graphs(fhd__backend *b);
/* Destroy the captured graphs and their executables (any that exist); leaves NULLs. graphs_free
 * does so for one set of FHD_CUDA_GRAPHS. */
void fhd__cuda_drop_graphs(fhd__backend *b);
void fhd__cuda_graphs_free(cudaGraph_t *graph, cudaGraphExec_t *gexec);
/* Launch n updates from the graphs ex (FHD_CUDA_GRAPH_*, all four where ahead, else SINGLE). */
int32_t fhd__cuda_launch_updates(fhd__backend *b, cudaGraphExec_t const *ex, int ahead,
                                 uint32_t n);
/* cuda_branch.cpp: the measured head dW branch (cuda_plan.h, hdw_measure). prepare (at create,
 * during the tuning) takes the cached choice or starts the trial; capture captures the trial's
 * other form; train launches n updates (the trial's chunks while it runs); drop_graphs frees
 * the trial's graphs, destroy the trial. */
int32_t fhd__cuda_branch_prepare(fhd__backend *b);
int32_t fhd__cuda_branch_capture(fhd__backend *b);
int32_t fhd__cuda_branch_train(fhd__backend *b, uint32_t n);
void fhd__cuda_branch_drop_graphs(fhd__backend *b);
void fhd__cuda_branch_destroy(fhd__backend *b);
int32_t fhd__cuda_train(fhd__backend *b, uint32_t num_updates, fhd_train_stats *stats);
int32_t fhd__cuda_train_batch(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st);
int32_t fhd__cuda_snapshot(fhd__backend *b);
int32_t fhd__cuda_poll_snapshots(fhd__backend *b);
/* Add the completed timed train calls to exec_updates / exec_ms (never waits). */
void fhd__cuda_poll_rate(fhd__backend *b);
int32_t fhd__cuda_sync(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_sync_event(fhd__backend *b, cudaEvent_t e);
/* cuda_buffers.cpp: plan and allocate every buffer (b->allocs), free them all (NULL-safe list);
 * fhd__cuda_alloc_add adds a device buffer to the list (cuda_conv.cpp's buffers) */
int32_t fhd__cuda_allocate_buffers(fhd__backend *b);
void fhd__cuda_free_buffers(fhd__backend *b);
void fhd__cuda_alloc_add(struct fhd__alloc_list *p, void *ptr, size_t bytes);
/* cuda_conv.cpp (the conv torso; each does nothing without conv layers) */
int32_t fhd__cuda_conv_check(fhd__backend *b);
void fhd__cuda_conv_init(fhd__backend *b);
void fhd__cuda_conv_plan_buffers(fhd__backend *b, struct fhd__alloc_list *p);
int32_t fhd__cuda_conv_create_events(fhd__backend *b);
int32_t fhd__cuda_conv_prepare(fhd__backend *b);
void fhd__cuda_conv_opt_segments(fhd__backend *b, fhd__opt_args *a);
/* layer 0's im2col of the whole batch (obs and next_obs rows), before the fork */
int32_t fhd__cuda_conv_record_input(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_conv_record_forward(fhd__backend *b, int net, cudaStream_t s);
int32_t fhd__cuda_conv_record_backward(fhd__backend *b, cudaStream_t s0, cudaStream_t s1);
int32_t fhd__cuda_conv_act_plans(fhd__backend *b, fhd__gemm *gms, uint32_t rows);
int32_t fhd__cuda_conv_record_act(fhd__backend *b, const fhd__gemm *gms, const void *x,
                                  uint32_t rows, cudaStream_t s);
int32_t fhd__cuda_conv_preload_gemms(fhd__backend *b);
void fhd__cuda_conv_destroy(fhd__backend *b);
/* cuda_bf16.cpp (each does nothing unless bf.on) */
void fhd__cuda_bf16_init(fhd__backend *b);
void fhd__cuda_bf16_plan_buffers(fhd__backend *b, struct fhd__alloc_list *p);
/* The operands of the update's GEMMs, bf16 or fp32 by bf.on: layer l's input of online(s)
 * (layer 0: the MLP's input), its output (the head: fp32 h[L]), dz_l as the GEMMs read it, the
 * weights of network net at offset off. */
const void *fhd__cuda_op_in(const fhd__backend *b, uint32_t l);
void *fhd__cuda_op_out(fhd__backend *b, uint32_t l);
const void *fhd__cuda_op_dz(const fhd__backend *b, uint32_t l);
const void *fhd__cuda_op_w(const fhd__backend *b, int net, uint64_t off);
/* The head's weight and bias operands of network `net`: with plan.pad_head head_w's (HOs, H)
 * rows and head_b's HOs (the padding zero), else the params' (HO, H) and HO (cuda_head_pad.cpp,
 * which also allocates and records the copy: both networks at the start of the update, the
 * online one in act's graph). */
const void *fhd__cuda_op_head_w(const fhd__backend *b, int net);
const float *fhd__cuda_op_head_b(const fhd__backend *b, int net);
void fhd__cuda_head_pad_plan_buffers(fhd__backend *b, struct fhd__alloc_list *p);
int32_t fhd__cuda_head_pad_record(fhd__backend *b, uint32_t nets, cudaStream_t s);
/* With plan.w16_opt: the optimiser's segments get their copies (fhd__opt_segment.w16 / f32:
 * bf.w, the padded head), and before an update runs, stale copies are made again on s_main
 * (both networks, the padded head), outside any graph. A copy that does not match the params
 * (after the updates queued, unless stale) fails check_invariants (fhd__cuda_bf16_check). */
int32_t fhd__cuda_bf16_opt_copies(fhd__backend *b, fhd__opt_args *a);
int32_t fhd__cuda_bf16_refresh(fhd__backend *b);
int32_t fhd__cuda_bf16_check(fhd__backend *b, char *msg, size_t cap);
/* Record the conversions: the weights (both networks, and the padded head) on s0 before the
 * forward, unless the optimiser keeps them (plan.w16_opt); train_batch's
 * layer-0 input (2B host rows; the update's sampling writes it in bf16 itself, a conv torso's
 * flatten too); the head's output gradient after the loss kernel; act's online weights
 * (before the conv torso reads them) and input. */
int32_t fhd__cuda_bf16_record_weights(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_bf16_record_input(fhd__backend *b, int train, cudaStream_t s);
int32_t fhd__cuda_bf16_record_head_dz(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_bf16_record_act_weights(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_bf16_record_act_input(fhd__backend *b, uint32_t rows, cudaStream_t s);
/* Layer l's ReLU backward (l < L): dz_l from the dx GEMM's output (+ dx2), its bias partials. */
int32_t fhd__cuda_bf16_relu_backward(fhd__backend *b, uint32_t l, const float *dx2, cudaStream_t s);
/* cuda_setup.cpp */
int32_t fhd__cuda_prepare_kernels(fhd__backend *b);
/* cuda_divmetrics.cpp: the diversity term's and detailed_metrics' kernel arguments, after the
 * loss and optimiser arguments are prepared (before the capture); the latter's values of the
 * snapshot into out (backend.h's fhd__update_stats) */
int32_t fhd__cuda_divmetrics_prepare(fhd__backend *b);
void fhd__cuda_divmetrics_stats(const fhd__backend *b, fhd__update_stats *out);
/* cuda_prune.cpp (pruning; each does nothing without plan.prune): the selection's arguments,
 * with the masks set to 1 and the scratch to 0 (after prepare_opt, before the capture); the
 * update's gradient mask (before the optimiser) and selection (after it); after a write of
 * the masks or of online parameters, the online weights masked again (synchronous). */
int32_t fhd__cuda_prune_prepare(fhd__backend *b);
int32_t fhd__cuda_prune_record_mask(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_prune_record_select(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_prune_after_write(fhd__backend *b, int kind, uint64_t offset);
/* cuda_act.cpp */
/* Free an act cache entry's GEMM plans and graphs; leaves it empty (rows 0). */
void fhd__cuda_act_plans_clear(fhd__act_plans *p);
/* Plan the act path for `rows` rows (at most act_rows) now: at create, inside the autotune, so
 * that its GEMMs are timed and cached like the update's (later row counts take the rule). */
int32_t fhd__cuda_act_prepare(fhd__backend *b, uint32_t rows);
int32_t fhd__cuda_q_values(fhd__backend *b, uint32_t n, const float *obs, float *q,
                           int32_t *greedy);
int32_t fhd__cuda_q_values_u8(fhd__backend *b, uint32_t n, const uint8_t *obs, float *q,
                              int32_t *greedy);
/* backend.h's q_values_frames: the ids checked, the pending frames sent, then the act graph's
 * frames form (the rows gathered from the ring) */
int32_t fhd__cuda_q_values_frames(fhd__backend *b, uint32_t n, const uint64_t *ids, float *q,
                                  int32_t *greedy);
int32_t fhd__cuda_replay_append(fhd__backend *b, uint32_t n, const float *obs,
                                const int32_t *actions, const float *returns,
                                const float *next_obs, const float *disc);
/* cuda_frames.cpp: image observations (see cuda_frames.h). setup before the buffers are
 * planned, init after they are allocated and initialised; flush sends pending frames and
 * transitions of the frame-once replay to the device (a no-op for other configs). */
int32_t fhd__cuda_img_setup(fhd__backend *b);
int32_t fhd__cuda_img_init(fhd__backend *b);
void fhd__cuda_img_destroy(fhd__backend *b);
int32_t fhd__cuda_img_flush(fhd__backend *b);
/* The sampling arguments' image fields (the ring's dtype, frames, the batch rows' form). */
void fhd__cuda_img_sample_args(fhd__backend *b, fhd__sample_args *a);
/* train_batch: the host batch's obs and next_obs rows into pinned staging h (the gbatch
 * layout); returns where the actions go. Then, once uploaded, the MLP's input converted. */
float *fhd__cuda_img_stage_batch(fhd__backend *b, const fhd__host_batch *hb, unsigned char *h);
int32_t fhd__cuda_img_convert_batch(fhd__backend *b, cudaStream_t s);
int32_t fhd__cuda_replay_append_u8(fhd__backend *b, uint32_t n, const uint8_t *obs,
                                   const int32_t *actions, const float *returns,
                                   const uint8_t *next_obs, const float *disc);
int32_t fhd__cuda_frame_add(fhd__backend *b, const void *row, const uint64_t *hint,
                            uint64_t *ids);
/* 1: frame id is in the ring (added, not yet overwritten) */
int fhd__cuda_img_stored(const fhd__backend *b, uint64_t id);
int32_t fhd__cuda_replay_add_ids(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                                 const int32_t *actions, const float *returns,
                                 const uint64_t *next_ids, const float *disc);
/* cuda_frames_state.cpp */
int fhd__cuda_img_kind(const fhd__backend *b, int kind);
int32_t fhd__cuda_img_read(fhd__backend *b, int kind, uint64_t offset, uint64_t count,
                           void *dst);
int32_t fhd__cuda_img_write(fhd__backend *b, int kind, uint64_t offset, uint64_t count,
                            const void *src);
int32_t fhd__cuda_img_set_scalars(fhd__backend *b, const fhd__backend_scalars *in);
int32_t fhd__cuda_img_check(fhd__backend *b, char *msg, size_t cap);
/* cuda_dist.cpp, cuda_nccl.cpp: config distributed (docs/design.md section 10). Built where
 * nccl.h was found (FHD_HAVE_NCCL); elsewhere b->dist is always NULL and these do nothing. */
#if FHD_HAVE_NCCL
/* backend.h's set_comm: NCCL's communicator over the ranks of comm, the sampling shares, the
 * initial checksum comparison, the update captured again with the all-reduce. */
int32_t fhd__cuda_set_comm(fhd__backend *b, const struct fhd__comm *comm);
/* Record the distributed update's nodes between the backward's join and the optimiser: the
 * gradient finished and packed, the all-reduce, the mean (and detailed_metrics' head rows). */
int32_t fhd__cuda_dist_record(fhd__backend *b, cudaStream_t s);
/* The optimiser's arguments for the finished gradient: a_opt's plan without partials or parts. */
const fhd__opt_args *fhd__cuda_dist_opt(fhd__backend *b);
/* Wait for stream s (or event e) with NCCL's error check and the timeout: the distributed
 * form of fhd__cuda_sync / fhd__cuda_sync_event. */
int32_t fhd__cuda_dist_wait(fhd__backend *b, cudaStream_t s, cudaEvent_t e);
/* train: after each update's launch, keep at most FHD_CUDA_DIST_DEPTH updates queued. */
int32_t fhd__cuda_dist_throttle(fhd__backend *b);
/* The metrics' "distributed" object (a JSON member, leading comma) into buf, snprintf-style. */
int fhd__cuda_dist_describe(const fhd__backend *b, char *buf, size_t cap);
/* Before the streams are synchronised by destroy: wait (bounded), then free the communicator
 * (aborted where a rank failed) and the dist state. */
void fhd__cuda_dist_destroy(fhd__backend *b);
cudaError_t fhd__cuda_dist_kernels_preload(fhd__backend *b);
#else
static inline int32_t fhd__cuda_dist_record(fhd__backend *, cudaStream_t) {
    return FHD_OK;
}
static inline const fhd__opt_args *fhd__cuda_dist_opt(fhd__backend *b) {
    return &b->a_opt;
}
static inline int32_t fhd__cuda_dist_wait(fhd__backend *, cudaStream_t, cudaEvent_t) {
    return FHD_OK;
}
static inline int32_t fhd__cuda_dist_throttle(fhd__backend *) {
    return FHD_OK;
}
static inline int fhd__cuda_dist_describe(const fhd__backend *, char *buf, size_t cap) {
    if (cap)
        buf[0] = 0;
    return 0;
}
static inline void fhd__cuda_dist_destroy(fhd__backend *) {}
static inline cudaError_t fhd__cuda_dist_kernels_preload(fhd__backend *) {
    return cudaSuccess;
}
#endif

/* cuda_state.cpp */
int32_t fhd__cuda_read(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void *dst);
int32_t fhd__cuda_write(fhd__backend *b, int kind, uint64_t offset, uint64_t count,
                        const void *src);
int32_t fhd__cuda_get_scalars(fhd__backend *b, fhd__backend_scalars *out);
int32_t fhd__cuda_set_scalars(fhd__backend *b, const fhd__backend_scalars *in);
int32_t fhd__cuda_latest_stats(fhd__backend *b, fhd__update_stats *out);
int32_t fhd__cuda_check_invariants(fhd__backend *b, char *msg, size_t cap);
/* The metrics' CUDA facts (backend.h, describe): "plan", "autotune", "updates_per_second". */
int32_t fhd__cuda_describe(fhd__backend *b, char *buf, size_t cap);

#endif
