/* The plan: the one data structure pipecc writes and pipesim and piperun read.
 *
 * A plan is self-contained: the mesh, the stages with their layers, shapes, costs and
 * memory figures, the edges between stages (chain and skip), the link model, the routes
 * of every transfer, and per world rank its peer table and its ordered op list.
 * docs/plan-format.md describes the text form; docs/semantics.md what executing it means.
 *
 * Convention: times are integer nanoseconds, sizes integer bytes.  Stage, edge and route
 * numbers are dense indices into their arrays.  Nothing here knows about the compiler.
 * What is built on the format has its own header: the op record and the op table
 * (op.h), reading and writing (io.h), op arrays and blocks (block.h),
 * lines and views (line.h), tp parts (tp.h), sizes (sizes.h), op lines (op_line.h),
 * tied tables (tie.h), checksums (checksum.h), out of memory (oom.h). */
#ifndef PLAN_H
#define PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "layer.h"
#include "op.h"
#include "optim.h"
#include "prec.h"
#include "sat.h"

#define PLAN_FORMAT "pipecc-plan"
#define PLAN_VERSION 3        // what the writer writes: one pipeline line (a line plan)
#define PLAN_VERSION_EXPANDED 2 // every world rank listed; `pipecc --expand` writes it
#define PLAN_VERSION_PLAIN 1  // still read: no checksum (hand-written test plans)

typedef enum {
	DIM_PP, // pipeline parallel
	DIM_DP, // data parallel
	DIM_TP, // tensor parallel
	DIM_COUNT
} PlanDim;

/* A stage's recomputation (PlanStage.recompute; the language's `recompute NAME [MODE];`). */
typedef enum {
	PLAN_RECOMPUTE_NONE,
	PLAN_RECOMPUTE_FULL,      // F keeps the stage input, B re-runs F
	PLAN_RECOMPUTE_SELECTIVE, // F drops attention's probabilities, B rebuilds them
} PlanRecompute;

typedef struct {
	int line, col; // 1-based position in the .pipe source; 0 when unknown
} PlanLoc;

typedef struct PlanStage {
	char *name;
	int pp;                 // pipeline index the stage is placed on
	int in, out;            // feature widths of the stage input and output
	int nlayers;
	PlanLayer *layers;
	int64_t cost[3];        // F, B, W nanoseconds per microbatch (BW costs B + W)
	int64_t optim;          // nanoseconds of its OPTIM on each rank (0: free; plan/roof.h)
	int64_t params;         // number of f32 parameters (weights and biases)
	/* Saved activation bytes per microbatch; see docs/semantics.md "Memory".
	 * F allocates save_fb + save_fw; B frees save_fb and allocates save_bw;
	 * W frees save_fw + save_bw; BW frees save_fb + save_fw. */
	int64_t save_fb, save_fw, save_bw;
	/* Recomputation (docs/semantics.md "Memory"), PlanRecompute.  Full: F keeps only
	 * the stage input (save_fb), B re-runs F first, holding save_re more bytes while it
	 * rebuilds what F dropped, and keeps what W needs (save_bw); the B cost includes F's.
	 * Selective: F drops its attention layers' softmax probabilities (save_re bytes, out
	 * of save_fw), B rebuilds them first and frees them with its own; the B cost
	 * includes the score products'. */
	uint8_t recompute;
	int64_t save_re;
	int recompute_res;      // full: the residual bodies it re-runs, from the first (the
	                        // plan's `residuals=`, Megatron's block method); 0: all
	PlanLoc loc;
} PlanStage;

typedef struct {
	int src, dst;  // stage indices, src < dst
	int skip;      // 0: chain edge (dst = src + 1), 1: skip connection
	int64_t bytes; // bytes of one microbatch's tensor, equal in both directions
	PlanLoc loc;
} PlanEdge;

/* A route is the path of one edge's transfers on one pipeline line, in one direction.
 * Backward routes are always the inverse of a forward route (inverse_of). */
typedef struct {
	int edge;
	uint8_t dir;       // Dir
	int src_rank, dst_rank;
	int src_dev, dst_dev;
	int inverse_of;    // for DIR_GRAD: the forward route it inverts; -1 for DIR_ACT
	PlanLoc loc;       // the `route` statement that states it; 0:0 when derived
} PlanRoute;

/* How a peer entry reaches the stage at the other end of its edge. */
typedef enum {
	PEER_REMOTE, // another rank, through the communicator
	PEER_LOCAL,  // this rank, handed over in memory (no op)
	PEER_SELF,   // this rank, through the communicator: a SEND/RECV to self in one group
	PEER_COUNT
} PeerKind;

