/* pipecc's own schedule for `schedule auto;`: a list scheduler over simulated time,
 * then local improvement of the order it made.
 *
 * The list scheduler always serves the rank that is earliest in time (ties: the lowest
 * pipeline index), so when a rank chooses at time t every op that could have arrived by
 * t is known.  It chooses, in this order of priority: a B whose inputs are there (the
 * backward chain is the critical path; the earliest microbatch, the deepest stage
 * first), then an F whose input is there while the rank's saved activations stay within
 * the budget (and, with a warm-up limit, while it holds fewer forwards than ZB-H1's
 * p - i or ZB-H2's 2(p - i) - 1), then a deferred W, which fills what would otherwise be
 * a bubble and frees memory; with nothing to run it waits for the next arrival.  A B
 * that does not fit first runs deferred W's.  Costs are the stages' own (unequal F, B,
 * W per stage) and an input arrives its edge's transfer time after its producer ends.
 * Forwards, backwards and W's of one stage keep microbatch order.
 *
 * The improvement swaps neighbouring ops of one rank and keeps a swap when the fast
 * model's makespan falls (or stays and the ranks' summed finish times fall) and every
 * rank still fits; it stops at a pass without gain or when its evaluations run out.
 * The fit (auto_fit) moves ops of an order that overshoots a few places up or down
 * their rank, near where an overshooting rank peaks, while the summed overshoot falls.
 * The annealing (auto_anneal) moves any op anywhere on its rank, taking worse orders
 * with a falling probability, from a fixed seed.  Every move keeps a stage's ops of one
 * kind in microbatch order and an op after what it needs on its rank. */
#include "auto.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const AutoModel *md;
	const AutoListOpt *o;
	int64_t *tf, *tb;        // per (stage * m + mb): end time, -1 not yet
	int *fnext, *bnext;      // per stage: next microbatch to forward / backward
	int *wq, *wh, *wt;       // per rank: FIFO of deferred W's (stage * m + mb)
	int64_t *now, *cur;      // per rank: time and saved bytes
	int *held, *blocked;     // per rank: forwards awaiting their B; nothing known to run
	                         // (blocked: while it equals epoch)
	int epoch;               // ops emitted: an op emitted unblocks every rank
	int *total;              // per rank: its ops (3m a stage)
	int *pos;                // per rank: pipeline position of its first stage
	int *local;              // per rank: stages on it, by index (CSR loff)
	int *loff;
	SchedAct **acts;
	int *nacts;
} Ls;

/* F(s, mb)'s ready time, or -1 while an input is not scheduled. */
static int64_t f_ready(const Ls *l, int s, int mb)
{
	const AutoModel *md = l->md;
	int64_t r = 0;
	for (int k = md->ioff[s]; k < md->ioff[s + 1]; k++) {
		const AutoEdge *e = &md->edges[md->ein[k]];
		int64_t t = l->tf[e->src * md->m + mb];
		if (t < 0)
			return -1;
		if (t + e->ns > r)
			r = t + e->ns;
	}
	return r;
}

static int64_t b_ready(const Ls *l, int s, int mb)
{
	const AutoModel *md = l->md;
	int64_t r = l->tf[s * md->m + mb];
	if (r < 0)
		return -1;
	for (int k = md->ooff[s]; k < md->ooff[s + 1]; k++) {
		const AutoEdge *e = &md->edges[md->eout[k]];
		int64_t t = l->tb[e->dst * md->m + mb];
		if (t < 0)
			return -1;
		if (t + e->ns > r)
			r = t + e->ns;
	}
	return r;
}

static void emit(Ls *l, int p, int kind, int s, int mb, int64_t cost)
{
	l->acts[p][l->nacts[p]++] = (SchedAct){.kind = kind, .stage = s, .mb = mb};
	l->now[p] += cost;
	l->epoch++;
}

static void run_w(Ls *l, int p)
{
	const AutoModel *md = l->md;
	int x = l->wq[l->wh[p]++], s = x / md->m;
	l->cur[p] -= md->save[s][1] + md->save[s][2];
	emit(l, p, OP_W, s, x % md->m, md->cost[s][2]);
}

