/* The shared-memory communicator: every rank of the world is a thread of this process
 * (the threads launcher) with tensors in host memory (the cpu device), talking through
 * in-process channels.
 *
 * Channels implement docs/semantics.md exactly.  There is one per ordered pair of
 * ranks, holding the posted and not yet matched sends or receives in posting order,
 * so the k-th SEND from a to b meets the k-th RECV on b from a (FIFO).  A group's ops
 * are posted together in group_end(), under the world's lock, and the rank then waits
 * until all of them completed.  A send completes only when a receive has matched it
 * and the data is copied (rendezvous, as NCCL), whatever the size.  A send to self (a plan
 * lowered with --same-rank=self-send) is the pair (a, a): its receive, posted in the same
 * group, meets it there and the data is copied like any other.  An all-reduce over the
 * dp group completes when every member has posted it; the last member to post sums the
 * members' tensors in dp order and scales by 1/dp, so the result is the same whichever
 * thread arrives last (and equals the sequential reference's).  One over a tied table's
 * pair works alike, the embedding's rank first, without the scale, and so does one over
 * the tp group, in tp order (a sum, or an elementwise maximum).  Sequence parallelism's
 * reduce-scatter sums each member's rows in that order too, into the member's piece.
 *
 * Waiting spins briefly (when there are cores to spare) and then sleeps on the rank's
 * condition variable; abort() broadcasts them all so the watchdog or a failing rank can
 * end every wait.  A mismatched pair (different edge, microbatch, direction or size)
 * fails the whole world with a message naming both ops. */
#include "rt_private.h"
#include "../plan/line.h"
#include "../plan/tie.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct Req {
	RtTensor *t;       // send: the data; recv: where it goes
	RtMsg msg;
	int rank, peer;
	uint8_t send;
	uint8_t done;
	uint8_t over;        // OP_OVER_PEER, or a collective's group (OP_OVER_DP, _TP, _TIE)
	uint8_t max;         // over the tp group: the elementwise maximum instead of the sum
	uint8_t shard;       // SHARD_NONE (an all-reduce) or the split it makes
	RtTensor *piece;     // sequence parallelism's: the member's rows of t
	int ckey, cidx, cn;  // a collective: its first member, this rank's index, the member
	                     // count
	atomic_int *pending; // owner's count of incomplete ops
	struct Req *next;
} Req;

/* A collective that splits its tensor (Req.shard), and how each member's part completes
 * (complete_locked). */
enum {
	SHARD_NONE,        // an all-reduce: every member gets the whole sum
	SHARD_OPT_SCATTER, // the distributed optimizer's reduce-scatter over dp (RtComm.shard)
	SHARD_OPT_GATHER,  // its all-gather
	SHARD_SEQ_SCATTER, // sequence parallelism's reduce-scatter by rows over tp (RtComm.seq)
	SHARD_SEQ_GATHER,  // its all-gather
};

typedef struct {
	Req *sh, *st;      // unmatched sends, oldest first
	Req *rh, *rt;      // unmatched receives
} Chan;

typedef struct {
	int n, posted;
	Req **reqs;        // by index in the group
} Coll;

/* A rank's group for a collective: its first member, the rank's index, the size (0: the
 * rank is in none). */
typedef struct {
	int first, index, n;
} Group;

enum { NCOLL = OP_OVER_TIE - OP_OVER_DP + 1 }; // the collectives' groups: dp, tp, tie

typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t *cv;  // per rank
	pthread_cond_t bar_cv;
	int bar_count, bar_gen;
	int world;
	Chan **chan;         // [src * world + dst], made on first use
	Coll **coll;         // [(over - OP_OVER_DP) * world + first member], made on first use
	int64_t spin;        // ns to spin before sleeping
} ThWorld;

typedef struct {
	Req *reqs;
	int nreq, cap;
	atomic_int pending;
	Group group[NCOLL]; // [over - OP_OVER_DP]
} ThRank;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static ThWorld *tw(RtWorld *w)
{
	return w->state[RT_PART_COMM];
}

