/* The Chrome trace / Perfetto JSON writer that pipesim (predicted timeline) and piperun
 * (measured timeline) share, so both files have one format and open side by side: a
 * process per rank named "rank R (pp= dp= tp=)", thread 0 "compute" with one complete
 * event per compute op (named by its op text, category its kind), thread 1 "comm" with
 * one event per group (named by its first op's kind, "+N" for N more ops, the ops listed
 * in args).  Times are nanoseconds in, microseconds out. */
#ifndef PLAN_TRACE_H
#define PLAN_TRACE_H

#include "plan.h"

typedef struct {
	FILE *f;
	const Plan *p;
	const char *sep;
} PlanTrace;

/* other: extra members of "otherData", already JSON (`"model": "strict"`), or NULL. */
void plan_trace_begin(PlanTrace *t, FILE *f, const Plan *p, const char *other);
/* The process and thread names of rank r. */
void plan_trace_rank(PlanTrace *t, int r);
/* Compute op `op` of rank r ran from t0 to t1; step >= 0 adds it to args (1-based). */
void plan_trace_compute(PlanTrace *t, int r, int64_t op, int64_t t0, int64_t t1, int step);
/* The group of ops [op, op_end) of rank r ran from t0 to t1; stuck marks a group that
 * never completed (a deadlock). */
void plan_trace_group(PlanTrace *t, int r, int64_t op, int64_t op_end, int64_t t0, int64_t t1,
                      int step, int stuck);
/* Closes the JSON; -1 when writing failed. */
int plan_trace_end(PlanTrace *t);

#endif
