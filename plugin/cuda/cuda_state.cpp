/* cuda_state.cpp - read / write of state kinds (checkpoints, tests), scalars and statistics.
 *
 * Reads and writes are synchronous (outside the training loop): they are ordered after every
 * update queued on the main stream and wait for their copy. get_scalars and latest_stats never
 * wait: updates / replay position / size are host mirrors, and the max priority and statistics
 * come from the newest completed snapshot (exact once the queued work is done, e.g. after any
 * read).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ext.h"
#include "cuda_internal.h"
#include "sumtree.h"

static int32_t state_ptr(fhd__backend *b, int kind, uint64_t offset, uint64_t count, int writing,
                         void **p) {
    uint64_t n;
    void *base;
    const uint64_t N = b->N;
    switch (kind) {
    case FHD_STATE_PARAMS: base = b->params; n = 2 * b->P; break;
    case FHD_STATE_GRAD: base = b->grad; n = b->P; break;
    case FHD_STATE_ADAM_M: base = b->adam_m; n = b->P; break;
    case FHD_STATE_ADAM_V: base = b->adam_v; n = b->P; break;
    case FHD_STATE_SN: base = b->sn; n = 2 * b->lo.sn_size; break;
    case FHD_STATE_MASK:
        if (!b->mask)
            return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND, "no pruning masks (prune_sparsity is 0)");
        base = b->mask;
        n = b->P;
        break;
    case FHD_STATE_REPLAY_OBS: base = b->r_obs; n = N * b->lo.S; break;
    case FHD_STATE_REPLAY_NEXT_OBS: base = b->r_next; n = N * b->lo.S; break;
    case FHD_STATE_REPLAY_ACTIONS: base = b->r_act; n = N * b->lo.D; break;
    case FHD_STATE_REPLAY_RETURNS: base = b->r_ret; n = N; break;
    case FHD_STATE_REPLAY_DISC: base = b->r_disc; n = N; break;
    case FHD_STATE_REPLAY_PRIORITY:
        if (!b->prioritized)
            return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND, "the replay is uniform: no priorities");
        base = b->nodes + b->leaves;
        n = N;
        break;
    case FHD_STATE_LAST_INDICES: base = b->idx; n = b->B; break;
    case FHD_STATE_LAST_WEIGHTS: base = b->w_out; n = b->B; break;
    default: return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND, "unknown state kind %d", kind);
    }
    if (writing && (kind == FHD_STATE_LAST_INDICES || kind == FHD_STATE_LAST_WEIGHTS))
        return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT, "state kind is read-only");
    if (offset > n || count > n - offset)
        return fhd__cuda_failf(b, FHD_ERR_SIZE_MISMATCH, "state range out of bounds");
    *p = (char *)base + offset * fhd__state_elem_size(kind);
    return FHD_OK;
}

static int32_t read_ext(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void *dst) {
    uint64_t *o = (uint64_t *)dst;
    switch (kind) {
    case FHD_CUDA_STATE_SYNC_COUNT:
        if (count < 1)
            break;
        o[0] = b->sync_count;
        return FHD_OK;
    case FHD_CUDA_STATE_GRAPH:
        if (count < 1 || offset >= FHD_CUDA_GRAPHS)
            break;
        memcpy(dst, &b->graph[offset], sizeof(b->graph[offset]));
        return FHD_OK;
    case FHD_CUDA_STATE_DEVPTRS: {
        if (count < FHD_CUDA_DEVPTR_COUNT)
            break;
        const uint64_t P = b->P;
        const uint64_t v[FHD_CUDA_DEVPTR_COUNT] = {
            (uint64_t)(uintptr_t)b->params, 4 * (b->T + P),  (uint64_t)(uintptr_t)b->grad,   4 * P,
            (uint64_t)(uintptr_t)b->adam_m, 4 * P,  (uint64_t)(uintptr_t)b->adam_v, 4 * P,
            (uint64_t)(uintptr_t)b->sn,     8 * b->lo.sn_size};
        memcpy(o, v, sizeof v);
        return FHD_OK;
    }
    case FHD_CUDA_STATE_TREE:
        if (!b->prioritized || count != 2 * (uint64_t)b->leaves)
            break;
        FHD_CK(b, cudaMemcpyAsync(dst, b->nodes, sizeof(uint64_t) * count, cudaMemcpyDeviceToHost,
                                  b->s_main));
        return fhd__cuda_sync(b, b->s_main);
    case FHD_CUDA_STATE_INFO: {
        if (count == 0 || count > FHD_CUDA_INFO_COUNT) /* the first `count` facts */
            break;
        uint64_t all[FHD_CUDA_INFO_COUNT];
        uint64_t fb = 0;
        for (uint32_t l = 0; l <= b->lo.L; l++)
            fb += (uint64_t)b->fwd_on[l].fallback + (uint64_t)b->fwd_tg[l].fallback;
        fhd__dev_scalars s;
        FHD_CK(b, cudaMemcpyAsync(&s, b->st, sizeof s, cudaMemcpyDeviceToHost, b->s_main));
        FHD_TRY(fhd__cuda_sync(b, b->s_main));
        all[FHD_CUDA_INFO_GEMM_FALLBACKS] = fb;
        all[FHD_CUDA_INFO_UPDATES_DEVICE] = s.updates;
        all[FHD_CUDA_INFO_ROWS_ONLINE] = b->rows_on;
        all[FHD_CUDA_INFO_PAIRED_FWD0] = (uint64_t)b->plan.pair_fwd0;
        all[FHD_CUDA_INFO_DZ_TRANSPOSED] = 0;
        uint64_t tuned = 0; /* the plan's GEMMs whose measured pick is not the rule's */
        for (int i = 0; i < b->plan.ngemm; i++)
            tuned += (uint64_t)b->plan.gemm[i].not_rule;
        all[FHD_CUDA_INFO_GEMM_TUNED] = tuned;
        all[FHD_CUDA_INFO_FUSED_DW0] = (uint64_t)b->plan.fuse_dw0;
        all[FHD_CUDA_INFO_OPT_FORM] = b->plan.opt_grid ? 1u + (b->a_opt.one_pass != 0) : 0u;
        all[FHD_CUDA_INFO_OPT_PER] = b->a_opt.per;
        all[FHD_CUDA_INFO_FORK_SN1] = (uint64_t)b->plan.fork_sn1;
        all[FHD_CUDA_INFO_HEAD_IN_LOSS] = (uint64_t)b->plan.head_in_loss;
        all[FHD_CUDA_INFO_DIST_WAITS] = b->dist_waits;
        for (uint32_t l = 0; l < b->lo.L; l++)
            all[FHD_CUDA_INFO_DZ_TRANSPOSED] |= (uint64_t)(b->plan.dz_t[l] != 0) << l;
        memcpy(o, all, sizeof(uint64_t) * count);
        return FHD_OK;
    }
    default: break;
    }
    (void)offset;
    return fhd__cuda_failf(b, FHD_ERR_NOT_FOUND, "unknown state kind %d or wrong count %llu", kind,
                           (unsigned long long)count);
}

