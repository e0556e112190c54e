/* A head tied to an embedding (plan/tie.c): which stages hold the shared table, and
 * across pipeline ranks, which rank holds the other copy and what its gradient moves. */
#ifndef PLAN_TIE_H
#define PLAN_TIE_H

#include "plan.h"

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

#endif
