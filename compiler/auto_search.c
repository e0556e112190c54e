/* The search behind `schedule auto;` (see sched_auto.c for what it weighs and why the
 * winner wins).  Candidates live in one heap array, in the order they were made:
 * setups (placement x recomputation) in turn, in each the registry rows in table order,
 * then the list scheduler's variants and the heuristic's orders, then the fixed, the
 * improved and the annealed orders, and the ones cut after the real check.  The fast
 * model ranks them; the confirmation (lowering, verifier, memory model, pipesim's
 * overlap model) decides.  The confirmation compiles under a diagnostics sink: a
 * candidate's failure is a fact about the candidate, not an error of the program.
 * Running out of memory is neither: it ends the search (need_memory), which frees what
 * it holds (search_free) and reports it as every pass does (arena_oom), rather than
 * pick another winner than the one it would have picked. */
#include "auto.h"
#include "../plan/oom.h"

#include <stdlib.h>
#include <string.h>

#include "../plan/mem.h"
#include "../sim/sim.h"
#include "lower.h"
#include "place.h"

enum { AUTO_CONFIRM = 6, AUTO_TRIES = 24, AUTO_IMPROVE = 2, AUTO_REPAIR = 4,
       AUTO_CHAINS = 3, AUTO_ZB_FIT = 8, AUTO_ZB_MID = 6, AUTO_REFIT = 6, AUTO_FIX = 3,
       AUTO_ZB_LADDER = 8, AUTO_OTHER = 6, AUTO_ANNEAL = 12000, AUTO_ANNEAL_OPS = 2000000 };

typedef struct {
	char label[48];
	int setup;          // index into Search.setups
	SchedAct **acts;    // heap, per pipeline index
	int *nacts;
	AutoFig fast;
	int fast_fits;
	int state;          // 0 not confirmed, 1 confirmed, -1 failed (why: note)
	const char *note;
	int fits;           // the real memory model's verdict
	int64_t step, peak; // confirmed: overlap-model makespan, real peak
	int64_t *peaks;     // confirmed: per pipeline index (arena)
	double bubble;
	int tune;
	int list;           // 1: made by the list scheduler with options lo (2: then improved)
	AutoListOpt lo;
	int repaired;       // a tighter budget has been tried for it
	int zb;             // made by Zero Bubble's heuristic (auto_zb.c) within zmax: 1 at the
	                    // cap, 2 at a lower budget (zb+fitN, zb+midN, zb-K)
	int64_t *zmax, *zpeak; // per pipeline index: its budget and its own peak (arena)
	int fixed;          // moved from another candidate's order (+fix: auto_fit, +anneal)
	int dup;            // the heuristic's order at an earlier budget again: not confirmed
} Cand;

typedef struct {
	int place;          // PlaceKind
	int recompute;      // PlanRecompute of a `recompute *` tried on top, or 0: as given
	int *stage_pp;
	AutoModel md;
	AutoScratch *sc;
	int64_t tensor;     // largest stage input + output bytes (room for tensors in flight)
	int *wr;            // pipeline index -> world rank on the first line
	AutoEdge *down;     // the edges rounded down (auto_model_of_plan), or NULL: add_zb
} Setup;

typedef struct {
	const Program *pr;
	Arena *a;
	Diag sink;
	int64_t cap;
	Setup setups[6]; // placements (2 at most) x recomputation (3 at most)
	int nsetups;
	Cand *c;
	int n, ncap;
	long evals;
	int oom;            // a helper's allocation failed (AutoModel.oom)
	int *ix;            // the last ranking (heap)
	Plan *plan;         // the plan being confirmed (heap), or NULL
	FILE *null;         // the sink's stream
} Search;

/* Out of memory in a helper (s->oom) or in a lowering (the sink's noom): the search
 * ends as out of memory.  Called where the caller holds no heap memory of its own. */
static void need_memory(Search *s)
{
	if (s->oom || s->sink.noom)
		arena_oom(s->a, 0);
}

/* The recomputation a setup runs, as --explain writes it. */
static const char *recompute_name(int mode)
{
	return mode == PLAN_RECOMPUTE_FULL        ? "full"
	       : mode == PLAN_RECOMPUTE_SELECTIVE ? "selective"
	                                          : "as given";
}

/* Whether `recompute * selective` is worth a setup: some stage has attention that is not
 * flash (flash keeps no probabilities to drop). */
static int selective_helps(const Program *pr)
{
	int any = 0;
	for (int i = 0; i < pr->nstages; i++)
		any |= prog_stage_attends(&pr->stages[i]) && !prog_stage_all_flash(&pr->stages[i]);
	return any;
}

static Program *program_with(Search *s, int recompute)
{
	Program *q = arena_alloc(s->a, sizeof *q);
	*q = *s->pr;
	if (recompute)
		q->recompute_all = (uint8_t)recompute;
	return q;
}

static void init_ctx(Search *s, SchedCtx *c, const Program *q, int *stage_pp)
{
	Arena *a = s->a;
	*c = (SchedCtx){.prog = q, .arena = a, .diag = &s->sink, .pp = q->dims[DIM_PP],
	                .m = q->microbatches, .nstages = q->nstages, .stage_pp = stage_pp};
	c->nacts = arena_alloc(a, (size_t)c->pp * sizeof *c->nacts);
	c->cap = arena_alloc(a, (size_t)c->pp * sizeof *c->cap);
	c->acts = arena_alloc(a, (size_t)c->pp * sizeof *c->acts);
}

