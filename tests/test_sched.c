/* Schedule tests: the structure of every schedule's order over ranges of (p, m, v);
 * the textbook unit-cost makespans and activation peaks, measured by the simulator;
 * link latency hidden by the overlap tuning; placements each schedule accepts and the
 * errors for those it does not; skips, dp > 1 and explicit placements with every
 * schedule (the plan always runs).  Orders written by hand (custom, CSV) are
 * test_sched_custom.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/link.h"
#include "../compiler/schedule.h"
#include "../sim/sim.h"
#include "sched_lib.h"

/* ---- helpers ------------------------------------------------------------------- */

static int count_kind(const Plan *p, int kind)
{
	int n = 0;
	for (int r = 0; r < p->world; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++)
			n += p->ranks[r].ops[i].kind == kind;
	return n;
}

/* Forwards at the head of pipeline index q's order before its first backward. */
static int warmup(const Plan *p, int q)
{
	static Order o;
	order_of(p, q, &o);
	int k = 0;
	while (k < o.n && o.op[k]->kind == OP_F)
		k++;
	return k;
}

#define US 1000 // unit cost: 1 us

static int imax(int a, int b)
{
	return a > b ? a : b;
}

static int imin(int a, int b)
{
	return a < b ? a : b;
}

/* Compiles the standard program and checks its structure; fails on errors. */
static Plan *build(const char *sched, int n, int pp, int dp, int m, const char *extra)
{
	Plan *p = compile(program(n, pp, dp, m, sched, extra));
	if (!p)
		fail_msg("%s n=%d pp=%d dp=%d m=%d %s: does not compile", sched, n, pp, dp, m,
		         extra ? extra : "");
	return p;
}

static void expect(int64_t got, int64_t want, const char *what, const char *sched, int pp,
                   int m, int v)
{
	if (got != want)
		fail_msg("%s pp=%d m=%d v=%d: %s %lld, want %lld", sched, pp, m, v, what,
		         (long long)got, (long long)want);
}

/* ---- structure ------------------------------------------------------------------ */

static void sched__every_schedule__each_action_once_in_order(void **state)
{
	(void)state;
	/* Every registered schedule that makes its own order, on every shape it accepts
	 * (1 to 4 stages per rank, pp 1..6, m 1..3pp+2); each must accept some. */
	int checked = 0;
	for (int k = 0; k < sched_count; k++) {
		const Schedule *sc = sched_registry[k];
		if (sc->infer_place)
			continue; // custom and csv take their order from the program: schedules.sh
		int ran = 0;
		for (int per_rank = 1; per_rank <= 4; per_rank++)
			for (int pp = 1; pp <= 6; pp++)
				for (int m = 1; m <= 3 * pp + 2; m++) {
					char *errs = NULL;
					PipeccOptions o = {0};
					Plan *p = compile_with(program(per_rank * pp, pp, 1, m, sc->name, NULL), &o,
					                       &errs);
					free(errs);
					if (!p)
						continue; // a shape this schedule rejects
					char what[64];
					snprintf(what, sizeof what, "%s n=%d pp=%d m=%d", sc->name, per_rank * pp,
					         pp, m);
					check_structure(p, what);
					plan_free(p);
					ran++;
				}
		if (ran == 0)
			fail_msg("schedule %s accepted none of the shapes", sc->name);
		checked += ran;
	}
	assert_true(checked > 300);
}

/* A row makes its order (check and fill) or searches for one, never both; a row that
 * takes a given order infers its placement from it and is no search.  Each kind has a
 * row, so the loop ran on something. */
static void sched__registry__rows_make_or_search(void **state)
{
	(void)state;
	int given = 0, search = 0, make = 0;
	for (int k = 0; k < sched_count; k++) {
		const Schedule *s = sched_registry[k];
		if (s->search) {
			assert_true(!s->check && !s->fill && !s->given);
			search++;
		} else {
			assert_true(s->check && s->fill);
			make++;
		}
		if (s->given)
			assert_non_null(s->infer_place);
		given += s->given;
	}
	assert_true(given > 0 && search > 0 && make > given);
}

