/* The walk of the lowering (lower.c's opening comment says what it does and why its
 * plans cannot deadlock): time advances by the actions' costs, and at each event time
 * finished actions make their outputs available, tensors move (a SEND and its RECV
 * appended in the same step) and idle ranks whose next action has its inputs start it.
 * A step costs what happens in it: rank sets name the ranks each phase concerns, and ops
 * are written straight into the lists reserve_ops sized. */
#include "lower_int.h"
#include "../plan/block.h"
#include "../plan/tie.h"
#include "../plan/sizes.h"
#include "../plan/line.h"
#include "../plan/link.h"
#include "../plan/tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next op of pipeline index pp's list on the first line, for the caller to fill, and
 * its source line where the list keeps lines:
 * in place, since reserve_ops sized the lists (a tied table's TIEREDUCE, which it does
 * not count, may grow one).  Filling the slot field by field, rather than copying a
 * PlanOp built elsewhere, keeps the walk's stores straight to the list.  The walk
 * appends through w->opc, a cursor per rank side by side (PlanRank's own count, one
 * cache line per rank, is set when the walk ends: sync_ops). */
static inline PlanOp *next_op(Lw *w, int pp, int line)
{
	OpCursor *c = &w->opc[pp];
	if (c->at < c->end) {
		if (c->end - c->at > 16) // 128 ranks' lists: too many streams for the hardware
			__builtin_prefetch(c->at + 16, 1); // to follow
		if (c->lines) // else the plan's lines are its stages' (reserve_ops)
			c->lines[c->at - c->ops] = line;
		return c->at++;
	}
	PlanRank *rk = w->line0[pp];
	rk->nops = c->at - rk->ops;
	PlanOp *o = plan_push_op(rk, (PlanOp){0}, c->lines ? line : 0);
	if (!o)
		lw_oom(w, (size_t)rk->ops_cap * (sizeof *o + sizeof *rk->lines) * 3 / 2);
	*c = (OpCursor){rk->ops, rk->ops + rk->nops, rk->ops + rk->ops_cap, rk->lines};
	return o;
}

/* Each rank's op count from its cursor. */
static void sync_ops(Lw *w)
{
	for (int q = 0; q < w->pp; q++)
		w->line0[q]->nops = w->opc[q].at - w->opc[q].ops;
}

/* A SEND or RECV on pipeline index pp of tensor (edge, mb, dir) with pipeline index
 * peer, in group g. */
static inline void emit_p2p(Lw *w, int pp, int kind, const Out *t, int peer, int g)
{
	PlanOp *o = next_op(w, pp, t->line);
	memset(o, 0, sizeof *o); // the padding too: the plan's bytes are all defined
	o->kind = (uint8_t)kind;
	o->dir = (uint8_t)t->dir;
	o->stage = t->edge;
	o->mb = t->mb;
	o->peer = peer * w->stride;
	o->group = g;
	o->route = 2 * w->remote_k[t->edge] + t->dir;
}

/* Appends an op to pipeline index pp's list on the first line.  For SEND, RECV and
 * TIEREDUCE, `peer` is the peer's pipeline index; the world rank and a p2p op's route
 * are filled here (the first line's ranks are q * stride, its routes come first). */
static inline void emit(Lw *w, int pp, PlanOp op, int line)
{
	if (plan_op_has_peer(op.kind))
		op.peer = op.peer * w->stride;
	if (plan_op_is_p2p(op.kind))
		op.route = 2 * w->remote_k[op.stage] + op.dir;
	PlanOp *o = next_op(w, pp, line);
	memset(o, 0, sizeof *o); // field by field below: a copy of op may skip its padding
	o->kind = op.kind;
	o->dir = op.dir;
	o->part = op.part;
	o->stage = op.stage;
	o->mb = op.mb;
	o->peer = op.peer;
	o->group = op.group;
	o->route = op.route;
}

void lw_emit(Lw *w, int pp, PlanOp op, int line)
{
	emit(w, pp, op, line);
}

