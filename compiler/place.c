/* Placement: which pipeline index runs each stage.  `loop` deals stages round-robin,
 * `v` sends the first half down the ranks and the second half back up, a list says it
 * stage by stage.  Without a `placement` statement the schedule decides (custom orders
 * infer it from where stages appear).  Whether the schedule can serve the placement is
 * the schedule's check, run afterwards.  A tied head may sit on any rank: on another
 * than its embedding's, the lowering gives it a copy of the table and a TIEREDUCE. */
#include "place.h"

int place_stages(SchedCtx *c, const Schedule *s)
{
	const Program *pr = c->prog;
	int pp = c->pp, n = c->nstages;
	int kind = pr->place;
	if (kind == PLACE_DEFAULT && s->infer_place)
		return s->infer_place(c);
	if (kind == PLACE_DEFAULT)
		kind = s->default_place;
	Loc at = pr->place_loc.line ? pr->place_loc : pr->sched_loc;
	switch (kind) {
	case PLACE_LOOP:
		for (int i = 0; i < n; i++)
			c->stage_pp[i] = i % pp;
		break;
	case PLACE_V:
		if (n != 2 * pp) {
			diag_error(c->diag, at,
			           "placement v needs exactly two stages per pipeline rank: %d stages on "
			           "pp=%d (want %d)",
			           n, pp, 2 * pp);
			return 1;
		}
		for (int i = 0; i < n; i++)
			c->stage_pp[i] = i < pp ? i : 2 * pp - 1 - i;
		break;
	case PLACE_LIST:
		for (int i = 0; i < n; i++)
			c->stage_pp[i] = pr->place_list[i];
		break;
	default:
		die("bad placement kind %d", kind);
	}
	for (int p = 0; p < pp; p++) {
		if (sched_stages_on(c, p) == 0) {
			diag_error(c->diag, at, "pipeline rank %d gets no stage (%d stages on pp=%d)", p,
			           n, pp);
			return 1;
		}
	}
	return 0;
}
