/* narrow.cuh - one warp's share of a narrow layer's forward (device code only; include from .cu
 * files): NL_RW rows of y = alpha (x W^T) + b for a chunk of NC outputs, the lanes splitting K.
 * The narrow head kernel (linear.cu) runs it in warps of its own; the loss kernel (td_loss.cu)
 * runs the same sums, in the same order, for the head rows of its block (fhd__loss_args.head_nc),
 * so the two give the same bits. */
#ifndef FHD_KERNELS_NARROW_CUH
#define FHD_KERNELS_NARROW_CUH

#include "common.cuh"

#define NL_RW 4 /* rows per warp */

/* v (V values per lane, V a multiple of 32) summed over the warp's lanes: five exchange steps,
 * each lane keeping half of what it holds and adding the partner's copy of that half. After
 * them lane l holds the complete sums of values l * (V / 32) + i, i < V / 32, in v[i]. The
 * order of the additions is fixed: the result does not depend on scheduling. */
template <int HALF>
static __device__ __forceinline__ void fhd_transposed_step(float *v, uint32_t lane, uint32_t o) {
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < HALF; i++) {
        const float send = up ? v[i] : v[HALF + i];
        const float keep = up ? v[HALF + i] : v[i];
        v[i] = keep + __shfl_xor_sync(FHD_FULL_MASK, send, o);
    }
}

template <int V>
static __device__ __forceinline__ void fhd_transposed_warp_sum(float (&v)[V], uint32_t lane) {
    fhd_transposed_step<V / 2>(v, lane, 16);
    fhd_transposed_step<V / 4>(v, lane, 8);
    fhd_transposed_step<V / 8>(v, lane, 4);
    fhd_transposed_step<V / 16>(v, lane, 2);
    fhd_transposed_step<V / 32>(v, lane, 1);
}

/* acc += x . w over one float4, x then y, z, w: the one order of both K loops below. */
static __device__ __forceinline__ void fhd_narrow_fma4(float &acc, const float4 &x,
                                                       const float4 &w) {
    float a = acc;
    a = fmaf(x.x, w.x, a);
    a = fmaf(x.y, w.y, a);
    a = fmaf(x.z, w.z, a);
    acc = fmaf(x.w, w.w, a);
}

/* Outputs [n0, n0 + NC) of the rows xr (in inputs each; float4 loads when vec) against W (out,
 * in) row-major: the lanes split K, then one transposed butterfly. On return lane `lane` holds
 * in acc[i], i < NL_RW * NC / 32, the sum x W^T of row idx / NC and output n0 + idx % NC, idx =
 * lane * (NL_RW * NC / 32) + i (outputs past `out` are sums against zero weights). */
template <int NC>
static __device__ __forceinline__ void fhd_narrow_rows(float (&acc)[NL_RW * NC],
                                                       const float *const (&xr)[NL_RW],
                                                       const float *__restrict__ w, uint32_t n0,
                                                       uint32_t in, uint32_t out, int vec,
                                                       uint32_t lane) {
    constexpr int V = NL_RW * NC;
    static_assert(V % 32 == 0, "values per lane: a multiple of the warp");
#pragma unroll
    for (int i = 0; i < V; i++)
        acc[i] = 0.0f;
    if (vec) {
        const uint32_t k4n = in >> 2;
        for (uint32_t k4 = lane; k4 < k4n; k4 += 32) {
            float4 xv[NL_RW];
#pragma unroll
            for (int r = 0; r < NL_RW; r++)
                xv[r] = __ldg(reinterpret_cast<const float4 *>(xr[r]) + k4);
#pragma unroll
            for (int n = 0; n < NC; n++) { /* outputs past the end: zero weights */
                const float4 wv =
                    n0 + n < out
                        ? __ldg(reinterpret_cast<const float4 *>(w + (size_t)(n0 + n) * in) + k4)
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
                for (int r = 0; r < NL_RW; r++)
                    fhd_narrow_fma4(acc[r * NC + n], xv[r], wv);
            }
        }
    } else {
        for (uint32_t k = lane; k < in; k += 32) {
            float xv[NL_RW];
#pragma unroll
            for (int r = 0; r < NL_RW; r++)
                xv[r] = __ldg(xr[r] + k);
#pragma unroll
            for (int n = 0; n < NC; n++) {
                const float wv = n0 + n < out ? __ldg(w + (size_t)(n0 + n) * in + k) : 0.0f;
#pragma unroll
                for (int r = 0; r < NL_RW; r++)
                    acc[r * NC + n] = fmaf(xv[r], wv, acc[r * NC + n]);
            }
        }
    }
    fhd_transposed_warp_sum<V>(acc, lane);
}

/* fhd_narrow_rows in pieces, with float4 loads and W (out, in) in shared memory, for a kernel
 * that stages W while its first x loads are in flight: the x loads of two K steps at a time
 * (fhd_narrow_load_x, k40 = lane, lane + 64, ...), then their multiply-adds
 * (fhd_narrow_fma_sw) in the same order as fhd_narrow_rows' (k4 = lane, lane + 32, ... and x,
 * y, z, w within each), then the same butterfly (fhd_transposed_warp_sum): the same bits.
 * Outputs past `out` are left at zero. */
static __device__ __forceinline__ void fhd_narrow_load_x(float4 (&xv)[2][NL_RW],
                                                         const float *const (&xr)[NL_RW],
                                                         uint32_t k40, uint32_t k4n) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int r = 0; r < NL_RW; r++)
            xv[h][r] = k40 + 32 * h < k4n
                           ? __ldg(reinterpret_cast<const float4 *>(xr[r]) + k40 + 32 * h)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <int NC>
static __device__ __forceinline__ void fhd_narrow_fma_sw(float (&acc)[NL_RW * NC],
                                                         const float4 (&xv)[2][NL_RW],
                                                         const float *w_s, uint32_t k40,
                                                         uint32_t k4n, uint32_t in,
                                                         uint32_t out) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t k4 = k40 + 32 * h;
        if (k4 >= k4n)
            break;
#pragma unroll
        for (int n = 0; n < NC; n++) {
            if ((uint32_t)n >= out)
                break;
            const float4 wv = reinterpret_cast<const float4 *>(w_s + (size_t)n * in)[k4];
#pragma unroll
            for (int r = 0; r < NL_RW; r++)
                fhd_narrow_fma4(acc[r * NC + n], xv[h][r], wv);
        }
    }
}

/* One output of the layer from its sum: the same expression wherever it is written. */
static __device__ __forceinline__ float fhd_narrow_out(float alpha, float sum,
                                                       const float *__restrict__ bias,
                                                       uint32_t n) {
    return alpha * sum + __ldg(bias + n);
}

#endif