/* All forwards by stage, then all backwards by stage from the last: a topological order,
 * so every rank's part of it runs. */
static void topo_fill(SchedCtx *c)
{
	for (int s = 0; s < c->nstages; s++)
		for (int mb = 0; mb < c->m; mb++)
			sched_push(c, c->stage_pp[s], OP_F, s, mb);
	for (int s = c->nstages - 1; s >= 0; s--)
		for (int mb = 0; mb < c->m; mb++)
			sched_push(c, c->stage_pp[s], OP_BW, s, mb);
}

/* The fast model's facts for one placement and recomputation choice: those of the plan
 * of a topological order (auto_model_of_plan). */
static int setup_model(Search *s, Setup *u)
{
	const Program *q = program_with(s, u->recompute);
	SchedCtx c;
	init_ctx(s, &c, q, u->stage_pp);
	topo_fill(&c);
	Plan *p = lower_program(q, &c, &s->sink, 0, 0, 1);
	sched_free(&c);
	need_memory(s);
	if (!p)
		return -1;
	u->md.oom = &s->oom;
	u->wr = arena_alloc(s->a, (size_t)c.pp * sizeof *u->wr);
	u->tensor = auto_model_of_plan(&u->md, p, u->stage_pp, q->same_rank == SAME_RANK_LOCAL,
	                               s->a, u->wr, &u->down);
	plan_free(p);
	need_memory(s);
	u->sc = auto_scratch_new(&u->md);
	need_memory(s);
	return 0;
}

static int world_rank_of_pp(const Search *s, int q)
{
	return s->setups[0].wr[q];
}

static Cand *new_cand(Search *s, int setup, const char *label)
{
	if (s->n == s->ncap) {
		int nc = s->ncap ? 2 * s->ncap : 64;
		Cand *c = realloc(s->c, (size_t)nc * sizeof *c);
		if (!c)
			arena_oom(s->a, (size_t)nc * sizeof *c);
		s->c = c;
		s->ncap = nc;
	}
	Cand *c = &s->c[s->n++];
	*c = (Cand){.setup = setup};
	snprintf(c->label, sizeof c->label, "%s", label);
	int pp = s->setups[setup].md.pp;
	c->acts = calloc((size_t)pp, sizeof *c->acts);
	c->nacts = calloc((size_t)pp, sizeof *c->nacts);
	if (!c->acts || !c->nacts)
		arena_oom(s->a, (size_t)pp * sizeof *c->acts);
	return c;
}

static void evaluate(Search *s, Cand *c)
{
	Setup *u = &s->setups[c->setup];
	auto_eval(&u->md, u->sc, c->acts, c->nacts, &c->fast);
	s->evals++;
	c->fast_fits = c->fast.makespan >= 0 && (!s->cap || c->fast.peak <= s->cap);
}

static void add_registry(Search *s, int k)
{
	Setup *u = &s->setups[k];
	const Program *q = program_with(s, u->recompute);
	for (int i = 0; i < sched_count; i++) {
		const Schedule *sch = sched_registry[i];
		if (sch->search || sch->given)
			continue; // a search and the given orders (custom, csv) are not ours to pick
		if (s->pr->place == PLACE_DEFAULT && sch->default_place != u->place)
			continue;
		SchedCtx c;
		init_ctx(s, &c, q, u->stage_pp);
		int before = s->sink.nerrors;
		if (sch->check(&c) || s->sink.nerrors > before)
			continue;
		sch->fill(&c);
		if (s->sink.nerrors > before) {
			sched_free(&c);
			continue;
		}
		Cand *cd = new_cand(s, k, sch->name);
		for (int p = 0; p < c.pp; p++) {
			cd->acts[p] = c.acts[p];
			cd->nacts[p] = c.nacts[p];
			c.acts[p] = NULL;
		}
		evaluate(s, cd);
	}
}

/* The fast model's per-rank overshoot of the cap of the order it evaluated last, added
 * to base (NULL: none): the next budgets of an order that overshoots. */
static int64_t *cut_by_overshoot(Search *s, int k, const int64_t *base)
{
	const AutoModel *md = &s->setups[k].md;
	const int64_t *pk = auto_eval_peaks(s->setups[k].sc);
	int64_t *x = arena_alloc(s->a, (size_t)md->pp * sizeof *x);
	for (int q = 0; q < md->pp; q++)
		x[q] = (base ? base[q] : 0) + (pk[q] > s->cap ? pk[q] - s->cap : 0);
	return x;
}

/* One list-scheduler candidate; returns its index.  The fast model counts the tensors
 * in flight: an order that overshoots the cap is made again, in place, with each
 * overshooting rank's budget cut by its overshoot (`+fitN`), until it fits, up to
 * AUTO_REFIT times, so every rank is packed up to the cap, not to a guess of it. */