static void sched__gpipe_and_loopedbfs__forwards_first(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 5; pp++)
		for (int m = 1; m <= 6; m++)
			for (int v = 1; v <= 3; v++) {
				Plan *p = build("loopedbfs", v * pp, pp, 1, m, NULL);
				static Order o;
				for (int q = 0; q < pp; q++) {
					order_of(p, q, &o);
					assert_int_equal(warmup(p, q), v * m);
					/* forwards: local stages ascending, microbatches ascending */
					for (int i = 0; i < v * m; i++) {
						assert_int_equal(o.op[i]->stage, q + i / m * pp);
						assert_int_equal(o.op[i]->mb, i % m);
					}
					/* backwards: fused, local stages descending, microbatches descending */
					for (int i = 0; i < v * m; i++) {
						const PlanOp *b = o.op[v * m + i];
						assert_int_equal(b->kind, OP_BW);
						assert_int_equal(b->stage, q + (v - 1 - i / m) * pp);
						assert_int_equal(b->mb, m - 1 - i % m);
					}
				}
				plan_free(p);
				p = build("gpipe", v * pp, pp, 1, m, NULL);
				for (int q = 0; q < pp; q++)
					assert_int_equal(warmup(p, q), v * m);
				plan_free(p);
			}
}

static void sched__1f1b_zbh1_zbh2__warmup_and_split(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 7; pp++)
		for (int m = 1; m <= 3 * pp; m++) {
			Plan *a = build("1f1b", pp, pp, 1, m, NULL);
			Plan *b = build("zbh1", pp, pp, 1, m, NULL);
			Plan *c = build("zbh2", pp, pp, 1, m, NULL);
			for (int i = 0; i < pp; i++) {
				assert_int_equal(warmup(a, i), imin(pp - i, m));
				assert_int_equal(warmup(b, i), imin(pp - i, m));
				assert_int_equal(warmup(c, i), imin(2 * (pp - i) - 1, m));
			}
			assert_int_equal(count_kind(a, OP_B), 0);
			assert_int_equal(count_kind(b, OP_BW), 0);
			assert_int_equal(count_kind(c, OP_BW), 0);
			assert_int_equal(count_kind(b, OP_W), pp * m);
			assert_true(check_structure(b, "zbh1") <= pp);
			assert_true(check_structure(c, "zbh2") <= 2 * pp - 1);
			plan_free(a);
			plan_free(b);
			plan_free(c);
		}
}

/* Megatron's and torch's order: in rounds of r = m / max(1, m / pp) microbatches (r = pp
 * when pp divides m), a rank's k-th forward is chunk (k mod v*r)/r of microbatch
 * (k / (v*r)) * r + k mod r; backwards the same with chunks reversed.  Every m torch
 * takes (a multiple of the round count), each m < 2pp among them. */
static void sched__interleaved__megatron_order(void **state)
{
	(void)state;
	int odd = 0;
	for (int pp = 1; pp <= 5; pp++)
		for (int v = 2; v <= 4; v++)
			for (int m = 1; m <= 3 * pp; m++) {
				int rounds = m / pp > 1 ? m / pp : 1, r = m / rounds;
				if (m % rounds)
					continue;
				odd += m % pp != 0;
				Plan *p = build("interleaved", v * pp, pp, 1, m, NULL);
				static Order o;
				for (int j = 0; j < pp; j++) {
					order_of(p, j, &o);
					int warm = (v - 1) * r + 2 * (pp - 1 - j);
					assert_int_equal(warmup(p, j), imin(v * m, warm + 1));
					int f = 0, b = 0;
					for (int i = 0; i < o.n; i++) {
						const PlanOp *op = o.op[i];
						int k = op->kind == OP_F ? f++ : b++;
						int chunk = k % (r * v) / r, mb = k / (r * v) * r + k % r;
						if (op->kind == OP_BW)
							chunk = v - 1 - chunk;
						assert_int_equal(op->stage, chunk * pp + j);
						assert_int_equal(op->mb, mb);
					}
					assert_int_equal(f, v * m);
					assert_int_equal(b, v * m);
				}
				Measure ms = measure(p, SIM_STRICT, 0);
				assert_int_equal(ms.verdict, SIM_OK);
				plan_free(p);
			}
	assert_true(odd > 20); // the orders pp does not divide were among them
}

