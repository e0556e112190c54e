/* What the plan I/O tests share (test_binary.c, test_binary_par.c, test_plan.c,
 * test_read.c, test_write_par.c), and through lower_lib.h and sim_lib.h the compiler's
 * and the simulator's: compiling a program in memory, the text of a chain of stages,
 * a program's order written out for the schedules that read one (test_runtime.c,
 * test_check.c), the files of a folder, a plan's text, a plan file that must read,
 * damaged bytes.
 * Included once per test program, after cmocka.h and compiler/pipecc.h. */
#ifndef TESTS_PLAN_LIB_H
#define TESTS_PLAN_LIB_H

#include <dirent.h>

#include "../plan/io.h"

/* .pipe text src compiled in memory with options o (the schedule or microbatches it
 * overrides, a line plan); NULL on diagnostics, which go to errs when given, else to
 * stderr.  lower_lib.h's, sim_lib.h's and test_runtime.c's compile_text. */
static inline Plan *compile_pipe(const char *src, PipeccOptions o, char *errs, size_t nerrs)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), &o, &d);
	fclose(out);
	if (errs)
		snprintf(errs, nerrs, "%s", buf ? buf : "");
	else if (!p && buf)
		fprintf(stderr, "%s", buf);
	free(buf);
	return p;
}

/* The text of a chain of n stages of width 8 (linear and relu; the last, linear and
 * loss mse) on pp x dp, m microbatches, with the schedule, costs and link given, then
 * extra on a line of its own when not NULL.  A static buffer: one program at a time. */
static inline char *program_text(int n, int pp, int dp, int m, const char *sched,
                                 const char *cost, const char *link, const char *extra)
{
	static char buf[8192];
	int k = snprintf(buf, sizeof buf,
	                 "pipeline t;\nmesh pp=%d dp=%d;\nmicrobatches %d;\ninput 2x8;\n", pp, dp, m);
	for (int s = 0; s < n; s++)
		k += snprintf(buf + k, sizeof buf - k, "stage s%d { linear 8; %s}\n", s,
		              s == n - 1 ? "loss mse; " : "relu; ");
	k += snprintf(buf + k, sizeof buf - k, "schedule %s;\ncost * %s;\nlink %s;\n", sched, cost,
	              link);
	if (extra)
		snprintf(buf + k, sizeof buf - k, "%s\n", extra);
	return buf;
}

/* The program src with its `schedule ...;` statement replaced by `with`; malloc'd, or
 * NULL when src has none. */
static inline char *with_schedule(const char *src, const char *with)
{
	const char *a = strstr(src, "\nschedule ");
	const char *b = a ? strchr(a + 1, ';') : NULL;
	if (!b)
		return NULL;
	size_t head = (size_t)(a + 1 - src), n = head + strlen(with) + strlen(b + 1) + 1;
	char *out = malloc(n);
	snprintf(out, n, "%.*s%s%s", (int)head, src, with, b + 1);
	return out;
}

/* A schedule that takes a written order (custom, csv) rejects every program as it is
 * written.  These are the same programs with an order written out: the compute order
 * the schedule `first` makes (a test passes the registry's first), as PyTorch's
 * schedule CSV (in the file csv, read by `schedule csv`) and as a `schedule custom {
 * rank N: ...; }` body.  Both are compiled with the schedule under test overriding the
 * statement, so a schedule only runs a written order when it is the one that reads it. */
static inline int written_orders(const char *src, const char *first, const char *csv,
                                 char *out[2])
{
	out[0] = out[1] = NULL;
	Plan *base = compile_pipe(src, (PipeccOptions){.schedule = first}, NULL, 0);
	if (!base)
		return 0;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(pipecc_emit_torch_csv(base, f, 0), 0);
	fclose(f);
	plan_free(base);
	f = fopen(csv, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	char stmt[512];
	snprintf(stmt, sizeof stmt, "schedule csv \"%s\";", csv);
	out[0] = with_schedule(src, stmt);
	/* custom: one `rank N:` line per CSV row, cells separated by spaces. */
	char *body = malloc(strlen(text) * 2 + 64), *o = body;
	o += sprintf(o, "schedule custom {\n");
	int row = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		o += sprintf(o, "rank %d:", row++);
		for (char *c = line; *c; c++)
			*o++ = *c == ',' ? ' ' : *c;
		o += sprintf(o, ";\n");
	}
	sprintf(o, "}");
	out[1] = with_schedule(src, body);
	free(body);
	free(text);
	return 2;
}

/* .pipe text src compiled as pipecc does by default (every rank listed, not a line
 * plan); a failed test, with the diagnostics, when it does not compile. */
static inline Plan *compile_plan(const char *src)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	PipeccOptions o = {0};
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), &o, &d);
	fclose(out);
	if (!p)
		fail_msg("does not compile:\n%s\n%s", src, buf ? buf : "");
	free(buf);
	return p;
}

/* .pipe text src (named path in messages) compiled into a line plan; a failed test
 * when it does not compile. */