static int list_cand(Search *s, int k, const AutoListOpt *o, const char *label)
{
	const AutoModel *md = &s->setups[k].md;
	Cand *c = new_cand(s, k, label);
	c->list = 1;
	c->lo = *o;
	for (int p = 0; p < md->pp; p++) {
		size_t n = 1;
		for (int st = 0; st < md->ns; st++)
			n += md->stage_pp[st] == p ? (size_t)md->m * 3 : 0;
		c->acts[p] = malloc(n * sizeof(SchedAct));
		if (!c->acts[p])
			arena_oom(s->a, n * sizeof(SchedAct));
	}
	for (int round = 0; round <= AUTO_REFIT; round++) {
		int stalled = auto_list_fill(md, &c->lo, c->acts, c->nacts, NULL);
		need_memory(s);
		if (stalled) {
			c->fast.makespan = -1;
			c->fast_fits = 0;
			c->note = "the list scheduler stalled in this budget";
			break;
		}
		evaluate(s, c);
		if (c->fast_fits || c->fast.makespan < 0 || round == AUTO_REFIT)
			break;
		c->lo.extra = cut_by_overshoot(s, k, c->lo.extra);
		snprintf(c->label, sizeof c->label, "%.40s+fit%u", label, (unsigned)(round + 1) % 1000u);
	}
	return (int)(c - s->c);
}

static void add_list(Search *s, int k)
{
	Setup *u = &s->setups[k];
	const AutoModel *md = &u->md;
	int one = md->ns == md->pp;
	for (int r = 0; r < (s->cap ? 3 : 1); r++)
		for (int warm = 0; warm < (one ? 3 : 1); warm++)
			for (int lazy = 0; lazy < 2; lazy++)
				for (int deep = 0; deep < (one ? 1 : 2); deep++)
					for (int full = 0; full < (s->cap ? 2 : 1); full++) {
						AutoListOpt o = {.cap = s->cap, .reserve = r * u->tensor,
						                 .warm = warm, .w_lazy = lazy, .f_deep = deep,
						                 .full = full};
						char label[48];
						snprintf(label, sizeof label, "list/r%d%s%s%s%s", r,
						         warm == 1 ? "/h1" : warm == 2 ? "/h2" : "",
						         lazy ? "/lazy" : "", deep ? "/deep" : "", full ? "/full" : "");
						list_cand(s, k, &o, label);
					}
}

static int same_order(const Cand *a, const Cand *b, int pp)
{
	for (int p = 0; p < pp; p++) {
		if (a->nacts[p] != b->nacts[p])
			return 0;
		for (int i = 0; i < a->nacts[p]; i++) {
			const SchedAct *x = &a->acts[p][i], *y = &b->acts[p][i];
			if (x->kind != y->kind || x->stage != y->stage || x->mb != y->mb)
				return 0;
		}
	}
	return 1;
}

/* Zero Bubble's heuristic (auto_zb.c) on model zm (setup k's, or its edges rounded
 * down) with each rank's saved activations within maxmem[pipeline index]; returns the
 * candidate's index, or -1 when the setup is not a chain of one stage per rank. */
static int zb_cand(Search *s, int k, const AutoModel *zm, const int64_t *maxmem,
                   const char *name, const char *suffix)
{
	const AutoModel *md = &s->setups[k].md;
	if (md->ns != md->pp)
		return -1;
	char label[48];
	snprintf(label, sizeof label, "%s%s", name, suffix);
	Cand *c = new_cand(s, k, label);
	c->zb = 1;
	c->zmax = arena_alloc(s->a, (size_t)md->pp * sizeof *c->zmax);
	c->zpeak = arena_alloc(s->a, (size_t)md->pp * sizeof *c->zpeak);
	memcpy(c->zmax, maxmem, (size_t)md->pp * sizeof *c->zmax);
	for (int p = 0; p < md->pp; p++) {
		c->acts[p] = malloc((size_t)md->m * 3 * sizeof(SchedAct));
		if (!c->acts[p])
			arena_oom(s->a, (size_t)md->m * 3 * sizeof(SchedAct));
	}
	AutoZbOut o = {.peak = c->zpeak};
	int none = auto_zb_fill(zm, maxmem, c->acts, c->nacts, &o);
	need_memory(s);
	if (none) {
		c->fast.makespan = -1;
		c->note = "the heuristic finds no order here";
	} else {
		evaluate(s, c);
		for (int j = 0; j < s->n - 1 && !c->dup; j++)
			if (s->c[j].zb && s->c[j].setup == k && !s->c[j].dup && same_order(c, &s->c[j], md->pp))
				c->dup = 1;
		c->note = c->dup ? "the same order as an earlier budget's" : NULL;
	}
	return (int)(c - s->c);
}

/* The heuristic at the cap: each rank's budget is the cap less its static bytes.  Its
 * memory model counts saved activations only, the fast model also the tensors in
 * flight: an order that overshoots the cap is made again with each overshooting rank's
 * budget cut to the heuristic's own peak there less the overshoot (`zb+fitN`), until it
 * fits, up to AUTO_ZB_FIT times; the cut may go deeper than needed (the tensors in
 * flight change with the order), so the budgets between the last that overshot and the
 * first that fits are then bisected (`zb+midN`), AUTO_ZB_MID times.  All in the fast
 * model; the ranking's confirmation follows.  zm: the model the heuristic is given
 * (setup k's, or with the edges rounded down: add_zb), name its candidates' label. */
