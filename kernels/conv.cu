/* conv.cu - im2col, the flatten into (C, H, W) order, and each conv layer's dz with its ReLU
 * mask and bias partials (see conv.cuh). */
#include "common.cuh"
#include "conv.cuh"
#include "divisor.h"

#define CONV_THREADS 256
#define DZ_LANES 32      /* channels a block works on at once: one per lane */
#define DZ_GROUPS 32     /* row groups: one per warp (dz blocks have 1024 threads) */
#define DZ_ROWS 128      /* rows per chunk: 4 per warp */
#define DZ_MAX_PARTS 512 /* blocks per channel chunk: the bias partials the optimiser adds */
#define DZ_THREADS (32 * DZ_GROUPS)

/* x_i's value at (ci, ih, iw) of the learner's dtype times scale, or of a channels-last
 * activation; the caller checks the bounds. */
template <int KIND>
static __device__ __forceinline__ float in_at(const void *__restrict__ x, uint64_t base,
                                              float scale, const fhd__conv_geom &g, uint32_t ci,
                                              int ih, int iw) {
    if (KIND == FHD_CONV_IN_NHWC)
        return __ldg((const float *)x + base + ((uint64_t)ih * g.win + iw) * g.cin + ci);
    const uint64_t at = base + ((uint64_t)ci * g.hin + ih) * g.win + iw;
    if (KIND == FHD_CONV_IN_F32)
        return scale * __ldg((const float *)x + at);
    return scale * (float)__ldg((const uint8_t *)x + at);
}

/* One thread per run of V consecutive kw of a col row, (p, ci, kh, kw / V) of image blockIdx.y
 * (+ gridDim.y ...): a warp's stores are contiguous, V = 4 as one float4 (k and ckk multiples
 * of 4), and uint8 rows are read 4 bytes at a time where aligned and inside the row. */
template <int KIND, int V>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_im2col_kernel(float *__restrict__ col, const void *__restrict__ x, float scale,
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
            float *dst = col + ((uint64_t)i * g.hw + p) * g.ckk + (uint64_t)cikh * g.k + j * V;
            if (V == 4)
                *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]);
            else
                dst[0] = v[0];
        }
    }
}

static unsigned int image_grid(uint32_t n) {
    return n < 65535u ? (n ? n : 1u) : 65535u;
}

/* Channels-last input (layers above the first): one thread per run of V consecutive channels
 * of a col row in (kh, kw, ci) column order, (p, kh, kw, ci / V): reads and stores both
 * contiguous, V = 4 as float4 (cin a multiple of 4). */
template <int V>
__global__ void __launch_bounds__(CONV_THREADS)
    fhd_im2col_hwc_kernel(float *__restrict__ col, const float *__restrict__ x, uint64_t x_stride,
                          uint32_t n, fhd__conv_geom g, fhd_divisor d_run, fhd_divisor d_cv,
                          fhd_divisor d_k, fhd_divisor d_wout) {
    const uint32_t cv = g.cin / V, run = g.k * g.k * cv, runs = g.hw * run;
    for (uint32_t i = blockIdx.y; i < n; i += gridDim.y) {
        const float *xi = x + (uint64_t)i * x_stride;
        for (uint32_t e = blockIdx.x * CONV_THREADS + threadIdx.x; e < runs;
             e += gridDim.x * CONV_THREADS) {
            const uint32_t p = fhd_divide(d_run, e), q = e - p * run; /* (kh k + kw) cv + j */
            const uint32_t oh = fhd_divide(d_wout, p), ow = p - oh * g.wout;
            const uint32_t khw = fhd_divide(d_cv, q), j = q - khw * cv;
            const uint32_t kh = fhd_divide(d_k, khw), kw = khw - kh * g.k;
            const int ih = (int)(oh * g.stride + kh) - (int)g.pad;
            const int iw = (int)(ow * g.stride + kw) - (int)g.pad;
            float *dst = col + ((uint64_t)i * g.hw + p) * g.ckk + (uint64_t)q * V;
            const bool in = ih >= 0 && ih < (int)g.hin && iw >= 0 && iw < (int)g.win;
            const float *src = xi + ((uint64_t)ih * g.win + iw) * g.cin + j * V;
            if (V == 4)
                *(float4 *)dst = in ? __ldg((const float4 *)src) : make_float4(0.f, 0.f, 0.f, 0.f);
            else
                dst[0] = in ? __ldg(src) : 0.0f;
        }
    }
}

