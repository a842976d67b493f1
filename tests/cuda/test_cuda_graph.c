/* test_cuda_graph.c - the structure of the captured update and a stall-free training loop.
 *
 * For each of the four captures of the update (cuda_ext.h, FHD_CUDA_GRAPH_*) of a B1-like
 * configuration (dueling, double DQN, PER) with spectral norm on every torso layer, and of the
 * same configuration without it (layer 0 of both networks in one batched GEMM):
 *   - the update was captured (cudaStreamCaptureModeGlobal, at create) into one graph;
 *   - no memcpy node at all, so none between parameter copies;
 *   - no kernel node of ours (fhd_*) has a 1x1x1 grid;
 *   - spectral norm takes exactly 2 kernel nodes; gradient norm, clipping and Adam one (a
 *     cooperative launch) where the device supports cooperative launches;
 *   - memset nodes are listed with their targets; none writes the parameters, gradient or
 *     Adam moments;
 *   - the loss kernel joins two branches: the target forward runs beside the online forward;
 *     the gradient-norm kernel joins the dW GEMMs' branch and follows the loss scalars but not
 *     the priority update (the tree's update joins after the optimiser); with spectral norm and batches
 *     sampled ahead the target forward does not wait for the power iteration's second pass
 *     (and on B3, which samples inside the update, the plan says it does);
 *   - on sm_90 the loss kernel hangs on a programmatic edge (it starts its own loads while the
 *     head's forward finishes), and below sm_90 there are no such edges;
 *   - the loss kernel's two predecessors descend from a common kernel node: the two narrow
 *     head forwards, or on B1 (both heads computed by the loss kernel) the last torso layers'
 *     GEMMs, with no narrow head kernel in the graph;
 *   - the sampling kernel is where the variant puts it: before the loss when the update samples
 *     its own batch; for the next update's batch, after the loss, the priority update and
 *     every GEMM but the head's dW, and beside the optimiser;
 *   - the backend does no synchronisation across 10,000 updates driven through the front
 *     (fhd__learner_train, which also queries the replay size), and the device counter shows
 *     all of them done: for both configurations, each through its first, steady and last
 *     captures.
 * The configuration without spectral norm's steady-state graph is written to $FHD_GRAPH_DOT
 * (Graphviz) when that variable is set.
 */
#include "cuda_test.h"

#define MAXN 4096

typedef struct node_info {
    cudaGraphNode_t node;
    enum cudaGraphNodeType type;
    char name[160];
    int ours;
    dim3 grid;
} node_info;

static node_info nodes[MAXN];
static size_t nn;
static cudaGraphNode_t efrom[4 * MAXN], eto[4 * MAXN];
static cudaGraphEdgeData edata[4 * MAXN]; /* programmatic edges carry data: asked for with them */
static size_t ne;

static int find(cudaGraphNode_t n) {
    for (size_t i = 0; i < nn; i++)
        if (nodes[i].node == n)
            return (int)i;
    return -1;
}

/* reach[i] = 1 for every ancestor of node t (not t itself) */
static void ancestors(int t, char *reach) {
    memset(reach, 0, nn);
    int stack[MAXN], sp = 0;
    stack[sp++] = t;
    while (sp) {
        int x = stack[--sp];
        for (size_t e = 0; e < ne; e++)
            if (eto[e] == nodes[x].node) {
                int f = find(efrom[e]);
                if (f >= 0 && !reach[f]) {
                    reach[f] = 1;
                    stack[sp++] = f;
                }
            }
    }
}

/* Kernel nodes strictly between nodes `from` and `to` (descendants of from, ancestors of to)
 * that include two nodes on parallel branches (neither reaches the other). */