/* FHD_STATE_PARAMS is [online | target], 2P floats, to callers; on the device the target starts
 * at T >= P. Copy a range of it in at most two pieces. */
static int32_t params_copy(fhd__backend *b, uint64_t offset, uint64_t count, float *host,
                           int to_device) {
    const uint64_t P = b->P;
    while (count) {
        const uint64_t dev = offset < P ? offset : b->T + (offset - P);
        const uint64_t n = offset < P ? (P - offset < count ? P - offset : count) : count;
        if (to_device)
            FHD_CK(b, cudaMemcpyAsync(b->params + dev, host, n * sizeof(float),
                                      cudaMemcpyHostToDevice, b->s_main));
        else
            FHD_CK(b, cudaMemcpyAsync(host, b->params + dev, n * sizeof(float),
                                      cudaMemcpyDeviceToHost, b->s_main));
        offset += n;
        host += n;
        count -= n;
    }
    return fhd__cuda_sync(b, b->s_main);
}

int32_t fhd__cuda_read(fhd__backend *b, int kind, uint64_t offset, uint64_t count, void *dst) {
    FHD_CK(b, cudaSetDevice(b->device));
    if (kind >= FHD_CUDA_STATE_SYNC_COUNT)
        return read_ext(b, kind, offset, count, dst);
    void *p;
    FHD_TRY(state_ptr(b, kind, offset, count, 0, &p));
    if (count && kind == FHD_STATE_PARAMS) {
        FHD_TRY(params_copy(b, offset, count, (float *)dst, 0));
    } else if (count) {
        FHD_CK(b, cudaMemcpyAsync(dst, p, count * fhd__state_elem_size(kind),
                                  cudaMemcpyDeviceToHost, b->s_main));
        FHD_TRY(fhd__cuda_sync(b, b->s_main));
    }
    return fhd__cuda_poll_snapshots(b); /* the queue is drained: the snapshot is current */
}

