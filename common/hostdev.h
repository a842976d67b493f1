/* hostdev.h - FHD_HOSTDEV, the qualifier of the header-only functions that host code and CUDA
 * kernels share (philox.h, priority.h, divisor.h): __host__ __device__ under nvcc, static inline
 * in C. */
#ifndef FHD_HOSTDEV_H
#define FHD_HOSTDEV_H

#ifndef FHD_HOSTDEV
#ifdef __CUDACC__
#define FHD_HOSTDEV __host__ __device__ __forceinline__
#else
#define FHD_HOSTDEV static inline
#endif
#endif

#endif
