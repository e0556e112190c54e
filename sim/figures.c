/* After a run: the figures (finish, busy and idle time per rank, bubble, links,
 * collectives) and the critical path, walked back through each op's binding
 * predecessor from the op that finished last. */
#include "sim_int.h"
#include "../plan/line.h"
#include "../plan/tp.h"

#include <stdlib.h>

static int cmp_link(const void *a, const void *b)
{
	const SimLink *x = a, *y = b;
	if (x->src != y->src)
		return x->src < y->src ? -1 : 1;
	return (x->dst > y->dst) - (x->dst < y->dst);
}

void sim_figures(Sim *s)
{
	const Plan *p = s->p;
	SimResult *res = s->res;
	int64_t mk = 0;
	for (int r = 0; r < s->world; r++) {
		SimRank *k = &s->rk[r];
		int64_t fin = s->opt.model == SIM_OVERLAP ? max64(k->t, k->ct) : k->t;
		if (k->state == AG_MATCH)
			fin = max64(fin, k->gmax);
		SimRankResult *rr = &res->ranks[r];
		rr->finish = fin;
		rr->busy = k->busy;
		rr->ops_done = k->done;
		rr->peak_act_bytes = k->peak_mem;
		rr->peak_act_units = k->peak_units;
		mk = max64(mk, fin);
		res->busy = sat_add(res->busy, k->busy);
		res->ops_done += k->done;
	}
	res->makespan = mk;
	for (int r = 0; r < s->world; r++)
		res->ranks[r].idle = mk - res->ranks[r].busy;
	res->bubble = mk > 0 ? 1.0 - (double)res->busy / ((double)s->world * (double)mk) : 0;
	res->ops = plan_total_ops(p);

	int nl = 0;
	for (int i = 0; i < s->nch; i++)
		nl += s->ch[i].transfers > 0;
	/* Out of memory for these tables fails the run (sim_xcalloc): a report without its
	 * links would look like a plan without transfers. */
	res->links = sim_xcalloc(s, (size_t)nl, sizeof *res->links);
	if (res->links) {
		for (int i = 0; i < s->nch; i++)
			if (s->ch[i].transfers > 0)
				res->links[res->nlinks++] = (SimLink){s->ch[i].src, s->ch[i].dst,
				                                       s->ch[i].bytes, s->ch[i].transfers};
		qsort(res->links, (size_t)res->nlinks, sizeof *res->links, cmp_link);
	}
	/* dp groups first in coll, then the tp groups (their own list), then the tied
	 * table's pairs (with the dp groups: a gradient's all-reduce too) */
	int ndp = s->ndpcoll, ntp = s->ntpcoll;
	res->collectives = sim_xcalloc(s, (size_t)(s->ncoll - ntp), sizeof *res->collectives);
	res->tp = sim_xcalloc(s, (size_t)ntp, sizeof *res->tp);
	for (int i = 0; i < s->ncoll; i++) {
		const Coll *c = &s->coll[i];
		int tp = i >= ndp && i < ndp + ntp;
		SimCollective x = {plan_world_rank(s->p, c->members[0]), c->world_n, c->total, c->count,
		                   i >= ndp + ntp ? plan_world_rank(s->p, c->members[1]) : -1};
		if (c->count > 0 && !tp && res->collectives)
			res->collectives[res->ncollectives++] = x;
		else if (c->count > 0 && tp && res->tp)
			res->tp[res->ntp++] = x;
	}
}

/* The critical path's predecessor of op i of rank r, in 32 bits (the upper half of the
 * op's 16-byte SimOpRec, beside its two 48-bit times): -1 none; else a 2-bit tag and 29
 * bits.  Tag 0: op v of the same rank; 1: op v of the op's peer (p2p, or the other copy
 * of a tied table); 2: the matching all-reduce of dp member v (found again by counting
 * when the path is walked, which is rare); 3: the matching TPREDUCE of tp member v
 * (found again by identity).  Refs that fit none of these (op indices of 2^29 and more)
 * end the path there. */
