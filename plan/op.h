/* The op record (PlanOp) and the op kinds: one row per kind, and the rules every tool
 * applies to them.
 *
 * A row says how the plan file and PyTorch spell the op, whether it computes or
 * communicates, and what it needs and makes in terms of the dependency rules.  The
 * rules themselves (F before B, W after B, ALLREDUCE after every W, OPTIM after it) are
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
	OP_REDSCATTER, // reduce-scatter of a stage's weight gradients over the dp group (the
	               // distributed optimizer's ALLREDUCE: each rank keeps its shard's sum)
	OP_ALLGATHER, // all-gather of a stage's parameters over the dp group after its OPTIM
	              // (the distributed optimizer: each rank updated only its shard)
	OP_SPREDUCE,  // all-reduce over the tp group of a stage's replicated layers' weight
	              // gradients under sequence parallelism (each rank's covers its rows)
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
	PLAN_DEP_GATHERED = 512, // the stage's updated parameters all-gathered (distributed
	                         // optimizer, dp > 1): what the next step's F reads
	PLAN_DEP_SEQ = 1024,     // the stage's replicated layers' gradients summed over the tp group
	                         // (needed only by a stage with sequence-parallel ones, .sp)
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

/* The PlanOp fields an op of a kind uses beside its stage (OpInfo.fields); the others
 * hold the empty op's values (-1; dir and part 0).  In the plan file, a compute op's
 * line is "F stage mb [part=] [pair]"; any other's is its name, its direction where it has
 * one, then s= (e= for OP_AT_EDGE), m=, the peer, part=, bytes=, g=, r= where it has
 * them (plan/read.c, plan/write.c, plan_format_op).  The binary form's field mask codes
 * the bits as they are (plan/binary_int.h): keep their values. */
