/* test_sumtree.c - the fixed-point sum tree (sumtree.h / sumtree.c) against the naive model of
 * sumtree_model.h: randomized operations, ring wrap-around, extremes, rebuild and load.
 * test_sumtree_sampling.c checks the stratum arithmetic, sampling frequencies and batches. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "priority.h"
#include "sumtree.h"
#include "sumtree_model.h"
#include "test_util.h"

/* ---- 1. randomized operations against the model --------------------------------------------- */

typedef struct {
    long ops, sets, batches, batch_elems, finds, samples, draws, checks;
    long mismatches, check_failures;
} op_stats;

static void run_random_ops(uint32_t cap, long nops, uint64_t seed, op_stats *st) {
    fhd__sumtree t;
    naive m;
    test_rng r = {seed};
    uint32_t *bidx = (uint32_t *)malloc(512 * sizeof(uint32_t));
    uint64_t *bq = (uint64_t *)malloc(512 * sizeof(uint64_t));
    uint64_t *rr = (uint64_t *)malloc(512 * sizeof(uint64_t));
    uint32_t *sidx = (uint32_t *)malloc(512 * sizeof(uint32_t));
    double switch_p = cap < 400 ? 0.25 : 100.0 / cap; /* keeps the model's prefix rebuilds cheap */
    long check_every = cap < 5000 ? 20000 : 100000;
    int querying = 0;
    long k;
    memset(st, 0, sizeof *st);
    if (fhd__sumtree_init(&t, cap) != 0) {
        st->check_failures = 1;
        return;
    }
    naive_init(&m, cap);
    for (k = 0; k < nops; ++k) {
        if (rng_unit(&r) < switch_p) {
            querying = !querying;
        }
        if (!querying) {
            if (rng_below(&r, 10) < 7) { /* single set */
                uint32_t idx = (uint32_t)rng_below(&r, cap);
                uint64_t q = rand_q(&r);
                fhd__sumtree_set(&t, idx, q);
                naive_set(&m, idx, q);
                ++st->sets;
            } else { /* batch with duplicates: indices from a pool of about n/3 slots */
                uint32_t n = 1 + (uint32_t)rng_below(&r, rng_below(&r, 8) ? 32 : 300);
                uint32_t pool = 1 + n / 3, i;
                uint32_t base = (uint32_t)rng_below(&r, cap);
                for (i = 0; i < n; ++i) {
                    bidx[i] = (uint32_t)((base + rng_below(&r, pool) * 7919u) % cap);
                    bq[i] = rand_q(&r);
                }
                fhd__sumtree_set_batch(&t, n, bidx, bq);
                for (i = 0; i < n; ++i) {
                    naive_set(&m, bidx[i], bq[i]);
                }
                ++st->batches;
                st->batch_elems += n;
            }
            st->mismatches += fhd__sumtree_total(&t) != naive_total(&m);
        } else {
            uint64_t total = naive_total(&m);
            uint32_t c = (uint32_t)rng_below(&r, 10);
            st->mismatches += fhd__sumtree_total(&t) != total;
            if (total == 0) {
                uint32_t idx = (uint32_t)rng_below(&r, cap);
                st->mismatches += fhd__sumtree_get(&t, idx) != 0;
            } else if (c < 4) { /* random target, or 0, or total - 1 */
                uint64_t target = c == 0 ? 0 : c == 1 ? total - 1 : rng_below(&r, total);
                uint32_t got = fhd__sumtree_find(&t, target);
                st->mismatches += got != naive_find(&m, target) || m.leaf[got] == 0;
                ++st->finds;
            } else if (c < 7) { /* the edges of a random non-empty slot */
                uint32_t j = (uint32_t)rng_below(&r, cap), tries = 0;
                while (m.leaf[j] == 0 && tries++ < 64) {
                    j = (uint32_t)rng_below(&r, cap);
                }
                if (m.leaf[j] != 0) {
                    uint64_t p = naive_prefix(&m, j);
                    st->mismatches += fhd__sumtree_find(&t, p) != j;
                    st->mismatches += fhd__sumtree_find(&t, p + m.leaf[j] - 1) != j;
                    st->mismatches += fhd__sumtree_get(&t, j) != m.leaf[j];
                    st->finds += 2;
                }
            } else { /* stratified sample */
                uint32_t B = 1 + (uint32_t)rng_below(&r, rng_below(&r, 16) ? 64 : 512), j;
                for (j = 0; j < B; ++j) {
                    rr[j] = fhd__rng_u64(seed, FHD_RNG_STREAM_SAMPLE, (uint64_t)k, j);
                }
                fhd__sumtree_sample_stratified(&t, B, rr, sidx);
                for (j = 0; j < B; ++j) {
                    uint32_t want = naive_find(&m, ref_stratum_target(total, B, j, rr[j]));
                    st->mismatches += sidx[j] != want || m.leaf[sidx[j]] == 0;
                }
                ++st->samples;
                st->draws += B;
            }
        }
        if ((k + 1) % check_every == 0 || k + 1 == nops) {
            st->check_failures += fhd__sumtree_check(&t) != 0 || !tree_equals_model(&t, &m);
            ++st->checks;
        }
        ++st->ops;
    }
    st->mismatches += m.prefix_mismatch;
    fhd__sumtree_free(&t);
    naive_free(&m);
    free(bidx);
    free(bq);
    free(rr);
    free(sidx);
}

