/* `schedule auto;`: the fastest plan pipecc can prove that fits the device.
 *
 * This file is the registry row, whose search hook guards and runs auto_search.c.  The
 * search (run by the pass pipeline before placement) weighs
 *   - every registry schedule (the ones that build an order by themselves) whose check
 *     accepts the program's stages, microbatches and a placement it can serve (the
 *     program's placement when it writes one, else each schedule's default; the chunks
 *     per rank are the program's stages per rank),
 *   - pipecc's own list scheduler (auto_list.c) under the per-rank memory budget, in
 *     variants (warm-up limit, when W's run, which forward first, room left for
 *     tensors in flight), each made again with the overshooting ranks' budgets cut
 *     until it fits, followed by local improvement of the best of them,
 *   - Zero Bubble's greedy heuristic (auto_zb.c) with one stage per rank, at the cap
 *     and, where its order overshoots the memory model (it does not count tensors in
 *     flight), at budgets cut until it fits, and at a ladder of lower budgets,
 *   - the fastest orders that overshoot, made to fit by moving ops, and simulated
 *     annealing from the fastest that fits,
 * each with the program's recomputation, `recompute *` and (attention, tp = 1)
 * `recompute * selective`.  The fast model
 * (auto_eval.c) predicts every candidate's step and peak (tensors in flight included,
 * as the plan lowered with --tune=overlap holds them); the best that fit are then
 * confirmed for real: lowered (both communication tunings), verified, their memory
 * model checked against the cap, and run in pipesim's overlap model, which also proves
 * them deadlock-free.  The winner has the lowest confirmed step; ties go to the
 * earlier candidate in the fast model's ranking (registry rows first, in table order),
 * so the same input always gives the same plan.  Everything runs on one thread; the
 * confirmation's diagnostics go nowhere, the user hears only the verdict.
 *
 * Model facts (costs, saved bytes, static bytes, edge sizes) come from lowering a
 * topological order (all forwards by stage, then all backwards) once per placement and
 * recomputation choice: the lowering stays the one place that knows them. */
#include "auto.h"

/* 1 (with the message) when the search's clocks could pass what they count: its
 * models add a few times at once, each at most the step's work one op after another
 * (every F, B and W of every microbatch, a forward rebuilt by recomputation, each edge's
 * transfer both ways), so the search runs only while that is below PLAN_TIME_MAX / 2. */
static int too_long(const Program *pr, Diag *d)
{
	double work = 0, m = pr->microbatches;
	for (int s = 0; s < pr->nstages; s++) {
		const int64_t *c = pr->stages[s].cost;
		work += m * (2.0 * (double)c[0] + (double)c[1] + (double)c[2]);
		int out = s + 1 < pr->nstages;
		for (int k = 0; k < pr->nskips; k++)
			out += pr->skips[k].src == s;
		double bytes = (double)pr->rows * pr->stages[s].out * plan_prec(pr->prec)->act;
		if (!pr->link_ideal)
			work += 2 * m * out * ((double)pr->latency_ns + bytes * 1e9 / pr->bandwidth);
	}
	if (work < (double)(PLAN_TIME_MAX / 2))
		return 0;
	diag_error(d, pr->sched_loc, "schedule auto: the step's work adds up to %.3g ns one op "
	           "after another, past 2^61 ns (73 years), more than the search's times can be "
	           "counted in: shorten the costs", work);
	return 1;
}

static int search(const Program *pr, Arena *a, Diag *d, FILE *explain, SchedChoice *out)
{
	return too_long(pr, d) ? 1 : auto_search(pr, a, d, explain, out);
}

const Schedule sched_auto = {
	.name = "auto",
	.default_place = PLACE_LOOP,
	.placements = "any: the search tries each schedule's own",
	.search = search,
};
