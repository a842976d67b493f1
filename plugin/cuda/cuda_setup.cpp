/* cuda_setup.cpp - the arguments of every kernel and GEMM of the update, fixed once at create
 * (pointers into the buffers, shapes, hyperparameters), before the graph is captured. */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "linear.cuh"

/* Counters (last-block-done) in b->counters. */
enum { CNT_LOSS = 0, CNT_NORM = 1, CNT_ADAM = 2, CNT_SN = 3 };
#define CNT_SN_COUNT (4 * FHD_MAX_HIDDEN_LAYERS)
static_assert(CNT_SN + CNT_SN_COUNT <= 64, "counters: 64 allocated");

static void prepare_sn(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    const uint64_t sn_half = lo->sn_size;
    unsigned int *cnt = b->counters + CNT_SN;
    /* sn_partial: the target sigma jobs' blocks, then the eval sigma jobs' blocks */
    uint64_t tpart = 0;
    for (uint32_t l = 0; l < lo->L; l++)
        if (lo->layers[l].sn)
            tpart += fhd__cuda_sn_job_blocks(SN_JOB_SIGMA, lo->layers[l].out, lo->layers[l].in);
    memset(&b->a_sn1, 0, sizeof b->a_sn1);
    memset(&b->a_sn2, 0, sizeof b->a_sn2);
    memset(&b->a_sn_eval, 0, sizeof b->a_sn_eval);
    fhd__sn_job targets[FHD_MAX_HIDDEN_LAYERS];
    uint64_t scr = 0, poff = 0;
    uint32_t j = 0;
    for (uint32_t l = 0; l < lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        if (!ly->sn)
            continue;
        const uint32_t m = ly->out, k = ly->in;
        fhd__sn_job on = {};
        on.W = b->params + ly->w_off;
        on.u = b->sn + ly->u_off;
        on.v = b->sn + ly->v_off;
        on.m = m;
        on.k = k;
        /* phase 1: u = normalize(W v) of the online layer */
        fhd__sn_job u = on;
        u.mode = SN_JOB_U;
        u.scratch = b->sn_scratch + scr;
        u.done = cnt + j;
        b->a_sn1.job[b->a_sn1.njobs++] = u;
        /* phase 2: v = normalize(W^T u), sigma of the online layer */
        fhd__sn_job v = u;
        v.mode = SN_JOB_V;
        v.sigma = b->sn_sigma + l;
        v.inv_sigma = b->sn_inv + l;
        v.norms = b->sn_norms + 2 * l;
        v.done = cnt + FHD_MAX_HIDDEN_LAYERS + j;
        b->a_sn2.job[b->a_sn2.njobs++] = v;
        /* target sigma with its stored vectors (phase 1, after the V jobs) */
        fhd__sn_job t = {};
        t.W = b->params + b->T + ly->w_off;
        t.u = b->sn + sn_half + ly->u_off;
        t.v = b->sn + sn_half + ly->v_off;
        t.m = m;
        t.k = k;
        t.mode = SN_JOB_SIGMA;
        t.sigma = b->sn_sigma + FHD_MAX_HIDDEN_LAYERS + l;
        t.inv_sigma = b->sn_inv + FHD_MAX_HIDDEN_LAYERS + l;
        t.partial = b->sn_partial + poff;
        t.done = cnt + 2 * FHD_MAX_HIDDEN_LAYERS + j;
        targets[j] = t;
        /* eval sigma of the online layer with its stored vectors (act) */
        fhd__sn_job e = on;
        e.mode = SN_JOB_SIGMA;
        e.sigma = b->sn_sigma + 2 * FHD_MAX_HIDDEN_LAYERS + l;
        e.inv_sigma = b->sn_inv + 2 * FHD_MAX_HIDDEN_LAYERS + l;
        e.partial = b->sn_partial + tpart + poff;
        e.done = cnt + 3 * FHD_MAX_HIDDEN_LAYERS + j;
        b->a_sn_eval.job[b->a_sn_eval.njobs++] = e;
        poff += fhd__cuda_sn_job_blocks(SN_JOB_SIGMA, m, k);
        scr += fhd__cuda_sn_scratch_floats(m, k);
        j++;
    }
    for (uint32_t i = 0; i < j; i++)
        b->a_sn1.job[b->a_sn1.njobs++] = targets[i];
    fhd__cuda_sn_plan(&b->a_sn1);
    fhd__cuda_sn_plan(&b->a_sn2);
    fhd__cuda_sn_allow_pdl(&b->a_sn2); /* its W loads overlap the U pass's end */
    fhd__cuda_sn_plan(&b->a_sn_eval);
}

