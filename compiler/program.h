/* The checked program: what the front end (grammar/ + compiler/check.c) hands to the
 * middle end.  Every name is resolved to an index, every width inferred, every number
 * converted to nanoseconds or bytes per second, every location kept for later
 * diagnostics.  Allocated in the compilation's arena. */
#ifndef PROGRAM_H
#define PROGRAM_H

#include <stdint.h>

#include "../plan/plan.h"
#include "../plan/roof.h"
#include "arena.h"
#include "diag.h"

typedef struct {
	LayerKind kind;
	int in, out;  // widths (in inferred; relu/gelu/mse keep the width)
	int heads, kv_heads, hidden, span; // as PlanLayer's fields of those names
	uint32_t flags;
	double drop;  // as PlanLayer's: a dropout's probability, an attention's dropout=
	Loc loc;
	const char *block; // the innermost block it was written in, NULL for none
	Loc use;           // where that block is used to make this copy
} ProgLayer;

/* The plan's form of a layer. */
static inline PlanLayer prog_plan_layer(const ProgLayer *l)
{
	return (PlanLayer){l->kind, l->in, l->out, l->heads, l->kv_heads, l->hidden, l->span,
	                   l->flags, l->drop};
}

typedef struct {
	char *name;
	Loc loc;               // the stage's name in its declaration
	int nlayers;
	ProgLayer *layers;
	int in, out;           // stage input and output widths
	int has_cost;          // a `cost NAME ...` line names it
	int64_t cost[3];       // F, B, W ns (filled for every stage after checking:
	                       // stage cost, else `cost *`, else derived from FLOPs)
	int64_t optim;         // ns of its optimizer step on one rank (the roofline's; 0:
	                       // no memory bandwidth, free)
	Loc cost_loc;
	uint8_t recompute;     // PlanRecompute of its own `recompute NAME [MODE];`, or 0
	int recompute_res;     // its `residuals=N` (full: the first N residual bodies), or 0
	Loc recompute_loc;
} ProgStage;

/* Whether a stage holds an attention layer (what selective recomputation rebuilds). */
static inline int prog_stage_attends(const ProgStage *st)
{
	for (int l = 0; l < st->nlayers; l++)
		if (st->layers[l].kind == LAYER_ATTN)
			return 1;
	return 0;
}

/* Whether a stage's attention layers are all flash (they keep no probabilities, so
 * selective recomputation rebuilds nothing there); 0 without attention. */
static inline int prog_stage_all_flash(const ProgStage *st)
{
	int flash = 0;
	for (int l = 0; l < st->nlayers; l++)
		if (st->layers[l].kind == LAYER_ATTN) {
			if (!(st->layers[l].flags & LAYER_FLAG(LAYER_KEY_FLASH)))
				return 0;
			flash = 1;
		}
	return flash;
}

typedef struct {
	int src, dst;          // stage indices
	Loc loc;
} ProgSkip;

typedef enum {
	PLACE_DEFAULT, // not written: the schedule's default
	PLACE_LOOP,    // stage i -> pp index i mod pp
	PLACE_V,       // stages 0..pp-1 go down, pp..2pp-1 come back up
	PLACE_LIST,    // explicit list, place_list[stage] = pp index
	PLACE_COUNT
} PlaceKind;

typedef struct {
	OpKind kind;  // OP_F, OP_B, OP_W or OP_BW (PyTorch's F, I, W, B)
	int stage;    // stage index
	int mb;
	uint8_t pair; // written `a&b` with the next action: an F&B pair (sched_pair)
	Loc loc;
} ProgAction;

typedef struct {
	int rank;     // pp index
	Loc loc;
	int nacts;
	ProgAction *acts;
} ProgCustomRank;

