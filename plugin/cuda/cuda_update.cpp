/* cuda_update.cpp - the update (docs/design.md section 4, as plugin/cpu/cpu_backend.c's
 * update()), recorded once into a CUDA graph and replayed; train_batch; statistics snapshots.
 *
 * One update, main stream s0 and side stream s1:
 *   s0  sample + gather (train only; on s1, beside the spectral norm, when there is one; or
 *       the update before sampled it ahead, at its end)
 *   s0  spectral norm: [online u = normalize(W v); target sigma], [online v, sigma] (on sm_90
 *       the second a programmatic dependent of the first: its W loads overlap the first's end)
 *       -- fork -- (with batches sampled ahead, between the two: fork_sn1)
 *   s0  online forward on rows_on rows: online(s) and, with double DQN, online(s') in the same
 *       GEMMs (the batch region holds obs then next_obs)
 *   s1  target(s') forward
 *       (a head of a few outputs: the narrow kernel, on sm_90 a programmatic dependent of the
 *       GEMM before it; or, head_in_loss, both heads by the loss kernel)
 *       -- join --
 *   s0  loss: [head forwards,] head combine, target, weights, loss, dL/dQ, head backward, the
 *       rows' mean |td|; on sm_90 a programmatic dependent of the kernels before it (it starts
 *       while the narrow heads end)
 *   s0  dx through the head and the ReLU below it (dz of layer L - 1): for a small head the
 *       head-dx kernel (on sm_90 the loss kernel's programmatic dependent), else the head's dx
 *       GEMM; the branches below fork before it and are captured after it
 *   s2  the loss scalars (the statistics' block sums, Adam's scalars), then the head's dW GEMM
 *       (with split GEMMs, below: on s4, beside them) and with detailed_metrics after it the
 *       head's row norms (kernels/metrics.cuh)
 *   s5  (prioritized) the new priorities into the sum tree; joined after the optimiser
 *   s0  per layer below, from L - 1: dx GEMM, ReLU backward
 *   s3  a small dx GEMM's second half of K beside the first (split_dx), added by the ReLU
 *       backward
 *   s1  per layer below the head: dW GEMM as soon as that layer's dz is ready (with a TF32
 *       backward after transposing dz: cuda_plan.h, dz_t); layer 0's
 *       (the last before the optimiser) as two halves of the batch on s1 and s3 when small
 *       (split_dw0), added by the optimiser's norm pass, or, smaller still, none: the ReLU
 *       backward of layer 0 on s0 leaves its chunks' partials of dW_0 (fuse_dw0)
 *       -- join --
 *   s0  bias gradients from their per-block partials, gradient norm (+ SN gradient sums), then
 *       Adam + clip + SN correction + target update + counter increment: one cooperative
 *       launch with a grid barrier between the two passes (two launches without cooperative
 *       launch support); with a guard (kernels/guard.cuh) the norm pass decides whether the
 *       update is applied, and with PER the staged priorities enter the tree after it (one node)
 * With bf16 GEMMs (cuda_bf16.cpp) the optimiser writes the weights' bf16 copies (plan w16_opt;
 * with pruning they are converted first on s0 instead, and both padded heads copied after
 * them: cuda_head_pad.cpp); the sampling writes layer 0's bf16 input itself (train_batch
 * converts its rows), the loss kernel the head's bf16 output gradient, and the dx GEMMs and
 * ReLU backward bf16 dz.
 *   s0  pruning on (cuda_prune.cpp): the gradient masked before the optimiser, the selection
 *       after it (a no-op off pruning updates, decided on the device)
 * The update counter lives on the device and every kernel reads it, so the same graph serves
 * every update: sampling counter, beta, Adam step and target-update interval advance by
 * themselves.
 */
#include <string.h>

#include "cuda_internal.h"
#include "linear.cuh"

int32_t fhd__cuda_sync(fhd__backend *b, cudaStream_t s) {
    b->sync_count++;
    if (b->dist) /* bounded: a rank that failed must not hang this one (cuda_dist.cpp) */
        return fhd__cuda_dist_wait(b, s, NULL);
    FHD_CK(b, cudaStreamSynchronize(s));
    return FHD_OK;
}

