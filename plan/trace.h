/* The Chrome trace / Perfetto JSON writer that pipesim (predicted timeline) and piperun
 * (measured timeline) share, so both files have one format and open side by side: a
 * process per rank named "rank R (pp= dp= tp=)", thread 0 "compute" with one complete
 * event per compute op (named by its op text, category its kind), thread 1 "comm" with
 * one event per group (named by its first op's kind, "+N" for N more ops, the ops listed
 * in args).  Times are nanoseconds in, microseconds out. */
#ifndef PLAN_TRACE_H
#define PLAN_TRACE_H

#include "plan.h"

/* The two primitives of the tools' hand-written JSON (this writer's and pipesim --json's):
 * s quoted and escaped (NULL: ""), and ns nanoseconds as microseconds with three
 * decimals, exact. */
void plan_json_str(FILE *f, const char *s);
void plan_json_us(FILE *f, int64_t ns);

typedef struct {
	FILE *f;
	const Plan *p;
	const char *sep;
	int64_t flows; // flow ids given out
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
/* A flow arrow (a p2p transfer) from the start of the send, which ran over [s0, s1] on
 * rank src, to the end of the receive, over [r0, r1] on rank dst: a nanosecond inside
 * each, so that it binds to the comm event there, and forward in time. */
void plan_trace_flow(PlanTrace *t, int src, int64_t s0, int64_t s1, int dst, int64_t r0,
                     int64_t r1, int step);
/* Rank r's memory counter from ts on: model state, saved activations, in flight. */
void plan_trace_memory(PlanTrace *t, int r, int64_t ts, int64_t stat, int64_t saved,
                       int64_t comm);
/* Closes the JSON; -1 when writing failed. */
int plan_trace_end(PlanTrace *t);

/* One p2p transfer: op `send` of rank src and op `recv` of rank dst (ranks[] indices). */
typedef struct {
	int src, dst;
	int64_t send, recv;
} PlanPair;
/* Every p2p transfer of p between two ranks: the k-th RECV on d from s pairs with the
 * k-th SEND on s to d (FIFO per ordered pair of ranks, docs/semantics.md), listed by
 * receiver and its op order, into *out (the caller frees it).  Returns the count, or -1
 * when out of memory.  The SVG's arrows and both traces' flows are these. */
int64_t plan_p2p_pairs(const Plan *p, PlanPair **out);

#endif
