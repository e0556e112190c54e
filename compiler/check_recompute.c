/* The checker's recomputation statements (docs/language.md "recompute"): `recompute NAME
 * [full|selective] [residuals=N];` and `recompute * ...;`, what each stage then
 * recomputes (prog_recompute, prog_recompute_residuals), and the rules of selective
 * recomputation, which needs attention. */
#include <limits.h>
#include <string.h>

#include "check_int.h"

/* The residual bodies at the top of stage st (those full recomputation's span covers,
 * plan_recompute_span); -1 when the checker refused one of its layers (an unknown kind:
 * reported already, so nothing more is said of the stage). */
static int stage_bodies(const ProgStage *st)
{
	int n = 0;
	for (int l = 0; l < st->nlayers; l++)
		if ((unsigned)st->layers[l].kind >= LAYER_COUNT)
			return -1;
		else if (plan_layers[st->layers[l].kind].arg == LAYER_ARG_BODY) {
			n++;
			l += st->layers[l].span;
		}
	return n;
}

/* A recompute statement's words: MODE `full` (the default) or `selective`, and with full
 * `residuals=N`.  0, or -1 after an error. */
static int recompute_words(Check *c, const AstStmt *s, uint8_t *mode, int *res,
                           const AstKv **rkvp)
{
	enum { W_FULL, W_SELECTIVE, W_RESIDUALS, W_COUNT }; // the modes, then the key
	static const char *const words[W_COUNT] = {"full", "selective", "residuals"};
	const AstKv *mkv = NULL, *rkv = NULL;
	for (int i = 0; i < s->nkvs; i++) {
		const AstKv *kv = &s->kvs[i];
		int j = find_word(kv->key.s, words, W_COUNT);
		if (j < 0) {
			const char *sug = diag_suggest(kv->key.s, words, W_COUNT);
			diag_error(c->d, kv->key.loc, "unknown recomputation '%s'%s%s%s (valid: full, "
			           "selective, residuals=N)", kv->key.s, sug ? "; did you mean '" : "",
			           sug ? sug : "", sug ? "'?" : "");
			return -1;
		}
		if (j < W_RESIDUALS && (kv->has_val || mkv)) {
			diag_error(c->d, kv->loc, kv->has_val ? "'%s' takes no value"
			                                      : "'%s': a recompute statement names one mode",
			           kv->key.s);
			return -1;
		}
		if (j == W_RESIDUALS && (!kv->has_val || rkv)) {
			diag_error(c->d, kv->loc, rkv ? "duplicate 'residuals'"
			                              : "'residuals' needs a value, e.g. residuals=2");
			return -1;
		}
		*(j < W_RESIDUALS ? &mkv : &rkv) = kv;
		if (j == W_SELECTIVE)
			*mode = PLAN_RECOMPUTE_SELECTIVE;
	}
	if (rkv && *mode != PLAN_RECOMPUTE_FULL) {
		diag_error(c->d, rkv->loc, "'residuals=' limits full recomputation; selective "
		                           "recomputation rebuilds every attention layer's probabilities");
		return -1;
	}
	if (rkv && !whole(c, &rkv->val, "'residuals'", 1, INT_MAX, res))
		return -1;
	*rkvp = rkv;
	return 0;
}

/* `recompute NAME [MODE] [residuals=N];` or `recompute * ...;`: the stage (every stage)
 * recomputes, MODE `full` (the default: keeps only its input from F and re-runs F at B;
 * with residuals=N only over its first N residual bodies, Megatron's block method) or
 * `selective` (drops its attention layers' probabilities and rebuilds them at B);
 * docs/semantics.md "Memory".  A stage's own statement wins over `*`. */
