/* The CUDA backend: one GPU per rank, layers on a compute stream (cuBLAS GEMMs and small
 * kernels), transfers on a communication stream (NCCL), CUDA events between the two, as
 * the overlap model of docs/semantics.md describes.  docs/gpu.md has the design; this is
 * the short version.
 *
 * Streams and events.  Every rank has a compute stream `cs` and a comm stream `ms`.
 * Work on each is counted (cs: one count per backend call, ms: one per group), and
 * markers (events) record positions: one after each group on ms, and on cs lazily, just
 * before the next call after one that wrote a tensor (and on demand).  Each tensor's
 * storage (a Block, in RtTensor.aux) remembers the cs call that last wrote it and the
 * groups that last read or wrote it.  So:
 *  - a group waits (cudaStreamWaitEvent on ms) only for the compute that wrote the
 *    tensors it sends; an all-reduce waits for all compute issued before it (the
 *    stage's W ops write the gradients through views, which carry no Block);
 *  - a compute call waits only for the groups that received (or all-reduced) the
 *    tensors it reads, and for writes also for the groups still sending them.
 * The host issues everything in plan order and never waits, except in download(),
 * sync() and barrier(), as rt.h's contract for asynchronous backends says.
 *
 * Memory.  free() cannot hand storage back at once: either stream may still use it.
 * Freed Blocks go to a list with the positions of their last uses and are reused only
 * once both streams have passed them (an event query, no waiting), so a fresh tensor is
 * idle on both streams and a receive may write it at once.  Host staging for upload()
 * and download() is pinned memory kept the same way.
 *
 * Communication.  Each plan group is one ncclGroupStart/ncclGroupEnd of ncclSend and
 * ncclRecv on the world communicator, or one ncclAllReduce (ncclAvg) on the rank's dp
 * communicator, split from the world one with ncclCommSplit (color: the lowest world
 * rank of the dp group, i.e. the rank's other coordinates; key: its dp coordinate).
 * Communicators are non-blocking (config.blocking = 0): calls return at once, and the
 * backend polls ncclCommGetAsyncError, the streams and rt_aborted() while it waits.
 * wake() aborts every local communicator (ncclCommAbort) under the rank's lock, so a
 * hang ends in an abort and the watchdog's report of the blocked ops, never silence.
 *
 * Launch.  Under mpirun or srun with several processes (one rank each) the process-level
 * functions are the MPI backend's (MPI_Init, gather, bcast, MPI_Abort on failure), which
 * also carries the NCCL unique id from rank 0; the GPU is the plan's `device=` when
 * visible, else the local rank's.  Without a launcher, one process runs every rank, a
 * thread per GPU.  No device is a runtime failure (exit 1): world_open notes it and
 * launch() reports it.
 *
 * The --check reference (RT_REF_RANK) computes on the host with cpu.c, so --check
 * compares the GPUs against the CPU.  With --dtype bf16 both GEMM operands are rounded
 * to bf16 by a small kernel and cublasGemmEx accumulates in f32; f32 GEMMs use
 * CUBLAS_DEFAULT_MATH, which never uses TF32. */

/* rt.h is C11 and uses <stdatomic.h>; C++17 has no such header, so give it the
 * std::atomic types, which have the same size and layout for these integers. */
#include <atomic>
#define _STDATOMIC_H
typedef std::atomic<int> atomic_int;
typedef std::atomic<long long> atomic_llong;
using std::atomic_load_explicit;
using std::memory_order_relaxed;

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "cuda_env.h"
#include "rt.h"
}

static_assert(sizeof(atomic_int) == sizeof(int) && sizeof(atomic_llong) == sizeof(long long),
              "std::atomic must match C11 atomics for RtWorld's layout");

/* The MPI backend, when this binary has it (a weak reference, as run.c's to us). */
extern "C" const RtBackend rt_backend_mpi __attribute__((weak));

static const RtBackend *mpi_backend(void)
{
	const RtBackend *volatile b = &rt_backend_mpi;
	return b;
}

/* ======================================================================================
 * Pure helpers (cuda_env.h). */

extern "C" const char *rt_cuda_nccl_name(int res)
{
	static const char *const names[] = {
		"ncclSuccess",      "ncclUnhandledCudaError", "ncclSystemError",
		"ncclInternalError", "ncclInvalidArgument",   "ncclInvalidUsage",
		"ncclRemoteError",  "ncclInProgress",         "ncclTimeout",
	};
	if (res >= 0 && res < (int)(sizeof names / sizeof *names))
		return names[res];
	return "ncclResult (unknown)";
}

extern "C" int rt_cuda_fail(RtWorld *w, RtRank *r, int lib, int code, const char *call,
                            const char *file, int line)
{
	const char *name = "?", *msg = "?";
	char detail[512] = "";
	switch (lib) {
	case RT_LIB_CUDA:
		name = cudaGetErrorName((cudaError_t)code);
		msg = cudaGetErrorString((cudaError_t)code);
		break;
	case RT_LIB_CUBLAS:
		name = cublasGetStatusName((cublasStatus_t)code);
		msg = cublasGetStatusString((cublasStatus_t)code);
		break;
	case RT_LIB_NCCL: {
		name = rt_cuda_nccl_name(code);
		msg = ncclGetErrorString((ncclResult_t)code);
		const char *last = ncclGetLastError(NULL);
		if (last && *last)
			snprintf(detail, sizeof detail, " (%s)", last);
		break;
	}
	}
	char who[160];
	if (!r)
		snprintf(who, sizeof who, "host %s", w ? w->host : "?");
	else if (r->rank == RT_REF_RANK)
		snprintf(who, sizeof who, "host %s, the --check reference", w ? w->host : "?");
	else
		snprintf(who, sizeof who, "host %s, rank %d", w ? w->host : "?", r->rank);
	if (r)
		return rt_error(r, "%s:%d: %s failed on %s: %s: %s%s", file, line, call, who,
		                name ? name : "?", msg ? msg : "?", detail);
	if (w)
		return rt_world_error(w, "%s:%d: %s failed on %s: %s: %s%s", file, line, call, who,
		                      name ? name : "?", msg ? msg : "?", detail);
	return RT_EFAIL;
}

/* A whole number >= lo, or -1. */
static int env_int(RtGetenv get, const char *name, int lo)
{
	const char *v = get(name);
	if (!v || !*v)
		return -1;
	char *end;
	long x = strtol(v, &end, 10);
	if (*end || x < lo || x > 1 << 30)
		return -1;
	return (int)x;
}

extern "C" int rt_cuda_env_nprocs(RtGetenv get)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
	                                   "SLURM_STEP_NUM_TASKS"};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
		if (get(vars[i]))
			return env_int(get, vars[i], 1) < 0 ? 0 : env_int(get, vars[i], 1);
	return 0;
}

extern "C" int rt_cuda_env_local_rank(RtGetenv get)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
	                                   "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK",
	                                   "LOCAL_RANK"};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
		if (get(vars[i]))
			return env_int(get, vars[i], 0);
	return -1;
}

extern "C" int rt_cuda_hosts_local_rank(const char *hosts, size_t stride, int nproc, int me)
{
	if (!hosts || me < 0 || me >= nproc)
		return -1;
	int n = 0;
	for (int i = 0; i < me; i++)
		if (!strncmp(hosts + (size_t)i * stride, hosts + (size_t)me * stride, stride))
			n++;
	return n;
}

extern "C" int rt_cuda_pick_device(int plan_device, int local_rank, int ndev, char *why,
                                   size_t n)
{
	if (ndev <= 0) {
		snprintf(why, n, "no CUDA device is visible");
		return -1;
	}
	if (plan_device >= 0 && plan_device < ndev)
		return plan_device;
	if (local_rank >= 0)
		return local_rank % ndev;
	snprintf(why, n, "the plan puts the rank on device %d, but this process sees %d CUDA "
	                 "device%s (CUDA_VISIBLE_DEVICES?)",
	         plan_device, ndev, ndev == 1 ? "" : "s");
	return -1;
}

