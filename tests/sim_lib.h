/* What the simulator tests share (test_sim.c, test_sim_ref.c): a program compiled in
 * memory, the program of a chain of stages, a failure report's text, fixed-seed random
 * numbers; and plan_lib.h's helpers (read_good: a plan file that must read).  Included
 * once per test program, after cmocka.h, compiler/pipecc.h and sim/sim.h. */
#ifndef TESTS_SIM_LIB_H
#define TESTS_SIM_LIB_H

#include "plan_lib.h" // read_good: a plan file that must read

static inline Plan *compile_text(const char *src, const char *schedule)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	PipeccOptions o = {.schedule = schedule};
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), &o, &d);
	fclose(out);
	if (!p && buf)
		fprintf(stderr, "%s", buf);
	free(buf);
	return p;
}

/* n stages on pp ranks (one each), dp replicas, m microbatches; costs and link given. */
static inline char *program(int pp, int dp, int m, const char *sched, const char *cost, const char *link)
{
	static char buf[8192];
	int k = snprintf(buf, sizeof buf,
	                 "pipeline t;\nmesh pp=%d dp=%d;\nmicrobatches %d;\ninput 2x8;\n", pp, dp, m);
	for (int s = 0; s < pp; s++)
		k += snprintf(buf + k, sizeof buf - k, "stage s%d { linear 8; %s}\n", s,
		              s == pp - 1 ? "loss mse; " : "relu; ");
	snprintf(buf + k, sizeof buf - k, "schedule %s;\ncost * %s;\nlink %s;\n", sched, cost, link);
	return buf;
}

/* Runs and returns the failure report text (malloc'd). */
static inline char *failure_text(const Plan *p, const SimResult *res)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	sim_report_failure(f, p, res, "x.plan");
	fclose(f);
	return buf;
}

#define assert_contains(hay, needle)                                                       \
	do {                                                                                   \
		if (!strstr((hay), (needle)))                                                      \
			fail_msg("expected \"%s\" in:\n%s", (needle), (hay));                          \
	} while (0)

/* splitmix64: the tests' fixed-seed random numbers. */
static inline uint64_t rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif
