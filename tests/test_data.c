/* Token files (runtime/data.c) and the sequences drawn from them (model.c's
 * rt_data_tokens): files of every format and dtype written here, read back id by id;
 * every refusal with its message (no magic, an unsupported dtype, Fortran order, an id
 * outside the vocabulary, a file shorter than a sequence, one that cannot be read); and
 * the sampling rule's promises (targets are the inputs shifted by one in one window, the
 * step moves the window, the held-out set does not move). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "../runtime/rt_private.h"

static char dir[] = "/tmp/test_data_XXXXXX";

static const char *path_of(const char *name)
{
	static char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return p;
}

static void put(const char *name, const void *b, size_t n)
{
	FILE *f = fopen(path_of(name), "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
}

/* A .npy file (version 1) of ids v[0..n) as dtype descr (width bytes, little-endian),
 * with the given header dict body; returns its size in buf. */
static size_t npy(unsigned char *buf, const char *dict, const int64_t *v, int n, int width)
{
	char h[256];
	int k = snprintf(h, sizeof h, "%s", dict);
	while ((10 + k + 1) % 64)
		h[k++] = ' ';
	h[k++] = '\n';
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (unsigned char)(k & 0xff);
	buf[9] = (unsigned char)(k >> 8);
	memcpy(buf + 10, h, (size_t)k);
	size_t at = 10 + (size_t)k;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < width; j++)
			buf[at++] = (unsigned char)((uint64_t)v[i] >> (8 * j));
	return at;
}

/* The message of opening name (format fmt) or checking it against vocab and seq. */
static const char *refusal(const char *name, int fmt, int64_t vocab, int64_t seq)
{
	static char err[512];
	err[0] = 0;
	RtData *d = rt_data_open(path_of(name), fmt, err, sizeof err);
	if (d) {
		int rc = rt_data_check(d, vocab, seq, err, sizeof err);
		rt_data_close(d);
		if (!rc)
			return NULL;
	}
	return err;
}

static void data__npy_every_dtype__reads_the_ids(void **state)
{
	(void)state;
	const char *descr[] = {"|u1", "<u2", "<u4", "<i4", "<i8"};
	const int width[] = {1, 2, 4, 4, 8};
	const int64_t v[] = {0, 1, 200, 7, 255, 42};
	for (int t = 0; t < 5; t++)
		for (int twod = 0; twod < 2; twod++) {
			unsigned char buf[512];
			char dict[128];
			snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
			         descr[t], twod ? "(2, 3)" : "(6,)");
			put("a.npy", buf, npy(buf, dict, v, 6, width[t]));
			char err[256];
			RtData *d = rt_data_open(path_of("a.npy"), RT_DATA_AUTO, err, sizeof err);
			assert_non_null(d);
			assert_int_equal(d->format, RT_DATA_NPY);
			assert_int_equal(d->n, 6);
			for (int i = 0; i < 6; i++)
				assert_int_equal(rt_data_at(d, i), v[i]);
			assert_int_equal(rt_data_check(d, 256, 5, err, sizeof err), 0);
			rt_data_close(d);
		}
}

static void data__raw_formats__by_extension_and_by_option(void **state)
{
	(void)state;
	const unsigned char b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	const char *name[] = {"t.u8", "t.u16", "t.bin", "t.u32"};
	const int64_t n[] = {8, 4, 4, 2}, first[] = {1, 0x0201, 0x0201, 0x04030201};
	char err[256];
	for (int i = 0; i < 4; i++) {
		put(name[i], b, sizeof b);
		RtData *d = rt_data_open(path_of(name[i]), RT_DATA_AUTO, err, sizeof err);
		assert_non_null(d);
		assert_int_equal(d->n, n[i]);
		assert_int_equal(rt_data_at(d, 0), first[i]);
		rt_data_close(d);
	}
	/* The option overrides the name. */
	RtData *d = rt_data_open(path_of("t.u16"), RT_DATA_U8, err, sizeof err);
	assert_non_null(d);
	assert_int_equal(d->n, 8);
	assert_int_equal(rt_data_at(d, 7), 8);
	rt_data_close(d);
}

static void data__llmc__header_then_u16(void **state)
{
	(void)state;
	unsigned char buf[RT_DATA_LLMC_HEADER + 8] = {0};
	uint32_t h[3] = {RT_DATA_LLMC_MAGIC, 1, 3};
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			buf[4 * i + j] = (unsigned char)(h[i] >> (8 * j));
	unsigned char *t = buf + RT_DATA_LLMC_HEADER;
	t[0] = 9, t[2] = 0x34, t[3] = 0x12, t[4] = 1, t[6] = 99; // 3 tokens + 1 past the count
	put("l.dat", buf, sizeof buf); // the magic, not the name, tells it
	char err[256];
	RtData *d = rt_data_open(path_of("l.dat"), RT_DATA_AUTO, err, sizeof err);
	assert_non_null(d);
	assert_int_equal(d->format, RT_DATA_LLMC);
	assert_int_equal(d->n, 3);
	assert_int_equal(rt_data_at(d, 1), 0x1234);
	rt_data_close(d);
	buf[4] = 2; // version 2
	put("l2.dat", buf, sizeof buf);
	assert_non_null(strstr(refusal("l2.dat", RT_DATA_AUTO, 1 << 16, 1),
	                       "llm.c token file version 2 is not supported"));
	buf[4] = 1, buf[8] = 200; // more tokens than the file holds
	put("l3.dat", buf, sizeof buf);
	assert_non_null(strstr(refusal("l3.dat", RT_DATA_AUTO, 1 << 16, 1),
	                       "the llm.c header says 200 tokens, the file holds 4"));
}

