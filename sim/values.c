/* The overlap model's values in flight between a rank's two streams: a completed
 * receive (what a compute op consumes), a produced tensor (what a send transmits), a
 * completed all-reduce.  Each is a key (sim_int.h: KEY_RECV, KEY_DATA, KEY_AR, the tp
 * keys) with the time it became ready, the op that made it ready and the consumers
 * still to come; the last consumer removes it.
 *
 * Almost every value is a receive or a tensor of one (edge or stage, direction) and a
 * microbatch in [0, m): a class and a microbatch.  Those live in a ring per class on
 * the rank that owns the class (the pp index of the stage or of the edge's consuming
 * end), indexed by microbatch modulo its size, which doubles when two live microbatches
 * meet in one slot: a lookup is one load, no hashing and no probing.  Everything else
 * (all-reduces, the tp keys, and any key an unverified plan puts on another rank or
 * with an odd microbatch) goes to a small per-rank hash.  Which of the two holds a key
 * depends on the key alone, so the two behave as one map. */
#include "sim_int.h"
#include "../plan/oom.h"

#include <stdlib.h>

/* ---- the hash ---- */

static Value *hfind(Hash *h, uint64_t key)
{
	if (!h->cap)
		return NULL;
	for (uint64_t i = hmix(key) & (uint64_t)(h->cap - 1);; i = (i + 1) & (uint64_t)(h->cap - 1)) {
		if (h->e[i].key == key)
			return &h->e[i];
		if (!h->e[i].key)
			return NULL;
	}
}

static void oom(Sim *s)
{
	if (!s->oom)
		plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), 0);
	s->oom = s->failed = 1;
}

static void merge(Value *e, int64_t time, int64_t who, int64_t refs)
{
	e->refs = sat_add(e->refs, refs);
	if (time > e->time) {
		e->time = time;
		e->who = who;
	}
}

static int hput(Sim *s, Hash *h, uint64_t key, int64_t time, int64_t who, int64_t refs)
{
	Value *e = hfind(h, key);
	if (e) {
		merge(e, time, who, refs);
		return 0;
	}
	if ((h->n + 1) * 2 > h->cap) {
		int64_t cap = h->cap ? h->cap * 2 : 16;
		Value *ne = calloc((size_t)cap, sizeof *ne);
		if (!ne) {
			oom(s);
			return -1;
		}
		for (int64_t j = 0; j < h->cap; j++) {
			if (!h->e[j].key)
				continue;
			uint64_t i = hmix(h->e[j].key) & (uint64_t)(cap - 1);
			while (ne[i].key)
				i = (i + 1) & (uint64_t)(cap - 1);
			ne[i] = h->e[j];
		}
		free(h->e);
		h->e = ne;
		h->cap = cap;
	}
	uint64_t i = hmix(key) & (uint64_t)(h->cap - 1);
	while (h->e[i].key)
		i = (i + 1) & (uint64_t)(h->cap - 1);
	h->e[i] = (Value){key, time, who, refs};
	h->n++;
	return 0;
}

/* Removes e, shifting back the entries of its probe run (no tombstones). */
static void hdel(Hash *h, Value *e)
{
	uint64_t mask = (uint64_t)(h->cap - 1);
	uint64_t i = (uint64_t)(e - h->e);
	uint64_t j = i;
	for (;;) {
		h->e[i].key = 0;
		for (;;) {
			j = (j + 1) & mask;
			if (!h->e[j].key) {
				h->n--;
				return;
			}
			uint64_t home = hmix(h->e[j].key) & mask;
			// move e[j] to i unless its home lies cyclically in (i, j]
			if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
				continue;
			break;
		}
		h->e[i] = h->e[j];
		i = j;
	}
}

/* ---- the rings ---- */

int sim_ring_put_slow(Sim *s, Ring *g, int32_t mb, int64_t time, int64_t who, int64_t refs)
{
	int64_t cap = g->e == &s->ring_none ? 0 : g->mask + 1, nc = cap ? cap : 8;
	Value *e = &g->e[mb & g->mask];
	if (cap && !e->key) {
		*e = (Value){(uint64_t)mb + 1, time, who, refs};
		return 0;
	}
	/* Double until mb leaves its occupant's slot.  No other entry can meet it there:
	 * their slots already differed from mb's in the bits the old size kept. */
	if (cap)
		while (((uint64_t)mb & (uint64_t)(nc - 1)) == ((e->key - 1) & (uint64_t)(nc - 1)))
			nc *= 2;
	Value *ne = calloc((size_t)nc, sizeof *ne);
	if (!ne) {
		oom(s);
		return -1;
	}
	for (int64_t j = 0; j < cap; j++)
		if (g->e[j].key)
			ne[(g->e[j].key - 1) & (uint64_t)(nc - 1)] = g->e[j];
	if (cap)
		free(g->e);
	g->e = ne;
	g->mask = nc - 1;
	ne[mb & (nc - 1)] = (Value){(uint64_t)mb + 1, time, who, refs};
	return 0;
}

/* The ring holding key on rank r, with the key's microbatch in *mb; NULL: the hash. */
static Ring *ring_of(Sim *s, int r, uint64_t key, int32_t *mb)
{
	int type = (int)(key >> 62);
	uint64_t idx = (key >> 31) & 0x3FFFFFFF, m = key & 0x7FFFFFFF;
	const Plan *p = s->p;
	if ((type != KEY_RECV && type != KEY_DATA) || (idx & (1u << 29)) ||
	    m >= (uint64_t)(p->microbatches > 0 ? p->microbatches : 0) ||
	    idx >= (uint64_t)(type == KEY_RECV ? p->nedges : p->nstages))
		return NULL;
	int c = sim_class(s, type, (int)(key >> 61) & 1, (int)idx);
	if (s->cls_pp[c] != s->rk[r].pp)
		return NULL;
	*mb = (int32_t)m;
	return &s->rk[r].ring[s->cls_ring[c]];
}