static void prepare_sample(fhd__backend *b) {
    fhd__sample_args *a = &b->a_sample;
    memset(a, 0, sizeof *a);
    a->st = b->st;
    a->nodes = b->nodes;
    a->leaves = b->leaves;
    a->prioritized = b->prioritized;
    a->seed = b->cfg.seed;
    a->B = b->B;
    a->first = 0; /* distributed: set_comm gives this rank's share (cuda_dist.cpp) */
    a->draws = b->B;
    a->S = b->lo.S;
    a->D = b->lo.D;
    a->r_obs = b->r_obs;
    a->r_next = b->r_next;
    a->r_act = b->r_act;
    a->r_ret = b->r_ret;
    a->r_disc = b->r_disc;
    a->g_obs = b->g_x;
    a->g_next = b->g_x ? b->g_x + (size_t)b->B * b->lo.S : NULL;
    a->g_act = b->g_act;
    a->g_ret = b->g_ret;
    a->g_disc = b->g_disc;
    a->idx = b->idx;
    a->q = b->qs;
    a->part_min = b->part_min;
    fhd__cuda_img_sample_args(b, a); /* uint8 rings, frames, the rows' form (cuda_frames.cpp) */
    b->a_sample_desc = *a; /* the next update's batch, sampled ahead in two launches */
    b->a_sample_desc.ahead = 1;
    b->a_sample_desc.part = FHD_SAMPLE_NO_OBS;
    b->a_sample_obs = b->a_sample_desc;
    b->a_sample_obs.part = FHD_SAMPLE_OBS;
}

/* The target forward's output of torso layer l (target(s'), B rows): the two buffers in turn,
 * bf16 ones with bf16 GEMMs (the head's is head_t). */
static void *target_output(const fhd__backend *b, uint32_t l) {
    if (b->bf.on)
        return l % 2 == 0 ? (void *)b->bf.tg_a : (void *)b->bf.tg_b;
    return l % 2 == 0 ? (void *)b->tg_a : (void *)b->tg_b;
}

/* The target forward's input of layer l >= 1: the output of layer l - 1, or with layer 0
 * paired the target's layer-0 output, rows_on rows after the online ones in h[0] (with double
 * DQN both run over (s, s') and the target's rows of s' are its second half). */
static const void *target_input(const fhd__backend *b, uint32_t l) {
    if (l == 1 && b->plan.pair_fwd0) {
        const uint64_t out0 = b->lo.layers[0].out;
        const uint64_t skip = (uint64_t)b->rows_on * out0 + (b->rows_on > b->B ? b->B * out0 : 0);
        return fhd__elem_at(fhd__cuda_op_out((fhd__backend *)b, 0), skip, b->bf.on);
    }
    return target_output(b, l - 1);
}

/* train_batch's loss arguments: the training ones with the host's weights, without PER. */
static void loss_batch_args(fhd__backend *b) {
    b->a_loss_batch = b->a_loss_train;
    b->a_loss_batch.w_in = b->g_w;
    b->a_loss_batch.prioritized = 0;
    b->a_loss_batch.prio_stage = NULL;
}

