/* linear.cuh - the non-GEMM parts of fhd__linear_forward / fhd__linear_backward /
 * fhd__relu_backward (host-includable declarations). The GEMMs themselves go through
 * cuBLASLt (plugin/cuda/cuda_gemm.cpp).
 */
#ifndef FHD_KERNELS_LINEAR_CUH
#define FHD_KERNELS_LINEAR_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

/* y (rows, out; row stride ld) += b (out), then ReLU when relu: the forward epilogue, used only
 * where cuBLASLt offers no bias epilogue for a GEMM. */
cudaError_t fhd__cuda_bias_act(float *y, const float *b, uint32_t rows, uint32_t out, uint32_t ld,
                               int relu, cudaStream_t stream);

/* Backward of a torso layer's ReLU with the partial bias gradient of that layer:
 *   dz (B, H)                  = dx (B, H) * (h > 0)  (in place: dz may equal dx)
 *   partial (chunks, H)[c][j]  = sum of dz[r][j] over the 64 rows r of chunk c
 * h is the ReLU output (B rows of ld H). The bias gradient is the sum of the partials over the
 * chunks, in chunk order; the optimiser's norm kernel does it (a bias segment), so this kernel
 * has no cross-block pass. partial: (fhd__cuda_relu_bgrad_chunks(B), H) floats. */
uint32_t fhd__cuda_relu_bgrad_chunks(uint32_t B);
cudaError_t fhd__cuda_relu_backward_bgrad(float *dz, const float *dx, const float *h,
                                          float *partial, uint32_t B, uint32_t H,
                                          cudaStream_t stream);

cudaError_t fhd__cuda_linear_preload(void);

#endif
