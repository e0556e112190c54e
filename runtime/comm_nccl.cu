/* The NCCL communicator: transfers on each rank's comm stream (the cuda device's `ms`,
 * cuda_dev.h), ordered against its compute stream by events.
 *
 * Each plan group is one ncclGroupStart/ncclGroupEnd of ncclSend and ncclRecv on the
 * world communicator, or one ncclAllReduce (ncclAvg) on the rank's dp communicator,
 * split from the world one with ncclCommSplit (color: the lowest world rank of the dp
 * group, i.e. the rank's other coordinates; key: its dp coordinate).  A send to self (a plan
 * lowered with --same-rank=self-send) is an ncclSend and an ncclRecv with the rank's
 * own index in one group, which NCCL allows (a local copy on the comm stream).  The world
 * communicator's unique id is made by world rank 0 and handed to every process through
 * the launcher's broadcast (threads or mpi alike).  A tied table's sum (TIEREDUCE) is
 * one ncclAllReduce (ncclSum) on the embedding group, Megatron's name: the pair holding
 * the table's two copies, split from the world when the rank opens (color: the
 * embedding's rank; key: 0 there, 1 at the head; NCCL_SPLIT_NOCOLOR elsewhere).  A
 * TPREDUCE is one ncclAllReduce (ncclSum, or ncclMax for a vocabulary-split loss's row
 * maxima) on the rank's tp communicator, split as the dp one.
 *
 * Communicators are non-blocking (config.blocking = 0): calls return at once, and the
 * communicator polls ncclCommGetAsyncError, the streams and rt_aborted() while it
 * waits; it hooks its error poll and abort into the device's waits.  abort() aborts
 * every local communicator (ncclCommAbort) under the rank's lock, so a hang ends in an
 * abort and the watchdog's report of the blocked ops, never silence. */
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dev.h"
extern "C" {
#include "../plan/line.h"
#include "../plan/tie.h"
}

enum { NCOMM = 2 + DIM_COUNT }; // [0] the world, [1 + d] mesh dimension d, then the tie
enum { CI_TIE = 1 + DIM_COUNT }; // the embedding group (plan_tie_peer)

/* What abort() may touch of a local rank; lives as long as the world. */
typedef struct {
	pthread_mutex_t mu;
	ncclComm_t comm[NCOMM];
	uint8_t owned[NCOMM]; // 0: NULL or an alias of the world communicator
	int aborted;
} CuSlot;

typedef struct {
	ncclUniqueId id;
	CuSlot *slot;             // [nlocal]
	int nslot;
} NcWorld;

enum { POST_SEND, POST_RECV, POST_ALLREDUCE, POST_BARRIER, POST_TIE, POST_TP_SUM, POST_TP_MAX,
       POST_SCATTER, POST_GATHER };

typedef struct {
	int kind;
	RtTensor *t;
	int peer;
	int64_t op;               // index in the rank's op list (-1: the barrier)
} Post;

typedef struct {
	CuSlot *slot;
	Post *post;
	int npost, postcap;
	Block *one;               // one float, for barrier()
	int world;
	int tie_first;            // the embedding group's first rank, or -1 (no group)
} NcRank;

static NcWorld *ncw(RtWorld *w)
{
	return (NcWorld *)*rt_world_state(w, RT_PART_COMM);
}

static NcRank *ncr(RtRank *r)
{
	return (NcRank *)*rt_rank_state(r, RT_PART_COMM);
}

/* ---- communicators: every use under the slot's lock, so abort() works from any
 * thread ---- */

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
	static const char *const n[NCOMM] = {"world", "pp", "dp", "tp", "embedding"};
	return i >= 0 && i < NCOMM ? n[i] : "?";
}

