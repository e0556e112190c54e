/* The MPI communicator: host tensors over MPI, one rank per process (the mpi launcher
 * opened MPI).
 *
 * Point-to-point: every SEND posts two synchronous-mode sends, MPI_Issend, to the
 * peer on a duplicate of the world communicator: a small header (edge, microbatch,
 * direction, bytes, op index), then the data.  Synchronous mode completes only once the
 * matching receive has started, which makes every send a rendezvous whatever its size
 * (NCCL's contract, docs/semantics.md), where plain MPI_Isend would buffer small
 * messages eagerly.  A RECV posts MPI_Irecv for both.  All messages of one kind use one
 * tag, so MPI's non-overtaking rule gives the FIFO matching per ordered pair the plan
 * relies on; the receiver compares the header with what its op expects and fails with
 * both ops named on a mismatch.  A send to self (--same-rank=self-send) is an
 * MPI_Issend to the rank itself; its MPI_Irecv is posted in the same group, and
 * MPI_Testall completes the two together.
 *
 * All-reduce: MPI_Iallreduce (sum, in place) on the rank's dp communicator, made with
 * MPI_Comm_split once per mesh dimension, then a scale by 1/dp on the rank's device.
 * MPI chooses the summation order, so results may differ from the shared-memory
 * communicator in the last bits.  A tied table's sum (TIEREDUCE) is MPI_Iallreduce on
 * the embedding group, Megatron's name: the pair holding the table's two copies, split
 * from the world when the rank opens (the embedding's rank first), without a scale.  A
 * TPREDUCE is MPI_Iallreduce on the rank's tp communicator (split with the others), a
 * sum or, for a vocabulary-split loss's row maxima, MPI_MAX.
 * Sequence parallelism's reduce-scatter and all-gather (RtComm.seq) are
 * MPI_Ireduce_scatter_block and MPI_Iallgather on the same communicator.
 *
 * A group's requests are completed together by polling MPI_Testall, which checks
 * rt_aborted() between polls: the watchdog can end a deadlock (abort has nothing to
 * wake), and the launcher then ends the whole job. */
#include "rt_private.h"
#include "../plan/tie.h"
#include "../plan/line.h"

#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_check.h"

enum { TAG_HDR = 7301, TAG_DATA = 7302 };
enum { HDR_EDGE, HDR_MB, HDR_DIR, HDR_BYTES, HDR_OP, HDR_N };

typedef struct {
	MPI_Comm comm;
} MpComm;

typedef struct {
	int64_t hdr[HDR_N]; // sent, or received
	RtMsg want;         // recv: what the op expects
	int peer;
	uint8_t recv;       // a receive: its header is checked once it arrived
	uint8_t avg;        // an all-reduce over dp: scaled by 1/dp once complete
	uint8_t scatter;    // a reduce-scatter: its shard (MpRank.tmp) copied into t at off
	                    // and scaled by 1/dp once complete
	int64_t off;
	RtTensor *t;
} MpOp;

typedef struct {
	MPI_Comm dim[DIM_COUNT]; // communicators per mesh dimension
	MPI_Comm tie;            // the embedding group (plan_tie_peer), or MPI_COMM_NULL
	int tie_first;           // its first member (the embedding's rank), or -1
	int ndp;
	MPI_Request *reqs;
	int nreq, reqcap;
	int *counts, *displs;    // the distributed optimizer's shards (rt_shard) per dp member
	float *tmp;              // a reduce-scatter's result (alone in its group: one at a time)
	int64_t tmpcap;
	MpOp **ops;              // pool; pointers stay put while MPI holds their buffers
	int nops, opcap;
} MpRank;

static MPI_Comm world_comm(RtWorld *w)
{
	return ((MpComm *)w->state[RT_PART_COMM])->comm;
}

static MpRank *mr_of(RtRank *r)
{
	return r->state[RT_PART_COMM];
}

static int mc_open(RtWorld *w)
{
	MpComm *c = calloc(1, sizeof *c);
	if (!c)
		return rt_world_error(w, "out of memory");
	c->comm = MPI_COMM_NULL;
	w->state[RT_PART_COMM] = c;
	MPICHECK_W(w, MPI_Comm_dup(MPI_COMM_WORLD, &c->comm));
	MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
	return RT_OK;
}

