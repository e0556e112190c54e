/* The measured timeline as a Chrome trace / Perfetto file, through the writer pipesim
 * shares (plan/trace.h), so predicted and measured timelines open side by side.  Unlike
 * pipesim's single step, every step run is there, one after the other; args carry the
 * step.  Times are microseconds since the world started (on the root's clock). */
#include "rt_private.h"
#include "../plan/line.h"

#include "../plan/trace.h"

int rt_trace_write(const Plan *p, const RtResult *res, FILE *f)
{
	char other[96];
	snprintf(other, sizeof other, "\"model\": \"measured\", \"steps\": %d", res->steps);
	PlanTrace t;
	plan_trace_begin(&t, f, p, other);
	for (int r = 0; r < p->world && r < res->world; r++) {
		PlanRank tmp;
		const PlanRank *pr = plan_rank(p, r, &tmp);
		plan_trace_rank(&t, r);
		for (int64_t k = 0; k < res->nev[r]; k++) {
			const RtEvent *e = &res->ev[r][k];
			if (e->op < 0 || e->op >= pr->nops)
				continue;
			if (!plan_is_comm(pr->ops[e->op].kind))
				plan_trace_compute(&t, r, e->op, e->t0, e->t1, e->step);
			else
				plan_trace_group(&t, r, e->op, e->op_end, e->t0, e->t1, e->step, 0);
		}
	}
	return plan_trace_end(&t);
}
