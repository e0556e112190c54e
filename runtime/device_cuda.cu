/* The cuda device: one GPU per rank, layers on the rank's compute stream, storage in
 * device memory (docs/gpu.md).  This file is the thin part: choosing each rank's GPU,
 * opening and closing its streams and cuBLAS handle, alloc, free and sync, and the
 * table.  The streams, markers and block reuse are in cuda_stream.cu, the kernels and
 * GEMMs in cuda_kernels.cu and cuda_tf.cu (the scheme: cuda_dev.h).  Any launcher fits:
 * threads (a thread per GPU) or mpi (a process per GPU).
 *
 * Problems of the machine (no GPU, a device the plan names that is not there, two
 * ranks of a host on one GPU) are noted with rt_world_unable(), so every process still
 * takes part in opening (the communicator's id broadcast) and the run then fails with
 * the reason (exit 1).  The --check reference never comes here: it runs on the cpu
 * device. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_dev.h"
extern "C" {
#include "../plan/line.h"
}

/* ---- the process ---- */

typedef struct {
	int *dev; // [nlocal] device of each local rank
} CuWorld;

/* Picks each local rank's GPU; what stops this process is noted, not failed. */
static int pick_devices(RtWorld *w, CuWorld *cw)
{
	const Plan *p = rt_world_plan(w);
	const char *host = rt_world_host(w);
	int first = rt_world_first_local(w), nlocal = rt_world_nlocal(w);
	char why[512], *hosts;
	if (rt_world_hosts(w, &hosts))
		return RT_EFAIL;
	/* Before any NCCL call: NCCL itself would fail obscurely, or hang. */
	int shared = rt_cuda_shared_device(p, hosts, RT_HOST_BYTES, host, NCCL_VERSION_CODE, why,
	                                   sizeof why);
	int local = rt_launch_env_local_rank(rt_real_getenv);
	if (local < 0 && hosts)
		local = rt_launch_hosts_local_rank(hosts, RT_HOST_BYTES, p->world, first);
	free(hosts);
	if (shared)
		return rt_world_unable(w, "%s", why);
	int ndev = rt_cuda_device_count(why, sizeof why);
	if (ndev == 0)
		return rt_world_unable(w, "no CUDA device on host %s: %s", host, why);
	for (int i = 0; i < nlocal; i++) {
		int d = rt_cuda_pick_device(plan_rank(p, first + i, NULL)->device, local, ndev, why, sizeof why);
		if (d < 0)
			return rt_world_unable(w, "rank %d on host %s: %s; a plan with %d ranks on one "
			                          "machine needs %d GPUs (or run it under mpirun/srun "
			                          "across machines)",
			                       first + i, host, why, p->world, p->world);
		cw->dev[i] = d;
	}
	return RT_OK;
}

static int cu_open(RtWorld *w)
{
	CuWorld *cw = (CuWorld *)calloc(1, sizeof *cw);
	if (!cw)
		return rt_world_error(w, "out of memory");
	*rt_world_state(w, RT_PART_DEVICE) = cw;
	cw->dev = (int *)calloc((size_t)rt_world_nlocal(w), sizeof(int));
	if (!cw->dev)
		return rt_world_error(w, "out of memory");
	return pick_devices(w, cw);
}

static void cu_close(RtWorld *w)
{
	CuWorld *cw = (CuWorld *)*rt_world_state(w, RT_PART_DEVICE);
	if (!cw)
		return;
	free(cw->dev);
	free(cw);
	*rt_world_state(w, RT_PART_DEVICE) = NULL;
}

/* ---- ranks ---- */

static int cu_rank_open(RtRank *r)
{
	CuRank *c = (CuRank *)calloc(1, sizeof *c);
	if (!c)
		return rt_error(r, "out of memory");
	*rt_rank_state(r, RT_PART_DEVICE) = c;
	RtWorld *w = rt_rank_world(r);
	c->dev = ((CuWorld *)*rt_world_state(w, RT_PART_DEVICE))->dev[rt_rank_local(r)];
	c->bf16 = rt_world_options(w)->dtype == RT_DTYPE_BF16;
	if (cu_ring_open(r, &c->csr, 4096) || cu_ring_open(r, &c->msr, 4096))
		return RT_EFAIL;
	CUDACHECK(r, cudaSetDevice(c->dev));
	CUDACHECK(r, cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking));
	CUDACHECK(r, cudaStreamCreateWithFlags(&c->ms, cudaStreamNonBlocking));
	CUBLASCHECK(r, cublasCreate(&c->blas));
	CUBLASCHECK(r, cublasSetStream(c->blas, c->cs));
	/* No TF32: f32 GEMMs stay f32 (docs/gpu.md, tolerance). */
	CUBLASCHECK(r, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
	CUDACHECK(r, cudaHostAlloc((void **)&c->tok, sizeof *c->tok, cudaHostAllocMapped));
	memset(c->tok, 0, sizeof *c->tok);
	CUDACHECK(r, cudaHostGetDevicePointer((void **)&c->tok_dev, c->tok, 0));
	return RT_OK;
}