static void sched__zbv_and_dualpipev__v_pairs(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 6; pp++)
		for (int m = 1; m <= 3 * pp; m++) {
			Plan *p = build("zbv", 2 * pp, pp, 1, m, NULL);
			for (int s = 0; s < pp; s++)
				assert_int_equal(p->stages[s].pp, p->stages[2 * pp - 1 - s].pp);
			assert_int_equal(count_kind(p, OP_BW), 0);
			for (int r = 0; r < pp && m >= 2 * pp - 1; r++)
				assert_int_equal(warmup(p, r), 2 * pp); // torch's: 2(p-r)-1 F0, r (F1, F0), F1
			plan_free(p);
			if (m < 2 * pp)
				continue;
			p = build("dualpipev", 2 * pp, pp, 1, m, NULL);
			/* overlapped pairs run as F, B, W; the ends defer some W's */
			assert_int_equal(count_kind(p, OP_BW), 0);
			assert_int_equal(count_kind(p, OP_B), 2 * pp * m);
			assert_int_equal(count_kind(p, OP_W), 2 * pp * m);
			/* steps 1 and 2: 2(p-r-1) + 2(r+1) forwards; the bottom of the V (r = p-1) has
			 * no step 3 and starts step 4 with one more */
			for (int r = 0; r < pp; r++)
				assert_int_equal(warmup(p, r), 2 * pp + (r == pp - 1));
			plan_free(p);
		}
}

/* ---- textbook makespans and memory, through the simulator ---------------------- */

static void sched__gpipe_1f1b__unit_cost_makespan(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 8; pp++)
		for (int m = 1; m <= 3 * pp + 2; m++) {
			Plan *p = build("gpipe", pp, pp, 1, m, NULL);
			Measure ms = measure(p, SIM_STRICT, 0);
			expect(ms.makespan, 3LL * (m + pp - 1) * US, "makespan", "gpipe", pp, m, 1);
			expect(ms.peak, m, "peak activations", "gpipe", pp, m, 1);
			plan_free(p);
			p = build("1f1b", pp, pp, 1, m, NULL);
			ms = measure(p, SIM_STRICT, 0);
			expect(ms.makespan, 3LL * (m + pp - 1) * US, "makespan", "1f1b", pp, m, 1);
			expect(ms.peak, imin(pp, m), "peak activations", "1f1b", pp, m, 1);
			plan_free(p);
		}
}

static void sched__zbh1__unit_cost_makespan(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 8; pp++)
		for (int m = 1; m <= 3 * pp + 2; m++) {
			Plan *p = build("zbh1", pp, pp, 1, m, NULL);
			Measure ms = measure(p, SIM_STRICT, 0);
			expect(ms.makespan, (int64_t)imax(3 * m + pp - 1, 2 * m + 2 * pp - 1) * US,
			       "makespan", "zbh1", pp, m, 1);
			expect(ms.peak, imin(pp, m), "peak activations", "zbh1", pp, m, 1);
			plan_free(p);
		}
}

/* One step: 3m + p - 1 like ZB-H1; what H2 buys is no idle time on any rank between
 * its first and last op once m >= 2p-1: the span is 3m, the steady-state period. */
static void sched__zbh2__unit_cost_makespan_and_span(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 8; pp++)
		for (int m = 1; m <= 3 * pp + 2; m++) {
			Plan *p = build("zbh2", pp, pp, 1, m, NULL);
			Measure ms = measure(p, SIM_STRICT, 0);
			expect(ms.makespan, (int64_t)imax(3 * m + pp - 1, 2 * m + 2 * pp - 1) * US,
			       "makespan", "zbh2", pp, m, 1);
			expect(ms.peak, imin(2 * pp - 1, m), "peak activations", "zbh2", pp, m, 1);
			if (m >= 2 * pp - 1)
				expect(ms.span, 3LL * m * US, "busy span", "zbh2", pp, m, 1);
			plan_free(p);
		}
}

