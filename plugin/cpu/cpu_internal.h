/* cpu_internal.h - the CPU backend's state, shared by its files (not an interface):
 *   cpu_backend.c  creation, replay, sampling, state access, the ops table
 *   cpu_net.c      the network: spectral norm, forwards, the update (docs/design.md section 4)
 *   cpu_ops.c      linear layers, heads, loss, clipping, Adam (cpu_ops.h)
 *   cpu_conv.c     convolutions: im2col + sgemm (cpu_ops.h)
 *   cpu_prune.c    gradual magnitude pruning: masks and their selection (prune.h)
 *   cpu_metrics.c  config detailed_metrics
 *   cpu_diversity.c  the action-diversity term of the loss
 */
#ifndef FHD_CPU_INTERNAL_H
#define FHD_CPU_INTERNAL_H

#include "backend.h"
#include "cpu_ops.h"
#include "dist.h"
#include "sumtree.h"

struct fhd__backend {
    fhd__config cfg;
    fhd__layout lo;
    uint64_t P;
    float *params;                 /* (2P): online [0, P), target [P, 2P) */
    float *grad, *adam_m, *adam_v; /* (P) each */
    float *grad_next;              /* (P) the gradient being computed; swapped with grad */
    float *sn_prev;                /* (sn_size) online u, v before this update's iteration */
    float *sn;                     /* (2 * sn_size): online u/v, then target u/v */
    float *mask;                   /* (P) pruning masks, 1 or 0 (lo.num_masks > 0; else NULL) */
    float *wsn; /* (2 * sum of normalised W sizes): W / sigma for online, then target */
    uint64_t wsn_half;
    float sigma[FHD_MAX_HIDDEN_LAYERS]; /* online sigma of this update */
    float sigma_conv[FHD_MAX_CONV_LAYERS];
    float sigma_tg[FHD_MAX_HIDDEN_LAYERS], sigma_conv_tg[FHD_MAX_CONV_LAYERS]; /* the target's */
    /* matmul_precision "bf16" (else NULL): (2P) params rounded to bf16 values, the GEMMs'
     * weights and the hidden layers' biases (docs/design.md section 4, "GEMM precision") */
    float *w16;
    int eval_sn_fresh; /* online W_sn (and w16) match the current W and u, v for act */
    uint64_t updates;
    uint64_t skipped; /* updates the training guard skipped (sampling counter: updates + skipped) */
    /* config distributed (cpu_dist.c; else comm is NULL): the ranks, and the latest checksum
     * comparison: its update, this rank's checksum, how many ranks' checksums differ */
    const struct fhd__comm *comm;
    uint64_t ck_update, ck_value;
    uint32_t ck_differ;

    /* update scratch, B = batch_size rows */
    uint32_t B;
    float *h[FHD_MAX_HIDDEN_LAYERS + 1]; /* online(s) activations: h_l (B, H_l), head (B, HO) */
    float *fa, *fb;                      /* (B, max_width) ping-pong for other forwards */
    float *q, *qt, *qsel, *dq;           /* (B, KT) */
    float *da, *db;                      /* (B, max_width) backward ping-pong */
    float *y, *td, *sn_tmp;              /* (B), (B, D), (max(max_width, conv ckk)) */
    /* conv torso (lo.NC > 0); per sample: A = lo.conv_max_act, C = lo.conv_max_col */
    float *ca[FHD_MAX_CONV_LAYERS]; /* online(s) [and online(s')] activations (2B, cout hw) */
    float *cpa, *cpb;               /* (B, A) ping-pong for the other forwards */
    float *cda, *cdb;               /* (B, A) backward ping-pong */
    float *col, *dcol;              /* (C) one sample's im2col matrix and its gradient */
    /* network inputs obs_scale * obs when they are not the rows themselves (uint8, a scale
     * other than 1, or bf16: rounded): xin (2B, S) for online(s) [and online(s')], xin2 (B, S)
     * for the rest */
    float *xin, *xin2;
    float scale;
    /* gathered batch: observation rows of ob bytes (the learner's dtype) */
    uint64_t ob;
    unsigned char *g_obs, *g_next; /* (B, S) each, g_next = g_obs + B rows */
    float *g_ret, *g_disc, *g_w;   /* (B), (B), (B) */
    int32_t *g_act;                /* (B, D) */
    uint32_t *idx;                 /* (B) */
    uint64_t *prio, *rand64;       /* (B) */

    /* replay ring */
    uint32_t capacity;
    unsigned char *r_obs, *r_next; /* (N, S) each, the learner's dtype */
    float *r_ret, *r_disc;         /* (N), (N) */
    int32_t *r_act;                /* (N, D) */
    fhd__sumtree tree;             /* prioritized only */
    uint64_t pos, size, max_q;
    /* frame-once replay (image observations, cfg.num_obs_shape > 0; r_obs, r_next unused):
     * transition number t (0, 1, ...) lives in slot t mod N; live: t in [fc[2], fc[1]) */
    int frames;
    uint64_t M;               /* frames in the ring: frame id g lives in row g mod M */
    uint32_t fk;              /* frames per observation (frame_stack) */
    uint64_t fbytes;          /* bytes of one frame: ob / fk */
    uint64_t dropped;         /* transitions whose frames had left the ring before storing */
    unsigned char *f_rows;    /* (M, S / fk) the learner's dtype */
    uint64_t *f_ref;          /* (M) number of the last transition using the frame, or NONE */
    uint64_t *t_obs, *t_next; /* (N, fk) frame ids of each slot's obs and next_obs */
    uint64_t fc[3];           /* frames added, transitions added (T), first live (lo) */

