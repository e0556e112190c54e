/* The plan verifier: the invariants of docs/plan-format.md, "Invariants", checked in
 * time linear in the number of ops.  pipecc runs it after lowering (a failure there is
 * a compiler bug), pipesim and piperun after reading (a failure there is a bad plan).
 *
 * Checks, in the order their faults are reported: header (routes), peer tables, then
 * over every op groups, sends to self and point-to-point matching (verify_ops.c), the
 * dp and tp collectives and the tied table, then per-rank dependencies (verify_ops.c).
 * Matching comes before dependencies so that a wrong-size or misordered transfer is
 * reported with both of its ops.  The checks over ops run as one walk (verify.h says
 * how it keeps this order).  The first violation is reported; messages name ops as
 * `rank R op I (line L) \`TEXT\``. */
#include "verify.h"
#include "tie.h"
#include "line.h"
#include "tp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_RULE_ROW(name, phrase) {#name, phrase},
const PlanRuleInfo plan_rules[PLAN_RULE_COUNT] = {PLAN_RULES(PLAN_RULE_ROW)};
#undef PLAN_RULE_ROW

int plan_rule_of(const char *why)
{
	int best = -1;
	size_t len = 0;
	for (int i = PLAN_RULE_FIRST_DEP; why && i < PLAN_RULE_COUNT; i++) {
		size_t n = strlen(plan_rules[i].phrase);
		if (n > len && !strncmp(why, plan_rules[i].phrase, n)) {
			best = i;
			len = n;
		}
	}
	return best;
}

/* The message in e, the fault's rule and where it is: its rule's phrase must be in it. */
static int fault(PlanError *e, int rule, const char *fmt, va_list ap)
{
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	e->rule = rule;
	if (rule >= PLAN_RULE_COUNT || (rule >= 0 && !strstr(e->msg, plan_rules[rule].phrase)))
	{
		fprintf(stderr, "%s:%d: internal error: verifier rule %d's message lacks its phrase: %s\n",
		        __FILE__, __LINE__, rule, e->msg);
		abort();
	}
	return -1;
}

int plan_vc_err(PlanVc *v, int rule, int rank, int64_t op, const char *fmt, ...)
{
	PlanError *e = v->err;
	e->rank = rank;
	e->op = op;
	e->line = 0;
	if (rank >= 0 && op >= 0 && v->p->ranks[rank].first_line > 0)
		e->line = v->p->ranks[rank].first_line + op;
	else if (rank >= 0)
		e->line = v->p->ranks[rank].line; // a fact about the rank: its `rank` line
	va_list ap;
	va_start(ap, fmt);
	fault(e, rule, fmt, ap);
	va_end(ap);
	return -1;
}

