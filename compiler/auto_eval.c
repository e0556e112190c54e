/* The search's fast model: a candidate order's makespan and memory without building a
 * plan.  Every rank runs its order in sequence; an op starts when its rank is free and
 * its inputs have arrived: F(s, mb) needs F(src, mb) of every in-edge plus the edge's
 * transfer time, B(s, mb) its own F and B(dst, mb) of every out-edge plus the transfer,
 * W(s, mb) its own B.  That is pipesim's overlap model when receives are posted early
 * enough to hide behind compute, which the real check (sched_auto.c) then confirms.
 * Ranks are swept in turn, each advancing as far as its next op's inputs allow; a sweep
 * in which no rank moves proves the order stuck.
 *
 * Memory is plan/mem.c's model of the plan the lowering (--tune=overlap, lower.c) would
 * make of the order, walked per rank in list order: the static bytes, the saved
 * activations (plan/plan.h's PlanStage rules, the op table's saves and frees: F
 * allocates save_fb + save_fw, B frees save_fb and allocates save_bw, holding save_re
 * more while it rebuilds a recomputed forward, W frees the rest) and the tensors in
 * flight.  The lowering moves a tensor as soon as it is made: the producer's SEND goes
 * in the group at the producing op's end, the consumer's RECV in a group after the op
 * the consumer runs at that time (before its next op when it waits).  So an output is
 * held from its op through its SEND's group (a local hand-off: to its consumer), and a
 * received tensor from its RECV's group to its consumer.  Three samples an op i, as
 * plan/mem.c samples: 3i the group at the end of op i - 1 (its outputs still held, with
 * what arrived while it ran), 3i + 1 the last group before op i (what arrived until
 * then; a recomputing B's rebuilt forward), 3i + 2 after op i.  Times are the model's,
 * so a RECV may land a group off where the lowering's walk differs; the confirmation
 * decides.
 *
 * The search's local moves (auto_list.c: swaps, fits, annealing) change one rank's order
 * from some position on, so their evaluations start from the last kept sweep
 * (auto_eval_keep): the ops that started before the first moved op keep their times,
 * the sweep goes on from there (start_from says why that is exact).  A swap, which
 * must beat the best order, is ruled out unrun when the op it moves up could not have
 * started earlier anyway (auto_eval_swap_later), and otherwise (auto_eval_beats) stops
 * once an op ends after the best makespan and skips the memory walk when it is no
 * faster: most swaps are rejected.
 *
 * The model's facts (AutoModel) are read from a plan once (auto_model_of_plan): the
 * search lowers a topological order of each setup and reads its stage, edge and rank
 * tables. */
#include "auto.h"

#include <stdlib.h>
#include <string.h>

#include "../plan/mem.h"
#include "../plan/link.h"
#include "../plan/tp.h"

struct AutoScratch {
	int64_t *t[3];   // end time of F, B, W per (stage * m + mb); -1: not yet
	int *ix[2];      // list position of F, B (or BW) per (stage * m + mb)
	int *pos;        // per rank: next op
	int *off;        // per rank: its first entry in st (CSR, room for its 3m ops a stage)
	int64_t *st, *en; // per rank, per list position: start and end time
	int64_t *d;      // per sample position of one rank: change of the bytes in flight
	int64_t *free_at, *cur, *peak;
	int64_t *cost;   // per (stage * OP_COUNT + kind): what the op takes (plan_op_cost)
	int64_t *mem;    // ... and its change of the saved bytes (plan_op_mem), both read
	                 // from the model once here rather than per op of every evaluation
	int *peak_op;    // per rank: the op at (or just before) which its peak is reached
	int64_t *kt, *kst; // the kept evaluation (auto_eval_keep): t[0..3) and st, en as one
	int *kix;         // block each, and ix[0..2)
	int kept;         // 1: they hold a whole sweep
	int spill;        // 1: an op of the last sweep found no room in st (a rank that runs
	                  // more than 3m ops a stage): that sweep is not kept
};