static int64_t budget(const Ls *l, int p)
{
	if (!l->o->cap)
		return INT64_MAX;
	return l->o->cap - l->md->stat[p] - l->o->reserve - (l->o->extra ? l->o->extra[p] : 0);
}

static int warm_limit(const Ls *l, int p)
{
	int n = l->md->pp - l->pos[p];
	if (l->o->warm == 0 || l->loff[p + 1] - l->loff[p] != 1)
		return 1 << 30;
	return l->o->warm == 1 ? n : 2 * n - 1;
}

/* One decision of rank p at its time: runs an op, or moves its time to the next
 * arrival, or marks it blocked.  Returns -1 when the budget can never be met. */
static int step(Ls *l, int p)
{
	const AutoModel *md = l->md;
	int64_t t = l->now[p], next = -1;
	int bs = -1, fs = -1;
	int64_t bmb = 0, fsel = 0;
	for (int k = l->loff[p]; k < l->loff[p + 1]; k++) {
		int s = l->local[k];
		if (l->bnext[s] < md->m) {
			int64_t r = b_ready(l, s, l->bnext[s]);
			if (r >= 0 && r <= t && (bs < 0 || l->bnext[s] < bmb || l->bnext[s] == bmb))
				bs = s, bmb = l->bnext[s];
			else if (r > t && (next < 0 || r < next))
				next = r;
		}
		if (l->fnext[s] < md->m) {
			int64_t r = f_ready(l, s, l->fnext[s]);
			int64_t key = l->o->f_deep ? (int64_t)l->fnext[s] * md->ns - s
			                           : (int64_t)l->fnext[s] * md->ns + s;
			/* room for the F and then for a B of it, so the rank can always go on */
			const int64_t *sv = md->save[s];
			int64_t bneed = sv[3] > sv[2] - sv[0] ? sv[3] : sv[2] - sv[0];
			int ok = l->held[p] < warm_limit(l, p) &&
			         l->cur[p] + sv[0] + sv[1] + (bneed > 0 && !l->o->full ? bneed : 0) <=
			             budget(l, p);
			if (ok && r >= 0 && r <= t && (fs < 0 || key < fsel))
				fs = s, fsel = key;
			else if (ok && r > t && (next < 0 || r < next))
				next = r;
		}
	}
	int wpend = l->wh[p] < l->wt[p];
	if (bs >= 0) {
		const int64_t *sv = md->save[bs];
		int64_t need = l->cur[p] + (sv[3] > sv[2] - sv[0] ? sv[3] : sv[2] - sv[0]);
		if (need > budget(l, p) && wpend) {
			run_w(l, p);
			return 0;
		}
		int x = bs * md->m + l->bnext[bs]++;
		l->tb[x] = t + md->cost[bs][1];
		l->cur[p] += sv[2] - sv[0];
		l->held[p]--;
		l->wq[l->wt[p]++] = x;
		emit(l, p, OP_B, bs, x % md->m, md->cost[bs][1]);
		return 0;
	}
	if (fs >= 0 && !(l->o->w_lazy == 0 && wpend && next >= 0 && next < t + md->cost[fs][0] &&
	                 md->cost[l->wq[l->wh[p]] / md->m][2] <= md->cost[fs][0])) {
		int x = fs * md->m + l->fnext[fs]++;
		l->tf[x] = t + md->cost[fs][0];
		l->cur[p] += md->save[fs][0] + md->save[fs][1];
		l->held[p]++;
		emit(l, p, OP_F, fs, x % md->m, md->cost[fs][0]);
		return 0;
	}
	if (wpend) {
		run_w(l, p);
		return 0;
	}
	if (next >= 0) {
		l->now[p] = next;
		return 0;
	}
	l->blocked[p] = l->epoch;
	return 0;
}

static int *ialloc(size_t n, int **all, int *k)
{
	return all[(*k)++] = calloc(n ? n : 1, sizeof(int));
}