static void test_random_ops(void) {
    static const uint32_t caps[] = {1, 2, 3, 1000, 65539};
    static const long nops[] = {200000, 200000, 200000, 700000, 900000};
    long total_ops = 0, total_bad = 0;
    int i;
    for (i = 0; i < 5; ++i) {
        op_stats st;
        double t0 = now_seconds();
        run_random_ops(caps[i], nops[i], SEED + (uint64_t)i, &st);
        check(st.mismatches == 0 && st.check_failures == 0,
              "random ops vs naive model, capacity %u: %ld ops (%ld sets, %ld batches / %ld "
              "elements, %ld finds, %ld stratified samples / %ld draws), %ld full checks: %ld "
              "mismatches, %ld check failures (%.2f s)",
              caps[i], st.ops, st.sets, st.batches, st.batch_elems, st.finds, st.samples, st.draws,
              st.checks, st.mismatches, st.check_failures, now_seconds() - t0);
        total_ops += st.ops;
        total_bad += st.mismatches + st.check_failures;
    }
    check(total_ops >= 2000000 && total_bad == 0, "random ops total: %ld operations, %ld errors",
          total_ops, total_bad);
}

/* ---- 2. ring writer ------------------------------------------------------------------------- */

static void test_ring(void) {
    const uint32_t cap = 1000, B = 32, writes = 25000;
    fhd__sumtree t;
    naive m;
    test_rng r = {1234};
    uint32_t k, j, written = 0, bad = 0, beyond_head = 0, updates = 0;
    uint64_t rr[32];
    uint32_t idx[32];
    uint64_t nq[32];
    fhd__sumtree_init(&t, cap);
    naive_init(&m, cap);
    for (k = 0; k < writes; ++k) {
        uint32_t head = k % cap;
        uint64_t q = 1 + rng_below(&r, 1u << 30);
        fhd__sumtree_set(&t, head, q); /* new transitions go in with some priority */
        naive_set(&m, head, q);
        written = k + 1 < cap ? k + 1 : cap;
        if (k % 16 == 15) { /* a training step: sample, then update the sampled priorities */
            for (j = 0; j < B; ++j) {
                rr[j] = fhd__rng_u64(SEED, FHD_RNG_STREAM_SAMPLE, k, j);
            }
            fhd__sumtree_sample_stratified(&t, B, rr, idx);
            for (j = 0; j < B; ++j) {
                uint64_t want = naive_find(&m, ref_stratum_target(naive_total(&m), B, j, rr[j]));
                bad += idx[j] != want;
                beyond_head += idx[j] >= written;
                nq[j] = fhd__prio_from_td((float)rng_unit(&r) * 10.0f, 0.6f, 1e-6f);
            }
            fhd__sumtree_set_batch(&t, B, idx, nq);
            for (j = 0; j < B; ++j) {
                naive_set(&m, idx[j], nq[j]);
            }
            ++updates;
        }
        if (k % 997 == 0 || k + 1 == writes) {
            bad += !tree_equals_model(&t, &m) || fhd__sumtree_check(&t) != 0;
        }
    }
    check(bad == 0 && beyond_head == 0,
          "ring writer: %u writes into capacity %u (%u wraps), %u sample+update steps of %u: tree "
          "== model (%u bad), no slot sampled before it was written (%u)",
          writes, cap, writes / cap, updates, B, bad, beyond_head);
    fhd__sumtree_free(&t);
    naive_free(&m);
}

