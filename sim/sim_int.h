/* The simulator's private header: the state every part of pipesim's engine shares.
 * sim.c is the core (posting, matching, the strict model; p2p.h its point-to-point
 * posting, shared with overlap.c, the overlap model), setup.c builds and frees the
 * state, figures.c computes the figures and the critical path after a run, stall.c
 * analyses a deadlock.  Small helpers the hot loops call live here as
 * static inline functions so that splitting the files costs nothing at run time.
 * Nothing outside sim/ includes this. */
#ifndef SIM_INT_H
#define SIM_INT_H

#include "sim.h"
#include "../plan/block.h"
#include "../plan/tp.h"

enum {
	AG_READY,   // runnable or running
	AG_MATCH,   // parked in a posted group, waiting for partners
	AG_WAIT,    // parked before an op, waiting for a value of the other stream
	AG_DONE,    // reached the end of its op list
};

/* Keys of the per-rank hash (overlap model), never 0. */
enum {
	KEY_RECV = 1, // a completed RECV (dir, edge, mb): what a compute op consumes
	KEY_DATA = 2, // a produced tensor (dir, stage, mb): what a SEND transmits
	KEY_AR = 3,   // a stage's reduced weight gradients (reduced_key): what OPTIM consumes;
	              // its step done (step_key), what its ALLGATHER consumes;
	              // with tp > 1 also a TPREDUCE's result (tp_key)
};

#define REF_NONE (-1)
#define REF_KEEP (-2) // complete an op without changing its critical-path predecessor
#define REF(r, i) (((int64_t)(r) << 40) | (int64_t)(i))
#define REF_RANK(x) ((int)((x) >> 40))
#define REF_OP(x) ((x) & (((int64_t)1 << 40) - 1))

/* An op's record (SimOpRec) holds its sim_pred_code (figures.c) with the top bit
 * flipped, so that the zeroed arrays read PRED_UNSET (a code no op has) for the ops
 * never recorded. */
#define PRED_UNSET 0
#define PRED_BITS 29
static inline int32_t pred_flip(int32_t c)
{
	return (int32_t)((uint32_t)c ^ 0x80000000u);
}

/* A time SimOpRec cannot hold (sim_wide_put), and when it was set: the run sorts them
 * into SimResult.wide, the last set of each op's field kept. */
typedef struct {
	SimWide w;
	int64_t seq;
} WideTime;

/* An op queued on a chan, waiting for its partner. */
typedef struct {
	int64_t post;     // time the op was posted
	int64_t op;       // its index on its rank
	const PlanOp *o;  // the op itself (its partner checks that the two agree)
} ChanEntry;

/* One ordered pair (src -> dst).  Only one side can have unmatched ops at a time. */
typedef struct {
	int src, dst;
	uint8_t side;       // what q holds: 0 sends of src, 1 receives of dst
	uint8_t node;       // src and dst share a node: the node link times it (plan/link.h)
	int64_t head, n, cap; // cap: 0 or a power of two (the ring is indexed by masking)
	ChanEntry *q;
	int64_t bytes, transfers;
} Chan;

/* A route's chan on one side, as the rank using it there found it (zeroed: none yet). */
typedef struct {
	int rank, peer;
	int chan; // + 1: 0 none
} RouteChan;

typedef struct {
	int key; // peer * 2 + (1 when this rank receives)
	int chan;
} ChanRef;

/* A value in flight between a rank's two streams (values.c): a completed receive, a
 * produced tensor or a reduction's result, under its key (hkey); key 0: a free slot. */
typedef struct {
	uint64_t key;
	int64_t time;
	int64_t who;  // op whose end is `time`
	int64_t refs; // consumers still to come
} Value;

typedef struct {
	Value *e;
	int64_t cap, n;
} Hash;

/* The values of one class (values.c) on one rank: e[mb & mask] holds microbatch mb's
 * with key mb + 1, or is free (key 0).  e is Sim.ring_none (mask 0) until the first. */
typedef struct {
	Value *e;
	int64_t mask;
} Ring;

