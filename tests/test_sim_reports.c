/* Simulator report tests: the memory model on a plan worked by hand, and what pipesim
 * writes from a run (JSON, Chrome trace, SVG picture, summary, text grid), checked
 * against the run itself: every box labelled, every op named or counted, the axis of a
 * stall at zero.  The runs themselves are tested in test_sim.c.  Paths are relative to
 * the repository root, where make runs us. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/link.h"
#include "../plan/io.h"
#include "../plan/mem.h"
#include "../sim/sim.h"

#include "sim_lib.h"

/* pipesim's reports, one row each; width is the grid's, in columns. */
static int json_of(FILE *f, const Plan *p, const SimResult *res, int width)
{
	(void)width;
	return sim_write_json(f, p, res, NULL, "x.plan", NULL);
}

static int trace_of(FILE *f, const Plan *p, const SimResult *res, int width)
{
	(void)width;
	return sim_write_trace(f, p, res);
}

static int svg_of(FILE *f, const Plan *p, const SimResult *res, int width)
{
	(void)width;
	return sim_write_svg(f, p, res);
}

static int summary_of(FILE *f, const Plan *p, const SimResult *res, int width)
{
	(void)width;
	return sim_report_summary(f, p, res, NULL);
}

static int (*const reports[])(FILE *, const Plan *, const SimResult *, int) = {
    json_of, trace_of, svg_of, summary_of, sim_report_grid,
};

enum { TEXT_JSON, TEXT_TRACE, TEXT_SVG, TEXT_SUMMARY, TEXT_GRID };

/* Report which of the run, at width columns where it is the grid, malloc'd. */
static char *capture_at(int which, int width, const Plan *p, const SimResult *res)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	int rc = reports[which](f, p, res, width);
	fclose(f);
	assert_int_equal(rc, 0);
	return buf;
}

static char *capture(int which, const Plan *p, const SimResult *res)
{
	return capture_at(which, 60, p, res);
}

/* tiny2.plan by hand (docs/semantics.md "Memory"): rank 0 holds 72 params and their
 * gradients (576 B); F 0 0 saves 256 and makes its 128-byte output; its SEND frees it;
 * F 0 1 saves 256 more; group 1 receives a gradient (128) while its send still holds
 * F 0 1's output (128): 576 + 512 + 256 = 1344 at op 3.  Rank 1 peaks at its first F
 * (the received input is consumed, 256 saved): 832 at op 1. */
static void mem__tiny_plan__peak_and_parts_by_hand(void **state)
{
	(void)state;
	Plan *p = read_good("tests/plans/good/tiny2.plan");
	PlanMem m;
	assert_int_equal(plan_mem_rank(p, 0, &m), 0);
	assert_int_equal(m.params, 288);
	assert_int_equal(m.grads, 288);
	assert_int_equal(m.optim, 0);
	assert_int_equal(m.peak, 1344);
	assert_int_equal(m.saved, 512);
	assert_int_equal(m.comm, 256);
	assert_int_equal(m.peak_op, 3);
	assert_int_equal(m.peak_saved, 512);
	assert_int_equal(plan_mem_rank(p, 1, &m), 0);
	assert_int_equal(m.peak, 832);
	assert_int_equal(m.saved, 256);
	assert_int_equal(m.comm, 0);
	assert_int_equal(m.peak_op, 1);
	/* Stage 0 recomputes: F keeps its 128-byte input; B rebuilds 128 more (the linear's
	 * input is the stage input, relu's 128 is rebuilt) and holds 256 for W. */
	PlanStage *st = &p->stages[0];
	st->recompute = 1;
	st->save_re = 128;
	st->save_fb = 128;
	st->save_fw = 0;
	st->save_bw = 256;
	assert_int_equal(plan_mem_rank(p, 0, &m), 0);
	assert_int_equal(m.peak, 1088);
	assert_int_equal(m.saved, 256);
	assert_int_equal(m.peak_saved, 384); // inside BW 0 0: 256 + the rebuilt 128
	/* AdamW: 8 bytes of state per parameter. */
	p->optim.kind = OPTIM_ADAMW;
	assert_int_equal(plan_mem_rank(p, 0, &m), 0);
	assert_int_equal(m.optim, 576);
	assert_int_equal(m.peak, 1088 + 576);
	plan_free(p);
}

