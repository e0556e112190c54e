/* ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B with the
 * backward split into B (input gradient, on the critical path) and W (weight
 * gradient, free to move).  The stage at pipeline position i runs
 *   p-i warm-up forwards,
 *   (B, W, F) x (m-p)      the steady state, like 1F1B's,
 *   (B, F) x i             W held back so the last B's hurry down the pipeline,
 *   (B, W) x (p-i),
 *   W x i                  the held-back W's fill the cool-down,
 * counts clipped when m < p (sched_zb_fill, shared with ZB-H2).  Every rank holds at
 * most p activations, 1F1B's peak.
 *
 * Unit costs (f = b = w = 1): makespan 3m + p - 1 for m >= p, 2m + 2p - 1 for m < p.
 * Both are lower bounds for any order: the last rank cannot start before p-1 and has
 * 3m of work; rank 0 cannot get a gradient before 2p-1 and then has 2m of work. */
#include "sched_common.h"

static int check(SchedCtx *c)
{
	return sched_check_one_per_rank(c, "zbh1");
}

static void fill(SchedCtx *c)
{
	sched_zb_fill(c, 0);
}

const Schedule sched_zbh1 = {
	.name = "zbh1",
	.default_place = PLACE_LOOP,
	.placements = "one stage per pipeline rank",
	.check = check,
	.fill = fill,
};
