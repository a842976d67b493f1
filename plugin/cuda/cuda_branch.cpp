/* cuda_branch.cpp - the measured choice of the head's dW branch (cuda_plan.h, hdw_measure).
 *
 * Where no rule decides whether the head's dW GEMM gets a graph branch of its own and the
 * autotune is on, both forms of the update are captured and the learner's own first updates
 * time them: train() runs its updates in chunks of at most FHD_BRANCH_CHUNK, the two forms
 * taking turns, each chunk between two timing events that are read once complete (never waited
 * for). When each form has FHD_BRANCH_SAMPLES timed chunks after its first, the form with the
 * lower median time per update is kept (the own branch only where it is faster by
 * FHD_BRANCH_MARGIN and FHD_BRANCH_MARGIN_US) and the other's graphs are freed. Both forms run the same kernels on the
 * same data in the same order of dependences, so which one runs changes no result.
 *
 * The choice is cached beside the GEMM picks (cuda_autotune_cache.cpp) under a key of the
 * device and libraries (the autotune's base) and the update's whole GEMM plan, and kept for the
 * process; with a hit the learner captures only that form.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "cuda_autotune.h"
#include "cuda_internal.h"

#define FHD_BRANCH_CHUNK 8    /* updates per timed chunk */
#define FHD_BRANCH_SAMPLES 8  /* timed chunks per form, after its first (a warm-up) */
#define FHD_BRANCH_SLOTS 32   /* chunks timed in flight */
#define FHD_BRANCH_MARGIN 0.005f  /* the own branch must be faster by this fraction */
#define FHD_BRANCH_MARGIN_US 0.5f /* and by this many microseconds */

/* The trial: the other form's graphs (form 1; form 0 is the plan's, in b->gexec), its own
 * batch sampling, the timing slots and the samples (us per update). */
struct fhd__cuda_branch {
    cudaGraph_t graph[FHD_CUDA_GRAPHS];
    cudaGraphExec_t gexec[FHD_CUDA_GRAPHS];
    int ahead[2]; /* each form's sample_ahead */
    cudaEvent_t ev[FHD_BRANCH_SLOTS][2];
    uint32_t n[FHD_BRANCH_SLOTS]; /* updates of the pending chunk; 0: free */
    int form[FHD_BRANCH_SLOTS];
    int seen[2], count[2], turn;
    float us[2][FHD_BRANCH_SAMPLES];
    char key[1024];
};

/* choices of this process, by key: "own|after us_after us_own" as in the cache file */
static std::mutex g_mu;
static std::map<std::string, std::string> g_choices;

/* The key: the device and libraries, then everything of the plan that shapes the graph (every
 * GEMM's shape and configuration, the fusions, the config's kernel-level switches), hashed. */
static std::string branch_key(const fhd__backend *b) {
    const fhd__cuda_plan *p = &b->plan;
    const fhd__config *c = &b->cfg;
    std::string s;
    char buf[320];
    for (int i = 0; i < p->ngemm; i++) {
        const fhd__gemm_choice *g = &p->gemm[i];
        snprintf(buf, sizeof buf, "%s:%u,%u,%u,%s,%u,%d,%d,%d,%d,%d,%d,%d:%d,%d,%d,%d,%d,%d,%d,%d,%d;",
                 g->site, g->m, g->n, g->k, g->op, g->batch, g->tf32, g->bf16, g->epilogue,
                 g->fallback, g->narrow, g->transpose, g->beside, g->algo, g->tile, g->stages,
                 g->splitk, g->reduction, g->swizzle, g->custom, g->inner_shape, g->cluster_shape);
        s += buf;
    }
    snprintf(buf, sizeof buf,
             "L=%u NC=%u B=%u fuse=%d,%d,%d,%d,%d prune=%d replay=%d guard=%d sn=%u cql=%d "
             "detail=%d div=%d loss=%d polyak=%d n_step=%u",
             p->layers, p->conv_layers, c->batch_size, p->pair_fwd0, p->head_in_loss,
             p->head_narrow_on, p->head_narrow_tg, p->pad_head, p->prune, (int)c->replay,
             c->guard.on, b->lo.num_sn, c->cql_alpha > 0, c->detailed_metrics,
             c->diversity_coef > 0, (int)c->loss, c->tau < 1.0, c->n_step);
    s += buf;
    char key[1024];
    snprintf(key, sizeof key, "%s|head-dw-branch update=%016llx", b->tune->key_base.c_str(),
             (unsigned long long)fnv1a(s));
    return key;
}

