/* piperun's plan loading, timed (bench/bench_lines.sh): read and verify a plan file as
 * piperun does, then, for a line plan, derive what one process needs: with RANK (a
 * process of `mpirun -np WORLD`) lists for line 0 and that rank (plan_expand_for), without
 * it every world rank's (the threads launcher, one process for all).  Prints the two
 * phases' seconds to stderr. */
#include <stdlib.h>
#include "../plan/plan.h"
#include "../plan/io.h"
#include "../plan/line.h"

#include <stdio.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: load_bench PLAN [RANK]\n");
		return 2;
	}
	PlanError err;
	double t0 = now();
	Plan *p = plan_read_file(argv[1], &err);
	if (!p || plan_verify(p, &err)) {
		fprintf(stderr, "%s:%lld: error: %s\n", argv[1], (long long)err.line, err.msg);
		return 1;
	}
	double t1 = now();
	if (p->line) {
		size_t failed;
		Plan *e = plan_expand_for(p, argc == 3 ? atoi(argv[2]) : -1, &failed);
		if (!e) {
			fprintf(stderr, "load_bench: out of memory\n");
			return 1;
		}
		plan_free(e);
	}
	double t2 = now();
	fprintf(stderr, "read+verify %.4f s, expand %.4f s\n", t1 - t0, t2 - t1);
	plan_free(p);
	return 0;
}
