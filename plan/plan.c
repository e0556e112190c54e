/* The in-memory plan: making and freeing it, and the small facts every tool derives the
 * same way (transfer time, comm groups, op text).  Keeping them here is
 * what makes the compiler, the simulator and the runtime agree. */
#include "plan.h"
#include "units.h"
#include "block.h"
#include "line.h"
#include "par.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *const plan_dim_names[DIM_COUNT] = {"pp", "dp", "tp"};
const char *const plan_dir_names[DIR_COUNT] = {"act", "grad"};
const char *const plan_peer_names[PEER_COUNT] = {"remote", "local", "self"};

int plan_edge_self(const Plan *p, int e)
{
	const PlanEdge *ed = &p->edges[e];
	if (p->stages[ed->src].pp != p->stages[ed->dst].pp)
		return 0;
	for (int i = 0; i < p->nroutes; i++)
		if (p->routes[i].edge == e)
			return 1;
	return 0;
}

LayerShape plan_shape(const Plan *p)
{
	if (p->seq > 0)
		return (LayerShape){p->rows, p->rows / p->seq, p->seq, p->vocab, p->vocab_real,
		                    p->prec, p->sp ? p->dims[DIM_TP] : 1};
	return (LayerShape){p->rows, p->rows, 1, 0, 0, p->prec, p->sp ? p->dims[DIM_TP] : 1};
}

Plan *plan_new(void)
{
	Plan *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	for (int d = 0; d < DIM_COUNT; d++) {
		p->dims[d] = 1;
		p->dim_order[d] = d;
	}
	p->world = 1;
	return p;
}

void plan_free(Plan *p)
{
	if (!p)
		return;
	free(p->name);
	free(p->source);
	free(p->schedule);
	for (int s = 0; s < p->nstages; s++) {
		free(p->stages[s].name);
		free(p->stages[s].layers);
	}
	free(p->stages);
	free(p->edges);
	free(p->routes);
	free(p->sizes);
	free(p->size_slot);
	if (p->ranks) { // a view holds line 0 and its own rank (plan_expand_for)
		int held = p->view ? p->dims[DIM_PP] + 1 : p->world;
		for (int r = 0; r < held; r++) {
			if (p->ranks[r].borrowed)
				continue;
			free(p->ranks[r].peers);
			plan_rank_drop_ops(&p->ranks[r]);
		}
	}
	free(p->ranks);
	par_free(p->blocks, p->nblocks);
	free(p->blocks);
	free(p);
}

int64_t plan_total_ops(const Plan *p)
{
	int64_t n = 0;
	for (int r = 0; r < p->world; r++)
		n += p->ranks[r].nops;
	return n;
}

int plan_is_comm(int kind)
{
	return kind >= 0 && kind < OP_COUNT && plan_op_is_comm((OpKind)kind);
}

int64_t plan_group_end(const PlanRank *r, int64_t i)
{
	const PlanOp *o = r->ops;
	if (!plan_op_is_comm(plan_op_kind(&o[i])))
		return i + 1;
	int64_t j = i + 1;
	while (j < r->nops && plan_op_is_comm(plan_op_kind(&o[j])) && o[j].group == o[i].group)
		j++;
	return j;
}

/* Appends to the text in t (*m bytes of n long) as snprintf does. */
__attribute__((format(printf, 4, 5))) static void put(char *t, int *m, size_t n,
                                                      const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	*m += vsnprintf(t + *m, (size_t)*m < n ? n - (size_t)*m : 0, fmt, ap);
	va_end(ap);
}

int plan_format_op(const Plan *p, const PlanOp *o, char *buf, size_t n)
{
	if (o->kind >= OP_COUNT)
		return snprintf(buf, n, "?");
	OpKind k = plan_op_kind(o);
	const OpInfo *in = &plan_ops[k];
	int edge = in->at == OP_AT_EDGE;
	int64_t bytes = (edge ? o->stage >= 0 && o->stage < p->nedges : -2 - o->route < p->nsizes)
	                    ? plan_op_bytes(p, o)
	                    : -1; // an op the reader would not take: say it, do not look
	/* A line plan's peers are pipeline indices in memory; the file names world ranks. */
	int peer = o->peer >= 0 ? plan_world_rank(p, o->peer) : o->peer;
	char t[256]; // the longest line: a name, a direction and 8 numbers
	int m = 0;
	unsigned u = in->fields;
	if (plan_op_is_compute(k)) {
		put(t, &m, sizeof t, "%s %d %d", in->name, o->stage, o->mb);
		if (o->part)
			put(t, &m, sizeof t, " part=%d", o->part);
		if (o->dir)
			put(t, &m, sizeof t, " pair");
		return snprintf(buf, n, "%s", t);
	}
	put(t, &m, sizeof t, "%s", in->name);
	if (u & OP_FIELD_DIR)
		put(t, &m, sizeof t, " %s", plan_dir_names[o->dir & 1]);
	put(t, &m, sizeof t, " %s=%d", edge ? "e" : "s", o->stage);
	if (u & OP_FIELD_MB)
		put(t, &m, sizeof t, " m=%d", o->mb);
	if (u & OP_FIELD_PEER)
		put(t, &m, sizeof t, " %s%d", plan_op_peer_key(k), peer);
	if (u & OP_FIELD_PART)
		put(t, &m, sizeof t, " part=%d", o->part);
	if (u & OP_FIELD_BYTES)
		put(t, &m, sizeof t, " bytes=%" PRId64, bytes);
	if (u & OP_FIELD_GROUP)
		put(t, &m, sizeof t, " g=%d", o->group);
	if (u & OP_FIELD_ROUTE)
		put(t, &m, sizeof t, " r=%d", o->route);
	return snprintf(buf, n, "%s", t);
}

/* A stage's work a step: every microbatch's F, B and W and its optimizer step. */
static double stage_work(const Plan *p, int s)
{
	const PlanStage *st = &p->stages[s];
	return (double)p->microbatches * ((double)st->cost[0] + (double)st->cost[1] +
	                                  (double)st->cost[2]) + (double)st->optim;
}

int plan_bottleneck(const Plan *p, char *buf, size_t n)
{
	int at = 0;
	double total = 0;
	for (int s = 0; s < p->nstages; s++) {
		total += stage_work(p, s);
		if (stage_work(p, s) > stage_work(p, at))
			at = s;
	}
	double mean = total / p->nstages, worst = stage_work(p, at); // a plan has a stage
	char a[32], b[32];
	snprintf(buf, n, "bottleneck stage %s (pp %d): %s of work a step (%d x (F+B+W) + "
	         "optimizer), %.1f %% above the mean stage's %s", p->stages[at].name,
	         p->stages[at].pp, plan_time_text(a, sizeof a, (int64_t)llround(worst)),
	         p->microbatches, mean > 0 ? 100.0 * (worst / mean - 1) : 0.0,
	         plan_time_text(b, sizeof b, (int64_t)llround(mean)));
	return at;
}
