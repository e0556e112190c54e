/* The overlap model (docs/semantics.md "Timing"): a rank is two agents of the run
 * (sim.c), its compute stream and its comm stream.  The comm stream posts its groups in
 * order, each once the previous one completed and the tensors its sends transmit are
 * produced; the compute stream runs its ops in order, each once the receives it
 * consumes completed.  What passes between the two is a value (values.c): the compute
 * stream puts the tensors it produces and takes the receives, the comm stream puts the
 * receives and takes the tensors, and whoever puts what the other waits for wakes it. */
#include "p2p.h"
#include "../plan/prefetch.h"

/* ---- the compute stream ---- */

/* What compute op i (o) of rank r, ended at end, produces for the comm stream: with
 * tp > 1 a part ending in a cut gives its TPREDUCE's data, and only the last part (the
 * TPREDUCE after it, if any, in group_done) gives the stage's output.  -1 out of memory. */
static int produce(Sim *s, int r, int64_t i, const PlanOp *o, int64_t end)
{
	SimRank *k = &s->rk[r];
	const StageInfo *st = &s->st[o->stage];
	uint16_t makes = plan_ops[o->kind].makes;
	int dir = plan_ops[o->kind].dir;
	int parted = s->tp > 1 && plan_ops[o->kind].parted && o->part < st->parts.n[dir];
	int red = parted && st->parts.part[dir][o->part].reduce;
	int last = !parted || (o->part + 1 == st->parts.n[dir] && !red);
	if (red && sim_val_put(s, r, tp_key(KEY_DATA, o->stage, dir, o->part, o->mb), end,
	                       REF(r, i), 1))
		return -1;
	if (!last)
		makes &= (uint8_t)~(PLAN_DEP_ACT | PLAN_DEP_GRAD);
	if (parted && o->part + 1 != st->parts.n[dir])
		makes &= (uint8_t)~PLAN_DEP_WGRAD;
	if ((makes & PLAN_DEP_ACT) && st->nrout &&
	    sim_val_put(s, r, hkey(KEY_DATA, DIR_ACT, o->stage, o->mb), end, REF(r, i), st->nrout))
		return -1;
	if ((makes & PLAN_DEP_GRAD) && st->nrin &&
	    sim_val_put(s, r, hkey(KEY_DATA, DIR_GRAD, o->stage, o->mb), end, REF(r, i), st->nrin))
		return -1;
	int ls = local_stage(s, r, o->stage);
	if ((makes & PLAN_DEP_WGRAD) && ls >= 0) {
		k->wdone[ls]++;
		if (end >= k->wlast[ls]) {
			k->wlast[ls] = end;
			k->wlast_who[ls] = REF(r, i);
		}
	}
	return 0;
}

/* Op i (o) of the compute stream, any kind, its values found by key: runs it from the
 * stream's time when what it consumes is there.  1 ran, 0 waits, -1 out of memory.  Not inlined: the
 * rare path, kept out of sim_run_compute's registers. */
__attribute__((noinline)) static int compute_general(Sim *s, int r, int64_t i, const PlanOp *o)
{
	SimRank *k = &s->rk[r];
	uint64_t keys[MAXKEYS];
	int nk = consumed_keys(s, o, keys, MAXKEYS);
	int64_t start = k->ct, bind = k->cbind;
	Value *e = NULL;
	for (int j = 0; j < nk; j++) {
		if (!(e = sim_val_find(s, r, keys[j])))
			return 0;
		if (e->time > start) {
			start = e->time;
			bind = e->who;
		}
	}
	if (nk == 1) // nothing has changed since the lookup
		val_use(s, r, e);
	else
		for (int j = 0; j < nk; j++)
			val_use(s, r, sim_val_find(s, r, keys[j]));
	int64_t end = do_compute(s, r, i, o, start, bind);
	k->ct = end;
	k->cbind = REF(r, i);
	if (plan_op_is_compute(o->kind) && produce(s, r, i, o, end))
		return -1;
	if (s->step_gather && (plan_ops[o->kind].makes & PLAN_DEP_STEP) &&
	    sim_val_put(s, r, step_key(o->stage), end, REF(r, i), 1))
		return -1;
	return 1;
}

/* An F&B pair is one slot (docs/semantics.md, "Overlapped pairs"): its first half
 * starts once what the second half, b, consumes is there too.  Raises the stream's time
 * to theirs; 0 while one is missing (a receive completing wakes the stream). */
