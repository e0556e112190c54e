/* The schedule registry and the helpers every schedule uses.  A schedule is found by
 * name; the table below is the only place that lists them. */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

extern const Schedule sched_gpipe, sched_1f1b, sched_interleaved, sched_loopedbfs, sched_zbh1,
	sched_zbh2, sched_zbv, sched_dualpipev, sched_custom, sched_csv, sched_auto;

const Schedule *const sched_registry[] = {
	&sched_gpipe,
	&sched_1f1b,
	&sched_interleaved,
	&sched_loopedbfs,
	&sched_zbh1,
	&sched_zbh2,
	&sched_zbv,
	&sched_dualpipev,
	&sched_custom,
	&sched_csv,
	&sched_auto,
};
const int sched_count = sizeof sched_registry / sizeof sched_registry[0];

const Schedule *sched_find(const char *name)
{
	for (int i = 0; i < sched_count; i++)
		if (strcmp(sched_registry[i]->name, name) == 0)
			return sched_registry[i];
	return NULL;
}

/* realloc, or out of memory for the user to hear about (pipecc_compile reports it). */
static void *grow(SchedCtx *c, void *old, size_t bytes)
{
	void *a = realloc(old, bytes);
	if (!a)
		arena_oom(c->arena, bytes);
	return a;
}

void sched_push(SchedCtx *c, int pp, int kind, int stage, int mb)
{
	/* Heap, not the arena: orders are the biggest thing the compiler holds besides the
	 * plan, and sched_free() returns them before the plan is verified and written. */
	if (c->nacts[pp] == c->cap[pp]) {
		int cap = c->cap[pp] ? 2 * c->cap[pp] : 64;
		c->acts[pp] = grow(c, c->acts[pp], (size_t)cap * sizeof **c->acts);
		if (c->locs)
			c->locs[pp] = grow(c, c->locs[pp], (size_t)cap * sizeof **c->locs);
		c->cap[pp] = cap;
	}
	c->acts[pp][c->nacts[pp]++] = (SchedAct){.kind = (uint8_t)kind, .stage = stage, .mb = mb};
}

void sched_push_at(SchedCtx *c, int pp, int kind, int stage, int mb, Loc loc)
{
	if (!c->locs) { // the first: every order so far gets room for its locations
		if (!(c->locs = calloc((size_t)c->pp, sizeof *c->locs)))
			arena_oom(c->arena, (size_t)c->pp * sizeof *c->locs);
		for (int p = 0; p < c->pp; p++)
			if (c->cap[p]) {
				c->locs[p] = grow(c, NULL, (size_t)c->cap[p] * sizeof **c->locs);
				memset(c->locs[p], 0, (size_t)c->nacts[p] * sizeof **c->locs);
			}
	}
	sched_push(c, pp, kind, stage, mb);
	c->locs[pp][c->nacts[pp] - 1] = loc;
}

/* The rule of an F&B pair, the one the plan verifier applies to its ops (plan_op_paired):
 * a forward, then a backward (B or BW) of another stage. */
const char *sched_pair(SchedCtx *c, int pp)
{
	int n = c->nacts[pp];
	SchedAct *a = n >= 2 ? &c->acts[pp][n - 2] : NULL;
	if (!a || a->kind != OP_F || (a[1].kind != OP_B && a[1].kind != OP_BW) ||
	    a[1].stage == a->stage)
		return "an overlapped pair is a forward and then a backward (B or I) of another "
		       "stage, like 0F3&3B1";
	a->pair = 1;
	return NULL;
}

void sched_drop_locs(SchedCtx *c)
{
	for (int p = 0; c->locs && p < c->pp; p++)
		free(c->locs[p]);
	free(c->locs);
	c->locs = NULL;
}

void sched_free(SchedCtx *c)
{
	sched_drop_locs(c);
	for (int p = 0; c->acts && p < c->pp; p++) {
		free(c->acts[p]);
		c->acts[p] = NULL;
		c->nacts[p] = c->cap[p] = 0;
	}
}

void sched_take(SchedCtx *c, const SchedChoice *ch)
{
	for (int p = 0; p < c->pp; p++)
		for (int i = 0; i < ch->nacts[p]; i++) {
			const SchedAct *a = &ch->acts[p][i];
			sched_push(c, p, a->kind, a->stage, a->mb);
		}
}

void sched_choice_free(SchedChoice *ch, int pp)
{
	for (int p = 0; ch->acts && p < pp; p++)
		free(ch->acts[p]);
	free(ch->acts);
	free(ch->nacts);
	ch->acts = NULL;
	ch->nacts = NULL;
}

int sched_stages_on(const SchedCtx *c, int p)
{
	int n = 0;
	for (int s = 0; s < c->nstages; s++)
		n += c->stage_pp[s] == p;
	return n;
}
