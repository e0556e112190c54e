/* The plan verifier's rules: one row each, with the phrase its message carries.
 *
 * plan_verify reports the first rule a plan breaks in PlanError.rule and a message that
 * contains the row's phrase.  The rows are the list docs/plan-format.md "Invariants"
 * describes; tests/test_rules.c holds one bad plan per row that breaks exactly that rule
 * and fails when a row has none.  The structural rows are named where their check is
 * (verify.c, verify_ops.c); the dependency rows (DEP_ and P2P_ onwards) are the phrases
 * the dependency rules return (plan_dep_apply, the op table's again and early,
 * plan_part_apply, the walk's own), and plan_rule_of finds a fault's row by its phrase.
 * plan_dep_apply has seven phrases more that no verified walk reaches, since an earlier
 * rule always fires first (a weight gradient after the all-reduce, TIEREDUCE or SPREDUCE:
 * those need all m, and a microbatch's second is `a second`; a TIEREDUCE on a stage
 * without a copy, or after its all-reduce or step: check_tie and DEP_BEFORE_TIE come
 * first; an SPREDUCE after the step: the step waits for it, DEP_OPTIM_BEFORE_SP); they
 * guard its other callers and tests/test_layers.c holds them, and they have no row.
 * Adding a rule: its row here, its check, its bad plan in tests/test_rules.c. */
#ifndef PLAN_RULES_H
#define PLAN_RULES_H

