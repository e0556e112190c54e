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
#include "sat.h"

#define PLAN_FORMAT "pipecc-plan"
#define PLAN_VERSION 3        // what the writer writes: one pipeline line (a line plan)
#define PLAN_VERSION_EXPANDED 2 // every world rank listed; `pipecc --expand` writes it
#define PLAN_VERSION_PLAIN 1  // still read: no checksum (hand-written test plans)
#define PLAN_FNV_OFFSET 0xcbf29ce484222325ULL
#define PLAN_FNV_PRIME 0x100000001b3ULL

/* The header line's checksum kinds (plan/checksum.c, docs/plan-format.md "Checksum"):
 * the key before `=HEX` names the kind. */
typedef enum {
	PLAN_SUM_BLOCKS, // lanes4 of each 1 MiB block, chained: pipecc writes it; threads check it
	PLAN_SUM_LANES4, // four 64-bit multiply-rotate lanes over 8-byte words: plans of 2026-12-01..04
	PLAN_SUM_FNV1A,  // 64-bit FNV-1a of every byte: plans from before lanes4, still read
	PLAN_SUM_COUNT
} PlanSum;

#define PLAN_SUM_WRITTEN PLAN_SUM_BLOCKS // the kind plan_write puts in the header
#define PLAN_SUM_BLOCK (1 << 20)         // the blocks kind's block: bytes each lanes4 covers

/* A checksum being computed over a stream fed in pieces of any size. */
typedef struct {
	int kind;              // PlanSum
	uint64_t lane[4];      // the kind's state (FNV-1a uses lane[0])
	uint64_t total;        // bytes fed so far
	unsigned char tail[32]; // lanes4: the bytes of a stripe not yet complete
	unsigned ntail;
	uint64_t chain;        // blocks: the chain over the blocks done
	uint64_t inblock;      // blocks: bytes of the current block fed (lanes4's own total)
} PlanHash;

typedef struct {
	const char *name; // the header key, e.g. "lanes4" in `lanes4=HEX`
	void (*init)(PlanHash *h);
	void (*update)(PlanHash *h, const unsigned char *s, size_t n);
	uint64_t (*final)(const PlanHash *h);
} PlanSumKind;

extern const PlanSumKind plan_sums[PLAN_SUM_COUNT];
void plan_hash_init(PlanHash *h, int kind);
void plan_hash_update(PlanHash *h, const void *s, size_t n);
uint64_t plan_hash_final(const PlanHash *h); // the state is left as it was
uint64_t plan_hash(int kind, const void *s, size_t n); // one piece, start to end
/* The blocks kind from its parts, for a reader that hashes the blocks apart (on threads):
 * sums[j] = plan_hash(PLAN_SUM_LANES4, block j) for the n blocks of a text of total bytes. */
uint64_t plan_hash_blocks(const uint64_t *sums, size_t n, uint64_t total);
/* The kind whose key and `=` start s, or -1 with the keys listed in kinds[0, n). */
int plan_sum_key(const char *s, char *kinds, size_t n);

/* Folds n bytes into the FNV-1a checksum h: one serial chain, about four cycles a byte
 * (which is why pipecc moved to lanes4, then to blocks); unrolled so the loads stay off the chain. */
static inline uint64_t plan_fnv1a(uint64_t h, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		h = (h ^ u[i]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 1]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 2]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 3]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 4]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 5]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 6]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 7]) * PLAN_FNV_PRIME;
	}
	for (; i < n; i++)
		h = (h ^ u[i]) * PLAN_FNV_PRIME;
	return h;
}

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
	OPTIM_MOMENTUM, // SGD with momentum: b = momentum b + g, w -= lr * b (one f32 buffer)
	OPTIM_COUNT
} OptimKind;

/* The optimizer a program names; given 0 when it names none (SGD, piperun's --lr). */
typedef struct {
	uint8_t kind;  // OptimKind
	uint8_t given; // 1: the program has an `optimizer` statement (the plan says it)
	double lr, beta1, beta2, eps, weight_decay;
	double momentum; // OPTIM_MOMENTUM: the buffer's decay
} PlanOptim;

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