static int world_rank_of(const Plan *p, int q)
{
	for (int r = 0; r < p->world; r++)
		if (p->ranks[r].coord[DIM_PP] == q && p->ranks[r].coord[DIM_DP] == 0 &&
		    p->ranks[r].coord[DIM_TP] == 0)
			return r;
	return 0;
}

/* At tp > 1 every part that ends in a cut waits for its TPREDUCE, which the tp group's
 * members post together (they run the same order): the model adds each one's time, as
 * the simulator takes it, to the F or B it follows.  -1 when out of memory. */
static int add_tp_reduces(const Plan *p, int s, int rank, int64_t cost[3])
{
	if (p->dims[DIM_TP] == 1)
		return 0;
	PlanParts pp;
	if (plan_stage_parts(p, s, &pp))
		return -1;
	for (int dir = 0; dir < DIR_COUNT; dir++)
		for (int k = 0; k < pp.n[dir]; k++)
			if (pp.part[dir][k].reduce)
				cost[dir == DIR_ACT ? AUTO_F : AUTO_B] +=
				        plan_dim_coll_ns(p, OP_TPREDUCE, DIM_TP, rank, pp.part[dir][k].reduce);
	plan_parts_free(&pp);
	return 0;
}

int64_t auto_model_of_plan(AutoModel *md, const Plan *p, const int *stage_pp, int local,
                           Arena *a, int *wr, AutoEdge **down)
{
	*md = (AutoModel){.pp = p->dims[DIM_PP], .m = p->microbatches, .ns = p->nstages,
	                  .ne = p->nedges, .stage_pp = stage_pp, .oom = md->oom};
	md->cost = arena_alloc(a, (size_t)md->ns * sizeof *md->cost);
	md->save = arena_alloc(a, (size_t)md->ns * sizeof *md->save);
	md->stat = arena_alloc(a, (size_t)md->pp * sizeof *md->stat);
	md->outb = arena_alloc(a, (size_t)md->ns * sizeof *md->outb);
	md->inb = arena_alloc(a, (size_t)md->ns * sizeof *md->inb);
	md->edges = arena_alloc(a, (size_t)(md->ne + 1) * sizeof *md->edges);
	md->ioff = arena_alloc(a, (size_t)(md->ns + 1) * sizeof(int));
	md->ooff = arena_alloc(a, (size_t)(md->ns + 1) * sizeof(int));
	md->ein = arena_alloc(a, (size_t)(md->ne + 1) * sizeof(int));
	md->eout = arena_alloc(a, (size_t)(md->ne + 1) * sizeof(int));
	int64_t tensor = 0;
	for (int i = 0; i < md->pp; i++)
		wr[i] = world_rank_of(p, i);
	for (int i = 0; i < md->ns; i++) {
		const PlanStage *st = &p->stages[i];
		memcpy(md->cost[i], st->cost, sizeof md->cost[i]);
		if (add_tp_reduces(p, i, wr[stage_pp[i]], md->cost[i])) {
			auto_oom(md);
			break;
		}
		int64_t sv[4] = {st->save_fb, st->save_fw, st->save_bw, st->save_re};
		memcpy(md->save[i], sv, sizeof sv);
		md->inb[i] = plan_stage_in_bytes(p, i);
		md->outb[i] = plan_stage_out_bytes(p, i);
		if (md->inb[i] + md->outb[i] > tensor)
			tensor = md->inb[i] + md->outb[i];
	}
	AutoEdge *dn = arena_alloc(a, (size_t)(md->ne + 1) * sizeof *dn);
	int rounds = 0;
	for (int e = 0; e < md->ne; e++) {
		const PlanEdge *pe = &p->edges[e];
		int same = stage_pp[pe->src] == stage_pp[pe->dst] && local;
		int a = world_rank_of(p, stage_pp[pe->src]), b = world_rank_of(p, stage_pp[pe->dst]);
		md->edges[e] = (AutoEdge){pe->src, pe->dst, same ? 0 : plan_p2p_ns(p, a, b, pe->bytes), same};
		dn[e] = (AutoEdge){pe->src, pe->dst, same ? 0 : plan_p2p_ns_floor(p, a, b, pe->bytes), same};
		rounds |= dn[e].ns != md->edges[e].ns;
	}
	*down = rounds ? dn : NULL;
	for (int i = 0, ki = 0, ko = 0; i < md->ns; i++) {
		md->ioff[i] = ki, md->ooff[i] = ko;
		for (int e = 0; e < md->ne; e++) {
			if (md->edges[e].dst == i)
				md->ein[ki++] = e;
			if (md->edges[e].src == i)
				md->eout[ko++] = e;
		}
		md->ioff[i + 1] = ki, md->ooff[i + 1] = ko;
	}
	for (int i = 0; i < md->pp; i++) {
		PlanMem mm;
		if (plan_mem_rank(p, wr[i], &mm)) { // it fails for want of memory alone
			auto_oom(md);
			break;
		}
		md->stat[i] = plan_mem_static(&mm);
	}
	return tensor;
}