/* An asynchronous NCCL error on any of the rank's communicators, as a failure. */
static int check_async(RtRank *r)
{
	CuSlot *s = ncr(r)->slot;
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
			         rt_world_host(rt_rank_world(r)), rt_rank_id(r), comm_name(i), rt_cuda_nccl_name(st),
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

/* Waits until communicator i of the rank has finished its last call (non-blocking
 * communicators answer ncclInProgress until then). */
static int comm_ready(RtRank *r, int i, const char *what)
{
	CuSlot *s = ncr(r)->slot;
	for (long spins = 0;; spins++) {
		pthread_mutex_lock(&s->mu);
		if (!s->comm[i]) {
			pthread_mutex_unlock(&s->mu);
			return rt_aborted(rt_rank_world(r)) || s->aborted
			           ? RT_EABORT
			           : rt_error(r, "internal: no %s communicator on rank %d", comm_name(i),
			                      rt_rank_id(r));
		}
		ncclResult_t st = ncclInProgress;
		ncclResult_t e = ncclCommGetAsyncError(s->comm[i], &st);
		pthread_mutex_unlock(&s->mu);
		if (e != ncclSuccess)
			return rt_cuda_fail(rt_rank_world(r), r, RT_LIB_NCCL, e, "ncclCommGetAsyncError", __FILE__,
			                    __LINE__);
		if (st == ncclSuccess)
			return RT_OK;
		if (st != ncclInProgress) {
			rt_error(r, "%s failed on host %s, rank %d, %s communicator: %s: %s", what,
			         rt_world_host(rt_rank_world(r)), rt_rank_id(r), comm_name(i), rt_cuda_nccl_name(st),
			         ncclGetErrorString(st));
			slot_abort(s);
			return RT_EFAIL;
		}
		if (rt_aborted(rt_rank_world(r))) {
			slot_abort(s);
			return RT_EABORT;
		}
		cu_backoff(spins);
	}
}

/* ---- groups ---- */

static int add_post(RtRank *r, int kind, const RtTensor *t, int peer, int64_t op)
{
	NcRank *c = ncr(r);
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

static int nc_group_start(RtRank *r)
{
	ncr(r)->npost = 0;
	return RT_OK;
}

static int nc_send(RtRank *r, const RtTensor *t, int peer, const RtMsg *m)
{
	if (t->bytes != m->bytes)
		return rt_error(r, "internal: send of %lld bytes for a %lld-byte message",
		                (long long)t->bytes, (long long)m->bytes);
	int world = ncr(r)->world;
	if (peer < 0 || peer >= world)
		return rt_error(r, "internal: send to rank %d of %d", peer, world);
	return add_post(r, POST_SEND, t, peer, m->op);
}

static int nc_recv(RtRank *r, RtTensor *t, int peer, const RtMsg *m)
{
	if (t->bytes != m->bytes)
		return rt_error(r, "internal: receive of %lld bytes for a %lld-byte message",
		                (long long)t->bytes, (long long)m->bytes);
	int world = ncr(r)->world;
	if (peer < 0 || peer >= world)
		return rt_error(r, "internal: receive from rank %d of %d", peer, world);
	return add_post(r, POST_RECV, t, peer, m->op);
}

static int nc_allreduce(RtRank *r, RtTensor *t, int over, int max, const RtMsg *m)
{
	if (over == OP_OVER_DP)
		return add_post(r, POST_ALLREDUCE, t, -1, m->op);
	if (over == OP_OVER_TP)
		return add_post(r, max ? POST_TP_MAX : POST_TP_SUM, t, -1, m->op);
	if (over != OP_OVER_TIE || ncr(r)->tie_first < 0)
		return rt_error(r, "internal: the nccl communicator has no group for an all-reduce "
		                   "over %d on rank %d (a tied table's pair is made when the rank opens)",
		                over, rt_rank_id(r));
	return add_post(r, POST_TIE, t, -1, m->op);
}

/* The distributed optimizer's collectives over the dp group (alone in their group). */
static int nc_shard(RtRank *r, RtTensor *t, int gather, const RtMsg *m)
{
	return add_post(r, gather ? POST_GATHER : POST_SCATTER, t, -1, m->op);
}

/* A reduce-scatter (an ncclReduce of each member's shard, averaged, to that member) or
 * an all-gather (an ncclBroadcast of each member's shard from it) of t over the dp
 * group comm, inside the caller's NCCL group: shards of any length, as rt_shard cuts
 * them, where ncclReduceScatter and ncclAllGather want equal ones. */
static ncclResult_t shards(RtRank *r, const Post *p, ncclComm_t comm, cudaStream_t st)
{
	int n = rt_world_plan(rt_rank_world(r))->dims[DIM_DP];
	ncclResult_t e = ncclSuccess;
	for (int i = 0; i < n && (e == ncclSuccess || e == ncclInProgress); i++) {
		int64_t off, len;
		rt_shard(numel(p->t), n, i, &off, &len);
		float *x = (float *)p->t->data + off;
		if (len && p->kind == POST_SCATTER)
			e = ncclReduce(x, x, (size_t)len, ncclFloat32, ncclAvg, i, comm, st);
		else if (len)
			e = ncclBroadcast(x, x, (size_t)len, ncclFloat32, i, comm, st);
	}
	return e;
}

/* Issues the posted ops as one NCCL group on ms, after the compute they depend on. */
static int flush_group(RtRank *r)
{
	CuRank *c = cur(r);
	NcRank *nr = ncr(r);
	CuSlot *s = nr->slot;
	int n = nr->npost;
	nr->npost = 0;
	if (n == 0)
		return RT_OK;
	/* What the group waits for on cs: sends the writes of their data, receives and
	 * all-reduces every earlier use of the storage they overwrite (an all-reduce also
	 * the gradient writes through views: everything issued so far). */
	int64_t need = 0, op0 = nr->post[0].op, op1 = nr->post[0].op;
	int ci = 0;
	for (int i = 0; i < n; i++) {
		const Post *p = &nr->post[i];
		op0 = p->op < op0 ? p->op : op0;
		op1 = p->op > op1 ? p->op : op1;
		const Block *b = blk(p->t);
		int64_t want = !b ? c->cs_pos
		               : p->kind == POST_SEND ? b->cs_write
		               : p->kind == POST_ALLREDUCE || p->kind == POST_TIE ||
		                         p->kind == POST_SCATTER || p->kind == POST_GATHER
		                     ? c->cs_pos
		                                                                : b->cs_last;
		if (want > need)
			need = want;
		if (p->kind == POST_ALLREDUCE || p->kind == POST_SCATTER || p->kind == POST_GATHER)
			ci = 1 + DIM_DP; // alone in its group (plan invariant)
		if (p->kind == POST_TIE)
			ci = CI_TIE; // alone in its group too
		if (p->kind == POST_TP_SUM || p->kind == POST_TP_MAX)
			ci = 1 + DIM_TP; // and a TPREDUCE
	}
	if (need > c->ms_waits_cs) {
		if (cu_cs_cover(r, need) || cu_ring_poll(r, &c->csr))
			return RT_EFAIL;
		cudaEvent_t ev = cu_ring_find(&c->csr, need);
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
		const Post *p = &nr->post[i];
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
		case POST_TIE:
		case POST_TP_SUM:
			e = ncclAllReduce(p->t->data, p->t->data, count, ncclFloat32, ncclSum, comm, c->ms);
			break;
		case POST_TP_MAX:
			e = ncclAllReduce(p->t->data, p->t->data, count, ncclFloat32, ncclMax, comm, c->ms);
			break;
		case POST_SCATTER:
		case POST_GATHER:
			e = shards(r, p, comm, c->ms);
			break;
		}
	}
	ncclResult_t e2 = ncclGroupEnd();
	pthread_mutex_unlock(&s->mu);
	if (e != ncclSuccess && e != ncclInProgress)
		return rt_cuda_fail(rt_rank_world(r), r, RT_LIB_NCCL, e, "ncclSend/ncclRecv/ncclAllReduce", __FILE__,
		                    __LINE__);
	if (e2 != ncclSuccess && e2 != ncclInProgress)
		return rt_cuda_fail(rt_rank_world(r), r, RT_LIB_NCCL, e2, "ncclGroupEnd()", __FILE__, __LINE__);
	/* The ops are on the stream once the communicator is no longer in progress. */
	int rc = comm_ready(r, ci, "ncclGroupEnd");
	if (rc)
		return rc;
	c->ms_pos++;
	if (cu_ring_record(r, &c->msr, c->ms, c->ms_pos, op0, op1))
		return RT_EFAIL;
	for (int i = 0; i < n; i++) {
		Block *b = blk(nr->post[i].t);
		if (!b)
			continue;
		b->ms_last = c->ms_pos;
		if (nr->post[i].kind == POST_SEND)
			b->ms_read = c->ms_pos;
		else
			b->ms_write = c->ms_pos;
	}
	return RT_OK;
}

static int nc_group_end(RtRank *r)
{
	return flush_group(r);
}

static int nc_barrier(RtRank *r)
{
	NcRank *c = ncr(r);
	if (c->world == 1)
		return RT_OK;
	RtTensor one = {};
	one.data = c->one->ptr;
	one.rows = one.cols = 1;
	one.bytes = 4;
	c->npost = 0;
	if (add_post(r, POST_BARRIER, &one, -1, -1) || flush_group(r))
		return rt_aborted(rt_rank_world(r)) ? RT_EABORT : RT_EFAIL;
	return cu_wait_pos(r, 0, cur(r)->ms_pos);
}

/* ---- opening and closing ---- */

static int init_comms(RtRank *r)
{
	CuSlot *s = ncr(r)->slot;
	NcWorld *cw = ncw(rt_rank_world(r));
	const Plan *p = rt_world_plan(rt_rank_world(r));
	int rank = rt_rank_id(r);
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	pthread_mutex_lock(&s->mu);
	ncclResult_t e = s->aborted ? ncclSuccess
	                            : ncclCommInitRankConfig(&s->comm[0], p->world, cw->id, rank,
	                                                     &cfg);
	if (s->comm[0])
		s->owned[0] = 1;
	pthread_mutex_unlock(&s->mu);
	if (e != ncclSuccess && e != ncclInProgress)
		return rt_cuda_fail(rt_rank_world(r), r, RT_LIB_NCCL, e, "ncclCommInitRankConfig", __FILE__,
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
		plan_dim_members(p, rank, d, mem);
		pthread_mutex_lock(&s->mu);
		if (!s->comm[0]) {
			pthread_mutex_unlock(&s->mu);
			rc = RT_EABORT;
			break;
		}
		e = ncclCommSplit(s->comm[0], mem[0], rt_rank_coord(r)[d], &s->comm[1 + d], &cfg);
		if (s->comm[1 + d])
			s->owned[1 + d] = 1;
		pthread_mutex_unlock(&s->mu);
		if (e != ncclSuccess && e != ncclInProgress)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_NCCL, e, "ncclCommSplit", __FILE__, __LINE__);
		/* Non-blocking: the parent finishes the split, then the child its init. */
		if (rc == RT_OK)
			rc = comm_ready(r, 0, "ncclCommSplit");
		if (rc == RT_OK)
			rc = comm_ready(r, 1 + d, "ncclCommSplit");
	}
	free(mem);
	/* The embedding group: every rank splits when the plan ties a table across pipeline
	 * ranks (all read the same plan); ranks outside a pair pass NCCL_SPLIT_NOCOLOR. */
	int te, th, ts;
	ncr(r)->tie_first = -1;
	if (rc == RT_OK && plan_tie_across(p, &te, &th)) {
		int q = plan_tie_peer(p, rank, &ts);
		int head = ts == th;
		int color = q < 0 ? NCCL_SPLIT_NOCOLOR : head ? q : rank;
		pthread_mutex_lock(&s->mu);
		if (!s->comm[0]) {
			pthread_mutex_unlock(&s->mu);
			return RT_EABORT;
		}
		e = ncclCommSplit(s->comm[0], color, head, &s->comm[CI_TIE], &cfg);
		if (s->comm[CI_TIE])
			s->owned[CI_TIE] = 1;
		pthread_mutex_unlock(&s->mu);
		if (e != ncclSuccess && e != ncclInProgress)
			return rt_cuda_fail(rt_rank_world(r), r, RT_LIB_NCCL, e, "ncclCommSplit", __FILE__,
			                    __LINE__);
		rc = comm_ready(r, 0, "ncclCommSplit");
		if (rc == RT_OK && q >= 0)
			rc = comm_ready(r, CI_TIE, "ncclCommSplit");
		if (rc == RT_OK && q >= 0)
			ncr(r)->tie_first = color;
	}
	return rc;
}


