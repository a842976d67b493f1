/* test_cuda_graph_conv.c - the captured update of a convolutional learner (the A1 preset's
 * network: Nature CNN on [4, 84, 84] uint8 frames with a stack of 4, prioritized replay), with
 * the rules test_cuda_graph.c checks on MLPs that hold for any torso (docs/design.md section 5):
 *   - every capture the plan makes is one graph; no memcpy node; no kernel node of ours with a
 *     1x1x1 grid; clipping and Adam in one node (cooperative launch) or two;
 *   - no memset node writes parameters, gradient or Adam moments;
 *   - the conv kernels are in the graph: im2col (layer 0's over the uint8 batch), the dz kernel
 *     of every conv layer (the top one from the flat gradient, the others a col2im gather), the
 *     weight permutations; the loss and the priority update once each;
 *   - 2,000 updates through the front without a synchronisation by the backend, all done on
 *     the device, finite statistics, invariants holding.
 */
#include "cuda_test.h"

#define MAXN 4096
#define E 4
#define FR (84 * 84)

static const char *CFG =
    "{\"backend\": \"cuda\", \"torso\": \"nature\", \"obs_shape\": [4, 84, 84], "
    "\"obs_dtype\": \"uint8\", \"frame_stack\": 4, \"actions\": [6], \"batch_size\": 32, "
    "\"replay_capacity\": 4096, \"replay\": \"prioritized\", \"num_envs\": 4, "
    "\"learning_starts\": 0, \"max_grad_norm\": 10, \"seed\": 5}";

static int count_named(const char names[][160], size_t n, const char *needle) {
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += strstr(names[i], needle) != NULL;
    return c;
}

static void inspect(fhd_learner *L, int v, const uint64_t *dp) {
    static const char *vn[FHD_CUDA_GRAPHS] = {"single", "first", "steady", "last"};
    cudaGraph_t g = NULL;
    ct_read(L, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
    if (!g) {
        printf("  %s: not captured (the plan samples inside the update)\n", vn[v]);
        ct_check(v != FHD_CUDA_GRAPH_SINGLE, "the single-update capture exists");
        return;
    }
    static cudaGraphNode_t raw[MAXN];
    static char names[MAXN][160];
    size_t nn = MAXN;
    ct_check(cudaGraphGetNodes(g, raw, &nn) == cudaSuccess && nn < MAXN, "%s: %zu nodes", vn[v],
             nn);
    int n_memcpy = 0, ours_1x1 = 0, memset_bad = 0, n_opt = 0, n_kernel = 0;
    for (size_t i = 0; i < nn; i++) {
        enum cudaGraphNodeType t;
        cudaGraphNodeGetType(raw[i], &t);
        snprintf(names[i], sizeof names[i], "-");
        if (t == cudaGraphNodeTypeKernel) {
            n_kernel++;
            struct cudaKernelNodeParams kp;
            memset(&kp, 0, sizeof kp);
            const char *nm = NULL;
            if (cudaGraphKernelNodeGetParams(raw[i], &kp) == cudaSuccess && kp.func &&
                cudaFuncGetName(&nm, kp.func) == cudaSuccess && nm)
                snprintf(names[i], sizeof names[i], "%s", nm);
            (void)cudaGetLastError();
            if (strstr(names[i], "fhd_")) {
                ours_1x1 += kp.gridDim.x * kp.gridDim.y * kp.gridDim.z == 1;
                n_opt += strstr(names[i], "fhd_clip_grad_norm_kernel") ||
                         strstr(names[i], "fhd_adam_step_kernel") ||
                         strstr(names[i], "fhd_opt_fused_kernel");
            }
        } else if (t == cudaGraphNodeTypeMemcpy) {
            n_memcpy++;
        } else if (t == cudaGraphNodeTypeMemset) {
            struct cudaMemsetParams mp;
            memset(&mp, 0, sizeof mp);
            cudaGraphMemsetNodeGetParams(raw[i], &mp);
            const uint64_t a = (uint64_t)(uintptr_t)mp.dst;
            for (int k = 0; k < FHD_CUDA_DEVPTR_COUNT; k += 2)
                memset_bad += a >= dp[k] && a < dp[k] + dp[k + 1];
        }
    }
    printf("  %s: %zu nodes, %d kernels\n", vn[v], nn, n_kernel);
    int coop = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0);
    ct_check(n_memcpy == 0, "%s: no memcpy node (%d)", vn[v], n_memcpy);
    ct_check(ours_1x1 == 0, "%s: no kernel of ours with a 1x1x1 grid (%d)", vn[v], ours_1x1);
    ct_check(n_opt == (coop ? 1 : 2), "%s: clipping and Adam in %d node(s)", vn[v], n_opt);
    ct_check(memset_bad == 0, "%s: no memset of parameters, gradient or Adam (%d)", vn[v],
             memset_bad);
    const int im2col = count_named(names, nn, "im2col"), dz = count_named(names, nn, "conv_dz");
    const int perm = count_named(names, nn, "conv_permute");
    const int loss = count_named(names, nn, "fhd_td_loss_kernel");
    const int prio = count_named(names, nn, "fhd_priority_update_kernel");
    ct_check(im2col >= 1 && dz == 3 && perm >= 1 && loss == 1 && prio == 1,
             "%s: conv kernels in the graph: im2col %d (>= 1), dz %d (3, one per conv layer), "
             "permutations %d (>= 1), loss %d, priority update %d",
             vn[v], im2col, dz, perm, loss, prio);
}