AutoScratch *auto_scratch_new(const AutoModel *md)
{
	size_t n = (size_t)md->ns * (size_t)md->m, pp = (size_t)md->pp;
	size_t nst = 3 * n + 1, nk = (size_t)md->ns * OP_COUNT;
	size_t bytes = sizeof(AutoScratch) +
	               (6 * n + 3 * pp + 4 * nst + 9 * n + 6 + 2 * nk) * sizeof(int64_t) +
	               (4 * n + 3 * pp + 1) * sizeof(int);
	AutoScratch *sc = malloc(bytes);
	if (!sc) {
		auto_oom(md);
		return NULL;
	}
	int64_t *q = (int64_t *)(sc + 1);
	for (int k = 0; k < 3; k++, q += n)
		sc->t[k] = q;
	sc->free_at = q;
	sc->cur = q + pp;
	sc->peak = q + 2 * pp;
	sc->st = q + 3 * pp;
	sc->en = sc->st + nst;
	sc->d = sc->en + nst;
	sc->cost = sc->d + 9 * n + 6;
	sc->mem = sc->cost + nk;
	sc->kt = sc->mem + nk;
	sc->kst = sc->kt + 3 * n;
	sc->kept = sc->spill = 0;
	for (int s = 0; s < md->ns; s++) {
		const int64_t *sv = md->save[s];
		PlanStage st = {.save_fb = sv[0], .save_fw = sv[1], .save_bw = sv[2]};
		for (int k = 0; k < OP_COUNT; k++) {
			sc->cost[s * OP_COUNT + k] = plan_op_cost((OpKind)k, md->cost[s]);
			sc->mem[s * OP_COUNT + k] = plan_op_mem((OpKind)k, &st);
		}
	}
	int *iq = (int *)(sc->kst + 2 * nst);
	sc->ix[0] = iq;
	sc->ix[1] = iq + n;
	sc->pos = iq + 2 * n;
	sc->peak_op = sc->pos + pp;
	sc->off = sc->peak_op + pp;
	sc->kix = sc->off + pp + 1;
	sc->off[0] = 0;
	for (int p = 0; p < md->pp; p++) {
		size_t k = 0;
		for (int s = 0; s < md->ns; s++)
			k += md->stage_pp[s] == p ? 3 * (size_t)md->m : 0;
		sc->off[p + 1] = sc->off[p] + (int)k;
	}
	return sc;
}

/* When op a's inputs are all there: its ready time, or -1 when one is missing.  What it
 * needs is the op table's: F the activations of its in-edges' sources, W its own input
 * gradient, B and BW their own forward and the gradients of their out-edges' ends.
 * t: end times of F, B, W per (stage * m + mb), the sweep's or the kept ones. */
