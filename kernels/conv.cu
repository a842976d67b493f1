/* conv.cu - im2col, the flatten into (C, H, W) order, and each conv layer's dz with its ReLU
 * mask and bias partials (see conv.cuh). */
#include "common.cuh"
#include "conv.cuh"
#include "divisor.h"

#define CONV_THREADS 256
#define DZ_LANES 32   /* channels a block works on at once: one per lane */
#define DZ_GROUPS 8   /* row groups: one per warp */
#define DZ_MAX_PARTS 256
#define DZ_ROWS_PER_PART 128

/* One thread per col element of image blockIdx.y (+ gridDim.y ...): e = p ckk + q. */
template <int KIND>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_im2col_kernel(float *__restrict__ col, const void *__restrict__ x, float scale,
                      uint64_t x_stride, uint32_t n, fhd__conv_geom g, fhd_divisor d_ckk,
                      fhd_divisor d_kk, fhd_divisor d_k, fhd_divisor d_wout) {
    const uint32_t per = g.hw * g.ckk, kk = g.k * g.k;
    for (uint32_t i = blockIdx.y; i < n; i += gridDim.y) {
        float *dst = col + (uint64_t)i * per;
        for (uint32_t e = blockIdx.x * CONV_THREADS + threadIdx.x; e < per;
             e += gridDim.x * CONV_THREADS) {
            const uint32_t p = fhd_divide(d_ckk, e), q = e - p * g.ckk;
            const uint32_t oh = fhd_divide(d_wout, p), ow = p - oh * g.wout;
            const uint32_t ci = fhd_divide(d_kk, q), r = q - ci * kk;
            const uint32_t kh = fhd_divide(d_k, r), kw = r - kh * g.k;
            const int ih = (int)(oh * g.stride + kh) - (int)g.pad;
            const int iw = (int)(ow * g.stride + kw) - (int)g.pad;
            float v = 0.0f;
            if (ih >= 0 && ih < (int)g.hin && iw >= 0 && iw < (int)g.win) {
                const uint64_t base = (uint64_t)i * x_stride;
                if (KIND == FHD_CONV_IN_NHWC) {
                    v = __ldg((const float *)x + base + ((uint64_t)ih * g.win + iw) * g.cin + ci);
                } else if (KIND == FHD_CONV_IN_F32) {
                    v = scale *
                        __ldg((const float *)x + base + ((uint64_t)ci * g.hin + ih) * g.win + iw);
                } else {
                    v = scale * (float)__ldg((const uint8_t *)x + base +
                                             ((uint64_t)ci * g.hin + ih) * g.win + iw);
                }
            }
            dst[e] = v;
        }
    }
}

static unsigned int image_grid(uint32_t n) {
    return n < 65535u ? (n ? n : 1u) : 65535u;
}

cudaError_t fhd__cuda_im2col(float *col, const void *x, int kind, float scale, uint64_t x_stride,
                             uint32_t n, const fhd__conv_geom *g, cudaStream_t stream) {
    const uint32_t per = g->hw * g->ckk;
    uint64_t gx = fhd_cdiv(per, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    const dim3 grid((unsigned)gx, image_grid(n));
    const fhd_divisor a = fhd_divisor_make(g->ckk), b = fhd_divisor_make(g->k * g->k),
                      c = fhd_divisor_make(g->k), d = fhd_divisor_make(g->wout);
    if (kind == FHD_CONV_IN_NHWC)
        fhd_im2col_kernel<FHD_CONV_IN_NHWC>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, c, d);
    else if (kind == FHD_CONV_IN_F32)
        fhd_im2col_kernel<FHD_CONV_IN_F32>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, c, d);
    else
        fhd_im2col_kernel<FHD_CONV_IN_U8>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, c, d);
    return cudaGetLastError();
}

/* One thread per flat element of image blockIdx.y: f = c hw + p. */
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_conv_flatten_kernel(float *__restrict__ flat, const float *__restrict__ y, uint32_t n,
                            uint32_t hw, uint32_t c, fhd_divisor d_hw) {
    const uint32_t F = hw * c;
    for (uint32_t i = blockIdx.y; i < n; i += gridDim.y)
        for (uint32_t f = blockIdx.x * CONV_THREADS + threadIdx.x; f < F;
             f += gridDim.x * CONV_THREADS) {
            const uint32_t ch = fhd_divide(d_hw, f), p = f - ch * hw;
            flat[(uint64_t)i * F + f] = __ldg(y + ((uint64_t)i * hw + p) * c + ch);
        }
}