static int pair_wait(Sim *s, int r, const PlanOp *b)
{
	SimRank *k = &s->rk[r];
	uint64_t keys[MAXKEYS];
	int nk = consumed_keys(s, b, keys, MAXKEYS);
	for (int j = 0; j < nk; j++) {
		const Value *e = sim_val_find(s, r, keys[j]);
		if (!e)
			return 0;
		if (e->time > k->ct) {
			k->ct = e->time;
			k->cbind = e->who;
		}
	}
	return 1;
}

/* The common compute op o (op i of rank r, st its stage's; see sim_run_compute):
 * compute_general's steps with its values found in their rings by class.  1 ran,
 * 0 waits, -1 out of memory. */
static inline int compute_fast(Sim *s, int r, int64_t i, const PlanOp *o, const StageInfo *st)
{
	SimRank *k = &s->rk[r];
	Ring *ring = k->ring;
	OpKind kind = plan_op_kind(o);
	uint16_t needs = plan_ops[kind].needs, makes = plan_ops[kind].makes;
	int32_t mb = o->mb;
	int64_t start = k->ct, by = k->cbind;
	/* What it consumes: consumed_keys' receives (no kind needs both lists). */
	int nin = needs & PLAN_DEP_IN_ACT ? st->nrin : needs & PLAN_DEP_OUT_GRAD ? st->nrout : 0;
	const int *in = needs & PLAN_DEP_IN_ACT ? st->rin_ring : st->rout_ring;
	Value *e = NULL;
	for (int j = 0; j < nin; j++) {
		if (!(e = ring_get(&ring[in[j]], mb)))
			return 0;
		if (e->time > start) {
			start = e->time;
			by = e->who;
		}
	}
	if (nin == 1)
		ring_use(e);
	else
		for (int j = 0; j < nin; j++)
			ring_use(ring_get(&ring[in[j]], mb));
	/* do_compute at tp = 1 */
	int64_t cost = st->cost[kind], end = sat_add(start, cost);
	k->busy = sat_add(k->busy, cost);
	int64_t mem = sat_add(k->mem, st->dmem[kind]);
	k->mem = mem;
	if (mem > k->peak_mem)
		k->peak_mem = mem;
	if (makes & PLAN_DEP_ACT) {
		if (o->part == 0 && ++k->units > k->peak_units)
			k->peak_units = k->units;
	} else if (makes & PLAN_DEP_WGRAD) {
		k->units--;
	}
	k->done++;
	record(s, r, i, start, end, by);
	k->ct = end;
	k->cbind = REF(r, i);
	/* produce at tp = 1 */
	if ((makes & PLAN_DEP_ACT) && st->nrout &&
	    ring_put(s, &ring[st->data_ring[DIR_ACT]], mb, end, REF(r, i), st->nrout))
		return -1;
	if ((makes & PLAN_DEP_GRAD) && st->nrin &&
	    ring_put(s, &ring[st->data_ring[DIR_GRAD]], mb, end, REF(r, i), st->nrin))
		return -1;
	if (makes & PLAN_DEP_WGRAD) {
		int ls = st->ls;
		k->wdone[ls]++;
		if (end >= k->wlast[ls]) {
			k->wlast[ls] = end;
			k->wlast_who[ls] = REF(r, i);
		}
	}
	return 1;
}

/* The compute stream.  The common op (F, B, W or BW at tp = 1 of a stage on the rank's
 * pp index whose ops may take this path, StageInfo.fast, with a microbatch in range)
 * goes through compute_fast; anything else through compute_general.  A stream usually
 * runs one op per call (it then waits for the next receive), so its time and figures
 * stay in SimRank rather than in locals loaded and stored around the loop. */
static void sim_run_compute(Sim *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	const PlanOp *ops = pr->ops;
	SimRank *k = &s->rk[r];
	const StageInfo *sts = s->st;
	const uint32_t m = s->nmb;
	const int pp = s->tp == 1 ? k->pp : -3; // -3: no stage's (tp > 1 takes no fast path)
	const uint32_t comm = s->comm_kinds, fast = s->compute_kinds;
	int64_t i = k->cpc, n = pr->nops;
	int progressed = 0, rc = 1;
	k->cstate = AG_READY;
	for (; i < n; i++) {
		const PlanOp *o = &ops[i];
		plan_prefetch(ops, i, n);
		unsigned kind = o->kind;
		if (comm >> kind & 1)
			continue;
		const StageInfo *st = &sts[o->stage]; // read only for compute kinds
		if (o->dir && i + 1 < n && plan_op_paired(o) && !(rc = pair_wait(s, r, &ops[i + 1])))
			break;
		if ((fast >> kind & 1) && st->fast_pp == pp && (uint32_t)o->mb < m)
			rc = compute_fast(s, r, i, o, st);
		else
			rc = compute_general(s, r, i, o);
		if (rc <= 0)
			break;
		progressed = 1;
	}
	if (rc < 0)
		return;
	k->cpc = i;
	if (i == n)
		k->cstate = AG_DONE;
	else if (!rc) {
		k->cstate = AG_WAIT;
		prefetch_ops(pr, i);
	}
	if (progressed && k->state == AG_WAIT)
		push_agent(s, r, 0);
}