/* A collective of `bytes` (the plan's sizes table holds them; the op, their index). */
static void emit_sized(Lw *w, int pp, PlanOp op, int64_t bytes, int line)
{
	if (plan_op_set_bytes(w->plan, &op, bytes))
		lw_oom(w, sizeof(int64_t));
	emit(w, pp, op, line);
}

/* Sets of pipeline indexes, a bit each: the walk visits only the ranks a phase
 * concerns (those finishing, those with tensors to send, ...), in increasing order as a
 * scan over every rank would, so a step costs what happens in it, not the rank count. */
static inline void set_add(uint64_t *s, int i)
{
	s[i >> 6] |= (uint64_t)1 << (i & 63);
}

static inline void set_del(uint64_t *s, int i)
{
	s[i >> 6] &= ~((uint64_t)1 << (i & 63));
}

static inline int set_has(const uint64_t *s, int i)
{
	return (int)(s[i >> 6] >> (i & 63)) & 1;
}

/* The lowest member of word k of a set whose remaining members are x (x != 0). */
static inline int set_first(int k, uint64_t x)
{
	return k * 64 + __builtin_ctzll(x);
}

/* When action a has its inputs (the op table's needs): local ones computed, remote
 * ones received and usable (their group complete); -1 while one is missing. */
static int64_t inputs_at(const Lw *w, const SchedAct *a)
{
	const PlanEdge *E = w->plan->edges;
	uint16_t needs = plan_ops[a->kind].needs;
	int64_t at = 0;
	if ((needs & PLAN_DEP_MB) & ~*lw_done(w, a->stage, a->mb))
		return -1;
	for (int fwd = 1; fwd >= 0; fwd--) {
		if (!(needs & (fwd ? PLAN_DEP_IN_ACT : PLAN_DEP_OUT_GRAD)))
			continue;
		int lo = fwd ? w->in_off[a->stage] : w->out_off[a->stage];
		int hi = fwd ? w->in_off[a->stage + 1] : w->out_off[a->stage + 1];
		for (int j = lo; j < hi; j++) {
			int e = fwd ? w->in_e[j] : w->out_e[j], o = fwd ? E[e].src : E[e].dst;
			if (w->remote_k[e] < 0) {
				if (!(*lw_done(w, o, a->mb) & (fwd ? PLAN_DEP_ACT : PLAN_DEP_GRAD)))
					return -1;
				continue;
			}
			size_t t = lw_tensor(w, e, a->mb, !fwd);
			if (!w->moved[t])
				return -1;
			if (w->timed && w->gend[w->tgroup[t]] > at)
				at = w->gend[w->tgroup[t]];
		}
	}
	return at;
}

/* The tensors action a on pipeline index pp produces for other ranks (the op table's
 * makes), onto q in the order they are sent: a forward's activations along its
 * out-edges, a backward's gradients along its in-edges (fill_made lists them). */
static inline void push_outputs(const Lw *w, const SchedAct *a, int line, Pending *q)
{
	uint16_t makes = plan_ops[a->kind].makes;
	const int *off = &w->made_off[2 * a->stage];
	int lo = off[(makes & PLAN_DEP_ACT) ? 0 : 1], hi = off[(makes & PLAN_DEP_GRAD) ? 2 : 1];
	if (lo >= hi)
		return;
	if (q->n + (hi - lo) > q->cap) {
		q->cap = 2 * q->cap > q->n + (hi - lo) ? 2 * q->cap : q->n + (hi - lo) + 16;
		q->v = lw_realloc(w, q->v, (size_t)q->cap * sizeof *q->v);
	}
	for (int j = lo; j < hi; j++) {
		Out o = w->made[j];
		o.mb = a->mb;
		o.line = line;
		q->v[q->n++] = o;
	}
}

void lw_push_outputs(const Lw *w, int pp, const SchedAct *a, int line, Pending *q)
{
	(void)pp;
	push_outputs(w, a, line, q);
}

/* What a finished compute action makes available, and the reduction and optimizer
 * step after a stage's last weight gradient. */
