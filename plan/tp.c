/* Tensor parallelism inside a stage: its parts, the rule that orders them, and their
 * costs.  A part is a run of the stage's layers between two tp all-reduces; which
 * layers end in one is the layer table's tp_bytes (plan/layer.c), so the compiler, the
 * simulator and the runtime cut a stage the same way from its layer list and tp alone.
 * A stage's F, B and W costs are shared out over its parts by their layers' FLOPs
 * (evenly when the stage has none of a kind), cumulatively rounded, so the parts of a
 * stage sum to its costs exactly.  Saved bytes are the parts' own layers'.
 *
 * Selective recomputation (docs/semantics.md "Memory"): each part's F drops its own
 * attention layers' rebuilt tensors (out of its save_fw), and the backward part that
 * walks through such a layer rebuilds them at its start (PlanPart.rebuilt, held until
 * it ends) and pays for it: the rebuild's FLOPs join that part's B weight, so the
 * stage's b, which includes them (compiler/lower.c), is still shared out exactly. */
#include "plan.h"
#include "block.h"
#include "line.h"
#include "tp.h"
#include "sizes.h"
#include "op_line.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void plan_parts_free(PlanParts *pp)
{
	for (int d = 0; d < DIR_COUNT; d++) {
		free(pp->part[d]);
		pp->part[d] = NULL;
		pp->n[d] = 0;
	}
}

/* Shares cost over the parts by w[k] (their FLOPs of that kind), cumulatively. */
static void share(PlanPart *pt, int n, int k, int64_t cost, const double *w)
{
	double total = 0, acc = 0;
	for (int i = 0; i < n; i++)
		total += w[i];
	int64_t given = 0;
	for (int i = 0; i < n; i++) {
		acc += total > 0 ? w[i] : 1;
		double frac = acc / (total > 0 ? total : n);
		int64_t upto = i == n - 1 ? cost : (int64_t)llround((double)cost * frac);
		if (upto < given)
			upto = given;
		pt[i].cost[k] = upto - given;
		given = upto;
	}
}

int plan_stage_parts(const Plan *p, int s, PlanParts *pp)
{
	const PlanStage *st = &p->stages[s];
	int tp = p->dims[DIM_TP], nl = st->nlayers;
	LayerShape sh = plan_shape(p);
	memset(pp, 0, sizeof *pp);
	int sel = st->recompute == PLAN_RECOMPUTE_SELECTIVE;
	LayerCost *lc = calloc((size_t)nl + 1, sizeof *lc);
	double *w = calloc(2 * ((size_t)nl + 1), sizeof *w);
	int64_t *re = calloc((size_t)nl + 1, sizeof *re); // per layer: the bytes B rebuilds
	double *rf = w + nl + 1;                          // ... and the FLOPs it takes
	for (int d = 0; d < DIR_COUNT; d++)
		pp->part[d] = calloc((size_t)nl + 1, sizeof *pp->part[d]);
	if (!lc || !w || !re || !pp->part[0] || !pp->part[1]) {
		free(lc);
		free(w);
		free(re);
		plan_parts_free(pp);
		return -1;
	}
	for (int l = 0; l < nl; l++) {
		lc[l] = plan_layer_figures_tp(&st->layers[l], &sh, tp);
		if (sel) { // F drops them: not kept from F to W
			re[l] = plan_layer_rebuilt_bytes(&st->layers[l], &sh, tp);
			rf[l] = plan_layer_rebuild_flops(&st->layers[l], &sh, tp);
			lc[l].save_fw -= re[l];
		}
	}
	for (int d = 0; d < DIR_COUNT; d++) {
		PlanPart *pt = pp->part[d];
		int n = 0;
		pt[0] = (PlanPart){.first = d == DIR_ACT ? 0 : nl};
		for (int j = 0; j < nl; j++) {
			int l = d == DIR_ACT ? j : nl - 1 - j;
			PlanPart *c = &pt[n];
			if (d == DIR_ACT)
				c->n++;
			else
				c->first = l, c->n++;
			for (int k = 0; k < 3; k++)
				c->save[k] += k == 0 ? lc[l].save_fb : k == 1 ? lc[l].save_fw : lc[l].save_bw;
			if (d == DIR_GRAD)
				c->rebuilt += re[l];
			if (lc[l].tp_bytes[d] > 0) {
				c->reduce = lc[l].tp_bytes[d];
				if (j + 1 < nl)
					pt[++n] = (PlanPart){.first = d == DIR_ACT ? l + 1 : l};
			}
		}
		pp->n[d] = n + 1;
		/* Costs by FLOPs: F over the forward's parts, B and W over the backward's. */
		for (int k = d == DIR_ACT ? 0 : 1; k < (d == DIR_ACT ? 1 : 3); k++) {
			for (int i = 0; i < pp->n[d]; i++) {
				w[i] = 0;
				for (int l = pt[i].first; l < pt[i].first + pt[i].n; l++)
					w[i] += lc[l].flops[k] + (k == 1 ? rf[l] : 0);
			}
			share(pt, pp->n[d], k, st->cost[k], w);
		}
	}
	free(lc);
	free(w);
	free(re);
	return 0;
}

