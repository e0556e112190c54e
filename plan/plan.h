/* The plan: the one data structure pipecc writes and pipesim and piperun read.
 *
 * A plan is self-contained: the mesh, the stages with their layers, shapes, costs and
 * memory figures, the edges between stages (chain and skip), the link model, the routes
 * of every transfer, and per world rank its peer table and its ordered op list.
 * docs/plan-format.md describes the text form; docs/semantics.md what executing it means.
 *
 * Convention: times are integer nanoseconds, sizes integer bytes.  Stage, edge and route
 * numbers are dense indices into their arrays.  Nothing here knows about the compiler. */
#ifndef PLAN_H
#define PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "layer.h"
#include "op.h"

#define PLAN_FORMAT "pipecc-plan"
#define PLAN_VERSION 2        // what the writer writes: the header carries a checksum
#define PLAN_VERSION_PLAIN 1  // still read: no checksum (hand-written test plans)
#define PLAN_CHECKSUM "fnv1a" // 64-bit FNV-1a of every byte after the header line
#define PLAN_FNV_OFFSET 0xcbf29ce484222325ULL
#define PLAN_FNV_PRIME 0x100000001b3ULL

typedef enum {
	DIM_PP, // pipeline parallel
	DIM_DP, // data parallel
	DIM_TP, // tensor parallel
	DIM_COUNT
} PlanDim;

typedef enum {
	DIR_ACT,  // forward activation, along the edge
	DIR_GRAD, // backward gradient, against the edge
	DIR_COUNT
} Dir;

typedef enum {
	OPTIM_SGD,   // w -= lr * g
	OPTIM_ADAMW, // Adam with decoupled weight decay (two f32 moments per parameter)
	OPTIM_COUNT
} OptimKind;

/* The optimizer a program names; given 0 when it names none (SGD, piperun's --lr). */
typedef struct {
	uint8_t kind;  // OptimKind
	uint8_t given; // 1: the program has an `optimizer` statement (the plan says it)
	double lr, beta1, beta2, eps, weight_decay;
} PlanOptim;

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
	int64_t params;         // number of f32 parameters (weights and biases)
	/* Saved activation bytes per microbatch; see docs/semantics.md "Memory".
	 * F allocates save_fb + save_fw; B frees save_fb and allocates save_bw;
	 * W frees save_fw + save_bw; BW frees save_fb + save_fw. */
	int64_t save_fb, save_fw, save_bw;
	/* Recomputation (docs/semantics.md "Memory"): F keeps only the stage input (save_fb),
	 * B re-runs F first, holding save_re more bytes while it rebuilds what F dropped, and
	 * keeps what W needs (save_bw); the B cost includes F's. */
	uint8_t recompute;
	int64_t save_re;
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

/* 40 bytes.  Compute ops use stage; SEND/RECV use edge (in `stage`), dir, peer, bytes,
 * group, route; ALLREDUCE uses stage, bytes, group; OPTIM uses stage. */
typedef struct {
	uint8_t kind;   // OpKind, read through plan_op_kind()
	uint8_t dir;    // Dir, for SEND/RECV
	uint16_t pad;
	int32_t stage;  // stage, or edge for SEND/RECV
	int32_t mb;     // microbatch, -1 for ALLREDUCE/OPTIM
	int32_t peer;   // peer world rank for SEND/RECV, -1 otherwise
	int32_t group;  // comm group number, unique per rank; consecutive ops with one number
	                // form one group; -1 for compute and OPTIM
	int32_t route;  // route index for SEND/RECV, -1 otherwise
	int32_t src_line; // .pipe line the op stems from (0 unknown)
	int64_t bytes;  // bytes moved (SEND/RECV/ALLREDUCE); 0 otherwise
} PlanOp;

typedef struct {
	int coord[DIM_COUNT]; // pp, dp, tp coordinates
	int device;           // local GPU index
	int npeers;
	PlanPeer *peers;
	int64_t nops;
	PlanOp *ops;
	int64_t ops_cap;
	int64_t first_line;   // plan-file line of ops[0] when read from a file, else 0
	int64_t line;         // plan-file line of its `rank` line (peers follow), else 0
} PlanRank;

