/* The strict model against an independent reference: a naive simulator written from
 * docs/semantics.md, sharing no code with sim/, run on hundreds of randomly edited plans
 * (fixed seed) of small shapes; the verdict, every rank's finish and the makespan must
 * agree.  Paths are relative to the repository root, where make runs us. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/link.h"
#include "../sim/sim.h"
#include "../plan/line.h"

#include "sim_lib.h"

/* ---- an independent reference for the strict model ---- */

/* A deliberately naive simulator of the strict model, written from docs/semantics.md
 * without sharing code with sim.c: it sweeps every rank and every posted op until
 * nothing changes, pairing the k-th SEND from a to b with the k-th RECV on b from a by
 * counting.  O(ops^2), for small plans only. */
typedef struct {
	int64_t makespan;
	int deadlock;
	int64_t finish[64];
} Ref;

/* The reference's state: per rank its next op (pc), time, posted group [pc, gend) when
 * ingroup, and per op when it was posted, when it ended (-1: not yet) and its index k
 * among the rank's ops of its kind and peer (FIFO pairing by counting). */
typedef struct {
	const Plan *p;
	int w, eager;
	int64_t *pc, *t, *gend;
	int *ingroup;
	int64_t **post, **end, **k;
} RefRun;

static void ref_init(RefRun *x, const Plan *p, int eager)
{
	int w = p->world;
	assert_true(w <= 64);
	*x = (RefRun){.p = p, .w = w, .eager = eager};
	x->pc = calloc(w, sizeof *x->pc);
	x->t = calloc(w, sizeof *x->t);
	x->gend = calloc(w, sizeof *x->gend);
	x->ingroup = calloc(w, sizeof *x->ingroup);
	x->post = calloc(w, sizeof *x->post);
	x->end = calloc(w, sizeof *x->end);
	x->k = calloc(w, sizeof *x->k);
	for (int r = 0; r < w; r++) {
		int64_t n = p->ranks[r].nops;
		x->post[r] = malloc((n + 1) * sizeof **x->post);
		x->end[r] = malloc((n + 1) * sizeof **x->end);
		x->k[r] = malloc((n + 1) * sizeof **x->k);
		int64_t cnt[2 * 64 + 1] = {0}; // sends per peer, receives per peer, all-reduces
		for (int64_t i = 0; i < n; i++) {
			const PlanOp *o = &p->ranks[r].ops[i];
			x->post[r][i] = x->end[r][i] = -1;
			if (o->kind == OP_SEND)
				x->k[r][i] = cnt[o->peer]++;
			else if (o->kind == OP_RECV)
				x->k[r][i] = cnt[64 + o->peer]++;
			else if (o->kind == OP_ALLREDUCE)
				x->k[r][i] = cnt[128]++;
		}
	}
}

/* Rank r: completes its posted group once every op of it ended, runs its compute ops,
 * posts its next group.  1 when anything changed. */
static int ref_advance(RefRun *x, int r)
{
	const Plan *p = x->p;
	const PlanRank *pr = &p->ranks[r];
	int changed = 0;
	if (x->ingroup[r]) {
		int64_t mx = x->t[r];
		for (int64_t i = x->pc[r]; i < x->gend[r]; i++) {
			if (x->end[r][i] < 0)
				return 0;
			if (x->end[r][i] > mx)
				mx = x->end[r][i];
		}
		x->t[r] = mx;
		x->pc[r] = x->gend[r];
		x->ingroup[r] = 0;
		changed = 1;
	}
	while (x->pc[r] < pr->nops && !plan_is_comm(pr->ops[x->pc[r]].kind)) {
		const PlanOp *o = &pr->ops[x->pc[r]];
		const PlanStage *st = &p->stages[o->stage];
		int64_t c = o->kind == OP_F ? st->cost[0] : o->kind == OP_B ? st->cost[1]
		            : o->kind == OP_W ? st->cost[2] : o->kind == OP_BW ? st->cost[1] + st->cost[2] : 0;
		x->t[r] += c;
		x->pc[r]++;
		changed = 1;
	}
	if (x->pc[r] < pr->nops) {
		int64_t j = x->pc[r];
		while (j < pr->nops && plan_is_comm(pr->ops[j].kind) && pr->ops[j].group == pr->ops[x->pc[r]].group)
			x->post[r][j++] = x->t[r];
		x->gend[r] = j;
		x->ingroup[r] = 1;
		changed = 1;
	}
	return changed;
}

