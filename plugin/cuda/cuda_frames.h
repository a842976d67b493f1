/* cuda_frames.h - image observations on the CUDA backend (C++17, host side): uint8 and scaled
 * inputs of MLP configs, the flat uint8 replay, and the frame-once replay (device frame ring,
 * host bookkeeping and host frame cache). docs/design.md section 8, "The CUDA image replay".
 *
 * Frame-once replay: device: frames (M, fe) of the learner's dtype (fe = S / k values), slot
 * ids t_obs / t_next (N, k) uint64, act / ret / disc, the sum tree, first_live. Host: the
 * counters fc (frames added, transitions added T, first live lo), f_ref (M) and a pinned cache
 * of the C newest frames (frame g in row g mod C), which is also the frames' staging: pending
 * frames [f_sent, fc[0]) go to their ring rows with cudaMemcpyAsync straight from it, and
 * staged transitions go with a scatter kernel; both on the main stream, in the order of the
 * calls, at the latest before anything reads the device replay (fhd__cuda_img_flush).
 */
#ifndef FHD_CUDA_FRAMES_H
#define FHD_CUDA_FRAMES_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#define FHD_CUDA_FRAME_EVENTS 8 /* frame copies in flight, tracked for the cache's reuse */

struct fhd__cuda_img {
    int u8;      /* obs_dtype uint8 */
    int cvt;     /* the MLP's input is converted (no conv layers, and uint8 or scale != 1):
                  * x_conv holds it */
    float scale; /* obs_scale */
    int frames;  /* the frame-once replay (obs_shape) */
    /* MLP input (2B, S) floats and the act path's uint8 upload (R, S) */
    float *x_conv;
    uint8_t *act_x8;
    /* flat uint8 replay rings (N, S) */
    uint8_t *r_obs8, *r_next8;
    /* frame-once replay */
    uint32_t k;
    uint64_t M, fe, fbytes, C;
    uint64_t fc[3];  /* frames added, transitions added (T), first live (lo) */
    uint64_t *f_ref; /* (M) host: number of the last transition using each frame row */
    uint64_t dropped;
    unsigned char *cache;    /* pinned (C, fbytes) */
    unsigned char *readback; /* pinned (fbytes): a hint frame older than the cache */
    uint64_t f_sent, f_done; /* frames whose copies are issued / known complete */
    cudaEvent_t ev_f[FHD_CUDA_FRAME_EVENTS];
    uint64_t ev_f_end[FHD_CUDA_FRAME_EVENTS];
    int ev_head, ev_n;
    uint32_t ts_rows, ts_n; /* transition staging: capacity, rows staged */
    size_t ts_bytes;
    unsigned char *h_ts[2]; /* pinned, packed: obs ids (TS, k) | next ids (TS, k) | act (TS, D)
                             * | ret (TS) | disc (TS) */
    cudaEvent_t ev_ts[2];
    int ts_cur;
    uint64_t t_sent, lo_sent; /* T and lo as the device has them */
    void *d_frames;
    uint64_t *act_ids, *h_act_ids; /* (R, k) device and pinned: q_values_frames's ids */
    uint64_t *d_t_obs, *d_t_next, *d_first_live;
    unsigned char *d_ts;
};

#endif
