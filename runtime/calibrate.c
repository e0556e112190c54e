/* --calibrate: measured per-microbatch compute times as `cost` lines for the .pipe
 * file, so pipesim can predict the run that produced them.
 *
 * For each stage, the durations of its F, B and W ops over every rank and step but
 * the first (a warm-up, when there are several) are collected; a fused BW splits into
 * its B part (timed inside the op) and the rest.  The mean of each (the mean, not the
 * median: a step's expected time is the sum of its ops' expected times, outliers
 * included) is written in whole nanoseconds: `cost NAME f=..ns b=..ns w=..ns;`.  At
 * tp > 1 an F, B or BW comes as parts: their durations add up to the microbatch's, so
 * the mean is the parts' total over the number of first parts.  Which
 * costs an op takes is its op-table row's (plan/op.c); OPTIM takes none (it is not a
 * cost the language knows) and is left out.  A comment line gives the mean step time over the
 * same steps, so a prediction from these costs can be compared with the very run
 * that measured them (bench/bench_runtime.sh). */
#include "rt_private.h"
#include "../plan/line.h"

#include <inttypes.h>
#include <stdlib.h>

static int64_t average(double sum, int64_t n)
{
	return n ? (int64_t)(sum / (double)n + 0.5) : 0;
}

int rt_calibrate_write(const Plan *p, const RtResult *res, FILE *f)
{
	int first = res->steps > 1 ? 1 : 0;
	double mean = 0;
	for (int s = first; s < res->steps; s++)
		mean += (double)res->step_ns[s];
	mean /= res->steps - first;
	fprintf(f, "# measured by piperun --calibrate over %d step(s) of %s (means)\n",
	        res->steps - first, p->name ? p->name : "plan");
	fprintf(f, "# mean step time over those steps: %.3f us\n", mean / 1e3);
	for (int s = 0; s < p->nstages; s++) {
		int64_t n[3] = {0, 0, 0};
		double sum[3] = {0, 0, 0};
		for (int r = 0; r < res->world; r++) {
			for (int64_t i = 0; i < res->nev[r]; i++) {
				const RtEvent *e = &res->ev[r][i];
				PlanRank tmp;
				const PlanOp *o = &plan_rank(p, r, &tmp)->ops[e->op];
				OpKind k = plan_op_kind(o);
				if (e->step < first || !plan_op_is_compute(k) || o->stage != s)
					continue;
				/* The stage costs the op takes (plan_ops[].costs: F, B, W); a fused op
				 * (BW) timed its first part inside (split), the rest is the second. */
				int64_t d = e->t1 - e->t0;
				uint8_t c = plan_ops[k].costs;
				int64_t part = c & (c - 1) ? e->split : d;
				for (int j = 0; j < 3; j++)
					if (c & 1 << j) {
						sum[j] += (double)part;
						n[j] += o->part == 0; // a microbatch's first part
						part = d - part;
					}
			}
		}
		fprintf(f, "cost %s f=%" PRId64 "ns b=%" PRId64 "ns w=%" PRId64 "ns;\n", p->stages[s].name,
		        average(sum[0], n[0]), average(sum[1], n[1]), average(sum[2], n[2]));
	}
	return ferror(f) ? -1 : 0;
}
