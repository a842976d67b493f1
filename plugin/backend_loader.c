/* backend_loader.c - choose the backend; load the CUDA module on demand.
 *
 * The core library has no link-time dependency on CUDA: "cuda" dlopens
 * libfoxhunt_dqn_cuda.so from the directory this library was loaded from (or from
 * $FHD_CUDA_MODULE when set), asks it for its ops, and fails with
 * FHD_ERR_BACKEND_UNAVAILABLE and the reason when that is impossible. "auto" falls back to the
 * CPU backend and records why.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner.h"

static void module_path(char *out, size_t cap) {
    const char *env = getenv("FHD_CUDA_MODULE");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    Dl_info info;
    if (dladdr((void *)&module_path, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            snprintf(out, cap, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                     FHD_CUDA_MODULE_NAME);
            return;
        }
    }
    snprintf(out, cap, "%s", FHD_CUDA_MODULE_NAME);
}

/* Try to load the CUDA backend. Returns ops or NULL with `why` filled. */
static const fhd__backend_ops *load_cuda(fhd_learner *L, char *why, size_t cap) {
    char path[4096];
    module_path(path, sizeof path);
    /* RTLD_NODELETE: the CUDA runtime cannot be unloaded safely once it has initialised
     * (its exit handlers and driver state outlive a dlclose), so the module stays mapped. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "the CUDA module could not be loaded (%s)", e ? e : path);
        return NULL;
    }
    fhd__cuda_module_get_ops_fn get = (fhd__cuda_module_get_ops_fn)dlsym(h, FHD_CUDA_MODULE_ENTRY);
    if (!get) {
        snprintf(why, cap, "%s does not export %s", path, FHD_CUDA_MODULE_ENTRY);
        dlclose(h);
        return NULL;
    }
    char msg[384] = {0};
    const fhd__backend_ops *ops = get(FHD_BACKEND_OPS_VERSION, L->cfg.device, msg, sizeof msg);
    if (!ops) {
        snprintf(why, cap, "%s", msg[0] ? msg : "the CUDA module found no usable device");
        dlclose(h);
        return NULL;
    }
    L->module = h;
    return ops;
}

/* What of the config the CUDA module cannot run (spectral norm on conv layers; distributed in a
 * build whose module has no NCCL part, FHD_CUDA_NCCL), or NULL, with the JSON path.
 * Decided here, before the module is loaded or asked, so that "auto" falls back instead of
 * failing. */
static const char *cuda_unsupported(const fhd__config *c, const char **path) {
    if (c->num_conv > 0 && c->spectral_norm == FHD_SN_ALL) {
        *path = "$.spectral_norm";
        return "spectral norm on conv layers (spectral_norm \"all\" with a conv torso; \"last\" "
               "runs there)";
    }
#if !FHD_CUDA_NCCL
    if (c->distributed.on) { /* the all-reduce there is NCCL's (docs/design.md section 10) */
        *path = "$.distributed";
        return "data-parallel training (distributed) in this build, whose CUDA module has no "
               "NCCL part (configure with nccl.h found: pip install nvidia-nccl-cu13, or "
               "-DFHD_NCCL_INCLUDE_DIR=...),";
    }
#endif
    return NULL;
}

/* "auto" falling back to the CPU: bf16 runs there with the same semantics (docs/design.md
 * section 4, "GEMM precision"); TF32 does not exist there, so it computes in fp32. */
static void cpu_precision(fhd__config *c) {
    if (c->matmul_precision != FHD_PREC_BF16)
        c->matmul_precision = FHD_PREC_FP32;
}

int32_t fhd__select_backend(fhd_learner *L, fhd_error *err) {
    char why[512] = {0};
    const char *path = "";
    const char *pixels = cuda_unsupported(&L->cfg, &path);
    if (pixels && L->cfg.backend == FHD_BACKEND_CUDA) {
        fhd__error_set(err, FHD_ERR_BACKEND_UNAVAILABLE, path,
                       "%s: backend \"cuda\" does not support %s yet: it runs on the cpu "
                       "backend only for now; allowed: backend \"cpu\" or \"auto\"",
                       path, pixels);
        return FHD_ERR_BACKEND_UNAVAILABLE;
    }
    if (pixels && L->cfg.backend == FHD_BACKEND_AUTO) {
        snprintf(L->fallback_reason, sizeof L->fallback_reason,
                 "the cuda backend does not support %s yet (cpu-only for now)", pixels);
        L->ops = &fhd__cpu_backend_ops;
        cpu_precision(&L->cfg);
        return FHD_OK;
    }
    switch (L->cfg.backend) {
    case FHD_BACKEND_CPU:
        L->ops = &fhd__cpu_backend_ops;
        return FHD_OK;
    case FHD_BACKEND_CUDA:
        L->ops = load_cuda(L, why, sizeof why);
        if (L->ops)
            return FHD_OK;
        fhd__error_set(err, FHD_ERR_BACKEND_UNAVAILABLE, "$.backend",
                       "$.backend: \"cuda\" is unavailable: %s", why);
        return FHD_ERR_BACKEND_UNAVAILABLE;
    default: /* auto */
        L->ops = load_cuda(L, why, sizeof why);
        if (L->ops)
            return FHD_OK;
        snprintf(L->fallback_reason, sizeof L->fallback_reason, "%s", why);
        L->ops = &fhd__cpu_backend_ops;
        cpu_precision(&L->cfg);
        return FHD_OK;
    }
}

void fhd__unload_backend(fhd_learner *L) {
    if (L->module)
        dlclose(L->module);
    L->module = NULL;
    if (L->mpi_module) /* RTLD_NODELETE: stays mapped for MPI_Finalize at exit */
        dlclose(L->mpi_module);
    L->mpi_module = NULL;
}
