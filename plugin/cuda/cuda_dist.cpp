/* cuda_dist.cpp - data-parallel training on the CUDA backend (config `distributed`,
 * docs/design.md section 10): set_comm, the distributed update's nodes, the bounded waits.
 *
 * The update (cuda_update.cpp) gains, between the backward's join and the optimiser, the pack
 * kernel, NCCL's all-reduce of P + 1 + 4 W floats and the scale kernel (kernels/dist.cuh); the
 * optimiser then reads the whole gradient (fhd__cuda_dist_opt). Without `distributed` none of
 * this exists (b->dist NULL): the update's graph is the one-process graph, node for node.
 *
 * A rank that fails: under mpirun the job ends (Open MPI ends every rank when one exits
 * abnormally). Where a host call waits for the device (synchronisations; train's bounded queue
 * of FHD_CUDA_DIST_DEPTH updates), it polls, asks NCCL for an asynchronous error, and after
 * $FHD_NCCL_TIMEOUT seconds without completion (FHD_CUDA_DIST_TIMEOUT_S by default) aborts the
 * communicator: the call returns FHD_ERR_DEVICE and the learner is latched unusable (every op
 * but destroy fails, naming it); the host's recovery is a new job from the last checkpoint.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"
#include "cuda_nccl.h"
#include "metrics.cuh"

extern "C" {
#include "dist.h"
}

#define FHD_CUDA_DIST_EVERY 8 /* train records a queue mark every this many updates */
#define FHD_CUDA_DIST_SLOTS 8 /* marks kept: FHD_CUDA_DIST_DEPTH updates queued at most */
#define FHD_CUDA_DIST_DEPTH (FHD_CUDA_DIST_EVERY * FHD_CUDA_DIST_SLOTS)
#define FHD_CUDA_DIST_TIMEOUT_S 300.0