/* T steps of E envs whose frames drift, each obs the stack of its env's last 4 frames. */
static void feed(fhd_learner *L, uint32_t T, uint64_t seed) {
    static uint8_t frames[E][5][FR];
    static uint8_t obs[E * 4 * FR], next[E * 4 * FR];
    uint64_t s = seed;
    for (int e = 0; e < E; e++)
        for (int k = 0; k < 5; k++)
            for (int i = 0; i < FR; i++)
                frames[e][k][i] = (uint8_t)(ct_rng(&s) & 0xff);
    float rew[E];
    int32_t act[E];
    uint8_t term[E] = {0}, trunc[E] = {0};
    for (uint32_t t = 0; t < T; t++) {
        for (int e = 0; e < E; e++) {
            memcpy(obs + (size_t)e * 4 * FR, frames[e][0], 4 * FR);
            memcpy(next + (size_t)e * 4 * FR, frames[e][1], 4 * FR);
            rew[e] = ct_normal(&s);
            act[e] = (int32_t)(ct_rng(&s) % 6);
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = E;
        tr.obs_u8 = obs;
        tr.next_obs_u8 = next;
        tr.actions = act;
        tr.rewards = rew;
        tr.terminated = term;
        tr.truncated = trunc;
        if (fhd__learner_observe(L, &tr) != FHD_OK) {
            printf("FAIL observe: %s\n", L->err);
            exit(1);
        }
        for (int e = 0; e < E; e++) { /* shift: the next stack is frames 1..4 plus a new one */
            memmove(frames[e][0], frames[e][1], 4 * FR);
            for (int i = 0; i < FR; i++)
                frames[e][4][i] = (uint8_t)(frames[e][3][i] + (ct_rng(&s) & 7));
        }
    }
}

int main(void) {
    ct_require_gpu();
    fhd_learner *L = ct_create_cuda(CFG);
    uint64_t dp[FHD_CUDA_DEVPTR_COUNT];
    ct_read(L, FHD_CUDA_STATE_DEVPTRS, 0, FHD_CUDA_DEVPTR_COUNT, dp);
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++)
        inspect(L, v, dp);
    feed(L, 300, 9);
    const uint64_t c0 = ct_sync_count(L);
    int ok = 1;
    for (int r = 0; r < 20 && ok; r++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        ok = fhd__learner_train(L, 100, &st) == FHD_OK;
    }
    const uint64_t c1 = ct_sync_count(L);
    ct_check(ok, "2,000 conv updates through fhd__learner_train (%s)", ok ? "" : L->err);
    ct_check(c1 == c0, "no synchronisation by the backend during them (%llu, %llu)",
             (unsigned long long)c0, (unsigned long long)c1);
    uint64_t info[FHD_CUDA_INFO_COUNT];
    ct_read(L, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info);
    ct_check(info[FHD_CUDA_INFO_UPDATES_DEVICE] == 2000, "the device counter says %llu updates",
             (unsigned long long)info[FHD_CUDA_INFO_UPDATES_DEVICE]);
    fhd__update_stats us;
    L->ops->latest_stats(L->be, &us);
    ct_check(us.update_index == 2000 && isfinite(us.loss) && isfinite(us.grad_norm),
             "statistics of update %llu: loss %g, grad norm %g",
             (unsigned long long)us.update_index, us.loss, us.grad_norm);
    char msg[256] = {0};
    ct_check(L->ops->check_invariants(L->be, msg, sizeof msg) == FHD_OK, "invariants hold (%s)",
             msg);
    fhd__learner_destroy(L);
    return ct_finish();
}