typedef struct {
	int n;
	int world_n;        // members in the world: n, or the mesh dim's size in a line plan
	int *members;
	int arrived;
	int stage;
	int64_t bytes;
	int mb, part, dir;  // a tp group's: the TPREDUCE being posted (matched by these)
	int kind;           // OpKind of the collective being posted
	int64_t maxpost, last_who; // latest arrival and who it was
	int first_rank;
	int64_t first_op;
	int64_t count, total;
	struct { int64_t bytes, ns; int kind; } time; // the last time computed (kind 0: none)
} Coll;

/* A rank's state in the run: its agents' cursors and times, its figures, its records. */
typedef struct {
	/* The strict model's rank, or the overlap model's comm stream. */
	int64_t pc;        // next op; while parked in a group, its first op
	int64_t t;         // time of the stream
	int64_t bind;      // op whose end set t (critical path)
	int64_t gend;      // one past the posted group
	int pending;       // unmatched ops of the posted group
	int64_t gmax, gmax_who;
	int64_t ar_op;     // its posted reduction of weight gradients (reduces_wgrad), or -1
	int64_t tp_op;     // its posted collective over tp, or -1
	uint8_t state;
	/* The overlap model's compute stream. */
	uint8_t cstate;
	int64_t cpc, ct, cbind;
	uint8_t queued[2];
	int64_t mem, peak_mem, units, peak_units, busy, done;
	int nch, chcap;
	ChanRef *ch;
	SimOpRec *rec;     // SIM_RECORD_ALL: its ops' times and critical-path predecessors
	int32_t *code;     // SIM_RECORD_PATH: its ops' critical-path codes (pred_flip'ed)
	SimOpTime *win;    // ... and the times of the ops in its window (path_slot)
	int64_t tail;      // the window's second part starts at this op
	Hash h;            // its values in flight (values.c): the rare keys
	Ring *ring;        // ... and the common ones, by class (Sim.cls_ring)
	int nring;
	int pp;            // its pp index, -2 when out of range
	int64_t *wdone;    // per local stage: W/BW done (overlap)
	int64_t *wlast, *wlast_who;
} SimRank;

typedef struct {
	int64_t cost[OP_COUNT]; // per op kind (plan_op_cost): 0 for ops that do not compute
	int64_t dmem[OP_COUNT]; // saved bytes an op allocates (+) or frees (-)
	int nrin, nrout;   // remote in- and out-edges (overlap)
	int *rin, *rout;
	PlanParts parts;   // tp > 1: the stage's parts, which F, B, BW ops name
	int nlin, nlout;   // local (handed-over) in- and out-edges (overlap, tp > 1)
	int *lsrc, *ldst;  // their stages at the other end
	/* The overlap model's rings (values.c), valid on the ranks of the stage's pp index:
	 * its pp (-1 out of range), its local index there, the rings of the receives of rin
	 * (activations) and rout (gradients), and of its tensors by direction; fast: its
	 * ops may take compute_fast (overlap.c). */
	int pp, ls;
	int *rin_ring, *rout_ring;
	int data_ring[DIR_COUNT];
	uint8_t fast;
	int fast_pp;       // pp when fast, else -4 (no rank's): compute_fast's one test
	uint8_t sp;        // its OPTIM waits for its SPREDUCE (plan_sp_bytes > 0, overlap)
} StageInfo;

/* One simulation: the plan, the options, every rank's and stage's state, the chans and
 * the collective groups.  sim_run's, passed to every part. */