static void zb_ladder(Search *s, int k, const AutoModel *zm, const char *name)
{
	const AutoModel *md = &s->setups[k].md;
	int pp = md->pp;
	int64_t *maxmem = arena_alloc(s->a, (size_t)pp * sizeof *maxmem);
	for (int p = 0; p < pp; p++)
		maxmem[p] = s->cap ? s->cap - md->stat[p] : INT64_MAX / 4;
	int i = zb_cand(s, k, zm, maxmem, name, ""), fit = -1, over = -1;
	for (int round = 0; s->cap && i >= 0 && round < AUTO_ZB_FIT; round++) {
		const Cand *c = &s->c[i];
		if (c->fast.makespan < 0)
			break;
		if (c->fast_fits) {
			fit = i;
			break;
		}
		over = i;
		const int64_t *pk = auto_eval_peaks(s->setups[k].sc); // c's: the last evaluated
		maxmem = arena_alloc(s->a, (size_t)pp * sizeof *maxmem);
		for (int q = 0; q < pp; q++) {
			int64_t x = pk[q] - s->cap, top = c->zpeak[q] < c->zmax[q] ? c->zpeak[q] : c->zmax[q];
			maxmem[q] = x > 0 ? top - x : c->zmax[q];
		}
		char suffix[16];
		snprintf(suffix, sizeof suffix, "+fit%d", round + 1);
		i = zb_cand(s, k, zm, maxmem, name, suffix);
		s->c[i].zb = 2;
	}
	for (int round = 0; fit >= 0 && over >= 0 && round < AUTO_ZB_MID; round++) {
		const int64_t *lo = s->c[fit].zmax, *hi = s->c[over].zmax;
		int64_t gap = 0;
		maxmem = arena_alloc(s->a, (size_t)pp * sizeof *maxmem);
		for (int q = 0; q < pp; q++) {
			maxmem[q] = lo[q] + (hi[q] - lo[q]) / 2;
			gap = hi[q] - lo[q] > gap ? hi[q] - lo[q] : gap;
		}
		if (gap < 2)
			break;
		char suffix[16];
		snprintf(suffix, sizeof suffix, "+mid%d", round + 1);
		int j = zb_cand(s, k, zm, maxmem, name, suffix);
		s->c[j].zb = 2;
		if (s->c[j].fast.makespan < 0)
			break;
		if (s->c[j].fast_fits)
			fit = j;
		else
			over = j;
	}
	/* Every rank's budget lower by k forwards' activations (`zb-k`): the heuristic's
	 * orders change at such steps, and the cut above may skip the fastest that fits. */
	int64_t unit = INT64_MAX;
	for (int st = 0; st < md->ns; st++)
		if (md->save[st][0] + md->save[st][1] > 0 && md->save[st][0] + md->save[st][1] < unit)
			unit = md->save[st][0] + md->save[st][1];
	for (int step = 1; s->cap && i >= 0 && unit < INT64_MAX && step <= AUTO_ZB_LADDER; step++) {
		maxmem = arena_alloc(s->a, (size_t)pp * sizeof *maxmem);
		for (int q = 0; q < pp; q++)
			maxmem[q] = s->cap - md->stat[q] - step * unit;
		char suffix[16];
		snprintf(suffix, sizeof suffix, "-%d", step);
		int j = zb_cand(s, k, zm, maxmem, name, suffix);
		s->c[j].zb = 2;
		if (s->c[j].fast.makespan < 0)
			break;
	}
}

/* The heuristic's ladder (zb_ladder) on the setup's transfer times, and where a link's
 * bandwidth term is no whole number of ns, again with it rounded down (`zb/floor`):
 * pipecc counts latency + the term rounded up, which the heuristic, published in real
 * numbers, is not given for such a link (latency=2us bandwidth=1000TB/s is 2 us to it,
 * 2.001 to pipecc), and its choices change at such a step (issue 51: p=8, m=16,
 * 10:11:9, 2 us, 12 activations: 571.011 us on the rounded-up time, 567.010 on 2 us). */
static void add_zb(Search *s, int k)
{
	const Setup *u = &s->setups[k];
	zb_ladder(s, k, &u->md, "zb");
	if (u->down) {
		AutoModel zm = u->md;
		zm.edges = u->down;
		zb_ladder(s, k, &zm, "zb/floor");
	}
}

/* The fast model's ranking: runnable first, then fitting, then step, then summed
 * finish times, then the order of making, so the ranking is deterministic. */
static int before(const Cand *a, int ia, const Cand *b, int ib)
{
	int ra = a->fast.makespan >= 0, rb = b->fast.makespan >= 0;
	if (ra != rb)
		return ra;
	if (a->fast_fits != b->fast_fits)
		return a->fast_fits;
	if (a->fast.makespan != b->fast.makespan)
		return a->fast.makespan < b->fast.makespan;
	if (a->fast.finish_sum != b->fast.finish_sum)
		return a->fast.finish_sum < b->fast.finish_sum;
	return ia < ib;
}

/* The candidates' indexes, best first, into s->ix (the last ranking's, freed). */
static int *ranking(Search *s)
{
	free(s->ix);
	int *ix = s->ix = malloc((size_t)(s->n ? s->n : 1) * sizeof *ix);
	if (!ix)
		arena_oom(s->a, (size_t)s->n * sizeof *ix);
	for (int i = 0; i < s->n; i++) { // insertion: a few hundred candidates at most
		int j = i;
		while (j > 0 && before(&s->c[i], i, &s->c[ix[j - 1]], ix[j - 1])) {
			ix[j] = ix[j - 1];
			j--;
		}
		ix[j] = i;
	}
	return ix;
}