static int th_open(RtWorld *w)
{
	int n = w->plan->world;
	if (w->nlocal != n)
		return rt_world_error(w, "the shm communicator needs every rank in one process "
		                         "(%d of %d here)", w->nlocal, n);
	ThWorld *t = calloc(1, sizeof *t);
	if (!t)
		return rt_world_error(w, "out of memory");
	pthread_mutex_init(&t->mu, NULL); // first: abort() may lock it from now on
	w->state[RT_PART_COMM] = t;
	t->cv = calloc((size_t)n, sizeof *t->cv);
	t->chan = calloc((size_t)n * (size_t)n, sizeof *t->chan);
	t->coll = calloc(NCOLL * (size_t)n, sizeof *t->coll);
	if (!t->cv || !t->chan || !t->coll)
		return rt_world_error(w, "out of memory for %d ranks", n);
	pthread_cond_init(&t->bar_cv, NULL);
	for (int i = 0; i < n; i++)
		pthread_cond_init(&t->cv[i], NULL);
	t->world = n; // last: abort() wakes t->world ranks
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	const char *spin = getenv("PIPERUN_SPIN_NS");
	t->spin = spin ? atol(spin) : cpus >= n ? 20000 : 0;
	return RT_OK;
}

static void th_close(RtWorld *w)
{
	ThWorld *t = tw(w);
	if (!t)
		return;
	if (t->chan)
		for (int64_t i = 0; i < (int64_t)t->world * t->world; i++)
			free(t->chan[i]);
	if (t->coll)
		for (int i = 0; i < NCOLL * t->world; i++) {
			if (t->coll[i])
				free(t->coll[i]->reqs);
			free(t->coll[i]);
		}
	if (t->cv) {
		for (int i = 0; i < t->world; i++)
			pthread_cond_destroy(&t->cv[i]);
		pthread_mutex_destroy(&t->mu);
		pthread_cond_destroy(&t->bar_cv);
	}
	free(t->cv);
	free(t->chan);
	free(t->coll);
	free(t);
	w->state[RT_PART_COMM] = NULL;
}

static void wake_locked(ThWorld *t)
{
	for (int i = 0; i < t->world; i++)
		pthread_cond_broadcast(&t->cv[i]);
	pthread_cond_broadcast(&t->bar_cv);
}

static void th_abort(RtWorld *w)
{
	ThWorld *t = tw(w);
	pthread_mutex_lock(&t->mu);
	wake_locked(t);
	pthread_mutex_unlock(&t->mu);
}

static int th_rank_open(RtRank *r)
{
	ThRank *t = calloc(1, sizeof *t);
	if (!t)
		return rt_error(r, "out of memory");
	r->state[RT_PART_COMM] = t;
	const Plan *p = r->w->plan;
	int *mem = malloc((size_t)p->world * sizeof(int));
	if (!mem)
		return rt_error(r, "out of memory");
	int n = plan_dim_members(p, r->rank, DIM_DP, mem);
	t->group[OP_OVER_DP - OP_OVER_DP] = (Group){mem[0], r->coord[DIM_DP], n};
	n = plan_dim_members(p, r->rank, DIM_TP, mem);
	t->group[OP_OVER_TP - OP_OVER_DP] = (Group){mem[0], r->coord[DIM_TP], n};
	free(mem);
	/* A tied table's pair (as the other communicators split it): the embedding's rank,
	 * then the head's. */
	int e, h, st;
	int q = plan_tie_across(p, &e, &h) ? plan_tie_peer(p, r->rank, &st) : -1;
	if (q >= 0)
		t->group[OP_OVER_TIE - OP_OVER_DP] = (Group){st == h ? q : r->rank, st == h, 2};
	return RT_OK;
}

static void th_rank_close(RtRank *r)
{
	ThRank *t = r->state[RT_PART_COMM];
	if (!t)
		return;
	free(t->reqs);
	free(t);
	r->state[RT_PART_COMM] = NULL;
}

static int th_group_start(RtRank *r)
{
	ThRank *t = r->state[RT_PART_COMM];
	t->nreq = 0;
	return RT_OK;
}

