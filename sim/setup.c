/* Building the simulator's state from a plan, and freeing it: per-stage costs and
 * memory deltas (the op table's costs), the local stage numbering, per-rank streams and
 * hashes, the dp collectives, and the chans between ranks as the run first uses them.
 * Run once per simulation (a chan once per rank and route), so nothing here is hot. */
#include "sim_int.h"
#include "../plan/par.h"
#include "../plan/block.h"
#include "../plan/oom.h"
#include "../plan/tie.h"
#include "../plan/tp.h"
#include "../plan/line.h"
#include "../plan/link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The collective groups along dim, one per rank whose coordinate there is 0, appended
 * to s->coll; of[r] is rank r's group.  The dp groups come first, then the tp groups. */
static int add_groups(Sim *s, int dim, int *of)
{
	const Plan *p = s->p;
	for (int r = 0; r < p->world; r++) {
		if (p->ranks[r].coord[dim] != 0)
			continue;
		Coll *c = &s->coll[s->ncoll];
		c->members = sim_xcalloc(s, (size_t)p->dims[dim], sizeof *c->members);
		if (!c->members)
			return -1;
		c->n = plan_dim_members(p, r, dim, c->members);
		c->world_n = p->dims[dim]; // in a line plan the others are on other lines
		for (int j = 0; j < c->n; j++)
			of[c->members[j]] = s->ncoll;
		s->ncoll++;
	}
	return 0;
}

/* The pairs holding the two copies of a table tied across pipeline ranks, one per rank
 * on the embedding's side, the embedding's rank first; appended after the tp groups. */
static int add_tie_pairs(Sim *s)
{
	const Plan *p = s->p;
	int *of = s->collof[OP_OVER_TIE];
	plan_tie_across(p, &s->tie_e, &s->tie_h);
	for (int r = 0; r < p->world; r++)
		of[r] = -1;
	for (int r = 0; r < p->world; r++) {
		int st, q = plan_tie_peer(p, r, &st);
		if (q < 0 || st != s->tie_e)
			continue;
		Coll *c = &s->coll[s->ncoll];
		if (!(c->members = sim_xcalloc(s, 2, sizeof *c->members)))
			return -1;
		c->n = c->world_n = 2;
		c->members[0] = r;
		c->members[1] = q;
		of[r] = of[q] = s->ncoll++;
	}
	return 0;
}

/* The overlap model at tp > 1: each stage's local (handed-over) edges, whose source's
 * last TPREDUCE its first part waits for, and the part limit of the tp keys. */
static int setup_local_edges(Sim *s, const unsigned char *self)
{
	const Plan *p = s->p;
	for (int i = 0; i < p->nstages; i++)
		for (int d = 0; d < DIR_COUNT; d++)
			if (s->st[i].parts.n[d] >= 512) {
				snprintf(s->res->message, sizeof s->res->message,
				         "the overlap model takes stages of at most 511 parts; stage %d has %d",
				         i, s->st[i].parts.n[d]);
				s->failed = 1;
				return -1;
			}
	for (int pass = 0; pass < 2; pass++) {
		for (int e = 0; e < p->nedges; e++) {
			const PlanEdge *ed = &p->edges[e];
			if (p->stages[ed->src].pp != p->stages[ed->dst].pp || self[e])
				continue;
			StageInfo *a = &s->st[ed->src], *b = &s->st[ed->dst];
			if (pass) {
				a->ldst[a->nlout++] = ed->dst;
				b->lsrc[b->nlin++] = ed->src;
			} else {
				a->nlout++;
				b->nlin++;
			}
		}
		for (int i = 0; !pass && i < p->nstages; i++) {
			s->st[i].lsrc = sim_xcalloc(s, (size_t)s->st[i].nlin, sizeof(int));
			s->st[i].ldst = sim_xcalloc(s, (size_t)s->st[i].nlout, sizeof(int));
			s->st[i].nlin = s->st[i].nlout = 0;
		}
		if (s->failed)
			return -1;
	}
	return 0;
}

/* The overlap model's stage edges through the communicator (remote, or sent to self):
 * each stage's rin and rout, and at tp > 1 its local hand-offs. */
