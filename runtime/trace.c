/* The measured timeline as a Chrome trace / Perfetto file, through the writer pipesim
 * shares (plan/trace.h), so predicted and measured timelines open side by side.  Unlike
 * pipesim's single step, every step run is there, one after the other; args carry the
 * step.  Times are microseconds since the world started (on the root's clock).  As in
 * pipesim's, a flow joins each transfer's send to its receive (plan_p2p_pairs, per
 * step), and a counter per rank gives the bytes held at each op's highest point
 * (RtEvent.mem, measured by the memory accounting pipesim's model predicts). */
#include "rt_private.h"
#include "../plan/line.h"

#include "../plan/trace.h"

#include <stdlib.h>

static void trace_rank(PlanTrace *t, const Plan *p, const RtResult *res, int r)
{
	PlanRank tmp;
	const PlanRank *pr = plan_rank(p, r, &tmp);
	plan_trace_rank(t, r);
	for (int64_t k = 0; k < res->nev[r]; k++) {
		const RtEvent *e = &res->ev[r][k];
		if (e->op < 0 || e->op >= pr->nops)
			continue;
		plan_trace_memory(t, r, e->t0, e->mem[0], e->mem[1], e->mem[2]);
		if (!plan_is_comm(pr->ops[e->op].kind))
			plan_trace_compute(t, r, e->op, e->t0, e->t1, e->step);
		else
			plan_trace_group(t, r, e->op, e->op_end, e->t0, e->t1, e->step, 0);
	}
}

/* at[r][op]: the event of step `step` that ran op of rank r (-1: none); cur[r] walks
 * each rank's events, which come step by step in op order. */
static void step_events(const Plan *p, const RtResult *res, int step, int64_t **at,
                        int64_t *cur)
{
	for (int r = 0; r < p->world && r < res->world; r++) {
		PlanRank tmp;
		const PlanRank *pr = plan_rank(p, r, &tmp);
		for (int64_t i = 0; i < pr->nops; i++)
			at[r][i] = -1;
		for (; cur[r] < res->nev[r] && res->ev[r][cur[r]].step <= step; cur[r]++) {
			const RtEvent *e = &res->ev[r][cur[r]];
			for (int64_t i = e->op; e->step == step && i >= 0 && i < e->op_end && i < pr->nops; i++)
				at[r][i] = cur[r];
		}
	}
}

/* A flow per transfer of every step, from the start of the sender's comm event to the end
 * of the receiver's.  -1 when out of memory. */
static int trace_flows(PlanTrace *t, const Plan *p, const RtResult *res)
{
	PlanPair *pairs;
	int64_t n = plan_p2p_pairs(p, &pairs);
	int64_t **at = calloc((size_t)p->world, sizeof *at), *cur = calloc((size_t)p->world, sizeof *cur);
	int rc = n < 0 || !at || !cur ? -1 : 0;
	for (int r = 0; !rc && r < p->world; r++) {
		PlanRank tmp;
		if (!(at[r] = malloc(((size_t)plan_rank(p, r, &tmp)->nops + 1) * sizeof **at)))
			rc = -1;
	}
	for (int s = 0; !rc && s < res->steps; s++) {
		step_events(p, res, s, at, cur);
		for (int64_t k = 0; k < n; k++) {
			const PlanPair *q = &pairs[k];
			if (q->src >= res->world || q->dst >= res->world)
				continue;
			int64_t a = at[q->src][q->send], b = at[q->dst][q->recv];
			if (a < 0 || b < 0)
				continue;
			const RtEvent *ea = &res->ev[q->src][a], *eb = &res->ev[q->dst][b];
			plan_trace_flow(t, q->src, ea->t0, ea->t1, q->dst, eb->t0, eb->t1, s);
		}
	}
	for (int r = 0; at && r < p->world; r++)
		free(at[r]);
	free(at);
	free(cur);
	free(pairs);
	return rc;
}

int rt_trace_write(const Plan *p, const RtResult *res, FILE *f)
{
	char other[96];
	snprintf(other, sizeof other, "\"model\": \"measured\", \"steps\": %d", res->steps);
	PlanTrace t;
	plan_trace_begin(&t, f, p, other);
	for (int r = 0; r < p->world && r < res->world; r++)
		trace_rank(&t, p, res, r);
	int rc = trace_flows(&t, p, res);
	if (rc)
		fprintf(stderr, "piperun: out of memory writing the trace\n");
	return plan_trace_end(&t) || rc ? -1 : 0;
}
