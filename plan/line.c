/* Pipeline lines: the map between a line plan (format 3: one pipeline line's ranks,
 * docs/plan-format.md "Lines") and the world it stands for.
 *
 * World ranks are row-major over the mesh dims in their order.  A pipeline line is the
 * set of ranks sharing their dp and tp coordinates; line 0 is dp = tp = 0, and its rank
 * at pipeline index q is q * plan_pp_stride().  Line l's ranks are line 0's shifted by
 * its base, the world rank of its pipeline index 0; lines are numbered by increasing
 * base, and line l's routes are line 0's, numbered after the l * nroutes0 routes of the
 * lines before it.  Devices of a line plan follow one rule, w % dev_per_node.  These
 * functions are the only place that knows this; the lowering, the reader, the writer,
 * pipesim --expand and piperun all go through them. */
#include "plan.h"
#include "line.h"
#include "sizes.h"
#include "sysmem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int plan_mesh_world(const Plan *p)
{
	return p->dims[DIM_PP] * p->dims[DIM_DP] * p->dims[DIM_TP];
}

int plan_dim_stride(const Plan *p, int dim)
{
	int stride = 1;
	for (int i = DIM_COUNT - 1; i >= 0 && p->dim_order[i] != dim; i--)
		stride *= p->dims[p->dim_order[i]];
	return stride;
}

int plan_pp_stride(const Plan *p)
{
	return plan_dim_stride(p, DIM_PP);
}

int plan_mesh_rank(const Plan *p, const int coord[DIM_COUNT])
{
	int r = 0;
	for (int i = 0; i < DIM_COUNT; i++) {
		int d = p->dim_order[i];
		r = r * p->dims[d] + coord[d];
	}
	return r;
}

void plan_mesh_coords(const Plan *p, int rank, int coord[DIM_COUNT])
{
	for (int i = DIM_COUNT - 1; i >= 0; i--) {
		int d = p->dim_order[i];
		coord[d] = rank % p->dims[d];
		rank /= p->dims[d];
	}
}

int plan_world_rank(const Plan *p, int r)
{
	return p->line ? r * plan_pp_stride(p) : r;
}

int plan_line_device(const Plan *p, int w)
{
	return w % (p->dev_per_node > 0 ? p->dev_per_node : 1);
}

/* The base (world rank at pipeline index 0) of line l, and the line of a base. */
static int line_base(const Plan *p, int l)
{
	int stride = plan_pp_stride(p);
	return l / stride * stride * p->dims[DIM_PP] + l % stride;
}

int plan_line_of_base(const Plan *p, int b)
{
	int stride = plan_pp_stride(p);
	return b / (stride * p->dims[DIM_PP]) * stride + b % stride;
}

static char *dup_or(const char *s, int *bad)
{
	char *t = s ? strdup(s) : NULL;
	if (s && !t)
		*bad = 1;
	return t;
}

/* Header, stages and edges of p into e (fresh from plan_new), deep. */
static int copy_shared(Plan *e, const Plan *p)
{
	int bad = 0;
	*e = *p;
	e->name = dup_or(p->name, &bad);
	e->source = dup_or(p->source, &bad);
	e->schedule = dup_or(p->schedule, &bad);
	e->stages = NULL;
	e->edges = NULL;
	e->routes = NULL;
	e->sizes = NULL;
	e->size_slot = NULL;
	e->ranks = NULL;
	e->blocks = NULL; // p's own
	e->nblocks = 0;
	e->take_at = e->take_end = NULL;
	e->nstages = e->nedges = e->nroutes = 0;
	e->world = 1;
	e->line = 0;
	e->routes_line = 0;
	if (bad || !(e->stages = calloc((size_t)p->nstages + 1, sizeof *e->stages)))
		return -1;
	for (int s = 0; s < p->nstages; s++, e->nstages++) {
		PlanStage *st = &e->stages[s];
		*st = p->stages[s];
		st->name = NULL;
		st->layers = malloc((size_t)st->nlayers * sizeof *st->layers + 1);
		if (!st->layers || !(st->name = dup_or(p->stages[s].name, &bad)))
			return -1;
		memcpy(st->layers, p->stages[s].layers, (size_t)st->nlayers * sizeof *st->layers);
	}
	if (!(e->edges = malloc((size_t)p->nedges * sizeof *e->edges + 1)))
		return -1;
	if (p->nedges) // a one-stage plan has none (edges NULL)
		memcpy(e->edges, p->edges, (size_t)p->nedges * sizeof *e->edges);
	e->nedges = p->nedges;
	return plan_copy_sizes(e, p);
}