/* Each refusal: the file's bytes (npy dict or raw), the format asked, the message. */
static void data__refusals__name_the_reason(void **state)
{
	(void)state;
	unsigned char buf[512];
	const int64_t v[] = {1, 2, 3, 300, 5};
	struct {
		const char *dict; // a .npy dict, or NULL: raw bytes "hello"
		const char *name;
		int fmt;
		int64_t vocab, seq;
		const char *msg;
	} cases[] = {
		{NULL, "x.npy", RT_DATA_AUTO, 256, 1, "not a .npy file (no \\x93NUMPY magic)"},
		{NULL, "x.npy", RT_DATA_NPY, 256, 1, "not a .npy file"},
		{NULL, "x.txt", RT_DATA_AUTO, 256, 1, "cannot tell the token format"},
		{NULL, "x.u16", RT_DATA_AUTO, 256, 1, "5 bytes are not a whole number of 2-byte tokens"},
		{NULL, "x.dat", RT_DATA_LLMC, 256, 1, "not an llm.c token file"},
		{"{'descr': '>u2', 'fortran_order': False, 'shape': (5,), }", "d.npy", RT_DATA_AUTO,
		 512, 1, "dtype '>u2' is not supported"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", "d.npy", RT_DATA_AUTO,
		 512, 1, "dtype '<f4' is not supported"},
		{"{'descr': '<u2', 'fortran_order': True, 'shape': (5,), }", "d.npy", RT_DATA_AUTO,
		 512, 1, "fortran_order is True: only C order is read"},
		{"{'descr': '<u2', 'fortran_order': False, 'shape': (1, 1, 5), }", "d.npy",
		 RT_DATA_AUTO, 512, 1, "the array has 3 dimensions"},
		{"{'descr': '<u2', 'fortran_order': False, 'shape': (6,), }", "d.npy", RT_DATA_AUTO,
		 512, 1, "the shape says 6 tokens of 2 bytes, the file holds 10 bytes"},
		{"{'descr': '<u2', 'shape': (5,), }", "d.npy", RT_DATA_AUTO, 512, 1,
		 ".npy header lacks 'fortran_order'"},
		{"{'descr': '<u2', 'fortran_order': False, 'shape': (5,), 'x': 1}", "d.npy",
		 RT_DATA_AUTO, 512, 1, ".npy header: unknown key 'x'"},
		{"{'descr': '<u2', 'fortran_order': False, 'shape': (5,), }", "d.npy", RT_DATA_AUTO,
		 256, 1, "token 3 (0-based) is 300, not a token id of the plan's vocabulary of 256"},
		{"{'descr': '<u2', 'fortran_order': False, 'shape': (5,), }", "d.npy", RT_DATA_AUTO,
		 512, 5, "5 tokens, shorter than one sequence of 6"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		if (cases[i].dict)
			put(cases[i].name, buf, npy(buf, cases[i].dict, v, 5, 2));
		else
			put(cases[i].name, "hello", 5);
		const char *m = refusal(cases[i].name, cases[i].fmt, cases[i].vocab, cases[i].seq);
		assert_non_null(m);
		if (!strstr(m, cases[i].msg))
			fail_msg("case %zu: '%s' lacks '%s'", i, m, cases[i].msg);
	}
	/* A negative id of a signed dtype. */
	const int64_t neg[] = {1, -2};
	put("n.npy", buf, npy(buf, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
	                      neg, 2, 4));
	assert_non_null(strstr(refusal("n.npy", RT_DATA_AUTO, 256, 1), "token 1 (0-based) is -2"));
	assert_non_null(strstr(refusal("none.u8", RT_DATA_AUTO, 256, 1),
	                       "cannot read the token file: No such file or directory"));
}

/* Input and targets from one window; the step moves it, the held-out set stays. */
static void data__tokens__targets_shift_step_moves_eval_stays(void **state)
{
	(void)state;
	unsigned char b[1000];
	for (int i = 0; i < 1000; i++)
		b[i] = (unsigned char)(i * 7 % 251);
	put("w.u8", b, sizeof b);
	char err[256];
	RtData *d = rt_data_open(path_of("w.u8"), RT_DATA_AUTO, err, sizeof err);
	assert_non_null(d);
	LayerShape sh = {.batch = 3, .seq = 16, .vocab = 256};
	float x[48], y[48], x2[48], e1[48], e2[48];
	rt_data_tokens(d, 1, 0, 4, 1, 2, &sh, 0, x);
	rt_data_tokens(d, 1, 0, 4, 1, 2, &sh, 1, y);
	for (int s = 0; s < 3; s++)
		for (int i = 0; i + 1 < 16; i++)
			assert_true(y[s * 16 + i] == x[s * 16 + i + 1]);
	rt_data_tokens(d, 1, 0, 5, 1, 2, &sh, 0, x2);
	assert_true(memcmp(x, x2, sizeof x) != 0);
	rt_data_tokens(d, 1, 1, 4, 1, 2, &sh, 0, e1);
	rt_data_tokens(d, 1, 1, 9, 1, 2, &sh, 0, e2);
	assert_memory_equal(e1, e2, sizeof e1);
	assert_true(memcmp(e1, x, sizeof x) != 0);
	rt_data_close(d);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(data__npy_every_dtype__reads_the_ids),
		cmocka_unit_test(data__raw_formats__by_extension_and_by_option),
		cmocka_unit_test(data__llmc__header_then_u16),
		cmocka_unit_test(data__refusals__name_the_reason),
		cmocka_unit_test(data__tokens__targets_shift_step_moves_eval_stays),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd))
		rc = rc ? rc : 1;
	return rc;
}
