/* The op interpreter: one per rank, the same for every backend.
 *
 * It walks the rank's op list in order (docs/semantics.md), once per step.  Compute
 * ops run the stage code of stage.c; a maximal run of comm ops with one group number
 * is posted between group_start() and group_end().  Tensors between stages live in
 * slots keyed (edge, microbatch, direction): F and B fill them with their outputs
 * (one reference per out- or in-edge), and they are emptied by the consumer: the local
 * peer stage's F/B (a hand-off) or a SEND; RECV fills them on the receiving side.
 * Every edge a compute op or a transfer uses must be registered in the rank's peer
 * table with the right locality and peer rank: an unregistered or mismatched peer is
 * an error naming the op, never a silent fallback.
 *
 * After every op the saved-activation bytes the backend holds are sampled into the
 * rank's peak, as the simulator does, so the two figures agree exactly.
 *
 * At tp > 1 a stage's F, B and BW come as parts (plan_stage_parts), each resuming the
 * (stage, microbatch, direction)'s walk (RtWalk, stage.c) where the previous part
 * stopped, and a TPREDUCE runs the all-reduce the walk stopped for; the part rule
 * (plan_part_apply) orders them as the verifier does, and the dependency rules see a
 * whole F or B when its last part or TPREDUCE completes. */
#include "rt_private.h"
#include "../plan/tie.h"
#include "../plan/tp.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
	int stage;
	RtStageBufs b;
	RtTensor **saved;  // [microbatches][nslots] (rt_stage_forward's)
	uint8_t *state;    // [microbatches]: PLAN_DEP_MB bits done this step
	int *peer_in;      // per in-edge position: index in the peer table, -1 if none
	int *peer_out;     // per out-edge position
	PlanStageDeps deps; // this step's W count, ALLREDUCE and OPTIM (plan_dep_apply)
	RtTensor tie;       // a table tied across ranks: the gradient of this stage's copy
	int tie_peer;       // ... and the rank holding the other copy
	PlanParts parts;    // tp > 1: the stage's parts
	PlanPartState *ps;  // [microbatches]: how far its parts ran
	RtWalk *walk;       // [microbatches][DIR_COUNT]: the walks between parts
} LStage;

struct RtInterp {
	int nls;
	LStage *ls;
	int *local_of;     // [nstages] -> index in ls, -1 when not on this rank
	RtTensor **slot;   // [2][nedges][microbatches][DIR_COUNT]: plane 1 holds what a RECV
	                   // from self got, while plane 0 still holds what its SEND sends
	RtTensor ***sent;  // slots of the current group's sends, released after it
	int64_t nsent;
	int open;          // the current ops opened a comm group (group_open)
};

static RtTensor **slot_at(RtRank *r, int e, int mb, int dir)
{
	const Plan *p = r->w->plan;
	return &r->in->slot[((int64_t)e * p->microbatches + mb) * DIR_COUNT + dir];
}

/* The slot a RECV from self fills and the consuming stage empties (see RtInterp.slot). */
static RtTensor **self_slot_at(RtRank *r, int e, int mb, int dir)
{
	const Plan *p = r->w->plan;
	return slot_at(r, e, mb, dir) + (int64_t)p->nedges * p->microbatches * DIR_COUNT;
}

static void slot_release(RtRank *r, RtTensor **s)
{
	RtTensor *t = *s;
	*s = NULL;
	if (t && --t->refs <= 0)
		rt_tensor_free(r, t);
}

/* The sum of the tensors in slots (in order), owned by the caller; the slots empty. */
static RtTensor *take_sum(RtRank *r, RtTensor ***slots, int n, int64_t rows, int64_t cols)
{
	if (n == 1 && (*slots[0])->refs == 1) {
		RtTensor *t = *slots[0];
		*slots[0] = NULL;
		t->refs = 0;
		return t;
	}
	RtTensor *x = rt_tensor_new_prec(r, rows, cols, RT_MEM_TEMP);
	if (!x)
		return NULL;
	const RtDevice *dev = r->dev;
	for (int i = 0; i < n; i++) {
		if ((i == 0 ? dev->copy(r, x, *slots[i]) : dev->add(r, x, *slots[i]))) {
			rt_tensor_free(r, x);
			return NULL;
		}
	}
	if (rt_round(r, x)) {
		rt_tensor_free(r, x);
		return NULL;
	}
	for (int i = 0; i < n; i++)
		slot_release(r, slots[i]);
	return x;
}

static int find_peer(const PlanRank *pr, int stage, int edge, int in)
{
	for (int j = 0; j < pr->npeers; j++)
		if (pr->peers[j].stage == stage && pr->peers[j].edge == edge && pr->peers[j].in == in)
			return j;
	return -1;
}

