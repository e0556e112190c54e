/* 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage i runs p-1-i warm-up forwards,
 * then alternates one forward and one fused backward, then drains the backwards.
 * Peak activations on rank i: min(p - i, m).  Unit-cost makespan: 3(m + p - 1). */
#include "sched_common.h"

static int check(SchedCtx *c)
{
	return sched_check_one_per_rank(c, "1f1b");
}

static void fill(SchedCtx *c)
{
	for (int s = 0; s < c->nstages; s++) {
		int p = c->stage_pp[s];
		int warm = c->nstages - 1 - s; // by pipeline position, not pp index
		if (warm > c->m)
			warm = c->m;
		int f = 0, b = 0;
		while (f < warm)
			sched_push(c, p, OP_F, s, f++);
		while (f < c->m) {
			sched_push(c, p, OP_F, s, f++);
			sched_push(c, p, OP_BW, s, b++);
		}
		while (b < c->m)
			sched_push(c, p, OP_BW, s, b++);
	}
}

const Schedule sched_1f1b = {
	.name = "1f1b",
	.default_place = PLACE_LOOP,
	.placements = "one stage per pipeline rank",
	.check = check,
	.fill = fill,
};