int plan_part_steps(const PlanParts *pp, int dir)
{
	int n = 0;
	for (int i = 0; i < pp->n[dir]; i++)
		n += 1 + (pp->part[dir][i].reduce > 0);
	return n;
}

int plan_part_step(const PlanParts *pp, int dir, int red, int part)
{
	if (part < 0 || part >= pp->n[dir] || (red && !pp->part[dir][part].reduce))
		return -1;
	int n = 0;
	for (int i = 0; i < part; i++)
		n += 1 + (pp->part[dir][i].reduce > 0);
	return n + red;
}

const char *plan_part_apply(const PlanParts *pp, const PlanOp *o, uint8_t mb,
                            PlanPartState *ps, OpKind *done)
{
	OpKind k = plan_op_kind(o);
	const OpInfo *in = &plan_ops[k];
	int red = in->over == OP_OVER_TP; // the TPREDUCE after a part, else a part
	int dir = plan_op_dir(o) & 1;
	int fused = (in->makes & PLAN_DEP_GRAD) && (in->makes & PLAN_DEP_WGRAD); // a BW part
	uint16_t *st = &ps->step[dir];
	int n = plan_part_steps(pp, dir);
	*done = OP_COUNT;
	if (!red && *st == 0) {
		if (mb & in->makes & PLAN_DEP_MB)
			return in->again;
		if ((in->needs & PLAN_DEP_MB) & ~mb)
			return in->early;
		if (dir == DIR_GRAD)
			ps->fused = (uint8_t)fused;
	}
	if (*st >= n)
		return in->again;
	int want = plan_part_step(pp, dir, red, o->part);
	if (want < 0)
		return red ? "no tp all-reduce follows this part" : "the stage has no such part";
	if (want != *st)
		return red ? "a tp all-reduce out of order in its stage's parts"
		           : "a part out of order: the stage's parts run in order, each after the "
		             "tp all-reduce before it";
	if (!red && dir == DIR_GRAD && fused != ps->fused)
		return "B and BW parts mixed in one backward";
	if (++*st == n)
		*done = dir == DIR_ACT ? OP_F : ps->fused ? OP_BW : OP_B;
	return NULL;
}

int64_t plan_part_cost(const PlanParts *pp, const PlanOp *o, const int64_t stage_cost[3])
{
	const OpInfo *in = &plan_ops[o->kind];
	int dir = in->dir;
	if (!in->parted || o->part >= pp->n[dir])
		return plan_op_cost(plan_op_kind(o), stage_cost);
	const PlanPart *pt = &pp->part[dir][o->part];
	return plan_op_cost(plan_op_kind(o), pt->cost);
}

int64_t plan_part_mem(const PlanParts *pp, const PlanOp *o)
{
	const OpInfo *in = &plan_ops[o->kind];
	int dir = in->dir;
	if (!plan_op_is_compute(plan_op_kind(o)))
		return 0;
	PlanStage st = {0};
	if (!in->parted) { // W frees what every backward part's layers kept for it
		for (int i = 0; i < pp->n[DIR_GRAD]; i++) {
			st.save_fw += pp->part[DIR_GRAD][i].save[1];
			st.save_bw += pp->part[DIR_GRAD][i].save[2];
		}
	} else if (o->part < pp->n[dir]) {
		const PlanPart *pt = &pp->part[dir][o->part];
		st.save_fb = pt->save[0];
		st.save_fw = pt->save[1];
		st.save_bw = pt->save[2];
	}
	return plan_op_mem(plan_op_kind(o), &st);
}

