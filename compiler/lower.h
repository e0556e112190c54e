/* Lowering: checked program + per-rank compute order -> plan (see lower.c). */
#ifndef LOWER_H
#define LOWER_H

#include "schedule.h"

/* NULL after reporting to d when the order cannot make progress across ranks, unless
 * allow_deadlock, which lowers the rest naively so pipesim can show the cycle.
 * tune_overlap: move each tensor as soon as it is produced (best when communication has
 * its own stream, docs/semantics.md "overlap"); otherwise when producer and consumer are
 * both between actions (best under the strict model).  line: make a line plan (one
 * pipeline line's lists, docs/plan-format.md "Lines") unless the program states devices
 * or routes only an expanded plan can carry. */
Plan *lower_program(const Program *pr, const SchedCtx *sc, Diag *d, int allow_deadlock,
                    int tune_overlap, int line);

/* With sc->comms (a CSV that names its communication): reorders the first pipeline
 * line's lists (ranks q * stride) to the CSV's SEND/RECV/REDUCE_GRAD order
 * (lower_given.c); -1 after reporting to d. */
int lower_given(Plan *p, const SchedCtx *sc, int stride, Diag *d);

#endif