static int parallel_between(int from, int to, const char *what) {
    static char anc_to[MAXN], anc_x[MAXN];
    static int between[MAXN];
    int nb = 0;
    ancestors(to, anc_to);
    for (size_t x = 0; x < nn; x++) {
        if (!anc_to[x] || nodes[x].type != cudaGraphNodeTypeKernel || (int)x == from)
            continue;
        ancestors((int)x, anc_x);
        if (from < 0 || anc_x[from])
            between[nb++] = (int)x;
    }
    int pairs = 0;
    for (int i = 0; i < nb; i++) {
        ancestors(between[i], anc_x);
        for (int j = 0; j < nb; j++)
            if (j != i && !anc_x[between[j]]) {
                static char anc_j[MAXN];
                ancestors(between[j], anc_j);
                if (!anc_j[between[i]])
                    pairs++;
            }
    }
    printf("       %s: %d kernel nodes, %d ordered pairs on parallel branches\n", what, nb, pairs);
    return pairs > 0;
}

/* The structure of one captured variant of the update (cuda_ext.h, FHD_CUDA_GRAPH_*). */
static void inspect(fhd_learner *L, int v, const uint64_t *dp, int sn_nodes, int fork_sn1,
                    int head_in_loss) {
    static const char *names[FHD_CUDA_GRAPHS] = {"single", "first", "steady", "last"};
    const char *vn = names[v];
    cudaGraph_t g = NULL;
    ct_read(L, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
    ct_check(g != NULL, "%s: the update was captured into a graph (global capture mode, at create)",
             vn);
    if (!g)
        return;
    printf("  graph %s:\n", vn);

    nn = MAXN;
    cudaGraphNode_t raw[MAXN];
    cudaError_t e = cudaGraphGetNodes(g, raw, &nn);
    ct_check(e == cudaSuccess && nn < MAXN, "%s: cudaGraphGetNodes: %zu nodes", vn, nn);
    ne = 4 * MAXN;
    e = cudaGraphGetEdges(g, efrom, eto, edata, &ne);
    ct_check(e == cudaSuccess, "%s: cudaGraphGetEdges: %zu edges", vn, ne);
    int n_kernel = 0, n_memcpy = 0, n_memset = 0, n_other = 0, n_sn = 0, ours_1x1 = 0;
    int n_ours = 0, loss = -1, norm = -1, memset_bad = 0, first_sn = -1, last_sn = -1, n_opt = 0;
    int samples[4], n_sample = 0, prio = -1, scal = -1, n_lib = 0, relu_dw = -1, n_narrow = 0;
    for (size_t i = 0; i < nn; i++) {
        node_info *ni = &nodes[i];
        ni->node = raw[i];
        cudaGraphNodeGetType(raw[i], &ni->type);
        snprintf(ni->name, sizeof ni->name, "?");
        if (ni->type == cudaGraphNodeTypeKernel) {
            n_kernel++;
            struct cudaKernelNodeParams kp;
            memset(&kp, 0, sizeof kp);
            if (cudaGraphKernelNodeGetParams(raw[i], &kp) == cudaSuccess) {
                const char *nm = NULL;
                ni->grid = kp.gridDim;
                if (kp.func && cudaFuncGetName(&nm, kp.func) == cudaSuccess && nm)
                    snprintf(ni->name, sizeof ni->name, "%s", nm);
                else
                    snprintf(ni->name, sizeof ni->name, "(library kernel)");
            } else {
                snprintf(ni->name, sizeof ni->name, "(library kernel)");
            }
            (void)cudaGetLastError();
            ni->ours = strstr(ni->name, "fhd_") != NULL;
            n_lib += !ni->ours;
            if (ni->ours) {
                n_ours++;
                if (ni->grid.x * ni->grid.y * ni->grid.z == 1)
                    ours_1x1++;
                if (strstr(ni->name, "fhd_sn_kernel")) {
                    n_sn++;
                    last_sn = (int)i;
                }
                if (strstr(ni->name, "fhd_td_loss_kernel"))
                    loss = (int)i;
                if (strstr(ni->name, "fhd_narrow_linear_kernel"))
                    n_narrow++;
                if (strstr(ni->name, "fhd_sample_gather_kernel") && n_sample < 4)
                    samples[n_sample++] = (int)i;
                if (strstr(ni->name, "fhd_priority_update_kernel"))
                    prio = (int)i;
                if (strstr(ni->name, "fhd_loss_scalars_kernel"))
                    scal = (int)i;
                if (strstr(ni->name, "fhd_relu_backward_dw_kernel"))
                    relu_dw = (int)i;
                if (strstr(ni->name, "fhd_clip_grad_norm_kernel") ||
                    strstr(ni->name, "fhd_opt_fused_kernel"))
                    norm = (int)i;
                if (strstr(ni->name, "fhd_clip_grad_norm_kernel") ||
                    strstr(ni->name, "fhd_adam_step_kernel") ||
                    strstr(ni->name, "fhd_opt_fused_kernel"))
                    n_opt++;
            }
            printf("       kernel %-60.60s grid %ux%ux%u\n", ni->name, ni->grid.x, ni->grid.y,
                   ni->grid.z);
        } else if (ni->type == cudaGraphNodeTypeMemcpy) {
            n_memcpy++;
        } else if (ni->type == cudaGraphNodeTypeMemset) {
            n_memset++;
            struct cudaMemsetParams mp;
            memset(&mp, 0, sizeof mp);
            cudaGraphMemsetNodeGetParams(raw[i], &mp);
            uint64_t a = (uint64_t)(uintptr_t)mp.dst;
            int hits = 0;
            for (int k = 0; k < FHD_CUDA_DEVPTR_COUNT; k += 2)
                if (a >= dp[k] && a < dp[k] + dp[k + 1])
                    hits = 1;
            memset_bad += hits;
            printf("       memset node: dst %p, %zu x %zu elements of %u bytes, value %u%s\n",
                   mp.dst, mp.width, mp.height, mp.elementSize, mp.value,
                   hits ? " (in the parameter/optimiser buffers!)" : " (library workspace)");
        } else {
            n_other++;
        }
    }
    printf("       %zu nodes: %d kernels (%d ours), %d memcpy, %d memset, %d other\n", nn, n_kernel,
           n_ours, n_memcpy, n_memset, n_other);
    ct_check(n_memcpy == 0, "%s: no memcpy node (so none between parameter copies): %d", vn, n_memcpy);
    ct_check(ours_1x1 == 0, "%s: no kernel node of ours with a 1x1x1 grid (%d found)", vn,
             ours_1x1);
    int coop = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0);
    ct_check(n_opt == (coop ? 1 : 2),
             "%s: clipping and Adam in %d kernel node(s) (one cooperative launch where the device has "
             "them: %s)", vn, n_opt, coop ? "yes" : "no");
    ct_check(n_sn == sn_nodes,
             "%s: spectral norm of both torso layers (online and target) in %d kernel nodes "
             "(%d expected)", vn, n_sn, sn_nodes);
    ct_check(memset_bad == 0, "%s: no memset node writes parameters, gradient, Adam or SN state (%d)",
             vn, memset_bad);
    /* the power iteration's first pass: the SN node the other descends from */
    if (n_sn == 2) {
        static char anc_sn[MAXN];
        for (size_t i = 0; i < nn; i++)
            if ((int)i != last_sn && strstr(nodes[i].name, "fhd_sn_kernel"))
                first_sn = (int)i;
        ancestors(first_sn, anc_sn);
        if (anc_sn[last_sn]) { /* found in the other order */
            const int t = first_sn;
            first_sn = last_sn;
            last_sn = t;
        }
        ancestors(last_sn, anc_sn);
        ct_check(anc_sn[first_sn], "%s: the power iteration's second pass follows its first", vn);
    }
    ct_check(loss >= 0 && parallel_between(fork_sn1 ? first_sn : last_sn, loss,
                                           "spectral norm -> loss"),
             "%s: target(s') forward runs on a branch parallel to the online forward", vn);
    if (n_sn == 2 && loss >= 0) {
        /* GEMMs before the loss that the first pass precedes and the second does not: the
         * target's, forked after the first pass (fork_sn1) */
        static char anc_loss[MAXN], anc_x[MAXN];
        int early = 0;
        ancestors(loss, anc_loss);
        for (size_t x = 0; x < nn; x++) {
            if (!anc_loss[x] || nodes[x].type != cudaGraphNodeTypeKernel || nodes[x].ours)
                continue;
            ancestors((int)x, anc_x);
            early += first_sn >= 0 && anc_x[first_sn] && !anc_x[last_sn];
        }
        ct_check(fork_sn1 ? early > 0 : early == 0,
                 "%s: %d GEMMs of the forward wait for the power iteration's first pass only "
                 "(the target's forward forks %s)", vn, early,
                 fork_sn1 ? "after the first pass" : "after both");
    }
    ct_check(loss >= 0 && norm >= 0 && parallel_between(loss, norm, "loss -> gradient norm"),
             "%s: the dW GEMMs run on a branch parallel to the dx chain", vn);
    /* sm_90: the loss kernel starts while the head's forward finishes (it waits for its data) */
    int major = 0, n_prog_loss = 0, n_prog = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    for (size_t k = 0; k < ne; k++) {
        if (edata[k].type != cudaGraphDependencyTypeProgrammatic)
            continue;
        n_prog++;
        if (loss >= 0 && eto[k] == nodes[loss].node)
            n_prog_loss++;
    }
    if (major >= 9)
        ct_check(n_prog_loss >= 1,
                 "%s: the loss kernel is a programmatic dependent of the kernel before it (%d "
                 "such edges into it, %d in the graph)", vn, n_prog_loss, n_prog);
    else
        ct_check(n_prog == 0, "%s: no programmatic edges below sm_90 (%d)", vn, n_prog);
    /* The loss kernel's predecessors (the two head forwards) descend from a common kernel: with
     * the two forwards as separate roots of the graph the executor gave up the loss kernel's
     * programmatic early start (measured: a 1.5 us gap and its PER weights on the path) */
    if (loss >= 0) {
        static char anc_a[MAXN], anc_b[MAXN];
        int preds[8], np = 0, common = 0;
        for (size_t k = 0; k < ne && np < 8; k++)
            if (eto[k] == nodes[loss].node)
                preds[np++] = find(efrom[k]);
        if (np == 2 && preds[0] >= 0 && preds[1] >= 0) {
            ancestors(preds[0], anc_a);
            ancestors(preds[1], anc_b);
            for (size_t x = 0; x < nn; x++)
                common += anc_a[x] && anc_b[x] && nodes[x].type == cudaGraphNodeTypeKernel;
        }
        ct_check(np == 2 && common > 0,
                 "%s: the loss kernel's %d predecessors descend from %d common kernel node(s)", vn,
                 np, common);
        /* which they are: the last torso layers' GEMMs when the loss kernel computes both
         * heads (head_in_loss), else the two narrow head kernels */
        int n_gemm_pred = 0, n_narrow_pred = 0;
        for (int k = 0; k < np; k++) {
            if (preds[k] < 0 || nodes[preds[k]].type != cudaGraphNodeTypeKernel)
                continue;
            n_gemm_pred += !nodes[preds[k]].ours;
            n_narrow_pred += strstr(nodes[preds[k]].name, "fhd_narrow_linear_kernel") != NULL;
        }
        if (head_in_loss)
            ct_check(n_narrow == 0 && n_gemm_pred == 2,
                     "%s: heads in the loss kernel: %d narrow head kernels, %d of its %d "
                     "predecessors are GEMMs", vn, n_narrow, n_gemm_pred, np);
        else
            ct_check(n_narrow == 2 && n_narrow_pred == 2,
                     "%s: %d narrow head kernels, %d of them before the loss kernel", vn,
                     n_narrow, n_narrow_pred);
    }
    /* sampling: in the update (before the loss) and ahead (for the next update, at the end),
     * ahead in two launches: the descent with every row but the obs rows, then those */
    const int in_update = v == FHD_CUDA_GRAPH_SINGLE || v == FHD_CUDA_GRAPH_FIRST;
    const int ahead = v == FHD_CUDA_GRAPH_FIRST || v == FHD_CUDA_GRAPH_STEADY;
    ct_check(n_sample == in_update + 2 * ahead, "%s: %d sampling kernel node(s), %d expected", vn,
             n_sample, in_update + 2 * ahead);
    static char anc_loss[MAXN], anc_s[MAXN], anc_norm[MAXN], anc_desc[MAXN];
    int n_before = 0, n_after = 0, after[2];
    ct_check(scal >= 0, "%s: a loss scalars node", vn);
    if (loss >= 0 && norm >= 0 && prio >= 0 && scal >= 0 && n_sample == in_update + 2 * ahead) {
        ancestors(loss, anc_loss);
        ancestors(norm, anc_norm);
        /* the optimiser reads the loss scalars; the tree's update runs beside it */
        ct_check(anc_norm[scal] && !anc_norm[prio],
                 "%s: the optimiser follows the loss scalars (%d) and not the priority update "
                 "(%d)", vn, anc_norm[scal], anc_norm[prio]);
        for (int k = 0; k < n_sample; k++) {
            if (anc_loss[samples[k]]) {
                n_before++;
                continue;
            }
            if (n_after < 2)
                after[n_after] = samples[k];
            n_after++;
        }
        ct_check(n_before == in_update && n_after == 2 * ahead,
                 "%s: %d sampling node(s) before the loss, %d after it", vn, n_before, n_after);
    }
    if (ahead && n_after == 2) {
        /* the obs-row launch is the one that descends from the other */
        ancestors(after[1], anc_s);
        const int obs = anc_s[after[0]] ? after[1] : after[0], desc = obs == after[1] ? after[0]
                                                                                   : after[1];
        ancestors(obs, anc_s);
        ancestors(desc, anc_desc);
        ct_check(anc_s[desc], "%s: the obs rows ahead are gathered after the descent", vn);
        /* both after the tree's last writer, beside the optimiser (neither before nor after
         * it); the descent not after the batch's last readers, the obs rows after them. Layer
         * 0's dW reads the batch last: with GEMMs for it (here split in halves, and the head's
         * dW precedes the sampling on its stream), every GEMM kernel must be an ancestor of
         * the obs rows' launch, or one half's wait would be missing; with its partials made by
         * layer 0's ReLU backward (fuse_dw0), that kernel */
        ct_check(anc_desc[prio] && anc_desc[scal] && anc_desc[loss],
                 "%s: the descent ahead follows the loss, its scalars and the priority update",
                 vn);
        if (relu_dw >= 0) {
            ct_check(anc_s[relu_dw] && !anc_desc[relu_dw],
                     "%s: the obs rows ahead follow layer 0's ReLU backward with its dW "
                     "partials, the descent does not wait for it", vn);
        } else {
            int gemms = 0, gemms_desc = 0;
            for (size_t x = 0; x < nn; x++) {
                const int lib = nodes[x].type == cudaGraphNodeTypeKernel && !nodes[x].ours;
                gemms += lib && anc_s[x];
                gemms_desc += lib && anc_desc[x];
            }
            ct_check(gemms == n_lib && gemms_desc < n_lib,
                     "%s: the obs rows ahead follow all %d GEMM kernels (%d), the descent %d of "
                     "them", vn, n_lib, gemms, gemms_desc);
        }
        ct_check(!anc_s[norm] && !anc_norm[obs] && !anc_desc[norm] && !anc_norm[desc],
                 "%s: the sampling ahead runs beside the optimiser", vn);
    }
    const char *dot = getenv("FHD_GRAPH_DOT");
    if (dot && *dot && v == FHD_CUDA_GRAPH_STEADY)
        cudaGraphDebugDotPrint(g, dot, cudaGraphDebugDotFlagsKernelNodeParams);

}