static int setup(RtRank *r)
{
	const Plan *p = r->w->plan;
	const RtModel *m = r->model;
	RtInterp *in = calloc(1, sizeof *in);
	if (!in)
		return rt_error(r, "out of memory");
	r->in = in;
	in->local_of = malloc((size_t)p->nstages * sizeof(int));
	in->ls = calloc((size_t)p->nstages, sizeof *in->ls);
	in->slot = calloc(2 * (size_t)(p->nedges ? p->nedges : 1) * (size_t)p->microbatches * DIR_COUNT,
	                  sizeof *in->slot);
	int64_t maxg = 1;
	for (int64_t i = 0, j; i < r->pr->nops; i = j) {
		j = plan_group_end(r->pr, i);
		if (j - i > maxg)
			maxg = j - i;
	}
	in->sent = calloc((size_t)maxg, sizeof *in->sent);
	if (!in->local_of || !in->ls || !in->slot || !in->sent)
		return rt_error(r, "out of memory");
	for (int s = 0; s < p->nstages; s++) {
		in->local_of[s] = -1;
		if (p->stages[s].pp != r->coord[DIM_PP])
			continue;
		LStage *ls = &in->ls[in->nls];
		in->local_of[s] = in->nls++;
		ls->stage = s;
		const RtStageModel *sm = &m->st[s];
		ls->saved = calloc((size_t)p->microbatches * (size_t)sm->nslots, sizeof *ls->saved);
		ls->state = calloc((size_t)p->microbatches, 1);
		ls->peer_in = malloc((size_t)(sm->nin + 1) * sizeof(int));
		ls->peer_out = malloc((size_t)(sm->nout + 1) * sizeof(int));
		if (!ls->saved || !ls->state || !ls->peer_in || !ls->peer_out)
			return rt_error(r, "out of memory");
		for (int k = 0; k < sm->nin; k++)
			ls->peer_in[k] = find_peer(r->pr, s, sm->in_edges[k], 1);
		for (int k = 0; k < sm->nout; k++)
			ls->peer_out[k] = find_peer(r->pr, s, sm->out_edges[k], 0);
		if (rt_stage_bufs_open(r, s, &ls->b))
			return RT_EFAIL;
		if (p->dims[DIM_TP] > 1 &&
		    (plan_stage_parts(p, s, &ls->parts) ||
		     !(ls->ps = calloc((size_t)p->microbatches, sizeof *ls->ps)) ||
		     !(ls->walk = calloc((size_t)p->microbatches * DIR_COUNT, sizeof *ls->walk))))
			return rt_error(r, "out of memory");
	}
	/* A tied head borrows the embedding's table: the compiler puts both on one rank. */
	int e = m->embed_stage;
	for (int i = 0; i < in->nls; i++)
		in->ls[i].b.embed = e >= 0 && in->local_of[e] >= 0 ? &in->ls[in->local_of[e]].b : NULL;
	for (int i = 0; i < in->nls; i++) {
		in->ls[i].deps.dist = p->optim.distributed;
		in->ls[i].deps.sp = rt_stage_seq_params(r, in->ls[i].stage) > 0;
	}
	if (m->tied_head >= 0 && in->local_of[m->tied_head] >= 0 && in->local_of[e] >= 0)
		in->ls[in->local_of[e]].deps.tied = 1;
	/* A table tied across ranks: this rank's copy, summed with the other by TIEREDUCE. */
	int ts, q = plan_tie_peer(p, r->rank, &ts);
	if (q >= 0 && in->local_of[ts] >= 0 && e >= 0 && m->copy_head >= 0) {
		LStage *ls = &in->ls[in->local_of[ts]];
		int head = ts == m->copy_head;
		int64_t rows = p->vocab / m->tp, d = plan_tie_bytes(p) / 4 / rows; // the rank's rows
		ls->deps.tie = 1;
		ls->tie = rt_tensor_view(ls->b.grads, head ? m->copy_off : m->embed_off, rows, d);
		ls->tie_peer = q;
	}
	return RT_OK;
}

void rt_rank_free(RtRank *r)
{
	RtInterp *in = r->in;
	if (!in)
		return;
	const Plan *p = r->w->plan;
	for (int i = 0; i < in->nls; i++) {
		LStage *ls = &in->ls[i];
		int64_t nslots = r->model->st[ls->stage].nslots;
		if (ls->saved)
			for (int64_t k = 0; k < (int64_t)p->microbatches * nslots; k++)
				rt_tensor_free(r, ls->saved[k]);
		for (int k = 0; ls->walk && k < p->microbatches * DIR_COUNT; k++)
			rt_walk_free(r, &ls->walk[k]);
		rt_stage_bufs_close(r, &ls->b);
		plan_parts_free(&ls->parts);
		free(ls->ps);
		free(ls->walk);
		free(ls->saved);
		free(ls->state);
		free(ls->peer_in);
		free(ls->peer_out);
	}
	if (in->slot) {
		int64_t n = 2 * (int64_t)p->nedges * p->microbatches * DIR_COUNT;
		for (int64_t k = 0; k < n; k++) {
			RtTensor *t = in->slot[k];
			if (!t)
				continue;
			/* A tensor shared by several slots is freed with its last reference. */
			for (int64_t j = k; j < n; j++)
				if (in->slot[j] == t)
					in->slot[j] = NULL;
			rt_tensor_free(r, t);
		}
	}
	free(in->slot);
	free(in->sent);
	free(in->ls);
	free(in->local_of);
	free(in);
	r->in = NULL;
}

/* ---- checks shared by compute and comm ops ---- */

static LStage *local_stage(RtRank *r, int s, const char *what)
{
	int i = r->in->local_of[s];
	if (i < 0) {
		rt_error(r, "%s stage %s, which is not placed on this rank (pp=%d)", what,
		         r->w->plan->stages[s].name, r->coord[DIM_PP]);
		return NULL;
	}
	return &r->in->ls[i];
}

/* Checks the registration of local stage s's neighbour along edge e (in: e enters s):
 * it must exist, name the edge's other stage, and be of kind `want` (PeerKind) on rank
 * `want_rank` (-1: any remote rank) as the caller needs. */
