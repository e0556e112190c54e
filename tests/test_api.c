/* libpipecc's public API (include/pipecc.h), called as a user of the library calls it.
 * Every figure and text it returns is checked against the module that makes it, run
 * here directly (the compiler, the reader, the verifier, the simulator, the memory
 * model, the torch CSV emitter): the API must add nothing and lose nothing.  Then each
 * error path: a located message object, never printed text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../include/pipecc.h"
#include "../compiler/pipecc.h"
#include "../plan/io.h"
#include "../plan/mem.h"
#include "../sim/sim.h"

/* The examples each test runs over. */
static const char *const examples[] = {"examples/tiny.pipe", "examples/zbv.pipe",
                                       "examples/interleaved.pipe", "examples/mlp4.pipe"};
enum { NEXAMPLES = sizeof examples / sizeof *examples };

/* Two errors, at 6:12 and 9:10. */
static const char two_errors[] = "pipeline two;\nmesh pp=2;\nmicrobatches 4;\ninput 4x8;\n\n"
                                 "stage s0 { lineer 8; relu; }\n"
                                 "stage s1 { linear 8; loss mse; }\n\n"
                                 "schedule 1f1c;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

static PccPlan *compile_ok(const char *path)
{
	PccDiags *ds;
	PccPlan *p = pcc_compile_file(path, NULL, &ds);
	assert_non_null(p);
	assert_int_equal(pcc_diags_errors(ds), 0);
	pcc_diags_free(ds);
	return p;
}

/* The plan written as text by the API, then read by the plan module itself. */
static Plan *internal_copy(const PccPlan *p)
{
	char *buf;
	size_t len;
	assert_int_equal(pcc_plan_write_buffer(p, PCC_FORMAT_TEXT, &buf, &len, NULL), 0);
	FILE *f = fmemopen(buf, len, "r");
	PlanError err;
	Plan *q = plan_read(f, "copy", &err);
	assert_non_null(q);
	fclose(f);
	pcc_free(buf);
	return q;
}

static void api__version__the_tools(void **state)
{
	(void)state;
	assert_string_equal(pcc_version(), cli_version);
	assert_int_equal(atoi(pcc_version()), PCC_API_MAJOR);
}

static void api__compile_examples__verified_plans(void **state)
{
	(void)state;
	for (int i = 0; i < NEXAMPLES; i++) {
		PccPlan *p = compile_ok(examples[i]);
		assert_true(pcc_plan_world(p) >= 2);
		Plan *q = internal_copy(p);
		assert_true(pcc_plan_ops(p) > 0);
		assert_int_equal(pcc_plan_ops(p), plan_total_ops(q));
		plan_free(q);
		PccDiags *ds;
		assert_int_equal(pcc_plan_verify(p, &ds), 0);
		assert_int_equal(pcc_diags_count(ds), 0);
		pcc_diags_free(ds);
		pcc_plan_free(p);
	}
}

static void api__two_errors__two_located_objects(void **state)
{
	(void)state;
	PccDiags *ds;
	PccPlan *p = pcc_compile("two.pipe", two_errors, strlen(two_errors), NULL, &ds);
	assert_null(p);
	assert_int_equal(pcc_diags_errors(ds), 2);
	const struct { int64_t line; int col; const char *msg; } want[] = {
		{6, 12, "unknown layer 'lineer'; did you mean 'linear'?"},
		{9, 10, "unknown schedule '1f1c'; did you mean '1f1b'?"},
	};
	for (int i = 0; i < 2; i++) {
		const PccDiag *d = pcc_diag(ds, i);
		assert_int_equal(d->severity, PCC_ERROR);
		assert_string_equal(d->file, "two.pipe");
		assert_int_equal(d->line, want[i].line);
		assert_int_equal(d->col, want[i].col);
		assert_string_equal(d->message, want[i].msg);
	}
	assert_null(pcc_diag(ds, pcc_diags_count(ds)));
	pcc_diags_free(ds);
	/* The same messages the tool prints, with nothing printed: the sink replaced it. */
	char *out;
	size_t len;
	FILE *f = open_memstream(&out, &len);
	Diag d;
	diag_init(&d, "two.pipe", two_errors, strlen(two_errors), f);
	assert_null(pipecc_compile("two.pipe", two_errors, strlen(two_errors),
	                           &(PipeccOptions){0}, &d));
	fclose(f);
	assert_non_null(strstr(out, "two.pipe:6:12: error: unknown layer 'lineer'"));
	assert_non_null(strstr(out, "two.pipe:9:10: error: unknown schedule '1f1c'"));
	free(out);
}