static int32_t prepare_loss(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    const fhd__config *c = &b->cfg;
    fhd__loss_args *a = &b->a_loss_train;
    memset(a, 0, sizeof *a);
    const uint32_t B = b->B, HO = lo->head_out;
    a->head_on = b->h[lo->L];
    a->head_tgt = b->head_t;
    a->head_sel = c->double_dqn ? b->h[lo->L] + (size_t)B * b->HOs : b->head_t;
    a->act = b->g_act;
    a->ret = b->g_ret;
    a->disc = b->g_disc;
    a->w_in = NULL;
    a->prioritized = b->prioritized;
    a->q_samp = b->qs;
    a->qparts = b->part_min;
    a->nqparts = fhd__cuda_sample_grid(b->B);
    a->idx = b->idx;
    a->td_row = b->td_row;
    a->prio_stage = b->prio_stage;
    a->guard_skip = &b->clip->skip;
    a->nodes = b->nodes;
    a->leaves = b->leaves;
    a->per_alpha = (float)c->per_alpha;
    a->per_eps = (float)c->per_eps;
    a->beta0 = c->per_beta0;
    a->beta_steps = c->per_beta_steps;
    a->w_out = b->w_out;
    a->dout = b->dz[lo->L];
    a->dout16 = b->bf.on ? (void *)b->bf.dz[lo->L] : NULL; /* kept in staged mode (setup) */
    a->td = b->td;
    a->y = b->y;
    a->colpart = b->colpart;
    a->statpart = b->statpart;
    a->st = b->st;
    a->adam_step = &b->clip->pre_step; /* device addresses: for the fused optimiser */
    a->adam_bc2_sqrt = &b->clip->pre_bc2_sqrt;
    a->lr = c->lr;
    a->beta1 = c->adam_beta1;
    a->beta2 = c->adam_beta2;
    a->B = B;
    a->D = lo->D;
    a->KT = lo->KT;
    a->HO = HO;
    a->HOs = b->HOs;
    a->dueling = lo->dueling;
    a->huber = c->loss == FHD_LOSS_HUBER;
    a->huber_delta = (float)c->huber_delta;
    a->cql_alpha = (float)c->cql_alpha;
    for (uint32_t d = 0; d < lo->D; d++) {
        a->K[d] = lo->K[d];
        a->k_off[d] = lo->k_off[d];
    }
    /* the head's dx and the ReLU backward below it, inside the loss kernel if the head is small */
    const uint32_t L = lo->L;
    const fhd__layer *head = &lo->layers[L];
    a->w_head = b->params + head->w_off;
    a->alpha = head->sn ? b->sn_inv + L : b->d_one;
    if (L > 0 && !b->bf.on) { /* (the fused dx is an fp32 GEMM of its own: not with bf16) */
        a->h_below = b->h[L - 1];
        a->dz_below = b->dz[L - 1];
        a->bpart = b->bpart[L - 1];
        a->H = lo->layers[L - 1].out;
    }
    FHD_CK(b, fhd__cuda_td_loss_setup(a, b->device));
    /* where each layer's bias-gradient partials come from (summed by the norm kernel) */
    for (uint32_t l = 0; l < L; l++)
        b->bparts[l] = l == 0 && b->plan.fuse_dw0 ? fhd__cuda_relu_dw_chunks(B)
                                             : fhd__cuda_relu_bgrad_chunks(B);
    if (a->fuse_dx)
        b->bparts[L - 1] = fhd__cuda_td_loss_grid(B);
    b->bpart[L] = b->colpart;
    b->bparts[L] = fhd__cuda_td_loss_grid(B);
    loss_batch_args(b);
    return FHD_OK;
}

/* The head forwards inside the loss kernel (head_in_loss, cuda_plan.h) where both heads are
 * planned as narrow kernels: once the GEMMs are planned, the two plans hold the pointers the
 * loss kernel takes (the target's input depends on whether layer 0 is paired); the loss
 * kernel's setup keeps head_nc where it can. */
static int32_t prepare_head_in_loss(fhd__backend *b) {
    fhd__loss_args *a = &b->a_loss_train;
    const uint32_t L = b->lo.L;
    const fhd__gemm *on = &b->fwd_on[L], *tg = &b->fwd_tg[L];
    if (!b->plan.head_in_loss) /* the plan's wish: both heads narrow, a layer below */
        return FHD_OK;
    b->plan.head_in_loss = 0;
    if (!on->narrow || !tg->narrow)
        return FHD_OK;
    a->b_head = (const float *)on->bias; /* narrow: fp32 operands */
    a->x_tgt = (const float *)tg->B;
    a->w_head_tg = (const float *)tg->A;
    a->b_head_tg = (const float *)tg->bias;
    a->alpha_tg = tg->alpha;
    a->head_nc = (uint32_t)fhd__cuda_narrow_chunk(on->out);
    FHD_CK(b, fhd__cuda_td_loss_setup(a, b->device));
    b->plan.head_in_loss = a->head_nc != 0;
    loss_batch_args(b);
    return FHD_OK;
}

