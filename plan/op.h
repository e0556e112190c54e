/* The op kinds: one row per kind, and the rules every tool applies to them.
 *
 * A row says how the plan file and PyTorch spell the op, whether it computes or
 * communicates, and what it needs and makes in terms of the dependency rules.  The
 * rules themselves (F before B, W after B, ALLREDUCE after every W, OPTIM last) are
 * plan_dep_apply(), the one place they are written: the verifier, the simulator and
 * the runtime's interpreter call it or read the needs/makes bits.  Adding an op kind:
 * its enum member and row here and in op.c (docs/architecture.md, "Adding an op kind"). */
#ifndef PLAN_OP_H
#define PLAN_OP_H

#include <stdint.h>

typedef enum {
	OP_F,         // forward of (stage, mb)
	OP_B,         // input gradient of (stage, mb)
	OP_W,         // weight gradient of (stage, mb)
	OP_BW,        // fused input and weight gradient of (stage, mb)
	OP_SEND,      // p2p send of (edge, mb, dir) to peer
	OP_RECV,      // p2p receive of (edge, mb, dir) from peer
	OP_ALLREDUCE, // all-reduce of a stage's weight gradients over the dp group
	OP_OPTIM,     // optimizer step of a stage
	OP_TIEREDUCE, // sum of a tied table's gradient with its copy on another pipeline rank
	OP_TPREDUCE,  // all-reduce over the tp group inside a stage's F or backward (a part's end)
	OP_COUNT
} OpKind;

/* What an op needs before it runs and what it makes: the dependency rules' terms.
 * The first three are per (stage, microbatch) and are what plan_dep_apply tracks. */
enum {
	PLAN_DEP_ACT = 1,       // the stage's forward output of the microbatch
	PLAN_DEP_GRAD = 2,      // the stage's input gradient of the microbatch
	PLAN_DEP_WGRAD = 4,     // the stage's weight gradient of the microbatch
	PLAN_DEP_IN_ACT = 8,    // the activations along the stage's in-edges
	PLAN_DEP_OUT_GRAD = 16, // the gradients along the stage's out-edges
	PLAN_DEP_ALL_W = 32,    // every microbatch's weight gradient of the stage
	PLAN_DEP_REDUCED = 64,  // the stage's gradients all-reduced (needed only when dp > 1)
	PLAN_DEP_STEP = 128,    // the stage's optimizer step
	PLAN_DEP_TIED = 256,    // the tied table's gradient summed with its other copy's
	                        // (needed only by a stage holding a copy, PlanStageDeps.tie)
};
#define PLAN_DEP_MB (PLAN_DEP_ACT | PLAN_DEP_GRAD | PLAN_DEP_WGRAD)

typedef enum {
	DIR_ACT,  // forward activation, along the edge
	DIR_GRAD, // backward gradient, against the edge
	DIR_COUNT
} Dir;

/* The saved-activation classes of a stage (PlanStage's save_fb, save_fw, save_bw). */
enum {
	PLAN_SAVE_FB = 1, // kept from F to B
	PLAN_SAVE_FW = 2, // kept from F to W
	PLAN_SAVE_BW = 4, // kept from B to W
};

typedef enum {
	OP_ROLE_COMPUTE, // a stage's math on one microbatch (cost F, B, W or B + W)
	OP_ROLE_COMM,    // moves data; consecutive comm ops of one group post together
	OP_ROLE_STEP,    // a stage's step after all its microbatches (optimizer)
	OP_ROLE_COUNT
} OpRole;

/* What an op communicates over: nothing, one peer (SEND, RECV), or a collective's
 * communicator (the values after OP_OVER_PEER). */
enum {
	OP_OVER_NONE, // computes or steps
	OP_OVER_PEER, // point to point, with the op's peer over the edge in its stage field
	OP_OVER_DP,   // the rank's dp group
	OP_OVER_TP,   // the rank's tp group
	OP_OVER_TIE,  // the pair holding a tied table's two copies
	OP_OVER_COUNT
};

/* What an op's stage field names, and where its byte count comes from. */
enum {
	OP_AT_STAGE, // a stage; sized by nothing (compute, OPTIM) or the plan's sizes table
	OP_AT_EDGE,  // an edge (SEND, RECV): its bytes are the edge's
};

