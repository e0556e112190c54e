/* The simulation core: executes a plan as docs/semantics.md defines it.
 *
 * Matching is decided by program order alone (the k-th SEND from a to b pairs with the
 * k-th RECV on b from a; the k-th ALLREDUCE of a dp group with every member's k-th, the
 * k-th TIEREDUCE of a tied table's pair of ranks with the other's k-th), so
 * time never decides who meets whom.  That lets us run without a global clock: each
 * agent (a rank in the strict model; a rank's compute stream and its comm stream in the
 * overlap model) advances as far as it can, computing times in max-plus fashion, and
 * parks when it needs something that has not been posted yet.  Whoever posts the
 * missing half wakes it.  When no agent can move and some have not finished, no order
 * of execution could finish them either: that is a deadlock, and the parked agents with
 * their "waits for" edges are the wait-for graph in which we look for a cycle.
 *
 * Per op the work is O(1): a cursor step, a per-(sender, receiver) FIFO push or pop, a
 * counter for collectives.  The overlap model also keeps, per rank, a small hash of
 * values in flight between its streams (receives completed, data produced).  Times
 * saturate instead of overflowing, so any plan the reader accepts runs safely. */
#include "sim_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const sim_model_names[SIM_MODEL_COUNT] = {"strict", "overlap"};
const char *const sim_verdict_names[SIM_VERDICT_COUNT] = {"ok", "deadlock", "mismatch"};

/* ---- small helpers ---- */

void *sim_xcalloc(S *s, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p && !s->oom) {
		s->oom = s->failed = 1;
		plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), n * size);
	}
	return p;
}

int sim_grow(S *s, void **arr, int64_t *cap, int64_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	int64_t c = *cap ? *cap * 2 : 8;
	while (c < need)
		c *= 2;
	void *p = realloc(*arr, (size_t)c * size);
	if (!p) {
		if (!s->oom) {
			s->oom = s->failed = 1;
			plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p),
			              (size_t)c * size);
		}
		return -1;
	}
	*arr = p;
	*cap = c;
	return 0;
}

int64_t sim_op_line(const Plan *p, int rank, int64_t op)
{
	if (rank < 0 || rank >= p->world || op < 0 || !p->ranks[rank].first_line)
		return 0;
	return p->ranks[rank].first_line + op;
}

int sim_model_parse(const char *s)
{
	for (int m = 0; m < SIM_MODEL_COUNT; m++)
		if (!strcmp(s, sim_model_names[m]))
			return m;
	return -1;
}

/* plan_transfer_ns, saturated for absurd sizes, cached for the common repeated size. */
static int64_t xfer(S *s, int64_t bytes)
{
	if (bytes == s->xfer_bytes)
		return s->xfer_ns;
	const Plan *p = s->p;
	int64_t ns;
	if (p->link_ideal)
		ns = 0;
	else if ((double)bytes * 1e9 / p->bandwidth > 4e18)
		ns = INT64_MAX / 2;
	else
		ns = plan_transfer_ns(p, bytes);
	s->xfer_bytes = bytes;
	s->xfer_ns = ns;
	return ns;
}

int64_t sim_allreduce_ns(const Plan *p, int n, int64_t bytes)
{
	if (p->link_ideal || n <= 1)
		return 0;
	double x = ceil(2.0 * (n - 1) / n * (double)bytes * 1e9 / p->bandwidth);
	int64_t lat = p->latency_ns > INT64_MAX / (4 * (int64_t)n) ? INT64_MAX / 4
	                                                           : 2 * (int64_t)(n - 1) * p->latency_ns;
	if (!(x < 4e18))
		return INT64_MAX / 2;
	return sat_add(lat, (int64_t)x);
}

/* The critical path's predecessor of op i of rank r, in 32 bits (record_ops costs 24
 * bytes per op, not 28): -1 none; else a 2-bit tag and 29 bits.  Tag 0: op v of the
 * same rank; 1: op v of the op's p2p peer; 2: the matching all-reduce of dp member v
 * (found again by counting when the path is walked, which is rare).  Refs that fit none
 * of these (op indices of 2^29 and more) end the path there. */
