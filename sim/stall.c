/* Deadlock analysis: when no agent can move, the parked agents and their "waits for"
 * edges form the wait-for graph; this walks it from the first stuck stream to a cycle
 * and names each edge's ops.  An edge to an op that will never be posted is a pairing
 * error the verifier missed, reported as a mismatch.  Also the eager model's leftover
 * sends.  Runs once, after the run, so it may scan op lists. */
#include "sim_int.h"
#include "../plan/line.h"

#include <stdio.h>
#include <stdlib.h>

/* Index of the `skip`-th op on rank r at or after `from` matching the predicate. */
typedef int (*OpPred)(const PlanOp *o, const void *arg);

static int64_t find_op(const Plan *p, int r, int64_t from, int64_t skip, OpPred pred,
                       const void *arg)
{
	const PlanRank *pr = &p->ranks[r];
	for (int64_t i = from < 0 ? 0 : from; i < pr->nops; i++)
		if (pred(&pr->ops[i], arg) && skip-- == 0)
			return i;
	return -1;
}

typedef struct {
	int kind, peer;
	int sends; // want_p2p: the sending side, or the receiving
	uint64_t key;
	const PlanOp *op;
} Want;

static int want_p2p(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	return plan_op_is_p2p(plan_op_kind(o)) && plan_ops[o->kind].sends == w->sends &&
	       o->peer == w->peer;
}

static int want_kind(const PlanOp *o, const void *arg)
{
	return o->kind == ((const Want *)arg)->kind;
}

/* The reduction of weight gradients whose result is key (reduced_key). */
static int want_ar(const PlanOp *o, const void *arg)
{
	return reduces_wgrad(plan_op_kind(o)) &&
	       reduced_key(plan_ops[o->kind].over, o->stage) == ((const Want *)arg)->key;
}

/* The TPREDUCE with the identity of the op in arg (stage, microbatch, direction, part). */
static int want_tp(const PlanOp *o, const void *arg)
{
	return tp_same(o, ((const Want *)arg)->op);
}

/* The TPREDUCE whose result is key (tp_key KEY_AR). */
static int want_tp_done(const PlanOp *o, const void *arg)
{
	return plan_ops[o->kind].part_end &&
	       tp_key(KEY_AR, o->stage, o->dir, o->part, o->mb) == ((const Want *)arg)->key;
}

/* The part whose data a TPREDUCE (in arg) all-reduces. */
static int want_tp_part(const PlanOp *o, const void *arg)
{
	const PlanOp *x = ((const Want *)arg)->op;
	const OpInfo *in = &plan_ops[o->kind];
	return in->parted && o->stage == x->stage && o->mb == x->mb && in->dir == x->dir &&
	       o->part == x->part;
}

static int want_recv_key(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	return plan_op_is_p2p(plan_op_kind(o)) && !plan_ops[o->kind].sends &&
	       hkey(KEY_RECV, o->dir, o->stage, o->mb) == w->key;
}

static int want_producer(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	uint16_t makes = plan_ops[o->kind].makes;
	if (makes & PLAN_DEP_ACT)
		return hkey(KEY_DATA, DIR_ACT, o->stage, o->mb) == w->key;
	if (makes & PLAN_DEP_GRAD)
		return hkey(KEY_DATA, DIR_GRAD, o->stage, o->mb) == w->key;
	return 0;
}

static int want_wgrad(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	return (plan_ops[o->kind].makes & PLAN_DEP_WGRAD) && (uint64_t)o->stage == w->key;
}

/* The OPTIM of the stage in arg's key. */
static int want_step(const PlanOp *o, const void *arg)
{
	return (plan_ops[o->kind].makes & PLAN_DEP_STEP) &&
	       (uint64_t)o->stage == ((const Want *)arg)->key;
}

/* Whether op i of rank r (in its posted group) is still unmatched. */
static int unmatched(Sim *s, int r, int64_t i)
{
	const PlanOp *o = &s->p->ranks[r].ops[i];
	if (plan_ops[o->kind].part_end)
		return s->rk[r].tp_op == i;
	if (coll_ar(plan_op_kind(o)))
		return s->rk[r].ar_op == i;
	if (plan_ops[o->kind].sends && s->opt.eager)
		return 0;
	int recv = !plan_ops[o->kind].sends; // o is a SEND or a RECV
	int src = recv ? o->peer : r, dst = recv ? r : o->peer;
	const SimRank *k = &s->rk[r];
	for (int j = 0; j < k->nch; j++) {
		const Chan *c = &s->ch[k->ch[j].chan];
		if (c->src != src || c->dst != dst)
			continue;
		for (int64_t q = 0; q < c->n; q++)
			if (c->q[(c->head + q) % c->cap].op == i)
				return c->side == recv;
	}
	return 0;
}

