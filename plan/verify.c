/* The plan verifier: the invariants of docs/plan-format.md, "Invariants", checked in
 * time linear in the number of ops.  pipecc runs it after lowering (a failure there is
 * a compiler bug), pipesim and piperun after reading (a failure there is a bad plan).
 *
 * Passes: header (routes), peer tables, groups, point-to-point matching and
 * collectives, then per-rank dependencies.  Matching runs before dependencies so that a
 * wrong-size or misordered transfer is reported with both of its ops.  The first
 * violation found is reported; messages name ops as `rank R op I (line L) \`TEXT\``. */
#include "plan.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const Plan *p;
	PlanError *err;
	int64_t pp_stride; // world-rank distance between neighbours along pp
	int *in_off, *in_edges;   // CSR: edges entering each stage
	int *out_off, *out_edges; // CSR: edges leaving each stage
	unsigned char *eself;     // per edge: sent to self (a route joins a rank to itself)
	PlanParts *parts;         // per stage, when tp > 1 (else NULL)
	/* Counted by check_groups, the first pass over every op, so that later passes over
	 * ops of a kind the plan lacks (self sends, TIEREDUCE) can be skipped. */
	int64_t nself;            // SEND and RECV ops whose peer is their own rank
	int64_t ntie;             // TIEREDUCE ops
} Vc;

static int verr(Vc *v, int rank, int64_t op, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int verr(Vc *v, int rank, int64_t op, const char *fmt, ...)
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
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
}

/* A violation on one line of the file: a route (rank -1) or a rank's peer entry. */
static int verr_line(Vc *v, int rank, int64_t line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int verr_line(Vc *v, int rank, int64_t line, const char *fmt, ...)
{
	PlanError *e = v->err;
	e->rank = rank;
	e->op = -1;
	e->line = line;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
}

/* The file lines of route i and of rank r's peer entry i; 0 for a plan not read. */
static int64_t route_line(const Vc *v, int i)
{
	return v->p->routes_line > 0 ? v->p->routes_line + i : 0;
}

static int64_t peer_line(const Vc *v, int r, int i)
{
	return v->p->ranks[r].line > 0 ? v->p->ranks[r].line + 1 + i : 0;
}

/* "rank 3 op 17 (line 240) `SEND act ...`" */
static const char *opdesc(const Vc *v, int rank, int64_t i, char *buf, size_t n)
{
	const PlanRank *rk = &v->p->ranks[rank];
	char text[200];
	plan_format_op(v->p, &rk->ops[i], text, sizeof text);
	if (rk->first_line > 0)
		snprintf(buf, n, "rank %d op %lld (line %lld) `%s`", rank, (long long)i,
		         (long long)(rk->first_line + i), text);
	else
		snprintf(buf, n, "rank %d op %lld `%s`", rank, (long long)i, text);
	return buf;
}

/* The world rank on rank r's pipeline line at pipeline index pp. */
static int on_line(const Vc *v, int r, int pp)
{
	return r + (int)((pp - v->p->ranks[r].coord[DIM_PP]) * v->pp_stride);
}

static int check_routes(Vc *v)
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
		    on_line(v, rt->src_rank, b->coord[DIM_PP]) != rt->dst_rank)
			return verr_line(v, -1, at,
			                 "route %d of edge %d does not join the ranks of stages %d and %d "
			                 "on one pipeline line",
			                 i, rt->edge, from, to);
		if (rt->src_dev != a->device || rt->dst_dev != b->device)
			return verr_line(v, -1, at,
			                 "route %d names devices d%d->d%d but the ranks use d%d->d%d", i,
			                 rt->src_dev, rt->dst_dev, a->device, b->device);
		if (rt->dir == DIR_GRAD) {
			const PlanRoute *f = &p->routes[rt->inverse_of];
			if (f->dir != DIR_ACT || f->edge != rt->edge || f->src_rank != rt->dst_rank ||
			    f->dst_rank != rt->src_rank || f->src_dev != rt->dst_dev ||
			    f->dst_dev != rt->src_dev)
				return verr_line(v, -1, at,
				                 "backward route %d is not the inverse of forward route %d",
				                 i, rt->inverse_of);
		}
	}
	return 0;
}