typedef struct {
	const char *file;
	char *name;
	Loc name_loc;

	int ndims;
	uint8_t dim_order[DIM_COUNT];  // as written, outermost first; unwritten dims follow
	int dims[DIM_COUNT];           // indexed by PlanDim, 1 when not written
	Loc mesh_loc;

	int microbatches;
	Loc mb_loc;
	int batch;                     // `microbatches auto;`: the step's batch (the input's
	                               // first number as written), cut into microbatches
	                               // microbatches of rows/seq (or rows) each; else 0
	int rows, cols;                // a token input: rows = sequences x seq, cols = 1
	int seq, vocab;                // a token input's sequence length and vocabulary (padded
	                               // when pad= is given: what tables and logits span); else 0
	int vocab_real;                // the vocabulary as written when padding changed it
	                               // (token ids < vocab_real); else 0
	int vocab_pad;                 // pad=M: vocab is the least multiple of M x tp >= vocab_real
	Loc pad_loc;
	Loc input_loc;

	PlanOptim optim;               // optimizer NAME ...; (given 0 without one: SGD)
	uint8_t prec;                  // PlanPrec of `precision NAME;` (PREC_F32 without one)
	uint8_t device_preset;         // 1 + the `device` preset named, 0: none
	uint8_t peak_given;            // 1: `device peak=` set peak_flops
	double peak_flops;             // device FLOP/s for costs derived from FLOPs (the
	                               // preset's rate at prec, set by check_costs)
	double hbm_bw;                 // device memory bytes/s (`device` preset or bandwidth=);
	                               // 0: none, costs from FLOPs alone (plan/roof.h)
	double eff[ROOF_COUNT];        // each kernel class's efficiency (`device gemm=0.8`)
	int64_t mem_cap;               // device bytes (`device` preset or memory=); 0: none
	Loc mem_loc;                   // where the capacity is stated
	uint8_t recompute_all;         // PlanRecompute of `recompute * [MODE];`, or 0
	int recompute_all_res;         // its `residuals=N`, or 0
	Loc recompute_all_loc;

	int nstages;
	ProgStage *stages;
	int nskips;
	ProgSkip *skips;

	char *schedule;                // registry name, "custom" or "csv"
	Loc sched_loc;
	int ncustom;                   // custom { rank N: ... } bodies
	ProgCustomRank *custom;
	char *csv_path;                // schedule csv "file"

	uint8_t place;                 // PlaceKind
	int nplace;
	int *place_list;
	Loc place_loc;

	int link_ideal;
	int64_t latency_ns;
	double bandwidth;              // bytes per second
	Loc link_loc;

	int device_per_node;           // devices per_node=N; 0 when a list is given
	int64_t node_latency_ns;       // link node_latency=: transfers inside a node
	double node_bandwidth;         // link node_bandwidth=, bytes per second
	uint8_t coll_algo;             // link collective=: PlanColl (plan/link.h)
	uint8_t nodes_stated;          // `devices` or a node key of `link` written: the plan
	                               // places ranks on nodes (docs/semantics.md "Links")
	int tp_spans_nodes;            // mesh ... tp_spans_nodes: tp may exceed a node
	uint8_t sp;                    // mesh ... sp: sequence parallelism over tp
	Loc sp_loc;
	Loc tp_loc;                    // the mesh's tp=N; 0:0 when not written
	int ndevices;
	int *devices;                  // devices [d0, d1, ...]: world rank -> local GPU
	Loc devices_loc;

	int same_rank;                 // SameRank: how edges between stages of one rank go
	Loc same_rank_loc;             // the `peers` statement; 0:0 when not written

	int nroutes;                   // `route` statements (compiler/route.c)
	struct ProgRoute *routes;

	struct ProgPart *part;         // `model { ... }`: how pipecc cut it (compiler/part.h);
	                               // NULL when the stages are written
} Program;

/* How a tensor between two stages on one rank moves (`peers ...;`, --same-rank). */
typedef enum {
	SAME_RANK_LOCAL,     // handed over in memory through the peer table (the default)
	SAME_RANK_SELF_SEND, // a SEND/RECV to self through the communicator, in one group
	SAME_RANK_COUNT
} SameRank;
extern const char *const prog_same_rank_names[SAME_RANK_COUNT]; // "local", "self-send"

/* A `route` statement: edge `a -> b` in direction dir goes from world rank rank[0] on
 * local device dev[0] to rank[1] on dev[1].  edge is filled by route_check. */
