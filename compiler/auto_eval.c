/* The search's fast model: a candidate order's makespan and memory without building a
 * plan.  Every rank runs its order in sequence; an op starts when its rank is free and
 * its inputs have arrived: F(s, mb) needs F(src, mb) of every in-edge plus the edge's
 * transfer time, B(s, mb) its own F and B(dst, mb) of every out-edge plus the transfer,
 * W(s, mb) its own B.  That is pipesim's overlap model when receives are posted early
 * enough to hide behind compute, which the real check (sched_auto.c) then confirms.
 * Ranks are swept in turn, each advancing as far as its next op's inputs allow; a sweep
 * in which no rank moves proves the order stuck.  Memory follows plan/plan.h's
 * PlanStage rules (F allocates save_fb + save_fw, B frees save_fb and allocates save_bw,
 * holding save_re more while it rebuilds a recomputed forward, W frees the rest) over
 * the static bytes; tensors in flight are left to the real memory model. */
#include "auto.h"

#include <stdlib.h>

struct AutoScratch {
	int64_t *t[3];   // end time of F, B, W per (stage * m + mb); -1: not yet
	int *pos;        // per rank: next op
	int64_t *free_at, *cur, *peak;
};

AutoScratch *auto_scratch_new(const AutoModel *md)
{
	size_t n = (size_t)md->ns * (size_t)md->m, pp = (size_t)md->pp;
	AutoScratch *sc = malloc(sizeof *sc + 3 * n * sizeof(int64_t) + pp * sizeof(int) +
	                         3 * pp * sizeof(int64_t));
	if (!sc)
		return NULL;
	int64_t *q = (int64_t *)(sc + 1);
	for (int k = 0; k < 3; k++, q += n)
		sc->t[k] = q;
	sc->free_at = q;
	sc->cur = q + pp;
	sc->peak = q + 2 * pp;
	sc->pos = (int *)(q + 3 * pp);
	return sc;
}

/* When op a's inputs are all there: its ready time, or -1 when one is missing. */
static int64_t ready_at(const AutoModel *md, const AutoScratch *sc, const SchedAct *a)
{
	int m = md->m, s = a->stage, mb = a->mb;
	int64_t r = 0;
	if (a->kind == OP_F) {
		for (int k = md->ioff[s]; k < md->ioff[s + 1]; k++) {
			const AutoEdge *e = &md->edges[md->ein[k]];
			int64_t t = sc->t[AUTO_F][e->src * m + mb];
			if (t < 0)
				return -1;
			if (t + e->ns > r)
				r = t + e->ns;
		}
		return r;
	}
	if (a->kind == OP_W) {
		return sc->t[AUTO_B][s * m + mb];
	}
	r = sc->t[AUTO_F][s * m + mb]; // B or BW: its own forward first
	if (r < 0)
		return -1;
	for (int k = md->ooff[s]; k < md->ooff[s + 1]; k++) {
		const AutoEdge *e = &md->edges[md->eout[k]];
		int64_t t = sc->t[AUTO_B][e->dst * m + mb];
		if (t < 0)
			return -1;
		if (t + e->ns > r)
			r = t + e->ns;
	}
	return r;
}

/* Runs op a on rank p from time `at`: its end time, and the rank's memory. */
static void run_op(const AutoModel *md, AutoScratch *sc, int p, const SchedAct *a, int64_t at)
{
	int s = a->stage, i = s * md->m + a->mb;
	const int64_t *sv = md->save[s], *c = md->cost[s];
	int64_t end;
	switch (a->kind) {
	case OP_F:
		end = at + c[0];
		sc->t[AUTO_F][i] = end;
		sc->cur[p] += sv[0] + sv[1];
		break;
	case OP_B:
		end = at + c[1];
		sc->t[AUTO_B][i] = end;
		if (sc->cur[p] + sv[3] > sc->peak[p])
			sc->peak[p] = sc->cur[p] + sv[3];
		sc->cur[p] += sv[2] - sv[0];
		break;
	case OP_W:
		end = at + c[2];
		sc->t[AUTO_W][i] = end;
		sc->cur[p] -= sv[1] + sv[2];
		break;
	default: // OP_BW
		end = at + c[1] + c[2];
		sc->t[AUTO_B][i] = sc->t[AUTO_W][i] = end;
		if (sc->cur[p] + sv[3] > sc->peak[p])
			sc->peak[p] = sc->cur[p] + sv[3];
		sc->cur[p] -= sv[0] + sv[1];
		break;
	}
	sc->free_at[p] = end;
	if (sc->cur[p] > sc->peak[p])
		sc->peak[p] = sc->cur[p];
}

void auto_eval(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts, const int *nacts,
               AutoFig *out)
{
	size_t n = (size_t)md->ns * (size_t)md->m;
	for (int k = 0; k < 3; k++)
		for (size_t i = 0; i < n; i++)
			sc->t[k][i] = -1;
	int left = 0;
	for (int p = 0; p < md->pp; p++) {
		sc->pos[p] = 0;
		sc->free_at[p] = 0;
		sc->cur[p] = sc->peak[p] = md->stat[p];
		left += nacts[p] > 0;
	}
	*out = (AutoFig){0};
	while (left > 0) {
		int moved = 0;
		for (int p = 0; p < md->pp; p++) {
			int i = sc->pos[p];
			if (i == nacts[p])
				continue;
			for (; i < nacts[p]; i++) {
				int64_t r = ready_at(md, sc, &acts[p][i]);
				if (r < 0)
					break;
				run_op(md, sc, p, &acts[p][i], r > sc->free_at[p] ? r : sc->free_at[p]);
			}
			moved |= i > sc->pos[p];
			sc->pos[p] = i;
			left -= i == nacts[p];
		}
		if (!moved) {
			out->makespan = -1;
			return;
		}
	}
	out->peak_rank = 0;
	for (int p = 0; p < md->pp; p++) {
		int64_t f = sc->free_at[p];
		if (f > out->makespan)
			out->makespan = f;
		out->finish_sum += f;
		if (sc->peak[p] > out->peak) {
			out->peak = sc->peak[p];
			out->peak_rank = p;
		}
	}
	for (int s = 0; s < md->ns; s++)
		out->busy += md->m * (md->cost[s][0] + md->cost[s][1] + md->cost[s][2]);
}
