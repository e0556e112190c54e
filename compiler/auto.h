/* `schedule auto;`: the search for the fastest plan that fits the device's memory
 * (docs/schedules.md "auto").  Its files:
 *   auto_eval.c   the fast model: one candidate order's makespan and per-rank peak
 *                 (tensors in flight included, as plan/mem.c counts them) in about
 *                 O(ops), no plan built (what the search evaluates thousands of times),
 *                 and the model's facts read from a plan;
 *   auto_list.c   pipecc's own list scheduler (F, B, W placed greedily under a memory
 *                 budget) and the local searches over an order: adjacent swaps, moves
 *                 that make an overshooting order fit, simulated annealing;
 *   auto_zb.c     Zero Bubble's greedy heuristic, reimplemented: one more generator
 *                 (and what bench/auto_bench.c compares auto with);
 *   auto_search.c the search (sched_auto.c the registry row): registry schedules x
 *                 recomputation x list-scheduler variants x the heuristic, screened by
 *                 the fast model, the best confirmed by the real lowering, verifier,
 *                 memory model and pipesim's overlap model.
 * Times are integer ns, sizes bytes, as everywhere. */
#ifndef AUTO_H
#define AUTO_H

#include <stdio.h>

#include "schedule.h"

/* The registry row (sched_auto.c): its search hook runs auto_search. */
extern const Schedule sched_auto;

/* One (stage, mb) op kind index: AUTO_F, AUTO_B, AUTO_W; BW is B then W at once. */
enum { AUTO_F, AUTO_B, AUTO_W };

typedef struct {
	int src, dst;       // stages
	int64_t ns;         // transfer time of one tensor (0: same rank, handed over)
	int local;          // 1: both stages on one rank, handed over in memory (no SEND)
} AutoEdge;

/* What the fast model needs of a program with a placement and recompute choice. */
typedef struct {
	int pp, m, ns, ne;
	const int *stage_pp;      // stage -> pipeline index
	int64_t (*cost)[3];       // per stage F, B, W ns (B includes F's when recomputing)
	int64_t (*save)[4];       // per stage save_fb, save_fw, save_bw, save_re
	int64_t *stat;            // per pipeline index: parameters, gradients, optimizer state
	int64_t *outb, *inb;      // per stage: its output and its input tensor (bytes in flight;
	                          // outb NULL: none counted)
	AutoEdge *edges;
	int *ein, *ioff;          // per stage its in-edges (CSR), and out-edges:
	int *eout, *ooff;
	int *oom;                 // set to 1 (when not NULL) by a function below whose
	                          // allocation failed (auto_oom)
} AutoModel;

/* An allocation failed in one of the functions below: whatever that function returns
 * (no order, no improvement) is then no fact about the order, and the caller must fail
 * as out of memory (auto_search does) rather than go on without it. */
static inline void auto_oom(const AutoModel *md)
{
	if (md->oom)
		*md->oom = 1;
}

typedef struct {
	int64_t makespan;   // -1: the order cannot run (a rank waits on itself or a cycle)
	int64_t finish_sum; // sum of ranks' finish times (tie-breaker for the improvement)
	int64_t busy;       // compute ns over all ranks
	int64_t peak;       // largest per-rank static + saved activations + tensors in flight
	int64_t low;        // largest per-rank static + saved activations: a lower bound of
	                    // the peak under either communication tuning
	int peak_rank;
} AutoFig;

/* The fast model's facts of plan p, lowered from any order of a program whose placement
 * is stage_pp (auto_search.c lowers a topological one), its arrays from arena a: each
 * stage's costs, saved bytes and tensors, each edge's transfer time (plan_p2p_ns
 * between its ranks; none across an edge within a rank when local) and each pipeline index's static bytes,
 * world rank on the first line into wr[pipeline index].  *down gets the edges again with
 * each transfer's bandwidth term rounded down (plan_p2p_ns_floor), what a model in
 * real numbers is given for a link whose term is no whole number of ns (Zero Bubble's
 * heuristic: auto_search.c runs it on both), or NULL where that changes none.  md->oom
 * is kept, and set when the memory model fails for want of memory.  Returns the largest
 * stage input + output bytes. */
int64_t auto_model_of_plan(AutoModel *md, const Plan *p, const int *stage_pp, int local,
                           Arena *a, int *wr, AutoEdge **down);

/* Scratch for auto_eval, sized for one model, whose costs and saved bytes it reads
 * once (auto_scratch_new, after the model is filled; free with free()). */
typedef struct AutoScratch AutoScratch;
AutoScratch *auto_scratch_new(const AutoModel *md);

/* Runs the per-rank orders acts[p][0..nacts[p]) in the fast model: each op starts when
 * its rank is free and its inputs arrived (producer's end + the edge's transfer time);
 * communication overlaps compute, as in pipesim's overlap model with receives posted
 * early.  Memory: plan/mem.c's model of the plan the lowering would make of the order:
 * static + saved activations (plan/plan.h PlanStage rules) + the tensors in flight,
 * received when made (--tune=overlap's posting). */
void auto_eval(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts, const int *nacts,
               AutoFig *out);
/* auto_eval of an order that is the one auto_eval_keep kept but from rank p's position i
 * on (p < 0: any order): the ops that started before the kept op there are not run
 * again.  The figures are auto_eval's. */
