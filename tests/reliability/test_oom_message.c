/* test_oom_message.c - a learner that cannot be allocated is refused with the real need
 * (issue 34, finding 6): hidden [65536] with batch_size 2^20 needs its batch activations alone,
 * 2 x 2^20 x 2^16 floats for online(s) and online(s') of the layer plus four (B, max width)
 * scratch buffers: 1.5 TiB. init must return FHD_ERR_OUT_OF_MEMORY with a message whose total
 * is at least that, naming the batch part first (the largest) with batch_size and the width;
 * likewise the front's n-step staging of 65536 envs x n_step 64 x obs_dim 2^20 (3 x 2^42 floats).
 * Usage: test_oom_message <libfoxhunt_dqn.so> */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fhd_test.h"

/* "1.5 TiB" at p -> bytes; -1 when unreadable. */
static double bytes_at(const char *p) {
    char unit[8] = "";
    double v = 0;
    if (!p || sscanf(p, "%lf %3s", &v, unit) != 2)
        return -1;
    const char *units[4] = {"KiB", "MiB", "GiB", "TiB"};
    for (int i = 0; i < 4; i++)
        if (strcmp(unit, units[i]) == 0) {
            for (int k = 0; k <= i; k++)
                v *= 1024.0;
            return v;
        }
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: %s <libfoxhunt_dqn.so>\n", argv[0]);
        return 2;
    }
    const fhd_api_v1 *api = fhd_test_load(argv[1], NULL);
    const char *cfg = "{\"obs_dim\": 4, \"actions\": [2], \"hidden\": [65536], "
                      "\"batch_size\": 1048576, \"replay_capacity\": 1048576, \"seed\": 1}";
    fhd_error err = FHD_ERROR_INIT;
    fhd_learner *L = NULL;
    int32_t rc = api->init(cfg, strlen(cfg), &L, &err);
    printf("init: %s: %s\n", api->status_name(rc), err.message);
    CHECK(rc == FHD_ERR_OUT_OF_MEMORY && L == NULL, "init: %s", api->status_name(rc));
    const double floats36 = 4.0 * (double)(1ull << 36); /* bytes of 2^36 floats */
    const char *need = strstr(err.message, "needs about ");
    const double total = bytes_at(need ? need + strlen("needs about ") : NULL);
    CHECK(total >= 6 * floats36, "the total %.3g bytes understates 1.5 TiB", total);
    const char *batch = strstr(err.message, "batch activations and scratch ");
    const double part = bytes_at(batch ? batch + strlen("batch activations and scratch ") : NULL);
    CHECK(part >= 6 * floats36 && part <= total, "the batch part %.3g bytes", part);
    CHECK(batch && strstr(err.message, "batch_size 1048576") &&
              strstr(err.message, "widths up to 65536"),
          "the batch part does not name batch_size and the width: %s", err.message);
    const char *replay = strstr(err.message, "replay ");
    CHECK(batch && replay && batch < replay, "the largest part is not named first: %s",
          err.message);
    /* the front's n-step staging: 65536 envs x n_step 64 x obs_dim 2^20, three copies */
    const char *big = "{\"obs_dim\": 1048576, \"actions\": [2], \"hidden\": [4], "
                      "\"num_envs\": 65536, \"n_step\": 64, \"seed\": 1}";
    err = (fhd_error)FHD_ERROR_INIT;
    rc = api->init(big, strlen(big), &L, &err);
    printf("init: %s: %s\n", api->status_name(rc), err.message);
    need = strstr(err.message, "needs about ");
    const double mib = need ? atof(need + strlen("needs about ")) : 0;
    CHECK(rc == FHD_ERR_OUT_OF_MEMORY && mib >= 3.0 * 4 * (double)(1ull << 42) / 1048576.0 &&
              strstr(err.message, "num_envs 65536 x n_step 64 x obs_dim 1048576"),
          "staging: %s: %s", api->status_name(rc), err.message);
    return fhd_test_finish();
}
