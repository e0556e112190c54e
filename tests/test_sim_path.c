/* The report's critical path kept in 4 bytes an op (SIM_RECORD_PATH) against every op's
 * times (SIM_RECORD_ALL): on the examples, the good plans and every schedule on a few
 * shapes, in both models, rendezvous and eager, with the default window and with
 * windows of 1 and 3 ops (which send most runs through the second run with every op's
 * times), the verdict, the figures, each stretch and the summary's text are the same.
 * Paths are relative to the repository root, where make runs us. */
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

static int64_t again, kept; // PATH runs that took the second run, and that did not

/* PATH's run of p with window w (0: the default) is ALL's (all) in everything the
 * summary reads (sim_path_differs); returns 1 when it took the second run. */
static int same_as_all(const Plan *p, const SimOptions *o, int rc, const SimResult *all,
                       int w, const char *what)
{
	SimOptions q = *o;
	q.record_ops = SIM_RECORD_PATH;
	q.path_window = w;
	SimResult path;
	if (sim_run(p, &q, &path) != rc)
		fail_msg("%s window %d: run returned another value", what, w);
	char why[8192];
	if (sim_path_differs(p, all, &path, why, sizeof why))
		fail_msg("%s window %d: %s", what, w, why);
	int second = sim_path_second(&path);
	sim_result_free(&path);
	return second;
}

/* Every model and sending mode, every window; returns the runs with the default window
 * that took the second run.  The PATH runs of a plan that verifies are told so, as
 * pipesim's are: they skip the pair check, and still give what ALL's runs give. */
static int check_plan(const Plan *p, const char *what)
{
	PlanError err;
	int verified = plan_verify(p, &err) == 0;
	int second_default = 0;
	for (int model = 0; model < SIM_MODEL_COUNT; model++)
		for (int eager = 0; eager < 2; eager++) {
			SimOptions o = {.model = model, .eager = eager, .record_ops = SIM_RECORD_ALL};
			SimResult all;
			int rc = sim_run(p, &o, &all);
			o.verified = verified;
			assert_true(rc >= 0);
			const int windows[] = {0, 1, 3};
			for (int w = 0; w < 3; w++) {
				int second = same_as_all(p, &o, rc, &all, windows[w], what);
				if (all.verdict == SIM_OK)
					second ? again++ : kept++;
				second_default += second && windows[w] == 0;
			}
			sim_result_free(&all);
		}
	return second_default;
}

static void path__examples_and_plans__same_as_every_op_recorded(void **state)
{
	(void)state;
	again = kept = 0;
	each_plan(check_plan);
	/* Deadlocks: the same verdict, no path. */
	Plan *p = read_good("tests/plans/bad/head_to_head.plan");
	check_plan(p, "head_to_head.plan");
	plan_free(p);
	p = read_good("tests/plans/bad/cycle3.plan");
	check_plan(p, "cycle3.plan");
	plan_free(p);
	/* Both ways were taken: the windows alone, and the second run. */
	assert_true(kept > 0);
	assert_true(again > 0);
}

/* Every schedule on pp = 2..4 with two stages a rank where it needs them, 2 pp to 4 pp
 * microbatches (multiples of pp, as interleaved and dualpipev need), free and costly links, dp 1
 * and 2. */
static void path__schedules__same_as_every_op_recorded(void **state)
{
	(void)state;
	again = kept = 0;
	each_schedule(2, 4, 1, 4, check_plan);
	assert_true(kept > 0);
	assert_true(again > 0);
}

/* Long plans (pp 4, 600 microbatches: 2400 ops and more a rank, past two default
 * windows) need no second run: their paths' first stretches are at the start of the
 * lists and their last at the ends, where zbh1's W ops follow the last sends. */
static void path__long_plans__windows_suffice(void **state)
{
	(void)state;
	const char *scheds[] = {"1f1b", "zbh1"};
	for (int i = 0; i < 2; i++) {
		Plan *p = compile_text(program(4, 1, 600, scheds[i], "f=3 b=5 w=2",
		                               "latency=5us bandwidth=1GB/s"),
		                       NULL);
		assert_non_null(p);
		assert_true(p->ranks[0].nops > 4 * SIM_PATH_WINDOW);
		assert_int_equal(check_plan(p, scheds[i]), 0);
		plan_free(p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(path__examples_and_plans__same_as_every_op_recorded),
	    cmocka_unit_test(path__schedules__same_as_every_op_recorded),
	    cmocka_unit_test(path__long_plans__windows_suffice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
