/* Lowering: a checked program plus a schedule (compute order per pipeline index)
 * becomes a plan: stages with memory figures, edges, routes, peer tables and per world
 * rank an op list with all communication inserted.
 *
 * Communication is placed by walking one pipeline line in simulated time, actions
 * taking their costs.  At each event time, finished actions make their outputs
 * available; then every produced tensor whose producer and consumer are both between
 * actions moves: the producer gets a SEND and the consumer a RECV, appended in the same
 * step (with --tune=overlap a tensor moves as soon as it is produced, the RECV going
 * after the consumer's current action); a rank's ops of one step form one group; then
 * every idle rank whose next action has its inputs starts it.  Tuned for overlap, the
 * walk also follows the overlap model's comm streams (the link clock below): a received
 * tensor is usable when its group would complete, so the walk's times are the model's
 * and a receive never shares a group with a send whose data comes later.  A group
 * still waiting for its stream takes later steps' transfers of its rank while it is the
 * rank's last op (clock_open): posted at once with them, and with every group before
 * it complete by then, it keeps the argument below.  Executing the lists step
 * by step completes every group even under rendezvous sends, since each send's receive
 * is appended in the same step by a rank whose earlier ops need nothing later (whatever
 * the times that put it in that step): the lists are deadlock-free by construction, and FIFO order per pair follows from
 * appending both sides in the same order.  A stage's dp all-reduce and optimizer step
 * follow its last backward once the rank has sent what others wait for.  A stage holding
 * a copy of a table tied across pipeline ranks (plan_tie_across) waits until its rank
 * has run every action and sent everything: its TIEREDUCE with the other copy's rank
 * then waits for nothing either side still owes.  Every pipeline line runs the same
 * lists with its own ranks and routes, so the all-reduces line up.
 * Backward routes are the forward routes reversed; nothing else creates them (a stated
 * route, compiler/route.c, has made the ranks' devices agree and only lends its place).
 * With `peers self_send;` an edge between stages of one rank is sent like a remote one,
 * to self: it gets routes, `self` peer entries, and its SEND and RECV in one group (the
 * walk appends both in the same step; the naive lowering puts them together).
 *
 * An order in which a rank needs an action later in its own list is rejected first.
 * Any other order that stalls the walk is an error, or with --allow-deadlock is
 * lowered naively from the stall on, in a plan that still verifies (lower_rest_naively)
 * so that pipesim shows the cycle (lower_stall.c). */
#include "lower_int.h"
#include "../plan/mem.h"
#include "../plan/tfcount.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void lw_oom(const Lw *w, size_t bytes)
{
	w->oom->failed = bytes;
	longjmp(w->oom->jb, 1);
}

void *lw_calloc(const Lw *w, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		lw_oom(w, n * size);
	return p;
}

void *lw_malloc(const Lw *w, size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		lw_oom(w, bytes);
	return p;
}

void *lw_realloc(const Lw *w, void *old, size_t bytes)
{
	void *p = realloc(old, bytes ? bytes : 1);
	if (!p)
		lw_oom(w, bytes);
	return p;
}


void lw_pend_push(const Lw *w, Pending *q, Out o)
{
	if (q->n == q->cap) {
		q->cap = q->cap ? 2 * q->cap : 16;
		q->v = lw_realloc(w, q->v, (size_t)q->cap * sizeof *q->v);
	}
	q->v[q->n++] = o;
}

/* The next op of pipeline index pp's list on the first line, for the caller to fill:
 * in place, since reserve_ops sized the lists (a tied table's TIEREDUCE, which it does
 * not count, may grow one).  Filling the slot field by field, rather than copying a
 * PlanOp built elsewhere, keeps the walk's stores straight to the list. */
static inline PlanOp *next_op(Lw *w, int pp)
{
	PlanRank *rk = w->line0[pp];
	if (rk->nops < rk->ops_cap) {
		__builtin_prefetch(rk->ops + rk->nops + 16, 1); // 128 ranks' lists: too many
		return &rk->ops[rk->nops++];                   // streams for the hardware
	}
	PlanOp *o = plan_push_op(rk, (PlanOp){0});
	if (!o)
		lw_oom(w, (size_t)rk->ops_cap * sizeof *o * 3 / 2);
	return o;
}

/* A SEND or RECV on pipeline index pp of tensor (edge, mb, dir) with pipeline index
 * peer, in group g. */
static inline void emit_p2p(Lw *w, int pp, int kind, const Out *t, int peer, int g)
{
	PlanOp *o = next_op(w, pp);
	memset(o, 0, sizeof *o); // the padding too: the plan's bytes are all defined
	o->kind = (uint8_t)kind;
	o->dir = (uint8_t)t->dir;
	o->stage = t->edge;
	o->mb = t->mb;
	o->peer = peer * w->stride;
	o->group = g;
	o->route = 2 * w->remote_k[t->edge] + t->dir;
	o->src_line = t->line;
	o->bytes = w->plan->edges[t->edge].bytes;
}