static Req *add_req(RtRank *r, RtTensor *tensor, int peer, const RtMsg *m, int send)
{
	ThRank *t = r->state[RT_PART_COMM];
	if (t->nreq == t->cap) {
		int cap = t->cap ? 2 * t->cap : 8;
		Req *q = realloc(t->reqs, (size_t)cap * sizeof *q);
		if (!q) {
			rt_error(r, "out of memory");
			return NULL;
		}
		t->reqs = q;
		t->cap = cap;
	}
	Req *q = &t->reqs[t->nreq++];
	*q = (Req){.t = tensor, .msg = *m, .rank = r->rank, .peer = peer, .send = (uint8_t)send,
	           .over = OP_OVER_PEER, .pending = &t->pending};
	return q;
}

static int th_send(RtRank *r, const RtTensor *t, int peer, const RtMsg *m)
{
	return add_req(r, (RtTensor *)t, peer, m, 1) ? RT_OK : RT_EFAIL;
}

static int th_recv(RtRank *r, RtTensor *t, int peer, const RtMsg *m)
{
	return add_req(r, t, peer, m, 0) ? RT_OK : RT_EFAIL;
}

static int th_allreduce(RtRank *r, RtTensor *t, int over, int max, const RtMsg *m)
{
	ThRank *tr = r->state[RT_PART_COMM];
	const Group *g = over >= OP_OVER_DP && over <= OP_OVER_TIE ? &tr->group[over - OP_OVER_DP]
	                                                           : NULL;
	if (!g || g->n == 0)
		return rt_error(r, "internal: the shm communicator has no group for an all-reduce "
		                   "over %d on rank %d", over, r->rank);
	Req *q = add_req(r, t, -1, m, 0);
	if (!q)
		return RT_EFAIL;
	q->over = (uint8_t)over;
	q->max = (uint8_t)max;
	q->ckey = g->first;
	q->cidx = g->index;
	q->cn = g->n;
	return RT_OK;
}

/* Posts t's collective over group `over` as an all-reduce's, splitting it as `shard`
 * says (piece: the member's rows, for sequence parallelism's). */
static int post_split(RtRank *r, RtTensor *t, int over, int shard, RtTensor *piece,
                      const RtMsg *m)
{
	if (th_allreduce(r, t, over, 0, m))
		return RT_EFAIL;
	ThRank *tr = r->state[RT_PART_COMM];
	tr->reqs[tr->nreq - 1].shard = (uint8_t)shard;
	tr->reqs[tr->nreq - 1].piece = piece;
	return RT_OK;
}

/* The distributed optimizer's collectives (RtComm.shard) over the rank's dp group. */
static int th_shard(RtRank *r, RtTensor *t, int gather, const RtMsg *m)
{
	return post_split(r, t, OP_OVER_DP, gather ? SHARD_OPT_GATHER : SHARD_OPT_SCATTER, NULL, m);
}

/* Sequence parallelism's collectives (RtComm.seq) over the rank's tp group. */
static int th_seq(RtRank *r, RtTensor *whole, RtTensor *piece, int gather, const RtMsg *m)
{
	return post_split(r, whole, OP_OVER_TP, gather ? SHARD_SEQ_GATHER : SHARD_SEQ_SCATTER, piece,
	                  m);
}

/* Completes sequence parallelism's collective c (reqs[0]'s shard: SHARD_SEQ_SCATTER
 * or _GATHER): member i's rows of a reduce-scatter are summed in member order, as
 * the all-reduce sums them, into its piece; an all-gather copies each piece into every
 * member's whole. */
static void rows_locked(RtRank *r, Coll *c)
{
	Req **q = c->reqs;
	int64_t n = q[0]->piece->rows * q[0]->piece->cols;
	for (int i = 0; i < c->n; i++) {
		RtTensor *own = q[i]->piece;
		if (q[0]->shard == SHARD_SEQ_GATHER) {
			for (int j = 0; j < c->n; j++)
				memcpy((float *)q[j]->t->data + i * n, own->data, (size_t)own->bytes);
			continue;
		}
		memcpy(own->data, (float *)q[0]->t->data + i * n, (size_t)own->bytes);
		for (int j = 1; j < c->n; j++) {
			RtTensor x = rt_tensor_view(q[j]->t, i * n, own->rows, own->cols);
			r->dev->add(r, own, &x);
		}
	}
}