static int check_peer(RtRank *r, int s, int e, int in, int want, int want_rank)
{
	const Plan *p = r->w->plan;
	int j = find_peer(r->pr, s, e, in);
	const char *sn = p->stages[s].name;
	if (j < 0)
		return rt_error(r, "stage %s has no peer registered for edge %d (%s): the rank's peer "
		                   "table lacks 'peer s=%d %s e=%d'",
		                sn, e, in ? "in" : "out", s, in ? "in" : "out", e);
	const PlanPeer *pe = &r->pr->peers[j];
	int other = in ? p->edges[e].src : p->edges[e].dst;
	if (pe->peer_stage != other)
		return rt_error(r, "peer of stage %s on edge %d is registered as stage %d, not %d", sn,
		                e, pe->peer_stage, other);
	if (pe->local != want)
		return rt_error(r, "edge %d of stage %s is registered %s, but the op needs it %s", e,
		                sn, plan_peer_names[pe->local < PEER_COUNT ? pe->local : 0],
		                plan_peer_names[want]);
	if (want != PEER_REMOTE && pe->peer_rank != r->rank)
		return rt_error(r, "%s peer of stage %s on edge %d names rank %d", plan_peer_names[want],
		                sn, e, pe->peer_rank);
	if (want != PEER_REMOTE && r->in->local_of[other] < 0)
		return rt_error(r, "edge %d is registered %s but stage %s is not on this rank", e,
		                plan_peer_names[want], p->stages[other].name);
	if (want == PEER_REMOTE && want_rank >= 0 && pe->peer_rank != want_rank)
		return rt_error(r, "transfer with rank %d on edge %d, but the peer table registers "
		                   "stage %s on rank %d",
		                want_rank, e, p->stages[other].name, pe->peer_rank);
	return RT_OK;
}

/* Gathers the tensors arriving on a stage's edges for microbatch mb (dir ACT: its
 * in-edges; GRAD: its out-edges) and returns their sum, owned. */
static RtTensor *gather_edges(RtRank *r, LStage *ls, int mb, int dir)
{
	const Plan *p = r->w->plan;
	const RtStageModel *sm = &r->model->st[ls->stage];
	int n = dir == DIR_ACT ? sm->nin : sm->nout;
	const int *edges = dir == DIR_ACT ? sm->in_edges : sm->out_edges;
	const int *peers = dir == DIR_ACT ? ls->peer_in : ls->peer_out;
	RtTensor **slots[64];
	RtTensor ***sl = n <= 64 ? slots : malloc((size_t)n * sizeof *sl);
	if (!sl) {
		rt_error(r, "out of memory");
		return NULL;
	}
	RtTensor *x = NULL;
	for (int k = 0; k < n; k++) {
		int e = edges[k];
		if (peers[k] < 0) {
			check_peer(r, ls->stage, e, dir == DIR_ACT, 0, -1);
			goto out;
		}
		const PlanPeer *pe = &r->pr->peers[peers[k]];
		if (pe->local != PEER_REMOTE &&
		    check_peer(r, ls->stage, e, dir == DIR_ACT, pe->local, r->rank))
			goto out;
		sl[k] = pe->local == PEER_SELF ? self_slot_at(r, e, mb, dir) : slot_at(r, e, mb, dir);
		if (!*sl[k]) {
			const char *other = p->stages[pe->peer_stage].name;
			if (pe->local == PEER_LOCAL)
				rt_error(r, "the %s of edge %d for microbatch %d is not there: the local stage "
				            "%s has not run %s %d %d yet",
				         dir == DIR_ACT ? "activation" : "gradient", e, mb, other,
				         dir == DIR_ACT ? "F" : "B", pe->peer_stage, mb);
			else
				rt_error(r, "the %s of edge %d for microbatch %d has not been received from "
				            "rank %d (no earlier RECV %s e=%d m=%d from=%d)",
				         dir == DIR_ACT ? "activation" : "gradient", e, mb, pe->peer_rank,
				         plan_dir_names[dir], e, mb, pe->peer_rank);
			goto out;
		}
	}
	x = take_sum(r, sl, n, r->model->rows,
	             dir == DIR_ACT ? p->stages[ls->stage].in : p->stages[ls->stage].out);
out:
	if (sl != slots)
		free(sl);
	return x;
}

/* Puts t (owned) into the slots of the stage's edges (ACT: out-edges, GRAD: in-edges). */
static int scatter_edges(RtRank *r, LStage *ls, int mb, int dir, RtTensor *t)
{
	const RtStageModel *sm = &r->model->st[ls->stage];
	int n = dir == DIR_ACT ? sm->nout : sm->nin;
	const int *edges = dir == DIR_ACT ? sm->out_edges : sm->in_edges;
	const int *peers = dir == DIR_ACT ? ls->peer_out : ls->peer_in;
	int rc = RT_OK;
	for (int k = 0; k < n && rc == RT_OK; k++) {
		int e = edges[k];
		if (peers[k] < 0) {
			rc = check_peer(r, ls->stage, e, dir != DIR_ACT, 0, -1);
			break;
		}
		int kind = r->pr->peers[peers[k]].local;
		if (kind != PEER_REMOTE &&
		    (rc = check_peer(r, ls->stage, e, dir != DIR_ACT, kind, r->rank)))
			break;
		RtTensor **s = slot_at(r, e, mb, dir);
		if (*s) {
			rc = rt_error(r, "the %s of edge %d for microbatch %d is produced twice",
			              dir == DIR_ACT ? "activation" : "gradient", e, mb);
			break;
		}
		*s = t;
		t->refs++;
	}
	if (t->refs == 0)
		rt_tensor_free(r, t);
	return rc;
}

/* ---- compute ops ---- */

/* The dependency rules (plan_dep_apply) for op o on local stage ls, as an op of kind k
 * (o's, or the whole F or B that o's part or TPREDUCE completes: then a compute op's
 * rules, per microbatch). */
