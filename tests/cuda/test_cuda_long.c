/* test_cuda_long.c - 100,000 updates in one learner: no hang, finite statistics that advance,
 * consistent replay and tree at the end. The loop reads the statistics without waiting after
 * every train() call, as a host would for logging, and records which update they belong to.
 * (Duration is printed for information only; timing is not a pass/fail criterion.) */
#include "cuda_test.h"

int main(void) {
    ct_require_gpu();
    const char *json = "{\"backend\": \"cuda\", \"obs_dim\": 64, \"hidden\": [256, 256], "
                       "\"actions\": [8], \"dueling\": true, \"double_dqn\": true, "
                       "\"batch_size\": 256, \"replay_capacity\": 65536, \"replay\": "
                       "\"prioritized\", \"lr\": 0.0001, \"max_grad_norm\": 10, "
                       "\"target_update_interval\": 1000, \"num_envs\": 256, "
                       "\"learning_starts\": 0, \"seed\": 11, \"per_beta_steps\": 50000}";
    fhd_learner *L = ct_create_cuda(json);
    printf("device: %s\n", L->ops->device_name(L->be));
    const uint32_t K[1] = {8};
    fhd_learner *Ls[1] = {L};
    ct_feed(Ls, 1, 256, 64, 1, K, 100, 5);
    const double t0 = ct_now();
    uint64_t seen[64];
    int nseen = 0, finite = 1, ok = 1;
    uint64_t last = 0;
    for (int r = 0; r < 100 && ok; r++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        ok = fhd__learner_train(L, 1000, &st) == FHD_OK;
        ok = ok && st.update_index == (uint64_t)(r + 1) * 1000;
        fhd__update_stats us;
        L->ops->latest_stats(L->be, &us);
        if (us.update_index != last) {
            if (us.update_index < last)
                ok = 0; /* never goes back */
            last = us.update_index;
            if (nseen < 64)
                seen[nseen++] = us.update_index;
            finite = finite && isfinite(us.loss) && isfinite(us.grad_norm) && isfinite(us.q_mean);
        }
    }
    ct_check(ok, "100 x train(1000) returned in order (%s)", ok ? "" : L->err);
    float probe;
    ct_read(L, FHD_STATE_PARAMS, 0, 1, &probe); /* waits for the queue */
    const double t1 = ct_now();
    fhd__update_stats us;
    L->ops->latest_stats(L->be, &us);
    ct_check(us.update_index == 100000, "statistics belong to update %llu",
             (unsigned long long)us.update_index);
    ct_check(finite && isfinite(us.loss) && us.loss >= 0 && isfinite(probe),
             "finite loss %g, grad norm %g, Q mean %g, beta %g", us.loss, us.grad_norm, us.q_mean,
             us.beta);
    ct_check(us.beta == 1.0f, "beta annealed to 1 after per_beta_steps (%g)", us.beta);
    printf("       snapshots seen while training:");
    for (int i = 0; i < nseen; i++)
        printf(" %llu", (unsigned long long)seen[i]);
    printf("\n");
    ct_check(nseen >= 2, "the non-blocking statistics advanced during the run (%d values)", nseen);
    uint64_t info[FHD_CUDA_INFO_COUNT];
    ct_read(L, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info);
    ct_check(info[FHD_CUDA_INFO_UPDATES_DEVICE] == 100000, "device counter %llu",
             (unsigned long long)info[FHD_CUDA_INFO_UPDATES_DEVICE]);
    char msg[256] = {0};
    ct_check(L->ops->check_invariants(L->be, msg, sizeof msg) == FHD_OK, "invariants hold (%s)",
             msg);
    printf("       100,000 updates in %.2f s (%.1f us/update)\n", t1 - t0, (t1 - t0) * 10.0);
    fhd__learner_destroy(L);
    return ct_finish();
}