/* ---- by key ---- */

Value *sim_val_find(Sim *s, int r, uint64_t key)
{
	int32_t mb;
	Ring *g = ring_of(s, r, key, &mb);
	return g ? ring_get(g, mb) : hfind(&s->rk[r].h, key);
}

int sim_val_put(Sim *s, int r, uint64_t key, int64_t time, int64_t who, int64_t refs)
{
	int32_t mb;
	Ring *g = ring_of(s, r, key, &mb);
	return g ? ring_put(s, g, mb, time, who, refs) : hput(s, &s->rk[r].h, key, time, who, refs);
}

void sim_hash_use(Hash *h, Value *e)
{
	if (--e->refs <= 0)
		hdel(h, e);
}

/* ---- setup ---- */

/* Each stage's rings (StageInfo): its classes are all owned by its pp index. */
static int stage_rings(Sim *s)
{
	const Plan *p = s->p;
	for (int i = 0; i < p->nstages; i++) {
		StageInfo *st = &s->st[i];
		int c = sim_class(s, KEY_DATA, DIR_ACT, i);
		st->pp = s->cls_pp[c];
		st->ls = st->pp >= 0 ? s->local_idx[i] : -1;
		st->rin_ring = sim_xcalloc(s, (size_t)st->nrin, sizeof *st->rin_ring);
		st->rout_ring = sim_xcalloc(s, (size_t)st->nrout, sizeof *st->rout_ring);
		if (s->failed)
			return -1;
		st->fast_pp = -4;
		if (st->pp < 0)
			continue;
		for (int j = 0; j < st->nrin; j++)
			st->rin_ring[j] = s->cls_ring[sim_class(s, KEY_RECV, DIR_ACT, st->rin[j])];
		for (int j = 0; j < st->nrout; j++)
			st->rout_ring[j] = s->cls_ring[sim_class(s, KEY_RECV, DIR_GRAD, st->rout[j])];
		for (int d = 0; d < DIR_COUNT; d++)
			st->data_ring[d] = s->cls_ring[sim_class(s, KEY_DATA, d, i)];
		st->fast = st->nrin <= MAXKEYS && st->nrout <= MAXKEYS; // consumed_keys' limit
		st->fast_pp = st->fast ? st->pp : -4;
	}
	return 0;
}

/* Every class gets a ring on each rank of its owner's pp index: a receive's, the pp of
 * the stage consuming it (the edge's destination for activations, its source for
 * gradients); a tensor's, its stage's.  Keys hold 29 bits of stage or edge (bit 29
 * marks the tp keys): a plan with more has no rings. */
int sim_values_setup(Sim *s)
{
	const Plan *p = s->p;
	int npp = p->dims[DIM_PP], ncls = 2 * (p->nedges + p->nstages);
	int big = p->nedges >= (1 << 29) || p->nstages >= (1 << 29);
	s->cls_pp = sim_xcalloc(s, (size_t)ncls, sizeof *s->cls_pp);
	s->cls_ring = sim_xcalloc(s, (size_t)ncls, sizeof *s->cls_ring);
	s->send_cls = sim_xcalloc(s, 2 * (size_t)p->nedges, sizeof *s->send_cls);
	int *nring = sim_xcalloc(s, (size_t)npp, sizeof *nring);
	if (s->failed) {
		free(nring);
		return -1;
	}
	for (int c = 0; c < ncls; c++) {
		int st;
		if (c < 2 * p->nedges) {
			const PlanEdge *e = &p->edges[c / 2];
			st = c % 2 == DIR_ACT ? e->dst : e->src;
		} else {
			st = (c - 2 * p->nedges) / 2;
		}
		int pp = st >= 0 && st < p->nstages ? p->stages[st].pp : -1;
		if (big || pp < 0 || pp >= npp) {
			s->cls_pp[c] = -1;
			continue;
		}
		s->cls_pp[c] = pp;
		s->cls_ring[c] = nring[pp]++;
	}
	for (int e = 0; e < p->nedges; e++) // send_key's stage: the source's, or the destination's
		for (int d = 0; d < DIR_COUNT; d++) {
			int st = d == DIR_ACT ? p->edges[e].src : p->edges[e].dst;
			s->send_cls[2 * e + d] = st >= 0 && st < p->nstages ? sim_class(s, KEY_DATA, d, st) : -1;
		}
	for (int r = 0; r < s->world && !s->failed; r++) {
		SimRank *k = &s->rk[r];
		int pp = p->ranks[r].coord[DIM_PP];
		k->pp = pp >= 0 && pp < npp ? pp : -2;
		int n = k->pp >= 0 ? nring[pp] : 0;
		if (!(k->ring = sim_xcalloc(s, (size_t)n, sizeof *k->ring)))
			break;
		k->nring = n;
		for (int j = 0; j < n; j++)
			k->ring[j].e = &s->ring_none;
	}
	free(nring);
	return s->failed ? -1 : stage_rings(s);
}

void sim_values_free(Sim *s)
{
	for (int r = 0; s->rk && r < s->world; r++) {
		SimRank *k = &s->rk[r];
		free(k->h.e);
		for (int j = 0; j < k->nring; j++)
			if (k->ring[j].e != &s->ring_none)
				free(k->ring[j].e);
		free(k->ring);
	}
	free(s->cls_pp);
	free(s->cls_ring);
	free(s->send_cls);
}