/* Appends an op to pipeline index pp's list on the first line.  For SEND/RECV, `peer`
 * is the peer's pipeline index; the world rank and route are filled here (the first
 * line's ranks are q * stride, its routes come first). */
static inline void emit(Lw *w, int pp, PlanOp op)
{
	if (op.kind == OP_SEND || op.kind == OP_RECV) {
		op.peer = op.peer * w->stride;
		op.route = 2 * w->remote_k[op.stage] + op.dir;
		op.bytes = w->plan->edges[op.stage].bytes;
	} else if (op.kind == OP_ALLREDUCE) {
		op.bytes = w->plan->stages[op.stage].params * 4;
	} else if (op.kind == OP_TIEREDUCE) {
		op.peer = op.peer * w->stride;
		op.bytes = plan_tie_bytes(w->plan);
	}
	*next_op(w, pp) = op;
}

void lw_emit(Lw *w, int pp, PlanOp op)
{
	emit(w, pp, op);
}

int *lw_calloc_int(const Lw *w, size_t n)
{
	return lw_calloc(w, n + 1, sizeof(int));
}

/* Recomputation (docs/semantics.md "Memory"): F keeps only the stage input, B re-runs
 * F (its cost adds to B's), rebuilding the rest of what F saved (save_re), and keeps
 * what W needs from B to W. */
static void recompute_stage(Plan *p, int s)
{
	PlanStage *st = &p->stages[s];
	int64_t in = plan_stage_in_bytes(p, s);
	st->recompute = PLAN_RECOMPUTE_FULL;
	st->save_re = st->save_fb + st->save_fw - in;
	st->save_bw += st->save_fw;
	st->save_fb = in;
	st->save_fw = 0;
	st->cost[1] += st->cost[0];
}

/* Selective recomputation (docs/semantics.md "Memory"): F drops the stage's attention
 * probabilities (save_re bytes, out of save_fw), B rebuilds them first (scale q k^T
 * and the softmax, one of F's two S x S products per head: its share of the stage's F
 * FLOPs adds that much of f to b) and frees them with what only it needs. */
static void selective_stage(Plan *p, int s, const LayerShape *sh)
{
	PlanStage *st = &p->stages[s];
	double fl = 0, core = 0;
	int64_t probs = 0;
	for (int l = 0; l < st->nlayers; l++) {
		const PlanLayer *ly = &st->layers[l];
		fl += plan_layer_figures_tp(ly, sh, 1).flops[0];
		if (ly->kind != LAYER_ATTN)
			continue;
		TkAttn a = plan_layer_attn(ly, sh);
		probs += tk_attn_p_elems(&a) * 4;
		core += 2.0 * (double)(a.B * a.H * a.S * a.S) * (double)(a.d / a.H);
	}
	st->recompute = PLAN_RECOMPUTE_SELECTIVE;
	st->save_re = probs;
	st->save_fw -= probs;
	st->cost[1] += fl > 0 ? llround((double)st->cost[0] * core / fl) : 0;
}

static void fill_stages(Lw *w)
{
	const Program *pr = w->pr;
	Plan *p = w->plan;
	p->stages = lw_calloc(w, (size_t)pr->nstages, sizeof *p->stages);
	p->nstages = pr->nstages; // after the array, so plan_free can follow an early stop
	p->seq = pr->seq;
	p->vocab = pr->vocab;
	p->optim = pr->optim;
	LayerShape shape = plan_shape(p);
	int es = -1; // the embedding's stage: a head tied to it on another rank keeps a copy
	for (int s = 0; s < pr->nstages && es < 0; s++)
		for (int l = 0; l < pr->stages[s].nlayers && es < 0; l++)
			if (pr->stages[s].layers[l].kind == LAYER_EMBED)
				es = s;
	for (int s = 0; s < pr->nstages; s++) {
		const ProgStage *ps = &pr->stages[s];
		PlanStage *st = &p->stages[s];
		st->name = strdup(ps->name);
		st->pp = w->sc->stage_pp[s];
		st->in = ps->in;
		st->out = ps->out;
		memcpy(st->cost, ps->cost, sizeof st->cost);
		st->loc = (PlanLoc){ps->loc.line, ps->loc.col};
		st->nlayers = ps->nlayers;
		st->layers = lw_calloc(w, (size_t)ps->nlayers, sizeof *st->layers);
		if (!st->name)
			lw_oom(w, strlen(ps->name) + 1);
		for (int l = 0; l < ps->nlayers; l++) {
			const ProgLayer *ly = &ps->layers[l];
			st->layers[l] = prog_plan_layer(ly);
			if (ly->kind == LAYER_HEAD && (ly->flags & LAYER_FLAG(LAYER_KEY_TIED)) && es >= 0 &&
			    w->sc->stage_pp[es] != st->pp)
				st->layers[l].flags |= LAYER_FLAG(LAYER_KEY_COPY);
			LayerCost lc = plan_layer_figures_tp(&st->layers[l], &shape, p->dims[DIM_TP]);
			st->params += lc.params;
			st->save_fb += lc.save_fb;
			st->save_fw += lc.save_fw;
			st->save_bw += lc.save_bw;
		}
		int mode = prog_recompute(pr, s);
		if (mode == PLAN_RECOMPUTE_FULL)
			recompute_stage(p, s);
		else if (mode == PLAN_RECOMPUTE_SELECTIVE)
			selective_stage(p, s, &shape);
	}
}

