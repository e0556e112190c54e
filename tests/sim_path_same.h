/* The check shared by tests/test_sim_path.c and the fuzzers (tests/fuzz/fuzz.h): a run
 * that kept the critical path alone (SIM_RECORD_PATH) against one of the same plan and
 * options that kept every op's times (SIM_RECORD_ALL), in everything the report reads.
 * No cmocka here: the fuzzers are built without it. */
#ifndef SIM_PATH_SAME_H
#define SIM_PATH_SAME_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/sim.h"

/* The report's summary of res, malloc'd; NULL when it could not be written. */
static inline char *sim_path_summary(const Plan *p, const SimResult *res)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	int rc = sim_report_summary(f, p, res, NULL);
	if (fclose(f) || rc) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Whether a SIM_RECORD_PATH run took the second run: its ranks hold every op's times. */
static inline int sim_path_second(const SimResult *path)
{
	return path->world > 0 && path->ranks[0].recs != NULL;
}

/* NULL when path (SIM_RECORD_PATH) is all (SIM_RECORD_ALL) in its verdict, figures,
 * stretches and summary text, else what differs, written into why.  A run that failed
 * keeps no path and was not run again; one that took the second run (its ranks hold
 * every op's times) has every stretch timed, else only the first SIM_PATH_TIMED. */
static inline const char *sim_path_differs(const Plan *p, const SimResult *all,
                                           const SimResult *path, char *why, size_t n)
{
	if (path->verdict != all->verdict || path->makespan != all->makespan ||
	    path->ops_done != all->ops_done) {
		snprintf(why, n, "verdict %d, makespan %lld, %lld ops done; want %d, %lld, %lld",
		         (int)path->verdict, (long long)path->makespan, (long long)path->ops_done,
		         (int)all->verdict, (long long)all->makespan, (long long)all->ops_done);
		return why;
	}
	int second = sim_path_second(path);
	if (all->verdict != SIM_OK) {
		if (second || path->npath) {
			snprintf(why, n, "a run that failed was run again or kept a path");
			return why;
		}
		return NULL;
	}
	if (path->npath != all->npath) {
		snprintf(why, n, "%lld stretches, want %lld", (long long)path->npath,
		         (long long)all->npath);
		return why;
	}
	for (int64_t k = 0; k < path->npath; k++) {
		const SimPathStep *a = &all->path[k], *b = &path->path[k];
		int timed = second || k < SIM_PATH_TIMED;
		if (a->rank != b->rank || a->first_op != b->first_op || a->last_op != b->last_op ||
		    a->compute != b->compute || b->start != (timed ? a->start : -1) ||
		    b->end != (timed ? a->end : -1)) {
			snprintf(why, n,
			         "stretch %lld: rank %d ops %lld..%lld %lld..%lld ns, want rank %d ops "
			         "%lld..%lld %lld..%lld",
			         (long long)k, b->rank, (long long)b->first_op, (long long)b->last_op,
			         (long long)b->start, (long long)b->end, a->rank, (long long)a->first_op,
			         (long long)a->last_op, (long long)a->start, (long long)a->end);
			return why;
		}
	}
	char *x = sim_path_summary(p, all), *y = sim_path_summary(p, path);
	int same = x && y && !strcmp(x, y);
	if (!same)
		snprintf(why, n, "the summary differs:\n%s\nwant:\n%s", y ? y : "(none)",
		         x ? x : "(none)");
	free(x);
	free(y);
	return same ? NULL : why;
}

#endif
