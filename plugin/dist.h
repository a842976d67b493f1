/* dist.h - data-parallel training (config `distributed`, docs/design.md section 10): the
 * communication module's interface and what the core does with it.
 *
 * The core never links MPI: libfoxhunt_dqn_mpi.so (plugin/mpi) is dlopened on demand and
 * exports FHD_MPI_MODULE_ENTRY, which gives the collectives below over MPI_COMM_WORLD. Every
 * call is collective: every rank makes the same calls in the same order (they follow the
 * updates, which every rank does alike). The module opens no sockets of its own; MPI's runtime
 * (mpirun) owns the transport and ends the job when a rank dies.
 */
#ifndef FHD_DIST_H
#define FHD_DIST_H

#include <stddef.h>
#include <stdint.h>

#define FHD_COMM_OPS_VERSION 1u
#define FHD_MPI_MODULE_NAME "libfoxhunt_dqn_mpi.so"
#define FHD_MPI_MODULE_ENTRY "fhd_mpi_module_get_ops"

typedef struct fhd__comm_ops {
    uint32_t version; /* FHD_COMM_OPS_VERSION */
    /* Initialise MPI unless the host already has (then it also finalises it); *rank, *size of
     * MPI_COMM_WORLD. 0, or -1 with msg. */
    int (*init)(int *rank, int *size, char *msg, size_t cap);
    /* buf (n floats) = the element-wise sum over the ranks (MPI_Allreduce, MPI_SUM). */
    int (*allreduce_sum)(float *buf, uint64_t n, char *msg, size_t cap);
    /* all (size * n) = every rank's `mine` (n values), rank order (MPI_Allgather). */
    int (*allgather_u64)(const uint64_t *mine, uint32_t n, uint64_t *all, char *msg, size_t cap);
    /* buf (n bytes) = rank root's buf (MPI_Bcast). */
    int (*bcast)(void *buf, uint64_t n, uint32_t root, char *msg, size_t cap);
} fhd__comm_ops;

typedef const fhd__comm_ops *(*fhd__mpi_module_get_ops_fn)(uint32_t ops_version);

/* A learner's view of the world: the module's ops, its rank and the number of ranks. */
struct fhd__comm {
    const fhd__comm_ops *ops;
    uint32_t rank, world;
};
typedef struct fhd__comm fhd__comm;

/* 64-bit FNV-1a of n bytes (the parameter checksum and the config hash). */
static inline uint64_t fhd__fnv1a(const void *p, size_t n, uint64_t h) {
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}
#define FHD_FNV_INIT 0xcbf29ce484222325ull

/* The parameter checksum: FNV-1a of the n floats' bytes (equal iff bitwise equal, up to
 * collisions). */
uint64_t fhd__dist_params_checksum(const float *params, uint64_t n);

#endif