static void fill_edges(Lw *w)
{
	const Program *pr = w->pr;
	Plan *p = w->plan;
	p->nedges = pr->nstages - 1 + pr->nskips;
	p->edges = lw_calloc(w, (size_t)p->nedges + 1, sizeof *p->edges);
	for (int s = 0; s + 1 < pr->nstages; s++)
		p->edges[s] = (PlanEdge){.src = s, .dst = s + 1, .loc = p->stages[s + 1].loc};
	for (int k = 0; k < pr->nskips; k++) {
		const ProgSkip *sk = &pr->skips[k];
		p->edges[pr->nstages - 1 + k] = (PlanEdge){
			.src = sk->src, .dst = sk->dst, .skip = 1, .loc = {sk->loc.line, sk->loc.col}};
	}
	w->ne = p->nedges;
	w->in_off = lw_calloc_int(w, (size_t)w->ns + 1);
	w->out_off = lw_calloc_int(w, (size_t)w->ns + 1);
	w->in_e = lw_calloc_int(w, (size_t)w->ne);
	w->out_e = lw_calloc_int(w, (size_t)w->ne);
	for (int e = 0; e < w->ne; e++) {
		PlanEdge *ed = &p->edges[e];
		ed->bytes = (int64_t)pr->rows * p->stages[ed->src].out * 4;
		w->in_off[ed->dst + 1]++;
		w->out_off[ed->src + 1]++;
	}
	for (int s = 0; s < w->ns; s++) {
		w->in_off[s + 1] += w->in_off[s];
		w->out_off[s + 1] += w->out_off[s];
	}
	int *fi = lw_calloc_int(w, (size_t)w->ns), *fo = lw_calloc_int(w, (size_t)w->ns);
	for (int e = 0; e < w->ne; e++) {
		int a = p->edges[e].src, b = p->edges[e].dst;
		w->out_e[w->out_off[a] + fo[a]++] = e;
		w->in_e[w->in_off[b] + fi[b]++] = e;
	}
	free(fi);
	free(fo);
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
 * out-edges, a backward's gradients along its in-edges. */
void lw_push_outputs(const Lw *w, int pp, const SchedAct *a, int line, Pending *q)
{
	(void)pp;
	const PlanEdge *E = w->plan->edges;
	const int *stage_pp = w->sc->stage_pp;
	uint16_t makes = plan_ops[a->kind].makes;
	for (int j = w->out_off[a->stage]; (makes & PLAN_DEP_ACT) && j < w->out_off[a->stage + 1];
	     j++) {
		int e = w->out_e[j];
		if (w->remote_k[e] >= 0)
			lw_pend_push(w, q, (Out){e, a->mb, DIR_ACT, stage_pp[E[e].dst], line});
	}
	for (int j = w->in_off[a->stage]; (makes & PLAN_DEP_GRAD) && j < w->in_off[a->stage + 1];
	     j++) {
		int e = w->in_e[j];
		if (w->remote_k[e] >= 0)
			lw_pend_push(w, q, (Out){e, a->mb, DIR_GRAD, stage_pp[E[e].src], line});
	}
}

/* What a finished compute action makes available, and the reduction and optimizer
 * step after a stage's last weight gradient. */
void lw_finish_compute(Lw *w, int pp, const SchedAct *a, int line)
{
	uint16_t makes = plan_ops[a->kind].makes;
	*lw_done(w, a->stage, a->mb) |= makes & PLAN_DEP_MB;
	lw_push_outputs(w, pp, a, line, &w->pend[pp]);
	if (w->pend[pp].n)
		set_add(w->pendset, pp);
	if ((makes & PLAN_DEP_WGRAD) && --w->left[a->stage] == 0)
		w->reduce[w->nreduce[pp]++ + (size_t)pp * w->ns] = a->stage;
	/* A tied head's weight gradient adds into its embedding's (plan_tie). */
	if ((makes & PLAN_DEP_WGRAD) && a->stage == w->tie_head && --w->left[w->tie_embed] == 0)
		w->reduce[w->nreduce[pp]++ + (size_t)pp * w->ns] = w->tie_embed;
	if (w->nreduce[pp])
		set_add(w->redset, pp);
}


/* The dp all-reduce and optimizer step of stages whose backward is done, once the
 * rank has sent what it still owed others (so the gradient a neighbour waits for does
 * not queue behind a reduction).  A stage holding a copy of a table tied across
 * pipeline ranks waits until its rank has `finished` every action (Megatron sums the
 * embedding group's gradients after the whole backward): its TIEREDUCE, a rendezvous
 * with the other copy's rank, then comes after every transfer either rank owes, and
 * before the stage's all-reduce and step. */
void lw_flush_reductions(Lw *w, int pp, int force, int finished)
{
	if (!w->nreduce[pp] || (w->pend[pp].n && !force))
		return;
	int dp = w->plan->dims[DIM_DP], keep = 0;
	for (int i = 0; i < w->nreduce[pp]; i++) {
		int s = w->reduce[(size_t)pp * w->ns + i];
		int line = w->pr->stages[s].loc.line;
		if (s == w->tie_stage[pp] && !finished) {
			w->reduce[(size_t)pp * w->ns + keep++] = s;
			continue;
		}
		if (s == w->tie_stage[pp])
			emit(w, pp, (PlanOp){.kind = OP_TIEREDUCE, .stage = s, .mb = -1,
			                     .peer = w->tie_peer[pp], .group = w->group[pp]++, .route = -1,
			                     .src_line = line});
		if (dp > 1)
			emit(w, pp, (PlanOp){.kind = OP_ALLREDUCE, .stage = s, .mb = -1, .peer = -1,
			                     .group = w->group[pp]++, .route = -1, .src_line = line});
		emit(w, pp, (PlanOp){.kind = OP_OPTIM, .stage = s, .mb = -1, .peer = -1, .group = -1,
		                     .route = -1, .src_line = line});
	}
	w->nreduce[pp] = keep;
	if (!keep)
		set_del(w->redset, pp);
}

void lw_start_compute(Lw *w, int pp, const SchedAct *a, int line)
{
	PlanOp *o = next_op(w, pp);
	memset(o, 0, sizeof *o);
	o->kind = (uint8_t)a->kind;
	o->stage = a->stage;
	o->mb = a->mb;
	o->peer = o->group = o->route = -1;
	o->src_line = line;
}

static int64_t act_cost(const Lw *w, const SchedAct *a)
{
	return plan_op_cost(a->kind, w->plan->stages[a->stage].cost);
}

int lw_src_line_of(const Lw *w, const SchedAct *a)
{
	return a->loc.line ? a->loc.line : w->pr->stages[a->stage].loc.line;
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
 * queueing a new one behind it: they start no later, and run together.  Returns the
 * group number for rank r's ops of this step.  When transfers take no time (w->timed
 * 0), every group completes the moment it starts, which is now: only the start of each
 * rank's last group is kept. */
static int clock_open(Lw *w, int r, int64_t now)
{
	const PlanRank *rk = w->line0[r];
	const PlanOp *last = rk->nops ? &rk->ops[rk->nops - 1] : NULL;
	int g = w->glast[r];
	if (w->overlap && g && w->gstart[r] >= now && last &&
	    (last->kind == OP_SEND || last->kind == OP_RECV))
		return last->group;
	int64_t free = w->timed ? w->gend[g] : 0;
	w->glast[r] = ++w->ngroups;
	w->gstart[r] = free > now ? free : now;
	if (w->timed)
		w->gend[w->ngroups] = w->gstart[r];
	return w->group[r]++;
}

static void clock_move(Lw *w, int q, int to, size_t t, int64_t bytes)
{
	int64_t x = plan_transfer_ns(w->plan, bytes); // <= INT64_MAX / 4
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
	int64_t minend;      // the earliest end of a busy rank; INT64_MAX when none is
	int nw;              // words of a rank set
	uint64_t *busy;      // ranks computing
	uint64_t *todo;      // ranks with actions left
	int ntodo;
	int *gphase;         // per rank: its group number this step, or -1
	int *opened, nopened; // the ranks with a group this step
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
			if (k->end[p] > k->now) {
				minend = k->end[p] < minend ? k->end[p] : minend;
				continue;
			}
			const SchedAct *a = &sc->acts[p][k->cur[p]];
			lw_finish_compute(w, p, a, lw_src_line_of(w, a));
			if (++k->cur[p] == sc->nacts[p]) {
				set_del(k->todo, p);
				k->ntodo--;
			}
			set_del(k->busy, p);
		}
	k->minend = minend;
}