/* "own|after us_after us_own" into the plan; false if unreadable */
static bool apply_value(fhd__backend *b, const std::string &v) {
    char form[16];
    float ua = 0, uo = 0;
    if (sscanf(v.c_str(), "%15s %f %f", form, &ua, &uo) != 3)
        return false;
    const int own = strcmp(form, "own") == 0;
    if (!own && strcmp(form, "after") != 0)
        return false;
    fhd__cuda_plan_branch(&b->plan, &b->lo, &b->cfg, own);
    b->plan.hdw_from = FHD_BRANCH_CACHE;
    b->plan.hdw_us[0] = ua;
    b->plan.hdw_us[1] = uo;
    return true;
}

int32_t fhd__cuda_branch_prepare(fhd__backend *b) {
    if (!b->plan.hdw_measure || !b->tune)
        return FHD_OK;
    fhd__autotune *t = b->tune;
    const std::string key = branch_key(b);
    /* the cache file's choice, then this process's */
    auto line = t->lines.find(key);
    if (line != t->lines.end()) {
        const std::string &l = line->second;
        const size_t t1 = l.find('\t'), t2 = l.rfind('\t');
        if (!l.empty() && t2 > t1 && apply_value(b, l.substr(t1 + 1, t2 - t1 - 1))) {
            std::lock_guard<std::mutex> lock(g_mu);
            g_choices[key] = l.substr(t1 + 1, t2 - t1 - 1);
            return FHD_OK;
        }
        if (t->why_ignored.empty())
            t->why_ignored = l.empty() ? "head dW branch: checksum mismatch"
                                       : "head dW branch: unreadable choice";
        t->lines.erase(line);
    }
    {
        std::lock_guard<std::mutex> lock(g_mu);
        auto it = g_choices.find(key);
        if (it != g_choices.end() && apply_value(b, it->second)) {
            fhd__autotune_line(t, key, it->second); /* the file gets it back */
            return FHD_OK;
        }
    }
    fhd__cuda_branch *br = (fhd__cuda_branch *)calloc(1, sizeof *br);
    if (!br)
        return fhd__cuda_failf(b, FHD_ERR_OUT_OF_MEMORY, "head dW branch: out of host memory");
    b->branch = br;
    snprintf(br->key, sizeof br->key, "%s", key.c_str());
    for (int k = 0; k < FHD_BRANCH_SLOTS; k++)
        for (int e = 0; e < 2; e++)
            FHD_CK(b, cudaEventCreate(&br->ev[k][e]));
    b->plan.hdw_from = FHD_BRANCH_MEASURING;
    return FHD_OK;
}

/* End the trial: its graphs (the losing form's), events and state freed. */
static void finish(fhd__backend *b) {
    fhd__cuda_branch *br = b->branch;
    if (!br)
        return;
    fhd__cuda_graphs_free(br->graph, br->gexec);
    for (int k = 0; k < FHD_BRANCH_SLOTS; k++)
        for (int e = 0; e < 2; e++)
            if (br->ev[k][e])
                cudaEventDestroy(br->ev[k][e]);
    (void)cudaGetLastError();
    free(br);
    b->branch = NULL;
}

void fhd__cuda_branch_destroy(fhd__backend *b) {
    finish(b);
}

void fhd__cuda_branch_drop_graphs(fhd__backend *b) {
    if (b->branch)
        fhd__cuda_graphs_free(b->branch->graph, b->branch->gexec);
}

/* swap the plan's graphs with the trial's */
static void swap_graphs(fhd__backend *b) {
    fhd__cuda_branch *br = b->branch;
    for (int v = 0; v < FHD_CUDA_GRAPHS; v++) {
        std::swap(b->graph[v], br->graph[v]);
        std::swap(b->gexec[v], br->gexec[v]);
    }
}

