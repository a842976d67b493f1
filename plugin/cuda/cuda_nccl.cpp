/* cuda_nccl.cpp - NCCL loaded on demand and bootstrapped over the host's MPI module (see
 * cuda_nccl.h; docs/design.md section 10). */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "dist.h"
#include "foxhunt_dqn.h"
}

#include "cuda_nccl.h"

#ifndef FHD_NCCL_LIB_DIR
#define FHD_NCCL_LIB_DIR ""
#endif

struct fhd__nccl {
    void *lib;
    int version, aborted;
    ncclComm_t comm;
    decltype(&ncclGetVersion) get_version;
    decltype(&ncclGetUniqueId) get_unique_id;
    decltype(&ncclCommInitRank) init_rank;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclCommGetAsyncError) async_error;
    decltype(&ncclCommAbort) abort;
    decltype(&ncclCommDestroy) destroy;
    decltype(&ncclGetErrorString) error_string;
};

/* libnccl.so.2: $FHD_NCCL_LIBRARY, else the loader's search path, else the build's directory. */
static void *open_library(char *why, size_t cap) {
    const char *env = getenv("FHD_NCCL_LIBRARY");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (!h)
            snprintf(why, cap, "$FHD_NCCL_LIBRARY (%s) could not be loaded: %s", env, dlerror());
        return h;
    }
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h)
        return h;
    char first[512];
    snprintf(first, sizeof first, "%s", dlerror());
    if (FHD_NCCL_LIB_DIR[0]) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libnccl.so.2", FHD_NCCL_LIB_DIR);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h)
            return h;
    }
    snprintf(why, cap,
             "libnccl.so.2 could not be loaded (%s); install NCCL (pip install nvidia-nccl-cu13, "
             "or the distribution's libnccl2) or set $FHD_NCCL_LIBRARY",
             first);
    return NULL;
}

template <typename F> static bool bind(void *lib, const char *name, F *out) {
    *out = (F)dlsym(lib, name);
    return *out != nullptr;
}

/* The library and its entry points; 0 or -1 with why. */
static int load(fhd__nccl *n, char *why, size_t cap) {
    n->lib = open_library(why, cap);
    if (!n->lib)
        return -1;
    const char *missing = NULL;
    if (!bind(n->lib, "ncclGetVersion", &n->get_version))
        missing = "ncclGetVersion";
    else if (!bind(n->lib, "ncclGetUniqueId", &n->get_unique_id))
        missing = "ncclGetUniqueId";
    else if (!bind(n->lib, "ncclCommInitRank", &n->init_rank))
        missing = "ncclCommInitRank";
    else if (!bind(n->lib, "ncclAllReduce", &n->all_reduce))
        missing = "ncclAllReduce";
    else if (!bind(n->lib, "ncclCommGetAsyncError", &n->async_error))
        missing = "ncclCommGetAsyncError";
    else if (!bind(n->lib, "ncclCommAbort", &n->abort))
        missing = "ncclCommAbort";
    else if (!bind(n->lib, "ncclCommDestroy", &n->destroy))
        missing = "ncclCommDestroy";
    else if (!bind(n->lib, "ncclGetErrorString", &n->error_string))
        missing = "ncclGetErrorString";
    if (missing) {
        snprintf(why, cap, "the loaded libnccl.so.2 has no %s", missing);
        return -1;
    }
    if (n->get_version(&n->version) != ncclSuccess || n->version < FHD_NCCL_MIN_VERSION) {
        snprintf(why, cap,
                 "NCCL %d is older than 2.9 (NCCL_VERSION_CODE %d), the first that "
                 "CUDA graphs can capture",
                 n->version, FHD_NCCL_MIN_VERSION);
        return -1;
    }
    return 0;
}

/* Every rank's outcome of a step (0 ok), judged alike: 0, or -1 with msg naming the first rank
 * that failed (its own reason on that rank). why: this rank's reason. */
