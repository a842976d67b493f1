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

/* Backward of a torso layer's ReLU fused with the bias gradient of that layer:
 *   dz (B, H) = dx (B, H) * (h > 0)  (in place: dz may equal dx)
 *   db (H)    = sum over rows of dz
 * h is the ReLU output (B rows of ld H). Column sums: per block over 64 rows (8 row groups of a
 * 32-column tile), then the last block of each tile sums the partials of all row chunks in a
 * fixed order (deterministic).
 * partial: (fhd__cuda_relu_bgrad_chunks(B), H) floats; done: (fhd__cuda_relu_bgrad_tiles(H))
 * counters. */
uint32_t fhd__cuda_relu_bgrad_chunks(uint32_t B);
uint32_t fhd__cuda_relu_bgrad_tiles(uint32_t H);
cudaError_t fhd__cuda_relu_backward_bgrad(float *dz, const float *dx, const float *h, float *db,
                                          float *partial, unsigned int *done, uint32_t B,
                                          uint32_t H, cudaStream_t stream);

cudaError_t fhd__cuda_linear_preload(void);

#endif
