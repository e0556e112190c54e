/* The verifier's walk over every op: the checks of plan_verify that look at each op
 * (PLAN_VC_GROUPS, _SELF, _MATCH and _DEPS, verify.h), fused into one pass over each
 * rank's list, for on a large plan the ops are nearly all the verifier's work.
 *
 * Groups: along a rank's list comm group numbers increase, and a collective is alone in
 * its group.  Sends to self: the k-th SEND to self of a rank pairs with its k-th RECV
 * from self, in the same group (a rank waits for a group before it posts the next, and
 * a send completes only once its receive is posted, so a send to self whose receive is
 * in another group never completes).  Matching: the k-th RECV on rank b from rank a
 * meets the k-th SEND on a to b (FIFO per ordered pair) with the same edge (so the same
 * size: a SEND's or RECV's is its edge's), microbatch and direction, and no SEND is left
 * over.  Dependencies:
 * plan_dep_apply's rules, the parts of tp > 1 stages, and the data along edges.
 *
 * Matching keeps no index of all sends: while rank b's list is walked, a cursor per
 * sender a scans a's list for its next SEND to b, so each list is read once more per
 * rank it sends to.  A rank with more than DIRECT_RECEIVERS receivers would make that
 * quadratic; from the next receiver on, its sends are indexed by receiver, once.
 * Dependencies remember, per edge, direction and kind, the peer and route of the
 * last SEND or RECV found well formed: the next one like it needs only its data
 * checked. */
#include "par.h"
#include "verify.h"
#include "prefetch.h"
#include "tie.h"
#include "tp.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A sender's first receivers scan its list; the rest use its SendIndex. */
#define DIRECT_RECEIVERS 4

/* The last SEND or RECV of one (edge, direction, kind) on the rank found well formed,
 * and the row its data is checked in. */
typedef struct {
	int32_t peer, route;
	uint8_t *row; // [mb]: the producing local stage's bits (SEND) or the edge's
	              // received bits (RECV); NULL: none seen yet
} P2pSeen;

/* The per-rank dependency state: which stages and edges are local, and what has run of
 * each local (stage, microbatch) in PLAN_DEP_MB bits. */
typedef struct {
	int r, pp, m, dp;
	int *loc;           // stage -> local index or -1
	int *eloc;          // edge -> local edge index or -1
	uint8_t *st;        // [local stage][mb]: PLAN_DEP_MB bits
	PlanPartState *ps;  // [local stage][mb]: how far its parts ran (tp > 1)
	uint8_t *rcv;       // [local edge][mb]: PLAN_DEP_ACT, PLAN_DEP_GRAD: received so
	uint8_t **act;      // [edge]: the row whose PLAN_DEP_ACT bit says the activation along
	                    // the edge is here: its source's st (handed over) or its rcv
	uint8_t **grad;     // [edge]: the same for the gradient (PLAN_DEP_GRAD); NULL: the
	                    // edge has no end on this rank
	P2pSeen *seen;      // [edge][dir][SEND?]
	PlanStageDeps *sd;  // [local stage]
	int embed, head;    // plan_tie's stages, or -1
} Deps;

/* Receiver b's matching with one of its senders, a. */
typedef struct {
	int from;          // a
	uint8_t indexed;   // a's sends to b are at[0 .. nat) (a's SendIndex)
	int64_t pos;       // not indexed: a's next op to look at
	const int64_t *at;
	int64_t nat;
	int64_t used;      // RECVs on b from a met so far: the FIFO position of the next
} Cursor;

/* The SENDs of a rank with many receivers, grouped by receiver. */
typedef struct {
	uint8_t built;
	int nto;
	int *to;      // receivers, ascending
	int64_t *off; // to[j]'s sends are at[off[j] .. off[j + 1]), in list order
	int64_t *at;
} SendIndex;

/* An op kind's role in the walk: in no comm group, one side of a p2p pair, or a
 * collective, alone in its group (CLS_TIE: a TIEREDUCE, which the walk counts). */
enum { CLS_OTHER, CLS_SEND, CLS_RECV, CLS_COLL, CLS_TIE };

typedef struct {
	Deps d;
	Cursor *cur;       // the receiver's senders, in order of their first RECV
	int ncur, capcur;
	int *slot;         // [world] sender -> its cursor in cur, or -1
	int *nrecv;        // [world] receivers that opened a cursor on the rank so far
	int64_t *nsend;    // [world] SENDs on the rank
	int64_t *nmet;     // [world] ... of them met by a RECV
	SendIndex *ix;     // [world], shared by the workers of a threaded walk
	pthread_mutex_t *ix_lock; // held while one is opened, in a threaded walk; else NULL
	int64_t *cnt;      // [world] zero between uses (index_sends)
	uint8_t cls[256];  // op kind -> CLS_*
} Walk;

/* ---- dependencies ---- */

/* The state of the embedding stage a tied head's op of stage s writes into, or NULL. */
static PlanStageDeps *tied_of(Deps *d, int s)
{
	return s == d->head && s >= 0 ? &d->sd[d->loc[d->embed]] : NULL;
}

static uint8_t mb_state(const Deps *d, int stage, int mb)
{
	return d->st[(size_t)d->loc[stage] * d->m + mb];
}