int32_t fhd__cuda_sync_event(fhd__backend *b, cudaEvent_t e) {
    b->sync_count++;
    if (b->dist)
        return fhd__cuda_dist_wait(b, NULL, e);
    FHD_CK(b, cudaEventSynchronize(e));
    return FHD_OK;
}

/* Layer l's dx GEMM (1 <= l <= L; with split_dx its second half of K on s_aux beside it) and
 * the ReLU backward below it, on s0: dz[l] -> dz[l - 1] and layer l - 1's bias partials. */
static int32_t record_dx(fhd__backend *b, uint32_t l, cudaStream_t s0) {
    const fhd__layout *lo = &b->lo;
    const fhd__layer *below = &lo->layers[l - 1];
    const float *dx2 = NULL;
    if (b->plan.split_dx[l]) { /* the second half of K on s_aux, beside the first */
        FHD_CK(b, cudaEventRecord(b->ev_aux_fork[l], s0));
        FHD_CK(b, cudaStreamWaitEvent(b->s_aux, b->ev_aux_fork[l], 0));
        FHD_TRY(fhd__gemm_run(b, &b->bwd_dx2[l], b->s_aux, b->ws_aux));
        FHD_CK(b, cudaEventRecord(b->ev_aux_join[l], b->s_aux));
        dx2 = b->dxp[l];
    }
    FHD_TRY(fhd__gemm_run(b, &b->bwd_dx[l], s0, b->ws_main));
    if (dx2)
        FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_aux_join[l], 0));
    if (l == 1 && b->plan.fuse_dw0)
        FHD_CK(b, fhd__cuda_relu_backward_dw(b->dz[0], dx2, b->h[0], b->bpart[0], b->B, below->out,
                                             b->mlp_in, below->in, b->grad + below->w_off,
                                             b->gpart0, s0));
    else if (b->bf.on) /* dz_{l-1} in bf16 for its GEMMs */
        FHD_TRY(fhd__cuda_bf16_relu_backward(b, l - 1, dx2, s0));
    else
        FHD_CK(b, fhd__cuda_relu_backward_bgrad(b->dz[l - 1], b->dz[l - 1], dx2, b->h[l - 1],
                                                b->bpart[l - 1], b->B, below->out, s0));
    return FHD_OK;
}