static void prepare_opt(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    const fhd__config *c = &b->cfg;
    fhd__opt_args *a = &b->a_opt;
    memset(a, 0, sizeof *a);
    a->params = b->params;
    a->grad = b->grad;
    a->m = b->adam_m;
    a->v = b->adam_v;
    a->sn_vec = b->sn;
    a->P = b->P;
    a->T = b->T;
    a->sn_size = lo->sn_size;
    /* segments: every weight matrix (spectrally normalised or not) and every bias vector, whose
     * gradient the norm kernel sums from its partials; in offset order */
    fhd__cuda_conv_opt_segments(b, a); /* the conv layers' first: they come first in params */
    for (uint32_t l = 0; l <= lo->L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        int32_t sn = -1;
        if (ly->sn) {
            fhd__opt_sn v = {ly->out, ly->in, fhd_divisor_make(ly->in), b->sn + ly->u_off,
                             b->sn + ly->v_off, b->sn_sigma + l, b->sn_norms + 2 * l, NULL};
            sn = (int32_t)a->nsn;
            a->sn[a->nsn++] = v;
        }
        fhd__opt_segment w =
            fhd__opt_segment_at(ly->w_off, (uint64_t)ly->out * ly->in, sn, NULL, 0);
        if (l == 0 && (b->plan.split_dw0 || b->plan.fuse_dw0)) {
            w.extra = b->gpart0;
            w.nextra = b->plan.split_dw0 ? 1 : fhd__cuda_relu_dw_chunks(b->B) - 1;
        }
        fhd__opt_segment bias =
            fhd__opt_segment_at(ly->b_off, ly->out, -1, b->bpart[l], b->bparts[l]);
        a->seg[a->nseg++] = w;
        a->seg[a->nseg++] = bias;
    }
    fhd__cuda_opt_plan(a, 8); /* 2048 weights a block; fhd__cuda_capture plans the fused pass (or
                               * the forced two-kernel one: opt_two) */
    a->partial = b->opt_partial;
    a->done_norm = b->counters + CNT_NORM;
    a->done_adam = b->counters + CNT_ADAM;
    a->clip = b->clip;
    a->st = b->st;
    a->max_norm = (float)c->max_grad_norm;
    a->lr = c->lr;
    a->beta1 = c->adam_beta1;
    a->beta2 = c->adam_beta2;
    a->eps = (float)c->adam_eps;
    a->weight_decay = c->weight_decay;
    a->decoupled = c->optimizer == FHD_OPT_ADAMW;
    a->target_interval = c->target_update_interval;
    a->tau = (float)c->tau;
    /* the training guard's bounds (kernels/guard.cuh): 0 none; non-finite updates skip anyway */
    a->guard_max_loss = (float)c->guard.max_loss;
    a->guard_max_norm = (float)c->guard.max_grad_norm;
}

/* The update's GEMMs. Their operands are bf16 or fp32 as bf.on says (cuda_bf16.cpp: op_*),
 * a split half an element offset into them. */
