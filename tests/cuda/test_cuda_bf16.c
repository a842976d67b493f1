/* test_cuda_bf16.c - matmul_precision "bf16" on the CUDA backend against the CPU backend's bf16
 * reference (docs/design.md sections 4 and 5, "GEMM precision"; the CPU side is itself checked
 * against PyTorch by tests/parity/torch_bf16.py).
 *
 * For each configuration (an MLP with dueling, double DQN and PER; B1's torso with its split
 * backward GEMMs and layer 0 of both networks paired; B3's torso with spectral norm on every
 * layer and CQL; n-step with Polyak and AdamW, spectral norm on the last layer, MSE; odd widths;
 * flat uint8 observations; a batch above the loss kernel's small-batch size; a conv torso on
 * uint8 frames with a stack of 4; one on float images of odd sizes) a CPU learner in bf16, a
 * CUDA learner in bf16 and a CPU learner in fp32 get the same transitions, then:
 *   - the plan says bf16 for both passes, every GEMM record is bf16 or bf16_out, and none of the
 *     fp32-kernel fusions is on (narrow heads, head_in_loss, fuse_dw0);
 *   - the captured update (graph SINGLE): no memcpy node, no kernel of ours with a 1x1x1 grid,
 *     no bf16 conversion (the optimiser writes the weights' copies) but with pruning the
 *     weights' and the padded head's, and one bf16 ReLU backward per hidden layer,
 *     and none of the fp32 ReLU backward, head-dx or narrow-head kernels; a conv torso's
 *     im2col, dz and flatten kernels all in their bf16 form, and the bf16 weight permutation;
 *   - update 1: identical sampled indices and IS weights; loss, statistics, gradient, parameters
 *     and Adam moments within the tolerances below; and the CUDA gradient at least FP32_RATIO
 *     times closer to the CPU's bf16 gradient than to its fp32 one (bf16 is in effect, and it
 *     is the same bf16);
 *   - K updates, the CPU's priorities copied into the CUDA learner after each so that both
 *     sample the same batches: identical indices at every update, then online and target
 *     parameters and the statistics within tolerance;
 *   - a write of the params (halved) and of the CPU's moments, then one update: statistics and
 *     parameters as after update 1 (the update reads the written weights);
 *   - no synchronisation by the backend over 200 further updates; the invariants hold (with
 *     them the bf16 copies equal the params rounded);
 *   - act: Q values within tolerance, greedy actions equal except near-ties;
 *   - train_batch (three variants, one a conv torso): TD errors, targets, statistics and
 *     parameters of 3 host batches;
 *   - (b1-torso and conv-u8-stack4) two CUDA learners of one config are bitwise identical
 *     after 50 updates;
 *   - "cuda" and "auto" both run bf16 with a conv torso on the CUDA backend.
 * Tolerances are relative L2 errors ||cuda - cpu|| / ||cpu||. Both sides round the same values
 * at the same places; they differ in the fp32 summation order of every GEMM (cuBLASLt's tensor
 * cores against OpenBLAS), ~1e-7 relative, which flips a value across a bf16 rounding boundary
 * (one bf16 ulp, 2^-8 relative, for that element) only when it lies within that distance of
 * one: the CPU against PyTorch with the same rule shows up to 5e-4 on a gradient from single
 * flips in small networks, 1e-6 without them. The bounds are those of the TF32 variants of
 * test_cuda_parity.c (whose rounding differs between the two sides, unlike here): forward 3e-3,
 * gradient 3e-2, parameters after one update 1e-3, after K updates 8e-2 (Adam turns gradient
 * noise into full steps for near-zero gradients, and priority near-ties part the batches).
 */
#include "bf16_test.h"