static void sched__zbv__unit_cost_makespan(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 8; pp++)
		for (int m = 1; m <= 3 * pp + 2; m++) {
			Plan *p = build("zbv", 2 * pp, pp, 1, m, NULL);
			Measure ms = measure(p, SIM_STRICT, 0);
			expect(ms.makespan, (int64_t)imax(6 * m + pp - 1, 4 * m + 4 * pp - 2) * US,
			       "makespan", "zbv", pp, m, 1);
			expect(ms.peak, imin(2 * m, 2 * pp), "peak activations", "zbv", pp, m, 1);
			plan_free(p);
		}
}

static void sched__loopedbfs__unit_cost_makespan(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 6; pp++)
		for (int v = 1; v <= 3; v++)
			for (int m = 1; m <= 3 * pp + 1; m++) {
				Plan *p = build("loopedbfs", v * pp, pp, 1, m, NULL);
				Measure ms = measure(p, SIM_STRICT, 0);
				int64_t want = m >= pp ? 3LL * (v * m + pp - 1) : 3LL * (m + v * pp - 1);
				expect(ms.makespan, want * US, "makespan", "loopedbfs", pp, m, v);
				expect(ms.peak, v * m, "peak activations", "loopedbfs", pp, m, v);
				plan_free(p);
			}
}

/* Interleaved reaches 3vm + 3(p-1) in the overlap model.  The strict model comes out
 * longer, never shorter: the lowering's round-by-round walk places some gradient sends
 * after later compute on the producer (docs/schedules.md). */
static void sched__interleaved__unit_cost_makespan(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 6; pp++)
		for (int v = 1; v <= 4; v++)
			for (int m = pp; m <= 4 * pp; m += pp) {
				Plan *p = build("interleaved", v * pp, pp, 1, m, NULL);
				int64_t want = (3LL * v * m + 3LL * (pp - 1)) * US;
				int warm = v == 1 ? pp - 1 : (v - 1) * pp + 2 * (pp - 1);
				Measure ms = measure(p, SIM_OVERLAP, 0);
				expect(ms.makespan, want, "overlap makespan", "interleaved", pp, m, v);
				expect(ms.peak, imin(v * m, warm + 1), "peak activations", "interleaved", pp, m,
				       v);
				ms = measure(p, SIM_STRICT, 0);
				assert_int_equal(ms.verdict, SIM_OK);
				expect(ms.makespan, want, "strict makespan", "interleaved", pp, m, v);
				ms = measure(p, SIM_STRICT, 1);
				expect(ms.makespan, want, "strict eager makespan", "interleaved", pp, m, v);
				plan_free(p);
			}
}

/* DualPipeV reaches 6m + p - 1 in every model, compiled as it comes (strict, overlap,
 * buffered sends) and tuned for overlap (overlap, buffered sends): its overlapped pairs'
 * backwards run as B then W, so every rank is between two actions at every unit and
 * each tensor moves the moment it is made (docs/schedules.md, "dualpipev"). */
static void sched__dualpipev__unit_cost_makespan(void **state)
{
	(void)state;
	for (int pp = 1; pp <= 6; pp++)
		for (int m = 2 * pp; m <= 4 * pp + 1; m++) {
			int64_t want = (6LL * m + pp - 1) * US;
			for (int tune = 0; tune < 2; tune++) {
				PipeccOptions o = {.tune_overlap = tune};
				Plan *p = compile_with(program(2 * pp, pp, 1, m, "dualpipev", NULL), &o, NULL);
				assert_non_null(p);
				Measure ms = measure(p, SIM_OVERLAP, 0);
				expect(ms.makespan, want, "overlap makespan", "dualpipev", pp, m, 2);
				expect(ms.peak, 2 * pp + 1, "peak activations", "dualpipev", pp, m, 2);
				ms = measure(p, SIM_STRICT, 1);
				expect(ms.makespan, want, "strict eager makespan", "dualpipev", pp, m, 2);
				ms = measure(p, SIM_STRICT, 0);
				assert_int_equal(ms.verdict, SIM_OK);
				if (!tune)
					expect(ms.makespan, want, "strict makespan", "dualpipev", pp, m, 2);
				plan_free(p);
			}
		}
}