typedef struct {
	char *name;
	char *source;          // .pipe path it was compiled from
	char *schedule;        // schedule name
	int ndims;
	uint8_t dim_order[DIM_COUNT]; // dims outermost first, as written; ranks are row-major
	int dims[DIM_COUNT];          // sizes indexed by PlanDim
	int world;
	int microbatches;
	int rows, cols;        // one microbatch of input: rows x cols f32
	int seq, vocab;        // token input: rows = sequences x seq tokens over vocab; else 0
	PlanOptim optim;
	int64_t mem_cap;       // bytes each device holds (`device memory=`); 0: not stated
	int link_ideal;        // 1: transfers are free
	int64_t latency_ns;    // p2p latency
	double bandwidth;      // p2p bytes per second
	int nstages;
	PlanStage *stages;
	int nedges;
	PlanEdge *edges;
	int nroutes;
	PlanRoute *routes;
	int64_t routes_line;   // plan-file line of routes[0] when read from a file, else 0
	PlanRank *ranks;       // world entries
} Plan;

/* Error reports: the reader and verifier fill one of these instead of printing. */
typedef struct {
	int64_t line;  // plan-file line, 0 if not applicable
	int rank;      // -1 if not applicable
	int64_t op;    // op index on rank, -1 if not applicable
	char msg[512];
} PlanError;

extern const char *const plan_dim_names[DIM_COUNT];
extern const char *const plan_dir_names[DIR_COUNT];
extern const char *const plan_peer_names[PEER_COUNT]; // "remote", "local", "self"
extern const char *const plan_optim_names[OPTIM_COUNT];

/* The language's settings for an optimizer statement that gives none: lr 1e-3; adamw
 * beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01 (given 1). */
PlanOptim plan_optim_default(int kind);
/* Optimizer state bytes per parameter: 0 for SGD, 8 for AdamW (two f32 moments). */
int plan_optim_state_bytes(int kind);
/* The microbatch the layers of p work on. */
LayerShape plan_shape(const Plan *p);

/* Out of memory is a user condition, not a crash: these return NULL and every tool
 * says what the plan needed (plan_oom_text) and exits 1. */
Plan *plan_new(void); // NULL when out of memory
void plan_free(Plan *p);
PlanOp *plan_push_op(PlanRank *r, PlanOp op); // appends, growing the array; NULL: out of memory
/* "out of memory: the plan needs 12.5 M ops (about 610 MiB); allocating 512 MiB
 * failed" into buf: ops is the plan size in ops (0 when unknown), failed the bytes of
 * the allocation that failed.  Returns buf. */
char *plan_oom_text(char *buf, size_t n, int64_t ops, size_t failed);
int plan_rank_of(const Plan *p, const int coord[DIM_COUNT]);
void plan_coords_of(const Plan *p, int rank, int coord[DIM_COUNT]);
int64_t plan_total_ops(const Plan *p);
int64_t plan_transfer_ns(const Plan *p, int64_t bytes); // latency + bytes / bandwidth
/* The kind of op o, typed so that a switch over it is checked (-Wswitch). */
static inline OpKind plan_op_kind(const PlanOp *o)
{
	return (OpKind)o->kind;
}
int plan_is_comm(int kind);                          // plan_op_is_comm on a raw kind
/* Whether edge e travels through the communicator when both its stages share a rank:
 * the plan sends it to self (a route joins a rank to itself).  Remote edges always do. */
int plan_edge_self(const Plan *p, int e);
/* The end of what runs as one step from op i of rank r: past the comm group op i opens
 * (the consecutive comm ops with its group number), or i + 1 for any other op. */
int64_t plan_group_end(const PlanRank *r, int64_t i);
/* A head tied to an embedding in another stage: *embed and *head are the two stages
 * (the head's weight gradients add into the embedding's stage's gradient), else -1 and
 * -1 (no tied head, or both in one stage). */
void plan_tie(const Plan *p, int *embed, int *head);
/* Ranks of rank r's communicator along dim (r included), in coordinate order. */
int plan_dim_members(const Plan *p, int rank, int dim, int *out);
/* Formats op o of rank r as the text the plan file carries (no location). */
int plan_format_op(const Plan *p, const PlanOp *o, char *buf, size_t n);

int plan_write(const Plan *p, FILE *f);
/* Returns NULL and fills err on malformed, truncated or inconsistent input. */
Plan *plan_read(FILE *f, const char *name, PlanError *err);
Plan *plan_read_file(const char *path, PlanError *err);

/* The verifier: structural invariants every plan must meet (see docs/plan-format.md,
 * "Invariants").  Returns 0 when they hold, else -1 with the first violation in err. */
int plan_verify(const Plan *p, PlanError *err);

#endif