typedef struct {
	const char *name;  // the plan file's word
	char torch;        // PyTorch's action letter; 0: not a PyTorch action
	OpRole role;
	uint8_t over;      // OP_OVER_*: a p2p op's or a collective's communicator
	uint8_t at;        // OP_AT_*: what the stage field names
	uint8_t sends;     // the sending side of a p2p pair (SEND); RECV receives
	uint8_t sized;     // its bytes are in the plan's sizes table (the collectives)
	uint8_t alone;     // alone in its comm group (the collectives)
	uint8_t dir;       // Dir of the data it makes or moves (compute: F forward, the rest
	                   // backward; a p2p op's and a TPREDUCE's own dir field rules)
	uint8_t parted;    // with tp > 1, runs as the stage's parts of dir, each ended by a
	                   // TPREDUCE (F, B, BW; W is not parted)
	uint16_t needs;    // PLAN_DEP_* it waits for
	uint16_t makes;    // PLAN_DEP_* it produces
	uint8_t costs;     // bit k: it costs the stage's cost[k] (0 F, 1 B, 2 W)
	uint8_t saves;     // PLAN_SAVE_* it allocates (docs/semantics.md "Memory")
	uint8_t frees;     // PLAN_SAVE_* it frees
	const char *again; // why it cannot run twice in a step
	const char *early; // why it cannot run before what it needs (local part)
} OpInfo;

extern const OpInfo plan_ops[OP_COUNT];

/* Per stage, what the dependency rules track over one step beside the per-microbatch
 * PLAN_DEP_MB bits. */
typedef struct {
	int nw;           // weight gradients done (W or BW)
	uint8_t reduced;  // its ALLREDUCE ran
	uint8_t stepped;  // its OPTIM ran
	uint8_t tied;     // set by the caller: a tied head on another stage adds its m weight
	                  // gradients into this (the embedding's) stage's gradient
	int nw_tied;      // ... of which done
	uint8_t tie;      // set by the caller: the stage holds one copy of a table tied across
	                  // pipeline ranks (plan_tie_peer), summed by its TIEREDUCE
	uint8_t tie_done; // its TIEREDUCE ran
} PlanStageDeps;

/* The dependency rules, once.  May an op of kind k run now on a stage whose microbatch
 * has done the PLAN_DEP_MB bits in *mb (NULL for ALLREDUCE and OPTIM) and whose stage
 * state is *st, with m microbatches and dp replicas?  NULL: yes, and *mb and *st are
 * updated; else the phrase that says why not ("W before its B").  embed: for an op of
 * the stage of a head tied to another stage's embedding (plan_tie), that stage's state
 * (its gradient takes the head's), else NULL.  SEND and RECV have no local rule here
 * (their data is the caller's to find). */
const char *plan_dep_apply(OpKind k, uint8_t *mb, PlanStageDeps *st, PlanStageDeps *embed,
                           int m, int dp);

/* F, B, W, BW: a stage's math on one microbatch. */
static inline int plan_op_is_compute(OpKind k)
{
	return plan_ops[k].role == OP_ROLE_COMPUTE;
}

/* SEND, RECV, ALLREDUCE, TIEREDUCE, TPREDUCE. */
static inline int plan_op_is_comm(OpKind k)
{
	return plan_ops[k].role == OP_ROLE_COMM;
}

/* ALLREDUCE, TIEREDUCE, TPREDUCE: collectives, each over its communicator (over). */
static inline int plan_op_is_coll(OpKind k)
{
	return plan_ops[k].over > OP_OVER_PEER;
}

/* SEND, RECV: one side of a point-to-point transfer over an edge. */
static inline int plan_op_is_p2p(OpKind k)
{
	return plan_ops[k].over == OP_OVER_PEER;
}

/* What an op of kind k costs on a stage whose F, B, W cost cost[0..2] (0 for ops that
 * do not compute).  Stage costs are below INT64_MAX / 4, so the sum cannot overflow. */
int64_t plan_op_cost(OpKind k, const int64_t cost[3]);
struct PlanStage;
/* The saved bytes an op of kind k allocates (positive) or frees (negative) on stage st. */
int64_t plan_op_mem(OpKind k, const struct PlanStage *st);
/* The kind PyTorch writes as letter c ('F', 'I', 'W', 'B'), or OP_COUNT. */
OpKind plan_op_of_torch(char c);

#endif
