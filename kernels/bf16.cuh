/* bf16.cuh - the non-GEMM parts of matmul_precision "bf16" on the CUDA backend (docs/design.md
 * sections 4 and 5, "GEMM precision") (host-includable declarations). The GEMMs themselves are
 * cuBLASLt's, with bf16 A and B and fp32 accumulation (plugin/cuda/cuda_gemm.cpp).
 * Fuses (plugin/cpu/cpu_ops.h):
 *   fhd__cuda_to_bf16             fhd__bf16_round_n: the weights once per update (and per act
 *                                 graph), layer 0's input, the head's output gradient
 *   fhd__cuda_head_pad_bf16       fhd__bf16_round_n of the head's weights (the same bits) into a
 *                                 copy with HOs rows, the padding zero, and its fp32 bias
 *   fhd__cuda_relu_backward_bf16  fhd__relu_backward of a torso layer + the rounding of dz
 *                                 and the partial db of fhd__linear_backward (+ the second
 *                                 half of a split dx)
 *   fhd__cuda_relu_mask_bf16      the same where the dx GEMM rounded dz itself (in place)
 *   fhd__cuda_bias_act_bf16       the bias + ReLU of a hidden fhd__linear_forward and its
 *                                 rounding, where cuBLASLt has no epilogue for the bf16 GEMM
 * Rounding is round to nearest even (__float2bfloat16_rn), the bits of common/bf16.h.
 */
#ifndef FHD_KERNELS_BF16_CUH
#define FHD_KERNELS_BF16_CUH

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

/* dst (n) = src (n) rounded to bf16. Multi-block (grid-stride, never one block); four values a
 * thread (one float4 load, one 8-byte store) where both pointers allow it. */
cudaError_t fhd__cuda_to_bf16(__nv_bfloat16 *dst, const float *src, uint64_t n,
                              cudaStream_t stream);

/* The head's GEMM operands padded to HOs rows (16-byte rows of bf16 dz, and an even head for
 * cuBLASLt: a head of 33 outputs has no sm90 kernel): for each of `nets` networks n, whose
 * params start at src + n * net_stride,
 *   w16 + n HOs H (HOs, H) = bf16(W_head (HO, H) at w_off), rows HO..HOs-1 zero
 *   b32 + n HOs (HOs)      = b_head (HO) at b_off, then zeros
 * so the padding outputs are 0 and the padding rows add nothing to dx. Multi-block. */
cudaError_t fhd__cuda_head_pad_bf16(__nv_bfloat16 *w16, float *b32, const float *src,
                                    uint64_t net_stride, uint64_t w_off, uint64_t b_off,
                                    uint32_t HO, uint32_t HOs, uint32_t H, uint32_t nets,
                                    cudaStream_t stream);

/* Backward of a torso layer's ReLU with bf16 GEMM operands, the bf16 form of
 * fhd__cuda_relu_backward_bgrad (kernels/linear.cuh; the same grid, chunks and partials):
 *   dz16 (B, H)                = bf16((dx + dx2) (B, H) * (h16 > 0))   (dx2 may be NULL)
 *   partial (chunks, H)[c][j]  = sum of dz16[r][j] (in fp32) over the 64 rows r of chunk c,
 *                                fhd__cuda_relu_bgrad_chunks(B) chunks
 * h16 is the layer's bf16 output (B rows of ld H). dz16 feeds the layer's dW and dx GEMMs; the
 * optimiser's norm pass sums the partials (the bias gradient, from the bf16 dz the GEMMs read). */
cudaError_t fhd__cuda_relu_backward_bf16(__nv_bfloat16 *dz16, const float *dx, const float *dx2,
                                         const __nv_bfloat16 *h16, float *partial, uint32_t B,
                                         uint32_t H, cudaStream_t stream);

/* The same in place, where the dx GEMM wrote bf16(dx) into dz16 (B, H) itself:
 *   dz16 = dz16 * (h16 > 0), partial as above (the same grid of chunks). */
cudaError_t fhd__cuda_relu_mask_bf16(__nv_bfloat16 *dz16, const __nv_bfloat16 *h16,
                                     float *partial, uint32_t B, uint32_t H,
                                     cudaStream_t stream);

/* y16 (rows, out; row stride ld) = bf16(relu(y (rows, out; row stride ld) + b16 (out))): a
 * hidden layer's epilogue after a bf16 GEMM that wrote its fp32 product into y, where cuBLASLt
 * offers no bias+ReLU epilogue with a bf16 output (one rounding, as the epilogue's). */
cudaError_t fhd__cuda_bias_act_bf16(__nv_bfloat16 *y16, const float *y, const __nv_bfloat16 *b16,
                                    uint32_t rows, uint32_t out, uint32_t ld, cudaStream_t stream);

cudaError_t fhd__cuda_bf16_preload(void);

#endif