static inline void finish_compute(Lw *w, int pp, const SchedAct *a, int line)
{
	uint16_t makes = plan_ops[a->kind].makes;
	*lw_done(w, a->stage, a->mb) |= makes & PLAN_DEP_MB;
	push_outputs(w, a, line, &w->pend[pp]);
	if (w->pend[pp].n)
		set_add(w->pendset, pp);
	if (!(makes & PLAN_DEP_WGRAD))
		return;
	if (--w->left[a->stage] == 0)
		w->reduce[w->nreduce[pp]++ + (size_t)pp * w->ns] = a->stage;
	/* A tied head's weight gradient adds into its embedding's (plan_tie). */
	if (a->stage == w->tie_head && --w->left[w->tie_embed] == 0)
		w->reduce[w->nreduce[pp]++ + (size_t)pp * w->ns] = w->tie_embed;
	if (w->nreduce[pp])
		set_add(w->redset, pp);
}

void lw_finish_compute(Lw *w, int pp, const SchedAct *a, int line)
{
	finish_compute(w, pp, a, line);
}

/* The dp all-reduce (a distributed optimizer's reduce-scatter) and optimizer step of
 * stages whose backward is done (a distributed optimizer's step ends in its all-gather
 * of the updated parameters), once the rank has sent what it still owed others (so the
 * gradient a neighbour waits for does not queue behind a reduction).  A stage holding a copy of a table tied across
 * pipeline ranks waits until its rank has `finished` every action (Megatron sums the
 * embedding group's gradients after the whole backward): its TIEREDUCE, a rendezvous
 * with the other copy's rank, then comes after every transfer either rank owes, and
 * before the stage's all-reduce and step.  Under sequence parallelism the stage's SPREDUCE
 * (its replicated layers' gradients over tp, plan_sp_bytes) follows its dp reduction. */
void lw_flush_reductions(Lw *w, int pp, int force, int finished)
{
	if (!w->nreduce[pp] || (w->pend[pp].n && !force))
		return;
	int dp = w->plan->dims[DIM_DP], keep = 0, dist = w->plan->optim.distributed;
	for (int i = 0; i < w->nreduce[pp]; i++) {
		int s = w->reduce[(size_t)pp * w->ns + i];
		int line = w->pr->stages[s].loc.line;
		if (s == w->tie_stage[pp] && !finished) {
			w->reduce[(size_t)pp * w->ns + keep++] = s;
			continue;
		}
		if (s == w->tie_stage[pp])
			emit_sized(w, pp, (PlanOp){.kind = OP_TIEREDUCE, .stage = s, .mb = -1,
			                           .peer = w->tie_peer[pp], .group = w->group[pp]++},
			           plan_tie_bytes(w->plan), line);
		OpKind red = dist ? OP_REDSCATTER : OP_ALLREDUCE;
		if (dp > 1)
			emit_sized(w, pp, (PlanOp){.kind = red, .stage = s, .mb = -1, .peer = -1,
			                           .group = w->group[pp]++},
			           plan_dp_bytes(w->plan, red, s), line);
		int64_t sp = plan_sp_bytes(w->plan, s);
		if (sp > 0) // its replicated layers' gradients, summed over tp after dp (plan/tp.h)
			emit_sized(w, pp, (PlanOp){.kind = OP_SPREDUCE, .stage = s, .mb = -1, .peer = -1,
			                           .group = w->group[pp]++},
			           sp, line);
		emit(w, pp, (PlanOp){.kind = OP_OPTIM, .stage = s, .mb = -1, .peer = -1, .group = -1,
		                     .route = -1}, line);
		if (dp > 1 && dist)
			emit_sized(w, pp, (PlanOp){.kind = OP_ALLGATHER, .stage = s, .mb = -1, .peer = -1,
			                           .group = w->group[pp]++},
			           plan_dp_bytes(w->plan, OP_ALLGATHER, s), line);
	}
	w->nreduce[pp] = keep;
	if (!keep)
		set_del(w->redset, pp);
}

static inline void start_compute(Lw *w, int pp, const SchedAct *a, int line)
{
	PlanOp *o = next_op(w, pp, line);
	memset(o, 0, sizeof *o);
	o->kind = (uint8_t)a->kind;
	o->stage = a->stage;
	o->mb = a->mb;
	o->dir = a->pair; // plan_op_paired
	o->peer = o->group = o->route = -1;
}

