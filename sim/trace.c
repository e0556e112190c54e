/* pipesim's predicted timeline as a Chrome trace / Perfetto file, through the writer
 * piperun shares (plan/trace.h).  Compute and comm are each sequential on a rank in
 * either timing model, so events never overlap on a thread, as the format wants.
 * Groups still pending at a deadlock end at the stall and are named "STUCK ...".
 * A flow arrow joins each completed transfer's SEND to its RECV (plan_p2p_pairs), and
 * a counter per rank gives the memory model's bytes (plan_mem_track): from each op's
 * start its highest point, as pipesim --svg draws it. */
#include "sim.h"

#include "../plan/trace.h"

#include <stdlib.h>

/* Rank r's ops: compute events, comm groups and the memory counter (at[nops], or NULL
 * when it could not be computed). */
static void trace_rank(PlanTrace *t, const Plan *p, const SimResult *res, int r, int64_t stop,
                       const PlanMem *m, const PlanMemAt *at)
{
	const PlanRank *pr = &p->ranks[r];
	int64_t stat = plan_mem_static(m);
	plan_trace_rank(t, r);
	if (at)
		plan_trace_memory(t, r, 0, stat, 0, 0);
	for (int64_t i = 0; i < pr->nops;) {
		int64_t j = plan_is_comm(pr->ops[i].kind) ? plan_group_end(pr, i) : i + 1, end = -1;
		int stuck = 0;
		for (int64_t k = i; k < j; k++) {
			int64_t e = sim_op_time(res, r, k).end;
			if (e < 0)
				stuck = 1;
			else if (e > end)
				end = e;
		}
		int64_t start = sim_op_time(res, r, i).start;
		if (start >= 0 && at)
			plan_trace_memory(t, r, start, stat, at[i].saved, at[i].comm);
		if (j == i + 1 && !plan_is_comm(pr->ops[i].kind)) {
			if (!stuck)
				plan_trace_compute(t, r, i, start, end, -1);
		} else if (start >= 0) {
			plan_trace_group(t, r, i, j, start, stuck ? stop : end, -1, stuck);
		}
		i = j;
	}
}

/* A flow per completed transfer, from the SEND's start to its RECV's end. */
static int trace_flows(PlanTrace *t, const Plan *p, const SimResult *res)
{
	PlanPair *pairs;
	int64_t n = plan_p2p_pairs(p, &pairs);
	for (int64_t k = 0; k < n; k++) {
		SimOpTime a = sim_op_time(res, pairs[k].src, pairs[k].send);
		SimOpTime b = sim_op_time(res, pairs[k].dst, pairs[k].recv);
		if (a.end >= 0 && b.end >= 0)
			plan_trace_flow(t, pairs[k].src, a.start, a.end, pairs[k].dst, b.start, b.end, -1);
	}
	free(pairs);
	return n < 0 ? -1 : 0;
}

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
	int oom = 0;
	for (int r = 0; r < p->world; r++) {
		PlanMem m = {0};
		PlanMemAt *at = malloc(((size_t)p->ranks[r].nops + 1) * sizeof *at);
		if (!at || plan_mem_track(p, r, &m, at))
			oom = 1;
		trace_rank(&t, p, res, r, stop, &m, oom ? NULL : at);
		free(at);
	}
	oom |= trace_flows(&t, p, res) < 0;
	if (oom) {
		fprintf(stderr, "pipesim: out of memory writing the trace\n");
		plan_trace_end(&t);
		return -1;
	}
	return plan_trace_end(&t);
}