static void mc_close(RtWorld *w)
{
	MpComm *c = w->state[RT_PART_COMM];
	if (!c)
		return;
	int finalized = 0;
	MPI_Finalized(&finalized);
	if (c->comm != MPI_COMM_NULL && !finalized)
		MPI_Comm_free(&c->comm);
	free(c);
	w->state[RT_PART_COMM] = NULL;
}

static void mc_abort(RtWorld *w)
{
	(void)w; // the polling loops watch rt_aborted()
}

static int mc_rank_open(RtRank *r)
{
	MpRank *t = calloc(1, sizeof *t);
	if (!t)
		return rt_error(r, "out of memory");
	r->state[RT_PART_COMM] = t;
	for (int d = 0; d < DIM_COUNT; d++)
		t->dim[d] = MPI_COMM_NULL;
	const Plan *p = r->w->plan;
	/* One communicator per mesh dimension: the ranks that differ only in that
	 * coordinate, ordered by it.  Collective over the world, in dimension order. */
	int *mem = malloc((size_t)p->world * sizeof(int));
	if (!mem)
		return rt_error(r, "out of memory");
	for (int d = 0; d < DIM_COUNT; d++) {
		plan_dim_members(p, r->rank, d, mem);
		int e = MPI_Comm_split(world_comm(r->w), mem[0], r->coord[d], &t->dim[d]);
		if (e != MPI_SUCCESS) {
			free(mem);
			return rt_mpi_failed(r->w, r, e, "MPI_Comm_split", __FILE__, __LINE__);
		}
		MPI_Comm_set_errhandler(t->dim[d], MPI_ERRORS_RETURN);
	}
	free(mem);
	t->ndp = p->dims[DIM_DP];
	/* The embedding group: every rank takes part in the split when the plan ties a
	 * table across pipeline ranks (all read the same plan); the others get no comm. */
	t->tie = MPI_COMM_NULL;
	t->tie_first = -1;
	int e, h, st;
	if (plan_tie_across(p, &e, &h)) {
		int q = plan_tie_peer(p, r->rank, &st);
		int head = st == h;
		int color = q < 0 ? MPI_UNDEFINED : head ? q : r->rank;
		int rc = MPI_Comm_split(world_comm(r->w), color, head, &t->tie);
		if (rc != MPI_SUCCESS)
			return rt_mpi_failed(r->w, r, rc, "MPI_Comm_split", __FILE__, __LINE__);
		if (t->tie != MPI_COMM_NULL) {
			MPI_Comm_set_errhandler(t->tie, MPI_ERRORS_RETURN);
			t->tie_first = color;
		}
	}
	return RT_OK;
}

static void mc_rank_close(RtRank *r)
{
	MpRank *t = mr_of(r);
	if (!t)
		return;
	int finalized = 0;
	MPI_Finalized(&finalized);
	for (int d = 0; d < DIM_COUNT; d++)
		if (t->dim[d] != MPI_COMM_NULL && !finalized && !rt_aborted(r->w))
			MPI_Comm_free(&t->dim[d]);
	if (t->tie != MPI_COMM_NULL && !finalized && !rt_aborted(r->w))
		MPI_Comm_free(&t->tie);
	for (int i = 0; i < t->opcap; i++)
		free(t->ops[i]);
	free(t->ops);
	free(t->counts);
	free(t->displs);
	free(t->tmp);
	free(t->reqs);
	free(t);
	r->state[RT_PART_COMM] = NULL;
}

static int mc_group_start(RtRank *r)
{
	MpRank *t = mr_of(r);
	t->nreq = 0;
	t->nops = 0;
	return RT_OK;
}