struct fhd__cuda_dist {
    fhd__nccl *nccl;
    const fhd__comm *host;
    fhd__dist_args a;  /* the pack and scale kernels' */
    fhd__opt_args opt; /* the optimiser's, for the finished gradient */
    cudaEvent_t mark[FHD_CUDA_DIST_SLOTS];
    int marked[FHD_CUDA_DIST_SLOTS];
    uint32_t next, since;
    double timeout_s;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A rank failed or stopped: abort the communicator (its waiting kernels return) and latch the
 * learner unusable with msg. */
static int32_t rank_failed(fhd__backend *b, const char *msg) {
    fhd__nccl_abort(b->dist->nccl);
    snprintf(b->err, sizeof b->err,
             "distributed: %s; NCCL's communicator was aborted and this learner is unusable "
             "(the job's recovery: a new job from the last checkpoint)",
             msg);
    if (b->fault == cudaSuccess) {
        b->fault = cudaErrorUnknown;
        snprintf(b->fault_msg, sizeof b->fault_msg, "%s", b->err);
    }
    return FHD_ERR_DEVICE;
}

int32_t fhd__cuda_dist_wait(fhd__backend *b, cudaStream_t s, cudaEvent_t e) {
    fhd__cuda_dist *d = b->dist;
    const double t0 = now_s();
    for (unsigned spins = 0;; spins++) {
        const cudaError_t q = e ? cudaEventQuery(e) : cudaStreamQuery(s);
        if (q == cudaSuccess)
            return FHD_OK;
        if (q != cudaErrorNotReady)
            return fhd__cuda_fail(b, q, __FILE__, __LINE__,
                                  e ? "cudaEventQuery (distributed wait)"
                                    : "cudaStreamQuery (distributed wait)");
        (void)cudaGetLastError(); /* not ready is no error: keep the last-error slot clean */
        char msg[400];
        if (fhd__nccl_check(d->nccl, msg, sizeof msg) != 0)
            return rank_failed(b, msg);
        if (now_s() - t0 > d->timeout_s) {
            snprintf(msg, sizeof msg,
                     "the device made no progress for %.0f s (a rank failed or stopped; "
                     "$FHD_NCCL_TIMEOUT sets the bound)",
                     d->timeout_s);
            return rank_failed(b, msg);
        }
        if (spins < 64) {
            sched_yield();
        } else {
            const struct timespec pause = {0, 50000}; /* 50 us */
            nanosleep(&pause, NULL);
        }
    }
}

int32_t fhd__cuda_dist_throttle(fhd__backend *b) {
    fhd__cuda_dist *d = b->dist;
    if (++d->since < FHD_CUDA_DIST_EVERY)
        return FHD_OK;
    d->since = 0;
    const uint32_t k = d->next;
    if (d->marked[k]) { /* the mark FHD_CUDA_DIST_DEPTH updates back */
        const cudaError_t q = cudaEventQuery(d->mark[k]);
        if (q == cudaErrorNotReady) {
            (void)cudaGetLastError();
            b->dist_waits++;
            FHD_TRY(fhd__cuda_dist_wait(b, NULL, d->mark[k]));
        } else if (q != cudaSuccess) {
            return fhd__cuda_fail(b, q, __FILE__, __LINE__, "cudaEventQuery (train's queue)");
        }
    }
    FHD_CK(b, cudaEventRecord(d->mark[k], b->s_main));
    d->marked[k] = 1;
    d->next = (k + 1) % FHD_CUDA_DIST_SLOTS;
    return FHD_OK;
}

int32_t fhd__cuda_dist_record(fhd__backend *b, cudaStream_t s) {
    fhd__cuda_dist *d = b->dist;
    FHD_CK(b, fhd__cuda_dist_pack(&b->a_opt, &d->a, s));
    char msg[400];
    const uint64_t n = b->P + 1 + (uint64_t)FHD_DIST_CK_WORDS * d->a.world;
    if (fhd__nccl_allreduce_sum(d->nccl, b->grad, n, s, msg, sizeof msg) != 0)
        return fhd__cuda_failf(b, FHD_ERR_DEVICE, "distributed: %s", msg);
    FHD_CK(b, fhd__cuda_dist_scale(&d->a, s));
    if (b->cfg.detailed_metrics) /* the head's row norms of the averaged gradient, as the CPU */
        FHD_CK(b, fhd__cuda_detail_rows(&b->a_detail, s));
    return FHD_OK;
}

const fhd__opt_args *fhd__cuda_dist_opt(fhd__backend *b) {
    fhd__cuda_dist *d = b->dist;
    /* a_opt's plan as it stands (the capture may have re-planned it), its blocks and chunks
     * unchanged: a bias block reads its 32 finished values where it summed their partials,
     * a weight block no further parts, and both sum the same squares in the same order */
    d->opt = b->a_opt;
    for (uint32_t s = 0; s < d->opt.nseg; s++) {
        d->opt.seg[s].partial = NULL;
        d->opt.seg[s].nparts = 0;
        d->opt.seg[s].extra = NULL;
        d->opt.seg[s].nextra = 0;
    }
    return &d->opt;
}

cudaError_t fhd__cuda_dist_kernels_preload(fhd__backend *b) {
    return b->dist ? fhd__cuda_dist_preload() : cudaSuccess;
}

/* The checksum of the parameters on the device (kernels/dist.cuh's terms), on the host. */
static int32_t host_checksum(fhd__backend *b, uint64_t *out) {
    const uint64_t n = b->T + b->P;
    float *h = (float *)malloc(sizeof(float) * n);
    if (!h)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY,
                               "distributed: out of host memory for the initial checksum");
    const cudaError_t e = cudaMemcpy(h, b->params, sizeof(float) * n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        free(h);
        return fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaMemcpy (initial checksum)");
    }
    uint64_t s = 0;
    for (uint64_t i = 0; i < 2 * b->P; i++) {
        uint32_t x;
        memcpy(&x, i < b->P ? h + i : h + b->T + (i - b->P), 4);
        s += fhd__dist_term(i, x);
    }
    free(h);
    *out = s;
    return FHD_OK;
}