__attribute__((always_inline)) static inline int64_t
ready_at(const AutoModel *md, const int64_t *const *t, const SchedAct *a)
{
	int m = md->m, s = a->stage, mb = a->mb;
	unsigned needs = plan_ops[a->kind].needs;
	int64_t r = 0;
	if (needs & PLAN_DEP_IN_ACT) {
		for (int k = md->ioff[s]; k < md->ioff[s + 1]; k++) {
			const AutoEdge *e = &md->edges[md->ein[k]];
			int64_t x = t[AUTO_F][e->src * m + mb];
			if (x < 0)
				return -1;
			if (sat_add(x, e->ns) > r)
				r = sat_add(x, e->ns);
		}
		return r;
	}
	if (needs & PLAN_DEP_GRAD)
		return t[AUTO_B][s * m + mb];
	r = t[AUTO_F][s * m + mb]; // needs PLAN_DEP_ACT and PLAN_DEP_OUT_GRAD
	if (r < 0)
		return -1;
	for (int k = md->ooff[s]; k < md->ooff[s + 1]; k++) {
		const AutoEdge *e = &md->edges[md->eout[k]];
		int64_t x = t[AUTO_B][e->dst * m + mb];
		if (x < 0)
			return -1;
		if (sat_add(x, e->ns) > r)
			r = sat_add(x, e->ns);
	}
	return r;
}

/* Runs op i of rank p from time `at`: its start and end time, the end of what it makes
 * (BW: B and W at once). */
static void run_op(const AutoModel *md, AutoScratch *sc, int p, int i, const SchedAct *a,
                   int64_t at)
{
	int x = a->stage * md->m + a->mb;
	unsigned makes = plan_ops[a->kind].makes;
	int64_t end = sat_add(at, sc->cost[a->stage * OP_COUNT + a->kind]); // saturates (plan.h)
	if (makes & PLAN_DEP_ACT) {
		sc->t[AUTO_F][x] = end;
		sc->ix[0][x] = i;
	}
	if (makes & PLAN_DEP_GRAD) {
		sc->t[AUTO_B][x] = end;
		sc->ix[1][x] = i;
	}
	if (makes & PLAN_DEP_WGRAD)
		sc->t[AUTO_W][x] = end;
	if (i < sc->off[p + 1] - sc->off[p]) {
		sc->st[sc->off[p] + i] = at;
		sc->en[sc->off[p] + i] = end;
	} else {
		sc->spill = 1;
	}
	sc->free_at[p] = end;
}

/* The first of rank p's ops 0..hi whose start is at or after t (a tensor is mostly
 * received an op or two before its consumer: searched backwards). */
static int first_at(const AutoScratch *sc, int p, int hi, int64_t t)
{
	const int64_t *st = sc->st + sc->off[p];
	while (hi > 0 && st[hi - 1] >= t)
		hi--;
	return hi;
}

static void hold(AutoScratch *sc, int from, int to, int64_t bytes)
{
	sc->d[from] += bytes;
	sc->d[to + 1] -= bytes;
}

/* The tensors op i of rank p makes and takes, as spans of sample positions in d: its
 * output from its own sample through its SEND's group (or to its local consumer), each
 * input it receives from the RECV's group to op i. */
static void spans(const AutoModel *md, AutoScratch *sc, int p, int i, const SchedAct *a)
{
	int s = a->stage, mb = a->mb, m = md->m, fwd = plan_ops[a->kind].dir == DIR_ACT;
	const int *out = fwd ? md->eout : md->ein, *in = fwd ? md->ein : md->eout;
	int olo = fwd ? md->ooff[s] : md->ioff[s], ohi = fwd ? md->ooff[s + 1] : md->ioff[s + 1];
	int ilo = fwd ? md->ioff[s] : md->ooff[s], ihi = fwd ? md->ioff[s + 1] : md->ooff[s + 1];
	int end = -1;
	for (int k = olo; k < ohi; k++) {
		const AutoEdge *e = &md->edges[out[k]];
		int c = e->local ? 3 * sc->ix[!fwd][(fwd ? e->dst : e->src) * m + mb] + 1 : 3 * i + 3;
		end = c > end ? c : end;
	}
	if (end >= 0)
		hold(sc, 3 * i + 2, end, fwd ? md->outb[s] : md->inb[s]);
	for (int k = ilo; k < ihi; k++) {
		const AutoEdge *e = &md->edges[in[k]];
		if (e->local)
			continue;
		int from = fwd ? e->src : e->dst;
		int64_t made = sc->t[fwd ? AUTO_F : AUTO_B][from * m + mb];
		int j = first_at(sc, p, i, made);
		/* made while op j - 1 ran (or as it ended): received in the group of its end */
		int during = j > 0 && made <= sc->en[sc->off[p] + j - 1];
		hold(sc, during ? 3 * j : 3 * j + 1, 3 * i + 1, md->outb[e->src]);
	}
}