int32_t fhd__cuda_record_update(fhd__backend *b, int train, int sample_in, int ahead) {
    const fhd__layout *lo = &b->lo;
    const uint32_t L = lo->L;
    cudaStream_t s0 = b->s_main, s1 = b->s_side;
    sample_in = train && sample_in;
    ahead = train && ahead;
    /* sampling and spectral norm are independent: with both, sampling runs beside it on s1 */
    const bool side_sample = sample_in && b->plan.side_sample;
    if (side_sample) {
        FHD_CK(b, cudaEventRecord(b->ev_pre, s0));
        FHD_CK(b, cudaStreamWaitEvent(s1, b->ev_pre, 0));
        FHD_CK(b, fhd__cuda_sample_gather(&b->a_sample, s1));
        FHD_CK(b, cudaEventRecord(b->ev_sample, s1));
    } else if (sample_in) {
        FHD_CK(b, fhd__cuda_sample_gather(&b->a_sample, s0));
    }
    /* bf16 GEMMs: both networks' copies and the padded head before the fork, unless the
     * optimiser keeps them (plan w16_opt) */
    FHD_TRY(fhd__cuda_bf16_record_weights(b, s0));
    FHD_TRY(fhd__cuda_bf16_record_input(b, train, s0)); /* bf16: train_batch's 2B rows */
    if (b->has_sn) {
        FHD_CK(b, fhd__cuda_sn_launch(&b->a_sn1, s0));
        if (b->plan.fork_sn1) { /* the target forward after the first pass (cuda_plan.h) */
            FHD_CK(b, cudaEventRecord(b->ev_fork, s0));
            FHD_CK(b, cudaStreamWaitEvent(s1, b->ev_fork, 0));
        }
        FHD_CK(b, fhd__cuda_sn_launch(&b->a_sn2, s0));
    }
    if (side_sample)
        FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_sample, 0));
    /* paired: layer 0 of both networks in one GEMM, then the fork */
    const uint32_t l0 = b->plan.pair_fwd0 ? 1 : 0;
    if (l0)
        FHD_TRY(fhd__gemm_run(b, &b->fwd_on[0], s0, b->ws_main));
    FHD_TRY(fhd__cuda_conv_record_input(b, s0)); /* shared by both networks: before the fork */
    if (!b->plan.fork_sn1) {
        FHD_CK(b, cudaEventRecord(b->ev_fork, s0));
        FHD_CK(b, cudaStreamWaitEvent(s1, b->ev_fork, 0));
    }
    /* the head forwards are the loss kernel's own with head_in_loss; a conv torso runs first
     * (cuda_conv.cpp) */
    const uint32_t top = L - (b->plan.head_in_loss ? 1u : 0u);
    FHD_TRY(fhd__cuda_conv_record_forward(b, 0, s0));
    for (uint32_t l = l0; l <= top; l++)
        FHD_TRY(fhd__gemm_run(b, &b->fwd_on[l], s0, b->ws_main));
    FHD_TRY(fhd__cuda_conv_record_forward(b, 1, s1));
    for (uint32_t l = l0; l <= top; l++)
        FHD_TRY(fhd__gemm_run(b, &b->fwd_tg[l], s1, b->ws_side));
    FHD_CK(b, cudaEventRecord(b->ev_tgt, s1));
    FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_tgt, 0));
    const fhd__loss_args *la = train ? &b->a_loss_train : &b->a_loss_batch;
    FHD_CK(b, fhd__cuda_td_loss(la, s0));
    FHD_TRY(fhd__cuda_bf16_record_head_dz(b, s0)); /* bf16: the head GEMMs' operand */
    /* a third branch: the loss statistics and the tree update, so that the dW GEMMs of the
     * layers below (on s1) do not queue behind them; joined before the optimiser */
    FHD_CK(b, cudaEventRecord(b->ev_loss, s0));
    /* dz[L - 1] (the critical path) captured before the branches forked at ev_loss, which do
     * not wait for it: nodes ready together start in about their capture order, and the
     * branches' kernels are not queued in front of it */
    if (la->fuse_dx)
        FHD_CK(b, fhd__cuda_head_dx(la, s0));
    else if (L > 0)
        FHD_TRY(record_dx(b, L, s0));
    FHD_CK(b, cudaStreamWaitEvent(b->s_prio, b->ev_loss, 0));
    FHD_CK(b, fhd__cuda_loss_scalars(la, b->s_prio));
    FHD_CK(b, cudaEventRecord(b->ev_scal, b->s_prio)); /* the sampling counter, for ahead */
    const bool tree = la->prioritized; /* train_batch samples nothing: no priorities */
    if (tree) { /* the tree is final after it: the next update's sampling may read it */
        FHD_CK(b, cudaStreamWaitEvent(b->s_tree, b->ev_loss, 0));
        FHD_CK(b, fhd__cuda_priority_update(la, b->s_tree));
        FHD_CK(b, cudaEventRecord(b->ev_tree, b->s_tree));
    }
    /* the head's dW GEMM: on a fourth branch beside the priority update, or after it on its
     * stream (cuda_plan.h, hdw_side: a rule, or measured by cuda_branch.cpp) */
    cudaStream_t s_hd = b->s_prio;
    if (b->plan.hdw_side) {
        s_hd = b->s_hdw;
        FHD_CK(b, cudaStreamWaitEvent(s_hd, b->ev_loss, 0));
    }
    FHD_TRY(fhd__gemm_run(b, &b->bwd_dw[L], s_hd, b->ws_prio));
    /* distributed: after the all-reduce instead (fhd__cuda_dist_record) */
    if (b->cfg.detailed_metrics && !b->dist) /* the head's row norms from its gradient (+1 node) */
        FHD_CK(b, fhd__cuda_detail_rows(&b->a_detail, s_hd));
    FHD_CK(b, cudaEventRecord(b->ev_prio, b->s_prio));
    if (b->plan.hdw_side)
        FHD_CK(b, cudaEventRecord(b->ev_hdw, s_hd));
    /* Per layer, the dx GEMM (the critical path) is captured before the dW GEMM that waits for
     * the same dz: nodes that become ready together start in about their capture order, and
     * the GEMM started second gets the SMs the first left. */
    for (int l = (int)L; l >= 0; l--) {
        if (l < (int)L)
            FHD_CK(b, cudaEventRecord(b->ev_dz[l], s0));
        if (l > 0 && l < (int)L)
            FHD_TRY(record_dx(b, (uint32_t)l, s0));
        if (l < (int)L) {
            if (l == 0 && b->plan.fuse_dw0) /* dW_0 came with the ReLU backward, below */
                continue;
            FHD_CK(b, cudaStreamWaitEvent(s1, b->ev_dz[l], 0));
            if (l == 0 && b->plan.split_dw0) { /* the batch's second half on s_aux */
                FHD_CK(b, cudaStreamWaitEvent(b->s_aux, b->ev_dz[l], 0));
                FHD_TRY(fhd__gemm_run(b, &b->bwd_dw0b, b->s_aux, b->ws_aux));
                FHD_CK(b, cudaEventRecord(b->ev_aux_dw, b->s_aux));
            }
            if (b->plan.dz_t[l])
                FHD_TRY(fhd__gemm_run(b, &b->bwd_dzt[l], s1, b->ws_side));
            FHD_TRY(fhd__gemm_run(b, &b->bwd_dw[l], s1, b->ws_side));
        }
    }
    /* below the linear torso, the conv torso's backward: dx chain on s0, dW GEMMs on s1 */
    FHD_TRY(fhd__cuda_conv_record_backward(b, s0, s1));
    FHD_CK(b, cudaEventRecord(b->ev_dw, s1));
    FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_dw, 0));
    FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_prio, 0));
    if (b->plan.hdw_side)
        FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_hdw, 0));
    if (b->plan.split_dw0)
        FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_aux_dw, 0));
    if (ahead) {
        /* the next update's batch, beside the optimiser: after the tree's last writer (the
         * priority update, which also set the counter it samples with) and the batch's last
         * readers (the loss kernel before it, layer 0's dW GEMMs) */
        cudaStream_t sa = b->s_hdw; /* after the head's dW GEMM there, if any: it ends earlier */
        FHD_CK(b, cudaStreamWaitEvent(sa, b->ev_scal, 0));
        if (tree)
            FHD_CK(b, cudaStreamWaitEvent(sa, b->ev_tree, 0));
        /* the descent and every row but the obs rows as soon as the tree is final; the obs
         * rows (layer 0's input) after their last reader */
        FHD_CK(b, fhd__cuda_sample_gather(&b->a_sample_desc, sa));
        if (b->plan.fuse_dw0) { /* layer 0's ReLU backward reads the batch last */
            FHD_CK(b, cudaStreamWaitEvent(sa, b->ev_dz[0], 0));
        } else {
            FHD_CK(b, cudaStreamWaitEvent(sa, b->ev_dw, 0));
            if (b->plan.split_dw0)
                FHD_CK(b, cudaStreamWaitEvent(sa, b->ev_aux_dw, 0));
        }
        FHD_CK(b, fhd__cuda_sample_gather(&b->a_sample_obs, sa));
        FHD_CK(b, cudaEventRecord(b->ev_ahead, sa));
    }
    /* distributed: the gradient finished, summed over the ranks and averaged (3 nodes and
     * NCCL's); the optimiser then reads it whole (cuda_dist.cpp) */
    const fhd__opt_args *opt = &b->a_opt;
    if (b->dist) {
        FHD_TRY(fhd__cuda_dist_record(b, s0));
        opt = fhd__cuda_dist_opt(b);
    }
    FHD_TRY(fhd__cuda_prune_record_mask(b, s0)); /* pruning: the gradient masked (+1 node) */
    if (b->plan.opt_grid) {
        FHD_CK(b, fhd__cuda_opt_fused(opt, b->plan.opt_grid, s0));
    } else {
        FHD_CK(b, fhd__cuda_clip_grad_norm(opt, s0));
        FHD_CK(b, fhd__cuda_adam_step(opt, s0));
    }
    if (tree) /* the priority update joins after the optimiser, which does not read the tree */
        FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_tree, 0));
    if (la->prio_stage) /* the guard with PER: the staged priorities unless skipped (+1 node) */
        FHD_CK(b, fhd__cuda_priority_commit(la, s0));
    /* pruning: the selection after the target update (FHD_PRUNE_PASSES + 1 nodes) */
    FHD_TRY(fhd__cuda_prune_record_select(b, s0));
    if (ahead)
        FHD_CK(b, cudaStreamWaitEvent(s0, b->ev_ahead, 0));
    return FHD_OK;
}