    fhd__update_stats last;
    fhd__update_stats pend; /* detailed_metrics of the update in progress */
    char err[512];
};

/* cpu_metrics.c: config detailed_metrics of an update into m (grad before clipping, sel:
 * online(s') Q values (B, KT) with double DQN, else NULL; the target's in b->qt). */
void fhd__cpu_detailed_metrics(fhd__backend *b, const float *grad, const float *sel, uint32_t B,
                               fhd__update_stats *m);

/* cpu_diversity.c: the action-diversity term's gradient into dq (B, KT) from Q (B, KT);
 * returns the mean entropy over batch and branches (the loss gains -coef times it). */
float fhd__diversity_term(float *dq, const float *q, const fhd__layout *lo, uint32_t B,
                          float coef, float temp);

/* cpu_replay_frames.c */
/* Allocate the frame ring (ok is cleared on failure). */
void fhd__cpu_frames_alloc(fhd__backend *b, int *ok);
void fhd__cpu_frames_free(fhd__backend *b);
int32_t fhd__cpu_frame_add(fhd__backend *b, const void *row, const uint64_t *hint, uint64_t *ids);
int32_t fhd__cpu_replay_add_ids(fhd__backend *b, uint32_t n, const uint64_t *obs_ids,
                                const int32_t *actions, const float *returns,
                                const uint64_t *next_ids, const float *disc);
/* Slot of the r-th live transition (uniform sampling, r < size). */
uint64_t fhd__cpu_frames_slot(const fhd__backend *b, uint64_t r);
/* Observation row of slot s (its obs, or with next its next_obs) into dst (ob bytes). */
void fhd__cpu_frames_obs(const fhd__backend *b, uint64_t s, int next, unsigned char *dst);
/* State access of the frame kinds: base pointer and element count, or NULL. */
void *fhd__cpu_frames_state(fhd__backend *b, int kind, uint64_t *n);
/* After a write of the frame counters: ring position and size from them. */
void fhd__cpu_frames_sync(fhd__backend *b);
/* Invariants of the frame replay: FHD_OK, or FHD_ERR_INTERNAL with msg. */
int32_t fhd__cpu_frames_check(fhd__backend *b, char *msg, size_t cap);

/* cpu_prune.c (pruning on: lo.num_masks > 0) */
/* x (P, one network's layout) = 0 where the mask is 0: the online weights or a gradient. */
void fhd__cpu_prune_apply(fhd__backend *b, float *x);
/* New masks at sparsity s from the online weights (prune.h), then applied to them and to
 * their Adam moments. */
void fhd__cpu_prune_select(fhd__backend *b, double sparsity);
/* At the end of update b->updates (after the target update): at a pruning update, the new
 * masks (fhd__cpu_prune_select); else nothing. */
void fhd__cpu_prune_after_update(fhd__backend *b);

/* cpu_net.c */
/* W_sn of networks [0, nets) (1: online, 2: online and target); train: one power iteration
 * on the online vectors first. */
void fhd__cpu_sn_prepare(fhd__backend *b, int train, int nets);
/* bf16: w16 of networks [0, nets) from the current params. */
void fhd__cpu_bf16_shadow(fhd__backend *b, int nets);
/* Forward n observation rows (the learner's dtype; n <= 2B when keep, else <= B) through
 * network `net` into q (n, KT). keep: online(s) of the update, activations kept. */
void fhd__cpu_net_forward(fhd__backend *b, int net, const void *rows, uint32_t n, float *q,
                          int keep);
/* One update on a batch (docs/design.md section 4); stats may be NULL. FHD_OK, or
 * FHD_ERR_DIVERGED (message in b->err) with nothing applied, or with a guard (config `guard`)
 * FHD__CPU_SKIPPED: the guard skipped it, nothing applied but the skip counters. */
#define FHD__CPU_SKIPPED 1

/* cpu_dist.c: config distributed (docs/design.md section 10). */
/* The hook of the update: grad (P) and *loss become their means over the ranks (the sum of
 * MPI_Allreduce divided by the world size). FHD_OK or FHD_ERR_INTERNAL (message in b->err). */
int32_t fhd__cpu_dist_reduce(fhd__backend *b, float *grad, float *loss);
/* After update `updates` when it is a multiple of checksum_interval: compare the parameters'
 * checksums over the ranks (recorded for describe). */
int32_t fhd__cpu_dist_checksum(fhd__backend *b);
int32_t fhd__cpu_set_comm(fhd__backend *b, const struct fhd__comm *comm);
int32_t fhd__cpu_describe(fhd__backend *b, char *buf, size_t cap);
int32_t fhd__cpu_update(fhd__backend *b, const fhd__host_batch *hb, fhd_train_stats *st,
                        float beta);

#endif