static const char *dep_why(RtRank *r, LStage *ls, const PlanOp *o, OpKind k)
{
	const Plan *p = r->w->plan;
	const RtModel *m = r->model;
	int per_mb = o->mb >= 0 && o->mb < p->microbatches && plan_op_is_compute(k);
	int e = ls->stage == m->tied_head ? r->in->local_of[m->embed_stage] : -1;
	return plan_dep_apply(k, per_mb ? &ls->state[o->mb] : NULL, &ls->deps,
	                      e >= 0 && per_mb ? &r->in->ls[e].deps : NULL, p->microbatches,
	                      p->dims[DIM_DP]);
}

/* The part rule (plan_part_apply) for op o at tp > 1, then the dependency rules when o
 * completes a whole F, B or BW (*done, else OP_COUNT). */
static const char *part_why(RtRank *r, LStage *ls, const PlanOp *o, OpKind *done)
{
	*done = OP_COUNT;
	if (o->mb < 0 || o->mb >= r->w->plan->microbatches)
		return "no such microbatch";
	const char *why = plan_part_apply(&ls->parts, o, ls->state[o->mb], &ls->ps[o->mb], done);
	return why || *done == OP_COUNT ? why : dep_why(r, ls, o, *done);
}

/* Op o on stage ls refused by a rule, for reason why: the error; RT_OK when why is NULL. */
static int refused(RtRank *r, LStage *ls, const PlanOp *o, const char *why)
{
	const Plan *p = r->w->plan;
	if (!why)
		return RT_OK;
	char text[200];
	plan_format_op(p, o, text, sizeof text);
	return rt_error(r, "%s (stage %s): %s", text, p->stages[ls->stage].name, why);
}

/* The dependency rules for op o, which is not a part (nor a part's TPREDUCE). */
static int dep_rule(RtRank *r, LStage *ls, const PlanOp *o)
{
	return refused(r, ls, o, dep_why(r, ls, o, plan_op_kind(o)));
}

static RtTensor **saved_of(RtRank *r, LStage *ls, int mb)
{
	return ls->saved + (int64_t)mb * r->model->st[ls->stage].nslots;
}

static int op_forward(RtRank *r, LStage *ls, int mb, int step)
{
	const RtStageModel *sm = &r->model->st[ls->stage];
	int replica = r->coord[DIM_DP];
	RtTensor *x = sm->nin == 0 ? rt_stage_input(r, step, replica, mb, &ls->b, RT_MEM_TEMP)
	                           : gather_edges(r, ls, mb, DIR_ACT);
	if (!x)
		return RT_EFAIL;
	RtTensor *y;
	RtTensor **saved = saved_of(r, ls, mb);
	if (rt_stage_forward(r, ls->stage, mb, step, replica, &ls->b, x, saved, &y))
		return RT_EFAIL;
	int mode = r->w->plan->stages[ls->stage].recompute;
	if (mode == PLAN_RECOMPUTE_FULL)
		rt_stage_drop(r, ls->stage, saved);
	else if (mode == PLAN_RECOMPUTE_SELECTIVE)
		rt_stage_drop_probs(r, ls->stage, saved, 0, r->w->plan->stages[ls->stage].nlayers);
	return y ? scatter_edges(r, ls, mb, DIR_ACT, y) : RT_OK;
}

static int op_backward(RtRank *r, LStage *ls, int mb, int step)
{
	const RtStageModel *sm = &r->model->st[ls->stage];
	RtTensor **saved = saved_of(r, ls, mb);
	int mode = r->w->plan->stages[ls->stage].recompute;
	int nl = r->w->plan->stages[ls->stage].nlayers;
	if (mode) {
		if (mode == PLAN_RECOMPUTE_FULL
		        ? rt_stage_recompute(r, ls->stage, mb, step, r->coord[DIM_DP], &ls->b, saved)
		        : rt_stage_rebuild_probs(r, ls->stage, &ls->b, saved, 0, nl))
			return RT_EFAIL;
		rt_mem_sample(r, atomic_load(&r->cur_op)); // F rebuilt, B not begun
	}
	RtTensor *dy = NULL;
	if (!sm->loss && !(dy = gather_edges(r, ls, mb, DIR_GRAD)))
		return RT_EFAIL;
	RtTensor *dx;
	if (rt_stage_backward(r, ls->stage, mb, step, r->coord[DIM_DP], &ls->b, dy, saved, &dx))
		return RT_EFAIL;
	return dx ? scatter_edges(r, ls, mb, DIR_GRAD, dx) : RT_OK;
}

/* W of layers [lo, hi) of microbatch mb (a whole W: all the stage's layers); a test's
 * wrong run may lose its gradient (fault.c). */
static int op_weights(RtRank *r, LStage *ls, int mb, int step, int lo, int hi)
{
	RtTensor *keep;
	if (rt_wrong_w_begin(r, &ls->b, step, mb, &keep))
		return RT_EFAIL;
	int rc = rt_stage_weights_of(r, ls->stage, &ls->b, saved_of(r, ls, mb), lo, hi);
	return rt_wrong_w_end(r, &ls->b, keep) ? RT_EFAIL : rc;
}

/* The stage's step is over: the next starts afresh. */
static void step_over(RtRank *r, LStage *ls)
{
	const Plan *p = r->w->plan;
	memset(ls->state, 0, (size_t)p->microbatches);
	if (ls->ps)
		memset(ls->ps, 0, (size_t)p->microbatches * sizeof *ls->ps);
	ls->deps = (PlanStageDeps){.tied = ls->deps.tied, .tie = ls->deps.tie, .dist = ls->deps.dist,
	                           .sp = ls->deps.sp};
}

