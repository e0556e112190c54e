/* The memory model of docs/semantics.md "Memory", one rank at a time.
 *
 * Static: every stage on the rank holds its parameters, their gradients, their master
 * copy (bf16, plan/prec.h) and the optimizer's state all step, the last two of its
 * shard alone under a distributed optimizer (its collectives work in place in the
 * parameter and gradient buffers, as Megatron's do, so they add no buffer).  Dynamic,
 * walked in list order: saved activations
 * (plan_op_mem per compute op, as pipesim's engine counts them) and the tensors in
 * flight between stages: a stage output made by F (one tensor, shared by its out-edges)
 * or an input gradient made by B (shared by its in-edges) lives until every consumer
 * took it (the local peer stage's F or B for a hand-off, else the SEND's group), and a
 * received tensor lives from its RECV's group to the compute op that consumes it.
 * Samples are taken after every compute op, inside every comm group once its receives
 * hold their buffers and before its sends release theirs, and inside a recomputing B
 * once its forward is rebuilt (st->save_re more saved bytes; at tp > 1 with selective
 * recomputation inside each backward part that rebuilds, its PlanPart.rebuilt more) -
 * the points where piperun samples its allocations.  Convention: bytes, int64_t. */
#include "mem.h"
#include "par.h"
#include "tfcount.h"
#include "prefetch.h"
#include "tp.h"

#include <stdlib.h>
#include <string.h>

int64_t plan_stage_in_bytes(const Plan *p, int s)
{
	return plan_layer_in_bytes(p, s, 0);
}

void plan_recompute_span(const PlanStage *st, int *lo, int *hi)
{
	*lo = -1;
	*hi = 0;
	for (int l = 0, n = 0; l < st->nlayers && (!st->recompute_res || n < st->recompute_res); l++)
		if (plan_layers[st->layers[l].kind].arg == LAYER_ARG_BODY) {
			if (*lo < 0)
				*lo = l;
			if (l + st->layers[l].span + 1 > *hi)
				*hi = l + st->layers[l].span + 1;
			l += st->layers[l].span; // nested bodies end inside it
			n++;
		}
	if (*lo < 0) {
		*lo = 0;
		*hi = st->nlayers;
	}
}

/* The layer table says what a layer keeps of its input: its rows (split under sequence
 * parallelism) and whether they are token ids. */
int64_t plan_layer_in_bytes(const Plan *p, int s, int l)
{
	const PlanStage *st = &p->stages[s];
	LayerShape sh = plan_shape(p);
	LayerTensors t;
	plan_layer_tensors(&st->layers[l], &sh, p->dims[DIM_TP], &t);
	return t.x_rows * st->layers[l].in * (t.x_ids ? 4 : plan_prec(p->prec)->act);
}

int64_t plan_mem_stage_share(const PlanStage *st, int m, int prec)
{
	int64_t saved = sat_add(sat_add(st->save_fb, st->save_fw), sat_add(st->save_bw, st->save_re));
	return sat_add(sat_mul(st->params, PLAN_MEM_PARAM_BYTES(prec)), sat_mul(saved, m));
}

int64_t plan_mem_edge_share(int64_t bytes, int m)
{
	return sat_mul(sat_mul(bytes, 4), m);
}

int64_t plan_stage_out_bytes(const Plan *p, int s)
{
	LayerShape sh = plan_shape(p);
	return plan_seq_rows(&sh, p->dims[DIM_TP]) * p->stages[s].out * plan_prec(p->prec)->act;
}

/* Walk state: refs[(local[stage] * m + mb) * 2 + dir] consumers still to take a
 * tensor made on this rank, by one of its stages (local[s] >= 0: s is placed on the
 * rank's pp index; a verified plan makes and sends tensors of those alone), so that
 * the table is the rank's size, not the plan's; per stage its in- and out-edges (CSR:
 * ein[ioff[s] .. ioff[s + 1]]), and per edge whether this rank hands it over locally
 * (the peer table says `local`). */
typedef struct {
	const Plan *p;
	const PlanRank *rk;
	int m;              // p->microbatches
	int *refs, *local;
	int *ioff, *ooff, *ein, *eout;
	uint8_t *handoff;
	int64_t *bytes;     // per stage: [2 s + dir] its output (ACT) and input (GRAD) bytes
	int64_t *remote;    // per stage: [2 s + dir] what gather frees of its received inputs
	int *cons;          // ... the consumers of what it makes in dir (make's)
	uint8_t *hands;     // ... 1: gather also takes a tensor handed over on the rank
	int64_t *dmem;      // per local stage: [local * OP_COUNT + kind] plan_op_mem
	PlanParts *parts; // per stage, with tp > 1 (plan_stage_parts); else NULL
	uint32_t comm_kinds; // bit k: plan_op_is_comm(k)
	uint32_t send_kinds; // bit k: a p2p op that sends (SEND)
	uint32_t recv_kinds; // bit k: a p2p op that receives (RECV)
	int64_t saved, comm, stat;
	PlanMem fig;        // the figures so far (copied out at the end)
	PlanMemAt *at;       // plan_mem_track's per-op highest points, or NULL
} Walk;

