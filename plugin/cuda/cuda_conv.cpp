/* cuda_conv.cpp - the convolutional torso on the CUDA backend: its buffers, its GEMM plans and
 * what it records into the update graph and the act graphs (docs/design.md section 5, "Conv
 * torsos").
 *
 * Each conv layer c is a linear layer over rows = images x output positions (kernels/conv.cuh):
 * im2col, then one cuBLASLt GEMM with the bias+ReLU epilogue into a channels-last output; the
 * last layer's output is flattened into (C, H, W) order, the linear torso's input (mlp_in).
 * Shapes: B batch, rows_on online images (2B with double DQN: obs then next_obs), hw_c output
 * positions, ckk_c = cin k k, F the linear torso's input width.
 *   input   s0: layer 0's im2col over all 2B batch images (obs, next_obs), before the fork: it
 *           is the same for both networks, so the target reads its rows of next_obs from it;
 *           then both networks' weights of the layers above into channels-last order (wperm:
 *           their im2col columns are (kh, kw, ci), contiguous in a channels-last activation)
 *   online  s0: GEMM_0, then im2col_c + GEMM_c for c = 1..NC-1 over rows_on images, flatten
 *           -> flat_on
 *   target  s1: the same over the B next_obs images with the target's weights -> flat_tg
 *   backward s0: dflat = dz_0 W_0 (the linear torso's layer-0 dx), dz_{NC-1} from dflat (ReLU
 *           mask, bias partials); per layer from the top: dcol_c = dz_c W_c and its col2im into
 *           dz_{c-1} (mask, partials); s1: dW_c = dz_c^T col_c as soon as dz_c is ready.
 * The online im2col matrices are kept for the dW GEMMs; the target's and act's share one.
 * bf16 GEMMs (docs/design.md section 4, "GEMM precision"; the CPU's rule in plugin/cpu/
 * cpu_conv.c): the im2col matrices, the activations, the weights (layer 0's from the update's
 * bf16 copy bf.w, the others' rounded by the permutation itself) and dz are bf16; the forward
 * GEMMs write bf16 through the bias+ReLU epilogue with the bf16 bias; the flatten writes the
 * linear torso's bf16 input (bf.x, bf.x_tg, bf.act_x); dflat, dcol, dW and the bias partials
 * stay fp32.
 */
#include <stdio.h>
#include <string.h>

#include "conv.cuh"
#include "cuda_internal.h"

static fhd__conv_geom geom(const fhd__conv_layer *cv) {
    fhd__conv_geom g = {cv->cin, cv->hin,    cv->win, cv->cout, cv->hout, cv->wout,
                        cv->k,   cv->stride, cv->pad, cv->ckk,  cv->hw};
    return g;
}

int32_t fhd__cuda_conv_check(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    for (uint32_t c = 0; c < lo->NC; c++)
        if (lo->conv[c].sn)
            return fhd__cuda_failf(b, FHD_ERR_BACKEND_UNAVAILABLE,
                                   "$.spectral_norm: backend \"cuda\" does not normalise conv "
                                   "layers (spectral_norm \"all\" with conv layers runs on the "
                                   "cpu backend; \"last\" normalises the last linear layer)");
    return FHD_OK;
}

void fhd__cuda_conv_init(fhd__backend *b) {
    const fhd__layout *lo = &b->lo;
    fhd__cuda_conv *cv = &b->conv;
    memset(cv, 0, sizeof *cv);
    cv->NC = lo->NC;
    if (!cv->NC)
        return;
    cv->bf16 = b->plan.bf16;
    for (uint32_t c = 0; c < lo->NC; c++)
        cv->g[c] = geom(&lo->conv[c]);
    cv->in_kind = b->cfg.obs_dtype == FHD_OBS_UINT8 ? FHD_CONV_IN_U8 : FHD_CONV_IN_F32;
    cv->scale = fhd__config_obs_scale(&b->cfg);
    cv->F = lo->layers[0].in;
}