static int check_peers(Vc *v, unsigned char *seen)
{
	const Plan *p = v->p;
	for (int r = 0; r < p->world; r++) {
		const PlanRank *rk = &p->ranks[r];
		int have = 0, want = 0;
		for (int i = 0; i < rk->npeers; i++) {
			const PlanPeer *pe = &rk->peers[i];
			const PlanEdge *e = &p->edges[pe->edge];
			int me = pe->in ? e->dst : e->src, other = pe->in ? e->src : e->dst;
			int64_t at = peer_line(v, r, i);
			if (pe->stage != me)
				return verr_line(v, r, at,
				                 "rank %d: peer entry %d says edge %d %s stage %d, but it %s "
				                 "stage %d",
				                 r, i, pe->edge, pe->in ? "enters" : "leaves", pe->stage,
				                 pe->in ? "enters" : "leaves", me);
			if (p->stages[me].pp != rk->coord[DIM_PP])
				return verr_line(v, r, at,
				                 "rank %d: peer entry %d registers stage %d, which is not "
				                 "placed on this rank",
				                 r, i, me);
			int q = on_line(v, r, p->stages[other].pp);
			int want = q != r ? PEER_REMOTE : v->eself[pe->edge] ? PEER_SELF : PEER_LOCAL;
			if (pe->peer_stage != other || pe->peer_rank != q || pe->local != want)
				return verr_line(v, r, at,
				                 "rank %d: peer entry %d for edge %d should name stage %d on "
				                 "rank %d (%s)",
				                 r, i, pe->edge, other, q, plan_peer_names[want]);
			unsigned char bit = pe->in ? 1 : 2;
			if (seen[pe->edge] & bit)
				return verr_line(v, r, at, "rank %d: edge %d registered twice for stage %d",
				                 r, pe->edge, me);
			seen[pe->edge] |= bit;
			have++;
		}
		for (int e = 0; e < p->nedges; e++) {
			const PlanEdge *ed = &p->edges[e];
			if (p->stages[ed->src].pp == rk->coord[DIM_PP]) {
				want++;
				if (!(seen[e] & 2))
					return verr(v, r, -1, "rank %d: no peer registered for edge %d leaving "
					                      "stage %d",
					            r, e, ed->src);
			}
			if (p->stages[ed->dst].pp == rk->coord[DIM_PP]) {
				want++;
				if (!(seen[e] & 1))
					return verr(v, r, -1, "rank %d: no peer registered for edge %d entering "
					                      "stage %d",
					            r, e, ed->dst);
			}
		}
		for (int i = 0; i < rk->npeers; i++)
			seen[rk->peers[i].edge] = 0;
		if (have != want)
			return verr(v, r, -1, "rank %d: %d peer entries, expected %d", r, have, want);
	}
	return 0;
}

/* ALLREDUCE and TIEREDUCE: collectives, each alone in its group. */
static int is_coll(int kind)
{
	return kind == OP_ALLREDUCE || kind == OP_TIEREDUCE || kind == OP_TPREDUCE;
}

static int check_groups(Vc *v)
{
	const Plan *p = v->p;
	for (int r = 0; r < p->world; r++) {
		const PlanRank *rk = &p->ranks[r];
		int64_t last = -1, prev_comm = 0;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (!plan_is_comm(o->kind)) {
				prev_comm = 0;
				continue;
			}
			v->nself += (o->kind == OP_SEND || o->kind == OP_RECV) && o->peer == r;
			v->ntie += o->kind == OP_TIEREDUCE;
			if (prev_comm && o->group == last) {
				const PlanOp *c = is_coll(o->kind) ? o : &rk->ops[i - 1];
				if (is_coll(c->kind)) {
					char a[300];
					return verr(v, r, i, "%s: a%s %s must be alone in its group",
					            opdesc(v, r, i, a, sizeof a),
					            c->kind == OP_ALLREDUCE ? "n" : "", plan_ops[c->kind].name);
				}
			} else if (o->group <= last) {
				char a[300];
				return verr(v, r, i, "%s: group numbers must increase along a rank's list "
				                     "(group %d follows group %lld)",
				            opdesc(v, r, i, a, sizeof a), o->group, (long long)last);
			}
			last = o->group;
			prev_comm = 1;
		}
	}
	return 0;
}

/* Sends to self: the k-th SEND to self of a rank pairs with its k-th RECV from self
 * (FIFO), and the two must share a group.  A rank waits for a group before it posts the
 * next, and a send completes only once its receive is posted (rendezvous), so a send to
 * self whose receive is in another group can never complete. */