typedef struct {
	const Plan *p;
	SimOptions opt;
	struct ParTask *prefault; // with --threads: pages the per-op times in (plan/par.h)
	void *codeblock;     // SIM_RECORD_PATH: every rank's codes (plan_block_new's raw)
	SimOpTime *winblock; // ... and windows
	int64_t win;         // ... the window's ops at each end of a rank's list
	int path_missing;    // ... a timed stretch begins or ends outside the windows
	SimResult *res;
	int world;
	SimRank *rk;
	StageInfo *st;
	int *local_idx;      // stage -> index among the stages of its pp
	int *nlocal;         // pp -> stages placed there
	Chan *ch;
	int nch, chcap;
	uint64_t *pairkey;   // open addressing (src, dst) -> chan + 1
	int *pairval;
	int64_t paircap;
	RouteChan *routechan; // route * 2 + (1 receiving): the chan its rank found
	Coll *coll;          // the dp groups, the tp groups, the pairs of a table tied across ranks
	int ncoll;
	int ndpcoll;         // coll holds the dp groups first,
	int ntpcoll;         // then the tp groups, then the tied table's pairs
	/* By what a collective communicates over (its kind's OpInfo.over: dp, tp, tie):
	 * rank -> its group in coll (a tied pair's: -1 when it holds no tied table). */
	int *collof[OP_OVER_COUNT];
	int tp;              // p->dims[DIM_TP]
	int tie_e, tie_h;    // plan_tie_across's stages, or -1
	int *work;           // agent ids: rank * 2 + stream (0 rank/comm, 1 compute)
	int64_t nwork;
	WideTime *wide;      // record_ops: times SimOpRec cannot hold, in the order set
	int64_t nwide, widecap;
	int64_t xfer_bytes[2], xfer_ns[2]; // last transfer time computed, per link (node 1)
	int *cls_pp, *cls_ring; // overlap: per class (sim_class) its pp index and ring there
	int *send_cls;       // per edge e, 2 e + (dir != DIR_ACT): the class of the tensor its
	                     // SENDs transmit (send_key's), -1 when its stage is out of range
	Value ring_none;     // the free entry every ring starts with
	uint32_t nmb;        // p->microbatches, 0 when not positive: (uint32_t)mb < nmb
	                     // says whether a microbatch is in range
	/* Bit k: plan_op_is_comm(k), plan_op_is_compute(k), plan_op_is_coll(k) and
	 * plan_ops[k].sends, so that the hot loops ask the op table a kind's question
	 * without a load from it (a register holds the mask). */
	uint32_t comm_kinds, compute_kinds, coll_kinds, send_kinds;
	/* record_ops: the op that ends last (the first in (rank, op) order among equals),
	 * kept as ends are written (each op's end is written once) so that the critical
	 * path need not scan every op's time. */
	int64_t last_end, last_ref;
	int step_gather;     // overlap: the plan's steps end in ALLGATHERs, which wait for
	                     // their OPTIM's step_key (a distributed optimizer at dp > 1)
	int failed;          // a mismatch or out of memory stopped the run
	int oom;
} Sim;

#define MAXKEYS 64 // most keys one compute op consumes

/* Another thread asked the run to end (SimOptions.stop). */
static inline int sim_stopped(const Sim *s)
{
	return s->opt.stop && __atomic_load_n(s->opt.stop, __ATOMIC_RELAXED);
}

/* Rank r's stream went from op pc0 to its pc now: count the ops (SimOptions.progress). */
static inline void sim_count(const Sim *s, int r, int64_t pc0)
{
	if (s->opt.progress && s->rk[r].pc > pc0)
		__atomic_fetch_add(s->opt.progress, s->rk[r].pc - pc0, __ATOMIC_RELAXED);
}

static inline int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}


static inline uint64_t hkey(int type, int dir, int idx, int mb)
{
	return ((uint64_t)type << 62) | ((uint64_t)(dir & 1) << 61) |
	       ((uint64_t)(uint32_t)idx << 31) | (uint64_t)(uint32_t)mb;
}

/* The key of a stage's reduced weight gradients by what the reduction communicated
 * over: its ALLREDUCE's over dp (dir 0), its TIEREDUCE's over a tied pair (dir 1), its
 * SPREDUCE's over tp (microbatch 2: step_key holds 1). */
static inline uint64_t reduced_key(int over, int stage)
{
	return hkey(KEY_AR, over == OP_OVER_TIE, stage, over == OP_OVER_TP ? 2 : 0);
}

/* The key of a stage's optimizer step done (OPTIM), what its ALLGATHER (distributed
 * optimizer) waits for on the comm stream: reduced_key's type with microbatch 1. */
static inline uint64_t step_key(int stage)
{
	return hkey(KEY_AR, 0, stage, 1);
}

/* Whether kind k is a collective met by count (a rank's posted one is SimRank.ar_op):
 * over the dp group, a tied pair, or a stage's SPREDUCE over tp; a part's TPREDUCE
 * (part_end) is tp_op. */
static inline int coll_ar(OpKind k)
{
	return plan_op_is_coll(k) && !plan_ops[k].part_end;
}

