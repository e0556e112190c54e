/* The writers on worker threads (plan_threads > 1; plan/par_out.c, docs/architecture.md
 * "Threads"): every example compiled (and expanded) and every good test plan, written in
 * text and binary, into a memory stream (the two-pass text writer) and into a regular
 * file (the one-pass writer, its header written last), come out byte for byte as on one
 * thread; so does a generated plan large enough for several batches of pieces.  The
 * pieces themselves: par_cut covers every op once, in order, cutting inside a rank only
 * when asked; par_ordered hands every piece to emit once, in order, on the calling
 * thread, a piece its worker could not format as NULL.  A write error is reported as on
 * one thread. */
#include <errno.h>
#include <pthread.h>
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
#include "../plan/binary.h"
#include "../plan/par.h"
#include "../plan/par_out.h"
#include "plan_lib.h"
#include "../plan/line.h"

/* p in form fmt written with `threads` workers: into a memory stream when !file, else
 * into a temporary file read back. */
static char *written(const Plan *p, int fmt, int threads, int file, size_t *n)
{
	plan_threads = threads;
	char *s = NULL;
	FILE *f = file ? tmpfile() : open_memstream(&s, n);
	assert_non_null(f);
	int rc = plan_write_as(p, f, fmt, 0);
	plan_threads = 1;
	assert_int_equal(rc, 0);
	if (file) {
		long end = ftell(f);
		assert_true(end >= 0);
		*n = (size_t)end;
		s = malloc(*n + 1);
		assert_non_null(s);
		rewind(f);
		assert_int_equal(fread(s, 1, *n, f), *n);
	}
	fclose(f);
	return s;
}

static int compared; // plans compared, in every form, stream and thread count

/* p written on 3 and on 8 workers equals p written on one, in either form, either stream. */
static void check_same(const Plan *p, const char *what)
{
	for (int fmt = 0; fmt < PLAN_FORMAT_COUNT; fmt++)
		for (int file = 0; file < 2; file++) {
			size_t n1, n;
			char *one = written(p, fmt, 1, file, &n1);
			for (int t = 3; t <= 8; t += 5) {
				char *many = written(p, fmt, t, file, &n);
				if (n != n1 || memcmp(one, many, n))
					fail_msg("%s: %s %s on %d threads differs from one thread's", what,
					         plan_format_names[fmt], file ? "file" : "stream", t);
				free(many);
			}
			free(one);
		}
	compared++;
}

static void example_same(const char *path)
{
	size_t len;
	char *src = pipecc_read_file(path, &len);
	assert_non_null(src);
	Plan *p = compile_src(path, src, len);
	free(src);
	check_same(p, path);
	size_t failed;
	Plan *e = p->line ? plan_expand(p, &failed) : NULL;
	if (e) {
		check_same(e, path);
		plan_free(e);
	}
	plan_free(p);
}

static void good_plan_same(const char *path)
{
	Plan *p = read_good(path);
	check_same(p, path);
	plan_free(p);
}

static void write_par__examples__same_bytes_as_one_thread(void **state)
{
	(void)state;
	compared = 0;
	assert_true(each_file("examples", ".pipe", example_same) >= 10);
	assert_true(compared >= 20); // the expanded forms too
}

static void write_par__good_plans__same_bytes_as_one_thread(void **state)
{
	(void)state;
	assert_true(each_file("tests/plans/good", ".plan", good_plan_same) >= 5);
}

/* pp=16 m=512 1f1b: 16 ranks, about 50 000 ops, pieces of hundreds of ops in batches. */
static void write_par__large_plan__same_bytes_as_one_thread(void **state)
{
	(void)state;
	char src[4096];
	int n = snprintf(src, sizeof src, "pipeline big; mesh pp=16; microbatches 512; input 1x16;\n");
	for (int s = 0; s < 16; s++)
		n += snprintf(src + n, sizeof src - (size_t)n, "stage s%d { linear 16;%s }\n", s,
		              s == 15 ? " loss mse;" : "");
	n += snprintf(src + n, sizeof src - (size_t)n, "schedule 1f1b; cost * f=1 b=1 w=1;\n");
	Plan *p = compile_src("big.pipe", src, (size_t)n);
	assert_true(plan_total_ops(p) > 40000);
	check_same(p, "big.pipe");
	plan_free(p);
}