#define PRED_BITS 29
static int32_t pred_code(const S *s, int r, int64_t i, int64_t ref)
{
	if (ref < 0)
		return -1;
	int q = REF_RANK(ref);
	int64_t v = REF_OP(ref);
	const PlanOp *o = &s->p->ranks[r].ops[i];
	if (v >= ((int64_t)1 << PRED_BITS) || q >= (1 << PRED_BITS))
		return -1;
	if (q == r)
		return (int32_t)v;
	if ((o->kind == OP_SEND || o->kind == OP_RECV || o->kind == OP_TIEREDUCE) && o->peer == q)
		return (int32_t)((1 << PRED_BITS) | v);
	if (o->kind == OP_ALLREDUCE)
		return (int32_t)((2 << PRED_BITS) | q);
	if (o->kind == OP_TPREDUCE)
		return (int32_t)((3 << PRED_BITS) | q);
	return -1;
}

int64_t sim_pred_ref(const S *s, int r, int64_t i)
{
	int32_t c = pred_flip(s->pred[r][i]);
	if (c < 0)
		return REF_NONE;
	int64_t v = c & ((1 << PRED_BITS) - 1);
	const PlanOp *o = &s->p->ranks[r].ops[i];
	switch (c >> PRED_BITS) {
	case 0:
		return REF(r, v);
	case 1:
		return REF(o->peer, v);
	case 2: { // the member's all-reduce with the same count as ours
		int64_t k = 0;
		for (int64_t j = 0; j < i; j++)
			k += s->p->ranks[r].ops[j].kind == OP_ALLREDUCE;
		const PlanRank *pm = &s->p->ranks[v];
		for (int64_t j = 0; j < pm->nops; j++)
			if (pm->ops[j].kind == OP_ALLREDUCE && k-- == 0)
				return REF(v, j);
		return REF_NONE;
	}
	case 3: { // the member's TPREDUCE of the same stage, microbatch, direction and part
		const PlanRank *pm = &s->p->ranks[v];
		for (int64_t j = 0; j < pm->nops; j++) {
			const PlanOp *x = &pm->ops[j];
			if (x->kind == OP_TPREDUCE && x->stage == o->stage && x->mb == o->mb &&
			    x->dir == o->dir && x->part == o->part)
				return REF(v, j);
		}
		return REF_NONE;
	}
	}
	return REF_NONE;
}

static void record(S *s, int r, int64_t i, int64_t start, int64_t end, int64_t pred)
{
	if (!s->opt.record_ops)
		return;
	SimOpTime *t = &s->res->ranks[r].times[i];
	t->start = start;
	t->end = end;
	if (end >= s->last_end && (end > s->last_end || REF(r, i) < s->last_ref)) {
		s->last_end = end;
		s->last_ref = REF(r, i);
	}
	s->pred[r][i] = pred_flip(pred_code(s, r, i, pred)); // the first write: KEEP is none
}

static void set_end(S *s, int r, int64_t i, int64_t end, int64_t pred)
{
	if (!s->opt.record_ops)
		return;
	s->res->ranks[r].times[i].end = end;
	if (end >= s->last_end && (end > s->last_end || REF(r, i) < s->last_ref)) {
		s->last_end = end;
		s->last_ref = REF(r, i);
	}
	if (pred != REF_KEEP)
		s->pred[r][i] = pred_flip(pred_code(s, r, i, pred));
}

/* A parked rank resumes at ops[i]: fetch its next ops now.  With many ranks the
 * hardware prefetcher cannot follow every rank's list, and a resumed rank would
 * otherwise start with a cache miss on every line of ops. */
static inline void prefetch_ops(const PlanRank *pr, int64_t i)
{
	if (i + 6 < pr->nops) {
		const char *a = (const char *)&pr->ops[i];
		__builtin_prefetch(a);
		__builtin_prefetch(a + 64);
		__builtin_prefetch(a + 128);
		__builtin_prefetch(a + 192);
	}
}

static void push_agent(S *s, int r, int stream)
{
	Rk *k = &s->rk[r];
	if (k->queued[stream])
		return;
	k->queued[stream] = 1;
	s->work[s->nwork++] = r * 2 + stream;
}

/* ---- the per-rank hash (overlap model) ---- */