/* Rank w of the world: line 0's lists at w's pipeline index, shifted onto w's line. */
static int expand_rank(const Plan *p, PlanRank *rk, int w, size_t *failed)
{
	int stride = plan_pp_stride(p);
	plan_mesh_coords(p, w, rk->coord);
	int q = rk->coord[DIM_PP], base = w - q * stride;
	int shift = plan_line_of_base(p, base) * p->nroutes;
	const PlanRank *src = &p->ranks[q];
	rk->device = plan_line_device(p, w);
	rk->peers = malloc((size_t)src->npeers * sizeof *rk->peers + 1);
	rk->ops = malloc((size_t)src->nops * sizeof *rk->ops + 1);
	if (!rk->peers || !rk->ops) {
		*failed = (size_t)src->nops * sizeof *rk->ops;
		return -1;
	}
	rk->npeers = src->npeers;
	for (int i = 0; i < src->npeers; i++) {
		rk->peers[i] = src->peers[i];
		rk->peers[i].peer_rank = base + src->peers[i].peer_rank * stride;
	}
	rk->nops = rk->ops_cap = src->nops;
	memcpy(rk->ops, src->ops, (size_t)src->nops * sizeof *rk->ops);
	if (src->lines) {
		if (!(rk->lines = malloc((size_t)src->nops * sizeof *rk->lines + 1))) {
			*failed = (size_t)src->nops * sizeof *rk->lines;
			return -1;
		}
		memcpy(rk->lines, src->lines, (size_t)src->nops * sizeof *rk->lines);
	}
	for (int64_t i = 0; i < rk->nops; i++) {
		PlanOp *o = &rk->ops[i];
		if (o->peer >= 0)
			o->peer = base + o->peer * stride;
		if (o->route >= 0)
			o->route += shift;
	}
	return 0;
}

Plan *plan_expand(const Plan *p, size_t *failed)
{
	return plan_expand_for(p, -1, failed);
}

PlanOp plan_rank_op(const Plan *p, int r, int64_t i)
{
	PlanRank tmp;
	const PlanRank *rk = plan_rank(p, r, &tmp);
	PlanOp o = rk->ops[i];
	if (rk->borrowed) {
		if (o.peer >= 0)
			o.peer += rk->base;
		if (o.route >= 0)
			o.route += rk->route_shift;
	}
	return o;
}

/* World rank w borrowing the lists of line 0's rank at its pipeline index. */
static void borrow_rank(const Plan *p, PlanRank *rk, const PlanRank *line0, int w)
{
	plan_mesh_coords(p, w, rk->coord);
	rk->device = plan_line_device(p, w);
	rk->borrowed = 1;
	rk->base = w - rk->coord[DIM_PP] * plan_pp_stride(p);
	rk->route_shift = plan_line_of_base(p, rk->base) * p->nroutes;
	rk->peers = line0->peers;
	rk->npeers = line0->npeers;
	rk->ops = line0->ops;
	rk->lines = line0->lines;
	rk->nops = line0->nops;
	rk->first_line = line0->first_line;
	rk->line = line0->line;
}

/* A view holds line 0 at ranks[q] (world rank q * stride), then its own rank. */
const PlanRank *plan_rank(const Plan *p, int r, PlanRank *tmp)
{
	if (!p->view)
		return &p->ranks[r];
	int stride = plan_pp_stride(p), pp = p->dims[DIM_PP];
	if (r % stride == 0 && r / stride < pp)
		return &p->ranks[r / stride];
	if (r == p->view - 1)
		return &p->ranks[pp];
	if (!tmp)
		return NULL;
	*tmp = (PlanRank){0};
	borrow_rank(p, tmp, &p->ranks[r / stride % pp], r);
	return tmp;
}

/* Entry `slot` of e gets world rank w's own lists; its ops' text is line 0's in the file,
 * so diagnostics point there. */
