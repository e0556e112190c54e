/* Schedule tests: the structure of every schedule's order over ranges of (p, m, v);
 * the textbook unit-cost makespans and activation peaks, measured by the simulator;
 * placements each schedule accepts and the errors for those it does not; skips, dp > 1
 * and explicit placements with every schedule (the plan always runs); custom orders and
 * CSV imports with their located errors (golden text); orders that are valid per rank
 * but cannot run across ranks (the lowering's stall, and with allow_deadlock the plan
 * for the simulator's cycle). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../compiler/schedule.h"
#include "../sim/sim.h"
#include "../plan/line.h"

/* ---- helpers ------------------------------------------------------------------- */

/* Compiles src with o; the diagnostics go to *errs (malloc'd) when errs is not NULL,
 * else to stderr when compilation fails. */
static Plan *compile_with(const char *src, const PipeccOptions *o, char **errs)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), o, &d);
	fclose(out);
	if (errs)
		*errs = buf;
	else {
		if (!p && buf)
			fprintf(stderr, "%s", buf);
		free(buf);
	}
	return p;
}

static Plan *compile(const char *src)
{
	PipeccOptions o = {0};
	return compile_with(src, &o, NULL);
}

/* n stages of width 8 on pp x dp ranks, m microbatches, unit costs, ideal links. */
static char *program(int n, int pp, int dp, int m, const char *sched, const char *extra)
{
	static char buf[1 << 14];
	int k = snprintf(buf, sizeof buf,
	                 "pipeline t;\nmesh pp=%d dp=%d;\nmicrobatches %d;\ninput 2x8;\n", pp, dp, m);
	for (int s = 0; s < n; s++)
		k += snprintf(buf + k, sizeof buf - k, "stage s%d { linear 8; %s}\n", s,
		              s == n - 1 ? "loss mse; " : "relu; ");
	snprintf(buf + k, sizeof buf - k, "schedule %s;\ncost * f=1 b=1 w=1;\nlink ideal;\n%s",
	         sched, extra ? extra : "");
	return buf;
}

/* The rank at pipeline index q of the first pipeline line. */
static const PlanRank *pp_rank(const Plan *p, int q)
{
	int c[DIM_COUNT] = {0};
	c[DIM_PP] = q;
	return &p->ranks[plan_rank_of(p, c)];
}

/* Compute op i of a rank's list, skipping comms; NULL past the end. */
typedef struct {
	const PlanOp *op[1 << 14];
	int n;
} Order;

static void order_of(const Plan *p, int q, Order *o)
{
	const PlanRank *r = pp_rank(p, q);
	o->n = 0;
	for (int64_t i = 0; i < r->nops; i++)
		if (r->ops[i].kind <= OP_BW && o->n < (int)(sizeof o->op / sizeof o->op[0]))
			o->op[o->n++] = &r->ops[i];
}

/* Every (stage, mb) has one F and either one BW or one B and one W, on the stage's
 * rank, F before its backward and B before W.  Returns the largest number of
 * activations alive at once on any rank (F to W or BW). */
static int check_structure(const Plan *p, const char *what)
{
	int n = p->nstages, m = p->microbatches, peak = 0;
	int *pos = calloc((size_t)n * m * OP_COUNT, sizeof *pos);
	static Order o;
	for (int q = 0; q < p->dims[DIM_PP]; q++) {
		order_of(p, q, &o);
		int live = 0;
		for (int i = 0; i < o.n; i++) {
			const PlanOp *op = o.op[i];
			if (p->stages[op->stage].pp != q)
				fail_msg("%s: stage %d runs on pp %d, placed on %d", what, op->stage, q,
				         p->stages[op->stage].pp);
			int *at = &pos[((size_t)op->stage * m + op->mb) * OP_COUNT + op->kind];
			if (*at)
				fail_msg("%s: %s %d %d twice", what, plan_ops[op->kind].name, op->stage, op->mb);
			*at = i + 1;
			live += op->kind == OP_F ? 1 : op->kind == OP_W || op->kind == OP_BW ? -1 : 0;
			if (live > peak)
				peak = live;
		}
	}
	for (int s = 0; s < n; s++)
		for (int mb = 0; mb < m; mb++) {
			int *at = &pos[((size_t)s * m + mb) * OP_COUNT];
			int f = at[OP_F], b = at[OP_B], w = at[OP_W], bw = at[OP_BW];
			if (!f || (!bw && !(b && w)) || (bw && (b || w)))
				fail_msg("%s: stage %d mb %d has F%d B%d W%d BW%d", what, s, mb, !!f, !!b, !!w,
				         !!bw);
			if ((bw && bw < f) || (b && b < f) || (w && w < b))
				fail_msg("%s: stage %d mb %d out of order", what, s, mb);
		}
	free(pos);
	return peak;
}

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

