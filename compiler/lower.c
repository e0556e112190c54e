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
#include "../plan/par.h"
#include "../plan/tfcount.h"
#include "../plan/block.h"
#include "../plan/oom.h"
#include "../plan/tie.h"
#include "../plan/line.h"
#include "../plan/tp.h"
#include "../plan/sizes.h"

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

int *lw_calloc_int(const Lw *w, size_t n)
{
	return lw_calloc(w, n + 1, sizeof(int));
}

/* Full recomputation (docs/semantics.md "Memory") of the stage's span
 * (plan_recompute_span: its residual bodies, or every layer): F keeps the span's input
 * and what the layers outside it save, B re-runs F over the span (its share of the
 * stage's F FLOPs adds that much of f to b), rebuilding the rest of what F saved there
 * (save_re), and keeps what W needs of it from B to W. */
static void recompute_stage(Plan *p, int s, const LayerShape *sh)
{
	PlanStage *st = &p->stages[s];
	int lo, hi;
	plan_recompute_span(st, &lo, &hi);
	int64_t in = plan_layer_in_bytes(p, s, lo), fb = 0, fw = 0;
	double fl = 0, span = 0;
	for (int l = 0; l < st->nlayers; l++) {
		LayerCost c = plan_layer_figures_tp(&st->layers[l], sh, p->dims[DIM_TP]);
		fl += c.flops[0];
		if (l >= lo && l < hi) {
			fb += c.save_fb;
			fw += c.save_fw;
			span += c.flops[0];
		}
	}
	int all = lo == 0 && hi == st->nlayers;
	st->recompute = PLAN_RECOMPUTE_FULL;
	st->save_re = fb + fw - in;
	st->save_bw += fw;
	st->save_fb += in - fb;
	st->save_fw -= fw;
	st->cost[1] += all || !(fl > 0) ? st->cost[0] : llround((double)st->cost[0] * span / fl);
}

/* Selective recomputation (docs/semantics.md "Memory"): F drops the stage's attention
 * probabilities (save_re bytes, out of save_fw; with dropout=P their mask and dropped
 * copy too: the layer table's rebuilt tensors), B rebuilds them first (scale q k^T and
 * the softmax, one of F's two S x S products per head: its share of the stage's F
 * FLOPs adds that much of f to b; the dropout is elementwise) and frees them with what
 * only it needs.  A flash attention layer keeps no probabilities: it adds nothing.  The
 * figures are one tp rank's, as fill_stages' are: its heads' probabilities, and its
 * share of the product over its share of F's FLOPs (its heads are its own, so the
 * rebuild needs no communication). */
