/* How edges between stages travel, as far as the program says (docs/language.md,
 * "route" and "peers").  `peers` decides whether an edge whose two stages share a rank
 * is handed over in memory through the peer table (local, the default) or sent to self
 * through the communicator (self_send); its words are one table that the checker, the
 * command line and the help read.  `route` states an edge's ranks and devices in one
 * direction: front_route checks its words as the front end reads it; route_check, once
 * placement is known, checks its edge and ranks (a route picks devices, never moves a
 * stage), a direction stated twice, a pair that is not each other's inverse (error at
 * the later, note at the earlier), and devices that disagree, then makes the picked
 * devices the ranks' devices, from which lowering derives every route as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "place.h"
#include "program.h"

const char *const prog_same_rank_names[SAME_RANK_COUNT] = {"local", "self-send"};

/* The language spells the words with '_' (a name), the command line with '-'. */
static const char *const peers_words[SAME_RANK_COUNT] = {"local", "self_send"};

void front_peers(Diag *d, Program *p, const AstStmt *s)
{
	for (int k = 0; k < SAME_RANK_COUNT; k++)
		if (strcmp(s->name.s, peers_words[k]) == 0) {
			p->same_rank = k;
			p->same_rank_loc = s->name.loc;
			return;
		}
	const char *sug = diag_suggest(s->name.s, peers_words, SAME_RANK_COUNT);
	if (sug)
		diag_error(d, s->name.loc, "unknown peers setting '%s'; did you mean '%s'?", s->name.s,
		           sug);
	else
		diag_error(d, s->name.loc, "unknown peers setting '%s': expected 'local' or 'self_send'",
		           s->name.s);
}

/* ---- route statements ---------------------------------------------------------- */

static const char *const dir_words[DIR_COUNT] = {"forward", "backward"};

/* A world rank as written: plain digits, no sign, no unit. */
static int rank_number(Diag *d, const AstNum *n, int *out)
{
	const char *s = n->digits;
	if (n->bad)
		return -1;
	if (n->neg) {
		diag_error(d, n->loc, "a rank must not be negative");
		return -1;
	}
	if (n->unit[0]) {
		diag_error(d, n->loc, "a rank takes no unit");
		return -1;
	}
	long v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9') {
			diag_error(d, n->loc, "a rank must be a whole number");
			return -1;
		}
		v = v * 10 + (*s - '0');
		if (v > (1L << 20)) {
			diag_error(d, n->loc, "rank %s is too large", n->digits);
			return -1;
		}
	}
	*out = (int)v;
	return 0;
}

/* A device name: `d` and digits, as the plan writes it. */
static int device_name(Diag *d, const AstName *n, int *out)
{
	const char *s = n->s;
	long v = 0;
	int ok = s[0] == 'd' && s[1];
	for (s++; ok && *s; s++) {
		ok = *s >= '0' && *s <= '9';
		v = v * 10 + (*s - '0');
		ok = ok && v <= (1L << 16);
	}
	if (!ok) {
		diag_error(d, n->loc, "expected a device 'dN' (N from 0 to 65536), not '%s'", n->s);
		return -1;
	}
	*out = (int)v;
	return 0;
}

void front_route(Arena *a, Diag *d, Program *p, const AstStmt *s, int sa, int sb)
{
	if (!p->routes) {
		int n = 0;
		for (const AstStmt *t = s; t; t = t->next)
			n += t->kind == AST_ROUTE;
		p->routes = arena_alloc(a, (size_t)n * sizeof *p->routes);
	}
	const AstRoute *r = s->route;
	ProgRoute pr = {.a = sa, .b = sb, .edge = -1, .loc = s->span,
	                .edge_loc = ast_span(s->name.loc, s->name2.loc),
	                .end = {r->end[0], r->end[1]}};
	int bad = 0;
	pr.dir = -1;
	for (int k = 0; k < DIR_COUNT; k++)
		if (strcmp(r->dir.s, dir_words[k]) == 0)
			pr.dir = k;
	if (pr.dir < 0) {
		const char *sug = diag_suggest(r->dir.s, dir_words, DIR_COUNT);
		if (sug)
			diag_error(d, r->dir.loc, "unknown route direction '%s'; did you mean '%s'?",
			           r->dir.s, sug);
		else
			diag_error(d, r->dir.loc,
			           "unknown route direction '%s': expected 'forward' or 'backward'",
			           r->dir.s);
		bad = 1;
	}
	for (int k = 0; k < 2; k++) {
		bad |= rank_number(d, &r->rank[k], &pr.rank[k]) != 0;
		bad |= device_name(d, &r->dev[k], &pr.dev[k]) != 0;
	}
	if (!bad)
		p->routes[p->nroutes++] = pr;
}