/* Before the capture: load every kernel (lazy module loading is not something to do inside a
 * capture) and run each GEMM of the update once, so that cuBLASLt's own first-use work is done
 * too. The warm-up writes only scratch buffers and the gradient, which is zeroed again. */
static int32_t preload(fhd__backend *b) {
    FHD_CK(b, fhd__cuda_sample_preload());
    FHD_CK(b, fhd__cuda_spectral_norm_preload());
    FHD_CK(b, fhd__cuda_linear_preload());
    FHD_CK(b, fhd__cuda_td_loss_preload());
    FHD_CK(b, fhd__cuda_optim_preload());
    FHD_CK(b, fhd__cuda_replay_preload());
    FHD_CK(b, fhd__cuda_act_preload());
    FHD_CK(b, fhd__cuda_bf16_preload());
    FHD_CK(b, fhd__cuda_dist_kernels_preload(b));
    for (uint32_t l = 0; l <= b->lo.L; l++) {
        FHD_TRY(fhd__gemm_run(b, &b->fwd_on[l], b->s_main, b->ws_main));
        if (!(l == 0 && b->plan.pair_fwd0))
            FHD_TRY(fhd__gemm_run(b, &b->fwd_tg[l], b->s_main, b->ws_main));
        if (b->plan.dz_t[l])
            FHD_TRY(fhd__gemm_run(b, &b->bwd_dzt[l], b->s_main, b->ws_main));
        if (!(l == 0 && b->plan.fuse_dw0))
            FHD_TRY(fhd__gemm_run(b, &b->bwd_dw[l], b->s_main, b->ws_main));
        if (l > 0)
            FHD_TRY(fhd__gemm_run(b, &b->bwd_dx[l], b->s_main, b->ws_main));
        if (b->plan.split_dx[l])
            FHD_TRY(fhd__gemm_run(b, &b->bwd_dx2[l], b->s_main, b->ws_main));
    }
    if (b->plan.split_dw0)
        FHD_TRY(fhd__gemm_run(b, &b->bwd_dw0b, b->s_main, b->ws_main));
    FHD_TRY(fhd__cuda_conv_preload_gemms(b));
    FHD_CK(b, cudaMemsetAsync(b->grad, 0, b->P * sizeof(float), b->s_main));
    return fhd__cuda_sync(b, b->s_main);
}