/* ---- link latency ------------------------------------------------------------------ */

/* n stages on pp ranks, m microbatches, costs f b w (us), links of latency lat us. */
static char *program_link(int n, int pp, int m, const char *sched, int f, int b, int w,
                          int lat, const char *extra)
{
	static char buf[1 << 14];
	int k = snprintf(buf, sizeof buf, "pipeline t;\nmesh pp=%d;\nmicrobatches %d;\ninput 2x8;\n",
	                 pp, m);
	for (int s = 0; s < n; s++)
		k += snprintf(buf + k, sizeof buf - k, "stage s%d { linear 8; %s}\n", s,
		              s == n - 1 ? "loss mse; " : "relu; ");
	snprintf(buf + k, sizeof buf - k,
	         "schedule %s;\ncost * f=%d b=%d w=%d;\nlink latency=%dus bandwidth=1000TB/s;\n%s",
	         sched, f, b, w, lat, extra ? extra : "");
	return buf;
}

/* Tuned for overlap, the lowering hides link time behind compute where the order allows:
 * GPipe with equal costs then takes (m + p - 1)(f + b + w) plus one transfer per hop
 * down and one per hop back, 2(p - 1) x, in the overlap model (issue 18's case p=3, m=2
 * took 4 us more: a rank's receive of its next input waited in a group with the send
 * of its current output).  Every plan still runs in the strict model. */
static void sched__gpipe_overlap_tuned__hides_link_latency(void **state)
{
	(void)state;
	PipeccOptions o = {.tune_overlap = 1};
	for (int pp = 2; pp <= 6; pp++)
		for (int m = 1; m <= 2 * pp + 1; m++) {
			Plan *p = compile_with(program_link(pp, pp, m, "gpipe", 10, 10, 10, 2, NULL), &o, NULL);
			assert_non_null(p);
			int64_t x = plan_link_ns(p, 0, p->edges[0].bytes);
			assert_true(x > 2 * US);
			int64_t want = (int64_t)(m + pp - 1) * 30 * US + 2LL * (pp - 1) * x;
			Measure ms = measure(p, SIM_OVERLAP, 0);
			expect(ms.makespan, want, "overlap makespan", "gpipe latency", pp, m, 1);
			assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
			plan_free(p);
		}
}

/* Every schedule tuned for overlap with link latency and unequal costs runs in both
 * models, with rendezvous and with buffered sends (the lowering's walk follows the
 * transfers' times; the deadlock-freedom argument does not depend on them). */
static void sched__every_schedule_overlap_tuned__runs_with_latency(void **state)
{
	(void)state;
	const struct {
		const char *name;
		int per_rank;
	} S[] = {{"gpipe", 1}, {"1f1b", 1}, {"zbh1", 1}, {"zbh2", 1}, {"zbv", 2},
	         {"dualpipev", 2}, {"loopedbfs", 2}, {"interleaved", 2}};
	PipeccOptions o = {.tune_overlap = 1};
	int runs = 0;
	for (size_t k = 0; k < sizeof S / sizeof S[0]; k++)
		for (int pp = 2; pp <= 4; pp++)
			for (int m = 2 * pp; m <= 4 * pp; m += pp) // dualpipev wants m >= 2pp
				for (int lat = 1; lat <= 7; lat += 3) {
					int n = S[k].per_rank * pp;
					const char *extra = !strcmp(S[k].name, "zbv") || !strcmp(S[k].name, "dualpipev")
					                        ? "placement v;\n"
					                        : NULL;
					Plan *p = compile_with(program_link(n, pp, m, S[k].name, 10, 11, 9, lat, extra),
					                       &o, NULL);
					if (!p)
						fail_msg("%s pp=%d m=%d: does not compile", S[k].name, pp, m);
					check_structure(p, S[k].name);
					for (int model = 0; model < SIM_MODEL_COUNT; model++)
						for (int eager = 0; eager < 2; eager++) {
							Measure ms = measure(p, model, eager);
							if (ms.verdict != SIM_OK)
								fail_msg("%s pp=%d m=%d lat=%d model %d eager %d: %s", S[k].name, pp,
								         m, lat, model, eager, sim_verdict_names[ms.verdict]);
						}
					plan_free(p);
					runs++;
				}
	assert_int_equal(runs, 8 * 3 * 3 * 3);
}