/* ---- the comm stream ---- */

/* Whether the data of the group starting at op i is ready (its sends' tensors produced,
 * its all-reduce's last weight gradient done, its all-gather's optimizer step done); the group's end in *end, the ready time
 * in *t, the entry of its send in *only when it has one (else NULL), in *p2p whether it
 * holds only SENDs and RECVs.  One pass: groups are short but this runs once per group. */
static int group_ready(Sim *s, int r, int64_t i, int64_t *end, int64_t *t, int64_t *bind,
                       Value **only, int *p2p)
{
	const PlanRank *pr = &s->p->ranks[r];
	SimRank *k = &s->rk[r];
	const PlanOp *ops = pr->ops;
	int32_t g = ops[i].group; // op i is a comm op: the group is the run of its number
	int64_t x = i, n = pr->nops, tt = *t, bb = *bind; // locals: the outputs may alias
	int nsend = 0, coll = 0;
	Value *one = NULL;
	for (; x < n && (s->comm_kinds >> ops[x].kind & 1) && ops[x].group == g; x++) {
		const PlanOp *o = &ops[x];
		Value *e = NULL;
		if (s->send_kinds >> o->kind & 1) {
			if (!(e = send_data(s, r, o)))
				return 0;
			one = nsend++ ? NULL : e;
		} else if (!(s->coll_kinds >> o->kind & 1)) {
			continue; // a RECV: its data comes from its peer
		} else if (plan_ops[o->kind].part_end) { // a part's output
			coll = 1;
			if (!(e = sim_val_find(s, r, tp_key(KEY_DATA, o->stage, o->dir, o->part, o->mb))))
				return 0;
		} else if (plan_ops[o->kind].needs & PLAN_DEP_STEP) { // an ALLGATHER: its OPTIM
			coll = 1;
			if (!(e = sim_val_find(s, r, step_key(o->stage))))
				return 0;
		} else { // a reduction of weight gradients (reduces_wgrad): every W of its stage
			coll = 1;
			int ls = local_stage(s, r, o->stage);
			if (ls < 0)
				continue;
			if (k->wdone[ls] < s->p->microbatches)
				return 0;
			if (k->wlast[ls] > tt) {
				tt = k->wlast[ls];
				bb = k->wlast_who[ls];
			}
		}
		if (e && e->time > tt) {
			tt = e->time;
			bb = e->who;
		}
	}
	*end = x;
	*t = tt;
	*bind = bb;
	*only = one;
	*p2p = !coll;
	return 1;
}

/* sim_post_group(s, r, i, end, t, 1, only) for a group of SENDs and RECVs alone, the
 * common one, compiled here into the comm stream's loop. */
static inline void post_p2p_group(Sim *s, int r, int64_t i, int64_t end, int64_t t, Value *only)
{
	const PlanOp *ops = s->p->ranks[r].ops;
	SimRank *k = &s->rk[r];
	k->pending = 0;
	k->gmax = t;
	k->gmax_who = REF_NONE;
	k->gend = end;
	for (int64_t x = i; x < end && !s->failed; x++) {
		const PlanOp *o = &ops[x];
		int send = s->send_kinds >> o->kind & 1;
		if (send) {
			Value *e = only ? only : send_data(s, r, o);
			if (e)
				val_use(s, r, e);
		}
		post_p2p(s, r, x, o, t, !send);
	}
}

/* A TPREDUCE of rank r completed at r's gmax: its result for the compute ops that wait
 * for it (the next part; after the last, the backward's first part and the first parts
 * of the local stages it hands its output to), and after the last part the stage's
 * output for its sends.  1 when something was published, -1 out of memory. */
static int tp_done(Sim *s, int r, const PlanOp *o)
{
	SimRank *k = &s->rk[r];
	const StageInfo *st = &s->st[o->stage];
	int last = o->part + 1 >= st->parts.n[o->dir & 1];
	int64_t refs = !last ? 1 : o->dir == DIR_ACT ? 1 + st->nlout : st->nlin;
	int64_t outs = !last ? 0 : o->dir == DIR_ACT ? st->nrout : st->nrin;
	if (refs && sim_val_put(s, r, tp_key(KEY_AR, o->stage, o->dir, o->part, o->mb), k->gmax,
	                 k->gmax_who, refs))
		return -1;
	if (outs && sim_val_put(s, r, hkey(KEY_DATA, o->dir, o->stage, o->mb), k->gmax, k->gmax_who,
	                 outs))
		return -1;
	return refs > 0;
}