enum {
	OP_FIELD_MB = 2,     // microbatch
	OP_FIELD_PEER = 4,   // peer rank: to= (a sending p2p op), from= (a receiving one),
	                     // with= (the rest)
	OP_FIELD_GROUP = 8,  // comm group
	OP_FIELD_ROUTE = 16, // route
	OP_FIELD_BYTES = 64, // bytes moved
	OP_FIELD_PART = 128, // a stage's part (a compute op's only when not 0)
	OP_FIELD_DIR = 256,  // direction (else the kind's, OpInfo.dir)
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
	uint16_t fields;   // OP_FIELD_*: the PlanOp fields it uses
	uint16_t needs;    // PLAN_DEP_* it waits for
	uint16_t makes;    // PLAN_DEP_* it produces
	uint8_t part_end;  // ends a tp part (TPREDUCE): the tp group meets by the part's
	                   // identity; the other collective over tp (SPREDUCE) is a stage's,
	                   // after its dp reduction, and meets by count as the dp ones do
	uint8_t shard;     // a step of the distributed optimizer (REDUCESCATTER, ALLGATHER):
	                   // in a plan whose optimizer is distributed, and only there
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
	uint8_t dist;     // set by the caller: the plan's optimizer is distributed (its
	                  // reduction is a REDUCESCATTER and its OPTIM ends in an ALLGATHER)
	uint8_t gathered; // its ALLGATHER ran
	uint8_t sp;       // set by the caller: the stage has replicated layers' gradients to sum
	                  // over the tp group under sequence parallelism (plan_sp_bytes > 0)
	uint8_t sp_done;  // its SPREDUCE ran
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

/* SEND, RECV and the collectives. */
static inline int plan_op_is_comm(OpKind k)
{
	return plan_ops[k].role == OP_ROLE_COMM;
}

/* ALLREDUCE, REDUCESCATTER, ALLGATHER, TIEREDUCE, TPREDUCE, SPREDUCE: collectives, each
 * over its communicator (over). */
static inline int plan_op_is_coll(OpKind k)
{
	return plan_ops[k].over > OP_OVER_PEER;
}

/* SEND, RECV: one side of a point-to-point transfer over an edge. */
static inline int plan_op_is_p2p(OpKind k)
{
	return plan_ops[k].over == OP_OVER_PEER;
}

/* SEND, RECV, TIEREDUCE: its peer field names one other rank (a p2p op's other side,
 * the tied table's other copy); the other ops' is -1. */
static inline int plan_op_has_peer(OpKind k)
{
	return (plan_ops[k].fields & OP_FIELD_PEER) != 0;
}

/* What an op of kind k costs on a stage whose F, B, W cost cost[0..2] (0 for ops that
 * do not compute).  Stage costs are below INT64_MAX / 4, so the sum cannot overflow. */
int64_t plan_op_cost(OpKind k, const int64_t cost[3]);
struct PlanStage;
/* The saved bytes an op of kind k allocates (positive) or frees (negative) on stage st. */
int64_t plan_op_mem(OpKind k, const struct PlanStage *st);
/* The kind PyTorch writes as letter c ('F', 'I', 'W', 'B'), or OP_COUNT. */
OpKind plan_op_of_torch(char c);
/* The first kind that communicates over `over` (OP_OVER_*: the collective over a
 * communicator, SEND over a peer), or OP_COUNT. */
OpKind plan_op_of_over(int over);

/* One op of a rank's list.  24 bytes: every pass over a big plan is bound by reading
 * these, and a plan holds them all, so what an op's kind and the plan's tables imply is
 * not stored: the bytes it moves (plan_op_bytes, plan.h: its edge's, or the
 * plan/sizes.h entry its route names, as -2 - index so that what shifts routes by
 * `route >= 0` leaves it alone) and the .pipe line it stems from (plan/op_line.h).
 * TIEREDUCE's peer holds the table's other copy. */
typedef struct {
	uint8_t kind;   // OpKind, read through plan_op_kind()
	uint8_t dir;    // Dir, for SEND/RECV/TPREDUCE; a compute op's pair bit (plan_op_paired)
	uint16_t part;  // F, B, BW, TPREDUCE: the stage's part (plan_stage_parts); 0 otherwise
	int32_t stage;  // stage, or edge for SEND/RECV
	int32_t mb;     // microbatch, -1 for the dp collectives, TIEREDUCE and OPTIM
	int32_t peer;   // peer world rank for SEND/RECV/TIEREDUCE, -1 otherwise
	int32_t group;  // comm group number, unique per rank; consecutive ops with one number
	                // form one group; -1 for compute and OPTIM
	int32_t route;  // SEND/RECV: route index; the collectives (plan_op_sized): -2 - the
	                // index of its size in the plan's sizes[]; -1 otherwise
} PlanOp;

/* The kind of op o, typed so that a switch over it is checked (-Wswitch). */
static inline OpKind plan_op_kind(const PlanOp *o)
{
	return (OpKind)o->kind;
}
/* The kinds whose size is one of the plan's sizes[] (PlanOp.route names it): the
 * collectives. */
static inline int plan_op_sized(int kind)
{
	return kind >= 0 && kind < OP_COUNT && plan_ops[kind].sized;
}
/* The fewest bytes an op of kind k may move: a tp all-reduce (TPREDUCE) follows only a
 * part whose output is a partial sum, and an SPREDUCE only a stage with such gradients,
 * so they move something; the rest may move 0. */
static inline int64_t plan_op_bytes_min(OpKind k)
{
	return plan_ops[k].over == OP_OVER_TP;
}
/* The direction of op o: its own dir field where its kind has one (OP_FIELD_DIR: SEND,
 * RECV, TPREDUCE), else its kind's (a compute op's: F forward, the rest backward). */
static inline int plan_op_dir(const PlanOp *o)
{
	return plan_ops[o->kind].fields & OP_FIELD_DIR ? o->dir : plan_ops[o->kind].dir;
}
/* The plan file's key of the peer of an op of kind k (OP_FIELD_PEER): a sending p2p
 * op's to=, a receiving one's from=, the others' with= (TIEREDUCE). */
static inline const char *plan_op_peer_key(OpKind k)
{
	return plan_ops[k].sends ? "to=" : plan_op_is_p2p(k) ? "from=" : "with=";
}
/* Whether compute op o runs overlapped with the next op of its rank, another compute op:
 * an F&B pair (DualPipe's overlapped forward and backward of two chunks).  A compute
 * kind has no direction field (its kind's rules), so its dir byte holds this bit; the
 * plan file writes it as ` pair` after the microbatch.  Cost model (docs/semantics.md
 * "Overlapped pairs"): the two halves run back to back on the one compute stream, F + B,
 * and no communication op lies between them; what overlaps is the pair's transfers
 * with its compute (the overlap model's comm stream moves the first half's output
 * while the second half runs). */
static inline int plan_op_paired(const PlanOp *o)
{
	return o->kind < OP_COUNT && plan_op_is_compute((OpKind)o->kind) && o->dir;
}
int plan_is_comm(int kind);                          // plan_op_is_comm on a raw kind

#endif
