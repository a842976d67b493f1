/* cuda_plan.h - every decision the CUDA backend makes about an update, in one struct (C++17).
 *
 * fhd__cuda_plan_make derives the structural decisions from the layout, the config and the
 * device alone (rules; no pointers, no timing): which GEMMs run as two halves, which fusions
 * apply, which graph branch (stream) each node goes on, whether batches are sampled ahead.
 * The GEMM algorithms are chosen afterwards, once the buffers exist, by cuda_gemm.cpp (a rule,
 * or the bounded autotune of cuda_autotune.cpp with its cache), and written into the plan's
 * GEMM records; the loss kernel's setup and the capture confirm the two choices that depend on
 * what the device grants (head_in_loss: the loss kernel's shared memory; opt_grid: cooperative
 * launch). The graph recorder (cuda_update.cpp) reads the plan and derives nothing itself.
 *
 * Shapes: B batch, L hidden layers (layer L is the head), in_l / out_l layer widths.
 */
#ifndef FHD_CUDA_PLAN_H
#define FHD_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "config.h"
#include "layout.h"
}

#define FHD_MAXL (FHD_MAX_HIDDEN_LAYERS + 1)

/* What fhd__cuda_plan_make needs to know of the device. */
typedef struct fhd__cuda_device {
    int sm;       /* compute capability, major * 10 + minor */
    int sm_count; /* multiprocessors */
} fhd__cuda_device;

/* autotune (config key): how the GEMM algorithms are chosen */
enum {
    FHD_AUTOTUNE_OFF = 0,  /* the rule: the heuristic's first result (without split-K for small
                            * GEMMs); deterministic for a cuBLASLt version */
    FHD_AUTOTUNE_FAST = 1, /* the heuristic's top results timed on the real shapes and stream */
    FHD_AUTOTUNE_FULL = 2  /* every result the heuristic returns plus variants of the best
                            * (split-K counts, CTA swizzling): the exhaustive plan */
};

/* Where a GEMM's algorithm came from. */
enum { FHD_PICK_RULE = 0, FHD_PICK_TUNED = 1, FHD_PICK_CACHE = 2 };

/* One GEMM call site's choice, as the plan reports it (the descriptors are fhd__gemm's). */
typedef struct fhd__gemm_choice {
    char site[24];    /* "fwd0 online", "dW1", "dx2 half", ... ("" unused) */
    uint32_t m, n, k; /* column-major terms (cuda_gemm.cpp) */
    char op[3];       /* op(A) op(B): "TN", "NT", "NN" */
    uint32_t batch;   /* 2 for a paired forward */
    int tf32;
    int bf16;      /* FHD_GEMM_* (cuda_internal.h): bf16 operands, fp32 or bf16 output */
    int epilogue;  /* FHD_EPI_* asked for */
    int fallback;  /* 1: the epilogue by fhd__cuda_bias_act after a plain GEMM */
    int narrow;    /* 1: fhd__cuda_narrow_linear, no cuBLASLt */
    int transpose; /* 1: cublasLtMatrixTransform */
    int beside;    /* 1: off the critical path (a dW GEMM on a branch of its own) */
    int32_t algo, tile, stages, splitk, reduction, swizzle, custom, inner_shape, cluster_shape;
    uint64_t workspace; /* bytes the algorithm asks for */
    int pick;           /* FHD_PICK_* */
    int not_rule;       /* 1: another configuration than the rule's pick */
    int candidates;     /* timed by the autotune (0: none) */
    float us, rule_us;  /* the pick's and the rule's time per launch, when timed */
} fhd__gemm_choice;

#define FHD_PLAN_GEMMS (6 * FHD_MAXL + 4 * FHD_MAX_CONV_LAYERS + 2)