/* 10,000 updates through the front (train(100) calls: with batches sampled ahead, the first,
 * steady and last captures) without a synchronisation by the backend, and the device counter
 * shows them all done; the learner's invariants hold after them. */
static void no_sync_loop(fhd_learner *L, const char *name) {
    const uint32_t K[1] = {8};
    fhd_learner *Ls[1] = {L};
    ct_feed(Ls, 1, 64, 64, 1, K, 100, 77);
    const uint64_t c0 = ct_sync_count(L);
    double t0 = ct_now();
    int ok = 1;
    for (int r = 0; r < 100 && ok; r++) {
        fhd_train_stats st = FHD_TRAIN_STATS_INIT;
        ok = fhd__learner_train(L, 100, &st) == FHD_OK && st.updates_done == 100;
    }
    double t1 = ct_now();
    const uint64_t c1 = ct_sync_count(L);
    ct_check(ok, "%s: 10,000 updates through fhd__learner_train (%s)", name, ok ? "" : L->err);
    ct_check(c1 == c0, "%s: no synchronisation by the backend during them (%llu before, %llu after)",
             name, (unsigned long long)c0, (unsigned long long)c1);
    uint64_t info[FHD_CUDA_INFO_COUNT];
    ct_read(L, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info);
    double t2 = ct_now();
    ct_check(info[FHD_CUDA_INFO_UPDATES_DEVICE] == 10000, "%s: the device counter says %llu updates",
             name, (unsigned long long)info[FHD_CUDA_INFO_UPDATES_DEVICE]);
    printf("       %s: host enqueue %.1f us/update, with completion %.1f us/update; %llu GEMMs "
           "without a bias epilogue\n",
           name, (t1 - t0) * 1e6 / 10000, (t2 - t0) * 1e6 / 10000,
           (unsigned long long)info[FHD_CUDA_INFO_GEMM_FALLBACKS]);
    fhd__update_stats us;
    L->ops->latest_stats(L->be, &us);
    ct_check(us.update_index == 10000 && isfinite(us.loss) && isfinite(us.grad_norm),
             "%s: statistics of update %llu: loss %g, grad norm %g", name,
             (unsigned long long)us.update_index, us.loss, us.grad_norm);
    char msg[256] = {0};
    ct_check(L->ops->check_invariants(L->be, msg, sizeof msg) == FHD_OK, "%s: invariants hold (%s)",
             name, msg);
}

