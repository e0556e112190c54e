/* The binary plan form (plan/binary.c, docs/plan-format.md "Binary form"): every example
 * compiled and every good test plan goes text -> binary -> text and binary -> text ->
 * binary byte for byte; every truncation and every single-byte change of a small binary
 * plan is refused with a byte-located error; an unknown version is refused; corrupted
 * counts cannot make the reader allocate; the op check the binary reader applies
 * accepts every op the text reader reads and refuses what it refuses; either form read
 * keeping no source lines holds the same ops; a read that fails, in either form, is
 * refused as one at its line or byte, not as a truncation. */
#include <errno.h>
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
#include "plan_lib.h"
#include "../plan/line.h"

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

static Plan *from_mem(const char *s, size_t n, PlanError *err)
{
	FILE *in = fmemopen((void *)s, n, "r");
	assert_non_null(in);
	Plan *p = plan_read(in, "mem", err);
	fclose(in);
	return p;
}

/* The form in s read keeping nothing (PLAN_KEEP_*, as pipesim and piperun read) holds
 * full's ops exactly, and no source lines (that full, read keeping all, holds them the
 * round trip shows: the text's `@N` come back). */
static void check_keep_none(const char *s, size_t n, const Plan *full, const char *what)
{
	FILE *in = fmemopen((void *)s, n, "r");
	assert_non_null(in);
	PlanError e;
	Plan *p = plan_read_as(in, "mem", 0, &e);
	fclose(in);
	if (!p)
		fail_msg("%s: does not read keeping nothing: %s", what, e.msg);
	assert_int_equal(p->world, full->world);
	for (int r = 0; r < p->world; r++) {
		const PlanRank *a = &p->ranks[r], *b = &full->ranks[r];
		assert_null(a->lines);
		assert_int_equal(a->nops, b->nops);
		assert_true(!a->nops || !memcmp(a->ops, b->ops, (size_t)a->nops * sizeof *a->ops));
	}
	plan_free(p);
}

/* p's text T and binary B: B reads as T's plan (text(read(B)) == T) and T's plan
 * writes as B (binary(read(T)) == B), and each form writes back as itself. */
static void check_round_trip(const Plan *p, const char *what)
{
	size_t nt, nb, n2;
	char *t = to_mem(p, PLAN_FORMAT_TEXT, &nt), *b = to_mem(p, PLAN_FORMAT_BINARY, &nb);
	PlanError e;
	Plan *fromb = from_mem(b, nb, &e);
	if (!fromb)
		fail_msg("%s: binary does not read: byte %lld: %s", what, (long long)e.line, e.msg);
	assert_false(plan_verify(fromb, &e));
	char *t2 = to_mem(fromb, PLAN_FORMAT_TEXT, &n2);
	if (n2 != nt || memcmp(t, t2, nt))
		fail_msg("%s: text -> binary -> text differs", what);
	char *b2 = to_mem(fromb, PLAN_FORMAT_BINARY, &n2);
	assert_true(n2 == nb && !memcmp(b, b2, nb));
	Plan *fromt = from_mem(t, nt, &e);
	assert_non_null(fromt);
	check_keep_none(t, nt, fromt, what);
	check_keep_none(b, nb, fromb, what);
	char *b3 = to_mem(fromt, PLAN_FORMAT_BINARY, &n2);
	if (n2 != nb || memcmp(b, b3, nb))
		fail_msg("%s: binary -> text -> binary differs", what);
	assert_true(nb < nt); // smaller than its text, or it has no reason to exist
	plan_free(fromb);
	plan_free(fromt);
	free(t);
	free(t2);
	free(b);
	free(b2);
	free(b3);
}

static void example_round_trip(const char *path)
{
	Plan *p = compile_example(path);
	check_round_trip(p, path);
	/* The expanded form (pipecc --expand) too. */
	size_t failed;
	Plan *e = p->line ? plan_expand(p, &failed) : NULL;
	if (e) {
		check_round_trip(e, path);
		plan_free(e);
	}
	plan_free(p);
}

static void binary__examples__round_trip_byte_for_byte(void **state)
{
	(void)state;
	assert_true(each_file("examples", ".pipe", example_round_trip) >= 10);
}

static void good_plan_round_trip(const char *path)
{
	Plan *p = read_good(path);
	check_round_trip(p, path);
	plan_free(p);
}

static void binary__good_plans__round_trip_byte_for_byte(void **state)
{
	(void)state;
	assert_true(each_file("tests/plans/good", ".plan", good_plan_round_trip) >= 5);
}

/* The small binary plan the damage tests cut and change. */
static char *small_binary(size_t *n)
{
	Plan *p = compile_example("examples/tiny.pipe");
	char *b = to_mem(p, PLAN_FORMAT_BINARY, n);
	plan_free(p);
	return b;
}