static int32_t capture(fhd__backend *b, int v);

void fhd__cuda_graphs_free(cudaGraph_t *graph, cudaGraphExec_t *gexec) {
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        if (gexec[v]) /* one still in flight is freed when it completes */
            cudaGraphExecDestroy(gexec[v]);
        if (graph[v])
            cudaGraphDestroy(graph[v]);
        gexec[v] = NULL;
        graph[v] = NULL;
    }
}

void fhd__cuda_drop_graphs(fhd__backend *b) {
    fhd__cuda_branch_drop_graphs(b);
    fhd__cuda_graphs_free(b->graph, b->gexec);
}

int32_t fhd__cuda_capture_graphs(fhd__backend *b) {
    int32_t rc = FHD_OK;
    const int nv = b->plan.sample_ahead ? FHD_CUDA_GRAPHS : 1; /* else SINGLE only */
    for (int v = 0; v < nv && rc == FHD_OK; v++)
        rc = capture(b, v);
    if (rc != FHD_OK)
        fhd__cuda_drop_graphs(b);
    return rc;
}

/* The four variants of the update (cuda_ext.h, FHD_CUDA_GRAPH_*). The fused optimiser pass is a
 * cooperative launch; should the capture of one fail, the update is captured again with the
 * two-kernel pass. opt_two (FHD_CUDA_STATE_OPT_FORM, tests only) forces the two-kernel pass with
 * its number of weights a thread. */