int32_t sim_pred_code(const Sim *s, int r, int64_t i, int64_t ref)
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
	switch (plan_ops[o->kind].over) {
	case OP_OVER_PEER:
	case OP_OVER_TIE:
		return o->peer == q ? (int32_t)((1 << PRED_BITS) | v) : -1;
	case OP_OVER_DP:
		return (int32_t)((2 << PRED_BITS) | q);
	case OP_OVER_TP: // a part's TPREDUCE meets by identity, a stage's SPREDUCE by count
		return (int32_t)(((plan_ops[o->kind].part_end ? 3 : 2) << PRED_BITS) | q);
	}
	return -1;
}

/* Whether op x is a collective met by count on o's communicator (a dp one, or a
 * stage's SPREDUCE over tp; not a part's TPREDUCE): members meet the k-th of these. */
static int by_count(const PlanOp *x, const PlanOp *o)
{
	const OpInfo *in = &plan_ops[x->kind];
	return in->over == plan_ops[o->kind].over && plan_op_is_coll(x->kind) && !in->part_end;
}

int64_t sim_pred_ref(const Sim *s, int r, int64_t i)
{
	int32_t c = pred_flip(op_code(s, r, i));
	if (c < 0)
		return REF_NONE;
	int64_t v = c & ((1 << PRED_BITS) - 1);
	const PlanOp *o = &s->p->ranks[r].ops[i];
	switch (c >> PRED_BITS) {
	case 0:
		return REF(r, v);
	case 1:
		return REF(o->peer, v);
	case 2: { // the member's collective met by count with the same count as ours
		int64_t k = 0;
		for (int64_t j = 0; j < i; j++)
			k += by_count(&s->p->ranks[r].ops[j], o);
		const PlanRank *pm = &s->p->ranks[v];
		for (int64_t j = 0; j < pm->nops; j++)
			if (by_count(&pm->ops[j], o) && k-- == 0)
				return REF(v, j);
		return REF_NONE;
	}
	case 3: { // the member's TPREDUCE of the same stage, microbatch, direction and part
		const PlanRank *pm = &s->p->ranks[v];
		for (int64_t j = 0; j < pm->nops; j++)
			if (tp_same(&pm->ops[j], o))
				return REF(v, j);
		return REF_NONE;
	}
	}
	return REF_NONE;
}

/* SIM_RECORD_PATH: the times of the first SIM_PATH_TIMED stretches of path[n] from the
 * windows (the last op's end is s->last_end), the rest -1; s->path_missing when one is
 * not in a window. */
static void path_times(Sim *s, SimPathStep *path, int64_t n)
{
	for (int64_t k = 0; k < n; k++) {
		SimPathStep *st = &path[k];
		st->start = st->end = -1;
		if (k >= SIM_PATH_TIMED)
			continue;
		SimRank *rk = &s->rk[st->rank];
		SimOpTime *a = path_slot(s, rk, st->first_op), *b = path_slot(s, rk, st->last_op);
		int last = REF(st->rank, st->last_op) == s->last_ref;
		if (!a || (!b && !last)) {
			s->path_missing = 1;
			return;
		}
		st->start = a->start;
		st->end = last ? s->last_end : b->end;
	}
}