/* Rank r's group of this step (clock_open the first time). */
static int walk_group(Lw *w, Walk *k, int r)
{
	if (k->gphase[r] < 0) {
		k->gphase[r] = clock_open(w, r, k->now);
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
			int64_t at = inputs_at(w, a);
			if (at < 0 || at > k->now) {
				if (at > k->now && at < *next)
					*next = at;
				continue;
			}
			lw_start_compute(w, p, a, lw_src_line_of(w, a));
			set_add(k->busy, p);
			k->end[p] = k->now + act_cost(w, a);
			k->minend = k->end[p] < k->minend ? k->end[p] : k->minend;
		}
}

/* The walk described at the top: time advances by the actions' costs; at each event
 * time, first every produced tensor whose consumer waits for it moves (both ranks being
 * between actions), then every idle rank whose next action has its inputs starts it.
 * A step after which no action ends by now changes nothing more at this time (the
 * tensors left wait for ranks still busy, the idle ranks for inputs still missing), so
 * time advances at once: to the earliest end of a busy rank or arrival of an input. */
static int place_comms(Lw *w, int allow_deadlock)
{
	const SchedCtx *sc = w->sc;
	int pp = w->pp, rc = 0;
	Walk k = {.minend = INT64_MAX, .nw = (pp + 63) / 64};
	k.cur = lw_calloc(w, (size_t)pp, sizeof *k.cur);
	k.end = lw_calloc(w, (size_t)pp, sizeof *k.end);
	k.busy = lw_calloc(w, (size_t)k.nw, sizeof *k.busy);
	k.todo = lw_calloc(w, (size_t)k.nw, sizeof *k.todo);
	k.gphase = lw_calloc_int(w, (size_t)pp);
	k.opened = lw_calloc_int(w, (size_t)pp);
	w->pend = lw_calloc(w, (size_t)pp, sizeof *w->pend);
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
		if (next < INT64_MAX) {
			k.now = next;
			continue;
		}
		if (!allow_deadlock) {
			lw_report_stall(w, k.cur);
			rc = -1;
			break;
		}
		lw_rest_naively(w, k.cur);
		break;
	}
	free(k.cur);
	free(k.end);
	free(k.busy);
	free(k.todo);
	free(k.gphase);
	free(k.opened);
	for (int q = 0; q < pp; q++)
		free(w->pend[q].v);
	free(w->pend);
	w->pend = NULL;
	return rc;
}

