/* The plan verifier's shared state (verify.c: the plan's tables and the driver;
 * verify_ops.c: the walk over every op); private to plan/. */
#ifndef PLAN_VERIFY_H
#define PLAN_VERIFY_H

#include "plan.h"
#include "line.h"
#include "tp.h"
#include "rules.h"

#include <stddef.h>

/* The checks over ops, in the order their faults are reported.  Each is one pass over
 * every rank in rank order, and a plan with faults of several kinds reports the first
 * fault of the earliest kind.  The passes run fused as one walk (verify_ops.c): a check
 * runs only while no earlier kind has failed, and stops at its own first fault.  The
 * collectives and the tied table (verify.c) are reported between matching and
 * dependencies. */
enum {
	PLAN_VC_GROUPS, // comm group numbers, collectives alone in their group
	PLAN_VC_SELF,   // sends to self, paired with receives from self in one group
	PLAN_VC_MATCH,  // point-to-point FIFO matching
	PLAN_VC_DEPS,   // per-rank dependency order and completeness
	PLAN_VC_NONE    // no fault found
};

typedef struct {
	const Plan *p;
	PlanError *err;
	int64_t pp_stride;        // world-rank distance between neighbours along pp
	int *in_off, *in_edges;   // CSR: edges entering each stage
	int *out_off, *out_edges; // CSR: edges leaving each stage
	unsigned char *eself;     // per edge: sent to self (a route joins a rank to itself)
	PlanParts *parts;         // per stage, when tp > 1 (else NULL)
	int stop;                 // the earliest PLAN_VC_* with a fault in *err so far
	int64_t ntie;             // TIEREDUCE ops, counted by the walk
} PlanVc;

/* Fills v->err: a fault against rule (a PlanRule, rules.h; -1 for none, as running out
 * of memory) at op `op` of rank `rank` (-1: none; the line is then the rank's `rank`
 * line).  The message must carry the rule's phrase (a broken invariant otherwise).
 * Returns -1. */
int plan_vc_err(PlanVc *v, int rule, int rank, int64_t op, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* "rank 3 op 17 (line 240) `SEND act ...`" into buf. */
const char *plan_vc_opdesc(const PlanVc *v, int rank, int64_t i, char *buf, size_t n);
/* Rank r as the plan file and every message name it: its world rank (a line plan
 * holds pipeline indices in memory, plan_world_rank); -1 stays -1. */
static inline int plan_vc_rank(const PlanVc *v, int r)
{
	return r >= 0 ? plan_world_rank(v->p, r) : r;
}
/* The world rank on rank r's pipeline line at pipeline index pp. */
static inline int plan_vc_on_line(const PlanVc *v, int r, int pp)
{
	return r + (int)((pp - v->p->ranks[r].coord[DIM_PP]) * v->pp_stride);
}
/* The walk over every rank's ops: groups, sends to self, matching and dependencies
 * (the PLAN_VC_* checks), faults recorded in v->stop and v->err; -1 only when out of
 * memory (reported). */
int plan_vc_ops(PlanVc *v);

#endif
