/* cuda_fault.cpp - the CUDA module's errors: a failed runtime or cuBLASLt call as a status and
 * a message, and the latch for errors that leave the CUDA context unusable.
 *
 * A sticky error (an illegal address, a kernel fault, an uncorrectable ECC error; CUDA returns it
 * from every later call in the process) is latched in the learner: every later call but destroy
 * returns FHD_ERR_DEVICE with the first error's message, and destroy still frees what it can
 * (docs/design.md section 5, "Device faults").
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Errors after which the context is unusable: CUDA's "sticky" errors, and any error that a
 * clear of the last-error slot does not clear. */
static int is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
        return 1;
    default:
        return e != cudaSuccess && cudaPeekAtLastError() == e;
    }
}

/* b->err (just written) becomes the latched message when e is sticky. */
static void latch(fhd__backend *b, cudaError_t e) {
    if (b->fault != cudaSuccess || e == cudaSuccess || !is_sticky(e))
        return;
    b->fault = e;
    snprintf(b->fault_msg, sizeof b->fault_msg, "%s", b->err);
}

int32_t fhd__cuda_fail(fhd__backend *b, cudaError_t e, const char *file, int line,
                       const char *expr) {
    (void)cudaGetLastError(); /* clear a non-sticky error so later checks see their own */
    snprintf(b->err, sizeof b->err, "%s:%d: %s failed: %s (%s)", base_name(file), line, expr,
             cudaGetErrorString(e), cudaGetErrorName(e));
    latch(b, e);
    return e == cudaErrorMemoryAllocation ? FHD_ERR_OUT_OF_MEMORY : FHD_ERR_DEVICE;
}

int32_t fhd__cublas_fail(fhd__backend *b, cublasStatus_t s, const char *file, int line,
                         const char *expr) {
    snprintf(b->err, sizeof b->err, "%s:%d: %s failed: %s (%s)", base_name(file), line, expr,
             cublasLtGetStatusString(s), cublasLtGetStatusName(s));
    latch(b, cudaPeekAtLastError()); /* an execution failure may be a faulted context */
    return s == CUBLAS_STATUS_ALLOC_FAILED ? FHD_ERR_OUT_OF_MEMORY : FHD_ERR_DEVICE;
}

int32_t fhd__cuda_failf(fhd__backend *b, int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    return code;
}

int32_t fhd__cuda_alive(fhd__backend *b) {
    if (b->fault == cudaSuccess)
        return FHD_OK;
    snprintf(b->err, sizeof b->err,
             "the CUDA context is unusable after an earlier device fault (%s), so this learner "
             "accepts no more calls; destroy it (CUDA works again only in a new process). The "
             "fault: %.700s",
             cudaGetErrorName(b->fault), b->fault_msg);
    return FHD_ERR_DEVICE;
}