static void selective_stage(Plan *p, int s, const LayerShape *sh)
{
	PlanStage *st = &p->stages[s];
	int tp = p->dims[DIM_TP];
	double fl = 0, core = 0;
	int64_t probs = 0;
	for (int l = 0; l < st->nlayers; l++) {
		const PlanLayer *ly = &st->layers[l];
		fl += plan_layer_figures_tp(ly, sh, tp).flops[0];
		probs = sat_add(probs, plan_layer_rebuilt_bytes(ly, sh, tp));
		core += plan_layer_rebuild_flops(ly, sh, tp);
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
	p->vocab_real = pr->vocab_real;
	p->optim = pr->optim;
	p->prec = pr->prec;
	p->sp = pr->sp;
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
		st->optim = ps->optim;
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
			st->params = sat_add(st->params, lc.params); // the checker bounds the sums
			st->save_fb = sat_add(st->save_fb, lc.save_fb);
			st->save_fw = sat_add(st->save_fw, lc.save_fw);
			st->save_bw = sat_add(st->save_bw, lc.save_bw);
		}
		int mode = prog_recompute(pr, s);
		st->recompute_res = prog_recompute_residuals(pr, s);
		if (mode == PLAN_RECOMPUTE_FULL)
			recompute_stage(p, s, &shape);
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
		ed->bytes = plan_stage_out_bytes(p, ed->src);
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

/* What the walk reads per action, laid out for it: per stage the tensors its actions
 * make for other ranks (push_outputs), what each kind of action costs, and its line. */
static void fill_made(Lw *w)
{
	const Plan *p = w->plan;
	const int *stage_pp = w->sc->stage_pp;
	w->made = lw_calloc(w, (size_t)w->ne * 2 + 1, sizeof *w->made);
	w->made_off = lw_calloc_int(w, 2 * (size_t)w->ns + 1);
	w->acost = lw_calloc(w, (size_t)w->ns * OP_COUNT + 1, sizeof *w->acost);
	w->stage_line = lw_calloc_int(w, (size_t)w->ns);
	int n = 0;
	for (int s = 0; s < w->ns; s++) {
		w->made_off[2 * s] = n;
		for (int j = w->out_off[s]; j < w->out_off[s + 1]; j++) {
			int e = w->out_e[j];
			if (w->remote_k[e] >= 0)
				w->made[n++] = (Out){e, 0, DIR_ACT, stage_pp[p->edges[e].dst], 0};
		}
		w->made_off[2 * s + 1] = n;
		for (int j = w->in_off[s]; j < w->in_off[s + 1]; j++) {
			int e = w->in_e[j];
			if (w->remote_k[e] >= 0)
				w->made[n++] = (Out){e, 0, DIR_GRAD, stage_pp[p->edges[e].src], 0};
		}
		for (int k = 0; k < OP_COUNT; k++)
			w->acost[(size_t)s * OP_COUNT + k] = plan_op_cost((OpKind)k, p->stages[s].cost);
		w->stage_line[s] = w->pr->stages[s].loc.line;
	}
	w->made_off[2 * w->ns] = n;
}

/* Sizes the first line's op arrays exactly, so no array grows while lowering: each
 * action brings itself and one op per remote edge it receives or sends on.  And decides
 * where the ops' source lines go: a schedule pipecc generated puts every op at its
 * stage's line, or its tensor's maker's (plan_stage_line), which the plan then says
 * once (lines_by_stage) instead of 4 bytes an op; actions a custom schedule wrote keep
 * their own lines, and so does an order rested naively under --allow-deadlock (its
 * RECVs take the line of the action that waits for them). */
static void reserve_ops(Lw *w, int allow_deadlock)
{
	const SchedCtx *sc = w->sc;
	Plan *p = w->plan;
	int dp = p->dims[DIM_DP];
	int *remote_in = lw_calloc_int(w, (size_t)w->ns), *remote_out = lw_calloc_int(w, (size_t)w->ns);
	for (int e = 0; e < w->ne; e++)
		if (w->remote_k[e] >= 0) {
			remote_in[p->edges[e].dst]++;
			remote_out[p->edges[e].src]++;
		}
	int64_t *need = lw_calloc(w, (size_t)w->pp, sizeof *need), total = 0;
	int written = 0; // actions with a line of their own
	for (int q = 0; q < w->pp; q++) {
		int64_t n = 0;
		for (int i = 0; i < sc->nacts[q]; i++) {
			const SchedAct *a = &sc->acts[q][i];
			n++;
			written |= sc->locs && sched_loc(sc, q, a).line;
			if (plan_ops[a->kind].needs & (PLAN_DEP_IN_ACT | PLAN_DEP_OUT_GRAD))
				n += remote_in[a->stage] + remote_out[a->stage];
		}
		for (int s = 0; s < w->ns; s++)
			n += (p->stages[s].pp == q) * (1 + (dp > 1) + (plan_sp_bytes(p, s) > 0));
		need[q] = n;
		total += n;
	}
	w->oom->ops = total * (plan_mesh_world(p) / w->pp); // every pipeline line runs the same lists
	p->lines_by_stage = !written && !allow_deadlock;
	size_t failed = plan_block_ops(p, w->line0, need, w->pp, !p->lines_by_stage); // one block
	if (failed)
		lw_oom(w, failed);
	if (plan_threads > 1) { // a task pages the lists in ahead of the walk (par.h)
		void **arr = lw_calloc(w, 2 * (size_t)w->pp, sizeof *arr);
		size_t *bytes = lw_calloc(w, 2 * (size_t)w->pp, sizeof *bytes);
		for (int q = 0; q < w->pp; q++) {
			arr[2 * q] = w->line0[q]->ops;
			arr[2 * q + 1] = w->line0[q]->lines;
			bytes[2 * q] = (size_t)need[q] * sizeof(PlanOp);
			bytes[2 * q + 1] = w->line0[q]->lines ? (size_t)need[q] * sizeof(int32_t) : 0;
		}
		w->prefault = par_prefault(arr, bytes, 2 * w->pp);
		free(arr);
		free(bytes);
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
	if (p->world == w->pp)
		return; // one line
	/* Their arrays in one block, sized by line 0's counts. */
	int64_t *n = lw_calloc(w, (size_t)p->world, sizeof *n + sizeof(PlanRank *));
	PlanRank **rks = (PlanRank **)(n + p->world);
	int nr = 0, lines = 0;
	for (int r = 0; r < p->world; r++) {
		const PlanRank *src = w->line0[p->ranks[r].coord[DIM_PP]];
		if (&p->ranks[r] != src) {
			rks[nr] = &p->ranks[r];
			n[nr++] = src->nops;
			lines |= src->lines != NULL;
		}
	}
	size_t failed = plan_block_ops(p, rks, n, nr, lines);
	free(n);
	if (failed)
		lw_oom(w, failed);
	for (int r = 0; r < p->world; r++) {
		PlanRank *rk = &p->ranks[r];
		int q = rk->coord[DIM_PP], l = plan_line_of_base(p, r - q * w->stride);
		const PlanRank *src = w->line0[q];
		if (rk == src)
			continue;
		int base = (int)(rk - p->ranks) - (int)(src - p->ranks); // line 0 starts at rank 0
		rk->nops = src->nops;
		memcpy(rk->ops, src->ops, (size_t)src->nops * sizeof *rk->ops);
		if (src->lines)
			memcpy(rk->lines, src->lines, (size_t)src->nops * sizeof *rk->lines);
		else
			rk->lines = NULL;
		for (int64_t i = 0; i < rk->nops; i++) {
			PlanOp *o = &rk->ops[i];
			if (plan_op_has_peer(o->kind))
				o->peer += base;
			if (plan_op_is_p2p(o->kind))
				o->route += (int)(route_shift * l);
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
	par_join(w->prefault); // out of memory in the walk: it may still run
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
	free(w->opc);
	free(w->made);
	free(w->made_off);
	free(w->acost);
	free(w->stage_line);
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
		char t[512];
		fprintf(d->out, "pipecc: %s\n", plan_oom_text(t, sizeof t, 0, sizeof *w));
		d->nerrors++;
		d->noom++;
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
		char t[512];
		fprintf(d->out, "pipecc: %s\n", plan_oom_text(t, sizeof t, oom->ops, oom->failed));
		d->nerrors++;
		d->noom++;
		lw_free(w);
		plan_free(p);
		free(oom);
		return NULL;
	}
	p->name = strdup(pr->name);
	p->source = strdup(pr->file);
	p->schedule = strdup(pr->schedule);
	p->tuned_overlap = (uint8_t)(tune_overlap != 0);
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
	/* Nodes as the program states them (tp > 1 places its groups on the default node
	 * as it always did); otherwise every rank is apart and talks over `link`. */
	p->per_node = pr->nodes_stated || pr->dims[DIM_TP] > 1 ? prog_node_size(pr) : 0;
	p->node_latency_ns = pr->link_ideal ? 0 : pr->node_latency_ns;
	p->node_bandwidth = pr->node_bandwidth;
	p->coll_algo = pr->coll_algo;
	fill_stages(w);
	fill_edges(w);
	w->line = line && line_ok(pr, p);

	fill_ranks(w);
	fill_made(w);
	reserve_ops(w, allow_deadlock);
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
	/* An order in which a rank needs what it runs later gets its own error.  The walk
	 * stalls on such an order and checks it then (a pass over every action: 5 % of a
	 * large lowering); with --allow-deadlock it would rest the order naively
	 * instead, so it is checked first. */
	int rc = allow_deadlock && lw_check_local_order(w) ? -1 : lw_place_comms(w, allow_deadlock);
	par_join(w->prefault); // before any list may move
	w->prefault = NULL;
	if (rc == 0 && sc->comms) // a CSV's own communication order
		rc = lower_given(p, sc, w->stride, d);
	if (rc == 0) {
		expand_tp(w);
		if (plan_sizes_canon(p)) // before the other lines copy line 0's
			lw_oom(w, (size_t)p->nsizes * 12);
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