/* The stage's step ends with its ALLGATHER (a distributed optimizer at dp > 1). */
static int gathers(RtRank *r)
{
	return rt_optim_dp(r) > 1;
}

static int op_optim(RtRank *r, LStage *ls, int step)
{
	const RtDevice *dev = r->dev;
	if (rt_wrong_optim(r, &ls->b, step, 0) ||
	    rt_stage_optim(r, &ls->b, ls->b.grads) ||
	    rt_wrong_optim(r, &ls->b, step, 1) || dev->zero(r, ls->b.grads))
		return RT_EFAIL;
	if (!gathers(r))
		step_over(r, ls);
	return RT_OK;
}

/* ---- tp parts ---- */

/* A whole F or B (BW) of (stage, microbatch) is done: its output goes out on the edges. */
static int seq_done(RtRank *r, LStage *ls, int mb, int dir)
{
	RtTensor *out;
	rt_stage_walk_end(r, &ls->walk[mb * DIR_COUNT + dir], &out);
	return out ? scatter_edges(r, ls, mb, dir, out) : RT_OK;
}

/* Part o->part of an F, B or BW: the first takes the stage's input (or output gradient).
 * *split: a BW part's B time, as op_fused times a whole BW. */
static int op_part(RtRank *r, LStage *ls, const PlanOp *o, int step, int64_t *split)
{
	const RtStageModel *sm = &r->model->st[ls->stage];
	OpKind done;
	if (refused(r, ls, o, part_why(r, ls, o, &done)))
		return RT_EFAIL;
	int mb = o->mb, dir = plan_ops[o->kind].dir, replica = r->coord[DIM_DP];
	RtWalk *wk = &ls->walk[mb * DIR_COUNT + dir];
	const PlanPart *pt = &ls->parts.part[dir][o->part];
	RtTensor **saved = saved_of(r, ls, mb);
	int selective = r->w->plan->stages[ls->stage].recompute == PLAN_RECOMPUTE_SELECTIVE;
	/* Selective recomputation rebuilds, per backward part, its own layers' probabilities
	 * at its start (before its first part takes the output gradient), as op_backward
	 * does for the whole stage and the memory model for the part (PlanPart.rebuilt). */
	if (selective && dir == DIR_GRAD && pt->rebuilt) {
		if (rt_stage_rebuild_probs(r, ls->stage, &ls->b, saved, pt->first, pt->first + pt->n))
			return RT_EFAIL;
		rt_mem_sample(r, atomic_load(&r->cur_op)); // its layers' rebuilt, its B not begun
	}
	if (o->part == 0) {
		RtTensor *t = NULL;
		if (dir == DIR_ACT)
			t = sm->nin == 0 ? rt_stage_input(r, step, replica, mb, &ls->b, RT_MEM_TEMP)
			                 : gather_edges(r, ls, mb, DIR_ACT);
		else if (!sm->loss)
			t = gather_edges(r, ls, mb, DIR_GRAD);
		if (!t && (dir == DIR_ACT || !sm->loss))
			return RT_EFAIL;
		rt_walk_begin(r, ls->stage, dir, t, wk);
	}
	int64_t t0 = rt_now_ns();
	int rc = dir == DIR_ACT
	             ? rt_stage_fwd_run(r, ls->stage, mb, step, replica, &ls->b, wk, pt->first + pt->n, saved)
	             : rt_stage_bwd_run(r, ls->stage, mb, step, replica, &ls->b, wk, pt->first, saved);
	if (rc == RT_OK && selective && dir == DIR_ACT) // each F part drops its own layers'
		rt_stage_drop_probs(r, ls->stage, saved, pt->first, pt->first + pt->n);
	/* A BW part (a part that makes the weight gradient too) is B then W of its own
	 * layers, so it frees what they kept, as the memory model's BW part does
	 * (plan_part_mem). */
	if (rc == RT_OK && (plan_ops[o->kind].makes & PLAN_DEP_WGRAD)) {
		if (r->dev->async && r->w->opt.trace && r->dev->sync(r))
			return RT_EFAIL;
		*split = rt_now_ns() - t0;
		rc = op_weights(r, ls, mb, step, pt->first, pt->first + pt->n);
	}
	if (rc)
		return rc;
	/* The last part makes the outgoing tensor, even when a TPREDUCE is still to sum it. */
	if (o->part + 1 >= ls->parts.n[dir] && wk->cur && rt_stage_walk_out(r, wk))
		return RT_EFAIL;
	return done != OP_COUNT ? seq_done(r, ls, mb, dir) : RT_OK;
}

/* A TPREDUCE: the all-reduce its stage's walk stopped for, alone in its group. */
static int op_tpreduce(RtRank *r, const PlanOp *o, int64_t i)
{
	const Plan *p = r->w->plan;
	LStage *ls = local_stage(r, o->stage, "TPREDUCE of");
	if (!ls)
		return RT_EFAIL;
	int dir = o->dir & 1;
	if (p->dims[DIM_TP] < 2)
		return rt_error(r, "a TPREDUCE in a plan without tensor parallelism (tp=1)");
	int64_t bytes = plan_op_bytes(p, o);
	if (o->part < ls->parts.n[dir] && bytes != ls->parts.part[dir][o->part].reduce)
		return rt_error(r, "TPREDUCE of stage %s part %d moves bytes=%lld, but the part's "
		                   "all-reduce is %lld bytes", p->stages[o->stage].name, o->part,
		                (long long)bytes, (long long)ls->parts.part[dir][o->part].reduce);
	OpKind done;
	if (refused(r, ls, o, part_why(r, ls, o, &done)))
		return RT_EFAIL;
	RtMsg msg = {.edge = o->stage, .mb = o->mb, .dir = dir, .op = (int32_t)i, .bytes = bytes};
	if (rt_stage_tp_reduce(r, o->stage, o->mb, &ls->b, &ls->walk[o->mb * DIR_COUNT + dir],
	                       saved_of(r, ls, o->mb), dir, &msg))
		return RT_EFAIL;
	return done != OP_COUNT ? seq_done(r, ls, o->mb, dir) : RT_OK;
}

