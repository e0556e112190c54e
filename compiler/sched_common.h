/* Checks and helpers shared by several schedules. */
#ifndef SCHED_COMMON_H
#define SCHED_COMMON_H

#include "schedule.h"

/* Where placement errors point: the `placement` statement, else the schedule's name. */
Loc sched_place_loc(const SchedCtx *c);

/* Errors unless every pipeline index holds exactly one stage; returns error count. */
int sched_check_one_per_rank(SchedCtx *c, const char *sched);

/* Errors unless there are exactly k stages per pipeline index (k * pp in all) and the
 * placement pairs them as the schedule needs: `loop` wants stages i and i + pp on one
 * index, `v` wants stages i and 2pp - 1 - i on one index (k = 2).  Any relabelling of
 * the pp indexes is fine: schedules work by pipeline position, not by pp index.
 * `placements` is the schedule's Schedule.placements text for the message. */
int sched_check_loop(SchedCtx *c, const char *sched, const char *placements);
int sched_check_v(SchedCtx *c, const char *sched, const char *placements);

/* Errors unless the program has at least min microbatches (why: the reason, shown in
 * the message), or, with multiple_of > 1, a multiple of that count. */
int sched_check_microbatches(SchedCtx *c, const char *sched, int min, int multiple_of,
                             const char *why);

/* The stages on pipeline index p in increasing order into out (room for nstages);
 * returns how many. */
int sched_local_stages(const SchedCtx *c, int p, int *out);

/* ZB-H1 (h2 = 0) or ZB-H2 (h2 = 1) over one stage per rank: position i warms up with
 * p-i (H2: 2(p-i)-1) forwards, runs (B, W, F) steps, then holds back i (H2: 2i) W's
 * through (B, F) steps, then (B, W) steps and the held-back W's. */
void sched_zb_fill(SchedCtx *c, int h2);

#endif
