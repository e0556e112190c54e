/* Automatic stage partitioning (docs/schedules.md "Partitioning"): `model { ... }` with
 * `stages N;` or `stages auto;` is cut by pipecc into stages s0, s1, ...  The cut is a
 * dynamic program over the cut points between the model's top-level layers (a block
 * used `x N` counts N times) that minimises the slowest stage's F+B+W time, each stage
 * within its share of the device's memory.  The front end (compiler/check.c) runs it
 * between parsing and checking; this header is its interface there and the tests'. */
#ifndef PART_H
#define PART_H

#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "ast.h"
#include "program.h"

/* One partitioning problem: n units in a row, cut into k non-empty contiguous stages. */
typedef struct {
	int n, k;
	const int64_t *time;   // per unit: F+B+W ns
	const int64_t *stat;   // per unit: bytes held whatever runs (NULL: none)
	const int64_t *act;    // per unit: bytes saved per microbatch in flight (NULL: none)
	const uint8_t *cut_ok; // [n]: a stage may begin at unit u (NULL: anywhere); [0] unread
	const uint8_t *pin;    // [n]: a stage must begin at unit u (NULL: none); [0] unread
	const int64_t *edge;   // [n + 1]: bytes of the tensor entering unit u (NULL: none);
	                       // a stage [a, b) holds edge[a] received (a > 0) and
	const int *outflight;  // per stage: this many of edge[b] sent (b < n) at its peak
	const int *inflight;   // per stage: microbatches whose saved bytes it holds at peak
	int64_t cap;           // bytes each stage may hold; 0: memory is not checked
	int min_len, max_len;  // units per stage, at least and at most (0: no bound)
} PartProblem;

enum {
	PART_NONE = -1, // no split meets the constraints
	PART_OOM = -2,  // out of memory
};

/* The split of pb with the least bottleneck (the largest stage time): cut[0..k], cut[0]
 * = 0, cut[k] = n, stage j the units [cut[j], cut[j+1]).  Ties go to the split whose
 * cuts come first.  Returns the bottleneck, or PART_NONE / PART_OOM (cut untouched).
 * O(k n^2) time, O(k n) memory. */
int64_t part_split(const PartProblem *pb, int *cut);

/* The bytes stage j = [a, b) of pb holds at its peak, as the DP counts them. */
int64_t part_stage_mem(const PartProblem *pb, int j, int a, int b);

/* The time of the slowest stage of the split cut[0..k] of pb. */
int64_t part_bottleneck(const PartProblem *pb, const int *cut);

/* What was chosen, kept on the Program for --explain and --emit summary. */
typedef struct ProgPart {
	int n, k;              // units, stages
	int per_rank;          // stages per pipeline rank the count assumed
	int *cut;              // [k + 1]: the chosen split
	int64_t *time, *mem;   // per stage: F+B+W ns, and the model's bytes (0: no cap)
	int64_t bottleneck;
	int *ucut;             // [k + 1]: the best equal-layer-count split (NULL: none)
	int64_t *utime;        // its stage times
	int64_t ubottleneck;
	int64_t cap;           // the share of a device each stage had (0: memory not weighed)
	int auto_count;        // 1: `stages auto` (or none): k is pp x per_rank
	const int64_t *unit;   // [n]: each unit's F+B+W ns
	const uint8_t *cut_ok; // [n]: a stage may begin at unit u
	const uint8_t *pin;    // [n]: a stage must begin at unit u (`cut;`)
} ProgPart;

/* State between the two calls below (part.c). */
typedef struct PartCut PartCut;

/* Before checking: finds `model` and `stages`, reports what is wrong with them
 * (both `model` and `stage`, `stages` without a model, a misplaced `cut`, fewer
 * layers than stages), and when a model is given, cuts it evenly into stage
 * statements placed after it.  per_rank > 0 replaces the schedule's stages per rank
 * where the count is automatic (pipecc weighing two a rank for schedule auto).  *pc gets the state (NULL without a model).  Nonzero
 * after reporting. */
int part_prepare(Arena *a, Diag *d, AstProgram *ast, int per_rank, PartCut **pc);

/* With the program checked as evenly cut (probe), chooses the cut (given, when it is
 * not NULL and a cut the stages may take: given[0..k]), rewrites the stage
 * statements to it and returns what it chose; NULL after reporting an error to d (a
 * pinned cut that leaves no split within the memory cap). */
ProgPart *part_choose(Arena *a, Diag *d, PartCut *pc, const Program *probe,
                      const int *given);

enum { PART_MOVES = 32 }; // at most this many neighbours (part_moves)

/* The neighbours of cut[0..k] worth confirming: the cut after the first stage, the
 * one before the last and the two around the slowest stage, each moved one unit either
 * way, then every two of them so moved together, where the stages stay non-empty, each
 * begins where a stage may and every `cut;` stays.
 * Writes them to out (PART_MOVES x (k + 1) ints) and returns their count. */
int part_moves(const ProgPart *pt, const int *cut, int *out);

/* --emit summary: a warning at the slowest stage of a written split (not pipecc's cut)
 * whose F+B+W is more than 10% above the mean stage's. */
void part_warn_balance(const Program *p, Diag *d);

/* pp as the mesh writes it (1 when it does not, or writes it wrong: the checker says). */
int part_mesh_pp(const AstProgram *ast);

/* --explain: the chosen cuts, each stage's time and memory, the best uniform split. */
void part_explain(FILE *f, const Program *p);

#endif