typedef struct fhd__cuda_plan {
    uint32_t layers; /* L + 1: the layers the per-layer flags cover */
    /* the conv torso below them (lo.NC layers): im2col + one GEMM a layer, channels-last,
     * layer 0's im2col shared by both networks (cuda_conv.cpp); it turns off pair_fwd0,
     * fuse_dw0 and fork_sn1 */
    uint32_t conv_layers;
    /* precision (matmul_precision) */
    int tf32_fwd, tf32_bwd;
    /* "bf16": every GEMM with bf16 operands and fp32 accumulation (docs/design.md section 5);
     * the fusions that compute a GEMM in an fp32 kernel of their own are off then: fuse_dw0,
     * head_narrow_*, head_in_loss and the loss kernel's fuse_dx (cuda_setup.cpp) */
    int bf16;
    /* bf16 without a conv torso: the update's sampling gathers the batch's obs and next_obs
     * rows straight into layer 0's bf16 operand (scaled and rounded once, both networks'
     * rows: the target reads the next_obs half), so that no conversion precedes the forward;
     * train_batch, which samples nothing, converts the host's 2B rows into it in one launch. */
    int gather_bf16;
    /* Small backward GEMMs on the critical path as two halves on two streams, each a K loop of
     * half the length: layer l's dx GEMM (split_dx[l]: halves of K = out_l, the second into dxp,
     * added by the ReLU backward) where out_l >= 128, out_l % 16 == 0 and in_l B out_l <= 2^24;
     * layer 0's dW GEMM (split_dw0: halves of the batch, the second added by the optimiser)
     * where B >= 128, B % 16 == 0 and in_0 out_0 B <= 2^24. */
    int split_dx[FHD_MAXL], split_dw0, split_any;
    /* bf16: layer l's dx GEMM (1 <= l <= L) writes its product rounded to bf16 straight into
     * bf.dz[l - 1] (D in CUDA_R_16BF), which the ReLU backward then masks in place, wherever
     * that dx is not split (a split dx's halves are added in fp32 first). */
    int dx16[FHD_MAXL];
    /* Layer 0's dW as partials of the ReLU-backward kernel of layer 0 instead of a GEMM, each
     * chunk of rows multiplying its dz tile by its rows of the batch (added by the optimiser's
     * norm pass): two or more hidden layers, in_0 <= FHD_DW0_MAX_IN and at most
     * FHD_DW0_MAX_PARTS chunks. Replaces split_dw0. */
    int fuse_dw0;
    /* The head's dW GEMM on a branch of its own beside the priority update where the backward's
     * tail is short (split GEMMs, fuse_dw0, or bf16 GEMMs); else after the priority update on
     * its stream. Without those the branch gains or loses by shape (both ways by up to 2x on
     * the random-shape suite): there, with the autotune on and not distributed, hdw_measure is
     * 1 and the learner's first updates time both forms (cuda_branch.cpp), or the cache says
     * which won; hdw_from says where the form came from, hdw_us the medians of both forms (us
     * per update: [0] after the priority update, [1] on its own branch; 0 until measured). */
    int hdw_side, hdw_measure, hdw_from;
    float hdw_us[2];
    /* dz_l transposed (batch contiguous) for layer l's dW GEMM: TF32 backward, 1 <= l < L,
     * B % 4 == 0 (TF32 tensor-core kernels want the K dimension contiguous in both operands). */
    int dz_t[FHD_MAXL];
    /* Layer 0 of both networks as one batched GEMM, the graph's single root: no spectral norm
     * and rows_on out_0 in_0 <= 2^24. */
    int pair_fwd0;
    /* The next update's batch sampled at the end of each update (the FHD_CUDA_GRAPH_* captures,
     * cuda_ext.h): without spectral norm, or with it where hdw_side (the backward's tail leaves
     * the card room beside the optimiser), and not with a guard and prioritized replay (the
     * guard's priority commit follows the optimiser, and the next batch the commit). Otherwise
     * each update samples its own batch: on s_side beside the power iteration with spectral
     * norm (side_sample), first on s_main without. */
    int sample_ahead, side_sample;
    /* With spectral norm and batches sampled ahead, the target forward forks after the power
     * iteration's first pass (which computes the target's sigma) instead of after the second. */
    int fork_sn1;
    /* The head's forward by fhd__cuda_narrow_linear (out <= FHD_NARROW_MAX_OUT and
     * rows in <= FHD_NARROW_MAX_X) for the online (rows_on rows) and the target (B rows) head. */
    int head_narrow_on, head_narrow_tg;
    /* Both head forwards inside the loss kernel: both heads narrow and a hidden layer below
     * them (the wish); the loss kernel's setup keeps it where its 8-row blocks, float4 rows and
     * both W_head fit FHD_LOSS_HEAD_SMEM (the plan then says 1). */
    int head_in_loss;
    /* The head's forward and dx GEMMs read a copy of both heads padded to HOs rows, HO rounded
     * up to 8, the padding rows zero (one launch at the start of the update and of act's graph,
     * cuda_head_pad.cpp): with bf16 GEMMs (16-byte rows of the bf16 dz; for an odd head
     * cuBLASLt offers only its older kernels). In fp32 and TF32 the same copy moved none of
     * B2's update time (its head kernels shortened, the graph's critical path did not), so
     * there HOs is HO rounded up to 4 (16-byte rows of fp32 outputs) and the params are read. */
    int pad_head;
    /* bf16: the optimiser writes the GEMMs' copies of each value it writes (bf.w, the padded
     * head) instead of a conversion of both networks at the start of each update; writes of
     * the params outside the update mark them stale, made again before the next update
     * (cuda_bf16.cpp). Not with pruning (its selection zeroes weights after the optimiser) nor
     * fuse_dw0 (off with bf16; the optimiser's copying instances have no form for it). */
    int w16_opt;
    /* Gradual magnitude pruning (lo.num_masks > 0; cuda_prune.cpp): the gradient masked on
     * s_main before the optimiser (one node) and the selection after it (FHD_PRUNE_PASSES + 1
     * nodes, each returning at once off a pruning update). Nothing else of the plan depends on
     * it. */
    int prune;
    /* streams beyond s_main, s_side, s_prio: s_aux for split halves, s_hdw for the head's dW
     * and the sampling ahead (a stream is created only where a node goes on it) */
    int use_aux, use_hdw;
    /* prioritized replay: the priority update on s_tree, beside the loss scalars on s_prio, so
     * that the optimiser does not wait for the tree's update */
    int use_tree;
    /* the optimiser: opt_grid > 0 the fused cooperative pass on that grid, 0 the two kernels;
     * opt_two forces the two kernels with that many weights a thread (tests) */
    unsigned int opt_grid;
    uint32_t opt_two;
    uint32_t opt_per, opt_one_pass; /* as fhd__cuda_opt_fused_grid / fhd__cuda_opt_plan left them */
    /* GEMMs: algorithm choices, in the order they were planned */
    fhd__gemm_choice gemm[FHD_PLAN_GEMMS];
    int ngemm;
    /* autotune */
    int autotune;          /* FHD_AUTOTUNE_* */
    char cache_file[512];  /* "" without a cache */
    char cache[160];       /* "hit", "miss", "ignored: <why>", "none" (off, or no path) */
    double autotune_ms;    /* wall time of the tuning at create */
    double budget_ms;      /* its budget */
    int timed, cache_hits; /* GEMMs timed, GEMMs whose pick came from the cache */
} fhd__cuda_plan;

