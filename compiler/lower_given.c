/* Lowering with a given communication order: a CSV in PyTorch's compute_comms format
 * names every SEND and RECV (and REDUCE_GRAD) in each rank's list, and the plan keeps
 * that order instead of the one lower.c's walk derives, so that pipesim answers for
 * PyTorch's own lowering (docs/schedules.md "csv").
 *
 * It runs after the walk, on the first pipeline line's lists, before they are copied to
 * the other lines.  The walk has already made every op with its peer, route and bytes;
 * this pass only reorders: on each rank, the compute ops stay in the schedule's order,
 * each given SEND or RECV goes where the CSV puts it (after as many compute actions as
 * precede its cell), a run of them with no compute action or wait between them being
 * one group (PyTorch's host posts them one after the other without waiting), and a stage's dp all-reduce and optimizer
 * step go where the CSV's REDUCE_GRAD is.  What the CSV does not name (skip edges,
 * sends to self, a stage without REDUCE_GRAD) keeps the walk's place relative to the
 * compute ops, with its group. */
#include "lower.h"
#include "../plan/op_line.h"

#include <stdlib.h>
#include <string.h>

/* Whether op o is what given cell k names: REDUCE_GRAD the stage's dp all-reduce and
 * step (not a tied table's sum, which the CSV does not name), SEND and RECV a transfer's
 * side. */
static int names(const SchedComm *k, const PlanOp *o)
{
	const OpInfo *info = &plan_ops[o->kind];
	if (k->kind == SCHED_COMM_REDUCE)
		return (info->over == OP_OVER_DP || info->role == OP_ROLE_STEP) && o->stage == k->edge;
	return plan_op_is_p2p(o->kind) && info->sends == (k->kind == SCHED_COMM_SEND) &&
	       o->stage == k->edge && o->mb == k->mb && o->dir == k->dir;
}

/* One rank's list rewritten; returns -1 when a given cell names no op of the list. */
static int reorder(PlanRank *rk, const SchedComm *given, int ngiven, PlanOp *out,
                   int32_t *lout, int *tag)
{
	int64_t n = rk->nops, k = 0;
	PlanOp *ops = rk->ops;
	/* tag[i]: 0 compute, 1 kept in place, 2 + j: taken by given cell j */
	for (int64_t i = 0; i < n; i++)
		tag[i] = plan_op_is_compute(ops[i].kind) ? 0 : 1;
	for (int j = 0; j < ngiven; j++) {
		int found = 0;
		for (int64_t i = 0; i < n; i++)
			if (tag[i] == 1 && names(&given[j], &ops[i])) {
				tag[i] = 2 + j;
				found = 1;
			}
		if (!found && given[j].kind != SCHED_COMM_REDUCE)
			return -1;
	}
	int g = 0, j = 0, ncomp = 0, prev_given = 0;
	int64_t prev_group = -2, prev_kept = 0;
	for (int64_t i = 0; i <= n; i++) {
		if (i < n && tag[i] == 1) { // in place, with its walk group-mates
			PlanOp o = ops[i];
			if (o.group >= 0) {
				if (!prev_kept || o.group != prev_group)
					g++;
				prev_group = o.group;
				o.group = g - 1;
			}
			lout[k] = plan_op_kept_line(rk, i);
			out[k++] = o;
			prev_kept = 1;
			prev_given = 0;
			continue;
		}
		if (i < n && tag[i] >= 2)
			continue;
		for (; j < ngiven && given[j].at <= ncomp; j++) // the cells before compute op i
			for (int64_t u = 0; u < n; u++)
				if (tag[u] == 2 + j) {
					PlanOp o = ops[u];
					if (o.group >= 0) {
						if (!(given[j].join && prev_given))
							g++;
						o.group = g - 1;
					}
					lout[k] = plan_op_kept_line(rk, u);
					out[k++] = o;
					prev_given = 1;
				}
		prev_kept = prev_given = 0;
		if (i < n) {
			lout[k] = plan_op_kept_line(rk, i);
			out[k++] = ops[i];
			ncomp++;
		}
	}
	if (k != n)
		return -1;
	memcpy(rk->ops, out, (size_t)n * sizeof *out);
	if (rk->lines)
		memcpy(rk->lines, lout, (size_t)n * sizeof *lout);
	return 0;
}

int lower_given(Plan *p, const SchedCtx *sc, int stride, Diag *d)
{
	int rc = 0;
	for (int q = 0; q < sc->pp && rc == 0; q++) {
		PlanRank *rk = &p->ranks[q * stride];
		PlanOp *out = malloc((size_t)(rk->nops + 1) * sizeof *out);
		int32_t *lout = malloc((size_t)(rk->nops + 1) * sizeof *lout);
		int *tag = malloc((size_t)(rk->nops + 1) * sizeof *tag);
		if (!out || !lout || !tag) {
			diag_error(d, sc->prog->sched_loc, "out of memory keeping the CSV's order");
			rc = -1;
		} else if (reorder(rk, sc->comms[q], sc->ncomms[q], out, lout, tag)) {
			diag_error(d, sc->prog->sched_loc, "the CSV's communication on rank %d does not "
			           "match the transfers of the program", q);
			rc = -1;
		}
		free(out);
		free(lout);
		free(tag);
	}
	return rc;
}
