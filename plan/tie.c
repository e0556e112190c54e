/* A head tied to an embedding: the head borrows the embedding's table, and the two
 * stages' weight gradients meet in one table.  In one pipeline rank the head's gradient
 * adds into the embedding stage's; across two, each keeps a copy and a TIEREDUCE on each
 * side sums the two. */
#include "tie.h"
#include "line.h"

#include <stdint.h>
#include <string.h>

/* The embedding's stage and the stage of a head tied to it, or -1. */
static void tie_stages(const Plan *p, int *embed, int *head)
{
	*embed = *head = -1;
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			const PlanLayer *ly = &p->stages[s].layers[l];
			if (ly->kind == LAYER_EMBED && *embed < 0)
				*embed = s;
			if (ly->kind == LAYER_HEAD && (ly->flags & LAYER_FLAG(LAYER_KEY_TIED)))
				*head = s;
		}
}

void plan_tie(const Plan *p, int *embed, int *head)
{
	tie_stages(p, embed, head);
	if (*embed < 0 || *head < 0 || *embed == *head ||
	    p->stages[*embed].pp != p->stages[*head].pp)
		*embed = *head = -1;
}

int plan_tie_across(const Plan *p, int *embed, int *head)
{
	tie_stages(p, embed, head);
	if (*embed < 0 || *head < 0 || p->stages[*embed].pp == p->stages[*head].pp) {
		*embed = *head = -1;
		return 0;
	}
	return 1;
}

int plan_tie_peer(const Plan *p, int rank, int *stage)
{
	int e, h;
	*stage = -1;
	if (!plan_tie_across(p, &e, &h) || rank < 0 || rank >= p->world)
		return -1;
	int c[DIM_COUNT];
	PlanRank tmp;
	memcpy(c, plan_rank(p, rank, &tmp)->coord, sizeof c);
	int me = c[DIM_PP];
	if (me != p->stages[e].pp && me != p->stages[h].pp)
		return -1;
	*stage = me == p->stages[e].pp ? e : h;
	c[DIM_PP] = me == p->stages[e].pp ? p->stages[h].pp : p->stages[e].pp;
	return plan_rank_of(p, c);
}

int64_t plan_tie_bytes(const Plan *p)
{
	int e, h;
	tie_stages(p, &e, &h);
	if (h < 0)
		return 0;
	const PlanStage *st = &p->stages[h];
	int tp = p->dims[DIM_TP] > 1 ? p->dims[DIM_TP] : 1;
	for (int l = 0; l < st->nlayers; l++)
		if (st->layers[l].kind == LAYER_HEAD)
			return (int64_t)(p->vocab / tp) * st->layers[l].in * plan_prec(p->prec)->grad;
	return 0;
}
