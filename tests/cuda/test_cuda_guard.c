/* test_cuda_guard.c - the training guard (config `guard`) on the CUDA backend, against the CPU.
 *
 *   1. train_batch with a guard: a +Inf loss (MSE of a 1e30 return) and a gradient norm over
 *      max_grad_norm are skipped on both backends (FHD_OK, updates_done 0, updates_skipped 1):
 *      on CUDA the parameters (online and target), Adam moments and the device counter are
 *      bit for bit as before; skipped_updates and the skip's values agree with the CPU's.
 *   2. train with a guard on a replay where some batches hold 1e30 returns, for each variant
 *      (uniform, PER, spectral norm, the two-kernel optimiser forced): CPU and CUDA skip the
 *      same updates (the skip count after every train(1), and at the end of one train(n)), the
 *      PER priorities are identical, and the parameters agree within the parity tolerance.
 *   3. resume: a CPU learner's checkpoint (with the replay) after skips loads into a CUDA learner
 *      with the same skip count, and both then skip the same updates; a CUDA learner's
 *      checkpoint loads into a fresh CUDA learner that continues bit for bit (counters,
 *      parameters) as the original.
 *   4. graph nodes: with a guard and uniform replay every capture has exactly as many nodes as
 *      without one; with PER exactly one more (the priority commit) in the SINGLE capture, whose
 *      last kernel then is the commit; no synchronisation across 2,000 guarded updates.
 */
#include "cuda_test.h"

#include <unistd.h>

#define BASE                                                                                       \
    "\"obs_dim\": 8, \"actions\": [4, 3], \"hidden\": [32, 32], \"dueling\": true, "               \
    "\"double_dqn\": true, \"batch_size\": 32, \"replay_capacity\": 256, \"num_envs\": 2, "        \
    "\"learning_starts\": 0, \"loss\": \"mse\", \"seed\": 11, \"max_grad_norm\": 10"

static char jbuf[2][1024];

static const char *cfg_of(int k, const char *backend, const char *extra) {
    snprintf(jbuf[k], sizeof jbuf[k], "{\"backend\": \"%s\", " BASE "%s}", backend, extra);
    return jbuf[k];
}

static fhd__update_stats stats_of(fhd_learner *L) {
    float dummy;
    ct_read(L, FHD_STATE_PARAMS, 0, 1, &dummy); /* drains the queue: the snapshot is current */
    fhd__update_stats s;
    L->ops->latest_stats(L->be, &s);
    return s;
}

static int same_kind(fhd_learner *L, int kind, uint64_t n, const float *before) {
    float *now = ct_read_floats(L, kind, n);
    int ok = memcmp(now, before, sizeof(float) * n) == 0;
    free(now);
    return ok;
}

static void test_batch(void) {
    const char *extra = ", \"guard\": {\"max_loss\": 1e20}";
    fhd_learner *Lc = ct_create(cfg_of(0, "cpu", extra), NULL);
    fhd_learner *Lg = ct_create_cuda(cfg_of(1, "cuda", extra));
    const uint64_t P = Lc->lo.num_params;
    fhd_learner *both[2] = {Lc, Lg};
    for (int k = 0; k < 2; k++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        ct_check(ct_host_batch(both[k], 1.0f, &st) == FHD_OK && st.updates_done == 1,
                 "%s: a sane batch applied", k ? "cuda" : "cpu");
    }
    float *p0 = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P);
    float *m0 = ct_read_floats(Lg, FHD_STATE_ADAM_M, P),
          *v0 = ct_read_floats(Lg, FHD_STATE_ADAM_V, P);
    const float rets[2] = {1e30f, 1e12f}; /* loss +Inf; a finite loss over 1e20 */
    for (int r = 0; r < 2; r++) {
        for (int k = 0; k < 2; k++) {
            fhd_train_stats st = FHD_TRAIN_STATS_INIT;
            int32_t rc = ct_host_batch(both[k], rets[r], &st);
            ct_check(rc == FHD_OK && st.updates_done == 0 && st.updates_skipped == 1,
                     "%s, return %g: skipped (%d, done %u, skipped %u)", k ? "cuda" : "cpu",
                     (double)rets[r], rc, st.updates_done, st.updates_skipped);
        }
        ct_check(same_kind(Lg, FHD_STATE_PARAMS, 2 * P, p0) &&
                     same_kind(Lg, FHD_STATE_ADAM_M, P, m0) &&
                     same_kind(Lg, FHD_STATE_ADAM_V, P, v0),
                 "cuda, return %g: parameters, target or Adam moments changed", (double)rets[r]);
        fhd__update_stats sc = stats_of(Lc), sg = stats_of(Lg);
        ct_check(sc.skipped == sg.skipped && sg.skipped == (uint64_t)r + 1 &&
                     sc.skip_update == sg.skip_update && sg.update_index == 1,
                 "return %g: skipped %llu/%llu, skip_update %llu/%llu, stats of update %llu",
                 (double)rets[r], (unsigned long long)sc.skipped, (unsigned long long)sg.skipped,
                 (unsigned long long)sc.skip_update, (unsigned long long)sg.skip_update,
                 (unsigned long long)sg.update_index);
        if (r == 1)
            ct_check(fabs((double)sg.skip_loss - sc.skip_loss) <= 1e-4 * fabs((double)sc.skip_loss),
                     "the skipped loss %g vs cpu %g", (double)sg.skip_loss, (double)sc.skip_loss);
    }
    uint64_t dev[FHD_CUDA_INFO_COUNT];
    ct_read(Lg, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_UPDATES_DEVICE + 1, dev);
    ct_check(dev[FHD_CUDA_INFO_UPDATES_DEVICE] == 1, "device counter %llu after the skips",
             (unsigned long long)dev[FHD_CUDA_INFO_UPDATES_DEVICE]);
    free(p0);
    free(m0);
    free(v0);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

