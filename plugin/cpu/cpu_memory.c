/* cpu_memory.c - what the CPU backend allocates for a config, for its out-of-memory message. */
#include "cpu_memory.h"

#include <stdio.h>

/* Bytes the CPU backend allocates for a config, in four parts (the allocations of cpu_create,
 * summed the same way: keep the two in step). */
typedef struct cpu_need {
    double net;    /* parameters (online, target), gradient and its spare, Adam m and v: 6P;
                    * with bf16 GEMMs their rounded copy (online, target): 2P more */
    double sn;     /* spectral norm: u, v (both nets, and the saved online ones), W_sn */
    double batch;  /* activations and scratch of one update: B rows of every layer width */
    double replay; /* observations (two a slot, or each frame once), actions, returns,
                    * discounts, and the sum tree (2 leaves uint64) */
} cpu_need;

static cpu_need cpu_bytes(const fhd__config *cfg, const fhd__layout *lo) {
    const double B = cfg->batch_size, S = lo->S, D = lo->D, KT = lo->KT, W = lo->max_width;
    const double P = (double)lo->num_params, N = cfg->replay_capacity;
    const double ob = (double)fhd__config_obs_bytes(cfg); /* bytes of one observation row */
    double wsn = 0, act = 0, sn_tmp = W;
    for (uint32_t c = 0; c < lo->NC; c++) {
        const fhd__conv_layer *cv = &lo->conv[c];
        if (cv->sn)
            wsn += (double)cv->cout * cv->ckk;
        sn_tmp = cv->ckk > sn_tmp ? cv->ckk : sn_tmp;
        act += 2 * B * cv->cout * cv->hw; /* online(s) and online(s') */
    }
    for (uint32_t l = 0; l <= lo->L; l++) {
        if (l < lo->L && lo->layers[l].sn)
            wsn += (double)lo->layers[l].out * lo->layers[l].in;
        act += 2 * B * lo->layers[l].out; /* online(s) and online(s') */
    }
    cpu_need n;
    const int bf16 = cfg->matmul_precision == FHD_PREC_BF16;
    n.net = 4.0 * (bf16 ? 8 : 6) * P;
    n.sn = 4.0 * (3 * (double)lo->sn_size + 2 * wsn);
    /* ping-pongs, Q buffers, y, td, sn scratch, conv ping-pongs and im2col, float inputs,
     * the gathered batch (2B rows of ob bytes), returns/discounts/weights, indices, priorities */
    n.batch = 4.0 * (act + 4 * B * W + 5 * B * KT + B + B * D + sn_tmp) +
              (lo->NC ? 4.0 * (4 * B * lo->conv_max_act + 2.0 * lo->conv_max_col) : 0.0) +
              (lo->NC == 0 && (cfg->obs_dtype == FHD_OBS_UINT8 ||
                               fhd__config_obs_scale(cfg) != 1.0f || bf16)
                   ? 4.0 * 3 * B * S
                   : 0.0) +
              2 * B * ob + 4.0 * (3 * B + B * D + B) + 8.0 * 2 * B;
    double leaves = 1;
    while (leaves < N)
        leaves *= 2;
    /* observations: each frame once (image observations) or obs and next_obs per slot */
    const double fk = cfg->frame_stack ? cfg->frame_stack : 1;
    const double obs = cfg->num_obs_shape
                           ? (double)fhd__config_frame_capacity(cfg) * (ob / fk + 8) + 2 * N * fk * 8
                           : 2 * N * ob;
    n.replay = obs + 4.0 * N * (D + 2) +
               (cfg->replay == FHD_REPLAY_PRIORITIZED ? 8.0 * 2 * leaves : 0.0);
    return n;
}

/* "12.3 MiB", "1.5 GiB", "2.0 TiB" */
static const char *human(double bytes, char *buf, size_t cap) {
    const char *unit[4] = {"KiB", "MiB", "GiB", "TiB"};
    double v = bytes / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

void fhd__cpu_oom_message(const fhd__config *cfg, const fhd__layout *lo, char *msg, size_t cap) {
    const cpu_need n = cpu_bytes(cfg, lo);
    char t[4][24], all[24], what[4][160];
    const double v[4] = {n.batch, n.replay, n.net, n.sn};
    uint32_t wmax = 0;
    for (uint32_t l = 0; l < lo->L; l++)
        wmax = cfg->hidden[l] > wmax ? cfg->hidden[l] : wmax;
    snprintf(what[0], sizeof what[0],
             "batch activations and scratch %s (batch_size %u x layer widths up to %u, online "
             "net on s and s')",
             human(v[0], t[0], sizeof t[0]), cfg->batch_size, wmax);
    snprintf(what[1], sizeof what[1],
             "replay %s (replay_capacity %u transitions of %s observations of %llu bytes, %u "
             "actions%s)",
             human(v[1], t[1], sizeof t[1]), cfg->replay_capacity,
             cfg->num_obs_shape ? "frame-once" : "2", (unsigned long long)fhd__config_obs_bytes(cfg),
             lo->D,
             cfg->replay == FHD_REPLAY_PRIORITIZED ? ", sum tree" : "");
    snprintf(what[2], sizeof what[2],
             "parameters, gradients and Adam %s (%llu parameters x %d x 4 bytes)",
             human(v[2], t[2], sizeof t[2]), (unsigned long long)lo->num_params,
             cfg->matmul_precision == FHD_PREC_BF16 ? 8 : 6);
    snprintf(what[3], sizeof what[3], "spectral norm %s", human(v[3], t[3], sizeof t[3]));
    int order[4] = {0, 1, 2, 3};
    for (int i = 1; i < 4; i++) /* largest first */
        for (int j = i; j > 0 && v[order[j]] > v[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    snprintf(msg, cap, "cpu backend: out of memory: the learner needs about %s: %s; %s; %s; %s",
             human(v[0] + v[1] + v[2] + v[3], all, sizeof all), what[order[0]], what[order[1]],
             what[order[2]], what[order[3]]);
}