/* ---- comm ops ---- */

/* Opens the comm group the rank's current ops post into, before its first post. */
static int group_open(RtRank *r)
{
	if (r->in->open)
		return RT_OK;
	r->in->open = 1;
	return r->w->comm->group_start(r);
}

/* What comm op i (o) carries, for the communicator's checks; a collective's (mb and dir
 * -1) when `coll`. */
static RtMsg msg_of(const Plan *p, const PlanOp *o, int64_t i, int coll)
{
	return (RtMsg){.edge = o->stage, .mb = coll ? -1 : o->mb, .dir = coll ? -1 : o->dir,
	               .op = (int32_t)i, .bytes = plan_op_bytes(p, o)};
}

/* An ALLREDUCE: the stage's gradients, averaged over the dp group. */
static int post_allreduce(RtRank *r, const PlanOp *o, int64_t i)
{
	const Plan *p = r->w->plan;
	if (group_open(r))
		return RT_EFAIL;
	RtMsg msg = msg_of(p, o, i, 1);
	LStage *ls = local_stage(r, o->stage, "ALLREDUCE of");
	if (!ls)
		return RT_EFAIL;
	int64_t want = r->model->st[o->stage].nparams * 4;
	if (msg.bytes != want)
		return rt_error(r, "ALLREDUCE of stage %s moves bytes=%lld, but its gradients are "
		                   "%lld bytes",
		                p->stages[o->stage].name, (long long)msg.bytes, (long long)want);
	if (dep_rule(r, ls, o))
		return RT_EFAIL;
	return r->w->comm->allreduce(r, ls->b.grads, plan_ops[o->kind].over, 0, &msg);
}

/* The distributed optimizer's REDUCESCATTER of the stage's gradients (gather 0) or
 * ALLGATHER of its updated parameters (gather 1), over the dp group. */
static int post_shard(RtRank *r, const PlanOp *o, int64_t i, int gather)
{
	const Plan *p = r->w->plan;
	if (group_open(r))
		return RT_EFAIL;
	RtMsg msg = msg_of(p, o, i, 1);
	LStage *ls = local_stage(r, o->stage, gather ? "ALLGATHER of" : "REDUCESCATTER of");
	if (!ls)
		return RT_EFAIL;
	const PlanPrecInfo *pi = plan_prec(p->prec);
	int64_t want = r->model->st[o->stage].nparams * (gather ? pi->param : pi->grad);
	if (msg.bytes != want)
		return rt_error(r, "%s of stage %s moves bytes=%lld, but its %s are %lld bytes",
		                plan_ops[o->kind].name, p->stages[o->stage].name, (long long)msg.bytes,
		                gather ? "parameters" : "gradients", (long long)want);
	if (dep_rule(r, ls, o))
		return RT_EFAIL;
	if (gather)
		step_over(r, ls);
	return r->w->comm->shard(r, gather ? ls->b.params : ls->b.grads, gather, &msg);
}

/* An SPREDUCE: the stage's replicated layers' gradients, each rank's over its rows under
 * sequence parallelism, summed over the tp group (the sums run now, as a TPREDUCE's). */
static int op_spreduce(RtRank *r, const PlanOp *o, int64_t i)
{
	const Plan *p = r->w->plan;
	LStage *ls = local_stage(r, o->stage, "SPREDUCE of");
	if (!ls)
		return RT_EFAIL;
	int64_t want = rt_stage_seq_params(r, o->stage) * plan_prec(p->prec)->grad;
	if (plan_op_bytes(p, o) != want)
		return rt_error(r, "SPREDUCE of stage %s moves bytes=%lld, but its replicated layers' "
		                   "gradients are %lld bytes",
		                p->stages[o->stage].name, (long long)plan_op_bytes(p, o), (long long)want);
	if (dep_rule(r, ls, o))
		return RT_EFAIL;
	RtMsg msg = {.edge = o->stage, .mb = -1, .dir = -1, .op = (int32_t)i};
	return rt_stage_seq_grads(r, o->stage, &ls->b, &msg);
}

/* A TIEREDUCE: the tied table's gradient, summed with its other copy's. */
static int post_tiereduce(RtRank *r, const PlanOp *o, int64_t i)
{
	const Plan *p = r->w->plan;
	if (group_open(r))
		return RT_EFAIL;
	RtMsg msg = msg_of(p, o, i, 1);
	LStage *ls = local_stage(r, o->stage, "TIEREDUCE of");
	if (!ls)
		return RT_EFAIL;
	if (!ls->deps.tie || o->peer != ls->tie_peer)
		return rt_error(r, "TIEREDUCE of stage %s with rank %d: the stage holds no copy "
		                   "of a tied table shared with that rank",
		                p->stages[o->stage].name, o->peer);
	if (msg.bytes != ls->tie.bytes)
		return rt_error(r, "TIEREDUCE of stage %s moves bytes=%lld, but the tied table's "
		                   "gradient is %lld bytes",
		                p->stages[o->stage].name, (long long)msg.bytes, (long long)ls->tie.bytes);
	if (dep_rule(r, ls, o))
		return RT_EFAIL;
	return r->w->comm->allreduce(r, &ls->tie, plan_ops[o->kind].over, 0, &msg);
}

