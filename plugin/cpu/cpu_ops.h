/* cpu_ops.h - the learner's operations on the CPU, one function per op (the CUDA kernels in
 * kernels/ mirror these names and arguments, adding a stream).
 *
 * Shapes: B batch, S obs dim, D branches, K_d actions in branch d, KT = sum K_d,
 * HO = head outputs = KT + dueling. Matrices are row-major.
 *
 * The CUDA mirror (kernels/): which kernel computes each op, and what it fuses.
 *   fhd__linear_forward          cuBLASLt GEMM with its bias(+ReLU) epilogue (fhd__cuda_bias_act
 *                                where cuBLASLt has none); a narrow head: fhd__cuda_narrow_linear,
 *                                or inside fhd__cuda_td_loss (both heads, head_in_loss)
 *   fhd__linear_backward         dx and dW: cuBLASLt GEMMs (halves on two streams where split);
 *                                db: partials of fhd__cuda_relu_backward_bgrad / the loss kernel
 *                                (bf16: of fhd__cuda_relu_mask_bf16 / fhd__cuda_relu_backward_bf16),
 *                                summed by the optimiser's norm pass; layer 0's dW can come from
 *                                fhd__cuda_relu_backward_dw (fuse_dw0); a small head's dx from
 *                                fhd__cuda_head_dx
 *   fhd__relu_backward, fhd__linear_backward's h
 *                                fhd__cuda_relu_backward_bgrad / _dw, or fhd__cuda_head_dx (the
 *                                layer below a small head)
 *   fhd__head_combine, fhd__td_target, fhd__td_loss, fhd__head_combine_backward
 *                                one kernel: fhd__cuda_td_loss (with the PER weights)
 *   fhd__argmax_branches         fhd__cuda_act_head (with fhd__head_combine)
 *   fhd__sn_power_iteration, fhd__sn_sigma
 *                                fhd__cuda_sn_launch: every layer in two launches
 *   fhd__sn_scale                not run: the GEMMs take alpha = 1/sigma
 *   fhd__sn_weight_backward, fhd__clip_grad_norm, fhd__adam_step, fhd__polyak
 *                                fhd__cuda_opt_fused (one cooperative launch), or
 *                                fhd__cuda_clip_grad_norm + fhd__cuda_adam_step
 *   fhd__conv_forward, fhd__conv_backward
 *                                fhd__cuda_im2col + a cuBLASLt GEMM; fhd__cuda_conv_dz and the
 *                                dW / dcol GEMMs (plugin/cuda/cuda_conv.cpp)
 *   fhd__bf16_round_n            fhd__cuda_to_bf16 (kernels/bf16.cuh); the bf16 outputs of the
 *                                GEMMs' epilogues and of fhd__cuda_relu_backward_bf16
 */
#ifndef FHD_CPU_OPS_H
#define FHD_CPU_OPS_H

#include <stdint.h>

#include "layout.h"

/* FHD_CPU_SIMD: a loop function compiled also for AVX-512 and AVX2 (GCC function clones;
 * the loader picks the widest the CPU has). Every clone does the same operations on each
 * element: FP sums stay in source order (the compiler reorders none) and nothing is contracted
 * into an FMA (-ffp-contract=off, plugin/CMakeLists.txt), so all clones give the same bits. */
/* GCC only: clang 14 names an extern clone's resolver so that calls from other files do not
 * link (its fuzzer and sanitizer builds get the baseline loops, the same bits). */
#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(__clang__)
#define FHD_CPU_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FHD_CPU_SIMD
#endif

/* How a layer's GEMMs compute (config matmul_precision, docs/design.md section 4, "GEMM
 * precision"). fp32 (bf16 0, alpha 1): plain sgemm. bf16: the operands hold bf16 values (W a
 * rounded copy of the weights, x the bf16 activations or the rounded input; the backward rounds
 * dy itself), so every product is exact and sgemm's fp32 sums are the accumulation; alpha
 * scales the product (1/sigma of a spectrally normalised layer, whose W is then the raw weight,
 * as the CUDA GEMMs take it; 1 otherwise); the output of a layer with a ReLU is rounded to bf16
 * (the next GEMM's operand). */
typedef struct fhd__gemm_mode {
    int bf16;
    float alpha;
} fhd__gemm_mode;

/* y (B, out) = alpha x (B, in) W^T + b, then ReLU if relu (and bf16: rounded). W (out, in),
 * b (out). */
void fhd__linear_forward(float *y, const float *x, const float *W, const float *b, uint32_t B,
                         uint32_t in, uint32_t out, int relu, const fhd__gemm_mode *m);

/* Backward of y = relu?(alpha x W^T + b), dy (B, out) = dL/dy. h: the layer's ReLU output
 * (B, out), or NULL for a layer without one; then dy = relu_backward(dy, h) in place, in the
 * same pass as db (out) = sum_rows dy; then (bf16) dy is rounded in place, and a layer with h
 * sums db from the rounded dy instead (the bf16 dz its GEMMs read: CUDA's dx GEMM writes only
 * that); dx (B, in) = alpha dy W (skipped when dx is NULL); dW (out, in) = dy^T x (the
 * gradient of alpha W: a normalised layer's sn_weight_backward follows). */