extern "C" int rt_cuda_device_count(char *why, size_t n)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		snprintf(why, n, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
		cudaGetLastError();
		return 0;
	}
	if (count <= 0)
		snprintf(why, n, "cudaGetDeviceCount found no device");
	return count > 0 ? count : 0;
}

/* ======================================================================================
 * State. */

enum { NCOMM = 1 + DIM_COUNT }; // [0] the world, [1 + d] mesh dimension d

/* What wake() may touch of a local rank; lives as long as the world. */
typedef struct {
	pthread_mutex_t mu;
	ncclComm_t comm[NCOMM];
	uint8_t owned[NCOMM]; // 0: NULL or an alias of the world communicator
	int aborted;
} CuSlot;

typedef struct {
	int mpi;                 // one process per rank, process functions from the MPI backend
	void *mpi_bw;            // the MPI backend's world state
	char defer[1024];        // why this process cannot run (no device...): launch() says it
	int *dev;                // [nlocal] device of each local rank
	ncclUniqueId id;
	CuSlot *slot;            // [nlocal]
	int nslot;
} CuWorld;

/* Device or pinned host storage and the positions of its last uses. */
typedef struct Block {
	void *ptr;
	size_t size;
	int64_t cs_last, ms_last; // last use on each stream (0: none)
	int64_t cs_write;         // cs call that last wrote it
	int64_t ms_write;         // group that last wrote it (a receive or all-reduce)
	int64_t ms_read;          // group that last read it (a send)
	struct Block *next;
} Block;

/* Markers of one stream: events at increasing positions, oldest first. */
typedef struct {
	cudaEvent_t *ev;
	int64_t *pos;
	int64_t *op;              // ms: first and last plan op of the group (2 per marker)
	int cap, head, n;
	int64_t last;             // position of the newest marker (0: none)
	int64_t done;             // every position <= done has completed
} Ring;

enum { POST_SEND, POST_RECV, POST_ALLREDUCE, POST_BARRIER };

typedef struct {
	int kind;
	RtTensor *t;
	int peer;
	int64_t op;               // index in the rank's op list (-1: the barrier)
} Post;

typedef struct {
	int ref;                  // the --check reference: computes on the host (cpu.c)
	int dev;
	CuSlot *slot;
	cudaStream_t cs, ms;
	cublasHandle_t blas;
	int bf16;
	Ring csr, msr;
	int64_t cs_pos, ms_pos;   // calls issued on cs, groups issued on ms
	int mark_due;             // a tracked tensor was written since the last cs marker
	int64_t cs_waits_ms;      // newest group cs already waits for
	int64_t ms_waits_cs;      // newest cs position ms already waits for
	Block *free_dev;          // freed device blocks (ready or not)
	Block *free_host;         // pinned host staging
	Block *one;               // one float, for barrier()
	Post *post;
	int npost, postcap;
	int world;
} CuRank;

static CuWorld *cuw(RtWorld *w)
{
	return (CuWorld *)w->bw;
}

static CuRank *cur(RtRank *r)
{
	return (CuRank *)r->be;
}

static int is_ref(const RtRank *r)
{
	return r->rank == RT_REF_RANK;
}

static Block *blk(const RtTensor *t)
{
	return t ? (Block *)t->aux : NULL;
}

/* ======================================================================================
 * Communicators: every use under the slot's lock, so wake() can abort from any thread. */

static void slot_abort_locked(CuSlot *s)
{
	for (int i = NCOMM - 1; i >= 0; i--) {
		if (s->comm[i] && s->owned[i])
			ncclCommAbort(s->comm[i]);
		s->comm[i] = NULL;
		s->owned[i] = 0;
	}
	s->aborted = 1;
}

static void slot_abort(CuSlot *s)
{
	pthread_mutex_lock(&s->mu);
	slot_abort_locked(s);
	pthread_mutex_unlock(&s->mu);
}

static const char *comm_name(int i)
{
	static const char *const n[NCOMM] = {"world", "pp", "dp", "tp"};
	return i >= 0 && i < NCOMM ? n[i] : "?";
}