int auto_list_fill(const AutoModel *md, const AutoListOpt *o, SchedAct **acts, int *nacts,
                   int *cap)
{
	(void)cap;
	size_t n = (size_t)md->ns * (size_t)md->m, pp = (size_t)md->pp;
	int *ia[16], ni = 0, rc = 0;
	Ls l = {.md = md, .o = o, .acts = acts, .nacts = nacts, .epoch = 1};
	int64_t *t64 = calloc(2 * n + 2 * pp, sizeof *t64);
	l.fnext = ialloc((size_t)md->ns, ia, &ni);
	l.bnext = ialloc((size_t)md->ns, ia, &ni);
	l.wq = ialloc(n, ia, &ni);
	l.wh = ialloc(pp, ia, &ni);
	l.wt = ialloc(pp, ia, &ni);
	l.held = ialloc(pp, ia, &ni);
	l.blocked = ialloc(pp, ia, &ni);
	l.total = ialloc(pp, ia, &ni);
	l.pos = ialloc(pp, ia, &ni);
	l.local = ialloc((size_t)md->ns, ia, &ni);
	l.loff = ialloc(pp + 1, ia, &ni);
	for (int k = 0; k < ni; k++)
		rc |= !ia[k];
	if (rc || !t64) {
		auto_oom(md);
		rc = -1;
		goto out;
	}
	l.tf = t64, l.tb = t64 + n, l.now = t64 + 2 * n, l.cur = t64 + 2 * n + pp;
	for (size_t i = 0; i < 2 * n; i++)
		t64[i] = -1;
	for (int p = 0, j = 0; p < md->pp; p++) {
		l.loff[p] = j;
		l.pos[p] = -1;
		for (int s = 0; s < md->ns; s++)
			if (md->stage_pp[s] == p) {
				l.local[j++] = s;
				if (l.pos[p] < 0)
					l.pos[p] = s;
			}
		l.loff[p + 1] = j;
		l.total[p] = (l.loff[p + 1] - l.loff[p]) * md->m * 3;
		nacts[p] = 0;
	}
	/* Queue FIFO indexes are per rank: rank p's W's live at wq[loff[p] * m ...]. */
	for (int p = 0; p < md->pp; p++)
		l.wh[p] = l.wt[p] = l.loff[p] * md->m;
	for (;;) {
		int p = -1, live = 0;
		for (int q = 0; q < md->pp; q++) {
			if (nacts[q] == l.total[q])
				continue;
			live = 1;
			if (l.blocked[q] != l.epoch && (p < 0 || l.now[q] < l.now[p]))
				p = q;
		}
		if (!live)
			break;
		if (p < 0 || step(&l, p)) {
			rc = -1;
			break;
		}
	}
out:
	free(t64);
	for (int k = 0; k < ni; k++)
		free(ia[k]);
	return rc;
}

static int better(const AutoFig *a, const AutoFig *b)
{
	if (a->makespan < 0)
		return 0;
	return a->makespan < b->makespan ||
	       (a->makespan == b->makespan && a->finish_sum < b->finish_sum);
}

int auto_improve(const AutoModel *md, AutoScratch *sc, SchedAct **acts, const int *nacts,
                 int64_t limit, int max_evals, AutoFig *fig)
{
	int evals = 0, gained = 1;
	AutoFig f;
	auto_eval(md, sc, acts, nacts, &f); // the times each swap starts from (not counted)
	int kept = f.makespan >= 0;
	if (kept)
		auto_eval_keep(md, sc);
	while (gained && evals < max_evals) {
		gained = 0;
		for (int p = 0; p < md->pp && evals < max_evals; p++) {
			for (int i = 0; i + 1 < nacts[p] && evals < max_evals; i++) {
				SchedAct *a = &acts[p][i], *b = a + 1;
				if (a->stage == b->stage && (a->mb == b->mb || a->kind == b->kind))
					continue; // dependent, or the same op kind of one stage reordered
				SchedAct tmp = *a;
				*a = *b, *b = tmp;
				evals++; // one evaluation, however early it stops
				if (!(kept && auto_eval_swap_later(md, sc, acts, p, i)) &&
				    auto_eval_beats(md, sc, acts, nacts, fig, kept ? p : -1, i, &f) &&
				    f.peak <= limit) {
					*fig = f;
					auto_eval_keep(md, sc);
					kept = 1;
					gained = 1;
				} else {
					tmp = *a, *a = *b, *b = tmp;
				}
			}
		}
	}
	return evals;
}