typedef struct {
	int64_t makespan;
	int peak;      // largest peak activation units of any rank
	int64_t span;  // largest (finish - first compute start) of any rank
	int verdict;
} Measure;

static Measure measure(const Plan *p, int model, int eager)
{
	SimOptions so = {.model = model, .eager = eager, .record_ops = 1};
	SimResult r;
	sim_run(p, &so, &r);
	Measure ms = {.makespan = r.makespan, .verdict = r.verdict};
	for (int q = 0; q < p->world; q++) {
		if (r.ranks[q].peak_act_units > ms.peak)
			ms.peak = (int)r.ranks[q].peak_act_units;
		for (int64_t i = 0; i < p->ranks[q].nops; i++)
			if (p->ranks[q].ops[i].kind <= OP_BW) {
				int64_t span = r.ranks[q].finish - sim_op_time(&r, q, i).start;
				if (span > ms.span)
					ms.span = span;
				break;
			}
	}
	sim_result_free(&r);
	return ms;
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
			int64_t x = plan_transfer_ns(p, p->edges[0].bytes);
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

static void expect_error(const char *src, const char *want)
{
	char *errs = NULL;
	PipeccOptions o = {0};
	Plan *p = compile_with(src, &o, &errs);
	assert_null(p);
	if (!errs || strcmp(errs, want) != 0)
		fail_msg("got:\n%s\nwant:\n%s", errs ? errs : "(nothing)", want);
	free(errs);
}

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

/* ---- custom orders ---------------------------------------------------------------- */

/* Two ranks (dp replicas of them), stages s0 s1 on rank 0 and s2 s3 on rank 1,
 * m = 2. */
static char *custom_dp(int dp, const char *body, const char *extra)
{
	static char buf[4096];
	snprintf(buf, sizeof buf,
	         "pipeline c;\nmesh pp=2 dp=%d;\nmicrobatches 2;\ninput 2x8;\n"
	         "stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	         "stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	         "cost * f=1 b=1 w=1;\nlink ideal;\n%sschedule custom {\n%s}\n",
	         dp, extra ? extra : "", body);
	return buf;
}

static char *custom(const char *body, const char *extra)
{
	return custom_dp(1, body, extra);
}

#define GOOD_R0 "  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1;\n"
#define GOOD_R1 "  rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1;\n"

static void sched__custom__runs_as_written(void **state)
{
	(void)state;
	Plan *p = compile(custom(GOOD_R0 GOOD_R1, NULL));
	assert_non_null(p);
	assert_int_equal(p->stages[1].pp, 0);
	assert_int_equal(p->stages[2].pp, 1);
	static Order o;
	order_of(p, 1, &o);
	const char *want[] = {"F2.0", "F3.0", "F2.1", "F3.1", "B3.0", "W3.0", "BW2.0", "B3.1",
	                      "BW2.1", "W3.1"};
	assert_int_equal(o.n, 10);
	for (int i = 0; i < o.n; i++) {
		char t[16];
		snprintf(t, sizeof t, "%s%d.%d", plan_ops[o.op[i]->kind].name, o.op[i]->stage,
		         o.op[i]->mb);
		assert_string_equal(t, want[i]);
	}
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	plan_free(p);
	/* an explicit placement that agrees; and dp = 2 with a skip */
	p = compile(custom(GOOD_R0 GOOD_R1, "placement [0, 0, 1, 1];\n"));
	assert_non_null(p);
	plan_free(p);
	p = compile(custom_dp(2, GOOD_R0 GOOD_R1, "skip s0 -> s2;\n"));
	assert_non_null(p);
	assert_int_equal(p->world, 4);
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	plan_free(p);
}

static void sched__custom__located_errors(void **state)
{
	(void)state;
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3F1 3W0 3I0 2B0 3I1 2B1 3W1;\n", NULL),
	             "test.pipe:13:27: error: '3W0' comes before its input gradient '3I0'\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3W0 3I0 2B0 3I1 2B1 3W1;\n"
	             "                           ^~~\n"
	             "test.pipe:13: note: rank 1 runs ... 3F0 2F1 3F1 [3W0] 3I0 2B0 3I1 ...\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 0F2;\n" GOOD_R1, NULL),
	             "test.pipe:12:43: error: microbatch 2 in '0F2' is out of range: the program "
	             "has 2 microbatches (0 to 1)\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 0F2;\n"
	             "                                           ^~~\n"
	             "test.pipe:12: note: rank 0 runs ... 0B0 1B1 0B1 [0F2]\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1 3F1;\n", NULL),
	             "test.pipe:13:51: error: '3F1' appears twice on rank 1\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1 3F1;\n"
	             "                                                   ^~~\n"
	             "test.pipe:13:23: note: first here\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1 3F1;\n"
	             "                       ^~~\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 2F0;\n" GOOD_R1, NULL),
	             "test.pipe:13:11: error: stage 2 (s2) appears on rank 0 and on rank 1: a stage "
	             "runs on one pipeline rank\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1;\n"
	             "           ^~~\n"
	             "test.pipe:12:43: note: first on rank 0 here\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 2F0;\n"
	             "                                           ^~~\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3F1 3I0 3B0 2B0 3I1 2B1 3W1;\n", NULL),
	             "test.pipe:13:31: error: '3I0' and '3B0' both appear: a microbatch's backward "
	             "is either B, or I and W\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3B0 2B0 3I1 2B1 3W1;\n"
	             "                               ^~~\n"
	             "test.pipe:13:27: note: '3I0' is here\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3B0 2B0 3I1 2B1 3W1;\n"
	             "                           ^~~\n");
	expect_error(custom("  rank 0: 0F0 1B0 1F0 0F1 1F1 0B0 1B1 0B1;\n" GOOD_R1, NULL),
	             "test.pipe:12:15: error: '1B0' comes before its forward '1F0'\n"
	             "   rank 0: 0F0 1B0 1F0 0F1 1F1 0B0 1B1 0B1;\n"
	             "               ^~~\n"
	             "test.pipe:12: note: rank 0 runs 0F0 [1B0] 1F0 0F1 1F1 ...\n");
}