static int hput(S *s, Hash *h, uint64_t key, int64_t time, int64_t who, int64_t refs)
{
	/* One probe run finds the key or the free slot it goes to (unless the table grows). */
	if ((h->n + 1) * 2 <= h->cap) {
		uint64_t mask = (uint64_t)(h->cap - 1);
		uint64_t i = hmix(key) & mask;
		while (h->e[i].key && h->e[i].key != key)
			i = (i + 1) & mask;
		HEnt *e = &h->e[i];
		if (!e->key) {
			*e = (HEnt){key, time, who, refs};
			h->n++;
			return 0;
		}
		e->refs = sat_add(e->refs, refs);
		if (time > e->time) {
			e->time = time;
			e->who = who;
		}
		return 0;
	}
	HEnt *e = hfind(h, key);
	if (e) {
		e->refs = sat_add(e->refs, refs);
		if (time > e->time) {
			e->time = time;
			e->who = who;
		}
		return 0;
	}
	if ((h->n + 1) * 2 > h->cap) {
		int64_t cap = h->cap ? h->cap * 2 : 16;
		HEnt *ne = calloc((size_t)cap, sizeof *ne);
		if (!ne) {
			s->oom = s->failed = 1;
			plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), 0);
			return -1;
		}
		for (int64_t j = 0; j < h->cap; j++) {
			if (!h->e[j].key)
				continue;
			uint64_t i = hmix(h->e[j].key) & (uint64_t)(cap - 1);
			while (ne[i].key)
				i = (i + 1) & (uint64_t)(cap - 1);
			ne[i] = h->e[j];
		}
		free(h->e);
		h->e = ne;
		h->cap = cap;
	}
	uint64_t i = hmix(key) & (uint64_t)(h->cap - 1);
	while (h->e[i].key)
		i = (i + 1) & (uint64_t)(h->cap - 1);
	h->e[i] = (HEnt){key, time, who, refs};
	h->n++;
	return 0;
}

/* Removes e, shifting back the entries of its probe run (no tombstones). */
static void hdel(Hash *h, HEnt *e)
{
	uint64_t mask = (uint64_t)(h->cap - 1);
	uint64_t i = (uint64_t)(e - h->e);
	uint64_t j = i;
	for (;;) {
		h->e[i].key = 0;
		for (;;) {
			j = (j + 1) & mask;
			if (!h->e[j].key) {
				h->n--;
				return;
			}
			uint64_t home = hmix(h->e[j].key) & mask;
			// move e[j] to i unless its home lies cyclically in (i, j]
			if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
				continue;
			break;
		}
		h->e[i] = h->e[j];
		i = j;
	}
}

static void hconsume(Hash *h, HEnt *e)
{
	if (--e->refs <= 0)
		hdel(h, e);
}

/* ---- channels ---- */

/* sim_chan_of by the op's route: each route has one sender and one receiver, so the chan
 * cached on its side is the one its rank found (and listed) before; the cache entry
 * names that rank and peer, so an unverified plan's odd routes only miss it. */
static inline int chan_by_route(S *s, int r, const PlanOp *o, int recv)
{
	int rt = o->route;
	if (rt < 0 || rt >= s->p->nroutes)
		return sim_chan_of(s, r, o->peer, recv);
	RouteChan *rc = &s->routechan[rt * 2 + recv];
	if (rc->chan && rc->rank == r && rc->peer == o->peer)
		return rc->chan - 1;
	int c = sim_chan_of(s, r, o->peer, recv);
	if (c >= 0)
		*rc = (RouteChan){r, o->peer, c + 1};
	return c;
}

static int chan_push(S *s, Chan *c, int side, int64_t post, int64_t op)
{
	if (c->n == c->cap) {
		int64_t cap = c->cap ? c->cap * 2 : 4;
		QEnt *q = malloc((size_t)cap * sizeof *q);
		if (!q) {
			s->oom = s->failed = 1;
			plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), 0);
			return -1;
		}
		for (int64_t i = 0; i < c->n; i++)
			q[i] = c->q[(c->head + i) & (c->cap - 1)];
		free(c->q);
		c->q = q;
		c->head = 0;
		c->cap = cap;
	}
	c->side = (uint8_t)side;
	c->q[(c->head + c->n) & (c->cap - 1)] = (QEnt){post, op};
	c->n++;
	return 0;
}

static QEnt chan_pop(Chan *c)
{
	QEnt e = c->q[c->head];
	c->head = (c->head + 1) & (c->cap - 1);
	c->n--;
	return e;
}

/* ---- verdicts found on the way ---- */

void sim_mismatch(S *s, int ra, int64_t a, int rb, int64_t b, const char *why)
{
	if (s->failed)
		return;
	s->failed = 1;
	SimResult *res = s->res;
	res->verdict = SIM_MISMATCH;
	res->stuck = calloc(2, sizeof *res->stuck);
	if (res->stuck) {
		res->nstuck = 2;
		res->stuck[0] = (SimOpRef){ra, a, SIM_STREAM_RANK};
		res->stuck[1] = (SimOpRef){rb, b, SIM_STREAM_RANK};
	}
	snprintf(res->message, sizeof res->message, "%s", why);
}