static void api__options__override_the_source(void **state)
{
	(void)state;
	size_t len;
	char *src = pipecc_read_file("examples/tiny.pipe", &len);
	assert_non_null(src);
	/* More microbatches: a longer step than the file's. */
	PccSimResult a, b;
	PccPlan *p = pcc_compile("tiny.pipe", src, len, NULL, NULL);
	PccPlan *q = pcc_compile("tiny.pipe", src, len, &(PccOptions){"gpipe", 16}, NULL);
	assert_non_null(p);
	assert_non_null(q);
	assert_int_equal(pcc_simulate(p, PCC_MODEL_STRICT, &a, NULL), 0);
	assert_int_equal(pcc_simulate(q, PCC_MODEL_STRICT, &b, NULL), 0);
	assert_true(b.makespan_ns > a.makespan_ns);
	pcc_sim_free(&a);
	pcc_sim_free(&b);
	pcc_plan_free(p);
	pcc_plan_free(q);
	/* An unknown schedule given as an option: located on the command line. */
	PccDiags *ds;
	assert_null(pcc_compile("tiny.pipe", src, len, &(PccOptions){"nope", 0}, &ds));
	assert_true(pcc_diags_errors(ds) >= 1);
	const PccDiag *d = pcc_diag(ds, 0);
	assert_string_equal(d->file, "<command line>");
	assert_non_null(strstr(d->message, "unknown schedule 'nope'"));
	pcc_diags_free(ds);
	free(src);
}

/* Written in fmt and read back, a plan writes the same text. */
static void round_trip(const PccPlan *p, PccFormat fmt, const char *text, size_t tlen)
{
	char *buf, *again;
	size_t len, alen;
	assert_int_equal(pcc_plan_write_buffer(p, fmt, &buf, &len, NULL), 0);
	PccPlan *q = pcc_plan_read_buffer("buf.plan", buf, len, NULL);
	assert_non_null(q);
	assert_int_equal(pcc_plan_write_buffer(q, PCC_FORMAT_TEXT, &again, &alen, NULL), 0);
	assert_int_equal(alen, tlen);
	assert_memory_equal(again, text, tlen);
	pcc_free(buf);
	pcc_free(again);
	pcc_plan_free(q);
}

static void api__write_read__same_plan(void **state)
{
	(void)state;
	char path[] = "/tmp/pipecc-api-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	for (int i = 0; i < NEXAMPLES; i++) {
		PccPlan *p = compile_ok(examples[i]);
		char *text;
		size_t tlen;
		assert_int_equal(pcc_plan_write_buffer(p, PCC_FORMAT_TEXT, &text, &tlen, NULL), 0);
		assert_true(tlen > 0);
		round_trip(p, PCC_FORMAT_TEXT, text, tlen);
		round_trip(p, PCC_FORMAT_BINARY, text, tlen);
		for (int fmt = 0; fmt < PCC_FORMAT_COUNT; fmt++) {
			assert_int_equal(pcc_plan_write_file(p, path, (PccFormat)fmt, NULL), 0);
			PccPlan *q = pcc_plan_read_file(path, NULL);
			assert_non_null(q);
			assert_int_equal(pcc_plan_verify(q, NULL), 0);
			pcc_plan_free(q);
		}
		pcc_free(text);
		pcc_plan_free(p);
	}
	unlink(path);
}

/* A plan pipesim refuses: the API's object carries the verifier's line, rank, op and
 * message. */
static void api__verify_failure__located(void **state)
{
	(void)state;
	static const char *const bad[] = {"tests/plans/bad/missing_recv.plan",
	                                  "tests/plans/bad/crossed_fifo.plan",
	                                  "tests/plans/bad/route_devices.plan"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		PccPlan *p = pcc_plan_read_file(bad[i], NULL);
		assert_non_null(p);
		PccDiags *ds;
		assert_int_equal(pcc_plan_verify(p, &ds), -1);
		PlanError err;
		Plan *q = plan_read_file(bad[i], &err);
		assert_int_equal(plan_verify(q, &err), -1);
		assert_int_equal(pcc_diags_count(ds), 1);
		const PccDiag *d = pcc_diag(ds, 0);
		assert_int_equal(d->severity, PCC_ERROR);
		assert_string_equal(d->file, bad[i]);
		assert_true(d->line > 0);
		assert_int_equal(d->line, err.line);
		assert_int_equal(d->rank, err.rank);
		assert_int_equal(d->op, err.op);
		assert_string_equal(d->message, err.msg);
		pcc_diags_free(ds);
		/* Simulating it fails alike, before any run. */
		PccSimResult r;
		assert_int_equal(pcc_simulate(p, PCC_MODEL_STRICT, &r, &ds), -1);
		assert_int_equal(pcc_diag(ds, 0)->line, err.line);
		assert_null(r.ranks);
		pcc_diags_free(ds);
		plan_free(q);
		pcc_plan_free(p);
	}
}