/* A SEND or RECV of an edge's tensor. */
static int post_p2p(RtRank *r, const PlanOp *o, int64_t i)
{
	const Plan *p = r->w->plan;
	const RtComm *comm = r->w->comm;
	if (group_open(r))
		return RT_EFAIL;
	RtMsg msg = msg_of(p, o, i, 0);
	int e = o->stage, dir = o->dir;
	const PlanEdge *ed = &p->edges[e];
	/* The local end: for act, a SEND leaves the edge's source and a RECV enters its
	 * destination; grad goes the other way. */
	int send = plan_ops[o->kind].sends;
	int at_src = send == (dir == DIR_ACT);
	int s = at_src ? ed->src : ed->dst;
	if (!local_stage(r, s, send ? "SEND from" : "RECV for"))
		return RT_EFAIL;
	/* A transfer to self goes through the communicator: the peer table must say so. */
	int self = o->peer == r->rank;
	if (check_peer(r, s, e, !at_src, self ? PEER_SELF : PEER_REMOTE, o->peer))
		return RT_EFAIL;
	int64_t width = p->stages[ed->src].out; // bytes, the edge's, are rows x width f32: the
	                                        // model checked it at open
	RtTensor **sl = self && !send ? self_slot_at(r, e, o->mb, dir) : slot_at(r, e, o->mb, dir);
	if (send) {
		if (!*sl)
			return rt_error(r, "nothing to send: the %s of edge %d for microbatch %d has not "
			                   "been computed (%s %d %d comes later or never)",
			                dir == DIR_ACT ? "activation" : "gradient", e, o->mb,
			                dir == DIR_ACT ? "F" : "B", s, o->mb);
		r->in->sent[r->in->nsent++] = sl;
		return comm->send(r, *sl, o->peer, &msg);
	}
	if (*sl)
		return rt_error(r, "the %s of edge %d for microbatch %d is received twice",
		                dir == DIR_ACT ? "activation" : "gradient", e, o->mb);
	RtTensor *t = rt_tensor_new_prec(r, r->model->rows, width, RT_MEM_COMM);
	if (!t)
		return RT_EFAIL;
	t->refs = 1;
	*sl = t;
	return comm->recv(r, t, o->peer, &msg);
}

static void record(RtRank *r, int64_t t0, int64_t t1, int64_t op, int64_t end, int step,
                   int64_t split)
{
	if (r->nev == r->ev_cap) {
		int64_t cap = r->ev_cap ? r->ev_cap * 2 : 1024;
		RtEvent *e = realloc(r->ev, (size_t)cap * sizeof *e);
		if (!e)
			return; // a trace with a gap beats a failed run
		r->ev = e;
		r->ev_cap = cap;
	}
	int64_t *hi = r->ev_hi;
	r->ev[r->nev++] = (RtEvent){.t0 = t0 - r->w->t0, .t1 = t1 - r->w->t0, .op = op,
	                            .op_end = end, .step = step, .split = (int32_t)split,
	                            .mem = {hi[0] - hi[1] - hi[2], hi[1], hi[2]}};
}

/* A BW: B, then W of all the stage's layers; *split: its B time. */
static int op_fused(RtRank *r, LStage *ls, int mb, int step, int64_t *split)
{
	int64_t t0 = rt_now_ns();
	if (op_backward(r, ls, mb, step))
		return RT_EFAIL;
	if (r->dev->async && r->w->opt.trace && r->dev->sync(r))
		return RT_EFAIL;
	*split = rt_now_ns() - t0;
	return op_weights(r, ls, mb, step, 0, r->w->plan->stages[ls->stage].nlayers);
}

/* Runs op i of the rank's list in step `step`, the one place that tells the kinds
 * apart: a compute op or OPTIM on its stage (at tp > 1 a parted kind's part), a comm op
 * posted into the group its first post opens, or a TPREDUCE, which runs its own groups
 * inside its stage's walk.  *split: a BW's B time. */
static int run_op(RtRank *r, int64_t i, int step, int64_t *split)
{
	const PlanOp *o = &r->pr->ops[i];
	OpKind k = plan_op_kind(o);
	LStage *ls = NULL;
	if (k < OP_COUNT && !plan_op_is_comm(k)) {
		ls = local_stage(r, o->stage, plan_ops[k].role == OP_ROLE_STEP ? "OPTIM of" : "compute on");
		if (!ls)
			return RT_EFAIL;
		if (r->w->plan->dims[DIM_TP] > 1 && plan_ops[k].parted)
			return op_part(r, ls, o, step, split);
		if (dep_rule(r, ls, o))
			return RT_EFAIL;
	}
	switch (k) {
	case OP_F:
		return op_forward(r, ls, o->mb, step);
	case OP_B:
		return op_backward(r, ls, o->mb, step);
	case OP_W:
		return op_weights(r, ls, o->mb, step, 0, r->w->plan->stages[ls->stage].nlayers);
	case OP_BW:
		return op_fused(r, ls, o->mb, step, split);
	case OP_OPTIM:
		return op_optim(r, ls, step);
	case OP_SEND:
	case OP_RECV:
		return post_p2p(r, o, i);
	case OP_ALLREDUCE:
		return post_allreduce(r, o, i);
	case OP_TIEREDUCE:
		return post_tiereduce(r, o, i);
	case OP_TPREDUCE:
		return op_tpreduce(r, o, i);
	case OP_REDSCATTER:
		return post_shard(r, o, i, 0);
	case OP_ALLGATHER:
		return post_shard(r, o, i, 1);
	case OP_SPREDUCE:
		return op_spreduce(r, o, i);
	case OP_COUNT:
		break;
	}
	return rt_error(r, "unknown op kind %d", o->kind);
}

