/* --check (runtime/check.c, docs/runtime.md "--check and its bound"): correct runs pass
 * it and deliberately wrong ones fail it.
 *
 * Correct: every example piperun can run on CPU threads in seconds, at its own mesh and
 * schedule, and a small GPT under every registered schedule at tp = 1, 2 and 4, each
 * with every optimizer kind.  Among them are runs whose error is many times the floor
 * (tp splits sums, AdamW amplifies their last bits), which pass by the shadow
 * reference's noise; the test fails if none reaches 16 times the floor.  The derived
 * bound is the factor times the shadow's distance plus the floor, for both errors, and a
 * run within the floor needs no shadow; a tolerance given replaces it.
 *
 * Wrong (RtOptions.wrong, runtime/fault.c): the GPT on two pipeline ranks, dp = 2 and
 * tp = 2, run wrong in each way RtOptions.wrong offers, under every optimizer: one
 * rank's gradients dropped before its last optimizer step, one microbatch's weight
 * gradient lost in the last step, the last step computed with the weights from before
 * the previous update.  The right run passes; every wrong one fails, and a kind of
 * wrong run no test makes fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <unistd.h>

#include "../compiler/pipecc.h"
#include "../compiler/schedule.h"
#include "../runtime/rt_private.h"
#include "plan_lib.h" // compile_pipe, compile_example, written_orders
#include "../plan/line.h"

#define STEPS 2

/* A GPT of four stages, two a pipeline rank (d = 32, 4 heads, MLP 64, 32 words, 2
 * sequences of 8 tokens); the mesh is filled in, the schedule given when compiling. */
static const char gpt_fmt[] =
	"pipeline g;\nmesh pp=2 dp=%d tp=%d;\nmicrobatches 4;\ninput tokens 2x8 vocab=32;\n"
	"block gpt {\n\tresidual { layernorm; attention heads=4 bias; }\n"
	"\tresidual { layernorm; mlp 64 bias; }\n}\n"
	"stage s0 { embed 32 positions; gpt; }\nstage s1 { gpt; }\nstage s2 { gpt; }\n"
	"stage s3 { gpt; layernorm; head; loss xent; }\nschedule gpipe;\n";

/* The GPT's text on pp = 2 x dp x tp; with two stages (one a rank) when `two`. */
static char *gpt_text(int dp, int tp, int two)
{
	static char src[1024];
	snprintf(src, sizeof src, gpt_fmt, dp, tp);
	if (two) { // s1 and s2 out: s0 and s3, one a rank
		char *a = strstr(src, "stage s1"), *b = strstr(src, "stage s3");
		memmove(a, b, strlen(b) + 1);
	}
	return src;
}

static Plan *gpt(int dp, int tp, const char *schedule)
{
	Plan *p = compile_pipe(gpt_text(dp, tp, 0), (PipeccOptions){.schedule = schedule}, NULL, 0);
	assert_non_null(p);
	return p;
}

static RtOptions options(int optim)
{
	return (RtOptions){.backend = "threads", .steps = STEPS, .seed = 7, .check = 1,
	                   .timeout_s = 60, .blas_threads = 1, .optim = {.kind = (uint8_t)optim},
	                   .optim_set = RT_OPTIM_SET_KIND};
}

/* Runs p with o; a failed test when the run itself fails (a wrong run still runs). */
static void run(const Plan *p, const RtOptions *o, RtResult *res)
{
	char err[1024];
	RtWorld *w = rt_world_open(p, o, err, sizeof err);
	if (!w)
		fail_msg("%s: %s", p->name, err);
	if (rt_world_run(w, res) != RT_OK) {
		rt_world_report(w, stderr);
		fail_msg("%s: the run failed", p->name);
	}
	rt_world_close(w, 0);
	assert_true(res->checked);
}

/* ---- correct runs ---- */

/* What the correct runs showed: how many ran, how many needed the shadow, the largest
 * error over the floor and over the shadow's distance (the weights' or the loss's). */
typedef struct {
	int runs, shadows;
	double over_floor, over_noise;
} Seen;

/* p under every optimizer kind passes --check; what it showed goes into seen.  Returns
 * 0 without running when piperun refuses p at open (what it does not run at tp > 1:
 * recomputation, which `schedule auto` may choose), naming it, else 1. */
static int passes(const Plan *p, const char *what, Seen *seen)
{
	char err[1024];
	RtOptions o0 = options(OPTIM_SGD);
	RtWorld *w = rt_world_open(p, &o0, err, sizeof err);
	if (!w) {
		if (!strstr(err, "piperun cannot run this"))
			fail_msg("%s: %s", what, err);
		print_message("%s: not run: %s\n", what, err);
		return 0;
	}
	rt_world_close(w, 0);
	for (int k = 0; k < OPTIM_COUNT; k++) {
		RtOptions o = options(k);
		RtResult res;
		run(p, &o, &res);
		if (!res.check_ok)
			fail_msg("%s under %s fails --check: loss rel %g, weights rel %g, bound %g", what,
			         plan_optim_names[k], res.loss_rel, res.weight_rel, res.tolerance);
		assert_int_equal(res.bound, RT_BOUND_NOISE);
		seen->runs++;
		seen->shadows += res.shadow;
		if (res.shadow)
			seen->over_noise = fmax(seen->over_noise, fmax(res.loss_rel, res.weight_rel) / res.noise);
		seen->over_floor = fmax(seen->over_floor, fmax(res.loss_rel, res.weight_rel) / RT_CHECK_FLOOR);
		rt_result_free(&res);
	}
	return 1;
}

