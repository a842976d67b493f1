/* layout.h - where every tensor of the network lives in the flat buffers.
 *
 * One network = L torso layers + one head layer. All of a network's parameters sit in one
 * flat float buffer of P floats; the online network occupies params[0, P) and the target
 * network params[P, 2P) of the same allocation. Gradients and Adam moments are flat buffers of
 * P floats with the same layout as the online network.
 *
 * Layer l (torso l < L, head l == L): W_l (out_l, in_l) row-major (PyTorch nn.Linear layout),
 * then b_l (out_l). Torso: in_0 = S, out_l = H_l, in_l = H_{l-1}. Head: in = H_{L-1},
 * out = KT + dueling: with dueling, row 0 is the value stream V and rows 1..KT the advantage
 * streams of branches 0..D-1 (K_d consecutive rows each); without dueling the KT rows are Q.
 * Merging V and A into one matrix saves a GEMM and keeps every named tensor a contiguous
 * view: online.head.value.weight = row 0, online.head.advantage.weight = rows 1..KT.
 *
 * Spectral norm (torso layers only, config spectral_norm): layer l keeps u_l (out_l) and
 * v_l (in_l) in a separate flat float buffer `sn` (online, then target copy), not in params
 * (they receive no gradient).
 *
 * Convolutions (config conv, obs_shape [C, H, W]) come first: NC conv layers, then the L
 * linear torso layers and the head. Conv layer c: input (cin, hin, win), output
 * (cout, hout, wout) with hout = (hin + 2 pad - k) / stride + 1 (PyTorch Conv2d), ReLU;
 * W_c (cout, cin, k, k) row-major (PyTorch layout, = the (cout, cin k k) matrix of im2col),
 * then b_c (cout), at the start of params. The last conv's output, flattened (C, H, W) as
 * nn.Flatten does, is the linear torso's input: in_0 = cout hout wout. Spectral norm "all"
 * normalises the conv layers too (PyTorch: W reshaped to (cout, cin k k)): u_c (cout),
 * v_c (cin k k), before the linear layers' vectors in `sn`.
 *
 * Pruning masks (config prune_sparsity > 0): a flat float buffer `mask` of P values with the
 * layout of one network, 1 (kept) or 0 (pruned); only the weight views in the prune scope are
 * named (online.<weight>_mask, as torch.nn.utils.prune names its buffer weight_mask); the other
 * entries (biases, weights out of scope) stay 1.
 */
#ifndef FHD_LAYOUT_H
#define FHD_LAYOUT_H

#include <stdint.h>

#include "config.h"

typedef struct fhd__layer {
    uint32_t in, out;
    uint64_t w_off, b_off; /* offsets (floats) into one network's params */
    int sn;                /* spectrally normalised */
    uint64_t u_off, v_off; /* offsets into one network's sn buffer (valid when sn) */
} fhd__layer;

typedef struct fhd__conv_layer {
    uint32_t cin, hin, win;    /* input (C, H, W) */
    uint32_t cout, hout, wout; /* output */
    uint32_t k, stride, pad;   /* square kernel, stride, zero padding */
    uint32_t ckk, hw;          /* im2col matrix (ckk = cin k k, hw = hout wout) */
    uint64_t w_off, b_off;     /* offsets (floats) into one network's params */
    int sn;
    uint64_t u_off, v_off;     /* into one network's sn buffer (valid when sn) */
} fhd__conv_layer;

typedef struct fhd__layout {
    uint32_t S, D, KT, L;  /* obs dim, branches, total actions, torso layers */
    uint32_t K[FHD_MAX_BRANCHES];
    uint32_t k_off[FHD_MAX_BRANCHES]; /* first column of branch d in (B, KT) Q matrices */
    int dueling;
    uint32_t head_out;     /* KT + dueling */
    uint32_t max_width;    /* max over S, H_l, head_out */
    fhd__layer layers[FHD_MAX_HIDDEN_LAYERS + 1]; /* torso 0..L-1, head L */
    uint64_t num_params;   /* P */
    uint64_t sn_size;      /* floats of u and v for one network */
    uint32_t num_sn;       /* normalised layers (conv and linear) */
    uint32_t NC;           /* conv layers (0: an MLP on flat observations) */
    fhd__conv_layer conv[FHD_MAX_CONV_LAYERS];
    uint32_t conv_max_act; /* max over conv layers of cin hin win and cout hw (per sample) */
    uint32_t conv_max_col; /* max over conv layers of ckk hw (per sample) */
    uint32_t num_masks;    /* pruned weight tensors: 0 (no pruning), or the scope's count */
} fhd__layout;

/* Fill `lo` from a validated config. Returns 0, or -1 if the sizes overflow the limits. */
int fhd__layout_init(fhd__layout *lo, const fhd__config *cfg);

/* Initial parameters (PyTorch nn.Linear defaults: U(-1/sqrt(in), 1/sqrt(in)) for W and b)
 * drawn by counter from Philox (stream INIT, n = flat index): identical on every backend.
 * params: P floats. */
void fhd__layout_init_params(const fhd__layout *lo, uint64_t seed, float *params);

/* Initial spectral-norm vectors as PyTorch: u, v ~ N(0,1) normalised, then 15 power
 * iterations on W. sn: sn_size floats; params: the initial online parameters.
 * Returns 0, or -1 when out of memory. */
int fhd__layout_init_sn(const fhd__layout *lo, uint64_t seed, const float *params, float *sn);

/* Named tensors (online.*, target.*, grad.*, adam.m.*, adam.v.*, sn.online.*, sn.target.*). */
typedef enum {
    FHD_BUF_PARAMS = 0, /* 2P: online then target */
    FHD_BUF_GRAD,       /* P */
    FHD_BUF_ADAM_M,     /* P */
    FHD_BUF_ADAM_V,     /* P */
    FHD_BUF_SN,         /* 2 * sn_size: online then target */
    FHD_BUF_MASK,       /* P: pruning masks (layout of one network) */
    FHD_BUF_COUNT_
} fhd__buf_kind;

typedef struct fhd__tensor_ref {
    char name[96];
    fhd__buf_kind buf;
    uint64_t offset, count;
    uint32_t rank;     /* 1, 2, or 4 (conv weights) */
    uint64_t shape[4];
} fhd__tensor_ref;

/* Number of named tensors, and the i-th (0 <= i < count). Returns -1 when out of range. */
uint32_t fhd__layout_tensor_count(const fhd__layout *lo);
int fhd__layout_tensor(const fhd__layout *lo, uint32_t i, fhd__tensor_ref *out);
/* The j-th pruned weight tensor (0 <= j < num_masks, layout order: conv, torso, head): its
 * mask's name and view (buf FHD_BUF_MASK; the same offset and count as its weight in one
 * network's params). Returns -1 when out of range. */
int fhd__layout_mask(const fhd__layout *lo, uint32_t j, fhd__tensor_ref *out);
int fhd__layout_tensor_find(const fhd__layout *lo, const char *name, fhd__tensor_ref *out);

#endif