static void api__malformed_plan__located(void **state)
{
	(void)state;
	static const char *const bad[] = {"tests/plans/malformed/bad_number.plan",
	                                  "tests/plans/malformed/garbage.plan",
	                                  "tests/plans/malformed/bad_count.plan"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		PccDiags *ds;
		assert_null(pcc_plan_read_file(bad[i], &ds));
		PlanError err;
		assert_null(plan_read_file_as(bad[i], PLAN_KEEP_ALL, &err));
		assert_int_equal(pcc_diags_errors(ds), 1);
		assert_int_equal(pcc_diag(ds, 0)->line, err.line);
		assert_string_equal(pcc_diag(ds, 0)->message, err.msg);
		pcc_diags_free(ds);
	}
}

/* Both models: the figures pipesim prints, which sim_run makes, and the memory model's
 * peak per rank. */
static void api__simulate_both_models__sim_run_figures(void **state)
{
	(void)state;
	for (int i = 0; i < NEXAMPLES; i++) {
		PccPlan *p = compile_ok(examples[i]);
		Plan *q = internal_copy(p);
		PlanMem *mem = plan_mem_all(q);
		for (int m = 0; m < PCC_MODEL_COUNT; m++) {
			PccSimResult r;
			PccDiags *ds;
			assert_int_equal(pcc_simulate(p, (PccModel)m, &r, &ds), 0);
			assert_int_equal(pcc_diags_count(ds), 0);
			pcc_diags_free(ds);
			SimResult s;
			assert_int_equal(sim_run(q, &(SimOptions){.model = (SimModel)m}, &s), 0);
			assert_true(r.makespan_ns > 0);
			assert_int_equal(r.makespan_ns, s.makespan);
			assert_true(r.bubble == s.bubble);
			assert_int_equal(r.world, q->world);
			for (int k = 0; k < r.world; k++) {
				assert_int_equal(r.ranks[k].busy_ns, s.ranks[k].busy);
				assert_int_equal(r.ranks[k].finish_ns, s.ranks[k].finish);
				assert_int_equal(r.ranks[k].peak_act_bytes, s.ranks[k].peak_act_bytes);
				assert_int_equal(r.ranks[k].peak_mem_bytes, mem[k].peak);
			}
			sim_result_free(&s);
			pcc_sim_free(&r);
		}
		free(mem);
		plan_free(q);
		pcc_plan_free(p);
	}
}

static void api__memory__the_memory_model(void **state)
{
	(void)state;
	PccPlan *p = compile_ok("examples/gpt-tiny.pipe");
	Plan *q = internal_copy(p);
	int n = pcc_plan_world(p);
	PccMemory *m = calloc((size_t)n, sizeof *m);
	assert_int_equal(pcc_plan_memory(p, m, NULL), 0);
	for (int r = 0; r < n; r++) {
		PlanMem want;
		assert_int_equal(plan_mem_rank(q, r, &want), 0);
		assert_true(m[r].params > 0);
		assert_int_equal(m[r].params, want.params);
		assert_int_equal(m[r].optim, want.optim);
		assert_int_equal(m[r].saved, want.saved);
		assert_int_equal(m[r].peak, want.peak);
		assert_int_equal(m[r].params + m[r].grads + m[r].master + m[r].optim + m[r].saved +
		                 m[r].comm, m[r].peak);
	}
	free(m);
	plan_free(q);
	pcc_plan_free(p);
}

/* The deadlock pipesim finds, at the op it names. */
static void api__deadlock__finding_at_its_op(void **state)
{
	(void)state;
	const char *path = "tests/plans/bad/head_to_head.plan";
	PccPlan *p = pcc_plan_read_file(path, NULL);
	assert_non_null(p);
	PccSimResult r;
	PccDiags *ds;
	assert_int_equal(pcc_simulate(p, PCC_MODEL_STRICT, &r, &ds), 1);
	PlanError err;
	Plan *q = plan_read_file(path, &err);
	SimResult s;
	assert_int_equal(sim_run(q, &(SimOptions){0}, &s), 1);
	const PccDiag *d = pcc_diag(ds, 0);
	assert_string_equal(d->message, s.message);
	assert_int_equal(d->rank, s.stuck[0].rank);
	assert_int_equal(d->op, s.stuck[0].op);
	assert_int_equal(d->line, sim_op_line(q, s.stuck[0].rank, s.stuck[0].op));
	assert_true(d->line > 0);
	sim_result_free(&s);
	plan_free(q);
	pcc_diags_free(ds);
	pcc_sim_free(&r);
	pcc_plan_free(p);
}