/* Completes the posted collective c of n members with shards (reqs[0]'s shard:
 * SHARD_OPT_SCATTER or _GATHER): member i's shard of a reduce-scatter is summed in
 * member order and scaled, as the all-reduce sums every element, so the two agree to
 * the bit; an all-gather copies each member's shard to the others. */
static void shards_locked(RtRank *r, Coll *c)
{
	Req **q = c->reqs;
	int64_t n = q[0]->t->rows * q[0]->t->cols;
	for (int i = 0; i < c->n; i++) {
		int64_t off, len;
		rt_shard(n, c->n, i, &off, &len);
		if (!len)
			continue;
		RtTensor own = rt_tensor_view(q[i]->t, off, 1, len);
		if (q[0]->shard == SHARD_OPT_GATHER) {
			for (int j = 0; j < c->n; j++)
				if (j != i)
					memcpy((float *)q[j]->t->data + off, own.data, (size_t)own.bytes);
			continue;
		}
		RtTensor acc = rt_tensor_view(q[0]->t, off, 1, len);
		for (int j = 1; j < c->n; j++) {
			RtTensor x = rt_tensor_view(q[j]->t, off, 1, len);
			r->dev->add(r, &acc, &x);
		}
		r->dev->scale(r, &acc, 1.0f / (float)c->n);
		if (i != 0)
			memcpy(own.data, acc.data, (size_t)acc.bytes);
	}
}

static void (*const complete_locked[])(RtRank *, Coll *) = {
	[SHARD_OPT_SCATTER] = shards_locked,
	[SHARD_OPT_GATHER] = shards_locked,
	[SHARD_SEQ_SCATTER] = rows_locked,
	[SHARD_SEQ_GATHER] = rows_locked,
};

static Coll **coll_slot(ThWorld *t, const Req *q)
{
	return &t->coll[(q->over - OP_OVER_DP) * t->world + q->ckey];
}

/* acc = max(acc, x) elementwise (host memory: the shm communicator runs on the cpu). */
static void max_into(RtTensor *acc, const RtTensor *x)
{
	float *a = acc->data;
	const float *b = x->data;
	for (int64_t i = 0; i < acc->rows * acc->cols; i++)
		a[i] = b[i] > a[i] ? b[i] : a[i];
}

static void describe(const RtWorld *w, int rank, int op, char *buf, size_t n)
{
	PlanRank tmp;
	const PlanRank *pr = plan_rank(w->plan, rank, &tmp);
	char txt[256];
	plan_format_op(w->plan, &pr->ops[op], txt, sizeof txt);
	if (pr->first_line)
		snprintf(buf, n, "rank %d's '%s' (%s:%lld)", rank, txt,
		         w->opt.plan_path ? w->opt.plan_path : "plan", (long long)(pr->first_line + op));
	else
		snprintf(buf, n, "rank %d's '%s' (op %d)", rank, txt, op);
}

static void fail_locked(RtWorld *w, const char *why, const Req *a, const Req *b)
{
	char da[400], db[400];
	describe(w, a->rank, a->msg.op, da, sizeof da);
	describe(w, b->rank, b->msg.op, db, sizeof db);
	rt_world_error(w, "%s: %s matched %s", why, da, db);
	atomic_store(&w->abort, 1);
	wake_locked(tw(w));
}

static void done_locked(ThWorld *t, Req *q)
{
	q->done = 1;
	if (atomic_fetch_sub(q->pending, 1) == 1)
		pthread_cond_signal(&t->cv[q->rank]);
}

static void match_locked(RtWorld *w, Req *s, Req *rv)
{
	if (s->msg.edge != rv->msg.edge || s->msg.mb != rv->msg.mb || s->msg.dir != rv->msg.dir) {
		fail_locked(w, "send and receive do not match (FIFO order per pair of ranks)", s, rv);
		return;
	}
	if (s->msg.bytes != rv->msg.bytes || s->t->bytes != rv->t->bytes) {
		fail_locked(w, "send and receive sizes differ", s, rv);
		return;
	}
	memcpy(rv->t->data, s->t->data, (size_t)s->t->bytes);
	done_locked(tw(w), s);
	done_locked(tw(w), rv);
}