static int setup_remote_edges(Sim *s)
{
	const Plan *p = s->p;
	/* Edges sent to self are received like remote ones. */
	unsigned char *self = sim_xcalloc(s, (size_t)p->nedges + 1, 1);
	if (!self)
		return -1;
	for (int i = 0; i < p->nroutes; i++)
		if (p->routes[i].src_rank == p->routes[i].dst_rank)
			self[p->routes[i].edge] = 1;
	for (int e = 0; e < p->nedges; e++) {
		const PlanEdge *ed = &p->edges[e];
		if (p->stages[ed->src].pp != p->stages[ed->dst].pp || self[e]) {
			s->st[ed->src].nrout++;
			s->st[ed->dst].nrin++;
		}
	}
	for (int i = 0; i < p->nstages; i++) {
		s->st[i].rin = sim_xcalloc(s, (size_t)s->st[i].nrin, sizeof(int));
		s->st[i].rout = sim_xcalloc(s, (size_t)s->st[i].nrout, sizeof(int));
		s->st[i].nrin = s->st[i].nrout = 0;
	}
	if (s->failed) {
		free(self);
		return -1;
	}
	for (int e = 0; e < p->nedges; e++) {
		const PlanEdge *ed = &p->edges[e];
		if (p->stages[ed->src].pp != p->stages[ed->dst].pp || self[e]) {
			StageInfo *a = &s->st[ed->src], *b = &s->st[ed->dst];
			a->rout[a->nrout++] = e;
			b->rin[b->nrin++] = e;
		}
	}
	if (s->tp > 1 && setup_local_edges(s, self)) {
		free(self);
		return -1;
	}
	free(self);
	return 0;
}

/* With a thread to spare (par_prefault), a task pages the per-op times in beside the
 * run, which writes them in time order across the ranks. */
static void prefault_times(Sim *s)
{
	void **arr = calloc((size_t)s->world + 1, sizeof *arr);
	size_t *bytes = calloc((size_t)s->world + 1, sizeof *bytes);
	int path = s->opt.record_ops == SIM_RECORD_PATH;
	for (int r = 0; arr && bytes && r < s->world; r++) {
		arr[r] = path ? (void *)s->rk[r].code : (void *)s->rk[r].rec;
		bytes[r] = (size_t)s->p->ranks[r].nops * (path ? sizeof(int32_t) : sizeof(SimOpRec));
	}
	if (arr && bytes)
		s->prefault = par_prefault(arr, bytes, s->world);
	free(arr);
	free(bytes);
}

/* Every rank's per-op records, one zeroed block (plan_block_new): calloc
 * gets fresh pages untouched, so each page is first touched (and zeroed by the kernel,
 * staying in cache) when the run writes it.  A zero pred is PRED_UNSET, the ops never
 * reached, which sim_fill_unreached gives their -1 times after the run. */
static int alloc_recs(Sim *s)
{
	const Plan *p = s->p;
	SimResult *res = s->res;
	int64_t total = plan_total_ops(p);
	SimOpRec *x = plan_block_new((size_t)total * sizeof *x, 1, &res->recblock);
	if (!x) {
		s->oom = s->failed = 1;
		plan_oom_text(res->message, sizeof res->message, total, (size_t)total * sizeof *x);
		return -1;
	}
	for (int r = 0; r < p->world; r++) {
		res->ranks[r].recs = s->rk[r].rec = x;
		x += p->ranks[r].nops;
	}
	return 0;
}

/* SIM_RECORD_PATH: every rank's codes, one zeroed block as alloc_recs's (PRED_UNSET for
 * the ops never reached), and its window's times: the ops of its list's first and last
 * s->win (all of a list of 2 win ops or fewer). */
static int alloc_codes(Sim *s)
{
	const Plan *p = s->p;
	int64_t total = plan_total_ops(p), nwin = 0;
	s->win = s->opt.path_window > 0 ? s->opt.path_window : SIM_PATH_WINDOW;
	for (int r = 0; r < p->world; r++)
		nwin += p->ranks[r].nops < 2 * s->win ? p->ranks[r].nops : 2 * s->win;
	int32_t *c = plan_block_new((size_t)total * sizeof *c, 1, &s->codeblock);
	SimOpTime *w = c ? malloc(((size_t)nwin + 1) * sizeof *w) : NULL;
	if (!w) {
		s->oom = s->failed = 1;
		plan_oom_text(s->res->message, sizeof s->res->message, total, 0);
		return -1;
	}
	s->winblock = w;
	for (int r = 0; r < p->world; r++) {
		int64_t n = p->ranks[r].nops;
		s->rk[r].code = c;
		s->rk[r].win = w;
		s->rk[r].tail = n - s->win > s->win ? n - s->win : s->win;
		c += n;
		w += n < 2 * s->win ? n : 2 * s->win;
	}
	return 0;
}