static int check_self(Vc *v)
{
	const Plan *p = v->p;
	int64_t *sends = NULL, cap = 0;
	int rc = 0;
	if (!v->nself) // nothing to pair
		return 0;
	for (int r = 0; r < p->world && !rc; r++) {
		const PlanRank *rk = &p->ranks[r];
		int64_t ns = 0, nr = 0;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (o->kind != OP_SEND || o->peer != r)
				continue;
			if (ns == cap) {
				cap = cap ? 2 * cap : 64;
				int64_t *n = realloc(sends, (size_t)cap * sizeof *n);
				if (!n) {
					rc = verr(v, -1, -1, "out of memory");
					break;
				}
				sends = n;
			}
			sends[ns++] = i;
		}
		char a[300];
		for (int64_t i = 0; i < rk->nops && !rc; i++) {
			const PlanOp *o = &rk->ops[i];
			if (o->kind != OP_RECV || o->peer != r)
				continue;
			if (nr == ns)
				rc = verr(v, r, i, "%s: a receive from self without its SEND to self in the "
				                   "same group",
				          opdesc(v, r, i, a, sizeof a));
			else if (rk->ops[sends[nr]].group != o->group)
				rc = verr(v, r, sends[nr], "%s: a send to self must be in the group of its "
				                           "RECV from self (group %d), or it never completes",
				          opdesc(v, r, sends[nr], a, sizeof a), o->group);
			nr++;
		}
		if (!rc && nr < ns)
			rc = verr(v, r, sends[nr], "%s: a send to self without its RECV from self in the "
			                           "same group, so it never completes",
			          opdesc(v, r, sends[nr], a, sizeof a));
	}
	free(sends);
	return rc;
}

/* Point-to-point matching, FIFO per ordered pair. */
typedef struct {
	int peer;       // the receiving rank
	int64_t start;  // this pair's sends begin at sends[start]
	int64_t n;      // how many
	int64_t used;   // how many receives have met one
} Pair;

/* The pair (rank's pairs are pairs[lo..hi)) whose peer is q, or -1.  Ranks talk to few
 * peers, so a linear search beats anything cleverer. */
static int64_t find_pair(const Pair *pairs, int64_t lo, int64_t hi, int q)
{
	for (int64_t i = lo; i < hi; i++)
		if (pairs[i].peer == q)
			return i;
	return -1;
}

/* find_pair, trying first the pair found last (consecutive messages mostly share one). */
static int64_t find_pair_near(const Pair *pairs, int64_t lo, int64_t hi, int q, int64_t last)
{
	return last >= 0 && pairs[last].peer == q ? last : find_pair(pairs, lo, hi, q);
}

/* A pair's sends lie on another rank's list, a cache miss each: fetch four ahead. */
static inline void fetch_ahead(const Plan *p, int a, const Pair *pa, const int64_t *sends,
                               int64_t pos)
{
	if (pos + 4 < pa->n)
		__builtin_prefetch(&p->ranks[a].ops[sends[pa->start + pos + 4]]);
}

/* check_matching's pass 3: the k-th RECV on b from a meets the k-th SEND on a to b
 * (pairs from off[a], each pair's sends in list order), and no SEND is left over. */