/* The k-th SEND and the k-th RECV of a pair must agree on what they move. */
static int check_pair(S *s, int ra, int64_t a, int rb, int64_t b)
{
	const PlanOp *x = &s->p->ranks[ra].ops[a], *y = &s->p->ranks[rb].ops[b];
	const char *why = NULL;
	if (x->bytes != y->bytes)
		why = "bytes differ between a send and the receive it pairs with";
	else if (x->stage != y->stage || x->mb != y->mb || x->dir != y->dir)
		why = "FIFO order pairs a send with a receive of another edge, microbatch or direction";
	if (!why)
		return 0;
	sim_mismatch(s, ra, a, rb, b, why);
	return -1;
}

/* ---- groups ---- */

/* Credits op i of rank r (in r's posted group) with completion at `end`. */
static inline void complete_op(S *s, int r, int64_t i, int64_t end, int64_t pred, int counted)
{
	Rk *k = &s->rk[r];
	set_end(s, r, i, end, pred);
	if (end > k->gmax || k->gmax_who == REF_NONE) {
		k->gmax = max64(end, k->gmax);
		k->gmax_who = REF(r, i);
	}
	if (counted && --k->pending == 0 && k->state == AG_MATCH)
		push_agent(s, r, 0);
}

static void post_p2p(S *s, int r, int64_t i, const PlanOp *o, int64_t t)
{
	int recv = o->kind == OP_RECV;
	int c = chan_by_route(s, r, o, recv);
	if (c < 0)
		return;
	Chan *ch = &s->ch[c];
	int eager = s->opt.eager;
	if (ch->n && ch->side != recv) {
		QEnt e = chan_pop(ch);
		int sr = recv ? o->peer : r, rr = recv ? r : o->peer;
		int64_t si = recv ? e.op : i, ri = recv ? i : e.op;
		int64_t sp = recv ? e.post : t, rp = recv ? t : e.post;
		if (check_pair(s, sr, si, rr, ri))
			return;
		int64_t x = xfer(s, o->bytes);
		ch->bytes = sat_add(ch->bytes, o->bytes);
		ch->transfers++;
		int64_t sbind = REF_NONE, rbind = REF_NONE; // NONE: keep the group's binder
		if (eager) {
			int64_t arrive = sat_add(sp, x);
			int64_t rend = max64(arrive, rp);
			if (arrive > rp)
				rbind = REF(sr, si);
			if (!recv) // the send completes at once; its receive was waiting
				complete_op(s, r, i, t, REF_KEEP, 0);
			int64_t keep = REF_KEEP;
			complete_op(s, rr, ri, rend, rbind == REF_NONE ? keep : rbind, !recv);
			return;
		}
		int64_t start = max64(sp, rp);
		int64_t end = sat_add(start, x);
		if (rp > sp)
			sbind = REF(rr, ri);
		else if (sp > rp)
			rbind = REF(sr, si);
		int64_t skeep = REF_KEEP;
		int64_t rkeep = REF_KEEP;
		complete_op(s, sr, si, end, sbind == REF_NONE ? skeep : sbind, recv);
		complete_op(s, rr, ri, end, rbind == REF_NONE ? rkeep : rbind, !recv);
		return;
	}
	if (chan_push(s, ch, recv, t, i))
		return;
	if (!recv && eager)
		complete_op(s, r, i, t, REF_KEEP, 0);
	else
		s->rk[r].pending++;
}

/* Member r's op i (o) arrives at collective c at time t; the first sets what the others
 * must match.  Once all have, every member's posted op (ar_op, or tp_op for a tp group)
 * completes when the last arrival and the ring time allow. */
static void coll_arrive(S *s, Coll *c, int r, int64_t i, const PlanOp *o, int64_t t, int tp)
{
	if (c->arrived == 0) {
		*c = (Coll){.n = c->n, .world_n = c->world_n, .members = c->members, .count = c->count,
		            .total = c->total,
		            .stage = o->stage, .mb = o->mb, .part = o->part, .dir = o->dir,
		            .bytes = o->bytes, .maxpost = t, .last_who = REF(r, i), .first_rank = r,
		            .first_op = i};
	} else if (t >= c->maxpost) {
		c->maxpost = t;
		c->last_who = REF(r, i);
	}
	if (++c->arrived < c->n)
		return;
	/* A line plan's groups hold line 0's member; the time is the world group's. */
	int64_t ns = tp ? (s->p->line ? plan_tp_allreduce_ns(s->p, c->members[0], c->bytes)
	                              : plan_allreduce_ns(s->p, c->members, c->n, c->bytes))
	                : sim_allreduce_ns(s->p, c->world_n, c->bytes);
	int64_t end = sat_add(c->maxpost, ns);
	c->arrived = 0;
	c->count++;
	c->total = sat_add(c->total, c->bytes);
	for (int j = 0; j < c->n; j++) {
		int m = c->members[j];
		int64_t *op = tp ? &s->rk[m].tp_op : &s->rk[m].ar_op, x = *op;
		*op = -1;
		complete_op(s, m, x, end, c->last_who == REF(m, x) ? REF_KEEP : c->last_who, 1);
	}
}

