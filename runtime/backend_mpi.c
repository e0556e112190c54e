/* The MPI backend: one rank per process, computing on the host (cpu.c), talking over
 * MPI.  `mpirun -np WORLD piperun PLAN` (or srun) starts it; the same binary runs
 * across machines.
 *
 * Point-to-point: every SEND posts two synchronous-mode sends, MPI_Issend, to the
 * peer on the world communicator: a small header (edge, microbatch, direction, bytes,
 * op index), then the data.  Synchronous mode completes only once the matching
 * receive has started, which makes every send a rendezvous whatever its size (NCCL's
 * contract, docs/semantics.md), where plain MPI_Isend would buffer small messages
 * eagerly.  A RECV posts MPI_Irecv for both.  All messages of one kind use one tag,
 * so MPI's non-overtaking rule gives the FIFO matching per ordered pair the plan
 * relies on; the receiver compares the header with what its op expects and fails
 * with both ops named on a mismatch.
 *
 * All-reduce: MPI_Iallreduce (sum, in place) on the rank's dp communicator, made with
 * MPI_Comm_split once per mesh dimension, then a scale by 1/dp.  MPI chooses the
 * summation order, so results may differ from the threads backend in the last bits.
 *
 * A group's requests are completed together by polling MPI_Testall, which checks
 * rt_aborted() between polls: the watchdog can end a deadlock, and the process then
 * ends the whole job with MPI_Abort (world_close with failed set), after a grace
 * period that lets the other processes print their own blocked ops first. */
#include "rt.h"

#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_HDR = 7301, TAG_DATA = 7302 };
enum { HDR_EDGE, HDR_MB, HDR_DIR, HDR_BYTES, HDR_OP, HDR_N };

typedef struct {
	MPI_Comm comm;
	int rank, size;
	int inited;    // we called MPI_Init (so we finalize)
} MpWorld;

typedef struct {
	int64_t hdr[HDR_N]; // sent, or received
	RtMsg want;         // recv: what the op expects
	int peer;
	int kind;           // OP_SEND, OP_RECV, OP_ALLREDUCE
	RtTensor *t;
} MpOp;

typedef struct {
	MPI_Comm dim[DIM_COUNT]; // communicators per mesh dimension
	int ndp;
	MPI_Request *reqs;
	int nreq, reqcap;
	MpOp **ops;              // pool; pointers stay put while MPI holds their buffers
	int nops, opcap;
} MpRank;

/* The message of a failed MPI call, as nccl-tests' MPICHECK prints it: file:line, the
 * call, host, rank (when there is one) and MPI's error string. */
static int mp_failed(RtWorld *w, RtRank *r, int e, const char *call, int line)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	MPI_Error_string(e, s, &n);
	if (r)
		return rt_error(r, "%s:%d: %s failed on host %s, rank %d: %s", __FILE__, line, call,
		                w->host, r->rank, s);
	return rt_world_error(w, "%s:%d: %s failed on host %s: %s", __FILE__, line, call, w->host, s);
}

