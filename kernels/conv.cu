/* conv.cu - im2col, the flatten into (C, H, W) order, and each conv layer's dz with its ReLU
 * mask and bias partials (see conv.cuh). Each kernel is a template on the element type T of
 * the activations it reads and writes: float, or __nv_bfloat16 with bf16 GEMMs. */
#include <cuda_bf16.h>

#include "common.cuh"
#include "conv.cuh"
#include "divisor.h"

#define CONV_THREADS 256
#define DZ_LANES 32      /* channels a block works on at once: one per lane */
#define DZ_GROUPS 8      /* row groups: one per warp (dz blocks have 256 threads) */
#define DZ_ROWS 32       /* rows per chunk: 4 per warp */
#define DZ_MAX_PARTS 512 /* blocks per channel chunk: the bias partials the optimiser adds */
#define DZ_THREADS (32 * DZ_GROUPS)

/* A value of T as float, and a float as T (bf16: rounded to nearest even). */
static __device__ __forceinline__ float to_f(float v) {
    return v;
}
static __device__ __forceinline__ float to_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> static __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* Four consecutive values of T at dst (16 bytes for float, 8 for bf16; aligned so). */
static __device__ __forceinline__ void store4(float *dst, const float *v) {
    *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ void store4(__nv_bfloat16 *dst, const float *v) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]),
                         hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 w;
    memcpy(&w.x, &lo, sizeof w.x);
    memcpy(&w.y, &hi, sizeof w.y);
    *(uint2 *)dst = w;
}

/* Four consecutive values of T copied from src to dst (both aligned as store4's), or zeros. */
static __device__ __forceinline__ void copy4(float *dst, const float *src, bool in) {
    *(float4 *)dst = in ? __ldg((const float4 *)src) : make_float4(0.f, 0.f, 0.f, 0.f);
}
static __device__ __forceinline__ void copy4(__nv_bfloat16 *dst, const __nv_bfloat16 *src,
                                             bool in) {
    *(uint2 *)dst = in ? __ldg((const uint2 *)src) : make_uint2(0u, 0u);
}

/* x_i's value at (ci, ih, iw) of the learner's dtype times scale; the caller checks the
 * bounds. */
template <int KIND>
static __device__ __forceinline__ float in_at(const void *__restrict__ x, uint64_t base,
                                              float scale, const fhd__conv_geom &g, uint32_t ci,
                                              int ih, int iw) {
    const uint64_t at = base + ((uint64_t)ci * g.hin + ih) * g.win + iw;
    if (KIND == FHD_CONV_IN_F32)
        return scale * __ldg((const float *)x + at);
    return scale * (float)__ldg((const uint8_t *)x + at);
}

/* One thread per run of V consecutive kw of a col row, (p, ci, kh, kw / V) of image blockIdx.y
 * (+ gridDim.y ...): a warp's stores are contiguous, V = 4 as one 4-value store (k and ckk
 * multiples of 4), and uint8 rows are read 4 bytes at a time where aligned and inside the row.
 * T = bf16: each value scale x rounded once. */
