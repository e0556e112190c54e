/* Point-to-point posting (sim.c's sim_post_group, and the overlap model's comm stream
 * in overlap.c, which posts its SEND/RECV groups itself so that a group is not handed
 * from one file to the other): the chans, the rendezvous and the eager sends.  Static
 * inline so that both callers compile them into their loops.  Only sim/ includes it. */
#ifndef SIM_P2P_H
#define SIM_P2P_H

#include "sim_int.h"
#include "../plan/oom.h"
#include "../plan/line.h"
#include "../plan/link.h"

#include <stdlib.h>

/* The transfer time of bytes over the node link (node 1) or the network: plan_link_ns
 * (plan/link.h), saturated for absurd sizes, cached per link for the common repeated
 * size.  Whether a pair shares a node is found once, when its chan (or port) is made. */
static inline int64_t xfer(Sim *s, int node, int64_t bytes)
{
	if (bytes == s->xfer_bytes[node])
		return s->xfer_ns[node];
	const Plan *p = s->p;
	int64_t ns;
	double bw = node ? p->node_bandwidth : p->bandwidth;
	if (p->link_ideal)
		ns = 0;
	else if ((double)bytes * 1e9 / bw > 4e18)
		ns = INT64_MAX / 2;
	else
		ns = plan_link_ns(p, node, bytes);
	s->xfer_bytes[node] = bytes;
	s->xfer_ns[node] = ns;
	return ns;
}

/* ---- channels ---- */

/* sim_chan_of by the op's route: each route has one sender and one receiver, so the chan
 * cached on its side is the one its rank found (and listed) before; the cache entry
 * names that rank and peer, so an unverified plan's odd routes only miss it. */
static inline int chan_by_route(Sim *s, int r, const PlanOp *o, int recv)
{
	int rt = o->route;
	if (rt < 0 || rt >= s->p->nroutes)
		return sim_chan_of(s, r, o->peer, recv);
	RouteChan *rc = &s->routechan[rt * 2 + recv];
	if (rc->chan && rc->rank == r && rc->peer == o->peer)
		return rc->chan - 1;
	int c = sim_chan_of(s, r, o->peer, recv);
	if (c >= 0)
		*rc = (RouteChan){r, o->peer, c + 1};
	return c;
}

static inline int chan_push(Sim *s, Chan *c, int side, int64_t post, int64_t op, const PlanOp *o)
{
	if (c->n == c->cap) {
		int64_t cap = c->cap ? c->cap * 2 : 4;
		ChanEntry *q = malloc((size_t)cap * sizeof *q);
		if (!q) {
			s->oom = s->failed = 1;
			plan_oom_text(s->res->message, sizeof s->res->message, plan_total_ops(s->p), 0);
			return -1;
		}
		for (int64_t i = 0; i < c->n; i++)
			q[i] = c->q[(c->head + i) & (c->cap - 1)];
		free(c->q);
		c->q = q;
		c->head = 0;
		c->cap = cap;
	}
	c->side = (uint8_t)side;
	c->q[(c->head + c->n) & (c->cap - 1)] = (ChanEntry){post, op, o};
	c->n++;
	return 0;
}

static inline ChanEntry chan_pop(Chan *c)
{
	ChanEntry e = c->q[c->head];
	c->head = (c->head + 1) & (c->cap - 1);
	c->n--;
	return e;
}

/* The k-th SEND and the k-th RECV of a pair must agree on what they move.  A verified
 * plan's do (the verifier pairs them the same way: a verified plan never meets a
 * mismatch, which the fuzzers check), so with SimOptions.verified the run reads no
 * queued op back to compare, a load that mostly misses the cache. */
static inline int check_pair(Sim *s, int ra, int64_t a, int rb, int64_t b)
{
	const PlanOp *x = &s->p->ranks[ra].ops[a], *y = &s->p->ranks[rb].ops[b];
	const char *why = NULL;
	if (x->stage != y->stage || x->mb != y->mb || x->dir != y->dir)
		why = "FIFO order pairs a send with a receive of another edge, microbatch or direction";
	if (!why)
		return 0;
	sim_mismatch(s, ra, a, rb, b, why);
	return -1;
}