/* auto_fit's neighbourhood: the ops within FIT_WINDOW places of where an overshooting
 * rank peaks, each moved up to FIT_REACH places up or down. */
enum { FIT_WINDOW = 6, FIT_REACH = 6 };

/* The ranks' summed overshoot of limit in the last evaluation. */
static int64_t overshoot(const AutoModel *md, const AutoScratch *sc, int64_t limit)
{
	const int64_t *pk = auto_eval_peaks(sc);
	int64_t o = 0;
	for (int p = 0; p < md->pp; p++)
		o += pk[p] > limit ? pk[p] - limit : 0;
	return o;
}

/* Moves v[i] to position k, the ops between shifting by one. */
static void move_op(SchedAct *v, int i, int k)
{
	SchedAct a = v[i];
	if (k > i)
		memmove(v + i, v + i + 1, (size_t)(k - i) * sizeof *v);
	else
		memmove(v + k + 1, v + k, (size_t)(i - k) * sizeof *v);
	v[k] = a;
}

/* Whether v[i] may pass every op between it and position k: none of them is of its
 * stage and microbatch (dependent) or of its stage and kind (microbatch order). */
static int may_move(const SchedAct *v, int i, int k)
{
	int lo = i < k ? i + 1 : k, hi = i < k ? k : i - 1;
	for (int j = lo; j <= hi; j++)
		if (v[j].stage == v[i].stage && (v[j].mb == v[i].mb || v[j].kind == v[i].kind))
			return 0;
	return 1;
}

int auto_fit(const AutoModel *md, AutoScratch *sc, SchedAct **acts, const int *nacts,
             int64_t limit, int max_evals, AutoFig *fig)
{
	int evals = 1, pp = md->pp;
	int64_t *peak = malloc((size_t)pp * sizeof *peak);
	int *at = malloc((size_t)pp * sizeof *at);
	if (!peak || !at) {
		auto_oom(md);
		free(peak), free(at);
		return 0;
	}
	auto_eval(md, sc, acts, nacts, fig);
	int64_t over = overshoot(md, sc, limit);
	int kept = fig->makespan >= 0;
	if (kept)
		auto_eval_keep(md, sc);
	memcpy(peak, auto_eval_peaks(sc), (size_t)pp * sizeof *peak);
	memcpy(at, auto_eval_peak_ops(sc), (size_t)pp * sizeof *at);
	int gained = fig->makespan >= 0;
	while (over > 0 && gained && evals < max_evals) {
		gained = 0;
		for (int p = 0; p < pp && !gained; p++) {
			if (peak[p] <= limit)
				continue;
			int lo = at[p] - FIT_WINDOW < 0 ? 0 : at[p] - FIT_WINDOW;
			int hi = at[p] + FIT_WINDOW >= nacts[p] ? nacts[p] - 1 : at[p] + FIT_WINDOW;
			for (int i = lo; i <= hi && !gained && evals < max_evals; i++)
				for (int d = -FIT_REACH; d <= FIT_REACH && !gained && evals < max_evals; d++) {
					int k = i + d;
					if (d == 0 || k < 0 || k >= nacts[p] || !may_move(acts[p], i, k))
						continue;
					move_op(acts[p], i, k);
					AutoFig f;
					auto_eval_from(md, sc, acts, nacts, kept ? p : -1, i < k ? i : k, &f);
					evals++;
					int64_t o = f.makespan < 0 ? INT64_MAX : overshoot(md, sc, limit);
					if (o < over || (o == over && better(&f, fig))) {
						*fig = f;
						over = o;
						memcpy(peak, auto_eval_peaks(sc), (size_t)pp * sizeof *peak);
						memcpy(at, auto_eval_peak_ops(sc), (size_t)pp * sizeof *at);
						auto_eval_keep(md, sc);
						kept = 1;
						gained = 1;
					} else {
						move_op(acts[p], k, i);
					}
				}
		}
	}
	free(peak), free(at);
	return evals;
}