/* Whether kind k reduces a stage's weight gradients across ranks (ALLREDUCE,
 * REDUCESCATTER, TIEREDUCE, SPREDUCE):
 * a collective that waits for every W of its stage.  Its result is reduced_key's, a
 * rank's posted one SimRank.ar_op.  A TPREDUCE reduces a part. */
static inline int reduces_wgrad(OpKind k)
{
	return plan_op_is_coll(k) && (plan_ops[k].needs & PLAN_DEP_ALL_W);
}

/* Whether op o is a collective over tp with x's identity (stage, microbatch, direction,
 * part): the members of a tp group meet by identity, not by count (sim.c). */
static inline int tp_same(const PlanOp *o, const PlanOp *x)
{
	return plan_ops[o->kind].part_end && o->stage == x->stage && o->mb == x->mb &&
	       o->dir == x->dir && o->part == x->part;
}

/* Fibonacci hashing: keys differ mostly in their low bits (the microbatch). */
static inline uint64_t hmix(uint64_t k)
{
	k *= 0x9e3779b97f4a7c15ULL;
	return k ^ (k >> 29);
}

/* The class of a receive (KEY_RECV: idx an edge) or a tensor (KEY_DATA: idx a stage). */
static inline int sim_class(const Sim *s, int type, int dir, int idx)
{
	return (type == KEY_RECV ? 0 : 2 * s->p->nedges) + 2 * idx + dir;
}

static inline Value *ring_get(Ring *g, int32_t mb)
{
	Value *e = &g->e[mb & g->mask];
	return e->key == (uint64_t)mb + 1 ? e : NULL;
}

int sim_ring_put_slow(Sim *s, Ring *g, int32_t mb, int64_t time, int64_t who, int64_t refs);

/* Adds refs consumers to mb's value, ready at time (made by who) unless it was later. */
static inline int ring_put(Sim *s, Ring *g, int32_t mb, int64_t time, int64_t who, int64_t refs)
{
	Value *e = &g->e[mb & g->mask];
	if (e->key == (uint64_t)mb + 1) {
		e->refs = sat_add(e->refs, refs);
		if (time > e->time) {
			e->time = time;
			e->who = who;
		}
		return 0;
	}
	if (!e->key && g->e != &s->ring_none) {
		*e = (Value){(uint64_t)mb + 1, time, who, refs};
		return 0;
	}
	return sim_ring_put_slow(s, g, mb, time, who, refs);
}

/* One consumer took e (a ring's entry). */
static inline void ring_use(Value *e)
{
	if (--e->refs <= 0)
		e->key = 0;
}

static inline int local_stage(Sim *s, int r, int stage)
{
	if (stage < 0 || stage >= s->p->nstages)
		return -1;
	if (s->p->stages[stage].pp != s->p->ranks[r].coord[DIM_PP])
		return -1;
	return s->local_idx[stage];
}

/* tp > 1 (overlap model): a part's data for its TPREDUCE (KEY_DATA) and the TPREDUCE's
 * result (KEY_AR), keyed by stage, part, direction and microbatch; bit 29 of the index
 * keeps them apart from the other keys (setup refuses stages of 512 parts or more). */
#define TP_IDX(stage, part) ((1 << 29) | (((stage) & 0xFFFFF) << 9) | ((part) & 0x1FF))
static inline uint64_t tp_key(int type, int stage, int dir, int part, int mb)
{
	return hkey(type, dir, TP_IDX(stage, part), mb);
}

/* The TPREDUCE after the last part of stage st's sequence in dir, or -1 when none. */
static inline int tp_last_reduce(const StageInfo *st, int dir)
{
	int n = st->parts.n[dir];
	return n > 0 && st->parts.part[dir][n - 1].reduce ? n - 1 : -1;
}

/* What a part of a tp > 1 stage consumes besides its receives: the TPREDUCE before it
 * in its sequence; a backward's first part, its forward's last TPREDUCE; a first part,
 * the last TPREDUCE of the local stages that hand it its input. */
