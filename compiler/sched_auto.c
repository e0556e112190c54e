/* `schedule auto;`: the fastest plan pipecc can prove that fits the device.
 *
 * This file is the registry row; the search is auto_search.c.  The search (run by the pass pipeline before placement) weighs
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

#include <stdlib.h>

static int check(SchedCtx *c)
{
	(void)c;
	return 0;
}

static void fill(SchedCtx *c)
{
	(void)c; // the pass pipeline copies the search's order (auto_search)
}

const Schedule sched_auto = {
	.name = "auto",
	.default_place = PLACE_LOOP,
	.placements = "any: the search tries each schedule's own",
	.check = check,
	.fill = fill,
};

void auto_choice_free(AutoChoice *ch, int pp)
{
	for (int p = 0; ch->acts && p < pp; p++)
		free(ch->acts[p]);
	free(ch->acts);
	free(ch->nacts);
	ch->acts = NULL;
	ch->nacts = NULL;
}