void fhd__linear_backward(float *dx, float *dW, float *db, float *dy, const float *h,
                          const float *x, const float *W, uint32_t B, uint32_t in, uint32_t out,
                          const fhd__gemm_mode *m);

/* dst (n) = src rounded to bf16 values (common/bf16.h); dst may be src. */
void fhd__bf16_round_n(float *dst, const float *src, uint64_t n);

/* dz = dy * (h > 0), in place on dy; h the ReLU output (n elements). (The conv layers'; a
 * linear layer's is fhd__linear_backward's h.) */
void fhd__relu_backward(float *dy, const float *h, uint64_t n);

/* Head outputs (B, HO) -> Q (B, KT). Dueling: Q_d(a) = V + A_d(a) - mean_a A_d(a). */
void fhd__head_combine(float *q, const float *out, const fhd__layout *lo, uint32_t B);
/* dQ (B, KT) -> d(head outputs) (B, HO). */
void fhd__head_combine_backward(float *dout, const float *dq, const fhd__layout *lo, uint32_t B);

/* Greedy action per branch (first maximum): q (B, KT) -> a (B, D). */
void fhd__argmax_branches(int32_t *a, const float *q, const fhd__layout *lo, uint32_t B);

/* Spectral norm. One power iteration as torch.nn.utils.parametrizations.spectral_norm
 * (u = normalize(W v), then v = normalize(W^T u)) updating u, v in place, then
 * sigma = u . (W v). W (m, k), u (m), v (k). tmp: max(m, k) floats. */
float fhd__sn_power_iteration(const float *W, float *u, float *v, uint32_t m, uint32_t k,
                              float *tmp);
/* sigma = u . (W v) with the stored vectors (no iteration). */
float fhd__sn_sigma(const float *W, const float *u, const float *v, uint32_t m, uint32_t k,
                    float *tmp);
/* W_sn (m, k) = W / sigma. */
void fhd__sn_scale(float *Wsn, const float *W, float sigma, uint64_t n);
/* Gradient through W_sn = W / (u^T W v) with u, v constant, in place on g (m, k):
 * g <- g / sigma - (sum(g * W) / sigma^2) u v^T. */
void fhd__sn_weight_backward(float *g, const float *W, const float *u, const float *v, float sigma,
                             uint32_t m, uint32_t k);

/* TD targets: y (B) = r + disc * (1/D) sum_d qt_d(s', a*_d) with a* from `sel` (B, KT):
 * the online net's Q(s') for double DQN, else the target net's (max). */
void fhd__td_target(float *y, const float *r, const float *disc, const float *qt, const float *sel,
                    const fhd__layout *lo, uint32_t B);

/* Loss and its gradient w.r.t. Q (B, KT). td (B, D) receives Q_d(s, a_d) - y.
 * Returns the loss; *td_abs_mean and *q_mean receive the batch statistics. */
typedef struct fhd__loss_params {
    int huber; /* 1 Huber(delta), 0 MSE */
    float delta;
    float cql_alpha;
} fhd__loss_params;
float fhd__td_loss(float *dq, float *td, const float *q, const int32_t *actions, const float *y,
                   const float *w, const fhd__layout *lo, uint32_t B, const fhd__loss_params *p,
                   float *td_abs_mean, float *q_mean);

/* Global L2 norm of g (n) and, when max_norm > 0, PyTorch clip_grad_norm_ scaling. Returns
 * the norm before clipping. */
float fhd__clip_grad_norm(float *g, uint64_t n, float max_norm);

/* One Adam/AdamW step with PyTorch semantics (bias-corrected, eps outside the sqrt);
 * t is the step number after increment (>= 1). */
typedef struct fhd__adam_params {
    double lr, beta1, beta2;
    float eps;
    double weight_decay;
    int decoupled; /* AdamW */
} fhd__adam_params;
void fhd__adam_step(float *p, const float *g, float *m, float *v, uint64_t n, uint64_t t,
                    const fhd__adam_params *ap);

/* Convolution layer cv (layout.h) on n samples (cpu_conv.c), ReLU after it.
 * x: n input samples (cin, hin, win), float or (x_u8) uint8, multiplied by scale as read.
 * y (n, cout, hw) = relu(alpha conv(x) + b); W (cout, cin, k, k), b (cout). col: ckk hw floats.
 * bf16 (m): the im2col matrix is rounded, and so is y. */
void fhd__conv_forward(float *y, const void *x, int x_u8, float scale, const float *W,
                       const float *b, const fhd__conv_layer *cv, uint32_t n, float *col,
                       const fhd__gemm_mode *m);
/* Backward of the convolution (before its ReLU: apply relu_backward to dy first, giving dz).
 * db (cout), then (bf16) dz rounded in place, dW (cout, ckk) overwritten with sums over the n
 * samples; dx (n, cin, hin, win) = alpha col2im(W^T dz) too, skipped when NULL. col, dcol: ckk
 * hw floats each. */
void fhd__conv_backward(float *dx, float *dW, float *db, float *dz, const void *x, int x_u8,
                        float scale, const float *W, const fhd__conv_layer *cv, uint32_t n,
                        float *col, float *dcol, const fhd__gemm_mode *m);

/* Target update: tgt = tau * src + (1 - tau) * tgt (tau == 1 copies). */
void fhd__polyak(float *tgt, const float *src, uint64_t n, float tau);

#endif