void fhd__cuda_conv_plan_buffers(fhd__backend *b, struct fhd__alloc_list *p) {
    fhd__cuda_conv *cv = &b->conv;
    if (!cv->NC)
        return;
    const uint64_t B = b->B, Ron = b->rows_on, R = b->act_rows;
    const size_t f = sizeof(float), t = cv->bf16 ? 2 : sizeof(float); /* t: a T element */
    uint64_t max_col = 0, max_y = 0;
    for (uint32_t c = 0; c < cv->NC; c++) {
        const fhd__conv_geom *g = &cv->g[c];
        const uint64_t col = (uint64_t)g->hw * g->ckk, y = (uint64_t)g->hw * g->cout;
        fhd__cuda_alloc_add(p, &cv->col_on[c], (c == 0 ? 2 * B : Ron) * col * t);
        fhd__cuda_alloc_add(p, &cv->y_on[c], Ron * y * t);
        fhd__cuda_alloc_add(p, &cv->dz[c], B * y * t);
        cv->bparts[c] = fhd__cuda_conv_dz_parts(B * g->hw);
        fhd__cuda_alloc_add(p, &cv->bpart[c], (uint64_t)cv->bparts[c] * g->cout * f);
        max_col = col > max_col ? col : max_col;
        max_y = y > max_y ? y : max_y;
    }
    cv->wp_total = 0;
    for (uint32_t c = 1; c < cv->NC; c++) {
        cv->wp_off[c] = cv->wp_total;
        cv->wp_total += (uint64_t)cv->g[c].cout * cv->g[c].ckk;
    }
    if (cv->wp_total) {
        fhd__cuda_alloc_add(p, &cv->wperm, 2 * cv->wp_total * t);
        fhd__cuda_alloc_add(p, &cv->dwperm, cv->wp_total * f);
    }
    fhd__cuda_alloc_add(p, &cv->col_tg, B * max_col * t);
    fhd__cuda_alloc_add(p, &cv->y_tg[0], B * max_y * t);
    fhd__cuda_alloc_add(p, &cv->y_tg[1], B * max_y * t);
    fhd__cuda_alloc_add(p, &cv->dcol, B * max_col * f);
    if (!cv->bf16) { /* bf16: the flatten writes the bf16 buffers of cuda_bf16.cpp instead */
        fhd__cuda_alloc_add(p, &cv->flat_on, Ron * cv->F * f);
        fhd__cuda_alloc_add(p, &cv->flat_tg, B * cv->F * f);
    }
    fhd__cuda_alloc_add(p, &cv->dflat, B * cv->F * f);
    fhd__cuda_alloc_add(p, &cv->act_col, R * max_col * t);
    fhd__cuda_alloc_add(p, &cv->act_y[0], R * max_y * t);
    fhd__cuda_alloc_add(p, &cv->act_y[1], R * max_y * t);
    if (!cv->bf16) {
        fhd__cuda_alloc_add(p, &cv->act_flat, R * cv->F * f);
        return;
    }
    fhd__cuda_alloc_add(p, &cv->y32, (Ron > R ? Ron : R) * max_y * f);
    fhd__cuda_alloc_add(p, &cv->y32_tg, B * max_y * f);
}

int32_t fhd__cuda_conv_create_events(fhd__backend *b) {
    for (uint32_t c = 0; c < b->conv.NC; c++)
        FHD_CK(b, cudaEventCreateWithFlags(&b->conv.ev_dz[c], cudaEventDisableTiming));
    return FHD_OK;
}

/* Conv layer c's weights as its GEMMs read them: layer 0's in PyTorch order in params (bf16:
 * its bf16 copy), the others' channels-last copies (T). */
static const void *conv_w(const fhd__backend *b, int net, uint32_t c) {
    const fhd__cuda_conv *cv = &b->conv;
    if (c == 0)
        return fhd__cuda_op_w(b, net, b->lo.conv[0].w_off);
    return fhd__elem_at(cv->wperm, (net ? cv->wp_total : 0) + cv->wp_off[c], cv->bf16);
}

/* The permutation jobs: both networks' weights into wperm (nets 2) or the online one's (1), or
 * (back) dwperm into grad. */
