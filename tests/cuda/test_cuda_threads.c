/* test_cuda_threads.c - several CUDA learners on one GPU, trained at the same time from their
 * own threads, end bit-identical to the same learners trained one after the other.
 *
 * Each update's optimiser pass is a cooperative launch (a grid barrier inside): launched from
 * three streams at once they must neither deadlock nor disturb each other. Three learners of a
 * large-parameter configuration (many optimiser blocks) and different seeds each run 400
 * updates concurrently (a watchdog fails the test after 120 s instead of hanging), then the
 * same learners are recreated and trained alone; parameters must match exactly. Exits 77
 * without a CUDA device.
 */
#include "cuda_test.h"

#include <pthread.h>
#include <unistd.h>

#define NL 3

typedef struct work {
    fhd_learner *L;
    int32_t rc;
} work;

static void *train_main(void *p) {
    work *w = (work *)p;
    fhd_train_stats st = FHD_TRAIN_STATS_INIT;
    w->rc = fhd__learner_train(w->L, 400, &st);
    if (w->rc == FHD_OK) { /* wait for the queued updates: a blocking read */
        float probe;
        w->rc = w->L->ops->read(w->L->be, FHD_STATE_PARAMS, 0, 1, &probe);
    }
    return NULL;
}

static void *watchdog(void *p) {
    (void)p;
    sleep(120);
    printf("  FAIL concurrent training did not finish in 120 s (deadlock?)\n");
    fflush(stdout);
    _exit(1);
    return NULL;
}

static fhd_learner *make(int k) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"backend\": \"cuda\", \"obs_dim\": 64, \"hidden\": [1024, 1024], \"actions\": [16], "
             "\"batch_size\": 256, \"replay_capacity\": 4096, \"num_envs\": 8, "
             "\"learning_starts\": 0, \"replay\": \"prioritized\", \"seed\": %d, "
             "\"target_update_interval\": 50}",
             11 + k);
    fhd_learner *L = ct_create_cuda(json);
    const uint32_t K[1] = {16};
    fhd_learner *Ls[1] = {L};
    ct_feed(Ls, 1, 8, L->lo.S, 1, K, 300, 100 + (uint64_t)k);
    return L;
}

int main(void) {
    ct_require_gpu();
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog, NULL);
    pthread_detach(dog);
    work w[NL];
    pthread_t t[NL];
    float *together[NL];
    uint64_t np[NL];
    for (int k = 0; k < NL; k++)
        w[k].L = make(k);
    for (int k = 0; k < NL; k++)
        pthread_create(&t[k], NULL, train_main, &w[k]);
    int ok = 1;
    for (int k = 0; k < NL; k++) {
        pthread_join(t[k], NULL);
        ok = ok && w[k].rc == FHD_OK;
    }
    ct_check(ok, "%d learners trained 400 updates each at the same time", NL);
    for (int k = 0; k < NL; k++) {
        np[k] = 2 * w[k].L->lo.num_params;
        together[k] = ct_read_floats(w[k].L, FHD_STATE_PARAMS, np[k]);
        fhd__learner_destroy(w[k].L);
    }
    for (int k = 0; k < NL; k++) {
        work alone = {make(k), 0};
        train_main(&alone);
        float *p = ct_read_floats(alone.L, FHD_STATE_PARAMS, np[k]);
        ct_check(alone.rc == FHD_OK && memcmp(p, together[k], 4 * np[k]) == 0,
                 "learner %d: parameters after concurrent training equal those trained alone", k);
        free(p);
        free(together[k]);
        fhd__learner_destroy(alone.L);
    }
    return ct_finish();
}
