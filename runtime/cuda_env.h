/* The parts of the CUDA device and the NCCL communicator that need no GPU: which GPU a
 * rank takes, whether the plan puts two ranks on one GPU, and how a failed CUDA,
 * cuBLAS or NCCL call is reported.  The pure ones are defined in cuda_env.c, which is
 * built and unit-tested everywhere (tests/test_cuda.c), CUDA or not.
 *
 * The CHECK macros follow nccl-tests' common.h: on failure they write
 * `file:line: CALL failed on host H, rank R: NAME: library message` into the rank's
 * (or the world's) error and return RT_EFAIL to the caller, which returns it up to
 * main.  Nothing here exits or prints.  They call rt_cuda_fail(), which maps a library
 * code to its name and message and so lives with the CUDA code (cuda_stream.cu): the
 * macros exist in CUDA builds only. */
#ifndef CUDA_ENV_H
#define CUDA_ENV_H

#include <stddef.h>

#include "rt_backend.h"

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

/* Writes `file:line: call failed on host H, rank R: NAME: message DETAIL` into r's
 * error (w's when r is NULL; "the --check reference" for the reference rank) and
 * returns RT_EFAIL.  Pure: the caller gives the library's name and message. */
int rt_cuda_report(RtWorld *w, RtRank *r, const char *call, const char *name, const char *msg,
                   const char *detail, const char *file, int line);

/* Name of an ncclResult_t ("ncclInvalidArgument"), "ncclResult (unknown)" when unknown. */
const char *rt_cuda_nccl_name(int res);

/* The GPU of a rank: the plan's `device=` when this process sees that device; else,
 * when the launcher gave a local rank, local_rank % ndev (a launcher that hands each
 * process its own CUDA_VISIBLE_DEVICES leaves ndev = 1).  Returns the device, or -1
 * with the reason in why. */
int rt_cuda_pick_device(int plan_device, int local_rank, int ndev, char *why, size_t n);

/* Whether the plan's device table puts two ranks of one host on one GPU, which NCCL
 * before 2.30 refuses (nccl_version: NCCL_VERSION_CODE, 0 when unknown).  hosts: the
 * world's host names, `stride` bytes apart, in rank order, or NULL when every rank
 * runs on this host (one process).  Returns 0, or -1 with why naming both ranks, the
 * device and the host. */
int rt_cuda_shared_device(const Plan *p, const char *hosts, size_t stride, const char *host,
                          int nccl_version, char *why, size_t n);

/* CUDA builds only (cuda_stream.cu). */
/* Maps code to the library's name and message (NCCL: with ncclGetLastError's detail)
 * and reports as rt_cuda_report(). */
int rt_cuda_fail(RtWorld *w, RtRank *r, int lib, int code, const char *call, const char *file,
                 int line);
/* Number of CUDA devices this process sees; 0 with the CUDA error in why when none
 * (no device, no driver, driver too old). */
int rt_cuda_device_count(char *why, size_t n);

#define RT_CUDA_CHECK_(w, r, lib, ok1, ok2, call)                                           \
	do {                                                                                     \
		int e_ = (int)(call);                                                                \
		if (e_ != (ok1) && e_ != (ok2))                                                      \
			return rt_cuda_fail((w), (r), (lib), e_, #call, __FILE__, __LINE__);             \
	} while (0)

/* Rank-level checks (r: RtRank *).  NCCLCHECK also accepts ncclInProgress (7), the
 * answer of a non-blocking communicator; the caller then waits for the communicator. */
#define CUDACHECK(r, call) RT_CUDA_CHECK_(rt_rank_world(r), (r), RT_LIB_CUDA, 0, 0, call)
#define CUBLASCHECK(r, call) RT_CUDA_CHECK_(rt_rank_world(r), (r), RT_LIB_CUBLAS, 0, 0, call)
#define NCCLCHECK(r, call) RT_CUDA_CHECK_(rt_rank_world(r), (r), RT_LIB_NCCL, 0, 7, call)
/* World-level checks (w: RtWorld *), for the process-level functions. */
#define CUDACHECK_W(w, call) RT_CUDA_CHECK_((w), NULL, RT_LIB_CUDA, 0, 0, call)
#define NCCLCHECK_W(w, call) RT_CUDA_CHECK_((w), NULL, RT_LIB_NCCL, 0, 7, call)

#ifdef __cplusplus
}
#endif

#endif