/* ---- placements and mixed features ------------------------------------------------ */

static void sched__placements__rejected_with_what_works(void **state)
{
	(void)state;
	expect_error(program(8, 4, 1, 8, "zbv", "placement loop;\n"),
	             "test.pipe:16:11: error: schedule zbv cannot serve this placement: stage 3 is "
	             "on pp index 3 but stage 4 on pp index 0; it works with placement v (stages i "
	             "and 2pp-1-i on one pipeline rank)\n"
	             " placement loop;\n"
	             "           ^~~~\n");
	expect_error(program(8, 4, 1, 8, "interleaved", "placement [0, 0, 1, 1, 2, 2, 3, 3];\n"),
	             "test.pipe:16:11: error: schedule interleaved cannot serve this placement: "
	             "stage 0 is on pp index 0 but stage 4 on pp index 2; it works with placement "
	             "loop (stages i, i+pp, i+2pp, ... on one pipeline rank)\n"
	             " placement [0, 0, 1, 1, 2, 2, 3, 3];\n"
	             "           ^~~~~~~~~~~~~~~~~~~~~~~~\n");
	expect_error(program(8, 4, 1, 8, "dualpipev", "placement [0, 1, 2, 3, 3, 2, 0, 1];\n"),
	             "test.pipe:16:11: error: schedule dualpipev cannot serve this placement: stage "
	             "1 is on pp index 1 but stage 6 on pp index 0; it works with placement v "
	             "(stages i and 2pp-1-i on one pipeline rank)\n"
	             " placement [0, 1, 2, 3, 3, 2, 0, 1];\n"
	             "           ^~~~~~~~~~~~~~~~~~~~~~~~\n");
	expect_error(program(6, 3, 1, 6, "zbv", "placement [0, 0, 1, 1, 2, 2];\n"),
	             "test.pipe:14:11: error: schedule zbv cannot serve this placement: stage 1 is "
	             "on pp index 0 but stage 4 on pp index 2; it works with placement v (stages i "
	             "and 2pp-1-i on one pipeline rank)\n"
	             " placement [0, 0, 1, 1, 2, 2];\n"
	             "           ^~~~~~~~~~~~~~~~~~\n");
	expect_error(program(8, 4, 1, 8, "zbh1", NULL),
	             "test.pipe:13:10: error: schedule zbh1 needs one stage per pipeline rank: 8 "
	             "stages on pp=4\n"
	             " schedule zbh1;\n"
	             "          ^~~~\n");
	expect_error(program(6, 4, 1, 8, "interleaved", NULL),
	             "test.pipe:11:10: error: schedule interleaved needs the same number of stages "
	             "on every pipeline rank: 6 stages on pp=4\n"
	             " schedule interleaved;\n"
	             "          ^~~~~~~~~~~\n");
	expect_error(program(8, 4, 1, 9, "interleaved", NULL),
	             "test.pipe:3:14: error: schedule interleaved needs a multiple of 2 "
	             "microbatches (they go through the ranks in 2 rounds of m / 2), got 9\n"
	             " microbatches 9;\n"
	             "              ^\n");
	expect_error(program(8, 4, 1, 7, "dualpipev", NULL),
	             "test.pipe:3:14: error: schedule dualpipev needs at least 8 microbatches (2 x "
	             "pp), got 7\n"
	             " microbatches 7;\n"
	             "              ^\n");
	expect_error(program(6, 4, 1, 8, "zbv", "placement [0, 1, 2, 3, 0, 1];\n"),
	             "test.pipe:11:10: error: schedule zbv needs 2 stages per pipeline rank: 6 "
	             "stages on pp=4 (want 8)\n"
	             " schedule zbv;\n"
	             "          ^~~\n");
}

/* Skips, dp > 1 and explicit placements with every schedule that allows them: every
 * plan compiles, keeps its structure, and runs to the end in both timing models. */
