/* pipesim's predicted timeline as a Chrome trace / Perfetto file, through the writer
 * piperun shares (plan/trace.h).  Compute and comm are each sequential on a rank in
 * either timing model, so events never overlap on a thread, as the format wants.
 * Groups still pending at a deadlock end at the stall and are named "STUCK ...". */
#include "sim.h"

#include "../plan/trace.h"

int sim_write_trace(FILE *f, const Plan *p, const SimResult *res)
{
	if (!res->ranks || !res->ranks[0].recs) {
		fprintf(stderr, "pipesim: no op times recorded: cannot write a trace\n");
		return -1;
	}
	int64_t stop = res->verdict == SIM_OK ? res->makespan : res->stall_time;
	char other[128];
	snprintf(other, sizeof other, "\"model\": \"%s\", \"verdict\": \"%s\"",
	         sim_model_names[res->model], sim_verdict_names[res->verdict]);
	PlanTrace t;
	plan_trace_begin(&t, f, p, other);
	for (int r = 0; r < p->world; r++) {
		const PlanRank *pr = &p->ranks[r];
		plan_trace_rank(&t, r);
		for (int64_t i = 0; i < pr->nops;) {
			const PlanOp *o = &pr->ops[i];
			if (!plan_is_comm(o->kind)) {
				SimOpTime tm = sim_op_time(res, r, i);
				if (tm.end >= 0)
					plan_trace_compute(&t, r, i, tm.start, tm.end, -1);
				i++;
				continue;
			}
			int64_t j = plan_group_end(pr, i), end = -1;
			int stuck = 0;
			for (int64_t k = i; k < j; k++) {
				int64_t e = sim_op_time(res, r, k).end;
				if (e < 0)
					stuck = 1;
				else if (e > end)
					end = e;
			}
			int64_t start = sim_op_time(res, r, i).start;
			if (start >= 0)
				plan_trace_group(&t, r, i, j, start, stuck ? stop : end, -1, stuck);
			i = j;
		}
	}
	return plan_trace_end(&t);
}
