/* Shared by the libFuzzer targets in tests/fuzz: plans to and from memory, and the
 * invariant check that turns a broken promise into a crash libFuzzer reports.  Only
 * `make fuzz` builds these (clang, -fsanitize=fuzzer). */
#ifndef FUZZ_H
#define FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> // memfd_create (the build defines _GNU_SOURCE)
#include <unistd.h>

#include "../../plan/plan.h"
#include "../../plan/io.h"
#include "../../sim/sim.h"
#include "../sim_path_same.h"

/* An invariant the project promises; a failure aborts so libFuzzer saves the input. */
#define fuzz_assert(cond, ...)                                                          \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "%s:%d: invariant broken: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                                   \
			fputc('\n', stderr);                                            \
			abort();                                                        \
		}                                                                       \
	} while (0)

/* The plan as text in a malloc'd buffer (*len bytes); aborts on failure. */
static inline char *fuzz_write_plan(const Plan *p, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	fuzz_assert(f, "open_memstream failed");
	fuzz_assert(plan_write(p, f) == 0, "plan_write failed");
	fuzz_assert(fclose(f) == 0, "fclose failed");
	return buf;
}

/* data[0..len) as a regular file in memory (a memfd), open for reading at its start:
 * the readers' paths for a file whose size is known. */
static inline FILE *fuzz_memfd(const void *data, size_t len)
{
	int fd = memfd_create("fuzz", 0);
	fuzz_assert(fd >= 0, "memfd_create failed");
	fuzz_assert(write(fd, data, len) == (ssize_t)len, "write to the memfd failed");
	fuzz_assert(lseek(fd, 0, SEEK_SET) == 0, "lseek failed");
	FILE *f = fdopen(fd, "r");
	fuzz_assert(f, "fdopen failed");
	return f;
}

/* The plan in data[0..len); NULL with err filled when it does not read (len > 0). */
static inline Plan *fuzz_read_plan(const void *data, size_t len, PlanError *err)
{
	FILE *f = fmemopen((void *)data, len, "r");
	if (!f)
		return NULL;
	Plan *p = plan_read(f, "fuzz", err);
	fclose(f);
	return p;
}

/* write -> read -> write gives the same bytes. */
static inline void fuzz_check_round_trip(const Plan *p)
{
	size_t n1, n2;
	char *a = fuzz_write_plan(p, &n1);
	PlanError err;
	Plan *q = fuzz_read_plan(a, n1, &err);
	fuzz_assert(q, "a written plan does not read back: line %lld: %s", (long long)err.line,
	            err.msg);
	char *b = fuzz_write_plan(q, &n2);
	fuzz_assert(n1 == n2 && memcmp(a, b, n1) == 0, "write -> read -> write differs");
	plan_free(q);
	free(a);
	free(b);
}

/* Runs p with every op's times into *all (returns sim_run's value), then keeping the
 * critical path alone, with the default window and with a window of one op (which
 * sends most runs through the second run), told the plan verified when it did (the
 * runs then skip the pair check): the same value, and the same verdict, figures,
 * stretches and summary (tests/sim_path_same.h), on any plan. */
static inline int fuzz_run_both(const Plan *p, int model, int eager, int verified,
                                SimResult *all)
{
	SimOptions o = {.model = (SimModel)model, .eager = eager, .record_ops = SIM_RECORD_ALL};
	int rc = sim_run(p, &o, all);
	for (int w = 0; w <= 1; w++) {
		SimOptions q = o;
		q.record_ops = SIM_RECORD_PATH;
		q.path_window = w;
		q.verified = verified;
		SimResult path;
		int rc2 = sim_run(p, &q, &path);
		fuzz_assert(rc2 == rc, "sim_run returned %d keeping the path, %d keeping every op's "
		            "times (model %d, eager %d, window %d)", rc2, rc, model, eager, w);
		static char why[8192];
		const char *d = rc < 0 ? NULL : sim_path_differs(p, all, &path, why, sizeof why);
		fuzz_assert(!d, "keeping the path (model %d, eager %d, window %d): %s", model, eager,
		            w, d);
		sim_result_free(&path);
	}
	if (model == SIM_STRICT && !eager && verified) { // the same on threads (sim/psim.c)
		SimOptions q = {.model = SIM_STRICT, .record_ops = SIM_RECORD_PATH, .verified = 1,
		                .threads = 2};
		SimResult path;
		int rc2 = sim_run(p, &q, &path);
		fuzz_assert(rc2 == rc, "sim_run returned %d on two threads, %d on one", rc2, rc);
		static char why[8192];
		const char *d = rc < 0 ? NULL : sim_path_differs(p, all, &path, why, sizeof why);
		fuzz_assert(!d, "on two threads: %s", d);
		sim_result_free(&path);
	}
	return rc;
}

/* Every model, rendezvous and eager, on any plan: no crash (the sanitizers watch).
 * Also told the plan verified, as pipesim's run beside the verifier is before the
 * verdict (its result then dropped): no crash either, whatever it finds. */
static inline void fuzz_run_sim(const Plan *p)
{
	for (int model = 0; model < SIM_MODEL_COUNT; model++)
		for (int eager = 0; eager <= 1; eager++) {
			SimResult r;
			fuzz_run_both(p, model, eager, 0, &r);
			sim_result_free(&r);
			SimOptions o = {.model = (SimModel)model, .eager = eager,
			                .record_ops = SIM_RECORD_PATH, .verified = 1};
			sim_run(p, &o, &r);
			sim_result_free(&r);
			o.threads = 2; // sim/psim.c, as pipesim's run beside the verifier on 3 or more
			sim_run(p, &o, &r);
			sim_result_free(&r);
		}
}

/* Every model, rendezvous and eager: a verified plan never gets a run-time mismatch, and
 * every deadlock comes with a wait-for cycle.  Returns the strict rendezvous verdict. */
static inline SimVerdict fuzz_check_sim(const Plan *p)
{
	SimVerdict strict = SIM_OK;
	for (int model = 0; model < SIM_MODEL_COUNT; model++)
		for (int eager = 0; eager <= 1; eager++) {
			SimResult r;
			int rc = fuzz_run_both(p, model, eager, 1, &r);
			if (rc >= 0) {
				fuzz_assert(r.verdict != SIM_MISMATCH,
				            "verified plan, run-time mismatch (model %d, eager %d): %s",
				            model, eager, r.message);
				fuzz_assert(r.verdict != SIM_DEADLOCK || r.ncycle > 0,
				            "deadlock without a cycle (model %d, eager %d): %s", model,
				            eager, r.message);
				if (model == SIM_STRICT && !eager)
					strict = r.verdict;
			}
			sim_result_free(&r);
		}
	return strict;
}

#endif
