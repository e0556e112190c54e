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
 * counter for collectives.  The overlap model (overlap.c) also keeps, per rank, the
 * values in flight between its streams (values.c: receives completed, data produced).
 * Times saturate instead of overflowing, so any plan the reader accepts runs safely. */
#include "../plan/par.h"
#include "p2p.h"
#include "../plan/prefetch.h"
#include "../plan/oom.h"
#include "../plan/tp.h"
#include "../plan/link.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const sim_model_names[SIM_MODEL_COUNT] = {"strict", "overlap"};
const char *const sim_verdict_names[SIM_VERDICT_COUNT] = {"ok", "deadlock", "mismatch"};

/* ---- small helpers ---- */

void *sim_xcalloc(Sim *s, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p && !s->oom) {
		s->oom = s->failed = 1;
		plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), n * size);
	}
	return p;
}

int sim_grow(Sim *s, void **arr, int64_t *cap, int64_t need, size_t size)
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

/* ---- verdicts found on the way ---- */

void sim_mismatch(Sim *s, int ra, int64_t a, int rb, int64_t b, const char *why)
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

/* ---- groups ---- */

/* The time of c's collective (plan/link.h): over the world group of its first member
 * (a line plan's groups hold line 0's member alone), or over a tied pair; cached. */
static int64_t coll_ns(const Plan *p, Coll *c)
{
	if (c->time.kind == c->kind && c->time.bytes == c->bytes)
		return c->time.ns;
	OpKind k = (OpKind)c->kind;
	int over = plan_ops[k].over;
	int64_t ns = over == OP_OVER_TIE
	                 ? plan_pair_coll_ns(p, k, c->members[0], c->members[c->n - 1], c->bytes)
	                 : plan_dim_coll_ns(p, k, over == OP_OVER_TP ? DIM_TP : DIM_DP,
	                                    c->members[0], c->bytes);
	c->time.kind = c->kind;
	c->time.bytes = c->bytes;
	c->time.ns = ns;
	return ns;
}

/* Member r's op i (o) arrives at collective c at time t; the first sets what the others
 * must match.  Once all have, every member's posted op (ar_op, or tp_op for a tp group)
 * completes when the last arrival and the ring time allow. */