/* A collective: an ALLREDUCE over the rank's dp group, or a TIEREDUCE over the pair
 * holding the two copies of a tied table (their stages differ: the embedding's and the
 * head's).  It completes when every member has posted, after the link model's time. */
static void post_allreduce(S *s, int r, int64_t i, const PlanOp *o, int64_t t)
{
	int tie = o->kind == OP_TIEREDUCE;
	if (tie && s->tieof[r] < 0) { // the verifier refuses this; stay safe on any plan
		sim_mismatch(s, r, i, o->peer, -1, "a TIEREDUCE on a rank that holds no tied table");
		return;
	}
	Coll *c = &s->coll[tie ? s->tieof[r] : s->collof[r]];
	if (c->arrived && ((o->stage != c->stage && !tie) || o->bytes != c->bytes)) {
		sim_mismatch(s, c->first_rank, c->first_op, r, i,
		             tie ? "the two copies of a tied table are reduced with different sizes"
		             : o->stage != c->stage
		                 ? "members of a dp group all-reduce different stages at the same point"
		                 : "members of a dp group all-reduce different sizes");
		return;
	}
	s->rk[r].ar_op = i;
	s->rk[r].pending++;
	coll_arrive(s, c, r, i, o, t, 0);
}

/* A TPREDUCE completes when every member of the rank's tp group has posted the one of
 * the same stage, microbatch, direction and part (its identity, not its count: members
 * that post different ones wait for each other forever, which the stall analysis shows
 * as a cycle).  A member whose posted one differs from the group's stays parked. */
static void post_tpreduce(S *s, int r, int64_t i, const PlanOp *o, int64_t t)
{
	Coll *c = &s->coll[s->tpof[r]];
	s->rk[r].tp_op = i;
	s->rk[r].pending++;
	if (c->arrived &&
	    (o->stage != c->stage || o->mb != c->mb || o->dir != c->dir || o->part != c->part))
		return; // never completes: a deadlock
	if (c->arrived && o->bytes != c->bytes) {
		sim_mismatch(s, c->first_rank, c->first_op, r, i,
		             "members of a tp group all-reduce different sizes");
		return;
	}
	coll_arrive(s, c, r, i, o, t, 1);
}

/* Posts the group [i, end) at time t (end -1: find it).
 * take: the comm stream consumes the tensors its sends transmit (overlap model); only:
 * when the group has one send, its tensor's entry (group_ready found it, and nothing has
 * changed the hash since), else NULL.  Returns the end. */
static int64_t post_group(S *s, int r, int64_t i, int64_t end, int64_t t, int take, HEnt *only)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	const PlanOp *ops = pr->ops;
	k->pending = 0;
	k->gmax = t;
	k->gmax_who = REF_NONE;
	if (end < 0)
		end = plan_group_end(pr, i);
	k->gend = end;
	for (int64_t x = i; x < end && !s->failed; x++) {
		const PlanOp *o = &ops[x];
		record(s, r, x, t, -1, k->bind);
		if (o->kind == OP_ALLREDUCE || o->kind == OP_TIEREDUCE) {
			post_allreduce(s, r, x, o, t);
			continue;
		}
		if (o->kind == OP_TPREDUCE) {
			post_tpreduce(s, r, x, o, t);
			continue;
		}
		if (take && o->kind == OP_SEND) {
			HEnt *e = only ? only : hfind(&k->h, send_key(s, o));
			if (e)
				hconsume(&k->h, e);
		}
		post_p2p(s, r, x, o, t);
	}
	return end;
}

/* ---- compute ---- */

