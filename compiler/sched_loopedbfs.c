/* Looped BFS (torch ScheduleLoopedBFS; Lamy-Poirier 2023, "Breadth-First Pipeline
 * Parallelism"): each rank runs every microbatch through one local stage before
 * moving to the next, in pipeline order; then the fused backwards, local stages in
 * reverse and microbatches in reverse.  Any placement works: every rank visits its
 * stages in increasing order going forward and decreasing order going back, which is
 * the order the data flows, so no rank ever waits on a rank that waits on it.
 *
 * With `loop` placement, v stages per rank and unit costs (f = b = w = 1 per stage):
 * makespan 3(vm + pp - 1) when m >= pp, 3(m + v*pp - 1) when m <= pp (then no rank
 * ever has two stages ready at once: it is GPipe over v*pp stages); peak activations
 * v*m on every rank. */
#include "sched_common.h"

static int check(SchedCtx *c)
{
	(void)c; // every rank holds at least one stage (the placement pass checks that)
	return 0;
}

static void fill(SchedCtx *c)
{
	int *local = arena_alloc(c->arena, (size_t)c->nstages * sizeof *local);
	for (int p = 0; p < c->pp; p++) {
		int n = sched_local_stages(c, p, local);
		for (int k = 0; k < n; k++)
			for (int i = 0; i < c->m; i++)
				sched_push(c, p, OP_F, local[k], i);
		for (int k = n - 1; k >= 0; k--)
			for (int i = c->m - 1; i >= 0; i--)
				sched_push(c, p, OP_BW, local[k], i);
	}
}

const Schedule sched_loopedbfs = {
	.name = "loopedbfs",
	.chunks = 2,
	.default_place = PLACE_LOOP,
	.placements = "any placement",
	.check = check,
	.fill = fill,
};