/* SEND i of rank a, posted: ends at once when eager; meets the RECV of the same count
 * on its peer once that is posted.  1 when anything changed. */
static int ref_send(RefRun *x, int a, int64_t i)
{
	const Plan *p = x->p;
	const PlanOp *o = &p->ranks[a].ops[i];
	int changed = 0;
	if (x->eager && x->end[a][i] < 0) {
		x->end[a][i] = x->post[a][i];
		changed = 1;
	}
	int b = o->peer;
	for (int64_t j = 0; j < p->ranks[b].nops; j++) {
		const PlanOp *q = &p->ranks[b].ops[j];
		if (q->kind != OP_RECV || q->peer != a || x->k[b][j] != x->k[a][i])
			continue;
		if (x->post[b][j] < 0 || x->end[b][j] >= 0)
			break;
		int64_t tr = plan_p2p_ns(p, a, b, plan_op_bytes(p, o));
		int64_t ps = x->post[a][i], rp = x->post[b][j];
		if (x->eager)
			x->end[b][j] = ps + tr > rp ? ps + tr : rp;
		else
			x->end[a][i] = x->end[b][j] = (ps > rp ? ps : rp) + tr;
		return 1;
	}
	return changed;
}

/* ALLREDUCE i of rank a, posted: once every dp member posted its one of the same count,
 * all end after the last post and the ring time.  1 when they did. */
static int ref_allreduce(RefRun *x, int a, int64_t i)
{
	const Plan *p = x->p;
	int mem[64];
	int n = plan_dim_members(p, a, DIM_DP, mem);
	int64_t mx = 0, idx[64];
	for (int m = 0; m < n; m++) {
		idx[m] = -1;
		for (int64_t j = 0; j < p->ranks[mem[m]].nops; j++)
			if (p->ranks[mem[m]].ops[j].kind == OP_ALLREDUCE && x->k[mem[m]][j] == x->k[a][i])
				idx[m] = j;
		if (idx[m] < 0 || x->post[mem[m]][idx[m]] < 0)
			return 0;
		if (x->post[mem[m]][idx[m]] > mx)
			mx = x->post[mem[m]][idx[m]];
	}
	for (int m = 0; m < n; m++)
		x->end[mem[m]][idx[m]] = mx + plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, a,
		                                                plan_op_bytes(p, &p->ranks[a].ops[i]));
	return 1;
}

static void reference(const Plan *p, int eager, Ref *out)
{
	RefRun x;
	ref_init(&x, p, eager);
	for (int changed = 1; changed;) {
		changed = 0;
		for (int r = 0; r < x.w; r++)
			changed |= ref_advance(&x, r);
		/* Pair what is posted. */
		for (int a = 0; a < x.w; a++)
			for (int64_t i = 0; i < p->ranks[a].nops; i++) {
				int kind = p->ranks[a].ops[i].kind;
				if (x.post[a][i] < 0 || (x.end[a][i] >= 0 && kind != OP_SEND))
					continue;
				if (kind == OP_SEND)
					changed |= ref_send(&x, a, i);
				else if (kind == OP_ALLREDUCE)
					changed |= ref_allreduce(&x, a, i);
			}
	}
	out->makespan = 0;
	out->deadlock = 0;
	for (int r = 0; r < x.w; r++) {
		if (x.pc[r] < p->ranks[r].nops)
			out->deadlock = 1;
		out->finish[r] = x.t[r];
		if (x.t[r] > out->makespan)
			out->makespan = x.t[r];
		free(x.post[r]);
		free(x.end[r]);
		free(x.k[r]);
	}
	free(x.pc);
	free(x.t);
	free(x.gend);
	free(x.ingroup);
	free(x.post);
	free(x.end);
	free(x.k);
}

/* Random local edits of compiled plans (swap neighbouring ops, merge or split groups),
 * kept when they still verify: the simulator and the reference must agree on the
 * verdict, and on the makespan and every rank's finish when the plan runs. */
