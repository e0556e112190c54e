/* libFuzzer target: the .pipe front end and the whole compile.  Any text either
 * compiles or gets diagnostics; a compiled plan always verifies, never deadlocks, and
 * writes back stably.  When the order cannot run, the --allow-deadlock plan reaches
 * pipesim's deadlock report (a cycle), never a mismatch.
 *
 * Inputs that would make huge plans (mesh or microbatch numbers over LIMIT, and under
 * `microbatches auto` an input's first number, the most microbatches tried) and inputs
 * naming a CSV file (the compile would read the disk) are skipped: they test memory and
 * the file system, not the compiler's logic. */
#include <ctype.h>

#include "../../compiler/pipecc.h"
#include "fuzz.h"

enum { LIMIT = 64 };

/* Whether s says `microbatches auto`: the input's rows are then microbatch counts. */
static int mb_auto(const char *s, size_t n)
{
	const char *k = memmem(s, n, "microbatches", 12);
	if (!k)
		return 0;
	size_t i = (size_t)(k - s) + 12;
	while (i < n && isspace((unsigned char)s[i]))
		i++;
	return n - i >= 4 && !memcmp(s + i, "auto", 4);
}

static int too_big(const char *s, size_t n)
{
	if (memmem(s, n, "csv", 3) || memmem(s, n, "CSV", 3))
		return 1;
	int rows_count = mb_auto(s, n);
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]) || (i > 0 && isalnum((unsigned char)s[i - 1])))
			continue;
		long v = 0;
		size_t j = i;
		while (j < n && isdigit((unsigned char)s[j]) && v <= 1 << 20)
			v = v * 10 + (s[j++] - '0');
		/* a shape (16x512) or a width may be large: only bare numbers count */
		if (v > LIMIT && (rows_count || j >= n || s[j] != 'x') && (i < 2 || s[i - 2] != 'x'))
			return 1;
		i = j;
	}
	return 0;
}

static FILE *sink(void)
{
	static FILE *f;
	if (!f)
		f = fopen("/dev/null", "w");
	return f;
}

static Plan *compile(const char *src, size_t n, int allow_deadlock)
{
	PipeccOptions o = {.allow_deadlock = allow_deadlock};
	Diag d;
	diag_init(&d, "fuzz.pipe", src, n, sink());
	Plan *p = pipecc_compile("fuzz.pipe", src, n, &o, &d);
	fuzz_assert(p || d.nerrors > 0, "no plan and no diagnostic");
	return p;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	const char *src = (const char *)data;
	if (too_big(src, len))
		return 0;
	PlanError err;
	Plan *p = compile(src, len, 0);
	if (p) {
		fuzz_assert(plan_verify(p, &err) == 0, "compiled plan fails to verify: %s", err.msg);
		fuzz_check_round_trip(p);
		fuzz_assert(fuzz_check_sim(p) == SIM_OK, "compiled plan does not finish");
		plan_free(p);
		return 0;
	}
	p = compile(src, len, 1);
	if (p) {
		fuzz_assert(plan_verify(p, &err) == 0, "--allow-deadlock plan fails to verify: %s",
		            err.msg);
		fuzz_check_round_trip(p);
		fuzz_assert(fuzz_check_sim(p) == SIM_DEADLOCK,
		            "--allow-deadlock plan of a rejected order does not deadlock");
		plan_free(p);
	}
	return 0;
}
