/* common.cuh - device helpers shared by the kernels (device code only; include from .cu files).
 *
 * Reductions are written so that their result does not depend on thread or block scheduling:
 * warp shuffles in a fixed butterfly, shared-memory sums over warps in index order, and
 * cross-block sums done by the last block to finish (last_block_done) over per-block partials
 * in block order. No float atomics anywhere: the CUDA backend is bitwise reproducible run to
 * run.
 */
#ifndef FHD_KERNELS_COMMON_CUH
#define FHD_KERNELS_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define FHD_FULL_MASK 0xffffffffu

__device__ __forceinline__ float fhd_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FHD_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ double fhd_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FHD_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ uint64_t fhd_warp_min_u64(uint64_t v) {
    for (int o = 16; o > 0; o >>= 1) {
        uint64_t w = __shfl_xor_sync(FHD_FULL_MASK, v, o);
        v = w < v ? w : v;
    }
    return v;
}

/* fhd_warp_sum_d of four values at once, their butterflies interleaved (each result is the
 * same as fhd_warp_sum_d of that value). */
__device__ __forceinline__ void fhd_warp_sum4_d(double v[4]) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int q = 0; q < 4; q++)
            v[q] += __shfl_xor_sync(FHD_FULL_MASK, v[q], o);
}

/* scratch[0] + scratch[1] + ... + scratch[nw - 1] (nw <= 32 warp sums) in index order, from
 * 0.0, with the loads of eight in flight at once rather than one shared-memory round trip per
 * addition. */
__device__ __forceinline__ double fhd_sum_warps_d(const double *scratch, int nw) {
    double s = 0.0;
    for (int w0 = 0; w0 < nw; w0 += 8) {
        double x[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            x[k] = w0 + k < nw ? scratch[w0 + k] : 0.0;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (w0 + k < nw)
                s += x[k];
    }
    return s;
}

/* Sum of one double per thread over the block (blockDim.x a multiple of 32, <= 1024); the
 * result is returned to every thread. scratch: 32 doubles of shared memory. */
__device__ __forceinline__ double fhd_block_sum_d(double v, double *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = fhd_warp_sum_d(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    return fhd_sum_warps_d(scratch, nw); /* fixed order: every thread computes the same sum */
}

/* fhd_block_sum_d of four values at once (one pair of barriers instead of four); each result
 * is the same as fhd_block_sum_d of that value. scratch: 4 x 32 doubles of shared memory. */
__device__ __forceinline__ void fhd_block_sum4_d(double v[4], double *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    fhd_warp_sum4_d(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0)
#pragma unroll
        for (int q = 0; q < 4; q++)
            scratch[q * 32 + warp] = v[q];
    __syncthreads();
#pragma unroll
    for (int q = 0; q < 4; q++)
        v[q] = fhd_sum_warps_d(scratch + q * 32, nw);
}

/* Adam's scalars for step t (fhd__adam_step's, in double and rounded once): the step
 * lr / (1 - beta1^t) and sqrt(1 - beta2^t). */
__device__ __forceinline__ void fhd_adam_scalars(double lr, double beta1, double beta2, uint64_t t,
                                                 float *step, float *bc2_sqrt) {
    *step = (float)(lr / (1.0 - pow(beta1, (double)t)));
    *bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
}

/* The last-block-done pattern: every block calls this after writing its partial results;
 * it returns true (in all threads) in exactly one block, the last one to arrive, which may
 * then read every other block's partials (with __ldcg). The counter is reset by that block,
 * so the kernel can be replayed (graphs) without a memset. */
__device__ __forceinline__ bool fhd_last_block_done(unsigned int *counter, unsigned int nblocks) {
    __shared__ bool fhd_is_last;
    __threadfence(); /* this block's partials are visible device-wide before it is counted */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int prev = atomicAdd(counter, 1u);
        fhd_is_last = (prev == nblocks - 1);
        if (fhd_is_last)
            *counter = 0u;
    }
    __syncthreads();
    if (fhd_is_last)
        __threadfence();
    return fhd_is_last;
}

/* Sums of p[k * stride + q], q < N, for k = lane, lane + 32, ... < n, by one warp (lane =
 * threadIdx.x % 32), returned to every lane in out[q]. Each lane adds its values in k order,
 * four k (and every series) in flight at a time (__ldcg: the partials were written by other
 * blocks of this launch), then the fixed butterfly: the result does not depend on scheduling.
 * For the last-block reductions over per-block partials, where a serial walk would pay one L2
 * round trip per partial. */
template <typename T, int N>
__device__ __forceinline__ void fhd_warp_sum_strided_n(const T *p, uint32_t n, size_t stride,
                                                       T (&out)[N]) {
    const uint32_t lane = threadIdx.x & 31;
    T acc[N];
#pragma unroll
    for (int q = 0; q < N; q++)
        acc[q] = 0;
    uint32_t k = lane;
    for (; k + 96 < n; k += 128) {
        T v[4][N];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int q = 0; q < N; q++)
                v[i][q] = __ldcg(p + (size_t)(k + 32 * i) * stride + q);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int q = 0; q < N; q++)
                acc[q] += v[i][q];
    }
    for (; k < n; k += 32)