static MpOp *new_op(RtRank *r, int nreq)
{
	MpRank *t = mr_of(r);
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

static int mc_send(RtRank *r, const RtTensor *t, int peer, const RtMsg *msg)
{
	MpRank *mr = mr_of(r);
	MpOp *o = new_op(r, 2);
	int count = 0;
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	o->peer = peer;
	o->hdr[HDR_EDGE] = msg->edge;
	o->hdr[HDR_MB] = msg->mb;
	o->hdr[HDR_DIR] = msg->dir;
	o->hdr[HDR_BYTES] = msg->bytes;
	o->hdr[HDR_OP] = msg->op;
	MPI_Comm comm = world_comm(r->w);
	MPICHECK(r, MPI_Issend(o->hdr, HDR_N, MPI_INT64_T, peer, TAG_HDR, comm,
	                       &mr->reqs[mr->nreq++]));
	MPICHECK(r, MPI_Issend(t->data, count, MPI_FLOAT, peer, TAG_DATA, comm,
	                       &mr->reqs[mr->nreq++]));
	return RT_OK;
}

static int mc_recv(RtRank *r, RtTensor *t, int peer, const RtMsg *msg)
{
	MpRank *mr = mr_of(r);
	MpOp *o = new_op(r, 2);
	int count = 0;
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	o->recv = 1;
	o->peer = peer;
	o->want = *msg;
	o->t = t;
	MPI_Comm comm = world_comm(r->w);
	MPICHECK(r, MPI_Irecv(o->hdr, HDR_N, MPI_INT64_T, peer, TAG_HDR, comm,
	                      &mr->reqs[mr->nreq++]));
	MPICHECK(r, MPI_Irecv(t->data, count, MPI_FLOAT, peer, TAG_DATA, comm,
	                      &mr->reqs[mr->nreq++]));
	return RT_OK;
}

static int mc_allreduce(RtRank *r, RtTensor *t, int over, int max, const RtMsg *msg)
{
	MpRank *mr = mr_of(r);
	MPI_Comm comm = over == OP_OVER_DP    ? mr->dim[DIM_DP]
	                : over == OP_OVER_TP  ? mr->dim[DIM_TP]
	                : over == OP_OVER_TIE ? mr->tie
	                                      : MPI_COMM_NULL;
	if (comm == MPI_COMM_NULL)
		return rt_error(r, "internal: the mpi communicator has no group for an all-reduce "
		                   "over %d on rank %d (a tied table's pair is made when the rank opens)",
		                over, r->rank);
	MpOp *o = new_op(r, 1);
	int count = 0;
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	o->avg = over == OP_OVER_DP;
	o->want = *msg;
	o->t = t;
	MPICHECK(r, MPI_Iallreduce(MPI_IN_PLACE, t->data, count, MPI_FLOAT, max ? MPI_MAX : MPI_SUM,
	                           comm, &mr->reqs[mr->nreq++]));
	return RT_OK;
}

/* The distributed optimizer's collectives: MPI_Ireduce_scatter of the gradients into
 * the rank's shard (then copied in and scaled by 1/dp), MPI_Iallgatherv of the
 * parameters in place, on the rank's dp communicator, shards as rt_shard cuts them. */
static int mc_shard(RtRank *r, RtTensor *t, int gather, const RtMsg *msg)
{
	MpRank *mr = mr_of(r);
	int count = 0, n = mr->ndp, me = r->coord[DIM_DP];
	MpOp *o = new_op(r, 1);
	if (!o || count_of(r, t, &count))
		return RT_EFAIL;
	if (!mr->counts && (!(mr->counts = malloc((size_t)n * sizeof(int))) ||
	                    !(mr->displs = malloc((size_t)n * sizeof(int)))))
		return rt_error(r, "out of memory");
	for (int i = 0; i < n; i++) {
		int64_t off, len;
		rt_shard(count, n, i, &off, &len);
		mr->counts[i] = (int)len;
		mr->displs[i] = (int)off;
	}
	o->want = *msg;
	o->t = t;
	if (gather) {
		MPICHECK(r, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, t->data, mr->counts,
		                            mr->displs, MPI_FLOAT, mr->dim[DIM_DP],
		                            &mr->reqs[mr->nreq++]));
		return RT_OK;
	}
	int64_t len = mr->counts[me] ? mr->counts[me] : 1;
	if (len > mr->tmpcap) {
		float *x = realloc(mr->tmp, (size_t)len * sizeof(float));
		if (!x)
			return rt_error(r, "out of memory");
		mr->tmp = x;
		mr->tmpcap = len;
	}
	o->scatter = 1;
	o->off = mr->displs[me];
	MPICHECK(r, MPI_Ireduce_scatter(t->data, mr->tmp, mr->counts, MPI_FLOAT, MPI_SUM,
	                                mr->dim[DIM_DP], &mr->reqs[mr->nreq++]));
	return RT_OK;
}