template <int KIND, int V, typename T>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_im2col_kernel(T *__restrict__ col, const void *__restrict__ x, float scale,
                      uint64_t x_stride, uint32_t n, fhd__conv_geom g, fhd_divisor d_run,
                      fhd_divisor d_kv, fhd_divisor d_wout) {
    const uint32_t kv = g.k / V, run = g.cin * g.k * kv, runs = g.hw * run;
    for (uint32_t i = blockIdx.y; i < n; i += gridDim.y) {
        const uint64_t base = (uint64_t)i * x_stride;
        for (uint32_t e = blockIdx.x * CONV_THREADS + threadIdx.x; e < runs;
             e += gridDim.x * CONV_THREADS) {
            const uint32_t p = fhd_divide(d_run, e), q = e - p * run; /* q = (ci k + kh) kv + j */
            const uint32_t oh = fhd_divide(d_wout, p), ow = p - oh * g.wout;
            const uint32_t cikh = fhd_divide(d_kv, q), j = q - cikh * kv;
            const uint32_t ci = cikh / g.k, kh = cikh - ci * g.k;
            const int ih = (int)(oh * g.stride + kh) - (int)g.pad;
            const int iw0 = (int)(ow * g.stride + j * V) - (int)g.pad;
            float v[V];
            const bool row_in = ih >= 0 && ih < (int)g.hin;
            bool done = false;
            if (KIND == FHD_CONV_IN_U8 && V == 4 && row_in && iw0 >= 0 && iw0 + 3 < (int)g.win) {
                const uint8_t *px =
                    (const uint8_t *)x + base + ((uint64_t)ci * g.hin + ih) * g.win + iw0;
                if (((uintptr_t)px & 3) == 0) {
                    const uchar4 u = __ldg((const uchar4 *)px);
                    v[0] = scale * (float)u.x;
                    v[1] = scale * (float)u.y;
                    v[2] = scale * (float)u.z;
                    v[3] = scale * (float)u.w;
                    done = true;
                }
            }
            if (!done)
#pragma unroll
                for (int t = 0; t < V; t++) {
                    const int iw = iw0 + t;
                    v[t] = row_in && iw >= 0 && iw < (int)g.win
                               ? in_at<KIND>(x, base, scale, g, ci, ih, iw)
                               : 0.0f;
                }
            T *dst = col + ((uint64_t)i * g.hw + p) * g.ckk + (uint64_t)cikh * g.k + j * V;
            if (V == 4)
                store4(dst, v);
            else
                dst[0] = from_f<T>(v[0]);
        }
    }
}

static unsigned int image_grid(uint32_t n) {
    return n < 65535u ? (n ? n : 1u) : 65535u;
}

/* Channels-last input (layers above the first): one thread per run of V consecutive channels
 * of a col row in (kh, kw, ci) column order, (p, kh, kw, ci / V): reads and stores both
 * contiguous, V = 4 as one 4-value copy (cin a multiple of 4). T: the activation's type, which
 * col keeps (a bf16 activation is already rounded). */
template <int V, typename T>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_im2col_hwc_kernel(T *__restrict__ col, const T *__restrict__ x, uint64_t x_stride,
                          uint32_t n, fhd__conv_geom g, fhd_divisor d_run, fhd_divisor d_cv,
                          fhd_divisor d_k, fhd_divisor d_wout) {
    const uint32_t cv = g.cin / V, run = g.k * g.k * cv, runs = g.hw * run;
    for (uint32_t i = blockIdx.y; i < n; i += gridDim.y) {
        const T *xi = x + (uint64_t)i * x_stride;
        for (uint32_t e = blockIdx.x * CONV_THREADS + threadIdx.x; e < runs;
             e += gridDim.x * CONV_THREADS) {
            const uint32_t p = fhd_divide(d_run, e), q = e - p * run; /* (kh k + kw) cv + j */
            const uint32_t oh = fhd_divide(d_wout, p), ow = p - oh * g.wout;
            const uint32_t khw = fhd_divide(d_cv, q), j = q - khw * cv;
            const uint32_t kh = fhd_divide(d_k, khw), kw = khw - kh * g.k;
            const int ih = (int)(oh * g.stride + kh) - (int)g.pad;
            const int iw = (int)(ow * g.stride + kw) - (int)g.pad;
            T *dst = col + ((uint64_t)i * g.hw + p) * g.ckk + (uint64_t)q * V;
            const bool in = ih >= 0 && ih < (int)g.hin && iw >= 0 && iw < (int)g.win;
            const T *src = xi + ((uint64_t)ih * g.win + iw) * g.cin + j * V;
            if (V == 4)
                copy4(dst, src, in);
            else
                dst[0] = in ? __ldg(src) : from_f<T>(0.0f);
        }
    }
}