/* 24 bytes: every pass over a big plan is bound by reading these, and a plan holds
 * them all, so what an op's kind and the plan's tables imply is not stored.
 * Compute ops use stage (and part); SEND/RECV use edge (in `stage`), dir, peer, group,
 * route; ALLREDUCE uses stage, group; OPTIM uses stage; TIEREDUCE uses stage, peer (the
 * world rank holding the other copy), group; TPREDUCE uses stage, mb, dir, part, group.
 * The bytes an op moves are plan_op_bytes: a SEND/RECV's are its edge's tensor; an
 * ALLREDUCE's, TIEREDUCE's or TPREDUCE's are one of the plan's sizes[], which `route`
 * names (-2 - index: a route index is never negative, so what shifts routes by
 * `route >= 0` leaves sizes alone).  The .pipe line an op stems from is not here:
 * plan_op_line gives it, and only the writers read it. */
typedef struct {
	uint8_t kind;   // OpKind, read through plan_op_kind()
	uint8_t dir;    // Dir, for SEND/RECV/TPREDUCE
	uint16_t part;  // F, B, BW, TPREDUCE: the stage's part (plan_stage_parts); 0 otherwise
	int32_t stage;  // stage, or edge for SEND/RECV
	int32_t mb;     // microbatch, -1 for ALLREDUCE/OPTIM
	int32_t peer;   // peer world rank for SEND/RECV/TIEREDUCE, -1 otherwise
	int32_t group;  // comm group number, unique per rank; consecutive ops with one number
	                // form one group; -1 for compute and OPTIM
	int32_t route;  // SEND/RECV: route index; ALLREDUCE, TIEREDUCE, TPREDUCE: -2 - the
	                // index of its size in the plan's sizes[]; -1 otherwise
} PlanOp;

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
	/* ops and lines live in one of the plan's blocks (plan_block_ops), not allocations
	 * of their own: freed with the plan, copied out when they grow. */
	uint8_t inblock;
	int base, route_shift;
} PlanRank;