/* Priorities: the tree is rebuilt on the host from all leaves (as fhd__sumtree_rebuild), then
 * uploaded whole. */
static int32_t write_priorities(fhd__backend *b, uint64_t offset, uint64_t count,
                                const uint64_t *src) {
    fhd__sumtree t;
    if (fhd__sumtree_init(&t, b->N) != 0)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY,
                               "write priorities: out of host memory for %u leaves", b->N);
    int32_t rc = FHD_OK;
    cudaError_t e = cudaMemcpyAsync(t.nodes + t.leaves, b->nodes + b->leaves,
                                    sizeof(uint64_t) * b->N, cudaMemcpyDeviceToHost, b->s_main);
    if (e == cudaSuccess) {
        b->sync_count++;
        e = cudaStreamSynchronize(b->s_main);
    }
    if (e == cudaSuccess) {
        memcpy(t.nodes + t.leaves + offset, src, sizeof(uint64_t) * count);
        fhd__sumtree_rebuild(&t);
        e = cudaMemcpyAsync(b->nodes, t.nodes, sizeof(uint64_t) * 2 * t.leaves,
                            cudaMemcpyHostToDevice, b->s_main);
    }
    if (e == cudaSuccess) {
        b->sync_count++;
        e = cudaStreamSynchronize(b->s_main);
    }
    if (e != cudaSuccess)
        rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "priority write");
    fhd__sumtree_free(&t);
    return rc;
}

/* FHD_CUDA_STATE_OPT_FORM: the update captured again with the optimiser's form forced (tests
 * only; before the first update, as the capture's warm-up zeroes the gradient). */
static int32_t write_opt_form(fhd__backend *b, uint64_t offset, uint64_t count,
                              const uint64_t *src) {
    if (!src)
        return fhd__cuda_failf(b, FHD_ERR_NULL_POINTER, "optimiser form: no value (NULL)");
    if (offset != 0 || count != 1)
        return fhd__cuda_failf(b, FHD_ERR_SIZE_MISMATCH,
                               "optimiser form: one value at offset 0 (got %llu at %llu)",
                               (unsigned long long)count, (unsigned long long)offset);
    const uint64_t v = src[0];
    if (v != 0 && v != 2 && v != 4 && v != 8)
        return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT,
                               "optimiser form %llu: 0 (as planned) or 2, 4, 8 (two kernels with "
                               "that many weights a thread)",
                               (unsigned long long)v);
    if (b->updates != 0)
        return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT,
                               "optimiser form: only before the first update (%llu done)",
                               (unsigned long long)b->updates);
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    const uint32_t old = b->plan.opt_two;
    b->plan.opt_two = (uint32_t)v;
    fhd__cuda_drop_graphs(b);
    int32_t rc = fhd__cuda_capture(b);
    if (rc != FHD_OK) { /* the previous form, so that the learner still trains */
        char err[sizeof b->err];
        memcpy(err, b->err, sizeof err);
        b->plan.opt_two = old;
        fhd__cuda_drop_graphs(b);
        if (fhd__cuda_capture(b) == FHD_OK) {
            memcpy(b->err, err, sizeof err);
        } else { /* no graph left: train() fails with both messages until the learner goes */
            char again[sizeof b->err];
            memcpy(again, b->err, sizeof again);
            snprintf(b->err, sizeof b->err,
                     "%.500s; capturing the previous form failed too: %.480s", err, again);
        }
    }
    return rc;
}