template <typename T>
static void launch_im2col_hwc(T *col, const T *x, uint64_t x_stride, uint32_t n,
                              const fhd__conv_geom *g, cudaStream_t stream) {
    const uintptr_t al = 4 * sizeof(T) - 1; /* a run of 4 values: 16 or 8 bytes */
    const int v4 = g->cin % 4 == 0 && ((uintptr_t)col & al) == 0 && ((uintptr_t)x & al) == 0 &&
                   x_stride % 4 == 0;
    const uint32_t V = v4 ? 4 : 1, run = g->k * g->k * (g->cin / V);
    uint64_t gx = fhd_cdiv((uint64_t)g->hw * run, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    const dim3 grid((unsigned)gx, image_grid(n));
    const fhd_divisor a = fhd_divisor_make(run), b = fhd_divisor_make(g->cin / V),
                      c = fhd_divisor_make(g->k), d = fhd_divisor_make(g->wout);
    if (v4)
        fhd_im2col_hwc_kernel<4, T>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, x_stride, n, *g, a, b, c, d);
    else
        fhd_im2col_hwc_kernel<1, T>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, x_stride, n, *g, a, b, c, d);
}

template <int KIND, typename T>
static void launch_im2col(T *col, const void *x, float scale, uint64_t x_stride, uint32_t n,
                          const fhd__conv_geom *g, int v4, cudaStream_t stream) {
    const uint32_t V = v4 ? 4 : 1, run = g->cin * g->k * (g->k / V);
    uint64_t gx = fhd_cdiv((uint64_t)g->hw * run, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    const dim3 grid((unsigned)gx, image_grid(n));
    const fhd_divisor a = fhd_divisor_make(run), b = fhd_divisor_make(g->k / V),
                      d = fhd_divisor_make(g->wout);
    if (v4)
        fhd_im2col_kernel<KIND, 4, T>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, d);
    else
        fhd_im2col_kernel<KIND, 1, T>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, d);
}

template <typename T>
static void im2col(T *col, const void *x, int kind, float scale, uint64_t x_stride, uint32_t n,
                   const fhd__conv_geom *g, cudaStream_t stream) {
    /* 4-value stores where every run of 4 is aligned (16 bytes for float, 8 for bf16) */
    const int v4 = g->k % 4 == 0 && g->ckk % 4 == 0 && ((uintptr_t)col & (4 * sizeof(T) - 1)) == 0;
    if (kind == FHD_CONV_IN_NHWC)
        launch_im2col_hwc(col, (const T *)x, x_stride, n, g, stream);
    else if (kind == FHD_CONV_IN_F32)
        launch_im2col<FHD_CONV_IN_F32>(col, x, scale, x_stride, n, g, v4, stream);
    else
        launch_im2col<FHD_CONV_IN_U8>(col, x, scale, x_stride, n, g, v4, stream);
}

cudaError_t fhd__cuda_im2col(void *col, const void *x, int kind, float scale, uint64_t x_stride,
                             uint32_t n, const fhd__conv_geom *g, int bf16, cudaStream_t stream) {
    if (bf16)
        im2col((__nv_bfloat16 *)col, x, kind, scale, x_stride, n, g, stream);
    else
        im2col((float *)col, x, kind, scale, x_stride, n, g, stream);
    return cudaGetLastError();
}

/* One thread per flat element of image blockIdx.y: f = c hw + p. */
template <typename T>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_conv_flatten_kernel(T *__restrict__ flat, const T *__restrict__ y, uint32_t n, uint32_t hw,
                            uint32_t c, fhd_divisor d_hw) {
    const uint32_t F = hw * c;
    for (uint32_t i = blockIdx.y; i < n; i += gridDim.y)
        for (uint32_t f = blockIdx.x * CONV_THREADS + threadIdx.x; f < F;
             f += gridDim.x * CONV_THREADS) {
            const uint32_t ch = fhd_divide(d_hw, f), p = f - ch * hw;
            flat[(uint64_t)i * F + f] = __ldg(y + ((uint64_t)i * hw + p) * c + ch);
        }
}