static int own_rank(const Plan *p, Plan *e, int slot, int w, size_t *failed)
{
	if (expand_rank(p, &e->ranks[slot], w, failed))
		return -1;
	const PlanRank *src = &p->ranks[w / plan_pp_stride(p) % p->dims[DIM_PP]];
	e->ranks[slot].first_line = src->first_line;
	e->ranks[slot].line = src->line;
	return 0;
}

Plan *plan_expand_for(const Plan *p, int only, size_t *failed)
{
	*failed = sizeof(Plan);
	Plan *e = plan_new();
	if (!e)
		return NULL;
	if (copy_shared(e, p)) {
		plan_free(e);
		return NULL;
	}
	int world = plan_mesh_world(p), stride = plan_pp_stride(p), pp = p->dims[DIM_PP];
	int nl = only < 0 ? world / pp : 1; // a view keeps line 0's routes
	/* Every line's copy of the lists: refused when more than the machine has, which
	 * overcommit would grant until the OOM killer ended the tool (plan/sysmem.h). */
	double bytes = (double)plan_total_ops(p) * nl * sizeof(PlanOp);
	if (only < 0 && !plan_sysmem_fits(bytes)) {
		*failed = bytes < (double)SIZE_MAX ? (size_t)bytes : SIZE_MAX;
		plan_free(e);
		errno = ENOMEM;
		return NULL;
	}
	int held = only < 0 ? world : pp + 1;
	int n0 = p->nroutes;
	e->routes = malloc((size_t)n0 * nl * sizeof *e->routes + 1);
	e->ranks = calloc((size_t)held, sizeof *e->ranks);
	if (!e->routes || !e->ranks) {
		*failed = (size_t)held * sizeof *e->ranks;
		plan_free(e);
		return NULL;
	}
	e->view = only < 0 ? 0 : 1 + only; // before world: plan_free counts entries by both
	e->world = world;
	for (int l = 0; l < nl; l++) {
		int b = line_base(p, l);
		for (int i = 0; i < n0; i++) {
			PlanRoute rt = p->routes[i];
			rt.src_rank = b + rt.src_rank * stride;
			rt.dst_rank = b + rt.dst_rank * stride;
			rt.src_dev = plan_line_device(p, rt.src_rank);
			rt.dst_dev = plan_line_device(p, rt.dst_rank);
			if (rt.inverse_of >= 0)
				rt.inverse_of += l * n0;
			if (l > 0)
				rt.loc = (PlanLoc){0, 0};
			e->routes[e->nroutes++] = rt;
		}
	}
	if (only >= 0) {
		int rc = 0;
		for (int q = 0; q < pp && rc == 0; q++)
			rc = own_rank(p, e, q, q * stride, failed);
		if (rc == 0 && plan_rank(e, only, NULL) == &e->ranks[pp])
			rc = own_rank(p, e, pp, only, failed);
		if (rc) {
			plan_free(e);
			return NULL;
		}
		*failed = 0;
		return e;
	}
	for (int w = 0; w < world; w++)
		if (own_rank(p, e, w, w, failed)) {
			plan_free(e);
			return NULL;
		}
	*failed = 0;
	return e;
}

/* In a line plan ranks are pipeline indices of line 0 (dp = tp = 0): other
 * coordinates name no rank of the plan (-1). */
int plan_rank_of(const Plan *p, const int coord[DIM_COUNT])
{
	if (p->line)
		return coord[DIM_DP] || coord[DIM_TP] ? -1 : coord[DIM_PP];
	return plan_mesh_rank(p, coord);
}

void plan_coords_of(const Plan *p, int rank, int coord[DIM_COUNT])
{
	if (p->line) {
		coord[DIM_PP] = rank;
		coord[DIM_DP] = coord[DIM_TP] = 0;
		return;
	}
	plan_mesh_coords(p, rank, coord);
}

int plan_dim_members(const Plan *p, int rank, int dim, int *out)
{
	if (p->line && dim != DIM_PP) { // the other members run on other lines
		out[0] = rank;
		return 1;
	}
	int c[DIM_COUNT];
	plan_coords_of(p, rank, c);
	for (int i = 0; i < p->dims[dim]; i++) {
		c[dim] = i;
		out[i] = plan_rank_of(p, c);
	}
	return p->dims[dim];
}