/* Valid by the rules above, but 0B0 waits for 1B0, later on the same rank: the
 * lowering names both actions, and --allow-deadlock cannot help (no plan holds it). */
static void sched__custom_local_wait__both_actions_named(void **state)
{
	(void)state;
	const char *want =
		"test.pipe:12:15: error: '0B0' needs '1B0', which comes later on rank 0: the rank "
		"can never run it (no plan can hold this order, not even with --allow-deadlock)\n"
		"   rank 0: 0F0 0B0 1F0 0F1 1F1 1B0 1B1 0B1;\n"
		"               ^~~\n"
		"test.pipe:12:31: note: '1B0' is here\n"
		"   rank 0: 0F0 0B0 1F0 0F1 1F1 1B0 1B1 0B1;\n"
		"                               ^~~\n";
	const char *src = custom("  rank 0: 0F0 0B0 1F0 0F1 1F1 1B0 1B1 0B1;\n" GOOD_R1, NULL);
	expect_error(src, want);
	PipeccOptions o = {.allow_deadlock = 1};
	char *errs = NULL;
	assert_null(compile_with(src, &o, &errs));
	assert_string_equal(errs, want);
	free(errs);
}

static void sched__custom__whole_order_errors(void **state)
{
	(void)state;
	expect_error(custom(GOOD_R0 "  rank 0: 2F0;\n", NULL),
	             "test.pipe:13:3: error: rank 0 is given twice\n"
	             "   rank 0: 2F0;\n"
	             "   ^~~~~~\n"
	             "test.pipe:12:3: note: first given here\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1;\n"
	             "   ^~~~~~\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 2F0 2F1 2B0 2B1 3F0 3F1 "
	                    "3B0 3B1;\n",
	                    NULL),
	             "test.pipe:11:10: error: pipeline rank 1 runs no stage: every rank needs at "
	             "least one\n"
	             " schedule custom {\n"
	             "          ^~~~~~\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 2F1 2B0 2B1;\n", NULL),
	             "test.pipe:11:10: error: stage 3 (s3) appears on no rank\n"
	             " schedule custom {\n"
	             "          ^~~~~~\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3I0 3W0 2B0 2B1;\n", NULL),
	             "test.pipe:13:3: error: rank 1 has no forward '3F1' of stage 3 (s3)\n"
	             "   rank 1: 2F0 3F0 2F1 3I0 3W0 2B0 2B1;\n"
	             "   ^~~~~~\n"
	             "test.pipe:13:3: error: rank 1 has no backward of stage 3 (s3) microbatch 1: "
	             "'3B1', or '3I1' and '3W1'\n"
	             "   rank 1: 2F0 3F0 2F1 3I0 3W0 2B0 2B1;\n"
	             "   ^~~~~~\n");
	expect_error(custom(GOOD_R0 GOOD_R1, "placement [0, 1, 1, 1];\n"),
	             "test.pipe:13:15: error: '1F0' is on rank 0, but the placement puts stage 1 "
	             "(s1) on pp index 1\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1;\n"
	             "               ^~~\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0W0 1B1 0B1;\n" GOOD_R1, NULL),
	             "test.pipe:12:31: error: '0W0' has no input gradient '0I0' before it\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0W0 1B1 0B1;\n"
	             "                               ^~~\n"
	             "test.pipe:12: note: rank 0 runs ... 0F1 1F1 1B0 [0W0] 1B1 0B1\n");
}