static void sched__mixed_features__plans_run(void **state)
{
	(void)state;
	const struct {
		const char *name;
		int per_rank;
		int pair; // 0 any, 1 one per rank, 2 loop, 3 v
	} S[] = {
		{"gpipe", 1, 0}, {"1f1b", 1, 1}, {"zbh1", 1, 1}, {"zbh2", 1, 1}, {"zbv", 2, 3},
		{"dualpipev", 2, 3}, {"loopedbfs", 2, 0}, {"interleaved", 2, 2}, {"gpipe", 2, 0},
	};
	int runs = 0;
	for (size_t k = 0; k < sizeof S / sizeof S[0]; k++)
		for (int pp = 2; pp <= 4; pp++)
			for (int dp = 1; dp <= 2; dp++)
				for (int variant = 0; variant < 4; variant++) {
					int n = S[k].per_rank * pp, m = 2 * pp;
					char extra[512] = "";
					int e = 0;
					if ((variant & 1) && n >= 4)
						e += snprintf(extra + e, sizeof extra - e,
						              "skip s0 -> s2;\nskip s1 -> s%d;\n", n - 1);
					if (variant & 2) { // a relabelling of the pp indexes: reversed
						e += snprintf(extra + e, sizeof extra - e, "placement [");
						for (int s = 0; s < n; s++) {
							int pos = S[k].pair == 3 ? (s < pp ? s : 2 * pp - 1 - s) : s % pp;
							e += snprintf(extra + e, sizeof extra - e, "%s%d", s ? ", " : "",
							              pp - 1 - pos);
						}
						e += snprintf(extra + e, sizeof extra - e, "];\n");
					}
					Plan *p = build(S[k].name, n, pp, dp, m, extra);
					check_structure(p, S[k].name);
					for (int model = 0; model < SIM_MODEL_COUNT; model++) {
						Measure ms = measure(p, model, 0);
						if (ms.verdict != SIM_OK)
							fail_msg("%s pp=%d dp=%d variant %d: %s", S[k].name, pp, dp, variant,
							         sim_verdict_names[ms.verdict]);
					}
					plan_free(p);
					runs++;
				}
	/* gpipe and loopedbfs take any placement: contiguous blocks and uneven ones */
	const char *any[] = {"placement [0, 0, 1, 1];\n", "placement [0, 0, 1];\n",
	                     "placement [1, 0, 0, 1];\n", "placement [0, 1, 1, 0, 1];\n"};
	const int nst[] = {4, 3, 4, 5};
	for (int i = 0; i < 4; i++)
		for (int s = 0; s < 2; s++) {
			Plan *p = build(s ? "loopedbfs" : "gpipe", nst[i], 2, 2, 3, any[i]);
			check_structure(p, any[i]);
			assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
			plan_free(p);
			runs++;
		}
	assert_true(runs > 200);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sched__every_schedule__each_action_once_in_order),
		cmocka_unit_test(sched__registry__rows_make_or_search),
		cmocka_unit_test(sched__gpipe_and_loopedbfs__forwards_first),
		cmocka_unit_test(sched__1f1b_zbh1_zbh2__warmup_and_split),
		cmocka_unit_test(sched__interleaved__megatron_order),
		cmocka_unit_test(sched__zbv_and_dualpipev__v_pairs),
		cmocka_unit_test(sched__gpipe_1f1b__unit_cost_makespan),
		cmocka_unit_test(sched__zbh1__unit_cost_makespan),
		cmocka_unit_test(sched__zbh2__unit_cost_makespan_and_span),
		cmocka_unit_test(sched__zbv__unit_cost_makespan),
		cmocka_unit_test(sched__loopedbfs__unit_cost_makespan),
		cmocka_unit_test(sched__interleaved__unit_cost_makespan),
		cmocka_unit_test(sched__dualpipev__unit_cost_makespan),
		cmocka_unit_test(sched__gpipe_overlap_tuned__hides_link_latency),
		cmocka_unit_test(sched__every_schedule_overlap_tuned__runs_with_latency),
		cmocka_unit_test(sched__placements__rejected_with_what_works),
		cmocka_unit_test(sched__mixed_features__plans_run),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