static int match_recvs(Vc *v, Pair *pairs, const int64_t *off, const int64_t *sends)
{
	const Plan *p = v->p;
	int W = p->world;
	for (int b = 0; b < W; b++) {
		const PlanRank *rk = &p->ranks[b];
		int last_a = -1;
		int64_t last_k = -1;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (o->kind != OP_RECV)
				continue;
			int a = o->peer;
			int64_t k = a == last_a ? last_k : find_pair(pairs, off[a], off[a + 1], b);
			last_a = a;
			last_k = k;
			char x[300], y[300];
			if (k < 0 || pairs[k].used == pairs[k].n) {
				int64_t n = k < 0 ? 0 : pairs[k].n;
				verr(v, b, i, "%s has no matching SEND: rank %d sends only %lld message%s to "
				              "rank %d",
				     opdesc(v, b, i, x, sizeof x), a, (long long)n, n == 1 ? "" : "s", b);
				return -1;
			}
			int64_t pos = pairs[k].used++;
			int64_t si2 = sends[pairs[k].start + pos];
			const PlanOp *s = &p->ranks[a].ops[si2];
			fetch_ahead(p, a, &pairs[k], sends, pos);
			const char *what = s->stage != o->stage ? "edges"
			                   : s->mb != o->mb     ? "microbatches"
			                   : s->dir != o->dir   ? "directions"
			                   : s->bytes != o->bytes ? "sizes"
			                                          : NULL;
			if (what) {
				verr(v, b, i, "%s is matched (FIFO position %lld from rank %d to rank %d) "
				              "with %s: the %s differ",
				     opdesc(v, a, si2, x, sizeof x), (long long)pos, a, b,
				     opdesc(v, b, i, y, sizeof y), what);
				return -1;
			}
		}
	}
	for (int a = 0; a < W; a++)
		for (int64_t k = off[a]; k < off[a + 1]; k++)
			if (pairs[k].used < pairs[k].n) {
				int64_t si2 = sends[pairs[k].start + pairs[k].used];
				char x[300];
				verr(v, a, si2, "%s has no matching RECV on rank %d",
				     opdesc(v, a, si2, x, sizeof x), pairs[k].peer);
				return -1;
			}
	return 0;
}

static int check_matching(Vc *v)
{
	const Plan *p = v->p;
	int W = p->world;
	int rc = -1;
	int64_t *off = calloc((size_t)W + 1, sizeof *off); // rank -> its first pair
	int64_t npairs = 0, cap = 64, nsends = 0;
	Pair *pairs = malloc((size_t)cap * sizeof *pairs);
	int64_t *sends = NULL;
	if (!off || !pairs) {
		verr(v, -1, -1, "out of memory");
		goto out;
	}
	/* Pass 1: the pairs of each rank and their send counts. */
	for (int r = 0; r < W; r++) {
		const PlanRank *rk = &p->ranks[r];
		off[r] = npairs;
		int64_t last = -1;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (o->kind != OP_SEND)
				continue;
			int64_t k = find_pair_near(pairs, off[r], npairs, o->peer, last);
			if (k < 0) {
				if (npairs == cap) {
					Pair *np = realloc(pairs, (size_t)(cap *= 2) * sizeof *pairs);
					if (!np) {
						verr(v, -1, -1, "out of memory");
						goto out;
					}
					pairs = np;
				}
				k = npairs++;
				pairs[k] = (Pair){.peer = o->peer};
			}
			pairs[k].n++;
			nsends++;
			last = k;
		}
	}
	off[W] = npairs;
	for (int64_t k = 0, at = 0; k < npairs; k++) {
		pairs[k].start = at;
		at += pairs[k].n;
		pairs[k].n = 0; // refilled below
	}
	/* Pass 2: each pair's sends in list order. */
	sends = malloc((size_t)(nsends ? nsends : 1) * sizeof *sends);
	if (!sends) {
		verr(v, -1, -1, "out of memory");
		goto out;
	}
	for (int r = 0; r < W; r++) {
		const PlanRank *rk = &p->ranks[r];
		int64_t last = -1;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (o->kind != OP_SEND)
				continue;
			int64_t k = find_pair_near(pairs, off[r], off[r + 1], o->peer, last);
			sends[pairs[k].start + pairs[k].n++] = i;
			last = k;
		}
	}

	if (match_recvs(v, pairs, off, sends))
		goto out;
	rc = 0;
out:
	free(off);
	free(pairs);
	free(sends);
	return rc;
}

/* Collectives: every dp group member issues the same sequence of all-reduces. */
static int check_collectives(Vc *v)
{
	const Plan *p = v->p;
	int W = p->world;
	if (p->dims[DIM_DP] == 1)
		return 0;
	for (int r = 0; r < W; r++) {
		const PlanRank *rk = &p->ranks[r];
		if (rk->coord[DIM_DP] == 0)
			continue;
		int c[DIM_COUNT];
		memcpy(c, rk->coord, sizeof c);
		c[DIM_DP] = 0;
		int r0 = plan_rank_of(p, c);
		const PlanRank *k0 = &p->ranks[r0];
		int64_t j = 0, i = 0;
		for (;; i++, j++) {
			while (i < rk->nops && rk->ops[i].kind != OP_ALLREDUCE)
				i++;
			while (j < k0->nops && k0->ops[j].kind != OP_ALLREDUCE)
				j++;
			char x[300], y[300];
			if (i == rk->nops && j == k0->nops)
				break;
			if (i == rk->nops || j == k0->nops) {
				int lr = i == rk->nops ? r0 : r;
				int64_t li = i == rk->nops ? j : i;
				return verr(v, lr, li, "%s is reached by only part of its dp group: rank %d "
				            "has no matching ALLREDUCE",
				            opdesc(v, lr, li, x, sizeof x), lr == r ? r0 : r);
			}
			if (rk->ops[i].stage != k0->ops[j].stage || rk->ops[i].bytes != k0->ops[j].bytes)
				return verr(v, r, i, "%s meets %s in the dp group: stages or sizes differ",
				            opdesc(v, r, i, x, sizeof x), opdesc(v, r0, j, y, sizeof y));
		}
	}
	return 0;
}