/* Pushes o, from source line `line`, onto out; 0, or -1 with the bytes that failed in
 * *failed. */
static int push(PlanRank *out, PlanOp o, int32_t line, size_t *failed)
{
	if (plan_push_op(out, o, line))
		return 0;
	*failed = (size_t)(out->ops_cap ? out->ops_cap : 16) * sizeof o * 2;
	return -1;
}

/* One rank's list: each F, B and BW as its parts in order, each followed by its TPREDUCE
 * when it has one; group numbers renumbered so that each TPREDUCE is a group of its own
 * and numbers still increase.  W is never split. */
static int expand(Plan *p, const PlanParts *parts, PlanRank *rk, PlanRank *out,
                  size_t *failed)
{
	int g = -1, last = -1, prev_comm = 0;
	OpKind tpreduce = plan_op_of_over(OP_OVER_TP); // the all-reduce after a part
	for (int64_t i = 0; i < rk->nops; i++) {
		PlanOp o = rk->ops[i];
		int32_t line = plan_op_kept_line(rk, i);
		if (plan_op_is_comm(plan_op_kind(&o))) {
			g += !prev_comm || o.group != last;
			last = o.group;
			o.group = g;
			prev_comm = 1;
			if (push(out, o, line, failed))
				return -1;
			continue;
		}
		prev_comm = 0;
		if (!plan_ops[o.kind].parted) { // OPTIM, W
			if (push(out, o, line, failed))
				return -1;
			continue;
		}
		int dir = plan_ops[o.kind].dir;
		const PlanParts *pp = &parts[o.stage];
		for (int k = 0; k < pp->n[dir]; k++) {
			PlanOp c = o;
			c.part = (uint16_t)k;
			c.dir = 0; // with tp > 1 a pair runs as its halves' parts (plan_op_paired)
			if (push(out, c, line, failed))
				return -1;
			if (!pp->part[dir][k].reduce)
				continue;
			PlanOp t = {.kind = (uint8_t)tpreduce, .dir = (uint8_t)dir, .part = (uint16_t)k,
			            .stage = o.stage, .mb = o.mb, .peer = -1, .group = ++g};
			if (plan_op_set_bytes(p, &t, pp->part[dir][k].reduce)) {
				*failed = sizeof(int64_t) * 2;
				return -1;
			}
			if (push(out, t, line, failed))
				return -1;
		}
	}
	return 0;
}

int plan_tp_expand(Plan *p, PlanRank *rk, size_t *failed)
{
	PlanParts *parts = calloc((size_t)p->nstages + 1, sizeof *parts);
	PlanRank out = {0};
	int rc = parts ? 0 : -1;
	if (!parts)
		*failed = ((size_t)p->nstages + 1) * sizeof *parts;
	for (int s = 0; s < p->nstages && !rc; s++)
		if ((rc = plan_stage_parts(p, s, &parts[s])))
			*failed = (size_t)p->stages[s].nlayers * sizeof(PlanPart) * 2;
	if (!rc)
		rc = expand(p, parts, rk, &out, failed);
	if (rc) {
		free(out.ops);
		free(out.lines);
	} else {
		plan_rank_drop_ops(rk);
		rk->ops = out.ops;
		rk->lines = out.lines;
		rk->nops = out.nops;
		rk->ops_cap = out.ops_cap;
	}
	for (int s = 0; parts && s < p->nstages; s++)
		plan_parts_free(&parts[s]);
	free(parts);
	return rc;
}

int64_t plan_sp_bytes(const Plan *p, int s)
{
	int tp = p->dims[DIM_TP];
	if (!p->sp || tp == 1)
		return 0;
	const PlanStage *st = &p->stages[s];
	LayerShape sh = plan_shape(p);
	int64_t n = 0;
	for (int l = 0; l < st->nlayers; l++) {
		if (plan_layers[st->layers[l].kind].tp != LAYER_TP_WHOLE)
			continue;
		LayerTensors t;
		plan_layer_tensors(&st->layers[l], &sh, tp, &t);
		for (int j = t.borrowed; j < t.nparams; j++)
			n += (int64_t)t.param[j].rows * t.param[j].cols;
	}
	return n * plan_prec(p->prec)->grad;
}