static void coll_arrive(Sim *s, Coll *c, int r, int64_t i, const PlanOp *o, int64_t t, int tp)
{
	if (c->arrived == 0) {
		*c = (Coll){.n = c->n, .world_n = c->world_n, .members = c->members, .count = c->count,
		            .total = c->total,
		            .stage = o->stage, .mb = o->mb, .part = o->part, .dir = o->dir,
		            .kind = o->kind,
		            .bytes = plan_op_bytes(s->p, o), .maxpost = t, .last_who = REF(r, i), .first_rank = r,
		            .first_op = i, .time = c->time};
	} else if (t >= c->maxpost) {
		c->maxpost = t;
		c->last_who = REF(r, i);
	}
	if (++c->arrived < c->n)
		return;
	int64_t end = sat_add(c->maxpost, coll_ns(s->p, c));
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

/* A collective met by count: an ALLREDUCE, REDUCESCATTER or ALLGATHER over the rank's dp
 * group, or a stage's SPREDUCE over its tp group (every member's k-th one of the same
 * kind and stage), or a TIEREDUCE over the pair
 * holding the two copies of a tied table (their stages differ: the embedding's and the
 * head's).  It completes when every member has posted, after the link model's time.
 * Not inlined, as post_tpreduce: rare, kept out of sim_post_group's loop over p2p ops. */
__attribute__((noinline)) static void post_allreduce(Sim *s, int r, int64_t i, const PlanOp *o,
                                                     int64_t t)
{
	int over = plan_ops[o->kind].over, tie = over == OP_OVER_TIE, g = s->collof[over][r];
	if (tie && g < 0) { // the verifier refuses this; stay safe on any plan
		sim_mismatch(s, r, i, o->peer, -1, "a TIEREDUCE on a rank that holds no tied table");
		return;
	}
	Coll *c = &s->coll[g];
	if (c->arrived && ((o->stage != c->stage && !tie) || o->kind != c->kind ||
	                   plan_op_bytes(s->p, o) != c->bytes)) {
		char why[100];
		snprintf(why, sizeof why, "members of a %s group %s", over == OP_OVER_TP ? "tp" : "dp",
		         o->kind != c->kind     ? "run different collectives at the same point"
		         : o->stage != c->stage ? "all-reduce different stages at the same point"
		                                : "all-reduce different sizes");
		sim_mismatch(s, c->first_rank, c->first_op, r, i,
		             tie ? "the two copies of a tied table are reduced with different sizes" : why);
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
__attribute__((noinline)) static void post_tpreduce(Sim *s, int r, int64_t i, const PlanOp *o,
                                                    int64_t t)
{
	Coll *c = &s->coll[s->collof[OP_OVER_TP][r]];
	s->rk[r].tp_op = i;
	s->rk[r].pending++;
	if (c->arrived &&
	    (o->stage != c->stage || o->mb != c->mb || o->dir != c->dir || o->part != c->part))
		return; // never completes: a deadlock
	if (c->arrived && plan_op_bytes(s->p, o) != c->bytes) {
		sim_mismatch(s, c->first_rank, c->first_op, r, i,
		             "members of a tp group all-reduce different sizes");
		return;
	}
	coll_arrive(s, c, r, i, o, t, 1);
}

/* Posts the group [i, end) at time t (end -1: find it).
 * take: the comm stream consumes the tensors its sends transmit (overlap model); only:
 * when the group has one send, its tensor's entry (group_ready found it, and no value
 * has changed since), else NULL.  Returns the end. */
int64_t sim_post_group(Sim *s, int r, int64_t i, int64_t end, int64_t t, int take, Value *only)
{
	const PlanRank *pr = &s->p->ranks[r];
	SimRank *k = &s->rk[r];
	const PlanOp *ops = pr->ops;
	k->pending = 0;
	k->gmax = t;
	k->gmax_who = REF_NONE;
	if (end < 0) // plan_group_end: op i is a comm op
		for (end = i + 1; end < pr->nops && plan_op_is_comm(plan_op_kind(&ops[end])) &&
		                  ops[end].group == ops[i].group;)
			end++;
	k->gend = end;
	for (int64_t x = i; x < end && !s->failed; x++) {
		const PlanOp *o = &ops[x];
		if (s->coll_kinds >> o->kind & 1) {
			record(s, r, x, t, -1, k->bind);
			Value *e;
			if (take && (plan_ops[o->kind].needs & PLAN_DEP_STEP) &&
			    (e = sim_val_find(s, r, step_key(o->stage))))
				val_use(s, r, e); // an ALLGATHER takes its OPTIM's step
			if (plan_ops[o->kind].part_end)
				post_tpreduce(s, r, x, o, t);
			else
				post_allreduce(s, r, x, o, t);
			continue;
		}
		int send = s->send_kinds >> o->kind & 1;
		if (take && send) {
			Value *e = only ? only : send_data(s, r, o);
			if (e)
				val_use(s, r, e);
		}
		post_p2p(s, r, x, o, t, !send);
	}
	return end;
}

/* ---- the strict model ---- */

static void run_strict(Sim *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	SimRank *k = &s->rk[r];
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
		plan_prefetch(ops, i, n);
		if (!plan_op_is_comm(o->kind)) {
			t = do_compute(s, r, i, o, t, k->bind);
			k->bind = REF(r, i);
			i++;
			continue;
		}
		int64_t end = sim_post_group(s, r, i, -1, t, 0, NULL);
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

/* ---- entry points ---- */

int sim_run(const Plan *p, const SimOptions *opt, SimResult *res)
{
	memset(res, 0, sizeof *res);
	Sim s = {.p = p, .res = res, .world = p->world};
	if (opt)
		s.opt = *opt;
	if (s.opt.model < 0 || s.opt.model >= SIM_MODEL_COUNT)
		s.opt.model = SIM_STRICT;
	res->model = s.opt.model;
	res->eager = s.opt.eager;
	res->world = p->world;
	res->threads = 1;
	if (sim_setup(&s)) {
		sim_cleanup(&s);
		return -1;
	}
	int overlap = s.opt.model == SIM_OVERLAP;
	int threads = overlap ? 0 : sim_run_threads(&s);
	if (threads == -1) { // one thread decides, from the start
		sim_cleanup(&s);
		sim_result_free(res);
		SimOptions o = s.opt;
		o.threads = 0;
		return sim_run(p, &o, res);
	}
	for (int r = p->world - 1; r >= 0 && threads != 1; r--) {
		if (overlap)
			push_agent(&s, r, 1);
		push_agent(&s, r, 0);
	}
	if (overlap)
		sim_run_overlap(&s);
	while (s.nwork && !s.failed && !sim_stopped(&s)) {
		unsigned a = (unsigned)s.work[--s.nwork];
		int r = (int)(a >> 1);
		s.rk[r].queued[a & 1] = 0;
		int64_t pc0 = s.rk[r].pc;
		run_strict(&s, r);
		sim_count(&s, r, pc0);
	}
	if (s.oom || sim_stopped(&s)) {
		if (!s.oom)
			snprintf(res->message, sizeof res->message, "stopped");
		sim_cleanup(&s);
		return -1;
	}
	int stuck = 0;
	for (int r = 0; r < p->world && !stuck; r++)
		stuck = s.rk[r].state != AG_DONE || (overlap && s.rk[r].cstate != AG_DONE);
	int all = s.opt.record_ops == SIM_RECORD_ALL;
	if (all && (s.failed || stuck)) // a finished run recorded every op
		sim_fill_unreached(&s);
	if (all)
		sim_wide_finish(&s); // out of memory: s.oom, below
	sim_figures(&s);
	if (!s.failed) {
		if (stuck) {
			res->verdict = SIM_DEADLOCK;
			sim_analyse_stall(&s);
		} else {
			sim_leftover_sends(&s);
		}
	}
	if (s.opt.record_ops && !s.oom && (all || res->verdict == SIM_OK))
		sim_critical_path(&s);
	int oom = s.oom;
	sim_cleanup(&s);
	if (oom) {
		if (!res->message[0])
			plan_oom_text(res->message, sizeof res->message, plan_total_ops(p), 0);
		return -1;
	}
	if (s.path_missing) { // SIM_RECORD_PATH: the path's times are not all in the windows
		SimOptions o = s.opt;
		o.record_ops = SIM_RECORD_ALL;
		sim_result_free(res);
		return sim_run(p, &o, res);
	}
	return res->verdict == SIM_OK ? 0 : 1;
}

void sim_result_free(SimResult *res)
{
	if (!res)
		return;
	par_free(&res->recblock, 1);
	free(res->ranks);
	free(res->wide);
	free(res->links);
	free(res->collectives);
	free(res->tp);
	free(res->path);
	free(res->stuck);
	free(res->cycle);
	memset(res, 0, sizeof *res);
}