/* The tied table's copies (plan_tie_across): a head keeps a copy (`copy`) exactly when
 * it is tied to an embedding on another pipeline rank; every TIEREDUCE names the rank
 * holding the other copy, its own stage of the table and the table's size, and the two
 * ranks of a pair issue as many. */
static int check_tie(Vc *v)
{
	const Plan *p = v->p;
	int e, h, across = plan_tie_across(p, &e, &h);
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			const PlanLayer *ly = &p->stages[s].layers[l];
			int copy = (ly->flags & LAYER_FLAG(LAYER_KEY_COPY)) != 0;
			int want = across && s == h && ly->kind == LAYER_HEAD;
			if (copy != want)
				return verr(v, -1, -1, "stage %d layer %d: %s", s, l,
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
			if (o->kind != OP_TIEREDUCE)
				continue;
			char x[300];
			n++;
			if (q < 0)
				return verr(v, r, i, "%s: rank %d holds no table tied across pipeline ranks",
				            opdesc(v, r, i, x, sizeof x), r);
			if (o->peer != q || o->stage != st)
				return verr(v, r, i, "%s: the tied table's copies are stage %d here and on "
				            "rank %d (want s=%d with=%d)", opdesc(v, r, i, x, sizeof x), st, q,
				            st, q);
			if (o->bytes != bytes)
				return verr(v, r, i, "%s: the tied table's gradient is %lld bytes",
				            opdesc(v, r, i, x, sizeof x), (long long)bytes);
		}
		int64_t nq = 0;
		for (int64_t i = 0; q >= 0 && i < p->ranks[q].nops; i++)
			nq += p->ranks[q].ops[i].kind == OP_TIEREDUCE;
		if (q >= 0 && n != nq)
			return verr(v, r, -1, "rank %d has %lld TIEREDUCE ops but rank %d, which holds the "
			            "other copy of the tied table, has %lld", r, (long long)n, q,
			            (long long)nq);
	}
	return 0;
}

/* The per-rank state of check_deps: which stages and edges are local, and what has run
 * of each local (stage, microbatch) in PLAN_DEP_MB bits. */
typedef struct {
	int r, pp, m, dp;
	int *loc;           // stage -> local index or -1
	int *eloc;          // edge -> local edge index or -1
	uint8_t *st;        // [local stage][mb]: PLAN_DEP_MB bits
	PlanPartState *ps;  // [local stage][mb]: how far its parts ran (tp > 1)
	uint8_t *rcv;       // [local edge][mb][dir]: received
	PlanStageDeps *sd;  // [local stage]
	int embed, head;    // plan_tie's stages, or -1
} Deps;

/* The state of the embedding stage a tied head's op of stage s writes into, or NULL. */
static PlanStageDeps *tied_of(Deps *d, int s)
{
	return s == d->head && s >= 0 ? &d->sd[d->loc[d->embed]] : NULL;
}

static uint8_t mb_state(const Deps *d, int stage, int mb)
{
	return d->st[(size_t)d->loc[stage] * d->m + mb];
}

/* What compute op o needs along its edges (the rows' PLAN_DEP_IN_ACT and _OUT_GRAD):
 * NULL when it is there, else why not, in x. */