typedef struct ProgRoute {
	int a, b;              // the stages named, as written (a before b)
	int edge;              // plan edge index, or -1 before route_check
	int dir;               // Dir: DIR_ACT forward (a to b), DIR_GRAD backward (b to a)
	int rank[2], dev[2];
	Loc loc;               // the statement
	Loc edge_loc;          // `a -> b`
	Loc end[2];            // each `R:dD`
} ProgRoute;

/* The `peers` statement (compiler/route.c): sets p->same_rank, or reports the word. */
struct AstStmt;
void front_peers(Diag *d, Program *p, const struct AstStmt *s);
/* A `route` statement, once its stages a and b are resolved: checks its words and

 * numbers and appends it to p->routes.  Edge, ranks and
 * devices are checked against the placement later, by route_check (compiler/place.h). */
void front_route(Arena *a, Diag *d, Program *p, const struct AstStmt *s, int sa, int sb);

/* Defaults, documented in docs/language.md. */
#define PROG_DEFAULT_FLOPS 100e12      // device rate for costs derived from FLOPs
#define PROG_DEFAULT_LATENCY_NS 5000   // link latency
#define PROG_DEFAULT_BANDWIDTH 50e9    // link bytes per second
#define PROG_DEFAULT_DEVICES_PER_NODE 8
#define PROG_DEFAULT_NODE_LATENCY_NS 1000 // link node_latency: inside a node (NVLink class)
#define PROG_DEFAULT_NODE_BANDWIDTH 300e9  // link node_bandwidth

/* Devices a node holds: `devices per_node=N`, or with a list the number of distinct
 * devices it names (compiler/check.c; the plan's `node per_node=`). */
int prog_node_size(const Program *p);
/* Stage s's recomputation (PlanRecompute): its own statement, else `recompute *`'s,
 * which in selective mode passes over stages without attention. */
int prog_recompute(const Program *p, int s);
/* Full recomputation's residual bodies for stage s (`residuals=N`): 0 for all of them
 * (`recompute *`'s N at or above the stage's count too). */
int prog_recompute_residuals(const Program *p, int s);

/* The shape of one microbatch the layer table's figures take (plan/layer.h). */
LayerShape prog_layer_shape(const Program *p);
/* The device the program's costs are timed on: its rate at the program's precision, its
 * memory bandwidth (0: none) and the kernel classes' efficiencies. */
PlanRoof prog_roof(const Program *p);

/* Parses and checks src; NULL after reporting errors to d. */
Program *front_parse(Arena *a, Diag *d, const char *file, const char *src, size_t len);
/* The same, a `model` with an automatic stage count cut for per_rank stages per
 * pipeline rank instead of its schedule's (0: the schedule's; compiler/part.h). */
Program *front_parse_cut(Arena *a, Diag *d, const char *file, const char *src, size_t len,
                         int per_rank);

/* The same, with `microbatches auto;` tried at m microbatches (0: the most the batch
 * allows; compiler/batch.h). */
Program *front_parse_split(Arena *a, Diag *d, const char *file, const char *src, size_t len,
                           int per_rank, int m);

/* The same, a `model` cut at cut[0..k] (k its stage count) instead of the cut pipecc
 * would choose, when that cut is one a stage may take (part_move made it); NULL: the
 * chosen one. */
Program *front_parse_given(Arena *a, Diag *d, const char *file, const char *src, size_t len,
                           int per_rank, int m, const int *cut);

/* Values the command line gives instead of the file's (pipecc -s, -m, --from-torch-csv). */
typedef struct {
	const char *schedule;          // a registry name, or NULL for the file's
	int microbatches;              // 0 for the file's
	const char *from_csv;          // a torch CSV order, as `schedule csv "FILE";`
} ProgOverrides;

/* Puts o into p with the checks the file's own statements get; each value is located
 * on the command line (d->cmdline is set to the options' text, in a's memory), so the
 * errors it causes, now or in later passes, say they come from there.  Nonzero after
 * reporting. */
int front_override(Arena *a, Diag *d, Program *p, const ProgOverrides *o);

#endif