/* One entry of a rank's peer table: a local stage's neighbour along an edge. */
typedef struct {
	int stage;     // local stage
	int edge;
	uint8_t in;    // 1: edge enters stage (peer is edge src); 0: leaves it
	int peer_stage;
	int peer_rank;
	uint8_t local; // PeerKind: PEER_REMOTE, PEER_LOCAL (hand-off) or PEER_SELF
} PlanPeer;

typedef struct {
	int coord[DIM_COUNT]; // pp, dp, tp coordinates
	int device;           // local GPU index
	int npeers;
	PlanPeer *peers;
	int64_t nops;
	PlanOp *ops;
	int64_t ops_cap;
	/* lines[i]: the .pipe line op i stems from (`@N`, 0 unknown); NULL: none kept, and
	 * every op's is 0, or its stage's where the plan says so (Plan.lines_by_stage, a
	 * compiled plan's).  When set it holds ops_cap entries, and everything that moves
	 * ops moves these.  Read them through plan_op_line. */
	int32_t *lines;
	int64_t first_line;   // plan-file line of ops[0] when read from a file, else 0
	int64_t line;         // plan-file line of its `rank` line (peers follow), else 0
	/* plan_expand_for: peers and ops are those of line 0's rank at this pipeline index,
	 * shared, not owned; rank numbers in them are line 0's plus base, route numbers plus
	 * route_shift (plan_rank_op gives them so). */
	uint8_t borrowed;
	/* ops and lines live in one of the plan's blocks (plan/block.h), not allocations
	 * of their own: freed with the plan, copied out when they grow. */
	uint8_t inblock;
	int base, route_shift;
} PlanRank;

typedef struct {
	char *name;
	char *source;          // .pipe path it was compiled from
	char *schedule;        // schedule name
	uint8_t tuned_overlap; // its communication is ordered for the overlap model (pipecc
	                       // --tune=overlap, or schedule auto's winner): pipesim's default
	int ndims;
	/* A line plan (format 3, docs/plan-format.md "Lines"): ranks[] holds one pipeline
	 * line, the ranks with dp = tp = 0, indexed by pipeline index, and `world` is that
	 * count (dims[DIM_PP]); every rank number in ops, peers and routes is such an index.
	 * Every other line runs the same lists with its own ranks (plan/line.c).  0: ranks[]
	 * lists every world rank (format 1 and 2, or plan_expand's result). */
	uint8_t line;
	int dev_per_node;      // line plans: world rank r uses device r % dev_per_node
	uint8_t dim_order[DIM_COUNT]; // dims outermost first, as written; ranks are row-major
	int dims[DIM_COUNT];          // sizes indexed by PlanDim
	int world;             // entries of ranks[]: the world, or one line's (line plans)
	/* A one-rank view (plan_expand_for with a rank): ranks[] holds line 0's ranks by
	 * pipeline index, then that rank, and routes[] line 0's routes only; every other
	 * rank is derived when asked for (plan_rank).  1 + that rank; 0 in any other plan. */
	int view;
	int microbatches;
	int rows, cols;        // one microbatch of input: rows x cols f32
	int seq, vocab;        // token input: rows = sequences x seq tokens over vocab; else 0
	int vocab_real;        // padded vocabulary (`padded=`): token ids < vocab_real, the
	                       // loss leaves logits vocab_real.. out; 0: vocab, no padding
	uint8_t prec;          // PlanPrec (plan/prec.h): what tensors are stored in
	uint8_t sp;            // 1: sequence parallelism over the tp group (`mesh ... sp`)
	PlanOptim optim;
	int64_t mem_cap;       // bytes each device holds (`device memory=`); 0: not stated
	double peak_flops;     // the device's dense FLOP rate at the plan's precision (`device`
	                       // preset or peak=), FLOP/s; 0: not stated
	int link_ideal;        // 1: transfers are free
	int64_t latency_ns;    // p2p latency
	double bandwidth;      // p2p bytes per second
	/* The node link (plan/link.h, docs/semantics.md "Links"): world ranks w / per_node
	 * equal share a node and talk over node_latency_ns and node_bandwidth, any others
	 * over latency_ns and bandwidth; per_node 0: no node stated, every rank apart.
	 * coll_algo: how a collective spanning nodes runs (PlanColl). */
	int per_node;
	int64_t node_latency_ns;
	double node_bandwidth;
	uint8_t coll_algo;
	int nstages;
	PlanStage *stages;
	int nedges;
	PlanEdge *edges;
	int nroutes;
	PlanRoute *routes;
	int64_t routes_line;   // plan-file line of routes[0] when read from a file, else 0
	/* The sizes the collectives (plan_op_sized) move, each once (plan_op_set_bytes
	 * adds them; an op's route names one), and a hash of them: slots hold index + 1. */
	int64_t *sizes;
	int32_t nsizes, sizes_cap;
	int32_t *size_slot;    // 2 * sizes_cap entries, 0 empty
	PlanRank *ranks;       // world entries
	/* 1: a rank without lines[] takes each op's .pipe line from the stage tables
	 * (plan_stage_line), as pipecc's lowering of a schedule it generated puts them; 0:
	 * such a rank's ops stem from no line.  Only the lowering sets it (readers keep
	 * lines[] as the file gives them), and a copy of the plan keeps it. */
	uint8_t lines_by_stage;
	void **blocks;         // what plan_block_ops and plan_block_take allocated, freed
	int nblocks;           // with the plan
	char *take_at, *take_end; // the free rest of the block plan_block_take carves
} Plan;

