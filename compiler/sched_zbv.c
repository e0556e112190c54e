/* ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024; torch
 * ScheduleZBVZeroBubble): two stages per rank in a V, the rank at position r holding
 * stage r (chunk 0, going down) and stage 2p-1-r (chunk 1, coming back up), backward
 * split into B and W.  The order is torch's: 2(p-r)-1 forwards of chunk 0; r pairs
 * (F1, F0); p-r steps (F1, B1, W1); steady steps (F0, B0, W0, F1, B1, W1) until every
 * forward is done; r pairs (B0, B1); p-r pairs (B0, W0); the rest of the W's, chunk 1's
 * first.  It is built for n = max(m, 2p-1) microbatches and the actions of microbatches
 * >= m dropped, as torch does.
 *
 * Unit costs (f = b = w = 1 per stage, 6m of work per rank): makespan
 * max(6m + p - 1, 4m + 4p - 2); the first term, reached when 2m >= 3p-1, is a lower
 * bound (the last rank starts at p-1).  Peak activations min(2m, 2p) stages on every
 * rank: 1F1B's memory, counted in stages of half the size. */
#include "sched_common.h"

#define PLACEMENTS "placement v (stages i and 2pp-1-i on one pipeline rank)"

static int check(SchedCtx *c)
{
	return sched_check_v(c, "zbv", PLACEMENTS);
}

typedef struct {
	SchedCtx *c;
	int rank, m;
	int stage[2];
} Emit;

/* Microbatches >= m exist only to keep torch's step counts; drop their actions. */
static void emit(Emit *e, int kind, int chunk, int mb)
{
	if (mb < e->m)
		sched_push(e->c, e->rank, kind, e->stage[chunk], mb);
}

static void fill(SchedCtx *c)
{
	int p = c->pp, n = c->m > 2 * p - 1 ? c->m : 2 * p - 1;
	for (int r = 0; r < p; r++) {
		Emit e = {c, c->stage_pp[r], c->m, {r, 2 * p - 1 - r}};
		int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
		for (int k = 0; k < 2 * (p - r) - 1; k++)
			emit(&e, OP_F, 0, f0++);
		for (int k = 0; k < r; k++) {
			emit(&e, OP_F, 1, f1++);
			emit(&e, OP_F, 0, f0++);
		}
		for (int k = 0; k < p - r; k++) {
			emit(&e, OP_F, 1, f1++);
			emit(&e, OP_B, 1, b1);
			emit(&e, OP_W, 1, b1++);
		}
		while (f1 < f0 || f0 < n) {
			if (f0 < n)
				emit(&e, OP_F, 0, f0++);
			emit(&e, OP_B, 0, b0);
			emit(&e, OP_W, 0, b0++);
			emit(&e, OP_F, 1, f1++);
			emit(&e, OP_B, 1, b1);
			emit(&e, OP_W, 1, b1++);
		}
		int w0 = b0, w1 = b1;
		for (int k = 0; k < r; k++) {
			emit(&e, OP_B, 0, b0++);
			emit(&e, OP_B, 1, b1++);
		}
		for (int k = 0; k < p - r; k++) {
			emit(&e, OP_B, 0, b0++);
			emit(&e, OP_W, 0, w0++);
		}
		while (w1 < b1)
			emit(&e, OP_W, 1, w1++);
		while (w0 < b0)
			emit(&e, OP_W, 0, w0++);
	}
}

const Schedule sched_zbv = {
	.name = "zbv",
	.chunks = 2,
	.default_place = PLACE_V,
	.placements = PLACEMENTS,
	.check = check,
	.fill = fill,
};