cudaError_t fhd__cuda_conv_flatten(void *flat, const void *y, uint32_t n, uint32_t hw, uint32_t c,
                                   int bf16, cudaStream_t stream) {
    uint64_t gx = fhd_cdiv((uint64_t)hw * c, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    const dim3 grid((unsigned)gx, image_grid(n));
    if (bf16)
        fhd_conv_flatten_kernel<__nv_bfloat16><<<grid, CONV_THREADS, 0, stream>>>(
            (__nv_bfloat16 *)flat, (const __nv_bfloat16 *)y, n, hw, c, fhd_divisor_make(hw));
    else
        fhd_conv_flatten_kernel<float><<<grid, CONV_THREADS, 0, stream>>>(
            (float *)flat, (const float *)y, n, hw, c, fhd_divisor_make(hw));
    return cudaGetLastError();
}

uint32_t fhd__cuda_conv_dz_parts(uint64_t rows) {
    const uint64_t p = fhd_cdiv(rows, DZ_ROWS);
    return (uint32_t)(p < 2 ? 2 : (p > DZ_MAX_PARTS ? DZ_MAX_PARTS : p)); /* >= 2: no 1x1x1 grid */
}

/* d(pre-activation) of one element before the mask: row r = i hw + pos of the layer's output,
 * channel ch. TPD: the kernel offsets per dimension that can cover a position, ceil(k / stride),
 * when <= 4 (the loops unrolled, every load issued before the sum), else 0 (loops). */
template <bool FLAT, int TPD>
static __device__ __forceinline__ float
dz_source(const float *__restrict__ src, uint32_t r, uint32_t ch, uint32_t hw, uint32_t c,
          const fhd__conv_geom &g, fhd_divisor d_hw, fhd_divisor d_w) {
    const uint32_t i = fhd_divide(d_hw, r), pos = r - i * hw;
    if (FLAT)
        return __ldg(src + (uint64_t)i * hw * c + (uint64_t)ch * hw + pos);
    /* col2im gather: the layer above (g, channels-last columns) read position (y, x) of channel
     * ch at kernel offset (kh, kw) for output (oh, ow) with oh stride - pad + kh = y; only the
     * offsets congruent to y + pad (x + pad) mod stride can, kh then kw ascending */
    const uint32_t y = fhd_divide(d_w, pos), x = pos - y * g.win;
    const float *base = src + (uint64_t)i * g.hw * g.ckk + ch; /* (kh, kw, ci) columns */
    const uint32_t ty = y + g.pad, tx = x + g.pad;
    const uint32_t kh0 = ty % g.stride, kw0 = tx % g.stride;
    float s = 0.0f;
    if constexpr (TPD > 0) {
        float v[TPD][TPD];
#pragma unroll
        for (int a = 0; a < TPD; a++) {
            const uint32_t kh = kh0 + a * g.stride, oh = (ty - kh) / g.stride;
            const bool hin = kh < g.k && kh <= ty && oh < g.hout;
#pragma unroll
            for (int e = 0; e < TPD; e++) {
                const uint32_t kw = kw0 + e * g.stride, ow = (tx - kw) / g.stride;
                v[a][e] = hin && kw < g.k && kw <= tx && ow < g.wout
                              ? __ldg(base + (uint64_t)(oh * g.wout + ow) * g.ckk +
                                      (kh * g.k + kw) * g.cin)
                              : 0.0f;
            }
        }
#pragma unroll
        for (int a = 0; a < TPD; a++)
#pragma unroll
            for (int e = 0; e < TPD; e++)
                s += v[a][e];
    } else {
        for (uint32_t kh = kh0; kh < g.k && kh <= ty; kh += g.stride) {
            const uint32_t oh = (ty - kh) / g.stride;
            if (oh >= g.hout)
                continue;
            for (uint32_t kw = kw0; kw < g.k && kw <= tx; kw += g.stride) {
                const uint32_t ow = (tx - kw) / g.stride;
                if (ow >= g.wout)
                    continue;
                s += __ldg(base + (uint64_t)(oh * g.wout + ow) * g.ckk + (kh * g.k + kw) * g.cin);
            }
        }
    }
    return s;
}

/* Block (j, cc) owns the chunks of 32 rows j, j + parts, ... and channels [32 cc, 32 cc + 32):
 * lane = channel, warp w rows w + 8 t (t = 0..3) of each chunk, a chunk's loads all in flight
 * at once; the block's column sums (its chunks in order, then the warps in order) are
 * partial[j][channel]. T: the type of h and dz (bf16: dz rounded, the partials from the fp32
 * values). */
template <bool FLAT, int TPD, typename T>
__global__ void __launch_bounds__(DZ_THREADS)
    fhd_conv_dz_kernel(T *__restrict__ dz, float *__restrict__ partial, const T *__restrict__ h,
                       const float *__restrict__ src, uint64_t rows, uint32_t hw, uint32_t c,
                       fhd__conv_geom g, fhd_divisor d_hw, fhd_divisor d_w) {
    __shared__ float red[DZ_GROUPS][DZ_LANES];
    constexpr int NR = DZ_ROWS / DZ_GROUPS;
    const uint32_t lane = threadIdx.x & 31, grp = threadIdx.x >> 5;
    const uint32_t ch = blockIdx.y * DZ_LANES + lane;
    float acc = 0.0f;
    for (uint64_t r0 = (uint64_t)blockIdx.x * DZ_ROWS + grp; r0 < rows;
         r0 += (uint64_t)gridDim.x * DZ_ROWS) {
        float v[NR];
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const uint64_t r = r0 + (uint64_t)t * DZ_GROUPS;
            v[t] = 0.0f;
            if (ch < c && r < rows && to_f(__ldg(h + r * c + ch)) > 0.0f)
                v[t] = dz_source<FLAT, TPD>(src, (uint32_t)r, ch, hw, c, g, d_hw, d_w);
        }
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const uint64_t r = r0 + (uint64_t)t * DZ_GROUPS;
            if (ch < c && r < rows)
                dz[r * c + ch] = from_f<T>(v[t]);
            acc += v[t];
        }
    }
    red[grp][lane] = acc;
    __syncthreads();
    if (grp == 0 && ch < c) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DZ_GROUPS; w++)
            sum += red[w][lane];
        partial[(uint64_t)blockIdx.x * c + ch] = sum;
    }
}