/* ---- 3. extremes ---------------------------------------------------------------------------- */

static void test_extremes(void) {
    fhd__sumtree t;
    naive m;
    u128 worst = (u128)FHD_SUMTREE_MAX_CAPACITY * FHD_PRIO_MAX_Q;
    uint32_t cap = 1u << 20, j, bad = 0;
    uint64_t expect;
    int rc;
    double t0 = now_seconds();

    /* No overflow: the largest possible root, 2^26 * (2^38 - 1) = 2^64 - 2^26, fits in uint64. */
    check(worst <= UINT64_MAX && (uint64_t)worst == UINT64_MAX - (UINT64_C(1) << 26) + 1,
          "largest root 2^26 * (2^38 - 1) = %llu <= 2^64 - 1 (margin %llu)",
          (unsigned long long)worst, (unsigned long long)(UINT64_MAX - (uint64_t)worst));

    /* 2^20 leaves at FHD_PRIO_MAX_Q, set one by one. */
    fhd__sumtree_init(&t, cap);
    for (j = 0; j < cap; ++j) {
        fhd__sumtree_set(&t, j, FHD_PRIO_MAX_Q);
    }
    expect = (uint64_t)cap * FHD_PRIO_MAX_Q;
    for (j = 0; j < 100000; ++j) {
        uint32_t s = 1 + (j * 2654435761u) % (cap - 1);
        bad += fhd__sumtree_find(&t, (uint64_t)s * FHD_PRIO_MAX_Q) != s;
        bad += fhd__sumtree_find(&t, (uint64_t)s * FHD_PRIO_MAX_Q - 1) != s - 1;
    }
    check(fhd__sumtree_total(&t) == expect && fhd__sumtree_check(&t) == 0 && bad == 0 &&
              fhd__sumtree_find(&t, 0) == 0 && fhd__sumtree_find(&t, expect - 1) == cap - 1,
          "2^20 leaves at MAX_Q: total %llu == 2^20 * (2^38 - 1), check ok, 200000 boundary finds "
          "exact (%u bad) (%.2f s)",
          (unsigned long long)fhd__sumtree_total(&t), bad, now_seconds() - t0);
    fhd__sumtree_free(&t);

    /* Capacity limits; a 2^26 tree is 1 GiB of zeroed nodes, only a few pages get touched. */
    rc = fhd__sumtree_init(&t, FHD_SUMTREE_MAX_CAPACITY + 1);
    check(rc == -1 && fhd__sumtree_init(&t, 0) == -1 && t.nodes == NULL,
          "init rejects capacity 0 and 2^26 + 1 (-1)");
    rc = fhd__sumtree_init(&t, FHD_SUMTREE_MAX_CAPACITY);
    if (rc == -2) {
        check(1, "init(2^26): out of memory here, skipped");
    } else {
        uint32_t last = FHD_SUMTREE_MAX_CAPACITY - 1;
        fhd__sumtree_set(&t, last, FHD_PRIO_MAX_Q);
        fhd__sumtree_set(&t, 0, 1);
        fhd__sumtree_set(&t, last / 2, FHD_PRIO_MAX_Q + 5);
        check(rc == 0 && t.leaves == FHD_SUMTREE_MAX_CAPACITY &&
                  fhd__sumtree_total(&t) == 2 * FHD_PRIO_MAX_Q + 1 &&
                  fhd__sumtree_find(&t, 0) == 0 && fhd__sumtree_find(&t, 1) == last / 2 &&
                  fhd__sumtree_find(&t, FHD_PRIO_MAX_Q + 1) == last &&
                  fhd__sumtree_find(&t, 2 * FHD_PRIO_MAX_Q) == last,
              "capacity 2^26: slots 0 = 1, 2^25 - 1 = MAX_Q + 5 (clamped), 2^26 - 1 = MAX_Q: "
              "total %llu, finds exact",
              (unsigned long long)fhd__sumtree_total(&t));
        fhd__sumtree_free(&t);
    }
    fhd__sumtree_free(&t); /* idempotent */
    fhd__sumtree_free(NULL);

    /* Priority-1 slots between MAX_Q slots, some empty slots. */
    {
        const uint32_t c = 1000;
        uint32_t hits_zero = 0, wrong = 0, i;
        uint64_t p;
        fhd__sumtree_init(&t, c);
        naive_init(&m, c);
        for (j = 0; j < c; ++j) {
            uint64_t q = (j == 0 || j == 500 || j == 999 || j % 97 == 3) ? 1
                         : (j == 501 || j == 250 || j % 89 == 5)         ? 0
                                                                         : FHD_PRIO_MAX_Q;
            fhd__sumtree_set(&t, j, q);
            naive_set(&m, j, q);
        }
        p = naive_prefix(&m, 500);
        for (j = 0; j < c; ++j) { /* both edges of every slot and one past each */
            uint64_t targets[4], total = naive_total(&m);
            targets[0] = naive_prefix(&m, j);
            targets[1] = targets[0] + m.leaf[j];
            targets[2] = targets[1] - 1;
            targets[3] = targets[0] - 1;
            for (i = 0; i < 4; ++i) {
                if (targets[i] < total) {
                    uint32_t got = fhd__sumtree_find(&t, targets[i]);
                    hits_zero += m.leaf[got] == 0;
                    wrong += got != naive_find(&m, targets[i]);
                }
            }
        }
        check(
            fhd__sumtree_find(&t, p) == 500 && fhd__sumtree_find(&t, p - 1) == 499 &&
                fhd__sumtree_find(&t, p + 1) == 502 && fhd__sumtree_find(&t, 0) == 0 &&
                fhd__sumtree_find(&t, 1) == 1 &&
                fhd__sumtree_find(&t, naive_total(&m) - 1) == 999 && hits_zero == 0 && wrong == 0,
            "priority-1 slots next to MAX_Q slots: find(prefix(500)) = 500, the empty slot 501 is "
            "skipped; all %u slot edges: %u wrong, %u empty slots returned",
            4 * c, wrong, hits_zero);
        fhd__sumtree_free(&t);
        naive_free(&m);
    }

    /* Exhaustive over every target of a small tree with many empty slots; B > total. */
    {
        const uint32_t c = 300;
        uint64_t total, target;
        uint32_t wrong = 0, zero = 0, i, Bs = 1000, count_bad = 0;
        uint32_t *idx = (uint32_t *)malloc(Bs * sizeof(uint32_t));
        uint64_t *rr = (uint64_t *)malloc(Bs * sizeof(uint64_t));
        uint32_t *cnt = (uint32_t *)calloc(c, sizeof(uint32_t));
        test_rng r = {55};
        fhd__sumtree_init(&t, c);
        naive_init(&m, c);
        for (j = 0; j < c; ++j) {
            uint64_t q = rng_below(&r, 2) ? 0 : 1 + rng_below(&r, 40);
            fhd__sumtree_set(&t, j, q);
            naive_set(&m, j, q);
        }
        total = naive_total(&m);
        for (target = 0; target < total; ++target) {
            uint32_t got = fhd__sumtree_find(&t, target);
            wrong += got != naive_find(&m, target);
            zero += m.leaf[got] == 0;
        }
        /* A tiny tree: total 37 < B = 1000, every stratum width is 0 or 1. */
        fhd__sumtree_clear(&t);
        fhd__sumtree_set(&t, 7, 30);
        fhd__sumtree_set(&t, 100, 1);
        fhd__sumtree_set(&t, 299, 6);
        for (i = 0; i < Bs; ++i) {
            rr[i] = rng_next(&r);
        }
        fhd__sumtree_sample_stratified(&t, Bs, rr, idx);
        for (i = 0; i < Bs; ++i) {
            zero += fhd__sumtree_get(&t, idx[i]) == 0;
            ++cnt[idx[i]];
        }
        /* Each unit of priority is the target of floor or ceil(1000 / 37) strata. */
        count_bad += cnt[7] < 30 * 27 || cnt[7] > 30 * 28 || cnt[100] < 27 || cnt[100] > 28 ||
                     cnt[299] < 6 * 27 || cnt[299] > 6 * 28 || cnt[7] + cnt[100] + cnt[299] != Bs;
        check(wrong == 0 && zero == 0 && count_bad == 0,
              "all %llu targets of a 300-slot tree, half empty: %u wrong, %u empty slots returned; "
              "B = 1000 > total 37: counts %u / %u / %u for priorities 30 / 1 / 6",
              (unsigned long long)total, wrong, zero, cnt[7], cnt[100], cnt[299]);
        fhd__sumtree_free(&t);
        naive_free(&m);
        free(idx);
        free(rr);
        free(cnt);
    }
}