int32_t fhd__cuda_capture(fhd__backend *b) {
    FHD_TRY(preload(b));
    if (b->plan.opt_two) {
        fhd__cuda_opt_plan(&b->a_opt, b->plan.opt_two);
        b->plan.opt_grid = 0;
    } else {
        b->plan.opt_grid = fhd__cuda_opt_fused_grid(&b->a_opt, b->device);
    }
    int32_t rc = fhd__cuda_capture_graphs(b);
    if (rc != FHD_OK && b->plan.opt_grid) {
        b->plan.opt_grid = 0;
        rc = fhd__cuda_capture_graphs(b);
    }
    b->plan.opt_per = b->a_opt.per;
    b->plan.opt_one_pass = b->plan.opt_grid ? b->a_opt.one_pass : 0;
    if (rc == FHD_OK)
        rc = fhd__cuda_branch_capture(b); /* the measured branch's other form, if any */
    return rc;
}

static int32_t capture(fhd__backend *b, int v) {
    const int sample_in = v == FHD_CUDA_GRAPH_SINGLE || v == FHD_CUDA_GRAPH_FIRST;
    const int ahead = v == FHD_CUDA_GRAPH_FIRST || v == FHD_CUDA_GRAPH_STEADY;
    /* distributed: thread-local, so that NCCL's own threads may use CUDA during the capture
     * (as nccl-tests capture); the update's thread is checked alike in both modes */
    FHD_CK(b, cudaStreamBeginCapture(b->s_main, b->dist ? cudaStreamCaptureModeThreadLocal
                                                        : cudaStreamCaptureModeGlobal));
    int32_t rc = fhd__cuda_record_update(b, 1, sample_in, ahead);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(b->s_main, &g);
    if (rc != FHD_OK) {
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return rc;
    }
    if (e != cudaSuccess) {
        if (g)
            cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaStreamEndCapture (update graph)");
    }
    e = cudaGraphInstantiate(&b->gexec[v], g, 0);
    if (e != cudaSuccess) {
        b->gexec[v] = NULL;
        cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaGraphInstantiate (update graph)");
    }
    b->graph[v] = g;
    FHD_CK(b, cudaGraphUpload(b->gexec[v], b->s_main));
    return FHD_OK;
}

/* ---- statistics snapshots ------------------------------------------------------------------ */

/* Copy the device scalars into a pinned buffer of the ring after the work queued so far. A
 * buffer whose copy is still pending is not reused: the newest one is re-targeted instead, so
 * the older copies complete and the statistics advance however deep the queue is. */
int32_t fhd__cuda_snapshot(fhd__backend *b) {
    int k = b->snap_next;
    if (b->snap_seq[k] > b->snap_last_seq) { /* not yet taken: is it complete? */
        cudaError_t e = cudaEventQuery(b->ev_snaps[k]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            k = b->snap_newest;
        } else if (e != cudaSuccess) {
            return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaEventQuery (statistics)");
        }
    }
    if (k == b->snap_next)
        b->snap_next = (b->snap_next + 1) % FHD_CUDA_SNAPSHOTS;
    /* the record's scalars, with detailed_metrics its detail after them, distributed the
     * checksum record after that (b->snap_bytes) */
    FHD_CK(b,
           cudaMemcpyAsync(b->h_snap[k], b->st, b->snap_bytes, cudaMemcpyDeviceToHost, b->s_main));
    FHD_CK(b, cudaEventRecord(b->ev_snaps[k], b->s_main));
    b->snap_seq[k] = ++b->snap_counter;
    b->snap_newest = k;
    return FHD_OK;
}