/* The walk's steps below run once or more per op: inlined into the one loop. */
#define STEP __attribute__((always_inline)) static inline

STEP void sample(Walk *w, int64_t op, int64_t extra_saved)
{
	PlanMem *m = &w->fig;
	int64_t total = w->stat + w->saved + extra_saved + w->comm;
	if (w->saved + extra_saved > m->peak_saved)
		m->peak_saved = w->saved + extra_saved;
	if (w->comm > m->peak_comm)
		m->peak_comm = w->comm;
	if (w->at && w->saved + extra_saved + w->comm > w->at[op].saved + w->at[op].comm)
		w->at[op] = (PlanMemAt){w->saved + extra_saved, w->comm};
	if (total > m->peak) {
		m->peak = total;
		m->peak_op = op;
		m->saved = w->saved + extra_saved;
		m->comm = w->comm;
	}
}

/* One consumer took the tensor (s, mb, dir), made on this rank; the last frees it. */
STEP void take(Walk *w, int s, int mb, int dir)
{
	if (w->local[s] < 0)
		return;
	int *n = &w->refs[((int64_t)w->local[s] * w->m + mb) * 2 + dir];
	if (*n > 0 && --*n == 0)
		w->comm -= w->bytes[2 * s + dir];
}

STEP void make(Walk *w, int s, int mb, int dir, int consumers)
{
	if (consumers <= 0 || w->local[s] < 0)
		return;
	w->refs[((int64_t)w->local[s] * w->m + mb) * 2 + dir] = consumers;
	w->comm += w->bytes[2 * s + dir];
}

/* F (dir ACT) takes what arrived on s's in-edges, B (GRAD) what arrived on its
 * out-edges: a local hand-off is the peer stage's tensor, anything else a receive (the
 * receives' bytes summed per stage and direction beforehand, remote_sums). */
STEP void gather(Walk *w, int s, int mb, int dir)
{
	w->comm -= w->remote[2 * s + dir];
	if (!w->hands[2 * s + dir])
		return;
	const Plan *p = w->p;
	const int *off = dir == DIR_ACT ? w->ioff : w->ooff;
	const int *es = dir == DIR_ACT ? w->ein : w->eout;
	for (int k = off[s]; k < off[s + 1]; k++) {
		const PlanEdge *ed = &p->edges[es[k]];
		if (w->handoff[es[k]])
			take(w, dir == DIR_ACT ? ed->src : ed->dst, mb, dir);
	}
}

/* gather's tables: per stage and direction the bytes of the edges received, whether
 * any is handed over, and make's consumer count. */
static void remote_sums(Walk *w)
{
	const Plan *p = w->p;
	for (int s = 0; s < p->nstages; s++)
		for (int dir = 0; dir < DIR_COUNT; dir++) {
			const int *off = dir == DIR_ACT ? w->ioff : w->ooff;
			const int *es = dir == DIR_ACT ? w->ein : w->eout;
			int64_t sum = 0;
			uint8_t hands = 0;
			for (int k = off[s]; k < off[s + 1]; k++) {
				if (w->handoff[es[k]])
					hands = 1;
				else
					sum += w->bytes[2 * p->edges[es[k]].src + DIR_ACT];
			}
			w->remote[2 * s + dir] = sum;
			w->hands[2 * s + dir] = hands;
			/* F's output goes to every out-edge, B's input gradient to every in-edge. */
			off = dir == DIR_ACT ? w->ooff : w->ioff;
			w->cons[2 * s + dir] = off[s + 1] - off[s];
		}
}

STEP void compute(Walk *w, const PlanOp *o, int64_t i)
{
	const Plan *p = w->p;
	OpKind k = plan_op_kind(o);
	if (o->stage < 0 || o->stage >= p->nstages)
		return;
	const PlanStage *st = &p->stages[o->stage];
	int per_mb = o->mb >= 0 && o->mb < w->m;
	/* With tp > 1 a direction's first part takes the incoming tensors, its last makes
	 * the outgoing one, and each part keeps its own layers' saved bytes. */
	const PlanParts *pp = w->parts ? &w->parts[o->stage] : NULL;
	const OpInfo *in = &plan_ops[k];
	int dir = in->dir;
	int n = pp ? pp->n[dir] : 1;
	int first = !pp || o->part == 0, last = !pp || o->part + 1 >= n;
	/* B or BW first rebuilds what F dropped: at tp > 1 selective recomputation rebuilds
	 * per part, each part its own layers' (PlanPart.rebuilt), freed by its end. */
	int rebuilds = (in->frees & PLAN_SAVE_FB) && st->recompute;
	if (rebuilds && pp && st->recompute == PLAN_RECOMPUTE_SELECTIVE) {
		if (o->part < n && pp->part[dir][o->part].rebuilt)
			sample(w, i, pp->part[dir][o->part].rebuilt);
	} else if (rebuilds && first) {
		sample(w, i, st->save_re);
	}
	if (per_mb && (in->needs & (PLAN_DEP_IN_ACT | PLAN_DEP_OUT_GRAD))) { // F, B, BW
		if (first)
			gather(w, o->stage, o->mb, dir);
		if (last)
			make(w, o->stage, o->mb, dir, w->cons[2 * o->stage + dir]);
	}
	int ls = w->local[o->stage];
	w->saved += pp ? plan_part_mem(pp, o) : ls >= 0 ? w->dmem[ls * OP_COUNT + k] : plan_op_mem(k, st);
	sample(w, i, 0);
}