/* Rank p's peak over its samples (after its order ran); *low gets it without the
 * tensors in flight. */
static int64_t rank_peak(const AutoModel *md, AutoScratch *sc, int p, SchedAct *const *acts,
                         int n, int64_t *low)
{
	int64_t cur = md->stat[p], fly = 0, peak = cur, top = cur;
	sc->peak_op[p] = 0;
	int room = sc->off[p + 1] - sc->off[p], counted = md->outb && n <= room;
	for (int k = 0; counted && k <= 3 * n + 2; k++)
		sc->d[k] = 0;
	for (int i = 0; counted && i < n; i++)
		if (plan_ops[acts[p][i].kind].makes & (PLAN_DEP_ACT | PLAN_DEP_GRAD)) // not W
			spans(md, sc, p, i, &acts[p][i]);
	for (int i = 0; i < n; i++) {
		const SchedAct *a = &acts[p][i];
		const int64_t *sv = md->save[a->stage];
		int64_t *d = sc->d + 3 * i;
		fly += counted ? d[0] : 0;
		int64_t was = peak;
		peak = cur + fly > peak ? cur + fly : peak;
		fly += counted ? d[1] : 0;
		int64_t re = plan_ops[a->kind].needs & PLAN_DEP_ACT ? sv[3] : 0; // rebuilds F's
		peak = cur + fly + re > peak ? cur + fly + re : peak;
		top = cur + re > top ? cur + re : top;
		cur += sc->mem[a->stage * OP_COUNT + a->kind];
		fly += counted ? d[2] : 0;
		peak = cur + fly > peak ? cur + fly : peak;
		top = cur > top ? cur : top;
		if (peak > was)
			sc->peak_op[p] = i;
	}
	*low = top;
	return peak;
}

/* Rank p's action i, with the second half of its F&B pair if it is one (SchedAct.pair:
 * one slot, started when both halves have their inputs, as the lowering starts it):
 * the actions run, or 0 while an input is missing. */
static int run_slot(const AutoModel *md, AutoScratch *sc, const int64_t *const t[3], int p,
                    int i, const SchedAct *a, int n)
{
	int pair = a->pair && i + 1 < n;
	int64_t r = ready_at(md, t, a), r2 = pair ? ready_at(md, t, a + 1) : 0;
	if (r < 0 || r2 < 0)
		return 0;
	r = r2 > r ? r2 : r;
	run_op(md, sc, p, i, a, r > sc->free_at[p] ? r : sc->free_at[p]);
	if (!pair)
		return 1;
	run_op(md, sc, p, i + 1, a + 1, sc->free_at[p]);
	return 2;
}

/* A sweep from the start: no op has run. */
static void start_all(const AutoModel *md, AutoScratch *sc)
{
	sc->spill = 0;
	size_t n = (size_t)md->ns * (size_t)md->m;
	for (int k = 0; k < 3; k++)
		for (size_t i = 0; i < n; i++)
			sc->t[k][i] = -1;
	for (int p = 0; p < md->pp; p++) {
		sc->pos[p] = 0;
		sc->free_at[p] = 0;
	}
}

/* The first of the kept sweep's positions 0..n of the rank whose starts begin at st
 * that starts at or after t (starts never fall along a rank). */