int32_t fhd__cuda_write(fhd__backend *b, int kind, uint64_t offset, uint64_t count,
                        const void *src) {
    FHD_CK(b, cudaSetDevice(b->device));
    if (kind == FHD_CUDA_STATE_OPT_FORM)
        return write_opt_form(b, offset, count, (const uint64_t *)src);
    void *p;
    FHD_TRY(state_ptr(b, kind, offset, count, 1, &p));
    if (!count)
        return FHD_OK;
    if (kind == FHD_STATE_REPLAY_PRIORITY)
        return write_priorities(b, offset, count, (const uint64_t *)src);
    if (kind == FHD_STATE_PARAMS) {
        b->bf.stale = 1; /* bf16: the copies are made again before the next update */
        FHD_TRY(params_copy(b, offset, count, (float *)(uintptr_t)src, 1));
    } else {
        FHD_CK(b, cudaMemcpyAsync(p, src, count * fhd__state_elem_size(kind),
                                  cudaMemcpyHostToDevice, b->s_main));
        FHD_TRY(fhd__cuda_sync(b, b->s_main));
    }
    return fhd__cuda_prune_after_write(b, kind, offset); /* online weights stay 0 where pruned */
}

int32_t fhd__cuda_get_scalars(fhd__backend *b, fhd__backend_scalars *o) {
    FHD_TRY(fhd__cuda_poll_snapshots(b));
    /* b->updates counts the updates run; the guard's skips (exact after finish) are not updates */
    o->skipped = b->snap_last.skipped;
    o->updates = b->updates - o->skipped;
    o->replay_pos = b->pos;
    o->replay_size = b->size;
    o->max_priority_q = b->max_q;
    return FHD_OK;
}

int32_t fhd__cuda_set_scalars(fhd__backend *b, const fhd__backend_scalars *in) {
    if (in->replay_pos >= b->N || in->replay_size > b->N || in->max_priority_q == 0)
        return fhd__cuda_failf(b, FHD_ERR_INVALID_ARGUMENT, "replay position/size out of range");
    FHD_CK(b, cudaSetDevice(b->device));
    FHD_TRY(fhd__cuda_sync(b, b->s_main)); /* no update in flight reads the record meanwhile */
    fhd__dev_scalars s;
    FHD_CK(b, cudaMemcpyAsync(&s, b->st, sizeof s, cudaMemcpyDeviceToHost, b->s_main));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    s.updates = in->updates;
    s.skipped = in->skipped;
    s.replay_size = in->replay_size;
    s.max_q = in->max_priority_q > FHD_PRIO_MAX_Q ? FHD_PRIO_MAX_Q : in->max_priority_q;
    FHD_CK(b, cudaMemcpyAsync(b->st, &s, sizeof s, cudaMemcpyHostToDevice, b->s_main));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    b->updates = in->updates + in->skipped;
    b->skip_reported = in->skipped;
    b->pos = in->replay_pos;
    b->size = in->replay_size;
    b->max_q = s.max_q;
    /* older snapshots describe the state before this write */
    for (int i = 0; i < FHD_CUDA_SNAPSHOTS; i++)
        b->snap_seq[i] = 0;
    b->snap_last.max_q = s.max_q;
    b->snap_last.skipped = s.skipped;
    b->snap_last_seq = b->snap_counter;
    return FHD_OK;
}

int32_t fhd__cuda_latest_stats(fhd__backend *b, fhd__update_stats *out) {
    FHD_TRY(fhd__cuda_poll_snapshots(b));
    out->update_index = b->snap_last.stats_update;
    out->loss = b->snap_last.loss;
    out->td_abs_mean = b->snap_last.td_abs_mean;
    out->q_mean = b->snap_last.q_mean;
    out->grad_norm = b->snap_last.grad_norm;
    out->beta = b->snap_last.beta;
    out->skipped = b->snap_last.skipped;
    out->skip_update = b->snap_last.skip_update;
    out->skip_loss = b->snap_last.skip_loss;
    out->skip_grad_norm = b->snap_last.skip_grad_norm;
    out->entropy = b->snap_last.entropy;
    out->q_delta = b->snap_last.q_delta;
    fhd__cuda_divmetrics_stats(b, out); /* detailed_metrics' norms, of the same update */
    return FHD_OK;
}

/* Synchronous check for tests: ring position, and for prioritized replay the whole node array
 * (every internal node the sum of its children, leaves past capacity zero, filled slots
 * non-zero, empty slots zero, no leaf above the running max). */