/* Agents: rank * 2 + 0 (strict rank or comm stream), rank * 2 + 1 (compute stream). */
static int agent_blocked(Sim *s, int a)
{
	const SimRank *k = &s->rk[a / 2];
	return (a & 1 ? k->cstate : k->state) != AG_DONE;
}

/* The op agent a is blocked at (the first unmatched op of a posted group). */
static int64_t agent_op(Sim *s, int a)
{
	int r = a / 2;
	SimRank *k = &s->rk[r];
	if (a & 1)
		return k->cpc;
	if (k->state == AG_MATCH) {
		for (int64_t i = k->pc; i < k->gend; i++)
			if (unmatched(s, r, i))
				return i;
	}
	return k->pc;
}

/* Where agent a will post next: past its posted group. */
static int64_t agent_next_post(Sim *s, int a)
{
	SimRank *k = &s->rk[a / 2];
	return k->state == AG_MATCH ? k->gend : k->pc;
}

/* Rank r's TPREDUCE x waits for the members that have not posted the same one (edge
 * number *e onwards); 1 with w and to filled when the idx-th edge is among them. */
static int tp_edge(Sim *s, int r, int64_t x, int *e, int idx, SimWait *w, int *to, uint8_t stream)
{
	const Plan *p = s->p;
	const Coll *c = &s->coll[s->collof[OP_OVER_TP][r]];
	uint8_t cstream = s->opt.model == SIM_STRICT ? SIM_STREAM_RANK : SIM_STREAM_COMM;
	Want wt = {.op = &p->ranks[r].ops[x]};
	for (int j = 0; j < c->n; j++) {
		int m = c->members[j];
		int64_t mi = s->rk[m].tp_op;
		if (m == r || (mi >= 0 && want_tp(&p->ranks[m].ops[mi], &wt)))
			continue; // arrived with the same one
		if ((*e)++ != idx)
			continue;
		int64_t y = find_op(p, m, agent_next_post(s, m * 2), 0, want_tp, &wt);
		*w = (SimWait){{r, x, stream}, {m, y, cstream}, {m, -1, cstream}};
		*to = m * 2;
		return 1;
	}
	return 0;
}

/* agent_edge's compute stream of rank r: the receives (or all-reduces) its op consumes,
 * both halves' of an F&B pair (one slot). */
static int compute_edge(Sim *s, int r, int idx, SimWait *w, int *to, uint8_t stream,
                        uint8_t cstream)
{
	const SimRank *k = &s->rk[r];
	const Plan *p = s->p;
	const PlanRank *pr = &p->ranks[r];
	int e = 0;
	int64_t last = k->cpc + (k->cpc + 1 < pr->nops && plan_op_paired(&pr->ops[k->cpc]));
	for (int64_t c = k->cpc; c <= last; c++) {
		uint64_t keys[MAXKEYS];
		int nk = consumed_keys(s, &pr->ops[c], keys, MAXKEYS);
		for (int j = 0; j < nk; j++) {
			if (sim_val_find(s, r, keys[j]) || e++ != idx)
				continue;
			Want wt = {.key = keys[j]};
			int tpk = (keys[j] >> 62) == KEY_AR && ((keys[j] >> 31) & (1u << 29));
			int64_t y = tpk                         ? find_op(p, r, k->pc, 0, want_tp_done, &wt)
			            : (keys[j] >> 62) == KEY_AR ? find_op(p, r, k->pc, 0, want_ar, &wt)
			                                        : find_op(p, r, k->pc, 0, want_recv_key, &wt);
			*w = (SimWait){{r, k->cpc, stream}, {r, y, cstream}, {r, -1, cstream}};
			*to = r * 2;
			return 1;
		}
	}
	return 0;
}

