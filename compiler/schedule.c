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

void sched_push(SchedCtx *c, int pp, int kind, int stage, int mb)
{
	/* Heap, not the arena: orders are the biggest thing the compiler holds besides the
	 * plan, and sched_free() returns them before the plan is verified and written. */
	if (c->nacts[pp] == c->cap[pp]) {
		int cap = c->cap[pp] ? 2 * c->cap[pp] : 64;
		SchedAct *a = realloc(c->acts[pp], (size_t)cap * sizeof *a);
		if (!a) // out of memory is the user's to hear about: pipecc_compile reports it
			arena_oom(c->arena, (size_t)cap * sizeof *a);
		c->acts[pp] = a;
		c->cap[pp] = cap;
	}
	c->acts[pp][c->nacts[pp]++] = (SchedAct){.kind = kind, .stage = stage, .mb = mb};
}

void sched_free(SchedCtx *c)
{
	for (int p = 0; c->acts && p < c->pp; p++) {
		free(c->acts[p]);
		c->acts[p] = NULL;
		c->nacts[p] = c->cap[p] = 0;
	}
}

int sched_stages_on(const SchedCtx *c, int p)
{
	int n = 0;
	for (int s = 0; s < c->nstages; s++)
		n += c->stage_pp[s] == p;
	return n;
}