/* The comm group at op i (plan_group_end, inline): receives hold their buffers while
 * the sends' are still alive.  Returns its end. */
STEP int64_t group(Walk *w, int64_t i, int64_t n)
{
	const Plan *p = w->p;
	const PlanOp *ops = w->rk->ops;
	int64_t j = i;
	do {
		if ((w->recv_kinds >> ops[j].kind & 1) && ops[j].stage >= 0 && ops[j].stage < p->nedges)
			w->comm += p->edges[ops[j].stage].bytes;
		j++;
	} while (j < n && (w->comm_kinds >> ops[j].kind & 1) && ops[j].group == ops[i].group);
	sample(w, i, 0);
	for (int64_t k = i; k < j; k++) {
		const PlanOp *o = &ops[k];
		if (!(w->send_kinds >> o->kind & 1) || o->stage < 0 || o->stage >= p->nedges || o->mb < 0 ||
		    o->mb >= w->m)
			continue;
		const PlanEdge *ed = &p->edges[o->stage];
		if (o->dir == DIR_ACT)
			take(w, ed->src, o->mb, DIR_ACT);
		else
			take(w, ed->dst, o->mb, DIR_GRAD);
	}
	return j;
}

int64_t plan_stage_state_bytes(const Plan *p, int s)
{
	const PlanPrecInfo *pi = plan_prec(p->prec);
	int64_t n = p->stages[s].params;
	return n * (pi->param + pi->grad) + plan_optim_shard(&p->optim, n, p->dims[DIM_DP]) *
	       (pi->master + plan_optim_state_bytes(p->optim.kind));
}

int plan_mem_rank(const Plan *p, int r, PlanMem *out)
{
	return plan_mem_track(p, r, out, NULL);
}

