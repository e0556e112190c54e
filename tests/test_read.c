/* The text reader on worker threads (plan/read_par.c, `--threads N`): every plan under
 * tests/plans, every example compiled (its line plan and its expanded form) and many
 * damaged copies of them read with plan_threads = 1 and = 3 give the same Plan, field
 * by field, or the same located error, byte for byte; and the good ones do take the
 * parallel path (the attempt alone succeeds), so the comparison is not of the one-thread
 * reader with itself.  A big plan checks the blocks checksum's path: hashed on the
 * workers while the reader jumps over the op lines. */
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
#include "../plan/io.h"
#include "../plan/par.h"
#include "../plan/read_int.h"
#include "plan_lib.h"
#include "../plan/checksum.h"
#include "../plan/line.h"

static char tmp_path[64];

static void put_file(const char *text, size_t n)
{
	FILE *f = fopen(tmp_path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* a and b are the same plan: the same text, and every field the text does not show
 * (file lines, array sizes, the source lines kept or not) equal. */
static void same_plan(const Plan *a, const Plan *b, const char *what)
{
	if (!same_text(a, b))
		fail_msg("%s: the plans read with 1 and 3 threads write differently", what);
	assert_int_equal(a->world, b->world);
	assert_int_equal(a->routes_line, b->routes_line);
	for (int r = 0; r < a->world; r++) {
		const PlanRank *x = &a->ranks[r], *y = &b->ranks[r];
		assert_int_equal(x->nops, y->nops);
		assert_int_equal(x->ops_cap, y->ops_cap);
		assert_int_equal(x->first_line, y->first_line);
		assert_int_equal(x->line, y->line);
		assert_int_equal(x->npeers, y->npeers);
		assert_int_equal(x->device, y->device);
		assert_int_equal(!x->lines, !y->lines);
		assert_true(!x->nops || !memcmp(x->ops, y->ops, (size_t)x->nops * sizeof *x->ops));
		assert_true(!x->lines || !memcmp(x->lines, y->lines, (size_t)x->nops * sizeof *x->lines));
		assert_true(!x->npeers ||
		            !memcmp(x->peers, y->peers, (size_t)x->npeers * sizeof *x->peers));
	}
}

static Plan *read_with(int threads, const char *path, unsigned keep, PlanError *e)
{
	plan_threads = threads;
	Plan *p = plan_read_file_as(path, keep, e);
	plan_threads = 1;
	return p;
}

static int jumps; // ranks the last parallel attempt jumped over (read_par.c)

/* The parallel attempt alone, with no fallback: does it read the file at path? */
static int parallel_reads(const char *path, unsigned keep)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	RdPar par;
	assert_int_equal(rd_par_init(&par, f), 0);
	PlanError e;
	plan_threads = 3;
	Plan *p = rd_read_text(f, path, keep, &par, &e);
	plan_threads = 1;
	jumps = par.jumps;
	rd_par_free(&par);
	fclose(f);
	plan_free(p);
	return p != NULL;
}

static int nread, nrefused, nparallel;

/* The file at path read with 1 and with 3 threads, keeping `keep`: the same plan, or
 * the same error.  A plan that reads must read in parallel. */
static void compare_keep(const char *path, unsigned keep)
{
	{
		PlanError e1, e3;
		Plan *p1 = read_with(1, path, keep, &e1), *p3 = read_with(3, path, keep, &e3);
		if (!p1 != !p3)
			fail_msg("%s: %s with 1 thread, %s with 3", path, p1 ? "read" : e1.msg,
			         p3 ? "read" : e3.msg);
		if (p1) {
			same_plan(p1, p3, path);
			if (!parallel_reads(path, keep))
				fail_msg("%s: the parallel attempt refused a plan that reads", path);
			nparallel++;
			nread++;
		} else {
			if (e1.line != e3.line || e1.rank != e3.rank || e1.op != e3.op ||
			    strcmp(e1.msg, e3.msg))
				fail_msg("%s: errors differ:\n  1 thread:  %lld: %s\n  3 threads: %lld: %s",
				         path, (long long)e1.line, e1.msg, (long long)e3.line, e3.msg);
			nrefused++;
		}
		plan_free(p1);
		plan_free(p3);
	}
}

/* The same, keeping the source lines and not. */
static void compare(const char *path)
{
	compare_keep(path, 0);
	compare_keep(path, PLAN_KEEP_ALL);
}

/* A plan whose last line lacks its newline (a file cut at its very end) is refused at
 * that line by both readers; with the newline back it reads. */
static void read__last_line_without_newline__refused(void **state)
{
	(void)state;
	FILE *f = fopen("tests/plans/good/tiny2.plan", "rb");
	assert_non_null(f);
	char text[1 << 16];
	size_t n = fread(text, 1, sizeof text, f);
	fclose(f);
	assert_true(n > 1 && n < sizeof text && text[n - 1] == '\n');
	int64_t lines = 0;
	for (size_t i = 0; i < n; i++)
		lines += text[i] == '\n';
	put_file(text, n - 1);
	for (int threads = 1; threads <= 3; threads += 2) {
		PlanError e;
		assert_null(read_with(threads, tmp_path, 0, &e));
		assert_int_equal(e.line, lines);
		assert_non_null(strstr(e.msg, "does not end with a newline"));
	}
	put_file(text, n);
	compare(tmp_path);
}

static void read__plans_corpus__same_plan_or_error(void **state)
{
	(void)state;
	nread = nrefused = nparallel = 0;
	int n = each_file("tests/plans/good", ".plan", compare);
	n += each_file("tests/plans/bad", ".plan", compare); // these read: the verifier refuses them
	n += each_file("tests/plans/malformed", ".plan", compare);
	n += each_file("examples", ".pipe", compare); // "a pipecc source file, not a plan"
	assert_true(n >= 30);
	assert_true(nread >= 2 * 20);
	assert_true(nrefused >= 2 * 10);
}

/* text with line `at` (0-based) changed by `how`: deleted, doubled, cut in its middle
 * (the file ends there), a NUL byte in it, its last byte an 'x', its first digit 9s. */
enum { DAMAGE_DELETE, DAMAGE_DOUBLE, DAMAGE_CUT, DAMAGE_NUL, DAMAGE_X, DAMAGE_BIG, DAMAGE_COUNT };

static size_t damage(const char *text, size_t n, const char *s, int how, char *out)
{
	const char *e = memchr(s, '\n', (size_t)(text + n - s));
	size_t head = (size_t)(s - text), len = (size_t)(e - s) + 1, k = 0;
	memcpy(out, text, head);
	k = head;
	switch (how) {
	case DAMAGE_DELETE:
		break;
	case DAMAGE_DOUBLE:
		memcpy(out + k, s, len);
		memcpy(out + k + len, s, len);
		k += 2 * len;
		break;
	case DAMAGE_CUT:
		memcpy(out + k, s, len / 2);
		return k + len / 2;
	case DAMAGE_NUL:
	case DAMAGE_X:
		memcpy(out + k, s, len);
		out[k + (how == DAMAGE_NUL ? len / 2 : len - 2)] = how == DAMAGE_NUL ? 0 : 'x';
		k += len;
		break;
	case DAMAGE_BIG: {
		memcpy(out + k, s, len);
		char *d = memchr(out + k, '0', len);
		for (char c = '1'; !d && c <= '9'; c++)
			d = memchr(out + k, c, len);
		k += len;
		if (d) { // room for the digits: the rest of the file moves on
			memmove(d + 12, d, (size_t)(out + k - d));
			memset(d, '9', 12);
			k += 12;
		}
		break;
	}
	}
	memcpy(out + k, e + 1, (size_t)(text + n - e - 1));
	return k + (size_t)(text + n - e - 1);
}

/* Lines of text damaged every way, as written (its checksum then refuses nearly every
 * change, after the op lines) and with the header of a plan without one (format 1: the
 * op lines' own errors are what is left to find): the first 20 lines (header, stages,
 * edges, routes, the first rank) and about 30 more spread over the file. */
static void damage_all(const char *text, size_t n)
{
	char *out = malloc(2 * n + 64), *plain = malloc(n + 64);
	assert_non_null(out);
	assert_non_null(plain);
	const char *nl = memchr(text, '\n', n);
	int np = sprintf(plain, "%s 1", PLAN_FORMAT);
	memcpy(plain + np, nl, (size_t)(text + n - nl));
	size_t pn = (size_t)np + (size_t)(text + n - nl);
	put_file(plain, pn);
	compare(tmp_path); // the plain one reads as the original
	int lines = 0;
	for (size_t i = 0; i < n; i++)
		lines += text[i] == '\n';
	int step = lines / 30 > 1 ? lines / 30 : 1;
	for (int form = 0; form < 2; form++) {
		const char *t = form ? plain : text;
		size_t tn = form ? pn : n;
		int line = 0;
		for (const char *s = t; s < t + tn;
		     s = (const char *)memchr(s, '\n', (size_t)(t + tn - s)) + 1, line++) {
			if (line >= 20 && line % step)
				continue;
			for (int how = 0; how < DAMAGE_COUNT; how++) {
				put_file(out, damage(t, tn, s, how, out));
				compare_keep(tmp_path, (line + how) % 2 ? PLAN_KEEP_ALL : 0);
			}
		}
	}
	free(out);
	free(plain);
}

static void damage_example(const char *path)
{
	Plan *p = compile_example(path);
	size_t n;
	char *t = text_of(p, &n);
	if (n < 40000) // all but the biggest
		damage_all(t, n);
	put_file(t, n);
	compare(tmp_path);
	size_t failed;
	Plan *x = p->line ? plan_expand(p, &failed) : NULL;
	if (x) {
		char *tx = text_of(x, &n);
		put_file(tx, n);
		compare(tmp_path);
		free(tx);
		plan_free(x);
	}
	free(t);
	plan_free(p);
}

static void read__examples_damaged__same_plan_or_error(void **state)
{
	(void)state;
	nread = nrefused = nparallel = 0;
	assert_true(each_file("examples", ".pipe", damage_example) >= 10);
	assert_true(nparallel >= 2 * 20);
	assert_true(nrefused >= 2500);
}

/* One plan big enough for every worker to read its ranks' ops in several blocks, with
 * an op line far into it refused: the same error either way.  Its checksum is the blocks
 * kind, which the workers hash apart while the reader jumps over the op lines: bytes
 * changed on either side of a block's edge, the text cut at an edge, and a wrong sum in
 * the header give the one-thread error; under a lanes4 header (hashed as read, nothing
 * jumped) the text reads as the same plan. */
static void read__big_plan__blocks_and_late_error(void **state)
{
	(void)state;
	nread = nrefused = nparallel = 0;
	const char *src = "pipeline big; mesh pp=6; microbatches 2048; input 1x16;\n"
	                  "stage a { linear 16; } stage b { linear 16; } stage c { linear 16; }\n"
	                  "stage d { linear 16; } stage e { linear 16; } stage f { linear 16; loss mse; }\n"
	                  "schedule 1f1b; cost * f=1 b=1 w=1; link ideal;\n";
	char path[] = "/tmp/test_read_big.pipe";
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(src, f);
	fclose(f);
	Plan *p = compile_example(path);
	unlink(path);
	size_t n;
	char *t = text_of(p, &n);
	assert_true(n > 2 * PLAN_SUM_BLOCK + RD_BLOCK);
	assert_memory_equal(t, "pipecc-plan 3 blocks=", 21);
	put_file(t, n);
	compare(tmp_path);
	assert_int_equal(nparallel, 2);
	assert_true(parallel_reads(tmp_path, 0));
	assert_true(jumps >= 4); // the ranks after the first, whose ops span many RD_BLOCKs
	char *out = malloc(2 * n + 64);
	assert_non_null(out);
	const char *s = t + n * 3 / 5;
	s = (const char *)memchr(s, '\n', (size_t)(t + n - s)) + 1;
	for (int how = 0; how < DAMAGE_COUNT; how++) {
		put_file(out, damage(t, n, s, how, out));
		compare(tmp_path);
	}
	assert_int_equal(nrefused, 2 * DAMAGE_COUNT);
	size_t head = (size_t)((const char *)memchr(t, '\n', n) + 1 - t);
	const size_t at[] = {head + PLAN_SUM_BLOCK - 1, head + PLAN_SUM_BLOCK, head + 2 * PLAN_SUM_BLOCK};
	for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
		memcpy(out, t, n);
		out[at[k]] ^= 1; // a digit stays one: the sum alone finds it
		put_file(out, n);
		compare(tmp_path);
		put_file(t, at[k]); // cut there
		compare(tmp_path);
	}
	memcpy(out, t, n);
	out[21] = out[21] == 'f' ? 'e' : 'f'; // the header's sum
	put_file(out, n);
	compare(tmp_path);
	assert_int_equal(nrefused, 2 * DAMAGE_COUNT + 2 * 7);
	int hl = sprintf(out, "pipecc-plan 3 lanes4=%016llx\n",
	                 (unsigned long long)plan_hash(PLAN_SUM_LANES4, t + head, n - head));
	memcpy(out + hl, t + head, n - head);
	put_file(out, (size_t)hl + n - head);
	compare(tmp_path);
	assert_int_equal(nparallel, 4);
	assert_true(parallel_reads(tmp_path, 0));
	assert_int_equal(jumps, 0);
	free(out);
	free(t);
	plan_free(p);
}

static int setup(void **state)
{
	(void)state;
	strcpy(tmp_path, "/tmp/test_read.XXXXXX");
	int fd = mkstemp(tmp_path);
	assert_true(fd >= 0);
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(tmp_path);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(read__plans_corpus__same_plan_or_error),
		cmocka_unit_test(read__last_line_without_newline__refused),
		cmocka_unit_test(read__examples_damaged__same_plan_or_error),
		cmocka_unit_test(read__big_plan__blocks_and_late_error),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
