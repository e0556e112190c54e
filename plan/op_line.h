/* The .pipe line each op stems from, which only the plan writers read: a rank's own
 * lines[] where it keeps one (a custom order's lines, a plan read from a file), else in
 * a plan pipecc lowered from a schedule it generated, the line of the op's stage or of
 * the stage that made its tensor, stored nowhere (Plan.lines_by_stage). */
#ifndef PLAN_OP_LINE_H
#define PLAN_OP_LINE_H

#include "plan.h"

#include <stdint.h>

/* The .pipe line of the statement an op of p stems from, as the lowering of a generated
 * schedule puts it: an op at an edge's (SEND, RECV) is the stage that made its tensor
 * (an activation's source, a gradient's destination); any other op's, its stage's. */
static inline int32_t plan_stage_line(const Plan *p, const PlanOp *o)
{
	int s = o->stage;
	if (plan_ops[o->kind].at == OP_AT_EDGE)
		s = o->dir == DIR_ACT ? p->edges[s].src : p->edges[s].dst;
	return p->stages[s].loc.line;
}
/* What r's lines[] keeps for op i (0 without one): for code that moves ops within a
 * rank, or splits them, where lines by stage follow the ops anyway. */
static inline int32_t plan_op_kept_line(const PlanRank *r, int64_t i)
{
	return r->lines ? r->lines[i] : 0;
}
/* The .pipe line op i of r (a rank of p) stems from (0 unknown). */
static inline int32_t plan_op_line(const Plan *p, const PlanRank *r, int64_t i)
{
	if (r->lines || !p->lines_by_stage)
		return plan_op_kept_line(r, i);
	return plan_stage_line(p, &r->ops[i]);
}

#endif