/* Valid on every rank, impossible across ranks: rank 0 starts with s2, which waits for
 * s1 on rank 1, which waits for s0, after s2 on rank 0.  Each pair of ranks exchanges
 * its messages in one order, so the plan is well formed and the simulator finds the
 * wait-for cycle. */
static const char cross_rank[] =
	"pipeline d;\nmesh pp=2;\nmicrobatches 1;\ninput 2x8;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	"stage s2 { linear 8; loss mse; }\n"
	"cost * f=1 b=1 w=1;\nlink ideal;\nschedule custom {\n"
	"  rank 0: 2F0 0F0 2B0 0B0;\n  rank 1: 1F0 1B0;\n}\n";

static void sched__custom_cross_rank_cycle__stall_then_simulator_cycle(void **state)
{
	(void)state;
	expect_error(cross_rank,
	             "test.pipe:11:11: error: the schedule cannot run: every rank waits for another "
	             "(run with --allow-deadlock to emit the plan and let pipesim show the cycle)\n"
	             "   rank 0: 2F0 0F0 2B0 0B0;\n"
	             "           ^~~\n"
	             "  rank 0 is stuck at action 0: 2F0\n"
	             "  rank 1 is stuck at action 0: 1F0\n");
	PipeccOptions o = {.allow_deadlock = 1};
	char *errs = NULL;
	Plan *p = compile_with(cross_rank, &o, &errs);
	assert_non_null(p);
	assert_string_equal(errs, "");
	free(errs);
	PlanError err;
	assert_int_equal(plan_verify(p, &err), 0);
	SimOptions so = {.model = SIM_STRICT};
	SimResult r;
	assert_int_equal(sim_run(p, &so, &r), 1);
	assert_int_equal(r.verdict, SIM_DEADLOCK);
	assert_int_equal(r.nstuck, 2);
	assert_int_equal(r.ncycle, 2);
	sim_result_free(&r);
	plan_free(p);
}

/* ---- random custom orders ------------------------------------------------------- */

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* `custom { ... }`, the body for n stages placed by where[] with the given skips (src,
 * dst pairs): per rank, a random order of its actions that keeps every dependency
 * within the rank (a microbatch's F after the F that feeds it from a stage on the same
 * rank, its backward after the backward it gets a gradient from there, I before W), so
 * only the order across ranks can be wrong. */