void check_recompute(Check *c, AstStmt *s)
{
	Program *p = c->p;
	uint8_t mode = PLAN_RECOMPUTE_FULL;
	int res = 0;
	const AstKv *rkv = NULL;
	if (recompute_words(c, s, &mode, &res, &rkv))
		return;
	if (strcmp(s->name.s, "*") == 0) {
		if (p->recompute_all) {
			diag_error(c->d, s->name.loc, "duplicate 'recompute *' statement");
			diag_note(c->d, p->recompute_all_loc, "first given here");
			return;
		}
		p->recompute_all = mode;
		p->recompute_all_res = res;
		p->recompute_all_loc = s->name.loc;
		return;
	}
	int target = check_resolve(c, &s->name);
	if (target < 0)
		return;
	if (c->recompute_stmt[target]) {
		diag_error(c->d, s->name.loc, "duplicate 'recompute' for stage '%s'", s->name.s);
		diag_note(c->d, c->recompute_stmt[target]->name.loc, "first given here");
		return;
	}
	int nb = res ? stage_bodies(&p->stages[target]) : 0;
	if (nb >= 0 && res > nb) {
		diag_error(c->d, rkv->loc, "stage '%s' has %d residual bod%s, fewer than "
		           "residuals=%d", s->name.s, nb, nb == 1 ? "y" : "ies", res);
		return;
	}
	c->recompute_stmt[target] = s;
	p->stages[target].recompute = mode;
	p->stages[target].recompute_res = res;
	p->stages[target].recompute_loc = s->name.loc;
}

int prog_recompute(const Program *p, int s)
{
	const ProgStage *st = &p->stages[s];
	if (st->recompute)
		return st->recompute;
	if (p->recompute_all == PLAN_RECOMPUTE_SELECTIVE && !prog_stage_attends(st))
		return PLAN_RECOMPUTE_NONE;
	return p->recompute_all;
}

int prog_recompute_residuals(const Program *p, int s)
{
	const ProgStage *st = &p->stages[s];
	if (st->recompute)
		return st->recompute_res;
	int nb = stage_bodies(st);
	return p->recompute_all_res < nb ? p->recompute_all_res : 0;
}

/* Selective recomputation rebuilds attention's probabilities: a stage named for it must
 * have attention, `recompute * selective` some stage.  Any tp will do: a rank rebuilds
 * its own heads' probabilities from its own q and k, with no communication (each part of
 * a stage rebuilds its own layers', plan/tp.c).  Flash attention keeps no
 * probabilities: selective where all attention is flash is allowed (the plan says so,
 * and nothing is dropped) but warned about, as Megatron calls it unnecessary. */
void check_selective(Check *c)
{
	Program *p = c->p;
	int attends = 0, flash_only = 1;
	for (int s = 0; s < p->nstages; s++) {
		const ProgStage *st = &p->stages[s];
		if (st->recompute == PLAN_RECOMPUTE_SELECTIVE && !prog_stage_attends(st))
			diag_error(c->d, st->recompute_loc,
			           "stage '%s' has no attention layer: selective recomputation rebuilds "
			           "attention's probabilities only", st->name);
		attends |= prog_stage_attends(st);
		flash_only &= !prog_stage_attends(st) || prog_stage_all_flash(st);
		if (st->recompute == PLAN_RECOMPUTE_SELECTIVE && prog_stage_all_flash(st))
			diag_warning(c->d, st->recompute_loc,
			             "stage '%s''s attention is flash: it keeps no probabilities, so "
			             "selective recomputation rebuilds nothing", st->name);
	}
	if (p->recompute_all == PLAN_RECOMPUTE_SELECTIVE && attends && flash_only)
		diag_warning(c->d, p->recompute_all_loc,
		             "every attention layer is flash: it keeps no probabilities, so "
		             "selective recomputation rebuilds nothing");
	if (p->recompute_all == PLAN_RECOMPUTE_SELECTIVE && !attends)
		diag_error(c->d, p->recompute_all_loc,
		           "no stage has an attention layer: selective recomputation rebuilds "
		           "attention's probabilities only");
}