/* A violation on one line of the file: a route (rank -1) or a rank's peer entry. */
static int verr_line(PlanVc *v, int rule, int rank, int64_t line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int verr_line(PlanVc *v, int rule, int rank, int64_t line, const char *fmt, ...)
{
	PlanError *e = v->err;
	e->rank = rank;
	e->op = -1;
	e->line = line;
	va_list ap;
	va_start(ap, fmt);
	fault(e, rule, fmt, ap);
	va_end(ap);
	return -1;
}

/* The file lines of route i and of rank r's peer entry i; 0 for a plan not read. */
static int64_t route_line(const PlanVc *v, int i)
{
	return v->p->routes_line > 0 ? v->p->routes_line + i : 0;
}

static int64_t peer_line(const PlanVc *v, int r, int i)
{
	return v->p->ranks[r].line > 0 ? v->p->ranks[r].line + 1 + i : 0;
}

/* "rank 3 op 17 (line 240) `SEND act ...`" */
const char *plan_vc_opdesc(const PlanVc *v, int rank, int64_t i, char *buf, size_t n)
{
	const PlanRank *rk = &v->p->ranks[rank];
	char text[200];
	plan_format_op(v->p, &rk->ops[i], text, sizeof text);
	if (rk->first_line > 0)
		snprintf(buf, n, "rank %d op %lld (line %lld) `%s`", plan_vc_rank(v, rank),
		         (long long)i, (long long)(rk->first_line + i), text);
	else
		snprintf(buf, n, "rank %d op %lld `%s`", plan_vc_rank(v, rank), (long long)i, text);
	return buf;
}

static int check_routes(PlanVc *v)
{
	const Plan *p = v->p;
	for (int i = 0; i < p->nroutes; i++) {
		const PlanRoute *rt = &p->routes[i];
		const PlanEdge *e = &p->edges[rt->edge];
		int from = rt->dir == DIR_ACT ? e->src : e->dst;
		int to = rt->dir == DIR_ACT ? e->dst : e->src;
		int64_t at = route_line(v, i);
		const PlanRank *a = &p->ranks[rt->src_rank], *b = &p->ranks[rt->dst_rank];
		if (a->coord[DIM_PP] != p->stages[from].pp || b->coord[DIM_PP] != p->stages[to].pp ||
		    plan_vc_on_line(v, rt->src_rank, b->coord[DIM_PP]) != rt->dst_rank)
			return verr_line(v, PLAN_RULE_ROUTE_LINE, -1, at,
			                 "route %d of edge %d does not join the ranks of stages %d and %d "
			                 "on one pipeline line",
			                 i, rt->edge, from, to);
		if (rt->src_dev != a->device || rt->dst_dev != b->device)
			return verr_line(v, PLAN_RULE_ROUTE_DEVICES, -1, at,
			                 "route %d names devices d%d->d%d but the ranks use d%d->d%d", i,
			                 rt->src_dev, rt->dst_dev, a->device, b->device);
		/* The inverse leaves the rank its forward route enters, on the same edge; its other
		 * end and both devices follow, as every route (the forward one too, in this
		 * loop) joins its edge's stages on one pipeline line on its ranks' devices. */
		if (rt->dir == DIR_GRAD) {
			const PlanRoute *f = &p->routes[rt->inverse_of];
			if (f->dir != DIR_ACT || f->edge != rt->edge || f->dst_rank != rt->src_rank)
				return verr_line(v, PLAN_RULE_ROUTE_INVERSE, -1, at,
				                 "backward route %d is not the inverse of forward route %d",
				                 i, rt->inverse_of);
		}
	}
	return 0;
}

static int check_peers(PlanVc *v, unsigned char *seen)
{
	const Plan *p = v->p;
	for (int r = 0; r < p->world; r++) {
		const PlanRank *rk = &p->ranks[r];
		for (int i = 0; i < rk->npeers; i++) {
			const PlanPeer *pe = &rk->peers[i];
			const PlanEdge *e = &p->edges[pe->edge];
			int me = pe->in ? e->dst : e->src, other = pe->in ? e->src : e->dst;
			int64_t at = peer_line(v, r, i);
			if (pe->stage != me)
				return verr_line(v, PLAN_RULE_PEER_STAGE, r, at,
				                 "rank %d: peer entry %d says edge %d %s stage %d, but it %s "
				                 "stage %d",
				                 plan_vc_rank(v, r), i, pe->edge, pe->in ? "enters" : "leaves",
				                 pe->stage, pe->in ? "enters" : "leaves", me);
			if (p->stages[me].pp != rk->coord[DIM_PP])
				return verr_line(v, PLAN_RULE_PEER_PLACED, r, at,
				                 "rank %d: peer entry %d registers stage %d, which is not "
				                 "placed on this rank",
				                 plan_vc_rank(v, r), i, me);
			int q = plan_vc_on_line(v, r, p->stages[other].pp);
			int want = q != r ? PEER_REMOTE : v->eself[pe->edge] ? PEER_SELF : PEER_LOCAL;
			if (pe->peer_stage != other || pe->peer_rank != q || pe->local != want)
				return verr_line(v, PLAN_RULE_PEER_NAMES, r, at,
				                 "rank %d: peer entry %d for edge %d should name stage %d on "
				                 "rank %d (%s)",
				                 plan_vc_rank(v, r), i, pe->edge, other, plan_vc_rank(v, q),
				                 plan_peer_names[want]);
			unsigned char bit = pe->in ? 1 : 2;
			if (seen[pe->edge] & bit)
				return verr_line(v, PLAN_RULE_PEER_TWICE, r, at,
						"rank %d: edge %d registered twice for stage %d",
				                 plan_vc_rank(v, r), pe->edge, me);
			seen[pe->edge] |= bit;
		}
		for (int e = 0; e < p->nedges; e++) {
			const PlanEdge *ed = &p->edges[e];
			if (p->stages[ed->src].pp == rk->coord[DIM_PP]) {
				if (!(seen[e] & 2))
					return plan_vc_err(v, PLAN_RULE_PEER_MISSING, r, -1,
							"rank %d: no peer registered for edge %d leaving "
					                      "stage %d",
					            plan_vc_rank(v, r), e, ed->src);
			}
			if (p->stages[ed->dst].pp == rk->coord[DIM_PP]) {
				if (!(seen[e] & 1))
					return plan_vc_err(v, PLAN_RULE_PEER_MISSING, r, -1,
							"rank %d: no peer registered for edge %d entering "
					                      "stage %d",
					            plan_vc_rank(v, r), e, ed->dst);
			}
		}
		for (int i = 0; i < rk->npeers; i++)
			seen[rk->peers[i].edge] = 0;
	}
	return 0;
}

/* Collectives.  NCCL, like MPI, has no tags: the k-th collective a member issues on a
 * communicator meets the k-th of every other member.  So every member of a dp or tp
 * group issues the same sequence of collectives over it, alike in kind, stage,
 * microbatch, direction and part; each rank is compared with its group's first member
 * (coordinate 0).  Their sizes are then alike too: the dependency walk holds each to
 * its stage's gradients or its part's all-reduce, and reports a wrong one there.  Out
 * of order, the members would sum different tensors (MPI, NCCL) or wait for each other
 * forever; the simulator, which matches collectives by what they are, would call it a
 * deadlock. */
static int check_collectives(PlanVc *v)
{
	static const struct {
		uint8_t over; // OP_OVER_*
		int dim;
	} comms[] = {{OP_OVER_DP, DIM_DP}, {OP_OVER_TP, DIM_TP}};
	const Plan *p = v->p;
	for (size_t c = 0; c < sizeof comms / sizeof comms[0]; c++) {
		int dim = comms[c].dim, over = comms[c].over;
		if (p->dims[dim] == 1)
			continue;
		for (int r = 0; r < p->world; r++) {
			const PlanRank *rk = &p->ranks[r];
			if (rk->coord[dim] == 0)
				continue;
			int co[DIM_COUNT];
			memcpy(co, rk->coord, sizeof co);
			co[dim] = 0;
			int r0 = plan_rank_of(p, co);
			const PlanRank *k0 = &p->ranks[r0];
			int64_t j = 0, i = 0;
			for (int64_t k = 0;; i++, j++, k++) {
				while (i < rk->nops && plan_ops[rk->ops[i].kind].over != over)
					i++;
				while (j < k0->nops && plan_ops[k0->ops[j].kind].over != over)
					j++;
				char x[300], y[300];
				if (i == rk->nops && j == k0->nops)
					break;
				if (i == rk->nops || j == k0->nops) {
					int lr = i == rk->nops ? r0 : r;
					int64_t li = i == rk->nops ? j : i;
					return plan_vc_err(v, PLAN_RULE_COLL_PART, lr, li,
					                   "%s is reached by only part of its %s group: rank %d "
					                   "has no matching %s",
					                   plan_vc_opdesc(v, lr, li, x, sizeof x),
					                   plan_dim_names[dim], plan_vc_rank(v, lr == r ? r0 : r),
					                   plan_ops[(lr == r ? rk : k0)->ops[li].kind].name);
				}
				const PlanOp *a = &rk->ops[i], *b = &k0->ops[j];
				if (a->kind != b->kind || a->stage != b->stage || a->mb != b->mb ||
				    a->dir != b->dir || a->part != b->part)
					return plan_vc_err(v, PLAN_RULE_COLL_ORDER, r, i,
					                   "%s is collective %lld over its %s group, where the "
					                   "group's first member has %s: collectives differ "
					                   "(the members pair them by order)",
					                   plan_vc_opdesc(v, r, i, x, sizeof x), (long long)k,
					                   plan_dim_names[dim], plan_vc_opdesc(v, r0, j, y, sizeof y));
			}
		}
	}
	return 0;
}

/* The tied table's copies (plan_tie_across): a head keeps a copy (`copy`) exactly when
 * it is tied to an embedding on another pipeline rank; every TIEREDUCE names the rank
 * holding the other copy, its own stage of the table and the table's size, and the two
 * ranks of a pair issue as many. */
static int check_tie(PlanVc *v)
{
	const Plan *p = v->p;
	int e, h, across = plan_tie_across(p, &e, &h);
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			const PlanLayer *ly = &p->stages[s].layers[l];
			int copy = (ly->flags & LAYER_FLAG(LAYER_KEY_COPY)) != 0;
			int want = across && s == h && ly->kind == LAYER_HEAD;
			if (copy != want)
				return plan_vc_err(v, want ? PLAN_RULE_TIE_COPY : PLAN_RULE_TIE_NOCOPY, -1, -1,
				                   "stage %d layer %d: %s", s, l,
				            want ? "a head tied to the embedding on another pipeline rank "
				                   "must keep its own copy of the table (`copy`)"
				                 : "`copy` on a head that is not tied to an embedding on "
				                   "another pipeline rank");
		}
	int64_t bytes = plan_tie_bytes(p);
	for (int r = 0; r < p->world && v->ntie; r++) { // no TIEREDUCE: no count to compare
		const PlanRank *rk = &p->ranks[r];
		int st, q = plan_tie_peer(p, r, &st);
		int64_t n = 0;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (plan_ops[o->kind].over != OP_OVER_TIE)
				continue;
			char x[300];
			n++;
			if (q < 0)
				return plan_vc_err(v, PLAN_RULE_TIE_NONE, r, i,
						"%s: rank %d holds no table tied across pipeline ranks",
				            plan_vc_opdesc(v, r, i, x, sizeof x), plan_vc_rank(v, r));
			if (o->stage != st)
				return plan_vc_err(v, PLAN_RULE_TIE_STAGE, r, i,
				                   "%s: the tied table's copy on this rank is stage %d "
				                   "(want s=%d)",
				                   plan_vc_opdesc(v, r, i, x, sizeof x), st, st);
			if (o->peer != q)
				return plan_vc_err(v, PLAN_RULE_TIE_PEER, r, i,
				                   "%s: the tied table's other copy is on rank %d "
				                   "(want with=%d)",
				                   plan_vc_opdesc(v, r, i, x, sizeof x), plan_vc_rank(v, q),
				                   plan_vc_rank(v, q));
			if (plan_op_bytes(p, o) != bytes)
				return plan_vc_err(v, PLAN_RULE_TIE_BYTES, r, i,
						"%s: the tied table's gradient is %lld bytes",
				            plan_vc_opdesc(v, r, i, x, sizeof x), (long long)bytes);
		}
		int64_t nq = 0;
		for (int64_t i = 0; q >= 0 && i < p->ranks[q].nops; i++)
			nq += plan_ops[p->ranks[q].ops[i].kind].over == OP_OVER_TIE;
		if (q >= 0 && n != nq)
			return plan_vc_err(v, PLAN_RULE_TIE_COUNT, r, -1,
					"rank %d has %lld TIEREDUCE ops but rank %d, which holds the "
			            "other copy of the tied table, has %lld", plan_vc_rank(v, r), (long long)n,
			            plan_vc_rank(v, q),
			            (long long)nq);
	}
	return 0;
}