static void random_order(char *buf, size_t size, int n, int pp, int m, const int *where,
                         const int (*skip)[2], int nskip, uint32_t *seed)
{
	enum { U = 64 * 8 };
	int src[16], dst[16], ne = 0;
	for (int s = 0; s + 1 < n; s++, ne++) {
		src[ne] = s;
		dst[ne] = s + 1;
	}
	for (int k = 0; k < nskip; k++, ne++) {
		src[ne] = skip[k][0];
		dst[ne] = skip[k][1];
	}
	int k = snprintf(buf, size, "custom {\n");
	for (int r = 0; r < pp; r++) {
		int next[U], split[U], stage[U], mb[U], units = 0; // per (stage, mb): actions done
		int unit_of[16][8];
		for (int s = 0; s < n; s++)
			for (int j = 0; j < m && where[s] == r; j++) {
				unit_of[s][j] = units;
				stage[units] = s;
				mb[units] = j;
				split[units] = lcg(seed) % 2;
				next[units++] = 0;
			}
		k += snprintf(buf + k, size - (size_t)k, "  rank %d:", r);
		for (;;) {
			int open[U], left = 0;
			for (int u = 0; u < units; u++) {
				if (next[u] == 2 + split[u])
					continue;
				int ok = 1;
				for (int e = 0; e < ne && ok && next[u] < 2; e++) {
					int other = next[u] == 0 ? src[e] : dst[e];
					if ((next[u] == 0 ? dst[e] : src[e]) != stage[u] || where[other] != r)
						continue;
					ok = next[unit_of[other][mb[u]]] > next[u]; // its F, or its B or I
				}
				if (ok)
					open[left++] = u;
			}
			if (!left)
				break;
			int u = open[lcg(seed) % (uint32_t)left];
			char kind = next[u] == 0 ? 'F' : !split[u] ? 'B' : next[u] == 1 ? 'I' : 'W';
			k += snprintf(buf + k, size - (size_t)k, " %d%c%d", stage[u], kind, mb[u]);
			next[u]++;
		}
		k += snprintf(buf + k, size - (size_t)k, ";\n");
	}
	snprintf(buf + k, size - (size_t)k, "}\n");
}

/* Orders that cannot run, with and without skips, over several placements and dp:
 * pipecc says so, and with allow_deadlock writes a plan that verifies (its pairs
 * exchange messages in one order) and that the simulator proves deadlocked with a
 * wait-for cycle, in every model; never a mismatch.  Orders that happen to run must
 * run. */
