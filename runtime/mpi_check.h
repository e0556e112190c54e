/* MPICHECK for the MPI parts (launch_mpi.c, comm_mpi.c), as nccl-tests' common.h: on
 * failure the message names file:line, the call, the host, the rank (when there is one)
 * and MPI's error string, goes to the rank's (or the world's) error, and the caller
 * returns RT_EFAIL. */
#ifndef MPI_CHECK_H
#define MPI_CHECK_H

#include "rt_backend.h"

/* Writes the message of a failed MPI call (r NULL: into the world's error). */
int rt_mpi_failed(RtWorld *w, RtRank *r, int e, const char *call, const char *file, int line);

#define MPICHECK(r, call)                                                                    \
	do {                                                                                     \
		int e_ = (call);                                                                     \
		if (e_ != MPI_SUCCESS)                                                               \
			return rt_mpi_failed((r)->w, (r), e_, #call, __FILE__, __LINE__);                \
	} while (0)

#define MPICHECK_W(w, call)                                                                  \
	do {                                                                                     \
		int e_ = (call);                                                                     \
		if (e_ != MPI_SUCCESS)                                                               \
			return rt_mpi_failed((w), NULL, e_, #call, __FILE__, __LINE__);                  \
	} while (0)

#endif