/* Runs compute op i (o) of rank r from `start`; returns its end. */
static inline int64_t do_compute(S *s, int r, int64_t i, const PlanOp *o, int64_t start,
                                 int64_t pred)
{
	Rk *k = &s->rk[r];
	int64_t end = start;
	if (plan_op_is_compute(o->kind)) {
		const StageInfo *st = &s->st[o->stage];
		int64_t cost = s->tp > 1 ? plan_part_cost(&st->parts, o, s->p->stages[o->stage].cost)
		                          : st->cost[o->kind];
		end = sat_add(start, cost);
		k->busy = sat_add(k->busy, cost);
		k->mem = sat_add(k->mem, s->tp > 1 ? plan_part_mem(&st->parts, o) : st->dmem[o->kind]);
		if (k->mem > k->peak_mem)
			k->peak_mem = k->mem;
		uint16_t makes = plan_ops[o->kind].makes; // a microbatch is live from F to its W
		int last = s->tp == 1 || o->kind == OP_W || o->part + 1 >= st->parts.n[DIR_GRAD];
		if (makes & PLAN_DEP_ACT) {
			if (o->part == 0 && ++k->units > k->peak_units)
				k->peak_units = k->units;
		} else if ((makes & PLAN_DEP_WGRAD) && last) {
			k->units--;
		}
	}
	k->done++;
	if (s->opt.record_ops)
		record(s, r, i, start, end, pred);
	return end;
}

/* ---- the strict model ---- */

static void run_strict(S *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t i = k->pc, t = k->t, n = pr->nops;
	if (k->state == AG_MATCH) { // woken: the group completed
		k->done += k->gend - i;
		t = k->gmax;
		k->bind = k->gmax_who;
		i = k->gend;
	}
	k->state = AG_READY;
	const PlanOp *ops = pr->ops;
	while (i < n) {
		const PlanOp *o = &ops[i];
		if (!plan_op_is_comm(o->kind)) {
			t = do_compute(s, r, i, o, t, k->bind);
			k->bind = REF(r, i);
			i++;
			continue;
		}
		int64_t end = post_group(s, r, i, -1, t, 0, NULL);
		if (s->failed)
			return;
		if (k->pending) {
			k->pc = i;
			k->t = t;
			k->state = AG_MATCH;
			prefetch_ops(pr, end);
			return;
		}
		k->done += end - i;
		t = k->gmax;
		if (k->gmax_who != REF_NONE)
			k->bind = k->gmax_who;
		i = end;
	}
	k->pc = n;
	k->t = t;
	k->state = AG_DONE;
}

/* ---- the overlap model ---- */


static void run_compute(S *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t i = k->cpc, t = k->ct, n = pr->nops;
	int progressed = 0;
	k->cstate = AG_READY;
	uint64_t keys[MAXKEYS];
	while (i < n) {
		const PlanOp *o = &pr->ops[i];
		if (plan_op_is_comm(o->kind)) {
			i++;
			continue;
		}
		int nk = consumed_keys(s, o, keys, MAXKEYS);
		int64_t start = t, bind = k->cbind;
		int missing = 0;
		HEnt *e = NULL;
		for (int j = 0; j < nk; j++) {
			e = hfind(&k->h, keys[j]);
			if (!e) {
				missing = 1;
				break;
			}
			if (e->time > start) {
				start = e->time;
				bind = e->who;
			}
		}
		if (missing) {
			k->cstate = AG_WAIT;
			prefetch_ops(pr, i);
			break;
		}
		if (nk == 1) // the hash has not changed since the lookup
			hconsume(&k->h, e);
		else
			for (int j = 0; j < nk; j++)
				hconsume(&k->h, hfind(&k->h, keys[j]));
		int64_t end = do_compute(s, r, i, o, start, bind);
		t = end;
		k->cbind = REF(r, i);
		progressed = 1;
		/* What it produces for the comm stream: with tp > 1 a part ending in a cut gives
		 * its TPREDUCE's data, and only the last part (the TPREDUCE after it, if any,
		 * in group_done) gives the stage's output. */
		if (plan_op_is_compute(o->kind)) {
			const StageInfo *st = &s->st[o->stage];
			uint16_t makes = plan_ops[o->kind].makes;
			int dir = o->kind == OP_F ? DIR_ACT : DIR_GRAD;
			int parted = s->tp > 1 && o->kind != OP_W && o->part < st->parts.n[dir];
			int red = parted && st->parts.part[dir][o->part].reduce;
			int last = !parted || (o->part + 1 == st->parts.n[dir] && !red);
			if (red && hput(s, &k->h, tp_key(KEY_DATA, o->stage, dir, o->part, o->mb), end,
			                REF(r, i), 1))
				return;
			if (!last)
				makes &= (uint8_t)~(PLAN_DEP_ACT | PLAN_DEP_GRAD);
			if (parted && o->part + 1 != st->parts.n[dir])
				makes &= (uint8_t)~PLAN_DEP_WGRAD;
			if ((makes & PLAN_DEP_ACT) && st->nrout &&
			    hput(s, &k->h, hkey(KEY_DATA, DIR_ACT, o->stage, o->mb), end, REF(r, i), st->nrout))
				return;
			if ((makes & PLAN_DEP_GRAD) && st->nrin &&
			    hput(s, &k->h, hkey(KEY_DATA, DIR_GRAD, o->stage, o->mb), end, REF(r, i), st->nrin))
				return;
			int ls = local_stage(s, r, o->stage);
			if ((makes & PLAN_DEP_WGRAD) && ls >= 0) {
				k->wdone[ls]++;
				if (end >= k->wlast[ls]) {
					k->wlast[ls] = end;
					k->wlast_who[ls] = REF(r, i);
				}
			}
		}
		i++;
	}
	k->cpc = i;
	k->ct = t;
	if (i == n)
		k->cstate = AG_DONE;
	if (progressed && k->state == AG_WAIT)
		push_agent(s, r, 0);
}