uint64_t sim_wide_put(Sim *s, int r, int64_t i, int field, int64_t t)
{
	if (sim_grow(s, (void **)&s->wide, &s->widecap, s->nwide + 1, sizeof *s->wide))
		return 0; // the run ends out of memory: no time is read
	s->wide[s->nwide] = (WideTime){{r, field, i, t}, s->nwide};
	s->nwide++;
	return SIM_T48_WIDE;
}

int sim_setup(Sim *s)
{
	const Plan *p = s->p;
	SimResult *res = s->res;
	int w = p->world;
	res->ranks = sim_xcalloc(s, (size_t)w, sizeof *res->ranks);
	s->rk = sim_xcalloc(s, (size_t)w, sizeof *s->rk);
	s->st = sim_xcalloc(s, (size_t)p->nstages, sizeof *s->st);
	s->local_idx = sim_xcalloc(s, (size_t)p->nstages, sizeof *s->local_idx);
	s->nlocal = sim_xcalloc(s, (size_t)p->dims[DIM_PP], sizeof *s->nlocal);
	s->collof[OP_OVER_DP] = sim_xcalloc(s, (size_t)w, sizeof *s->collof[0]);
	s->coll = sim_xcalloc(s, 3 * (size_t)w, sizeof *s->coll);
	s->collof[OP_OVER_TP] = sim_xcalloc(s, (size_t)w, sizeof *s->collof[0]);
	s->collof[OP_OVER_TIE] = sim_xcalloc(s, (size_t)w, sizeof *s->collof[0]);
	s->tp = p->dims[DIM_TP];
	s->nmb = p->microbatches > 0 ? (uint32_t)p->microbatches : 0;
	s->work = sim_xcalloc(s, (size_t)w * 2, sizeof *s->work);
	s->routechan = sim_xcalloc(s, 2 * (size_t)p->nroutes, sizeof *s->routechan);
	if (s->failed)
		return -1;
	for (int i = 0; i < p->nstages; i++) {
		const PlanStage *ps = &p->stages[i];
		StageInfo *st = &s->st[i];
		for (int k = 0; k < OP_COUNT; k++) {
			st->cost[k] = plan_op_cost((OpKind)k, ps->cost);
			st->dmem[k] = plan_op_mem((OpKind)k, ps);
		}
		st->cost[OP_OPTIM] = ps->optim; // the step's own time, not a pass's
		st->sp = plan_sp_bytes(p, i) > 0;
		if (ps->pp >= 0 && ps->pp < p->dims[DIM_PP])
			s->local_idx[i] = s->nlocal[ps->pp]++;
		if (s->tp > 1 && plan_stage_parts(p, i, &st->parts)) {
			s->oom = s->failed = 1;
			plan_oom_text(res->message, sizeof res->message, plan_total_ops(p), 0);
			return -1;
		}
	}
	if (s->opt.model == SIM_OVERLAP && (setup_remote_edges(s) || sim_values_setup(s)))
		return -1;
	if (add_groups(s, DIM_DP, s->collof[OP_OVER_DP]))
		return -1;
	int ndp = s->ndpcoll = s->ncoll;
	if (s->tp > 1 && add_groups(s, DIM_TP, s->collof[OP_OVER_TP]))
		return -1;
	s->ntpcoll = s->ncoll - ndp;
	if (add_tie_pairs(s))
		return -1;
	if (s->opt.record_ops == SIM_RECORD_PATH ? alloc_codes(s)
	                                          : s->opt.record_ops && alloc_recs(s))
		return -1;
	for (int r = 0; r < w; r++) {
		SimRank *k = &s->rk[r];
		k->bind = k->cbind = REF_NONE;
		k->ar_op = -1;
		k->tp_op = -1;
		if (s->opt.model == SIM_OVERLAP) {
			int pp = p->ranks[r].coord[DIM_PP];
			int nl = pp >= 0 && pp < p->dims[DIM_PP] ? s->nlocal[pp] : 0;
			k->wdone = sim_xcalloc(s, (size_t)nl, sizeof *k->wdone);
			k->wlast = sim_xcalloc(s, (size_t)nl, sizeof *k->wlast);
			k->wlast_who = sim_xcalloc(s, (size_t)nl, sizeof *k->wlast_who);
			if (s->failed)
				return -1;
		}
	}
	if (s->opt.record_ops && plan_threads > 1)
		prefault_times(s);
	_Static_assert(OP_COUNT <= 32, "the kind masks hold a bit per kind");
	for (int k = 0; k < OP_COUNT; k++) {
		s->comm_kinds |= (uint32_t)plan_op_is_comm((OpKind)k) << k;
		s->compute_kinds |= (uint32_t)plan_op_is_compute((OpKind)k) << k;
		s->coll_kinds |= (uint32_t)plan_op_is_coll((OpKind)k) << k;
		s->send_kinds |= (uint32_t)plan_ops[k].sends << k;
	}
	s->step_gather = s->p->optim.distributed && s->p->dims[DIM_DP] > 1;
	s->xfer_bytes[0] = s->xfer_bytes[1] = -1;
	s->last_end = -1;
	s->last_ref = REF_NONE;
	return 0;
}