/* The peer-table kind of an edge end on rank r whose other end is on rank q. */
static uint8_t peer_kind(const Lw *w, int q, int r)
{
	return q != r ? PEER_REMOTE : w->self_send ? PEER_SELF : PEER_LOCAL;
}

/* Ranks, routes and peer tables, before any op: per pipeline line, per remote edge, a
 * forward route and its inverse.  Line l's routes are [2 * nremote * l, ...).  A line
 * plan gets the first line only: pp ranks, indexed by pipeline index (their coordinates
 * and devices those of world ranks q * stride), and nothing sized by the world. */
static void fill_ranks(Lw *w)
{
	const Program *pr = w->pr;
	Plan *p = w->plan;
	int world = p->world, pp = w->pp;
	int nlines = world / pp, nr = w->line ? pp : world;
	w->remote_k = lw_calloc_int(w, (size_t)w->ne);
	for (int e = 0; e < w->ne; e++)
		w->remote_k[e] = w->self_send || p->stages[p->edges[e].src].pp != p->stages[p->edges[e].dst].pp
		                     ? w->nremote++
		                     : -1;
	/* A line's rank at pipeline index q sits q strides after its rank at index 0 (in
	 * p->ranks, q places on a line plan). */
	int wstride = plan_pp_stride(p), stride = w->line ? 1 : wstride;
	w->stride = stride;
	p->ranks = lw_calloc(w, (size_t)nr, sizeof *p->ranks);
	if (w->line) { // the plan is a line plan from here on (p->ranks has its size)
		p->world = pp;
		p->line = 1;
		p->dev_per_node = pr->device_per_node > 0 ? pr->device_per_node : 1;
	}
	p->nroutes = 2 * w->nremote * (w->line ? 1 : nlines);
	p->routes = lw_calloc(w, (size_t)p->nroutes + 1, sizeof *p->routes);
	w->line0 = lw_calloc(w, (size_t)pp, sizeof *w->line0);
	for (int i = 0; i < nr; i++) {
		PlanRank *rk = &p->ranks[i];
		int r = w->line ? i * wstride : i; // its world rank
		plan_mesh_coords(p, r, rk->coord);
		rk->device = pr->ndevices ? pr->devices[r]
		                          : r % (pr->device_per_node > 0 ? pr->device_per_node : 1);
	}
	for (int q = 0; q < pp; q++)
		w->line0[q] = &p->ranks[q * stride];
	for (int r = 0, l = 0; r < nr; r++) { // on a line plan, only index 0 is at pipeline index 0
		if (p->ranks[r].coord[DIM_PP] != 0)
			continue;
		for (int e = 0; e < w->ne; e++) {
			if (w->remote_k[e] < 0)
				continue;
			const PlanEdge *ed = &p->edges[e];
			int a = r + p->stages[ed->src].pp * stride, b = r + p->stages[ed->dst].pp * stride;
			int fi = 2 * w->nremote * l + 2 * w->remote_k[e];
			p->routes[fi] = (PlanRoute){.edge = e, .dir = DIR_ACT, .src_rank = a, .dst_rank = b,
			                            .src_dev = p->ranks[a].device,
			                            .dst_dev = p->ranks[b].device, .inverse_of = -1};
			/* The backward route is derived, never stated: the forward one reversed. */
			const PlanRoute *f = &p->routes[fi];
			p->routes[fi + 1] = (PlanRoute){.edge = e, .dir = DIR_GRAD, .src_rank = f->dst_rank,
			                                .dst_rank = f->src_rank, .src_dev = f->dst_dev,
			                                .dst_dev = f->src_dev, .inverse_of = fi};
		}
		l++;
	}
	/* Routes the program states (route_check made them agree with the ones above)
	 * carry their statement's place, in either direction. */
	for (int i = 0; i < pr->nroutes; i++) {
		const ProgRoute *st = &pr->routes[i];
		int r0 = st->rank[0], c[DIM_COUNT];
		if (st->edge < 0 || w->remote_k[st->edge] < 0)
			continue;
		plan_mesh_coords(p, r0, c); // on a line plan, line_ok kept stated routes on line 0
		int l = plan_line_of_base(p, r0 - c[DIM_PP] * wstride);
		int fi = 2 * w->nremote * l + 2 * w->remote_k[st->edge] + st->dir;
		p->routes[fi].loc = (PlanLoc){st->loc.line, st->loc.col};
	}
	for (int r = 0; r < nr; r++) {
		PlanRank *rk = &p->ranks[r];
		int q = rk->coord[DIM_PP], base = r - q * stride;
		int n = 0;
		for (int e = 0; e < w->ne; e++)
			n += (p->stages[p->edges[e].src].pp == q) + (p->stages[p->edges[e].dst].pp == q);
		rk->peers = lw_calloc(w, (size_t)n + 1, sizeof *rk->peers);
		for (int s = 0; s < w->ns; s++) {
			if (p->stages[s].pp != q)
				continue;
			for (int j = w->in_off[s]; j < w->in_off[s + 1]; j++) {
				int e = w->in_e[j], o = p->edges[e].src, pr2 = base + p->stages[o].pp * stride;
				rk->peers[rk->npeers++] = (PlanPeer){.stage = s, .edge = e, .in = 1,
				                                     .peer_stage = o, .peer_rank = pr2,
				                                     .local = peer_kind(w, pr2, r)};
			}
			for (int j = w->out_off[s]; j < w->out_off[s + 1]; j++) {
				int e = w->out_e[j], o = p->edges[e].dst, pr2 = base + p->stages[o].pp * stride;
				rk->peers[rk->npeers++] = (PlanPeer){.stage = s, .edge = e, .in = 0,
				                                     .peer_stage = o, .peer_rank = pr2,
				                                     .local = peer_kind(w, pr2, r)};
			}
		}
	}
}

