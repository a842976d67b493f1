/* cuda_ext.h - state kinds only the CUDA backend answers, for its tests (plain C).
 *
 * They go through the backend's read() like the kinds of backend.h, with the element types
 * below; the front never asks for them. Tests reach them as L->ops->read(L->be, kind, 0, count,
 * dst) on a learner created with backend "cuda".
 */
#ifndef FHD_CUDA_EXT_H
#define FHD_CUDA_EXT_H

enum {
    /* (1) uint64: stream / event / device synchronisations the backend has done (act,
     * train_batch, read/write and staging waits; never in train()). */
    FHD_CUDA_STATE_SYNC_COUNT = 0x1000,
    /* (1) pointer-sized: one of the captured update graphs (cudaGraph_t), owned by the backend;
     * the read's offset picks it (FHD_CUDA_GRAPH_*). */
    FHD_CUDA_STATE_GRAPH = 0x1001,
    /* (FHD_CUDA_DEVPTR_COUNT) uint64: device address ranges, see FHD_CUDA_DEVPTR_*. */
    FHD_CUDA_STATE_DEVPTRS = 0x1002,
    /* (2 * leaves) uint64: the whole sum-tree node array (prioritized replay). */
    FHD_CUDA_STATE_TREE = 0x1003,
    /* (1..FHD_CUDA_INFO_COUNT) uint64: facts about the plan, the first `count` of
     * FHD_CUDA_INFO_* (a reader built when there were fewer still gets its own). */
    FHD_CUDA_STATE_INFO = 0x1004,
    /* (1) uint64, write only, before the first update: the optimiser's form. 0: as planned (the
     * fused cooperative pass where the device has cooperative launch); 2, 4 or 8: the two-kernel
     * pass (norm, then Adam) with that many weights a thread, the form of devices without
     * cooperative launch. The update is captured again. */
    FHD_CUDA_STATE_OPT_FORM = 0x1005
};

/* FHD_CUDA_STATE_DEVPTRS: base address and size in bytes of each device buffer. */
enum {
    FHD_CUDA_DEVPTR_PARAMS = 0, /* [0] address, [1] bytes: online + target parameters */
    FHD_CUDA_DEVPTR_GRAD = 2,
    FHD_CUDA_DEVPTR_ADAM_M = 4,
    FHD_CUDA_DEVPTR_ADAM_V = 6,
    FHD_CUDA_DEVPTR_SN = 8,
    FHD_CUDA_DEVPTR_COUNT = 10
};

/* FHD_CUDA_STATE_GRAPH: the four captures of the update. train(1) replays SINGLE; train(n),
 * n >= 2, replays FIRST, STEADY n - 2 times, then LAST: every update but the last samples the
 * next one's batch at its end (beside the optimiser), and every update but the first starts
 * from that batch. Where the plan samples no batch ahead (spectral norm on a network whose
 * backward fills the card: cuda_plan.h, sample_ahead) only SINGLE is captured (the
 * others read as NULL) and every update replays it, sampling beside the power iteration. */
enum {
    FHD_CUDA_GRAPH_SINGLE = 0, /* samples its batch; samples nothing ahead */
    FHD_CUDA_GRAPH_FIRST = 1,  /* samples its batch and the next update's */
    FHD_CUDA_GRAPH_STEADY = 2, /* starts from a batch sampled ahead, samples the next */
    FHD_CUDA_GRAPH_LAST = 3,   /* starts from a batch sampled ahead, samples nothing ahead */
    FHD_CUDA_GRAPHS = 4
};

/* FHD_CUDA_STATE_INFO */
enum {
    FHD_CUDA_INFO_GEMM_FALLBACKS = 0, /* GEMMs of the update without a cuBLASLt bias epilogue */
    FHD_CUDA_INFO_UPDATES_DEVICE = 1, /* the device update counter (synchronous read) */
    FHD_CUDA_INFO_ROWS_ONLINE = 2,    /* rows of the online forward (2B with double DQN) */
    FHD_CUDA_INFO_PAIRED_FWD0 = 3,    /* 1: layer 0 of both networks in one batched GEMM */
    FHD_CUDA_INFO_DZ_TRANSPOSED = 4,  /* bit l: layer l's dW GEMM reads dz_l transposed */
    FHD_CUDA_INFO_GEMM_TUNED = 5,     /* GEMMs of the update whose autotuned pick is not the
                                       * rule's (cuda_autotune.cpp; 0 with autotune "off") */
    FHD_CUDA_INFO_FUSED_DW0 = 6,      /* 1: layer 0's dW as the ReLU-backward kernel's partials
                                       * (no GEMM; cuda_plan.h, fuse_dw0) */
    FHD_CUDA_INFO_OPT_FORM = 7,       /* the optimiser: 0 two kernels, 1 the fused pass's loop
                                       * form, 2 its one-pass form (fhd__cuda_opt_fused_grid) */
    FHD_CUDA_INFO_OPT_PER = 8,        /* its weights a thread (fhd__opt_args.per: 2, 4 or 8) */
    FHD_CUDA_INFO_FORK_SN1 = 9,       /* 1: the target forward forks after the power iteration's
                                       * first pass (cuda_plan.h, fork_sn1) */
    FHD_CUDA_INFO_HEAD_IN_LOSS = 10,  /* 1: both head forwards inside the loss kernel
                                       * (cuda_plan.h, head_in_loss) */
    FHD_CUDA_INFO_DIST_WAITS = 11,    /* distributed: train's waits for its queue of updates to
                                       * shorten (cuda_dist.cpp, FHD_CUDA_DIST_DEPTH); not
                                       * synchronisations of the update's work */
    FHD_CUDA_INFO_COUNT = 12
};

#endif
