/* The binary reader of a whole file (plan/binary_read.c, on worker threads when
 * plan_threads > 1): every example (line and expanded) and every good test plan, in
 * the binary form in a regular file, reads on 3 threads into the same Plan as on one
 * (ops, lines, counts, exact-size arrays, the text it writes), and as the streaming
 * reader reads it from memory, keeping lines or not, the attempt on threads taking it;
 * every truncation and every single-byte change of a small binary plan, and a byte
 * appended, make the attempt give up and give on 3 threads exactly the error they give
 * on one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/io.h"
#include "../plan/binary_int.h"
#include "../plan/par.h"
#include "plan_lib.h"
#include "../plan/line.h"

#define THREADS 3

static char *to_mem(const Plan *p, int fmt, size_t *n)
{
	char *a = NULL;
	FILE *f = open_memstream(&a, n);
	assert_non_null(f);
	int rc = plan_write_as(p, f, fmt, 0);
	fclose(f);
	assert_int_equal(rc, 0);
	return a;
}

/* b[0, n) in a regular file (the threads need its size), at its start. */
static FILE *file_of(const char *b, size_t n)
{
	FILE *f = tmpfile();
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	rewind(f);
	return f;
}

/* b[0, n) read from a regular file on `threads` threads. */
static Plan *read_on(int threads, const char *b, size_t n, unsigned keep, PlanError *err)
{
	FILE *f = file_of(b, n);
	plan_threads = threads;
	Plan *p = plan_read_binary_as(f, "mem", keep, err);
	plan_threads = 1;
	fclose(f);
	return p;
}

/* The attempt on THREADS threads alone (plan_bin_read_par): 1 with *p, -1 refused. */
static int attempt(const char *b, size_t n, unsigned keep, Plan **p)
{
	FILE *f = file_of(b, n);
	plan_threads = THREADS;
	int rc = plan_bin_read_par(f, "mem", keep, p);
	plan_threads = 1;
	fclose(f);
	return rc;
}

/* a and b hold the same ops and lines (caps: in arrays of the same size too). */
static void same_plan(const Plan *a, const Plan *b, const char *what, int caps)
{
	assert_int_equal(a->world, b->world);
	for (int r = 0; r < a->world; r++) {
		const PlanRank *x = &a->ranks[r], *y = &b->ranks[r];
		if (x->nops != y->nops || (caps && x->ops_cap != y->ops_cap) || !x->lines != !y->lines)
			fail_msg("%s rank %d: %lld ops (room %lld) and %lld (room %lld)", what, r,
			         (long long)x->nops, (long long)x->ops_cap, (long long)y->nops,
			         (long long)y->ops_cap);
		if (x->nops && memcmp(x->ops, y->ops, (size_t)x->nops * sizeof *x->ops))
			fail_msg("%s rank %d: the ops differ", what, r);
		if (x->lines && x->nops && memcmp(x->lines, y->lines, (size_t)x->nops * sizeof *x->lines))
			fail_msg("%s rank %d: the lines differ", what, r);
		assert_int_equal(x->line, y->line);
		assert_int_equal(x->first_line, y->first_line);
	}
	assert_int_equal(a->routes_line, b->routes_line);
	size_t na, nb;
	char *ta = to_mem(a, PLAN_FORMAT_TEXT, &na), *tb = to_mem(b, PLAN_FORMAT_TEXT, &nb);
	if (na != nb || memcmp(ta, tb, na))
		fail_msg("%s: the plans write different texts", what);
	free(ta);
	free(tb);
}

/* b[0, n) read as a stream (the streaming reader: from memory, no size known). */
static Plan *read_stream(const char *b, size_t n, unsigned keep, PlanError *err)
{
	FILE *f = fmemopen((void *)b, n, "r");
	assert_non_null(f);
	Plan *p = plan_read_binary_as(f, "mem", keep, err);
	fclose(f);
	return p;
}

/* p's binary form read on one thread and on THREADS (the attempt on threads taking
 * it): the same plan, and the streaming reader's (whose arrays grow as ops come). */
