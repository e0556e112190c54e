/* Orders that cannot run as given: an action that needs a later action of its own rank
 * (looked for when the walk stalls, or before it with --allow-deadlock), the report of a walk that stalls, and the naive lowering
 * of what is left after a stall (--allow-deadlock), so that pipesim can show the cycle.
 * The walk itself is lower.c. */
#include "lower_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An action whose input comes from an action later on its own rank can never run,
 * whatever the other ranks do, and no plan can hold it (the verifier wants a rank's
 * inputs before their use): say so, with both actions.  Returns the number of errors
 * (0 or 1). */
int lw_check_local_order(Lw *w)
{
	const SchedCtx *sc = w->sc;
	const PlanEdge *E = w->plan->edges;
	int m = w->m;
	unsigned char *seen = lw_calloc(w, (size_t)w->ns * m + 1, 1);
	/* Per stage, bit 0: an in-edge comes from a stage of its rank, bit 1: an out-edge
	 * goes to one; a stage with neither has only its own W to check. */
	unsigned char *local = lw_calloc(w, (size_t)w->ns + 1, 1);
	for (int e = 0; e < w->ne; e++)
		if (sc->stage_pp[E[e].src] == sc->stage_pp[E[e].dst]) {
			local[E[e].dst] |= 1;
			local[E[e].src] |= 2;
		}
	int bad = 0;
	for (int p = 0; p < w->pp && !bad; p++) {
		int i = 0;
		for (; i < sc->nacts[p] && !bad; i++) {
			const SchedAct *a = &sc->acts[p][i];
			unsigned char *sa = &seen[(size_t)a->stage * m + a->mb];
			const OpInfo *info = &plan_ops[a->kind];
			int fwd = info->dir == DIR_ACT, need = -1; // the local stage whose action is missing
			if (info->needs & PLAN_DEP_GRAD) { // W: its own B
				if (!(*sa & PLAN_DEP_GRAD))
					need = a->stage;
			} else if (local[a->stage] & (fwd ? 1 : 2)) { // F, B, BW: along local edges
				int lo = fwd ? w->in_off[a->stage] : w->out_off[a->stage];
				int hi = fwd ? w->in_off[a->stage + 1] : w->out_off[a->stage + 1];
				for (int j = lo; j < hi && need < 0; j++) {
					int e = fwd ? w->in_e[j] : w->out_e[j], o = fwd ? E[e].src : E[e].dst;
					if (sc->stage_pp[o] == p &&
					    !(seen[(size_t)o * m + a->mb] & (fwd ? PLAN_DEP_ACT : PLAN_DEP_GRAD)))
						need = o;
				}
			}
			*sa |= info->makes & (PLAN_DEP_ACT | PLAN_DEP_GRAD);
			if (need < 0)
				continue;
			const SchedAct *b = NULL; // the action it needs, later on this rank
			for (int k = i + 1; k < sc->nacts[p] && !b; k++) {
				const SchedAct *c = &sc->acts[p][k];
				if (c->stage == need && c->mb == a->mb &&
				    (plan_ops[c->kind].makes & (fwd ? PLAN_DEP_ACT : PLAN_DEP_GRAD)))
					b = c;
			}
			char an[32], bn[32];
			Loc at = sched_loc(sc, p, a).line ? sched_loc(sc, p, a) : w->pr->sched_loc;
			bad = 1;
			if (!b) { // the schedule's own checks make sure it is there
				diag_error(w->diag, at, "'%s' on rank %d needs an action of stage %d that the "
				           "rank never runs", lw_act_name(a, an, sizeof an), p, need);
				break;
			}
			diag_error(w->diag, at,
			           "'%s' needs '%s', which comes later on rank %d: the rank can never "
			           "run it (no plan can hold this order, not even with --allow-deadlock)",
			           lw_act_name(a, an, sizeof an), lw_act_name(b, bn, sizeof bn), p);
			if (sched_loc(sc, p, b).line)
				diag_note(w->diag, sched_loc(sc, p, b), "'%s' is here", bn);
		}
		while (i-- > 0) // clear what this rank set (clearing all would be O(pp * ns * m))
			seen[(size_t)sc->acts[p][i].stage * m + sc->acts[p][i].mb] = 0;
	}
	free(seen);
	free(local);
	return bad;
}