/* Error reports: the reader and verifier fill one of these instead of printing. */
typedef struct {
	int64_t line;  // plan-file line, 0 if not applicable
	int rank;      // -1 if not applicable
	int64_t op;    // op index on rank, -1 if not applicable
	uint8_t at_byte; // a binary plan's reader (plan/binary.h): line is the file's byte offset
	int rule;      // plan_verify's: the rule broken (PlanRule, plan/rules.h), -1 if none
	char msg[512];
} PlanError;

extern const char *const plan_dim_names[DIM_COUNT];
extern const char *const plan_dir_names[DIR_COUNT];
extern const char *const plan_peer_names[PEER_COUNT]; // "remote", "local", "self"

/* The microbatch the layers of p work on. */
LayerShape plan_shape(const Plan *p);

/* Out of memory is a user condition, not a crash: these return NULL and every tool
 * says what the plan needed (plan/oom.h) and exits 1. */
Plan *plan_new(void); // NULL when out of memory
void plan_free(Plan *p);
int64_t plan_total_ops(const Plan *p);

/* Times are int64 nanoseconds.  A step of PLAN_TIME_MAX (2^62 ns, 146 years) or more
 * cannot be counted: the clocks (the lowering's walk, schedule auto's model, the
 * simulator) saturate instead of wrapping, and pipecc and pipesim refuse such a step. */
#define PLAN_TIME_MAX (INT64_MAX / 2)
/* The bytes op o of plan p moves: an op at an edge (SEND, RECV) its edge's tensor, a
 * sized kind's entry of sizes[], 0 for the rest. */
static inline int64_t plan_op_bytes(const Plan *p, const PlanOp *o)
{
	if (plan_ops[o->kind].at == OP_AT_EDGE)
		return p->edges[o->stage].bytes;
	return o->route < -1 ? p->sizes[-2 - o->route] : 0;
}
/* The bytes a dp collective of kind k (ALLREDUCE, REDUCESCATTER, ALLGATHER) of stage s
 * moves: the reductions the stage's gradients (the precision's gradient bytes, f32),
 * the all-gather its parameters (the precision's parameter bytes: bf16 under bf16). */
static inline int64_t plan_dp_bytes(const Plan *p, OpKind k, int s)
{
	const PlanPrecInfo *pi = plan_prec(p->prec);
	return p->stages[s].params * (plan_ops[k].needs & PLAN_DEP_STEP ? pi->param : pi->grad);
}
/* Whether edge e travels through the communicator when both its stages share a rank:
 * the plan sends it to self (a route joins a rank to itself).  Remote edges always do. */
int plan_edge_self(const Plan *p, int e);
/* The end of what runs as one step from op i of rank r: past the comm group op i opens
 * (the consecutive comm ops with its group number), or i + 1 for any other op. */
int64_t plan_group_end(const PlanRank *r, int64_t i);
/* Formats op o as the text the plan file carries (no location): peers as world ranks, also
 * those of a line plan, whose ops hold pipeline indices. */
int plan_format_op(const Plan *p, const PlanOp *o, char *buf, size_t n);
/* The stage with the most work a step (microbatches x (F + B + W) plus its optimizer
 * step), the one that bounds a balanced schedule's step: its index, and into buf the
 * line the summaries print, naming it and how far it is above the mean stage. */
int plan_bottleneck(const Plan *p, char *buf, size_t n);

/* The verifier: structural invariants every plan must meet (see docs/plan-format.md,
 * "Invariants").  Returns 0 when they hold, else -1 with the first violation in err. */
int plan_verify(const Plan *p, PlanError *err);

#endif
