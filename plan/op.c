/* The op table and the dependency rules.  Our B (input gradient) is PyTorch's I and
 * our fused BW is PyTorch's B; only the table says so.  plan_dep_apply reads the
 * needs/makes bits, so a kind's rules are its row: what it needs of its own stage and
 * microbatch, what it makes, and what a stage must have done (every W, the reduction). */
#include "plan.h"

#include <stddef.h>

const OpInfo plan_ops[OP_COUNT] = {
	[OP_F] = {.name = "F", .torch = 'F', .role = OP_ROLE_COMPUTE, .dir = DIR_ACT, .parted = 1,
	          .fields = OP_FIELD_MB | OP_FIELD_PART,
	          .needs = PLAN_DEP_IN_ACT, .makes = PLAN_DEP_ACT, .costs = 1,
	          .saves = PLAN_SAVE_FB | PLAN_SAVE_FW,
	          .again = "a second F of this stage and microbatch"},
	[OP_B] = {.name = "B", .torch = 'I', .role = OP_ROLE_COMPUTE, .dir = DIR_GRAD, .parted = 1,
	          .fields = OP_FIELD_MB | OP_FIELD_PART,
	          .needs = PLAN_DEP_ACT | PLAN_DEP_OUT_GRAD, .makes = PLAN_DEP_GRAD, .costs = 2,
	          .saves = PLAN_SAVE_BW, .frees = PLAN_SAVE_FB,
	          .again = "a second backward of this stage and microbatch",
	          .early = "backward before its F"},
	[OP_W] = {.name = "W", .torch = 'W', .role = OP_ROLE_COMPUTE, .dir = DIR_GRAD,
	          .fields = OP_FIELD_MB,
	          .needs = PLAN_DEP_GRAD, .makes = PLAN_DEP_WGRAD, .costs = 4,
	          .frees = PLAN_SAVE_FW | PLAN_SAVE_BW,
	          .again = "a second W", .early = "W before its B"},
	[OP_BW] = {.name = "BW", .torch = 'B', .role = OP_ROLE_COMPUTE, .dir = DIR_GRAD, .parted = 1,
	           .fields = OP_FIELD_MB | OP_FIELD_PART,
	           .needs = PLAN_DEP_ACT | PLAN_DEP_OUT_GRAD,
	           .makes = PLAN_DEP_GRAD | PLAN_DEP_WGRAD, .costs = 2 | 4,
	           .frees = PLAN_SAVE_FB | PLAN_SAVE_FW,
	           .again = "a second backward of this stage and microbatch",
	           .early = "backward before its F"},
	[OP_SEND] = {.name = "SEND", .role = OP_ROLE_COMM, .over = OP_OVER_PEER, .at = OP_AT_EDGE,
	             .fields = OP_FIELD_MB | OP_FIELD_PEER | OP_FIELD_GROUP | OP_FIELD_ROUTE |
	                       OP_FIELD_BYTES | OP_FIELD_DIR,
	             .sends = 1},
	[OP_RECV] = {.name = "RECV", .role = OP_ROLE_COMM, .over = OP_OVER_PEER, .at = OP_AT_EDGE,
	             .fields = OP_FIELD_MB | OP_FIELD_PEER | OP_FIELD_GROUP | OP_FIELD_ROUTE |
	                       OP_FIELD_BYTES | OP_FIELD_DIR},
	[OP_ALLREDUCE] = {.name = "ALLREDUCE", .role = OP_ROLE_COMM, .over = OP_OVER_DP,
	                  .fields = OP_FIELD_GROUP | OP_FIELD_BYTES,
	                  .sized = 1, .alone = 1, .dir = DIR_GRAD,
	                  .needs = PLAN_DEP_ALL_W | PLAN_DEP_TIED, .makes = PLAN_DEP_REDUCED,
	                  .again = "a second one for this stage",
	                  .early = "a reduction before the stage's last W"},
	[OP_OPTIM] = {.name = "OPTIM", .role = OP_ROLE_STEP, .dir = DIR_GRAD,
	              .needs = PLAN_DEP_ALL_W | PLAN_DEP_REDUCED | PLAN_DEP_TIED | PLAN_DEP_SEQ,
	              .makes = PLAN_DEP_STEP, .again = "a second one for this stage",
	              .early = "an optimizer step before the stage's last W"},
	[OP_TIEREDUCE] = {.name = "TIEREDUCE", .role = OP_ROLE_COMM, .over = OP_OVER_TIE,
	                  .fields = OP_FIELD_PEER | OP_FIELD_GROUP | OP_FIELD_BYTES,
	                  .sized = 1, .alone = 1, .dir = DIR_GRAD,
	                  .needs = PLAN_DEP_ALL_W, .makes = PLAN_DEP_TIED,
	                  .again = "a second one for this stage",
	                  .early = "a tied table's reduction before the stage's last W"},
	[OP_TPREDUCE] = {.name = "TPREDUCE", .role = OP_ROLE_COMM, .over = OP_OVER_TP,
	                 .fields = OP_FIELD_MB | OP_FIELD_GROUP | OP_FIELD_BYTES | OP_FIELD_DIR |
	                           OP_FIELD_PART,
	                 .sized = 1, .alone = 1, .part_end = 1,
	                 .again = "a second tp all-reduce of this part",
	                 .early = "a tp all-reduce out of order in its stage's parts"},
	[OP_REDSCATTER] = {.name = "REDUCESCATTER", .role = OP_ROLE_COMM, .over = OP_OVER_DP,
	                   .fields = OP_FIELD_GROUP | OP_FIELD_BYTES,
	                   .sized = 1, .alone = 1, .dir = DIR_GRAD, .shard = 1,
	                   .needs = PLAN_DEP_ALL_W | PLAN_DEP_TIED, .makes = PLAN_DEP_REDUCED,
	                   .again = "a second one for this stage",
	                   .early = "a reduction before the stage's last W"},
	[OP_ALLGATHER] = {.name = "ALLGATHER", .role = OP_ROLE_COMM, .over = OP_OVER_DP,
	                  .fields = OP_FIELD_GROUP | OP_FIELD_BYTES,
	                  .sized = 1, .alone = 1, .dir = DIR_GRAD, .shard = 1,
	                  .needs = PLAN_DEP_STEP, .makes = PLAN_DEP_GATHERED,
	                  .again = "a second one for this stage",
	                  .early = "an all-gather before the stage's optimizer step"},
	[OP_SPREDUCE] = {.name = "SPREDUCE", .role = OP_ROLE_COMM, .over = OP_OVER_TP,
	                 .fields = OP_FIELD_GROUP | OP_FIELD_BYTES,
	                 .sized = 1, .alone = 1, .dir = DIR_GRAD,
	                 .needs = PLAN_DEP_ALL_W | PLAN_DEP_TIED | PLAN_DEP_REDUCED,
	                 .makes = PLAN_DEP_SEQ,
	                 .again = "a second one for this stage",
	                 .early = "a sequence-parallel gradients' all-reduce before the stage's last W"},
};