/* What compute op o needs along its edges (the rows' PLAN_DEP_IN_ACT and _OUT_GRAD):
 * NULL when it is there, else why not, in x. */
static const char *edge_inputs(const PlanVc *v, const Deps *d, const PlanOp *o, char *x,
                               size_t n)
{
	const Plan *p = v->p;
	uint16_t needs = plan_ops[o->kind].needs;
	int s = o->stage;
	for (int j = v->in_off[s]; (needs & PLAN_DEP_IN_ACT) && j < v->in_off[s + 1]; j++) {
		int e = v->in_edges[j];
		if (!(d->act[e][o->mb] & PLAN_DEP_ACT)) {
			snprintf(x, n, "runs before its input on edge %d exists (%s)", e,
			         d->loc[p->edges[e].src] >= 0 && !v->eself[e]
			                 ? "F of the local source stage comes later"
			                 : "no RECV act before it");
			return x;
		}
	}
	for (int j = v->out_off[s]; (needs & PLAN_DEP_OUT_GRAD) && j < v->out_off[s + 1]; j++) {
		int e = v->out_edges[j];
		if (!(d->grad[e][o->mb] & PLAN_DEP_GRAD)) {
			snprintf(x, n, "runs before its output gradient on edge %d exists (%s)", e,
			         d->loc[p->edges[e].dst] >= 0 && !v->eself[e]
			                 ? "backward of the local stage comes later"
			                 : "no RECV grad before it");
			return x;
		}
	}
	return NULL;
}

/* A SEND's or RECV's form: its ends, peer and route; NULL when right.  (Its size is its
 * edge's: the readers refuse any other.) */
static const char *p2p_form(const PlanVc *v, const Deps *d, const PlanOp *o)
{
	const Plan *p = v->p;
	int r = d->r, s = o->stage;
	const PlanEdge *ed = &p->edges[s];
	int from = o->dir == DIR_ACT ? ed->src : ed->dst;
	int to = o->dir == DIR_ACT ? ed->dst : ed->src;
	int send = plan_ops[o->kind].sends;
	int mine = send ? from : to, theirs = send ? to : from;
	const PlanRoute *rt = &p->routes[o->route];
	int rsrc = send ? r : o->peer, rdst = send ? o->peer : r;
	if (d->loc[mine] < 0)
		return "the edge's stage at this end is not on this rank";
	if (o->peer != plan_vc_on_line(v, r, p->stages[theirs].pp))
		return "the peer is not the rank holding the other end of the edge";
	if (o->peer == r && !v->eself[s])
		return "a transfer to the same rank, on an edge its peer tables hand over locally";
	if (rt->edge != s || rt->dir != o->dir || rt->src_rank != rsrc || rt->dst_rank != rdst)
		return "its route does not match the edge, direction and ranks";
	return NULL;
}

/* A SEND or RECV: its form (p2p_form, unless the last one of its edge, direction and
 * kind had the same peer and route), a SEND's data produced, a RECV's data not
 * received twice. */
static const char *p2p_rule(const PlanVc *v, Deps *d, const PlanOp *o)
{
	int send = plan_ops[o->kind].sends;
	P2pSeen *seen = &d->seen[((size_t)o->stage * DIR_COUNT + o->dir) * 2 + send];
	if (!seen->row || seen->peer != o->peer || seen->route != o->route) {
		const char *bad = p2p_form(v, d, o);
		if (bad)
			return bad;
		const PlanEdge *ed = &v->p->edges[o->stage];
		int mine = send == (o->dir == DIR_ACT) ? ed->src : ed->dst;
		*seen = (P2pSeen){o->peer, o->route,
		                  send ? &d->st[(size_t)d->loc[mine] * d->m]
		                       : &d->rcv[(size_t)d->eloc[o->stage] * d->m]};
	}
	uint8_t bit = o->dir == DIR_ACT ? PLAN_DEP_ACT : PLAN_DEP_GRAD;
	uint8_t *at = &seen->row[o->mb];
	if (send)
		return *at & bit ? NULL : "sent before the compute that produces it";
	if (*at & bit)
		return "received twice";
	*at |= bit;
	return NULL;
}

/* A part of a tp > 1 stage (F, B, BW) or a TPREDUCE: the part rule, the first part's
 * inputs along edges, a TPREDUCE's size, and the dependency rules once a whole
 * forward or backward is done. */
static const char *part_rule(const PlanVc *v, Deps *d, const PlanOp *o, char *x, size_t n)
{
	const PlanParts *pp = &v->parts[o->stage];
	size_t at = (size_t)d->loc[o->stage] * d->m + o->mb;
	PlanPartState *ps = &d->ps[at];
	int red = plan_ops[o->kind].part_end; // a TPREDUCE, else a part
	int dir = plan_op_dir(o);
	int first = !red && ps->step[dir] == 0;
	if (red && o->part < pp->n[dir] &&
	    plan_op_bytes(v->p, o) != pp->part[dir][o->part].reduce && pp->part[dir][o->part].reduce) {
		snprintf(x, n, "its size differs from the part's all-reduce (%lld bytes)",
		         (long long)pp->part[dir][o->part].reduce);
		return x;
	}
	OpKind done;
	const char *bad = plan_part_apply(pp, o, d->st[at], ps, &done);
	if (!bad && first)
		bad = edge_inputs(v, d, o, x, n);
	if (!bad && done != OP_COUNT)
		bad = plan_dep_apply(done, &d->st[at], &d->sd[d->loc[o->stage]],
		                     tied_of(d, o->stage), d->m, d->dp);
	return bad;
}

