/* pipecc's own path, pass by pass (bench/bench_pipecc.sh): a .pipe file parsed and
 * checked, placed and scheduled, then lowered (lower_program), verified (plan_verify)
 * and written to a regular file (plan_write: one pass, the header put in its place
 * last).  Prints CPU seconds and M ops/s (ops of the written plan) of each pass, the
 * best of REPS runs since the machine may be shared.  The passes are called as
 * compiler/pipecc.c's run_passes calls them, for a program with a fixed schedule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>

#include "../compiler/auto.h"
#include "../plan/io.h"
#include "../compiler/lower.h"
#include "../compiler/pipecc.h"
#include "../compiler/place.h"
#include "../compiler/program.h"

/* User and system CPU seconds so far: the system part is mostly the kernel's page
 * faults (the plan's op arrays) and, for the writer, its copy into the page cache. */
typedef struct {
	double user, sys;
} Cpu;

static double secs(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec * 1e-6;
}

static Cpu cpu(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (Cpu){secs(u.ru_utime), secs(u.ru_stime)};
}

static void show(const char *what, Cpu c, int64_t ops)
{
	double s = c.user + c.sys;
	printf("  %-26s %6.3f s cpu (user %6.3f, sys %6.3f)  %6.1f M ops/s", what, s, c.user,
	       c.sys, s > 0 ? (double)ops / s / 1e6 : 0);
	if (c.user > 0) // rusage counts in ticks: a short pass may show none
		printf(", user alone %6.1f", (double)ops / c.user / 1e6);
	printf("\n");
}

enum { T_SCHED, T_LOWER, T_VERIFY, T_WRITE, T_COUNT };

/* One run: each pass's CPU seconds into t; returns the plan's op count, or -1. */
static int64_t run(const char *file, const char *src, size_t len, const char *out, Cpu *best)
{
	jmp_buf jb;
	Arena arena = {.oom = &jb};
	Diag d;
	diag_init(&d, file, src, len, stderr);
	if (setjmp(jb)) {
		fprintf(stderr, "lower_bench: out of memory\n");
		exit(1);
	}
	Cpu t0 = cpu();
	Program *pr = front_parse(&arena, &d, file, src, len);
	const Schedule *s = pr ? sched_find(pr->schedule) : NULL;
	if (!s || s->search) {
		fprintf(stderr, "lower_bench: %s: not a program with a fixed schedule\n", file);
		exit(1);
	}
	SchedCtx c = {.prog = pr, .arena = &arena, .diag = &d, .pp = pr->dims[DIM_PP],
	              .m = pr->microbatches, .nstages = pr->nstages};
	c.stage_pp = arena_alloc(&arena, (size_t)c.nstages * sizeof *c.stage_pp);
	c.nacts = arena_alloc(&arena, (size_t)c.pp * sizeof *c.nacts);
	c.cap = arena_alloc(&arena, (size_t)c.pp * sizeof *c.cap);
	c.acts = arena_alloc(&arena, (size_t)c.pp * sizeof *c.acts);
	if (place_stages(&c, s) || route_check(&arena, pr, c.stage_pp, &d) || s->check(&c))
		exit(1);
	s->fill(&c);
	Cpu t1 = cpu();
	Plan *p = lower_program(pr, &c, &d, 0, 0, 1);
	Cpu t2 = cpu();
	sched_free(&c);
	if (!p)
		exit(1);
	PlanError err;
	if (plan_verify(p, &err)) {
		fprintf(stderr, "lower_bench: the plan fails verification: %s\n", err.msg);
		exit(1);
	}
	Cpu t3 = cpu();
	FILE *f = fopen(out, "w");
	if (!f || plan_write(p, f) || fclose(f)) {
		fprintf(stderr, "lower_bench: writing %s failed\n", out);
		exit(1);
	}
	Cpu t4 = cpu();
	Cpu t[T_COUNT + 1] = {t0, t1, t2, t3, t4};
	for (int i = 0; i < T_COUNT; i++) {
		Cpu d = {t[i + 1].user - t[i].user, t[i + 1].sys - t[i].sys};
		if (d.user + d.sys < best[i].user + best[i].sys)
			best[i] = d;
	}
	int64_t ops = plan_total_ops(p);
	plan_free(p);
	arena_free(&arena);
	return ops;
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: lower_bench FILE.pipe OUT.plan [REPS]\n");
		return 2;
	}
	int reps = argc == 4 ? atoi(argv[3]) : 3;
	size_t len;
	char *src = pipecc_read_file(argv[1], &len);
	if (!src) {
		perror(argv[1]);
		return 1;
	}
	Cpu t[T_COUNT];
	for (int i = 0; i < T_COUNT; i++)
		t[i] = (Cpu){1e30, 0};
	int64_t ops = 0;
	for (int i = 0; i < reps; i++)
		ops = run(argv[1], src, len, argv[2], t);
	show("parse, place, schedule", t[T_SCHED], ops);
	show("lower_program", t[T_LOWER], ops);
	show("plan_verify", t[T_VERIFY], ops);
	show("plan_write, file (1 pass)", t[T_WRITE], ops);
	free(src);
	return 0;
}
