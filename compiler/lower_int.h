/* The lowering's private header: the walk state (Lw) and the helpers that lower.c
 * (the walk, ranks, routes, lines) and lower_stall.c (orders that cannot run: the local
 * order check, the stall report, the naive lowering behind --allow-deadlock) share. */
#ifndef LOWER_INT_H
#define LOWER_INT_H

#include "lower.h"

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

/* Out of memory ends the lowering from wherever it happens: the allocators below jump
 * back to lower_program, which frees the plan and the walk state it holds and reports
 * what the plan needed.  (A pass's own scratch arrays are not freed on that path; the
 * tool exits next.) */
typedef struct {
	jmp_buf jb;
	size_t failed; // bytes of the allocation that failed
	int64_t ops;   // the plan size in ops, as far as known
} LwOom;

/* Where the walk appends to a rank's op list (lower_walk.c's next_op). */
typedef struct {
	PlanOp *ops, *at, *end; // the list, its next slot, its end
	int32_t *lines;         // the list's source lines, indexed as ops
} OpCursor;

typedef struct {
	LwOom *oom;
	const Program *pr;
	const SchedCtx *sc;
	Plan *plan;
	Diag *diag;
	int pp, m, ns, ne;
	PlanRank **line0;    // per pipeline index: its rank on the first line, where ops go
	OpCursor *opc;       // during the walk: per pipeline index, where its ops go
	struct ParTask *prefault; // with --threads: pages the op lists in ahead of the walk
	int *group;          // per pipeline index: next group number
	int *remote_k;       // edge -> index among edges sent (remote, or to self), or -1
	int nremote;
	struct Pending *pend; // per pipeline index: produced tensors not yet moved
	uint64_t *pendset;   // pipeline indexes whose pend is not empty, a bit each
	uint64_t *redset;    // pipeline indexes with reductions due (nreduce > 0)
	int overlap;         // tune for the overlap model: move tensors as soon as produced
	int self_send;       // same-rank edges go through the communicator, to self
	int stride;          // world-rank distance between pipeline neighbours
	int *in_off, *in_e;  // CSR of in-edges per stage
	int *out_off, *out_e;
	struct Out *made;    // per stage: the tensors its F makes for other ranks (its remote
	int *made_off;       // out-edges), then its backward's (remote in-edges): stage s's
	                     // are made[made_off[2s] .. made_off[2s + 2]), mb and line 0
	int64_t *acost;      // per (stage, op kind): what an action costs
	int *stage_line;     // per stage: the .pipe line of its statement
	/* Per-microbatch state is indexed stage (or edge) first (lw_done, lw_tensor): a
	 * rank walks its stages' rows in microbatch order, one cache line serving many
	 * steps. */
	unsigned char *done; // per (stage, mb): PLAN_DEP_MB bits of the actions that ran
	unsigned char *moved; // per (edge, mb, dir): 1 once the tensor has been transferred
	/* The link clock (lower.c): groups numbered from 1 in walk order, and per pipeline
	 * index its last group (0: none) and when that group starts.  Only a timed clock
	 * (tuned for overlap, tp 1, a link that takes time) keeps when each group completes
	 * and which group received each tensor; otherwise every transfer takes no time and
	 * a tensor is usable once moved. */
	int timed;
	int64_t *gend;       // timed: per group: its completion (gend[0] = 0)
	int ngroups;
	int *tgroup;         // timed: per (edge, mb, dir): the group that received it
	int *glast;          // per pipeline index: its last group, or 0
	int64_t *gstart;     // per pipeline index: when its last group starts
	int *left;           // per stage: backward actions still to run
	int tie_embed, tie_head; // plan_tie: a head tied to another stage's embedding
	int *tie_stage;      // per pipeline index: its stage holding a copy of a table tied
	int *tie_peer;       // across pipeline ranks (plan_tie_across), and the pipeline index
	                     // holding the other copy; -1 and -1 elsewhere
	int *reduce;         // per pipeline index: stages whose reduction is due (ns each)
	int *nreduce;
	int line;            // make a line plan: only the first line's ranks and routes
} Lw;

/* Tensors a rank has produced for remote consumers and not yet sent, oldest first. */
typedef struct Out {
	int edge, mb, dir, to, line;
} Out;

typedef struct Pending {
	Out *v;
	int n, cap;
} Pending;

_Noreturn void lw_oom(const Lw *w, size_t bytes);
void *lw_calloc(const Lw *w, size_t n, size_t size);
void *lw_malloc(const Lw *w, size_t bytes);
void *lw_realloc(const Lw *w, void *old, size_t bytes);
int *lw_calloc_int(const Lw *w, size_t n); // n + 1 zeroed ints
void lw_pend_push(const Lw *w, Pending *q, Out o);

/* Index of the tensor of (edge, mb, dir) in moved and tgroup, and back. */
static inline size_t lw_tensor(const Lw *w, int e, int mb, int dir)
{
	return ((size_t)e * (size_t)w->m + (size_t)mb) * 2 + (size_t)dir;
}

static inline unsigned char *lw_done(const Lw *w, int stage, int mb)
{
	return &w->done[(size_t)stage * (size_t)w->m + (size_t)mb];
}

/* Appends an op to pipeline index pp's list on the first line (peer: a pipeline index). */
void lw_emit(Lw *w, int pp, PlanOp op, int line);
/* The tensors action a on pipeline index pp makes for other ranks, onto q. */
void lw_push_outputs(const Lw *w, int pp, const SchedAct *a, int line, Pending *q);
const char *lw_act_name(const SchedAct *a, char *buf, size_t n); // "3F1"
int lw_src_line_of(const Lw *w, int pp, const SchedAct *a);
/* A compute action: its op, then what it makes available once done; the reductions and
 * optimizer steps due on pp (force: even with sends pending). */
void lw_start_compute(Lw *w, int pp, const SchedAct *a, int line);
void lw_finish_compute(Lw *w, int pp, const SchedAct *a, int line);
void lw_flush_reductions(Lw *w, int pp, int force, int finished);

/* lower_walk.c: the walk (place the communication); -1 after reporting a stall. */
int lw_place_comms(Lw *w, int allow_deadlock);

/* lower_stall.c */
int lw_check_local_order(Lw *w);
void lw_report_stall(Lw *w, const int64_t *cur);
void lw_rest_naively(Lw *w, int64_t *cur);

#endif