template <typename T>
static void conv_dz(T *dz, float *partial, const T *h, const float *src, int from_flat, uint32_t n,
                    uint32_t hw, uint32_t c, const fhd__conv_geom *g, cudaStream_t stream) {
    const uint64_t rows = (uint64_t)n * hw;
    const dim3 grid(fhd__cuda_conv_dz_parts(rows), (unsigned)fhd_cdiv(c, DZ_LANES));
    const fhd_divisor d_hw = fhd_divisor_make(hw), d_w = fhd_divisor_make(from_flat ? 1 : g->win);
    const uint32_t tpd = from_flat ? 0 : (g->k + g->stride - 1) / g->stride;
#define FHD_DZ_LAUNCH(F, P)                                                                      \
    fhd_conv_dz_kernel<F, P, T>                                                                  \
        <<<grid, DZ_THREADS, 0, stream>>>(dz, partial, h, src, rows, hw, c, *g, d_hw, d_w)
    if (from_flat)
        FHD_DZ_LAUNCH(true, 0);
    else if (tpd == 1)
        FHD_DZ_LAUNCH(false, 1);
    else if (tpd == 2)
        FHD_DZ_LAUNCH(false, 2);
    else if (tpd == 3)
        FHD_DZ_LAUNCH(false, 3);
    else if (tpd == 4)
        FHD_DZ_LAUNCH(false, 4);
    else
        FHD_DZ_LAUNCH(false, 0);
#undef FHD_DZ_LAUNCH
}

cudaError_t fhd__cuda_conv_dz(void *dz, float *partial, const void *h, const float *src,
                              int from_flat, uint32_t n, uint32_t hw, uint32_t c,
                              const fhd__conv_geom *g, int bf16, cudaStream_t stream) {
    if (bf16)
        conv_dz((__nv_bfloat16 *)dz, partial, (const __nv_bfloat16 *)h, src, from_flat, n, hw, c, g,
                stream);
    else
        conv_dz((float *)dz, partial, (const float *)h, src, from_flat, n, hw, c, g, stream);
    return cudaGetLastError();
}