static inline int tp_consumed(Sim *s, const PlanOp *o, uint64_t *keys, int c, int n)
{
	const StageInfo *st = &s->st[o->stage];
	int dir = plan_ops[o->kind].dir, last;
	if (o->part > 0 && c < n)
		return keys[c] = tp_key(KEY_AR, o->stage, dir, o->part - 1, o->mb), c + 1;
	if (dir == DIR_GRAD && (last = tp_last_reduce(st, DIR_ACT)) >= 0 && c < n)
		keys[c++] = tp_key(KEY_AR, o->stage, DIR_ACT, last, o->mb);
	int nl = dir == DIR_ACT ? st->nlin : st->nlout;
	for (int j = 0; j < nl && c < n; j++) {
		int q = dir == DIR_ACT ? st->lsrc[j] : st->ldst[j];
		if ((last = tp_last_reduce(&s->st[q], dir)) >= 0)
			keys[c++] = tp_key(KEY_AR, q, dir, last, o->mb);
	}
	return c;
}

/* What compute op o consumes: up to n keys into keys[]; returns the count. */
static inline int consumed_keys(Sim *s, const PlanOp *o, uint64_t *keys, int n)
{
	int c = 0;
	uint16_t needs = plan_ops[o->kind].needs;
	if (s->tp > 1 && plan_ops[o->kind].parted) {
		c = tp_consumed(s, o, keys, c, n);
		if (o->part > 0)
			return c; // its receives are the first part's
	}
	if (needs & PLAN_DEP_IN_ACT) {
		const StageInfo *st = &s->st[o->stage];
		for (int j = 0; j < st->nrin && c < n; j++)
			keys[c++] = hkey(KEY_RECV, DIR_ACT, st->rin[j], o->mb);
	}
	if (needs & PLAN_DEP_OUT_GRAD) {
		const StageInfo *st = &s->st[o->stage];
		for (int j = 0; j < st->nrout && c < n; j++)
			keys[c++] = hkey(KEY_RECV, DIR_GRAD, st->rout[j], o->mb);
	}
	if ((needs & PLAN_DEP_REDUCED) && s->p->dims[DIM_DP] > 1)
		keys[c++] = reduced_key(OP_OVER_DP, o->stage);
	if ((needs & PLAN_DEP_TIED) && c < n && (o->stage == s->tie_e || o->stage == s->tie_h))
		keys[c++] = reduced_key(OP_OVER_TIE, o->stage);
	if ((needs & PLAN_DEP_SEQ) && c < n && s->st[o->stage].sp)
		keys[c++] = reduced_key(OP_OVER_TP, o->stage);
	return c;
}

/* The key a SEND's data is produced under. */
static inline uint64_t send_key(Sim *s, const PlanOp *o)
{
	const PlanEdge *e = &s->p->edges[o->stage];
	return o->dir == DIR_ACT ? hkey(KEY_DATA, DIR_ACT, e->src, o->mb)
	                         : hkey(KEY_DATA, DIR_GRAD, e->dst, o->mb);
}


/* Shared by the parts (sim.c unless said otherwise). */
void *sim_xcalloc(Sim *s, size_t n, size_t size);    // calloc, or s->oom and NULL
int sim_grow(Sim *s, void **arr, int64_t *cap, int64_t need, size_t size);
int64_t sim_pred_ref(const Sim *s, int r, int64_t i); // figures.c: op i's critical-path pred
int32_t sim_pred_code(const Sim *s, int r, int64_t i, int64_t ref); // figures.c: its code
int64_t sim_post_group(Sim *s, int r, int64_t i, int64_t end, int64_t t, int take, Value *only);
void sim_run_overlap(Sim *s);                        // overlap.c: runs s->work's agents
/* psim.c: the strict model on s->opt.threads threads, from a fresh setup.  1: ran to
 * the end (every rank done); 0: not for this run (nothing changed); -1: stuck, or met
 * what it does not run (run it again on one thread, from a fresh setup); -2: stopped. */