/* World-rank arithmetic of the program's mesh (the plan's, before there is a plan). */
typedef struct {
	int world, pp, stride; // stride: world-rank distance between pipeline neighbours
} Mesh;

static int pp_of(const Mesh *m, int r)
{
	return r / m->stride % m->pp;
}

/* The world rank at pipeline index q on rank r's pipeline line. */
static int on_line(const Mesh *m, int r, int q)
{
	return r + (q - pp_of(m, r)) * m->stride;
}

static void fmt_route(const ProgRoute *r, char *buf, size_t n)
{
	snprintf(buf, n, "%d:d%d -> %d:d%d", r->rank[0], r->dev[0], r->rank[1], r->dev[1]);
}

/* The edge a route names, its ranks against the placement; 0 or 1 (reported). */
static int check_one(Program *pr, const int *stage_pp, const Mesh *m, Diag *d, ProgRoute *r)
{
	const char *an = pr->stages[r->a].name, *bn = pr->stages[r->b].name;
	r->edge = -1;
	if (r->b == r->a + 1)
		r->edge = r->a;
	for (int k = 0; k < pr->nskips && r->edge < 0; k++)
		if (pr->skips[k].src == r->a && pr->skips[k].dst == r->b)
			r->edge = pr->nstages - 1 + k;
	if (r->edge < 0) {
		diag_error(d, r->edge_loc,
		           "no edge '%s' -> '%s' to route: the chain joins consecutive stages and no "
		           "skip joins these",
		           an, bn);
		return 1;
	}
	int from = r->dir == DIR_ACT ? r->a : r->b, to = r->dir == DIR_ACT ? r->b : r->a;
	if (stage_pp[r->a] == stage_pp[r->b] && pr->same_rank != SAME_RANK_SELF_SEND) {
		diag_error(d, r->edge_loc,
		           "edge '%s' -> '%s' stays on pipeline rank %d: its stages hand over in "
		           "memory and it has no route (`peers self_send;` sends it through the "
		           "communicator)",
		           an, bn, stage_pp[r->a]);
		return 1;
	}
	const int stage[2] = {from, to};
	for (int k = 0; k < 2; k++) {
		if (r->rank[k] >= m->world) {
			diag_error(d, r->end[k], "world rank %d is outside the mesh (world %d)", r->rank[k],
			           m->world);
			return 1;
		}
	}
	for (int k = 0; k < 2; k++) {
		int want = stage_pp[stage[k]], at = pp_of(m, r->rank[k]);
		if (want == at && (k == 0 || on_line(m, r->rank[0], want) == r->rank[1]))
			continue;
		int right = on_line(m, r->rank[0], want);
		if (want != at)
			diag_error(d, r->end[k],
			           "stage '%s' runs on pipeline rank %d, but world rank %d is pipeline rank %d "
			           "(a route picks devices, it does not move stages)",
			           pr->stages[stage[k]].name, want, r->rank[k], at);
		else
			diag_error(d, r->end[k],
			           "world rank %d is not on the pipeline line of rank %d: there, stage '%s' "
			           "is on rank %d",
			           r->rank[k], r->rank[0], pr->stages[stage[k]].name, right);
		return 1;
	}
	return 0;
}