/* SPREDUCE (o): once, on a stage with sequence-parallel gradients, after its dp
 * reduction (the runtime sums over dp first, then over tp, as Megatron does) and before
 * its step. */
static const char *seq_apply(const OpInfo *o, PlanStageDeps *st, int dp)
{
	if (!st->sp)
		return "an SPREDUCE on a stage without sequence-parallel gradients";
	if (st->sp_done)
		return o->again;
	if (st->stepped)
		return "an SPREDUCE after the stage's optimizer step";
	if (dp > 1 && !st->reduced)
		return "an SPREDUCE before the stage's dp reduction";
	st->sp_done = 1;
	return NULL;
}

const char *plan_dep_apply(OpKind k, uint8_t *mb, PlanStageDeps *st, PlanStageDeps *embed,
                           int m, int dp)
{
	const OpInfo *o = &plan_ops[k];
	int wgrad = (o->makes & PLAN_DEP_WGRAD) != 0;
	if (o->makes & PLAN_DEP_MB) {
		if ((o->needs & PLAN_DEP_MB) & ~*mb)
			return o->early;
		if (*mb & o->makes)
			return o->again;
		if (wgrad && st->reduced)
			return "a weight gradient after the stage's all-reduce";
		if (wgrad && st->tie_done)
			return "a weight gradient after the stage's TIEREDUCE";
		if (wgrad && st->sp_done)
			return "a weight gradient after the stage's SPREDUCE";
		if (wgrad && embed && (embed->reduced || embed->stepped))
			return "a tied head's weight gradient after its embedding's all-reduce or step";
		*mb |= o->makes;
		st->nw += wgrad;
		if (embed)
			embed->nw_tied += wgrad;
		return NULL;
	}
	if ((o->needs & PLAN_DEP_ALL_W) && st->nw < m)
		return o->early;
	if ((o->needs & PLAN_DEP_ALL_W) && st->tied && st->nw_tied < m)
		return "before the last weight gradient of the head tied to its embedding";
	if ((o->needs & PLAN_DEP_TIED) && st->tie && !st->tie_done)
		return "before the stage's TIEREDUCE (its tied table's copies are not summed yet)";
	if (o->makes & PLAN_DEP_TIED) {
		if (!st->tie)
			return "a TIEREDUCE on a stage that holds no table tied across pipeline ranks";
		if (st->tie_done)
			return o->again;
		if (st->reduced || st->stepped)
			return "a TIEREDUCE after the stage's all-reduce or step";
		st->tie_done = 1;
	}
	if ((o->makes & (PLAN_DEP_REDUCED | PLAN_DEP_GATHERED)) && o->shard != st->dist)
		return o->shard ? "a distributed optimizer's collective in a plan whose optimizer "
		                  "is not distributed"
		                : "an all-reduce in a plan whose optimizer is distributed";
	if (o->makes & PLAN_DEP_REDUCED) {
		if (dp == 1)
			return o->shard ? "a reduce-scatter with dp = 1" : "an all-reduce with dp = 1";
		if (st->reduced)
			return o->again;
		st->reduced = 1;
	}
	if (o->makes & PLAN_DEP_SEQ)
		return seq_apply(o, st, dp);
	if (o->makes & PLAN_DEP_STEP) {
		if (st->stepped)
			return o->again;
		if ((o->needs & PLAN_DEP_REDUCED) && dp > 1 && !st->reduced)
			return "an optimizer step before the stage's all-reduce";
		if ((o->needs & PLAN_DEP_SEQ) && st->sp && !st->sp_done)
			return "an optimizer step before the stage's SPREDUCE";
		st->stepped = 1;
	}
	if (o->makes & PLAN_DEP_GATHERED) {
		if (dp == 1)
			return "an all-gather with dp = 1";
		if (st->gathered)
			return o->again;
		if (!st->stepped)
			return o->early;
		st->gathered = 1;
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

OpKind plan_op_of_over(int over)
{
	for (int k = 0; over != OP_OVER_NONE && k < OP_COUNT; k++)
		if (plan_ops[k].over == over)
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

int64_t plan_op_mem(OpKind k, const PlanStage *st)
{
	const int64_t bytes[3] = {st->save_fb, st->save_fw, st->save_bw};
	int64_t d = 0;
	for (int i = 0; i < 3; i++) {
		if (plan_ops[k].saves & (1 << i))
			d += bytes[i];
		if (plan_ops[k].frees & (1 << i))
			d -= bytes[i];
	}
	return d;
}