/* Sizes the first line's op arrays exactly, so no array grows while lowering: each
 * action brings itself and one op per remote edge it receives or sends on. */
static void reserve_ops(Lw *w)
{
	const SchedCtx *sc = w->sc;
	const Plan *p = w->plan;
	int dp = p->dims[DIM_DP];
	int *remote_in = lw_calloc_int(w, (size_t)w->ns), *remote_out = lw_calloc_int(w, (size_t)w->ns);
	for (int e = 0; e < w->ne; e++)
		if (w->remote_k[e] >= 0) {
			remote_in[p->edges[e].dst]++;
			remote_out[p->edges[e].src]++;
		}
	int64_t *need = lw_calloc(w, (size_t)w->pp, sizeof *need), total = 0;
	for (int q = 0; q < w->pp; q++) {
		int64_t n = 0;
		for (int i = 0; i < sc->nacts[q]; i++) {
			const SchedAct *a = &sc->acts[q][i];
			n++;
			if (plan_ops[a->kind].needs & (PLAN_DEP_IN_ACT | PLAN_DEP_OUT_GRAD))
				n += remote_in[a->stage] + remote_out[a->stage];
		}
		for (int s = 0; s < w->ns; s++)
			n += (p->stages[s].pp == q) * (1 + (dp > 1));
		need[q] = n;
		total += n;
	}
	w->oom->ops = total * (plan_mesh_world(p) / w->pp); // every pipeline line runs the same lists
	for (int q = 0; q < w->pp; q++) {
		PlanRank *rk = w->line0[q];
		rk->ops = lw_malloc(w, (size_t)(need[q] ? need[q] : 1) * sizeof *rk->ops);
		rk->ops_cap = need[q];
	}
	free(need);
	free(remote_in);
	free(remote_out);
}

