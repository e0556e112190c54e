/* The op table and the dependency rules.  Our B (input gradient) is PyTorch's I and
 * our fused BW is PyTorch's B; only the table says so.  plan_dep_apply reads the
 * needs/makes bits, so a kind's rules are its row: what it needs of its own stage and
 * microbatch, what it makes, and what a stage must have done (every W, the reduction). */
#include "plan.h"

#include <stddef.h>

const OpInfo plan_ops[OP_COUNT] = {
	[OP_F] = {"F", 'F', OP_ROLE_COMPUTE, PLAN_DEP_IN_ACT, PLAN_DEP_ACT, 1,
	          "a second F of this stage and microbatch", NULL},
	[OP_B] = {"B", 'I', OP_ROLE_COMPUTE, PLAN_DEP_ACT | PLAN_DEP_OUT_GRAD, PLAN_DEP_GRAD, 2,
	          "a second backward of this stage and microbatch", "backward before its F"},
	[OP_W] = {"W", 'W', OP_ROLE_COMPUTE, PLAN_DEP_GRAD, PLAN_DEP_WGRAD, 4, "a second W",
	          "W before its B"},
	[OP_BW] = {"BW", 'B', OP_ROLE_COMPUTE, PLAN_DEP_ACT | PLAN_DEP_OUT_GRAD,
	           PLAN_DEP_GRAD | PLAN_DEP_WGRAD, 6,
	           "a second backward of this stage and microbatch", "backward before its F"},
	[OP_SEND] = {"SEND", 0, OP_ROLE_COMM, 0, 0, 0, NULL, NULL},
	[OP_RECV] = {"RECV", 0, OP_ROLE_COMM, 0, 0, 0, NULL, NULL},
	[OP_ALLREDUCE] = {"ALLREDUCE", 0, OP_ROLE_COMM, PLAN_DEP_ALL_W, PLAN_DEP_REDUCED, 0,
	                  "a second one for this stage", "a reduction before the stage's last W"},
	[OP_OPTIM] = {"OPTIM", 0, OP_ROLE_STEP, PLAN_DEP_ALL_W | PLAN_DEP_REDUCED, PLAN_DEP_STEP, 0,
	              "a second one for this stage",
	              "an optimizer step before the stage's last W"},
};

const char *plan_dep_apply(OpKind k, uint8_t *mb, PlanStageDeps *st, int m, int dp)
{
	const OpInfo *o = &plan_ops[k];
	if (o->makes & PLAN_DEP_MB) {
		if ((o->needs & PLAN_DEP_MB) & ~*mb)
			return o->early;
		if (*mb & o->makes)
			return o->again;
		if ((o->makes & PLAN_DEP_WGRAD) && st->reduced)
			return "a weight gradient after the stage's all-reduce";
		*mb |= o->makes;
		st->nw += !!(o->makes & PLAN_DEP_WGRAD);
		return NULL;
	}
	if ((o->needs & PLAN_DEP_ALL_W) && st->nw < m)
		return o->early;
	if (o->makes & PLAN_DEP_REDUCED) {
		if (dp == 1)
			return "an all-reduce with dp = 1";
		if (st->reduced)
			return o->again;
		st->reduced = 1;
	}
	if (o->makes & PLAN_DEP_STEP) {
		if (st->stepped)
			return o->again;
		if ((o->needs & PLAN_DEP_REDUCED) && dp > 1 && !st->reduced)
			return "an optimizer step before the stage's all-reduce";
		st->stepped = 1;
	}
	return NULL;
}

OpKind plan_op_of_torch(char c)
{
	for (int k = 0; c && k < OP_COUNT; k++)
		if (plan_ops[k].torch == c)
			return (OpKind)k;
	return OP_COUNT;
}

int64_t plan_op_cost(OpKind k, const int64_t cost[3])
{
	int64_t c = 0;
	for (int i = 0; i < 3; i++)
		if (plan_ops[k].costs & (1 << i))
			c += cost[i];
	return c;
}
