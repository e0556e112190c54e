/* The plan reader's fast path for op lines (read_op.c); private to plan/. */
#ifndef PLAN_READ_OP_H
#define PLAN_READ_OP_H

#include "plan.h"
#include "io.h"

/* What an op line's numbers must lie in: the counts read so far. */
typedef struct {
	int stages, edges, routes, mbs;
	int world;      // the mesh's world: rank numbers in the file are below it
	int stride;     // a line plan's rank numbers are multiples of it; 0: not a line plan
	int line_ranks; // a line plan: the ranks on its line (pp)
	const PlanEdge *edge; // the edges read: a SEND's or RECV's bytes= must be its edge's
} PlanOpLimits;

/* Parses the op line s (NUL-terminated at end) into *o and its source line (`@N`, 0
 * without) into *line when it is a compute or p2p op exactly as plan_write puts it,
 * every number in range: 1.  Otherwise 0, and both are garbage: the caller parses the
 * line with the general reader, which says why. */
int plan_read_op_fast(const char *s, const char *end, const PlanOpLimits *l, PlanOp *o,
                      int32_t *line);

/* Parses up to n op lines from s on into ops[] and lines[] (NULL: not kept), as
 * plan_read_op_fast would,
 * each ending (its newline) before end; stops at the first line it does not take.
 * Returns the lines parsed, *used the bytes they took.  A zero byte must follow end: it
 * stops the walk. */
int64_t plan_read_ops_fast(const char *s, const char *end, const PlanOpLimits *l, PlanOp *ops,
                           int32_t *lines, int64_t n, size_t *used);

#endif