#pragma unroll
        for (int q = 0; q < N; q++)
            acc[q] += __ldcg(p + (size_t)k * stride + q);
#pragma unroll
    for (int q = 0; q < N; q++) {
        for (int o = 16; o > 0; o >>= 1)
            acc[q] += __shfl_xor_sync(FHD_FULL_MASK, acc[q], o);
        out[q] = acc[q];
    }
}

/* One series: fhd_warp_sum_strided_n with N = 1. */
template <typename T>
__device__ __forceinline__ T fhd_warp_sum_strided(const T *p, uint32_t n, size_t stride) {
    T out[1];
    fhd_warp_sum_strided_n<T, 1>(p, n, stride, out);
    return out[0];
}

/* Programmatic dependent launch (sm_90): a kernel lets the next one on its stream start early
 * (fhd_pdl_trigger), and that one waits for it, and for its memory, only where it reads what the
 * first wrote (fhd_pdl_wait). Both are no-ops in code compiled below sm_90 and for launches
 * without the attribute; fhd_pdl_allowed says whether a kernel may be launched with it. */
__device__ __forceinline__ void fhd_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void fhd_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* 1 when kernel func may be launched as a programmatic dependent on the current device: the
 * device is sm_90 or later and the kernel's code was compiled for sm_90 or later (code JIT-
 * compiled from older PTX has no fhd_pdl_wait, and would read its inputs unsynchronised). */
static inline int fhd_pdl_allowed(const void *func) {
    int dev = 0, major = 0;
    cudaFuncAttributes fa;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, func) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major >= 9 && fa.binaryVersion >= 90;
}

/* Let kernel k take bytes of dynamic shared memory: above the default 48 KiB it has to opt in. */
static inline cudaError_t fhd_allow_dynamic_smem(const void *k, uint64_t bytes) {
    if (bytes <= 48u * 1024u)
        return cudaSuccess;
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* The cudaLaunchKernelEx configuration of a launch that is a programmatic dependent of the
 * kernel before it on the stream when pdl (see fhd_pdl_allowed), a plain launch otherwise. attr
 * is the attribute's storage and must live until the launch. */
static inline cudaLaunchConfig_t fhd_pdl_config(dim3 grid, dim3 block, size_t smem,
                                                cudaStream_t stream, int pdl,
                                                cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cfg;
}

/* Round-to-nearest float operations that the compiler never fuses into an FMA: they mirror the
 * CPU reference (compiled without FMA contraction) wherever a formula mixes * and +. */
#define FHD_FMUL(a, b) __fmul_rn((a), (b))
#define FHD_FADD(a, b) __fadd_rn((a), (b))
#define FHD_FSUB(a, b) __fsub_rn((a), (b))

/* Ceiling division for launch sizes. */
__host__ __device__ __forceinline__ uint64_t fhd_cdiv(uint64_t a, uint64_t b) {
    return (a + b - 1) / b;
}

#endif
