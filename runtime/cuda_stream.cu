/* The lowest layer of the CUDA parts (the scheme is cuda_dev.h's): recording and
 * retiring the streams' markers, the waits that poll them (watching rt_aborted() and the
 * communicator's errors), ordering a compute call after the groups it depends on, the
 * stream-ordered reuse of freed device and pinned host blocks, and the text of a failed
 * CUDA, cuBLAS or NCCL call. */
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_dev.h"

void cu_backoff(long spins)
{
	if (spins < 2000) {
		sched_yield();
		return;
	}
	struct timespec ts = {0, spins < 20000 ? 20000 : 200000};
	nanosleep(&ts, NULL);
}

/* ---- markers ---- */

int cu_ring_open(RtRank *r, Ring *g, int cap)
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

void cu_ring_close(Ring *g)
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

int cu_ring_poll(RtRank *r, Ring *g)
{
	while (g->n > 0) {
		cudaError_t e = cudaEventQuery(g->ev[g->head]);
		if (e == cudaErrorNotReady)
			return RT_OK;
		if (e != cudaSuccess)
			return rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, "cudaEventQuery", __FILE__, __LINE__);
		g->done = g->pos[g->head];
		g->head = (g->head + 1) % g->cap;
		g->n--;
	}
	g->done = g->last;
	return RT_OK;
}

cudaEvent_t cu_ring_find(const Ring *g, int64_t pos)
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

int cu_ring_record(RtRank *r, Ring *g, cudaStream_t s, int64_t pos, int64_t op0, int64_t op1)
{
	if (g->n == g->cap) {
		/* Full: wait for the oldest marker (the host is far ahead of the GPU). */
		int64_t oldest = g->pos[g->head];
		int rc = g == &cur(r)->csr ? cu_wait_pos(r, oldest, 0) : cu_wait_pos(r, 0, oldest);
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

int cu_cs_cover(RtRank *r, int64_t pos)
{
	CuRank *c = cur(r);
	if (pos <= c->csr.last)
		return RT_OK;
	c->mark_due = 0;
	return cu_ring_record(r, &c->csr, c->cs, c->cs_pos, -1, -1);
}

/* The host runs ahead of the GPU, so when a wait ends badly the op the interpreter
 * issued last is not what is stuck: name the oldest group the comm stream has not
 * finished instead (compute only ever waits for groups), for rt_world_report(). */
static void blame_group(RtRank *r)
{
	const Ring *g = &cur(r)->msr;
	if (g->n > 0)
		rt_rank_blame(r, g->op[2 * g->head], g->op[2 * g->head + 1] + 1);
}

int cu_wait_pos(RtRank *r, int64_t cs_need, int64_t ms_need)
{
	CuRank *c = cur(r);
	if (cs_need > c->csr.last && cu_cs_cover(r, cs_need))
		return RT_EFAIL;
	for (long spins = 0;; spins++) {
		if (cu_ring_poll(r, &c->csr) || cu_ring_poll(r, &c->msr))
			return RT_EFAIL;
		if (c->csr.done >= cs_need && c->msr.done >= ms_need)
			return RT_OK;
		if (rt_aborted(rt_rank_world(r))) {
			blame_group(r);
			if (c->comm_abort)
				c->comm_abort(r);
			return RT_EABORT;
		}
		if (spins % 64 == 0 && c->comm_poll && c->comm_poll(r)) {
			blame_group(r);
			return RT_EFAIL;
		}
		cu_backoff(spins);
	}
}

int cu_wait_idle(RtRank *r)
{
	CuRank *c = cur(r);
	return cu_wait_pos(r, c->cs_pos, c->ms_pos);
}

/* ---- compute-stream calls ---- */

int cu_cs_begin(RtRank *r, const Use *u, int n)
{
	CuRank *c = cur(r);
	if (c->mark_due) {
		c->mark_due = 0;
		if (cu_ring_record(r, &c->csr, c->cs, c->cs_pos, -1, -1))
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
		if (cu_ring_poll(r, &c->msr))
			return RT_EFAIL;
		cudaEvent_t ev = cu_ring_find(&c->msr, need);
		if (ev)
			CUDACHECK(r, cudaStreamWaitEvent(c->cs, ev, 0));
		c->cs_waits_ms = need;
	}
	return RT_OK;
}

void cu_cs_end(RtRank *r, const Use *u, int n)
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

/* ---- storage ---- */

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

void cu_release(RtRank *r, Block **list, Block *b)
{
	CuRank *c = cur(r);
	if (b->cs_last > c->csr.last)
		c->mark_due = 1; // the next cs call records the marker that frees it
	b->next = *list;
	*list = b;
}

void cu_drop_all(Block **list, int host)
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
Block *cu_get_block(RtRank *r, int64_t bytes, int host)
{
	CuRank *c = cur(r);
	Block **list = host ? &c->free_host : &c->free_dev;
	size_t size = round_size(bytes);
	if (cu_ring_poll(r, &c->csr) || cu_ring_poll(r, &c->msr))
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
		if (cu_ring_poll(r, &c->csr) || cu_ring_poll(r, &c->msr)) {
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
			cu_drop_all(list, host);
			e = host ? cudaHostAlloc(&b->ptr, size, cudaHostAllocDefault)
			         : cudaMalloc(&b->ptr, size);
			break;
		}
		if (rt_aborted(rt_rank_world(r)) || rt_now_ns() - t0 > 5000000000LL)
			break;
		cu_backoff(spins);
	}
	if (e != cudaSuccess) {
		free(b);
		rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, host ? "cudaHostAlloc(size)" : "cudaMalloc(size)",
		             __FILE__, __LINE__);
		return NULL;
	}
	return b;
}


/* ---- errors: the text of a failed CUDA, cuBLAS or NCCL call (cuda_env.h) ---- */

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
	return rt_cuda_report(w, r, call, name, msg, detail, file, line);
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

/* ---- the bad-token flag (written by cuda_tf.cu's kernels) ---- */

int cu_tokens_report(RtRank *r)
{
	static const char *const what[] = {"input token", "target token"};
	const volatile CuTokBad *t = cur(r)->tok;
	if (!t || !t->bad)
		return RT_OK;
	return rt_error(r, "%s %lld is %g, not a token id in [0, %lld)", what[t->what & 1],
	                (long long)t->index, (double)t->value, (long long)t->vocab);
}
