/* GPipe (Huang et al. 2019): every forward, then every fused backward.
 * Each rank runs F for microbatches 0..m-1 (local stages in pipeline order within a
 * microbatch), then BW for 0..m-1 (local stages in reverse).  Any placement works.
 * With one stage per rank: peak activations m on every rank, unit-cost makespan
 * 3(m + p - 1). */
#include "sched_common.h"

static int check(SchedCtx *c)
{
	(void)c; // every rank holds at least one stage (the placement pass checks that)
	return 0;
}

static void fill(SchedCtx *c)
{
	for (int i = 0; i < c->m; i++)
		for (int s = 0; s < c->nstages; s++)
			sched_push(c, c->stage_pp[s], OP_F, s, i);
	for (int i = 0; i < c->m; i++)
		for (int s = c->nstages - 1; s >= 0; s--)
			sched_push(c, c->stage_pp[s], OP_BW, s, i);
}

const Schedule sched_gpipe = {
	.name = "gpipe",
	.default_place = PLACE_LOOP,
	.placements = "any placement",
	.check = check,
	.fill = fill,
};