/* Whether the data of the group starting at op i is ready (its sends' tensors produced,
 * its all-reduce's last weight gradient done); the group's end in *end, the ready time
 * in *t, the entry of its send in *only when it has one (else NULL).  One pass: groups
 * are short but this runs once per group. */
static int group_ready(S *s, int r, int64_t i, int64_t *end, int64_t *t, int64_t *bind,
                       HEnt **only)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	const PlanOp *ops = pr->ops;
	int32_t g = ops[i].group; // op i is a comm op: the group is the run of its number
	int64_t x = i, n = pr->nops, tt = *t, bb = *bind; // locals: the outputs may alias
	int nsend = 0;
	HEnt *one = NULL;
	for (; x < n && plan_op_is_comm(plan_op_kind(&ops[x])) && ops[x].group == g; x++) {
		const PlanOp *o = &ops[x];
		HEnt *e = NULL;
		if (o->kind == OP_SEND) {
			if (!(e = hfind(&k->h, send_key(s, o))))
				return 0;
			one = nsend++ ? NULL : e;
		} else if (o->kind == OP_TPREDUCE) {
			if (!(e = hfind(&k->h, tp_key(KEY_DATA, o->stage, o->dir, o->part, o->mb))))
				return 0;
		} else if (o->kind == OP_ALLREDUCE || o->kind == OP_TIEREDUCE) {
			int ls = local_stage(s, r, o->stage);
			if (ls < 0)
				continue;
			if (k->wdone[ls] < s->p->microbatches)
				return 0;
			if (k->wlast[ls] > tt) {
				tt = k->wlast[ls];
				bb = k->wlast_who[ls];
			}
		}
		if (e && e->time > tt) {
			tt = e->time;
			bb = e->who;
		}
	}
	*end = x;
	*t = tt;
	*bind = bb;
	*only = one;
	return 1;
}

/* A TPREDUCE of rank r completed at r's gmax: its result for the compute ops that wait
 * for it (the next part; after the last, the backward's first part and the first parts
 * of the local stages it hands its output to), and after the last part the stage's
 * output for its sends.  1 when something was published, -1 out of memory. */
static int tp_done(S *s, int r, const PlanOp *o)
{
	Rk *k = &s->rk[r];
	const StageInfo *st = &s->st[o->stage];
	int last = o->part + 1 >= st->parts.n[o->dir & 1];
	int64_t refs = !last ? 1 : o->dir == DIR_ACT ? 1 + st->nlout : st->nlin;
	int64_t outs = !last ? 0 : o->dir == DIR_ACT ? st->nrout : st->nrin;
	if (refs && hput(s, &k->h, tp_key(KEY_AR, o->stage, o->dir, o->part, o->mb), k->gmax,
	                 k->gmax_who, refs))
		return -1;
	if (outs && hput(s, &k->h, hkey(KEY_DATA, o->dir, o->stage, o->mb), k->gmax, k->gmax_who,
	                 outs))
		return -1;
	return refs > 0;
}

