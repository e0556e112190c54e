/* Pipeline lines (plan/line.c, docs/plan-format.md "Lines"): the map between a line
 * plan's ranks and the world they stand for, and the expanded plans and one-rank views
 * made from it.
 *
 * World rank of the rank at coordinates c is row-major over the mesh dims in their
 * order; the ranks of one pipeline line (its dp and tp coordinates) are its rank at
 * pipeline index 0 plus q * plan_pp_stride() for index q.  These are the one place that
 * maps a line plan's ranks onto the world. */
#ifndef PLAN_LINE_H
#define PLAN_LINE_H

#include "plan.h"

#include <stddef.h>

int plan_mesh_world(const Plan *p);               // product of the dims
int plan_dim_stride(const Plan *p, int dim);      // world-rank distance along dim
int plan_pp_stride(const Plan *p);                // world-rank distance along pp
int plan_mesh_rank(const Plan *p, const int coord[DIM_COUNT]); // world rank of coord
void plan_mesh_coords(const Plan *p, int world_rank, int coord[DIM_COUNT]);
/* World rank of entry r of ranks[] (r itself in an expanded plan). */
int plan_world_rank(const Plan *p, int r);
/* Entry of ranks[] at coordinates coord, or -1 in a line plan off line 0; and back. */
int plan_rank_of(const Plan *p, const int coord[DIM_COUNT]);
void plan_coords_of(const Plan *p, int rank, int coord[DIM_COUNT]);
/* Ranks of rank r's communicator along dim (r included), in coordinate order; in a line
 * plan, r alone but along pp. */
int plan_dim_members(const Plan *p, int rank, int dim, int *out);
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
/* Whether one line's run is every line's: plan_line_uniform (plan/link.h). */

#endif