/* Every rank's ok (1) or not, judged alike after a local step; the failing rank's message
 * stays its own. */
static int32_t all_ok(fhd__backend *b, const fhd__comm *c, int32_t rc, const char *step) {
    uint64_t mine = rc == FHD_OK, stack[64];
    uint64_t *all = c->world <= 64 ? stack : (uint64_t *)calloc(c->world, 8);
    char msg[400] = {0};
    if (!all || c->ops->allgather_u64(&mine, 1, all, msg, sizeof msg) != 0) {
        if (all && all != stack)
            free(all);
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "distributed: %s: the ranks' exchange: %s",
                               step, all ? msg : "out of memory");
    }
    uint32_t bad = c->world;
    for (uint32_t r = 0; r < c->world && bad == c->world; r++)
        if (!all[r])
            bad = r;
    if (all != stack)
        free(all);
    if (rc != FHD_OK)
        return rc;
    if (bad < c->world)
        return fhd__cuda_failf(b, FHD_ERR_DEVICE,
                               "distributed: %s failed on rank %u (its own "
                               "error says why)",
                               step, bad);
    return FHD_OK;
}

int32_t fhd__cuda_set_comm(fhd__backend *b, const fhd__comm *c) {
    if (b->dist)
        return fhd__cuda_failf(b, FHD_ERR_INTERNAL, "distributed: set_comm called twice");
    if (c->world > FHD_DIST_MAX_RANKS || (uint64_t)c->world * b->B > UINT32_MAX)
        return fhd__cuda_failf(b, FHD_ERR_CONFIG_RANGE,
                               "distributed: %u ranks; the cuda backend takes at most %u, and "
                               "world_size x batch_size below 2^32",
                               c->world, FHD_DIST_MAX_RANKS);
    FHD_CK(b, cudaSetDevice(b->device));
    fhd__cuda_dist *d = (fhd__cuda_dist *)calloc(1, sizeof *d);
    if (!d)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "distributed: out of host memory");
    char msg[900] = {0};
    int32_t rc = fhd__nccl_open(c, b->device, &d->nccl, msg, sizeof msg);
    if (rc != FHD_OK) {
        free(d);
        return fhd__cuda_failf(b, rc, "distributed: %s", msg);
    }
    d->host = c;
    const char *tv = getenv("FHD_NCCL_TIMEOUT");
    d->timeout_s = tv && atof(tv) > 0 ? atof(tv) : FHD_CUDA_DIST_TIMEOUT_S;
    b->dist = d; /* from here on, waits are bounded and destroy frees it */
    fhd__dist_record *rec = (fhd__dist_record *)(void *)((char *)b->st + sizeof(fhd__dev_record));
    fhd__dist_args *a = &d->a;
    a->buf = b->grad;
    a->P = b->P;
    a->T = b->T;
    a->params = b->params;
    a->rank = c->rank;
    a->world = c->world;
    a->inv = 1.0f / (float)c->world;
    a->interval = b->cfg.distributed.checksum_interval;
    a->ck_blocks = fhd__cuda_dist_ck_blocks(b->P);
    a->scale_blocks = fhd__cuda_dist_scale_blocks(b->P);
    a->st = b->st;
    a->rec = rec;
    a->ds = (fhd__dist_state *)(void *)(rec + 1);
    for (int k = 0; k < FHD_CUDA_DIST_SLOTS && rc == FHD_OK; k++)
        if (cudaEventCreateWithFlags(&d->mark[k], cudaEventDisableTiming) != cudaSuccess)
            rc = fhd__cuda_fail(b, cudaGetLastError(), __FILE__, __LINE__, "cudaEventCreate");
    /* this rank's share of each update's draw (sampling in the update and ahead) */
    fhd__sample_args *sa[3] = {&b->a_sample, &b->a_sample_desc, &b->a_sample_obs};
    for (int k = 0; k < 3; k++) {
        sa[k]->first = c->rank * b->B;
        sa[k]->draws = c->world * b->B;
    }
    /* update 0's comparison: the initial parameters, as the CPU's set_comm */
    uint64_t mine = 0, stack[64], *all = NULL;
    if (rc == FHD_OK)
        rc = host_checksum(b, &mine);
    rc = all_ok(b, c, rc, "the initial checksum");
    fhd__dist_record r0;
    memset(&r0, 0, sizeof r0);
    if (rc == FHD_OK) {
        all = c->world <= 64 ? stack : (uint64_t *)calloc(c->world, 8);
        if (!all || c->ops->allgather_u64(&mine, 1, all, msg, sizeof msg) != 0)
            rc = fhd__cuda_failf(b, FHD_ERR_INTERNAL, "distributed: the initial checksum: %s",
                                 all ? msg : "out of memory");
        for (uint32_t r = 0; rc == FHD_OK && r < c->world; r++)
            r0.ck_differ += all[r] != all[0];
        if (all && all != stack)
            free(all);
        r0.ck_value = mine;
        r0.ck_count = 1;
    }
    if (rc == FHD_OK) {
        /* the record and the pack kernel's state (zeros: its counter and sum start cleared) */
        char zero[sizeof(fhd__dist_record) + sizeof(fhd__dist_state)];
        memset(zero, 0, sizeof zero);
        memcpy(zero, &r0, sizeof r0);
        cudaError_t e = cudaMemcpy(rec, zero, sizeof zero, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "cudaMemcpy (distributed record)");
        b->snap_dist = r0;
        b->snap_bytes = sizeof(fhd__dev_record) + sizeof(fhd__dist_record);
    }
    /* one all-reduce of the update's size outside the capture: NCCL makes its connections */
    if (rc == FHD_OK) {
        const uint64_t n = b->P + 1 + (uint64_t)FHD_DIST_CK_WORDS * c->world;
        if (fhd__nccl_allreduce_sum(d->nccl, b->grad, n, b->s_main, msg, sizeof msg) != 0)
            rc = fhd__cuda_failf(b, FHD_ERR_DEVICE, "distributed: %s", msg);
        else
            rc = fhd__cuda_sync(b, b->s_main);
    }
    /* the update captured again, with the all-reduce */
    if (rc == FHD_OK) {
        fhd__cuda_drop_graphs(b);
        rc = fhd__cuda_capture(b);
    }
    return all_ok(b, c, rc, "the distributed update's capture");
}