void sim_cleanup(Sim *s)
{
	par_join(s->prefault);
	s->prefault = NULL;
	if (s->rk) {
		for (int r = 0; r < s->world; r++) {
			free(s->rk[r].ch);
			free(s->rk[r].wdone);
			free(s->rk[r].wlast);
			free(s->rk[r].wlast_who);
		}
	}
	sim_values_free(s);
	free(s->rk);
	if (s->st) {
		for (int i = 0; i < s->p->nstages; i++) {
			free(s->st[i].rin);
			free(s->st[i].rout);
			free(s->st[i].rin_ring);
			free(s->st[i].rout_ring);
			plan_parts_free(&s->st[i].parts);
			free(s->st[i].lsrc);
			free(s->st[i].ldst);
		}
	}
	free(s->st);
	free(s->local_idx);
	free(s->nlocal);
	for (int i = 0; i < s->nch; i++)
		free(s->ch[i].q);
	free(s->ch);
	free(s->pairkey);
	free(s->pairval);
	free(s->routechan);
	for (int i = 0; i < s->ncoll; i++)
		free(s->coll[i].members);
	free(s->coll);
	for (int v = 0; v < OP_OVER_COUNT; v++)
		free(s->collof[v]);
	free(s->work);
	free(s->wide);
	par_free(&s->codeblock, 1);
	free(s->winblock);
}

/* The chan of rank r with peer (r receiving when recv), created on first use and added to
 * r's list of chans (the order the stall analysis reads them in).  Called once per
 * rank, route and side: sim.c caches what it returns by route. */
int sim_chan_of(Sim *s, int r, int peer, int recv)
{
	SimRank *k = &s->rk[r];
	int key = peer * 2 + recv;
	for (int i = 0; i < k->nch; i++)
		if (k->ch[i].key == key)
			return k->ch[i].chan;
	int src = recv ? peer : r, dst = recv ? r : peer;
	uint64_t pk = ((uint64_t)src << 32 | (uint64_t)dst) + 1;
	if ((int64_t)(s->nch + 1) * 2 > s->paircap) {
		int64_t cap = s->paircap ? s->paircap * 2 : 64;
		uint64_t *nk = calloc((size_t)cap, sizeof *nk);
		int *nv = calloc((size_t)cap, sizeof *nv);
		if (!nk || !nv) {
			free(nk);
			free(nv);
			s->oom = s->failed = 1;
			plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), 0);
			return -1;
		}
		for (int64_t j = 0; j < s->paircap; j++) {
			if (!s->pairkey[j])
				continue;
			uint64_t i = hmix(s->pairkey[j]) & (uint64_t)(cap - 1);
			while (nk[i])
				i = (i + 1) & (uint64_t)(cap - 1);
			nk[i] = s->pairkey[j];
			nv[i] = s->pairval[j];
		}
		free(s->pairkey);
		free(s->pairval);
		s->pairkey = nk;
		s->pairval = nv;
		s->paircap = cap;
	}
	uint64_t i = hmix(pk) & (uint64_t)(s->paircap - 1);
	while (s->pairkey[i] && s->pairkey[i] != pk)
		i = (i + 1) & (uint64_t)(s->paircap - 1);
	int c;
	if (s->pairkey[i]) {
		c = s->pairval[i];
	} else {
		int64_t cap = s->chcap;
		if (sim_grow(s, (void **)&s->ch, &cap, s->nch + 1, sizeof *s->ch))
			return -1;
		s->chcap = (int)cap;
		c = s->nch++;
		s->ch[c] = (Chan){.src = src, .dst = dst,
		                  .node = (uint8_t)plan_same_node(s->p, plan_world_rank(s->p, src),
		                                                  plan_world_rank(s->p, dst))};
		s->pairkey[i] = pk;
		s->pairval[i] = c;
	}
	int64_t cap = k->chcap;
	if (sim_grow(s, (void **)&k->ch, &cap, k->nch + 1, sizeof *k->ch))
		return -1;
	k->chcap = (int)cap;
	k->ch[k->nch++] = (ChanRef){key, c};
	return c;
}
