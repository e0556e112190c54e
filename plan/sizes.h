/* The sizes the ALLREDUCE, TIEREDUCE and TPREDUCE ops move (plan/sizes.c): each size is
 * stored once in the plan's sizes[] and an op names it by index (PlanOp.route), so that
 * ops stay 24 bytes; plan_op_bytes reads them. */
#ifndef PLAN_SIZES_H
#define PLAN_SIZES_H

#include "plan.h"

#include <stdint.h>

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

#endif