/* The edges of agent a, in order; fills w for the idx-th.  0 when none left. */
static int agent_edge(Sim *s, int a, int idx, SimWait *w, int *to)
{
	int r = a / 2;
	SimRank *k = &s->rk[r];
	const Plan *p = s->p;
	const PlanRank *pr = &p->ranks[r];
	uint8_t stream = s->opt.model == SIM_STRICT ? SIM_STREAM_RANK
	                 : (a & 1)                   ? SIM_STREAM_COMPUTE
	                                             : SIM_STREAM_COMM;
	uint8_t cstream = s->opt.model == SIM_STRICT ? SIM_STREAM_RANK : SIM_STREAM_COMM;
	int e = 0;
	if (a & 1)
		return compute_edge(s, r, idx, w, to, stream, cstream);
	if (k->state == AG_WAIT) { // comm stream: the data of its sends
		int64_t end = plan_group_end(pr, k->pc);
		for (int64_t x = k->pc; x < end; x++) {
			const PlanOp *o = &pr->ops[x];
			const OpInfo *in = &plan_ops[o->kind];
			Want wt = {0};
			int64_t y;
			if (in->sends) {
				wt.key = send_key(s, o);
				if (sim_val_find(s, r, wt.key))
					continue;
				y = find_op(p, r, k->cpc, 0, want_producer, &wt);
			} else if (in->part_end) {
				if (sim_val_find(s, r, tp_key(KEY_DATA, o->stage, o->dir, o->part, o->mb)))
					continue;
				wt.op = o;
				y = find_op(p, r, k->cpc, 0, want_tp_part, &wt);
			} else if (in->needs & PLAN_DEP_STEP) { // an ALLGATHER: its OPTIM
				if (sim_val_find(s, r, step_key(o->stage)))
					continue;
				wt.key = (uint64_t)o->stage;
				y = find_op(p, r, k->cpc, 0, want_step, &wt);
			} else if (reduces_wgrad(o->kind)) {
				int ls = local_stage(s, r, o->stage);
				if (ls < 0 || k->wdone[ls] >= p->microbatches)
					continue;
				wt.key = (uint64_t)o->stage;
				y = find_op(p, r, k->cpc, 0, want_wgrad, &wt);
			} else {
				continue;
			}
			if (e++ != idx)
				continue;
			*w = (SimWait){{r, x, stream}, {r, y, SIM_STREAM_COMPUTE}, {r, -1, SIM_STREAM_COMPUTE}};
			*to = r * 2 + 1;
			return 1;
		}
		return 0;
	}
	/* Parked in a posted group: its unmatched ops wait for their partners. */
	for (int64_t x = k->pc; x < k->gend; x++) {
		if (!unmatched(s, r, x))
			continue;
		const PlanOp *o = &pr->ops[x];
		int over = plan_ops[o->kind].over;
		if (plan_ops[o->kind].part_end) {
			if (tp_edge(s, r, x, &e, idx, w, to, stream))
				return 1;
			continue;
		}
		if (coll_ar(o->kind)) {
			int g = s->collof[over][r];
			if (g < 0) // a TIEREDUCE on a rank without a tied table
				continue;
			const Coll *c = &s->coll[g];
			for (int j = 0; j < c->n; j++) {
				int m = c->members[j];
				int64_t at = s->rk[m].ar_op;
				if (at >= 0 && p->ranks[m].ops[at].kind == o->kind)
					continue; // arrived
				if (e++ != idx)
					continue;
				Want wt = {.kind = o->kind};
				int64_t y = find_op(p, m, agent_next_post(s, m * 2), 0, want_kind, &wt);
				*w = (SimWait){{r, x, stream}, {m, y, cstream}, {m, -1, cstream}};
				*to = m * 2;
				return 1;
			}
			continue;
		}
		if (e++ != idx)
			continue;
		int recv = !plan_ops[o->kind].sends; // o is a SEND or a RECV
		int q = o->peer;
		/* Which unposted partner op: skip as many as are queued ahead of x. */
		int64_t ahead = 0;
		for (int j = 0; j < k->nch; j++) {
			const Chan *c = &s->ch[k->ch[j].chan];
			if (c->src != (recv ? q : r) || c->dst != (recv ? r : q))
				continue;
			for (int64_t z = 0; z < c->n && c->q[(c->head + z) % c->cap].op != x; z++)
				ahead++;
		}
		Want wt = {.sends = recv, .peer = r}; // its partner: a SEND for a RECV, and back
		int64_t y = find_op(p, q, agent_next_post(s, q * 2), ahead, want_p2p, &wt);
		*w = (SimWait){{r, x, stream}, {q, y, cstream}, {q, -1, cstream}};
		*to = q * 2;
		return 1;
	}
	return 0;
}