int plan_verify(const Plan *p, PlanError *err)
{
	memset(err, 0, sizeof *err);
	err->rank = -1;
	err->op = -1;
	err->rule = -1;
	PlanVc v = {.p = p, .err = err, .stop = PLAN_VC_NONE};
	v.pp_stride = p->line ? 1 : plan_pp_stride(p); // a line plan's ranks are pp indices
	for (int s = 0; s < p->nstages; s++)
		if (p->stages[s].pp < 0 || p->stages[s].pp >= p->dims[DIM_PP])
			return plan_vc_err(&v, PLAN_RULE_STAGE_PP, -1, -1,
					"stage %d is placed on pp index %d, outside the mesh",
			                   s, p->stages[s].pp);
	unsigned char *seen = calloc((size_t)p->nedges + 1, 1);
	v.in_off = calloc((size_t)p->nstages + 1, sizeof(int));
	v.out_off = calloc((size_t)p->nstages + 1, sizeof(int));
	v.in_edges = malloc(((size_t)p->nedges + 1) * sizeof(int));
	v.out_edges = malloc(((size_t)p->nedges + 1) * sizeof(int));
	int rc = 0;
	if (!seen || !v.in_off || !v.out_off || !v.in_edges || !v.out_edges) {
		rc = plan_vc_err(&v, -1, -1, -1, "out of memory");
		goto out;
	}
	for (int e = 0; e < p->nedges; e++) {
		v.in_off[p->edges[e].dst + 1]++;
		v.out_off[p->edges[e].src + 1]++;
	}
	for (int s = 0; s < p->nstages; s++) {
		v.in_off[s + 1] += v.in_off[s];
		v.out_off[s + 1] += v.out_off[s];
	}
	int *fill = calloc((size_t)p->nstages + 1, 2 * sizeof(int));
	if (!fill) {
		rc = plan_vc_err(&v, -1, -1, -1, "out of memory");
		goto out;
	}
	for (int e = 0; e < p->nedges; e++) {
		int a = p->edges[e].src, b = p->edges[e].dst;
		v.out_edges[v.out_off[a] + fill[2 * a]++] = e;
		v.in_edges[v.in_off[b] + fill[2 * b + 1]++] = e;
	}
	free(fill);
	v.eself = calloc((size_t)p->nedges + 1, 1);
	if (!v.eself) {
		rc = plan_vc_err(&v, -1, -1, -1, "out of memory");
		goto out;
	}
	for (int i = 0; i < p->nroutes; i++)
		if (p->routes[i].src_rank == p->routes[i].dst_rank)
			v.eself[p->routes[i].edge] = 1;
	if (p->dims[DIM_TP] > 1) {
		v.parts = calloc((size_t)p->nstages, sizeof *v.parts);
		if (!v.parts) {
			rc = plan_vc_err(&v, -1, -1, -1, "out of memory");
			goto out;
		}
		for (int s = 0; s < p->nstages; s++)
			if (plan_stage_parts(p, s, &v.parts[s])) {
				for (int t = 0; t < s; t++)
					plan_parts_free(&v.parts[t]);
				free(v.parts);
				v.parts = NULL;
				rc = plan_vc_err(&v, -1, -1, -1, "out of memory");
				goto out;
			}
	}
	rc = check_routes(&v);
	if (!rc)
		rc = check_peers(&v, seen);
	if (!rc)
		rc = plan_vc_ops(&v);
	if (!rc && v.stop <= PLAN_VC_MATCH)
		rc = -1;
	if (!rc)
		rc = check_collectives(&v);
	if (!rc)
		rc = check_tie(&v);
	if (!rc && v.stop < PLAN_VC_NONE)
		rc = -1; // the walk's dependency fault, in *err
out:
	for (int s = 0; v.parts && s < p->nstages; s++)
		plan_parts_free(&v.parts[s]);
	free(v.parts);
	free(seen);
	free(v.eself);
	free(v.in_off);
	free(v.out_off);
	free(v.in_edges);
	free(v.out_edges);
	return rc;
}