/* One thread per element of all jobs' matrices: element (o, ci, kh, kw) of job j moves between
 * the PyTorch order (ci k + kh) k + kw and the channels-last order (kh k + kw) cin + ci. T: the
 * destination's type (bf16: rounded; the way back is always float). */
template <typename T>
__global__ void __launch_bounds__(CONV_THREADS) fhd_conv_permute_kernel(fhd__conv_perm_args a) {
    const uint64_t total = a.end[a.njobs - 1];
    for (uint64_t e = blockIdx.x * (uint64_t)CONV_THREADS + threadIdx.x; e < total;
         e += (uint64_t)gridDim.x * CONV_THREADS) {
        uint32_t j = 0;
        while (e >= a.end[j])
            j++;
        const fhd__conv_perm_job &jb = a.job[j];
        const uint32_t t = (uint32_t)(e - (j ? a.end[j - 1] : 0)); /* in PyTorch order */
        const uint32_t kk = jb.k * jb.k, ckk = jb.cin * kk;
        const uint32_t o = t / ckk, r = t - o * ckk, ci = r / kk, khw = r - ci * kk;
        const uint32_t hwc = o * ckk + khw * jb.cin + ci;
        T *dst = (T *)jb.dst;
        if (a.back)
            dst[t] = from_f<T>(jb.src[hwc]);
        else
            dst[hwc] = from_f<T>(jb.src[t]);
    }
}

cudaError_t fhd__cuda_conv_permute(const fhd__conv_perm_args *a, cudaStream_t stream) {
    if (a->njobs == 0)
        return cudaSuccess;
    uint64_t g = fhd_cdiv(a->end[a->njobs - 1], CONV_THREADS);
    g = g < 2 ? 2 : (g > 1024 ? 1024 : g);
    if (a->bf16 && !a->back)
        fhd_conv_permute_kernel<__nv_bfloat16><<<(unsigned)g, CONV_THREADS, 0, stream>>>(*a);
    else
        fhd_conv_permute_kernel<float><<<(unsigned)g, CONV_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_conv_preload(void) {
    cudaFuncAttributes fa;
    typedef __nv_bfloat16 bf;
    const void *fns[] = {(const void *)fhd_im2col_kernel<FHD_CONV_IN_F32, 1, float>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8, 1, float>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_F32, 4, float>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8, 4, float>,
                         (const void *)fhd_im2col_hwc_kernel<1, float>,
                         (const void *)fhd_im2col_hwc_kernel<4, float>,
                         (const void *)fhd_conv_permute_kernel<float>,
                         (const void *)fhd_conv_flatten_kernel<float>,
                         (const void *)fhd_conv_dz_kernel<true, 0, float>,
                         (const void *)fhd_conv_dz_kernel<false, 0, float>,
                         (const void *)fhd_conv_dz_kernel<false, 1, float>,
                         (const void *)fhd_conv_dz_kernel<false, 2, float>,
                         (const void *)fhd_conv_dz_kernel<false, 3, float>,
                         (const void *)fhd_conv_dz_kernel<false, 4, float>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_F32, 1, bf>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8, 1, bf>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_F32, 4, bf>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8, 4, bf>,
                         (const void *)fhd_im2col_hwc_kernel<1, bf>,
                         (const void *)fhd_im2col_hwc_kernel<4, bf>,
                         (const void *)fhd_conv_permute_kernel<bf>,
                         (const void *)fhd_conv_flatten_kernel<bf>,
                         (const void *)fhd_conv_dz_kernel<true, 0, bf>,
                         (const void *)fhd_conv_dz_kernel<false, 0, bf>,
                         (const void *)fhd_conv_dz_kernel<false, 1, bf>,
                         (const void *)fhd_conv_dz_kernel<false, 2, bf>,
                         (const void *)fhd_conv_dz_kernel<false, 3, bf>,
                         (const void *)fhd_conv_dz_kernel<false, 4, bf>};
    for (const void *f : fns) {
        cudaError_t e = cudaFuncGetAttributes(&fa, f);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