static const char *edge_inputs(const Vc *v, const Deps *d, const PlanOp *o, char *x, size_t n)
{
	const Plan *p = v->p;
	uint16_t needs = plan_ops[o->kind].needs;
	int s = o->stage;
	for (int j = v->in_off[s]; (needs & PLAN_DEP_IN_ACT) && j < v->in_off[s + 1]; j++) {
		int e = v->in_edges[j], src = p->edges[e].src;
		if (d->loc[src] >= 0 && !v->eself[e] ? !(mb_state(d, src, o->mb) & PLAN_DEP_ACT)
		                     : !d->rcv[((size_t)d->eloc[e] * d->m + o->mb) * 2 + DIR_ACT]) {
			snprintf(x, n, "runs before its input on edge %d exists (%s)", e,
			         d->loc[src] >= 0 && !v->eself[e] ? "F of the local source stage comes later"
			                          : "no RECV act before it");
			return x;
		}
	}
	for (int j = v->out_off[s]; (needs & PLAN_DEP_OUT_GRAD) && j < v->out_off[s + 1]; j++) {
		int e = v->out_edges[j], dst = p->edges[e].dst;
		if (d->loc[dst] >= 0 && !v->eself[e] ? !(mb_state(d, dst, o->mb) & PLAN_DEP_GRAD)
		                     : !d->rcv[((size_t)d->eloc[e] * d->m + o->mb) * 2 + DIR_GRAD]) {
			snprintf(x, n, "runs before its output gradient on edge %d exists (%s)", e,
			         d->loc[dst] >= 0 && !v->eself[e] ? "backward of the local stage comes later"
			                          : "no RECV grad before it");
			return x;
		}
	}
	return NULL;
}

/* A SEND or RECV: its ends, peer, size and route, and a SEND's data produced. */
static const char *p2p_rule(const Vc *v, Deps *d, const PlanOp *o)
{
	const Plan *p = v->p;
	int r = d->r, s = o->stage;
	const PlanEdge *ed = &p->edges[s];
	int from = o->dir == DIR_ACT ? ed->src : ed->dst;
	int to = o->dir == DIR_ACT ? ed->dst : ed->src;
	int send = o->kind == OP_SEND;
	int mine = send ? from : to, theirs = send ? to : from;
	const PlanRoute *rt = &p->routes[o->route];
	int rsrc = send ? r : o->peer, rdst = send ? o->peer : r;
	if (d->loc[mine] < 0)
		return "the edge's stage at this end is not on this rank";
	if (o->peer != on_line(v, r, p->stages[theirs].pp))
		return "the peer is not the rank holding the other end of the edge";
	if (o->peer == r && !v->eself[s])
		return "a transfer to the same rank, on an edge its peer tables hand over locally";
	if (o->bytes != ed->bytes)
		return "its size differs from the edge's tensor";
	if (rt->edge != s || rt->dir != o->dir || rt->src_rank != rsrc || rt->dst_rank != rdst)
		return "its route does not match the edge, direction and ranks";
	if (send)
		return mb_state(d, mine, o->mb) & (o->dir == DIR_ACT ? PLAN_DEP_ACT : PLAN_DEP_GRAD)
		               ? NULL
		               : "sent before the compute that produces it";
	uint8_t *got = &d->rcv[((size_t)d->eloc[s] * d->m + o->mb) * 2 + o->dir];
	if (*got)
		return "received twice";
	*got = 1;
	return NULL;
}

/* A part of a tp > 1 stage (F, B, BW) or a TPREDUCE: the part rule, the first part's
 * inputs along edges, a TPREDUCE's size, and the dependency rules once a whole
 * forward or backward is done. */
static const char *part_rule(const Vc *v, Deps *d, const PlanOp *o, char *x, size_t n)
{
	const PlanParts *pp = &v->parts[o->stage];
	size_t at = (size_t)d->loc[o->stage] * d->m + o->mb;
	PlanPartState *ps = &d->ps[at];
	int dir = o->kind == OP_TPREDUCE ? o->dir : o->kind == OP_F ? DIR_ACT : DIR_GRAD;
	int first = o->kind != OP_TPREDUCE && ps->step[dir] == 0;
	if (o->kind == OP_TPREDUCE && o->part < pp->n[dir] &&
	    o->bytes != pp->part[dir][o->part].reduce && pp->part[dir][o->part].reduce) {
		snprintf(x, n, "its size differs from the part's all-reduce (%lld bytes)",
		         (long long)pp->part[dir][o->part].reduce);
		return x;
	}
	OpKind done;
	const char *bad = plan_part_apply(pp, o, d->st[at], ps, &done);
	if (!bad && first)
		bad = edge_inputs(v, d, o, x, n);
	if (!bad && done != OP_COUNT)
		bad = plan_dep_apply(done, &d->st[at], &d->sd[d->loc[o->stage]],
		                     tied_of(d, o->stage), d->m, d->dp);
	return bad;
}