void lw_start_compute(Lw *w, int pp, const SchedAct *a, int line)
{
	SchedAct h = *a; // the naive rest (lower_stall.c) may put receives between a pair's
	h.pair = 0;   // halves: it runs them as two actions
	start_compute(w, pp, &h, line);
}

static inline int64_t act_cost(const Lw *w, const SchedAct *a)
{
	return w->acost[(size_t)a->stage * OP_COUNT + a->kind];
}

/* Action a of pipeline index pp: the line a custom schedule wrote it on, else its
 * stage's. */
static inline int src_line_of(const Lw *w, int pp, const SchedAct *a)
{
	int line = w->sc->locs ? sched_loc(w->sc, pp, a).line : 0;
	return line ? line : w->stage_line[a->stage];
}

int lw_src_line_of(const Lw *w, int pp, const SchedAct *a)
{
	return src_line_of(w, pp, a);
}

/* When action a, with the second half of its F&B pair if it is one (SchedAct.pair), has
 * its inputs: a pair is one slot of the rank, started when both halves can start. */
static inline int64_t slot_inputs_at(const Lw *w, const SchedAct *a)
{
	int64_t at = inputs_at(w, a), bt;
	if (!a->pair || at < 0)
		return at;
	bt = inputs_at(w, a + 1);
	return bt < 0 ? -1 : bt > at ? bt : at;
}

/* What the slot of action a takes: a pair runs its halves back to back (F + B). */
static inline int64_t slot_cost(const Lw *w, const SchedAct *a)
{
	return a->pair ? sat_add(act_cost(w, a), act_cost(w, a + 1)) : act_cost(w, a);
}

/* "3F1", "0I2", "1B0": PyTorch's letters, from the op table. */
const char *lw_act_name(const SchedAct *a, char *buf, size_t n)
{
	snprintf(buf, n, "%d%c%d", a->stage, plan_ops[a->kind].torch, a->mb);
	return buf;
}

/* The link clock: the walk's view of the overlap model's comm streams
 * (docs/semantics.md "Timing"), so that a received tensor is usable when it would be,
 * not the moment it is sent.  A rank's group starts once its stream is free (its last
 * group complete); each transfer once both ends' groups have started, taking the link's
 * time (with --tune=overlap; none otherwise, where a transfer waits for both ranks to
 * be between actions anyway, nor with tp > 1, whose TPREDUCEs share the stream but are
 * placed only after the walk, expand_tp: a clock blind to them placed transfers worse);
 * a group completes with its last transfer, and what it
 * receives is usable from then on.  A rank whose last op is a group that has not
 * started yet (its stream is busy) adds this step's transfers to that group instead of
 * queueing a new one behind it: they start no later, and run together.  So they do with
 * a group still running where join says so (joins(), below; 2: r sends, so the group
 * starts now).  Returns the group number for rank r's ops of this step.  When
 * transfers take no time (w->timed 0), every group completes the moment it starts,
 * which is now: only the start of each rank's last group is kept. */
static inline int clock_open(Lw *w, int r, int64_t now, int join)
{
	int g = w->glast[r];
	if (w->overlap && g && (w->gstart[r] >= now || join)) { // tuned for overlap: only then
		const OpCursor *c = &w->opc[r];      // is the last op read (it has left the cache)
		const PlanOp *last = c->at > c->ops ? c->at - 1 : NULL;
		if (last && plan_op_is_p2p(last->kind)) {
			if (join > 1)
				w->gstart[r] = now;
			return last->group;
		}
	}
	int64_t free = w->timed ? w->gend[g] : 0;
	w->glast[r] = ++w->ngroups;
	w->gstart[r] = free > now ? free : now;
	if (w->timed)
		w->gend[w->ngroups] = w->gstart[r];
	return w->group[r]++;
}