static void sched__random_custom_orders__deadlocks_show_a_cycle(void **state)
{
	(void)state;
	static const struct {
		int n, pp, dp, m;
		int nskip, skip[2][2];
		int place[8];
	} shapes[] = {
	    {4, 2, 1, 2, 1, {{1, 3}}, {0, 0, 1, 1}},
	    {4, 2, 1, 2, 1, {{1, 3}}, {0, 1, 0, 1}},
	    {4, 2, 1, 2, 0, {{0}}, {0, 1, 1, 0}},
	    {4, 2, 2, 2, 2, {{0, 2}, {1, 3}}, {1, 0, 1, 0}},
	    {3, 3, 1, 3, 1, {{0, 2}}, {0, 1, 2}},
	    {3, 3, 1, 2, 0, {{0}}, {2, 1, 0}},
	    {6, 3, 1, 2, 2, {{0, 3}, {2, 5}}, {0, 1, 2, 2, 1, 0}},
	    {6, 3, 2, 2, 1, {{1, 4}}, {0, 0, 1, 1, 2, 2}},
	    {5, 2, 1, 3, 2, {{0, 4}, {1, 3}}, {1, 0, 0, 1, 1}},
	};
	uint32_t seed = 12345;
	int stalled = 0, ran = 0;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		for (int trial = 0; trial < 40; trial++) {
			char extra[8192], body[6144];
			int k = 0;
			for (int j = 0; j < shapes[i].nskip; j++)
				k += snprintf(extra + k, sizeof extra - (size_t)k, "skip s%d -> s%d;\n",
				              shapes[i].skip[j][0], shapes[i].skip[j][1]);
			k += snprintf(extra + k, sizeof extra - (size_t)k, "placement [");
			for (int s = 0; s < shapes[i].n; s++)
				k += snprintf(extra + k, sizeof extra - (size_t)k, "%s%d", s ? ", " : "",
				              shapes[i].place[s]);
			random_order(body, sizeof body, shapes[i].n, shapes[i].pp, shapes[i].m,
			             shapes[i].place, shapes[i].skip, shapes[i].nskip, &seed);
			snprintf(extra + k, sizeof extra - (size_t)k, "];\n");
			const char *src = program(shapes[i].n, shapes[i].pp, shapes[i].dp, shapes[i].m,
			                          body, extra);
			char *errs = NULL;
			PipeccOptions o = {0};
			Plan *p = compile_with(src, &o, &errs);
			if (p) {
				SimOptions so = {.model = SIM_STRICT};
				SimResult r;
				assert_int_equal(sim_run(p, &so, &r), 0);
				sim_result_free(&r);
				plan_free(p);
				free(errs);
				ran++;
				continue;
			}
			o.allow_deadlock = 1;
			if (!strstr(errs, "the schedule cannot run"))
				fail_msg("%s\n%s", src, errs);
			free(errs);
			p = compile_with(src, &o, NULL);
			assert_non_null(p);
			PlanError err;
			if (plan_verify(p, &err))
				fail_msg("%s\nplan fails verification: %s", src, err.msg);
			for (int model = 0; model < SIM_MODEL_COUNT; model++) {
				SimOptions so = {.model = model};
				SimResult r;
				assert_int_equal(sim_run(p, &so, &r), 1);
				if (r.verdict != SIM_DEADLOCK || r.ncycle < 1)
					fail_msg("%s\nmodel %d: %s", src, model, r.message);
				sim_result_free(&r);
			}
			plan_free(p);
			stalled++;
		}
	}
	/* the sweep met every kind of order */
	print_message("%d orders stalled across ranks, %d ran\n", stalled, ran);
	assert_true(stalled > 100);
	assert_true(ran > 0);
}

/* ---- CSV --------------------------------------------------------------------------- */

static char tmpdir[64];