int sim_run_threads(Sim *s);
void sim_mismatch(Sim *s, int ra, int64_t a, int rb, int64_t b, const char *why);
int sim_setup(Sim *s);                               // setup.c
void sim_cleanup(Sim *s);                            // setup.c
int sim_chan_of(Sim *s, int r, int peer, int recv);  // setup.c: r's chan with peer
void sim_figures(Sim *s);                            // figures.c
void sim_critical_path(Sim *s);                      // figures.c
void sim_fill_unreached(Sim *s);                     // figures.c
int sim_wide_finish(Sim *s);                         // figures.c: SimResult.wide
void sim_analyse_stall(Sim *s);                      // stall.c
/* values.c: the values in flight of rank r by key (overlap model) */
Value *sim_val_find(Sim *s, int r, uint64_t key);    // NULL when absent
int sim_val_put(Sim *s, int r, uint64_t key, int64_t time, int64_t who, int64_t refs);
void sim_hash_use(Hash *h, Value *e);                // one consumer took e, h's entry
int sim_values_setup(Sim *s);
void sim_values_free(Sim *s);
void sim_leftover_sends(Sim *s);                     // stall.c

/* ---- inline helpers of the hot loops ---- */

/* pred as op i of rank r's predecessor code: inline for the common one, an op of r
 * below 1 << PRED_BITS (REF(r, 0) + that op: one unsigned compare; REF_NONE and
 * REF_KEEP, negative, and other ranks' ops wrap or land above it). */
static inline int32_t pred_of(const Sim *s, int r, int64_t i, int64_t pred)
{
	if ((uint64_t)pred - (uint64_t)REF(r, 0) < ((uint64_t)1 << PRED_BITS))
		return (int32_t)REF_OP(pred);
	return sim_pred_code(s, r, i, pred);
}

/* The op that ends last, the first in (rank, op) order among equals. */
static inline void note_end(Sim *s, int r, int64_t i, int64_t end)
{
	if (end >= s->last_end && (end > s->last_end || REF(r, i) < s->last_ref)) {
		s->last_end = end;
		s->last_ref = REF(r, i);
	}
}

/* Op `ref` of k's posted group ends at `end`: the group ends when its last op does, and
 * binds to the first of its ops (in program order) that ends then, whatever order the
 * ends are met in (psim.c's threads meet them in another order than one thread). */
static inline void group_end(SimRank *k, int64_t end, int64_t ref)
{
	if (end > k->gmax || k->gmax_who == REF_NONE || (end == k->gmax && ref < k->gmax_who)) {
		k->gmax = max64(end, k->gmax);
		k->gmax_who = ref;
	}
}

/* record_ops: op i of rank r runs (or its group was posted) at start and ends at end
 * (-1: not yet), after pred. */
/* Time t (>= -1) of op i of rank r as SimOpRec holds it: t + 1 in 48 bits, or
 * SIM_T48_WIDE with t kept in s->wide (setup.c). */
uint64_t sim_wide_put(Sim *s, int r, int64_t i, int field, int64_t t);
static inline uint64_t t48(Sim *s, int r, int64_t i, int field, int64_t t)
{
	uint64_t v = (uint64_t)t + 1;
	return v < SIM_T48_WIDE ? v : sim_wide_put(s, r, i, field, t);
}

static inline void rec_set_end(SimOpRec *x, uint64_t e)
{
	x->lo = (x->lo & SIM_T48_MASK) | e << 48;
	x->hi = (x->hi & ~(uint64_t)0xffffffffu) | e >> 16;
}

/* Its end (as t48 gives it) and its critical-path code at once. */
static inline void rec_set_end_pred(SimOpRec *x, uint64_t e, int32_t code)
{
	x->lo = (x->lo & SIM_T48_MASK) | e << 48;
	x->hi = e >> 16 | (uint64_t)(uint32_t)pred_flip(code) << 32;
}

static inline int32_t rec_pred(const SimOpRec *x)
{
	return (int32_t)(uint32_t)(x->hi >> 32);
}

static inline void rec_set_pred(SimOpRec *x, int32_t code)
{
	x->hi = (x->hi & 0xffffffffu) | (uint64_t)(uint32_t)pred_flip(code) << 32;
}

/* SIM_RECORD_PATH: where op i of rank k keeps its times, or NULL outside its window:
 * its list's first s->win ops and its last (from k->tail on), win[0, 2 s->win). */
static inline SimOpTime *path_slot(const Sim *s, SimRank *k, int64_t i)
{
	if (i < s->win)
		return &k->win[i];
	return i >= k->tail ? &k->win[s->win + (i - k->tail)] : NULL;
}

