/* Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM; torch ScheduleInterleaved1F1B).
 * Each pipeline rank holds v stages dealt round-robin: the rank at position j (the one
 * holding stage j < pp) holds stages j, j + pp, ..., j + (v-1)pp, its chunks 0..v-1.
 * Microbatches go in rounds of r = m / max(1, m / pp) (torch's rounds: r = pp when pp
 * divides m; m must be a multiple of the round count): a rank's k-th forward is chunk
 * (k mod v*r) / r of microbatch (k / (v*r)) * r + k mod r, and its k-th backward the
 * same with the chunks reversed.  Position j first runs (v-1)r + 2(pp-1-j) warm-up
 * forwards (at most vm), then alternates one forward and one fused backward, then
 * drains the backwards.  With v = 1 the warm-up is pp-1-j and the schedule is 1F1B.
 *
 * Unit costs (f = b = w = 1 per stage) and m a multiple of pp: makespan
 * 3vm + 3(pp-1); peak activations at position j: min(vm, (v-1)pp + 2(pp-1-j) + 1). */
#include "sched_common.h"

#define PLACEMENTS "placement loop (stages i, i+pp, i+2pp, ... on one pipeline rank)"

static int check(SchedCtx *c)
{
	if (sched_check_loop(c, "interleaved", PLACEMENTS))
		return 1;
	if (c->nstages == c->pp)
		return 0;
	int rounds = c->m / c->pp > 1 ? c->m / c->pp : 1;
	char why[96];
	snprintf(why, sizeof why, "they go through the ranks in %d round%s of m / %d", rounds,
	         rounds > 1 ? "s" : "", rounds);
	return sched_check_microbatches(c, "interleaved", 1, rounds, why);
}

/* Microbatches a round: torch's m / max(1, m / pp). */
static int round_size(const SchedCtx *c)
{
	return c->m / (c->m / c->pp > 1 ? c->m / c->pp : 1);
}

/* A rank's k-th forward (bwd: k-th backward) at position j: chunk and microbatch. */
static void push_kth(SchedCtx *c, int rank, int j, int v, int k, int bwd)
{
	int pp = c->pp, r = round_size(c), chunk = k % (r * v) / r, mb = k / (r * v) * r + k % r;
	if (bwd)
		sched_push(c, rank, OP_BW, (v - 1 - chunk) * pp + j, mb);
	else
		sched_push(c, rank, OP_F, chunk * pp + j, mb);
}

static void fill(SchedCtx *c)
{
	int pp = c->pp, v = c->nstages / pp, total = v * c->m;
	for (int j = 0; j < pp; j++) {
		int rank = c->stage_pp[j];
		int warm = v == 1 ? pp - 1 - j : (v - 1) * round_size(c) + 2 * (pp - 1 - j);
		if (warm > total)
			warm = total;
		int f = 0, b = 0;
		while (f < warm)
			push_kth(c, rank, j, v, f++, 0);
		while (f < total) {
			push_kth(c, rank, j, v, f++, 0);
			push_kth(c, rank, j, v, b++, 1);
		}
		while (b < total)
			push_kth(c, rank, j, v, b++, 1);
	}
}

const Schedule sched_interleaved = {
	.name = "interleaved",
	.chunks = 2,
	.default_place = PLACE_LOOP,
	.placements = PLACEMENTS,
	.check = check,
	.fill = fill,
};