static int32_t prepare_gemms(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    /* layer 0 reads the MLP's input mlp_in, (2B, in0) rows: obs rows, then next_obs rows */
    const uint32_t L = lo->L, B = b->B, in0 = lo->layers[0].in;
    const uint32_t out0 = lo->layers[0].out;
    const int bf = b->bf.on, ab = bf ? FHD_GEMM_BF16_IN : FHD_GEMM_FP32;
    if (b->plan.pair_fwd0 &&
        fhd__gemm_plan_forward_pair(b, &b->fwd_on[0], 0, b->rows_on, fhd__cuda_op_in(b, 0),
                                    b->rows_on > B ? 0 : (int64_t)B * in0, fhd__cuda_op_out(b, 0),
                                    (int64_t)b->rows_on * out0, NULL) != FHD_OK) {
        /* no batched algorithm with the bias epilogue: two GEMMs, as without pairing (the
         * descriptors of the failed plan go, and so does its message) */
        fhd__gemm_destroy(&b->fwd_on[0]);
        b->err[0] = '\0';
        b->plan.pair_fwd0 = 0;
    }
    for (uint32_t l = 0; l <= L; l++) {
        const fhd__layer *ly = &lo->layers[l];
        const float *a_on = ly->sn ? b->sn_inv + l : b->d_one;
        const float *a_tg = ly->sn ? b->sn_inv + FHD_MAX_HIDDEN_LAYERS + l : b->d_one;
        const void *xo = fhd__cuda_op_in(b, l);
        /* target(s') */
        const void *xt = l > 0                 ? target_input(b, l)
                         : b->plan.gather_bf16 ? (const void *)(b->bf.x + (size_t)B * in0)
                         : bf                  ? (const void *)b->bf.x_tg
                                               : (const void *)b->mlp_in_tg;
        void *yt = l == L ? (void *)b->head_t : target_output(b, l);
        float *yt32 = l % 2 == 0 ? b->tg_a : b->tg_b; /* bf16 epilogue fallback's scratch */
        if (!(l == 0 && b->plan.pair_fwd0)) {
            /* online(s) [+ online(s')] */
            FHD_TRY(fhd__gemm_plan_forward(b, &b->fwd_on[l], 0, l, b->rows_on, xo,
                                           fhd__cuda_op_out(b, l), b->h[l], a_on));
            FHD_TRY(fhd__gemm_plan_forward(b, &b->fwd_tg[l], 1, l, B, xt, yt, yt32, a_tg));
        }
        /* dW_l (out, in) = dz_l^T x_l: column-major dW^T (in, out) = x^T (in, B) . dz (B, out) */
        fhd__gemm_spec s;
        memset(&s, 0, sizeof s);
        s.tf32 = b->plan.tf32_bwd;
        s.bf16 = ab;
        s.opa = CUBLAS_OP_N;
        s.opb = CUBLAS_OP_T;
        s.m = ly->in;
        s.n = ly->out;
        s.k = B;
        s.A = xo;
        s.lda = ly->in;
        s.B = fhd__cuda_op_dz(b, l);
        s.ldb = l == L ? b->HOs : ly->out;
        if (b->plan.dz_t[l]) { /* dz^T (out, B) row-major: the batch contiguous (TF32 only) */
            char tsite[24];
            snprintf(tsite, sizeof tsite, "dz%u transpose", l);
            FHD_TRY(fhd__gemm_plan_transpose(b, &b->bwd_dzt[l], b->dz[l], B, ly->out, b->dzt[l],
                                             tsite));
            s.opb = CUBLAS_OP_N;
            s.B = b->dzt[l];
            s.ldb = B;
        }
        s.C = b->grad + ly->w_off;
        s.ldc = ly->in;
        s.alpha = b->d_one;
        char site[24];
        snprintf(site, sizeof site, "dW%u", l);
        s.site = site;
        s.beside = l > 0; /* beside the dx chain (the head's beside the priority update);
                           * layer 0's dW is the last GEMM before the optimiser */
        if (l == 0 && b->plan.fuse_dw0) /* the ReLU-backward kernel's partials */
            continue;
        if (l == 0 && b->plan.split_dw0) { /* rows [0, B/2) here, [B/2, B) into gpart0 */
            s.k = B / 2;
            s.site = "dW0 half";
            s.beside = 0; /* the last GEMM before the optimiser */
            FHD_TRY(fhd__gemm_plan(b, &b->bwd_dw[l], &s));
            s.A = fhd__elem_at(xo, (uint64_t)(B / 2) * ly->in, bf);
            s.B = fhd__elem_at(fhd__cuda_op_dz(b, l), (uint64_t)(B / 2) * ly->out, bf);
            s.C = b->gpart0;
            s.site = "dW0 half2";
            FHD_TRY(fhd__gemm_plan(b, &b->bwd_dw0b, &s));
            continue;
        }
        FHD_TRY(fhd__gemm_plan(b, &b->bwd_dw[l], &s));
        if (l == 0)
            continue;
        /* dx (B, in) = dz_l W_l: column-major dx^T (in, B) = W^T (in, out) . dz^T (out, B) */
        memset(&s, 0, sizeof s);
        s.tf32 = b->plan.tf32_bwd;
        s.bf16 = ab;
        s.opa = CUBLAS_OP_N;
        s.opb = CUBLAS_OP_N;
        s.m = ly->in;
        s.n = B;
        /* the padded head: HOs rows of W, dz's padding columns zero */
        s.k = l == L && b->plan.pad_head ? b->HOs : ly->out;
        s.A = l == L ? fhd__cuda_op_head_w(b, 0) : fhd__cuda_op_w(b, 0, ly->w_off);
        s.lda = ly->in;
        s.B = fhd__cuda_op_dz(b, l);
        s.ldb = l == L ? b->HOs : ly->out;
        s.C = b->dz[l - 1];
        if (b->plan.dx16[l]) { /* the bf16 dz below, masked in place by the ReLU backward */
            s.bf16 = FHD_GEMM_BF16_OUT;
            s.C = b->bf.dz[l - 1];
        }
        s.ldc = ly->in;
        s.alpha = a_on;
        snprintf(site, sizeof site, "dx%u", l);
        s.site = site;
        s.beside = 0;
        if (b->plan.split_dx[l]) { /* outputs [0, out/2) of layer l here, [out/2, out) into dxp */
            const uint32_t h = ly->out / 2;
            s.k = h;
            snprintf(site, sizeof site, "dx%u half", l);
            FHD_TRY(fhd__gemm_plan(b, &b->bwd_dx[l], &s));
            s.A = fhd__elem_at(fhd__cuda_op_w(b, 0, ly->w_off), (uint64_t)h * ly->in, bf);
            s.B = fhd__elem_at(fhd__cuda_op_dz(b, l), h, bf);
            s.C = b->dxp[l];
            snprintf(site, sizeof site, "dx%u half2", l);
            FHD_TRY(fhd__gemm_plan(b, &b->bwd_dx2[l], &s));
            continue;
        }
        FHD_TRY(fhd__gemm_plan(b, &b->bwd_dx[l], &s));
    }
    return FHD_OK;
}