/* Reports an order that cannot make progress: every unfinished rank waits. */
void lw_report_stall(Lw *w, const int64_t *cur)
{
	const SchedCtx *sc = w->sc;
	Loc at = w->pr->sched_loc;
	for (int p = 0; p < w->pp; p++)
		if (cur[p] < sc->nacts[p] && sched_loc(sc, p, &sc->acts[p][cur[p]]).line) {
			at = sched_loc(sc, p, &sc->acts[p][cur[p]]);
			break;
		}
	diag_error(w->diag, at,
	           "the schedule cannot run: every rank waits for another (run with "
	           "--allow-deadlock to emit the plan and let pipesim show the cycle)");
	for (int p = 0; p < w->pp; p++) {
		if (cur[p] >= sc->nacts[p])
			continue;
		char an[32];
		fprintf(w->diag->out, "  rank %d is stuck at action %lld: %s\n", p, (long long)cur[p],
		        lw_act_name(&sc->acts[p][cur[p]], an, sizeof an));
	}
}

/* Per ordered pair of pipeline indexes, the tensors the naive lowering sends from one
 * to the other, in sending order, and how many of them the receiver has taken. */
typedef struct {
	int *t; // tensor ids: (edge * m + mb) * 2 + dir
	int n, cap, taken;
} Fifo;

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Naive lowering of what is left after a stall, so that pipesim can show the cycle:
 * sends right after the compute that produced them, receives before the compute that
 * needs them.  The plan must still verify, and the verifier pairs the k-th send from
 * one rank to another with the k-th receive (FIFO): a rank may consume tensors in
 * another order than its peer produces them (a skip's activation is produced before
 * the chain's but consumed with it), so each rank's sends are listed first, per pair,
 * and a receive takes the pair's tensors in that order up to the one it needs. */
void lw_rest_naively(Lw *w, int64_t *cur)
{
	const SchedCtx *sc = w->sc;
	int m = w->m, ne = w->ne;
	const PlanEdge *E = w->plan->edges;
	const int *stage_pp = sc->stage_pp;

	/* The pair each remote (edge, direction) travels between, as an index. */
	int64_t *keys = lw_malloc(w, (2 * (size_t)ne + 1) * sizeof *keys);
	int *pair = lw_calloc_int(w, 2 * (size_t)ne);
	size_t nk = 0;
	for (int e = 0; e < ne; e++) {
		int a = stage_pp[E[e].src], b = stage_pp[E[e].dst];
		if (a != b) {
			keys[nk++] = (int64_t)a * w->pp + b;
			keys[nk++] = (int64_t)b * w->pp + a;
		}
	}
	qsort(keys, nk, sizeof *keys, cmp_i64);
	size_t np = 0;
	for (size_t i = 0; i < nk; i++)
		if (np == 0 || keys[np - 1] != keys[i])
			keys[np++] = keys[i];
	for (int e = 0; e < ne; e++) {
		int a = stage_pp[E[e].src], b = stage_pp[E[e].dst];
		for (int dir = 0; dir < 2; dir++) {
			int64_t key = dir == DIR_ACT ? (int64_t)a * w->pp + b : (int64_t)b * w->pp + a;
			int64_t *k = a == b ? NULL : bsearch(&key, keys, np, sizeof *keys, cmp_i64);
			pair[2 * e + dir] = k ? (int)(k - keys) : -1;
		}
	}
	Fifo *fifo = lw_calloc(w, np + 1, sizeof *fifo);
	int *pos = lw_malloc(w, ((size_t)ne * m * 2 + 1) * sizeof *pos); // tensor -> place in its Fifo

	/* Pass 1: what each rank will send, in order: what it produced before the stall
	 * and has not sent, then its remaining actions' outputs. */
	Pending out = {0};
	for (int p = 0; p < w->pp; p++) {
		out.n = 0;
		for (int i = 0; i < w->pend[p].n; i++)
			lw_pend_push(w, &out, w->pend[p].v[i]);
		for (int64_t i = cur[p]; i < sc->nacts[p]; i++)
			lw_push_outputs(w, p, &sc->acts[p][i], 0, &out);
		for (int i = 0; i < out.n; i++) {
			if (out.v[i].to == p)
				continue; // sent to self with its receive, below
			Fifo *f = &fifo[pair[2 * out.v[i].edge + out.v[i].dir]];
			int t = (int)lw_tensor(w, out.v[i].edge, out.v[i].mb, out.v[i].dir);
			if (f->n == f->cap) {
				f->cap = f->cap ? 2 * f->cap : 16;
				f->t = lw_realloc(w, f->t, (size_t)f->cap * sizeof *f->t);
			}
			pos[t] = f->n;
			f->t[f->n++] = t;
		}
	}
	free(out.v);

	/* Pass 2: the ops. */
	for (int p = 0; p < w->pp; p++) {
		Pending *pq = &w->pend[p];
		for (int64_t first = cur[p];; cur[p]++) {
			/* What was produced, here or before the stall, goes right away. */
			if (cur[p] > first || pq->n) {
				for (int i = 0; i < pq->n; i++) {
					Out o = pq->v[i];
					int g = w->group[p]++;
					lw_emit(w, p, (PlanOp){.kind = OP_SEND, .dir = o.dir, .stage = o.edge,
					                    .mb = o.mb, .peer = o.to, .group = g}, o.line);
					if (o.to == p) // a send to self completes only with its receive
						lw_emit(w, p, (PlanOp){.kind = OP_RECV, .dir = o.dir, .stage = o.edge,
						                    .mb = o.mb, .peer = p, .group = g}, o.line);
				}
				pq->n = 0;
				lw_flush_reductions(w, p, 0, cur[p] >= sc->nacts[p]);
			}
			if (cur[p] >= sc->nacts[p])
				break;
			const SchedAct *a = &sc->acts[p][cur[p]];
			int line = lw_src_line_of(w, p, a);
			uint16_t needs = plan_ops[a->kind].needs & (PLAN_DEP_IN_ACT | PLAN_DEP_OUT_GRAD);
			int fwd = !!(needs & PLAN_DEP_IN_ACT);
			int lo = fwd ? w->in_off[a->stage] : w->out_off[a->stage];
			int hi = fwd ? w->in_off[a->stage + 1] : w->out_off[a->stage + 1];
			for (int j = lo; needs && j < hi; j++) {
				int e = fwd ? w->in_e[j] : w->out_e[j];
				int opp = stage_pp[fwd ? E[e].src : E[e].dst];
				int t = (int)lw_tensor(w, e, a->mb, !fwd);
				if (opp == p || w->moved[t])
					continue;
				/* `moved` here only tells that the RECV is placed. */
				for (Fifo *f = &fifo[pair[2 * e + !fwd]]; f->taken <= pos[t]; f->taken++) {
					int u = f->t[f->taken];
					w->moved[u] = 1;
					lw_emit(w, p, (PlanOp){.kind = OP_RECV, .dir = u % 2, .stage = u / 2 / m,
					                    .mb = u / 2 % m, .peer = opp, .group = w->group[p]++},
					       line);
				}
			}
			lw_start_compute(w, p, a, line);
			lw_finish_compute(w, p, a, line);
		}
	}
	for (size_t k = 0; k < np; k++)
		free(fifo[k].t);
	free(fifo);
	free(pos);
	free(pair);
	free(keys);
}