static void launch_im2col_hwc(float *col, const float *x, uint64_t x_stride, uint32_t n,
                              const fhd__conv_geom *g, cudaStream_t stream) {
    const int v4 = g->cin % 4 == 0 && ((uintptr_t)col & 15) == 0 && ((uintptr_t)x & 15) == 0 &&
                   x_stride % 4 == 0;
    const uint32_t V = v4 ? 4 : 1, run = g->k * g->k * (g->cin / V);
    uint64_t gx = fhd_cdiv((uint64_t)g->hw * run, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    const dim3 grid((unsigned)gx, image_grid(n));
    const fhd_divisor a = fhd_divisor_make(run), b = fhd_divisor_make(g->cin / V),
                      c = fhd_divisor_make(g->k), d = fhd_divisor_make(g->wout);
    if (v4)
        fhd_im2col_hwc_kernel<4>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, x_stride, n, *g, a, b, c, d);
    else
        fhd_im2col_hwc_kernel<1>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, x_stride, n, *g, a, b, c, d);
}

template <int KIND>
static void launch_im2col(float *col, const void *x, float scale, uint64_t x_stride, uint32_t n,
                          const fhd__conv_geom *g, int v4, cudaStream_t stream) {
    const uint32_t V = v4 ? 4 : 1, run = g->cin * g->k * (g->k / V);
    uint64_t gx = fhd_cdiv((uint64_t)g->hw * run, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    const dim3 grid((unsigned)gx, image_grid(n));
    const fhd_divisor a = fhd_divisor_make(run), b = fhd_divisor_make(g->k / V),
                      d = fhd_divisor_make(g->wout);
    if (v4)
        fhd_im2col_kernel<KIND, 4>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, d);
    else
        fhd_im2col_kernel<KIND, 1>
            <<<grid, CONV_THREADS, 0, stream>>>(col, x, scale, x_stride, n, *g, a, b, d);
}

cudaError_t fhd__cuda_im2col(float *col, const void *x, int kind, float scale, uint64_t x_stride,
                             uint32_t n, const fhd__conv_geom *g, cudaStream_t stream) {
    /* float4 stores where every run of 4 is 16-byte aligned */
    const int v4 = g->k % 4 == 0 && g->ckk % 4 == 0 && ((uintptr_t)col & 15) == 0;
    if (kind == FHD_CONV_IN_NHWC)
        launch_im2col_hwc(col, (const float *)x, x_stride, n, g, stream);
    else if (kind == FHD_CONV_IN_F32)
        launch_im2col<FHD_CONV_IN_F32>(col, x, scale, x_stride, n, g, v4, stream);
    else
        launch_im2col<FHD_CONV_IN_U8>(col, x, scale, x_stride, n, g, v4, stream);
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

cudaError_t fhd__cuda_conv_flatten(float *flat, const float *y, uint32_t n, uint32_t hw, uint32_t c,
                                   cudaStream_t stream) {
    uint64_t gx = fhd_cdiv((uint64_t)hw * c, CONV_THREADS);
    gx = gx < 2 ? 2 : (gx > 4096 ? 4096 : gx); /* never a 1x1x1 grid */
    fhd_conv_flatten_kernel<<<dim3((unsigned)gx, image_grid(n)), CONV_THREADS, 0, stream>>>(
        flat, y, n, hw, c, fhd_divisor_make(hw));
    return cudaGetLastError();
}

uint32_t fhd__cuda_conv_dz_parts(uint64_t rows) {
    const uint64_t p = fhd_cdiv(rows, DZ_ROWS);
    return (uint32_t)(p < 2 ? 2 : (p > DZ_MAX_PARTS ? DZ_MAX_PARTS : p)); /* >= 2: no 1x1x1 grid */
}

/* d(pre-activation) of one element before the mask: row r = i hw + pos of the layer's output,
 * channel ch. */
template <bool FLAT>
static __device__ __forceinline__ float
dz_source(const float *__restrict__ src, uint32_t r, uint32_t ch, uint32_t hw, uint32_t c,
          const fhd__conv_geom &g, fhd_divisor d_hw, fhd_divisor d_w) {
    const uint32_t i = fhd_divide(d_hw, r), pos = r - i * hw;
    if (FLAT)
        return __ldg(src + (uint64_t)i * hw * c + (uint64_t)ch * hw + pos);
    /* col2im gather: the layer above (g, channels-last columns) read position (y, x) of channel
     * ch at kernel offset (kh, kw) for output (oh, ow) with oh stride - pad + kh = y */
    const uint32_t y = fhd_divide(d_w, pos), x = pos - y * g.win;
    const float *base = src + (uint64_t)i * g.hw * g.ckk + ch; /* (kh, kw, ci) columns */
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
            s += __ldg(base + (uint64_t)(oh * g.wout + ow) * g.ckk + (kh * g.k + kw) * g.cin);
        }
    }
    return s;
}

