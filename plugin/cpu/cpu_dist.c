/* cpu_dist.c - data-parallel training on the CPU backend (config distributed, docs/design.md
 * section 10): the gradient's all-reduce, the cross-rank parameter checksum and their metrics.
 * Every function here is collective: every rank calls it at the same update. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "dist.h"

int32_t fhd__cpu_dist_reduce(fhd__backend *b, float *grad, float *loss) {
    const fhd__comm *c = b->comm;
    char msg[400] = {0};
    /* the loss travels as one more float of the sum; grad has room for it (cpu_create) */
    grad[b->P] = *loss;
    if (c->ops->allreduce_sum(grad, b->P + 1, msg, sizeof msg) != 0) {
        snprintf(b->err, sizeof b->err, "update %" PRIu64 ": the gradient's all-reduce: %s",
                 b->updates + 1, msg);
        return FHD_ERR_INTERNAL;
    }
    const float inv = 1.0f / (float)c->world;
    for (uint64_t i = 0; i <= b->P; i++)
        grad[i] *= inv;
    *loss = grad[b->P];
    return FHD_OK;
}

int32_t fhd__cpu_dist_checksum(fhd__backend *b) {
    const fhd__comm *c = b->comm;
    char msg[400] = {0};
    uint64_t mine = fhd__dist_params_checksum(b->params, 2 * b->P), all[64];
    uint64_t *v = c->world <= 64 ? all : malloc(sizeof(uint64_t) * c->world);
    int rc = v ? c->ops->allgather_u64(&mine, 1, v, msg, sizeof msg) : -1;
    if (rc == 0) {
        b->ck_update = b->updates;
        b->ck_value = mine;
        b->ck_differ = 0;
        for (uint32_t r = 0; r < c->world; r++)
            b->ck_differ += v[r] != v[0];
    }
    if (v != all)
        free(v);
    if (rc != 0) {
        snprintf(b->err, sizeof b->err, "update %" PRIu64 ": the parameter checksum: %s",
                 b->updates, v ? msg : "out of memory");
        return FHD_ERR_INTERNAL;
    }
    return FHD_OK;
}

int32_t fhd__cpu_set_comm(fhd__backend *b, const struct fhd__comm *comm) {
    b->comm = comm;
    return fhd__cpu_dist_checksum(b); /* update 0: the initial parameters */
}

int32_t fhd__cpu_describe(fhd__backend *b, char *buf, size_t cap) {
    const fhd__comm *c = b->comm;
    if (!c)
        return snprintf(buf, cap, "{}");
    return snprintf(buf, cap,
                    "{\"distributed\":{\"rank\":%" PRIu32 ",\"world_size\":%" PRIu32
                    ",\"checksum_update\":%" PRIu64 ",\"params_checksum\":\"%016" PRIx64
                    "\",\"ranks_differing\":%" PRIu32 ",\"ranks_agree\":%s}}",
                    c->rank, c->world, b->ck_update, b->ck_value, b->ck_differ,
                    b->ck_differ ? "false" : "true");
}