static void clock_move(Lw *w, int q, int to, size_t t, int64_t bytes)
{
	int st = plan_pp_stride(w->plan); // the walk's ranks are line 0's pipeline indices
	int64_t x = plan_link_ns(w->plan, plan_same_node(w->plan, q * st, to * st), bytes);
	int64_t s = w->gstart[q] > w->gstart[to] ? w->gstart[q] : w->gstart[to];
	int64_t end = s > INT64_MAX / 2 ? s : s + x;
	int gq = w->glast[q], gt = w->glast[to];
	if (end > w->gend[gq])
		w->gend[gq] = end;
	if (end > w->gend[gt])
		w->gend[gt] = end;
	w->tgroup[t] = gt;
}

/* The walk's own state: per pipeline index its next action (cur), whether it is busy
 * and until when (end), and the sets the phases visit. */
typedef struct {
	int64_t now;
	int64_t *cur, *end;
	int64_t *mid;        // per busy rank running a pair's first half: when that half ends
	int64_t minend;      // the earliest end of a busy rank; INT64_MAX when none is
	int nw;              // words of a rank set
	uint64_t *busy;      // ranks computing
	uint64_t *todo;      // ranks with actions left
	int ntodo;
	int *gphase;         // per rank: its group number this step, or -1
	int *opened, nopened; // the ranks with a group this step
	SchedAct *run;       // per busy rank: its action, and that action's line (read here,
	int *run_line;       // where it stays in cache, rather than in the rank's long list)
} Walk;

/* Every busy rank whose action ends by now finishes it, in rank order. */
static void walk_finish(Lw *w, Walk *k)
{
	const SchedCtx *sc = w->sc;
	for (int i = 0; i < k->nopened; i++)
		k->gphase[k->opened[i]] = -1;
	k->nopened = 0;
	if (k->minend > k->now)
		return;
	int64_t minend = INT64_MAX;
	for (int j = 0; j < k->nw; j++)
		for (uint64_t x = k->busy[j]; x; x &= x - 1) {
			int p = set_first(j, x);
			/* A pair's first half ends: its outputs may move (tuned for overlap, where the
			 * comm stream sends them during the second half), the rank stays busy. */
			if (k->run[p].pair && k->mid[p] <= k->now) {
				finish_compute(w, p, &k->run[p], k->run_line[p]);
				const SchedAct *b = &sc->acts[p][++k->cur[p]]; // sched_loc: in the order
				k->run[p] = *b;
				k->run_line[p] = src_line_of(w, p, b);
			}
			int64_t end = k->run[p].pair ? k->mid[p] : k->end[p];
			if (end > k->now) {
				minend = end < minend ? end : minend;
				continue;
			}
			finish_compute(w, p, &k->run[p], k->run_line[p]);
			if (++k->cur[p] == sc->nacts[p]) {
				set_del(k->todo, p);
				k->ntodo--;
			}
			set_del(k->busy, p);
		}
	k->minend = minend;
}

/* Whether rank r's last group holds a receive that action a consumes. */
static int holds_for(const Lw *w, int r, const SchedAct *a)
{
	uint16_t needs = plan_ops[a->kind].needs;
	const OpCursor *c = &w->opc[r];
	int g = c->at[-1].group;
	for (const PlanOp *o = c->at - 1; o >= c->ops && o->group == g; o--) {
		if (!plan_op_is_p2p(o->kind) || plan_ops[o->kind].sends || o->mb != a->mb)
			continue;
		const PlanEdge *e = &w->plan->edges[o->stage];
		if (o->dir == DIR_ACT ? e->dst == a->stage && (needs & PLAN_DEP_IN_ACT)
		                      : e->src == a->stage && (needs & PLAN_DEP_OUT_GRAD))
			return 1;
	}
	return 0;
}

/* The same for r's next slot: the action after its running one (if busy), with the
 * second half of an F&B pair (both halves' inputs start it). */
static int holds_next(const Lw *w, const Walk *k, int r)
{
	int i = (int)k->cur[r] + (set_has(k->busy, r) ? 1 + k->run[r].pair : 0), n = w->sc->nacts[r];
	const SchedAct *a = i < n ? &w->sc->acts[r][i] : NULL;
	return a && (holds_for(w, r, a) || (a->pair && i + 1 < n && holds_for(w, r, a + 1)));
}

