/* ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): ZB-H1 with more
 * warm-up forwards, so no rank idles between its first and its last op.  The stage at
 * pipeline position i runs
 *   2(p-i)-1 warm-up forwards  (until the first gradient arrives),
 *   (B, W, F) x (m-2p+1),
 *   (B, F) x 2i                W held back,
 *   (B, W) x (2(p-i)-1),
 *   W x 2i,
 * counts clipped when m < 2p-1 (sched_zb_fill in sched_common.c).  Every rank holds
 * at most 2p-1 activations, about twice 1F1B's.
 *
 * Unit costs (f = b = w = 1), m >= 2p-1: every rank is busy without a gap for 3m, from
 * its first op (at i) to its last: that is the paper's zero bubble, (p-1)(F+B-2W) = 0,
 * and the period of consecutive steps when the optimizer step does not synchronize
 * them (the paper's post-validation).  One step as our plans describe it still takes
 * 3m + p - 1: the last rank cannot start before p-1. */
#include "sched_common.h"

static int check(SchedCtx *c)
{
	return sched_check_one_per_rank(c, "zbh2");
}

static void fill(SchedCtx *c)
{
	sched_zb_fill(c, 1);
}

const Schedule sched_zbh2 = {
	.name = "zbh2",
	.default_place = PLACE_LOOP,
	.placements = "one stage per pipeline rank",
	.check = check,
	.fill = fill,
};
