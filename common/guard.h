/* guard.h - the training guard's rule (config `guard`, docs/design.md section 4), header-only,
 * C11 and CUDA: the one place both backends decide whether an update is applied.
 *
 * An update passes when its loss and its gradient norm (before clipping) are finite, the
 * gradient Adam would apply (the norm, or max_grad_norm of the clipping when it clips) squares
 * to a finite float (Adam's second moment), and each is at most its guard bound (a bound of 0 is
 * no bound). An update that fails is skipped: nothing of the learner changes but the skip
 * counters.
 */
#ifndef FHD_GUARD_H
#define FHD_GUARD_H

#include "hostdev.h"

/* The loss part alone. */
FHD_HOSTDEV int fhd__guard_loss_ok(float loss, float max_loss) {
    return loss == loss && loss - loss == 0.0f && (max_loss <= 0.0f || loss <= max_loss);
}

/* The whole rule. clip: the clipping's max_grad_norm (0: no clipping); max_loss, max_norm: the
 * guard's bounds (0: none). */
FHD_HOSTDEV int fhd__guard_ok(float loss, float norm, float clip, float max_loss, float max_norm) {
    const float applied = clip > 0.0f && norm > clip ? clip : norm;
    const float sq = applied * applied;
    return fhd__guard_loss_ok(loss, max_loss) && norm - norm == 0.0f && sq - sq == 0.0f &&
           (max_norm <= 0.0f || norm <= max_norm);
}

#endif