/* The comm stream's group [i, gend) completed at gmax: publish its receives. */
static int group_done(S *s, int r, int64_t i)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int any = 0;
	for (int64_t x = i; x < k->gend; x++) {
		const PlanOp *o = &pr->ops[x];
		uint64_t key;
		if (o->kind == OP_RECV)
			key = hkey(KEY_RECV, o->dir, o->stage, o->mb);
		else if (o->kind == OP_ALLREDUCE || o->kind == OP_TIEREDUCE)
			key = hkey(KEY_AR, o->kind == OP_TIEREDUCE, o->stage, 0);
		else if (o->kind == OP_TPREDUCE) {
			int rc = tp_done(s, r, o);
			if (rc < 0)
				return -1;
			any |= rc;
			continue;
		} else
			continue;
		if (hput(s, &k->h, key, k->gmax, k->gmax_who, 1))
			return -1;
		any = 1;
	}
	k->done += k->gend - i;
	k->t = k->gmax;
	if (k->gmax_who != REF_NONE)
		k->bind = k->gmax_who;
	if (any && k->cstate == AG_WAIT)
		push_agent(s, r, 1);
	return 0;
}

static void run_comm(S *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t n = pr->nops;
	if (k->state == AG_MATCH) {
		if (group_done(s, r, k->pc))
			return;
		k->pc = k->gend;
	}
	k->state = AG_READY;
	int64_t i = k->pc;
	while (i < n) {
		if (!plan_op_is_comm(pr->ops[i].kind)) {
			i++;
			continue;
		}
		int64_t end, t = k->t, bind = k->bind;
		HEnt *only;
		if (!group_ready(s, r, i, &end, &t, &bind, &only)) {
			k->pc = i;
			k->state = AG_WAIT;
			prefetch_ops(pr, i);
			return;
		}
		int64_t saved = k->bind;
		k->bind = bind;
		post_group(s, r, i, end, t, 1, only);
		k->bind = saved;
		if (s->failed)
			return;
		k->pc = i;
		if (k->pending) {
			k->state = AG_MATCH;
			prefetch_ops(pr, k->gend);
			return;
		}
		if (group_done(s, r, i))
			return;
		i = k->gend;
	}
	k->pc = n;
	k->state = AG_DONE;
}

/* ---- entry points ---- */

int sim_run(const Plan *p, const SimOptions *opt, SimResult *res)
{
	memset(res, 0, sizeof *res);
	S s = {.p = p, .res = res, .world = p->world};
	if (opt)
		s.opt = *opt;
	if (s.opt.model < 0 || s.opt.model >= SIM_MODEL_COUNT)
		s.opt.model = SIM_STRICT;
	res->model = s.opt.model;
	res->eager = s.opt.eager;
	res->world = p->world;
	if (sim_setup(&s)) {
		sim_cleanup(&s);
		return -1;
	}
	int overlap = s.opt.model == SIM_OVERLAP;
	for (int r = p->world - 1; r >= 0; r--) {
		if (overlap)
			push_agent(&s, r, 1);
		push_agent(&s, r, 0);
	}
	while (s.nwork && !s.failed) {
		int a = s.work[--s.nwork];
		int r = a / 2;
		s.rk[r].queued[a & 1] = 0;
		if (!overlap)
			run_strict(&s, r);
		else if (a & 1)
			run_compute(&s, r);
		else
			run_comm(&s, r);
	}
	if (s.oom) {
		sim_cleanup(&s);
		return -1;
	}
	int stuck = 0;
	for (int r = 0; r < p->world && !stuck; r++)
		stuck = s.rk[r].state != AG_DONE || (overlap && s.rk[r].cstate != AG_DONE);
	if (s.opt.record_ops && (s.failed || stuck)) // a finished run recorded every op
		sim_fill_unreached(&s);
	sim_figures(&s);
	if (!s.failed) {
		if (stuck) {
			res->verdict = SIM_DEADLOCK;
			sim_analyse_stall(&s);
		} else {
			sim_leftover_sends(&s);
		}
	}
	if (s.opt.record_ops && !s.oom)
		sim_critical_path(&s);
	int oom = s.oom;
	sim_cleanup(&s);
	if (oom) {
		if (!res->message[0])
			plan_oom_text(res->message, sizeof res->message, plan_total_ops(p), 0);
		return -1;
	}
	return res->verdict == SIM_OK ? 0 : 1;
}

void sim_result_free(SimResult *res)
{
	if (!res)
		return;
	if (res->ranks)
		for (int r = 0; r < res->world; r++)
			free(res->ranks[r].times);
	free(res->ranks);
	free(res->links);
	free(res->collectives);
	free(res->tp);
	free(res->path);
	free(res->stuck);
	free(res->cycle);
	memset(res, 0, sizeof *res);
}
