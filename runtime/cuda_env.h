/* The parts of the CUDA backend that need no GPU: where a process sits in its launch
 * (launcher environment, local rank), which GPU a rank takes, and how a failed CUDA,
 * cuBLAS or NCCL call is reported.  They are pure functions of their arguments, so the
 * unit tests check them on machines without a GPU (tests/test_cuda.c).
 *
 * The CHECK macros follow nccl-tests' common.h: on failure they write
 * `file:line: CALL failed on host H, rank R: NAME: library message` into the rank's
 * (or the world's) error with rt_error and return RT_EFAIL to the caller, which
 * returns it up to main.  Nothing here exits or prints.
 *
 * The definitions live in backend_cuda.cu, so they exist only in builds with CUDA
 * (HAVE_CUDA); the header itself needs no CUDA headers. */
#ifndef CUDA_ENV_H
#define CUDA_ENV_H

#include <stddef.h>

#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which library a failed call belongs to, for rt_cuda_fail(). */
typedef enum {
	RT_LIB_CUDA,   // CUDA runtime: cudaError_t
	RT_LIB_CUBLAS, // cuBLAS: cublasStatus_t
	RT_LIB_NCCL,   // NCCL: ncclResult_t
	RT_LIB_COUNT
} RtCudaLib;

/* Writes `file:line: call failed on host H, rank R: NAME: message` into r's error
 * (w's when r is NULL; "the --check reference" for the reference rank) and returns
 * RT_EFAIL.  code is the library's return value. */
int rt_cuda_fail(RtWorld *w, RtRank *r, int lib, int code, const char *call, const char *file,
                 int line);

/* Name of an ncclResult_t ("ncclInvalidArgument"), "ncclResult N" when unknown. */
const char *rt_cuda_nccl_name(int res);

#define RT_CUDA_CHECK_(w, r, lib, ok1, ok2, call)                                           \
	do {                                                                                     \
		int e_ = (int)(call);                                                                \
		if (e_ != (ok1) && e_ != (ok2))                                                      \
			return rt_cuda_fail((w), (r), (lib), e_, #call, __FILE__, __LINE__);             \
	} while (0)

/* Rank-level checks (r: RtRank *).  NCCLCHECK also accepts ncclInProgress (7), the
 * answer of a non-blocking communicator; the caller then waits for the communicator. */
#define CUDACHECK(r, call) RT_CUDA_CHECK_((r)->w, (r), RT_LIB_CUDA, 0, 0, call)
#define CUBLASCHECK(r, call) RT_CUDA_CHECK_((r)->w, (r), RT_LIB_CUBLAS, 0, 0, call)
#define NCCLCHECK(r, call) RT_CUDA_CHECK_((r)->w, (r), RT_LIB_NCCL, 0, 7, call)
/* World-level checks (w: RtWorld *), for the process-level functions. */
#define CUDACHECK_W(w, call) RT_CUDA_CHECK_((w), NULL, RT_LIB_CUDA, 0, 0, call)
#define NCCLCHECK_W(w, call) RT_CUDA_CHECK_((w), NULL, RT_LIB_NCCL, 0, 7, call)

/* Environment lookups go through a getenv-like function, so tests can fake one. */
typedef char *(*RtGetenv)(const char *name);

/* Processes the launcher started (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE,
 * SLURM_STEP_NUM_TASKS, first one set: srun sets the last for its tasks, not for the
 * batch script, whose SLURM_NTASKS describes the allocation); 0 when not started by a
 * launcher or the value is not a positive number. */
int rt_cuda_env_nprocs(RtGetenv get);

/* This process's rank among the processes of its node, from the launcher
 * (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, MV2_COMM_WORLD_LOCAL_RANK,
 * LOCAL_RANK, first one set); -1 when none is set or the value is not a whole number
 * >= 0. */
int rt_cuda_env_local_rank(RtGetenv get);

/* Local rank from every process's host name: hosts holds nproc NUL-terminated names,
 * `stride` bytes apart, in world order; the answer is how many processes before `me`
 * run on the same host.  -1 when me is out of range. */
int rt_cuda_hosts_local_rank(const char *hosts, size_t stride, int nproc, int me);

/* The GPU of a rank: the plan's `device=` when this process sees that device; else,
 * when the launcher gave a local rank, local_rank % ndev (a launcher that hands each
 * process its own CUDA_VISIBLE_DEVICES leaves ndev = 1).  Returns the device, or -1
 * with the reason in why. */
int rt_cuda_pick_device(int plan_device, int local_rank, int ndev, char *why, size_t n);

/* Number of CUDA devices this process sees; 0 with the CUDA error in why when none
 * (no device, no driver, driver too old). */
int rt_cuda_device_count(char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