void auto_eval_from(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                    const int *nacts, int p, int i, AutoFig *out);
/* auto_eval when the order only matters if it beats `beat`: faster, or as fast with a
 * smaller sum of finish times (auto_improve's test).  Returns 1 with out filled when
 * it does; 0 when it does not (out then holds no figures, nor sc the peaks), found
 * without the memory walk, and without the rest of the sweep once an op ends after
 * beat's makespan.  p and i as auto_eval_from's; the figures are auto_eval's. */
int auto_eval_beats(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                    const int *nacts, const AutoFig *beat, int p, int i, AutoFig *out);
/* 1 when the order in acts is the kept one (auto_eval_keep) with rank p's ops at i and
 * i + 1 swapped and the swap cannot make it faster nor its summed finish times smaller
 * (auto_improve's test): the op now first could not have started before the other
 * ended anyway.  0: it may (auto_eval_beats tells). */
int auto_eval_swap_later(const AutoModel *md, const AutoScratch *sc, SchedAct *const *acts,
                         int p, int i);
/* Keeps the times of the order the last auto_eval or auto_eval_from ran (makespan >= 0),
 * or the last auto_eval_beats that returned 1 ran, for the next ones to start from. */
void auto_eval_keep(const AutoModel *md, AutoScratch *sc);
/* The last auto_eval's per-rank peaks (pipeline index; valid while sc lives and the
 * order ran). */
const int64_t *auto_eval_peaks(const AutoScratch *sc);
/* ... and per rank the list position of the op at (or just before) which it peaks. */
const int *auto_eval_peak_ops(const AutoScratch *sc);

/* List-scheduler variants (auto_list.c). */
typedef struct {
	int64_t cap;     // device bytes (0: no limit); a rank's saved activations stay
	int64_t reserve; // within cap - its static bytes - reserve (room for tensors in flight)
	const int64_t *extra; // per rank, more reserve (NULL: none)
	int warm;        // 0: memory only; 1: at most p-i F's ahead (ZB-H1); 2: 2(p-i)-1
	int w_lazy;      // 1: W only when nothing else can run or memory needs it
	int f_deep;      // 1: among ready F's, the deepest stage first
	int full;        // 1: an F may take the room a B needs next (the order may then
	                 // overshoot the budget; the fast model tells)
} AutoListOpt;

/* Fills acts/nacts (heap, like sched_push; cap per rank) with a greedy order; returns 0,
 * or -1 when the budget lets no order finish. */
int auto_list_fill(const AutoModel *md, const AutoListOpt *o, SchedAct **acts, int *nacts,
                   int *cap);
/* Hill-climbs the order by swapping neighbours on a rank while the fast model's
 * (makespan, finish_sum) falls and every rank's peak stays within limit; at most
 * max_evals evaluations.  Returns the evaluations spent. */
int auto_improve(const AutoModel *md, AutoScratch *sc, SchedAct **acts, const int *nacts,
                 int64_t limit, int max_evals, AutoFig *fig);
/* Moves ops of an order that overshoots limit, a few places up or down their rank near
 * where each overshooting rank peaks, while the ranks' summed overshoot falls (or
 * stays and the makespan, then the summed finish times, fall): a fast order made to fit
 * at the least cost in time.  fig holds the order's evaluation and gets the result's.
 * Returns the evaluations spent; the order fits when fig->peak <= limit. */
int auto_fit(const AutoModel *md, AutoScratch *sc, SchedAct **acts, const int *nacts,
             int64_t limit, int max_evals, AutoFig *fig);
/* Simulated annealing over the order: random moves of an op on its rank (keeping each
 * stage's microbatch order per kind), scored by the makespan plus a penalty of two mean
 * op costs, and two more per forward's activations, for the bytes over limit; worse
 * moves taken with a probability that falls with the temperature (heat mean op costs
 * down to none over max_evals evaluations), from a fixed seed: the same order every
 * run.  Leaves the best order seen (fitting first) in acts and its evaluation in fig;
 * returns the evaluations spent. */
int auto_anneal(const AutoModel *md, AutoScratch *sc, SchedAct **acts, const int *nacts,
                int64_t limit, double heat, int max_evals, AutoFig *fig);

/* Zero Bubble's heuristic (auto_zb.c) on a chain of one stage per rank, each rank's saved
 * activations within maxmem[pipeline index].  Fills acts/nacts (3m per rank) with the
 * best of its eight flag combinations; out gets its own times and, when out->peak is not
 * NULL, its own per-rank peak of saved bytes.  Returns 0, or -1 when the model is not
 * such a chain or no combination fits. */
typedef struct {
	int64_t makespan;  // its own model: time 0 to the last op
	int64_t span;      // its own measure: the largest per-rank first-F-to-last-W span
	int64_t *peak;     // per pipeline index (caller's array, or NULL)
} AutoZbOut;

int auto_zb_fill(const AutoModel *md, const int64_t *maxmem, SchedAct **acts, int *nacts,
                 AutoZbOut *out);

/* The search (sched_auto.c's hook), run by the pass pipeline before placement when the
 * program says `schedule auto;`.  On success out receives the winner: its placement,
 * recomputation (a `recompute *` on top of the program's, or none), compute order
 * (heap, per pipeline index), its name for the plan's schedule line and the lowering's
 * communication tuning that won (both are tried).  explain, when not NULL, gets the
 * table of candidates (pipecc --explain).  Returns the number of errors reported to d. */
int auto_search(const Program *pr, Arena *a, Diag *d, FILE *explain, SchedChoice *out);

#endif
