/* What the simulator tests share (test_sim.c, test_sim_reports.c, test_sim_ref.c, ...): a
 * program compiled in memory, the program of a chain of stages, a failure report's text,
 * fixed-seed random numbers; and plan_lib.h's helpers (read_good: a plan file that must
 * read).  Included once per test program, after cmocka.h, compiler/pipecc.h and sim/sim.h. */
#ifndef TESTS_SIM_LIB_H
#define TESTS_SIM_LIB_H

#include "plan_lib.h" // read_good, compile_pipe, program_text

static inline Plan *compile_text(const char *src, const char *schedule)
{
	return compile_pipe(src, (PipeccOptions){.schedule = schedule}, NULL, 0);
}

/* pp stages on pp ranks (one each), dp replicas, m microbatches; costs and link given. */
static inline char *program(int pp, int dp, int m, const char *sched, const char *cost, const char *link)
{
	return program_text(pp, pp, dp, m, sched, cost, link, NULL);
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

/* check(p, what) on every example, compiled, and on every good test plan, read (paths
 * relative to the repository root, where make runs the tests): the plans the simulator
 * tests take first.  each_file's walkers take a path alone, so the check waits here. */
typedef int (*PlanCheck)(const Plan *p, const char *what);
static PlanCheck each_plan_check;

static inline void each_plan_example(const char *path)
{
	Plan *p = compile_example(path);
	each_plan_check(p, path);
	plan_free(p);
}

static inline void each_plan_good(const char *path)
{
	Plan *p = read_good(path);
	each_plan_check(p, path);
	plan_free(p);
}

static inline void each_plan(PlanCheck check)
{
	each_plan_check = check;
	assert_true(each_file("examples", ".pipe", each_plan_example) > 5);
	assert_true(each_file("tests/plans/good", ".plan", each_plan_good) > 2);
}

/* check(p, what) on every schedule (two stages a rank where it needs them) on pp from
 * pp0 to pp1 by step ranks, m from 2 pp to mmax pp microbatches by pp (multiples of pp,
 * as interleaved and dualpipev need), free and costly links, dp 1 and 2. */
static inline void each_schedule(int pp0, int pp1, int step, int mmax, PlanCheck check)
{
	static const struct {
		const char *name;
		int per_rank;
	} sched[] = {{"gpipe", 1}, {"1f1b", 1},        {"zbh1", 1},      {"zbh2", 1},
	             {"interleaved", 2}, {"loopedbfs", 2}, {"zbv", 2}, {"dualpipev", 2}};
	const char *links[] = {"ideal", "latency=5us bandwidth=1GB/s"};
	for (size_t s = 0; s < sizeof sched / sizeof *sched; s++)
		for (int pp = pp0; pp <= pp1; pp += step)
			for (int m = 2 * pp; m <= mmax * pp; m += pp)
				for (int l = 0; l < 2; l++)
					for (int dp = 1; dp <= 2; dp++) {
						char what[128];
						snprintf(what, sizeof what, "%s pp=%d dp=%d m=%d link %d", sched[s].name,
						         pp, dp, m, l);
						Plan *p = compile_text(program_text(sched[s].per_rank * pp, pp, dp, m,
						                                    sched[s].name, "f=3 b=5 w=2",
						                                    links[l], NULL),
						                       NULL);
						if (!p)
							fail_msg("%s does not compile", what);
						check(p, what);
						plan_free(p);
					}
}

#endif