#define PLAN_RULES(X) \
	/* the plan's tables */ \
	X(STAGE_PP, "is placed on pp index") \
	X(ROUTE_LINE, "does not join the ranks of stages") \
	X(ROUTE_DEVICES, "but the ranks use") \
	X(ROUTE_INVERSE, "is not the inverse of forward route") \
	X(PEER_STAGE, "peer entry") \
	X(PEER_PLACED, "which is not placed on this rank") \
	X(PEER_NAMES, "should name stage") \
	X(PEER_TWICE, "registered twice for stage") \
	X(PEER_MISSING, "no peer registered for edge") \
	/* comm groups, sends to self, matching */ \
	X(GROUP_ALONE, "must be alone in its group") \
	X(GROUP_ORDER, "group numbers must increase along a rank's list") \
	X(PAIR, "a pair must be an F followed by a B or BW of another stage") \
	X(SELF_RECV, "a receive from self without its SEND to self in the same group") \
	X(SELF_SEND_GROUP, "a send to self must be in the group of its RECV from self") \
	X(SELF_SEND_ALONE, "a send to self without its RECV from self in the same group") \
	X(NO_SEND, "has no matching SEND") \
	X(FIFO, "is matched (FIFO position") \
	X(NO_RECV, "has no matching RECV") \
	/* collectives and the tied table */ \
	X(COLL_PART, "is reached by only part of its") \
	X(COLL_ORDER, "collectives differ") \
	X(TIE_COPY, "must keep its own copy of the table") \
	X(TIE_NOCOPY, "`copy` on a head that is not tied") \
	X(TIE_NONE, "holds no table tied across pipeline ranks") \
	X(TIE_STAGE, "the tied table's copy on this rank is stage") \
	X(TIE_PEER, "the tied table's other copy is on rank") \
	X(TIE_BYTES, "the tied table's gradient is") \
	X(TIE_COUNT, "which holds the other copy of the tied table") \
	/* completeness */ \
	X(OP_PLACED, "is not placed on rank") \
	X(NEVER_RUNS, "never runs") \
	X(NEVER_REDUCED, "never all-reduces the gradients of stage") \
	X(NEVER_OPTIM, "never runs OPTIM for stage") \
	X(NEVER_GATHERED, "never all-gathers the parameters of stage") \
	/* dependencies: the phrases the rules return (plan_rule_of) */ \
	X(DEP_SECOND_F, "a second F of this stage and microbatch") \
	X(DEP_SECOND_BACKWARD, "a second backward of this stage and microbatch") \
	X(DEP_BACKWARD_EARLY, "backward before its F") \
	X(DEP_SECOND_W, "a second W") \
	X(DEP_W_EARLY, "W before its B") \
	X(DEP_SECOND_ONE, "a second one for this stage") \
	X(DEP_REDUCE_EARLY, "a reduction before the stage's last W") \
	X(DEP_OPTIM_EARLY, "an optimizer step before the stage's last W") \
	X(DEP_TIE_EARLY, "a tied table's reduction before the stage's last W") \
	X(DEP_SECOND_TP, "a second tp all-reduce of this part") \
	X(DEP_TP_ORDER, "a tp all-reduce out of order in its stage's parts") \
	X(DEP_BEFORE_HEAD_W, "before the last weight gradient of the head tied to its embedding") \
	X(DEP_BEFORE_TIE, "before the stage's TIEREDUCE") \
	X(DEP_REDUCE_DP1, "an all-reduce with dp = 1") \
	X(DEP_SCATTER_DP1, "a reduce-scatter with dp = 1") \
	X(DEP_GATHER_DP1, "an all-gather with dp = 1") \
	X(DEP_GATHER_EARLY, "an all-gather before the stage's optimizer step") \
	X(DEP_SHARD_PLAIN, "a distributed optimizer's collective in a plan whose optimizer") \
	X(DEP_PLAIN_SHARD, "an all-reduce in a plan whose optimizer is distributed") \
	X(DEP_GATHER_SIZE, "its size differs from the stage's parameters") \
	X(DEP_OPTIM_UNREDUCED, "an optimizer step before the stage's all-reduce") \
	X(DEP_PART_NO_REDUCE, "no tp all-reduce follows this part") \
	X(DEP_NO_PART, "the stage has no such part") \
	X(DEP_PART_ORDER, "a part out of order") \
	X(DEP_PARTS_MIXED, "B and BW parts mixed in one backward") \
	X(DEP_NO_INPUT, "runs before its input on edge") \
	X(DEP_NO_OUT_GRAD, "runs before its output gradient on edge") \
	X(DEP_SENT_EARLY, "sent before the compute that produces it") \
	X(DEP_RECEIVED_TWICE, "received twice") \
	X(DEP_TP_SIZE, "its size differs from the part's all-reduce") \
	X(DEP_STAGE_AWAY, "the stage is not on this rank") \
	X(DEP_TP_AT_TP1, "a TPREDUCE in a plan with tp=1") \
	X(DEP_REDUCE_SIZE, "its size differs from the stage's gradients") \
	X(DEP_SP_EARLY, "a sequence-parallel gradients' all-reduce before the stage's last W") \
	X(DEP_OPTIM_BEFORE_SP, "an optimizer step before the stage's SPREDUCE") \
	X(DEP_SP_NONE, "an SPREDUCE on a stage without sequence-parallel gradients") \
	X(DEP_SP_BEFORE_DP, "an SPREDUCE before the stage's dp reduction") \
	X(DEP_SP_SIZE, "its size differs from the stage's sequence-parallel gradients") \
	X(P2P_NOT_HERE, "the edge's stage at this end is not on this rank") \
	X(P2P_PEER, "the peer is not the rank holding the other end of the edge") \
	X(P2P_SAME_RANK, "a transfer to the same rank, on an edge its peer tables hand over locally") \
	X(P2P_ROUTE, "its route does not match the edge, direction and ranks")

#define PLAN_RULE_ENUM(name, phrase) PLAN_RULE_##name,
typedef enum {
	PLAN_RULES(PLAN_RULE_ENUM)
	PLAN_RULE_COUNT
} PlanRule;
#undef PLAN_RULE_ENUM

/* The first row whose phrase a dependency fault's text starts with. */
#define PLAN_RULE_FIRST_DEP PLAN_RULE_DEP_SECOND_F

typedef struct {
	const char *name;   // "GROUP_ORDER"
	const char *phrase; // what the message says
} PlanRuleInfo;

extern const PlanRuleInfo plan_rules[PLAN_RULE_COUNT];

/* The dependency row whose phrase why starts with (the longest such), or -1. */
int plan_rule_of(const char *why);

#endif