/* A completed receive's value (KEY_RECV), by ring when the key is a ring's (values.c). */
static inline int put_recv(Sim *s, int r, const PlanOp *o, int64_t time, int64_t who)
{
	const Plan *p = s->p;
	if ((uint32_t)o->stage < (uint32_t)p->nedges && (uint32_t)o->mb < s->nmb) {
		int c = sim_class(s, KEY_RECV, o->dir & 1, o->stage);
		SimRank *k = &s->rk[r];
		if (s->cls_pp[c] == k->pp)
			return ring_put(s, &k->ring[s->cls_ring[c]], o->mb, time, who, 1);
	}
	return sim_val_put(s, r, hkey(KEY_RECV, o->dir, o->stage, o->mb), time, who, 1);
}

/* The comm stream's group [i, gend) completed at gmax: publish its receives.  Inlined
 * in both of sim_run_comm's calls: it runs once per group. */
__attribute__((always_inline)) static inline int group_done(Sim *s, int r, int64_t i)
{
	const PlanRank *pr = &s->p->ranks[r];
	SimRank *k = &s->rk[r];
	int any = 0;
	for (int64_t x = i; x < k->gend; x++) {
		const PlanOp *o = &pr->ops[x];
		int rc;
		if (!(s->coll_kinds >> o->kind & 1)) { // a RECV publishes its data, a SEND nothing
			if (s->send_kinds >> o->kind & 1)
				continue;
			if (put_recv(s, r, o, k->gmax, k->gmax_who))
				return -1;
			any = 1;
		} else if (plan_ops[o->kind].part_end) {
			if ((rc = tp_done(s, r, o)) < 0)
				return -1;
			any |= rc;
		} else if (reduces_wgrad(plan_op_kind(o))) { // the stage's reduced weight gradients
			uint64_t key = reduced_key(plan_ops[o->kind].over, o->stage);
			if (sim_val_put(s, r, key, k->gmax, k->gmax_who, 1))
				return -1;
			any = 1;
		}
	}
	k->done += k->gend - i;
	k->t = k->gmax;
	if (k->gmax_who != REF_NONE)
		k->bind = k->gmax_who;
	if (any && k->cstate == AG_WAIT)
		push_agent(s, r, 1);
	return 0;
}

static void sim_run_comm(Sim *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	SimRank *k = &s->rk[r];
	int64_t n = pr->nops;
	if (k->state == AG_MATCH) {
		if (group_done(s, r, k->pc))
			return;
		k->pc = k->gend;
	}
	k->state = AG_READY;
	int64_t i = k->pc;
	const uint32_t comm = s->comm_kinds;
	while (i < n) {
		plan_prefetch(pr->ops, i, n);
		if (!(comm >> pr->ops[i].kind & 1)) {
			i++;
			continue;
		}
		int64_t end, t = k->t, bind = k->bind;
		Value *only;
		int p2p;
		if (!group_ready(s, r, i, &end, &t, &bind, &only, &p2p)) {
			k->pc = i;
			k->state = AG_WAIT;
			prefetch_ops(pr, i);
			return;
		}
		int64_t saved = k->bind;
		k->bind = bind;
		if (p2p)
			post_p2p_group(s, r, i, end, t, only);
		else
			sim_post_group(s, r, i, end, t, 1, only);
		k->bind = saved;
		if (s->failed)
			return;
		k->pc = i;
		if (k->pending) {
			k->state = AG_MATCH;
			prefetch_ops(pr, k->gend);
			return;
		}
		if (group_done(s, r, i))
			return;
		i = k->gend;
	}
	k->pc = n;
	k->state = AG_DONE;
}


/* The overlap model's run: each agent on the work list (sim.c's loop, which the
 * strict model keeps) until none is left; here so that both streams compile into it. */
void sim_run_overlap(Sim *s)
{
	while (s->nwork && !s->failed && !sim_stopped(s)) {
		unsigned a = (unsigned)s->work[--s->nwork];
		int r = (int)(a >> 1);
		s->rk[r].queued[a & 1] = 0;
		int64_t pc0 = s->rk[r].pc; // the rank stream's: it walks every op
		if (a & 1)
			sim_run_compute(s, r);
		else
			sim_run_comm(s, r);
		sim_count(s, r, pc0);
	}
}