static Chan *chan(RtWorld *w, int src, int dst)
{
	ThWorld *t = tw(w);
	Chan **c = &t->chan[(int64_t)src * t->world + dst];
	if (!*c)
		*c = calloc(1, sizeof **c);
	return *c;
}

static int post_locked(RtRank *r, Req *q)
{
	RtWorld *w = r->w;
	ThWorld *t = tw(w);
	if (q->over != OP_OVER_PEER) {
		Coll **cp = coll_slot(t, q);
		if (!*cp) {
			*cp = calloc(1, sizeof **cp);
			if (*cp && !((*cp)->reqs = calloc((size_t)q->cn, sizeof(Req *)))) {
				free(*cp);
				*cp = NULL;
			}
			if (!*cp)
				return rt_error(r, "out of memory");
			(*cp)->n = q->cn;
		}
		Coll *c = *cp;
		if (q->cn != c->n || c->reqs[q->cidx]) {
			fail_locked(w, "collective members disagree", q, c->reqs[q->cidx] ? c->reqs[q->cidx] : q);
			return RT_EABORT;
		}
		c->reqs[q->cidx] = q;
		if (++c->posted < c->n)
			return RT_OK;
		/* The members agree on the stage (but a tied pair: two stages), a TPREDUCE's on
		 * the microbatch, direction and reduction, all on the size. */
		Req *a = c->reqs[0];
		for (int i = 1; i < c->n; i++)
			if ((q->over != OP_OVER_TIE && c->reqs[i]->msg.edge != a->msg.edge) ||
			    (q->over == OP_OVER_TP && (c->reqs[i]->msg.mb != a->msg.mb ||
			                               c->reqs[i]->msg.dir != a->msg.dir ||
			                               c->reqs[i]->max != a->max)) ||
			    c->reqs[i]->msg.bytes != a->msg.bytes || c->reqs[i]->shard != a->shard) {
				fail_locked(w, "all-reduce members disagree", a, c->reqs[i]);
				return RT_EABORT;
			}
		if (a->shard) {
			complete_locked[a->shard](r, c);
			for (int i = 0; i < c->n; i++) {
				done_locked(t, c->reqs[i]);
				c->reqs[i] = NULL;
			}
			c->posted = 0;
			return RT_OK;
		}
		/* Sum in member order into member 0's tensor, scale (dp), then copy out. */
		RtTensor *acc = a->t;
		for (int i = 1; i < c->n; i++)
			if (a->max)
				max_into(acc, c->reqs[i]->t);
			else
				r->dev->add(r, acc, c->reqs[i]->t);
		if (q->over == OP_OVER_DP)
			r->dev->scale(r, acc, 1.0f / (float)c->n);
		for (int i = 1; i < c->n; i++)
			memcpy(c->reqs[i]->t->data, acc->data, (size_t)acc->bytes);
		for (int i = 0; i < c->n; i++) {
			done_locked(t, c->reqs[i]);
			c->reqs[i] = NULL;
		}
		c->posted = 0;
		return RT_OK;
	}
	Chan *c = q->send ? chan(w, q->rank, q->peer) : chan(w, q->peer, q->rank);
	if (!c)
		return rt_error(r, "out of memory");
	if (q->send) {
		if (c->rh) {
			Req *rv = c->rh;
			c->rh = rv->next;
			if (!c->rh)
				c->rt = NULL;
			match_locked(w, q, rv);
		} else {
			q->next = NULL;
			if (c->st)
				c->st->next = q;
			else
				c->sh = q;
			c->st = q;
		}
	} else {
		if (c->sh) {
			Req *s = c->sh;
			c->sh = s->next;
			if (!c->sh)
				c->st = NULL;
			match_locked(w, s, q);
		} else {
			q->next = NULL;
			if (c->rt)
				c->rt->next = q;
			else
				c->rh = q;
			c->rt = q;
		}
	}
	return RT_OK;
}