int32_t fhd__cuda_prepare_kernels(fhd__backend *b) {
    prepare_sn(b);
    prepare_sample(b);
    FHD_TRY(prepare_loss(b));
    prepare_opt(b);
    FHD_TRY(fhd__cuda_prune_prepare(b)); /* pruning (cuda_prune.cpp): after the optimiser's */
    FHD_TRY(fhd__cuda_bf16_opt_copies(b, &b->a_opt)); /* bf16: the copies it writes (w16_opt) */
    /* the update's GEMMs, recorded in the plan and (autotune fast / full) timed */
    b->plan.ngemm = 0;
    b->planning = 1;
    int32_t rc = fhd__autotune_begin(b);
    if (rc == FHD_OK)
        rc = fhd__cuda_conv_prepare(b);
    if (rc == FHD_OK)
        rc = prepare_gemms(b);
    if (rc == FHD_OK) /* the head's dW branch: cached, or measured on the first updates */
        rc = fhd__cuda_branch_prepare(b);
    /* act's row counts of step (num_envs) and of one observation, tuned too (not plan records) */
    b->planning = 0;
    if (rc == FHD_OK)
        rc = fhd__cuda_act_prepare(b, b->cfg.num_envs);
    if (rc == FHD_OK && b->cfg.num_envs != 1)
        rc = fhd__cuda_act_prepare(b, 1);
    fhd__autotune_end(b);
    FHD_TRY(rc);
    FHD_TRY(prepare_head_in_loss(b));
    return fhd__cuda_divmetrics_prepare(b);
}