static int agree(const fhd__comm *c, int ok, uint64_t fact, const char *step, const char *why,
                 char *msg, size_t cap) {
    uint64_t mine[2] = {(uint64_t)(ok == 0), fact};
    uint64_t stack[2 * 64];
    uint64_t *all = c->world <= 64 ? stack : (uint64_t *)calloc(2 * (size_t)c->world, 8);
    char cm[400] = {0};
    int rc = all ? c->ops->allgather_u64(mine, 2, all, cm, sizeof cm) : -1;
    if (rc != 0) {
        snprintf(msg, cap, "%s: the ranks' exchange failed: %s", step, all ? cm : "out of memory");
        if (all != stack)
            free(all);
        return -1;
    }
    int out = 0;
    for (uint32_t r = 0; r < c->world && !out; r++) {
        if (!all[2 * r]) {
            if (r == c->rank)
                snprintf(msg, cap, "%s failed on this rank (%u): %s", step, r, why);
            else
                snprintf(msg, cap, "%s failed on rank %u (its own error says why)", step, r);
            out = -1;
        } else if (all[2 * r + 1] != all[1]) {
            snprintf(msg, cap,
                     "%s: rank %u has %llu where rank 0 has %llu; every rank needs the "
                     "same NCCL",
                     step, r, (unsigned long long)all[2 * r + 1], (unsigned long long)all[1]);
            out = -1;
        }
    }
    if (all != stack)
        free(all);
    return out;
}

int32_t fhd__nccl_open(const fhd__comm *c, int device, fhd__nccl **out, char *msg, size_t cap) {
    *out = NULL;
    fhd__nccl *n = (fhd__nccl *)calloc(1, sizeof *n);
    char why[600] = "out of host memory";
    int ok = n ? load(n, why, sizeof why) : -1;
    if (agree(c, ok, n && ok == 0 ? (uint64_t)n->version : 0, "loading NCCL (version)", why, msg,
              cap) != 0) {
        free(n); /* the library stays mapped (RTLD_NODELETE) */
        return FHD_ERR_BACKEND_UNAVAILABLE;
    }
    /* rank 0's unique id, broadcast by MPI with its outcome */
    struct {
        ncclUniqueId id;
        uint64_t ok;
    } pkt;
    memset(&pkt, 0, sizeof pkt);
    if (c->rank == 0)
        pkt.ok = n->get_unique_id(&pkt.id) == ncclSuccess;
    char cm[400] = {0};
    if (c->ops->bcast(&pkt, sizeof pkt, 0, cm, sizeof cm) != 0 || !pkt.ok) {
        snprintf(msg, cap, "NCCL's unique id: %s",
                 pkt.ok ? cm : "ncclGetUniqueId failed on rank 0");
        free(n);
        return FHD_ERR_DEVICE;
    }
    /* every rank joins on its device (blocking: a rank that never joins is mpirun's to end) */
    ncclResult_t r = ncclSuccess;
    if (cudaSetDevice(device) != cudaSuccess) {
        snprintf(why, sizeof why, "cudaSetDevice(%d) failed", device);
        r = ncclInvalidUsage;
        (void)cudaGetLastError();
    } else {
        r = n->init_rank(&n->comm, (int)c->world, pkt.id, (int)c->rank);
        if (r != ncclSuccess)
            snprintf(why, sizeof why, "ncclCommInitRank on device %d: %s", device,
                     n->error_string(r));
    }
    if (agree(c, r == ncclSuccess ? 0 : -1, 0, "NCCL's communicator", why, msg, cap) != 0) {
        if (r == ncclSuccess)
            n->abort(n->comm);
        free(n);
        return FHD_ERR_DEVICE;
    }
    *out = n;
    return FHD_OK;
}

int fhd__nccl_allreduce_sum(fhd__nccl *n, float *buf, uint64_t count, cudaStream_t s, char *msg,
                            size_t cap) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const ncclResult_t r = n->all_reduce(buf, buf, (size_t)count, ncclFloat, ncclSum, n->comm, s);
    cudaThreadExchangeStreamCaptureMode(&mode); /* back to the capture's own */
    if (r == ncclSuccess)
        return 0;
    snprintf(msg, cap, "ncclAllReduce of %llu floats: %s", (unsigned long long)count,
             n->error_string(r));
    return -1;
}

int fhd__nccl_check(fhd__nccl *n, char *msg, size_t cap) {
    ncclResult_t e = ncclSuccess;
    const ncclResult_t r = n->async_error(n->comm, &e);
    if (r == ncclSuccess && (e == ncclSuccess || e == ncclInProgress))
        return 0;
    snprintf(msg, cap, "NCCL reports %s", n->error_string(r != ncclSuccess ? r : e));
    return -1;
}

void fhd__nccl_abort(fhd__nccl *n) {
    if (n && !n->aborted) {
        n->abort(n->comm);
        n->aborted = 1;
    }
}

void fhd__nccl_close(fhd__nccl *n) {
    if (!n)
        return;
    if (!n->aborted)
        n->destroy(n->comm);
    free(n);
}

int fhd__nccl_version(const fhd__nccl *n) {
    return n->version;
}