/* Tensor parallelism: each line-0 rank's compute ops become their parts, with their
 * TPREDUCEs (plan_tp_expand, plan/tp.c).  The walk above placed whole actions; splitting
 * them afterwards changes no rank's order of transfers, and every member of a tp group
 * runs the same list, so rendezvous still holds. */
static void expand_tp(Lw *w)
{
	size_t failed = 0;
	for (int q = 0; q < w->pp && w->plan->dims[DIM_TP] > 1; q++)
		if (plan_tp_expand(w->plan, w->line0[q], &failed))
			lw_oom(w, failed);
}

/* Every other line runs the first line's lists with its own ranks and routes. */
static void copy_lines(Lw *w)
{
	Plan *p = w->plan;
	int64_t route_shift = 2 * (int64_t)w->nremote;
	for (int r = 0; r < p->world; r++) {
		PlanRank *rk = &p->ranks[r];
		int q = rk->coord[DIM_PP], l = plan_line_of_base(p, r - q * w->stride);
		const PlanRank *src = w->line0[q];
		if (rk == src)
			continue;
		int base = (int)(rk - p->ranks) - (int)(src - p->ranks); // line 0 starts at rank 0
		rk->ops = lw_malloc(w, (size_t)(src->nops ? src->nops : 1) * sizeof *rk->ops);
		rk->ops_cap = rk->nops = src->nops;
		memcpy(rk->ops, src->ops, (size_t)src->nops * sizeof *rk->ops);
		for (int64_t i = 0; i < rk->nops; i++) {
			PlanOp *o = &rk->ops[i];
			if (o->kind == OP_SEND || o->kind == OP_RECV) {
				o->peer += base;
				o->route += (int)(route_shift * l);
			}
			if (o->kind == OP_TIEREDUCE)
				o->peer += base;
		}
	}
}

/* Frees the walk state; on the out-of-memory path also the pending queues. */
/* Whether a line plan can say what this program's plan says: every rank's device follows
 * the one rule, w % per_node (whether or not a list or the routes stated it), and every
 * stated route is on the first line. */
static int line_ok(const Program *pr, const Plan *p)
{
	int dpn = pr->device_per_node > 0 ? pr->device_per_node : 1;
	for (int r = 0; r < pr->ndevices; r++) // stated, or picked by routes: the rule?
		if (pr->ndevices != p->world || pr->devices[r] != r % dpn)
			return 0;
	for (int i = 0; i < pr->nroutes; i++) {
		int c[DIM_COUNT];
		plan_coords_of(p, pr->routes[i].rank[0], c);
		if (c[DIM_DP] || c[DIM_TP])
			return 0;
	}
	return 1;
}

static void lw_free(Lw *w)
{
	for (int q = 0; w->pend && q < w->pp; q++)
		free(w->pend[q].v);
	free(w->pend);
	free(w->done);
	free(w->moved);
	free(w->gend);
	free(w->tgroup);
	free(w->glast);
	free(w->gstart);
	free(w->pendset);
	free(w->redset);
	free(w->left);
	free(w->reduce);
	free(w->nreduce);
	free(w->tie_stage);
	free(w->tie_peer);
	free(w->line0);
	free(w->group);
	free(w->remote_k);
	free(w->in_off);
	free(w->out_off);
	free(w->in_e);
	free(w->out_e);
	free(w);
}