/* The structural decisions for layout lo and config cfg on device dev (see above); the GEMM
 * records, head_in_loss's confirmation and opt_grid are filled later. */
void fhd__cuda_plan_make(const fhd__layout *lo, const fhd__config *cfg, const fhd__cuda_device *dev,
                         fhd__cuda_plan *p);

/* Where plan.hdw_side came from. */
enum { FHD_BRANCH_RULE = 0, FHD_BRANCH_MEASURING = 1, FHD_BRANCH_MEASURED = 2, FHD_BRANCH_CACHE = 3 };

/* Set the head's dW branch (hdw_side) and the decisions that follow from it: sample_ahead,
 * side_sample, fork_sn1 and use_hdw (fhd__cuda_plan_make's rules; the measured choice switches
 * forms with it). */
void fhd__cuda_plan_branch(fhd__cuda_plan *p, const fhd__layout *lo, const fhd__config *cfg,
                           int hdw_side);

/* The head's forward over `rows` rows by fhd__cuda_narrow_linear (the rule of head_narrow_*; the
 * act path applies it to its own row counts): a few outputs, where cuBLASLt's tiles would be
 * mostly padding, and an input small enough for L2. */
int fhd__cuda_head_narrow(const fhd__layout *lo, uint64_t rows);

/* The plan as one JSON object into buf (cap bytes, NUL-terminated, cut at cap): the length it
 * needs, as snprintf. */
int fhd__cuda_plan_json(const fhd__cuda_plan *p, char *buf, size_t cap);

#endif