static void perm_args(fhd__backend *b, fhd__conv_perm_args *a, int nets, int back) {
    const fhd__cuda_conv *cv = &b->conv;
    memset(a, 0, sizeof *a);
    a->back = back;
    a->bf16 = cv->bf16; /* the forward permutations write bf16 */
    uint64_t total = 0;
    for (int net = 0; net < nets; net++)
        for (uint32_t c = 1; c < cv->NC; c++) {
            const fhd__conv_layer *ly = &b->lo.conv[c];
            fhd__conv_perm_job j;
            j.cin = ly->cin;
            j.k = ly->k;
            if (back) {
                j.src = cv->dwperm + cv->wp_off[c];
                j.dst = b->grad + ly->w_off;
            } else {
                j.src = b->params + (net ? b->T : 0) + ly->w_off;
                j.dst = (void *)conv_w(b, net, c);
            }
            total += (uint64_t)ly->cout * ly->ckk;
            a->job[a->njobs] = j;
            a->end[a->njobs++] = total;
        }
}

/* Forward GEMM of conv layer c of network net over `images` images: y (images hw, cout) =
 * relu(col W^T + b); column-major: y^T (cout, images hw) = W (cout, ckk) col^T. bf16: col, W,
 * the bias and y bf16, y32 the fp32 scratch of the epilogue fallback. */
static int32_t plan_forward(fhd__backend *b, fhd__gemm *gm, int net, uint32_t c, uint32_t images,
                            const void *col, void *y, float *y32, const char *what) {
    const fhd__conv_layer *ly = &b->lo.conv[c];
    const int bf = b->conv.bf16;
    fhd__gemm_spec s;
    memset(&s, 0, sizeof s);
    char site[24];
    snprintf(site, sizeof site, "conv%u %s", c, what);
    s.tf32 = b->plan.tf32_fwd;
    s.bf16 = bf ? FHD_GEMM_BF16_OUT : FHD_GEMM_FP32;
    s.opa = CUBLAS_OP_T;
    s.opb = CUBLAS_OP_N;
    s.m = ly->cout;
    s.n = images * ly->hw;
    s.k = ly->ckk;
    s.A = conv_w(b, net, c);
    s.lda = ly->ckk;
    s.B = col;
    s.ldb = ly->ckk;
    s.C = y;
    s.C32 = bf ? y32 : NULL;
    s.ldc = ly->cout;
    s.alpha = b->d_one;
    s.epilogue = FHD_EPI_BIAS_RELU;
    s.bias = fhd__cuda_op_w(b, net, ly->b_off); /* bf16: rounded, as every hidden layer's */
    s.site = site;
    return fhd__gemm_plan(b, gm, &s);
}

/* The update's GEMMs: both forwards, dW and dcol per layer, and dflat (the linear torso's
 * layer-0 dx, which an MLP does not run). */
