/* conv.cuh - the non-GEMM parts of a convolutional torso on the CUDA backend (host-includable
 * declarations). The GEMMs go through cuBLASLt (plugin/cuda/cuda_conv.cpp).
 *
 * A conv layer is a linear layer over rows = images x output positions (docs/design.md section
 * 5, "Conv torsos"): activations are kept channels-last, y (n hw, cout) row-major (row (i, oh,
 * ow)), so that
 *   forward   y (n hw, cout)     = relu(col (n hw, ckk) W^T + b)       one GEMM, bias+ReLU epilogue
 *   dW        dW (cout, ckk)     = dz^T (cout, n hw) col (n hw, ckk)   one GEMM over K = n hw
 *   dcol      dcol (n hw, ckk)   = dz (n hw, cout) W (cout, ckk)       one GEMM
 * with W the PyTorch (cout, cin, k, k) tensor read as its (cout, ckk) matrix. The kernels here
 * build col, put dcol back (col2im), and move between channels-last and the (C, H, W) order the
 * linear torso sees (nn.Flatten), with the ReLU backward and the bias-gradient partials folded
 * into the kernels that produce each layer's dz.
 * bf16 (matmul_precision "bf16", docs/design.md section 4): col, the activations, the flat
 * output and dz are __nv_bfloat16 (the GEMMs' operands: col and layer 0's scaled input rounded
 * once, the activations already rounded by their GEMM's epilogue); dcol, dflat and the bias
 * partials stay float. Else all float.
 */
#ifndef FHD_KERNELS_CONV_CUH
#define FHD_KERNELS_CONV_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

/* One conv layer's shape (plugin/layout.h, fhd__conv_layer). */
typedef struct fhd__conv_geom {
    uint32_t cin, hin, win, cout, hout, wout, k, stride, pad;
    uint32_t ckk, hw; /* cin k k, hout wout */
} fhd__conv_geom;

/* What im2col reads: a channels-last activation of the layer below (float), or observation
 * rows (C, H, W) of the learner's dtype, multiplied by the scale as they are packed. */
enum { FHD_CONV_IN_NHWC = 0, FHD_CONV_IN_F32 = 1, FHD_CONV_IN_U8 = 2 };

/* col (n hw, ckk): row i hw + oh wout + ow holds x_i at ih = oh stride - pad + kh, iw = ow stride
 * - pad + kw (0 outside the input), x_i starting x_stride elements after x_{i-1}:
 *   observation rows (first layer): column (ci k + kh) k + kw = scale x_i[ci][ih][iw], W's own
 *   (cin, kh, kw) order;
 *   a channels-last activation (FHD_CONV_IN_NHWC): column (kh k + kw) cin + ci, so that reads
 *   and writes are both contiguous; the GEMMs then take W in that order
 *   (fhd__cuda_conv_permute).
 * bf16: col bf16 (rounded), and a channels-last x is bf16 too; else both float. */
cudaError_t fhd__cuda_im2col(void *col, const void *x, int kind, float scale, uint64_t x_stride,
                             uint32_t n, const fhd__conv_geom *g, int bf16, cudaStream_t stream);

/* flat (n, cout hw)[i][c hw + p] = y (n hw, cout)[i hw + p][c]: the last conv layer's output in
 * nn.Flatten's (C, H, W) order, the linear torso's input (both bf16 with bf16, else float). */
cudaError_t fhd__cuda_conv_flatten(void *flat, const void *y, uint32_t n, uint32_t hw, uint32_t c,
                                   int bf16, cudaStream_t stream);

/* Weights between the PyTorch order (cout, cin, k, k) and the channels-last column order
 * (cout, k, k, cin) of the layers above the first: job j moves cout cin k k elements src -> dst
 * (back: dst in PyTorch order from src in channels-last order); end[j] is the running total of
 * elements. One launch for all jobs. src is float; dst float, or with bf16 (not back) bf16,
 * rounded. */
#define FHD_CONV_PERM_JOBS 16
typedef struct fhd__conv_perm_job {
    const float *src;
    void *dst;
    uint32_t cin, k;
} fhd__conv_perm_job;
typedef struct fhd__conv_perm_args {
    fhd__conv_perm_job job[FHD_CONV_PERM_JOBS];
    uint64_t end[FHD_CONV_PERM_JOBS];
    uint32_t njobs;
    int back, bf16;
} fhd__conv_perm_args;
cudaError_t fhd__cuda_conv_permute(const fhd__conv_perm_args *a, cudaStream_t stream);

/* The gradient at a conv layer's pre-activation, dz (n hw, c) channels-last, times the ReLU's
 * mask (h > 0, h the layer's output), and that layer's bias-gradient partials:
 *   from_flat (the last conv layer): dz[i hw + p][c] = dflat[i][c hw + p]
 *   else (layer below conv g):        dz = col2im of dcol (n g.hw, g.ckk; channels-last
 *                                     columns), the sum over the (kh, kw) whose window covers
 *                                     the position, kh then kw
 * partial (parts, c): part j's sum of dz[.][c] over its chunks of 32 rows (j, j + parts, ...),
 * parts = fhd__cuda_conv_dz_parts(n hw) <= 512; the optimiser's norm pass adds them up (a bias
 * segment). No atomics: deterministic. src (dflat or dcol) and partial are float; dz and h bf16
 * with bf16 (dz rounded once, the partials summed from the fp32 values), else float. */
uint32_t fhd__cuda_conv_dz_parts(uint64_t rows);
cudaError_t fhd__cuda_conv_dz(void *dz, float *partial, const void *h, const float *src,
                              int from_flat, uint32_t n, uint32_t hw, uint32_t c,
                              const fhd__conv_geom *g, int bf16, cudaStream_t stream);

cudaError_t fhd__cuda_conv_preload(void);

#endif