/* Runs ops [i, j): one op, or one comm group (plan_group_end), whose group the comm
 * ops' first post opened; the sends' slots are released once it completed. */
static int run_ops(RtRank *r, int64_t i, int64_t j, int step, int64_t *split)
{
	RtInterp *in = r->in;
	in->nsent = 0;
	in->open = 0;
	int rc = RT_OK;
	for (int64_t k = i; k < j && rc == RT_OK; k++) {
		rc = run_op(r, k, step, split);
		if (rc == RT_EFAIL && !r->w->abort)
			atomic_store(&r->cur_op, k); // name the op that failed
	}
	if (!in->open)
		return rc;
	in->open = 0;
	if (rc == RT_OK)
		rc = r->w->comm->group_end(r);
	rt_mem_sample(r, i); // the receives are in, the sends not yet released
	for (int64_t k = 0; k < in->nsent; k++)
		slot_release(r, in->sent[k]);
	in->nsent = 0;
	return rc;
}

static int run_step(RtRank *r, int step)
{
	const PlanRank *pr = r->pr;
	const RtDevice *dev = r->dev;
	int timed = r->w->opt.trace;
	atomic_store(&r->cur_step, step);
	for (int64_t i = 0; i < pr->nops;) {
		const PlanOp *o = &pr->ops[i];
		int64_t j = plan_group_end(pr, i);
		atomic_store(&r->cur_end, j);
		atomic_store(&r->cur_op, i);
		if (r->w->fault_rank == r->rank) // test-only (PIPERUN_FAULT): fault.c
			rt_fault_at(r, step, i, j);
		int64_t t0 = rt_now_ns(), split = 0;
		int rc = run_ops(r, i, j, step, &split);
		if (rc)
			return rc;
		if (timed && dev->async && dev->sync(r))
			return RT_EFAIL;
		int64_t t1 = rt_now_ns();
		if (!plan_is_comm(o->kind))
			r->busy_ns += t1 - t0;
		if (r->mem[RT_MEM_SAVED] > r->peak_act)
			r->peak_act = r->mem[RT_MEM_SAVED];
		rt_mem_sample(r, i);
		if (timed)
			record(r, t0, t1, i, j, step, split);
		r->ev_hi[0] = -1; // the next event's highest point starts afresh
		atomic_fetch_add_explicit(&r->w->progress, j - i, memory_order_relaxed);
		i = j;
	}
	return RT_OK;
}

/* Whether a checkpoint follows step `step` of this run (--save, --save-every). */
static int save_due(const RtWorld *w, int step)
{
	const RtOptions *o = &w->opt;
	return o->save && (step + 1 == o->steps ||
	                   (o->save_every && (w->step0 + step + 1) % o->save_every == 0));
}

static int save(RtRank *r, int step)
{
	RtInterp *in = r->in;
	int *stages = malloc((size_t)(in->nls + 1) * sizeof *stages);
	RtStageBufs **bufs = malloc((size_t)(in->nls + 1) * sizeof *bufs);
	int rc = stages && bufs ? RT_OK : rt_error(r, "out of memory");
	for (int i = 0; i < in->nls && rc == RT_OK; i++) {
		stages[i] = in->ls[i].stage;
		bufs[i] = &in->ls[i].b;
	}
	if (rc == RT_OK)
		rc = rt_ckpt_save(r, step, in->nls, stages, bufs);
	free(stages);
	free(bufs);
	return rc;
}

int rt_rank_main(RtRank *r)
{
	const Plan *p = r->w->plan;
	const RtDevice *dev = r->dev;
	const RtComm *comm = r->w->comm;
	atomic_store(&r->cur_op, -1);
	if (setup(r))
		return RT_EFAIL;
	LStage *loss = NULL;
	if (r->in->local_of[r->model->loss_stage] >= 0 && r->coord[DIM_TP] == 0)
		loss = &r->in->ls[r->in->local_of[r->model->loss_stage]];
	r->loss_rank = loss != NULL;
	float *lbuf = malloc((size_t)p->microbatches * sizeof(float));
	if (!lbuf)
		return rt_error(r, "out of memory");
	int rc = RT_OK;
	r->peak_total[3] = -1;
	rt_mem_sample(r, -1); // before any op: the static parts
	for (int step = 0; step < r->w->opt.steps && rc == RT_OK; step++) {
		atomic_store(&r->cur_op, -1);
		if ((rc = comm->barrier(r)))
			break;
		r->step_t0[step] = rt_now_ns() - r->w->t0;
		if ((rc = run_step(r, step)) || (rc = dev->sync(r)))
			break;
		r->step_t1[step] = rt_now_ns() - r->w->t0;
		if (loss) {
			if ((rc = dev->download(r, loss->b.loss, lbuf)))
				break;
			double s = 0;
			for (int m = 0; m < p->microbatches; m++)
				s += lbuf[m];
			r->loss_sum[step] = s;
		}
		if (rc == RT_OK && save_due(r->w, step))
			rc = save(r, step);
		atomic_store_explicit(&r->steps_done, step + 1, memory_order_release);
	}
	free(lbuf);
	return rc;
}

int rt_rank_weights(RtRank *r, int stage, float *out)
{
	int i = r->in ? r->in->local_of[stage] : -1;
	if (i < 0)
		return rt_error(r, "internal: stage %d is not on rank %d", stage, r->rank);
	return r->dev->download(r, r->in->ls[i].b.params, out);
}