/* A copy of candidate i's order as a new candidate named after it with suffix; returns
 * the copy (new_cand may move s->c: a pointer into it read before the call is stale),
 * and its ops in *ops. */
static Cand *copy_cand(Search *s, int i, const char *suffix, int64_t *ops)
{
	int setup = s->c[i].setup;
	const AutoModel *md = &s->setups[setup].md;
	char label[48];
	snprintf(label, sizeof label, "%.*s%s", (int)(sizeof label - 1 - strlen(suffix)),
	         s->c[i].label, suffix);
	Cand *d = new_cand(s, setup, label), *c = &s->c[i]; // new_cand may move the array
	*ops = 0;
	for (int p = 0; p < md->pp; p++) {
		d->acts[p] = malloc(((size_t)c->nacts[p] + 1) * sizeof(SchedAct));
		if (!d->acts[p])
			arena_oom(s->a, (size_t)c->nacts[p] * sizeof(SchedAct));
		memcpy(d->acts[p], c->acts[p], (size_t)c->nacts[p] * sizeof(SchedAct));
		d->nacts[p] = c->nacts[p];
		*ops += c->nacts[p];
	}
	d->fast = c->fast;
	return d;
}

/* A copy of list candidate i improved by swaps (auto_improve); returns its index. */
static int improve_one(Search *s, int i)
{
	int64_t ops;
	Cand *d = copy_cand(s, i, "+swaps", &ops);
	const Setup *u = &s->setups[d->setup];
	d->list = 2;
	d->lo = s->c[i].lo;
	int budget = (int)(3000000 / (ops + 1));
	if (budget < 200)
		budget = 200;
	int64_t limit = s->cap ? s->cap : INT64_MAX;
	s->evals += auto_improve(&u->md, u->sc, d->acts, d->nacts, limit, budget, &d->fast);
	d->fast_fits = 1;
	return (int)(d - s->c);
}

/* Local improvement of the best fitting orders the list scheduler made. */
static void improve(Search *s)
{
	int *ix = ranking(s), done = 0, n = s->n;
	for (int k = 0; k < n && done < AUTO_IMPROVE; k++) {
		if (!s->c[ix[k]].fast_fits || s->c[ix[k]].list != 1)
			continue;
		improve_one(s, ix[k]);
		done++;
	}
}

/* The fastest orders that overshoot the cap (but could fit: their saved activations
 * do) made to fit by moving ops near the overshooting ranks' peaks (auto_fit), then
 * improved (`+fix`): what a budget cut would slow down everywhere, moves cost only where
 * the memory is short. */
static void fix(Search *s)
{
	int *ix = ranking(s), done = 0, n = s->n;
	for (int k = 0; k < n && done < AUTO_FIX && s->cap; k++) {
		const Cand *c = &s->c[ix[k]];
		if (c->fast.makespan < 0 || c->fast_fits || c->fast.low > s->cap)
			continue;
		int64_t ops;
		Cand *d = copy_cand(s, ix[k], "+fix", &ops);
		const Setup *u = &s->setups[d->setup];
		d->fixed = 1;
		int budget = (int)(3000000 / (ops + 1));
		budget = budget < 300 ? 300 : budget;
		int spent = auto_fit(&u->md, u->sc, d->acts, d->nacts, s->cap, budget, &d->fast);
		need_memory(s);
		s->evals += spent;
		if (d->fast.makespan >= 0 && d->fast.peak <= s->cap && spent < budget)
			s->evals += auto_improve(&u->md, u->sc, d->acts, d->nacts, s->cap, budget - spent,
			                         &d->fast);
		evaluate(s, d);
		done++;
	}
}

/* Simulated annealing (auto_anneal, `+anneal`): greedy orders and their local
 * improvement stop at the first order no single move improves; the annealing also
 * takes worse moves, so it leaves such an optimum (worth most where memory is tight and
 * the best orders are unlike any generator's).  Hot (three mean op costs) from the
 * fastest order that fits in the fast model, to roam; cool (a tenth of one) from the
 * fastest that overshoots the cap but whose saved activations fit, to settle it under
 * the cap with little lost.  About AUTO_ANNEAL_OPS op visits each (at most AUTO_ANNEAL
 * evaluations), so their time stays flat as orders grow. */
static void anneal(Search *s)
{
	int *ix = ranking(s), from[2] = {-1, -1};
	for (int k = 0; k < s->n; k++) {
		const Cand *c = &s->c[ix[k]];
		int over = !c->fast_fits;
		if (c->fast.makespan >= 0 && from[over] < 0 && (!over || (s->cap && c->fast.low <= s->cap)))
			from[over] = ix[k];
	}
	for (int over = 0; over < 2; over++) {
		if (from[over] < 0)
			continue;
		int64_t ops;
		Cand *d = copy_cand(s, from[over], "+anneal", &ops);
		const Setup *u = &s->setups[d->setup];
		d->fixed = 1;
		int64_t budget = AUTO_ANNEAL_OPS / (ops + 1);
		budget = budget < 300 ? 300 : budget > AUTO_ANNEAL ? AUTO_ANNEAL : budget;
		s->evals += auto_anneal(&u->md, u->sc, d->acts, d->nacts, s->cap ? s->cap : INT64_MAX,
		                        over ? 0.1 : 3, (int)budget, &d->fast);
		need_memory(s);
		evaluate(s, d);
	}
}