#define MPICHECK(r, call)                                                                    \
	do {                                                                                     \
		int e_ = (call);                                                                     \
		if (e_ != MPI_SUCCESS)                                                               \
			return mp_failed((r)->w, (r), e_, #call, __LINE__);                              \
	} while (0)

#define MPICHECK_W(w, call)                                                                  \
	do {                                                                                     \
		int e_ = (call);                                                                     \
		if (e_ != MPI_SUCCESS)                                                               \
			return mp_failed((w), NULL, e_, #call, __LINE__);                                \
	} while (0)

static int mp_world_open(RtWorld *w)
{
	MpWorld *m = calloc(1, sizeof *m);
	if (!m)
		return rt_world_error(w, "out of memory");
	w->bw = m;
	int inited = 0;
	MPI_Initialized(&inited);
	if (!inited) {
		int provided;
		MPICHECK_W(w, MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
		m->inited = 1;
	}
	MPICHECK_W(w, MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
	MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(m->comm, &m->rank);
	MPI_Comm_size(m->comm, &m->size);
	if (m->size != w->plan->world)
		return rt_world_error(w, "the plan has world %d but %d MPI processes were started "
		                         "(mpirun -np %d)",
		                      w->plan->world, m->size, w->plan->world);
	w->first_local = m->rank;
	w->nlocal = 1;
	w->root = m->rank == 0;
	rt_cpu_blas_threads(w->opt.blas_threads);
	return RT_OK;
}

static void mp_world_close(RtWorld *w, int failed)
{
	MpWorld *m = w->bw;
	if (!m)
		return;
	int inited = 0, finalized = 0;
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	if (inited && !finalized) {
		if (failed) {
			/* Others may be stuck waiting for us: end the job, after giving them a
			 * moment to report their own state. */
			fflush(stdout);
			fflush(stderr);
			struct timespec ts = {1, 0};
			nanosleep(&ts, NULL);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		if (m->comm != MPI_COMM_NULL && m->comm)
			MPI_Comm_free(&m->comm);
		if (m->inited)
			MPI_Finalize();
	}
	free(m);
	w->bw = NULL;
}

static int mp_launch(RtWorld *w, int (*fn)(RtRank *))
{
	w->ranks[0].status = fn(&w->ranks[0]);
	return RT_OK;
}

static void mp_wake(RtWorld *w)
{
	(void)w; // the polling loops watch rt_aborted()
}

static int mp_gather(RtWorld *w, const void *mine, int64_t n, void *all)
{
	MpWorld *m = w->bw;
	if (n > (int64_t)1 << 30)
		return rt_world_error(w, "gather of %lld bytes per rank is too large", (long long)n);
	MPICHECK_W(w, MPI_Gather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, 0, m->comm));
	return RT_OK;
}

static int mp_bcast(RtWorld *w, void *buf, int64_t n)
{
	MpWorld *m = w->bw;
	MPICHECK_W(w, MPI_Bcast(buf, (int)n, MPI_BYTE, 0, m->comm));
	return RT_OK;
}

static int mp_rank_open(RtRank *r)
{
	MpRank *t = calloc(1, sizeof *t);
	if (!t)
		return rt_error(r, "out of memory");
	r->be = t;
	for (int d = 0; d < DIM_COUNT; d++)
		t->dim[d] = MPI_COMM_NULL;
	if (r->rank == RT_REF_RANK)
		return RT_OK;
	MpWorld *m = r->w->bw;
	const Plan *p = r->w->plan;
	/* One communicator per mesh dimension: the ranks that differ only in that
	 * coordinate, ordered by it.  Collective over the world, in dimension order. */
	int members[1 << 10];
	for (int d = 0; d < DIM_COUNT; d++) {
		int n = p->dims[d];
		int *mem = n <= (1 << 10) ? members : malloc((size_t)n * sizeof(int));
		if (!mem)
			return rt_error(r, "out of memory");
		plan_dim_members(p, r->rank, d, mem);
		int color = mem[0];
		if (mem != members)
			free(mem);
		MPICHECK(r, MPI_Comm_split(m->comm, color, r->coord[d], &t->dim[d]));
		MPI_Comm_set_errhandler(t->dim[d], MPI_ERRORS_RETURN);
	}
	t->ndp = p->dims[DIM_DP];
	return RT_OK;
}

static void mp_rank_close(RtRank *r)
{
	MpRank *t = r->be;
	if (!t)
		return;
	int finalized = 0;
	MPI_Finalized(&finalized);
	for (int d = 0; d < DIM_COUNT; d++)
		if (t->dim[d] != MPI_COMM_NULL && !finalized && !rt_aborted(r->w))
			MPI_Comm_free(&t->dim[d]);
	for (int i = 0; i < t->opcap; i++)
		free(t->ops[i]);
	free(t->ops);
	free(t->reqs);
	free(t);
	r->be = NULL;
}

static int mp_group_start(RtRank *r)
{
	MpRank *t = r->be;
	t->nreq = 0;
	t->nops = 0;
	return RT_OK;
}

static MpOp *new_op(RtRank *r, int nreq)
{
	MpRank *t = r->be;
	if (t->nops == t->opcap) {
		int cap = t->opcap ? 2 * t->opcap : 8;
		MpOp **ops = realloc(t->ops, (size_t)cap * sizeof *ops);
		if (!ops) {
			rt_error(r, "out of memory");
			return NULL;
		}
		for (int i = t->opcap; i < cap; i++)
			if (!(ops[i] = calloc(1, sizeof **ops))) {
				t->ops = ops;
				t->opcap = i;
				rt_error(r, "out of memory");
				return NULL;
			}
		t->ops = ops;
		t->opcap = cap;
	}
	if (t->nreq + nreq > t->reqcap) {
		int cap = t->reqcap ? 2 * t->reqcap : 16;
		while (cap < t->nreq + nreq)
			cap *= 2;
		MPI_Request *q = realloc(t->reqs, (size_t)cap * sizeof *q);
		if (!q) {
			rt_error(r, "out of memory");
			return NULL;
		}
		t->reqs = q;
		t->reqcap = cap;
	}
	MpOp *o = t->ops[t->nops++];
	memset(o, 0, sizeof *o);
	return o;
}

static int count_of(RtRank *r, const RtTensor *t, int *count)
{
	int64_t n = t->rows * t->cols;
	if (n > 0x7fffffff)
		return rt_error(r, "tensor of %lld elements is too large for one MPI message",
		                (long long)n);
	*count = (int)n;
	return RT_OK;
}

static int mp_send(RtRank *r, const RtTensor *t, int peer, const RtMsg *msg)
{
	MpRank *mr = r->be;
	MpWorld *m = r->w->bw;
	MpOp *o = new_op(r, 2);
	int count = 0;
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	o->kind = OP_SEND;
	o->peer = peer;
	o->hdr[HDR_EDGE] = msg->edge;
	o->hdr[HDR_MB] = msg->mb;
	o->hdr[HDR_DIR] = msg->dir;
	o->hdr[HDR_BYTES] = msg->bytes;
	o->hdr[HDR_OP] = msg->op;
	MPICHECK(r, MPI_Issend(o->hdr, HDR_N, MPI_INT64_T, peer, TAG_HDR, m->comm,
	                       &mr->reqs[mr->nreq++]));
	MPICHECK(r, MPI_Issend(t->data, count, MPI_FLOAT, peer, TAG_DATA, m->comm,
	                       &mr->reqs[mr->nreq++]));
	return RT_OK;
}

static int mp_recv(RtRank *r, RtTensor *t, int peer, const RtMsg *msg)
{
	MpRank *mr = r->be;
	MpWorld *m = r->w->bw;
	MpOp *o = new_op(r, 2);
	int count = 0;
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	o->kind = OP_RECV;
	o->peer = peer;
	o->want = *msg;
	o->t = t;
	MPICHECK(r, MPI_Irecv(o->hdr, HDR_N, MPI_INT64_T, peer, TAG_HDR, m->comm,
	                      &mr->reqs[mr->nreq++]));
	MPICHECK(r, MPI_Irecv(t->data, count, MPI_FLOAT, peer, TAG_DATA, m->comm,
	                      &mr->reqs[mr->nreq++]));
	return RT_OK;
}

static int mp_allreduce(RtRank *r, RtTensor *t, const RtMsg *msg)
{
	MpRank *mr = r->be;
	MpOp *o = new_op(r, 1);
	int count = 0;
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	o->kind = OP_ALLREDUCE;
	o->want = *msg;
	o->t = t;
	MPICHECK(r, MPI_Iallreduce(MPI_IN_PLACE, t->data, count, MPI_FLOAT, MPI_SUM,
	                           mr->dim[DIM_DP], &mr->reqs[mr->nreq++]));
	return RT_OK;
}

/* Polls requests to completion; RT_EABORT when the world is aborted meanwhile. */
static int wait_all(RtRank *r, int n, MPI_Request *reqs)
{
	int flag = 0;
	for (long spins = 0;; spins++) {
		MPICHECK(r, MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
		if (flag)
			return RT_OK;
		if (rt_aborted(r->w))
			return RT_EABORT;
		if (spins > 1000) {
			struct timespec ts = {0, spins > 100000 ? 200000 : 1000};
			nanosleep(&ts, NULL);
		} else {
			sched_yield();
		}
	}
}

static int mp_group_end(RtRank *r)
{
	MpRank *mr = r->be;
	const Plan *p = r->w->plan;
	int rc = wait_all(r, mr->nreq, mr->reqs);
	if (rc)
		return rc;
	for (int i = 0; i < mr->nops; i++) {
		MpOp *o = mr->ops[i];
		if (o->kind == OP_ALLREDUCE) {
			rt_cpu_scale(r, o->t, 1.0f / (float)mr->ndp);
			continue;
		}
		if (o->kind != OP_RECV)
			continue;
		if (o->hdr[HDR_EDGE] != o->want.edge || o->hdr[HDR_MB] != o->want.mb ||
		    o->hdr[HDR_DIR] != o->want.dir || o->hdr[HDR_BYTES] != o->want.bytes) {
			int64_t op = o->hdr[HDR_OP];
			const PlanRank *pr = &p->ranks[o->peer];
			char txt[256] = "?";
			if (op >= 0 && op < pr->nops)
				plan_format_op(p, &pr->ops[op], txt, sizeof txt);
			return rt_error(r, "send and receive do not match (FIFO order per pair of ranks): "
			                   "rank %d's '%s' (plan line %lld) arrived",
			                o->peer, txt,
			                (long long)(pr->first_line ? pr->first_line + op : 0));
		}
	}
	mr->nreq = 0;
	mr->nops = 0;
	return RT_OK;
}

static int mp_sync(RtRank *r)
{
	(void)r;
	return RT_OK;
}

static int mp_barrier(RtRank *r)
{
	MpWorld *m = r->w->bw;
	MPI_Request q;
	MPICHECK(r, MPI_Ibarrier(m->comm, &q));
	return wait_all(r, 1, &q);
}

const RtBackend rt_backend_mpi = {
	.name = "mpi",
	.async = 0,
	.world_open = mp_world_open,
	.launch = mp_launch,
	.wake = mp_wake,
	.gather = mp_gather,
	.bcast = mp_bcast,
	.world_close = mp_world_close,
	.rank_open = mp_rank_open,
	.rank_close = mp_rank_close,
	RT_CPU_COMPUTE,
	.group_start = mp_group_start,
	.send = mp_send,
	.recv = mp_recv,
	.allreduce_avg = mp_allreduce,
	.group_end = mp_group_end,
	.sync = mp_sync,
	.barrier = mp_barrier,
};