int32_t fhd__cuda_conv_prepare(fhd__backend *b) {
    fhd__cuda_conv *cv = &b->conv;
    if (!cv->NC)
        return FHD_OK;
    const fhd__layout *lo = &b->lo;
    const uint32_t B = b->B, NC = cv->NC;
    const int ab = cv->bf16 ? FHD_GEMM_BF16_IN : FHD_GEMM_FP32; /* the backward GEMMs' types */
    perm_args(b, &cv->perm_fwd, 2, 0);
    perm_args(b, &cv->perm_act, 1, 0);
    perm_args(b, &cv->perm_back, 1, 1);
    for (uint32_t c = 0; c < NC; c++) {
        const fhd__conv_layer *ly = &lo->conv[c];
        FHD_TRY(plan_forward(b, &cv->fwd_on[c], 0, c, b->rows_on, cv->col_on[c], cv->y_on[c],
                             cv->y32, "online"));
        const void *col_tg =
            c ? cv->col_tg : fhd__elem_at(cv->col_on[0], (uint64_t)B * ly->hw * ly->ckk, cv->bf16);
        FHD_TRY(plan_forward(b, &cv->fwd_tg[c], 1, c, B, col_tg, cv->y_tg[c % 2], cv->y32_tg,
                             "target"));
        char site[24];
        /* dW (cout, ckk) = dz^T col: column-major dW^T (ckk, cout) = col^T (ckk, B hw) dz */
        fhd__gemm_spec s;
        memset(&s, 0, sizeof s);
        s.tf32 = b->plan.tf32_bwd;
        s.bf16 = ab;
        s.opa = CUBLAS_OP_N;
        s.opb = CUBLAS_OP_T;
        s.m = ly->ckk;
        s.n = ly->cout;
        s.k = B * ly->hw;
        s.A = cv->col_on[c]; /* its first B images are obs */
        s.lda = ly->ckk;
        s.B = cv->dz[c];
        s.ldb = ly->cout;
        s.C = c ? cv->dwperm + cv->wp_off[c] : b->grad + ly->w_off;
        s.ldc = ly->ckk;
        s.alpha = b->d_one;
        snprintf(site, sizeof site, "conv%u dW", c);
        s.site = site;
        s.beside = 1;
        FHD_TRY(fhd__gemm_plan(b, &cv->dw[c], &s));
        if (c == 0)
            continue;
        /* dcol (B hw, ckk) = dz W: column-major dcol^T (ckk, B hw) = W^T (ckk, cout) dz^T */
        memset(&s, 0, sizeof s);
        s.tf32 = b->plan.tf32_bwd;
        s.bf16 = ab;
        s.opa = CUBLAS_OP_N;
        s.opb = CUBLAS_OP_N;
        s.m = ly->ckk;
        s.n = B * ly->hw;
        s.k = ly->cout;
        s.A = conv_w(b, 0, c);
        s.lda = ly->ckk;
        s.B = cv->dz[c];
        s.ldb = ly->cout;
        s.C = cv->dcol;
        s.ldc = ly->ckk;
        s.alpha = b->d_one;
        snprintf(site, sizeof site, "conv%u dcol", c);
        s.site = site;
        FHD_TRY(fhd__gemm_plan(b, &cv->dx[c], &s));
    }
    /* dflat (B, F) = dz_0 W_0 of the linear torso: column-major dflat^T = W_0^T dz_0^T */
    const fhd__layer *l0 = &lo->layers[0];
    fhd__gemm_spec s;
    memset(&s, 0, sizeof s);
    s.tf32 = b->plan.tf32_bwd;
    s.bf16 = ab;
    s.opa = CUBLAS_OP_N;
    s.opb = CUBLAS_OP_N;
    s.m = l0->in;
    s.n = B;
    s.k = l0->out;
    s.A = fhd__cuda_op_w(b, 0, l0->w_off);
    s.lda = l0->in;
    s.B = fhd__cuda_op_dz(b, 0); /* with no linear torso layer, the head's (B, HOs) */
    s.ldb = lo->L == 0 ? b->HOs : l0->out;
    s.C = cv->dflat;
    s.ldc = l0->in;
    s.alpha = l0->sn ? b->sn_inv : b->d_one;
    s.site = "dx0 (conv)";
    return fhd__gemm_plan(b, &cv->dx_flat, &s);
}

/* The optimiser's segments of the conv layers (they come first in params, in offset order). */
void fhd__cuda_conv_opt_segments(fhd__backend *b, fhd__opt_args *a) {
    const fhd__cuda_conv *cv = &b->conv;
    for (uint32_t c = 0; c < cv->NC; c++) {
        const fhd__conv_layer *ly = &b->lo.conv[c];
        fhd__opt_segment w =
            fhd__opt_segment_at(ly->w_off, (uint64_t)ly->cout * ly->ckk, -1, NULL, 0);
        fhd__opt_segment bias =
            fhd__opt_segment_at(ly->b_off, ly->cout, -1, cv->bpart[c], cv->bparts[c]);
        a->seg[a->nseg++] = w;
        a->seg[a->nseg++] = bias;
    }
}

