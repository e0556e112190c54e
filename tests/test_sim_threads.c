/* The strict model on several threads (sim/psim.c, SimOptions.threads) against one
 * thread: on the examples, the good plans and every schedule on pipelines of 4 to 12
 * ranks, on 2, 3 and 5 threads, the verdict, every rank's figures, the links and the
 * critical path (against a run keeping every op's times, as test_sim_path.c checks
 * one thread's) are the same; the plans it declines (dp or tp above 1) and those it
 * finds stuck (deadlocks) run on one thread and say so.  Paths are relative to the
 * repository root, where make runs us. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../sim/sim.h"

#include "sim_lib.h"
#include "sim_path_same.h"

static int64_t threaded, alone; // runs that took the threads, and that ran on one

/* What a run without records gives: everything but the path. */
static void same_figures(const SimResult *a, const SimResult *b, const char *what)
{
	if (a->verdict != b->verdict || a->makespan != b->makespan || a->ops_done != b->ops_done ||
	    a->busy != b->busy || a->nlinks != b->nlinks)
		fail_msg("%s: verdict %d makespan %lld done %lld busy %lld links %d; want %d %lld %lld "
		         "%lld %d", what, (int)b->verdict, (long long)b->makespan,
		         (long long)b->ops_done, (long long)b->busy, b->nlinks, (int)a->verdict,
		         (long long)a->makespan, (long long)a->ops_done, (long long)a->busy, a->nlinks);
	for (int r = 0; r < a->world; r++) {
		const SimRankResult *x = &a->ranks[r], *y = &b->ranks[r];
		if (x->finish != y->finish || x->busy != y->busy || x->ops_done != y->ops_done ||
		    x->peak_act_bytes != y->peak_act_bytes || x->peak_act_units != y->peak_act_units)
			fail_msg("%s: rank %d's figures differ", what, r);
	}
	for (int i = 0; i < a->nlinks; i++)
		if (memcmp(&a->links[i], &b->links[i], sizeof a->links[i]))
			fail_msg("%s: link %d differs", what, i);
}

/* p on 2, 3 and 5 threads, without records and with the critical path, against one
 * thread; returns the runs that took the threads. */
static int check_plan(const Plan *p, const char *what)
{
	PlanError err;
	if (plan_verify(p, &err))
		return 0; // the threads take verified plans only
	SimOptions o = {.model = SIM_STRICT, .verified = 1};
	SimResult one, all;
	int rc = sim_run(p, &o, &one);
	assert_true(rc >= 0);
	assert_int_equal(one.threads, 1);
	o.record_ops = SIM_RECORD_ALL;
	assert_int_equal(sim_run(p, &o, &all), rc);
	int took = 0;
	const int threads[] = {2, 3, 5};
	for (int t = 0; t < 3; t++) {
		char why[8192];
		SimResult res;
		o = (SimOptions){.model = SIM_STRICT, .verified = 1, .threads = threads[t]};
		assert_int_equal(sim_run(p, &o, &res), rc);
		snprintf(why, sizeof why, "%s on %d threads", what, threads[t]);
		same_figures(&one, &res, why);
		took += res.threads > 1;
		res.threads > 1 ? threaded++ : alone++;
		if (res.threads > 1 && (res.verdict != SIM_OK || p->dims[DIM_DP] > 1))
			fail_msg("%s: took %d threads", why, res.threads);
		sim_result_free(&res);
		o.record_ops = SIM_RECORD_PATH;
		assert_int_equal(sim_run(p, &o, &res), rc);
		if (sim_path_differs(p, &all, &res, why, sizeof why))
			fail_msg("%s on %d threads, path: %s", what, threads[t], why);
		sim_result_free(&res);
	}
	sim_result_free(&one);
	sim_result_free(&all);
	return took;
}

static void threads__examples_and_plans__same_as_one(void **state)
{
	(void)state;
	threaded = alone = 0;
	each_plan(check_plan);
	assert_true(threaded > 0);
	assert_true(alone > 0); // dp or tp above 1
}

/* Deadlocks: the threads find every rank parked, and one thread gives the verdict, the
 * stuck ops and the cycle. */