/* An asynchronous NCCL error on any of the rank's communicators, as a failure. */
static int check_async(RtRank *r)
{
	CuSlot *s = cur(r)->slot;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < NCOMM; i++) {
		ncclResult_t st = ncclSuccess;
		if (!s->comm[i] || !s->owned[i])
			continue;
		ncclResult_t e = ncclCommGetAsyncError(s->comm[i], &st);
		if (e != ncclSuccess)
			st = e;
		if (st != ncclSuccess && st != ncclInProgress) {
			const char *last = ncclGetLastError(s->comm[i]);
			rt_error(r, "NCCL failed on host %s, rank %d, %s communicator: %s: %s%s%s%s",
			         r->w->host, r->rank, comm_name(i), rt_cuda_nccl_name(st),
			         ncclGetErrorString(st), last && *last ? " (" : "", last ? last : "",
			         last && *last ? ")" : "");
			slot_abort_locked(s);
			pthread_mutex_unlock(&s->mu);
			return RT_EFAIL;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return RT_OK;
}

static void backoff(long spins)
{
	if (spins < 2000) {
		sched_yield();
		return;
	}
	struct timespec ts = {0, spins < 20000 ? 20000 : 200000};
	nanosleep(&ts, NULL);
}

/* Waits until communicator i of the rank has finished its last call (non-blocking
 * communicators answer ncclInProgress until then). */
static int comm_ready(RtRank *r, int i, const char *what)
{
	CuSlot *s = cur(r)->slot;
	for (long spins = 0;; spins++) {
		pthread_mutex_lock(&s->mu);
		if (!s->comm[i]) {
			pthread_mutex_unlock(&s->mu);
			return rt_aborted(r->w) || s->aborted
			           ? RT_EABORT
			           : rt_error(r, "internal: no %s communicator on rank %d", comm_name(i),
			                      r->rank);
		}
		ncclResult_t st = ncclInProgress;
		ncclResult_t e = ncclCommGetAsyncError(s->comm[i], &st);
		pthread_mutex_unlock(&s->mu);
		if (e != ncclSuccess)
			return rt_cuda_fail(r->w, r, RT_LIB_NCCL, e, "ncclCommGetAsyncError", __FILE__,
			                    __LINE__);
		if (st == ncclSuccess)
			return RT_OK;
		if (st != ncclInProgress) {
			rt_error(r, "%s failed on host %s, rank %d, %s communicator: %s: %s", what,
			         r->w->host, r->rank, comm_name(i), rt_cuda_nccl_name(st),
			         ncclGetErrorString(st));
			slot_abort(s);
			return RT_EFAIL;
		}
		if (rt_aborted(r->w)) {
			slot_abort(s);
			return RT_EABORT;
		}
		backoff(spins);
	}
}

/* ======================================================================================
 * Markers and waiting. */

static int ring_open(RtRank *r, Ring *g, int cap)
{
	memset(g, 0, sizeof *g);
	g->ev = (cudaEvent_t *)calloc((size_t)cap, sizeof *g->ev);
	g->pos = (int64_t *)calloc((size_t)cap, sizeof *g->pos);
	g->op = (int64_t *)calloc((size_t)cap * 2, sizeof *g->op);
	if (!g->ev || !g->pos || !g->op)
		return rt_error(r, "out of memory");
	g->cap = cap;
	return RT_OK;
}

static void ring_close(Ring *g)
{
	if (g->ev)
		for (int i = 0; i < g->cap; i++)
			if (g->ev[i])
				cudaEventDestroy(g->ev[i]);
	free(g->ev);
	free(g->pos);
	free(g->op);
	memset(g, 0, sizeof *g);
}

/* Retires the markers that completed. */
static int ring_poll(RtRank *r, Ring *g)
{
	while (g->n > 0) {
		cudaError_t e = cudaEventQuery(g->ev[g->head]);
		if (e == cudaErrorNotReady)
			return RT_OK;
		if (e != cudaSuccess)
			return rt_cuda_fail(r->w, r, RT_LIB_CUDA, e, "cudaEventQuery", __FILE__, __LINE__);
		g->done = g->pos[g->head];
		g->head = (g->head + 1) % g->cap;
		g->n--;
	}
	g->done = g->last;
	return RT_OK;
}

/* The oldest pending marker at or after pos; NULL when pos has completed already. */
static cudaEvent_t ring_find(const Ring *g, int64_t pos)
{
	if (pos <= g->done)
		return NULL;
	for (int i = 0; i < g->n; i++) {
		int k = (g->head + i) % g->cap;
		if (g->pos[k] >= pos)
			return g->ev[k];
	}
	return NULL;
}

static int wait_pos(RtRank *r, int64_t cs_need, int64_t ms_need);

static int ring_record(RtRank *r, Ring *g, cudaStream_t s, int64_t pos, int64_t op0,
                       int64_t op1)
{
	if (g->n == g->cap) {
		/* Full: wait for the oldest marker (the host is far ahead of the GPU). */
		int64_t oldest = g->pos[g->head];
		int rc = g == &cur(r)->csr ? wait_pos(r, oldest, 0) : wait_pos(r, 0, oldest);
		if (rc)
			return rc;
	}
	int k = (g->head + g->n) % g->cap;
	if (!g->ev[k])
		CUDACHECK(r, cudaEventCreateWithFlags(&g->ev[k], cudaEventDisableTiming));
	CUDACHECK(r, cudaEventRecord(g->ev[k], s));
	g->pos[k] = pos;
	g->op[2 * k] = op0;
	g->op[2 * k + 1] = op1;
	g->n++;
	g->last = pos;
	return RT_OK;
}

/* Makes sure a cs marker covers position pos (records one now if needed). */
static int cs_cover(RtRank *r, int64_t pos)
{
	CuRank *c = cur(r);
	if (pos <= c->csr.last)
		return RT_OK;
	c->mark_due = 0;
	return ring_record(r, &c->csr, c->cs, c->cs_pos, -1, -1);
}

/* The host runs ahead of the GPU, so when a wait ends badly the op the interpreter
 * issued last is not what is stuck: name the oldest group the comm stream has not
 * finished instead (compute only ever waits for groups), for rt_world_report(). */
static void blame_group(RtRank *r)
{
	const Ring *g = &cur(r)->msr;
	if (g->n == 0)
		return;
	int64_t op0 = g->op[2 * g->head], op1 = g->op[2 * g->head + 1];
	atomic_store(&r->cur_end, op1 + 1);
	atomic_store(&r->cur_op, op0);
}

/* Polls until cs has passed cs_need and ms has passed ms_need, watching rt_aborted()
 * and NCCL's asynchronous errors. */
static int wait_pos(RtRank *r, int64_t cs_need, int64_t ms_need)
{
	CuRank *c = cur(r);
	if (cs_need > c->csr.last && cs_cover(r, cs_need))
		return RT_EFAIL;
	for (long spins = 0;; spins++) {
		if (ring_poll(r, &c->csr) || ring_poll(r, &c->msr))
			return RT_EFAIL;
		if (c->csr.done >= cs_need && c->msr.done >= ms_need)
			return RT_OK;
		if (rt_aborted(r->w)) {
			blame_group(r);
			slot_abort(c->slot);
			return RT_EABORT;
		}
		if (spins % 64 == 0 && check_async(r)) {
			blame_group(r);
			return RT_EFAIL;
		}
		backoff(spins);
	}
}

static int wait_idle(RtRank *r)
{
	CuRank *c = cur(r);
	return wait_pos(r, c->cs_pos, c->ms_pos);
}

/* ======================================================================================
 * Compute-stream calls: cs_begin() orders the call after the groups it depends on,
 * cs_end() records what it touched. */

typedef struct {
	const RtTensor *t;
	int write;
} Use;

static int cs_begin(RtRank *r, const Use *u, int n)
{
	CuRank *c = cur(r);
	if (c->mark_due) {
		c->mark_due = 0;
		if (ring_record(r, &c->csr, c->cs, c->cs_pos, -1, -1))
			return RT_EFAIL;
	}
	int64_t need = 0;
	for (int i = 0; i < n; i++) {
		const Block *b = blk(u[i].t);
		if (!b)
			continue;
		if (b->ms_write > need)
			need = b->ms_write;
		if (u[i].write && b->ms_read > need)
			need = b->ms_read;
	}
	if (need > c->cs_waits_ms) {
		if (ring_poll(r, &c->msr))
			return RT_EFAIL;
		cudaEvent_t ev = ring_find(&c->msr, need);
		if (ev)
			CUDACHECK(r, cudaStreamWaitEvent(c->cs, ev, 0));
		c->cs_waits_ms = need;
	}
	return RT_OK;
}

static void cs_end(RtRank *r, const Use *u, int n)
{
	CuRank *c = cur(r);
	c->cs_pos++;
	for (int i = 0; i < n; i++) {
		Block *b = blk(u[i].t);
		if (!b)
			continue;
		b->cs_last = c->cs_pos;
		if (u[i].write) {
			b->cs_write = c->cs_pos;
			c->mark_due = 1;
		}
	}
}

/* ======================================================================================
 * Storage. */

static int ready(const CuRank *c, const Block *b)
{
	return b->cs_last <= c->csr.done && b->ms_last <= c->msr.done;
}

static size_t round_size(int64_t bytes)
{
	size_t n = bytes > 0 ? (size_t)bytes : 1;
	return (n + 511) & ~(size_t)511;
}

/* A freed block of exactly `size` bytes that both streams are done with. */
static Block *take_ready(CuRank *c, Block **list, size_t size)
{
	for (Block **p = list; *p; p = &(*p)->next) {
		Block *b = *p;
		if (b->size == size && ready(c, b)) {
			*p = b->next;
			b->next = NULL;
			b->cs_last = b->ms_last = b->cs_write = b->ms_write = b->ms_read = 0;
			return b;
		}
	}
	return NULL;
}

static void release(RtRank *r, Block **list, Block *b)
{
	CuRank *c = cur(r);
	if (b->cs_last > c->csr.last)
		c->mark_due = 1; // the next cs call records the marker that frees it
	b->next = *list;
	*list = b;
}

/* Frees every block of the list (the streams must be idle: cudaFree synchronizes). */
static void drop_all(Block **list, int host)
{
	while (*list) {
		Block *b = *list;
		*list = b->next;
		if (host)
			cudaFreeHost(b->ptr);
		else
			cudaFree(b->ptr);
		free(b);
	}
}

static int idle_now(CuRank *c)
{
	return cudaStreamQuery(c->cs) == cudaSuccess && cudaStreamQuery(c->ms) == cudaSuccess;
}

/* A block of `bytes` bytes: reused when possible, else new.  When the device is out of
 * memory, waits (a bounded time) for freed blocks to come back, or for idle streams to
 * return the cache to CUDA and try again. */
static Block *get_block(RtRank *r, int64_t bytes, int host)
{
	CuRank *c = cur(r);
	Block **list = host ? &c->free_host : &c->free_dev;
	size_t size = round_size(bytes);
	if (ring_poll(r, &c->csr) || ring_poll(r, &c->msr))
		return NULL;
	Block *b = take_ready(c, list, size);
	if (b)
		return b;
	b = (Block *)calloc(1, sizeof *b);
	if (!b) {
		rt_error(r, "out of memory");
		return NULL;
	}
	b->size = size;
	cudaError_t e = host ? cudaHostAlloc(&b->ptr, size, cudaHostAllocDefault)
	                     : cudaMalloc(&b->ptr, size);
	int64_t t0 = rt_now_ns();
	for (long spins = 0; e == cudaErrorMemoryAllocation; spins++) {
		cudaGetLastError();
		if (ring_poll(r, &c->csr) || ring_poll(r, &c->msr)) {
			free(b);
			return NULL;
		}
		Block *old = take_ready(c, list, size);
		if (old) {
			free(b);
			return old;
		}
		if (idle_now(c)) {
			c->csr.done = c->csr.last;
			c->msr.done = c->msr.last;
			drop_all(list, host);
			e = host ? cudaHostAlloc(&b->ptr, size, cudaHostAllocDefault)
			         : cudaMalloc(&b->ptr, size);
			break;
		}
		if (rt_aborted(r->w) || rt_now_ns() - t0 > 5000000000LL)
			break;
		backoff(spins);
	}
	if (e != cudaSuccess) {
		free(b);
		rt_cuda_fail(r->w, r, RT_LIB_CUDA, e, host ? "cudaHostAlloc(size)" : "cudaMalloc(size)",
		             __FILE__, __LINE__);
		return NULL;
	}
	return b;
}

static int cu_alloc(RtRank *r, RtTensor *t)
{
	if (is_ref(r))
		return rt_cpu_alloc(r, t);
	Block *b = get_block(r, t->bytes, 0);
	if (!b)
		return RT_EFAIL;
	t->data = b->ptr;
	t->aux = b;
	return RT_OK;
}

static void cu_free(RtRank *r, RtTensor *t)
{
	if (is_ref(r)) {
		rt_cpu_free(r, t);
		return;
	}
	Block *b = blk(t);
	t->data = NULL;
	t->aux = NULL;
	if (b)
		release(r, &cur(r)->free_dev, b);
}

/* ======================================================================================
 * Kernels.  Grid-stride loops; the arithmetic mirrors cpu.c (rounded intrinsics where
 * nvcc would otherwise fuse a multiply-add the CPU does not), so everything but the
 * GEMMs, tanh and the loss's summation order matches the reference bit for bit. */

#define GELU_C 0.7978845608f
#define GELU_A 0.044715f

static int grid_of(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

#define FOR_EACH(i, n)                                                                       \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
	     i += (int64_t)gridDim.x * blockDim.x)

static __global__ void k_bias_rows(float *y, const float *b, int64_t m, int64_t n)
{
	FOR_EACH(i, m * n)
	y[i] = b[i % n];
}

static __global__ void k_add(float *d, const float *s, int64_t n)
{
	FOR_EACH(i, n)
	d[i] = __fadd_rn(d[i], s[i]);
}

static __global__ void k_scale(float *d, float a, int64_t n)
{
	FOR_EACH(i, n)
	d[i] = __fmul_rn(d[i], a);
}

static __global__ void k_sgd(float *w, const float *g, float lr, int64_t n)
{
	FOR_EACH(i, n)
	w[i] = __fsub_rn(w[i], __fmul_rn(lr, g[i]));
}

static __global__ void k_relu_fwd(const float *x, float *y, int64_t n)
{
	FOR_EACH(i, n)
	y[i] = x[i] > 0 ? x[i] : 0;
}

static __global__ void k_relu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
	FOR_EACH(i, n)
	dx[i] = x[i] > 0 ? dy[i] : 0;
}