/* SIM_RECORD_PATH's record_code: the code of every op, the times of the window's. */
__attribute__((always_inline)) static inline void record_path(Sim *s, int r, int64_t i,
                                                             int64_t start, int64_t end,
                                                             int32_t pred)
{
	SimRank *k = &s->rk[r];
	plan_populate(&k->code[i], &k->code[s->p->ranks[r].nops]);
	k->code[i] = pred_flip(pred);
	__builtin_prefetch(&k->code[i] + 16, 1); // as record_all's, 16 codes (64 bytes) ahead
	SimOpTime *w = path_slot(s, k, i);
	if (w)
		*w = (SimOpTime){start, end};
	if (end >= 0)
		note_end(s, r, i, end);
}

/* SIM_RECORD_ALL's record_code: the op's times and code in its SimOpRec. */
static inline void record_all(Sim *s, int r, int64_t i, int64_t start, int64_t end, int32_t pred)
{
	uint64_t a = (uint64_t)start + 1, b = (uint64_t)end + 1;
	if ((a | b) >= SIM_T48_WIDE) { // rare: one may not fit
		a = t48(s, r, i, 0, start);
		b = t48(s, r, i, 1, end);
	}
	plan_populate(&s->rk[r].rec[i], &s->rk[r].rec[s->p->ranks[r].nops]);
	s->rk[r].rec[i] = (SimOpRec){a | b << 48, b >> 16 | (uint64_t)(uint32_t)pred_flip(pred) << 32};
	/* Records paged in ahead are not in this core's cache, whether another thread did
	 * it (par_prefault) or this one a step at a time (plan_populate: a step of every
	 * rank's records is more than the cache holds): fetch them 16 ahead (a prefetch of
	 * a page not yet there does nothing).  Without it the report on bench_io's plan
	 * took 0.57 s against 0.51 s on one thread, 0.36 s against 0.28 s on two. */
	__builtin_prefetch((const void *)((uintptr_t)&s->rk[r].rec[i] + 16 * sizeof(SimOpRec)), 1);
	if (end >= 0) // -1 never ends last: last_end starts at -1 and last_ref below any op
		note_end(s, r, i, end);
}

/* record_ops: op i of rank r runs (or its group was posted) at start and ends at end
 * (-1: not yet), after pred (its critical-path code: pred_of).  always_inline, as
 * record and end_code: GCC made calls of them once they chose between two ways, and
 * the report on bench_io's plan took 0.235 s against 0.228 s on two threads. */
__attribute__((always_inline)) static inline void record_code(Sim *s, int r, int64_t i,
                                                             int64_t start, int64_t end,
                                                             int32_t pred)
{
	if (s->opt.record_ops == SIM_RECORD_PATH)
		record_path(s, r, i, start, end, pred);
	else
		record_all(s, r, i, start, end, pred);
}

__attribute__((always_inline)) static inline void record(Sim *s, int r, int64_t i,
                                                        int64_t start, int64_t end,
                                                        int64_t pred)
{
	if (s->opt.record_ops) // the first write: KEEP is none
		record_code(s, r, i, start, end, pred_of(s, r, i, pred));
}

/* record_ops: op i of rank r, recorded before, ends at end; `set`: after the op whose
 * critical-path code is code (else its predecessor stays). */
__attribute__((always_inline)) static inline void end_code(Sim *s, int r, int64_t i,
                                                          int64_t end, int set,
                                                          int32_t code)
{
	if (s->opt.record_ops == SIM_RECORD_PATH) {
		SimRank *k = &s->rk[r];
		if (set)
			k->code[i] = pred_flip(code);
		SimOpTime *w = path_slot(s, k, i);
		if (w)
			w->end = end;
	} else {
		SimOpRec *x = &s->rk[r].rec[i];
		if (set)
			rec_set_end_pred(x, t48(s, r, i, 1, end), code);
		else
			rec_set_end(x, t48(s, r, i, 1, end));
	}
	note_end(s, r, i, end);
}