int plan_mem_track(const Plan *p, int r, PlanMem *out, PlanMemAt *at)
{
	const PlanRank *rk = &p->ranks[r];
	Walk w = {.p = p, .rk = rk, .m = p->microbatches, .fig = {.peak_op = -1}, .at = at};
	if (at)
		memset(at, 0, (size_t)rk->nops * sizeof *at);
	PlanMem *m = &w.fig;
	int pp = rk->coord[DIM_PP];
	int state = plan_optim_state_bytes(p->optim.kind);
	const PlanPrecInfo *prec = plan_prec(p->prec);
	size_t ns = (size_t)p->nstages, ne = (size_t)p->nedges, nloc = 0;
	for (int s = 0; s < p->nstages; s++)
		if (p->stages[s].pp == pp) {
			int64_t shard = plan_optim_shard(&p->optim, p->stages[s].params, p->dims[DIM_DP]);
			m->params += p->stages[s].params * prec->param;
			m->grads += p->stages[s].params * prec->grad;
			m->master += shard * prec->master;
			m->optim += shard * state;
			nloc++;
		}
	w.stat = plan_mem_static(m);
	for (int k = 0; k < OP_COUNT; k++) {
		int p2p = plan_op_is_p2p((OpKind)k), sends = plan_ops[k].sends;
		w.comm_kinds |= (uint32_t)plan_op_is_comm((OpKind)k) << k;
		w.send_kinds |= (uint32_t)(p2p && sends) << k;
		w.recv_kinds |= (uint32_t)(p2p && !sends) << k;
	}
	size_t nrefs = nloc * (size_t)p->microbatches * 2;
	int *buf = calloc(nrefs + 3 * ns + 2 * (ns + 1) + 2 * ne + (ne + 2 * ns) / sizeof(int) + 1,
	                  sizeof(int));
	int64_t *b64 = malloc((4 * ns + nloc * OP_COUNT + 1) * sizeof *b64);
	if (!buf || !b64) {
		free(buf);
		free(b64);
		*out = w.fig;
		return -1;
	}
	w.refs = buf;
	w.local = buf + nrefs;
	w.bytes = b64;
	w.remote = b64 + 2 * ns;
	w.dmem = b64 + 4 * ns;
	for (int s = 0, k = 0; s < p->nstages; s++) {
		w.local[s] = p->stages[s].pp == pp ? k++ : -1;
		w.bytes[2 * s + DIR_ACT] = plan_stage_out_bytes(p, s);
		w.bytes[2 * s + DIR_GRAD] = plan_stage_in_bytes(p, s);
		for (int kind = 0; w.local[s] >= 0 && kind < OP_COUNT; kind++)
			w.dmem[w.local[s] * OP_COUNT + kind] = plan_op_mem((OpKind)kind, &p->stages[s]);
	}
	w.ioff = w.local + ns;
	w.ooff = w.ioff + ns + 1;
	w.ein = w.ooff + ns + 1;
	w.eout = w.ein + ne;
	w.cons = w.eout + ne;
	w.handoff = (uint8_t *)(w.cons + 2 * ns);
	w.hands = w.handoff + ne;
	for (size_t e = 0; e < ne; e++) {
		w.ioff[p->edges[e].dst + 1]++;
		w.ooff[p->edges[e].src + 1]++;
	}
	for (size_t s = 0; s < ns; s++) {
		w.ioff[s + 1] += w.ioff[s];
		w.ooff[s + 1] += w.ooff[s];
	}
	for (size_t e = 0; e < ne; e++) { // in edge order: the fill counts up from the start
		w.ein[w.ioff[p->edges[e].dst]++] = (int)e;
		w.eout[w.ooff[p->edges[e].src]++] = (int)e;
	}
	for (size_t s = ns; s > 0; s--) { // and back to the starts
		w.ioff[s] = w.ioff[s - 1];
		w.ooff[s] = w.ooff[s - 1];
	}
	w.ioff[0] = w.ooff[0] = 0;
	/* Both ends of a hand-off are on this rank and registered `local`; the consumer's
	 * entry decides, as the runtime's gather does. */
	for (int j = 0; j < rk->npeers; j++)
		if (rk->peers[j].local == PEER_LOCAL && rk->peers[j].edge >= 0 &&
		    (size_t)rk->peers[j].edge < ne)
			w.handoff[rk->peers[j].edge] = 1;
	remote_sums(&w);
	int rc = 0;
	if (p->dims[DIM_TP] > 1 && !(w.parts = calloc(ns, sizeof *w.parts)))
		rc = -1;
	for (int s = 0; w.parts && s < p->nstages && !rc; s++)
		if (p->stages[s].pp == pp)
			rc = plan_stage_parts(p, s, &w.parts[s]);
	m->peak = w.stat;
	const PlanOp *ops = rk->ops;
	for (int64_t i = 0, n = rk->nops; i < n && !rc;) {
		plan_prefetch_one(ops, i, n);
		if (w.comm_kinds >> ops[i].kind & 1) {
			int64_t j = group(&w, i, n);
			for (int64_t k = i + 1; at && k < j; k++)
				at[k] = at[i];
			i = j;
		} else {
			compute(&w, &ops[i], i);
			i++;
		}
	}
	for (size_t s = 0; w.parts && s < ns; s++)
		plan_parts_free(&w.parts[s]);
	free(w.parts);
	free(buf);
	free(b64);
	*out = w.fig;
	return rc;
}

typedef struct {
	const Plan *p;
	PlanMem *m;
} Ranks;

static int rank_item(void *arg, int64_t r, int w)
{
	(void)w;
	Ranks *a = arg;
	return plan_mem_rank(a->p, (int)r, &a->m[r]);
}

int plan_mem_ranks(const Plan *p, PlanMem *m)
{
	Ranks a = {p, m};
	return par_for(p->world, rank_item, &a) ? -1 : 0;
}

PlanMem *plan_mem_all(const Plan *p)
{
	PlanMem *m = malloc(((size_t)p->world + 1) * sizeof *m);
	if (m && plan_mem_ranks(p, m)) {
		free(m);
		return NULL;
	}
	return m;
}

int64_t plan_mem_peaks(const Plan *p, int64_t *peak)
{
	PlanMem *m = plan_mem_all(p);
	int64_t max = 0;
	if (!m)
		return -1;
	for (int r = 0; r < p->world; r++) {
		peak[r] = m[r].peak;
		if (m[r].peak > max)
			max = m[r].peak;
	}
	free(m);
	return max;
}

int plan_mem_parts(const Plan *p, const PlanMem *m, int64_t v[PLAN_MEM_PARTS])
{
	int n = 0;
	v[n++] = m->params;
	v[n++] = m->grads;
	if (plan_prec(p->prec)->master > 0)
		v[n++] = m->master;
	v[n++] = m->optim;
	v[n++] = m->saved;
	v[n++] = m->comm;
	return n;
}