/* Waits (up to 10 s) for both streams to drain; 0 when they do not (a wedged GPU). */
static int drain(CuRank *c)
{
	if (!c->cs)
		return 0;
	for (int64_t t0 = rt_now_ns(); rt_now_ns() - t0 < 10000000000LL;) {
		cudaError_t a = cudaStreamQuery(c->cs);
		cudaError_t b = c->ms ? cudaStreamQuery(c->ms) : cudaSuccess;
		if (a != cudaErrorNotReady && b != cudaErrorNotReady)
			return 1;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* After the communicator's rank_close (which aborted its communicators if the run
 * failed): device memory is freed only once the streams are idle, as cudaFree would
 * wait for them; a wedged GPU's memory is left to the process's end. */
static void cu_rank_close(RtRank *r)
{
	CuRank *c = cur(r);
	if (!c)
		return;
	int idle = drain(c);
	cu_ring_close(&c->csr); // pending events are released when they complete
	cu_ring_close(&c->msr);
	if (idle) {
		cu_drop_all(&c->free_dev, 0);
		cu_drop_all(&c->free_host, 1);
		if (c->blas)
			cublasDestroy(c->blas);
		if (c->tok)
			cudaFreeHost(c->tok);
		if (c->cs)
			cudaStreamDestroy(c->cs);
		if (c->ms)
			cudaStreamDestroy(c->ms);
	}
	free(c);
	*rt_rank_state(r, RT_PART_DEVICE) = NULL;
}

static int cu_alloc(RtRank *r, RtTensor *t)
{
	Block *b = cu_get_block(r, t->bytes, 0);
	if (!b)
		return RT_EFAIL;
	t->data = b->ptr;
	t->aux = b;
	return RT_OK;
}

static void cu_free(RtRank *r, RtTensor *t)
{
	Block *b = blk(t);
	t->data = NULL;
	t->aux = NULL;
	if (b)
		cu_release(r, &cur(r)->free_dev, b);
}

/* Also where a bad token id the kernels met is reported (cuda_tf.cu). */
static int cu_sync(RtRank *r)
{
	int rc = cu_wait_idle(r);
	return rc == RT_OK ? cu_tokens_report(r) : rc;
}

/* The layer rows by kind, as C's designated initializers would place them (C++ has none
 * for arrays), from the kernel files' lists (constant-initialized, so ready before this
 * runs); a kind left out stays empty and rt_device_check refuses plans using it. */
struct CuLayerTable {
	RtLayerKernels k[LAYER_COUNT];
};

static CuLayerTable make_layers()
{
	CuLayerTable t = {};
	const CuLayerRow *lists[] = {cu_mat_rows, cu_tf_rows};
	const int n[] = {cu_mat_nrows, cu_tf_nrows};
	for (int l = 0; l < 2; l++)
		for (int i = 0; i < n[l]; i++)
			t.k[lists[l][i].kind] = lists[l][i].k;
	return t;
}

static const CuLayerTable cu_layers = make_layers();

extern "C" const RtDevice rt_device_cuda = {
	.name = "cuda",
	.async = 1,
	.open = cu_open,
	.close = cu_close,
	.rank_open = cu_rank_open,
	.rank_close = cu_rank_close,
	.alloc = cu_alloc,
	.free = cu_free,
	.upload = cu_upload,
	.download = cu_download,
	.zero = cu_zero,
	.copy = cu_copy,
	.add = cu_add,
	.scale = cu_scale,
	.layers = cu_layers.k,
	.optim = cu_optim.f,
	.sync = cu_sync,
	.gen = cu_gen,
	.tp_split = 1, // cuda_tf.cu's rows compute tp shards
};
