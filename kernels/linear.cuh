/* linear.cuh - the non-GEMM parts of fhd__linear_forward / fhd__linear_backward /
 * fhd__relu_backward, and the narrow head forward (host-includable declarations). The other
 * GEMMs go through cuBLASLt (plugin/cuda/cuda_gemm.cpp).
 * Fuses (plugin/cpu/cpu_ops.h):
 *   fhd__cuda_bias_act              the bias (+ ReLU) of fhd__linear_forward, where cuBLASLt has
 *                                   no epilogue for the GEMM
 *   fhd__cuda_relu_backward_bgrad   fhd__relu_backward of a torso layer + the partial db of
 *                                   fhd__linear_backward (+ the second half of a split dx)
 *   fhd__cuda_relu_backward_dw      the same for layer 0 + its dW of fhd__linear_backward
 *   fhd__cuda_narrow_linear         fhd__linear_forward of a head of few outputs, bias included
 */
#ifndef FHD_KERNELS_LINEAR_CUH
#define FHD_KERNELS_LINEAR_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

/* y (rows, out; row stride ld) += b (out), then ReLU when relu: the forward epilogue, used only
 * where cuBLASLt offers no bias epilogue for a GEMM. */
cudaError_t fhd__cuda_bias_act(float *y, const float *b, uint32_t rows, uint32_t out, uint32_t ld,
                               int relu, cudaStream_t stream);

/* Backward of a torso layer's ReLU with the partial bias gradient of that layer (launched as a
 * programmatic dependent of the dx GEMM before it: its blocks are resident when that ends):
 *   dz (B, H)                  = (dx + dx2) (B, H) * (h > 0)  (in place: dz may equal dx;
 *                                dx2, the dx GEMM's second K half, may be NULL)
 *   partial (chunks, H)[c][j]  = sum of dz[r][j] over the 64 rows r of chunk c
 * h is the ReLU output (B rows of ld H). The bias gradient is the sum of the partials over the
 * chunks, in chunk order; the optimiser's norm kernel does it (a bias segment), so this kernel
 * has no cross-block pass. partial: (fhd__cuda_relu_bgrad_chunks(B), H) floats. */
uint32_t fhd__cuda_relu_bgrad_chunks(uint32_t B);
cudaError_t fhd__cuda_relu_backward_bgrad(float *dz, const float *dx, const float *dx2,
                                          const float *h, float *partial, uint32_t B, uint32_t H,
                                          cudaStream_t stream);

/* The same for layer 0, with that layer's weight gradient instead of dz (fuse_dw0 in
 * cuda_plan.h): chunk c's share of dW (H, in) = dz^T x over its rows, x (B, in) the layer's
 * input, goes to dw for c = 0 and to dwpart + (c - 1) H in after it; the gradient is their sum
 * in chunk order (the optimiser's norm pass adds them, as the bias partials). Replaces the dW
 * GEMM, which on small networks was the last kernel before the optimiser: its launch and K loop
 * leave the critical path, and this kernel's own blocks do the multiply-adds after staging x
 * before their wait. Requires in <= FHD_DW0_MAX_IN and at most FHD_DW0_MAX_PARTS chunks (the
 * norm pass loads all of an element's parts at once); cudaErrorInvalidValue otherwise. dz is
 * not written. */
#define FHD_DW0_MAX_IN 64
#define FHD_DW0_MAX_PARTS 4
/* Its chunks (of 64 rows, or 128 above 128 rows: dW and bias partials alike). */
uint32_t fhd__cuda_relu_dw_chunks(uint32_t B);
cudaError_t fhd__cuda_relu_backward_dw(const float *dx, const float *dx2, const float *h,
                                       float *partial, uint32_t B, uint32_t H, const float *x,
                                       uint32_t in, float *dw, float *dwpart,
                                       cudaStream_t stream);

/* A narrow layer's forward, for the head (out <= FHD_NARROW_MAX_OUT): y (rows, out; row stride
 * ldy) = alpha (x W^T) + b, x (rows, in; row stride ldx), W (out, in) row-major, alpha a device
 * scalar. cuBLASLt's tiles are 32 or more outputs wide and its K loop is sequential, so a head of
 * a few outputs runs on a handful of blocks for microseconds; here each warp takes 4 rows, its
 * lanes split K (float4 loads when fhd__cuda_narrow_linear_vec says so) and one transposed
 * butterfly sums all the rows' outputs across the lanes. Every warp reads W from L1/L2, so it
 * pays off while x is small (FHD_NARROW_MAX_X floats: a few MB that L2 holds); a large batch's
 * head is left to cuBLASLt, which is faster there. FP32 (also under TF32 settings);
 * deterministic. */
#define FHD_NARROW_MAX_OUT 32
#define FHD_NARROW_MAX_X (1u << 22)
int fhd__cuda_narrow_linear_vec(const float *x, uint32_t ldx, const float *w, uint32_t in);
/* Outputs per chunk of the kernel: all of them, rounded up to a multiple of 8 (out <= 32). */
int fhd__cuda_narrow_chunk(uint32_t out);
cudaError_t fhd__cuda_narrow_linear(float *y, uint32_t ldy, const float *x, uint32_t ldx,
                                    const float *w, const float *b, const float *alpha,
                                    uint32_t rows, uint32_t in, uint32_t out, cudaStream_t stream);

cudaError_t fhd__cuda_linear_preload(void);

#endif