void sim_analyse_stall(Sim *s)
{
	SimResult *res = s->res;
	const Plan *p = s->p;
	int nag = s->world * 2;
	int overlap = s->opt.model == SIM_OVERLAP;
	/* The stuck streams and their ops. */
	int nstuck = 0;
	for (int a = 0; a < nag; a++)
		if ((overlap || !(a & 1)) && agent_blocked(s, a))
			nstuck++;
	res->stuck = calloc((size_t)nstuck, sizeof *res->stuck);
	if (!res->stuck) {
		s->oom = 1;
		return;
	}
	for (int a = 0; a < nag; a++)
		if ((overlap || !(a & 1)) && agent_blocked(s, a))
			res->stuck[res->nstuck++] =
			    (SimOpRef){a / 2, agent_op(s, a),
			               !overlap ? SIM_STREAM_RANK : a & 1 ? SIM_STREAM_COMPUTE : SIM_STREAM_COMM};
	res->stall_time = 0;
	for (int r = 0; r < s->world; r++)
		res->stall_time = max64(res->stall_time, res->ranks[r].finish);

	/* Walk the wait-for graph from the first stuck stream, following the first edge
	 * that leads to another stuck stream, until a stream repeats. */
	int *seen = calloc((size_t)nag, sizeof *seen); // step + 1 at which visited
	SimWait *walk = calloc((size_t)nag + 1, sizeof *walk);
	if (!seen || !walk) {
		free(seen);
		free(walk);
		s->oom = 1;
		return;
	}
	int a = res->stuck[0].rank * 2 + (res->stuck[0].stream == SIM_STREAM_COMPUTE);
	int steps = 0;
	while (!seen[a]) {
		seen[a] = steps + 1;
		SimWait w, first;
		int to = -1, firstto = -1, found = 0;
		for (int idx = 0; agent_edge(s, a, idx, &w, &to); idx++) {
			if (firstto < 0) {
				first = w;
				firstto = to;
			}
			if (w.on.op >= 0 && agent_blocked(s, to)) {
				found = 1;
				break;
			}
		}
		if (!found) {
			/* What it waits for will never be posted: a pairing error verify missed. */
			res->verdict = SIM_MISMATCH;
			free(res->stuck);
			res->stuck = calloc(2, sizeof *res->stuck);
			if (res->stuck && firstto >= 0) {
				res->nstuck = 2;
				res->stuck[0] = first.from;
				res->stuck[1] = first.on;
				snprintf(res->message, sizeof res->message,
				         "rank %d waits for an op of rank %d that %s",
				         plan_world_rank(p, first.from.rank), plan_world_rank(p, first.on.rank),
				         first.on.op < 0 ? "does not exist"
				                         : "comes after the end of its list");
			} else {
				res->nstuck = 0;
				snprintf(res->message, sizeof res->message,
				         "rank %d is stuck waiting for nothing", plan_world_rank(p, a / 2));
			}
			free(seen);
			free(walk);
			return;
		}
		walk[steps++] = w;
		a = to;
	}
	int from = seen[a] - 1;
	res->ncycle = steps - from;
	res->cycle = calloc((size_t)res->ncycle, sizeof *res->cycle);
	if (!res->cycle)
		res->ncycle = 0;
	for (int j = 0; j < res->ncycle; j++) {
		res->cycle[j] = walk[from + j];
		res->cycle[j].behind = walk[from + (j + 1) % res->ncycle].from;
	}
	free(seen);
	free(walk);
	if (!res->cycle) { // the run fails as out of memory (sim_run), not as this deadlock
		s->oom = 1;
		return;
	}
	int stuck_ranks = 0;
	for (int r = 0; r < s->world; r++)
		stuck_ranks += s->rk[r].state != AG_DONE || (overlap && s->rk[r].cstate != AG_DONE);
	int lines = p->line ? plan_mesh_world(p) / p->world : 1; // every line is stuck alike
	snprintf(res->message, sizeof res->message,
	         "deadlock: %d of %d ranks can never finish (%s model, %s sends)",
	         stuck_ranks * lines, p->world * lines, sim_model_names[s->opt.model], s->opt.eager ? "eager" : "rendezvous");
}

/* After every rank finished: eager sends nobody received are still queued. */
void sim_leftover_sends(Sim *s)
{
	for (int i = 0; i < s->nch; i++) {
		Chan *c = &s->ch[i];
		if (!c->n)
			continue;
		ChanEntry e = c->q[c->head];
		if (c->side == 0)
			sim_mismatch(s, c->src, e.op, c->dst, -1,
			         "a send has no matching receive (it completed only because sends are eager)");
		else
			sim_mismatch(s, c->dst, e.op, c->src, -1, "a receive has no matching send");
		return;
	}
}
