/* cuda_nccl.h - NCCL as the CUDA module uses it (cuda_nccl.cpp; built where nccl.h was found).
 *
 * libnccl.so.2 is dlopened only when a config asks for `distributed` (from $FHD_NCCL_LIBRARY,
 * the loader's search path, then the directory the build found it in), never linked. The unique
 * id travels over the host's MPI module (plugin/dist.h): rank 0 makes it, MPI broadcasts it, and
 * every rank joins on its own device. Every step is judged alike on every rank (an allgather of
 * each rank's outcome), so a local failure fails init on every rank with one message.
 */
#ifndef FHD_CUDA_NCCL_H
#define FHD_CUDA_NCCL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

struct fhd__comm;
typedef struct fhd__nccl fhd__nccl;

#define FHD_NCCL_MIN_VERSION 20900 /* 2.9: collectives captured into CUDA graphs */

/* Collective over the ranks of c: the library loaded, the communicator initialised on `device`
 * (the current device). FHD_OK, or a status (FHD_ERR_BACKEND_UNAVAILABLE: no usable NCCL;
 * FHD_ERR_DEVICE: NCCL failed) with msg, the same on every rank but for the local reason. */
int32_t fhd__nccl_open(const struct fhd__comm *c, int device, fhd__nccl **out, char *msg,
                       size_t cap);
/* Enqueue (or capture) buf (count floats) = the sum over the ranks, in place, on s. 0, or -1
 * with msg. The call runs in relaxed capture mode: NCCL may make calls the update's global
 * capture mode forbids (its first use of a connection). */
int fhd__nccl_allreduce_sum(fhd__nccl *n, float *buf, uint64_t count, cudaStream_t s, char *msg,
                            size_t cap);
/* 0 while the communicator is healthy; -1 with msg once NCCL reports an asynchronous error (a
 * peer's connection lost, say). Never waits. */
int fhd__nccl_check(fhd__nccl *n, char *msg, size_t cap);
/* Abort: every NCCL kernel of the communicator still waiting returns; the results are lost. */
void fhd__nccl_abort(fhd__nccl *n);
/* Free: destroy the communicator (or only the handle once aborted). NULL-safe. */
void fhd__nccl_close(fhd__nccl *n);
int fhd__nccl_version(const fhd__nccl *n); /* NCCL_VERSION_CODE of the loaded library */

#endif