typedef struct {
	char *name;
	char *source;          // .pipe path it was compiled from
	char *schedule;        // schedule name
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
	PlanOptim optim;
	int64_t mem_cap;       // bytes each device holds (`device memory=`); 0: not stated
	int link_ideal;        // 1: transfers are free
	int64_t latency_ns;    // p2p latency
	double bandwidth;      // p2p bytes per second
	/* The tp collectives' link model (docs/semantics.md, "Tensor parallelism"): ranks
	 * r / per_node share a node and talk over node_latency_ns and node_bandwidth; a
	 * group spanning nodes uses latency_ns and bandwidth.  Written when tp > 1. */
	int per_node;
	int64_t node_latency_ns;
	double node_bandwidth;
	int nstages;
	PlanStage *stages;
	int nedges;
	PlanEdge *edges;
	int nroutes;
	PlanRoute *routes;
	int64_t routes_line;   // plan-file line of routes[0] when read from a file, else 0
	/* The sizes the ALLREDUCE, TIEREDUCE and TPREDUCE ops move, each once (plan_op_set_bytes
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
extern const char *const plan_optim_names[OPTIM_COUNT];

/* The language's settings for an optimizer statement that gives none: lr 1e-3; adamw
 * beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01; momentum 0.9 (given 1). */
PlanOptim plan_optim_default(int kind);
/* Optimizer state bytes per parameter: 0 for SGD, 4 for momentum (one f32 buffer), 8 for
 * AdamW (two f32 moments). */
int plan_optim_state_bytes(int kind);
/* The microbatch the layers of p work on. */
LayerShape plan_shape(const Plan *p);

/* Out of memory is a user condition, not a crash: these return NULL and every tool
 * says what the plan needed (plan_oom_text) and exits 1. */
Plan *plan_new(void); // NULL when out of memory
void plan_free(Plan *p);
/* Appends op, stemming from .pipe line `line` (0 unknown), growing the arrays; NULL: out
 * of memory. */
PlanOp *plan_push_op(PlanRank *r, PlanOp op, int32_t line);
/* Resizes r's op arrays to cap entries (at least 1, and at least its nops), lines[] too
 * when it is set or `lines` asks for it (the ops already there then stem from no line).
 * 0, or the bytes of the allocation that failed (r unchanged but for what succeeded). */
size_t plan_reserve_ops(PlanRank *r, int64_t cap, int lines);
/* Gives the count ranks rk[i] of p (rk NULL: ranks[0 .. count)) arrays for n[i] ops
 * each, and lines[] too when `lines` asks, all in one block of p's (plan_block_new):
 * ops they held are dropped, ops_cap = n[i], nops = 0, inblock set.  For writers that
 * know every count first (the readers of a whole file, the lowering): a block of
 * millions of ops is paged in 2 MiB at a time.  plan_reserve_ops within ops_cap leaves
 * such arrays be; past it, it copies them out.  0, or the bytes of the allocation that
 * failed (nothing changed). */
size_t plan_block_ops(Plan *p, PlanRank *const *rk, const int64_t *n, int count, int lines);
/* plan_block_ops for a writer that learns the counts rank by rank (the text reader):
 * r (holding no ops) gets arrays for n ops, and lines when `lines` asks, carved from a
 * block of p's of PLAN_TAKE_BLOCK bytes or more, a new one when the last is full;
 * arrays under PLAN_TAKE_MIN bytes are r's own (plan_reserve_ops).  A block's unused
 * end costs address space, not memory: the kernel gives pages only as they are
 * touched.  0, or the bytes of the allocation that failed (r unchanged). */
size_t plan_block_take(Plan *p, PlanRank *r, int64_t n, int lines);
#define PLAN_TAKE_MIN ((size_t)256 << 10)
#define PLAN_TAKE_BLOCK ((size_t)64 << 20)
/* r's ops and lines freed (unless they are in a block or borrowed): r holds none. */
void plan_rank_drop_ops(PlanRank *r);
/* A block for many arrays of per-op data, written soon after (zeroed when `zero`): at
 * least PLAN_HUGE_MIN bytes of it start on a 2 MiB boundary, so that a kernel giving
 * transparent huge pages can back it with them whole, one page fault per 2 MiB instead
 * of per 4 KiB (the kernel's share of a tool holding millions of ops, most of its time
 * in faults).  The block is also offered for them (madvise MADV_HUGEPAGE, which a kernel
 * in its default `madvise` mode needs) when plan_huge_pages() says so.  *raw: what to
 * free() (NULL when out of memory, or when a block of PLAN_FIT_MIN bytes or more is
 * more than the machine has, plan_sysmem_limit: overcommit would grant it, and the OOM
 * killer end the tool as it is written). */
void *plan_block_new(size_t bytes, int zero, void **raw);
#define PLAN_HUGE_MIN ((size_t)2 << 20)
/* From this size on plan_block_new reads the machine's limit for a block. */
#define PLAN_FIT_MIN ((size_t)64 << 20)
/* What the machine gives a region offered for huge pages (plan/thp.c), from sysfs under
 * a root (the machine's: "/sys"). */
typedef struct {
	int64_t largest;  // bytes of the largest page THP gives such a region; 0: none
	int64_t reported; // bytes of the free blocks a balloon reports to the host; 0: none
	int offer;        // worth offering: largest > 0 and reported == 0
} PlanThp;
PlanThp plan_thp_read(const char *sys);
/* plan_thp_read("/sys"), read once per process. */
const PlanThp *plan_thp_machine(void);
/* Whether plan_block_new offers its blocks: PIPECC_HUGE_PAGES=1 yes, =0 no; unset (or
 * anything else) plan_thp_machine()->offer.  On a VM whose host backs the
 * memory its balloon reported free again at its first use, huge pages (2 MiB or 64 KiB
 * alike) cost more than small pages (docs/pipesim.md, "Huge pages, decided by the
 * machine"). */
int plan_huge_pages(void);
/* One line saying what plan_thp_read found and why that decides. */
void plan_thp_describe(const PlanThp *t, char *buf, size_t n);
/* A thread filling fresh memory front to back (a reader's op lists, the simulator's
 * per-op times) calls plan_populate(p, end) before it writes each element *p of an
 * array ending at end: where *p reaches into a new PLAN_POPULATE_STEP of the address
 * space, that step is paged in at once, by one system call (madvise
 * MADV_POPULATE_WRITE) instead of a page fault per 4 KiB, just before this thread
 * writes it, so its pages are still in this core's cache.  Changes no byte; nothing at
 * or past end is touched.  Worth it for one array written at a time (a reader decodes
 * rank after rank) or a few hundred side by side (the simulator's records): on this
 * project's VM it took a tenth off `pipesim -q` on a large plan.  Not for the
 * lowering's 256 lists side by side, where steps paged in ahead left the cache before
 * they were written (measured: no gain). */
#define PLAN_POPULATE_STEP ((uintptr_t)64 << 10)
void plan_populate_step(uintptr_t step, uintptr_t end);
#define plan_populate(p, end) plan_populate_at((uintptr_t)(p), sizeof *(p), (uintptr_t)(end))
static inline void plan_populate_at(uintptr_t a, size_t size, uintptr_t end)
{
	if (((a - 1) ^ (a + size - 1)) >= PLAN_POPULATE_STEP)
		plan_populate_step((a + size - 1) & ~(PLAN_POPULATE_STEP - 1), end);
}
/* The .pipe line of the statement an op of p stems from, as the lowering of a generated
 * schedule puts it: a SEND's or RECV's is the stage that made its tensor (an
 * activation's source, a gradient's destination); any other op's, its stage's. */
static inline int32_t plan_stage_line(const Plan *p, const PlanOp *o)
{
	int s = o->stage;
	if (o->kind == OP_SEND || o->kind == OP_RECV)
		s = o->dir == DIR_ACT ? p->edges[s].src : p->edges[s].dst;
	return p->stages[s].loc.line;
}
/* What r's lines[] keeps for op i (0 without one): for code that moves ops within a
 * rank, or splits them, where lines by stage follow the ops anyway. */
static inline int32_t plan_op_kept_line(const PlanRank *r, int64_t i)
{
	return r->lines ? r->lines[i] : 0;
}
/* The .pipe line op i of r (a rank of p) stems from (0 unknown). */
static inline int32_t plan_op_line(const Plan *p, const PlanRank *r, int64_t i)
{
	if (r->lines || !p->lines_by_stage)
		return plan_op_kept_line(r, i);
	return plan_stage_line(p, &r->ops[i]);
}
/* "out of memory: the plan needs 12.5 M ops (about 610 MiB); allocating 512 MiB
 * failed" into buf: ops is the plan size in ops (0 when unknown), failed the bytes of
 * the allocation that failed; where either is more than the machine has
 * (plan_sysmem_limit), ": more than the 22.9 GiB available (MemAvailable,
 * /proc/meminfo)" follows.  Returns buf. */
char *plan_oom_text(char *buf, size_t n, int64_t ops, size_t failed);
/* Whether e is the reader's or the verifier's "out of memory" (plan_oom_text's words)
 * rather than anything the plan says: a caller that weighs plans must not take it as a
 * fact about the plan. */
int plan_error_is_oom(const PlanError *e);
/* strerror(e), except that ENOMEM reads "out of memory", as plan_oom_text does: every
 * report of running out of memory says it the same way. */
const char *plan_strerror(int e);
int plan_rank_of(const Plan *p, const int coord[DIM_COUNT]);
void plan_coords_of(const Plan *p, int rank, int coord[DIM_COUNT]);
int64_t plan_total_ops(const Plan *p);
int64_t plan_transfer_ns(const Plan *p, int64_t bytes); // latency + bytes / bandwidth
/* The same with the bandwidth term rounded down: the transfer time a model in real
 * numbers is given for a link whose term is no whole number of ns (schedule auto runs
 * Zero Bubble's heuristic on both). */
int64_t plan_transfer_ns_floor(const Plan *p, int64_t bytes);

/* Times are int64 nanoseconds.  A step of PLAN_TIME_MAX (2^62 ns, 146 years) or more
 * cannot be counted: the clocks (the lowering's walk, schedule auto's model, the
 * simulator) saturate instead of wrapping, and pipecc and pipesim refuse such a step. */
#define PLAN_TIME_MAX (INT64_MAX / 2)
/* The kind of op o, typed so that a switch over it is checked (-Wswitch). */
static inline OpKind plan_op_kind(const PlanOp *o)
{
	return (OpKind)o->kind;
}
/* The kinds whose size is one of the plan's sizes[] (PlanOp.route names it). */
static inline int plan_op_sized(int kind)
{
	return kind == OP_ALLREDUCE || kind == OP_TIEREDUCE || kind == OP_TPREDUCE;
}
/* The bytes op o of plan p moves: a SEND's or RECV's edge's tensor, a sized kind's
 * entry of sizes[], 0 for the rest. */
static inline int64_t plan_op_bytes(const Plan *p, const PlanOp *o)
{
	if (o->kind == OP_SEND || o->kind == OP_RECV)
		return p->edges[o->stage].bytes;
	return o->route < -1 ? p->sizes[-2 - o->route] : 0;
}
/* Gives op o (its kind and, for SEND/RECV, its edge in range) the size `bytes`: a sized
 * kind's is added to p's sizes (once; safe from several threads at once) and named by
 * o->route; a SEND's or RECV's must be its edge's and any other kind's 0, as o then
 * implies.  0; 1 when bytes differs from what o implies; -1 out of memory. */
int plan_op_set_bytes(Plan *p, PlanOp *o, int64_t bytes);
/* Numbers p's sizes in increasing order, renaming them in its ops (a pass over them
 * only when they were met in another order), so that a plan is the same in memory
 * however it was made: by threads reading ranks in any order, or by the lowering.  The
 * readers and the lowering call it last.  0, or -1 out of memory (p unchanged). */
int plan_sizes_canon(Plan *p);
/* p's sizes into e, which has none: 0, or -1 out of memory (e's then still none). */
int plan_copy_sizes(Plan *e, const Plan *p);
/* A pass reading array a[0, n) at element i fetches element i + PLAN_AHEAD now (for
 * ops, 12 cache lines on).  The hardware prefetcher of the machines measured follows
 * few streams and follows them late: without it perf put 46 % of the simulator's group
 * posting and 44 % of the verifier's walk (which scans senders' lists beside the rank's
 * own) on one load of an op each, and even the memory model, which walks one rank's
 * list at a time, a third (docs/performance.md, "How the tools are fast").  A pass that reads one
 * list at a time (the memory model, the writers) fetches twice as far ahead,
 * plan_prefetch_one: with 24-byte ops, 32 ahead left the memory model waiting on a
 * third of its loads still (0.059 s against 0.051 s on bench_io's plan), while the
 * simulator, which reads 128 ranks' lists side by side, lost 2-4 % with 64.  Macros:
 * GCC 12 dropped the calls of the same as a static inline function, which it took for
 * one without effects. */
#define PLAN_AHEAD 32
#define PLAN_AHEAD_ONE 64
#define plan_prefetch(a, i, n) plan_prefetch_at(a, i, n, PLAN_AHEAD)
#define plan_prefetch_one(a, i, n) plan_prefetch_at(a, i, n, PLAN_AHEAD_ONE)
#define plan_prefetch_at(a, i, n, ahead)                \
	do {                                                \
		if ((i) + (ahead) < (n))                        \
			__builtin_prefetch(&(a)[(i) + (ahead)]); \
	} while (0)
int plan_is_comm(int kind);                          // plan_op_is_comm on a raw kind
/* Whether edge e travels through the communicator when both its stages share a rank:
 * the plan sends it to self (a route joins a rank to itself).  Remote edges always do. */
int plan_edge_self(const Plan *p, int e);
/* The end of what runs as one step from op i of rank r: past the comm group op i opens
 * (the consecutive comm ops with its group number), or i + 1 for any other op. */
int64_t plan_group_end(const PlanRank *r, int64_t i);
/* A head tied to an embedding in another stage of the same pipeline rank: *embed and
 * *head are the two stages (the head borrows the table, and its weight gradients add
 * into the embedding's stage's gradient), else -1 and -1 (no tied head, both in one
 * stage, or on two pipeline ranks: plan_tie_across). */
void plan_tie(const Plan *p, int *embed, int *head);
/* A head tied to an embedding on another pipeline rank: 1 with the two stages, else 0
 * with -1 and -1.  The head's stage keeps its own copy of the table (its layer has the
 * `copy` flag); the two copies' gradients are summed by a TIEREDUCE on each side. */
int plan_tie_across(const Plan *p, int *embed, int *head);
/* For rank `rank` of a plan with a tie across pipeline ranks: the world rank that holds
 * the other copy of the table (same dp and tp coordinates, the other stage's pipeline
 * index), and in *stage the rank's own stage holding it; else -1 and *stage -1. */
int plan_tie_peer(const Plan *p, int rank, int *stage);
/* Bytes of one rank's tied table gradient (vocab x width f32; at tp > 1 the rank's
 * vocab / tp rows, what its TIEREDUCE moves), 0 without a tied head. */
int64_t plan_tie_bytes(const Plan *p);
/* Ranks of rank r's communicator along dim (r included), in coordinate order. */
int plan_dim_members(const Plan *p, int rank, int dim, int *out);
/* Formats op o as the text the plan file carries (no location): peers as world ranks, also
 * those of a line plan, whose ops hold pipeline indices. */
int plan_format_op(const Plan *p, const PlanOp *o, char *buf, size_t n);

/* A plan writer: plan_write (text) or plan_write_binary (plan/binary.h). */
typedef int PlanWriteFn(const Plan *p, FILE *f);
int plan_write(const Plan *p, FILE *f); // its header's checksum is PLAN_SUM_WRITTEN
/* The same with the header's checksum of kind sum (PlanSum): the binary form's text part
 * keeps the kind its version was defined with (plan/binary.h). */
int plan_write_summed(const Plan *p, FILE *f, int sum);
/* Writes a line plan expanded (every world rank; text format 2), as `pipecc --expand`
 * does, through write (plan_write, or plan_write_binary); an expanded plan as write does.
 * -1 on a write error or out of memory. */
int plan_write_expanded(const Plan *p, FILE *f, PlanWriteFn *write);

/* ---- lines (plan/line.c, docs/plan-format.md "Lines") ----
 * World rank of the rank at coordinates c is row-major over the mesh dims in their
 * order; the ranks of one pipeline line (its dp and tp coordinates) are its rank at
 * pipeline index 0 plus q * plan_pp_stride() for index q.  These are the one place that
 * maps a line plan's ranks onto the world. */
int plan_mesh_world(const Plan *p);               // product of the dims
int plan_pp_stride(const Plan *p);                // world-rank distance along pp
int plan_mesh_rank(const Plan *p, const int coord[DIM_COUNT]); // world rank of coord
void plan_mesh_coords(const Plan *p, int world_rank, int coord[DIM_COUNT]);
/* World rank of entry r of ranks[] (r itself in an expanded plan). */
int plan_world_rank(const Plan *p, int r);
/* The device world rank w uses in a line plan (w % dev_per_node). */
int plan_line_device(const Plan *p, int w);
/* The expanded form of line plan p (p->line set): every world rank with its lists, peers and routes
 * translated onto its own line.  NULL when out of memory (*failed: the bytes). */
Plan *plan_expand(const Plan *p, size_t *failed);
/* The same, but only line 0 and world rank `only` get lists of their own: every other
 * rank borrows line 0's (PlanRank.borrowed).  With only >= 0 the result is a one-rank
 * view (Plan.view): nothing in it is sized by the world, so the work and memory are one
 * line's whatever dp and tp are; what a process running one rank needs (piperun under
 * MPI).  With only < 0 it is plan_expand (the threads launcher). */
Plan *plan_expand_for(const Plan *p, int only, size_t *failed);
/* World rank r of p: its entry, or in a one-rank view a rank derived into *tmp (NULL when
 * tmp is NULL and r has no entry).  Read ranks through this wherever p may be a view. */
const PlanRank *plan_rank(const Plan *p, int r, PlanRank *tmp);
/* Op i of rank r as that rank runs it (a borrowed rank's numbers translated). */
PlanOp plan_rank_op(const Plan *p, int r, int64_t i);
/* The number of the pipeline line whose pipeline index 0 is world rank base (lines are
 * numbered by increasing base; line l's routes follow the l * nroutes0 before it). */
int plan_line_of_base(const Plan *p, int base);
/* Whether every line's collectives take the time line 0's take (the tp groups sit in
 * one node or span nodes alike): then one line's run is every line's run (docs/pipesim.md,
 * "Line plans").  Work O(world / tp), no ops. */
int plan_line_uniform(const Plan *p);
/* Returns NULL and fills err on malformed, truncated or inconsistent input.  Reads
 * either form, the text or the binary (plan/binary.h), told apart by the first byte. */
Plan *plan_read(FILE *f, const char *name, PlanError *err);
Plan *plan_read_text(FILE *f, const char *name, PlanError *err); // the text form only
Plan *plan_read_file(const char *path, PlanError *err);
/* What the readers above keep beyond what running and simulating a plan need: a tool
 * that never writes the plan (pipesim, piperun) reads with none, 4 bytes an op less.
 * The file is checked alike either way. */
enum {
	PLAN_KEEP_LINES = 1, // each op's .pipe line (PlanRank.lines), which only writers put
	PLAN_KEEP_ALL = PLAN_KEEP_LINES
};
Plan *plan_read_as(FILE *f, const char *name, unsigned keep, PlanError *err);
Plan *plan_read_text_as(FILE *f, const char *name, unsigned keep, PlanError *err);
Plan *plan_read_file_as(const char *path, unsigned keep, PlanError *err);

/* ---- tensor parallelism: a stage's parts (plan/tp.c, docs/semantics.md) ----
 * With tp > 1 a stage's forward and backward are cut after every layer that ends in a tp
 * all-reduce (the layer table's tp_bytes): the forward after a row-parallel output
 * (attention, mlp, swiglu, the embedding) and the cross-entropy's reductions, the
 * backward after a column-parallel input (attention, mlp, swiglu, the head).  Each piece
 * is a part; F, B and BW ops name one, and a TPREDUCE follows every part that ends in a
 * cut.  Which layers a part covers is a function of the layers and tp alone, so the
 * plan stores no layer ranges.  With tp = 1 every stage has one part each way. */
typedef struct {
	int first, n;     // layers [first, first + n) of the stage
	int64_t reduce;   // bytes of the TPREDUCE after it; 0: none
	int64_t cost[3];  // its share of the stage's F, B, W ns (by its layers' FLOPs)
	int64_t save[3];  // its layers' save_fb, save_fw, save_bw
} PlanPart;

typedef struct {
	int n[DIR_COUNT];          // parts of the forward (F) and of the backward (B, BW)
	PlanPart *part[DIR_COUNT]; // the backward's in its order: the last layers first
} PlanParts;

/* Rank rk's list with every F, B and BW cut into its parts, each followed by its
 * TPREDUCE when it has one (the lowering's last step at tp > 1); -1 when out of memory,
 * with the bytes that failed in *failed (rk unchanged). */
int plan_tp_expand(Plan *p, PlanRank *rk, size_t *failed);
/* Fills *pp for stage s of p (tp = p->dims[DIM_TP]); -1 when out of memory. */
int plan_stage_parts(const Plan *p, int s, PlanParts *pp);
void plan_parts_free(PlanParts *pp);
/* Ops in one direction's sequence (parts and their TPREDUCEs): part 0, its TPREDUCE if
 * any, part 1, ...  */
int plan_part_steps(const PlanParts *pp, int dir);
/* Place of a part (red 0) or of the TPREDUCE after it (red 1) in that sequence; -1 when
 * there is no such op. */
int plan_part_step(const PlanParts *pp, int dir, int red, int part);
/* Per (stage, microbatch): how far each direction's sequence has run. */
typedef struct {
	uint16_t step[DIR_COUNT];
	uint8_t fused; // the backward's parts are BW
} PlanPartState;
/* The part rule: may op o (F, B or BW with its part, or a TPREDUCE) run now on its stage
 * and microbatch, whose PLAN_DEP_MB bits are mb?  NULL: yes, *ps is advanced, and *done
 * is the kind whose whole sequence o completes (OP_F, OP_B, OP_BW: the caller applies
 * plan_dep_apply for it then), else OP_COUNT; otherwise why not. */
const char *plan_part_apply(const PlanParts *pp, const PlanOp *o, uint8_t mb,
                            PlanPartState *ps, OpKind *done);
/* ns and saved-byte change of compute op o (F, B, W, BW of a part) on a stage with parts pp. */
int64_t plan_part_cost(const PlanParts *pp, const PlanOp *o, const int64_t stage_cost[3]);
int64_t plan_part_mem(const PlanParts *pp, const PlanOp *o);
/* Time of a ring all-reduce of bytes over the n ranks in members: 2(n-1)/n bytes over
 * the link plus 2(n-1) latencies, on the node link when all share a node. */
int64_t plan_allreduce_ns(const Plan *p, const int *members, int n, int64_t bytes);
/* The same for the tp group of rank (the TPREDUCE time pipesim uses). */
int64_t plan_tp_allreduce_ns(const Plan *p, int rank, int64_t bytes);

/* The verifier: structural invariants every plan must meet (see docs/plan-format.md,
 * "Invariants").  Returns 0 when they hold, else -1 with the first violation in err. */
int plan_verify(const Plan *p, PlanError *err);

#endif