/* Op i of rank d->r against the dependency rules; 0 or -1 (reported). */
static int dep_op(PlanVc *v, Deps *d, int64_t i)
{
	const Plan *p = v->p;
	const PlanOp *o = &p->ranks[d->r].ops[i];
	if (o->kind >= OP_COUNT) // the reader takes known kinds only
		return 0;
	OpKind k = plan_op_kind(o);
	const OpInfo *in = &plan_ops[k];
	int s = o->stage;
	char x[300], y[300];
	const char *bad = NULL;
	if (plan_op_is_p2p(k))
		bad = p2p_rule(v, d, o);
	else if (d->loc[s] < 0 && plan_op_is_compute(k))
		return plan_vc_err(v, PLAN_RULE_OP_PLACED, d->r, i,
				"%s: stage %d is not placed on rank %d (pp index %d)",
		                   plan_vc_opdesc(v, d->r, i, x, sizeof x), s, plan_vc_rank(v, d->r),
		                   d->pp);
	else if (d->loc[s] < 0)
		bad = "the stage is not on this rank";
	else if (in->part_end && !v->parts)
		bad = "a TPREDUCE in a plan with tp=1";
	else if (v->parts && (in->parted || in->part_end)) // a part or its end
		bad = part_rule(v, d, o, x, sizeof x);
	else if (plan_op_is_compute(k)) {
		bad = plan_dep_apply(k, &d->st[(size_t)d->loc[s] * d->m + o->mb], &d->sd[d->loc[s]],
		                     tied_of(d, s), d->m, d->dp);
		if (!bad)
			bad = edge_inputs(v, d, o, x, sizeof x);
	} else if (in->over == OP_OVER_DP && d->dp > 1 && in->shard == p->optim.distributed &&
	           plan_op_bytes(p, o) != plan_dp_bytes(p, k, s))
		bad = in->needs & PLAN_DEP_STEP ? "its size differs from the stage's parameters"
		                                : "its size differs from the stage's gradients";
	else if ((in->makes & PLAN_DEP_SEQ) && d->sd[d->loc[s]].sp &&
	         plan_op_bytes(p, o) != plan_sp_bytes(p, s))
		bad = "its size differs from the stage's sequence-parallel gradients";
	else
		bad = plan_dep_apply(k, NULL, &d->sd[d->loc[s]], NULL, d->m, d->dp);
	return bad ? plan_vc_err(v, plan_rule_of(bad), d->r, i,
			"%s: %s", plan_vc_opdesc(v, d->r, i, y, sizeof y), bad)
	           : 0;
}

/* Compute op o's data along its edges is there (edge_inputs finds nothing). */
static inline int inputs_ok(const PlanVc *v, const Deps *d, const PlanOp *o)
{
	uint16_t needs = plan_ops[o->kind].needs;
	int s = o->stage;
	if (needs & PLAN_DEP_IN_ACT)
		for (int j = v->in_off[s]; j < v->in_off[s + 1]; j++)
			if (!(d->act[v->in_edges[j]][o->mb] & PLAN_DEP_ACT))
				return 0;
	if (needs & PLAN_DEP_OUT_GRAD)
		for (int j = v->out_off[s]; j < v->out_off[s + 1]; j++)
			if (!(d->grad[v->out_edges[j]][o->mb] & PLAN_DEP_GRAD))
				return 0;
	return 1;
}

/* The common case of dep_op, quicker, and changing nothing unless o passes: 1 when o
 * passed (its effect applied), 0 when dep_op must judge it (which then finds what it
 * would have found alone: nothing was changed).  cls: its kind's CLS_*. */
static inline int dep_fast(const PlanVc *v, Deps *d, const PlanOp *o, int cls)
{
	if (cls == CLS_SEND || cls == CLS_RECV) { // p2p_rule, its form seen before
		int send = cls == CLS_SEND;
		P2pSeen *seen = &d->seen[((size_t)o->stage * DIR_COUNT + o->dir) * 2 + send];
		if (!seen->row || seen->peer != o->peer || seen->route != o->route)
			return 0;
		uint8_t bit = o->dir == DIR_ACT ? PLAN_DEP_ACT : PLAN_DEP_GRAD;
		uint8_t *at = &seen->row[o->mb];
		if (send)
			return (*at & bit) != 0;
		if (*at & bit)
			return 0;
		*at |= bit;
		return 1;
	}
	/* F, B, W, BW of a stage in one part: the edges first (they change nothing), then
	 * plan_dep_apply, which changes nothing when it refuses. */
	int s = o->stage;
	if (o->kind >= OP_COUNT || !plan_op_is_compute(plan_op_kind(o)) || v->parts ||
	    d->loc[s] < 0 || !inputs_ok(v, d, o))
		return 0;
	return !plan_dep_apply(plan_op_kind(o), &d->st[(size_t)d->loc[s] * d->m + o->mb],
	                       &d->sd[d->loc[s]], tied_of(d, s), d->m, d->dp);
}