int32_t fhd__cuda_branch_capture(fhd__backend *b) {
    fhd__cuda_branch *br = b->branch;
    if (!br)
        return FHD_OK;
    fhd__cuda_graphs_free(br->graph, br->gexec);
    const int form0 = b->plan.hdw_side;
    br->ahead[0] = b->plan.sample_ahead;
    fhd__cuda_plan_branch(&b->plan, &b->lo, &b->cfg, !form0);
    br->ahead[1] = b->plan.sample_ahead;
    swap_graphs(b); /* the plan's slots empty: the other form is captured into them */
    const int32_t rc = fhd__cuda_capture_graphs(b);
    swap_graphs(b);
    fhd__cuda_plan_branch(&b->plan, &b->lo, &b->cfg, form0);
    if (rc != FHD_OK) { /* the plan's form stays, unmeasured: not an error of the learner */
        b->err[0] = '\0';
        b->plan.hdw_from = FHD_BRANCH_RULE;
        finish(b);
    }
    return FHD_OK;
}

static float median(float *v, int n) {
    std::sort(v, v + n);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Keep the faster form: the own branch (form 1 where the plan's is after the priority update,
 * else 0) only where it is faster by the margin. Never waits. */
static void decide(fhd__backend *b) {
    fhd__cuda_branch *br = b->branch;
    const float m0 = median(br->us[0], br->count[0]), m1 = median(br->us[1], br->count[1]);
    const int own_form = b->plan.hdw_side ? 0 : 1;
    const float us_own = own_form ? m1 : m0, us_after = own_form ? m0 : m1;
    const int keep_own = us_own < (1.0f - FHD_BRANCH_MARGIN) * us_after - FHD_BRANCH_MARGIN_US;
    if ((keep_own ? own_form : 1 - own_form) == 1) {
        swap_graphs(b);
        fhd__cuda_plan_branch(&b->plan, &b->lo, &b->cfg, !b->plan.hdw_side);
    }
    b->plan.hdw_from = FHD_BRANCH_MEASURED;
    b->plan.hdw_us[0] = us_after;
    b->plan.hdw_us[1] = us_own;
    char v[64];
    snprintf(v, sizeof v, "%s %.3f %.3f", keep_own ? "own" : "after", us_after, us_own);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        g_choices[br->key] = v;
    }
    fhd__autotune_cache_store(b, br->key, v);
    finish(b);
}

/* Take the completed chunks' times (never waits); decide once both forms have enough. */
static int32_t poll(fhd__backend *b) {
    fhd__cuda_branch *br = b->branch;
    for (int k = 0; k < FHD_BRANCH_SLOTS; k++) {
        if (br->n[k] == 0)
            continue;
        float ms = 0.0f;
        cudaError_t e = cudaEventQuery(br->ev[k][1]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* not done yet: keep the last-error slot clean */
            continue;
        }
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, br->ev[k][0], br->ev[k][1]);
        if (e != cudaSuccess)
            return fhd__cuda_fail(b, e, __FILE__, __LINE__, "head dW branch timing");
        const int f = br->form[k];
        if (br->seen[f]++ > 0 && br->count[f] < FHD_BRANCH_SAMPLES)
            br->us[f][br->count[f]++] = 1e3f * ms / (float)br->n[k];
        br->n[k] = 0;
    }
    if (br->count[0] >= FHD_BRANCH_SAMPLES && br->count[1] >= FHD_BRANCH_SAMPLES)
        decide(b);
    return FHD_OK;
}

int32_t fhd__cuda_branch_train(fhd__backend *b, uint32_t n) {
    if (b->branch)
        FHD_TRY(poll(b));
    fhd__cuda_branch *br = b->branch;
    if (!br)
        return fhd__cuda_launch_updates(b, b->gexec, b->plan.sample_ahead, n);
    while (n > 0) {
        const uint32_t c = n < FHD_BRANCH_CHUNK ? n : FHD_BRANCH_CHUNK;
        const int f = br->turn;
        br->turn ^= 1;
        int slot = -1; /* untimed where every slot is still pending */
        for (int k = 0; k < FHD_BRANCH_SLOTS && slot < 0; k++)
            if (br->n[k] == 0)
                slot = k;
        if (slot >= 0)
            FHD_CK(b, cudaEventRecord(br->ev[slot][0], b->s_main));
        FHD_TRY(fhd__cuda_launch_updates(b, f ? br->gexec : b->gexec, br->ahead[f], c));
        if (slot >= 0) {
            FHD_CK(b, cudaEventRecord(br->ev[slot][1], b->s_main));
            br->n[slot] = c;
            br->form[slot] = f;
        }
        n -= c;
    }
    return FHD_OK;
}
