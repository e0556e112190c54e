/* Schedules: each fills, per pipeline index, the order of compute actions (F, B, W,
 * BW) of the stages placed there.  Communication is not a schedule's business: the
 * lowering pass inserts it.  Adding a schedule is one file sched_NAME.c defining a
 * Schedule, plus one line in the table of schedule.c.  A row that searches (auto)
 * chooses the placement, recomputation and tuning too. */
#ifndef SCHEDULE_H
#define SCHEDULE_H

#include <stdio.h>

#include "program.h"

/* 12 bytes: a long order is millions of these (bench_io's, 4 M), written once and read
 * once by the lowering.  Where a custom schedule wrote one is beside it: sched_loc. */
typedef struct {
	int stage;
	int mb;
	uint8_t kind; // OP_F, OP_B, OP_W or OP_BW
	uint8_t pair; // runs overlapped with the next action: an F&B pair (sched_pair)
} SchedAct;

/* A communication action a CSV order names (PyTorch's compute_comms format): the plan
 * keeps the CSV's order of these instead of deriving its own (lower_given.c). */
typedef enum {
	SCHED_COMM_SEND,   // xSEND_Fm / xSEND_Bm: send the tensor of (edge, mb, dir)
	SCHED_COMM_RECV,   // xRECV_Fm / xRECV_Bm: receive it
	SCHED_COMM_REDUCE, // xREDUCE_GRAD: the stage's dp all-reduce and optimizer step
	SCHED_COMM_COUNT
} SchedCommKind;

typedef struct {
	int at;       // compute actions before it on its rank
	uint8_t kind; // SchedCommKind
	uint8_t dir;  // DIR_ACT or DIR_GRAD (SEND, RECV)
	uint8_t join; // posted with the cell before it (no compute or wait between them)
	int edge;     // SEND, RECV: the chain edge; REDUCE: the stage
	int mb;
	Loc loc;
} SchedComm;

typedef struct {
	const Program *prog;
	Arena *arena;
	Diag *diag;
	int pp;              // pipeline ranks
	int m;               // microbatches
	int nstages;
	int *stage_pp;       // placement: stage -> pipeline index (filled before fill())
	int *nacts, *cap;    // per pipeline index
	SchedAct **acts;     // heap, grown by sched_push (out of memory: arena_oom)
	Loc **locs;          // NULL, or per pipeline index where a custom schedule wrote each
	                     // action, indexed as acts (heap, grown with them): sched_loc
	SchedComm **comms;   // per pipeline index: the given communication order, or NULL
	int *ncomms;         // (a CSV order with SEND/RECV cells fills them; arena memory)
} SchedCtx;

/* What a search chooses (Schedule.search): what the passes after it then take as
 * given, as if the program had written it. */
typedef struct {
	int *stage_pp;       // placement: stage -> pipeline index (arena)
	uint8_t recompute;   // PlanRecompute of a `recompute *` on top of the program's, or 0
	int tune_overlap;    // the lowering's communication tuning (--tune=overlap)
	SchedAct **acts;     // the compute order per pipeline index (heap: sched_choice_free)
	int *nacts;
	char label[96];      // the plan's schedule line: what was chosen
	int64_t step;        // the winner's confirmed step, ns (pipesim's overlap model)
} SchedChoice;

typedef struct {
	const char *name;
	uint8_t default_place;  // PlaceKind used when the program writes none
	uint8_t chunks;         // stages per rank it runs when pipecc cuts a model
	                        // (`stages auto;`, compiler/part.c); 0: one
	uint8_t given;          // 1: the order is the program's own (custom, csv): no
	                        // search picks this row, there is nothing to make
	const char *placements; // words for errors: which placements work
	/* Optional: fills c->stage_pp when the program writes no placement (custom
	 * schedules infer it from where each stage appears); returns error count. */
	int (*infer_place)(SchedCtx *c);
	/* Checks stage count, microbatches and placement (c->stage_pp); reports errors
	 * at the program's locations and returns their number. */
	int (*check)(SchedCtx *c);
	/* Fills c->acts; only called after check() found no error. */
	void (*fill)(SchedCtx *c);
	/* Instead of check and fill, a row may search (schedule auto): before placement it
	 * chooses the placement, recomputation, tuning and order into *out, explain (when
	 * not NULL) getting what it weighed, and returns the errors it reported to d. */
	int (*search)(const Program *pr, Arena *a, Diag *d, FILE *explain, SchedChoice *out);
} Schedule;

extern const Schedule *const sched_registry[];
extern const int sched_count;

const Schedule *sched_find(const char *name);
void sched_push(SchedCtx *c, int pp, int kind, int stage, int mb);
/* The same, written at loc by a custom schedule (c->locs, allocated at the first). */
void sched_push_at(SchedCtx *c, int pp, int kind, int stage, int mb, Loc loc);
/* Marks pipeline index pp's last two actions an F&B pair, overlapped (SchedAct.pair):
 * NULL, or why they cannot be one (the caller says where). */
const char *sched_pair(SchedCtx *c, int pp);
/* Where action a (of pipeline index pp's order) was written; zero for a generated one. */
static inline Loc sched_loc(const SchedCtx *c, int pp, const SchedAct *a)
{
	return c->locs ? c->locs[pp][a - c->acts[pp]] : (Loc){0};
}
/* Forgets where the actions were written (c->locs): they are all generated ones now. */
void sched_drop_locs(SchedCtx *c);
/* Frees the compute orders (c->acts, c->locs). */
void sched_free(SchedCtx *c);
/* Pushes a search's order (ch->acts) onto c's. */
void sched_take(SchedCtx *c, const SchedChoice *ch);
/* Frees a search's order (ch->acts) of pp pipeline indices. */
void sched_choice_free(SchedChoice *ch, int pp);
/* Number of stages placed on pipeline index p. */
int sched_stages_on(const SchedCtx *c, int p);

#endif