/* Store 160 transitions, then 6 more of which 3 have a 1e30 return. */
static void feed_bad(fhd_learner **Ls, int n) {
    uint32_t K[2] = {4, 3};
    ct_feed(Ls, n, 2, 8, 2, K, 80, 3);
    float obs[16], next[16], rew[2] = {1e30f, 0.5f};
    int32_t act[4] = {1, 2, 3, 0};
    uint8_t no[2] = {0, 0};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 16; i++) {
            obs[i] = 0.1f * (float)((t + i) % 7) - 0.3f;
            next[i] = 0.05f * (float)((t * 3 + i) % 5);
        }
        fhd_transitions tr = FHD_TRANSITIONS_INIT;
        tr.num_envs = 2;
        tr.obs = obs;
        tr.actions = act;
        tr.rewards = rew;
        tr.next_obs = next;
        tr.terminated = no;
        tr.truncated = no;
        for (int l = 0; l < n; l++)
            ct_check(fhd__learner_observe(Ls[l], &tr) == FHD_OK, "observe a bad return");
    }
}

static void test_train(const char *name, const char *extra, uint64_t opt_two) {
    fhd_learner *Lc = ct_create(cfg_of(0, "cpu", extra), NULL);
    fhd_learner *Lg = ct_create_cuda(cfg_of(1, "cuda", extra));
    if (opt_two)
        ct_check(Lg->ops->write(Lg->be, FHD_CUDA_STATE_OPT_FORM, 0, 1, &opt_two) == FHD_OK,
                 "%s: two-kernel optimiser forced", name);
    fhd_learner *both[2] = {Lc, Lg};
    feed_bad(both, 2);
    const uint64_t P = Lc->lo.num_params, N = 256;
    int agree = 1;
    for (int k = 0; k < 30; k++) {
        ct_check(fhd__learner_train(Lc, 1, NULL) == FHD_OK &&
                     fhd__learner_train(Lg, 1, NULL) == FHD_OK,
                 "%s: train", name);
        fhd__update_stats sc = stats_of(Lc), sg = stats_of(Lg);
        agree &= sc.skipped == sg.skipped && sc.update_index == sg.update_index;
    }
    fhd__update_stats sc = stats_of(Lc), sg = stats_of(Lg);
    ct_check(agree && sg.skipped > 0 && sg.update_index > 0,
             "%s: the same updates skipped (cpu %llu skipped of 30, cuda %llu)", name,
             (unsigned long long)sc.skipped, (unsigned long long)sg.skipped);
    fhd_train_stats a = FHD_TRAIN_STATS_INIT;
    ct_check(fhd__learner_train(Lc, 40, &a) == FHD_OK && fhd__learner_train(Lg, 40, NULL) == FHD_OK,
             "%s: train(40)", name);
    sc = stats_of(Lc);
    sg = stats_of(Lg);
    ct_check(sc.skipped == sg.skipped && sc.update_index == sg.update_index,
             "%s: train(40): skipped %llu vs cpu %llu, updates %llu vs %llu", name,
             (unsigned long long)sg.skipped, (unsigned long long)sc.skipped,
             (unsigned long long)sg.update_index, (unsigned long long)sc.update_index);
    float *pc = ct_read_floats(Lc, FHD_STATE_PARAMS, 2 * P),
          *pg = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P);
    double mx = 0, e = ct_relerr(pg, pc, 2 * P, &mx);
    ct_check(e < 1e-4, "%s: parameters rel err %.2e (max abs %.2e)", name, e, mx);
    free(pc);
    free(pg);
    if (Lc->cfg.replay == FHD_REPLAY_PRIORITIZED) {
        uint64_t *qc = (uint64_t *)malloc(8 * N), *qg = (uint64_t *)malloc(8 * N);
        ct_read(Lc, FHD_STATE_REPLAY_PRIORITY, 0, N, qc);
        ct_read(Lg, FHD_STATE_REPLAY_PRIORITY, 0, N, qg);
        /* the two run free for 70 updates: quantised priorities agree but where a TD error
         * differs in its last bits or, after such a difference, a sampled row differs; a
         * skipped update's rows entering the tree would differ on every row of that batch, for
         * every skip */
        uint64_t same = 0;
        for (uint64_t i = 0; i < N; i++)
            same += qc[i] == qg[i];
        ct_check(same >= N * 8 / 10, "%s: %llu of %llu priorities identical", name,
                 (unsigned long long)same, (unsigned long long)N);
        free(qc);
        free(qg);
    }
    char msg[256];
    ct_check(Lg->ops->check_invariants(Lg->be, msg, sizeof msg) == FHD_OK, "%s: invariants: %s",
             name, msg);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
}

