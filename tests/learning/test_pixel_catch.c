/* test_pixel_catch.c - a conv agent learns from pixels the host draws: Catch (bsuite's
 * catch: a ball falls one row per step down a 10 x 5 grid; the agent moves a paddle on the
 * bottom row left, not at all or right; reward +1 for a catch, -1 for a miss, at the episode's
 * end after 9 steps). Observations are uint8 images [1, 10, 5] (255 ball and paddle, 0 else),
 * through the ABI 1.1 obs_u8 fields and a conv torso; 8 envs with Gymnasium NEXT_STEP
 * autoreset (the step after an episode's end carries the reset frame with valid = 0).
 * A random policy scores about -0.6; the test asks for a greedy mean >= 0.8 over 200
 * evaluation episodes after 24,000 env steps (seconds on one core).
 * usage: test_pixel_catch LIBRARY */
#include <stdint.h>

#include "fhd_test.h"

#define ROWS 10
#define COLS 5
#define NE 8

typedef struct {
    int ball_r, ball_c, paddle, done;
    uint64_t rng;
} catch_env;

static uint32_t next_u32(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static void env_reset(catch_env *e) {
    e->ball_r = 0;
    e->ball_c = (int)(next_u32(&e->rng) % COLS);
    e->paddle = COLS / 2;
    e->done = 0;
}

/* action 0 left, 1 stay, 2 right; returns the reward, sets done at the bottom row */
static float env_step(catch_env *e, int a) {
    e->paddle += a - 1;
    e->paddle = e->paddle < 0 ? 0 : e->paddle >= COLS ? COLS - 1 : e->paddle;
    e->ball_r++;
    if (e->ball_r < ROWS - 1)
        return 0.0f;
    e->done = 1;
    return e->ball_c == e->paddle ? 1.0f : -1.0f;
}

static void env_draw(const catch_env *e, uint8_t *px) {
    memset(px, 0, ROWS * COLS);
    px[e->ball_r * COLS + e->ball_c] = 255;
    px[(ROWS - 1) * COLS + e->paddle] = 255;
}

static const char *config =
    "{\"obs_shape\": [1, 10, 5], \"obs_dtype\": \"uint8\", "
    "\"conv\": [{\"out\": 16, \"kernel\": 3, \"stride\": 1, \"padding\": 1}], "
    "\"hidden\": [64], \"actions\": [3], \"dueling\": true, \"double_dqn\": true, "
    "\"num_envs\": 8, \"gamma\": 0.99, \"lr\": 0.001, \"batch_size\": 32, "
    "\"replay_capacity\": 20000, \"learning_starts\": 1000, \"train_freq\": 8, "
    "\"gradient_steps\": 2, \"target_update_interval\": 200, \"epsilon_start\": 1.0, "
    "\"epsilon_end\": 0.05, \"epsilon_decay_steps\": 12000, \"seed\": 7}";

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_pixel_catch LIBRARY\n");
        return 2;
    }
    const fhd_api_v1 *api = fhd_test_load(argv[1], NULL);
    if (!FHD_API_HAS(api, obs_info)) {
        printf("FAIL the library lacks ABI 1.1\n");
        return 1;
    }
    fhd_learner *L = fhd_test_create(api, config);
    catch_env env[NE];
    uint8_t obs[NE * ROWS * COLS], valid[NE], term[NE], trunc[NE] = {0};
    float rew[NE];
    int32_t act[NE];
    for (int i = 0; i < NE; i++) {
        env[i].rng = 1000u + (uint64_t)i;
        env_reset(&env[i]);
        env_draw(&env[i], obs + i * ROWS * COLS);
    }
    fhd_step_args s = FHD_STEP_ARGS_INIT;
    s.num_envs = NE;
    s.obs_u8 = obs;
    s.actions = act;
    CHECK(api->step(L, &s) == FHD_OK, "first step: %s", api->last_error(L));
    s.rewards = rew;
    s.terminated = term;
    s.truncated = trunc;
    s.valid = valid;
    double train_return = 0.0;
    int train_episodes = 0;
    for (int t = 0; t < 24000 / NE; t++) {
        for (int i = 0; i < NE; i++) {
            if (env[i].done) { /* NEXT_STEP autoreset: this step only resets */
                env_reset(&env[i]);
                valid[i] = 0;
                rew[i] = 0.0f;
                term[i] = 0;
            } else {
                rew[i] = env_step(&env[i], act[i]);
                valid[i] = 1;
                term[i] = (uint8_t)env[i].done;
                if (env[i].done) {
                    train_return += rew[i];
                    train_episodes++;
                }
            }
            env_draw(&env[i], obs + i * ROWS * COLS);
        }
        if (api->step(L, &s) != FHD_OK) {
            CHECK(0, "step %d: %s", t, api->last_error(L));
            break;
        }
    }
    /* greedy evaluation */
    double total = 0.0;
    int episodes = 0;
    catch_env e = {0, 0, 0, 0, 99};
    uint8_t px[ROWS * COLS];
    fhd_act_args a = FHD_ACT_ARGS_INIT;
    a.num_obs = 1;
    a.obs_u8 = px;
    a.actions = act;
    for (; episodes < 200; episodes++) {
        env_reset(&e);
        while (!e.done) {
            env_draw(&e, px);
            if (api->act(L, &a) != FHD_OK) {
                CHECK(0, "act: %s", api->last_error(L));
                break;
            }
            total += env_step(&e, act[0]);
        }
    }
    const double mean = total / episodes;
    printf("catch: %d training episodes (mean return %.2f), greedy mean over %d: %.3f\n",
           train_episodes, train_return / (train_episodes ? train_episodes : 1), episodes, mean);
    CHECK(train_episodes > 2000, "episodes ended (%d)", train_episodes);
    CHECK(mean >= 0.8, "greedy mean return %.3f >= 0.8", mean);
    api->destroy(L);
    return fhd_test_finish();
}