int main(void) {
    ct_require_gpu();
    const char *fmt = "{\"backend\": \"cuda\", \"obs_dim\": 64, \"hidden\": [256, 256], "
                      "\"actions\": [8], \"dueling\": true, \"double_dqn\": true, "
                      "\"batch_size\": 256, \"replay_capacity\": 65536, \"replay\": "
                      "\"prioritized\", \"spectral_norm\": \"%s\", \"lr\": 0.0001, "
                      "\"max_grad_norm\": 10, \"target_update_interval\": 1000, \"num_envs\": 64, "
                      "\"learning_starts\": 0, \"seed\": 3}";
    char json[1024];
    snprintf(json, sizeof json, fmt, "all");
    fhd_learner *L = ct_create_cuda(json);
    printf("device: %s\n", L->ops->device_name(L->be));
    uint64_t dp[FHD_CUDA_DEVPTR_COUNT];
    ct_read(L, FHD_CUDA_STATE_DEVPTRS, 0, FHD_CUDA_DEVPTR_COUNT, dp);
    /* with spectral norm on a B1-sized network batches are sampled ahead too (the head's dW on
     * a branch of its own), four captures; on B3 (below) sampling runs beside the spectral norm
     * in the one capture */
    uint64_t info_sn[FHD_CUDA_INFO_COUNT];
    ct_read(L, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, info_sn);
    ct_check(info_sn[FHD_CUDA_INFO_FORK_SN1] == 1,
             "spectral norm, batches sampled ahead: the target forward forks after the power "
             "iteration's first pass (%llu)", (unsigned long long)info_sn[FHD_CUDA_INFO_FORK_SN1]);
    ct_check(info_sn[FHD_CUDA_INFO_HEAD_IN_LOSS] == 1,
             "B1-sn: both head forwards inside the loss kernel (%llu)",
             (unsigned long long)info_sn[FHD_CUDA_INFO_HEAD_IN_LOSS]);
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++)
        inspect(L, v, dp, 2, 1, 1);
    {   /* B1 without spectral norm: layer 0 of both networks in one batched GEMM, the first node
         * of the captures whose batch was sampled ahead */
        char plain[1024];
        snprintf(plain, sizeof plain, fmt, "none");
        fhd_learner *Lp = ct_create_cuda(plain);
        uint64_t inf[FHD_CUDA_INFO_COUNT], dpp[FHD_CUDA_DEVPTR_COUNT];
        ct_read(Lp, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, inf);
        ct_check(inf[FHD_CUDA_INFO_PAIRED_FWD0] == 1,
                 "without spectral norm: layer 0 of both networks in one batched GEMM (%llu)",
                 (unsigned long long)inf[FHD_CUDA_INFO_PAIRED_FWD0]);
        /* B3 with autotune "off": every GEMM by the rule (cuda_gemm.cpp), none measured */
        fhd_learner *L3 = ct_create_cuda(
            "{\"backend\": \"cuda\", \"obs_dim\": 64, \"hidden\": [512, 512], "
            "\"actions\": [5, 5, 5, 5], \"dueling\": true, \"double_dqn\": true, "
            "\"batch_size\": 1024, \"replay_capacity\": 65536, \"replay\": \"prioritized\", "
            "\"spectral_norm\": \"all\", \"learning_starts\": 0, \"seed\": 3, "
            "\"autotune\": \"off\"}");
        uint64_t inf3[FHD_CUDA_INFO_COUNT];
        ct_read(L3, FHD_CUDA_STATE_INFO, 0, FHD_CUDA_INFO_COUNT, inf3);
        for (int v = FHD_CUDA_GRAPH_FIRST; v < FHD_CUDA_GRAPHS; v++) {
            cudaGraph_t g = (cudaGraph_t)1;
            ct_read(L3, FHD_CUDA_STATE_GRAPH, (uint64_t)v, 1, &g);
            ct_check(g == NULL, "B3: no capture with batches sampled ahead (%d)", v);
        }
        ct_check(inf3[FHD_CUDA_INFO_FORK_SN1] == 0 && inf[FHD_CUDA_INFO_FORK_SN1] == 0,
                 "the target forward after both passes on B3 (%llu), no early fork without "
                 "spectral norm (%llu)", (unsigned long long)inf3[FHD_CUDA_INFO_FORK_SN1],
                 (unsigned long long)inf[FHD_CUDA_INFO_FORK_SN1]);
        uint64_t dp3[FHD_CUDA_DEVPTR_COUNT];
        ct_read(L3, FHD_CUDA_STATE_DEVPTRS, 0, FHD_CUDA_DEVPTR_COUNT, dp3);
        printf("B3 (spectral norm, sampling inside the update):\n");
        /* B3's two W_head (21 x 512 each) exceed FHD_LOSS_HEAD_SMEM: narrow head kernels */
        ct_check(inf3[FHD_CUDA_INFO_HEAD_IN_LOSS] == 0 && inf[FHD_CUDA_INFO_HEAD_IN_LOSS] == 1,
                 "head forwards inside the loss kernel: B3 %llu (0 expected), B1 %llu (1)",
                 (unsigned long long)inf3[FHD_CUDA_INFO_HEAD_IN_LOSS],
                 (unsigned long long)inf[FHD_CUDA_INFO_HEAD_IN_LOSS]);
        inspect(L3, FHD_CUDA_GRAPH_SINGLE, dp3, 2, 0, 0);
        ct_check(inf3[FHD_CUDA_INFO_GEMM_TUNED] == 0,
                 "B3, autotune off: %llu GEMMs with another configuration than the rule's (0)",
                 (unsigned long long)inf3[FHD_CUDA_INFO_GEMM_TUNED]);
        /* layer 0's dW: the ReLU backward's partials for B1's two chunks of 128 rows, GEMMs for
         * B3's eight */
        ct_check(inf[FHD_CUDA_INFO_FUSED_DW0] == 1 && inf3[FHD_CUDA_INFO_FUSED_DW0] == 0,
                 "layer 0's dW by the ReLU backward on B1 (%llu), by GEMMs on B3 (%llu)",
                 (unsigned long long)inf[FHD_CUDA_INFO_FUSED_DW0],
                 (unsigned long long)inf3[FHD_CUDA_INFO_FUSED_DW0]);
        fhd__learner_destroy(L3);
        ct_read(Lp, FHD_CUDA_STATE_DEVPTRS, 0, FHD_CUDA_DEVPTR_COUNT, dpp);
        for (int v = 0; v < FHD_CUDA_GRAPHS; v++)
            inspect(Lp, v, dpp, 0, 0, 1);
        no_sync_loop(Lp, "no spectral norm (four captures)");
        fhd__learner_destroy(Lp);
    }

    no_sync_loop(L, "spectral norm (four captures)");
    fhd__learner_destroy(L);
    return ct_finish();
}
