/* DualPipeV (DeepSeek-AI's DualPipe "cut in half"; torch ScheduleDualPipeV): two
 * stages per rank in a V, the rank at position r holding stage r (chunk 0, going down)
 * and stage 2p-1-r (chunk 1, coming back up).  The order follows deepseek-ai/DualPipe's
 * dualpipev.py step by step:
 *   1  2(p-r-1) x F0
 *   2  (r+1) x (F0, F1)
 *   3  (p-r-1) x (B1 split, W, F1)
 *   4  (m-2p+r+1) x (F0 & B1, F1 & B0)         the overlapped pairs
 *   5  (p-r-1) x (B1, F1 & B0)
 *   6  (r+1) x (B1, B0), split from the middle on
 *   7  (p-r-1) x (W, B0 split)
 *   8  (r+1) x W
 * where "F & B" is a forward of one chunk overlapped with the fused backward of the
 * other, "split" a backward whose W goes to a queue that each W step pops.  We have
 * one compute stream per rank (docs/semantics.md), so a pair runs as F, B, W and costs
 * F + B + W: the overlap DualPipe gets from hiding one chunk's communication behind
 * the other's compute is not in our model.  The fused backward is written as B then W
 * (same work and memory): with every action one unit long, ranks are between actions
 * at every unit, so the lowering moves each tensor as soon as it is made even under
 * rendezvous sends; a two-unit BW made tensors wait for their consumer's next gap, up
 * to p - 1 units a step.
 *
 * Needs m >= 2p.  Unit costs (f = b = w = 1 per stage, 6m per rank): makespan
 * 6m + p - 1, the lower bound (the last rank starts at p-1); peak activations 2p + 1
 * stages on every rank. */
#include "sched_common.h"

#define PLACEMENTS "placement v (stages i and 2pp-1-i on one pipeline rank)"

static int check(SchedCtx *c)
{
	if (sched_check_v(c, "dualpipev", PLACEMENTS))
		return 1;
	return sched_check_microbatches(c, "dualpipev", 2 * c->pp, 1,
	                                "2 x pp");
}

typedef struct {
	SchedCtx *c;
	int rank;
	int stage[2];
	int f[2], b[2];  // next forward and backward microbatch per chunk
	int *wq, wh, wt; // queue of split backwards (chunk * m + mb) whose W is pending
} Dp;

static void fwd(Dp *d, int ch)
{
	sched_push(d->c, d->rank, OP_F, d->stage[ch], d->f[ch]++);
}

/* split: B now, W queued for a later W step (DualPipe's WeightGradStore); otherwise
 * the W right after its B. */
static void bwd(Dp *d, int ch, int split)
{
	int mb = d->b[ch]++;
	sched_push(d->c, d->rank, OP_B, d->stage[ch], mb);
	if (split)
		d->wq[d->wt++] = ch * d->c->m + mb;
	else
		sched_push(d->c, d->rank, OP_W, d->stage[ch], mb);
}

static void wstep(Dp *d)
{
	int k = d->wq[d->wh++];
	sched_push(d->c, d->rank, OP_W, d->stage[k / d->c->m], k % d->c->m);
}

static void fill(SchedCtx *c)
{
	int p = c->pp, m = c->m;
	int *wq = arena_alloc(c->arena, (size_t)2 * m * sizeof *wq);
	for (int r = 0; r < p; r++) {
		Dp d = {.c = c, .rank = c->stage_pp[r], .stage = {r, 2 * p - 1 - r}, .wq = wq};
		for (int k = 0; k < 2 * (p - r - 1); k++)
			fwd(&d, 0);
		for (int k = 0; k < r + 1; k++) {
			fwd(&d, 0);
			fwd(&d, 1);
		}
		for (int k = 0; k < p - r - 1; k++) {
			bwd(&d, 1, 1);
			wstep(&d);
			fwd(&d, 1);
		}
		for (int k = 0; k < m - 2 * p + r + 1; k++) {
			fwd(&d, 0);
			bwd(&d, 1, 0);
			fwd(&d, 1);
			bwd(&d, 0, 0);
		}
		for (int k = 0; k < p - r - 1; k++) {
			bwd(&d, 1, 0);
			fwd(&d, 1);
			bwd(&d, 0, 0);
		}
		int split = 0, half = (r + 1) / 2;
		for (int k = 0; k < r + 1; k++) {
			if (k == half && r % 2 == 1)
				split = 1;
			bwd(&d, 1, split);
			if (k == half && r % 2 == 0)
				split = 1;
			bwd(&d, 0, split);
		}
		for (int k = 0; k < p - r - 1; k++) {
			wstep(&d);
			bwd(&d, 0, 1);
		}
		while (d.wh < d.wt)
			wstep(&d);
	}
}

const Schedule sched_dualpipev = {
	.name = "dualpipev",
	.chunks = 2,
	.default_place = PLACE_V,
	.placements = PLACEMENTS,
	.check = check,
	.fill = fill,
};