/* Sequence parallelism's collectives on the rank's tp communicator: a reduce-scatter of
 * equal row blocks (MPI_Ireduce_scatter_block, MPI's summation order) or an all-gather
 * (MPI_Iallgather). */
static int mc_seq(RtRank *r, RtTensor *whole, RtTensor *piece, int gather, const RtMsg *msg)
{
	MpRank *mr = mr_of(r);
	MpOp *o = new_op(r, 1);
	int count = 0;
	if (!o || count_of(r, piece, &count))
		return RT_EFAIL;
	o->want = *msg;
	o->t = gather ? whole : piece;
	MPI_Request *q = &mr->reqs[mr->nreq++];
	if (gather)
		MPICHECK(r, MPI_Iallgather(piece->data, count, MPI_FLOAT, whole->data, count, MPI_FLOAT,
		                           mr->dim[DIM_TP], q));
	else
		MPICHECK(r, MPI_Ireduce_scatter_block(whole->data, piece->data, count, MPI_FLOAT,
		                                      MPI_SUM, mr->dim[DIM_TP], q));
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

/* A received header that differs from what the RECV expects. */
static int mismatch(RtRank *r, const MpOp *o)
{
	const Plan *p = r->w->plan;
	int64_t op = o->hdr[HDR_OP];
	PlanRank tmp;
	const PlanRank *pr = plan_rank(p, o->peer, &tmp);
	char txt[256] = "?";
	if (op >= 0 && op < pr->nops)
		plan_format_op(p, &pr->ops[op], txt, sizeof txt);
	return rt_error(r, "send and receive do not match (FIFO order per pair of ranks): "
	                   "rank %d's '%s' (plan line %lld) arrived",
	                o->peer, txt, (long long)(pr->first_line ? pr->first_line + op : 0));
}

static int mc_group_end(RtRank *r)
{
	MpRank *mr = mr_of(r);
	int rc = wait_all(r, mr->nreq, mr->reqs);
	if (rc)
		return rc;
	for (int i = 0; i < mr->nops; i++) {
		MpOp *o = mr->ops[i];
		if (o->avg && (rc = r->dev->scale(r, o->t, 1.0f / (float)mr->ndp)))
			return rc;
		if (o->scatter && mr->counts[r->coord[DIM_DP]]) {
			RtTensor v = rt_tensor_view(o->t, o->off, 1, mr->counts[r->coord[DIM_DP]]);
			memcpy(v.data, mr->tmp, (size_t)v.bytes);
			if ((rc = r->dev->scale(r, &v, 1.0f / (float)mr->ndp)))
				return rc;
		}
		if (o->recv &&
		    (o->hdr[HDR_EDGE] != o->want.edge || o->hdr[HDR_MB] != o->want.mb ||
		     o->hdr[HDR_DIR] != o->want.dir || o->hdr[HDR_BYTES] != o->want.bytes))
			return mismatch(r, o);
	}
	mr->nreq = 0;
	mr->nops = 0;
	return RT_OK;
}

static int mc_barrier(RtRank *r)
{
	MPI_Request q;
	MPICHECK(r, MPI_Ibarrier(world_comm(r->w), &q));
	return wait_all(r, 1, &q);
}

const RtComm rt_comm_mpi = {
	.name = "mpi",
	.open = mc_open,
	.close = mc_close,
	.abort = mc_abort,
	.rank_open = mc_rank_open,
	.rank_close = mc_rank_close,
	.group_start = mc_group_start,
	.send = mc_send,
	.recv = mc_recv,
	.allreduce = mc_allreduce,
	.shard = mc_shard,
	.group_end = mc_group_end,
	.barrier = mc_barrier,
	.seq = mc_seq,
};
