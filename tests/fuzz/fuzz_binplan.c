/* libFuzzer target: the binary plan reader (plan/binary_read.c).  Any bytes either read
 * into a plan or get an error at a byte of the input; a binary plan that reads is
 * exactly what the writer writes for it (one coding per plan), and its text goes back to
 * the same binary; the verifier does not crash on it.  The same bytes in a regular file
 * (a memfd), which the reader reads whole into one block of op arrays, read into the
 * same plan as from memory, which it reads as a stream, or both get an error at a byte. */
#include "../../plan/binary.h"
#include "../../plan/io.h"
#include "fuzz.h"

static char *to_mem(const Plan *p, int fmt, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	fuzz_assert(f, "open_memstream failed");
	fuzz_assert(plan_write_as(p, f, fmt, 0) == 0, "writing failed");
	fuzz_assert(fclose(f) == 0, "fclose failed");
	return buf;
}

/* The plan in data[0..len) read from a regular file in memory. */
static Plan *from_file(const unsigned char *data, size_t len, PlanError *err)
{
	FILE *f = fuzz_memfd(data, len);
	Plan *p = plan_read_binary(f, "fuzz", err);
	fclose(f);
	return p;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	if (len == 0) // fmemopen cannot open an empty buffer
		return 0;
	FILE *f = fmemopen((void *)data, len, "r");
	if (!f)
		return 0;
	PlanError err, ferr;
	Plan *p = plan_read_binary(f, "fuzz", &err);
	fclose(f);
	Plan *fp = from_file(data, len, &ferr);
	fuzz_assert(!p == !fp, "a stream %s, a file %s", p ? "reads" : err.msg,
	            fp ? "reads" : ferr.msg);
	if (!p) {
		/* (a file's size bounds its counts, so its message may differ: "N ops do
		 * not fit the file" where a stream ends inside an op) */
		fuzz_assert(ferr.msg[0] && ferr.at_byte && ferr.line >= 0 && ferr.line <= (int64_t)len,
		            "a file's error not at a byte of the input (%lld of %zu): %s",
		            (long long)ferr.line, len, ferr.msg);
		fuzz_assert(err.msg[0], "read failed without a message");
		fuzz_assert(err.at_byte && err.line >= 0 && err.line <= (int64_t)len,
		            "error not at a byte of the input (%lld of %zu): %s", (long long)err.line,
		            len, err.msg);
		return 0;
	}
	size_t nb, nt;
	char *b = to_mem(p, PLAN_FORMAT_BINARY, &nb);
	fuzz_assert(nb == len && memcmp(b, data, len) == 0, "binary -> plan -> binary differs");
	char *fb = to_mem(fp, PLAN_FORMAT_TEXT, &nt), *st = to_mem(p, PLAN_FORMAT_TEXT, &nb);
	fuzz_assert(nt == nb && !memcmp(fb, st, nt), "a file's plan is not a stream's");
	free(fb);
	free(st);
	plan_free(fp);
	char *t = to_mem(p, PLAN_FORMAT_TEXT, &nt);
	Plan *q = fuzz_read_plan(t, nt, &err);
	fuzz_assert(q, "its text does not read back: line %lld: %s", (long long)err.line, err.msg);
	char *b2 = to_mem(q, PLAN_FORMAT_BINARY, &nt);
	fuzz_assert(nt == len && memcmp(b2, data, len) == 0, "binary -> text -> binary differs");
	if (plan_verify(p, &err) != 0)
		fuzz_assert(err.msg[0], "verify failed without a message");
	plan_free(q);
	plan_free(p);
	free(b);
	free(b2);
	free(t);
	return 0;
}