/* Op i of rank d->r against the dependency rules; 0 or -1 (reported). */
static int dep_op(Vc *v, Deps *d, int64_t i)
{
	const Plan *p = v->p;
	const PlanOp *o = &p->ranks[d->r].ops[i];
	int s = o->stage;
	char x[300], y[300];
	const char *bad = NULL;
	switch (plan_op_kind(o)) {
	case OP_COUNT: // the reader takes known kinds only
		break;
	case OP_F:
	case OP_B:
	case OP_W:
	case OP_BW:
		if (d->loc[s] < 0)
			return verr(v, d->r, i, "%s: stage %d is not placed on rank %d (pp index %d)",
			            opdesc(v, d->r, i, x, sizeof x), s, d->r, d->pp);
		if (v->parts && o->kind != OP_W) {
			bad = part_rule(v, d, o, x, sizeof x);
			break;
		}
		bad = plan_dep_apply(plan_op_kind(o), &d->st[(size_t)d->loc[s] * d->m + o->mb],
		                     &d->sd[d->loc[s]], tied_of(d, s), d->m, d->dp);
		if (!bad)
			bad = edge_inputs(v, d, o, x, sizeof x);
		break;
	case OP_TPREDUCE:
		if (d->loc[s] < 0)
			bad = "the stage is not on this rank";
		else if (!v->parts)
			bad = "a TPREDUCE in a plan with tp=1";
		else
			bad = part_rule(v, d, o, x, sizeof x);
		break;
	case OP_SEND:
	case OP_RECV:
		bad = p2p_rule(v, d, o);
		break;
	case OP_ALLREDUCE:
	case OP_OPTIM:
	case OP_TIEREDUCE:
		if (d->loc[s] < 0)
			bad = "the stage is not on this rank";
		else if (o->kind == OP_ALLREDUCE && d->dp > 1 && o->bytes != p->stages[s].params * 4)
			bad = "its size differs from the stage's gradients";
		else
			bad = plan_dep_apply(plan_op_kind(o), NULL, &d->sd[d->loc[s]], NULL, d->m, d->dp);
		break;
	}
	return bad ? verr(v, d->r, i, "%s: %s", opdesc(v, d->r, i, y, sizeof y), bad) : 0;
}

/* After rank d->r's ops: every local stage ran all it must. */
static int dep_complete(Vc *v, Deps *d)
{
	int r = d->r;
	for (int s = 0; s < v->p->nstages; s++) {
		if (d->loc[s] < 0)
			continue;
		for (int mb = 0; mb < d->m; mb++) {
			uint8_t f = mb_state(d, s, mb);
			if ((f & PLAN_DEP_MB) != PLAN_DEP_MB)
				return verr(v, r, -1, "rank %d never runs %s of stage %d microbatch %d", r,
				            !(f & PLAN_DEP_ACT) ? "F" : (f & PLAN_DEP_GRAD) ? "W" : "the backward",
				            s, mb);
		}
		if (d->dp > 1 && !d->sd[d->loc[s]].reduced)
			return verr(v, r, -1, "rank %d never all-reduces the gradients of stage %d", r, s);
		if (!d->sd[d->loc[s]].stepped)
			return verr(v, r, -1, "rank %d never runs OPTIM for stage %d", r, s);
	}
	return 0;
}

/* Per-rank dependency order and completeness (plan_dep_apply's rules, and the data
 * along edges). */
