/* cpu_conv.c - 2-D convolution on the CPU: im2col + OpenBLAS sgemm (see cpu_ops.h).
 *
 * One sample at a time, for a layer with input (cin, hin, win), kernel k, stride s, padding p
 * and output (cout, hout, wout), ckk = cin k k, hw = hout wout:
 *   col (ckk, hw):   col[(ci k + kh) k + kw][oh wout + ow] = x[ci][oh s - p + kh][ow s - p + kw]
 *                    (0 outside the input); the row order is W's (cout, cin, kh, kw) order
 *   forward:         y (cout, hw) = relu(W (cout, ckk) . col (ckk, hw) + b)
 *   backward:        dW (cout, ckk) += dz (cout, hw) . col^T (hw, ckk); db += sum_hw dz;
 *                    dcol (ckk, hw) = W^T (ckk, cout) . dz (cout, hw), then col2im adds dcol
 *                    back onto dx (cin, hin, win)
 * The first layer reads observation rows of the learner's dtype: uint8 -> float and the scale
 * are applied while packing col, so no converted copy of the batch is made. With bf16 GEMMs
 * (fhd__gemm_mode) col is rounded after packing, and y and dz as cpu_ops.h says.
 */
#include <cblas.h>
#include <string.h>

#include "cpu_ops.h"

/* col (ckk, hw) of one sample x (cin, hin, win): float (u8 == 0) or uint8 rows, times scale. */
static void im2col(float *restrict col, const void *x, int u8, float scale,
                   const fhd__conv_layer *cv) {
    const uint32_t k = cv->k, s = cv->stride, H = cv->hin, W = cv->win;
    const int p = (int)cv->pad;
    const float *xf = (const float *)x;
    const uint8_t *xu = (const uint8_t *)x;
    float *dst = col;
    for (uint32_t ci = 0; ci < cv->cin; ci++) {
        const size_t plane = (size_t)ci * H * W;
        for (uint32_t kh = 0; kh < k; kh++) {
            for (uint32_t kw = 0; kw < k; kw++) {
                for (uint32_t oh = 0; oh < cv->hout; oh++) {
                    const int ih = (int)(oh * s + kh) - p;
                    if (ih < 0 || ih >= (int)H) {
                        memset(dst, 0, sizeof(float) * cv->wout);
                        dst += cv->wout;
                        continue;
                    }
                    const size_t row = plane + (size_t)ih * W;
                    for (uint32_t ow = 0; ow < cv->wout; ow++) {
                        const int iw = (int)(ow * s + kw) - p;
                        float v = 0.0f;
                        if (iw >= 0 && iw < (int)W)
                            v = u8 ? scale * (float)xu[row + (size_t)iw]
                                   : scale * xf[row + (size_t)iw];
                        *dst++ = v;
                    }
                }
            }
        }
    }
}

/* dx (cin, hin, win) += the columns of dcol (ckk, hw) put back where im2col took them. */
static void col2im(float *restrict dx, const float *restrict dcol, const fhd__conv_layer *cv) {
    const uint32_t k = cv->k, s = cv->stride, H = cv->hin, W = cv->win;
    const int p = (int)cv->pad;
    const float *src = dcol;
    for (uint32_t ci = 0; ci < cv->cin; ci++) {
        float *plane = dx + (size_t)ci * H * W;
        for (uint32_t kh = 0; kh < k; kh++) {
            for (uint32_t kw = 0; kw < k; kw++) {
                for (uint32_t oh = 0; oh < cv->hout; oh++) {
                    const int ih = (int)(oh * s + kh) - p;
                    if (ih < 0 || ih >= (int)H) {
                        src += cv->wout;
                        continue;
                    }
                    float *row = plane + (size_t)ih * W;
                    for (uint32_t ow = 0; ow < cv->wout; ow++, src++) {
                        const int iw = (int)(ow * s + kw) - p;
                        if (iw >= 0 && iw < (int)W)
                            row[iw] += *src;
                    }
                }
            }
        }
    }
}

void fhd__conv_forward(float *y, const void *x, int x_u8, float scale, const float *W,
                       const float *b, const fhd__conv_layer *cv, uint32_t n, float *col,
                       const fhd__gemm_mode *m) {
    const size_t in_sz = (size_t)cv->cin * cv->hin * cv->win, out_sz = (size_t)cv->cout * cv->hw;
    const size_t in_bytes = in_sz * (x_u8 ? 1 : sizeof(float));
    for (uint32_t i = 0; i < n; i++) {
        float *yi = y + i * out_sz; /* (cout, hw) */
        im2col(col, (const char *)x + i * in_bytes, x_u8, scale, cv);
        if (m->bf16) /* the GEMM's operand (the layers above read bf16 values already) */
            fhd__bf16_round_n(col, col, (uint64_t)cv->ckk * cv->hw);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cv->cout, (int)cv->hw,
                    (int)cv->ckk, m->alpha, W, (int)cv->ckk, col, (int)cv->hw, 0.0f, yi,
                    (int)cv->hw);
        for (uint32_t co = 0; co < cv->cout; co++) {
            float *r = yi + (size_t)co * cv->hw;
            const float bias = b[co];
            for (uint32_t j = 0; j < cv->hw; j++) {
                const float z = r[j] + bias;
                r[j] = z > 0.0f ? z : 0.0f;
            }
        }
        if (m->bf16)
            fhd__bf16_round_n(yi, yi, out_sz);
    }
}

void fhd__conv_backward(float *dx, float *dW, float *db, float *dz, const void *x, int x_u8,
                        float scale, const float *W, const fhd__conv_layer *cv, uint32_t n,
                        float *col, float *dcol, const fhd__gemm_mode *m) {
    const size_t in_sz = (size_t)cv->cin * cv->hin * cv->win, out_sz = (size_t)cv->cout * cv->hw;
    const size_t in_bytes = in_sz * (x_u8 ? 1 : sizeof(float));
    memset(db, 0, sizeof(float) * cv->cout);
    for (uint32_t i = 0; i < n; i++) /* db from the fp32 dz, sample by sample */
        for (uint32_t co = 0; co < cv->cout; co++) {
            const float *r = dz + i * out_sz + (size_t)co * cv->hw;
            float s = 0.0f;
            for (uint32_t j = 0; j < cv->hw; j++)
                s += r[j];
            db[co] += s;
        }
    if (m->bf16) /* the GEMMs' operand */
        fhd__bf16_round_n(dz, dz, out_sz * n);
    if (dx)
        memset(dx, 0, sizeof(float) * in_sz * n);
    for (uint32_t i = 0; i < n; i++) {
        const float *dzi = dz + i * out_sz; /* (cout, hw) */
        im2col(col, (const char *)x + i * in_bytes, x_u8, scale, cv);
        if (m->bf16)
            fhd__bf16_round_n(col, col, (uint64_t)cv->ckk * cv->hw);
        /* dW (cout, ckk) (+)= dz_i (cout, hw) . col^T (hw, ckk) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)cv->cout, (int)cv->ckk,
                    (int)cv->hw, 1.0f, dzi, (int)cv->hw, col, (int)cv->hw, i ? 1.0f : 0.0f, dW,
                    (int)cv->ckk);
        if (!dx)
            continue;
        /* dcol (ckk, hw) = alpha W^T (ckk, cout) . dz_i (cout, hw) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)cv->ckk, (int)cv->hw,
                    (int)cv->cout, m->alpha, W, (int)cv->ckk, dzi, (int)cv->hw, 0.0f, dcol,
                    (int)cv->hw);
        col2im(dx + i * in_sz, dcol, cv);
    }
}
