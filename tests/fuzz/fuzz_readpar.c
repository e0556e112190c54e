/* libFuzzer target: the text reader on worker threads (plan/read_par.c), as pipesim
 * --threads reads a plan from a regular file: the blocks checksum hashed and the lines
 * counted on the workers while the reader jumps over the op lines, then the op lines
 * parsed on the workers, anything amiss read again on one thread.  The same bytes from
 * a regular file (a memfd) on two threads and from memory on one read into the same
 * plan, or give the same error at the same line.  (A target of its own: the workers
 * make coverage vary from run to run, which slows libFuzzer's bookkeeping threefold, so
 * fuzz_plan keeps to one thread.) */
#include "../../plan/binary.h"
#include "../../plan/io.h"
#include "../../plan/par.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	if (len == 0 || plan_is_binary_start(data[0])) // (fuzz_binplan reads binary files)
		return 0;
	PlanError err, ferr;
	Plan *p = fuzz_read_plan(data, len, &err);
	FILE *f = fuzz_memfd(data, len);
	plan_threads = 2;
	Plan *fp = plan_read(f, "fuzz", &ferr);
	plan_threads = 1;
	fclose(f);
	fuzz_assert(!p == !fp, "one thread: %s; two, from a file: %s", p ? "reads" : err.msg,
	            fp ? "reads" : ferr.msg);
	if (p) {
		size_t n1, n2;
		char *t1 = fuzz_write_plan(p, &n1), *t2 = fuzz_write_plan(fp, &n2);
		fuzz_assert(n1 == n2 && !memcmp(t1, t2, n1), "two threads read another plan");
		free(t1);
		free(t2);
		plan_free(fp);
		plan_free(p);
	} else {
		fuzz_assert(err.line == ferr.line && !strcmp(err.msg, ferr.msg),
		            "errors differ: one thread line %lld: %s; two line %lld: %s",
		            (long long)err.line, err.msg, (long long)ferr.line, ferr.msg);
	}
	return 0;
}