static void threads__deadlocks__found_and_told_by_one(void **state)
{
	(void)state;
	const char *bad[] = {"tests/plans/bad/head_to_head.plan", "tests/plans/bad/cycle3.plan"};
	for (int i = 0; i < 2; i++) {
		Plan *p = read_good(bad[i]);
		SimOptions o = {.model = SIM_STRICT, .verified = 1};
		SimResult one, res;
		assert_int_equal(sim_run(p, &o, &one), 1);
		o.threads = 2;
		assert_int_equal(sim_run(p, &o, &res), 1);
		assert_int_equal(res.verdict, SIM_DEADLOCK);
		assert_int_equal(res.threads, 1);
		assert_int_equal(res.ncycle, one.ncycle);
		assert_int_equal(res.nstuck, one.nstuck);
		char *x = failure_text(p, &one), *y = failure_text(p, &res);
		assert_string_equal(x, y);
		free(x);
		free(y);
		sim_result_free(&one);
		sim_result_free(&res);
		plan_free(p);
	}
}

/* check_plan, and at dp 1 every run took the threads. */
static int check_schedule(const Plan *p, const char *what)
{
	int took = check_plan(p, what);
	if (p->dims[DIM_DP] == 1 && took != 3)
		fail_msg("%s: %d of 3 runs took the threads", what, took);
	return took;
}

/* Every schedule on pp = 4, 8 and 12 ranks (two stages a rank where it needs them), 2
 * and 3 pp microbatches, free and costly links, dp 1 (the threads) and 2 (one thread). */
static void threads__schedules__same_as_one(void **state)
{
	(void)state;
	threaded = alone = 0;
	each_schedule(4, 12, 4, 3, check_schedule);
	assert_true(threaded > 0);
	assert_true(alone > 0);
}

/* Rank r's leading forward ops (F and activation SEND/RECV) reordered: its receives
 * first (recv 1) or its sends last (recv 0), as one group, the other ops in their order.
 * Returns how many were moved. */
static int64_t one_group(Plan *p, int r, int recv)
{
	PlanRank *pr = &p->ranks[r];
	int kind = recv ? OP_RECV : OP_SEND;
	int64_t n = 0, moved = 0;
	while (n < pr->nops && (pr->ops[n].kind == OP_F ||
	                        ((pr->ops[n].kind == OP_SEND || pr->ops[n].kind == OP_RECV) &&
	                         pr->ops[n].dir == DIR_ACT)))
		n++;
	PlanOp *tmp = malloc((size_t)n * sizeof *tmp);
	assert_non_null(tmp);
	int64_t k = 0;
	int32_t group = -1;
	for (int pass = 0; pass < 2; pass++)
		for (int64_t i = 0; i < n; i++) {
			int move = pr->ops[i].kind == kind;
			if (move != (pass == (recv ? 0 : 1)))
				continue;
			tmp[k] = pr->ops[i];
			if (move) {
				group = group < 0 ? tmp[k].group : group;
				tmp[k].group = group;
				moved++;
			}
			k++;
		}
	memcpy(pr->ops, tmp, (size_t)n * sizeof *tmp);
	free(tmp);
	return moved;
}

/* A group of more sends to one peer than a feed holds (40 microbatches' activations in
 * one group, and their receives in one) meets its partner's as they come: the threads
 * take it to the end, with one thread's result. */
static void threads__group_past_a_feed__same_as_one(void **state)
{
	(void)state;
	Plan *p = compile_text(program_text(4, 4, 1, 40, "gpipe", "f=3 b=5 w=2",
	                                    "latency=5us bandwidth=1GB/s", NULL),
	                       NULL);
	assert_non_null(p);
	assert_int_equal(one_group(p, 0, 0), 40);
	assert_int_equal(one_group(p, 1, 1), 40);
	PlanError err;
	if (plan_verify(p, &err))
		fail_msg("the edited plan does not verify: %s", err.msg);
	threaded = 0;
	assert_int_equal(check_plan(p, "one group of 40 sends"), 3);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(threads__examples_and_plans__same_as_one),
	    cmocka_unit_test(threads__deadlocks__found_and_told_by_one),
	    cmocka_unit_test(threads__schedules__same_as_one),
	    cmocka_unit_test(threads__group_past_a_feed__same_as_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
