/* Constraint checks that several schedules share, with their diagnostics.  The
 * placement checks accept any relabelling of the pp indexes: a schedule computes its
 * order from each stage's position in the pipeline, so only which stages share an
 * index matters. */
#include "sched_common.h"

Loc sched_place_loc(const SchedCtx *c)
{
	const Program *pr = c->prog;
	return pr->place_loc.line ? pr->place_loc : pr->sched_loc;
}

int sched_check_one_per_rank(SchedCtx *c, const char *sched)
{
	const Program *pr = c->prog;
	if (c->nstages != c->pp) {
		diag_error(c->diag, pr->sched_loc,
		           "schedule %s needs one stage per pipeline rank: %d stages on pp=%d",
		           sched, c->nstages, c->pp);
		return 1;
	}
	for (int p = 0; p < c->pp; p++) {
		if (sched_stages_on(c, p) != 1) {
			diag_error(c->diag, sched_place_loc(c),
			           "schedule %s needs one stage per pipeline rank: pp index %d holds %d",
			           sched, p, sched_stages_on(c, p));
			return 1;
		}
	}
	return 0;
}

/* Stage partner(i) must share stage i's index for i in [0, pp); stages 0..pp-1 must
 * sit on distinct indexes (the placement pass made sure no index is empty). */
static int check_pairs(SchedCtx *c, const char *sched, const char *placements, int k,
                       int v)
{
	int pp = c->pp, n = c->nstages;
	if (n != k * pp) {
		diag_error(c->diag, c->prog->sched_loc,
		           "schedule %s needs %d stages per pipeline rank: %d stages on pp=%d "
		           "(want %d)",
		           sched, k, n, pp, k * pp);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		int pos = v ? (i < pp ? i : 2 * pp - 1 - i) : i % pp;
		if (c->stage_pp[i] != c->stage_pp[pos]) {
			diag_error(c->diag, sched_place_loc(c),
			           "schedule %s cannot serve this placement: stage %d is on pp index %d "
			           "but stage %d on pp index %d; it works with %s",
			           sched, pos, c->stage_pp[pos], i, c->stage_pp[i], placements);
			return 1;
		}
	}
	for (int i = 0; i < pp; i++)
		for (int j = 0; j < i; j++)
			if (c->stage_pp[i] == c->stage_pp[j]) {
				diag_error(c->diag, sched_place_loc(c),
				           "schedule %s cannot serve this placement: stages %d and %d share "
				           "pp index %d; it works with %s",
				           sched, j, i, c->stage_pp[i], placements);
				return 1;
			}
	return 0;
}

int sched_check_loop(SchedCtx *c, const char *sched, const char *placements)
{
	int k = c->nstages % c->pp == 0 ? c->nstages / c->pp : 0;
	if (k == 0) {
		diag_error(c->diag, c->prog->sched_loc,
		           "schedule %s needs the same number of stages on every pipeline rank: "
		           "%d stages on pp=%d",
		           sched, c->nstages, c->pp);
		return 1;
	}
	return check_pairs(c, sched, placements, k, 0);
}

int sched_check_v(SchedCtx *c, const char *sched, const char *placements)
{
	return check_pairs(c, sched, placements, 2, 1);
}

int sched_check_microbatches(SchedCtx *c, const char *sched, int min, int multiple_of,
                             const char *why)
{
	const Program *pr = c->prog;
	Loc at = pr->mb_loc.line ? pr->mb_loc : pr->sched_loc;
	if (c->m < min) {
		diag_error(c->diag, at, "schedule %s needs at least %d microbatches (%s), got %d",
		           sched, min, why, c->m);
		return 1;
	}
	if (multiple_of > 1 && c->m % multiple_of) {
		diag_error(c->diag, at,
		           "schedule %s needs a multiple of %d microbatches (%s), got %d", sched,
		           multiple_of, why, c->m);
		return 1;
	}
	return 0;
}

int sched_local_stages(const SchedCtx *c, int p, int *out)
{
	int n = 0;
	for (int s = 0; s < c->nstages; s++)
		if (c->stage_pp[s] == p)
			out[n++] = s;
	return n;
}

void sched_zb_fill(SchedCtx *c, int h2)
{
	int p = c->pp, m = c->m;
	for (int i = 0; i < p; i++) {
		int rank = c->stage_pp[i];
		int warm = h2 ? 2 * (p - i) - 1 : p - i; // forwards before the first B
		int hold = h2 ? 2 * i : i;               // W's held back at the end
		if (warm > m)
			warm = m;
		int f = 0, b = 0, w = 0;
		while (f < warm)
			sched_push(c, rank, OP_F, i, f++);
		for (int k = m - warm - hold; k > 0; k--) {
			sched_push(c, rank, OP_B, i, b++);
			sched_push(c, rank, OP_W, i, w++);
			sched_push(c, rank, OP_F, i, f++);
		}
		while (f < m) {
			sched_push(c, rank, OP_B, i, b++);
			sched_push(c, rank, OP_F, i, f++);
		}
		while (b < m) {
			sched_push(c, rank, OP_B, i, b++);
			sched_push(c, rank, OP_W, i, w++);
		}
		while (w < m)
			sched_push(c, rank, OP_W, i, w++);
	}
}