/* Block (j, cc) owns the chunks of 128 rows j, j + parts, ... and channels [32 cc, 32 cc + 32):
 * lane = channel, warp w rows w + 32 t (t = 0..3) of each chunk, a chunk's loads all in flight
 * at once; the block's column sums (its chunks in order, then the warps in order) are
 * partial[j][channel]. */
template <bool FLAT>
__global__ void __launch_bounds__(DZ_THREADS)
    fhd_conv_dz_kernel(float *__restrict__ dz, float *__restrict__ partial,
                       const float *__restrict__ h, const float *__restrict__ src, uint64_t rows,
                       uint32_t hw, uint32_t c, fhd__conv_geom g, fhd_divisor d_hw,
                       fhd_divisor d_w) {
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
            if (ch < c && r < rows && __ldg(h + r * c + ch) > 0.0f)
                v[t] = dz_source<FLAT>(src, (uint32_t)r, ch, hw, c, g, d_hw, d_w);
        }
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const uint64_t r = r0 + (uint64_t)t * DZ_GROUPS;
            if (ch < c && r < rows)
                dz[r * c + ch] = v[t];
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

cudaError_t fhd__cuda_conv_dz(float *dz, float *partial, const float *h, const float *src,
                              int from_flat, uint32_t n, uint32_t hw, uint32_t c,
                              const fhd__conv_geom *g, cudaStream_t stream) {
    const uint64_t rows = (uint64_t)n * hw;
    const dim3 grid(fhd__cuda_conv_dz_parts(rows), (unsigned)fhd_cdiv(c, DZ_LANES));
    const fhd_divisor d_hw = fhd_divisor_make(hw), d_w = fhd_divisor_make(from_flat ? 1 : g->win);
    if (from_flat)
        fhd_conv_dz_kernel<true>
            <<<grid, DZ_THREADS, 0, stream>>>(dz, partial, h, src, rows, hw, c, *g, d_hw, d_w);
    else
        fhd_conv_dz_kernel<false>
            <<<grid, DZ_THREADS, 0, stream>>>(dz, partial, h, src, rows, hw, c, *g, d_hw, d_w);
    return cudaGetLastError();
}

/* One thread per element of all jobs' matrices: element (o, ci, kh, kw) of job j moves between
 * the PyTorch order (ci k + kh) k + kw and the channels-last order (kh k + kw) cin + ci. */
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
        if (a.back)
            jb.dst[t] = jb.src[hwc];
        else
            jb.dst[hwc] = jb.src[t];
    }
}

cudaError_t fhd__cuda_conv_permute(const fhd__conv_perm_args *a, cudaStream_t stream) {
    if (a->njobs == 0)
        return cudaSuccess;
    uint64_t g = fhd_cdiv(a->end[a->njobs - 1], CONV_THREADS);
    g = g < 2 ? 2 : (g > 1024 ? 1024 : g);
    fhd_conv_permute_kernel<<<(unsigned)g, CONV_THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}

cudaError_t fhd__cuda_conv_preload(void) {
    cudaFuncAttributes fa;
    const void *fns[] = {(const void *)fhd_im2col_kernel<FHD_CONV_IN_F32, 1>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8, 1>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_F32, 4>,
                         (const void *)fhd_im2col_kernel<FHD_CONV_IN_U8, 4>,
                         (const void *)fhd_im2col_hwc_kernel<1>,
                         (const void *)fhd_im2col_hwc_kernel<4>,
                         (const void *)fhd_conv_permute_kernel,
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