int fhd__cuda_dist_describe(const fhd__backend *b, char *buf, size_t cap) {
    const fhd__cuda_dist *d = b->dist;
    const fhd__dist_record *r = &b->snap_dist;
    return snprintf(buf, cap,
                    ",\"distributed\":{\"rank\":%" PRIu32 ",\"world_size\":%" PRIu32
                    ",\"engine\":\"nccl\",\"nccl_version\":%d,\"checksum_update\":%" PRIu64
                    ",\"params_checksum\":\"%016" PRIx64 "\",\"ranks_differing\":%" PRIu32
                    ",\"ranks_agree\":%s,\"checksums_compared\":%" PRIu32 ",\"timeout_s\":%.0f}",
                    d->a.rank, d->a.world, fhd__nccl_version(d->nccl), r->ck_update, r->ck_value,
                    r->ck_differ, r->ck_differ ? "false" : "true", r->ck_count, d->timeout_s);
}

void fhd__cuda_dist_destroy(fhd__backend *b) {
    fhd__cuda_dist *d = b->dist;
    if (!d)
        return;
    /* the queued updates end (or the bound aborts the communicator) before it is freed */
    if (b->fault == cudaSuccess && b->s_main)
        (void)fhd__cuda_dist_wait(b, b->s_main, NULL);
    if (b->fault != cudaSuccess) /* a fault, or a rank that failed: no orderly destroy */
        fhd__nccl_abort(d->nccl);
    fhd__nccl_close(d->nccl);
    for (int k = 0; k < FHD_CUDA_DIST_SLOTS; k++)
        if (d->mark[k])
            cudaEventDestroy(d->mark[k]);
    free(d);
    b->dist = NULL;
}
