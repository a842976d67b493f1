/* prune.c - the pruning schedule (prune.h, docs/design.md section 4). */
#include "prune.h"

#include <math.h>

int fhd__prune_at(const fhd__config *cfg, uint64_t t, double *sparsity) {
    if (!(cfg->prune_sparsity > 0.0) || t < cfg->prune_start || t > cfg->prune_end ||
        (t - cfg->prune_start) % cfg->prune_frequency != 0)
        return 0;
    const uint64_t span = cfg->prune_end - cfg->prune_start;
    const double r = span ? 1.0 - (double)(t - cfg->prune_start) / (double)span : 0.0;
    *sparsity = cfg->prune_sparsity * (1.0 - r * r * r);
    return 1;
}

uint64_t fhd__prune_count(double sparsity, uint64_t n) {
    /* Python's round(): to nearest, halves to even (independent of the FP rounding mode) */
    const double x = sparsity * (double)n, f = floor(x), d = x - f;
    double k = d > 0.5 ? f + 1.0 : (d < 0.5 ? f : (fmod(f, 2.0) == 0.0 ? f : f + 1.0));
    return k <= 0.0 ? 0 : (k >= (double)n ? n : (uint64_t)k);
}