/* The rank's hooks into the device's waits. */
static void rank_abort(RtRank *r)
{
	slot_abort(ncr(r)->slot);
}

static int nc_rank_open(RtRank *r)
{
	NcRank *n = (NcRank *)calloc(1, sizeof *n);
	if (!n)
		return rt_error(r, "out of memory");
	*rt_rank_state(r, RT_PART_COMM) = n;
	RtWorld *w = rt_rank_world(r);
	n->slot = &ncw(w)->slot[rt_rank_local(r)];
	n->world = rt_world_plan(w)->world;
	CuRank *c = cur(r);
	if (!c)
		return rt_error(r, "internal: the nccl communicator needs the cuda device");
	c->comm_poll = check_async;
	c->comm_abort = rank_abort;
	if (!(n->one = cu_get_block(r, 4, 0)))
		return RT_EFAIL;
	return init_comms(r);
}

/* Flushes and frees the communicators: dimensions first, then the world.  A failed or
 * aborted run may leave work waiting for peers that never come: its communicators are
 * aborted instead, so the device's close finds its streams draining. */
static void nc_rank_close(RtRank *r)
{
	NcRank *n = ncr(r);
	if (!n)
		return;
	CuSlot *s = n->slot;
	int clean = !rt_rank_error(r)[0] && !rt_aborted(rt_rank_world(r)) && !s->aborted;
	for (int i = NCOMM - 1; i >= 0 && clean; i--) {
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
	slot_abort(s); // whatever is left (all of it after a failure)
	CuRank *c = cur(r);
	if (c) {
		if (n->one)
			cu_release(r, &c->free_dev, n->one);
		c->comm_poll = NULL;
		c->comm_abort = NULL;
	}
	free(n->post);
	free(n);
	*rt_rank_state(r, RT_PART_COMM) = NULL;
}

/* The NCCL id: made by world rank 0, handed to every process.  Every process takes part
 * in the broadcast, even one that cannot run, so none waits forever. */
static int nc_open(RtWorld *w)
{
	NcWorld *nw = (NcWorld *)calloc(1, sizeof *nw);
	if (!nw)
		return rt_world_error(w, "out of memory");
	*rt_world_state(w, RT_PART_COMM) = nw;
	int nlocal = rt_world_nlocal(w);
	nw->slot = (CuSlot *)calloc((size_t)nlocal, sizeof(CuSlot));
	if (!nw->slot)
		return rt_world_error(w, "out of memory");
	for (int i = 0; i < nlocal; i++)
		pthread_mutex_init(&nw->slot[i].mu, NULL);
	nw->nslot = nlocal;
	struct {
		int ok;
		ncclUniqueId id;
	} msg;
	memset(&msg, 0, sizeof msg);
	if (rt_world_root(w) && !rt_world_unable_reason(w)[0]) {
		ncclResult_t e = ncclGetUniqueId(&msg.id);
		if (e == ncclSuccess)
			msg.ok = 1;
		else
			rt_world_unable(w, "ncclGetUniqueId failed on host %s: %s: %s", rt_world_host(w),
			                rt_cuda_nccl_name(e), ncclGetErrorString(e));
	}
	if (rt_world_bcast(w, &msg, sizeof msg))
		return RT_EFAIL;
	if (!msg.ok)
		rt_world_unable(w, "world rank 0 could not make the NCCL id, so no rank can run");
	nw->id = msg.id;
	return RT_OK;
}

/* From the watchdog or a failing rank: abort every local communicator, which ends the
 * NCCL kernels, so the streams drain and every poll returns RT_EABORT. */
static void nc_abort(RtWorld *w)
{
	NcWorld *nw = ncw(w);
	for (int i = 0; i < nw->nslot; i++)
		slot_abort(&nw->slot[i]);
}

static void nc_close(RtWorld *w)
{
	NcWorld *nw = ncw(w);
	if (!nw)
		return;
	for (int i = 0; i < nw->nslot; i++) {
		slot_abort(&nw->slot[i]);
		pthread_mutex_destroy(&nw->slot[i].mu);
	}
	free(nw->slot);
	free(nw);
	*rt_world_state(w, RT_PART_COMM) = NULL;
}

extern "C" const RtComm rt_comm_nccl = {
	.name = "nccl",
	.open = nc_open,
	.close = nc_close,
	.abort = nc_abort,
	.rank_open = nc_rank_open,
	.rank_close = nc_rank_close,
	.group_start = nc_group_start,
	.send = nc_send,
	.recv = nc_recv,
	.allreduce = nc_allreduce,
	.shard = nc_shard,
	.group_end = nc_group_end,
	.barrier = nc_barrier,
};