/* Layer 0's im2col of `images` observation rows x (S values of the learner's dtype). */
static int32_t record_input(fhd__backend *b, const void *x, uint32_t images, void *col,
                            cudaStream_t s) {
    const fhd__cuda_conv *cv = &b->conv;
    FHD_CK(b, fhd__cuda_im2col(col, x, cv->in_kind, cv->scale, b->lo.S, images, &cv->g[0], cv->bf16,
                               s));
    return FHD_OK;
}

/* The conv stack of one network over `images` images whose layer-0 im2col is done (cols[0]),
 * through cols and the y ping-pong, flattened into flat. */
static int32_t record_stack(fhd__backend *b, const fhd__gemm *gms, uint32_t images,
                            void *const *cols, void *const *ys, void *flat, cudaStream_t s,
                            void *ws) {
    const fhd__cuda_conv *cv = &b->conv;
    for (uint32_t c = 0; c < cv->NC; c++) {
        const fhd__conv_geom *g = &cv->g[c];
        if (c == 0) {
            FHD_TRY(fhd__gemm_run(b, &gms[0], s, ws));
            continue;
        }
        FHD_CK(b, fhd__cuda_im2col(cols[c], ys[c - 1], FHD_CONV_IN_NHWC, 1.0f,
                                   (uint64_t)g->hin * g->win * g->cin, images, g, cv->bf16, s));
        FHD_TRY(fhd__gemm_run(b, &gms[c], s, ws));
    }
    const fhd__conv_geom *top = &cv->g[cv->NC - 1];
    FHD_CK(b,
           fhd__cuda_conv_flatten(flat, ys[cv->NC - 1], images, top->hw, top->cout, cv->bf16, s));
    return FHD_OK;
}

/* The batch's observation rows (obs then next_obs), raw values of the learner's dtype. */
static const void *batch_obs(const fhd__backend *b, uint32_t row) {
    if (b->conv.in_kind == FHD_CONV_IN_U8)
        return b->g_x8 + (size_t)row * b->lo.S;
    return b->g_x + (size_t)row * b->lo.S;
}

int32_t fhd__cuda_conv_record_input(fhd__backend *b, cudaStream_t s) {
    if (!b->conv.NC)
        return FHD_OK;
    FHD_TRY(record_input(b, batch_obs(b, 0), 2 * b->B, b->conv.col_on[0], s));
    FHD_CK(b, fhd__cuda_conv_permute(&b->conv.perm_fwd, s)); /* both networks' wperm */
    return FHD_OK;
}

int32_t fhd__cuda_conv_record_forward(fhd__backend *b, int net, cudaStream_t s) {
    fhd__cuda_conv *cv = &b->conv;
    if (!cv->NC)
        return FHD_OK;
    if (net == 0) /* bf16: the linear torso's bf16 input directly */
        return record_stack(b, cv->fwd_on, b->rows_on, cv->col_on, cv->y_on,
                            cv->bf16 ? (void *)b->bf.x : (void *)cv->flat_on, s, b->ws_main);
    void *cols[FHD_MAX_CONV_LAYERS], *ys[FHD_MAX_CONV_LAYERS];
    for (uint32_t c = 0; c < cv->NC; c++) {
        cols[c] = cv->col_tg;
        ys[c] = cv->y_tg[c % 2];
    }
    return record_stack(b, cv->fwd_tg, b->B, cols, ys,
                        cv->bf16 ? (void *)b->bf.x_tg : (void *)cv->flat_tg, s, b->ws_side);
}