/* Walks the binding predecessors back from the op that finished last. */
void sim_critical_path(Sim *s)
{
	int path_only = s->opt.record_ops == SIM_RECORD_PATH;
	SimResult *res = s->res;
	int64_t best = s->last_end > -1 ? s->last_ref : REF_NONE;
	int64_t cap = 0, n = 0;
	SimPathStep *path = NULL;
	int64_t guard = res->ops + 1;
	for (int64_t x = best; x != REF_NONE && guard-- > 0;) {
		int r = REF_RANK(x);
		int64_t i = REF_OP(x);
		SimOpTime t = path_only ? (SimOpTime){-1, -1} : sim_op_time(res, r, i);
		const PlanOp *o = &s->p->ranks[r].ops[i];
		int64_t c = plan_ops[o->kind].role == OP_ROLE_STEP ? s->st[o->stage].cost[o->kind]
		            : !plan_op_is_compute(o->kind) ? 0
		            : s->tp > 1 ? plan_part_cost(&s->st[o->stage].parts, o, s->p->stages[o->stage].cost)
		                        : s->st[o->stage].cost[o->kind];
		if (n && path[n - 1].rank == r) {
			SimPathStep *st = &path[n - 1];
			st->first_op = i;
			st->start = t.start;
			st->compute = sat_add(st->compute, c);
		} else {
			if (sim_grow(s, (void **)&path, &cap, n + 1, sizeof *path)) {
				free(path);
				return;
			}
			path[n++] = (SimPathStep){r, i, i, t.start, t.end, c};
		}
		x = sim_pred_ref(s, r, i);
	}
	for (int64_t a = 0, b = n - 1; a < b; a++, b--) {
		SimPathStep tmp = path[a];
		path[a] = path[b];
		path[b] = tmp;
	}
	if (path_only)
		path_times(s, path, n);
	/* A stretch entered through a comm op began when the previous one handed over,
	 * not when the op was posted. */
	for (int64_t i = 1; i < (path_only && n > SIM_PATH_TIMED ? SIM_PATH_TIMED : n); i++)
		if (path[i].start < path[i - 1].end)
			path[i].start = path[i - 1].end;
	res->path = path;
	res->npath = n;
}

/* The ops a run never reached (a deadlock's or mismatch's, or past a failure) kept the
 * zeroes they were allocated with: give them start and end -1 and no predecessor. */
void sim_fill_unreached(Sim *s)
{
	for (int r = 0; r < s->world; r++) {
		SimOpRec *x = s->rk[r].rec;
		for (int64_t i = 0, n = s->p->ranks[r].nops; i < n; i++)
			if (rec_pred(&x[i]) == PRED_UNSET) {
				x[i] = (SimOpRec){0, 0}; // times -1
				rec_set_pred(&x[i], -1);
			}
	}
}

static int wide_order(const void *a, const void *b)
{
	const WideTime *x = a, *y = b;
	if (x->w.rank != y->w.rank)
		return x->w.rank < y->w.rank ? -1 : 1;
	if (x->w.op != y->w.op)
		return x->w.op < y->w.op ? -1 : 1;
	if (x->w.field != y->w.field)
		return x->w.field < y->w.field ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The times set as SIM_T48_WIDE into the result, the last set of each kept (an op's end
 * may be set again): sorted for sim_wide_time.  -1 out of memory. */
int sim_wide_finish(Sim *s)
{
	if (!s->nwide)
		return 0;
	qsort(s->wide, (size_t)s->nwide, sizeof *s->wide, wide_order);
	SimWide *w = sim_xcalloc(s, (size_t)s->nwide, sizeof *w);
	if (!w)
		return -1;
	int64_t n = 0;
	for (int64_t i = 0; i < s->nwide; i++) {
		const SimWide *x = &s->wide[i].w;
		if (n && w[n - 1].rank == x->rank && w[n - 1].op == x->op && w[n - 1].field == x->field)
			n--;
		w[n++] = *x;
	}
	s->res->wide = w;
	s->res->nwide = n;
	return 0;
}

int64_t sim_wide_time(const SimResult *res, int r, int64_t i, int field)
{
	int64_t lo = 0, hi = res->nwide;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		const SimWide *x = &res->wide[mid];
		if (x->rank < r || (x->rank == r && (x->op < i || (x->op == i && x->field < field))))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < res->nwide && res->wide[lo].rank == r && res->wide[lo].op == i &&
	    res->wide[lo].field == field)
		return res->wide[lo].value;
	return -1; // not set as wide: no run records one so
}