/* ---- 4. rebuild and load --------------------------------------------------------------------- */

static void test_rebuild(void) {
    const uint32_t cap = 5000;
    fhd__sumtree a, b;
    uint64_t *q = (uint64_t *)malloc(cap * sizeof(uint64_t));
    test_rng r = {8};
    uint32_t j;
    int ok, rc_bad, rc_big;
    fhd__sumtree_init(&a, cap);
    fhd__sumtree_init(&b, cap);
    for (j = 0; j < cap; ++j) {
        q[j] = rng_below(&r, 3) == 0 ? 0 : 1 + rng_below(&r, FHD_PRIO_MAX_Q);
        fhd__sumtree_set(&a, j, q[j]);
    }
    ok = fhd__sumtree_load_leaves(&b, cap, q) == 0 &&
         memcmp(a.nodes, b.nodes, 2 * (size_t)a.leaves * sizeof(uint64_t)) == 0;
    /* Partial load: the rest becomes empty. */
    ok = ok && fhd__sumtree_load_leaves(&b, 10, q) == 0 && fhd__sumtree_check(&b) == 0 &&
         fhd__sumtree_get(&b, 10) == 0 && fhd__sumtree_get(&b, 9) == q[9];
    /* Corrupt leaves (padding non-zero, a value above MAX_Q): fixed and reported. */
    fhd__sumtree_load_leaves(&b, cap, q);
    b.nodes[b.leaves + cap + 3] = 77;
    b.nodes[b.leaves + 5] = FHD_PRIO_MAX_Q + 1;
    b.nodes[1] = 0;
    rc_bad = fhd__sumtree_rebuild(&b);
    rc_big = fhd__sumtree_load_leaves(&b, cap + 1, q);
    check(ok && rc_bad == -1 && fhd__sumtree_check(&b) == 0 &&
              fhd__sumtree_get(&b, 5) == FHD_PRIO_MAX_Q && rc_big == -1,
          "load_leaves + rebuild reproduce the set-built tree exactly; partial load empties the "
          "rest; corrupt leaves are fixed (rc %d); n > capacity rejected (rc %d)",
          rc_bad, rc_big);
    fhd__sumtree_free(&a);
    fhd__sumtree_free(&b);
    free(q);
}

int main(void) {
    double t0 = now_seconds();
    printf("test_sumtree\n");
    test_random_ops();
    test_ring();
    test_extremes();
    test_rebuild();
    printf("time %.2f s\n", now_seconds() - t0);
    return report();
}
