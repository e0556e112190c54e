/* What the plan I/O tests share (test_binary.c, test_binary_par.c, test_plan.c,
 * test_read.c, test_write_par.c): compiling a program in memory into a line plan, the files of a
 * folder, a plan's text, a plan file that must read, damaged bytes.  Included once per test program, after cmocka.h and
 * compiler/pipecc.h. */
#ifndef TESTS_PLAN_LIB_H
#define TESTS_PLAN_LIB_H

#include <dirent.h>

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

#endif