static int check_deps(Vc *v)
{
	const Plan *p = v->p;
	int ns = p->nstages;
	Deps d = {.m = p->microbatches, .dp = p->dims[DIM_DP]};
	plan_tie(p, &d.embed, &d.head);
	d.loc = malloc((size_t)ns * sizeof *d.loc);
	d.eloc = malloc((size_t)p->nedges * sizeof *d.eloc + 1);
	int rc = -1;
	if (!d.loc || !d.eloc) {
		verr(v, -1, -1, "out of memory");
		goto out;
	}
	for (int r = 0; r < p->world; r++) {
		const PlanRank *rk = &p->ranks[r];
		int nloc = 0, neloc = 0;
		d.r = r;
		d.pp = rk->coord[DIM_PP];
		for (int s = 0; s < ns; s++)
			d.loc[s] = p->stages[s].pp == d.pp ? nloc++ : -1;
		for (int e = 0; e < p->nedges; e++) {
			const PlanEdge *ed = &p->edges[e];
			d.eloc[e] = (d.loc[ed->src] >= 0 || d.loc[ed->dst] >= 0) ? neloc++ : -1;
		}
		free(d.st);
		free(d.rcv);
		free(d.sd);
		free(d.ps);
		d.ps = calloc(v->parts ? (size_t)nloc * d.m + 1 : 1, sizeof *d.ps);
		d.st = calloc((size_t)nloc * d.m + 1, 1);
		d.rcv = calloc((size_t)neloc * d.m * 2 + 1, 1);
		d.sd = calloc((size_t)nloc + 1, sizeof *d.sd);
		if (!d.st || !d.rcv || !d.sd || !d.ps) {
			verr(v, -1, -1, "out of memory");
			goto out;
		}
		if (d.head >= 0 && (d.loc[d.head] >= 0) != (d.loc[d.embed] >= 0)) {
			verr(v, r, -1, "stage %d's head is tied to the embedding of stage %d, which is "
			     "on another rank", d.head, d.embed);
			goto out;
		}
		if (d.head >= 0 && d.loc[d.head] >= 0)
			d.sd[d.loc[d.embed]].tied = 1;
		int ts;
		if (plan_tie_peer(p, r, &ts) >= 0)
			d.sd[d.loc[ts]].tie = 1;
		for (int64_t i = 0; i < rk->nops; i++)
			if (dep_op(v, &d, i))
				goto out;
		if (dep_complete(v, &d))
			goto out;
	}
	rc = 0;
out:
	free(d.loc);
	free(d.eloc);
	free(d.st);
	free(d.ps);
	free(d.rcv);
	free(d.sd);
	return rc;
}

int plan_verify(const Plan *p, PlanError *err)
{
	memset(err, 0, sizeof *err);
	err->rank = -1;
	err->op = -1;
	Vc v = {.p = p, .err = err};
	v.pp_stride = p->line ? 1 : plan_pp_stride(p); // a line plan's ranks are pp indices
	for (int s = 0; s < p->nstages; s++)
		if (p->stages[s].pp < 0 || p->stages[s].pp >= p->dims[DIM_PP])
			return verr(&v, -1, -1, "stage %d is placed on pp index %d, outside the mesh", s,
			            p->stages[s].pp);
	unsigned char *seen = calloc((size_t)p->nedges + 1, 1);
	v.in_off = calloc((size_t)p->nstages + 1, sizeof(int));
	v.out_off = calloc((size_t)p->nstages + 1, sizeof(int));
	v.in_edges = malloc(((size_t)p->nedges + 1) * sizeof(int));
	v.out_edges = malloc(((size_t)p->nedges + 1) * sizeof(int));
	int rc = 0;
	if (!seen || !v.in_off || !v.out_off || !v.in_edges || !v.out_edges) {
		rc = verr(&v, -1, -1, "out of memory");
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
		rc = verr(&v, -1, -1, "out of memory");
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
		rc = verr(&v, -1, -1, "out of memory");
		goto out;
	}
	for (int i = 0; i < p->nroutes; i++)
		if (p->routes[i].src_rank == p->routes[i].dst_rank)
			v.eself[p->routes[i].edge] = 1;
	if (p->dims[DIM_TP] > 1) {
		v.parts = calloc((size_t)p->nstages, sizeof *v.parts);
		for (int s = 0; v.parts && s < p->nstages; s++)
			if (plan_stage_parts(p, s, &v.parts[s])) {
				for (int t = 0; t < s; t++)
					plan_parts_free(&v.parts[t]);
				free(v.parts);
				v.parts = NULL;
				rc = verr(&v, -1, -1, "out of memory");
				goto out;
			}
	}
	rc = check_routes(&v);
	if (!rc)
		rc = check_peers(&v, seen);
	if (!rc)
		rc = check_groups(&v);
	if (!rc)
		rc = check_self(&v);
	if (!rc)
		rc = check_matching(&v);
	if (!rc)
		rc = check_collectives(&v);
	if (!rc)
		rc = check_tie(&v);
	if (!rc)
		rc = check_deps(&v);
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