int route_check(Arena *a, Program *pr, const int *stage_pp, Diag *d)
{
	if (pr->nroutes == 0)
		return 0;
	Mesh m = {.world = pr->dims[DIM_PP] * pr->dims[DIM_DP] * pr->dims[DIM_TP],
	          .pp = pr->dims[DIM_PP], .stride = 1};
	for (int i = DIM_COUNT - 1; i >= 0 && pr->dim_order[i] != DIM_PP; i--)
		m.stride *= pr->dims[pr->dim_order[i]];
	int errors = 0;
	unsigned char *ok = arena_alloc(a, (size_t)pr->nroutes);
	int *dev = arena_alloc(a, (size_t)m.world * sizeof *dev); // device each rank ends up on
	int *dev_by = arena_alloc(a, (size_t)m.world * sizeof *dev_by); // the route that set it
	for (int r = 0; r < m.world; r++) {
		dev[r] = pr->ndevices == m.world ? pr->devices[r]
		                                 : r % (pr->device_per_node > 0 ? pr->device_per_node : 1);
		dev_by[r] = -1;
	}
	char x[96], y[96];
	for (int i = 0; i < pr->nroutes; i++) {
		ProgRoute *r = &pr->routes[i];
		if (check_one(pr, stage_pp, &m, d, r)) {
			errors++;
			continue;
		}
		ok[i] = 1;
		/* Earlier statements of the same edge on the same line: the same direction
		 * twice, or the two directions, one of which must invert the other. */
		int line = on_line(&m, r->rank[0], 0), bad = 0;
		for (int j = 0; j < i && !bad; j++) {
			const ProgRoute *q = &pr->routes[j];
			if (!ok[j] || q->edge != r->edge || on_line(&m, q->rank[0], 0) != line)
				continue;
			const char *an = pr->stages[r->a].name, *bn = pr->stages[r->b].name;
			if (q->dir == r->dir) {
				diag_error(d, r->loc,
				           "the %s route of edge '%s' -> '%s' on the pipeline line of rank "
				           "%d is stated twice",
				           dir_words[r->dir], an, bn, line);
				diag_note(d, q->loc, "first stated here");
				bad = 1;
			} else if (q->rank[0] != r->rank[1] || q->rank[1] != r->rank[0] ||
			           q->dev[0] != r->dev[1] || q->dev[1] != r->dev[0]) {
				fmt_route(r, x, sizeof x);
				ProgRoute inv = {.rank = {q->rank[1], q->rank[0]}, .dev = {q->dev[1], q->dev[0]}};
				fmt_route(&inv, y, sizeof y);
				diag_error(d, r->loc,
				           "the %s route %s of edge '%s' -> '%s' is not the inverse of its %s "
				           "route: expected %s",
				           dir_words[r->dir], x, an, bn, dir_words[q->dir], y);
				diag_note(d, q->loc, "the %s route is stated here", dir_words[q->dir]);
				bad = 1;
			}
		}
		/* The devices it picks: one per rank, and what a `devices` list says. */
		for (int k = 0; k < 2 && !bad; k++) {
			int rk = r->rank[k];
			if (pr->ndevices == m.world && dev[rk] != r->dev[k]) {
				diag_error(d, r->end[k],
				           "the route puts rank %d on device d%d, but the devices list puts it "
				           "on d%d",
				           rk, r->dev[k], dev[rk]);
				diag_note(d, pr->devices_loc, "the devices list is here");
				bad = 1;
			} else if (dev_by[rk] >= 0 && dev[rk] != r->dev[k]) {
				diag_error(d, r->end[k],
				           "the route puts rank %d on device d%d, but another route puts it "
				           "on d%d",
				           rk, r->dev[k], dev[rk]);
				diag_note(d, pr->routes[dev_by[rk]].loc, "the other route is here");
				bad = 1;
			} else {
				dev[rk] = r->dev[k];
				dev_by[rk] = i;
			}
		}
		if (bad) {
			ok[i] = 0;
			errors++;
		}
	}
	if (!errors) { // the devices routes pick become the ranks' devices
		pr->devices = arena_alloc(a, (size_t)m.world * sizeof *pr->devices);
		memcpy(pr->devices, dev, (size_t)m.world * sizeof *dev);
		pr->ndevices = m.world;
	}
	return errors;
}