static void sim__reports__json_trace_svg_grid(void **state)
{
	(void)state;
	Plan *p = read_good("tests/plans/good/tiny2.plan");
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	char *j = capture(TEXT_JSON, p, &res);
	assert_contains(j, "\"ok\": true");
	assert_contains(j, "\"deadlock\": false");
	assert_contains(j, "\"makespan\": 9.000");
	assert_contains(j, "\"bubble\": 0.333333");
	assert_contains(j, "{\"rank\": 0, \"busy\": 0.666667, \"compute\": 6.000, \"idle\": 3.000");
	assert_contains(j, "\"busy\": 0.666667,\n  \"compute\": 12.000,");
	assert_contains(j, "\"peak_activation_bytes\": 512, \"peak_activation_units\": 2, "
	                   "\"peak_total_bytes\": 1344");
	free(j);
	char *t = capture(TEXT_TRACE, p, &res);
	assert_contains(t, "\"traceEvents\"");
	assert_contains(t, "\"name\": \"process_name\", \"pid\": 1");
	assert_contains(t, "\"name\": \"F 0 0\", \"cat\": \"F\", \"ts\": 0.000, \"dur\": 1.000");
	assert_contains(t, "\"tid\": 1, \"name\": \"RECV +1\"");
	assert_contains(t, "\"ph\": \"s\", \"id\": 1, \"pid\": 1"); // a flow from the send
	assert_contains(t, "\"ph\": \"f\", \"id\": 1, \"pid\": 0");
	assert_contains(t, "\"name\": \"memory bytes\"");
	free(t);
	char *s = capture(TEXT_SVG, p, &res);
	assert_contains(s, "<svg");
	assert_contains(s, "F forward");
	assert_contains(s, ">r1 pp=1</text>");
	assert_contains(s, ">F0</text>"); // one stage a rank: kind and microbatch
	assert_contains(s, ">BW1</text>");
	assert_contains(s, "class=\"mem\" data-rank=\"0\" data-peak=\"1344\""); // as the JSON's
	free(s);
	char *g = capture(TEXT_GRID, p, &res);
	assert_contains(g, "rank 0 | F0 F1 .  .  B0 B0 .  B1 B1 |");
	assert_contains(g, "rank 1 | .  F0 B0 B0 F1 B1 B1 .  .  |");
	free(g);
	char *sum = capture(TEXT_SUMMARY, p, &res);
	assert_contains(sum, "makespan   9 us");
	assert_contains(sum, "busy       66.67 % (mean over ranks)");
	assert_contains(sum, " 0           66.67       6 us       3 us");
	assert_contains(sum, "critical path");
	free(sum);
	sim_result_free(&res);

	/* A deadlock in JSON: the cycle with both ends of each edge. */
	Plan *q = read_good("tests/plans/bad/head_to_head.plan");
	assert_int_equal(sim_run(q, &o, &res), 1);
	j = capture(TEXT_JSON, q, &res);
	assert_contains(j, "\"ok\": false");
	assert_contains(j, "\"deadlock\": true");
	assert_contains(j, "\"cycle\": [");
	assert_contains(j, "\"waits_for\": {\"rank\": 1, \"stream\": \"rank\", \"op\": 4, \"line\": 39");
	free(j);
	t = capture(TEXT_TRACE, q, &res);
	assert_contains(t, "STUCK SEND");
	free(t);
	sim_result_free(&res);
	plan_free(q);
	plan_free(p);
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;
	size_t len = strlen(needle);
	for (size_t i = 0; hay[i]; i++)
		n += !strncmp(hay + i, needle, len);
	return n;
}

/* Compute ops that took time (the ones a picture or grid can show), per rank or all. */
static int64_t timed_ops(const Plan *p, const SimResult *res, int rank)
{
	int64_t n = 0;
	for (int r = 0; r < p->world; r++) {
		if (rank >= 0 && r != rank)
			continue;
		for (int64_t i = 0; i < p->ranks[r].nops; i++)
			n += !plan_is_comm(p->ranks[r].ops[i].kind) &&
			     sim_op_time(res, r, i).end > sim_op_time(res, r, i).start;
	}
	return n;
}