/* The small GPT under every registered schedule (those that read a written order get
 * the first schedule's, written out), at tp = 1, 2 and 4, each optimizer: four stages
 * two a rank where the schedule takes them, else two.  A schedule that runs at no tp
 * fails the test; so does a matrix in which no run needed more than the floor. */
static void check__every_schedule_tp_and_optimizer__passes(void **state)
{
	(void)state;
	char csv[] = "/tmp/test_check_order.XXXXXX";
	int fd = mkstemp(csv);
	assert_true(fd >= 0);
	close(fd);
	Seen seen = {0};
	for (int k = 0; k < sched_count; k++) {
		const char *name = sched_registry[k]->name;
		int ran = 0;
		for (int tp = 1; tp <= 4; tp *= 2) {
			Plan *p = NULL;
			for (int two = 0; two < 2 && !p; two++) {
				const char *src = gpt_text(1, tp, two);
				char *alt[2] = {NULL, NULL};
				char errs[4096]; // a schedule that does not take this shape says why
				if (!(p = compile_pipe(src, (PipeccOptions){.schedule = name}, errs, sizeof errs)))
					written_orders(src, sched_registry[0]->name, csv, alt);
				for (int a = 0; !p && a < 2; a++)
					p = alt[a] ? compile_pipe(alt[a], (PipeccOptions){.schedule = name}, errs,
					                          sizeof errs)
					           : NULL;
				free(alt[0]);
				free(alt[1]);
			}
			if (!p)
				continue;
			char what[64];
			snprintf(what, sizeof what, "%s at tp=%d", name, tp);
			ran += passes(p, what, &seen);
			plan_free(p);
		}
		if (ran == 0)
			fail_msg("schedule %s ran the GPT at none of tp = 1, 2, 4", name);
	}
	unlink(csv);
	print_message("%d runs, %d needed the shadow; the largest error %.3g x the floor, %.3g x "
	              "the shadow's distance\n", seen.runs, seen.shadows, seen.over_floor,
	              seen.over_noise);
	if (seen.over_floor < 16)
		fail_msg("no run's error reached 16 x the floor: the shadow's bound went untested");
}

/* The examples piperun runs in seconds on CPU threads: those whose whole model has at
 * most EXAMPLE_MAX_PARAMS parameters (gpt2.pipe and the Llama 2 7B ones have 124
 * million and more). */
#define EXAMPLE_MAX_PARAMS 4000000

static int examples_run, examples_big;

static void example_passes(const char *path)
{
	char err[1024];
	Plan *line = compile_example(path);
	RtModel *m = rt_model_new(line, 1, err, sizeof err);
	if (!m)
		fail_msg("%s: %s", path, err);
	int64_t n = 0;
	for (int s = 0; s < line->nstages; s++)
		n += m->st[s].nparams;
	rt_model_free(m);
	if (n > EXAMPLE_MAX_PARAMS) {
		print_message("%s: %lld parameters, left out\n", path, (long long)n);
		examples_big++;
		plan_free(line);
		return;
	}
	size_t failed;
	Plan *p = plan_expand(line, &failed);
	assert_non_null(p);
	plan_free(line);
	Seen seen = {0};
	if (!passes(p, path, &seen))
		fail_msg("%s: piperun refuses it", path);
	print_message("%s: %lld parameters, passes under %d optimizers (%d needed the shadow)\n",
	              path, (long long)n, seen.runs, seen.shadows);
	examples_run++;
	plan_free(p);
}

/* Every example that runs in seconds passes under every optimizer. */
static void check__every_example__passes(void **state)
{
	(void)state;
	examples_run = examples_big = 0;
	int n = each_file("examples", ".pipe", example_passes);
	assert_true(n > 0);
	if (examples_run + examples_big < n || examples_run < n / 2)
		fail_msg("only %d of the %d examples ran (%d too big)", examples_run, n, examples_big);
}

/* The derived bound: a run within the floor (tp = 1: bit for bit) runs no shadow and is
 * held to the floor; a run beyond it (tp = 2 under AdamW) is held to the factor times
 * the shadow's distance plus the floor. */
static void check__derived_bound__noise_times_factor_plus_floor(void **state)
{
	(void)state;
	RtResult res;
	RtOptions o = options(OPTIM_ADAMW);
	Plan *p = gpt(1, 1, "gpipe");
	run(p, &o, &res);
	assert_true(res.check_ok && res.loss_rel == 0 && res.weight_rel == 0);
	assert_int_equal(res.bound, RT_BOUND_NOISE);
	assert_false(res.shadow);
	assert_true(res.tolerance == RT_CHECK_FLOOR);
	rt_result_free(&res);
	plan_free(p);
	p = gpt(1, 2, "gpipe");
	run(p, &o, &res);
	assert_true(res.shadow && res.check_ok);
	assert_true(res.weight_rel > 16 * RT_CHECK_FLOOR && res.noise > 0);
	assert_true(res.tolerance == RT_CHECK_NOISE_FACTOR * res.noise + RT_CHECK_FLOOR);
	rt_result_free(&res);
	plan_free(p);
}