static void list_unlink(Req **head, Req **tail, Req *q)
{
	Req *prev = NULL;
	for (Req *x = *head; x; prev = x, x = x->next) {
		if (x != q)
			continue;
		if (prev)
			prev->next = x->next;
		else
			*head = x->next;
		if (*tail == x)
			*tail = prev;
		return;
	}
}

/* An aborted group: take the rank's unmatched requests out of the channels, so no
 * other rank touches them (or their tensors) after this rank has moved on. */
static void withdraw_locked(RtRank *r)
{
	ThRank *tr = r->state[RT_PART_COMM];
	ThWorld *t = tw(r->w);
	for (int i = 0; i < tr->nreq; i++) {
		Req *q = &tr->reqs[i];
		if (q->done)
			continue;
		if (q->over != OP_OVER_PEER) {
			Coll *c = *coll_slot(t, q);
			if (c && c->reqs[q->cidx] == q) {
				c->reqs[q->cidx] = NULL;
				c->posted--;
			}
			continue;
		}
		Chan *c = t->chan[q->send ? (int64_t)q->rank * t->world + q->peer
		                          : (int64_t)q->peer * t->world + q->rank];
		if (!c)
			continue;
		if (q->send)
			list_unlink(&c->sh, &c->st, q);
		else
			list_unlink(&c->rh, &c->rt, q);
	}
}

static int th_group_end(RtRank *r)
{
	ThRank *tr = r->state[RT_PART_COMM];
	ThWorld *t = tw(r->w);
	if (tr->nreq == 0)
		return RT_OK;
	atomic_store(&tr->pending, tr->nreq);
	pthread_mutex_lock(&t->mu);
	int rc = RT_OK;
	for (int i = 0; i < tr->nreq && rc == RT_OK && !rt_aborted(r->w); i++)
		rc = post_locked(r, &tr->reqs[i]);
	if (rc == RT_OK && rt_aborted(r->w))
		rc = RT_EABORT;
	if (rc)
		withdraw_locked(r);
	pthread_mutex_unlock(&t->mu);
	if (rc) {
		tr->nreq = 0;
		return rc;
	}
	/* A short spin catches a partner that is about to post; longer would take the
	 * core from a rank that is computing (or from another process). */
	if (t->spin) {
		int64_t until = rt_now_ns() + t->spin;
		while (atomic_load(&tr->pending) > 0 && !rt_aborted(r->w) && rt_now_ns() < until)
			for (int i = 0; i < 64; i++)
				cpu_relax();
	}
	pthread_mutex_lock(&t->mu);
	while (atomic_load(&tr->pending) > 0 && !rt_aborted(r->w))
		pthread_cond_wait(&t->cv[r->rank], &t->mu);
	int left = atomic_load(&tr->pending) > 0;
	if (left)
		withdraw_locked(r);
	pthread_mutex_unlock(&t->mu);
	tr->nreq = 0;
	return left ? RT_EABORT : RT_OK;
}

static int th_barrier(RtRank *r)
{
	ThWorld *t = tw(r->w);
	pthread_mutex_lock(&t->mu);
	int gen = t->bar_gen;
	if (++t->bar_count == t->world) {
		t->bar_count = 0;
		t->bar_gen++;
		pthread_cond_broadcast(&t->bar_cv);
	} else {
		while (gen == t->bar_gen && !rt_aborted(r->w))
			pthread_cond_wait(&t->bar_cv, &t->mu);
	}
	int rc = gen == t->bar_gen ? RT_EABORT : RT_OK;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

const RtComm rt_comm_shm = {
	.name = "shm",
	.open = th_open,
	.close = th_close,
	.abort = th_abort,
	.rank_open = th_rank_open,
	.rank_close = th_rank_close,
	.group_start = th_group_start,
	.send = th_send,
	.recv = th_recv,
	.allreduce = th_allreduce,
	.shard = th_shard,
	.group_end = th_group_end,
	.barrier = th_barrier,
	.seq = th_seq,
};