static inline Plan *compile_src(const char *path, const char *src, size_t len)
{
	char *msgs = NULL;
	size_t mlen;
	FILE *out = open_memstream(&msgs, &mlen);
	Diag d;
	diag_init(&d, path, src, len, out);
	PipeccOptions o = {.line = 1};
	Plan *p = pipecc_compile(path, src, len, &o, &d);
	fclose(out);
	if (!p)
		fail_msg("%s does not compile: %s", path, msgs);
	free(msgs);
	return p;
}

/* The .pipe file at path compiled, as compile_src. */
static inline Plan *compile_example(const char *path)
{
	size_t len;
	char *src = pipecc_read_file(path, &len);
	assert_non_null(src);
	Plan *p = compile_src(path, src, len);
	free(src);
	return p;
}

/* Calls fn on every file in dir ending in ext; returns how many. */
static inline int each_file(const char *dir, const char *ext, void (*fn)(const char *path))
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	for (struct dirent *de; (de = readdir(d));) {
		size_t l = strlen(de->d_name), k = strlen(ext);
		if (l <= k || strcmp(de->d_name + l - k, ext))
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		fn(path);
		n++;
	}
	closedir(d);
	return n;
}

/* A check of damaged bytes b[0, n): `what` was done at byte i. */
typedef void (*DamageFn)(const char *b, size_t n, const char *what, size_t i);

/* fn on every cut of b[0, n): its first len bytes, 0 < len < n. */
static inline void each_cut(const char *b, size_t n, DamageFn fn)
{
	for (size_t len = 1; len < n; len++)
		fn(b, len, "cut", len);
}

/* fn on b[0, n) with each byte changed in turn, nine ways (each bit, and all of them);
 * b is as it was after. */
static inline void each_flip(char *b, size_t n, DamageFn fn)
{
	static const unsigned char flips[] = {1, 2, 4, 8, 16, 32, 64, 128, 0xff};
	for (size_t i = 0; i < n; i++)
		for (size_t f = 0; f < sizeof flips; f++) {
			b[i] ^= (char)flips[f];
			fn(b, n, "changed", i);
			b[i] ^= (char)flips[f];
		}
}

/* The text plan_write writes for p, malloc'd, its length in *n.  (Not inlined: gcc
 * then takes the stream's pointer to a for a dangling one.) */
static __attribute__((unused, noinline)) char *text_of(const Plan *p, size_t *n)
{
	char *a = NULL;
	FILE *f = open_memstream(&a, n);
	assert_non_null(f);
	int rc = plan_write(p, f);
	fclose(f);
	assert_int_equal(rc, 0);
	return a;
}

/* Whether a and b write the same text. */
static inline int same_text(const Plan *a, const Plan *b)
{
	size_t na, nb;
	char *ta = text_of(a, &na), *tb = text_of(b, &nb);
	int same = na == nb && !memcmp(ta, tb, na);
	free(ta);
	free(tb);
	return same;
}

/* The plan in the file at path, which must read. */
static inline Plan *read_good(const char *path)
{
	PlanError e;
	Plan *p = plan_read_file(path, &e);
	if (!p)
		fail_msg("%s:%lld: %s", path, (long long)e.line, e.msg);
	return p;
}

/* A plan's text of n bytes (text_of's) read back; a failed test when it does not read. */
static inline Plan *reread(const char *t, size_t n)
{
	FILE *f = fmemopen((void *)t, n, "r");
	PlanError e;
	Plan *q = plan_read(f, "mem", &e);
	fclose(f);
	if (!q)
		fail_msg("does not read back: line %lld: %s", (long long)e.line, e.msg);
	return q;
}

/* plan with its first `from` replaced by `to`, read back: the error's line and text. */
static inline void read_broken(const char *plan, const char *from, const char *to,
                               const char *want)
{
	const char *at = strstr(plan, from);
	if (!at)
		fail_msg("'%s' is not in the plan", from);
	size_t n = strlen(plan) + strlen(to) + 1;
	char *text = malloc(n);
	assert_non_null(text);
	snprintf(text, n, "%.*s%s%s", (int)(at - plan), plan, to, at + strlen(from));
	int64_t line = 1;
	for (const char *s = plan; s < at; s++)
		line += *s == '\n';
	FILE *f = fmemopen(text, strlen(text), "r");
	PlanError e;
	Plan *q = plan_read(f, "mem", &e);
	fclose(f);
	if (q)
		fail_msg("reads with '%s' in place of '%s'", to, from);
	if (e.line != line || !strstr(e.msg, want))
		fail_msg("'%s': line %lld: %s; want line %lld: %s", to, (long long)e.line, e.msg,
		         (long long)line, want);
	free(text);
}

/* plan's text as a version 1 plan (no checksum), so that a test may edit it and read
 * it back.  The caller frees it. */
static inline char *as_plain(const char *plan)
{
	const char *body = strchr(plan, '\n');
	assert_non_null(body);
	char *t = malloc(strlen(body) + 16);
	assert_non_null(t);
	strcpy(t, "pipecc-plan 1");
	strcat(t, body);
	return t;
}

#endif
