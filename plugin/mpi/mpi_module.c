/* mpi_module.c - libfoxhunt_dqn_mpi.so: the collectives of plugin/dist.h over MPI_COMM_WORLD.
 *
 * Loaded on demand by the core (plugin/dist.c) for configs with `distributed`; the only code
 * that links MPI. When the host has not initialised MPI, init does (MPI_THREAD_FUNNELED: one
 * thread of the process calls MPI) and registers MPI_Finalize at exit, since mpirun treats a
 * rank that ends without finalising as failed. Errors return (MPI_ERRORS_RETURN) with MPI's
 * own message; a rank that dies is mpirun's to handle (it ends the job).
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist.h"

static int mpi_fail(int rc, const char *what, char *msg, size_t cap) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    snprintf(msg, cap, "%s failed: %s", what, text);
    return -1;
}

static void finalize_at_exit(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done)
        MPI_Finalize();
}

static int m_init(int *rank, int *size, char *msg, size_t cap) {
    int up = 0, rc;
    MPI_Initialized(&up);
    if (!up) {
        int provided = 0;
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Init_thread", msg, cap);
        atexit(finalize_at_exit);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_rank", msg, cap);
    if ((rc = MPI_Comm_size(MPI_COMM_WORLD, size)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_size", msg, cap);
    return 0;
}

/* MPI counts are int: large buffers go in chunks of at most 2^30 elements. */
#define CHUNK (1u << 30)

static int m_allreduce_sum(float *buf, uint64_t n, char *msg, size_t cap) {
    for (uint64_t o = 0; o < n; o += CHUNK) {
        const int c = (int)(n - o < CHUNK ? n - o : CHUNK);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + o, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Allreduce", msg, cap);
    }
    return 0;
}

static int m_allgather_u64(const uint64_t *mine, uint32_t n, uint64_t *all, char *msg,
                           size_t cap) {
    int rc = MPI_Allgather(mine, (int)n, MPI_UINT64_T, all, (int)n, MPI_UINT64_T, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Allgather", msg, cap);
}

static int m_bcast(void *buf, uint64_t n, uint32_t root, char *msg, size_t cap) {
    for (uint64_t o = 0; o < n; o += CHUNK) {
        const int c = (int)(n - o < CHUNK ? n - o : CHUNK);
        int rc = MPI_Bcast((char *)buf + o, c, MPI_BYTE, (int)root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Bcast", msg, cap);
    }
    return 0;
}

static const fhd__comm_ops ops = {FHD_COMM_OPS_VERSION, m_init, m_allreduce_sum, m_allgather_u64,
                                  m_bcast};

__attribute__((visibility("default"))) const fhd__comm_ops *fhd_mpi_module_get_ops(uint32_t v) {
    return v == FHD_COMM_OPS_VERSION ? &ops : NULL;
}