int32_t fhd__cuda_check_invariants(fhd__backend *b, char *msg, size_t cap) {
    if (b->pos >= b->N || b->size > b->N || (b->size < b->N && b->pos != b->size)) {
        snprintf(msg, cap, "ring: pos %llu size %llu capacity %u", (unsigned long long)b->pos,
                 (unsigned long long)b->size, b->N);
        return FHD_ERR_INTERNAL;
    }
    FHD_CK(b, cudaSetDevice(b->device));
    fhd__dev_scalars s;
    FHD_CK(b, cudaMemcpyAsync(&s, b->st, sizeof s, cudaMemcpyDeviceToHost, b->s_main));
    FHD_TRY(fhd__cuda_sync(b, b->s_main));
    if (s.replay_size != b->size || s.updates + s.skipped != b->updates) {
        snprintf(msg, cap, "device record: size %llu updates %llu; host %llu, %llu",
                 (unsigned long long)s.replay_size, (unsigned long long)s.updates,
                 (unsigned long long)b->size, (unsigned long long)b->updates);
        return FHD_ERR_INTERNAL;
    }
    if (!b->prioritized)
        return FHD_OK;
    fhd__sumtree t;
    if (fhd__sumtree_init(&t, b->N) != 0)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "check: out of host memory");
    int32_t rc = FHD_OK;
    cudaError_t e = cudaMemcpyAsync(t.nodes, b->nodes, sizeof(uint64_t) * 2 * t.leaves,
                                    cudaMemcpyDeviceToHost, b->s_main);
    if (e == cudaSuccess) {
        b->sync_count++;
        e = cudaStreamSynchronize(b->s_main);
    }
    if (e != cudaSuccess) {
        rc = fhd__cuda_fail(b, e, __FILE__, __LINE__, "tree read");
    } else if (fhd__sumtree_check(&t) != 0) {
        snprintf(msg, cap, "sum tree: an internal node differs from the sum of its children");
        rc = FHD_ERR_INTERNAL;
    } else {
        for (uint32_t i = 0; i < b->N; i++) {
            const uint64_t q = t.nodes[t.leaves + i];
            if ((i < b->size) != (q != 0) || q > s.max_q) {
                snprintf(msg, cap, "sum tree: slot %u holds %llu (size %llu, running max %llu)", i,
                         (unsigned long long)q, (unsigned long long)b->size,
                         (unsigned long long)s.max_q);
                rc = FHD_ERR_INTERNAL;
                break;
            }
        }
    }
    fhd__sumtree_free(&t);
    return rc;
}

int32_t fhd__cuda_describe(fhd__backend *b, char *buf, size_t cap) {
    fhd__cuda_poll_rate(b);
    const fhd__cuda_plan *p = &b->plan;
    const double rate = b->exec_ms > 0 ? (double)b->exec_updates * 1e3 / b->exec_ms : 0.0;
    int n = snprintf(buf, cap, "{\"updates_per_second\":%.6g,\"autotune\":{\"mode\":\"%s\","
                     "\"cache\":\"",
                     rate, p->autotune == FHD_AUTOTUNE_FULL   ? "full"
                           : p->autotune == FHD_AUTOTUNE_FAST ? "fast"
                                                              : "off");
    for (const char *c = p->cache; *c; c++) /* the plan wrote it: no quotes or backslashes */
        if ((unsigned char)*c >= 0x20 && *c != '"' && *c != '\\')
            n += snprintf((size_t)n < cap ? buf + n : NULL, (size_t)n < cap ? cap - n : 0, "%c",
                          *c);
    n += snprintf((size_t)n < cap ? buf + n : NULL, (size_t)n < cap ? cap - n : 0,
                  "\",\"ms\":%.1f},\"plan\":", p->autotune_ms);
    n += fhd__cuda_plan_json(p, (size_t)n < cap ? buf + n : NULL, (size_t)n < cap ? cap - n : 0);
    if (b->dist) /* ,"distributed":{...} */
        n += fhd__cuda_dist_describe(b, (size_t)n < cap ? buf + n : NULL,
                                     (size_t)n < cap ? cap - n : 0);
    n += snprintf((size_t)n < cap ? buf + n : NULL, (size_t)n < cap ? cap - n : 0, "}");
    return n;
}
