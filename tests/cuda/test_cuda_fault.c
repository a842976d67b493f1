/* test_cuda_fault.c - a sticky CUDA error (an illegal address, planted by a kernel of this
 * test in the process's context) turns every CUDA learner into a defined state (label cuda;
 * docs/design.md section 5, "Device faults"):
 *   - its next call returns FHD_ERR_DEVICE with CUDA's error, and every later call (train, act,
 *     observe, metrics, tensor_read, checkpoint_save, checkpoint_load) FHD_ERR_DEVICE naming the
 *     latched fault; checkpoint_save writes no file and leaves no temporary;
 *   - a second learner of the process is in the same state (the context is the process's);
 *   - a new learner is refused with FHD_ERR_DEVICE (CUDA allows none until the process ends);
 *   - destroy frees both without a crash.
 * usage: test_cuda_fault [scratch dir]
 */
#include "cuda_test.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

int fhd_test_plant_fault(void);

#define CFG                                                                                        \
    "{\"obs_dim\": 6, \"actions\": [3], \"hidden\": [16], \"batch_size\": 8, "                     \
    "\"replay_capacity\": 64, \"num_envs\": 2, \"learning_starts\": 0, \"seed\": 3, "             \
    "\"backend\": \"cuda\"}"

static int dir_has_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int found = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        found |= strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return found;
}

static void expect_dead(fhd_learner *L, int32_t rc, const char *what) {
    ct_check(rc == FHD_ERR_DEVICE && strstr(L->err, "cudaErrorIllegalAddress"),
             "%s after the fault: %s: %s", what, fhd__status_name(rc), L->err);
}

int main(int argc, char **argv) {
    ct_require_gpu();
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[600], good[600];
    snprintf(path, sizeof path, "%s/fault-after.safetensors", dir);
    snprintf(good, sizeof good, "%s/fault-before.safetensors", dir);
    unlink(path);
    fhd_learner *A = ct_create_cuda(CFG), *B = ct_create_cuda(CFG);
    uint32_t K[1] = {3};
    fhd_learner *both[2] = {A, B};
    ct_feed(both, 2, 2, 6, 1, K, 20, 1);
    ct_check(fhd__learner_train(A, 4, NULL) == FHD_OK, "A trains before the fault: %s", A->err);
    ct_check(fhd__checkpoint_save(A, good, 0) == FHD_OK, "A saves before the fault: %s", A->err);

    int e = fhd_test_plant_fault();
    printf("  planted: %s\n", cudaGetErrorName((cudaError_t)e));
    ct_check(e == cudaErrorIllegalAddress, "the planted kernel faults (%d)", e);

    int32_t rc = fhd__learner_train(A, 2, NULL);
    printf("  A, first call: %s: %s\n", fhd__status_name(rc), A->err);
    expect_dead(A, rc, "train");
    rc = fhd__learner_train(A, 1, NULL);
    ct_check(rc == FHD_ERR_DEVICE && strstr(A->err, "unusable after an earlier device fault"),
             "train again: %s: %s", fhd__status_name(rc), A->err);
    float obs[2 * 6] = {0};
    int32_t act[2];
    fhd_act_args aa = FHD_ACT_ARGS_INIT;
    aa.num_obs = 2;
    aa.obs = obs;
    aa.actions = act;
    expect_dead(A, fhd__learner_act(A, &aa), "act");
    float rew[2] = {0, 0};
    uint8_t no[2] = {0, 0};
    fhd_transitions tr = FHD_TRANSITIONS_INIT;
    tr.num_envs = 2;
    tr.obs = obs;
    tr.actions = act;
    act[0] = act[1] = 0;
    tr.rewards = rew;
    tr.next_obs = obs;
    tr.terminated = no;
    tr.truncated = no;
    expect_dead(A, fhd__learner_observe(A, &tr), "observe");
    char buf[8192];
    size_t need = 0;
    expect_dead(A, fhd__learner_metrics(A, buf, sizeof buf, &need), "metrics");
    fhd_tensor_info ti = FHD_TENSOR_INFO_INIT;
    ct_check(fhd__learner_tensor_info(A, 0, &ti) == FHD_OK, "tensor_info needs no device");
    float *w = (float *)malloc(sizeof(float) * (ti.count ? ti.count : 1));
    expect_dead(A, fhd__learner_tensor_read(A, ti.name, w, ti.count), "tensor_read");
    free(w);
    expect_dead(A, fhd__checkpoint_save(A, path, 0), "checkpoint_save");
    struct stat sb;
    ct_check(stat(path, &sb) != 0 && !dir_has_prefix(dir, "fault-after.safetensors.tmp"),
             "the refused save left a file or a temporary");
    expect_dead(A, fhd__checkpoint_load(A, good, 0), "checkpoint_load");
    rc = fhd__learner_train(B, 1, NULL);
    printf("  B, first call: %s: %s\n", fhd__status_name(rc), B->err);
    expect_dead(B, rc, "the second learner's train");
    fhd_learner *C = ct_create(CFG, &rc);
    ct_check(!C && rc == FHD_ERR_DEVICE, "a new learner after the fault: %s",
             fhd__status_name(rc));
    if (C)
        fhd__learner_destroy(C);
    fhd__learner_destroy(A);
    fhd__learner_destroy(B);
    ct_check(1, "both destroyed");
    unlink(good);
    return ct_finish();
}