/* Whether rank r's transfers of this step join its last group, which is still running
 * (timed: it completes after now): transfers that overlap in time run together only in
 * one group, a rank's stream taking its groups one after the other, and a group's ops
 * lie together in the list, after r's running action.  A group of their own would
 * start when that one completes, gend - now later.  Joined, the group starts at now if
 * r sends now (its sends' data is made now), delaying the transfers it holds by up to
 * now - their start, and it completes with the last of them, later than it would have:
 * so they join when that delay is the smaller, and the group holds no receive that r's
 * next action waits for.  2: they join and r sends (the group then starts now). */
static int joins(const Lw *w, const Walk *k, int r)
{
	int g = w->glast[r];
	if (!w->timed || !g || w->gstart[r] >= k->now || w->gend[g] <= k->now)
		return 0;
	const OpCursor *c = &w->opc[r];
	if (c->at == c->ops || !plan_op_is_p2p(c->at[-1].kind))
		return 0;
	int sends = set_has(w->pendset, r);
	int64_t delay = sends ? k->now - w->gstart[r] : 0;
	if (delay >= w->gend[g] - k->now || holds_next(w, k, r))
		return 0;
	return 1 + sends;
}

/* Rank r's group of this step (clock_open the first time). */
static int walk_group(Lw *w, Walk *k, int r)
{
	if (k->gphase[r] < 0) {
		k->gphase[r] = clock_open(w, r, k->now, joins(w, k, r));
		k->opened[k->nopened++] = r;
	}
	return k->gphase[r];
}

/* Comm phase: every tensor whose producer and consumer are both between actions
 * moves now, oldest first (tuned for overlap: every tensor produced). */
static void walk_comms(Lw *w, Walk *k)
{
	for (int j = 0; j < k->nw; j++)
		for (uint64_t x = w->pendset[j] & (w->overlap ? ~(uint64_t)0 : ~k->busy[j]); x;
		     x &= x - 1) {
			int q = set_first(j, x), keep = 0;
			Pending *pq = &w->pend[q];
			for (int i = 0; i < pq->n; i++) {
				Out o = pq->v[i];
				if (!w->overlap && set_has(k->busy, o.to)) {
					pq->v[keep++] = o;
					continue;
				}
				size_t t = lw_tensor(w, o.edge, o.mb, o.dir);
				w->moved[t] = 1;
				emit_p2p(w, q, OP_SEND, &o, o.to, walk_group(w, k, q));
				emit_p2p(w, o.to, OP_RECV, &o, q, walk_group(w, k, o.to));
				if (w->timed)
					clock_move(w, q, o.to, t, w->plan->edges[o.edge].bytes);
			}
			pq->n = keep;
			if (!keep)
				set_del(w->pendset, q);
		}
}

/* Compute phase: every idle rank whose next action has its inputs starts it.  *next:
 * the earliest time after now at which a waiting rank's inputs arrive. */
static void walk_start(Lw *w, Walk *k, int64_t *next)
{
	const SchedCtx *sc = w->sc;
	for (int j = 0; j < k->nw; j++)
		for (uint64_t x = k->todo[j] & ~k->busy[j]; x; x &= x - 1) {
			int p = set_first(j, x);
			const SchedAct *a = &sc->acts[p][k->cur[p]];
			if (k->cur[p] + 8 < sc->nacts[p]) // 128 ranks' lists are too many streams for the
				__builtin_prefetch(a + 8);   // hardware to follow
			int64_t at = slot_inputs_at(w, a);
			if (at < 0 || at > k->now) {
				if (at > k->now && at < *next)
					*next = at;
				continue;
			}
			k->run[p] = *a;
			k->run_line[p] = src_line_of(w, p, a);
			start_compute(w, p, a, k->run_line[p]);
			if (a->pair)
				start_compute(w, p, a + 1, src_line_of(w, p, a + 1));
			set_add(k->busy, p);
			k->end[p] = sat_add(k->now, slot_cost(w, a));
			if (k->end[p] > PLAN_TIME_MAX) // still an event: the walk stops there
				k->end[p] = PLAN_TIME_MAX;
			k->mid[p] = a->pair ? sat_add(k->now, act_cost(w, a)) : k->end[p];
			if (k->mid[p] > k->end[p])
				k->mid[p] = k->end[p];
			k->minend = k->mid[p] < k->minend ? k->mid[p] : k->minend;
		}
}

