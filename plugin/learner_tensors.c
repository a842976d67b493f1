/* learner_tensors.c - the learner's named state tensors (tensor_info / read / write) and its
 * observation description (obs_info), through the layout's names and the backend's state access. */
#include <stdio.h>
#include <string.h>

#include "learner.h"

int32_t fhd__learner_tensor_info(fhd_learner *L, uint32_t i, fhd_tensor_info *info) {
    FHD__TRY(fhd__check_struct(L, info, sizeof(fhd_tensor_info), "tensor_info", "info"));
    fhd__tensor_ref t;
    if (fhd__layout_tensor(&L->lo, i, &t) != 0)
        return fhd__fail(L, FHD_ERR_NOT_FOUND, "tensor_info: index %u is past the last tensor (%u)",
                         i, fhd__layout_tensor_count(&L->lo));
    info->rank = t.rank;
    memset(info->shape, 0, sizeof info->shape);
    for (int d = 0; d < 4; d++)
        info->shape[d] = t.shape[d];
    info->count = t.count;
    snprintf(info->name, sizeof info->name, "%s", t.name);
    return FHD_OK;
}

static int32_t find_tensor(fhd_learner *L, const char *fn, const char *name, uint64_t n,
                           fhd__tensor_ref *t) {
    if (!name)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "%s: `name` is NULL", fn);
    if (fhd__layout_tensor_find(&L->lo, name, t) != 0)
        return fhd__fail(L, FHD_ERR_NOT_FOUND, "%s: no tensor named \"%s\"", fn, name);
    if (n != t->count)
        return fhd__fail(L, FHD_ERR_SIZE_MISMATCH, "%s: \"%s\" has %llu elements; count is %llu",
                         fn, name, (unsigned long long)t->count, (unsigned long long)n);
    return FHD_OK;
}

int32_t fhd__learner_tensor_read(fhd_learner *L, const char *name, float *dst, uint64_t n) {
    fhd__tensor_ref t;
    FHD__TRY(find_tensor(L, "tensor_read", name, n, &t));
    if (!dst)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "tensor_read: `dst` is NULL");
    int32_t rc = L->ops->read(L->be, (int)t.buf, t.offset, t.count, dst);
    return rc == FHD_OK ? FHD_OK : fhd__backend_fail(L, rc, "tensor_read");
}

int32_t fhd__learner_tensor_write(fhd_learner *L, const char *name, const float *src, uint64_t n) {
    fhd__tensor_ref t;
    FHD__TRY(find_tensor(L, "tensor_write", name, n, &t));
    if (!src)
        return fhd__fail(L, FHD_ERR_NULL_POINTER, "tensor_write: `src` is NULL");
    if (t.buf != FHD_BUF_PARAMS && t.buf != FHD_BUF_SN)
        return fhd__fail(L, FHD_ERR_INVALID_ARGUMENT,
                         "tensor_write: \"%s\" is not writable (online.*, target.*, sn.* are)", name);
    FHD__TRY(fhd__check_finite(L, src, n, 1, NULL, "tensor_write", "src", "element"));
    int32_t rc = L->ops->write(L->be, (int)t.buf, t.offset, t.count, src);
    return rc == FHD_OK ? FHD_OK : fhd__backend_fail(L, rc, "tensor_write");
}

int32_t fhd__learner_obs_info(fhd_learner *L, fhd_obs_info *info) {
    const fhd__config *c = &L->cfg;
    FHD__TRY(fhd__check_struct(L, info, sizeof(fhd_obs_info), "obs_info", "info"));
    info->dtype = c->obs_dtype == FHD_OBS_UINT8 ? FHD_OBS_DTYPE_UINT8 : FHD_OBS_DTYPE_FLOAT32;
    info->rank = c->num_obs_shape ? 3 : 1;
    for (uint32_t i = 0; i < 3; i++)
        info->shape[i] = c->num_obs_shape ? c->obs_shape[i] : (i == 0 ? c->obs_dim : 0);
    info->size = c->obs_dim;
    info->frame_stack = c->frame_stack;
    info->scale = fhd__config_obs_scale(c);
    info->reserved = 0;
    return FHD_OK;
}