static void sim__random_plans__agree_with_reference(void **state)
{
	(void)state;
	struct {
		int pp, dp, m;
		const char *sched, *link;
	} shapes[] = {
	    {2, 1, 3, "1f1b", "ideal"},
	    {3, 1, 4, "gpipe", "latency=1us bandwidth=1GB/s"},
	    {4, 1, 5, "1f1b", "latency=3us bandwidth=2GB/s"},
	    {2, 2, 2, "gpipe", "latency=1us bandwidth=4GB/s"},
	    {3, 2, 3, "1f1b", "ideal"},
	};
	uint64_t seed = 7;
	int runs = 0, deadlocks = 0;
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		Plan *p = compile_text(program(shapes[si].pp, shapes[si].dp, shapes[si].m, shapes[si].sched,
		                               "f=2 b=3 w=1", shapes[si].link),
		                       NULL);
		assert_non_null(p);
		for (int iter = 0; iter < 300; iter++) {
			/* Edit a copy of the op lists. */
			PlanOp *saved[64];
			for (int r = 0; r < p->world; r++) {
				saved[r] = malloc(p->ranks[r].nops * sizeof(PlanOp));
				memcpy(saved[r], p->ranks[r].ops, p->ranks[r].nops * sizeof(PlanOp));
			}
			int edits = 1 + (int)(rng(&seed) % 3);
			for (int e = 0; e < edits; e++) {
				int r = (int)(rng(&seed) % p->world);
				PlanRank *pr = &p->ranks[r];
				if (pr->nops < 2)
					continue;
				int64_t i = (int64_t)(rng(&seed) % (pr->nops - 1));
				PlanOp *a = &pr->ops[i], *b = &pr->ops[i + 1];
				switch (rng(&seed) % 3) {
				case 0: { // swap, keeping group numbers in place
					PlanOp tmp = *a;
					int32_t ga = a->group, gb = b->group;
					*a = *b;
					*b = tmp;
					if (plan_is_comm(a->kind) && plan_is_comm(b->kind)) {
						a->group = ga;
						b->group = gb;
					}
					break;
				}
				case 1: // merge b into a's group
					if (plan_is_comm(a->kind) && plan_is_comm(b->kind))
						b->group = a->group;
					break;
				case 2: // split: b gets a group of its own, renumbering the rest
					if (plan_is_comm(a->kind) && plan_is_comm(b->kind) && a->group == b->group)
						for (int64_t j = i + 1; j < pr->nops; j++)
							if (pr->ops[j].group >= 0)
								pr->ops[j].group++;
					break;
				}
			}
			PlanError err;
			if (plan_verify(p, &err) == 0) {
				for (int eager = 0; eager < 2; eager++) {
					Ref ref;
					reference(p, eager, &ref);
					SimResult res;
					SimOptions o = {.model = SIM_STRICT, .eager = eager, .record_ops = 1};
					int rc = sim_run(p, &o, &res);
					assert_int_equal(rc, ref.deadlock ? 1 : 0);
					assert_int_equal(res.verdict, ref.deadlock ? SIM_DEADLOCK : SIM_OK);
					if (!ref.deadlock) {
						assert_int_equal(res.makespan, ref.makespan);
						for (int r = 0; r < p->world; r++)
							assert_int_equal(res.ranks[r].finish, ref.finish[r]);
					} else {
						deadlocks++;
						assert_true(res.ncycle >= 1);
						for (int c = 0; c < res.ncycle; c++) {
							const SimWait *wt = &res.cycle[c], *nx = &res.cycle[(c + 1) % res.ncycle];
							assert_int_equal(wt->on.rank, nx->from.rank);
							assert_int_equal(wt->behind.op, nx->from.op);
						}
					}
					sim_result_free(&res);
					/* The overlap model: never slower than strict when both run. */
					o.model = SIM_OVERLAP;
					rc = sim_run(p, &o, &res);
					assert_true(rc >= 0);
					if (!ref.deadlock && rc == 0)
						assert_true(res.makespan <= ref.makespan);
					sim_result_free(&res);
					runs++;
				}
			}
			for (int r = 0; r < p->world; r++) {
				memcpy(p->ranks[r].ops, saved[r], p->ranks[r].nops * sizeof(PlanOp));
				free(saved[r]);
			}
		}
		plan_free(p);
	}
	print_message("%d verified variants, %d deadlocked\n", runs, deadlocks);
	assert_true(runs > 100);
	assert_true(deadlocks > 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(sim__random_plans__agree_with_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
