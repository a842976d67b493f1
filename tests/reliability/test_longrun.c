/* test_longrun.c - 10 million observed transitions through a small prioritized replay
 * (capacity 4096, n_step 3, 64 env streams): the ring wraps about 2400 times while an update
 * runs every 4 observe calls. White-box (links the core objects), driven through the v1 table.
 *
 * Checked every million transitions and at the end:
 *   - the backend's invariants (check_invariants): every internal node of the integer sum tree
 *     equals the sum of its children, a slot holds a non-zero priority exactly when it is
 *     filled, no priority exceeds the running max, the ring position is consistent;
 *   - the ring position equals (transitions emitted) mod capacity, where emitted = env steps
 *     minus the transitions still waiting in the n-step staging of each stream;
 *   - every transition sampled by the last update lies in the filled part and has a non-zero
 *     priority (no zero-priority sample);
 *   - memory is flat: RSS after 10M transitions within 1 MiB of RSS after 1M.
 * usage: test_longrun [TRANSITIONS] */
#define _GNU_SOURCE
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "fhd_test.h"
#include "fhd_proc.h"
#include "learner.h"

#define NE 64
#define NS 4
#define CAP 4096

static const char *config =
    "{\"obs_dim\": 4, \"actions\": [3], \"hidden\": [16], \"batch_size\": 32, "
    "\"replay_capacity\": 4096, \"replay\": \"prioritized\", \"n_step\": 3, \"num_envs\": 64, "
    "\"learning_starts\": 0, \"target_update_interval\": 100, \"per_alpha\": 0.6, "
    "\"per_beta_steps\": 5000, \"seed\": 3}";

static void check_state(fhd_learner *L, uint64_t at) {
    char msg[512] = {0};
    int32_t rc = L->ops->check_invariants(L->be, msg, sizeof msg);
    CHECK(rc == FHD_OK, "after %llu transitions: %s", (unsigned long long)at, msg);
    fhd__backend_scalars sc;
    L->ops->get_scalars(L->be, &sc);
    uint64_t pending = 0;
    for (uint32_t e = 0; e < L->E; e++)
        pending += L->st_len[e];
    const uint64_t emitted = L->env_steps - pending;
    CHECK(sc.replay_pos == emitted % CAP && sc.replay_size == (emitted < CAP ? emitted : CAP),
          "after %llu transitions: ring pos %llu size %llu, emitted %llu", (unsigned long long)at,
          (unsigned long long)sc.replay_pos, (unsigned long long)sc.replay_size,
          (unsigned long long)emitted);
    uint32_t idx[32];
    uint64_t prio[CAP];
    if (sc.updates > 0) {
        CHECK(L->ops->read(L->be, FHD_STATE_LAST_INDICES, 0, 32, idx) == FHD_OK &&
                  L->ops->read(L->be, FHD_STATE_REPLAY_PRIORITY, 0, CAP, prio) == FHD_OK,
              "read the last batch");
        int bad = 0;
        for (int j = 0; j < 32; j++)
            bad += idx[j] >= sc.replay_size || prio[idx[j]] == 0;
        CHECK(bad == 0, "after %llu transitions: %d sampled slots empty or zero-priority",
              (unsigned long long)at, bad);
    }
}

int main(int argc, char **argv) {
    const uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000ull;
    const fhd_api_v1 *api = (const fhd_api_v1 *)fhd_get_api_base()->get_api(1, NULL);
    fhd_learner *L = fhd_test_create(api, config);
    CHECK(L->ops->check_invariants != NULL, "the CPU backend implements check_invariants");
    float obs[NE * NS], next[NE * NS], rew[NE];
    int32_t act[NE];
    uint8_t term[NE], trunc[NE];
    uint32_t rng = 1u;
    for (int i = 0; i < NE * NS; i++) {
        rng = rng * 1664525u + 1013904223u;
        obs[i] = (float)(rng >> 8) / 16777216.0f - 0.5f;
    }
    fhd_transitions t = {sizeof t, NE, obs, act, rew, next, term, trunc, NULL, NULL, NULL};
    const double t0 = fhd__now();
    long rss_1m = 0, rss_end = 0;
    uint64_t updates = 0, episodes_seen = 0;
    uint64_t calls = 0;
    for (uint64_t done = 0; done < total; done += NE, calls++) {
        for (int e = 0; e < NE; e++) {
            rng = rng * 1664525u + 1013904223u;
            act[e] = (int32_t)(rng >> 30) % 3;
            for (int j = 0; j < NS; j++)
                next[e * NS + j] = 0.95f * obs[e * NS + j] + 0.01f * (float)(act[e] - 1);
            rew[e] = (float)((rng >> 12) & 0xff) / 255.0f - 0.5f;
            term[e] = ((rng >> 4) & 127) == 0;               /* ~1 in 128 */
            trunc[e] = !term[e] && ((rng >> 11) & 255) == 0; /* ~1 in 256 */
        }
        if (api->observe(L, &t) != FHD_OK) {
            CHECK(0, "observe after %llu: %s", (unsigned long long)done, api->last_error(L));
            break;
        }
        memcpy(obs, next, sizeof obs);
        if (calls % 4 == 3) {
            fhd_train_stats st = FHD_TRAIN_STATS_INIT;
            if (api->train(L, 1, &st) != FHD_OK || !isfinite(st.loss)) {
                CHECK(0, "train after %llu: %s", (unsigned long long)done, api->last_error(L));
                break;
            }
            updates++;
        }
        const uint64_t now = done + NE;
        if (now / 1000000 != done / 1000000) {
            check_state(L, now);
            if (now / 1000000 == 1)
                rss_1m = fhd_test_rss_kib();
        }
    }
    check_state(L, L->env_steps);
    rss_end = fhd_test_rss_kib();
    episodes_seen = L->episodes;
    fhd__backend_scalars sc;
    L->ops->get_scalars(L->be, &sc);
    printf("%llu transitions observed in %.1f s (%llu observe calls, %llu updates, %llu episode "
           "ends); the ring wrapped %llu times\n",
           (unsigned long long)L->env_steps, fhd__now() - t0, (unsigned long long)calls,
           (unsigned long long)sc.updates, (unsigned long long)episodes_seen,
           (unsigned long long)(L->env_steps / CAP));
    CHECK(L->env_steps >= total && sc.updates == updates, "env steps %llu, updates %llu",
          (unsigned long long)L->env_steps, (unsigned long long)sc.updates);
    printf("sum tree and ring invariants held at every million; running max priority %llu\n",
           (unsigned long long)sc.max_priority_q);
    if (total >= 2000000) {
        printf("RSS: %ld KiB after 1M transitions, %ld KiB at the end\n", rss_1m, rss_end);
        CHECK(rss_end - rss_1m <= 1024, "RSS grew by %ld KiB between 1M and %lluM transitions",
              rss_end - rss_1m, (unsigned long long)(total / 1000000));
    }
    api->destroy(L);
    return fhd_test_finish();
}