/* The annealing's score: the makespan, and an overshoot of limit costs pen plus pen
 * per unit bytes over (so a fitting order always beats one that overshoots by as much
 * as it gains); -1 when the order cannot run. */
static double anneal_score(const AutoModel *md, const AutoScratch *sc, const AutoFig *f,
                           int64_t limit, double pen, double unit)
{
	if (f->makespan < 0)
		return -1;
	int64_t o = overshoot(md, sc, limit);
	return (double)f->makespan + (o > 0 ? pen + pen * (double)o / unit : 0);
}

/* Linear congruential steps (Numerical Recipes' constants): the same moves every run. */
static unsigned next_rand(unsigned *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

int auto_anneal(const AutoModel *md, AutoScratch *sc, SchedAct **acts, const int *nacts,
                int64_t limit, double heat, int max_evals, AutoFig *fig)
{
	int pp = md->pp, evals = 0;
	double u = 0, unit = 0;
	for (int s = 0; s < md->ns; s++) {
		u += (double)(md->cost[s][0] + md->cost[s][1] + md->cost[s][2]) / (3.0 * md->ns);
		double a = (double)(md->save[s][0] + md->save[s][1]);
		unit = a > 0 && (unit == 0 || a < unit) ? a : unit;
	}
	if (u <= 0)
		return 0;
	SchedAct **best = malloc((size_t)pp * sizeof *best);
	for (int p = 0; best && p < pp; p++)
		if (!(best[p] = malloc(((size_t)nacts[p] + 1) * sizeof **best))) {
			while (p-- > 0)
				free(best[p]);
			free(best);
			best = NULL;
		}
	if (!best) {
		auto_oom(md);
		return 0;
	}
	unit = unit > 0 ? unit : 1;
	AutoFig f;
	auto_eval(md, sc, acts, nacts, &f);
	int kept = f.makespan >= 0;
	if (kept)
		auto_eval_keep(md, sc);
	double cur = anneal_score(md, sc, &f, limit, 2 * u, unit), top = cur;
	int fits = cur >= 0 && overshoot(md, sc, limit) == 0;
	AutoFig keep = f;
	for (int p = 0; p < pp; p++)
		memcpy(best[p], acts[p], (size_t)nacts[p] * sizeof **best);
	unsigned seed = 1;
	for (int tries = 0; cur >= 0 && evals < max_evals && tries < 16 * max_evals; tries++) {
		int p = (int)(next_rand(&seed) % (unsigned)pp);
		if (nacts[p] < 2)
			continue;
		int i = (int)(next_rand(&seed) % (unsigned)nacts[p]);
		int k = (int)(next_rand(&seed) % (unsigned)nacts[p]);
		if (i == k || !may_move(acts[p], i, k))
			continue;
		move_op(acts[p], i, k);
		auto_eval_from(md, sc, acts, nacts, kept ? p : -1, i < k ? i : k, &f);
		evals++;
		double x = anneal_score(md, sc, &f, limit, 2 * u, unit);
		int ok = x >= 0 && overshoot(md, sc, limit) == 0;
		double t = heat * u * (1 - (double)evals / max_evals) + 1e-9;
		double r = (double)(next_rand(&seed) % 1000000u) / 1e6;
		if (x >= 0 && (x <= cur || exp((cur - x) / t) > r)) {
			cur = x;
			auto_eval_keep(md, sc);
			kept = 1;
			if (ok > fits || (ok == fits && (x < top || (x == top && better(&f, &keep))))) {
				top = x;
				fits = ok;
				keep = f;
				for (int q = 0; q < pp; q++)
					memcpy(best[q], acts[q], (size_t)nacts[q] * sizeof **best);
			}
		} else {
			move_op(acts[p], k, i);
		}
	}
	for (int p = 0; p < pp; p++) {
		memcpy(acts[p], best[p], (size_t)nacts[p] * sizeof **best);
		free(best[p]);
	}
	free(best);
	auto_eval(md, sc, acts, nacts, fig);
	return evals + 1;
}