static void api__torch_csv__the_emitters_bytes(void **state)
{
	(void)state;
	for (int i = 0; i < NEXAMPLES; i++) {
		size_t len;
		char *src = pipecc_read_file(examples[i], &len);
		Diag d;
		diag_init(&d, examples[i], src, len, NULL);
		Plan *q = pipecc_compile(examples[i], src, len, &(PipeccOptions){0}, &d);
		assert_non_null(q);
		PccPlan *p = compile_ok(examples[i]);
		for (int comms = 0; comms < 2; comms++) {
			char *want, *got;
			size_t wlen, glen;
			FILE *f = open_memstream(&want, &wlen);
			assert_int_equal(pipecc_emit_torch_csv(q, f, comms), 0);
			fclose(f);
			assert_int_equal(pcc_emit_torch_csv(p, comms, &got, &glen, NULL), 0);
			assert_true(glen > 0);
			assert_int_equal(glen, wlen);
			assert_memory_equal(got, want, wlen);
			free(want);
			pcc_free(got);
		}
		pcc_plan_free(p);
		plan_free(q);
		free(src);
	}
}

/* Each failing call: NULL or -1, and one error naming what it is about. */
static void expect_error(PccDiags *ds, const char *file, const char *words)
{
	assert_non_null(ds);
	assert_int_equal(pcc_diags_errors(ds), 1);
	assert_string_equal(pcc_diag(ds, 0)->file, file);
	assert_non_null(strstr(pcc_diag(ds, 0)->message, words));
	pcc_diags_free(ds);
}

static void api__error_paths__one_error_each(void **state)
{
	(void)state;
	PccDiags *ds;
	assert_null(pcc_compile_file("/nonexistent/x.pipe", NULL, &ds));
	expect_error(ds, "/nonexistent/x.pipe", "cannot read");
	assert_null(pcc_plan_read_file("/nonexistent/x.plan", &ds));
	expect_error(ds, "/nonexistent/x.plan", "");
	assert_null(pcc_plan_read_buffer("empty", "", 0, &ds));
	expect_error(ds, "empty", "empty plan");
	assert_null(pcc_plan_read_buffer("text", "hello\n", 6, &ds));
	assert_true(pcc_diags_errors(ds) == 1 && pcc_diag(ds, 0)->line == 1);
	pcc_diags_free(ds);
	PccPlan *p = compile_ok("examples/tiny.pipe");
	assert_int_equal(pcc_plan_write_file(p, "/nonexistent/dir/x.plan", PCC_FORMAT_TEXT, &ds),
	                 -1);
	expect_error(ds, "/nonexistent/dir/x.plan", "cannot write");
	char *buf = (char *)"untouched";
	size_t len = 9;
	assert_int_equal(pcc_plan_write_buffer(p, PCC_FORMAT_COUNT, &buf, &len, &ds), -1);
	expect_error(ds, "examples/tiny.pipe", "no plan format");
	assert_null(buf);
	assert_int_equal(len, 0);
	PccSimResult r;
	assert_int_equal(pcc_simulate(p, PCC_MODEL_COUNT, &r, &ds), -1);
	expect_error(ds, "examples/tiny.pipe", "no simulation model");
	assert_null(r.ranks);
	/* Without a list to fill, the calls still fail alike. */
	assert_null(pcc_compile("two.pipe", two_errors, strlen(two_errors), NULL, NULL));
	assert_int_equal(pcc_simulate(p, PCC_MODEL_COUNT, &r, NULL), -1);
	pcc_plan_free(p);
	/* The list's accessors take NULL and any index. */
	assert_int_equal(pcc_diags_count(NULL), 0);
	assert_null(pcc_diag(NULL, 0));
	assert_int_equal(pcc_diags_errors(NULL), 0);
	pcc_diags_free(NULL);
	pcc_plan_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(api__version__the_tools),
		cmocka_unit_test(api__compile_examples__verified_plans),
		cmocka_unit_test(api__two_errors__two_located_objects),
		cmocka_unit_test(api__options__override_the_source),
		cmocka_unit_test(api__write_read__same_plan),
		cmocka_unit_test(api__verify_failure__located),
		cmocka_unit_test(api__malformed_plan__located),
		cmocka_unit_test(api__simulate_both_models__sim_run_figures),
		cmocka_unit_test(api__memory__the_memory_model),
		cmocka_unit_test(api__deadlock__finding_at_its_op),
		cmocka_unit_test(api__torch_csv__the_emitters_bytes),
		cmocka_unit_test(api__error_paths__one_error_each),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