static __global__ void k_gelu_fwd(const float *x, float *y, int64_t n)
{
	FOR_EACH(i, n)
	{
		float v = x[i];
		y[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_A * v * v * v)));
	}
}

static __global__ void k_gelu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
	FOR_EACH(i, n)
	{
		float v = x[i];
		float th = tanhf(GELU_C * (v + GELU_A * v * v * v));
		float d = 0.5f * (1.0f + th) +
		          0.5f * v * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
		dx[i] = dy[i] * d;
	}
}

static __global__ void k_mse_bwd(const float *y, const float *t, float k, float *dy, int64_t n)
{
	FOR_EACH(i, n)
	dy[i] = __fmul_rn(k, __fsub_rn(y[i], t[i]));
}

/* db[j] += sum over rows of dy[i][j], rows in order: the CPU's order exactly. */
static __global__ void k_colsum(const float *dy, float *db, int64_t m, int64_t n)
{
	FOR_EACH(j, n)
	{
		float s = db[j];
		for (int64_t i = 0; i < m; i++)
			s = __fadd_rn(s, dy[i * n + j]);
		db[j] = s;
	}
}

/* loss[0] = mean of (y - t)^2, summed in double by one block in a fixed order, so the
 * result never depends on scheduling. */
enum { MSE_THREADS = 1024 };
static __global__ void k_mse_fwd(const float *y, const float *t, float *loss, int64_t n)
{
	__shared__ double part[MSE_THREADS];
	double s = 0;
	for (int64_t i = threadIdx.x; i < n; i += MSE_THREADS) {
		double d = (double)y[i] - (double)t[i];
		s += d * d;
	}
	part[threadIdx.x] = s;
	__syncthreads();
	for (int w = MSE_THREADS / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			part[threadIdx.x] += part[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*loss = (float)(part[0] / (double)n);
}

static __global__ void k_to_bf16(const float *x, __nv_bfloat16 *y, int64_t n)
{
	FOR_EACH(i, n)
	y[i] = __float2bfloat16_rn(x[i]);
}

#define F32(t) ((float *)(t)->data)
#define LAUNCH(r, kernel, n, ...)                                                            \
	do {                                                                                     \
		kernel<<<grid_of(n), 256, 0, cur(r)->cs>>>(__VA_ARGS__);                             \
		CUDACHECK((r), cudaGetLastError());                                                  \
	} while (0)

static int same_shape(RtRank *r, const RtTensor *a, const RtTensor *b, const char *what)
{
	if (a->rows != b->rows || a->cols != b->cols)
		return rt_error(r, "internal: %s of a %lldx%lld and a %lldx%lld tensor", what,
		                (long long)a->rows, (long long)a->cols, (long long)b->rows,
		                (long long)b->cols);
	return RT_OK;
}

static int64_t numel(const RtTensor *t)
{
	return t->rows * t->cols;
}

/* ======================================================================================
 * Tensor operations. */

static int cu_upload(RtRank *r, RtTensor *t, const float *host)
{
	if (is_ref(r))
		return rt_cpu_upload(r, t, host);
	Block *h = get_block(r, t->bytes, 1);
	if (!h)
		return RT_EFAIL;
	memcpy(h->ptr, host, (size_t)t->bytes);
	Use u[] = {{t, 1}};
	int rc = cs_begin(r, u, 1);
	if (rc == RT_OK) {
		cudaError_t e =
			cudaMemcpyAsync(t->data, h->ptr, (size_t)t->bytes, cudaMemcpyHostToDevice, cur(r)->cs);
		if (e != cudaSuccess)
			rc = rt_cuda_fail(r->w, r, RT_LIB_CUDA, e, "cudaMemcpyAsync(H2D)", __FILE__, __LINE__);
	}
	cs_end(r, u, 1);
	h->cs_last = cur(r)->cs_pos;
	release(r, &cur(r)->free_host, h);
	return rc;
}

static int cu_download(RtRank *r, const RtTensor *t, float *host)
{
	if (is_ref(r))
		return rt_cpu_download(r, t, host);
	Block *h = get_block(r, t->bytes, 1);
	if (!h)
		return RT_EFAIL;
	Use u[] = {{t, 0}};
	int rc = cs_begin(r, u, 1);
	if (rc == RT_OK) {
		cudaError_t e =
			cudaMemcpyAsync(h->ptr, t->data, (size_t)t->bytes, cudaMemcpyDeviceToHost, cur(r)->cs);
		if (e != cudaSuccess)
			rc = rt_cuda_fail(r->w, r, RT_LIB_CUDA, e, "cudaMemcpyAsync(D2H)", __FILE__, __LINE__);
	}
	cs_end(r, u, 1);
	h->cs_last = cur(r)->cs_pos;
	if (rc == RT_OK)
		rc = wait_pos(r, cur(r)->cs_pos, 0);
	if (rc == RT_OK)
		memcpy(host, h->ptr, (size_t)t->bytes);
	release(r, &cur(r)->free_host, h);
	return rc;
}

static int cu_zero(RtRank *r, RtTensor *t)
{
	if (is_ref(r))
		return rt_cpu_zero(r, t);
	Use u[] = {{t, 1}};
	if (cs_begin(r, u, 1))
		return RT_EFAIL;
	cs_end(r, u, 1);
	CUDACHECK(r, cudaMemsetAsync(t->data, 0, (size_t)t->bytes, cur(r)->cs));
	return RT_OK;
}

static int cu_copy(RtRank *r, RtTensor *dst, const RtTensor *src)
{
	if (is_ref(r))
		return rt_cpu_copy(r, dst, src);
	if (same_shape(r, dst, src, "copy"))
		return RT_EFAIL;
	Use u[] = {{dst, 1}, {src, 0}};
	if (cs_begin(r, u, 2))
		return RT_EFAIL;
	cs_end(r, u, 2);
	CUDACHECK(r, cudaMemcpyAsync(dst->data, src->data, (size_t)src->bytes,
	                             cudaMemcpyDeviceToDevice, cur(r)->cs));
	return RT_OK;
}

static int cu_add(RtRank *r, RtTensor *dst, const RtTensor *src)
{
	if (is_ref(r))
		return rt_cpu_add(r, dst, src);
	if (same_shape(r, dst, src, "sum"))
		return RT_EFAIL;
	Use u[] = {{dst, 1}, {src, 0}};
	if (cs_begin(r, u, 2))
		return RT_EFAIL;
	cs_end(r, u, 2);
	LAUNCH(r, k_add, numel(dst), F32(dst), F32(src), numel(dst));
	return RT_OK;
}

static int cu_scale(RtRank *r, RtTensor *t, float alpha)
{
	if (is_ref(r))
		return rt_cpu_scale(r, t, alpha);
	Use u[] = {{t, 1}};
	if (cs_begin(r, u, 1))
		return RT_EFAIL;
	cs_end(r, u, 1);
	LAUNCH(r, k_scale, numel(t), F32(t), alpha, numel(t));
	return RT_OK;
}

static int cu_sgd(RtRank *r, RtTensor *w, const RtTensor *g, float lr)
{
	if (is_ref(r))
		return rt_cpu_sgd(r, w, g, lr);
	if (same_shape(r, w, g, "optimizer step"))
		return RT_EFAIL;
	Use u[] = {{w, 1}, {g, 0}};
	if (cs_begin(r, u, 2))
		return RT_EFAIL;
	cs_end(r, u, 2);
	LAUNCH(r, k_sgd, numel(w), F32(w), F32(g), lr, numel(w));
	return RT_OK;
}

/* ---- GEMMs: column-major cuBLAS on row-major tensors (a row-major M is M^T to it) ---- */

/* C = A op B (+ beta C) in cuBLAS's terms; A has na elements, B nb (for bf16 copies). */
static int gemm(RtRank *r, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                int64_t k, const float *A, int64_t lda, int64_t na, const float *B, int64_t ldb,
                int64_t nb, float beta, float *C, int64_t ldc)
{
	CuRank *c = cur(r);
	const int64_t lim = 0x7fffffff;
	if (m > lim || n > lim || k > lim || lda > lim || ldb > lim || ldc > lim)
		return rt_error(r, "GEMM of %lldx%lldx%lld is too large for cuBLAS's int sizes",
		                (long long)m, (long long)n, (long long)k);
	const float one = 1.0f;
	if (m == 0 || n == 0)
		return RT_OK;
	if (!c->bf16) {
		CUBLASCHECK(r, cublasSgemm(c->blas, ta, tb, (int)m, (int)n, (int)k, &one, A, (int)lda,
		                           B, (int)ldb, &beta, C, (int)ldc));
		return RT_OK;
	}
	Block *a16 = get_block(r, na * 2, 0), *b16 = a16 ? get_block(r, nb * 2, 0) : NULL;
	int rc = RT_OK;
	if (!a16 || !b16)
		rc = RT_EFAIL;
	if (rc == RT_OK) {
		k_to_bf16<<<grid_of(na), 256, 0, c->cs>>>(A, (__nv_bfloat16 *)a16->ptr, na);
		k_to_bf16<<<grid_of(nb), 256, 0, c->cs>>>(B, (__nv_bfloat16 *)b16->ptr, nb);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			rc = rt_cuda_fail(r->w, r, RT_LIB_CUDA, e, "k_to_bf16<<<>>>", __FILE__, __LINE__);
	}
	if (rc == RT_OK) {
		cublasStatus_t st = cublasGemmEx(c->blas, ta, tb, (int)m, (int)n, (int)k, &one, a16->ptr,
		                                 CUDA_R_16BF, (int)lda, b16->ptr, CUDA_R_16BF, (int)ldb,
		                                 &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
		                                 CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS)
			rc = rt_cuda_fail(r->w, r, RT_LIB_CUBLAS, st, "cublasGemmEx(bf16)", __FILE__,
			                  __LINE__);
	}
	/* The scratch is used by the call being issued: free it past it. */
	Block *scratch[2] = {a16, b16};
	for (int i = 0; i < 2; i++)
		if (scratch[i]) {
			scratch[i]->cs_last = c->cs_pos + 1;
			release(r, &c->free_dev, scratch[i]);
		}
	return rc;
}

static int cu_linear_fwd(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b,
                         RtTensor *y)
{
	if (is_ref(r))
		return rt_cpu_linear_fwd(r, x, w, b, y);
	int64_t m = x->rows, k = x->cols, n = w->cols;
	if (w->rows != k || y->rows != m || y->cols != n || b->cols != n)
		return rt_error(r, "internal: linear of shapes %lldx%lld by %lldx%lld into %lldx%lld",
		                (long long)m, (long long)k, (long long)w->rows, (long long)w->cols,
		                (long long)y->rows, (long long)y->cols);
	Use u[] = {{x, 0}, {w, 0}, {b, 0}, {y, 1}};
	if (cs_begin(r, u, 4))
		return RT_EFAIL;
	LAUNCH(r, k_bias_rows, m * n, F32(y), F32(b), m, n);
	/* y^T (n x m) = w^T (n x k) x^T (k x m) */
	int rc = gemm(r, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, F32(w), n, k * n, F32(x), k, m * k, 1.0f,
	              F32(y), n);
	cs_end(r, u, 4);
	return rc;
}

static int cu_linear_bwd_in(RtRank *r, const RtTensor *dy, const RtTensor *w, RtTensor *dx)
{
	if (is_ref(r))
		return rt_cpu_linear_bwd_in(r, dy, w, dx);
	int64_t m = dy->rows, n = dy->cols, k = w->rows;
	if (w->cols != n || dx->rows != m || dx->cols != k)
		return rt_error(r, "internal: linear input gradient of mismatched shapes");
	Use u[] = {{dy, 0}, {w, 0}, {dx, 1}};
	if (cs_begin(r, u, 3))
		return RT_EFAIL;
	/* dx^T (k x m) = (w^T)^T (k x n) dy^T (n x m) */
	int rc = gemm(r, CUBLAS_OP_T, CUBLAS_OP_N, k, m, n, F32(w), n, k * n, F32(dy), n, m * n, 0.0f,
	              F32(dx), k);
	cs_end(r, u, 3);
	return rc;
}

static int cu_linear_bwd_w(RtRank *r, const RtTensor *x, const RtTensor *dy, RtTensor *dw,
                           RtTensor *db)
{
	if (is_ref(r))
		return rt_cpu_linear_bwd_w(r, x, dy, dw, db);
	int64_t m = x->rows, k = x->cols, n = dy->cols;
	if (dy->rows != m || dw->rows != k || dw->cols != n || db->cols != n)
		return rt_error(r, "internal: linear weight gradient of mismatched shapes");
	Use u[] = {{x, 0}, {dy, 0}, {dw, 1}, {db, 1}};
	if (cs_begin(r, u, 4))
		return RT_EFAIL;
	/* dw^T (n x k) += dy^T (n x m) (x^T)^T (m x k) */
	int rc = gemm(r, CUBLAS_OP_N, CUBLAS_OP_T, n, k, m, F32(dy), n, m * n, F32(x), k, m * k, 1.0f,
	              F32(dw), n);
	if (rc == RT_OK) {
		k_colsum<<<grid_of(n), 256, 0, cur(r)->cs>>>(F32(dy), F32(db), m, n);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			rc = rt_cuda_fail(r->w, r, RT_LIB_CUDA, e, "k_colsum<<<>>>", __FILE__, __LINE__);
	}
	cs_end(r, u, 4);
	return rc;
}

static int cu_act_fwd(RtRank *r, int kind, const RtTensor *x, RtTensor *y)
{
	if (is_ref(r))
		return rt_cpu_act_fwd(r, kind, x, y);
	if (same_shape(r, y, x, "activation"))
		return RT_EFAIL;
	Use u[] = {{x, 0}, {y, 1}};
	if (cs_begin(r, u, 2))
		return RT_EFAIL;
	cs_end(r, u, 2);
	if (kind == LAYER_RELU)
		LAUNCH(r, k_relu_fwd, numel(x), F32(x), F32(y), numel(x));
	else
		LAUNCH(r, k_gelu_fwd, numel(x), F32(x), F32(y), numel(x));
	return RT_OK;
}

static int cu_act_bwd(RtRank *r, int kind, const RtTensor *x, const RtTensor *dy, RtTensor *dx)
{
	if (is_ref(r))
		return rt_cpu_act_bwd(r, kind, x, dy, dx);
	if (same_shape(r, dy, x, "activation gradient") ||
	    same_shape(r, dx, x, "activation gradient"))
		return RT_EFAIL;
	Use u[] = {{x, 0}, {dy, 0}, {dx, 1}};
	if (cs_begin(r, u, 3))
		return RT_EFAIL;
	cs_end(r, u, 3);
	if (kind == LAYER_RELU)
		LAUNCH(r, k_relu_bwd, numel(x), F32(x), F32(dy), F32(dx), numel(x));
	else
		LAUNCH(r, k_gelu_bwd, numel(x), F32(x), F32(dy), F32(dx), numel(x));
	return RT_OK;
}

static int cu_mse_fwd(RtRank *r, const RtTensor *y, const RtTensor *t, RtTensor *loss, int slot)
{
	if (is_ref(r))
		return rt_cpu_mse_fwd(r, y, t, loss, slot);
	if (same_shape(r, y, t, "loss"))
		return RT_EFAIL;
	if (slot < 0 || slot >= loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", slot, (long long)loss->cols);
	Use u[] = {{y, 0}, {t, 0}, {loss, 1}};
	if (cs_begin(r, u, 3))
		return RT_EFAIL;
	cs_end(r, u, 3);
	k_mse_fwd<<<1, MSE_THREADS, 0, cur(r)->cs>>>(F32(y), F32(t), F32(loss) + slot, numel(y));
	CUDACHECK(r, cudaGetLastError());
	return RT_OK;
}

static int cu_mse_bwd(RtRank *r, const RtTensor *y, const RtTensor *t, float scale, RtTensor *dy)
{
	if (is_ref(r))
		return rt_cpu_mse_bwd(r, y, t, scale, dy);
	if (same_shape(r, y, t, "loss gradient") || same_shape(r, dy, y, "loss gradient"))
		return RT_EFAIL;
	Use u[] = {{y, 0}, {t, 0}, {dy, 1}};
	if (cs_begin(r, u, 3))
		return RT_EFAIL;
	cs_end(r, u, 3);
	int64_t n = numel(y);
	float k = (float)(2.0 * (double)scale / (double)n); // as cpu.c
	LAUNCH(r, k_mse_bwd, n, F32(y), F32(t), k, F32(dy), n);
	return RT_OK;
}

/* ======================================================================================
 * Communication. */

static int cu_group_start(RtRank *r)
{
	if (is_ref(r))
		return rt_error(r, "internal: communication on the --check reference");
	cur(r)->npost = 0;
	return RT_OK;
}

static int add_post(RtRank *r, int kind, const RtTensor *t, int peer, int64_t op)
{
	CuRank *c = cur(r);
	if (c->npost == c->postcap) {
		int cap = c->postcap ? 2 * c->postcap : 16;
		Post *p = (Post *)realloc(c->post, (size_t)cap * sizeof *p);
		if (!p)
			return rt_error(r, "out of memory");
		c->post = p;
		c->postcap = cap;
	}
	c->post[c->npost++] = Post{kind, (RtTensor *)t, peer, op};
	return RT_OK;
}

static int cu_send(RtRank *r, const RtTensor *t, int peer, const RtMsg *m)
{
	if (t->bytes != m->bytes)
		return rt_error(r, "internal: send of %lld bytes for a %lld-byte message",
		                (long long)t->bytes, (long long)m->bytes);
	if (peer < 0 || peer >= r->w->plan->world)
		return rt_error(r, "internal: send to rank %d of %d", peer, r->w->plan->world);
	return add_post(r, POST_SEND, t, peer, m->op);
}

static int cu_recv(RtRank *r, RtTensor *t, int peer, const RtMsg *m)
{
	if (t->bytes != m->bytes)
		return rt_error(r, "internal: receive of %lld bytes for a %lld-byte message",
		                (long long)t->bytes, (long long)m->bytes);
	if (peer < 0 || peer >= r->w->plan->world)
		return rt_error(r, "internal: receive from rank %d of %d", peer, r->w->plan->world);
	return add_post(r, POST_RECV, t, peer, m->op);
}

static int cu_allreduce(RtRank *r, RtTensor *t, const RtMsg *m)
{
	return add_post(r, POST_ALLREDUCE, t, -1, m->op);
}

/* Issues the posted ops as one NCCL group on ms, after the compute they depend on. */
static int flush_group(RtRank *r)
{
	CuRank *c = cur(r);
	CuSlot *s = c->slot;
	int n = c->npost;
	c->npost = 0;
	if (n == 0)
		return RT_OK;
	/* What the group waits for on cs: sends the writes of their data, receives and
	 * all-reduces every earlier use of the storage they overwrite (an all-reduce also
	 * the gradient writes through views: everything issued so far). */
	int64_t need = 0, op0 = c->post[0].op, op1 = c->post[0].op;
	int ci = 0;
	for (int i = 0; i < n; i++) {
		const Post *p = &c->post[i];
		op0 = p->op < op0 ? p->op : op0;
		op1 = p->op > op1 ? p->op : op1;
		const Block *b = blk(p->t);
		int64_t want = !b ? c->cs_pos
		               : p->kind == POST_SEND ? b->cs_write
		               : p->kind == POST_ALLREDUCE ? c->cs_pos
		                                           : b->cs_last;
		if (want > need)
			need = want;
		if (p->kind == POST_ALLREDUCE)
			ci = 1 + DIM_DP; // alone in its group (plan invariant)
	}
	if (need > c->ms_waits_cs) {
		if (cs_cover(r, need) || ring_poll(r, &c->csr))
			return RT_EFAIL;
		cudaEvent_t ev = ring_find(&c->csr, need);
		if (ev)
			CUDACHECK(r, cudaStreamWaitEvent(c->ms, ev, 0));
		c->ms_waits_cs = need;
	}
	/* An all-reduce over one rank (dp = 1 inside a larger world) averages nothing. */
	pthread_mutex_lock(&s->mu);
	ncclComm_t comm = s->comm[ci];
	if (!comm && ci == 1 + DIM_DP && !s->aborted) {
		pthread_mutex_unlock(&s->mu);
		return RT_OK;
	}
	if (!comm) {
		pthread_mutex_unlock(&s->mu);
		return RT_EABORT;
	}
	ncclResult_t e = ncclGroupStart();
	for (int i = 0; i < n && (e == ncclSuccess || e == ncclInProgress); i++) {
		const Post *p = &c->post[i];
		size_t count = (size_t)numel(p->t);
		switch (p->kind) {
		case POST_SEND:
			e = ncclSend(p->t->data, count, ncclFloat32, p->peer, comm, c->ms);
			break;
		case POST_RECV:
			e = ncclRecv(p->t->data, count, ncclFloat32, p->peer, comm, c->ms);
			break;
		case POST_ALLREDUCE:
			e = ncclAllReduce(p->t->data, p->t->data, count, ncclFloat32, ncclAvg, comm, c->ms);
			break;
		case POST_BARRIER:
			e = ncclAllReduce(p->t->data, p->t->data, count, ncclFloat32, ncclSum, comm, c->ms);
			break;
		}
	}
	ncclResult_t e2 = ncclGroupEnd();
	pthread_mutex_unlock(&s->mu);
	if (e != ncclSuccess && e != ncclInProgress)
		return rt_cuda_fail(r->w, r, RT_LIB_NCCL, e, "ncclSend/ncclRecv/ncclAllReduce", __FILE__,
		                    __LINE__);
	if (e2 != ncclSuccess && e2 != ncclInProgress)
		return rt_cuda_fail(r->w, r, RT_LIB_NCCL, e2, "ncclGroupEnd()", __FILE__, __LINE__);
	/* The ops are on the stream once the communicator is no longer in progress. */
	int rc = comm_ready(r, ci, "ncclGroupEnd");
	if (rc)
		return rc;
	c->ms_pos++;
	if (ring_record(r, &c->msr, c->ms, c->ms_pos, op0, op1))
		return RT_EFAIL;
	for (int i = 0; i < n; i++) {
		Block *b = blk(c->post[i].t);
		if (!b)
			continue;
		b->ms_last = c->ms_pos;
		if (c->post[i].kind == POST_SEND)
			b->ms_read = c->ms_pos;
		else
			b->ms_write = c->ms_pos;
	}
	return RT_OK;
}

static int cu_group_end(RtRank *r)
{
	return flush_group(r);
}

static int cu_sync(RtRank *r)
{
	if (is_ref(r))
		return RT_OK;
	return wait_idle(r);
}

static int cu_barrier(RtRank *r)
{
	CuRank *c = cur(r);
	if (is_ref(r) || c->world == 1)
		return RT_OK;
	RtTensor one = {};
	one.data = c->one->ptr;
	one.rows = one.cols = 1;
	one.bytes = 4;
	c->npost = 0;
	if (add_post(r, POST_BARRIER, &one, -1, -1) || flush_group(r))
		return rt_aborted(r->w) ? RT_EABORT : RT_EFAIL;
	return wait_pos(r, 0, c->ms_pos);
}

/* ======================================================================================
 * Ranks. */

static int init_comms(RtRank *r)
{
	CuRank *c = cur(r);
	CuSlot *s = c->slot;
	CuWorld *cw = cuw(r->w);
	const Plan *p = r->w->plan;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	pthread_mutex_lock(&s->mu);
	ncclResult_t e = s->aborted ? ncclSuccess
	                            : ncclCommInitRankConfig(&s->comm[0], p->world, cw->id, r->rank,
	                                                     &cfg);
	if (s->comm[0])
		s->owned[0] = 1;
	pthread_mutex_unlock(&s->mu);
	if (e != ncclSuccess && e != ncclInProgress)
		return rt_cuda_fail(r->w, r, RT_LIB_NCCL, e, "ncclCommInitRankConfig", __FILE__,
		                    __LINE__);
	int rc = comm_ready(r, 0, "ncclCommInitRankConfig");
	if (rc)
		return rc;
	/* One communicator per mesh dimension that has several ranks: the ranks that differ
	 * only in that coordinate, ordered by it.  Collective over the world, in dimension
	 * order, so every rank splits alike. */
	int *mem = (int *)malloc((size_t)p->world * sizeof(int));
	if (!mem)
		return rt_error(r, "out of memory");
	for (int d = 0; d < DIM_COUNT && rc == RT_OK; d++) {
		if (p->dims[d] <= 1 && p->world > 1)
			continue;
		if (p->dims[d] == p->world) { // the whole world: the world communicator itself
			pthread_mutex_lock(&s->mu);
			s->comm[1 + d] = s->comm[0];
			pthread_mutex_unlock(&s->mu);
			continue;
		}
		plan_dim_members(p, r->rank, d, mem);
		pthread_mutex_lock(&s->mu);
		if (!s->comm[0]) {
			pthread_mutex_unlock(&s->mu);
			rc = RT_EABORT;
			break;
		}
		e = ncclCommSplit(s->comm[0], mem[0], r->coord[d], &s->comm[1 + d], &cfg);
		if (s->comm[1 + d])
			s->owned[1 + d] = 1;
		pthread_mutex_unlock(&s->mu);
		if (e != ncclSuccess && e != ncclInProgress)
			rc = rt_cuda_fail(r->w, r, RT_LIB_NCCL, e, "ncclCommSplit", __FILE__, __LINE__);
		/* Non-blocking: the parent finishes the split, then the child its init. */
		if (rc == RT_OK)
			rc = comm_ready(r, 0, "ncclCommSplit");
		if (rc == RT_OK)
			rc = comm_ready(r, 1 + d, "ncclCommSplit");
	}
	free(mem);
	return rc;
}

static int cu_rank_open(RtRank *r)
{
	CuRank *c = (CuRank *)calloc(1, sizeof *c);
	if (!c)
		return rt_error(r, "out of memory");
	r->be = c;
	if (is_ref(r)) {
		c->ref = 1;
		return RT_OK;
	}
	CuWorld *cw = cuw(r->w);
	c->slot = &cw->slot[r->local];
	c->dev = cw->dev[r->local];
	c->world = r->w->plan->world;
	c->bf16 = r->w->opt.dtype == RT_DTYPE_BF16;
	if (ring_open(r, &c->csr, 4096) || ring_open(r, &c->msr, 4096))
		return RT_EFAIL;
	CUDACHECK(r, cudaSetDevice(c->dev));
	CUDACHECK(r, cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking));
	CUDACHECK(r, cudaStreamCreateWithFlags(&c->ms, cudaStreamNonBlocking));
	CUBLASCHECK(r, cublasCreate(&c->blas));
	CUBLASCHECK(r, cublasSetStream(c->blas, c->cs));
	/* No TF32: f32 GEMMs stay f32 (docs/gpu.md, tolerance). */
	CUBLASCHECK(r, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
	if (!(c->one = get_block(r, 4, 0)))
		return RT_EFAIL;
	return init_comms(r);
}

static void cu_rank_close(RtRank *r)
{
	CuRank *c = cur(r);
	if (!c)
		return;
	if (!c->ref) {
		/* A failed or aborted run may leave work waiting for peers that never come:
		 * abort the communicators first, and free device memory only once the streams
		 * are idle (cudaFree would wait for them). */
		int clean = !r->err[0] && !rt_aborted(r->w) && c->slot && !c->slot->aborted;
		if (!clean && c->slot)
			slot_abort(c->slot);
		int idle = 0;
		if (c->cs) {
			for (int64_t t0 = rt_now_ns(); rt_now_ns() - t0 < 10000000000LL;) {
				cudaError_t a = cudaStreamQuery(c->cs), b = c->ms ? cudaStreamQuery(c->ms)
				                                                  : cudaSuccess;
				if (a != cudaErrorNotReady && b != cudaErrorNotReady) {
					idle = 1;
					break;
				}
				struct timespec ts = {0, 1000000};
				nanosleep(&ts, NULL);
			}
		}
		if (clean && c->slot) {
			/* Flush and free the communicators: dimensions first, then the world. */
			for (int i = NCOMM - 1; i >= 0; i--) {
				CuSlot *s = c->slot;
				pthread_mutex_lock(&s->mu);
				ncclComm_t comm = s->owned[i] ? s->comm[i] : NULL;
				if (comm)
					ncclCommFinalize(comm);
				pthread_mutex_unlock(&s->mu);
				if (comm && comm_ready(r, i, "ncclCommFinalize") != RT_OK)
					break;
				pthread_mutex_lock(&s->mu);
				if (s->comm[i] && s->owned[i])
					ncclCommDestroy(s->comm[i]);
				for (int j = 0; j < NCOMM; j++)
					if (j != i && s->comm[j] == s->comm[i] && !s->owned[j])
						s->comm[j] = NULL;
				s->comm[i] = NULL;
				s->owned[i] = 0;
				pthread_mutex_unlock(&s->mu);
			}
			slot_abort(c->slot); // whatever is left after a failed finalize
		}
		ring_close(&c->csr); // pending events are released when they complete
		ring_close(&c->msr);
		if (idle) {
			if (c->one)
				release(r, &c->free_dev, c->one);
			drop_all(&c->free_dev, 0);
			drop_all(&c->free_host, 1);
			if (c->blas)
				cublasDestroy(c->blas);
			if (c->cs)
				cudaStreamDestroy(c->cs);
			if (c->ms)
				cudaStreamDestroy(c->ms);
		}
		/* Else the GPU is wedged: leave its memory to the process's end. */
	}
	free(c->post);
	free(c);
	r->be = NULL;
}

/* ======================================================================================
 * The process. */

static int mpi_call(RtWorld *w, int (*fn)(RtWorld *))
{
	CuWorld *cw = cuw(w);
	w->bw = cw->mpi_bw;
	int rc = fn(w);
	cw->mpi_bw = w->bw;
	w->bw = cw;
	return rc;
}

static int cu_gather(RtWorld *w, const void *mine, int64_t n, void *all)
{
	CuWorld *cw = cuw(w);
	if (!cw->mpi) {
		memcpy(all, mine, (size_t)(n * w->nlocal));
		return RT_OK;
	}
	w->bw = cw->mpi_bw;
	int rc = mpi_backend()->gather(w, mine, n, all);
	w->bw = cw;
	return rc;
}

static int cu_bcast(RtWorld *w, void *buf, int64_t n)
{
	CuWorld *cw = cuw(w);
	if (!cw->mpi)
		return RT_OK;
	w->bw = cw->mpi_bw;
	int rc = mpi_backend()->bcast(w, buf, n);
	w->bw = cw;
	return rc;
}

static int defer(CuWorld *cw, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int defer(CuWorld *cw, const char *fmt, ...)
{
	if (!cw->defer[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(cw->defer, sizeof cw->defer, fmt, ap);
		va_end(ap);
	}
	return RT_OK;
}

static char *real_getenv(const char *name)
{
	return getenv(name);
}

/* Picks each local rank's GPU; problems are deferred to launch(). */
static int pick_devices(RtWorld *w)
{
	CuWorld *cw = cuw(w);
	const Plan *p = w->plan;
	char why[256];
	int local = -1;
	if (cw->mpi) {
		local = rt_cuda_env_local_rank(real_getenv);
		/* No launcher variable: count the processes on this host (collective). */
		int known = local >= 0;
		char *hosts = (char *)calloc((size_t)p->world, 64);
		if (!hosts)
			return rt_world_error(w, "out of memory");
		char me[64] = {0};
		snprintf(me, sizeof me, "%s", w->host);
		int rc = cu_gather(w, me, 64, w->root ? hosts : NULL);
		if (rc == RT_OK)
			rc = cu_bcast(w, hosts, (int64_t)p->world * 64);
		if (rc == RT_OK && !known)
			local = rt_cuda_hosts_local_rank(hosts, 64, p->world, w->first_local);
		free(hosts);
		if (rc)
			return rc;
	}
	int ndev = rt_cuda_device_count(why, sizeof why);
	if (ndev == 0)
		return defer(cw, "no CUDA device on host %s: %s", w->host, why);
	for (int i = 0; i < w->nlocal; i++) {
		int rank = w->first_local + i;
		int d = rt_cuda_pick_device(p->ranks[rank].device, local, ndev, why, sizeof why);
		if (d < 0)
			return defer(cw, "rank %d on host %s: %s; a plan with %d ranks on one machine needs "
			                 "%d GPUs (or run it under mpirun/srun across machines)",
			             rank, w->host, why, p->world, p->world);
		for (int j = 0; j < i; j++)
			if (cw->dev[j] == d) {
				int v = 0;
				ncclGetVersion(&v);
				return defer(cw, "ranks %d and %d would share GPU %d on host %s, and NCCL %d "
				                 "refuses two ranks of a communicator on one GPU (this process "
				                 "sees %d device%s; the plan needs %d)",
				             w->first_local + j, rank, d, w->host, v, ndev, ndev == 1 ? "" : "s",
				             p->world);
			}
		cw->dev[i] = d;
	}
	return RT_OK;
}

static int cu_world_open(RtWorld *w)
{
	CuWorld *cw = (CuWorld *)calloc(1, sizeof *cw);
	if (!cw)
		return rt_world_error(w, "out of memory");
	w->bw = cw;
	const Plan *p = w->plan;
	int nprocs = rt_cuda_env_nprocs(real_getenv);
	if (nprocs > 1) {
		/* One rank per process: the MPI backend opens MPI and checks the world size. */
		if (!mpi_backend())
			return rt_world_error(w, "started by a launcher with %d processes, but this piperun "
			                         "has no MPI backend to hand out the NCCL id (build it with "
			                         "mpicc installed)",
			                      nprocs);
		cw->mpi = 1;
		if (mpi_call(w, mpi_backend()->world_open))
			return RT_EFAIL;
	} else {
		w->first_local = 0;
		w->nlocal = p->world;
		w->root = 1;
	}
	rt_cpu_blas_threads(w->opt.blas_threads); // the --check reference computes on the host
	cw->dev = (int *)calloc((size_t)w->nlocal, sizeof(int));
	cw->slot = (CuSlot *)calloc((size_t)w->nlocal, sizeof(CuSlot));
	if (!cw->dev || !cw->slot)
		return rt_world_error(w, "out of memory");
	for (int i = 0; i < w->nlocal; i++)
		pthread_mutex_init(&cw->slot[i].mu, NULL);
	cw->nslot = w->nlocal;
	if (pick_devices(w))
		return RT_EFAIL;
	/* The NCCL id: made by world rank 0, handed to every process.  Every process takes
	 * part in the broadcast, even one that cannot run, so none waits forever. */
	struct {
		int ok;
		ncclUniqueId id;
	} msg;
	memset(&msg, 0, sizeof msg);
	if (w->root && !cw->defer[0]) {
		ncclResult_t e = ncclGetUniqueId(&msg.id);
		if (e == ncclSuccess)
			msg.ok = 1;
		else
			defer(cw, "ncclGetUniqueId failed on host %s: %s: %s", w->host, rt_cuda_nccl_name(e),
			      ncclGetErrorString(e));
	}
	if (cu_bcast(w, &msg, sizeof msg))
		return RT_EFAIL;
	if (!msg.ok)
		defer(cw, "world rank 0 could not make the NCCL id, so no rank can run");
	cw->id = msg.id;
	return RT_OK;
}

static void cu_world_close(RtWorld *w, int failed)
{
	CuWorld *cw = cuw(w);
	if (!cw)
		return;
	for (int i = 0; i < cw->nslot; i++) {
		slot_abort(&cw->slot[i]);
		pthread_mutex_destroy(&cw->slot[i].mu);
	}
	free(cw->slot);
	free(cw->dev);
	if (cw->mpi && cw->mpi_bw) {
		w->bw = cw->mpi_bw;
		mpi_backend()->world_close(w, failed);
	}
	free(cw);
	w->bw = NULL;
}

static int cu_launch(RtWorld *w, int (*fn)(RtRank *))
{
	CuWorld *cw = cuw(w);
	if (cw->defer[0])
		return rt_world_error(w, "%s", cw->defer);
	if (cw->mpi) {
		w->ranks[0].status = fn(&w->ranks[0]);
		return RT_OK;
	}
	return rt_launch_threads(w, fn);
}

/* From the watchdog or a failing rank: abort every local communicator, which ends the
 * NCCL kernels, so the streams drain and every poll returns RT_EABORT. */
static void cu_wake(RtWorld *w)
{
	CuWorld *cw = cuw(w);
	for (int i = 0; i < cw->nslot; i++)
		slot_abort(&cw->slot[i]);
}

extern "C" const RtBackend rt_backend_cuda = {
	.name = "cuda",
	.async = 1,
	.world_open = cu_world_open,
	.launch = cu_launch,
	.wake = cu_wake,
	.gather = cu_gather,
	.bcast = cu_bcast,
	.world_close = cu_world_close,
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
	.linear_fwd = cu_linear_fwd,
	.linear_bwd_in = cu_linear_bwd_in,
	.linear_bwd_w = cu_linear_bwd_w,
	.act_fwd = cu_act_fwd,
	.act_bwd = cu_act_bwd,
	.mse_fwd = cu_mse_fwd,
	.mse_bwd = cu_mse_bwd,
	.sgd = cu_sgd,
	.group_start = cu_group_start,
	.send = cu_send,
	.recv = cu_recv,
	.allreduce_avg = cu_allreduce,
	.group_end = cu_group_end,
	.sync = cu_sync,
	.barrier = cu_barrier,
};
