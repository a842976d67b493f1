/* checkpoint.c - safetensors checkpoints (not yet implemented: a clear status until then). */
#include "learner.h"

int32_t fhd__checkpoint_save(fhd_learner *L, const char *path, uint32_t flags) {
    return fhd__fail(L, FHD_ERR_NOT_IMPLEMENTED, "checkpoint_save: checkpoints are not implemented yet");
}

int32_t fhd__checkpoint_load(fhd_learner *L, const char *path, uint32_t flags) {
    return fhd__fail(L, FHD_ERR_NOT_IMPLEMENTED, "checkpoint_load: checkpoints are not implemented yet");
}