cudaError_t fhd__cuda_conv_flatten(float *flat, const float *y, uint32_t n, uint32_t hw,
                                   uint32_t c, cudaStream_t stream) {
    uint64_t gx = fhd_cdiv((uint64_t)hw * c, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    fhd_conv_flatten_kernel<<<dim3((unsigned)gx, image_grid(n)), CONV_THREADS, 0, stream>>>(
        flat, y, n, hw, c, fhd_divisor_make(hw));
    return cudaGetLastError();
}

uint32_t fhd__cuda_conv_dz_parts(uint64_t rows) {
    uint64_t p = fhd_cdiv(rows, DZ_ROWS_PER_PART);
    return (uint32_t)(p < 2 ? 2 : (p > DZ_MAX_PARTS ? DZ_MAX_PARTS : p)); /* >= 2 blocks */
}

/* d(pre-activation) of one element before the mask: row r = i hw + pos of the layer's output,
 * channel ch. */
template <bool FLAT>
static __device__ __forceinline__ float dz_source(const float *__restrict__ src, uint32_t r,
                                                  uint32_t ch, uint32_t hw, uint32_t c,
                                                  const fhd__conv_geom &g, fhd_divisor d_hw,
                                                  fhd_divisor d_w) {
    const uint32_t i = fhd_divide(d_hw, r), pos = r - i * hw;
    if (FLAT)
        return __ldg(src + (uint64_t)i * hw * c + (uint64_t)ch * hw + pos);
    /* col2im gather: the layer above (g) read position (y, x) of channel ch at kernel offset
     * (kh, kw) for output (oh, ow) with oh stride - pad + kh = y */
    const uint32_t y = fhd_divide(d_w, pos), x = pos - y * g.win;
    const uint32_t kk = g.k * g.k;
    const float *base = src + (uint64_t)i * g.hw * g.ckk + (uint64_t)ch * kk;
    float s = 0.0f;
    for (uint32_t kh = 0; kh < g.k; kh++) {
        const int t = (int)(y + g.pad) - (int)kh;
        if (t < 0 || t % (int)g.stride)
            continue;
        const uint32_t oh = (uint32_t)t / g.stride;
        if (oh >= g.hout)
            continue;
        for (uint32_t kw = 0; kw < g.k; kw++) {
            const int u = (int)(x + g.pad) - (int)kw;
            if (u < 0 || u % (int)g.stride)
                continue;
            const uint32_t ow = (uint32_t)u / g.stride;
            if (ow >= g.wout)
                continue;
            s += __ldg(base + (uint64_t)(oh * g.wout + ow) * g.ckk + kh * g.k + kw);
        }
    }
    return s;
}

/* Block j owns rows [j rpp, (j + 1) rpp); warp w rows j rpp + w + 8 t, lane = channel within
 * each chunk of 32. */
template <bool FLAT>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_conv_dz_kernel(float *__restrict__ dz, float *__restrict__ partial,
                       const float *__restrict__ h, const float *__restrict__ src, uint64_t rows,
                       uint32_t rpp, uint32_t hw, uint32_t c, fhd__conv_geom g, fhd_divisor d_hw,
                       fhd_divisor d_w) {
    __shared__ float red[DZ_GROUPS][DZ_LANES];
    const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
    const uint64_t r0 = (uint64_t)blockIdx.x * rpp;
    const uint64_t r1 = r0 + rpp < rows ? r0 + rpp : rows;
    for (uint32_t c0 = 0; c0 < c; c0 += DZ_LANES) {
        const uint32_t ch = c0 + lane;
        float acc = 0.0f;
        if (ch < c)
            for (uint64_t r = r0 + grp; r < r1; r += DZ_GROUPS) {
                const uint64_t at = r * c + ch;
                float v = 0.0f;
                if (__ldg(h + at) > 0.0f)
                    v = dz_source<FLAT>(src, (uint32_t)r, ch, hw, c, g, d_hw, d_w);
                dz[at] = v;
                acc += v;
            }
        red[grp][lane] = acc;
        __syncthreads();
        if (grp == 0 && ch < c) {
            float s = 0.0f;
#pragma unroll
            for (int w = 0; w < DZ_GROUPS; w++)
                s += red[w][lane];
            partial[(uint64_t)blockIdx.x * c + ch] = s;
        }
        __syncthreads();
    }
}

cudaError_t fhd__cuda_conv_dz(float *dz, float *partial, const float *h, const float *src,
                              int from_flat, uint32_t n, uint32_t hw, uint32_t c,
                              const fhd__conv_geom *g, cudaStream_t stream) {
    const uint64_t rows = (uint64_t)n * hw;
    const uint32_t parts = fhd__cuda_conv_dz_parts(rows);
    const uint32_t rpp = (uint32_t)fhd_cdiv(rows, parts);
    const fhd_divisor d_hw = fhd_divisor_make(hw), d_w = fhd_divisor_make(from_flat ? 1 : g->win);
    if (from_flat)
        fhd_conv_dz_kernel<true><<<parts, CONV_THREADS, 0, stream>>>(dz, partial, h, src, rows,
                                                                      rpp, hw, c, *g, d_hw, d_w);
    else
        fhd_conv_dz_kernel<false><<<parts, CONV_THREADS, 0, stream>>>(dz, partial, h, src, rows,
                                                                       rpp, hw, c, *g, d_hw, d_w);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_conv_preload(void) {
    cudaFuncAttributes fa;
    const void *fns[] = {(const void *)fhd_im2col_kernel<FHD_CONV_IN_NHWC>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_F32>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8>,
                         (const void *)fhd_conv_flatten_kernel,
                         (const void *)fhd_conv_dz_kernel<true>,
                         (const void *)fhd_conv_dz_kernel<false>};
    for (const void *f : fns) {
        cudaError_t e = cudaFuncGetAttributes(&fa, f);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