/* A tolerance given replaces the derived bound and runs no shadow: below the run's error
 * it fails the run, above it passes it. */
static void check__tolerance__replaces_the_bound(void **state)
{
	(void)state;
	Plan *p = gpt(1, 2, "gpipe");
	RtOptions o = options(OPTIM_ADAMW);
	RtResult res;
	run(p, &o, &res);
	double err = res.weight_rel;
	assert_true(res.check_ok && err > 0);
	rt_result_free(&res);
	for (int i = 0; i < 2; i++) {
		o.tolerance = i ? 2 * err : err / 2;
		run(p, &o, &res);
		assert_int_equal(res.bound, RT_BOUND_GIVEN);
		assert_false(res.shadow);
		assert_true(res.tolerance == o.tolerance);
		assert_int_equal(res.check_ok, i);
		rt_result_free(&res);
	}
	plan_free(p);
}

/* ---- wrong runs ---- */

static const char *const wrong_names[RT_WRONG_COUNT] = {
	[RT_WRONG_DROP_GRAD] = "gradients dropped",
	[RT_WRONG_SKIP_MB] = "a microbatch's weight gradient lost",
	[RT_WRONG_STALE] = "stale weights",
};

/* Each kind of wrong run, in the last step, on rank 1 (pipeline rank 0, tp rank 1: the
 * embedding's and the second layer's shards), fails --check under every optimizer, with
 * fused weight gradients (BW, gpipe) and apart (W, zbv); the same run done right passes. */
static void check__wrong_runs__fail(void **state)
{
	(void)state;
	for (int i = 0; i < 2 * OPTIM_COUNT; i++) {
		int k = i % OPTIM_COUNT;
		Plan *p = gpt(2, 2, i < OPTIM_COUNT ? "gpipe" : "zbv");
		int c[DIM_COUNT];
		plan_mesh_coords(p, 1, c);
		assert_true(c[DIM_PP] == 0 && c[DIM_DP] == 0 && c[DIM_TP] == 1);
		RtOptions o = options(k);
		RtResult res;
		run(p, &o, &res);
		if (!res.check_ok)
			fail_msg("%s: the right run fails (loss rel %g, weights rel %g)",
			         plan_optim_names[k], res.loss_rel, res.weight_rel);
		rt_result_free(&res);
		for (int kind = RT_WRONG_NONE + 1; kind < RT_WRONG_COUNT; kind++) {
			if (!wrong_names[kind])
				fail_msg("wrong run kind %d has no test", kind);
			o.wrong = (RtWrong){.kind = kind, .rank = 1, .step = STEPS - 1, .mb = 1};
			run(p, &o, &res);
			print_message("%-5s %-8s %-36s loss %.3g x its bound, weights %.3g x\n",
			              p->schedule, plan_optim_names[k], wrong_names[kind],
			              res.loss_rel / res.tolerance, res.weight_rel / res.tolerance);
			if (res.check_ok)
				fail_msg("%s, %s: --check passes a wrong run (loss rel %g, weights rel %g)",
				         plan_optim_names[k], wrong_names[kind], res.loss_rel, res.weight_rel);
			rt_result_free(&res);
		}
		plan_free(p);
	}
}

/* A wrong run that names a rank, step or microbatch the run does not have is refused
 * when the world opens, with the reason. */
static void check__wrong_run_outside_the_plan__refused_at_open(void **state)
{
	(void)state;
	Plan *p = gpt(1, 2, "gpipe");
	const RtWrong bad[] = {
		{.kind = RT_WRONG_COUNT},
		{.kind = RT_WRONG_DROP_GRAD, .rank = 4},
		{.kind = RT_WRONG_DROP_GRAD, .step = STEPS},
		{.kind = RT_WRONG_STALE, .step = 0},
		{.kind = RT_WRONG_SKIP_MB, .mb = 4},
	};
	const char *const why[] = {"an unknown kind", "a rank outside the plan", "a step outside",
	                           "a step outside", "a microbatch outside"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		RtOptions o = options(OPTIM_SGD);
		o.wrong = bad[i];
		char err[1024];
		RtWorld *w = rt_world_open(p, &o, err, sizeof err);
		assert_null(w);
		if (!strstr(err, why[i]))
			fail_msg("wrong run %zu: '%s' does not say '%s'", i, err, why[i]);
	}
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(check__every_schedule_tp_and_optimizer__passes),
		cmocka_unit_test(check__every_example__passes),
		cmocka_unit_test(check__derived_bound__noise_times_factor_plus_floor),
		cmocka_unit_test(check__tolerance__replaces_the_bound),
		cmocka_unit_test(check__wrong_runs__fail),
		cmocka_unit_test(check__wrong_run_outside_the_plan__refused_at_open),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