static int setup_tmp(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test_sched.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *write_tmp(const char *name, const char *text)
{
	static char path[128];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static char *csv_program(const char *path)
{
	static char buf[4096];
	snprintf(buf, sizeof buf,
	         "pipeline c;\nmesh pp=2;\nmicrobatches 2;\ninput 2x8;\n"
	         "stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	         "stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	         "cost * f=1 b=1 w=1;\nlink ideal;\nschedule csv \"%s\";\n",
	         path);
	return buf;
}

static void expect_csv_error(const char *csv, const char *want_fmt)
{
	const char *path = write_tmp("o.csv", csv);
	char want[2048];
	snprintf(want, sizeof want, want_fmt, path, path, path, path);
	expect_error(csv_program(path), want);
}

/* A CSV's cells without those the plan has no op for (waits, FSDP's UNSHARD/RESHARD,
 * REDUCE_GRAD), one row per line, into out. */
static int cell_has(const char *c, size_t l, const char *w)
{
	for (size_t i = 0, wl = strlen(w); i + wl <= l; i++)
		if (memcmp(c + i, w, wl) == 0)
			return 1;
	return 0;
}

static void plan_cells(const char *csv, char *out, size_t n)
{
	size_t k = 0;
	for (const char *c = csv; *c && k + 2 < n;) {
		size_t l = strcspn(c, ",\r\n");
		if (l && !cell_has(c, l, "WAIT_") && !cell_has(c, l, "SHARD") &&
		    !cell_has(c, l, "REDUCE_GRAD") && k + l + 2 < n) {
			memcpy(out + k, c, l);
			k += l;
			out[k++] = ',';
		}
		c += l;
		if (*c == '\n')
			out[k++] = '\n';
		if (*c)
			c++;
	}
	out[k] = 0;
}

/* What torch 2.15's _dump_csv writes for ScheduleInterleaved1F1B at p = 2, m = 2 (in
 * its default compute_comms format: CRLF rows, UNSHARD/RESHARD, waits, REDUCE_GRAD):
 * it compiles, runs, and the plan keeps torch's order of sends and receives. */
static void sched__csv__torch_dump_reads(void **state)
{
	(void)state;
	static const char torch_csv[] =
		"0UNSHARD,2UNSHARD,0F0,0SEND_F0,2RECV_F0,0F1,0SEND_F1,2RECV_F1,2F0,2SEND_F0,2F1,"
		"2SEND_F1,2RECV_B0,2B0,2WAIT_SEND_F0,2SEND_B0,2RECV_B1,2B1,2WAIT_SEND_F1,2SEND_B1,"
		"2REDUCE_GRAD,2WAIT_REDUCE_GRAD,2RESHARD,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,"
		"0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD,2WAIT_SEND_B0,2WAIT_SEND_B1\r\n"
		"1UNSHARD,3UNSHARD,1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0,3RECV_F1,"
		"3B0,3SEND_B0,1RECV_B0,3F1,3B1,3SEND_B1,1RECV_B1,3REDUCE_GRAD,3WAIT_REDUCE_GRAD,"
		"3RESHARD,1B0,1WAIT_SEND_F0,1SEND_B0,1B1,1WAIT_SEND_F1,1SEND_B1,1REDUCE_GRAD,"
		"1WAIT_REDUCE_GRAD,1RESHARD,3WAIT_SEND_B0,3WAIT_SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1\r\n";
	const char *path = write_tmp("torch.csv", torch_csv);
	Plan *p = compile(csv_program(path));
	assert_non_null(p);
	assert_string_equal(p->schedule, "csv");
	check_structure(p, "csv");
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	char path2[128], got[4096], want[4096], back[4096] = {0};
	snprintf(path2, sizeof path2, "%s/back.csv", tmpdir);
	FILE *f = fopen(path2, "w+");
	assert_non_null(f);
	assert_int_equal(pipecc_emit_torch_csv(p, f, 1), 0);
	rewind(f);
	size_t n = fread(back, 1, sizeof back - 1, f);
	fclose(f);
	back[n] = 0;
	plan_cells(back, got, sizeof got);
	plan_cells(torch_csv, want, sizeof want);
	assert_string_equal(got, want);
	plan_free(p);
}

/* --emit torch-csv (with comms) read back gives the same compute order on every rank,
 * for every schedule. */
static void sched__csv__emit_roundtrip_every_schedule(void **state)
{
	(void)state;
	const char *names[] = {"gpipe", "1f1b", "zbh1", "zbh2", "zbv", "dualpipev",
	                       "loopedbfs", "interleaved"};
	const int per_rank[] = {1, 1, 1, 1, 2, 2, 2, 2};
	for (int k = 0; k < 8; k++)
		for (int pp = 1; pp <= 4; pp++) {
			int m = 2 * pp;
			char *src = program(per_rank[k] * pp, pp, 2, m, names[k], "skip s0 -> s2;\n");
			if (per_rank[k] * pp < 3)
				src = program(per_rank[k] * pp, pp, 2, m, names[k], NULL);
			char *copy = strdup(src);
			Plan *a = compile(copy);
			assert_non_null(a);
			char path[128];
			snprintf(path, sizeof path, "%s/rt.csv", tmpdir);
			FILE *f = fopen(path, "w");
			assert_int_equal(pipecc_emit_torch_csv(a, f, k % 2), 0);
			fclose(f);
			PipeccOptions o = {.from_csv = path};
			Plan *b = compile_with(copy, &o, NULL);
			if (!b)
				fail_msg("%s pp=%d: the CSV does not read back", names[k], pp);
			for (int q = 0; q < pp; q++) {
				static Order oa, ob;
				order_of(a, q, &oa);
				order_of(b, q, &ob);
				assert_int_equal(oa.n, ob.n);
				for (int i = 0; i < oa.n; i++) {
					assert_int_equal(oa.op[i]->kind, ob.op[i]->kind);
					assert_int_equal(oa.op[i]->stage, ob.op[i]->stage);
					assert_int_equal(oa.op[i]->mb, ob.op[i]->mb);
				}
			}
			for (int s = 0; s < a->nstages; s++)
				assert_int_equal(a->stages[s].pp, b->stages[s].pp);
			plan_free(a);
			plan_free(b);
			free(copy);
		}
}

static void sched__csv__errors_located_in_the_csv(void **state)
{
	(void)state;
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3X1,2B1,3W1,9F0\n",
	                 "%s:2:29: error: cannot read cell '3X1': expected an action like 0F1, 1I0, "
	                 "1W0, 2B3, 0SEND_F1 or (0F3;3B1)OVERLAP_F_B\n"
	                 " 2F0,3F0,2F1,3F1,3I0,3W0,2B0,3X1,2B1,3W1,9F0\n"
	                 "                             ^~~\n"
	                 "%s:2:41: error: stage index 9 in '9F0' is out of range: there are 4 "
	                 "stages\n"
	                 " 2F0,3F0,2F1,3F1,3I0,3W0,2B0,3X1,2B1,3W1,9F0\n"
	                 "                                         ^~~\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                 "2F0,3F0,2F1,3F1,3W0,3I0,2B0,3I1,2B1,3W1\n",
	                 "%s:2:17: error: '3W0' comes before its input gradient '3I0'\n"
	                 " 2F0,3F0,2F1,3F1,3W0,3I0,2B0,3I1,2B1,3W1\n"
	                 "                 ^~~\n"
	                 "%s:2: note: rank 1 runs ... 3F0 2F1 3F1 [3W0] 3I0 2B0 3I1 ...\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n",
	                 "%s: error: the file has 1 row, but the mesh has pp=2 (one row per pipeline "
	                 "rank)\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3I1,2B1,3W1\n"
	                 "0F0\n",
	                 "%s:3:1: error: row 3 has actions, but the mesh has pp=2 (one row per "
	                 "pipeline rank)\n"
	                 " 0F0\n"
	                 " ^\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3I1,2B1,3W1\n",
	                 "%s:1:1: error: rank 0 has no backward of stage 0 (s0) microbatch 1: '0B1', "
	                 "or '0I1' and '0W1'\n"
	                 " 0F0,1F0,0F1,1F1,1B0,0B0,1B1\n"
	                 " ^\n");
	/* a file that is not there: the error is the program's */
	char missing[128];
	snprintf(missing, sizeof missing, "%s/none.csv", tmpdir);
	char want[512];
	snprintf(want, sizeof want,
	         "test.pipe:11:10: error: cannot read %s: No such file or directory\n"
	         " schedule csv \"%s\";\n"
	         "          ^~~\n",
	         missing, missing);
	expect_error(csv_program(missing), want);
	/* --from-torch-csv replaces the program's schedule; its errors are the command line's */
	PipeccOptions o = {.from_csv = missing};
	char *errs = NULL;
	assert_null(compile_with(program(4, 2, 1, 2, "1f1b", NULL), &o, &errs));
	char tildes[128];
	size_t k = strlen(missing) - 1;
	memset(tildes, '~', k);
	tildes[k] = 0;
	snprintf(want, sizeof want,
	         "<command line>: error: cannot read %s: No such file or directory\n"
	         " --from-torch-csv %s\n"
	         "                  ^%s\n",
	         missing, missing, tildes);
	assert_string_equal(errs, want);
	free(errs);
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
		cmocka_unit_test(sched__custom__runs_as_written),
		cmocka_unit_test(sched__custom__located_errors),
		cmocka_unit_test(sched__custom_local_wait__both_actions_named),
		cmocka_unit_test(sched__custom__whole_order_errors),
		cmocka_unit_test(sched__custom_cross_rank_cycle__stall_then_simulator_cycle),
		cmocka_unit_test(sched__random_custom_orders__deadlocks_show_a_cycle),
		cmocka_unit_test(sched__csv__torch_dump_reads),
		cmocka_unit_test(sched__csv__emit_roundtrip_every_schedule),
		cmocka_unit_test(sched__csv__errors_located_in_the_csv),
	};
	return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