/* Compiles candidate c for real under one tuning: its plan, or NULL (c->note says why). */
static Plan *compile_cand(Search *s, Cand *c, int tune)
{
	Setup *u = &s->setups[c->setup];
	const Program *q = program_with(s, u->recompute);
	SchedCtx ctx;
	init_ctx(s, &ctx, q, u->stage_pp);
	for (int p = 0; p < ctx.pp; p++) {
		ctx.acts[p] = c->acts[p];
		ctx.nacts[p] = c->nacts[p];
	}
	Plan *p = lower_program(q, &ctx, &s->sink, 0, tune, 1);
	need_memory(s);
	if (!p) {
		c->note = "the lowering rejects the order";
		return NULL;
	}
	PlanError err;
	if (plan_verify(p, &err)) {
		c->note = "the plan fails verification";
		plan_free(p);
		s->oom |= plan_error_is_oom(&err);
		need_memory(s);
		return NULL;
	}
	p->mem_cap = s->cap;
	return p;
}

static void confirm(Search *s, Cand *c)
{
	c->state = -1;
	for (int tune = 0; tune < 2; tune++) {
		Plan *p = s->plan = compile_cand(s, c, tune); // freed by search_free on the way out
		if (!p)
			return;
		int64_t *peaks = arena_alloc(s->a, (size_t)p->world * sizeof *peaks);
		int64_t peak = plan_mem_peaks(p, peaks);
		SimOptions so = {.model = SIM_OVERLAP, .verified = 1}; // compile_cand verified it
		SimResult r;
		int rc = peak < 0 ? -1 : sim_run(p, &so, &r);
		if (rc < 0) { // plan_mem_peaks and sim_run fail for want of memory alone
			if (peak >= 0)
				sim_result_free(&r);
			arena_oom(s->a, 0);
		}
		int fits = !s->cap || peak <= s->cap; // a tuning that fits beats a faster one
		if (peak >= 0) {
			if (rc == 0 && (c->state < 1 || fits > c->fits ||
			                (fits == c->fits && r.makespan < c->step))) {
				c->state = 1;
				c->step = r.makespan;
				c->bubble = r.bubble;
				c->tune = tune;
				c->peak = peak;
				c->peaks = peaks;
				c->fits = fits;
			} else if (rc != 0 && c->state < 1) {
				c->note = r.verdict == SIM_DEADLOCK ? "pipesim finds a deadlock"
				                                    : "pipesim cannot run it";
			}
			sim_result_free(&r);
		}
		plan_free(p);
		s->plan = NULL;
	}
}

static const char *place_name(int k)
{
	return k == PLACE_V ? "v" : k == PLACE_LIST ? "given" : "loop";
}

static void explain_row(FILE *f, const Search *s, const Cand *c)
{
	const Setup *u = &s->setups[c->setup];
	const AutoFig *x = &c->fast;
	char pk[32], step[24] = "-", bub[16] = "-", fast[24] = "-";
	if (x->makespan >= 0) {
		plan_time_text(fast, sizeof fast, x->makespan);
		double b = x->makespan ? 1 - (double)x->busy / ((double)u->md.pp * x->makespan) : 0;
		snprintf(bub, sizeof bub, "%.1f%%", 100 * (c->state == 1 ? c->bubble : b));
	}
	if (c->state == 1)
		plan_time_text(step, sizeof step, c->step);
	plan_mem_text(pk, sizeof pk, c->state == 1 ? c->peak : x->peak);
	const char *fits = c->state == 1 ? (c->fits ? "yes" : "no")
	                   : x->makespan < 0 ? "-" : c->fast_fits ? "yes?" : "no";
	fprintf(f, "  %-26s %-5s %6d %-9s %10s %10s %7s %10s %-4s", c->label, place_name(u->place),
	        u->md.ns / u->md.pp, recompute_name(u->recompute ? u->recompute : s->pr->recompute_all),
	        fast, step, bub, x->makespan >= 0 ? pk : "-", fits);
	if (c->state == 1)
		fprintf(f, " tune=%s", c->tune ? "overlap" : "strict");
	else if (c->note)
		fprintf(f, " (%s)", c->note);
	fputc('\n', f);
}

static void explain(FILE *f, const Search *s, const int *ix, int win, int nconf)
{
	char t[32];
	fprintf(f, "schedule auto: %d candidates, %ld fast evaluations, %d confirmed to fit in pipesim's "
	           "overlap model; device memory %s\n",
	        s->n, s->evals, nconf, s->cap ? plan_mem_text(t, sizeof t, s->cap) : "not stated");
	fprintf(f, "  %-26s %-5s %6s %-9s %10s %10s %7s %10s %-4s\n", "candidate", "place", "chunks",
	        "recompute", "fast", "step", "bubble", "peak", "fits");
	for (int k = 0; k < s->n; k++)
		explain_row(f, s, &s->c[ix[k]]);
	fprintf(f, "  (fast: the search's own model; step, bubble, peak and fits of confirmed rows "
	           "are pipesim's overlap model and the memory model; other rows' peak and 'yes?' "
	           "are the fast model's, tensors in flight as --tune=overlap places them)\n");
	if (win < 0)
		return;
	const Cand *w = &s->c[win];
	int second = -1;
	for (int k = 0; k < s->n; k++) {
		const Cand *c = &s->c[ix[k]];
		if (ix[k] != win && c->state == 1 && c->fits && (second < 0 || c->step < s->c[second].step))
			second = ix[k];
	}
	char a[32], b[32];
	fprintf(f, "chosen: %s: %s a step in the overlap model, the lowest of the confirmed "
	        "candidates that fit", w->label, plan_time_text(a, sizeof a, w->step));
	if (second >= 0)
		fprintf(f, "; next %s at %s (+%.2f%%)", s->c[second].label,
		        plan_time_text(b, sizeof b, s->c[second].step),
		        100.0 * (double)(s->c[second].step - w->step) / (double)w->step);
	fputs(w->tune ? "\nthe plan records tune=overlap: pipesim simulates it in that model "
	                "unless given --model\n"
	              : "\nits communication is ordered for the strict model, pipesim's default\n",
	      f);
}