Plan *lower_program(const Program *pr, const SchedCtx *sc, Diag *d, int allow_deadlock,
                    int tune_overlap, int line)
{
	/* The walk state is on the heap, not in this frame: longjmp leaves a local that
	 * changed after setjmp indeterminate, the heap object stays as the callees left it. */
	LwOom *oom = calloc(1, sizeof *oom);
	Lw *w = calloc(1, sizeof *w);
	Plan *p = plan_new();
	if (!oom || !w || !p) {
		char t[160];
		fprintf(d->out, "pipecc: %s\n", plan_oom_text(t, sizeof t, 0, sizeof *w));
		d->nerrors++;
		free(oom);
		free(w);
		plan_free(p);
		return NULL;
	}
	*w = (Lw){.oom = oom, .pr = pr, .sc = sc, .plan = p, .diag = d, .pp = sc->pp,
	          .m = sc->m, .ns = pr->nstages, .overlap = tune_overlap,
	          .self_send = pr->same_rank == SAME_RANK_SELF_SEND};
	for (int q = 0; q < sc->pp; q++) // compute actions: a first estimate of the plan size
		oom->ops += (int64_t)sc->nacts[q] * (pr->dims[DIM_DP] * pr->dims[DIM_TP]);
	if (setjmp(oom->jb)) {
		char t[160];
		fprintf(d->out, "pipecc: %s\n", plan_oom_text(t, sizeof t, oom->ops, oom->failed));
		d->nerrors++;
		lw_free(w);
		plan_free(p);
		free(oom);
		return NULL;
	}
	p->name = strdup(pr->name);
	p->source = strdup(pr->file);
	p->schedule = strdup(pr->schedule);
	if (!p->name || !p->source || !p->schedule)
		lw_oom(w, strlen(pr->file) + 1);
	for (int i = 0; i < DIM_COUNT; i++) {
		p->dim_order[i] = pr->dim_order[i];
		p->dims[i] = pr->dims[i];
	}
	p->world = pr->dims[DIM_PP] * pr->dims[DIM_DP] * pr->dims[DIM_TP];
	p->microbatches = sc->m;
	p->rows = pr->rows;
	p->cols = pr->cols;
	p->link_ideal = pr->link_ideal;
	p->latency_ns = pr->link_ideal ? 0 : pr->latency_ns;
	p->bandwidth = pr->link_ideal ? 0 : pr->bandwidth;
	p->per_node = prog_node_size(pr);
	p->node_latency_ns = pr->link_ideal ? 0 : pr->node_latency_ns;
	p->node_bandwidth = pr->node_bandwidth;
	fill_stages(w);
	fill_edges(w);
	w->line = line && line_ok(pr, p);

	fill_ranks(w);
	reserve_ops(w);
	w->group = lw_calloc_int(w, (size_t)w->pp);
	w->done = lw_calloc(w, (size_t)w->ns * w->m + 1, 1);
	w->moved = lw_calloc(w, (size_t)w->ne * w->m * 2 + 1, 1);
	w->timed = w->overlap && p->dims[DIM_TP] == 1 && !p->link_ideal;
	if (w->timed) {
		w->tgroup = lw_calloc_int(w, (size_t)w->ne * w->m * 2);
		w->gend = lw_calloc(w, (size_t)w->ne * w->m * 4 + 2, sizeof *w->gend); // a group per p2p op at most
	}
	w->glast = lw_calloc_int(w, (size_t)w->pp);
	w->gstart = lw_calloc(w, (size_t)w->pp + 1, sizeof *w->gstart);
	w->pendset = lw_calloc(w, (size_t)w->pp / 64 + 1, sizeof *w->pendset);
	w->redset = lw_calloc(w, (size_t)w->pp / 64 + 1, sizeof *w->redset);
	w->left = lw_calloc_int(w, (size_t)w->ns);
	w->reduce = lw_calloc_int(w, (size_t)w->ns * w->pp);
	w->nreduce = lw_calloc_int(w, (size_t)w->pp);
	for (int s = 0; s < w->ns; s++)
		w->left[s] = w->m;
	plan_tie(p, &w->tie_embed, &w->tie_head);
	if (w->tie_embed >= 0)
		w->left[w->tie_embed] += w->m;
	w->tie_stage = lw_calloc_int(w, (size_t)w->pp);
	w->tie_peer = lw_calloc_int(w, (size_t)w->pp);
	int te, th;
	int across = plan_tie_across(p, &te, &th);
	for (int q = 0; q < w->pp; q++) {
		int mine = !across ? -1 : q == p->stages[te].pp ? te : q == p->stages[th].pp ? th : -1;
		w->tie_stage[q] = mine;
		w->tie_peer[q] = mine < 0 ? -1 : p->stages[mine == te ? th : te].pp;
	}
	int rc = lw_check_local_order(w) ? -1 : place_comms(w, allow_deadlock);
	if (rc == 0 && sc->comms) // a CSV's own communication order
		rc = lower_given(p, sc, w->stride, d);
	if (rc == 0) {
		expand_tp(w);
		if (!w->line)
			copy_lines(w);
	}
	lw_free(w);
	free(oom);
	if (rc) {
		plan_free(p);
		return NULL;
	}
	return p;
}