static const variant variants[] = {
    {"mlp-dueling",
     "\"obs_dim\": 16, \"hidden\": [64, 48], \"actions\": [6], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.001, \"max_grad_norm\": 10, "
     "\"batch_size\": 64, \"replay_capacity\": 512, \"target_update_interval\": 10",
     1,
     {6},
     100,
     1.0},
    /* B1's torso: split_dx of layer 1, split_dw0, layer 0 paired (no spectral norm) */
    {"b1-torso",
     "\"obs_dim\": 64, \"hidden\": [256, 256], \"actions\": [8], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.0001, \"max_grad_norm\": 10, "
     "\"batch_size\": 256, \"replay_capacity\": 1024, \"target_update_interval\": 10",
     1,
     {8},
     50,
     1.0},
    /* B3's torso: spectral norm on both layers (the GEMMs' device alpha 1/sigma), CQL,
     * branching; sampling beside the power iteration */
    {"b3-torso",
     "\"obs_dim\": 64, \"hidden\": [512, 512], \"actions\": [5, 5, 5, 5], \"dueling\": true, "
     "\"double_dqn\": true, \"spectral_norm\": \"all\", \"cql_alpha\": 0.1, "
     "\"replay\": \"prioritized\", \"lr\": 0.0001, \"max_grad_norm\": 10, "
     "\"batch_size\": 1024, \"replay_capacity\": 2048, \"target_update_interval\": 10",
     4,
     {5, 5, 5, 5},
     20,
     1.0},
    {"nstep-polyak-adamw-sn-last",
     "\"obs_dim\": 24, \"hidden\": [96, 64], \"actions\": [5], \"n_step\": 3, \"gamma\": 0.9, "
     "\"tau\": 0.05, \"target_update_interval\": 1, \"optimizer\": \"adamw\", "
     "\"weight_decay\": 0.01, \"spectral_norm\": \"last\", \"loss\": \"mse\", "
     "\"replay\": \"uniform\", \"lr\": 0.001, \"max_grad_norm\": 1, "
     "\"batch_size\": 128, \"replay_capacity\": 512",
     1,
     {5},
     100,
     1.0},
    /* flat uint8 observations (converted with obs_scale on the device, then rounded) */
    {"uint8-flat",
     "\"obs_dim\": 20, \"obs_dtype\": \"uint8\", \"hidden\": [64, 64], \"actions\": [4], "
     "\"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.001, "
     "\"max_grad_norm\": 10, \"batch_size\": 96, \"replay_capacity\": 512, "
     "\"target_update_interval\": 10",
     1,
     {4},
     100,
     1.0},
    /* pruning: the weights converted at the start of each update (the selection zeroes
     * weights after the optimiser, which then keeps no bf16 copies) */
    {"mlp-prune",
     "\"obs_dim\": 16, \"hidden\": [64, 48], \"actions\": [6], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.001, \"max_grad_norm\": 10, "
     "\"batch_size\": 64, \"replay_capacity\": 512, \"target_update_interval\": 10, "
     "\"prune_sparsity\": 0.5, \"prune_start\": 10, \"prune_end\": 60, \"prune_frequency\": 10",
     1,
     {6},
     100,
     2.0},
    /* a batch above FHD_LOSS_SMALL_BATCH and three hidden layers */
    /* pixels: a small Nature-like torso on uint8 frames with a stack of 4 (layer 0's im2col from
     * the bytes, 4-value stores, padded layers above) */
    {"conv-u8-stack4",
     "\"obs_shape\": [4, 44, 44], \"obs_dtype\": \"uint8\", \"frame_stack\": 4, "
     "\"conv\": [{\"out\": 16, \"kernel\": 8, \"stride\": 4, \"padding\": 0}, "
     "{\"out\": 32, \"kernel\": 4, \"stride\": 2, \"padding\": 1}, "
     "{\"out\": 32, \"kernel\": 3, \"stride\": 1, \"padding\": 1}], \"hidden\": [64], "
     "\"actions\": [6], \"dueling\": true, \"double_dqn\": true, \"replay\": \"prioritized\", "
     "\"lr\": 0.0001, \"max_grad_norm\": 10, \"batch_size\": 32, \"replay_capacity\": 512, "
     "\"target_update_interval\": 10",
     1,
     {6},
     50,
     2.0},
    {"large-batch-deep",
     "\"obs_dim\": 32, \"hidden\": [128, 96, 64], \"actions\": [4, 4], \"dueling\": true, "
     "\"double_dqn\": true, \"replay\": \"prioritized\", \"lr\": 0.0003, "
     "\"max_grad_norm\": 10, \"batch_size\": 4160, \"replay_capacity\": 8192, "
     "\"target_update_interval\": 10",
     2,
     {4, 4},
     20,
     1.0},
    /* last two (a create that fails exits the test): widths and an input size that are not
     * multiples of 8 (bf16 operands 2-byte aligned), a head of 3 + 2 outputs, one layer */
    {"odd-widths",
     "\"obs_dim\": 7, \"hidden\": [37], \"actions\": [3, 2], \"dueling\": false, "
     "\"double_dqn\": false, \"replay\": \"prioritized\", \"lr\": 0.001, \"max_grad_norm\": 1, "
     "\"batch_size\": 50, \"replay_capacity\": 512, \"target_update_interval\": 10",
     2,
     {3, 2},
     100,
     1.0},
    /* float images of odd sizes and a scale: ckk 27 and 20, cout 5 and 7 (bf16 rows 2-byte
     * aligned, the scalar im2col paths), padding on layer 0 only */
    {"conv-f32-odd",
     "\"obs_shape\": [3, 13, 11], \"obs_scale\": 0.5, \"conv\": [{\"out\": 5, \"kernel\": 3, "
     "\"stride\": 2, \"padding\": 1}, {\"out\": 7, \"kernel\": 2, \"stride\": 1, "
     "\"padding\": 0}], \"hidden\": [19], \"actions\": [3, 2], \"dueling\": false, "
     "\"double_dqn\": false, \"replay\": \"uniform\", \"lr\": 0.0003, \"max_grad_norm\": 1, "
     "\"batch_size\": 48, \"replay_capacity\": 512, \"target_update_interval\": 10",
     2,
     {3, 2},
     100,
     2.0},
};