static void refused(const char *b, size_t n, const char *what, size_t i)
{
	PlanError e;
	Plan *p = from_mem(b, n, &e);
	if (p)
		fail_msg("%s at byte %zu: read without an error", what, i);
	if (!e.msg[0])
		fail_msg("%s at byte %zu: an error without a message", what, i);
	if ((unsigned char)b[0] == (unsigned char)PLAN_BIN_MAGIC[0] &&
	    (!e.at_byte || e.line < 0 || e.line > (int64_t)n))
		fail_msg("%s at byte %zu: error not at a byte of the file (%lld): %s", what, i,
		         (long long)e.line, e.msg);
}

static void binary__every_truncation__refused_at_a_byte(void **state)
{
	(void)state;
	size_t n;
	char *b = small_binary(&n);
	each_cut(b, n, refused);
	free(b);
}

static void binary__every_byte_change__refused_at_a_byte(void **state)
{
	(void)state;
	size_t n;
	char *b = small_binary(&n);
	each_flip(b, n, refused);
	PlanError e;
	Plan *p = from_mem(b, n, &e); // undamaged: still reads
	assert_non_null(p);
	plan_free(p);
	free(b);
}

/* A stream that serves the first cut bytes of buf[n], then fails with EIO (or ends,
 * when cut is n): a disk error, or a file that cannot be read at all. */
typedef struct {
	const char *buf;
	size_t n, cut, at;
} Failing;

static ssize_t failing_read(void *cookie, char *to, size_t want)
{
	Failing *k = cookie;
	if (k->at == k->cut) {
		if (k->cut == k->n)
			return 0;
		errno = EIO;
		return -1;
	}
	size_t g = k->cut - k->at < want ? k->cut - k->at : want;
	memcpy(to, k->buf + k->at, g);
	k->at += g;
	return (ssize_t)g;
}

/* Plan in buf[n] read from a stream failing at cut: refused as a read error, at the
 * byte (binary) or line (text) the read failed in, never as a truncated file. */
static void refused_as_read_error(const char *buf, size_t n, size_t cut, int binary)
{
	Failing k = {buf, n, cut, 0};
	FILE *f = fopencookie(&k, "r", (cookie_io_functions_t){.read = failing_read});
	assert_non_null(f);
	PlanError e;
	Plan *p = plan_read_as(f, "mem", 0, &e);
	fclose(f);
	char want[96];
	snprintf(want, sizeof want, "cannot read: %s", strerror(EIO));
	if (p || strcmp(e.msg, want))
		fail_msg("%s plan, read failing at byte %zu of %zu: %s", binary ? "binary" : "text",
		         cut, n, p ? "read" : e.msg);
	int64_t line = 1; // the text's: the line the failed read was to complete
	for (size_t i = 0; i < cut; i++)
		line += buf[i] == '\n';
	assert_int_equal(e.at_byte, binary && cut > 0);
	assert_int_equal(e.line, cut == 0 ? 0 : binary ? (int64_t)cut : line);
}

/* A read that fails is said to, in either form and wherever it fails: a plan on a disk
 * that fails is not reported as truncated.  (A directory named as the plan fails its
 * first read: tests/cli/reliability.sh.) */
static void binary__read_error__said_as_such_in_either_form(void **state)
{
	(void)state;
	Plan *p = compile_example("examples/tiny.pipe");
	for (int binary = 0; binary < 2; binary++) {
		size_t n;
		char *b = to_mem(p, binary ? PLAN_FORMAT_BINARY : PLAN_FORMAT_TEXT, &n);
		size_t cuts[] = {0, 1, 7, 19, 20, n / 3, n / 2, n - 9, n - 1};
		for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++)
			refused_as_read_error(b, n, cuts[i], binary);
		Failing k = {b, n, n, 0}; // no failure: the plan reads
		FILE *f = fopencookie(&k, "r", (cookie_io_functions_t){.read = failing_read});
		PlanError e;
		Plan *q = plan_read_as(f, "mem", 0, &e);
		fclose(f);
		if (!q)
			fail_msg("%s plan: %s", binary ? "binary" : "text", e.msg);
		plan_free(q);
		free(b);
	}
	plan_free(p);
}

static void binary__unknown_version__refused_at_its_bytes(void **state)
{
	(void)state;
	size_t n;
	char *b = small_binary(&n);
	b[8] = 2;
	PlanError e;
	assert_null(from_mem(b, n, &e));
	assert_true(e.at_byte);
	assert_int_equal(e.line, 8);
	assert_string_equal(e.msg, "binary plan format version 2 is not supported (this build "
	                           "reads version 1)");
	/* Appended bytes are refused too, after the checksum. */
	b[8] = 1;
	char *c = malloc(n + 1);
	memcpy(c, b, n);
	c[n] = 0;
	assert_null(from_mem(c, n + 1, &e));
	assert_int_equal(e.line, (int64_t)n);
	assert_string_equal(e.msg, "data after the checksum");
	free(c);
	free(b);
}

