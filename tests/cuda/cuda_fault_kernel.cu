/* cuda_fault_kernel.cu - a kernel that writes to an illegal address, for test_cuda_fault.c: the
 * sticky error every later CUDA call of the process then returns. */
#include <cuda_runtime.h>

__global__ void fhd_test_fault_kernel(int *p) {
    p[threadIdx.x] = 1;
}

/* Launches it and waits: the error the wait returns (cudaErrorIllegalAddress expected). */
extern "C" int fhd_test_plant_fault(void) {
    fhd_test_fault_kernel<<<1, 32>>>(reinterpret_cast<int *>(0x8));
    return (int)cudaDeviceSynchronize();
}