/* Take the newest snapshot whose copy has completed (never waits). */
int32_t fhd__cuda_poll_snapshots(fhd__backend *b) {
    int best = -1;
    for (int k = 0; k < FHD_CUDA_SNAPSHOTS; k++) {
        if (b->snap_seq[k] <= b->snap_last_seq || (best >= 0 && b->snap_seq[k] <= b->snap_seq[best]))
            continue;
        cudaError_t e = cudaEventQuery(b->ev_snaps[k]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not an error: keep the last-error slot clean */
            continue;
        }
        if (e != cudaSuccess)
            return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaEventQuery (statistics)");
        best = k;
    }
    if (best >= 0) {
        b->snap_last = *b->h_snap[best];
        if (b->cfg.detailed_metrics)
            b->snap_detail = ((const fhd__dev_record *)(const void *)b->h_snap[best])
                                 ->detail[b->snap_last.stats_update & 1];
        if (b->dist)
            memcpy(&b->snap_dist, (const char *)b->h_snap[best] + sizeof(fhd__dev_record),
                   sizeof b->snap_dist);
        b->snap_last_seq = b->snap_seq[best];
        b->max_q = b->snap_last.max_q;
    }
    return FHD_OK;
}

void fhd__cuda_poll_rate(fhd__backend *b) {
    for (int k = 0; k < FHD_CUDA_SNAPSHOTS; k++) {
        if (b->rate_n[k] == 0)
            continue;
        float ms = 0.0f;
        if (cudaEventQuery(b->ev_rate[k][1]) != cudaSuccess ||
            cudaEventElapsedTime(&ms, b->ev_rate[k][0], b->ev_rate[k][1]) != cudaSuccess) {
            (void)cudaGetLastError(); /* not done yet: keep the last-error slot clean */
            continue;
        }
        b->exec_updates += b->rate_n[k];
        b->exec_ms += ms;
        b->rate_n[k] = 0;
    }
}

/* Within the run each update but the last samples the next one's batch (cuda_ext.h); none is
 * left sampled ahead when it returns, so observe, writes and checkpoints between calls see the
 * state of plain updates. */
int32_t fhd__cuda_launch_updates(fhd__backend *b, cudaGraphExec_t const *ex, int ahead,
                                 uint32_t n) {
    for (uint32_t k = 0; k < n; k++) {
        const bool first = k == 0 || !ahead;
        const bool last = k + 1 == n || !ahead;
        const int v = first ? (last ? FHD_CUDA_GRAPH_SINGLE : FHD_CUDA_GRAPH_FIRST)
                            : (last ? FHD_CUDA_GRAPH_LAST : FHD_CUDA_GRAPH_STEADY);
        FHD_CK(b, cudaGraphLaunch(ex[v], b->s_main));
        if (b->dist) /* a bounded queue: a failed rank is noticed here (cuda_dist.cpp) */
            FHD_TRY(fhd__cuda_dist_throttle(b));
    }
    return FHD_OK;
}

/* done: updates the call ran; the skips are those the snapshots newly show (each reported
 * once: exact for train_batch, which waits; train's may come a call late). Without a guard a
 * skip is a diverged update (kernels/guard.cuh): FHD_ERR_DIVERGED, naming the latest. */
static int32_t fill_stats(fhd__backend *b, fhd_train_stats *st, uint32_t done) {
    const uint64_t sk = b->snap_last.skipped;
    const uint32_t fresh = sk > b->skip_reported ? (uint32_t)(sk - b->skip_reported) : 0;
    b->skip_reported = sk;
    int32_t rc = FHD_OK;
    if (fresh && !b->cfg.guard.on) {
        const fhd__dev_scalars &s = b->snap_last;
        rc = fhd__cuda_failf(b, FHD_ERR_DIVERGED,
                             "update %llu diverged: loss %g, gradient norm %g; it was skipped on "
                             "the device, not applied (%u diverged since the last report; the "
                             "parameters are as after the last applied update)",
                             (unsigned long long)s.skip_update, (double)s.skip_loss,
                             (double)s.skip_grad_norm, fresh);
    }
    if (!st)
        return rc;
    st->updates_done += done > fresh ? done - fresh : 0;
    st->updates_skipped += fresh;
    st->update_index = b->updates - sk;
    st->loss = b->snap_last.loss;
    st->td_abs_mean = b->snap_last.td_abs_mean;
    st->q_mean = b->snap_last.q_mean;
    st->grad_norm = b->snap_last.grad_norm;
    return rc;
}