/* A rank's op count made huge: from a file it is bounded by the bytes left; from a
 * stream (size unknown) the arrays grow only as ops arrive.  Either way an error, no
 * big allocation (ASan in `make SAN=1 check` would report one over its limit). */
static void binary__huge_count__refused_without_allocating(void **state)
{
	(void)state;
	size_t n;
	char *b = small_binary(&n);
	uint64_t tlen = 0;
	for (int i = 7; i >= 0; i--)
		tlen = tlen << 8 | (unsigned char)b[12 + i];
	size_t at = PLAN_BIN_HEAD + (size_t)tlen; // rank 0's op count, one byte in tiny
	assert_true((unsigned char)b[at] < 0x80);
	char *c = malloc(n + 8);
	memcpy(c, b, at);
	static const unsigned char huge[9] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f};
	memcpy(c + at, huge, 9);
	memcpy(c + at + 9, b + at + 1, n - at - 1);
	PlanError e;
	assert_null(from_mem(c, n + 8, &e));
	assert_int_equal(e.line, (int64_t)at);
	char path[] = "/tmp/test_binary.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_int_equal(fwrite(c, 1, n + 8, f), n + 8);
	fclose(f);
	assert_null(plan_read_file(path, &e));
	assert_int_equal(e.line, (int64_t)at);
	assert_non_null(strstr(e.msg, "ops do not fit the file"));
	remove(path);
	free(c);
	free(b);
}

static int64_t check_ops(const Plan *p)
{
	PlanOpLimits l = plan_op_limits(p);
	char msg[256];
	int64_t n = 0;
	for (int r = 0; r < p->world; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++, n++)
		{
			PlanOp o = p->ranks[r].ops[i]; // as written: a sized kind's route names its size
			if (plan_op_sized(o.kind))
				o.route = -1;
			if (plan_op_check(&l, p->dims[DIM_TP], &o, plan_op_bytes(p, &p->ranks[r].ops[i]),
			                  msg, sizeof msg))
				fail_msg("rank %d op %lld: %s", r, (long long)i, msg);
		}
	return n;
}

/* Every op the text reader reads passes plan_op_check; a field out of its kind's range
 * or one the kind does not have fails it, in the text reader's words. */
static void binary__op_check__agrees_with_text_reader(void **state)
{
	(void)state;
	PlanError e;
	Plan *p = plan_read_file("tests/plans/good/tp2.plan", &e);
	assert_non_null(p);
	assert_true(check_ops(p) > 0);
	plan_free(p);
	p = compile_example("examples/zbv-selfsend.pipe");
	assert_true(check_ops(p) > 0);
	PlanOpLimits l = plan_op_limits(p);
	char msg[256];
	PlanOp f = {.kind = OP_F, .stage = p->nstages, .mb = 0, .peer = -1, .group = -1,
	            .route = -1};
	assert_int_equal(plan_op_check(&l, 1, &f, 0, msg, sizeof msg), -1);
	char want[128];
	snprintf(want, sizeof want, "stage %d out of range [0, %d]", p->nstages, p->nstages - 1);
	assert_string_equal(msg, want);
	f.stage = 0;
	assert_int_equal(plan_op_check(&l, 1, &f, 0, msg, sizeof msg), 0);
	assert_int_equal(plan_op_check(&l, 1, &f, 8, msg, sizeof msg), -1);
	assert_string_equal(msg, "a F op with a field its kind does not have");
	f.part = 1;
	assert_int_equal(plan_op_check(&l, 1, &f, 0, msg, sizeof msg), -1);
	assert_string_equal(msg, "part= in a plan with tp=1 (stages have one part each way)");
	/* a SEND or RECV moves its edge's tensor, nothing else */
	PlanOp s = {.kind = OP_SEND, .stage = 0, .mb = 0, .peer = 0, .group = 0, .route = 0};
	int64_t eb = p->edges[0].bytes;
	assert_int_equal(plan_op_check(&l, 1, &s, eb, msg, sizeof msg), 0);
	assert_int_equal(plan_op_check(&l, 1, &s, eb + 4, msg, sizeof msg), -1);
	snprintf(want, sizeof want, "bytes=%lld, but edge 0 carries %lld bytes", (long long)eb + 4,
	         (long long)eb);
	assert_string_equal(msg, want);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(binary__examples__round_trip_byte_for_byte),
		cmocka_unit_test(binary__good_plans__round_trip_byte_for_byte),
		cmocka_unit_test(binary__every_truncation__refused_at_a_byte),
		cmocka_unit_test(binary__every_byte_change__refused_at_a_byte),
		cmocka_unit_test(binary__unknown_version__refused_at_its_bytes),
		cmocka_unit_test(binary__read_error__said_as_such_in_either_form),
		cmocka_unit_test(binary__huge_count__refused_without_allocating),
		cmocka_unit_test(binary__op_check__agrees_with_text_reader),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