/* After rank d->r's ops: every local stage ran all it must. */
static int dep_complete(PlanVc *v, Deps *d)
{
	int r = d->r;
	for (int s = 0; s < v->p->nstages; s++) {
		if (d->loc[s] < 0)
			continue;
		for (int mb = 0; mb < d->m; mb++) {
			uint8_t f = mb_state(d, s, mb);
			if ((f & PLAN_DEP_MB) != PLAN_DEP_MB)
				return plan_vc_err(v, PLAN_RULE_NEVER_RUNS, r, -1,
						"rank %d never runs %s of stage %d microbatch %d",
				                   plan_vc_rank(v, r), !(f & PLAN_DEP_ACT)    ? "F"
				                      : (f & PLAN_DEP_GRAD) ? "W"
				                                            : "the backward",
				                   s, mb);
		}
		if (d->dp > 1 && !d->sd[d->loc[s]].reduced)
			return plan_vc_err(v, PLAN_RULE_NEVER_REDUCED, r, -1,
					"rank %d never all-reduces the gradients of stage %d",
			                   plan_vc_rank(v, r), s);
		if (!d->sd[d->loc[s]].stepped)
			return plan_vc_err(v, PLAN_RULE_NEVER_OPTIM, r, -1,
					"rank %d never runs OPTIM for stage %d",
			                   plan_vc_rank(v, r), s);
		if (d->dp > 1 && v->p->optim.distributed && !d->sd[d->loc[s]].gathered)
			return plan_vc_err(v, PLAN_RULE_NEVER_GATHERED, r, -1,
					"rank %d never all-gathers the parameters of stage %d",
			                   plan_vc_rank(v, r), s);
	}
	return 0;
}

/* Readies d for rank r's list: its local stages and edges, cleared state, and where
 * the data along each of its edges is found.  0; 1: a fault (reported); -1: out of
 * memory (reported). */
static int deps_begin(PlanVc *v, Deps *d, int r)
{
	const Plan *p = v->p;
	int nloc = 0, neloc = 0;
	d->r = r;
	d->pp = p->ranks[r].coord[DIM_PP];
	for (int s = 0; s < p->nstages; s++)
		d->loc[s] = p->stages[s].pp == d->pp ? nloc++ : -1;
	for (int e = 0; e < p->nedges; e++) {
		const PlanEdge *ed = &p->edges[e];
		d->eloc[e] = (d->loc[ed->src] >= 0 || d->loc[ed->dst] >= 0) ? neloc++ : -1;
	}
	free(d->st);
	free(d->rcv);
	free(d->sd);
	free(d->ps);
	d->ps = calloc(v->parts ? (size_t)nloc * d->m + 1 : 1, sizeof *d->ps);
	d->st = calloc((size_t)nloc * d->m + 1, 1);
	d->rcv = calloc((size_t)neloc * d->m + 1, 1);
	d->sd = calloc((size_t)nloc + 1, sizeof *d->sd);
	if (!d->st || !d->rcv || !d->sd || !d->ps)
		return plan_vc_err(v, -1, -1, -1, "out of memory");
	for (int e = 0; e < p->nedges; e++) {
		const PlanEdge *ed = &p->edges[e];
		uint8_t *rcv = d->eloc[e] < 0 ? NULL : &d->rcv[(size_t)d->eloc[e] * d->m];
		int here = rcv && !v->eself[e];
		d->act[e] = here && d->loc[ed->src] >= 0 ? &d->st[(size_t)d->loc[ed->src] * d->m] : rcv;
		d->grad[e] = here && d->loc[ed->dst] >= 0 ? &d->st[(size_t)d->loc[ed->dst] * d->m] : rcv;
	}
	memset(d->seen, 0, (size_t)p->nedges * DIR_COUNT * 2 * sizeof *d->seen);
	if (d->head >= 0 && d->loc[d->head] >= 0) // plan_tie: the embedding's rank too
		d->sd[d->loc[d->embed]].tied = 1;
	int ts;
	if (plan_tie_peer(p, r, &ts) >= 0)
		d->sd[d->loc[ts]].tie = 1;
	for (int s = 0; s < nloc; s++)
		d->sd[s].dist = p->optim.distributed;
	for (int s = 0; s < p->nstages; s++)
		if (d->loc[s] >= 0)
			d->sd[d->loc[s]].sp = plan_sp_bytes(p, s) > 0;
	return 0;
}

/* ---- groups, sends to self, matching ---- */


/* Op i of rank r breaks the group rules: `same`: it shares the group of the comm op
 * before it, and one of the two is a collective; else its group number does not
 * increase on last. */