/* Links far slower than the computes: the SVG still labels every box (stage, kind,
 * microbatch), names ranks by mesh coordinates and draws one arrow per transfer. */
static void sim__svg_comm_dominated__every_box_labelled(void **state)
{
	(void)state;
	Plan *p = compile_text(program(4, 2, 8, "1f1b", "f=1 b=1 w=1",
	                               "latency=5us bandwidth=50GB/s"),
	                       NULL);
	assert_non_null(p);
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_true(res.bubble > 0.5);
	char *s = capture(TEXT_SVG, p, &res);
	assert_int_equal(count_of(s, "class=\"lab\""), timed_ops(p, &res, -1));
	assert_contains(s, ">F0</text>");
	assert_contains(s, ">BW7</text>");
	assert_contains(s, ">r5 pp=2 dp=1</text>");
	assert_contains(s, "time not to scale");
	int recvs = 0;
	for (int r = 0; r < p->world; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++)
			recvs += p->ranks[r].ops[i].kind == OP_RECV;
	assert_true(recvs > 0);
	assert_int_equal(count_of(s, "marker-end="), recvs + 1); // + the legend's
	free(s);
	sim_result_free(&res);
	plan_free(p);
}

/* A stall at t = 0: the axis runs 0 .. 1 us with its last tick at 1. */
static void sim__svg_stall_at_zero__axis_0_to_1_us(void **state)
{
	(void)state;
	Plan *p = read_good("tests/plans/bad/stall_at_zero.plan");
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 1);
	assert_int_equal(res.stall_time, 0);
	char *s = capture(TEXT_SVG, p, &res);
	assert_contains(s, "deadlock at 0.000 us");
	assert_contains(s, "class=\"tick\">0.5</text>");
	assert_contains(s, "class=\"tick\">1</text>");
	assert_null(strstr(s, ">0.001</text>"));
	assert_null(strstr(s, ">0.0001</text>"));
	assert_contains(s, "stuck: RECV grad");
	free(s);
	sim_result_free(&res);
	plan_free(p);
}

/* Columns much longer than the ops: each row still accounts for every op, by name or
 * in a `+N` cell. */
static void sim__grid_narrow__every_op_named_or_counted(void **state)
{
	(void)state;
	Plan *p = compile_text(program(4, 1, 8, "1f1b", "f=1 b=1 w=1",
	                               "latency=5us bandwidth=50GB/s"),
	                       NULL);
	assert_non_null(p);
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	static const int widths[] = {60, 20, 7};
	int marked = 0;
	for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
		char *buf = capture_at(TEXT_GRID, widths[k], p, &res);
		for (int r = 0; r < p->world; r++) {
			char head[32];
			snprintf(head, sizeof head, "rank %d |", r);
			const char *row = strstr(buf, head);
			assert_non_null(row);
			row += strlen(head);
			/* one stage per rank: equal neighbouring names are one op's cells */
			int64_t seen = 0;
			char prev[16] = "", tok[16];
			int used;
			while (sscanf(row, " %15s%n", tok, &used) == 1 && strcmp(tok, "|")) {
				row += used;
				if (tok[0] == '+') {
					seen += atoi(tok + 1);
					marked++;
				} else if (tok[0] != '.' && strcmp(tok, prev)) {
					seen++;
				}
				snprintf(prev, sizeof prev, "%s", tok);
			}
			if (seen != timed_ops(p, &res, r))
				fail_msg("width %d rank %d: %lld ops in the grid, %lld ran:\n%s", widths[k], r,
				         (long long)seen, (long long)timed_ops(p, &res, r), buf);
		}
		free(buf);
	}
	assert_true(marked > 0);
	sim_result_free(&res);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(mem__tiny_plan__peak_and_parts_by_hand),
	    cmocka_unit_test(sim__reports__json_trace_svg_grid),
	    cmocka_unit_test(sim__svg_comm_dominated__every_box_labelled),
	    cmocka_unit_test(sim__svg_stall_at_zero__axis_0_to_1_us),
	    cmocka_unit_test(sim__grid_narrow__every_op_named_or_counted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