/* Placements and recomputation choices to weigh: the program's placement when it writes
 * one, else loop and (two stages a rank) v; the program's recomputation and all. */
static void make_setups(Search *s)
{
	const Program *pr = s->pr;
	int pp = pr->dims[DIM_PP], places[2], np = 0;
	if (pr->place != PLACE_DEFAULT)
		places[np++] = pr->place;
	else {
		places[np++] = PLACE_LOOP;
		if (pr->nstages == 2 * pp)
			places[np++] = PLACE_V;
	}
	for (int i = 0; i < np; i++) {
		int *stage_pp = arena_alloc(s->a, (size_t)pr->nstages * sizeof *stage_pp);
		SchedCtx c;
		init_ctx(s, &c, pr, stage_pp);
		Program q = *pr;
		q.place = (uint8_t)places[i];
		c.prog = &q;
		if (place_stages(&c, &sched_auto))
			continue;
		for (int rc = 0; rc <= (pr->recompute_all ? 0 : PLAN_RECOMPUTE_SELECTIVE); rc++) {
			if (rc == PLAN_RECOMPUTE_SELECTIVE && !selective_helps(pr))
				continue;
			Setup *u = &s->setups[s->nsetups];
			*u = (Setup){.place = places[i], .recompute = rc, .stage_pp = stage_pp};
			if (setup_model(s, u) == 0)
				s->nsetups++;
		}
	}
}

/* A list order the fast model thought fitting may overshoot the cap by its tensors in
 * flight: the best such order is made again with less budget (by the overshoot, at
 * least half a tensor) and improved, until it fits, up to AUTO_REPAIR times; then the
 * next best such order, AUTO_CHAINS in all. */
static void repair(Search *s, int *win)
{
	for (int chain = 0; chain < AUTO_CHAINS; chain++) {
		int k = -1;
		for (int i = 0; i < s->n; i++) {
			const Cand *c = &s->c[i];
			if (c->state == 1 && !c->fits && c->list && !c->repaired &&
			    (*win < 0 || c->step < s->c[*win].step) && (k < 0 || c->step < s->c[k].step))
				k = i;
		}
		for (int round = 0; k >= 0 && round < AUTO_REPAIR; round++) {
			s->c[k].repaired = 1;
			AutoListOpt o = s->c[k].lo;
			int pp = s->pr->dims[DIM_PP];
			int64_t *extra = arena_alloc(s->a, (size_t)pp * sizeof *extra);
			for (int q = 0; q < pp; q++) { // the ranks over the cap, by their overshoot
				int64_t over = s->c[k].peaks[world_rank_of_pp(s, q)] - s->cap;
				extra[q] = (o.extra ? o.extra[q] : 0) + (over > 0 ? over : 0);
			}
			o.extra = extra;
			char label[48];
			snprintf(label, sizeof label, "%.36s+cut%u", s->c[k].label, (unsigned)(round + 1) % 1000u);
			int i = list_cand(s, s->c[k].setup, &o, label);
			if (!s->c[i].fast_fits)
				break;
			int j = improve_one(s, i), next = -1;
			for (int x = 0; x < 2; x++) {
				Cand *c = &s->c[x ? j : i];
				confirm(s, c);
				if (c->state == 1 && c->fits && (*win < 0 || c->step < s->c[*win].step))
					*win = (int)(c - s->c);
				if (c->state == 1 && !c->fits && next < 0)
					next = (int)(c - s->c);
			}
			if (next < 0 || (*win >= 0 && s->c[next].step >= s->c[*win].step))
				break;
			k = next;
		}
	}
}

static ssize_t sink_write(void *cookie, const char *buf, size_t n)
{
	(void)cookie, (void)buf;
	return (ssize_t)n;
}

/* When nothing fits: the smallest real peak among the candidates with the smallest
 * fast peaks (the fast model's are --tune=overlap's; strict may hold less). */
static int smallest_peak(Search *s)
{
	int best = -1;
	for (int round = 0; round < 4; round++) {
		int k = -1;
		for (int i = 0; i < s->n; i++)
			if (s->c[i].state == 0 && s->c[i].fast.makespan >= 0 &&
			    (k < 0 || s->c[i].fast.peak < s->c[k].fast.peak))
				k = i;
		if (k < 0)
			break;
		confirm(s, &s->c[k]);
	}
	for (int i = 0; i < s->n; i++)
		if (s->c[i].state == 1 && (best < 0 || s->c[i].peak < s->c[best].peak))
			best = i;
	return best;
}