/* The walk described at the top: time advances by the actions' costs; at each event
 * time, first every produced tensor whose consumer waits for it moves (both ranks being
 * between actions), then every idle rank whose next action has its inputs starts it.
 * A step after which no action ends by now changes nothing more at this time (the
 * tensors left wait for ranks still busy, the idle ranks for inputs still missing), so
 * time advances at once: to the earliest end of a busy rank or arrival of an input. */
int lw_place_comms(Lw *w, int allow_deadlock)
{
	const SchedCtx *sc = w->sc;
	int pp = w->pp, rc = 0;
	Walk k = {.minend = INT64_MAX, .nw = (pp + 63) / 64};
	k.cur = lw_calloc(w, (size_t)pp, sizeof *k.cur);
	k.end = lw_calloc(w, (size_t)pp, sizeof *k.end);
	k.mid = lw_calloc(w, (size_t)pp, sizeof *k.mid);
	k.busy = lw_calloc(w, (size_t)k.nw, sizeof *k.busy);
	k.todo = lw_calloc(w, (size_t)k.nw, sizeof *k.todo);
	k.gphase = lw_calloc_int(w, (size_t)pp);
	k.opened = lw_calloc_int(w, (size_t)pp);
	k.run = lw_calloc(w, (size_t)pp, sizeof *k.run);
	k.run_line = lw_calloc_int(w, (size_t)pp);
	w->pend = lw_calloc(w, (size_t)pp, sizeof *w->pend);
	w->opc = lw_calloc(w, (size_t)pp, sizeof *w->opc);
	for (int q = 0; q < pp; q++) {
		PlanRank *rk = w->line0[q];
		w->opc[q] = (OpCursor){rk->ops, rk->ops + rk->nops, rk->ops + rk->ops_cap, rk->lines};
	}
	for (int p = 0; p < pp; p++) {
		k.gphase[p] = -1;
		if (sc->nacts[p]) {
			set_add(k.todo, p);
			k.ntodo++;
		}
	}
	for (;;) {
		walk_finish(w, &k);
		walk_comms(w, &k);
		for (int j = 0; j < k.nw; j++)
			for (uint64_t x = w->redset[j] & ~k.busy[j]; x; x &= x - 1) {
				int q = set_first(j, x);
				lw_flush_reductions(w, q, !k.ntodo, k.cur[q] >= sc->nacts[q]);
			}
		if (!k.ntodo)
			break;
		int64_t next = INT64_MAX; // the next action's end, or a waiting input's arrival
		walk_start(w, &k, &next);
		if (k.minend <= k.now) // an action that takes no time ends now
			continue;
		if (k.minend < next)
			next = k.minend;
		if (next < PLAN_TIME_MAX) {
			k.now = next;
			continue;
		}
		if (next < INT64_MAX) { // the clock reached what it counts: refused below
			k.now = next;
			break;
		}
		if (!allow_deadlock) {
			if (!lw_check_local_order(w)) // else it said why
				lw_report_stall(w, k.cur);
			rc = -1;
			break;
		}
		lw_rest_naively(w, k.cur);
		break;
	}
	if (!rc && k.now >= PLAN_TIME_MAX) { // the clock saturated: pipesim would refuse it
		diag_error(w->diag, w->pr->sched_loc,
		           "the schedule's step takes more than 2^62 ns (146 years) at the stages' "
		           "costs, more than its times can be counted in: shorten the costs");
		rc = -1;
	}
	sync_ops(w);
	free(w->opc);
	w->opc = NULL;
	free(k.cur);
	free(k.end);
	free(k.mid);
	free(k.busy);
	free(k.todo);
	free(k.gphase);
	free(k.opened);
	free(k.run);
	free(k.run_line);
	for (int q = 0; q < pp; q++)
		free(w->pend[q].v);
	free(w->pend);
	w->pend = NULL;
	return rc;
}