int32_t fhd__cuda_conv_record_backward(fhd__backend *b, cudaStream_t s0, cudaStream_t s1) {
    fhd__cuda_conv *cv = &b->conv;
    if (!cv->NC)
        return FHD_OK;
    const uint32_t B = b->B, NC = cv->NC;
    FHD_TRY(fhd__gemm_run(b, &cv->dx_flat, s0, b->ws_main));
    const fhd__conv_geom *top = &cv->g[NC - 1];
    FHD_CK(b, fhd__cuda_conv_dz(cv->dz[NC - 1], cv->bpart[NC - 1], cv->y_on[NC - 1], cv->dflat, 1,
                                B, top->hw, top->cout, top, cv->bf16, s0));
    for (int c = (int)NC - 1; c >= 0; c--) {
        FHD_CK(b, cudaEventRecord(cv->ev_dz[c], s0));
        FHD_CK(b, cudaStreamWaitEvent(s1, cv->ev_dz[c], 0));
        FHD_TRY(fhd__gemm_run(b, &cv->dw[c], s1, b->ws_side));
        if (c == 1) /* the last channels-last dW: all of them into grad's order */
            FHD_CK(b, fhd__cuda_conv_permute(&cv->perm_back, s1));
        if (c == 0)
            break;
        const fhd__conv_geom *g = &cv->g[c], *below = &cv->g[c - 1];
        FHD_TRY(fhd__gemm_run(b, &cv->dx[c], s0, b->ws_main));
        FHD_CK(b, fhd__cuda_conv_dz(cv->dz[c - 1], cv->bpart[c - 1], cv->y_on[c - 1], cv->dcol, 0,
                                    B, below->hw, below->cout, g, cv->bf16, s0));
    }
    return FHD_OK;
}

/* ---- act ----------------------------------------------------------------------------------- */

int32_t fhd__cuda_conv_act_plans(fhd__backend *b, fhd__gemm *gms, uint32_t rows) {
    const fhd__cuda_conv *cv = &b->conv;
    for (uint32_t c = 0; c < cv->NC; c++)
        FHD_TRY(
            plan_forward(b, &gms[c], 0, c, rows, cv->act_col, cv->act_y[c % 2], cv->y32, "act"));
    return FHD_OK;
}

int32_t fhd__cuda_conv_record_act(fhd__backend *b, const fhd__gemm *gms, const void *x,
                                  uint32_t rows, cudaStream_t s) {
    fhd__cuda_conv *cv = &b->conv;
    void *cols[FHD_MAX_CONV_LAYERS], *ys[FHD_MAX_CONV_LAYERS];
    for (uint32_t c = 0; c < cv->NC; c++) {
        cols[c] = cv->act_col;
        ys[c] = cv->act_y[c % 2];
    }
    FHD_TRY(record_input(b, x, rows, cv->act_col, s));
    FHD_CK(b, fhd__cuda_conv_permute(&cv->perm_act, s)); /* the online weights as they are now */
    return record_stack(b, gms, rows, cols, ys,
                        cv->bf16 ? (void *)b->bf.act_x : (void *)cv->act_flat, s, b->ws_main);
}

int32_t fhd__cuda_conv_preload_gemms(fhd__backend *b) {
    fhd__cuda_conv *cv = &b->conv;
    FHD_CK(b, fhd__cuda_conv_preload());
    for (uint32_t c = 0; c < cv->NC; c++) {
        FHD_TRY(fhd__gemm_run(b, &cv->fwd_on[c], b->s_main, b->ws_main));
        FHD_TRY(fhd__gemm_run(b, &cv->fwd_tg[c], b->s_main, b->ws_main));
        FHD_TRY(fhd__gemm_run(b, &cv->dw[c], b->s_main, b->ws_main));
        if (c > 0)
            FHD_TRY(fhd__gemm_run(b, &cv->dx[c], b->s_main, b->ws_main));
    }
    if (cv->NC)
        FHD_TRY(fhd__gemm_run(b, &cv->dx_flat, b->s_main, b->ws_main));
    return FHD_OK;
}

void fhd__cuda_conv_destroy(fhd__backend *b) {
    fhd__cuda_conv *cv = &b->conv;
    for (uint32_t c = 0; c < FHD_MAX_CONV_LAYERS; c++) {
        fhd__gemm *gs[4] = {&cv->fwd_on[c], &cv->fwd_tg[c], &cv->dw[c], &cv->dx[c]};
        for (int i = 0; i < 4; i++)
            if (gs[i]->ready || gs[i]->desc)
                fhd__gemm_destroy(gs[i]);
        if (cv->ev_dz[c])
            cudaEventDestroy(cv->ev_dz[c]);
    }
    if (cv->dx_flat.ready || cv->dx_flat.desc)
        fhd__gemm_destroy(&cv->dx_flat);
}