/* Credits op i of rank r (in r's posted group) with completion at `end`. */
static inline void complete_op(Sim *s, int r, int64_t i, int64_t end, int64_t pred, int counted)
{
	SimRank *k = &s->rk[r];
	set_end(s, r, i, end, pred);
	group_end(k, end, REF(r, i));
	if (counted && --k->pending == 0 && k->state == AG_MATCH)
		push_agent(s, r, 0);
}

/* The critical-path code of a p2p op whose predecessor is op v of its peer q (as
 * sim_pred_code would give it: the peer's tag, or same-rank for a send to self). */
static inline int32_t peer_code(const Sim *s, int r, int64_t i, int q, int64_t v)
{
	if (q != r && v < ((int64_t)1 << PRED_BITS) && q < (1 << PRED_BITS))
		return (int32_t)((1 << PRED_BITS) | v);
	return pred_of(s, r, i, REF(q, v));
}

/* The rendezvous of op i (o) of rank r, posted at t, with the partner's op e queued
 * before it: both complete when the later of the two posts and the transfer allow, and
 * the later post binds the other.  Op i's group is the one being posted, so its start
 * and end are recorded at once.  complete_op's steps, in its order. */
static inline void p2p_meet(Sim *s, int r, int64_t i, const PlanOp *o, int64_t t, Chan *ch,
                            ChanEntry e)
{
	SimRank *k = &s->rk[r];
	int q = o->peer;
	int64_t b = s->p->edges[o->stage].bytes;
	int64_t x = xfer(s, ch->node, b);
	ch->bytes = sat_add(ch->bytes, b);
	ch->transfers++;
	int64_t end = sat_add(max64(t, e.post), x);
	if (s->opt.record_ops) {
		record_code(s, r, i, t, end,
		            e.post > t ? peer_code(s, r, i, q, e.op) : pred_of(s, r, i, k->bind));
		end_code(s, q, e.op, end, t > e.post, t > e.post ? peer_code(s, q, e.op, r, i) : 0);
	}
	group_end(k, end, REF(r, i));
	SimRank *m = &s->rk[q];
	group_end(m, end, REF(q, e.op));
	if (--m->pending == 0 && m->state == AG_MATCH)
		push_agent(s, q, 0);
}

/* Posts op i (o), a SEND or (recv) a RECV of rank r's group being posted at t. */
static inline void post_p2p(Sim *s, int r, int64_t i, const PlanOp *o, int64_t t, int recv)
{
	int c = chan_by_route(s, r, o, recv);
	Chan *ch = c >= 0 ? &s->ch[c] : NULL;
	int eager = s->opt.eager;
	if (ch && ch->n && ch->side != recv && !eager) {
		ChanEntry e = chan_pop(ch);
		const PlanOp *x = e.o;
		if (!s->opt.verified && (x->stage != o->stage ||
		                         x->mb != o->mb || x->dir != o->dir)) {
			if (recv)
				check_pair(s, o->peer, e.op, r, i);
			else
				check_pair(s, r, i, o->peer, e.op);
			record(s, r, i, t, -1, s->rk[r].bind);
			return;
		}
		p2p_meet(s, r, i, o, t, ch, e);
		return;
	}
	record(s, r, i, t, -1, s->rk[r].bind);
	if (!ch)
		return;
	if (ch->n && ch->side != recv) { // eager
		ChanEntry e = chan_pop(ch);
		int sr = recv ? o->peer : r, rr = recv ? r : o->peer;
		int64_t si = recv ? e.op : i, ri = recv ? i : e.op;
		int64_t sp = recv ? e.post : t, rp = recv ? t : e.post;
		if (!s->opt.verified && check_pair(s, sr, si, rr, ri))
			return;
		int64_t b = s->p->edges[o->stage].bytes;
		int64_t x = xfer(s, ch->node, b);
		ch->bytes = sat_add(ch->bytes, b);
		ch->transfers++;
		int64_t arrive = sat_add(sp, x);
		int64_t rend = max64(arrive, rp);
		if (!recv) // the send completes at once; its receive was waiting
			complete_op(s, r, i, t, REF_KEEP, 0);
		complete_op(s, rr, ri, rend, arrive > rp ? REF(sr, si) : REF_KEEP, !recv);
		return;
	}
	if (chan_push(s, ch, recv, t, i, o))
		return;
	if (!recv && eager)
		complete_op(s, r, i, t, REF_KEEP, 0);
	else
		s->rk[r].pending++;
}

#endif
