/* cuda_autotune.h - what the autotune's two files share (cuda_autotune.cpp: the candidates and
 * their timing; cuda_autotune_cache.cpp: the cache file, begin and end): the state of one
 * tuning at create (b->tune), its limits, the clock and the cache lines' checksum. */
#ifndef FHD_CUDA_AUTOTUNE_H
#define FHD_CUDA_AUTOTUNE_H

#include <stdint.h>
#include <time.h>

#include <map>
#include <string>
#include <vector>

#include "cuda_internal.h"

/* launches per timed graph, timed replays (the best kept), the budgets of fast and full, and
 * the largest m n k whose split-K candidates fast drops beside the critical path */
#define TUNE_REPS 16
#define TUNE_ROUNDS 3
#define TUNE_FAST_BUDGET_MS 2000.0
#define TUNE_FULL_BUDGET_MS 30000.0
#define TUNE_SPLITK_BESIDE_MAX_MNK (1ull << 26)

/* One tuning at create (b->tune): its clock and deadline, the cache's lines, what it did. */
struct fhd__autotune {
    double t0_ms, deadline_ms;
    std::string file, key_base, why_ignored;
    std::map<std::string, std::string> lines; /* key -> the whole line, as read or new */
    std::vector<std::string> fresh;           /* keys picked by timing in this create */
    int misses, hits, over_budget, unreadable;
    cudaEvent_t e0, e1;
};

/* Add the line of key with value to the tuning's lines, checksummed, to be written at its end. */
void fhd__autotune_line(fhd__autotune *t, const std::string &key, const std::string &value);
/* Outside a tuning (the measured branch choice, cuda_branch.cpp): put the line of key with value
 * into the plan's cache file now (read again, the line set, rewritten); a failure to write is
 * reported in the plan's cache field, as at create. */
void fhd__autotune_cache_store(fhd__backend *b, const std::string &key, const std::string &value);

/* monotonic milliseconds */
static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* FNV-1a 64 of s: the cache lines' checksum */
static inline uint64_t fnv1a(const std::string &s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

#endif
