/* guard.cuh - the training guard on the device (config `guard`; the rule is common/guard.h's,
 * shared with the CPU backend; docs/design.md section 4), and divergence without a guard.
 *
 * No synchronisation and no node of its own: the optimiser's norm pass decides, by the thread
 * that finishes the norm, from the loss the priority update left in the record (pend_loss) and
 * the norm it just computed; the decision is fhd__clip_info.skip, which the Adam pass, the target
 * update, the spectral-norm vector copy and (prioritized replay) the priority commit read. The
 * record's counters then move as on the CPU: updates + 1 and the statistics where applied;
 * skipped + 1 and the skip_* fields where skipped. Without a guard the same rule runs with no
 * bounds: a non-finite update is skipped the same way, and the host reports it as diverged
 * (FHD_ERR_DIVERGED, docs/design.md section 4).
 */
#ifndef FHD_KERNELS_GUARD_CUH
#define FHD_KERNELS_GUARD_CUH

#include "guard.h"
#include "optim.cuh"

/* 1: skip this update. By one thread, after the norm (the loss is a kernel older). Without a
 * guard its bounds are 0 (none): only non-finite values skip. */
static __device__ __forceinline__ int32_t fhd_guard_skip(const fhd__opt_args &a, float norm) {
    return !fhd__guard_ok(a.st->pend_loss, norm, a.max_norm, a.guard_max_loss, a.guard_max_norm);
}

/* The record after the decision, by one thread once every block has read the counter: t =
 * updates + 1, the Adam step of the update. */
static __device__ __forceinline__ void fhd_guard_publish(const fhd__opt_args &a, int32_t skip,
                                                         float norm, uint64_t t) {
    fhd__dev_scalars *st = a.st;
    if (skip) {
        const uint64_t k = st->skipped + 1;
        st->skipped = k;
        st->skip_update = (t - 1) + k;
        st->skip_loss = st->pend_loss;
        st->skip_grad_norm = norm;
        return;
    }
    st->loss = st->pend_loss;
    st->td_abs_mean = st->pend_td_abs_mean;
    st->q_mean = st->pend_q_mean;
    st->beta = st->pend_beta;
    st->entropy = st->pend_entropy;
    st->q_delta = st->pend_q_delta;
    st->grad_norm = norm;
    st->updates = t;
    st->stats_update = t;
}

#endif