/* ---- train / train_batch ----------------------------------------------------------------- */

int32_t fhd__cuda_train(fhd__backend *b, uint32_t num_updates, fhd_train_stats *stats) {
    if (b->size < b->B)
        return fhd__cuda_failf(b, FHD_ERR_NOT_READY,
                               "train: the replay holds fewer transitions than batch_size");
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_bf16_refresh(b)); /* bf16: copies of params written since (w16_opt) */
    fhd__cuda_poll_rate(b);
    const int rs = b->rate_next; /* time this call's updates on the device, if its slot is free */
    const bool timed = num_updates > 0 && b->rate_n[rs] == 0;
    if (timed)
        FHD_CK(b, cudaEventRecord(b->ev_rate[rs][0], b->s_main));
    FHD_TRY(fhd__cuda_branch_train(b, num_updates));
    b->updates += num_updates;
    if (timed) {
        FHD_CK(b, cudaEventRecord(b->ev_rate[rs][1], b->s_main));
        b->rate_n[rs] = num_updates;
        b->rate_next = (rs + 1) % FHD_CUDA_SNAPSHOTS;
    }
    if (num_updates)
        FHD_TRY(fhd__cuda_snapshot(b));
    FHD_TRY(fhd__cuda_poll_snapshots(b));
    return fill_stats(b, stats, num_updates);
}

/* One update on a host batch: the same kernels without sampling and priorities, run directly
 * (not captured). The offline / parity path: it waits for the update so that the statistics and
 * the optional TD errors and targets it returns belong to this update. */
int32_t fhd__cuda_train_batch(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st) {
    const uint32_t B = b->B, D = b->lo.D;
    if (hb->B != B)
        return fhd__cuda_failf(b, FHD_ERR_SIZE_MISMATCH, "train_batch: %u rows; batch_size is %u",
                               hb->B, B);
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_bf16_refresh(b));
    /* pinned staging with the device region's layout: obs | next_obs (float32 or uint8) |
     * actions | R | disc | w */
    float *h = b->h_batch;
    float *h_act = fhd__cuda_img_stage_batch(b, hb, (unsigned char *)h);
    memcpy(h_act, hb->actions, sizeof(int32_t) * B * D);
    float *tail = h_act + (size_t)B * D;
    memcpy(tail, hb->rewards, sizeof(float) * B);
    memcpy(tail + B, hb->disc, sizeof(float) * B);
    memcpy(tail + 2 * B, hb->weights, sizeof(float) * B);
    FHD_CK(b, cudaMemcpyAsync(b->gbatch, h, b->gbatch_bytes, cudaMemcpyHostToDevice, b->s_main));
    FHD_TRY(fhd__cuda_img_convert_batch(b, b->s_main)); /* mlp_in of uint8 / scaled inputs */
    FHD_TRY(fhd__cuda_record_update(b, 0, 0, 0));
    b->updates++;
    if (hb->td || hb->y) {
        FHD_CK(b, cudaMemcpyAsync(b->h_tdy, b->td, sizeof(float) * B * D, cudaMemcpyDeviceToHost,
                                  b->s_main));
        FHD_CK(b, cudaMemcpyAsync(b->h_tdy + (size_t)B * D, b->y, sizeof(float) * B,
                                  cudaMemcpyDeviceToHost, b->s_main));
    }
    FHD_TRY(fhd__cuda_snapshot(b));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    FHD_TRY(fhd__cuda_poll_snapshots(b));
    if (hb->td)
        memcpy(hb->td, b->h_tdy, sizeof(float) * B * D);
    if (hb->y)
        memcpy(hb->y, b->h_tdy + (size_t)B * D, sizeof(float) * B);
    return fill_stats(b, st, 1);
}