static const variant *by_name(const char *name) {
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i].name, name) == 0)
            return &variants[i];
    printf("FAIL no variant %s\n", name);
    exit(1);
}

/* bf16 with a conv torso: "cuda" takes it and "auto" picks the CUDA backend, in bf16. */
static void check_conv_backends(void) {
    const char *conv = "{\"obs_shape\": [2, 8, 8], \"conv\": [{\"out\": 4, \"kernel\": 3, "
                       "\"stride\": 1}], \"hidden\": [16], \"actions\": [3], \"backend\": "
                       "\"%s\", \"matmul_precision\": \"bf16\"}";
    const char *backends[2] = {"cuda", "auto"};
    for (int i = 0; i < 2; i++) {
        char j[512];
        snprintf(j, sizeof j, conv, backends[i]);
        fhd_error err = FHD_ERROR_INIT;
        fhd_learner *L = NULL;
        const int32_t rc = fhd__learner_init(j, strlen(j), &L, &err);
        ct_check(rc == FHD_OK && L && strcmp(L->ops->name, "cpu") != 0 &&
                     L->cfg.matmul_precision == FHD_PREC_BF16,
                 "bf16 with a conv torso on %s: the cuda backend, in bf16 (%s)", backends[i],
                 rc == FHD_OK ? L->ops->name : err.message);
        fhd__learner_destroy(L);
    }
}

int main(int argc, char **argv) {
    ct_require_gpu();
    const char *only = argc > 1 ? argv[1] : NULL;
    const size_t nv = sizeof variants / sizeof variants[0];
    if (!only || strcmp(only, "backends") == 0)
        check_conv_backends();
    if (!only || strcmp(only, "train_batch") == 0) {
        run_train_batch(by_name("mlp-dueling"));
        run_train_batch(by_name("b3-torso")); /* spectral norm, branching, CQL */
    }
    if (!only || strcmp(only, "determinism") == 0) {
        run_determinism(by_name("b1-torso"));
        run_determinism(by_name("conv-u8-stack4"));
    }
    for (size_t i = 0; i < nv; i++) /* the odd ones last */
        if (!only || strcmp(only, variants[i].name) == 0)
            run_variant(&variants[i]);
    if (!only || strcmp(only, "train_batch") == 0) /* last: an odd create */
        run_train_batch(by_name("conv-f32-odd"));
    return ct_finish();
}