static int64_t same_on_threads(const Plan *p, const char *what)
{
	size_t n;
	char *b = to_mem(p, PLAN_FORMAT_BINARY, &n);
	int64_t ops = 0;
	for (unsigned keep = 0; keep <= PLAN_KEEP_ALL; keep++) {
		PlanError e1, e3;
		Plan *one = read_on(1, b, n, keep, &e1), *many = NULL;
		if (!one)
			fail_msg("%s: does not read: byte %lld: %s", what, (long long)e1.line, e1.msg);
		if (attempt(b, n, keep, &many) != 1)
			fail_msg("%s: refused on %d threads", what, THREADS);
		same_plan(one, many, what, 1);
		plan_free(many);
		many = read_on(THREADS, b, n, keep, &e3);
		assert_non_null(many);
		same_plan(one, many, what, 1);
		plan_free(many);
		many = read_stream(b, n, keep, &e3);
		assert_non_null(many);
		same_plan(one, many, what, 0);
		for (int r = 0; r < one->world; r++)
			ops += one->ranks[r].nops;
		plan_free(one);
		plan_free(many);
	}
	free(b);
	return ops;
}

static int64_t example_on_threads(const char *path)
{
	Plan *p = compile_example(path);
	int64_t ops = same_on_threads(p, path);
	size_t failed;
	Plan *x = p->line ? plan_expand(p, &failed) : NULL;
	if (x) {
		ops += same_on_threads(x, path);
		plan_free(x);
	}
	plan_free(p);
	return ops;
}

/* each_file's callbacks: the ops each file read, summed in ops_read. */
static int64_t ops_read;

static void example_counted(const char *path)
{
	ops_read += example_on_threads(path);
}

static void binary_par__examples__same_plan_as_one_thread(void **state)
{
	(void)state;
	ops_read = 0;
	each_file("examples", ".pipe", example_counted);
	assert_true(ops_read > 1000);
}

static int64_t good_plan_on_threads(const char *path)
{
	Plan *p = read_good(path);
	int64_t ops = same_on_threads(p, path);
	plan_free(p);
	return ops;
}

static void good_counted(const char *path)
{
	ops_read += good_plan_on_threads(path);
}

static void binary_par__good_plans__same_plan_as_one_thread(void **state)
{
	(void)state;
	ops_read = 0;
	each_file("tests/plans/good", ".plan", good_counted);
	assert_true(ops_read > 100);
}

/* b[0, n), damaged: refused on THREADS threads with the one-thread reader's error. */
static void same_error(const char *b, size_t n, const char *what, size_t i)
{
	PlanError e1, e3;
	Plan *one = read_on(1, b, n, PLAN_KEEP_ALL, &e1);
	Plan *many = read_on(THREADS, b, n, PLAN_KEEP_ALL, &e3), *tried = NULL;
	if (one || many)
		fail_msg("%s at byte %zu: read without an error", what, i);
	if (attempt(b, n, PLAN_KEEP_ALL, &tried) != -1 || tried)
		fail_msg("%s at byte %zu: the attempt on threads did not give up", what, i);
	if (strcmp(e1.msg, e3.msg) || e1.line != e3.line || e1.at_byte != e3.at_byte ||
	    e1.rank != e3.rank || e1.op != e3.op)
		fail_msg("%s at byte %zu: byte %lld: %s; on %d threads byte %lld: %s", what, i,
		         (long long)e1.line, e1.msg, THREADS, (long long)e3.line, e3.msg);
}

static char *small_binary(size_t *n)
{
	Plan *p = compile_example("examples/tiny.pipe");
	char *b = to_mem(p, PLAN_FORMAT_BINARY, n);
	plan_free(p);
	return b;
}

static void binary_par__every_truncation__same_error(void **state)
{
	(void)state;
	size_t n;
	char *b = small_binary(&n);
	each_cut(b, n, same_error);
	free(b);
}

static void binary_par__every_byte_change__same_error(void **state)
{
	(void)state;
	size_t n;
	char *b = small_binary(&n);
	each_flip(b, n, same_error);
	char *more = malloc(n + 1);
	assert_non_null(more);
	memcpy(more, b, n);
	more[n] = 0;
	same_error(more, n + 1, "a byte appended", n);
	free(more);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(binary_par__examples__same_plan_as_one_thread),
		cmocka_unit_test(binary_par__good_plans__same_plan_as_one_thread),
		cmocka_unit_test(binary_par__every_truncation__same_error),
		cmocka_unit_test(binary_par__every_byte_change__same_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