static void none_fits(Search *s, Diag *d)
{
	int b = smallest_peak(s);
	char t[2][32];
	Loc at = s->pr->mem_loc.line ? s->pr->mem_loc : s->pr->sched_loc;
	if (b < 0) {
		diag_error(d, s->pr->sched_loc, "schedule auto found no order that runs (%d candidates)",
		           s->n);
		return;
	}
	const Cand *c = &s->c[b];
	diag_error(d, at,
	           "schedule auto: no candidate fits the device's %s: the smallest peak any of the %d "
	           "candidates reached is %s (%s%s%s)",
	           plan_mem_text(t[0], 32, s->cap), s->n, plan_mem_text(t[1], 32, c->peak), c->label,
	           s->setups[c->setup].recompute ? ", recompute * " : "",
	           s->setups[c->setup].recompute ? recompute_name(s->setups[c->setup].recompute) : "");
	diag_note(d, at, "pipecc --explain lists every candidate with its peak");
}

static void take_winner(Search *s, Cand *w, SchedChoice *out)
{
	Setup *u = &s->setups[w->setup];
	out->acts = w->acts;
	out->nacts = w->nacts;
	w->acts = NULL;
	w->nacts = NULL;
	snprintf(out->label, sizeof out->label, "auto/%s", w->label);
	out->tune_overlap = w->tune;
	out->stage_pp = u->stage_pp;
	out->recompute = (uint8_t)u->recompute;
	out->step = w->step;
}

/* Frees what the search holds, on its way out or out of memory. */
static void search_free(Search *s)
{
	free(s->ix);
	for (int i = 0; i < s->n; i++) {
		for (int p = 0; s->c[i].acts && p < s->pr->dims[DIM_PP]; p++)
			free(s->c[i].acts[p]);
		free(s->c[i].acts);
		free(s->c[i].nacts);
	}
	free(s->c);
	for (int k = 0; k < s->nsetups; k++)
		free(s->setups[k].sc);
	plan_free(s->plan);
	if (s->null)
		fclose(s->null);
	free(s);
}

/* The search proper (auto_search). */
static int search_run(Search *s, Diag *d, FILE *ex, SchedChoice *out)
{
	s->null = fopencookie(NULL, "w", (cookie_io_functions_t){.write = sink_write});
	if (!s->null)
		arena_oom(s->a, sizeof(FILE));
	diag_init(&s->sink, d->file, d->src, d->srclen, s->null);
	s->sink.max_errors = 1;
	make_setups(s);
	for (int k = 0; k < s->nsetups; k++) {
		add_registry(s, k);
		add_list(s, k);
		add_zb(s, k);
	}
	fix(s);
	improve(s);
	anneal(s);
	/* The best by the fast model, and every registry schedule and heuristic order that
	 * may fit: auto is never slower than the best of those in pipesim.  The fast model's
	 * memory is the plan's under --tune=overlap; --tune=strict posts receives later
	 * and may need less, so an order over the cap whose saved activations fit is
	 * confirmed too when its fast step (a lower bound of pipesim's) beats the winner's
	 * (every distinct heuristic order, AUTO_OTHER of pipecc's own). */
	int *ix = ranking(s), nconf = 0, win = -1;
	for (int k = 0, tries = 0, other = 0; k < s->n; k++) {
		Cand *c = &s->c[ix[k]];
		int top = nconf < AUTO_CONFIRM && tries < AUTO_TRIES;
		int mine = c->list || c->zb > 1 || c->fixed, made = c->list || c->fixed;
		if (c->fast.makespan < 0 || (s->cap && c->fast.low > s->cap) || c->dup)
			continue; // cannot run, cannot fit under either tuning, or weighed already
		if (c->fast_fits && mine && !top)
			continue; // ranked: the next fitting ones are slower
		if (!c->fast_fits && ((win >= 0 && c->fast.makespan >= s->c[win].step) ||
		                      (made && other >= AUTO_OTHER)))
			continue;
		other += !c->fast_fits && made;
		confirm(s, c);
		tries++;
		if (c->state == 1 && c->fits) {
			nconf++;
			if (win < 0 || c->step < s->c[win].step ||
			    (c->step == s->c[win].step && before(c, ix[k], &s->c[win], win)))
				win = ix[k];
		}
	}
	repair(s, &win);
	int errors = 0;
	if (win < 0) {
		int before = d->nerrors;
		none_fits(s, d);
		errors = d->nerrors - before;
	}
	if (ex) {
		ix = ranking(s);
		explain(ex, s, ix, win, nconf);
	}
	if (win >= 0)
		take_winner(s, &s->c[win], out);
	return errors;
}

int auto_search(const Program *pr, Arena *a, Diag *d, FILE *ex, SchedChoice *out)
{
	Search *s = calloc(1, sizeof *s);
	if (!s)
		arena_oom(a, sizeof *s);
	*s = (Search){.pr = pr, .a = a, .cap = pr->mem_cap};
	/* Out of memory anywhere in the search comes here first: what it holds is freed,
	 * then the arena's owner reports it.  (s and outer do not change after setjmp.) */
	jmp_buf jb, *outer = a->oom;
	if (setjmp(jb)) {
		size_t failed = a->failed;
		a->oom = outer;
		search_free(s);
		arena_oom(a, failed);
	}
	a->oom = &jb;
	int errors = search_run(s, d, ex, out);
	a->oom = outer;
	search_free(s);
	return errors;
}