static void test_resume(void) {
    const char *extra = ", \"replay\": \"prioritized\", \"guard\": {}";
    char path[256];
    snprintf(path, sizeof path, "/tmp/fhd_guard_%d.safetensors", (int)getpid());
    fhd_learner *Lc = ct_create(cfg_of(0, "cpu", extra), NULL);
    fhd_learner *both1[1] = {Lc};
    feed_bad(both1, 1);
    ct_check(fhd__learner_train(Lc, 30, NULL) == FHD_OK, "cpu train");
    ct_check(fhd__checkpoint_save(Lc, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "cpu save: %s",
             Lc->err);
    fhd_learner *Lg = ct_create_cuda(cfg_of(1, "cuda", extra));
    ct_check(fhd__checkpoint_load(Lg, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "cuda load: %s",
             Lg->err);
    fhd__update_stats sc = stats_of(Lc), sg = stats_of(Lg);
    fhd__backend_scalars bc, bg;
    Lc->ops->get_scalars(Lc->be, &bc);
    Lg->ops->get_scalars(Lg->be, &bg);
    ct_check(sc.skipped > 0 && bg.skipped == bc.skipped && bg.updates == bc.updates,
             "resumed on cuda: skipped %llu updates %llu (cpu %llu, %llu)",
             (unsigned long long)bg.skipped, (unsigned long long)bg.updates,
             (unsigned long long)bc.skipped, (unsigned long long)bc.updates);
    (void)sg;
    ct_check(fhd__learner_train(Lc, 20, NULL) == FHD_OK &&
                 fhd__learner_train(Lg, 20, NULL) == FHD_OK,
             "train on");
    sc = stats_of(Lc);
    sg = stats_of(Lg);
    ct_check(sc.skipped == sg.skipped && sc.update_index == sg.update_index,
             "after resume: skipped %llu vs cpu %llu", (unsigned long long)sg.skipped,
             (unsigned long long)sc.skipped);
    /* cuda -> cuda: bit for bit */
    ct_check(fhd__checkpoint_save(Lg, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "cuda save: %s",
             Lg->err);
    fhd_learner *Lr = ct_create_cuda(cfg_of(1, "cuda", extra));
    ct_check(fhd__checkpoint_load(Lr, path, FHD_CKPT_INCLUDE_REPLAY) == FHD_OK, "cuda reload: %s",
             Lr->err);
    ct_check(fhd__learner_train(Lg, 25, NULL) == FHD_OK &&
                 fhd__learner_train(Lr, 25, NULL) == FHD_OK,
             "train both");
    const uint64_t P = Lc->lo.num_params;
    float *pa = ct_read_floats(Lg, FHD_STATE_PARAMS, 2 * P),
          *pb = ct_read_floats(Lr, FHD_STATE_PARAMS, 2 * P);
    fhd__backend_scalars sa, sb;
    Lg->ops->get_scalars(Lg->be, &sa);
    Lr->ops->get_scalars(Lr->be, &sb);
    ct_check(memcmp(pa, pb, sizeof(float) * 2 * P) == 0 && sa.skipped == sb.skipped &&
                 sa.updates == sb.updates,
             "cuda resume bit for bit: skipped %llu/%llu updates %llu/%llu",
             (unsigned long long)sa.skipped, (unsigned long long)sb.skipped,
             (unsigned long long)sa.updates, (unsigned long long)sb.updates);
    free(pa);
    free(pb);
    unlink(path);
    fhd__learner_destroy(Lc);
    fhd__learner_destroy(Lg);
    fhd__learner_destroy(Lr);
}

static size_t graph_nodes(fhd_learner *L, int v, int *last_is_commit) {
    cudaGraph_t g = NULL;
    ct_read(L, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
    size_t n = 0;
    if (!g || cudaGraphGetNodes(g, NULL, &n) != cudaSuccess)
        return 0;
    if (last_is_commit) { /* a kernel node named fhd_priority_commit_kernel with no successor */
        cudaGraphNode_t *all = (cudaGraphNode_t *)malloc(sizeof(cudaGraphNode_t) * n);
        cudaGraphGetNodes(g, all, &n);
        *last_is_commit = 0;
        for (size_t i = 0; i < n; i++) {
            enum cudaGraphNodeType t;
            size_t outs = 0;
            cudaGraphNodeGetType(all[i], &t);
            cudaGraphNodeGetDependentNodes(all[i], NULL, NULL, &outs);
            if (t != cudaGraphNodeTypeKernel || outs != 0)
                continue;
            struct cudaKernelNodeParams kp;
            memset(&kp, 0, sizeof kp);
            const char *fn = NULL;
            if (cudaGraphKernelNodeGetParams(all[i], &kp) == cudaSuccess &&
                cudaFuncGetName(&fn, kp.func) == cudaSuccess && fn &&
                strstr(fn, "fhd_priority_commit_kernel"))
                *last_is_commit = 1;
        }
        free(all);
    }
    return n;
}

static void test_nodes(const char *name, const char *extra, int per) {
    char with[512];
    snprintf(with, sizeof with, "%s, \"guard\": {\"max_grad_norm\": 1e6}", extra);
    fhd_learner *A = ct_create_cuda(cfg_of(0, "cuda", extra));
    fhd_learner *G = ct_create_cuda(cfg_of(1, "cuda", with));
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        if (per && v != FHD_CUDA_GRAPH_SINGLE)
            continue; /* the guard with PER samples inside its update: SINGLE only */
        const size_t na = graph_nodes(A, v, NULL);
        int commit = 0;
        const size_t ng = graph_nodes(G, v, &commit);
        if (!per) {
            ct_check(na > 0 && ng == na, "%s capture %d: %zu nodes with a guard, %zu without", name,
                     v, ng, na);
        } else if (v == FHD_CUDA_GRAPH_SINGLE) {
            ct_check(na > 0 && ng == na + 1 && commit,
                     "%s SINGLE: %zu nodes with a guard, %zu without (+1 expected), the priority "
                     "commit last: %d",
                     name, ng, na, commit);
        }
    }
    uint32_t K[2] = {4, 3};
    fhd_learner *Ls[1] = {G};
    ct_feed(Ls, 1, 2, 8, 2, K, 60, 9);
    const uint64_t s0 = ct_sync_count(G);
    for (int k = 0; k < 20; k++)
        ct_check(fhd__learner_train(G, 100, NULL) == FHD_OK, "%s: train", name);
    const uint64_t s1 = ct_sync_count(G);
    ct_check(s1 == s0, "%s: %llu synchronisations over 2,000 guarded updates", name,
             (unsigned long long)(s1 - s0));
    fhd__learner_destroy(A);
    fhd__learner_destroy(G);
}

int main(void) {
    ct_require_gpu();
    test_batch();
    test_train("uniform", ", \"guard\": {}", 0);
    test_train("per", ", \"replay\": \"prioritized\", \"guard\": {}", 0);
    test_train("per-sn", ", \"replay\": \"prioritized\", \"spectral_norm\": \"all\", \"guard\": {}",
               0);
    test_train("uniform-opt-two", ", \"guard\": {\"max_loss\": 1e25}", 8);
    test_train("per-opt-two", ", \"replay\": \"prioritized\", \"guard\": {}", 8);
    test_resume();
    test_nodes("uniform", "", 0);
    test_nodes("uniform-sn", ", \"spectral_norm\": \"all\"", 0);
    test_nodes("per", ", \"replay\": \"prioritized\"", 1);
    return ct_finish();
}
