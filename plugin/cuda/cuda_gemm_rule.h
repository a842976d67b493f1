/* cuda_gemm_rule.h - autotune "off"'s pick among cuBLASLt's heuristic results (C++17, header
 * only), shared by the backend (cuda_gemm.cpp) and the GEMM sweep (bench/cuda/gemm_sweep) so
 * that the sweep's "library's pick" is the backend's: the first result, or for a small GEMM
 * (m n k <= 2^28) the first of the top eight without split-K (a split-K algorithm adds a
 * reduction kernel to the chain). */
#ifndef FHD_CUDA_GEMM_RULE_H
#define FHD_CUDA_GEMM_RULE_H

#include <cublasLt.h>
#include <stdint.h>

/* Index into res (n results) of the rule's pick; -1 when there are none. */
static inline int fhd__gemm_rule_index(uint64_t m, uint64_t n_, uint64_t k,
                                       const cublasLtMatmulHeuristicResult_t *res, int n) {
    if (n <= 0)
        return -1;
    if ((double)m * n_ * k <= (double)(1u << 28))
        for (int i = 0; i < n && i < 8; i++) {
            int32_t sk = 1;
            size_t wr = 0;
            if (res[i].state == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &sk, sizeof sk, &wr) ==
                    CUBLAS_STATUS_SUCCESS &&
                sk <= 1)
                return i;
        }
    return 0;
}

#endif