static int kept_prefix(const int64_t *st, int n, int64_t t)
{
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (st[mid] < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A sweep of an order that is the kept one's (auto_eval_keep) but from rank p's
 * position i on: every op that started before the kept op there, T, runs as it ran.
 * Such an op's inputs and its rank's earlier ops started before T too, so none of them
 * is one that moved or waits on one that moved: its times are the kept ones.  On each
 * rank those ops are a prefix of its order (starts never fall along a rank): the kept
 * times are copied back, those of the ops after each prefix unset, and the sweep goes
 * on from there.  0, or -1 when there is no such kept sweep. */
static int start_from(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                      const int *nacts, int p, int i)
{
	size_t n = (size_t)md->ns * (size_t)md->m, nst = (size_t)sc->off[md->pp] + 1;
	if (!sc->kept || i >= nacts[p])
		return -1;
	const int64_t *kst = sc->kst, *ken = sc->kst + nst;
	memcpy(sc->t[0], sc->kt, 3 * n * sizeof *sc->kt);
	memcpy(sc->ix[0], sc->kix, 2 * n * sizeof *sc->kix);
	sc->spill = 0;
	int64_t t = kst[sc->off[p] + i];
	for (int q = 0; q < md->pp; q++) {
		int o = sc->off[q], j = kept_prefix(kst + o, nacts[q], t);
		memcpy(sc->st + o, kst + o, (size_t)j * sizeof *kst);
		memcpy(sc->en + o, ken + o, (size_t)j * sizeof *ken);
		sc->pos[q] = j;
		sc->free_at[q] = j ? ken[o + j - 1] : 0;
		for (; j < nacts[q]; j++) {
			const SchedAct *a = &acts[q][j];
			int x = a->stage * md->m + a->mb;
			unsigned makes = plan_ops[a->kind].makes;
			sc->t[AUTO_F][x] = makes & PLAN_DEP_ACT ? -1 : sc->t[AUTO_F][x];
			sc->t[AUTO_B][x] = makes & PLAN_DEP_GRAD ? -1 : sc->t[AUTO_B][x];
			sc->t[AUTO_W][x] = makes & PLAN_DEP_WGRAD ? -1 : sc->t[AUTO_W][x];
		}
	}
	return 0;
}

/* The timing sweep from where start_all or start_from left it: every op's start and
 * end, each rank's finish in free_at.  Stops as soon as an op ends after bound (what a
 * caller that only wants a faster order needs: such an order's makespan is above bound
 * already).  Returns 0 when every op ran, 1 when it stopped at the bound, -1 when the
 * order is stuck. */
static int sweep(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                 const int *nacts, int64_t bound)
{
	const int64_t *const t[3] = {sc->t[0], sc->t[1], sc->t[2]};
	int left = 0, down = 0;
	for (int p = 0; p < md->pp; p++)
		left += sc->pos[p] < nacts[p];
	while (left > 0) {
		int moved = 0;
		for (int k = 0; k < md->pp; k++) {
			int p = down ? md->pp - 1 - k : k;
			int i = sc->pos[p];
			if (i == nacts[p])
				continue;
			for (int k; i < nacts[p] && (k = run_slot(md, sc, t, p, i, &acts[p][i], nacts[p]));) {
				i += k;
				if (sc->free_at[p] > bound)
					return 1;
			}
			moved |= i > sc->pos[p];
			sc->pos[p] = i;
			left -= i == nacts[p];
		}
		if (!moved)
			return -1;
		down = !down;
	}
	return 0;
}

/* The sweep, from the start or (rank p >= 0) from the kept sweep's prefix. */
static int run_times(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                     const int *nacts, int p, int i, int64_t bound)
{
	if (p < 0 || start_from(md, sc, acts, nacts, p, i))
		start_all(md, sc);
	return sweep(md, sc, acts, nacts, bound);
}

/* The figures of an order whose sweep ran to the end: makespan, finish times, busy
 * time, and each rank's peak (the memory walk, rank_peak). */
static void figures(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                    const int *nacts, AutoFig *out)
{
	for (int p = 0; p < md->pp; p++) {
		int64_t f = sc->free_at[p];
		if (f > out->makespan)
			out->makespan = f;
		out->finish_sum = sat_add(out->finish_sum, f);
		int64_t low;
		sc->peak[p] = rank_peak(md, sc, p, acts, nacts[p], &low);
		out->low = low > out->low ? low : out->low;
		if (sc->peak[p] > out->peak) {
			out->peak = sc->peak[p];
			out->peak_rank = p;
		}
	}
	for (int s = 0; s < md->ns; s++)
		out->busy += md->m * (md->cost[s][0] + md->cost[s][1] + md->cost[s][2]);
}

void auto_eval(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts, const int *nacts,
               AutoFig *out)
{
	auto_eval_from(md, sc, acts, nacts, -1, 0, out);
}

void auto_eval_from(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                    const int *nacts, int p, int i, AutoFig *out)
{
	*out = (AutoFig){0};
	if (run_times(md, sc, acts, nacts, p, i, INT64_MAX) < 0)
		out->makespan = -1;
	else
		figures(md, sc, acts, nacts, out);
}

int auto_eval_beats(const AutoModel *md, AutoScratch *sc, SchedAct *const *acts,
                    const int *nacts, const AutoFig *beat, int p, int i,
                    AutoFig *out)
{
	*out = (AutoFig){.makespan = -1};
	if (beat->makespan < 0 || run_times(md, sc, acts, nacts, p, i, beat->makespan))
		return 0;
	int64_t end = 0, sum = 0;
	for (int q = 0; q < md->pp; q++) {
		end = sc->free_at[q] > end ? sc->free_at[q] : end;
		sum = sat_add(sum, sc->free_at[q]);
	}
	if (end == beat->makespan && sum >= beat->finish_sum)
		return 0; // no faster: the memory walk is not worth making
	*out = (AutoFig){0};
	figures(md, sc, acts, nacts, out);
	return 1;
}

const int64_t *auto_eval_peaks(const AutoScratch *sc)
{
	return sc->peak;
}

const int *auto_eval_peak_ops(const AutoScratch *sc)
{
	return sc->peak_op;
}

void auto_eval_keep(const AutoModel *md, AutoScratch *sc)
{
	size_t n = (size_t)md->ns * (size_t)md->m, nst = (size_t)sc->off[md->pp] + 1;
	memcpy(sc->kt, sc->t[0], 3 * n * sizeof *sc->kt);
	memcpy(sc->kst, sc->st, 2 * nst * sizeof *sc->kst);
	memcpy(sc->kix, sc->ix[0], 2 * n * sizeof *sc->kix);
	sc->kept = !sc->spill;
}

/* The kept order with ops a and b at rank p's positions i and i + 1 swapped (b first):
 * when b's inputs, in the kept times, arrive no earlier than a's kept end, b starts
 * as it did and ends as it did, a only later, and no op starts earlier than it did (the
 * times are maxima of sums, each op's over what it follows; its inputs' times hold
 * unless they wait on a, and then the order is stuck).  So it is no faster. */
int auto_eval_swap_later(const AutoModel *md, const AutoScratch *sc, SchedAct *const *acts,
                         int p, int i)
{
	size_t n = (size_t)md->ns * (size_t)md->m, nst = (size_t)sc->off[md->pp] + 1;
	if (!sc->kept || acts[p][i].pair || acts[p][i + 1].pair || (i > 0 && acts[p][i - 1].pair))
		return 0; // a pair's halves move together: not this rule's case
	const int64_t *const kt[3] = {sc->kt, sc->kt + n, sc->kt + 2 * n};
	int64_t r = ready_at(md, kt, &acts[p][i]);
	return r >= 0 && r >= sc->kst[nst + (size_t)sc->off[p] + (size_t)i];
}