static void group_fault(PlanVc *v, int r, int64_t i, int same, int64_t last)
{
	const PlanOp *o = &v->p->ranks[r].ops[i];
	const PlanOp *c = plan_op_is_coll(plan_op_kind(o)) ? o : &o[-1]; // the collective
	char a[300];
	v->stop = PLAN_VC_GROUPS;
	if (same)
		plan_vc_err(v, PLAN_RULE_GROUP_ALONE, r, i, "%s: a%s %s must be alone in its group",
		            plan_vc_opdesc(v, r, i, a, sizeof a),
		            strchr("AEIOU", plan_ops[c->kind].name[0]) ? "n" : "", plan_ops[c->kind].name);
	else
		plan_vc_err(v, PLAN_RULE_GROUP_ORDER, r, i,
				"%s: group numbers must increase along a rank's list (group %d "
		            "follows group %lld)", plan_vc_opdesc(v, r, i, a, sizeof a), o->group,
		            (long long)last);
}

/* Whether op i of rank r, paired (plan_op_paired), is an F&B pair's first half: a
 * forward, then at once a backward (B or BW) of another stage.  No op lies between the
 * halves, so the pair is one compute slot in every model. */
static int pair_ok(PlanVc *v, int r, int64_t i)
{
	const PlanRank *rk = &v->p->ranks[r];
	const PlanOp *o = &rk->ops[i], *b = i + 1 < rk->nops ? o + 1 : NULL;
	if (!plan_op_paired(o) ||
	    (o->kind == OP_F && b && (b->kind == OP_B || b->kind == OP_BW) && b->stage != o->stage &&
	     !b->dir))
		return 1;
	char a[300];
	v->stop = PLAN_VC_GROUPS;
	plan_vc_err(v, PLAN_RULE_PAIR, r, i, "%s: a pair must be an F followed by a B or BW of "
	            "another stage", plan_vc_opdesc(v, r, i, a, sizeof a));
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Rank a's SENDs grouped by receiver into *x (cnt: [world] zeroes, left so); -1 when
 * out of memory. */
static int index_sends(const Plan *p, int a, int64_t *cnt, SendIndex *x)
{
	const PlanRank *ra = &p->ranks[a];
	int64_t n = 0;
	int cap = 0;
	for (int64_t i = 0; i < ra->nops; i++) {
		const PlanOp *o = &ra->ops[i];
		if (!plan_ops[o->kind].sends)
			continue;
		n++;
		if (cnt[o->peer]++)
			continue;
		if (x->nto == cap) {
			int *t = realloc(x->to, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *t);
			if (!t)
				return -1;
			x->to = t;
		}
		x->to[x->nto++] = o->peer;
	}
	qsort(x->to, (size_t)x->nto, sizeof *x->to, cmp_int);
	x->off = malloc(((size_t)x->nto + 1) * sizeof *x->off);
	x->at = malloc(((size_t)n + 1) * sizeof *x->at);
	if (!x->off || !x->at)
		return -1;
	x->off[0] = 0;
	for (int j = 0; j < x->nto; j++) {
		x->off[j + 1] = x->off[j] + cnt[x->to[j]];
		cnt[x->to[j]] = x->off[j]; // now where its next send goes
	}
	for (int64_t i = 0; i < ra->nops; i++)
		if (plan_ops[ra->ops[i].kind].sends)
			x->at[cnt[ra->ops[i].peer]++] = i;
	for (int j = 0; j < x->nto; j++)
		cnt[x->to[j]] = 0;
	x->built = 1;
	return 0;
}

/* Opens receiver b's cursor on sender a; NULL when out of memory (reported). */
static Cursor *cursor_open(PlanVc *v, Walk *w, int a, int b)
{
	if (w->ncur == w->capcur) {
		int cap = w->capcur ? 2 * w->capcur : 16;
		Cursor *c = realloc(w->cur, (size_t)cap * sizeof *c);
		if (!c) {
			plan_vc_err(v, -1, -1, -1, "out of memory");
			return NULL;
		}
		w->cur = c;
		w->capcur = cap;
	}
	Cursor *c = &w->cur[w->ncur];
	*c = (Cursor){.from = a};
	if (++w->nrecv[a] > DIRECT_RECEIVERS) {
		SendIndex *x = &w->ix[a];
		if (w->ix_lock)
			pthread_mutex_lock(w->ix_lock);
		int bad = !x->built && index_sends(v->p, a, w->cnt, x);
		if (w->ix_lock)
			pthread_mutex_unlock(w->ix_lock);
		if (bad) {
			plan_vc_err(v, -1, -1, -1, "out of memory");
			return NULL;
		}
		const int *t = bsearch(&b, x->to, (size_t)x->nto, sizeof *x->to, cmp_int);
		c->indexed = 1;
		if (t) {
			c->at = x->at + x->off[t - x->to];
			c->nat = x->off[t - x->to + 1] - x->off[t - x->to];
		}
	}
	w->slot[a] = w->ncur++;
	return c;
}

/* Receiver b's cursor on sender a, opened on first use; NULL when out of memory
 * (reported). */
static inline Cursor *cursor_of(PlanVc *v, Walk *w, int a, int b)
{
	return w->slot[a] >= 0 ? &w->cur[w->slot[a]] : cursor_open(v, w, a, b);
}

/* The op index of c's sender's next SEND to b (not yet met), or -1. */
static inline int64_t next_send(const Walk *w, const Plan *p, Cursor *c, int b)
{
	if (c->indexed)
		return c->used < c->nat ? c->at[c->used] : -1;
	const PlanRank *ra = &p->ranks[c->from];
	const PlanOp *ops = ra->ops;
	for (int64_t i = c->pos, n = ra->nops; i < n; i++) {
		plan_prefetch(ops, i, n); // the sender's list: a stream beside the rank's own
		if (w->cls[ops[i].kind] == CLS_SEND && ops[i].peer == b) {
			c->pos = i + 1;
			return i;
		}
	}
	c->pos = ra->nops;
	return -1;
}

/* The faults recv_meets finds: RECV i on rank b and j, its sender a's next SEND to b
 * (-1: none), which is at FIFO position pos. */
static void self_fault(PlanVc *v, int b, int64_t i, int64_t j)
{
	char x[300];
	v->stop = PLAN_VC_SELF;
	if (j < 0)
		plan_vc_err(v, PLAN_RULE_SELF_RECV, b, i,
				"%s: a receive from self without its SEND to self in the same "
		            "group", plan_vc_opdesc(v, b, i, x, sizeof x));
	else
		plan_vc_err(v, PLAN_RULE_SELF_SEND_GROUP, b, j,
				"%s: a send to self must be in the group of its RECV from self "
		            "(group %d), or it never completes", plan_vc_opdesc(v, b, j, x, sizeof x),
		            v->p->ranks[b].ops[i].group);
}

static void match_fault(PlanVc *v, int b, int64_t i, int a, int64_t j, int64_t pos)
{
	const PlanOp *o = &v->p->ranks[b].ops[i], *s = &v->p->ranks[a].ops[j];
	char x[300], y[300];
	v->stop = PLAN_VC_MATCH;
	if (j < 0) { // every SEND from a to b is met: pos of them
		plan_vc_err(v, PLAN_RULE_NO_SEND, b, i,
				"%s has no matching SEND: rank %d sends only %lld message%s to "
		            "rank %d", plan_vc_opdesc(v, b, i, x, sizeof x), plan_vc_rank(v, a),
		            (long long)pos, pos == 1 ? "" : "s", plan_vc_rank(v, b));
		return;
	}
	const char *what = s->stage != o->stage ? "edges" // one edge: one size
	                   : s->mb != o->mb     ? "microbatches"
	                                        : "directions";
	plan_vc_err(v, PLAN_RULE_FIFO, b, i,
			"%s is matched (FIFO position %lld from rank %d to rank %d) with %s: "
	            "the %s differ", plan_vc_opdesc(v, a, j, x, sizeof x), (long long)pos,
	            plan_vc_rank(v, a), plan_vc_rank(v, b),
	            plan_vc_opdesc(v, b, i, y, sizeof y), what);
}

/* RECV i on rank b against the next SEND to b of its sender a: the pairing of sends to
 * self (a = b) and the matching.  0, or -1 when out of memory (reported). */
static inline int recv_meets(PlanVc *v, Walk *w, int b, int64_t i)
{
	const Plan *p = v->p;
	const PlanOp *o = &p->ranks[b].ops[i];
	int a = o->peer;
	if (v->stop <= (a == b ? PLAN_VC_SELF : PLAN_VC_MATCH))
		return 0;
	Cursor *c = cursor_of(v, w, a, b);
	if (!c)
		return -1;
	int64_t j = next_send(w, p, c, b);
	const PlanOp *s = j >= 0 ? &p->ranks[a].ops[j] : NULL;
	if (a == b && (!s || s->group != o->group)) {
		self_fault(v, b, i, j);
		return 0;
	}
	if (!s) {
		if (v->stop > PLAN_VC_MATCH)
			match_fault(v, b, i, a, -1, c->used);
		return 0;
	}
	if (v->stop > PLAN_VC_MATCH && (s->stage != o->stage || s->mb != o->mb ||
	                                 s->dir != o->dir))
		match_fault(v, b, i, a, j, c->used);
	c->used++;
	return 0;
}

/* After rank r's list, which holds nself SENDs to self: each met its RECV from self.
 * 0, or -1 when out of memory (reported). */
static int self_leftover(PlanVc *v, Walk *w, int r, int64_t nself)
{
	if (nself == (w->slot[r] >= 0 ? w->cur[w->slot[r]].used : 0))
		return 0;
	Cursor *c = cursor_of(v, w, r, r);
	if (!c)
		return -1;
	int64_t j = next_send(w, v->p, c, r);
	char x[300];
	v->stop = PLAN_VC_SELF;
	plan_vc_err(v, PLAN_RULE_SELF_SEND_ALONE, r, j,
			"%s: a send to self without its RECV from self in the same group, "
	            "so it never completes", plan_vc_opdesc(v, r, j, x, sizeof x));
	return 0;
}

/* Rank a has SENDs no RECV met: the first of them to the receiver it first sends to,
 * reported.  0, or -1 when out of memory (reported). */
static int match_leftover(PlanVc *v, int a)
{
	const Plan *p = v->p;
	int W = p->world;
	int64_t *left = calloc((size_t)W, sizeof *left);  // RECVs from a not yet paired
	int64_t *first = malloc((size_t)W * sizeof *first); // a's first SEND to the rank
	int64_t *unmet = malloc((size_t)W * sizeof *unmet); // a's first SEND no RECV met
	if (!left || !first || !unmet) {
		free(left);
		free(first);
		free(unmet);
		return plan_vc_err(v, -1, -1, -1, "out of memory");
	}
	for (int q = 0; q < W; q++) {
		first[q] = unmet[q] = -1;
		for (int64_t i = 0; i < p->ranks[q].nops; i++) {
			const PlanOp *o = &p->ranks[q].ops[i];
			left[q] += plan_op_is_p2p(plan_op_kind(o)) && !plan_ops[o->kind].sends && o->peer == a;
		}
	}
	const PlanRank *ra = &p->ranks[a];
	for (int64_t i = 0; i < ra->nops; i++) {
		int q = ra->ops[i].peer;
		if (!plan_ops[ra->ops[i].kind].sends)
			continue;
		if (first[q] < 0)
			first[q] = i;
		if (left[q] > 0)
			left[q]--;
		else if (unmet[q] < 0)
			unmet[q] = i;
	}
	int at = -1;
	for (int q = 0; q < W; q++)
		if (unmet[q] >= 0 && (at < 0 || first[q] < first[at]))
			at = q;
	char x[300];
	v->stop = PLAN_VC_MATCH;
	plan_vc_err(v, PLAN_RULE_NO_RECV, a, unmet[at], "%s has no matching RECV on rank %d",
	            plan_vc_opdesc(v, a, unmet[at], x, sizeof x), plan_vc_rank(v, at));
	free(left);
	free(first);
	free(unmet);
	return 0;
}

/* ---- the walk ---- */

/* Rank r's list through every check still running; 0, or -1 when out of memory. */
static int walk_rank(PlanVc *v, Walk *w, int r)
{
	const PlanRank *rk = &v->p->ranks[r];
	const PlanOp *ops = rk->ops;
	int64_t last = -1, nsend = 0, nself = 0;
	int prev_comm = 0;
	if (v->stop > PLAN_VC_DEPS) {
		int rc = deps_begin(v, &w->d, r);
		if (rc < 0)
			return -1;
		if (rc)
			v->stop = PLAN_VC_DEPS;
	}
	int stop = v->stop; // v->stop, kept here between the calls that may change it
	for (int64_t i = 0, n = rk->nops; i < n; i++) {
		const PlanOp *o = &ops[i];
		plan_prefetch(ops, i, n);
		int cls = w->cls[o->kind];
		if (cls != CLS_OTHER) {
			int same = prev_comm && o->group == last;
			if (same ? cls >= CLS_COLL || w->cls[o[-1].kind] >= CLS_COLL : o->group <= last) {
				group_fault(v, r, i, same, last);
				return 0;
			}
			last = o->group;
			prev_comm = 1;
			if (cls == CLS_SEND) {
				nsend++;
				nself += o->peer == r;
			} else if (cls == CLS_RECV) {
				if (recv_meets(v, w, r, i))
					return -1;
				stop = v->stop;
			} else {
				v->ntie += cls == CLS_TIE;
			}
		} else {
			prev_comm = 0;
			if (!pair_ok(v, r, i))
				return 0;
		}
		if (stop > PLAN_VC_DEPS && !dep_fast(v, &w->d, o, cls) && dep_op(v, &w->d, i))
			v->stop = stop = PLAN_VC_DEPS;
	}
	w->nsend[r] = nsend;
	if (v->stop > PLAN_VC_SELF && self_leftover(v, w, r, nself))
		return -1;
	if (v->stop > PLAN_VC_DEPS && dep_complete(v, &w->d))
		v->stop = PLAN_VC_DEPS;
	for (int k = 0; k < w->ncur; k++) {
		w->nmet[w->cur[k].from] += w->cur[k].used;
		w->slot[w->cur[k].from] = -1;
	}
	w->ncur = 0;
	return 0;
}

/* Frees w; `shared`: also the arrays a threaded walk's workers share (worker 0's). */
static void walk_free(Walk *w, int world, int shared)
{
	Deps *d = &w->d;
	free(d->loc);
	free(d->eloc);
	free(d->act);
	free(d->grad);
	free(d->seen);
	free(d->st);
	free(d->ps);
	free(d->rcv);
	free(d->sd);
	free(w->cur);
	free(w->slot);
	free(w->nrecv);
	free(w->nmet);
	if (!shared)
		return;
	for (int a = 0; w->ix && a < world; a++) {
		free(w->ix[a].to);
		free(w->ix[a].off);
		free(w->ix[a].at);
	}
	free(w->ix);
	free(w->nsend);
	free(w->cnt);
}

/* Readies w for plan p; `share`: the arrays workers share are share's, not w's own.
 * -1 when out of memory (w is then freed as far as it was made). */
static int walk_init(Walk *w, const Plan *p, const Walk *share)
{
	int W = p->world;
	size_t ne = (size_t)p->nedges + 1;
	*w = (Walk){.d = {.m = p->microbatches, .dp = p->dims[DIM_DP]}};
	Deps *d = &w->d;
	plan_tie(p, &d->embed, &d->head);
	d->loc = malloc(((size_t)p->nstages + 1) * sizeof *d->loc);
	d->eloc = malloc(ne * sizeof *d->eloc);
	d->act = malloc(ne * sizeof *d->act);
	d->grad = malloc(ne * sizeof *d->grad);
	d->seen = malloc(ne * DIR_COUNT * 2 * sizeof *d->seen);
	w->slot = malloc(((size_t)W + 1) * sizeof *w->slot);
	w->nrecv = calloc((size_t)W + 1, sizeof *w->nrecv);
	w->nmet = calloc((size_t)W + 1, sizeof *w->nmet);
	if (share) {
		w->nsend = share->nsend;
		w->cnt = share->cnt;
		w->ix = share->ix;
	} else {
		w->nsend = calloc((size_t)W + 1, sizeof *w->nsend);
		w->cnt = calloc((size_t)W + 1, sizeof *w->cnt);
		w->ix = calloc((size_t)W + 1, sizeof *w->ix);
	}
	if (!d->loc || !d->eloc || !d->act || !d->grad || !d->seen || !w->slot || !w->nrecv ||
	    !w->nsend || !w->nmet || !w->cnt || !w->ix) {
		walk_free(w, W, !share);
		return -1;
	}
	for (int a = 0; a < W; a++)
		w->slot[a] = -1;
	for (int k = 0; k < OP_COUNT; k++)
		w->cls[k] = !plan_op_is_comm((OpKind)k)          ? CLS_OTHER
		            : plan_op_is_p2p((OpKind)k)          ? (plan_ops[k].sends ? CLS_SEND : CLS_RECV)
		            : plan_ops[k].over == OP_OVER_TIE ? CLS_TIE
		                                                 : CLS_COLL;
	return 0;
}

/* ---- the walk on worker threads (par.h) ---- */

/* A threaded walk: per worker a Walk and a copy of the verifier's state whose faults go
 * to the worker's own PlanError, unreported. */
typedef struct {
	Walk *w;
	PlanVc *vw;
	PlanError *err;
	int nw;
	pthread_mutex_t ix_lock;
} ParWalk;

enum { PAR_FAULT = 1, PAR_OOM = 2 }; // why a worker stopped the pass

static int par_rank(void *arg, int64_t r, int wk)
{
	ParWalk *pw = arg;
	PlanVc *v = &pw->vw[wk];
	if (walk_rank(v, &pw->w[wk], (int)r))
		return PAR_OOM;
	return v->stop < PLAN_VC_NONE ? PAR_FAULT : 0;
}

/* Every rank's walk on par_workers workers.  1 when every rank passed (nmet and nsend
 * of *out hold the counts the leftover check needs, v->ntie the TIEREDUCEs); 0 when a
 * worker found anything at all, or memory ran out: the caller then walks on one thread,
 * which finds and reports exactly what it always did. */
static int walk_threads(PlanVc *v, Walk *out)
{
	const Plan *p = v->p;
	ParWalk pw = {.nw = par_workers(p->world)};
	pw.w = calloc((size_t)pw.nw, sizeof *pw.w);
	pw.vw = calloc((size_t)pw.nw, sizeof *pw.vw);
	pw.err = calloc((size_t)pw.nw, sizeof *pw.err);
	int made = 0, ok = 0;
	if (!pw.w || !pw.vw || !pw.err || pthread_mutex_init(&pw.ix_lock, NULL))
		goto out;
	for (; made < pw.nw; made++) {
		if (walk_init(&pw.w[made], p, made ? &pw.w[0] : NULL))
			break;
		pw.w[made].ix_lock = &pw.ix_lock;
		pw.vw[made] = *v;
		pw.vw[made].err = &pw.err[made];
		pw.vw[made].ntie = 0;
	}
	if (made == pw.nw && !par_for(p->world, par_rank, &pw)) {
		ok = 1;
		for (int k = 0; k < pw.nw; k++) {
			v->ntie += pw.vw[k].ntie;
			for (int a = 0; a < p->world; a++)
				out->nmet[a] += pw.w[k].nmet[a];
		}
		memcpy(out->nsend, pw.w[0].nsend, (size_t)p->world * sizeof *out->nsend);
	}
	pthread_mutex_destroy(&pw.ix_lock);
out:
	for (int k = made - 1; k >= 0; k--)
		walk_free(&pw.w[k], p->world, k == 0);
	free(pw.w);
	free(pw.vw);
	free(pw.err);
	return ok;
}

int plan_vc_ops(PlanVc *v)
{
	const Plan *p = v->p;
	int W = p->world;
	Walk w;
	if (walk_init(&w, p, NULL))
		return plan_vc_err(v, -1, -1, -1, "out of memory");
	int rc = -1;
	int walked = par_workers(W) > 1 && v->stop == PLAN_VC_NONE && walk_threads(v, &w);
	for (int r = 0; !walked && r < W && v->stop > PLAN_VC_GROUPS; r++)
		if (walk_rank(v, &w, r))
			goto out;
	for (int a = 0; a < W && v->stop > PLAN_VC_MATCH; a++)
		if (w.nmet[a] != w.nsend[a] && match_leftover(v, a))
			goto out;
	rc = 0;
out:
	walk_free(&w, W, 1);
	return rc;
}