/* The pieces of tests/plans/good/dp2x2.plan for every size, cut inside ranks or not. */
static void write_par__cut__covers_every_op_once_in_order(void **state)
{
	(void)state;
	PlanError e;
	Plan *p = plan_read_file("tests/plans/good/dp2x2.plan", &e);
	assert_non_null(p);
	int64_t total = plan_total_ops(p);
	for (int split = 0; split < 2; split++)
		for (int64_t ops = 1; ops <= total + 1; ops++) {
			int64_t n;
			PlanPos *cut = par_cut(p, ops, split, &n);
			assert_non_null(cut);
			assert_true(n >= 1);
			assert_true(cut[0].rank == 0 && cut[0].op == 0);
			assert_true(cut[n].rank == p->world && cut[n].op == 0);
			for (int64_t i = 0; i < n; i++) {
				PlanPos a = cut[i], b = cut[i + 1];
				assert_true(a.rank < b.rank || (a.rank == b.rank && a.op < b.op)); // no empty piece
				assert_true(a.op < p->ranks[a.rank].nops || a.op == 0);
				if (!split)
					assert_int_equal(a.op, 0);
				if (split && a.rank == b.rank) // a piece inside one rank holds `ops` or fewer
					assert_true(b.op - a.op <= ops);
			}
			if (split && ops == 1) // every op its own piece
				assert_true(n >= total);
			free(cut);
		}
	plan_free(p);
}

typedef struct {
	pthread_t caller;
	int64_t next;   // the piece emit expects
	int64_t fail;   // the piece whose formatting fails
	int64_t nulls;  // pieces emit got as NULL
} Order;

/* Piece i is "piece I\n": odd pieces spill their first word, even ones hold it all in
 * their slot (a char[32]). */
static int order_piece(void *arg, int64_t i, int w, void *slot, FILE *spill)
{
	Order *o = arg;
	(void)w;
	if (i % 2)
		fputs("piece", spill);
	snprintf(slot, 32, "%s %lld\n", i % 2 ? "" : "piece", (long long)i);
	return i == o->fail;
}

static void order_emit(void *arg, int64_t i, void *slot, const char *spill, size_t n)
{
	Order *o = arg;
	assert_true(pthread_equal(pthread_self(), o->caller));
	assert_int_equal(i, o->next++);
	if (!slot) {
		o->nulls++;
		return;
	}
	char want[64], got[64];
	snprintf(want, sizeof want, "piece %lld\n", (long long)i);
	assert_true(n < 32);
	snprintf(got, sizeof got, "%.*s%s", (int)n, spill ? spill : "", (const char *)slot);
	assert_string_equal(got, want);
}

static void write_par__ordered__every_piece_in_order_on_the_caller(void **state)
{
	(void)state;
	for (int64_t fail = -1; fail < 40; fail += 7) {
		Order o = {.caller = pthread_self(), .fail = fail};
		plan_threads = 3;
		par_ordered(100, 2, 32, order_piece, order_emit, &o);
		plan_threads = 1;
		assert_int_equal(o.next, 100);
		if (fail < 0)
			assert_int_equal(o.nulls, 0);
		else // the failed piece at least, and those its stopped pass did not start
			assert_true(o.nulls >= 1);
	}
}

/* Into /dev/full every form fails with ENOSPC, on one thread or more. */
static void write_par__full_disk__reported_as_on_one_thread(void **state)
{
	(void)state;
	PlanError e;
	Plan *p = plan_read_file("tests/plans/good/dp2x2.plan", &e);
	assert_non_null(p);
	for (int fmt = 0; fmt < PLAN_FORMAT_COUNT; fmt++)
		for (int t = 1; t <= 3; t += 2) {
			FILE *f = fopen("/dev/full", "w");
			if (!f)
				skip();
			plan_threads = t;
			errno = 0;
			int rc = plan_write_as(p, f, fmt, 0);
			int err = errno;
			plan_threads = 1;
			fclose(f);
			assert_int_equal(rc, -1);
			assert_int_equal(err, ENOSPC);
		}
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(write_par__examples__same_bytes_as_one_thread),
		cmocka_unit_test(write_par__good_plans__same_bytes_as_one_thread),
		cmocka_unit_test(write_par__large_plan__same_bytes_as_one_thread),
		cmocka_unit_test(write_par__cut__covers_every_op_once_in_order),
		cmocka_unit_test(write_par__ordered__every_piece_in_order_on_the_caller),
		cmocka_unit_test(write_par__full_disk__reported_as_on_one_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
