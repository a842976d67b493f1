/* test_lifecycle.c - 200 cycles of dlopen, init, observe, train, metrics, destroy, dlclose in
 * one process.
 *
 * Checked: every cycle produces bit for bit the same learner (the library keeps no state
 * across loads); after 25 warm-up cycles the count of live allocations (interposed allocator,
 * alloc_shim.c) is back to its baseline after every cycle, and the resident set size
 * (/proc/self/statm) stays flat: within 2 MiB of the baseline at the end, and within 512 KiB
 * between cycle 100 and cycle 200 (a leak of one page per cycle would show as 400 KiB).
 * Under AddressSanitizer the allocation count and RSS are not meaningful (ASan owns malloc
 * and keeps freed memory in quarantine): the cycles still run and LeakSanitizer checks at exit.
 * usage: test_lifecycle LIBRARY [CYCLES] */
#define _GNU_SOURCE
#include <unistd.h>

#include "alloc_shim.h"
#include "fhd_test.h"
#include "fhd_proc.h"
#include "rel_common.h"

#define WARMUP 25

/* One cycle; returns the learner's fingerprint before destroy (0 on failure). */
static uint64_t cycle(const char *path, int i) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        CHECK(0, "cycle %d: dlopen: %s", i, dlerror());
        return 0;
    }
    fhd_get_api_base_fn entry = (fhd_get_api_base_fn)dlsym(h, FHD_ENTRY_SYMBOL);
    const fhd_api_v1 *api = entry ? (const fhd_api_v1 *)entry()->get_api(1, NULL) : NULL;
    uint64_t fp = 0;
    if (api) {
        fhd_learner *L = NULL;
        fhd_error err = FHD_ERROR_INIT;
        if (api->init(REL_CONFIG, strlen(REL_CONFIG), &L, &err) == FHD_OK) {
            int ok = 1;
            for (int s = 0; s < 20 && ok; s++)
                ok = rel_observe(api, L, s) == FHD_OK;
            ok = ok && api->train(L, 3, NULL) == FHD_OK;
            size_t need = 0;
            ok = ok && api->metrics(L, NULL, 0, &need) == FHD_OK;
            if (ok)
                fp = rel_fingerprint(api, L);
            else
                CHECK(0, "cycle %d: %s", i, api->last_error(L));
            api->destroy(L);
        } else {
            CHECK(0, "cycle %d: init: %s", i, err.message);
        }
    } else {
        CHECK(0, "cycle %d: no v1 table", i);
    }
    CHECK(dlclose(h) == 0, "cycle %d: dlclose: %s", i, dlerror());
    return fp;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_lifecycle LIBRARY [CYCLES]\n");
        return 2;
    }
    const int cycles = argc > 2 ? atoi(argv[2]) : 200;
    const int counting = alloc_shim_available();
    printf("%d cycles of dlopen/init/observe/train/metrics/destroy/dlclose (%s)\n", cycles,
           counting ? "allocation count and RSS checked" : "sanitizer build: LeakSanitizer checks");
    fflush(stdout);
    uint64_t first = 0;
    /* warm-up: the dynamic loader's own bookkeeping grows over the first ~16 loads of the same
     * libraries and then stays (measured: +1 allocation per load up to 11), not a leak */
    for (int i = 0; i < WARMUP; i++) {
        uint64_t fp = cycle(argv[1], i);
        if (i == 0)
            first = fp;
        CHECK(fp != 0 && fp == first, "warm-up cycle %d gives the first cycle's learner", i);
    }
    const int64_t live0 = alloc_shim_live();
    const long rss0 = fhd_test_rss_kib();
    long rss_mid = 0, rss_max = rss0;
    int same = 0, live_ok = 0;
    for (int i = 0; i < cycles; i++) {
        uint64_t fp = cycle(argv[1], i);
        same += fp == first;
        const int64_t live = alloc_shim_live();
        live_ok += live == live0;
        if (getenv("FHD_LIFECYCLE_TRACE"))
            printf("cycle %d: live %lld rss %ld\n", i, (long long)(live - live0),
                   fhd_test_rss_kib());
        if (counting && live != live0 && live_ok + 1 == i + 1)
            printf("cycle %d: %lld live allocations more than after the warm-up\n", i,
                   (long long)(live - live0));
        long r = fhd_test_rss_kib();
        rss_max = r > rss_max ? r : rss_max;
        if (i == cycles / 2 - 1)
            rss_mid = r;
    }
    const long rss1 = fhd_test_rss_kib();
    CHECK(same == cycles, "%d of %d cycles gave the first cycle's learner bit for bit", same,
          cycles);
    printf("identical learners: %d of %d cycles\n", same, cycles);
    if (counting) {
        CHECK(live_ok == cycles,
              "live allocations back to the baseline after %d of %d cycles "
              "(now %lld more)",
              live_ok, cycles, (long long)(alloc_shim_live() - live0));
        printf("live allocations after every cycle: baseline %lld, end %lld (%llu allocations "
               "in all)\n",
               (long long)live0, (long long)alloc_shim_live(),
               (unsigned long long)alloc_shim_total());
        printf("RSS: %ld KiB after the warm-up, %ld KiB at cycle %d, %ld KiB at the end, "
               "%ld KiB at most\n",
               rss0, rss_mid, cycles / 2, rss1, rss_max);
        CHECK(rss1 - rss0 <= 2048, "RSS grew by %ld KiB over %d cycles", rss1 - rss0, cycles);
        CHECK(rss1 - rss_mid <= 512, "RSS grew by %ld KiB over the last %d cycles", rss1 - rss_mid,
              cycles - cycles / 2);
    } else {
        printf("RSS (not checked under a sanitizer): %ld KiB -> %ld KiB\n", rss0, rss1);
    }
    return fhd_test_finish();
}