/* The same after pred (REF_KEEP: its predecessor stays). */
static inline void set_end(Sim *s, int r, int64_t i, int64_t end, int64_t pred)
{
	if (s->opt.record_ops)
		end_code(s, r, i, end, pred != REF_KEEP, pred != REF_KEEP ? pred_of(s, r, i, pred) : 0);
}

/* The critical-path code op i of rank r keeps, pred_flip'ed (PRED_UNSET: none yet). */
static inline int32_t op_code(const Sim *s, int r, int64_t i)
{
	return s->opt.record_ops == SIM_RECORD_PATH ? s->rk[r].code[i] : rec_pred(&s->rk[r].rec[i]);
}

/* A parked rank resumes at ops[i]: fetch its next ops now.  With many ranks the
 * hardware prefetcher cannot follow every rank's list, and a resumed rank would
 * otherwise start with a cache miss on every line of ops.  always_inline: as a plain
 * inline function GCC 12 took it for one without effects and dropped its calls (found
 * 2026-12-02; see plan_prefetch). */
__attribute__((always_inline)) static inline void prefetch_ops(const PlanRank *pr, int64_t i)
{
	if (i + 6 < pr->nops) {
		const char *a = (const char *)&pr->ops[i];
		__builtin_prefetch(a);
		__builtin_prefetch(a + 64);
		__builtin_prefetch(a + 128);
		__builtin_prefetch(a + 192);
	}
}

static inline void push_agent(Sim *s, int r, int stream)
{
	SimRank *k = &s->rk[r];
	if (k->queued[stream])
		return;
	k->queued[stream] = 1;
	s->work[s->nwork++] = r * 2 + stream;
}

/* Runs compute op i (o) of rank r from `start`; returns its end. */
static inline int64_t do_compute(Sim *s, int r, int64_t i, const PlanOp *o, int64_t start,
                                 int64_t pred)
{
	SimRank *k = &s->rk[r];
	int64_t end = start;
	if (plan_op_is_compute(o->kind)) {
		const StageInfo *st = &s->st[o->stage];
		int64_t cost = s->tp > 1 ? plan_part_cost(&st->parts, o, s->p->stages[o->stage].cost)
		                          : st->cost[o->kind];
		end = sat_add(start, cost);
		k->busy = sat_add(k->busy, cost);
		k->mem = sat_add(k->mem, s->tp > 1 ? plan_part_mem(&st->parts, o) : st->dmem[o->kind]);
		if (k->mem > k->peak_mem)
			k->peak_mem = k->mem;
		uint16_t makes = plan_ops[o->kind].makes; // a microbatch is live from F to its W
		int last = s->tp == 1 || !plan_ops[o->kind].parted ||
		           o->part + 1 >= st->parts.n[DIR_GRAD];
		if (makes & PLAN_DEP_ACT) {
			if (o->part == 0 && ++k->units > k->peak_units)
				k->peak_units = k->units;
		} else if ((makes & PLAN_DEP_WGRAD) && last) {
			k->units--;
		}
	} else if (plan_ops[o->kind].role == OP_ROLE_STEP) {
		end = sat_add(start, s->st[o->stage].cost[o->kind]);
		k->busy = sat_add(k->busy, s->st[o->stage].cost[o->kind]);
	}
	k->done++;
	record(s, r, i, start, end, pred);
	return end;
}

/* One consumer took e, a value of rank r (a ring's entry or the hash's). */
static inline void val_use(Sim *s, int r, Value *e)
{
	Hash *h = &s->rk[r].h;
	if (h->cap && e >= h->e && e < h->e + h->cap)
		sim_hash_use(h, e);
	else
		ring_use(e);
}

/* The tensor a SEND transmits (its KEY_DATA value on rank r), or NULL: by ring when the
 * key is a ring's (values.c), which is the same test ring_of makes. */
static inline Value *send_data(Sim *s, int r, const PlanOp *o)
{
	int c = s->send_cls[2 * o->stage + (o->dir != DIR_ACT)];
	if (c >= 0 && (uint32_t)o->mb < s->nmb) {
		SimRank *k = &s->rk[r];
		if (s->cls_pp[c] == k->pp)
			return ring_get(&k->ring[s->cls_ring[c]], o->mb);
	}
	return sim_val_find(s, r, send_key(s, o));
}

#endif
